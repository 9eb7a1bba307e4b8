#!/usr/bin/env python3
"""Import cycles of a Rust crate: strongly connected sets of its modules.

Usage: scripts/import_cycles.py CRATE_SRC_DIR [--files] [--no-tests] [--no-root]
                                 [--ignore=MOD::ITEM] [--edges]

A module depends on another when its code names a path into it:
`crate::m::...`, `crate::{m, ...}`, `super::...` (resolved against the
file's place), or, in the crate root, `m::...` for a declared module.
Comments (doc links among them) and string literals are left out. A name
the crate root re-exports (`pub use m::{A, B}`) counts as a path into `m`;
the root's own items (`crate::PageCache`) count as the root, `(root)`.
`--ignore=mm::Cache` leaves out every reference to that item (repeatable),
to see what joins the modules besides a shared context type.
`--no-root` leaves the root out (it declares every module and usually
uses most, so any module naming one of its items joins a cycle with it).

By default a module is a top-level module (its submodule files count as
it); `--files` counts each file as its own module. `--no-tests` leaves out
`#[cfg(test)]` items (approximately: from the attribute to the end of the
file when it opens a `mod`). Prints each strongly connected set of more
than one module (largest first) and the count; `--edges` prints the edges
inside each set, so a cycle can be traced.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src):
    """Remove comments, string and char literals, keeping line structure."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not re.match(r"[A-Za-z0-9_]", src[i - 1])):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append("\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\[xu][^']*'", src[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\[xu][^']*'", src[i:])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_tests(code):
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s", code)
    return code[: m.start()] if m else code


def brace_end(code, i):
    """The index of the brace closing the group that opens at code[i] == '{'
    (len(code) when it never closes)."""
    depth, j = 0, i
    while j < len(code):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return len(code)


def brace_group(code, i):
    """The text inside the brace group opening at code[i] == '{'."""
    return code[i + 1 : brace_end(code, i)]


def top_items(group):
    """First identifiers of the top-level items of a use-tree group."""
    items, depth, cur = [], 0, []
    for c in group:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    items.append("".join(cur))
    firsts = []
    for it in items:
        m = re.match(r"\s*(" + IDENT + ")", it)
        if m:
            firsts.append(m.group(1))
    return firsts


def module_files(src):
    """{module path tuple: file} for every .rs file under src."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            mods[tuple(parts)] = os.path.join(root, f)
    return mods


def reexports(root_code, top):
    """Names the crate root re-exports from a module: {name: module}."""
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+(?:crate::)?(" + IDENT + r")::", root_code):
        mod = m.group(1)
        if mod not in top:
            continue
        rest = root_code[m.end() :]
        if rest.startswith("{"):
            for name in top_items(brace_group(rest, 0)):
                names[name] = mod
        else:
            t = re.match(r"(?:" + IDENT + r"::)*(" + IDENT + r")(?:\s+as\s+(" + IDENT + r"))?", rest)
            if t:
                names[t.group(2) or t.group(1)] = mod
    return names


def inline_mods(code):
    """(name, start, end) of every inline `mod name { ... }` block."""
    out = []
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        start = m.end() - 1
        out.append((m.group(1), start, start + 1 + len(brace_group(code, start))))
    return out


def refs(code, here, top, exports, is_root):
    """Top-level names this code refers to (module paths, as tuples)."""
    out = set()

    def target(first, rest_path):
        if first in top:
            return (first,) + rest_path
        if first in exports:
            return (exports[first],)
        return ()  # the root's own item

    for m in re.finditer(r"(?<![A-Za-z0-9_:])crate::", code):
        rest = code[m.end() :]
        if rest.startswith("{"):
            for first in top_items(brace_group(rest, 0)):
                out.add(target(first, ()))
        else:
            p = re.match(r"(" + IDENT + r")((?:::" + IDENT + r")*)", rest)
            if p:
                tail = tuple(x for x in p.group(2).split("::") if x)
                out.add(target(p.group(1), tail))
    inline = inline_mods(code)
    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:super::)+)", code):
        up = m.group(1).count("super::")
        # `super` inside an inline `mod x { ... }` climbs out of it first.
        at = here + tuple(name for name, a, b in inline if a < m.start() < b)
        base = at[: max(len(at) - up, 0)]
        rest = code[m.end() :]
        p = re.match(r"(" + IDENT + r")((?:::" + IDENT + r")*)", rest)
        if p and p.group(1) not in ("super", "self"):
            tail = tuple(x for x in p.group(2).split("::") if x)
            out.add(base + (p.group(1),) + tail)
        else:
            out.add(base)
    if is_root:
        for m in re.finditer(r"(?<![A-Za-z0-9_:])(" + IDENT + r")::", code):
            if m.group(1) in top:
                out.add((m.group(1),))
    return out


def resolve(path, mods, files_mode):
    """The module (as a name) a path lands in."""
    if not files_mode:
        return path[0] if path else "(root)"
    # The longest prefix that is a module file.
    for k in range(len(path), -1, -1):
        if tuple(path[:k]) in mods:
            return "::".join(path[:k]) or "(root)"
    return "(root)"


def tarjan(nodes, edges):
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sccs


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    files_mode, no_tests, show_edges = "--files" in argv, "--no-tests" in argv, "--edges" in argv
    no_root = "--no-root" in argv
    ignored = [tuple(a.split("=", 1)[1].split("::")) for a in argv if a.startswith("--ignore=")]
    src = args[0]
    mods = module_files(src)
    top = {p[0] for p in mods if p}
    root_code = strip(open(mods[()]).read()) if () in mods else ""
    exports = reexports(root_code, top)
    nodes, edges = set(), defaultdict(set)
    for path, f in mods.items():
        code = strip(open(f).read())
        if no_tests:
            code = drop_tests(code)
        me = resolve(path, mods, files_mode)
        if no_root and me == "(root)":
            continue
        nodes.add(me)
        for r in refs(code, path, top, exports, path == ()):
            if any(r[: len(i)] == i for i in ignored):
                continue
            to = resolve(r, mods, files_mode)
            if to != me and not (no_root and to == "(root)"):
                edges[me].add(to)
                nodes.add(to)
    sccs = sorted((sorted(c) for c in tarjan(nodes, edges) if len(c) > 1), key=lambda c: (-len(c), c))
    for c in sccs:
        print(f"{len(c)} modules: {', '.join(c)}")
        if show_edges:
            inside = set(c)
            for v in c:
                print(f"  {v} -> {', '.join(sorted(edges[v] & inside))}")
    print(f"{len(sccs)} cycle(s), {sum(len(c) for c in sccs)} modules in them, of {len(nodes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

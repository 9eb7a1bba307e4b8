#!/usr/bin/env python3
"""The README's code blocks, so that CI runs them as a reader pastes them.

    python3 scripts/readme_blocks.py NAME      # print the block marked <!-- readme:NAME -->
    python3 scripts/readme_blocks.py --list    # the marked blocks' names and languages
    python3 scripts/readme_blocks.py --check   # every sh, rust and python block is accounted for

A block is marked by an HTML comment `<!-- readme:NAME -->` on the line before
its opening fence. `--check` fails on an sh or python block without a marker,
on a marker not followed by a fence, on a name used twice and on a line over
120 columns. Rust blocks need no marker: the engine crate includes README.md as
doctests (`cargo test --doc -p pcache`), so they are compiled and run there.
Standard library only.
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = re.compile(r"^<!-- readme:([A-Za-z0-9_.-]+) -->$")
FENCE = re.compile(r"^```(\S*)")
CHECKED = {"sh", "rust", "python"}
MAX_COLUMNS = 120


def blocks(text):
    """(name or None, language, body, line number of the fence) for every fenced block."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append((marker.group(1) if marker else None, m.group(1), "\n".join(body) + "\n", start + 1))
        i += 1
    return out


def check(text):
    errors = []
    lines = text.splitlines()
    fence_lines = {ln for _, _, _, ln in blocks(text)}
    for n, line in enumerate(lines, 1):
        if MARKER.match(line) and n + 1 not in fence_lines:
            errors.append(f"README.md:{n}: a readme marker not followed by a code fence")
        if len(line) > MAX_COLUMNS:
            errors.append(f"README.md:{n}: {len(line)} columns (at most {MAX_COLUMNS})")
    seen = set()
    for name, lang, _, ln in blocks(text):
        if lang not in CHECKED:
            if lang == "":
                errors.append(f"README.md:{ln}: a code block without a language")
            continue
        if name is None and lang != "rust":
            errors.append(f"README.md:{ln}: a {lang} block without a <!-- readme:NAME --> marker")
        if name is not None:
            if name in seen:
                errors.append(f"README.md:{ln}: the name {name} is used twice")
            seen.add(name)
    return errors


def main(argv):
    if len(argv) != 1:
        sys.exit(__doc__)
    text = README.read_text()
    if argv[0] == "--check":
        errors = check(text)
        for e in errors:
            print(e, file=sys.stderr)
        if errors:
            sys.exit(1)
        n = len([b for b in blocks(text) if b[1] in CHECKED])
        print(f"README.md: {n} sh, rust and python blocks, all accounted for")
    elif argv[0] == "--list":
        for name, lang, _, ln in blocks(text):
            if name:
                print(f"{name}\t{lang}\tline {ln}")
    else:
        found = [b for b in blocks(text) if b[0] == argv[0]]
        if not found:
            sys.exit(f"readme_blocks.py: no block marked <!-- readme:{argv[0]} --> in README.md")
        sys.stdout.write(found[0][2])


if __name__ == "__main__":
    main(sys.argv[1:])

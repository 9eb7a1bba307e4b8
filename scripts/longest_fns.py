#!/usr/bin/env python3
"""The longest functions of a Rust source tree.

Usage: scripts/longest_fns.py SRC_DIR [N]

A function's length is the number of lines from its `fn` to its closing
brace, both counted (comments inside count; a declaration without a body,
in a trait, does not). Prints the N longest (default 10), longest first,
as `LINES path:line name`.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_cycles import brace_end, strip  # noqa: E402

FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(path):
    code = strip(open(path).read())
    for m in FN.finditer(code):
        # The body opens at the first `{` or ends at `;` (no body), outside
        # the signature's parentheses and generics.
        depth, j = 0, m.end()
        while j < len(code):
            c = code[j]
            if c in "(<[":
                depth += 1
            elif c in ")>]" and not (c == ">" and code[j - 1] == "-"):
                depth -= 1
            elif depth <= 0 and c == ";":
                j = -1
                break
            elif depth <= 0 and c == "{":
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        k = brace_end(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, k) + 1
        yield last - first + 1, first, m.group(1)


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    n = int(argv[1]) if len(argv) > 1 else 10
    found = []
    for root, _, files in os.walk(argv[0]):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(root, f)
                found.extend((ln, p, line, name) for ln, line, name in functions(p))
    for ln, p, line, name in sorted(found, reverse=True)[:n]:
        print(f"{ln:5} {p}:{line} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

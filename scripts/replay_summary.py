#!/usr/bin/env python3
"""Mean miss % of every variant over all cells of `pcache replay --json` files (their results and the
baselines merged with --baseline), and each variant's worst cell against workingset-on.

    python3 scripts/replay_summary.py lirs.json [more.json ...] [--as old.json:LABEL]

`--as FILE:LABEL` adds FILE's `pcache` column under LABEL (e.g. a replay by an earlier build). Standard
library only.
"""
import argparse
import json
from collections import defaultdict


def load(cells, path, rename=None):
    with open(path) as f:
        data = json.load(f)
    for trace in data if isinstance(data, list) else [data]:
        for r in trace["results"] + (trace.get("baselines") or []):
            variant = r["variant"].replace("libcachesim-", "lcs-")
            if rename:
                if variant != "pcache":
                    continue
                variant = rename
            cells[(trace["trace"], r["cache_pages"])][variant] = r["miss_ratio"] * 100


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--as", dest="extra", action="append", default=[], metavar="FILE:LABEL")
    args = ap.parse_args()
    cells = defaultdict(dict)
    for path in args.files:
        load(cells, path)
    for spec in args.extra:
        path, label = spec.rsplit(":", 1)
        load(cells, path, label)
    variants = sorted({v for c in cells.values() for v in c})
    rows = []
    for v in variants:
        have = [c for c in cells.values() if v in c]
        if len(have) != len(cells):
            continue  # not in every cell: a mean would not compare
        mean = sum(c[v] for c in have) / len(have)
        worst = max(((c[v] - c["workingset-on"], k) for k, c in cells.items() if "workingset-on" in c),
                    default=(0.0, None))
        rows.append((mean, v, worst))
    for mean, v, (worst, cell) in sorted(rows):
        at = f" at {cell[0]}@{cell[1]}" if cell else ""
        print(f"{v:24s} mean {mean:7.3f}  worst vs workingset-on {worst:+6.2f}{at}")


if __name__ == "__main__":
    main()

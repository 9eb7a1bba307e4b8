#!/usr/bin/env python3
"""Synthetic block traces, in the LIRS text format `pcache replay` reads,
for judging replacement policies on patterns other than the LIRS traces
(traces/lirs/) they were developed on.

Deterministic (fixed seed), standard library only:

    python3 scripts/synth_traces.py OUTDIR

writes OUTDIR/{zipf09,zipf_scan,shifting,uniform,loop_zipf,lru_friendly}.trace.gz:

- zipf09: Zipf(0.9) over 20000 pages, 200000 accesses (frequency-friendly).
- zipf_scan: Zipf(0.8) over 10000 pages, interleaved with 20 use-once scans
  of 4000 new pages each (scan resistance).
- shifting: 8 phases of Zipf(1.0) over 4000 pages, each phase's pages
  shifted by 3000 (a working set that moves; recency matters).
- uniform: uniform over 5000 pages (no policy can do better than size/total).
- loop_zipf: half the accesses loop over 4000 pages, half Zipf(1.0) over 3000.
- lru_friendly: LRU stack distances drawn from an exponential of mean 300
  over 3000 pages (recency-only; LRU is near optimal).
"""

import bisect
import gzip
import os
import random
import sys


def zipf_sampler(rng, n, a):
    weights = [1 / (i + 1) ** a for i in range(n)]
    cum, s = [], 0.0
    for w in weights:
        s += w
        cum.append(s)
    perm = list(range(n))
    rng.shuffle(perm)
    return lambda: perm[min(bisect.bisect_left(cum, rng.random() * s), n - 1)]


def save(outdir, name, accesses):
    with gzip.open(os.path.join(outdir, f"{name}.trace.gz"), "wt") as f:
        f.write("\n".join(map(str, accesses)) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(7)

    z = zipf_sampler(rng, 20000, 0.9)
    save(outdir, "zipf09", [z() for _ in range(200000)])

    z = zipf_sampler(rng, 10000, 0.8)
    acc, nxt = [], 100000
    for _ in range(20):
        acc += [z() for _ in range(8000)]
        acc += list(range(nxt, nxt + 4000))
        nxt += 4000
    save(outdir, "zipf_scan", acc)

    acc = []
    for phase in range(8):
        z = zipf_sampler(rng, 4000, 1.0)
        acc += [phase * 3000 + z() for _ in range(25000)]
    save(outdir, "shifting", acc)

    save(outdir, "uniform", [rng.randrange(5000) for _ in range(100000)])

    z = zipf_sampler(rng, 3000, 1.0)
    acc, i = [], 0
    for _ in range(150000):
        if rng.random() < 0.5:
            acc.append(100000 + i % 4000)
            i += 1
        else:
            acc.append(z())
    save(outdir, "loop_zipf", acc)

    stack, acc = list(range(3000)), []
    for _ in range(100000):
        d = min(int(rng.expovariate(1 / 300)), len(stack) - 1)
        k = stack.pop(d)
        stack.insert(0, k)
        acc.append(k)
    save(outdir, "lru_friendly", acc)


if __name__ == "__main__":
    main()

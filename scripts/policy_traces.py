#!/usr/bin/env python3
"""Traces of the workload shapes the ARC, LIRS, 2Q and S3-FIFO papers
describe, in disjoint sets for judging pcache's policy on traces it was not
tuned on:

    python3 scripts/policy_traces.py tune OUTDIR      # iterate on these
    python3 scripts/policy_traces.py heldout OUTDIR   # evaluate only at the end
    python3 scripts/policy_traces.py heldout2 OUTDIR  # a third, fresh set

Both sets have the same seven shapes, but the held-out set draws them with
another seed AND other parameters (sizes, skews, proportions, phase
lengths), so a policy tuned on one meets shapes it knows with numbers it
does not. Deterministic, standard library only, LIRS text format (one page
number per line, gzipped), which `pcache replay` and
`scripts/libcachesim_replay.py` read.

- shift_zipf (ARC's shifting hot sets): phases of Zipf(a) over a hot set;
  at each phase a fraction of the hot set is replaced by new pages.
- loops (LIRS's loops longer than the cache): several loops of different
  lengths, interleaved in bursts, plus a small Zipf-accessed hot set.
- scan_reuse (2Q's scans mixed with reuse): a Zipf working set interrupted
  by sequential scans, some of new pages (use-once), some re-scanning an
  older table.
- ohw (S3-FIFO's one-hit-wonder heavy streams): Zipf requests mixed with
  requests for pages never seen again.
- web_churn (web/CDN-like): Zipf popularity over objects that are born over
  time and age out (popular now, forgotten later).
- recency (LRU-friendly): LRU stack distances drawn from a heavy-tailed
  distribution; LRU is near optimal.
- mixed (Caffeine's "mixed"): alternating phases of a recency-skewed and a
  looping workload.

`heldout2` (fixed before any design work on the policy, seed 777) draws the
seven shapes with a third set of parameters and adds three shapes that
neither earlier set has:

- loop_shift: a loop whose length changes mid-way (short, then longer
  than most caches, then medium), with a small Zipf hot set beside it.
- correlated (2Q's correlated references): each reference to a page comes
  as a burst of 2-4 accesses within a few dozen requests; the bursts'
  pages follow a Zipf popularity, and a share of them are never seen
  again, so a second access says nothing about long-term reuse.
- two_rate: two workloads interleaved at different rates, a Zipf hot set
  at three requests in four and an LRU-stack workload over a larger set
  at one in four.
"""

import bisect
import gzip
import os
import random
import sys

PARAMS = {
    "tune": dict(
        seed=11,
        shift=dict(hot=3000, a=1.0, phases=8, per_phase=20000, replace=0.5),
        loops=dict(lens=[1500, 4000, 700], burst=300, hot=500, hot_frac=0.3, n=150000),
        scan=dict(ws=6000, a=0.9, n=160000, every=12000, scan_len=5000, rescan_frac=0.4),
        ohw=dict(pop=8000, a=0.9, n=150000, ohw_frac=0.35),
        web=dict(live=6000, a=0.8, n=180000, birth_every=4),
        recency=dict(pages=4000, alpha=1.3, scale=40, n=120000),
        mixed=dict(rec_pages=2500, rec_mean=250, loop=3000, phase=20000, phases=6),
    ),
    "heldout": dict(
        seed=4242,
        shift=dict(hot=5000, a=0.8, phases=6, per_phase=30000, replace=0.3),
        loops=dict(lens=[2500, 900, 6000], burst=500, hot=800, hot_frac=0.4, n=180000),
        scan=dict(ws=9000, a=1.0, n=180000, every=20000, scan_len=9000, rescan_frac=0.6),
        ohw=dict(pop=12000, a=0.8, n=180000, ohw_frac=0.5),
        web=dict(live=9000, a=1.0, n=200000, birth_every=2),
        recency=dict(pages=6000, alpha=1.1, scale=60, n=150000),
        mixed=dict(rec_pages=4000, rec_mean=400, loop=5000, phase=30000, phases=5),
    ),
    "heldout2": dict(
        seed=777,
        shift=dict(hot=2000, a=1.2, phases=10, per_phase=15000, replace=0.7),
        loops=dict(lens=[3500, 1200, 8000, 500], burst=200, hot=1500, hot_frac=0.25, n=200000),
        scan=dict(ws=4000, a=0.7, n=150000, every=8000, scan_len=3000, rescan_frac=0.25),
        ohw=dict(pop=6000, a=1.1, n=160000, ohw_frac=0.2),
        web=dict(live=4000, a=0.9, n=160000, birth_every=6),
        recency=dict(pages=9000, alpha=1.5, scale=120, n=140000),
        mixed=dict(rec_pages=1800, rec_mean=150, loop=2500, phase=15000, phases=8),
        loop_shift=dict(lens=[1500, 6000, 3200], per_phase=50000, hot=600, hot_frac=0.2),
        correlated=dict(pop=15000, a=0.85, n=160000, burst=(2, 4), gap=40, once_frac=0.3),
        two_rate=dict(hot=2500, a=1.0, rec_pages=12000, rec_mean=2000, fast=0.75, n=180000),
    ),
}


def zipf_cum(n, a):
    cum, s = [], 0.0
    for i in range(n):
        s += 1 / (i + 1) ** a
        cum.append(s)
    return cum


def zipf_rank(rng, cum):
    """A rank 0..n-1, rank 0 most popular."""
    return min(bisect.bisect_left(cum, rng.random() * cum[-1]), len(cum) - 1)


def save(outdir, name, accesses):
    with gzip.open(os.path.join(outdir, f"{name}.trace.gz"), "wt") as f:
        f.write("\n".join(map(str, accesses)) + "\n")


def shift_zipf(rng, p):
    hot = list(range(p["hot"]))
    nxt = p["hot"]
    rng.shuffle(hot)
    cum = zipf_cum(p["hot"], p["a"])
    acc = []
    for _ in range(p["phases"]):
        acc += [hot[zipf_rank(rng, cum)] for _ in range(p["per_phase"])]
        # Replace a random fraction of the hot set, at random ranks.
        for i in rng.sample(range(p["hot"]), int(p["hot"] * p["replace"])):
            hot[i] = nxt
            nxt += 1
    return acc


def loops(rng, p):
    base, starts = 1_000_000, []
    for n in p["lens"]:
        starts.append(base)
        base += n
    pos = [0] * len(p["lens"])
    cum = zipf_cum(p["hot"], 1.0)
    acc = []
    while len(acc) < p["n"]:
        if rng.random() < p["hot_frac"]:
            acc += [zipf_rank(rng, cum) for _ in range(p["burst"])]
            continue
        k = rng.randrange(len(p["lens"]))
        for _ in range(p["burst"]):
            acc.append(starts[k] + pos[k])
            pos[k] = (pos[k] + 1) % p["lens"][k]
    return acc[: p["n"]]


def scan_reuse(rng, p):
    perm = list(range(p["ws"]))
    rng.shuffle(perm)
    cum = zipf_cum(p["ws"], p["a"])
    acc, fresh, tables = [], 10_000_000, []
    while len(acc) < p["n"]:
        acc += [perm[zipf_rank(rng, cum)] for _ in range(p["every"])]
        if tables and rng.random() < p["rescan_frac"]:
            start = rng.choice(tables)
        else:
            start = fresh
            tables.append(start)
            fresh += p["scan_len"]
        acc += list(range(start, start + p["scan_len"]))
    return acc[: p["n"]]


def ohw(rng, p):
    perm = list(range(p["pop"]))
    rng.shuffle(perm)
    cum = zipf_cum(p["pop"], p["a"])
    acc, once = [], 50_000_000
    for _ in range(p["n"]):
        if rng.random() < p["ohw_frac"]:
            acc.append(once)
            once += 1
        else:
            acc.append(perm[zipf_rank(rng, cum)])
    return acc


def web_churn(rng, p):
    # live[r] is the object at popularity rank r; a newborn object enters
    # at a random rank near the top and pushes everyone below it down; the
    # least popular dies.
    live = list(range(p["live"]))
    nxt = p["live"]
    cum = zipf_cum(p["live"], p["a"])
    acc = []
    for i in range(p["n"]):
        if i % p["birth_every"] == 0:
            live.insert(min(int(rng.expovariate(1 / 50)), p["live"] - 1), nxt)
            live.pop()
            nxt += 1
        acc.append(live[zipf_rank(rng, cum)])
    return acc


def recency(rng, p):
    stack, acc = list(range(p["pages"])), []
    for _ in range(p["n"]):
        d = min(int(p["scale"] * (rng.paretovariate(p["alpha"]) - 1)), len(stack) - 1)
        k = stack.pop(d)
        stack.insert(0, k)
        acc.append(k)
    return acc


def mixed(rng, p):
    stack = list(range(p["rec_pages"]))
    loop_base, li, acc = 5_000_000, 0, []
    for ph in range(p["phases"]):
        for _ in range(p["phase"]):
            if ph % 2 == 0:
                d = min(int(rng.expovariate(1 / p["rec_mean"])), len(stack) - 1)
                k = stack.pop(d)
                stack.insert(0, k)
                acc.append(k)
            else:
                acc.append(loop_base + li % p["loop"])
                li += 1
    return acc


def loop_shift(rng, p):
    cum = zipf_cum(p["hot"], 1.0)
    acc, base = [], 7_000_000
    for n in p["lens"]:
        i = 0
        for _ in range(p["per_phase"]):
            if rng.random() < p["hot_frac"]:
                acc.append(zipf_rank(rng, cum))
            else:
                acc.append(base + i % n)
                i += 1
    return acc


def correlated(rng, p):
    perm = list(range(p["pop"]))
    rng.shuffle(perm)
    cum = zipf_cum(p["pop"], p["a"])
    # pending[t] = pages whose correlated re-reference falls at request t.
    pending, acc, once, t = {}, [], 80_000_000, 0
    while len(acc) < p["n"]:
        due = pending.pop(t, [])
        if due:
            acc += due
        else:
            if rng.random() < p["once_frac"]:
                k = once
                once += 1
            else:
                k = perm[zipf_rank(rng, cum)]
            acc.append(k)
            for _ in range(rng.randint(*p["burst"]) - 1):
                pending.setdefault(t + rng.randint(1, p["gap"]), []).append(k)
        t += 1
    return acc[: p["n"]]


def two_rate(rng, p):
    perm = list(range(p["hot"]))
    rng.shuffle(perm)
    cum = zipf_cum(p["hot"], p["a"])
    stack = list(range(9_000_000, 9_000_000 + p["rec_pages"]))
    acc = []
    for _ in range(p["n"]):
        if rng.random() < p["fast"]:
            acc.append(perm[zipf_rank(rng, cum)])
        else:
            d = min(int(rng.expovariate(1 / p["rec_mean"])), len(stack) - 1)
            k = stack.pop(d)
            stack.insert(0, k)
            acc.append(k)
    return acc


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in PARAMS:
        sys.exit(__doc__)
    which, outdir = sys.argv[1], sys.argv[2]
    p = PARAMS[which]
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(p["seed"])
    save(outdir, f"{which}_shift_zipf", shift_zipf(rng, p["shift"]))
    save(outdir, f"{which}_loops", loops(rng, p["loops"]))
    save(outdir, f"{which}_scan_reuse", scan_reuse(rng, p["scan"]))
    save(outdir, f"{which}_ohw", ohw(rng, p["ohw"]))
    save(outdir, f"{which}_web_churn", web_churn(rng, p["web"]))
    save(outdir, f"{which}_recency", recency(rng, p["recency"]))
    save(outdir, f"{which}_mixed", mixed(rng, p["mixed"]))
    if which == "heldout2":
        save(outdir, f"{which}_loop_shift", loop_shift(rng, p["loop_shift"]))
        save(outdir, f"{which}_correlated", correlated(rng, p["correlated"]))
        save(outdir, f"{which}_two_rate", two_rate(rng, p["two_rate"]))


if __name__ == "__main__":
    main()

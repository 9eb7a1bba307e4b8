"""What a Python eviction policy costs per hook call.

Replays LIRS traces (single-threaded, at 10% and 40% of their distinct
pages, `usable_equals_nominal`) with the built-in `fifo` plug-in and with a
Python FIFO that makes the same choices (the same misses, checked), and
divides the extra time by the hook calls the Python policy received
(counted in a separate run). Prints the medians of `--rounds` rounds.

    python crates/python/benches/policy_cost.py [--rounds R] [TRACE...]
"""

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import pcache

REPO = Path(__file__).resolve().parents[3]


class Fifo:
    name = "py-fifo"

    def __init__(self):
        self.q = collections.OrderedDict()

    def folio_added(self, folio):
        self.q[folio.pfn] = folio

    def folio_accessed(self, folio):
        pass

    def folio_removed(self, folio, why):
        self.q.pop(folio.pfn, None)

    def evict_candidates(self, nr):
        return [self.q.popitem(last=False)[1] for _ in range(min(nr, len(self.q)))]

    def folio_putback(self, folio, why):
        self.q[folio.pfn] = folio


CALLS = collections.Counter()


def counted(attr):
    def hook(self, *args):
        CALLS[attr] += 1
        return getattr(Fifo, attr)(self, *args)

    return hook


# The same FIFO, counting its hook calls in the methods (the adapter looks
# the hooks up once).
CountingFifo = type(
    "CountingFifo",
    (Fifo,),
    {"name": "py-fifo-counted"}
    | {h: counted(h) for h in ["folio_added", "folio_accessed", "folio_removed", "evict_candidates", "folio_putback"]},
)


def timed(fn):
    t = time.perf_counter_ns()
    rec = fn()
    return time.perf_counter_ns() - t, rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", type=float, nargs="+", default=[10, 40])
    a = ap.parse_args()
    traces = a.traces or [REPO / "traces" / "lirs" / f"{n}.trace.gz" for n in ["cpp", "ps", "multi2", "sprite"]]
    print("trace          accesses   hook calls  builtin ms  python ms  +ns/access  +ns/hook")
    per_hook = []
    for path in traces:
        t = pcache.read_trace(path)
        kw = dict(sizes=a.sizes, usable_equals_nominal=True)
        CALLS.clear()
        rec_c = pcache.replay(t, policy=CountingFifo, **kw)
        calls = sum(CALLS.values())
        builtin, python = [], []
        for _ in range(a.rounds):
            tb, rec_b = timed(lambda: pcache.replay(t, variants=["fifo"], **kw))
            tp, rec_p = timed(lambda: pcache.replay(t, policy=Fifo, **kw))
            builtin.append(tb)
            python.append(tp)
        misses = [[r["misses"] for r in rec["results"]] for rec in (rec_b, rec_p, rec_c)]
        if not misses[0] == misses[1] == misses[2]:
            sys.exit(f"{t.name}: the Python FIFO missed {misses[1]}, the built-in {misses[0]}")
        b, p = statistics.median(builtin), statistics.median(python)
        accesses = len(t) * len(rec_b["sizes"])
        per_hook.append((p - b) / calls)
        print(
            f"{t.name:<12} {accesses:>10} {calls:>12} {b / 1e6:>11.1f} {p / 1e6:>10.1f}"
            f" {(p - b) / accesses:>11.0f} {(p - b) / calls:>9.0f}"
        )
    print("hook calls by hook (last trace):", dict(CALLS))
    print(f"median extra per hook call: {statistics.median(per_hook):.0f} ns")


if __name__ == "__main__":
    main()

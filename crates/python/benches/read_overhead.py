"""Python `File.read` of a 4 KiB cached page against Rust `read_at`.

Both read the same page of the same memory file in the same cache and
process: Rust's in a loop in Rust (`File._time_read_at`), Python's in a
Python loop of `f.read(4096, off)` (which releases the GIL around the
read and allocates the bytes object). Prints the medians of `--rounds`
rounds in ns per call.

    python crates/python/benches/read_overhead.py [--iterations N] [--rounds R]
"""

import argparse
import statistics
import time

import pcache

PAGE = 4096


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    cache = pcache.PageCache(memory="16M")
    f = cache.open_memory("hit")
    f.write(b"x" * (64 * PAGE), 0)
    off = 5 * PAGE
    f.read(PAGE, off)
    rust, py = [], []
    for _ in range(a.rounds):
        rust.append(f._time_read_at(off, a.iterations))
        read = f.read
        t = time.perf_counter_ns()
        for _ in range(a.iterations):
            read(PAGE, off)
        py.append((time.perf_counter_ns() - t) / a.iterations)
    r, p = statistics.median(rust), statistics.median(py)
    print(f"rust read_at 4 KiB hit: {r:.0f} ns/call (median of {a.rounds} x {a.iterations})")
    print(f"python File.read 4 KiB hit: {p:.0f} ns/call")
    print(f"overhead: {p - r:.0f} ns/call ({p / r:.2f}x)")


if __name__ == "__main__":
    main()

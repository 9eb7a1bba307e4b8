#!/usr/bin/env python3
"""Checks of libcachesim_replay.py: `python3 scripts/test_libcachesim_replay.py`.

The reference LRU and the trace readers need only Python; the comparisons
with libCacheSim are skipped where it is not installed.
"""

import gzip
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libcachesim_replay as lr  # noqa: E402

try:
    import libcachesim
except ImportError:
    libcachesim = None

CS = os.path.join(os.path.dirname(__file__), "..", "traces", "lirs", "cs.trace.gz")


def scrambled(n, distinct, seed=7):
    """A deterministic trace with reuse at many distances."""
    x, out = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        # Skewed: low ids far more often.
        out.append(int((x >> 33) % distinct * ((x >> 20) % 1000) / 1000))
    return out


class Reading(unittest.TestCase):
    def test_lirs_gzip_crlf_markers(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.trace.gz")
            with gzip.open(p, "wb") as f:
                f.write(b"7\r\n*\r\n8\r\n\r\n7\n")
            self.assertEqual(lr.read_trace(p), [7, 8, 7])
            self.assertEqual(lr.trace_name(p), "x")

    def test_csv_sizes_span_pages(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.csv")
            with open(p, "w") as f:
                f.write("timestamp,obj_id,obj_size\n1,10,4096\n2,20,10000\n3,10,0\n4,30,\n")
            self.assertEqual(lr.read_trace(p), [10, 20, 21, 22, 10, 30])

    def test_oracle_general_renumbered(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "w.oracleGeneral.bin")
            rec = struct.Struct("<IQIq")
            with open(p, "wb") as f:
                f.write(rec.pack(1, (1 << 64) - 8, 10, 1) + rec.pack(2, 1 << 50, 10, -1) + rec.pack(3, (1 << 64) - 8, 10, -1))
            self.assertEqual(lr.read_trace(p), [0, 1, 0])

    def test_sizes_round_half_away_from_zero(self):
        # 10% of 1225 is 122.5: pcache rounds to 123 (Python's round: 122).
        self.assertEqual(lr.cache_sizes(1225), [123, 245, 490, 980])
        self.assertEqual(lr.cache_sizes(100), [16, 20, 40, 80])
        self.assertEqual(lr.cache_sizes(100, pages=[5, 500]), [16, 500])


class ReferenceLru(unittest.TestCase):
    def test_by_hand(self):
        # 2 pages: 1 2 1 3 (evicts 2) 2 (evicts 1) 1 (evicts 3): 5 misses.
        self.assertEqual(lr.reference_lru_misses([1, 2, 1, 3, 2, 1], 2), 5)
        self.assertEqual(lr.reference_lru_misses([1, 2, 1, 3, 2, 1], 3), 3)


@unittest.skipIf(libcachesim is None, "libcachesim is not installed (pip install libcachesim)")
class AgainstLibCacheSim(unittest.TestCase):
    def test_lru_agrees_with_reference(self):
        trace = scrambled(20000, 500)
        for size in (16, 50, 200, 450):
            self.assertEqual(
                lr.libcachesim_misses(libcachesim, "LRU", trace, size),
                lr.reference_lru_misses(trace, size),
                size,
            )

    def test_lru_agrees_on_cs(self):
        trace = lr.read_trace(CS)
        self.assertEqual((len(trace), len(set(trace))), (6781, 1409))
        for size in lr.cache_sizes(len(set(trace))):
            self.assertEqual(
                lr.libcachesim_misses(libcachesim, "LRU", trace, size), lr.reference_lru_misses(trace, size)
            )

    def test_belady_is_at_most_every_policy(self):
        trace = scrambled(5000, 300)
        nxt = lr.next_access_times(trace)
        for size in (16, 100):
            opt = lr.libcachesim_misses(libcachesim, "Belady", trace, size, nxt)
            for p in lr.POLICIES:
                if p != "Belady":
                    self.assertLessEqual(opt, lr.libcachesim_misses(libcachesim, p, trace, size), (p, size))

    def test_tiny_wtinylfu_caches(self):
        # A 1% window of 16 pages would be empty and cache nothing.
        trace = [i % 8 for i in range(400)]
        self.assertEqual(lr.libcachesim_misses(libcachesim, "W-TinyLFU", trace, 16), 8)


if __name__ == "__main__":
    unittest.main()

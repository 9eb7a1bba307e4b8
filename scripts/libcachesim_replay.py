#!/usr/bin/env python3
"""libCacheSim's policies on the traces `pcache replay` reads, as baselines.

Reads the same trace formats as pcache replay (LIRS text, libCacheSim csv,
libCacheSim oracleGeneral; gzip detected by its magic), turns them into the
same page accesses (a request of SIZE bytes at id B touches pages
B .. B + ceil(SIZE / 4096), each one access; sparse ids are renumbered
densely in order of first touch, by the same rule), and runs each access as
a one-unit object through libCacheSim caches of the same sizes (10/20/40/80%
of the distinct pages, rounded half away from zero, at least 16; or --pages
N). The output is JSON in pcache replay's schema:

    {"trace": str, "pages": int, "requests": int, "sizes": [int],
     "results": [{"variant": "libcachesim-LRU", "cache_pages": int,
                  "requests": int, "misses": int, "miss_ratio": float}]}

one object per trace (an array for several), for `pcache replay
--baseline FILE.json`. The sizes are the nominal cache pages; pcache's
variants can use a little less (their `usable` column).

Needs `pip install libcachesim` (tested with 0.3.5), except for
`--policies reference-LRU`, a pure-Python LRU used to check the trace
reading and libCacheSim's LRU (`--check-lru` compares the two).

Policy notes: Belady is given each access's next access time (INT64_MAX when
there is none, as libCacheSim requires); W-TinyLFU keeps libCacheSim's 1%
window but at least one page, since a window of zero pages caches nothing.
"""

import argparse
import collections
import gzip
import hashlib
import json
import math
import struct
import sys

PAGE = 4096
MIN_CACHE_PAGES = 16
DEFAULT_PERCENTS = [10.0, 20.0, 40.0, 80.0]
ORACLE_RECORD = struct.Struct("<IQIq")
U64 = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1

# Variant name -> libcachesim class name.
POLICIES = {
    "FIFO": "FIFO",
    "LRU": "LRU",
    "CLOCK": "Clock",
    "ARC": "ARC",
    "LIRS": "LIRS",
    "S3-FIFO": "S3FIFO",
    "SIEVE": "Sieve",
    "W-TinyLFU": "WTinyLFU",
    "Belady": "Belady",
}
REFERENCE_LRU = "reference-LRU"


class TraceError(Exception):
    pass


def open_maybe_gz(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def guess_format(path):
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".csv"):
        return "csv"
    if "oraclegeneral" in name:
        return "oracleGeneral"
    return "lirs"


def trace_name(path):
    name = path.rsplit("/", 1)[-1]
    for suffix in (".gz", ".trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def push_request(out, obj_id, size):
    n = max(1, -(-size // PAGE)) if size is not None else 1
    for k in range(n):
        out.append((obj_id + k) & U64)


def parse_lirs(f, ctx):
    out = []
    for i, raw in enumerate(f, 1):
        s = raw.decode("ascii", "replace").strip()
        if not s or s == "*":
            continue
        if not s.isdigit():
            raise TraceError(f"{ctx}:{i}: {s!r} is not a block number")
        out.append(int(s))
    return out


def hash_id(s):
    # Only identity matters: pcache hashes differently, but both are
    # injective in practice and sparse, so both renumber densely.
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


def parse_csv(f, ctx):
    lines = (raw.decode("utf-8", "replace").rstrip("\r\n") for raw in f)
    header = None
    lineno = 0
    for line in lines:
        lineno += 1
        if line.strip():
            header = line
            break
    if header is None:
        raise TraceError(f"{ctx}: empty csv")
    cols = [c.strip().lstrip("#").strip().lower() for c in header.split(",")]

    def find(pred):
        return next((i for i, c in enumerate(cols) if pred(c)), None)

    id_col = find(lambda c: c in ("obj_id", "key", "block"))
    if id_col is None:
        id_col = find(lambda c: "obj_id" in c or "key" in c or "block" in c)
    if id_col is None:
        id_col = find(lambda c: "lbn" in c or "lba" in c or "addr" in c or c == "id")
    if id_col is None:
        raise TraceError(f"{ctx}: no obj_id/key/block column in header {header!r}")
    size_col = find(lambda c: c in ("size", "obj_size"))
    if size_col is None:
        size_col = find(lambda c: "size" in c)
    out = []
    for line in lines:
        lineno += 1
        if not line.strip():
            continue
        fields = [x.strip() for x in line.split(",")]
        if id_col >= len(fields):
            raise TraceError(f"{ctx}:{lineno}: no column {id_col + 1}")
        s = fields[id_col]
        obj_id = int(s) if s.isdigit() and int(s) <= U64 else hash_id(s)
        size = None
        if size_col is not None and size_col < len(fields) and fields[size_col]:
            if not fields[size_col].isdigit():
                raise TraceError(f"{ctx}:{lineno}: size {fields[size_col]!r} is not a number")
            size = int(fields[size_col])
        push_request(out, obj_id, size)
    return out


def parse_oracle(f, ctx):
    out = []
    while True:
        rec = f.read(ORACLE_RECORD.size)
        if not rec:
            break
        if len(rec) < ORACLE_RECORD.size:
            raise TraceError(f"{ctx}: truncated record ({len(rec)} of {ORACLE_RECORD.size} bytes)")
        _, obj_id, size, _ = ORACLE_RECORD.unpack(rec)
        push_request(out, obj_id, size)
    return out


def densify(accesses):
    """Renumber densely in order of first touch when the indices are
    sparse, by pcache's rule (largest above 16 x distinct + 1024)."""
    distinct = len(set(accesses))
    if not accesses or max(accesses) <= distinct * 16 + 1024:
        return accesses, False
    ids = {}
    return [ids.setdefault(a, len(ids)) for a in accesses], True


def read_trace(path, fmt=None):
    fmt = fmt or guess_format(path)
    with open_maybe_gz(path) as f:
        if fmt == "lirs":
            accesses = parse_lirs(f, path)
        elif fmt == "csv":
            accesses = parse_csv(f, path)
        elif fmt == "oracleGeneral":
            accesses = parse_oracle(f, path)
        else:
            raise TraceError(f"unknown trace format {fmt!r}; known: lirs, csv, oracleGeneral")
    accesses, _ = densify(accesses)
    return accesses


def cache_sizes(distinct, percents=None, pages=None):
    if pages is not None:
        v = list(pages)
    else:
        # Rust's f64::round: half away from zero (Python's round is not).
        v = [int(math.floor(distinct * p / 100.0 + 0.5)) for p in (percents or DEFAULT_PERCENTS)]
    return sorted({max(x, MIN_CACHE_PAGES) for x in v})


def next_access_times(accesses):
    nxt = [INT64_MAX] * len(accesses)
    last = {}
    for i in range(len(accesses) - 1, -1, -1):
        a = accesses[i]
        nxt[i] = last.get(a, INT64_MAX)
        last[a] = i
    return nxt


def reference_lru_misses(accesses, cache_pages):
    """A plain LRU of `cache_pages` pages: the misses."""
    lru = collections.OrderedDict()
    misses = 0
    for a in accesses:
        if a in lru:
            lru.move_to_end(a)
            continue
        misses += 1
        if len(lru) >= cache_pages:
            lru.popitem(last=False)
        lru[a] = None
    return misses


def libcachesim_misses(lcs, policy, accesses, cache_pages, nxt=None):
    cls = getattr(lcs, POLICIES[policy])
    hashpower = max(10, min(24, (len(set(accesses)) * 2).bit_length()))
    if policy == "W-TinyLFU":
        cache = cls(cache_pages, hashpower=hashpower, window_size=max(0.01, 1.5 / cache_pages))
    else:
        cache = cls(cache_pages, hashpower=hashpower)
    req = lcs.Request()
    req.obj_size = 1
    misses = 0
    get = cache.get
    if nxt is None:
        for i, a in enumerate(accesses):
            req.obj_id = a
            req.clock_time = i
            if not get(req):
                misses += 1
    else:
        for i, a in enumerate(accesses):
            req.obj_id = a
            req.clock_time = i
            req.next_access_vtime = nxt[i]
            if not get(req):
                misses += 1
    return misses


def replay(path, fmt, sizes_pct, pages, policies, lcs, check_lru):
    accesses = read_trace(path, fmt)
    if not accesses:
        raise TraceError(f"{path}: the trace is empty")
    distinct = len(set(accesses))
    sizes = cache_sizes(distinct, sizes_pct, pages)
    nxt = next_access_times(accesses) if "Belady" in policies else None
    results = []
    mismatches = []
    for size in sizes:
        for policy in policies:
            if policy == REFERENCE_LRU:
                misses = reference_lru_misses(accesses, size)
            else:
                misses = libcachesim_misses(lcs, policy, accesses, size, nxt if policy == "Belady" else None)
                if policy == "LRU" and check_lru:
                    ref = reference_lru_misses(accesses, size)
                    if ref != misses:
                        mismatches.append(f"{trace_name(path)} at {size} pages: libcachesim LRU {misses}, reference {ref}")
            variant = policy if policy == REFERENCE_LRU else f"libcachesim-{policy}"
            results.append(
                {
                    "variant": variant,
                    "cache_pages": size,
                    "requests": len(accesses),
                    "misses": misses,
                    "miss_ratio": misses / len(accesses),
                }
            )
    doc = {"trace": trace_name(path), "pages": distinct, "requests": len(accesses), "sizes": sizes, "results": results}
    return doc, mismatches


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--format", choices=["lirs", "csv", "oracleGeneral"], help="default: from the file name")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--pages", type=int, metavar="N", help="one cache size in pages")
    size.add_argument(
        "--sizes",
        default="10,20,40,80",
        metavar="PCTS",
        help="cache sizes in percent of distinct pages (default 10,20,40,80)",
    )
    ap.add_argument(
        "--policies",
        default=",".join(POLICIES),
        metavar="NAMES",
        help=f"comma-separated, of {', '.join(POLICIES)}, {REFERENCE_LRU} (default: all but the reference)",
    )
    ap.add_argument("--json", metavar="FILE", help="write here ('-' or absent: stdout)")
    ap.add_argument("--check-lru", action="store_true", help="check libCacheSim's LRU against the reference LRU")
    args = ap.parse_args(argv)

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES and p != REFERENCE_LRU:
            ap.error(f"unknown policy {p!r}; known: {', '.join(POLICIES)}, {REFERENCE_LRU}")
    if args.check_lru and "LRU" not in policies:
        policies.append("LRU")
    if args.pages is not None and args.pages <= 0:
        ap.error("--pages must be above 0")
    try:
        percents = [float(x) for x in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: not numbers")
    if any(not (math.isfinite(p) and p > 0) for p in percents):
        ap.error(f"--sizes {args.sizes!r}: percentages must be above 0")
    lcs = None
    if any(p in POLICIES for p in policies):
        try:
            import libcachesim as lcs
        except ImportError:
            sys.exit("libcachesim_replay: libcachesim is not installed (pip install libcachesim)")

    docs, mismatches = [], []
    for path in args.traces:
        try:
            doc, bad = replay(path, args.format, percents, [args.pages] if args.pages else None, policies, lcs, args.check_lru)
        except (OSError, TraceError) as e:
            sys.exit(f"libcachesim_replay: {e}")
        docs.append(doc)
        mismatches += bad
        print(
            f"{doc['trace']}: {doc['requests']} requests, {doc['pages']} distinct pages, sizes {doc['sizes']}",
            file=sys.stderr,
        )
    out = json.dumps(docs[0] if len(docs) == 1 else docs, indent=2) + "\n"
    if args.json and args.json != "-":
        with open(args.json, "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)
    if args.check_lru:
        for m in mismatches:
            print(f"LRU mismatch: {m}", file=sys.stderr)
        print(f"LRU check: {'failed' if mismatches else 'libcachesim LRU = reference LRU'}", file=sys.stderr)
        return 1 if mismatches else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sweep over the LIRS traces (replay's default variants and sizes)
locally with 1 and 2 workers and on a local Ray cluster: wall time and
speed-up over one worker, and the per-cell costs the scaling estimate in
ARCHITECTURE.md uses.

    python crates/python/benches/sweep_bench.py traces/lirs/*.trace.gz [--ray-cpus 2]
"""

import argparse
import statistics
import time

from pcache import sweep as sw


def costs(doc):
    cells = list(doc["cells"].values())
    per_req = [c["seconds"] / c["run"]["requests"] * 1e9 for c in cells]
    parse = {}
    for c in cells:
        parse[c["cell"]["trace"]] = (c["parse_seconds"], c["meta"]["requests"])
    parse_per_req = [s / n * 1e9 for s, n in parse.values()]
    biggest = max(cells, key=lambda c: c["run"]["requests"])
    return statistics.median(per_req), statistics.median(parse_per_req), biggest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    a = ap.parse_args()
    rows = []
    base = None
    ref = None
    modes = [("local, 1 worker", dict(workers=1)), ("local, 2 workers", dict(workers=2))]
    if not a.no_ray:
        modes.append((f"Ray local cluster ({a.ray_cpus} CPUs), per cell", dict(ray="local")))
        modes.append((f"Ray local cluster ({a.ray_cpus} CPUs), per trace", dict(ray="local", chunk="trace")))
    for name, kw in modes:
        if kw.get("ray") and not __import__("ray").is_initialized():
            import ray

            t = time.perf_counter()
            ray.init(num_cpus=a.ray_cpus, include_dashboard=False, log_to_driver=False)
            print(f"ray.init: {time.perf_counter() - t:.1f} s (not counted)")
        t = time.perf_counter()
        doc = sw.sweep(a.traces, quiet=True, **kw)
        wall = time.perf_counter() - t
        assert not doc["failed"], doc["failed"]
        if ref is None:
            ref = doc["traces"]
        assert doc["traces"] == ref, f"{name}: records differ"
        base = base or wall
        rows.append((name, wall, base / wall, doc))
    print(f"{len(rows[0][3]['cells'])} cells, {len(a.traces)} traces")
    print("| mode | wall (s) | speed-up over 1 worker |")
    print("|---|---|---|")
    for name, wall, sp, _ in rows:
        print(f"| {name} | {wall:.2f} | {sp:.2f}x |")
    per_req, parse_req, big = costs(rows[0][3])
    print(f"per cell (1 worker): median {per_req:.0f} ns per request replayed; trace parse {parse_req:.0f} ns per request")
    print(
        f"largest cell: {big['meta']['trace']} {big['run']['variant']} {big['run']['cache_pages']} pages, "
        f"{big['run']['requests']} requests in {big['seconds']:.3f} s"
    )


if __name__ == "__main__":
    main()

"""``pcache sweep``: replay sweeps (traces x cache sizes x variants), on
this machine's cores or on a Ray cluster.

Every cell (one trace, one variant or libCacheSim policy, one cache size)
is an independent replay through a fresh cache, so a sweep is
embarrassingly parallel. Cells are grouped into tasks: one task per cell
(``--chunk cell``, the default) or per trace (``--chunk trace``: the trace
is parsed once for all its cells). A task runs ``pcache.replay`` on its
cells, the workloads crate's replay, so a cell's record is exactly the
run ``pcache replay --json`` reports at that size and variant.

Local mode runs tasks on a pool of processes (``--workers``, default:
the CPU count). With
``--ray ADDRESS`` (``auto``: the running cluster; ``local``: start one
here) each task is a Ray task with ``--retries`` retries on failures and
crashed workers; traces are read where they are (a path every node sees,
or a URL: ``file://``, or ``s3://`` and the like through fsspec) or, with
``--ship``, read once by the driver and passed through Ray's object store. Local tasks are retried the same number of times.

Results from either mode are the same records, merged per trace into the
schema of ``pcache replay --json`` (results ordered as replay orders them:
by size, then variant), with libCacheSim's policies (when the
``libcachesim`` package is installed and ``--policies`` asks for them) as
baselines. A cell that still fails after its retries is listed under
``failed``, never dropped. The JSON is rewritten as cells complete, so an
interrupted sweep resumes with ``--resume`` (done cells are kept, failed
and missing ones run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pcache

MIN_CACHE_PAGES = 16
DEFAULT_PERCENTS = [10.0, 20.0, 40.0, 80.0]
SCHEMA = "pcache-sweep/1"

# libCacheSim policy name -> the libcachesim class (as scripts/libcachesim_replay.py).
LIBCACHESIM_POLICIES = {
    "LRU": "LRU",
    "ARC": "ARC",
    "LIRS": "LIRS",
    "S3-FIFO": "S3FIFO",
    "SIEVE": "Sieve",
    "W-TinyLFU": "WTinyLFU",
}


def libcachesim_available() -> bool:
    try:
        import libcachesim  # noqa: F401
    except ImportError:
        return False
    return True


def is_url(path: str) -> bool:
    return "://" in path


def read_bytes(path: str) -> bytes:
    """A trace file's bytes: a local path, ``file://`` URL, or any URL fsspec
    opens (``s3://``, ``gs://``, ``https://``; needs ``pip install fsspec``
    and the scheme's package)."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    try:
        import fsspec
    except ImportError as e:
        raise OSError(f"{path}: reading a URL needs fsspec (pip install fsspec)") from e
    with fsspec.open(path, "rb") as f:
        return f.read()


def trace_name(path: str) -> str:
    """The name replay gives a trace file (without ``.gz`` and ``.trace``)."""
    n = os.path.basename(path)
    n = n[:-3] if n.endswith(".gz") else n
    return n[:-6] if n.endswith(".trace") else n


@dataclass(frozen=True)
class Cell:
    """One replay: a trace, a variant (``kind`` pcache) or a libCacheSim
    policy (``kind`` libcachesim), and a cache size (``pct`` percent of the
    distinct pages, or ``pages``)."""

    trace: str
    fmt: Optional[str]
    kind: str
    variant: str
    size_kind: str
    size: float

    @property
    def key(self) -> str:
        size = repr(float(self.size)) if self.size_kind == "pct" else str(int(self.size))
        return f"{self.trace}|{self.kind}|{self.variant}|{self.size_kind}:{size}"

    def to_json(self) -> dict:
        return dict(self.__dict__, key=self.key)


def cache_pages(distinct: int, cell: Cell) -> int:
    """Replay's size rule (workloads' ``Sizes::pages``): round half away
    from zero, at least MIN_CACHE_PAGES."""
    if cell.size_kind == "pages":
        return max(int(cell.size), MIN_CACHE_PAGES)
    return max(int(math.floor(distinct * cell.size / 100.0 + 0.5)), MIN_CACHE_PAGES)


def _libcachesim_misses(policy: str, accesses: list, size: int) -> int:
    import libcachesim as lcs

    cls = getattr(lcs, LIBCACHESIM_POLICIES[policy])
    hashpower = max(10, min(24, (len(set(accesses)) * 2).bit_length()))
    if policy == "W-TinyLFU":
        cache = cls(size, hashpower=hashpower, window_size=max(0.01, 1.5 / size))
    else:
        cache = cls(size, hashpower=hashpower)
    req = lcs.Request()
    req.obj_size = 1
    misses = 0
    for i, a in enumerate(accesses):
        req.obj_id = a
        req.clock_time = i
        if not cache.get(req):
            misses += 1
    return misses


TRACE_META = (
    "trace",
    "format",
    "records",
    "requests",
    "pages",
    "renumbered",
    "compulsory_misses",
    "compulsory_miss_ratio",
)


def run_cells(cells: list, data: Optional[bytes] = None, kill_once: Optional[str] = None) -> list:
    """A task: replay `cells` (all of one trace), parsing the trace once.
    Returns one record per cell: its key, the trace's facts, the run, and
    its wall time. Raises on failure (the caller retries the task).

    `data`: the trace file's bytes, shipped through Ray's object store,
    instead of reading the path. `kill_once`: a test hook: the first task
    to find this marker file missing creates it and kills its own process
    (a worker dying mid-sweep)."""
    if kill_once is not None and not os.path.exists(kill_once):
        with open(kill_once, "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    cells = [c if isinstance(c, Cell) else Cell(**{k: v for k, v in c.items() if k != "key"}) for c in cells]
    first = cells[0]
    t0 = time.perf_counter()
    if data is None and is_url(first.trace):
        data = read_bytes(first.trace)
    if data is not None:
        fmt = first.fmt or pcache.guess_format(first.trace)
        trace = pcache.parse_trace(data, fmt, trace_name(first.trace))
    else:
        trace = pcache.read_trace(first.trace, first.fmt)
    parse_s = time.perf_counter() - t0
    out = []
    for c in cells:
        t1 = time.perf_counter()
        if c.kind == "pcache":
            kw = {"sizes": [c.size]} if c.size_kind == "pct" else {"pages": [int(c.size)]}
            rec = pcache.replay(trace, variants=[c.variant], **kw)
            meta = {k: rec[k] for k in TRACE_META}
            (run,) = rec["results"]
        else:
            accesses = trace.pages()
            distinct = trace.distinct_pages()
            size = cache_pages(distinct, c)
            misses = _libcachesim_misses(c.variant, accesses, size)
            requests = len(accesses)
            meta = {"trace": trace.name, "pages": distinct, "requests": requests}
            run = {
                "variant": f"libcachesim-{c.variant}",
                "cache_pages": size,
                "requests": requests,
                "misses": misses,
                "miss_ratio": misses / requests if requests else 0.0,
            }
        out.append(
            {
                "key": c.key,
                "cell": c.to_json(),
                "meta": meta,
                "run": run,
                "seconds": time.perf_counter() - t1,
                "parse_seconds": parse_s,
                "pid": os.getpid(),
            }
        )
    return out


@dataclass
class Plan:
    traces: list
    fmt: Optional[str] = None
    percents: Optional[list] = None
    pages: Optional[list] = None
    variants: Optional[list] = None
    policies: list = field(default_factory=list)

    def cells(self) -> list:
        sizes = (
            [("pages", float(p)) for p in self.pages]
            if self.pages
            else [("pct", float(p)) for p in (self.percents or DEFAULT_PERCENTS)]
        )
        variants = self.variants or pcache.default_variants()
        out = []
        for t in self.traces:
            for sk, s in sizes:
                for v in variants:
                    out.append(Cell(t, self.fmt, "pcache", v, sk, s))
                for p in self.policies:
                    out.append(Cell(t, self.fmt, "libcachesim", p, sk, s))
        return out


def merge(plan: Plan, done: dict) -> list:
    """The done cells as one replay record per trace, in the schema and the
    order of ``pcache replay --json`` (results by size, then variant; each
    (variant, cache pages) once; libCacheSim's runs as baselines)."""
    variants = plan.variants or pcache.default_variants()
    out = []
    for t in plan.traces:
        recs = [r for r in done.values() if r["cell"]["trace"] == t]
        pc = [r for r in recs if r["cell"]["kind"] == "pcache"]
        if not recs:
            continue
        meta = dict(pc[0]["meta"]) if pc else dict(recs[0]["meta"])
        runs: dict = {}
        for r in pc:
            runs.setdefault((r["run"]["cache_pages"], r["run"]["variant"]), r["run"])
        order = {v: i for i, v in enumerate(variants)}
        results = [runs[k] for k in sorted(runs, key=lambda k: (k[0], order.get(k[1], len(order)), k[1]))]
        base: dict = {}
        for r in recs:
            if r["cell"]["kind"] == "libcachesim":
                base.setdefault((r["run"]["cache_pages"], r["run"]["variant"]), r["run"])
        porder = {p: i for i, p in enumerate(plan.policies)}
        baselines = [
            base[k] for k in sorted(base, key=lambda k: (k[0], porder.get(k[1].removeprefix("libcachesim-"), 0), k[1]))
        ]
        sizes = sorted({k[0] for k in runs} | {k[0] for k in base})
        present = [v for v in variants if any(k[1] == v for k in runs)]
        rec = {k: meta.get(k) for k in TRACE_META}
        rec.update(
            variants=present,
            sizes=sizes,
            results=results,
            threads=1,
            kernel=None,
            kernel_skipped=None,
            baselines=baselines,
        )
        out.append(rec)
    return out


class Progress:
    """One line per completed cell, or one rewritten line on a terminal."""

    def __init__(self, total: int, quiet: bool = False, stream=None):
        self.total, self.done, self.failed = total, 0, 0
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.monotonic()

    def update(self, recs: list, failed: int = 0) -> None:
        self.done += len(recs)
        self.failed += failed
        if self.quiet:
            return
        el = time.monotonic() - self.t0
        last = recs[-1] if recs else None
        what = f"{last['meta']['trace']} {last['run']['variant']} {last['run']['cache_pages']}p" if last else ""
        line = f"[{self.done + self.failed}/{self.total}] {el:7.1f}s  failed {self.failed}  {what}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
            if self.done + self.failed >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _load(path: Optional[str]) -> dict:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a sweep's JSON (schema {doc.get('schema')!r})")
    return doc


def _save(path: Optional[str], doc: dict) -> None:
    if not path:
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _tasks(cells: list, chunk: str) -> list:
    if chunk == "cell":
        return [[c] for c in cells]
    by: dict = {}
    for c in cells:
        by.setdefault(c.trace, []).append(c)
    return list(by.values())


def _start_method() -> str:
    """fork when this process has one thread (fast, and a script without an
    ``if __name__ == "__main__"`` guard still works), else spawn: forking a
    process whose other threads (a PageCache's kswapd, Ray's) may hold
    locks is unsafe."""
    try:
        single = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        single = False
    return "fork" if single else "spawn"


def _local(
    tasks: list, workers: int, retries: int, on_done: Callable, on_fail: Callable, kill_once: Optional[str] = None
) -> None:
    """Tasks on `workers` processes. Processes, not threads: cells in one
    process contend (the engine's hazard scans and membarrier are
    process-wide), and a worker that dies takes only its own tasks. A dead
    worker breaks the pool: its tasks count a try and go to a new one."""
    ctx = multiprocessing.get_context(_start_method())
    queue = [(t, 0) for t in tasks]
    while queue:
        with ProcessPoolExecutor(max_workers=min(workers, len(queue)), mp_context=ctx) as pool:
            futs: dict = {}
            pending, queue = queue, []
            broken = False

            def submit(task, tries):
                # A worker may die while tasks are still being handed out:
                # the pool then refuses them, and they wait for the next
                # pool without counting a try (none of them ran).
                nonlocal broken
                if not broken:
                    try:
                        futs[pool.submit(run_cells, task, None, kill_once)] = (task, tries)
                        return
                    except BrokenProcessPool:
                        broken = True
                queue.append((task, tries))

            for t, n in pending:
                submit(t, n)
            while futs:
                ready, _ = wait(futs, return_when=FIRST_COMPLETED)
                for fut in ready:
                    task, tries = futs.pop(fut)
                    try:
                        recs = fut.result()
                    except BrokenProcessPool as e:
                        broken, err = True, f"worker died: {e}"
                    except Exception as e:  # a cell's failure: retried, then reported
                        err = f"{type(e).__name__}: {e}"
                    else:
                        on_done(recs)
                        continue
                    if tries < retries:
                        submit(task, tries + 1)
                    else:
                        on_fail(task, err, tries + 1)


def _ray(
    tasks: list,
    address: str,
    retries: int,
    ship: bool,
    on_done: Callable,
    on_fail: Callable,
    kill_once: Optional[str] = None,
) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, log_to_driver=False)
    remote = ray.remote(max_retries=retries, retry_exceptions=True)(run_cells)
    shipped: dict = {}
    pending = {}
    for t in tasks:
        data = None
        if ship:
            path = t[0].trace
            if path not in shipped:
                shipped[path] = ray.put(read_bytes(path))
            data = shipped[path]
        pending[remote.remote([c.to_json() for c in t], data, kill_once)] = t
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            task = pending.pop(ref)
            try:
                recs = ray.get(ref)
            except Exception as e:  # retried by Ray already: report it
                msg = str(e).strip().splitlines()
                on_fail(task, f"{type(e).__name__}: {msg[-1] if msg else ''}", retries + 1)
            else:
                on_done(recs)


def sweep(
    traces: list,
    *,
    sizes: Optional[list] = None,
    pages: Optional[list] = None,
    variants: Optional[list] = None,
    policies: Optional[list] = None,
    fmt: Optional[str] = None,
    workers: Optional[int] = None,
    ray: Optional[str] = None,
    chunk: str = "cell",
    ship: bool = False,
    retries: int = 2,
    json_path: Optional[str] = None,
    resume: bool = False,
    plot_dir: Optional[str] = None,
    markdown: Optional[str] = None,
    quiet: bool = False,
    _kill_once: Optional[str] = None,
) -> dict:
    """Run a sweep and return its document: ``traces`` (one replay record
    per trace, as ``pcache replay --json``), ``failed`` (cells that failed
    after their retries, with the error), ``cells`` (every done cell's
    record with its wall time) and ``sweep`` (what ran, where, how long).

    `sizes`: percentages of each trace's distinct pages (default 10, 20,
    40, 80); `pages`: exact cache sizes instead. `variants`: pcache presets
    (default: replay's defaults). `policies`: libCacheSim policies
    (``["all"]`` for every one; skipped, saying so, when libcachesim is not
    installed). `ray`: None for local threads, else a Ray address (``auto``,
    ``local``, ``ray://...``). `resume`: keep the done cells of the JSON at
    `json_path`.
    """
    if sizes and pages:
        raise ValueError("give sizes (percent) or pages, not both")
    if sizes and any(not (math.isfinite(p) and p > 0) for p in sizes):
        raise ValueError(f"sizes {sizes}: percentages must be above 0")
    if pages and any(p <= 0 for p in pages):
        raise ValueError(f"pages {pages}: must be above 0")
    if chunk not in ("cell", "trace"):
        raise ValueError(f"chunk {chunk!r}: cell or trace")
    known = {p["name"] for p in pcache.presets()}
    for v in variants or []:
        if v not in known:
            raise ValueError(f"unknown variant {v!r}; known: {', '.join(sorted(known))}")
    notes = []
    pol = list(policies or [])
    if pol == ["all"]:
        pol = list(LIBCACHESIM_POLICIES)
    for p in pol:
        if p not in LIBCACHESIM_POLICIES:
            raise ValueError(f"unknown libCacheSim policy {p!r}; known: {', '.join(LIBCACHESIM_POLICIES)}")
    if pol and not libcachesim_available():
        notes.append(f"libcachesim is not installed: policies {', '.join(pol)} skipped (pip install libcachesim)")
        pol = []
    traces = [os.fspath(t) for t in traces]
    for t in traces:
        if not is_url(t) and not os.path.exists(t):
            raise FileNotFoundError(2, "no such trace", t)
    plan = Plan(traces, fmt, sizes, pages, variants, pol)
    cells = plan.cells()
    prev = _load(json_path) if resume else {}
    done: dict = {k: r for k, r in prev.get("cells", {}).items() if k in {c.key for c in cells}}
    failed: dict = {}
    todo = [c for c in cells if c.key not in done]
    workers = workers or os.cpu_count() or 1
    lock = threading.Lock()
    progress = Progress(len(todo), quiet)
    t0 = time.monotonic()
    last_save = [0.0]

    def document(final: bool) -> dict:
        return {
            "schema": SCHEMA,
            "sweep": {
                "traces": traces,
                "sizes": sizes,
                "pages": pages,
                "variants": plan.variants or pcache.default_variants(),
                "policies": pol,
                "mode": f"ray:{ray}" if ray else f"local:{workers}",
                "chunk": chunk,
                "cells": len(cells),
                "resumed": len(cells) - len(todo),
                "wall_seconds": time.monotonic() - t0,
                "complete": final and not failed and len(done) == len(cells),
                "notes": notes,
            },
            "traces": merge(plan, done),
            "failed": [failed[k] for k in sorted(failed)],
            "cells": done,
        }

    def save(force: bool = False) -> None:
        now = time.monotonic()
        if force or now - last_save[0] >= 1.0:
            _save(json_path, document(force))
            last_save[0] = now

    def on_done(recs: list) -> None:
        with lock:
            for r in recs:
                done[r["key"]] = r
                failed.pop(r["key"], None)
            progress.update(recs)
            save()

    def on_fail(task: list, err: str, tries: int) -> None:
        with lock:
            for c in task:
                failed[c.key] = {"cell": c.to_json(), "error": err, "tries": tries}
            progress.update([], failed=len(task))
            save()

    tasks = _tasks(todo, chunk)
    if tasks:
        if ray:
            _ray(tasks, ray, retries, ship, on_done, on_fail, _kill_once)
        else:
            _local(tasks, workers, retries, on_done, on_fail, _kill_once)
    doc = document(True)
    _save(json_path, doc)
    if plot_dir:
        for rec in doc["traces"]:
            pcache.plot(rec, plot_dir)
    if markdown and doc["traces"]:
        with open(markdown, "w") as f:
            f.write(pcache.markdown_table(doc["traces"]))
    return doc


def _floats(s: str) -> list:
    return [float(x) for x in s.split(",") if x.strip()]


def _pages(s: str) -> list:
    """Cache sizes in pages, each at least MIN_CACHE_PAGES, as `pcache
    replay --pages` requires: a smaller one is refused, not raised."""
    try:
        pages = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of page counts: {s!r}")
    small = [p for p in pages if p < MIN_CACHE_PAGES]
    if small or not pages:
        raise argparse.ArgumentTypeError(f"cache sizes must be at least {MIN_CACHE_PAGES} pages (got {s!r})")
    return pages


def _names(s: str) -> list:
    return [x.strip() for x in s.split(",") if x.strip()]


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="pcache sweep",
        description="Replay sweeps: traces x cache sizes x variants, on local cores or on Ray.",
        epilog="Writes one JSON (--json) with every trace's replay record, the failed cells and each "
        "cell's record; prints the replay tables. Exit status 1 if a cell failed.",
    )
    ap.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (lirs, csv, oracleGeneral; gzip detected)")
    ap.add_argument("--format", dest="fmt", help="trace format [default: from the file name]")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--sizes", type=_floats, metavar="PCTS", help="cache sizes in %% of distinct pages [10,20,40,80]")
    g.add_argument("--pages", type=_pages, metavar="N,...", help="cache sizes in pages")
    ap.add_argument("--variants", type=_names, metavar="NAMES", help="pcache presets [replay's defaults]")
    ap.add_argument(
        "--policies",
        type=_names,
        metavar="NAMES",
        help=f"libCacheSim policies, 'all' or of {', '.join(LIBCACHESIM_POLICIES)} (needs pip install libcachesim)",
    )
    ap.add_argument("--workers", type=int, metavar="N", help="local worker processes [CPU count]")
    ap.add_argument(
        "--ray", metavar="ADDRESS", help="run cells as Ray tasks: auto (running cluster), local, or ray://HOST:PORT"
    )
    ap.add_argument("--chunk", choices=["cell", "trace"], default="cell", help="one task per cell or per trace")
    ap.add_argument("--ship", action="store_true", help="with --ray: send traces through the object store")
    ap.add_argument("--retries", type=int, default=2, metavar="N", help="retries of a failed task [2]")
    ap.add_argument("--json", dest="json_path", metavar="FILE", help="write the sweep here (rewritten as cells end)")
    ap.add_argument("--resume", action="store_true", help="keep the done cells of --json FILE, run the rest")
    ap.add_argument("--plot", dest="plot_dir", metavar="DIR", help="a miss-ratio curve per trace (SVG)")
    ap.add_argument("--markdown", metavar="FILE", help="one Markdown table of every trace and size")
    ap.add_argument("--quiet", action="store_true", help="no progress")
    a = ap.parse_args(argv)
    if a.resume and not a.json_path:
        ap.error("--resume needs --json FILE")
    if a.workers is not None and a.workers < 1:
        ap.error("--workers must be at least 1")
    if a.retries < 0:
        ap.error("--retries must be at least 0")
    try:
        doc = sweep(
            a.traces,
            sizes=a.sizes,
            pages=a.pages,
            variants=a.variants,
            policies=a.policies,
            fmt=a.fmt,
            workers=a.workers,
            ray=a.ray,
            chunk=a.chunk,
            ship=a.ship,
            retries=a.retries,
            json_path=a.json_path,
            resume=a.resume,
            plot_dir=a.plot_dir,
            markdown=a.markdown,
            quiet=a.quiet,
        )
    except (OSError, ValueError) as e:
        print(f"pcache sweep: {e}", file=sys.stderr)
        return 2
    for rec in doc["traces"]:
        print(pcache.render(rec))
    s = doc["sweep"]
    print(f"{s['cells']} cells ({s['resumed']} resumed), {s['mode']}, {s['wall_seconds']:.1f} s")
    for n in s["notes"]:
        print(f"note: {n}")
    for f in doc["failed"]:
        print(f"FAILED {f['cell']['key']} after {f['tries']} tries: {f['error']}", file=sys.stderr)
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

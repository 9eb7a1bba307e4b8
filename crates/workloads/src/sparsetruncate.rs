//! `pcache bench sparsetruncate`: seed 001, Mel Gorman's "only drain
//! per-cpu pagevecs once per pagevec usage" (4.14-rc4 batchshadow-v1r1
//! against onedrain-v1r1).
//!
//! The seed ran mmtests' sparsetruncate (tiny): sparse files are created
//! (`ftruncate`, no data) and read with a 16-byte `pread` at every page, so
//! that hole pages fill the page cache; then each file is unlinked and every
//! unlink timed. `__pagevec_release` called `lru_add_drain` on every release
//! of the truncation's pagevec; with the patch, once per pagevec lifecycle.
//! It reported the truncate times' distribution: Max 254 -> 208 µs, Stddev
//! 12.74 -> 9.62, Amean 145.12 -> 144.30.
//!
//! Here, per run and backend, every variant (see [`PRESETS`]) gets a fresh
//! cache of `mem_bytes`; `rounds` times, every cache is filled to
//! `fill_ratio` (60%) with sparse files of `file_bytes` (4 MiB, 1024 pages,
//! as in Jan Kara's truncation benchmark of the same series; smaller for
//! small caches), set with `set_len` and read 16 bytes at every page, the
//! handles closed; then the files are unlinked one by one, each unlink
//! timed, the variants alternating file by file so that drifts of the
//! machine fall on both alike. Backends:
//!
//! * **tmpfs**: memory-only files ([`PageCache::open_memory`]);
//! * **file**: host files in the temporary directory (the seed's case; the
//!   host's unlink is inside the timing, as it was in the seed).
//!
//! Metrics: every truncate's wall time in µs (pooled over rounds and runs:
//! `truncate_us` has one sample per truncate) and its thread CPU time
//! (`truncate_cpu_us`, which leaves out the time the thread was preempted:
//! on a shared machine that is most of the wall-time tail), and per run the
//! drains, the pagevec releases and the lru_lock acquisitions per truncate,
//! from the vmstat deltas of the truncation phases. The report prints the
//! seed's rows (Min, quartiles, Max-90/95/99%, Max, Amean, Stddev, Coeff,
//! Best99%..Best25%Amean) for both times, and the cost of one drain implied
//! by the difference of the CPU-time Best50%Amean.
//!
//! With `opts.kernel`, the same read-then-unlink of sparse files runs
//! through `std::fs` on host files in a memory cgroup of `mem_bytes`
//! ([`kernel_workload`]), shown as the "kernel" column of the file backend.

use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pcache::{Config, Item, OpenOptions, PageCache, PagevecDrain, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{variant_tunables, ExpOpts};
use crate::experiment::{Experiment, MainJob, Outcome};
use crate::kernel;
use crate::plot;
use crate::progress::Progress;
use crate::render::{fmt_count, fmt_size, render_compare, render_table, vmstat_rows};
use crate::report::{self, sum_vmstat, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult};
use crate::stats::{pct_better, quantile_sorted, Better, Summary};
use crate::sys::{kernel_release, load_note, loadavg, tempdir_in};
use crate::variants::{self, Preset};
use crate::{Error, Result};

pub const EXPERIMENT: &str = "sparsetruncate";
pub const SEED: &str = "001";
pub const SEED_CLAIM: &str = "onedrain against 4.14-rc4 batchshadow-v1r1, sparsetruncate (tiny): truncate time Max \
                              254 -> 208 us (+18.11%), Stddev 12.74 -> 9.62 (+24.49%), Amean 145.12 -> 144.30 \
                              (+0.56%); lru_add_drain once per pagevec lifecycle instead of on every release";
/// The variants the checks compare: the seed's before and after.
pub const BEFORE: &str = "batchshadow";
pub const AFTER: &str = "onedrain";
/// The name of the kernel column.
pub const KERNEL_COLUMN: &str = "kernel";

const MIB: u64 = 1 << 20;
/// Bytes read at every page.
pub const READ_BYTES: usize = 16;
/// Part of the cache the sparse files fill.
pub const FILL_RATIO: f64 = 0.6;
/// The largest file: 4 MiB.
pub const MAX_FILE_BYTES: u64 = 4 * MIB;

fn batchshadow() -> Tunables {
    Tunables { pagevec_drain: PagevecDrain::EveryRelease, ..Tunables::default() }
}

fn onedrain() -> Tunables {
    Tunables { pagevec_drain: PagevecDrain::Once, ..Tunables::default() }
}

/// This experiment's variants.
pub const PRESETS: &[Preset] = &[
    Preset {
        experiment: EXPERIMENT,
        name: BEFORE,
        stands_for: "4.14-rc4 batchshadow-v1r1: drain per-CPU pagevecs on every pagevec_release \
                     (PagevecDrain::EveryRelease)",
        default: true,
        tunables: batchshadow,
    },
    Preset {
        experiment: EXPERIMENT,
        name: AFTER,
        stands_for: "4.14-rc4 onedrain-v1r1: __pagevec_release calls lru_add_drain once per pagevec lifecycle \
                     (pvec->drained; PagevecDrain::Once)",
        default: true,
        tunables: onedrain,
    },
];

/// Where the sparse files live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backend {
    /// Memory-only files.
    Tmpfs,
    /// Host files in the temporary directory.
    File,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tmpfs => "tmpfs",
            Backend::File => "file",
        }
    }
}

/// The workloads, in run order.
pub const BACKENDS: [Backend; 2] = [Backend::Tmpfs, Backend::File];

/// The sizes of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseParams {
    pub mem_bytes: u64,
    /// Bytes of each sparse file (whole pages).
    pub file_bytes: u64,
    /// Files per round: `fill_ratio` of the cache.
    pub files: usize,
    /// Fill-and-truncate rounds per run.
    pub rounds: usize,
    pub runs: usize,
    pub fill_ratio: f64,
    pub read_bytes: usize,
    pub variants: Vec<String>,
    pub quick: bool,
    pub page_size: usize,
}

/// Full size: a 1 GiB cache (153 files of 4 MiB), 10 rounds, 3 runs.
pub const FULL_MEM: u64 = 1024 * MIB;
pub const FULL_ROUNDS: usize = 10;
pub const FULL_RUNS: usize = 3;
/// Quick: a 256 MiB cache (38 files of 4 MiB), 5 rounds, 2 runs.
pub const QUICK_MEM: u64 = 256 * MIB;
pub const QUICK_ROUNDS: usize = 5;
pub const QUICK_RUNS: usize = 2;

impl SparseParams {
    /// The sizes `opts` asks for, checked.
    pub fn from_opts(opts: &ExpOpts) -> Result<SparseParams> {
        let c = opts.common(PRESETS, (QUICK_MEM, FULL_MEM), (QUICK_RUNS, FULL_RUNS), 64 << 30)?;
        let (mem_bytes, runs, variants) = (c.mem_bytes, c.runs, c.variants);
        let page_size = Config::default().page_size;
        let ps = page_size as u64;
        let fill = (mem_bytes as f64 * FILL_RATIO) as u64;
        // 4 MiB files, or smaller so that a small cache still holds 16.
        let file_bytes = ((fill / 16).min(MAX_FILE_BYTES) / ps).max(1) * ps;
        let files = ((fill / file_bytes) as usize).max(1);
        Ok(SparseParams {
            mem_bytes,
            file_bytes,
            files,
            rounds: if opts.quick { QUICK_ROUNDS } else { FULL_ROUNDS },
            runs,
            fill_ratio: FILL_RATIO,
            read_bytes: READ_BYTES,
            variants,
            quick: opts.quick,
            page_size,
        })
    }

    fn pages_per_file(&self) -> u64 {
        self.file_bytes.div_ceil(self.page_size as u64)
    }
}

/// One backend, one run, one variant.
#[derive(Default)]
struct RunOut {
    /// µs per truncate, wall clock.
    times: Vec<f64>,
    /// µs per truncate, this thread's CPU time.
    cpu: Vec<f64>,
    /// The truncation phases' deltas, one per round.
    vm: Vec<VmStat>,
}

impl RunOut {
    fn per_truncate(&self, item: Item) -> f64 {
        let n = self.times.len();
        if n == 0 {
            return f64::NAN;
        }
        self.vm.iter().map(|d| d.get(item)).sum::<u64>() as f64 / n as f64
    }
}

const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// One variant's cache and where its host files go.
struct Subject {
    cache: PageCache,
    dir: PathBuf,
}

impl Subject {
    fn name(&self, j: usize) -> (String, PathBuf) {
        let n = format!("sparse-{j:05}");
        let p = self.dir.join(&n);
        (n, p)
    }

    /// Create the sparse files and read every page of each; handles closed.
    fn fill(&self, b: Backend, p: &SparseParams) -> Result<()> {
        let mut buf = [0u8; READ_BYTES];
        let ps = p.page_size as u64;
        for j in 0..p.files {
            let (name, path) = self.name(j);
            let f = match b {
                Backend::Tmpfs => self.cache.open_memory(&name)?,
                Backend::File => self.cache.open(&path, CREATE)?,
            };
            f.set_len(p.file_bytes)?;
            for i in 0..p.pages_per_file() {
                let n = f.read_at(&mut buf[..p.read_bytes], i * ps)?;
                if n != p.read_bytes || buf[..n].iter().any(|&x| x != 0) {
                    return Err(Error::Check(format!("{}: a hole read {n} bytes or not zeroes", f.name())));
                }
            }
            if f.cached_pages() != p.pages_per_file() {
                return Err(Error::Check(format!(
                    "{}: {} of {} pages cached after the read",
                    f.name(),
                    f.cached_pages(),
                    p.pages_per_file()
                )));
            }
            f.close()?;
        }
        // Pages still in another CPU's lru_add batch when this thread has
        // migrated would outlive their unlink (a local drain cannot reach
        // them) and blur the truncation phase's counts: start it with
        // every page on the lists.
        self.cache.lru_add_drain_all();
        Ok(())
    }

    /// Unlink file `j`, timed: (wall µs, thread CPU µs).
    fn truncate(&self, b: Backend, j: usize) -> Result<(f64, f64)> {
        let (name, path) = self.name(j);
        let cpu0 = crate::sys::thread_cpu_s();
        let start = Instant::now();
        match b {
            Backend::Tmpfs => self.cache.unlink_memory(&name)?,
            Backend::File => self.cache.unlink(&path)?,
        }
        let wall = start.elapsed().as_secs_f64() * 1e6;
        let cpu = (crate::sys::thread_cpu_s() - cpu0) * 1e6;
        Ok((wall, cpu))
    }
}

/// One backend in one run: a fresh cache per variant, `rounds` of fill then
/// truncate, the variants alternating file by file. One [`RunOut`] per
/// variant.
fn run_backend(
    presets: &[&Preset],
    opts: &ExpOpts,
    run: usize,
    b: Backend,
    dir: &Path,
    p: &SparseParams,
) -> Result<Vec<RunOut>> {
    let nv = presets.len();
    let mut subjects = Vec::with_capacity(nv);
    for (vi, pr) in presets.iter().enumerate() {
        let tunables = variant_tunables(pr, opts)?;
        let cache = PageCache::new(Config { memory_bytes: p.mem_bytes, tunables, ..Config::default() })?;
        let vdir = dir.join(format!("v{vi}"));
        std::fs::create_dir_all(&vdir).map_err(|e| Error::io(format!("creating {}", vdir.display()), e))?;
        subjects.push(Subject { cache, dir: vdir });
    }
    let mut outs: Vec<RunOut> = (0..nv).map(|_| RunOut::default()).collect();
    for round in 0..p.rounds {
        for s in &subjects {
            s.fill(b, p)?;
        }
        let befores: Vec<VmStat> = subjects.iter().map(|s| s.cache.vmstat()).collect();
        for j in 0..p.files {
            let order: Vec<usize> =
                if (run + round + j).is_multiple_of(2) { (0..nv).collect() } else { (0..nv).rev().collect() };
            for vi in order {
                let (wall, cpu) = subjects[vi].truncate(b, j)?;
                outs[vi].times.push(wall);
                outs[vi].cpu.push(cpu);
            }
        }
        for (vi, s) in subjects.iter().enumerate() {
            outs[vi].vm.push(s.cache.vmstat().delta(&befores[vi]));
        }
    }
    Ok(outs)
}

/// The per-truncate counters: (measure, item).
const PER_TRUNCATE: [(&str, Item); 3] = [
    ("lru_drain/truncate", Item::lru_drain),
    ("pagevec_release/truncate", Item::pagevec_release),
    ("lru_lock/truncate", Item::lru_lock_acquire),
];

/// The vmstat counters the report shows per backend.
const VM_ITEMS: &[Item] = &[
    Item::lru_drain,
    Item::lru_drain_all,
    Item::pagevec_release,
    Item::lru_lock_acquire,
    Item::pgfree,
    Item::atomic_flag_rmw,
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::allocstall,
];

/// The seed's rows, in its order.
pub const SEED_ROWS: [&str; 17] = [
    "Min",
    "1st-qrtle",
    "2nd-qrtle",
    "3rd-qrtle",
    "Max-90%",
    "Max-95%",
    "Max-99%",
    "Max",
    "Amean",
    "Stddev",
    "Coeff",
    "Best99%Amean",
    "Best95%Amean",
    "Best90%Amean",
    "Best75%Amean",
    "Best50%Amean",
    "Best25%Amean",
];

/// The seed's rows of `samples` (lower is better): quantiles interpolated
/// as in [`crate::stats`], Stddev the sample standard deviation, Coeff the
/// Stddev in percent of the Amean, BestN%Amean the mean of the lowest
/// `floor(N% * n)` samples (at least one). None without samples.
pub fn seed_rows(samples: &[f64]) -> Option<[f64; 17]> {
    let s = Summary::of(samples, Better::Lower)?;
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let best = |f: f64| {
        let k = ((f * v.len() as f64).floor() as usize).clamp(1, v.len());
        v[..k].iter().sum::<f64>() / k as f64
    };
    Some([
        s.min,
        s.q1,
        s.q2,
        s.q3,
        quantile_sorted(&v, 0.90),
        quantile_sorted(&v, 0.95),
        quantile_sorted(&v, 0.99),
        s.max,
        s.amean,
        s.stddev,
        s.coeffvar,
        best(0.99),
        best(0.95),
        best(0.90),
        best(0.75),
        best(0.50),
        best(0.25),
    ])
}

fn row_index(label: &str) -> usize {
    SEED_ROWS.iter().position(|r| *r == label).unwrap_or(0)
}

/// Run the experiment.
pub fn run(opts: &ExpOpts) -> Result<ExperimentResult> {
    let p = SparseParams::from_opts(opts)?;
    let presets = variants::resolve(PRESETS, &p.variants)?;
    for pr in &presets {
        variant_tunables(pr, opts)?;
    }
    let start = Instant::now();
    let load_before = loadavg();
    let tmp = tempdir_in(opts.dir.as_deref(), "pcache-sparsetruncate-")?;
    let nv = presets.len();
    let progress = Progress::new(opts.progress);
    let phase = progress.phase(EXPERIMENT, (p.runs * BACKENDS.len()) as u64);
    // outs[variant][backend][run]
    let mut outs: Vec<Vec<Vec<RunOut>>> = (0..nv).map(|_| (0..BACKENDS.len()).map(|_| Vec::new()).collect()).collect();
    for r in 0..p.runs {
        for (bi, &b) in BACKENDS.iter().enumerate() {
            phase.set_message(format!("run {}/{} {}", r + 1, p.runs, b.name()));
            let per_variant = run_backend(&presets, opts, r, b, tmp.path(), &p)?;
            for (vi, out) in per_variant.into_iter().enumerate() {
                outs[vi][bi].push(out);
            }
            phase.inc(1);
        }
    }
    phase.finish();
    let load_after = loadavg();

    let mut specs = Vec::new();
    for b in BACKENDS {
        specs.push(MetricSpec::new(b.name(), "truncate_us", "us", Better::Lower, Mean::Arithmetic, true));
        specs.push(MetricSpec::new(b.name(), "truncate_cpu_us", "us", Better::Lower, Mean::Arithmetic, true));
        for (measure, _) in PER_TRUNCATE {
            specs.push(MetricSpec::new(b.name(), measure, "per truncate", Better::Lower, Mean::Arithmetic, false));
        }
    }
    let mut variants_out = Vec::new();
    for (vi, pr) in presets.iter().enumerate() {
        let mut metrics: Named<Samples> = Named::new();
        let mut vmstat = Named::new();
        for (bi, &b) in BACKENDS.iter().enumerate() {
            let runs = &outs[vi][bi];
            let w = b.name();
            metrics.insert(
                format!("{w} truncate_us"),
                Samples(runs.iter().flat_map(|o| o.times.iter().copied()).collect()),
            );
            metrics.insert(
                format!("{w} truncate_cpu_us"),
                Samples(runs.iter().flat_map(|o| o.cpu.iter().copied()).collect()),
            );
            for (measure, item) in PER_TRUNCATE {
                metrics.insert(format!("{w} {measure}"), Samples(runs.iter().map(|o| o.per_truncate(item)).collect()));
            }
            let deltas: Vec<VmStat> = runs.iter().flat_map(|o| o.vm.iter().cloned()).collect();
            vmstat.insert(w, sum_vmstat(&deltas));
        }
        variants_out.push(VariantResult { name: pr.name.into(), stands_for: pr.stands_for.into(), metrics, vmstat });
    }

    let mut notes = vec![
        format!(
            "samples: truncate_us one per truncate ({} runs x {} rounds x {} files per variant and backend); the \
             */truncate counters one per run",
            p.runs, p.rounds, p.files
        ),
        "file: host files in the temporary directory; the host's unlink (a sparse file, no blocks) is inside the \
         timing, as the seed's unlink included the filesystem's"
            .to_string(),
        "tmpfs: memory-only files; the kernel's tmpfs would not cache hole pages on read (shmem maps the zero \
         page), pcache's memory files do, so tmpfs here is the page cache's truncation alone"
            .to_string(),
        "the variants run side by side (a cache each, files unlinked alternately), so drifts of the machine fall \
         on both"
            .to_string(),
    ];
    notes.push(load_note(load_before, load_after));
    // Where the wall-time tail is time off the CPU, say so.
    for (bi, b) in BACKENDS.iter().enumerate() {
        let mut wall: Vec<f64> = outs.iter().flat_map(|v| v[bi].iter().flat_map(|o| o.times.iter().copied())).collect();
        let mut cpu: Vec<f64> = outs.iter().flat_map(|v| v[bi].iter().flat_map(|o| o.cpu.iter().copied())).collect();
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        let (w99, c99) = (quantile_sorted(&wall, 0.99), quantile_sorted(&cpu, 0.99));
        if w99 > 1.5 * c99 {
            notes.push(format!(
                "{}: the wall-time tail is time off the CPU: Max-99% {w99:.0} us of wall time against {c99:.0} us of \
                 CPU time (all variants), so Max and Stddev of the wall time measure preemption by other load more \
                 than truncation; the CPU-time rows show the truncation work",
                b.name()
            ));
        }
    }
    if cfg!(debug_assertions) {
        notes.push("debug build: run with --release for meaningful timings".into());
    }

    let mut kernel_out = Value::Null;
    if opts.kernel {
        match kernel_column(&p, &tmp) {
            Ok((col, v, note)) => {
                variants_out.push(col);
                kernel_out = v;
                notes.push(note);
            }
            Err(why) => notes.push(format!("kernel column not available: {why}")),
        }
    } else {
        notes.push("kernel column not run (--no-kernel)".into());
    }
    drop(tmp);

    if let Some(dir) = &opts.plot_dir {
        match plot_cdfs(dir, &variants_out, &p) {
            Ok(files) => notes.push(format!("plots: {}", files.join(", "))),
            Err(e) => notes.push(format!("plots not written: {e}")),
        }
    }

    let mut result = ExperimentResult {
        experiment: EXPERIMENT.into(),
        seed: SEED.into(),
        seed_claim: SEED_CLAIM.into(),
        same_direction: false,
        variants: variants_out,
        metric_specs: specs,
        checks: Vec::new(),
        params: serde_json::json!({
            "sparsetruncate": p,
            "workloads": BACKENDS.iter().map(|&b| serde_json::json!({
                "name": b.name(),
                "description": describe(b, &p),
            })).collect::<Vec<_>>(),
            "timing": "truncate_us: wall time of one unlink of a closed file whose every page is cached, in \
                       microseconds; truncate_cpu_us: the same unlink's thread CPU time (CLOCK_THREAD_CPUTIME_ID)",
            "samples": "truncate_us, truncate_cpu_us: one per truncate, pooled over rounds and runs; */truncate: one \
                        per run",
            "vmstat": "deltas of the truncation phases per backend, summed over rounds and runs",
            "kernel_column": opts.kernel,
        }),
        extra: serde_json::json!({ "kernel": kernel_out }),
        runs: p.runs,
        quick: p.quick,
        optimized: !cfg!(debug_assertions),
        total_s: 0.0,
        notes,
    };
    result.checks = checks(&result);
    result.same_direction = report::same_direction(&result.checks);
    result.total_s = start.elapsed().as_secs_f64();
    Ok(result)
}

fn describe(b: Backend, p: &SparseParams) -> String {
    format!(
        "{} sparse {} of {} ({} pages; {:.0}% of {}), {} bytes read at every page, then each unlinked, timed; \
         {} rounds",
        p.files,
        match b {
            Backend::Tmpfs => "memory-only files",
            Backend::File => "host files",
        },
        fmt_size(p.file_bytes),
        p.pages_per_file(),
        (p.files as u64 * p.file_bytes) as f64 / p.mem_bytes as f64 * 100.0,
        fmt_size(p.mem_bytes),
        p.read_bytes,
        p.rounds
    )
}

/// The kernel column (file backend only): the column, the worker's JSON
/// and a note, or why not.
fn kernel_column(
    p: &SparseParams,
    tmp: &tempfile::TempDir,
) -> std::result::Result<(VariantResult, Value, String), String> {
    let dir = tmp.path().join("kernel");
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let params = serde_json::json!({
        "dir": dir.to_string_lossy(),
        "file_bytes": p.file_bytes,
        "files": p.files,
        "rounds": p.rounds,
        "runs": p.runs,
        "read_bytes": p.read_bytes,
        "page_size": p.page_size,
    });
    let v = kernel::run(EXPERIMENT, p.mem_bytes, &params)?;
    let times = v
        .get("workloads")
        .and_then(|w| w.get(Backend::File.name()))
        .and_then(|w| w.get("truncate_us"))
        .and_then(|t| t.as_array())
        .ok_or("the kernel worker returned no truncate times")?;
    let times: Vec<f64> = times.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect();
    if times.is_empty() {
        return Err("the kernel worker measured nothing".into());
    }
    let cached = v.get("cached_fraction").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
    let mut metrics: Named<Samples> = Named::new();
    metrics.insert(format!("{} truncate_us", Backend::File.name()), Samples(times));
    let note = format!(
        "kernel column: the host kernel ({}) through std::fs on host files in a memory cgroup of {} (file \
         backend only: Linux's tmpfs does not cache hole pages on read); {} of the hole pages were in its \
         cache before the unlinks (cachestat)",
        kernel_release(),
        fmt_size(p.mem_bytes),
        if cached.is_nan() { "an unknown part".to_string() } else { format!("{:.0}%", cached * 100.0) }
    );
    let col = VariantResult {
        name: KERNEL_COLUMN.into(),
        stands_for: format!(
            "the host kernel's page cache (Linux {}), the same sparse files through std::fs in a memory cgroup of {}",
            kernel_release(),
            fmt_size(p.mem_bytes)
        ),
        metrics,
        vmstat: Named::new(),
    };
    Ok((col, v, note))
}

/// The same workload through the kernel's page cache (run in the memory
/// cgroup by [`kernel::run`]): sparse host files in `dir`, `ftruncate`d to
/// `file_bytes`, read `read_bytes` at every page, closed, then each
/// unlinked and timed; `files` per round, `rounds` per run, `runs`. Returns
/// `{"workloads": {"file": {"truncate_us": [...]}}, "cached_fraction": F}`.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let num = |k: &str| params.get(k).and_then(|x| x.as_u64()).ok_or_else(|| format!("parameter {k} missing"));
    let dir = PathBuf::from(params.get("dir").and_then(|d| d.as_str()).ok_or("parameter dir missing")?);
    let file_bytes = num("file_bytes")?;
    let files = num("files")? as usize;
    let rounds = num("rounds")?.max(1) as usize;
    let runs = num("runs")?.max(1) as usize;
    let read_bytes = num("read_bytes")?.clamp(1, 4096) as usize;
    let ps = num("page_size")?.max(512);
    let mut buf = vec![0u8; read_bytes];
    let mut times = Vec::new();
    let (mut cached, mut probed) = (0u64, 0u64);
    for _ in 0..runs * rounds {
        let paths: Vec<PathBuf> = (0..files).map(|j| dir.join(format!("sparse-{j:05}"))).collect();
        for path in &paths {
            let err = |e: std::io::Error| format!("{}: {e}", path.display());
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
                .map_err(err)?;
            f.set_len(file_bytes).map_err(err)?;
            let mut off = 0;
            while off < file_bytes {
                f.read_at(&mut buf, off).map_err(err)?;
                off += ps;
            }
            // Probe the last page: cached if hole pages are.
            if let Some(c) = kernel::page_cached(&f, file_bytes.saturating_sub(1), ps) {
                probed += 1;
                cached += c as u64;
            }
        }
        for path in &paths {
            let start = Instant::now();
            std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let cached_fraction = if probed == 0 { Value::Null } else { Value::from(cached as f64 / probed as f64) };
    Ok(serde_json::json!({
        "workloads": { Backend::File.name(): { "truncate_us": times } },
        "cached_fraction": cached_fraction,
    }))
}

/// A CDF of truncate times per column, per backend: the whole range, and
/// the body up to the largest 99th percentile.
fn plot_cdfs(dir: &Path, cols: &[VariantResult], p: &SparseParams) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let mut files = Vec::new();
    for b in BACKENDS {
        let metric = format!("{} truncate_us", b.name());
        let with: Vec<&VariantResult> = cols.iter().filter(|c| !c.samples(&metric).is_empty()).collect();
        let p99 = with
            .iter()
            .filter_map(|c| seed_rows(c.samples(&metric)).map(|r| r[row_index("Max-99%")]))
            .fold(0.0f64, f64::max);
        for (suffix, clip) in [("cdf", f64::INFINITY), ("cdf-body", p99)] {
            let series: Vec<plot::Series> = with
                .iter()
                .map(|c| plot::Series {
                    name: c.name.clone(),
                    points: plot::cdf(c.samples(&metric)).into_iter().filter(|&(x, _)| x <= clip).collect(),
                })
                .collect();
            let path = dir.join(format!("sparsetruncate-{}-{suffix}.svg", b.name()));
            let title = format!(
                "sparsetruncate {}: unlink of {} sparse files{}",
                b.name(),
                fmt_size(p.file_bytes),
                if clip.is_finite() { format!(" (up to the 99th percentile, {clip:.0} us)") } else { String::new() }
            );
            plot::line_chart(&path, &title, "truncate time (us)", "fraction of truncates", &series)?;
            files.push(path.display().to_string());
        }
    }
    Ok(files)
}

fn fmt_us(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.2}")
    }
}

/// The seed's claims against this run, per backend.
fn checks(r: &ExperimentResult) -> Vec<Check> {
    let (Some(b), Some(a)) = (r.variant(BEFORE), r.variant(AFTER)) else {
        return vec![Check {
            name: format!("variants {BEFORE} and {AFTER} both run"),
            seed: "both".into(),
            measured: r.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(","),
            agrees: None,
            counts: true,
        }];
    };
    let mut out = Vec::new();
    for be in BACKENDS {
        let w = be.name();
        let m = format!("{w} lru_drain/truncate");
        let (db, da) = (report::amean(b.samples(&m)), report::amean(a.samples(&m)));
        let pv = report::amean(b.samples(&format!("{w} pagevec_release/truncate")));
        out.push(Check {
            name: format!("{w}: onedrain drains fewer times per truncate"),
            seed: "lru_add_drain on every pagevec_release -> once per pagevec lifecycle".into(),
            measured: format!("lru_drain/truncate {db:.2} -> {da:.2} ({pv:.2} pagevec releases per truncate)"),
            agrees: if db.is_nan() || da.is_nan() { None } else { Some(da < db) },
            counts: true,
        });
        let metric = format!("{w} truncate_us");
        let (Some(rb), Some(ra)) = (seed_rows(b.samples(&metric)), seed_rows(a.samples(&metric))) else {
            out.push(Check {
                name: format!("{w}: truncate times measured"),
                seed: "-".into(),
                measured: "no samples".into(),
                agrees: None,
                counts: true,
            });
            continue;
        };
        let cpu = format!("{w} truncate_cpu_us");
        let (cb, ca) = (seed_rows(b.samples(&cpu)), seed_rows(a.samples(&cpu)));
        for (label, seed, counts, cpu_time) in [
            ("Max", "254.00 -> 208.00 us (+18.11%)", true, false),
            ("Stddev", "12.74 -> 9.62 (+24.49%)", true, false),
            ("Amean", "145.12 -> 144.30 us (+0.56%; within the noise, not counted)", false, false),
            ("Max", "254.00 -> 208.00 us (+18.11%; wall time, idle machine)", false, true),
            ("Stddev", "12.74 -> 9.62 (+24.49%; wall time, idle machine)", false, true),
        ] {
            let (xb, xa) = if cpu_time {
                match (cb, ca) {
                    (Some(cb), Some(ca)) => (cb, ca),
                    _ => continue,
                }
            } else {
                (rb, ra)
            };
            let i = row_index(label);
            let pct = pct_better(xb[i], xa[i], Better::Lower);
            out.push(Check {
                name: format!(
                    "{w}: {label} truncate {} lower with onedrain",
                    if cpu_time { "CPU time (not preempted)" } else { "time" }
                ),
                seed: seed.into(),
                measured: format!("{} -> {} ({pct:+.2}%)", fmt_us(xb[i]), fmt_us(xa[i])),
                agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                counts,
            });
        }
    }
    out
}

/// The seed's table for one backend: every row, one column per variant,
/// percentages against the first (positive = better).
fn render_seed_table(r: &ExperimentResult, metric: &str) -> String {
    let cols: Vec<(&str, Option<[f64; 17]>)> =
        r.variants.iter().map(|v| (v.name.as_str(), seed_rows(v.samples(metric)))).collect();
    let cols: Vec<(&str, [f64; 17])> = cols.into_iter().filter_map(|(n, v)| v.map(|v| (n, v))).collect();
    let mut rows = vec![std::iter::once(String::new()).chain(cols.iter().map(|(n, _)| n.to_string())).collect()];
    for (i, label) in SEED_ROWS.iter().enumerate() {
        let mut row = vec![format!("{label} Time")];
        let base = cols.first().map(|c| c.1[i]).unwrap_or(f64::NAN);
        for (_, v) in &cols {
            row.push(format!("{} ({:>7.2}%)", fmt_us(v[i]), pct_better(base, v[i], Better::Lower)));
        }
        rows.push(row);
    }
    let right: Vec<bool> = (0..=cols.len()).map(|c| c > 0).collect();
    render_table(&rows, &right)
}

/// The readable report: setup, the seed's table per backend, the
/// mechanism counters, compare-kernels, vmstat, the seed's claim against
/// this run.
pub fn report(r: &ExperimentResult) -> String {
    let mut s = String::new();
    let p: Option<SparseParams> = serde_json::from_value(r.params["sparsetruncate"].clone()).ok();
    let _ = writeln!(
        s,
        "sparsetruncate (seed {}: only drain per-cpu pagevecs once per pagevec usage): {} of cache, {} runs x {} \
         rounds x {} files of {}{}",
        r.seed,
        p.as_ref().map(|p| fmt_size(p.mem_bytes)).unwrap_or_default(),
        r.runs,
        p.as_ref().map(|p| p.rounds).unwrap_or(0),
        p.as_ref().map(|p| p.files).unwrap_or(0),
        p.as_ref().map(|p| fmt_size(p.file_bytes)).unwrap_or_default(),
        if r.quick { " (quick)" } else { "" }
    );
    s.push_str(&r.render_setup());

    for b in BACKENDS {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "sparsetruncate ({}), time per truncate in us (wall clock, as the seed), lower is better; percentages \
             against the first column, positive = better",
            b.name()
        );
        s.push_str(&render_seed_table(r, &format!("{} truncate_us", b.name())));
    }
    for b in BACKENDS {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "sparsetruncate ({}), thread CPU time per truncate in us (excludes time preempted by other load on the \
             machine; not in the seed)",
            b.name()
        );
        s.push_str(&render_seed_table(r, &format!("{} truncate_cpu_us", b.name())));
    }

    let pc: Vec<&VariantResult> = r.variants.iter().filter(|v| !v.vmstat.is_empty()).collect();
    let right: Vec<bool> = (0..=pc.len()).map(|c| c > 0).collect();
    let _ = writeln!(s);
    let _ = writeln!(s, "the mechanism, per truncate (mean over runs)");
    let mut rows = vec![std::iter::once(String::new()).chain(pc.iter().map(|v| v.name.clone())).collect::<Vec<_>>()];
    for b in BACKENDS {
        for (measure, _) in PER_TRUNCATE {
            let metric = format!("{} {measure}", b.name());
            let mut row = vec![metric.clone()];
            row.extend(pc.iter().map(|v| fmt_count(report::amean(v.samples(&metric)))));
            rows.push(row);
        }
    }
    s.push_str(&render_table(&rows, &right));
    // What one extra drain costs, from robust statistics of the CPU time.
    if let (Some(b), Some(a)) = (r.variant(BEFORE), r.variant(AFTER)) {
        for be in BACKENDS {
            let w = be.name();
            let m = format!("{w} lru_drain/truncate");
            let extra = report::amean(b.samples(&m)) - report::amean(a.samples(&m));
            let cpu = format!("{w} truncate_cpu_us");
            let i = row_index("Best50%Amean");
            if let (Some(rb), Some(ra)) = (seed_rows(b.samples(&cpu)), seed_rows(a.samples(&cpu))) {
                if extra > 0.0 {
                    let _ = writeln!(
                        s,
                        "{w}: {extra:.0} extra drains per truncate in {BEFORE}; the difference of the CPU-time \
                         Best50%Amean, {:.2} us, puts one extra drain at {:.0} ns ({:.2}% of a truncate)",
                        rb[i] - ra[i],
                        (rb[i] - ra[i]) * 1e3 / extra,
                        pct_better(rb[i], ra[i], Better::Lower)
                    );
                }
            }
        }
    }

    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "compare-kernels over all truncates: percentages against the first column, positive = better; `*  x%*` \
         marks a significant difference of means (Welch's t-test, 95%)"
    );
    let (cmp, means) = r.comparison();
    s.push_str(&render_compare(&cmp, &means));

    let _ = writeln!(s);
    let _ = writeln!(s, "vmstat deltas of the truncation phases, per truncate");
    for b in BACKENDS {
        let w = b.name();
        let n = |v: &VariantResult| v.samples(&format!("{w} truncate_us")).len().max(1) as f64;
        s.push_str(&render_table(&vmstat_rows(w, &pc, VM_ITEMS, &n), &right));
    }

    s.push_str(&r.render_tail());
    s
}

/// `pcache bench sparsetruncate`.
pub struct Sparsetruncate;

impl Experiment for Sparsetruncate {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "Seed 001, sparse files read once then truncated: drain on every pagevec release against once per lifecycle."
    }
    fn main_job(&self) -> MainJob {
        MainJob::Quick
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        Some(kernel_workload)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let result = run(opts)?;
        Outcome::new(report(&result), &result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_sizes() {
        let v = variants::resolve(PRESETS, &variants::defaults(PRESETS)).unwrap();
        let names: Vec<&str> = v.iter().map(|p| p.name).collect();
        assert_eq!(names, [BEFORE, AFTER]);
        assert_eq!((v[0].tunables)().pagevec_drain, PagevecDrain::EveryRelease);
        assert_eq!((v[1].tunables)().pagevec_drain, PagevecDrain::Once);
        let p = SparseParams::from_opts(&ExpOpts::default()).unwrap();
        assert_eq!((p.file_bytes, p.files, p.rounds, p.runs), (4 * MIB, 153, 10, 3));
        let t = SparseParams::from_opts(&ExpOpts { mem_bytes: Some(8 * MIB), ..ExpOpts::default() }).unwrap();
        assert!(t.file_bytes < 512 << 10 && t.file_bytes.is_multiple_of(4096));
        assert!(t.files >= 16 && t.files as u64 * t.file_bytes <= 8 * MIB * 6 / 10);
        assert!(SparseParams::from_opts(&ExpOpts { mem_bytes: Some(MIB), ..ExpOpts::default() }).is_err());
        assert!(SparseParams::from_opts(&ExpOpts { variants: Some(vec!["x".into()]), ..ExpOpts::default() }).is_err());
    }

    #[test]
    fn seed_rows_of_a_known_sample() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = seed_rows(&v).unwrap();
        assert_eq!(r[row_index("Min")], 1.0);
        assert_eq!(r[row_index("Max")], 100.0);
        assert!((r[row_index("Amean")] - 50.5).abs() < 1e-9);
        assert!((r[row_index("Max-99%")] - 99.01).abs() < 1e-9);
        // Best 25%: the mean of 1..=25.
        assert!((r[row_index("Best25%Amean")] - 13.0).abs() < 1e-9);
        assert!((r[row_index("Best99%Amean")] - 50.0).abs() < 1e-9);
        assert!((r[row_index("Coeff")] - r[row_index("Stddev")] / 50.5 * 100.0).abs() < 1e-9);
        assert!(seed_rows(&[]).is_none());
        assert_eq!(seed_rows(&[7.0]).unwrap()[row_index("Best25%Amean")], 7.0);
    }
}

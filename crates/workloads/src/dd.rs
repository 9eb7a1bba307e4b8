//! `pcache bench dd`: seed 000, Mel Gorman's "non-atomically mark page
//! accessed during page cache allocation where possible" (accessed-v2,
//! commit 2457aec6), 3.15-rc3 vanilla against accessed-v2.
//!
//! The seed timed "a simple dd of a large file done multiple times with the
//! file deleted on each iteration", the file 1/10 of physical memory to keep
//! out of dirty balancing, on tmpfs, ext3, ext4, xfs and btrfs, in async
//! mode and with `conv=fdatasync`; it reported the async Max elapsed time
//! (accessed-v2 faster everywhere: tmpfs 3.9%, ext3 17%, ext4 28%) and
//! oprofile samples in `mark_page_accessed` (tmpfs 59562 in vanilla against
//! 94 + 1210 in `init_page_accessed` with the patch).
//!
//! Here, per run, four workloads, each with a fresh cache of `mem_bytes` per
//! variant (see [`PRESETS`]):
//!
//! * **tmpfs-async**, **tmpfs-fdatasync**: a memory-only file
//!   ([`PageCache::open_memory`], the tmpfs case);
//! * **file-async**, **file-fdatasync**: a host file in the temporary
//!   directory ([`PageCache::open`], written back with O_DIRECT).
//!
//! Each writes a file of `mem_bytes / 10` from offset 0 in 1 MiB blocks
//! (`fdatasync` at the end in the fdatasync mode), closes it and unlinks it,
//! `iterations` times after one untimed warm-up iteration (which faults the
//! arena in). Elapsed runs from the open to the return of the close (the
//! fdatasync included), as dd's own timing; the unlink is outside it. MB/s is
//! the file's bytes (10^6) over elapsed; `cpu_s` is the writer thread's CPU
//! time over the same span (not the flusher's; it stops while the thread is
//! preempted, which on a shared machine is most of the wall-time noise).
//! The cost counters are the vmstat deltas of the timed iterations (their
//! unlinks included) per page written: `atomic_flag_rmw`,
//! `mark_page_accessed_calls` and `init_page_accessed_calls` (vanilla marks
//! the visible page with an atomic RMW; accessed-v2 initialises it with a
//! plain store before it is visible).
//!
//! The variants run side by side: in each workload every variant's cache is
//! built and warmed up, then each iteration runs one dd per variant, the
//! order alternating from one iteration (and run) to the next, so that
//! drifts of the machine (other load, frequency) fall on both alike.
//!
//! With `opts.kernel`, the same dd runs through `std::fs` (buffered) in a
//! memory cgroup of `mem_bytes` ([`kernel_workload`]) and is shown as one
//! more column, "kernel", for elapsed and MB/s.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pcache::{AccessedInit, Config, Item, OpenOptions, PageCache, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{variant_tunables, ExpOpts};
use crate::experiment::{Experiment, MainJob, Outcome};
use crate::kernel;
use crate::plot;
use crate::progress::Progress;
use crate::render::{self, fmt_cell, fmt_pct, fmt_size, render_table, vmstat_rows};
use crate::report::{
    self, significant, sum_vmstat, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult,
};
use crate::stats::{pct_better, Better};
use crate::sys::{is_tmpfs, kernel_release, load_note, loadavg, pattern, tempdir_in, thread_cpu_s};
use crate::variants::{self, Preset};
use crate::{Error, Result};

pub const EXPERIMENT: &str = "dd";
pub const SEED: &str = "000";
pub const SEED_CLAIM: &str = "accessed-v2 against 3.15-rc3 vanilla: async dd Max elapsed down on every filesystem \
                              (tmpfs 0.51->0.49s +3.9%, ext3 +17%, ext4 +28%, xfs +83%, btrfs +0.2%); \
                              mark_page_accessed profile samples down sharply (tmpfs 59562 -> 94, plus 1210 in \
                              init_page_accessed)";
/// The variants the checks compare: the seed's before and after.
pub const BEFORE: &str = "3.15-vanilla";
pub const AFTER: &str = "accessed-v2";
/// The name of the kernel column.
pub const KERNEL_COLUMN: &str = "kernel";

const MIB: u64 = 1 << 20;
/// dd's block size.
pub const BLOCK: u64 = MIB;
/// mark_page_accessed calls per page must fall by this fraction for the
/// "drops sharply" check (the seed's tmpfs profile fell by 98%).
pub const SHARP_DROP: f64 = 0.9;

fn vanilla() -> Tunables {
    Tunables { accessed_init: AccessedInit::Vanilla315, ..Tunables::default() }
}

fn accessed_v2() -> Tunables {
    Tunables { accessed_init: AccessedInit::AccessedV2, ..Tunables::default() }
}

/// This experiment's variants.
pub const PRESETS: &[Preset] = &[
    Preset {
        experiment: EXPERIMENT,
        name: BEFORE,
        stands_for: "Linux 3.15-rc3 vanilla: grab_cache_page_write_begin inserts the new page, then \
                     mark_page_accessed sets PG_referenced on the visible page with an atomic RMW \
                     (AccessedInit::Vanilla315)",
        default: true,
        tunables: vanilla,
    },
    Preset {
        experiment: EXPERIMENT,
        name: AFTER,
        stands_for: "3.15-rc3 + accessed-v2 (commit 2457aec6): pagecache_get_page(FGP_ACCESSED) calls \
                     init_page_accessed, a plain store before the page is visible, and the write path skips \
                     mark_page_accessed (AccessedInit::AccessedV2)",
        default: true,
        tunables: accessed_v2,
    },
];

/// Where the file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backend {
    /// A memory-only file (`open_memory`): the tmpfs case.
    Tmpfs,
    /// A host file in the temporary directory.
    File,
}

/// How dd ends each file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// No sync: dd returns with the data dirty in the cache.
    Async,
    /// `conv=fdatasync`: fdatasync before the close, timed.
    Fdatasync,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tmpfs => "tmpfs",
            Backend::File => "file",
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Async => "async",
            Mode::Fdatasync => "fdatasync",
        }
    }
}

/// The four workloads, in run order.
pub const WORKLOADS: [(Backend, Mode); 4] = [
    (Backend::Tmpfs, Mode::Async),
    (Backend::Tmpfs, Mode::Fdatasync),
    (Backend::File, Mode::Async),
    (Backend::File, Mode::Fdatasync),
];

/// A workload's name: `BACKEND-MODE`.
pub fn workload_name(b: Backend, m: Mode) -> String {
    format!("{}-{}", b.name(), m.name())
}

/// The sizes of a run, from [`ExpOpts`] and the defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdParams {
    /// Bytes of page cache.
    pub mem_bytes: u64,
    /// Bytes of each dd file: a tenth of the cache, whole pages.
    pub file_bytes: u64,
    pub block_bytes: u64,
    /// Timed iterations per workload and run (after one untimed warm-up).
    pub iterations: usize,
    pub runs: usize,
    pub variants: Vec<String>,
    pub quick: bool,
    pub page_size: usize,
}

/// Full size: a 1 GiB cache (102 MiB files), 10 iterations, 3 runs.
pub const FULL_MEM: u64 = 1024 * MIB;
pub const FULL_ITERATIONS: usize = 10;
pub const FULL_RUNS: usize = 3;
/// Quick: a 256 MiB cache (25.6 MiB files), 3 iterations, 3 runs.
pub const QUICK_MEM: u64 = 256 * MIB;
pub const QUICK_ITERATIONS: usize = 3;
pub const QUICK_RUNS: usize = 3;

impl DdParams {
    /// The sizes `opts` asks for, checked.
    pub fn from_opts(opts: &ExpOpts) -> Result<DdParams> {
        let c = opts.common(PRESETS, (QUICK_MEM, FULL_MEM), (QUICK_RUNS, FULL_RUNS), 64 << 30)?;
        let (mem_bytes, runs, variants) = (c.mem_bytes, c.runs, c.variants);
        let page_size = Config::default().page_size;
        let ps = page_size as u64;
        let file_bytes = (mem_bytes / 10 / ps).max(1) * ps;
        Ok(DdParams {
            mem_bytes,
            file_bytes,
            block_bytes: BLOCK,
            iterations: if opts.quick { QUICK_ITERATIONS } else { FULL_ITERATIONS },
            runs,
            variants,
            quick: opts.quick,
            page_size,
        })
    }

    fn pages(&self) -> u64 {
        self.file_bytes.div_ceil(self.page_size as u64)
    }
}

/// One workload, one run, one variant.
struct RunOut {
    /// Seconds per timed iteration.
    elapsed: Vec<f64>,
    /// The writer thread's CPU seconds per timed iteration.
    cpu: Vec<f64>,
    vm: VmStat,
}

const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// One dd: open, write the file in blocks, fdatasync (if asked), close;
/// timed: (wall seconds, this thread's CPU seconds). Then the unlink,
/// untimed.
fn dd_once(cache: &PageCache, b: Backend, m: Mode, dir: &Path, p: &DdParams, buf: &[u8]) -> Result<(f64, f64)> {
    let name = format!("dd-{}", workload_name(b, m));
    let path = dir.join(&name);
    let cpu0 = thread_cpu_s();
    let start = Instant::now();
    let f = match b {
        Backend::Tmpfs => cache.open_memory(&name)?,
        Backend::File => cache.open(&path, CREATE)?,
    };
    let mut off = 0;
    while off < p.file_bytes {
        let n = p.block_bytes.min(p.file_bytes - off) as usize;
        let done = f.write_at(&buf[..n], off)?;
        if done != n {
            return Err(Error::Check(format!("{}: wrote {done} of {n} bytes at {off}", f.name())));
        }
        off += n as u64;
    }
    if m == Mode::Fdatasync {
        f.fdatasync()?;
    }
    f.close()?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    match b {
        Backend::Tmpfs => cache.unlink_memory(&name)?,
        Backend::File => cache.unlink(&path)?,
    }
    Ok((secs, cpu))
}

/// One workload in one run: a fresh, warmed-up cache per variant, then
/// `iterations` rounds in which every variant runs one dd, in alternating
/// order, so that the variants are measured side by side in time. Returns
/// one [`RunOut`] per variant.
fn run_workload(
    presets: &[&Preset],
    opts: &ExpOpts,
    run: usize,
    (b, m): (Backend, Mode),
    dir: &Path,
    p: &DdParams,
    buf: &[u8],
) -> Result<Vec<RunOut>> {
    let nv = presets.len();
    let mut caches = Vec::with_capacity(nv);
    for (vi, pr) in presets.iter().enumerate() {
        let tunables = variant_tunables(pr, opts)?;
        let cache = PageCache::new(Config { memory_bytes: p.mem_bytes, tunables, ..Config::default() })?;
        // A directory per variant, so that the variants' host files do not clash.
        let vdir = dir.join(format!("v{vi}"));
        std::fs::create_dir_all(&vdir).map_err(|e| Error::io(format!("creating {}", vdir.display()), e))?;
        // Warm-up: fault the frames in, start the flusher.
        dd_once(&cache, b, m, &vdir, p, buf)?;
        caches.push((cache, vdir));
    }
    let befores: Vec<VmStat> = caches.iter().map(|(c, _)| c.vmstat()).collect();
    let mut elapsed = vec![Vec::with_capacity(p.iterations); nv];
    let mut cpu = vec![Vec::with_capacity(p.iterations); nv];
    for i in 0..p.iterations {
        let order: Vec<usize> = if (run + i).is_multiple_of(2) { (0..nv).collect() } else { (0..nv).rev().collect() };
        for vi in order {
            let (cache, vdir) = &caches[vi];
            let (wall, c) = dd_once(cache, b, m, vdir, p, buf)?;
            elapsed[vi].push(wall);
            cpu[vi].push(c);
        }
    }
    Ok(caches
        .into_iter()
        .zip(befores)
        .zip(elapsed.into_iter().zip(cpu))
        .map(|(((cache, _), before), (elapsed, cpu))| RunOut { elapsed, cpu, vm: cache.vmstat().delta(&before) })
        .collect())
}

/// The per-page cost counters: (measure, item).
const PER_PAGE: [(&str, Item); 3] = [
    ("atomic_flag_rmw/page", Item::atomic_flag_rmw),
    ("mark_page_accessed/page", Item::mark_page_accessed_calls),
    ("init_page_accessed/page", Item::init_page_accessed_calls),
];

/// The vmstat counters the report shows per workload.
const VM_ITEMS: &[Item] = &[
    Item::atomic_flag_rmw,
    Item::mark_page_accessed_calls,
    Item::init_page_accessed_calls,
    Item::pgactivate,
    Item::lru_lock_acquire,
    Item::lru_drain,
    Item::pagevec_release,
    Item::pgalloc,
    Item::pgfree,
    Item::pgpgout,
    Item::pgwriteback,
    Item::flusher_wakeups,
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::allocstall,
    Item::balance_dirty_pages_pauses,
];

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        f64::NAN
    }
}
/// Run the experiment.
pub fn run(opts: &ExpOpts) -> Result<ExperimentResult> {
    let p = DdParams::from_opts(opts)?;
    let presets = variants::resolve(PRESETS, &p.variants)?;
    // Refuse bad --set values before anything runs.
    for pr in &presets {
        variant_tunables(pr, opts)?;
    }
    let start = Instant::now();
    let load_before = loadavg();
    let tmp = tempdir_in(opts.dir.as_deref(), "pcache-dd-")?;
    let buf = pattern(p.block_bytes as usize);
    let nv = presets.len();
    let progress = Progress::new(opts.progress);
    let phase = progress.phase(EXPERIMENT, (p.runs * WORKLOADS.len()) as u64);
    // outs[variant][workload][run]
    let mut outs: Vec<Vec<Vec<RunOut>>> = (0..nv).map(|_| (0..WORKLOADS.len()).map(|_| Vec::new()).collect()).collect();
    for r in 0..p.runs {
        for (wi, &w) in WORKLOADS.iter().enumerate() {
            phase.set_message(format!("run {}/{} {}", r + 1, p.runs, workload_name(w.0, w.1)));
            let per_variant = run_workload(&presets, opts, r, w, tmp.path(), &p, &buf)?;
            for (vi, out) in per_variant.into_iter().enumerate() {
                outs[vi][wi].push(out);
            }
            phase.inc(1);
        }
    }
    phase.finish();
    let load_after = loadavg();

    let mut specs = Vec::new();
    for &(b, m) in &WORKLOADS {
        let w = workload_name(b, m);
        specs.push(MetricSpec::new(&w, "elapsed_s", "s", Better::Lower, Mean::Arithmetic, true));
        specs.push(MetricSpec::new(&w, "MB/s", "MB/s", Better::Higher, Mean::Harmonic, true));
        specs.push(MetricSpec::new(&w, "cpu_s", "s", Better::Lower, Mean::Arithmetic, true));
        for (measure, _) in PER_PAGE {
            specs.push(MetricSpec::new(&w, measure, "per page", Better::Lower, Mean::Arithmetic, false));
        }
    }
    let pages = (p.pages() * p.iterations as u64) as f64;
    let mut variants_out = Vec::new();
    for (vi, pr) in presets.iter().enumerate() {
        let mut metrics: Named<Samples> = Named::new();
        let mut vmstat = Named::new();
        for (wi, &(b, m)) in WORKLOADS.iter().enumerate() {
            let w = workload_name(b, m);
            let runs = &outs[vi][wi];
            let el: Vec<f64> = runs.iter().flat_map(|o| o.elapsed.iter().copied()).collect();
            metrics.insert(format!("{w} MB/s"), Samples(el.iter().map(|&s| mbps(p.file_bytes, s)).collect()));
            metrics.insert(format!("{w} elapsed_s"), Samples(el));
            metrics.insert(format!("{w} cpu_s"), Samples(runs.iter().flat_map(|o| o.cpu.iter().copied()).collect()));
            for (measure, item) in PER_PAGE {
                let v = runs.iter().map(|o| o.vm.get(item) as f64 / pages).collect();
                metrics.insert(format!("{w} {measure}"), Samples(v));
            }
            let deltas: Vec<VmStat> = runs.iter().map(|o| o.vm.clone()).collect();
            vmstat.insert(w, sum_vmstat(&deltas));
        }
        // Keep the metrics in spec order.
        let ordered =
            Named(specs.iter().filter_map(|s| metrics.get(&s.name).map(|v| (s.name.clone(), v.clone()))).collect());
        variants_out.push(VariantResult {
            name: pr.name.into(),
            stands_for: pr.stands_for.into(),
            metrics: ordered,
            vmstat,
        });
    }

    let mut notes = vec![
        "tmpfs is modelled by a memory-only file: unlike tmpfs its pages are written back to a memory device \
         (a copy) by the flusher and by fdatasync, so tmpfs-fdatasync does work the kernel's tmpfs does not"
            .to_string(),
        "file: a host file in the temporary directory, written back with O_DIRECT; the seed used ext3, ext4, \
         xfs and btrfs on a disk"
            .to_string(),
        format!(
            "samples: elapsed_s, MB/s and cpu_s one per timed iteration ({} runs x {} iterations, each after an untimed \
             warm-up in a fresh cache); the per-page counters one per run",
            p.runs, p.iterations
        ),
    ];
    notes.push(load_note(load_before, load_after));
    if p.runs * p.iterations < 2 {
        notes.push("one sample: no spread, so no difference can be marked significant".into());
    }
    if cfg!(debug_assertions) {
        notes.push("debug build: run with --release for meaningful timings".into());
    }

    // The kernel column.
    let mut kernel_out = Value::Null;
    if opts.kernel {
        match kernel_column(&p, opts, &tmp) {
            Ok((col, v, mut kn)) => {
                variants_out.push(col);
                kernel_out = v;
                notes.append(&mut kn);
            }
            Err(why) => notes.push(format!("kernel column not available: {why}")),
        }
    } else {
        notes.push("kernel column not run (--no-kernel)".into());
    }
    drop(tmp);

    if let Some(dir) = &opts.plot_dir {
        match plot_elapsed(dir, &variants_out, &p) {
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
            "dd": p,
            "workloads": WORKLOADS.iter().map(|&(b, m)| serde_json::json!({
                "name": workload_name(b, m),
                "description": describe(b, m, &p),
            })).collect::<Vec<_>>(),
            "timing": "elapsed_s: open to the return of close, fdatasync included in the fdatasync mode; the \
                       unlink after is not timed; MB/s = file bytes / 10^6 / elapsed_s; cpu_s: the writer \
                       thread's CPU time over the same span (CLOCK_THREAD_CPUTIME_ID: not the flusher's, and \
                       not the time it was preempted)",
            "samples": "elapsed_s, MB/s, cpu_s: one per timed iteration; */page counters: one per run (vmstat deltas \
                        of the timed iterations over the pages written)",
            "vmstat": "deltas of the timed iterations (their unlinks included) per workload, event counters \
                       summed over the runs",
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

fn describe(b: Backend, m: Mode, p: &DdParams) -> String {
    format!(
        "dd of {} in {} blocks to a {}{}, {} timed iterations (+1 warm-up), unlinked after each",
        fmt_size(p.file_bytes),
        fmt_size(p.block_bytes),
        match b {
            Backend::Tmpfs => "memory-only file (tmpfs)",
            Backend::File => "host file (O_DIRECT writeback)",
        },
        match m {
            Mode::Async => ", no sync",
            Mode::Fdatasync => ", fdatasync before close",
        },
        p.iterations
    )
}

/// Run the kernel column; the column, the worker's JSON and notes, or why
/// not.
fn kernel_column(
    p: &DdParams,
    opts: &ExpOpts,
    tmp: &tempfile::TempDir,
) -> std::result::Result<(VariantResult, Value, Vec<String>), String> {
    let mut notes = Vec::new();
    let file_dir = tmp.path().join("kernel");
    std::fs::create_dir(&file_dir).map_err(|e| format!("cannot create {}: {e}", file_dir.display()))?;
    let mut dirs = serde_json::Map::new();
    // Holds the tmpfs directory until the worker is done.
    let shm = if is_tmpfs(Path::new("/dev/shm")) {
        tempfile::Builder::new().prefix("pcache-dd-").tempdir_in("/dev/shm").ok()
    } else {
        None
    };
    match &shm {
        Some(d) => {
            dirs.insert("tmpfs".into(), Value::from(d.path().to_string_lossy().into_owned()));
        }
        None => notes.push("kernel column: no writable tmpfs at /dev/shm, so no kernel tmpfs workloads".into()),
    }
    dirs.insert("file".into(), Value::from(file_dir.to_string_lossy().into_owned()));
    let params = serde_json::json!({
        "dirs": dirs,
        "file_bytes": p.file_bytes,
        "block_bytes": p.block_bytes,
        "iterations": p.iterations,
        "runs": p.runs,
    });
    let v = kernel::run(EXPERIMENT, p.mem_bytes, &params)?;
    drop(shm);
    let ws = v.get("workloads").and_then(|w| w.as_object()).ok_or("the kernel worker returned no workloads")?;
    let mut metrics: Named<Samples> = Named::new();
    for &(b, m) in &WORKLOADS {
        let w = workload_name(b, m);
        let Some(el) = ws.get(&w).and_then(|x| x.get("elapsed_s")).and_then(|x| x.as_array()) else { continue };
        let el: Vec<f64> = el.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect();
        metrics.insert(format!("{w} elapsed_s"), Samples(el.clone()));
        metrics.insert(format!("{w} MB/s"), Samples(el.iter().map(|&s| mbps(p.file_bytes, s)).collect()));
    }
    if metrics.is_empty() {
        return Err("the kernel worker measured nothing".into());
    }
    let fs = v.get("file_fs").and_then(|x| x.as_str()).unwrap_or("?");
    notes.push(format!(
        "kernel column: the host kernel ({}) through std::fs, buffered, in a memory cgroup of {}; file on {fs} in \
         {}; no cost counters (no vmstat)",
        kernel_release(),
        fmt_size(p.mem_bytes),
        opts.dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "the system temp dir".into())
    ));
    let col = VariantResult {
        name: KERNEL_COLUMN.into(),
        stands_for: format!(
            "the host kernel's page cache (Linux {}), the same dd through std::fs in a memory cgroup of {}",
            kernel_release(),
            fmt_size(p.mem_bytes)
        ),
        metrics,
        vmstat: Named::new(),
    };
    Ok((col, v, notes))
}

/// The same dd through the kernel's page cache (run in the memory cgroup
/// by [`kernel::run`]). Parameters: `dirs` (backend name to directory),
/// `file_bytes`, `block_bytes`, `iterations`, `runs`. Returns
/// `{"workloads": {"tmpfs-async": {"elapsed_s": [...]}, ...}}`.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    use std::io::Write;
    let num = |k: &str| params.get(k).and_then(|x| x.as_u64()).ok_or_else(|| format!("parameter {k} missing"));
    let file_bytes = num("file_bytes")?;
    let block = num("block_bytes")?.max(1);
    let iterations = num("iterations")? as usize;
    let runs = num("runs")?.max(1) as usize;
    let dirs = params.get("dirs").and_then(|d| d.as_object()).ok_or("parameter dirs missing")?;
    let buf = pattern(block as usize);
    let mut out = serde_json::Map::new();
    let mut file_fs = String::new();
    for &(b, m) in &WORKLOADS {
        let Some(dir) = dirs.get(b.name()).and_then(|d| d.as_str()) else { continue };
        let dir = PathBuf::from(dir);
        if b == Backend::File {
            file_fs = if is_tmpfs(&dir) { "tmpfs".into() } else { "a disk filesystem".into() };
        }
        let path = dir.join(format!("dd-{}", workload_name(b, m)));
        let once = || -> std::result::Result<f64, String> {
            let err = |e: std::io::Error| format!("{}: {e}", path.display());
            let start = Instant::now();
            let mut f = std::fs::File::create(&path).map_err(err)?;
            let mut off = 0;
            while off < file_bytes {
                let n = block.min(file_bytes - off) as usize;
                f.write_all(&buf[..n]).map_err(err)?;
                off += n as u64;
            }
            if m == Mode::Fdatasync {
                f.sync_data().map_err(err)?;
            }
            drop(f);
            let secs = start.elapsed().as_secs_f64();
            std::fs::remove_file(&path).map_err(err)?;
            Ok(secs)
        };
        let mut el = Vec::new();
        for _ in 0..runs {
            once()?;
            for _ in 0..iterations {
                el.push(once()?);
            }
        }
        out.insert(workload_name(b, m), serde_json::json!({ "elapsed_s": el }));
    }
    Ok(serde_json::json!({ "workloads": out, "file_fs": file_fs }))
}

/// Elapsed per iteration, one line per variant, one chart per workload.
fn plot_elapsed(dir: &Path, cols: &[VariantResult], p: &DdParams) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let mut files = Vec::new();
    for &(b, m) in &WORKLOADS {
        let w = workload_name(b, m);
        let series: Vec<plot::Series> = cols
            .iter()
            .filter(|c| !c.samples(&format!("{w} elapsed_s")).is_empty())
            .map(|c| plot::Series {
                name: c.name.clone(),
                points: c
                    .samples(&format!("{w} elapsed_s"))
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| ((i + 1) as f64, s * 1e3))
                    .collect(),
            })
            .collect();
        let path = dir.join(format!("dd-{w}-elapsed.svg"));
        plot::line_chart(
            &path,
            &format!("dd {w}: {} per iteration ({} runs x {})", fmt_size(p.file_bytes), p.runs, p.iterations),
            "iteration",
            "elapsed (ms)",
            &series,
        )?;
        files.push(path.display().to_string());
    }
    Ok(files)
}

fn max_of(v: &[f64]) -> f64 {
    v.iter().copied().filter(|x| !x.is_nan()).fold(f64::NAN, f64::max)
}

/// The seed's claims against this run.
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
    for &(be, m) in &WORKLOADS {
        let w = workload_name(be, m);
        let metric = format!("{w} elapsed_s");
        let (mb, ma) = (r.mean(BEFORE, &metric), r.mean(AFTER, &metric));
        let pct = pct_better(mb, ma, Better::Lower);
        let sig = significant(b.samples(&metric), a.samples(&metric));
        let seed = match (be, m) {
            (Backend::Tmpfs, Mode::Async) => "faster: tmpfs Max 0.51 -> 0.49 s (+3.92%)",
            (Backend::File, Mode::Async) => "faster: Max ext3 +17%, ext4 +28%, xfs +83%, btrfs +0.2%",
            (_, Mode::Fdatasync) => "faster, smaller gain (sync figures not in the excerpt)",
        };
        out.push(Check {
            name: format!("{w}: accessed-v2 faster (Amean elapsed lower)"),
            seed: seed.into(),
            measured: format!(
                "{} -> {} ms ({} better)",
                render::fmt_value(mb * 1e3),
                render::fmt_value(ma * 1e3),
                fmt_pct(pct, sig)
            ),
            agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
            // The seed's figures are async; its sync results are not shown.
            counts: m == Mode::Async,
        });
        let cpu = format!("{w} cpu_s");
        let (cb, ca) = (r.mean(BEFORE, &cpu), r.mean(AFTER, &cpu));
        let cpct = pct_better(cb, ca, Better::Lower);
        out.push(Check {
            name: format!("{w}: writer CPU time lower (not preempted; not in the seed)"),
            seed: seed.into(),
            measured: format!(
                "{} -> {} ms ({} better)",
                render::fmt_value(cb * 1e3),
                render::fmt_value(ca * 1e3),
                fmt_pct(cpct, significant(b.samples(&cpu), a.samples(&cpu)))
            ),
            agrees: if cpct.is_nan() { None } else { Some(cpct > 0.0) },
            counts: false,
        });
        if m == Mode::Async {
            let (xb, xa) = (max_of(b.samples(&metric)), max_of(a.samples(&metric)));
            let pct = pct_better(xb, xa, Better::Lower);
            out.push(Check {
                name: format!("{w}: Max elapsed lower (the seed's row)"),
                seed: seed.into(),
                measured: format!(
                    "{} -> {} ms ({}); one sample each, so not counted",
                    render::fmt_value(xb * 1e3),
                    render::fmt_value(xa * 1e3),
                    fmt_pct(pct, false)
                ),
                agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                counts: false,
            });
        }
    }
    // The profile figures: mark_page_accessed work per page, per backend.
    for be in [Backend::Tmpfs, Backend::File] {
        let per_page = |v: &str, measure: &str| {
            let ms: Vec<f64> = WORKLOADS
                .iter()
                .filter(|(b2, _)| *b2 == be)
                .map(|&(b2, m)| r.mean(v, &format!("{} {measure}", workload_name(b2, m))))
                .collect();
            report::amean(&ms)
        };
        let (mb, ma) = (per_page(BEFORE, "mark_page_accessed/page"), per_page(AFTER, "mark_page_accessed/page"));
        let (ib, ia) = (per_page(BEFORE, "init_page_accessed/page"), per_page(AFTER, "init_page_accessed/page"));
        let seed = match be {
            Backend::Tmpfs => "tmpfs: 59562 -> 94 samples, plus 1210 in init_page_accessed",
            Backend::File => "ext4 64566 -> 5322 (+2869 init), xfs 62126 -> 103 (+1904), ext3 86107 -> 23833 (+5036)",
        };
        out.push(Check {
            name: format!("{}: mark_page_accessed work per page drops sharply", be.name()),
            seed: seed.into(),
            measured: format!(
                "mark_page_accessed calls/page {:.3} -> {:.3} (init_page_accessed {:.3} -> {:.3})",
                mb, ma, ib, ia
            ),
            agrees: if mb.is_nan() || ma.is_nan() || mb == 0.0 { None } else { Some(ma <= mb * (1.0 - SHARP_DROP)) },
            counts: true,
        });
        let (rb, ra) = (per_page(BEFORE, "atomic_flag_rmw/page"), per_page(AFTER, "atomic_flag_rmw/page"));
        out.push(Check {
            name: format!("{}: fewer atomic flag RMWs per page", be.name()),
            seed: "the atomic SetPageReferenced on the visible page becomes a plain store before insertion".into(),
            measured: format!("atomic_flag_rmw/page {rb:.3} -> {ra:.3} (mean of async and fdatasync)"),
            agrees: if rb.is_nan() || ra.is_nan() { None } else { Some(ra < rb) },
            counts: true,
        });
    }
    out
}

fn fmt_per_page(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.3}")
    }
}

/// The readable report: setup, compare-kernels, the seed's table, the cost
/// per page, vmstat, the seed's claim against this run.
pub fn report(r: &ExperimentResult) -> String {
    let mut s = String::new();
    let p: Option<DdParams> = serde_json::from_value(r.params["dd"].clone()).ok();
    let _ = writeln!(
        s,
        "dd (seed {}: non-atomically mark page accessed during page cache allocation): {} of cache, files of {} \
         in {} blocks, {} run{} x {} iterations{}",
        r.seed,
        p.as_ref().map(|p| fmt_size(p.mem_bytes)).unwrap_or_default(),
        p.as_ref().map(|p| fmt_size(p.file_bytes)).unwrap_or_default(),
        p.as_ref().map(|p| fmt_size(p.block_bytes)).unwrap_or_default(),
        r.runs,
        if r.runs == 1 { "" } else { "s" },
        p.as_ref().map(|p| p.iterations).unwrap_or(0),
        if r.quick { " (quick)" } else { "" }
    );
    s.push_str(&r.render_setup());
    let _ = writeln!(
        s,
        "elapsed: open to the return of close (fdatasync included), unlink not timed; cpu: the writer thread's CPU \
         time over the same span (not the flusher's; stops while the thread is preempted)"
    );

    s.push_str(&r.render_compare_section());

    // The seed's table: Max elapsed (async), plus the means.
    let _ = writeln!(s);
    let _ = writeln!(s, "as the seed (elapsed in seconds; percentages against the first column, positive = better)");
    let mut rows =
        vec![std::iter::once(String::new()).chain(r.variants.iter().map(|v| v.name.clone())).collect::<Vec<_>>()];
    for m in [Mode::Async, Mode::Fdatasync] {
        for be in [Backend::Tmpfs, Backend::File] {
            let w = workload_name(be, m);
            for (label, measure, f) in [
                ("Max", "elapsed", max_of as fn(&[f64]) -> f64),
                ("Amean", "elapsed", report::amean as fn(&[f64]) -> f64),
                ("Amean", "cpu", report::amean as fn(&[f64]) -> f64),
            ] {
                let metric = format!("{w} {}", if measure == "cpu" { "cpu_s" } else { "elapsed_s" });
                let base = r.variants.first().map(|v| f(v.samples(&metric))).unwrap_or(f64::NAN);
                let mut row = vec![format!("{} dd {:<5} {label:<5} {measure}", m.name(), be.name())];
                for v in &r.variants {
                    let x = f(v.samples(&metric));
                    let sig = label == "Amean"
                        && v.name != r.variants[0].name
                        && significant(r.variants[0].samples(&metric), v.samples(&metric));
                    row.push(if x.is_nan() {
                        "-".into()
                    } else {
                        fmt_cell(x, pct_better(base, x, Better::Lower), sig).trim_start().to_string()
                    });
                }
                rows.push(row);
            }
        }
    }
    let right: Vec<bool> = (0..=r.variants.len()).map(|c| c > 0).collect();
    s.push_str(&render_table(&rows, &right));

    // Cost per page written (the seed's profile), pcache columns only.
    let pc: Vec<&VariantResult> = r.variants.iter().filter(|v| !v.vmstat.is_empty()).collect();
    let pright: Vec<bool> = (0..=pc.len()).map(|c| c > 0).collect();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "cost per page written, mean over runs (the seed's profile: mark_page_accessed samples, vanilla against \
         accessed-v2)"
    );
    let mut rows = vec![std::iter::once(String::new()).chain(pc.iter().map(|v| v.name.clone())).collect::<Vec<_>>()];
    for &(be, m) in &WORKLOADS {
        let w = workload_name(be, m);
        for (measure, _) in PER_PAGE {
            let metric = format!("{w} {measure}");
            let mut row = vec![metric.clone()];
            row.extend(pc.iter().map(|v| fmt_per_page(report::amean(v.samples(&metric)))));
            rows.push(row);
        }
    }
    s.push_str(&render_table(&rows, &pright));

    let _ = writeln!(s);
    let _ = writeln!(s, "vmstat deltas of the timed iterations, mean per run");
    let runs = r.runs.max(1) as f64;
    for &(be, m) in &WORKLOADS {
        let w = workload_name(be, m);
        s.push_str(&render_table(&vmstat_rows(&w, &pc, VM_ITEMS, &|_| runs), &pright));
    }

    s.push_str(&r.render_tail());
    s
}

/// `pcache bench dd`.
pub struct Dd;

impl Experiment for Dd {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "Seed 000, dd of a file of 1/10 of memory, repeated, async and fdatasync, memory and real files: 3.15 vanilla against accessed-v2."
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
        assert_eq!((v[0].tunables)().accessed_init, AccessedInit::Vanilla315);
        assert_eq!((v[1].tunables)().accessed_init, AccessedInit::AccessedV2);
        let p = DdParams::from_opts(&ExpOpts::default()).unwrap();
        assert_eq!((p.mem_bytes, p.file_bytes, p.iterations, p.runs), (FULL_MEM, FULL_MEM / 10 / 4096 * 4096, 10, 3));
        let q = DdParams::from_opts(&ExpOpts { quick: true, ..ExpOpts::default() }).unwrap();
        assert_eq!((q.mem_bytes, q.iterations, q.runs), (QUICK_MEM, 3, 3));
        let t = DdParams::from_opts(&ExpOpts { mem_bytes: Some(8 * MIB), ..ExpOpts::default() }).unwrap();
        assert_eq!(t.file_bytes, 8 * MIB / 10 / 4096 * 4096);
        assert!(t.file_bytes > 800 * 1024 - 4096);
        for bad in [
            ExpOpts { mem_bytes: Some(MIB), ..ExpOpts::default() },
            ExpOpts { runs: Some(0), ..ExpOpts::default() },
            ExpOpts { variants: Some(vec!["3.14".into()]), ..ExpOpts::default() },
        ] {
            assert!(matches!(DdParams::from_opts(&bad), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}

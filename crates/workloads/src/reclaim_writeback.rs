//! `reclaim-writeback`: seed 004, Mel Gorman's "do not writeback
//! filesystem pages in direct reclaim" series, Linux 3.1 against 3.2.
//!
//! The seed ran three workloads on XFS with dirty_ratio 40 and reported
//! that with the series fs_mark created files 4-14% faster, every test
//! finished sooner (mmap-strm not always), no page was written from direct
//! reclaim, and kswapd's efficiency (pages stolen over pages scanned) did
//! not change. This experiment runs the same three, scaled to a cache of
//! `mem_bytes`, on host files opened through [`PageCache::open`] (O_DIRECT),
//! once per variant (see [`crate::variants`]) and run:
//!
//! 1. **fsmark**, as `fs_mark -S0 -s FILE -n N -t T`: each of T threads
//!    creates its own files of `fsmark_file_bytes`, written in 64 KiB
//!    chunks and closed without fsync, about `fsmark_ratio` times the
//!    cache in all; once for each T of `fsmark_threads`. Files/s = files
//!    created / elapsed.
//! 2. **simple-wb**, parallel dd: `wb_threads` threads (default: one per
//!    CPU) each writing one file in 1 MiB blocks, `wb_ratio` times the
//!    cache in all.
//! 3. **mmap-strm**: there are no mappings yet, so a streaming write of a
//!    file `strm_ratio` times the cache in 1 MiB writes, then a rewrite of
//!    it interleaved with writes to a second file `strm_mix_ratio` times
//!    the cache (the seed's "mix of anonymous and file-backed mappings";
//!    the anonymous part is not modelled).
//!
//! Elapsed time runs from the first write to the return of the last (files
//! closed), as fs_mark -S0 times it; the dirty data left is then synced
//! outside the timing and that time reported as `sync_s`. Every run gets a
//! fresh cache and its files are unlinked after it. Runs alternate the
//! order of the variants (even runs in the given order, odd runs reversed).
//!
//! `opts.set` sets tunables by name for every variant, after its preset
//! ([`experiment::apply_sets`]). With `opts.plot_dir`, a sampler thread
//! reads `nr_dirty + nr_writeback` and `nr_free_pages` every
//! [`SAMPLE_INTERVAL_MS`] ms during the first run of each workload (its
//! sync included), drawn as one chart per workload and counter, one line
//! per variant. With `opts.kernel`, the fsmark and simple-wb workloads
//! also run through `std::fs` (buffered, no fsync, syncfs after, untimed)
//! in a memory cgroup of `mem_bytes` ([`kernel_workload`]), shown as one
//! more column, "kernel", for elapsed and files/s.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pcache::{Config, File, Item, OpenOptions, PageCache, ReclaimWriteback, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment;
use crate::experiment::{ExpOpts, ParamDoc};
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_cell, fmt_count, fmt_pct, fmt_size, render_table, vmstat_section};
use crate::report::{
    significant, sum_vmstat, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult,
};
use crate::runner::{self, into_map, Ctx, KernelColumn, Matrix, Measured, SeedExperiment, Variant};
use crate::stats::{pct_better, Better};
use crate::sys::{is_tmpfs, kernel_release, pattern};
use crate::variants::{self, Preset};
use crate::{Error, Result};

pub const EXPERIMENT: &str = "reclaim-writeback";
pub const SEED: &str = "004";
pub const SEED_CLAIM: &str = "3.2 against 3.1: fs_mark files/s up 4-14%, elapsed times down, no writes from direct \
                              reclaim, kswapd efficiency unchanged";
/// The variants the checks compare: the seed's before and after.
pub const BEFORE: &str = "3.1";
pub const AFTER: &str = "3.2";

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// fs_mark writes in 64 KiB chunks here.
const FSMARK_CHUNK: u64 = 64 * KIB;
/// dd's and the streaming writer's block.
const BLOCK: u64 = MIB;
/// Kswapd efficiency may move this many points and still be "unchanged".
pub const EFFICIENCY_TOLERANCE_POINTS: f64 = 10.0;
/// The plots' sampler reads the counters this often.
pub const SAMPLE_INTERVAL_MS: u64 = 2;

/// Seed 004 ran with dirty_ratio 40 (instead of 20) and the default
/// dirty_background_ratio of 10.
fn seed004(mode: ReclaimWriteback) -> Tunables {
    Tunables { reclaim_writeback: mode, dirty_ratio: 40, dirty_background_ratio: 10, ..Tunables::default() }
}

fn linux_3_1() -> Tunables {
    seed004(ReclaimWriteback::Writepage31)
}

fn linux_3_2() -> Tunables {
    seed004(ReclaimWriteback::Flusher32)
}

/// This experiment's variants.
pub const PRESETS: &[Preset] = &[
    Preset {
        experiment: EXPERIMENT,
        name: "3.1",
        stands_for: "Linux 3.1: direct reclaim and kswapd call ->writepage on dirty file pages at the inactive \
                     tail (ReclaimWriteback::Writepage31), dirty_ratio 40, dirty_background_ratio 10",
        default: true,
        tunables: linux_3_1,
    },
    Preset {
        experiment: EXPERIMENT,
        name: "3.2",
        stands_for: "Linux 3.2 with Mel Gorman's series (ee72886d8ed5 and followers): no file writeback from \
                     direct reclaim, kswapd only below DEF_PRIORITY-2, dirty pages tagged PG_reclaim for the \
                     flushers, throttling on congestion (ReclaimWriteback::Flusher32), dirty_ratio 40, \
                     dirty_background_ratio 10",
        default: true,
        tunables: linux_3_2,
    },
];

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReclaimWritebackOpts {
    /// Bytes of page cache (the arena).
    pub mem_bytes: u64,
    /// Variant names, the first the baseline column.
    pub variants: Vec<String>,
    /// Runs of every (workload, variant).
    pub runs: usize,
    /// fs_mark -s: bytes per file.
    pub fsmark_file_bytes: u64,
    /// fs_mark -t: one fsmark workload per thread count.
    pub fsmark_threads: Vec<usize>,
    /// fs_mark data, in multiples of the cache.
    pub fsmark_ratio: f64,
    /// simple-wb writers; 0 means one per CPU.
    pub wb_threads: usize,
    /// simple-wb data, in multiples of the cache.
    pub wb_ratio: f64,
    /// mmap-strm's streamed file, in multiples of the cache.
    pub strm_ratio: f64,
    /// mmap-strm's second file, in multiples of the cache.
    pub strm_mix_ratio: f64,
    /// Where to make the temporary directory (the system's temp dir if
    /// `None`).
    pub dir: Option<PathBuf>,
    /// Draw progress bars on stderr (only when it is a terminal).
    pub progress: bool,
    /// A label: whether these are the reduced `quick` sizes.
    pub quick: bool,
    /// Tunables set by name for every variant, applied after the preset
    /// (`--set NAME=VALUE`).
    #[serde(default)]
    pub set: Vec<(String, String)>,
    /// Write SVG plots of dirty, writeback and free pages over time here.
    #[serde(default)]
    pub plot_dir: Option<PathBuf>,
    /// Try the kernel column (the fsmark and simple-wb workloads through
    /// the kernel's page cache in a memory cgroup of `mem_bytes`).
    #[serde(default = "yes")]
    pub kernel: bool,
}

fn yes() -> bool {
    true
}

impl Default for ReclaimWritebackOpts {
    fn default() -> Self {
        ReclaimWritebackOpts {
            mem_bytes: 128 * MIB,
            variants: variants::defaults(PRESETS),
            runs: 5,
            fsmark_file_bytes: 10 * MIB,
            fsmark_threads: vec![1, 4, 16],
            fsmark_ratio: 3.0,
            wb_threads: 0,
            wb_ratio: 4.0,
            strm_ratio: 1.5,
            strm_mix_ratio: 0.5,
            dir: None,
            progress: true,
            quick: false,
            set: Vec::new(),
            plot_dir: None,
            kernel: true,
        }
    }
}

impl ReclaimWritebackOpts {
    /// Reduced sizes for the main job and CI: a 32 MiB cache, 1 MiB files,
    /// 3 runs.
    pub fn quick() -> Self {
        ReclaimWritebackOpts { mem_bytes: 32 * MIB, fsmark_file_bytes: MIB, runs: 3, quick: true, ..Self::default() }
    }

    /// The smallest useful sizes, for tests: an 8 MiB cache, 256 KiB files,
    /// one run, no progress bars.
    pub fn tiny() -> Self {
        ReclaimWritebackOpts {
            mem_bytes: 8 * MIB,
            fsmark_file_bytes: 256 * KIB,
            runs: 1,
            progress: false,
            quick: true,
            ..Self::default()
        }
    }

    /// Refuse values the experiment cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if !(4 * MIB..=(64 << 30)).contains(&self.mem_bytes) {
            return bad(format!("memory {} must be from 4 MiB to 64 GiB", fmt_size(self.mem_bytes)));
        }
        if self.runs == 0 || self.runs > 1000 {
            return bad(format!("runs {} must be from 1 to 1000", self.runs));
        }
        if !(4 * KIB..=self.mem_bytes.saturating_mul(64)).contains(&self.fsmark_file_bytes) {
            return bad(format!("fs_mark file size {} must be from 4 KiB to 64x memory", self.fsmark_file_bytes));
        }
        if self.fsmark_threads.is_empty() || self.fsmark_threads.iter().any(|&t| t == 0 || t > 256) {
            return bad(format!(
                "fs_mark thread counts {:?} must be a non-empty list of 1 to 256",
                self.fsmark_threads
            ));
        }
        if self.wb_threads > 256 {
            return bad(format!("simple-wb threads {} must be at most 256", self.wb_threads));
        }
        for (what, r) in [
            ("fs_mark ratio", self.fsmark_ratio),
            ("simple-wb ratio", self.wb_ratio),
            ("mmap-strm ratio", self.strm_ratio),
            ("mmap-strm mix ratio", self.strm_mix_ratio),
        ] {
            if !(r > 0.0 && r <= 64.0) {
                return bad(format!("{what} {r} must be above 0 and at most 64"));
            }
        }
        // Refuse bad --set values before anything runs.
        for p in variants::resolve(PRESETS, &self.variants)? {
            self.tunables(p)?;
        }
        Ok(())
    }

    /// A variant's tunables: its preset, then the `--set` overrides.
    fn tunables(&self, p: &Preset) -> Result<pcache::Tunables> {
        experiment::apply_sets((p.tunables)(), &self.set)
    }

    fn wb_threads(&self) -> usize {
        if self.wb_threads > 0 {
            self.wb_threads
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }

    fn bytes(&self, ratio: f64) -> u64 {
        (self.mem_bytes as f64 * ratio).round() as u64
    }

    /// The workloads, in run order.
    fn workloads(&self) -> Vec<Workload> {
        let mut w: Vec<Workload> = self
            .fsmark_threads
            .iter()
            .map(|&threads| {
                let total_files = (self.bytes(self.fsmark_ratio) as f64 / self.fsmark_file_bytes as f64).round();
                let per_thread = ((total_files / threads as f64).round() as usize).max(1);
                Workload::Fsmark { threads, per_thread }
            })
            .collect();
        let threads = self.wb_threads();
        let blocks = (self.bytes(self.wb_ratio).div_ceil(BLOCK) as usize).div_ceil(threads).max(1);
        w.push(Workload::SimpleWb { threads, blocks });
        w.push(Workload::MmapStrm {
            blocks: self.bytes(self.strm_ratio).div_ceil(BLOCK).max(1) as usize,
            mix_blocks: self.bytes(self.strm_mix_ratio).div_ceil(BLOCK).max(1) as usize,
        });
        w
    }
}

/// One workload at its computed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Fsmark { threads: usize, per_thread: usize },
    SimpleWb { threads: usize, blocks: usize },
    MmapStrm { blocks: usize, mix_blocks: usize },
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::Fsmark { threads, .. } => format!("fsmark-{threads}t"),
            Workload::SimpleWb { .. } => "simple-wb".into(),
            Workload::MmapStrm { .. } => "mmap-strm".into(),
        }
    }

    fn describe(self, opts: &ReclaimWritebackOpts) -> String {
        let mem = opts.mem_bytes as f64;
        match self {
            Workload::Fsmark { threads, per_thread } => {
                let total = (threads * per_thread) as u64 * opts.fsmark_file_bytes;
                format!(
                    "fs_mark -S0 -s {} -n {per_thread} -t {threads}: {threads} x {per_thread} files of {} \
                     ({}, {:.1}x memory) in 64 KiB writes, no fsync",
                    opts.fsmark_file_bytes,
                    fmt_size(opts.fsmark_file_bytes),
                    fmt_size(total),
                    total as f64 / mem
                )
            }
            Workload::SimpleWb { threads, blocks } => {
                let total = (threads * blocks) as u64 * BLOCK;
                format!(
                    "{threads} dd writers, each one file of {} in 1 MiB blocks ({}, {:.1}x memory)",
                    fmt_size(blocks as u64 * BLOCK),
                    fmt_size(total),
                    total as f64 / mem
                )
            }
            Workload::MmapStrm { blocks, mix_blocks } => format!(
                "stream {} ({:.1}x memory) in 1 MiB writes, then rewrite it interleaved with {} of a second file \
                 ({:.1}x); anonymous mappings are not modelled yet, so both are file writes",
                fmt_size(blocks as u64 * BLOCK),
                (blocks as u64 * BLOCK) as f64 / mem,
                fmt_size(mix_blocks as u64 * BLOCK),
                (mix_blocks as u64 * BLOCK) as f64 / mem
            ),
        }
    }
}

/// One run of one workload under one variant.
pub struct RunOut {
    elapsed_s: f64,
    sync_s: f64,
    files: u64,
    vm: VmStat,
    /// The sampler's readings, when asked for.
    timeline: Vec<Sample>,
}

/// One reading of the plots' sampler.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Milliseconds since the workload started.
    ms: f64,
    /// nr_dirty + nr_writeback.
    dirty_wb: u64,
    nr_free: u64,
}

fn sample_now(cache: &PageCache, t0: Instant) -> Sample {
    let vm = cache.vmstat();
    Sample {
        ms: t0.elapsed().as_secs_f64() * 1e3,
        dirty_wb: vm.get(Item::nr_dirty) + vm.get(Item::nr_writeback),
        nr_free: vm.get(Item::nr_free_pages),
    }
}

/// Read the counters every [`SAMPLE_INTERVAL_MS`] until `stop`, then once
/// more.
fn sampler(cache: &PageCache, stop: &AtomicBool, t0: Instant) -> Vec<Sample> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Acquire) {
        out.push(sample_now(cache, t0));
        std::thread::sleep(Duration::from_millis(SAMPLE_INTERVAL_MS));
    }
    out.push(sample_now(cache, t0));
    out
}

const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// Write `len` bytes at offset 0 in `chunk`-sized writes.
fn write_seq(f: &File, len: u64, chunk: u64, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off) as usize;
        write_block(f, off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

fn write_block(f: &File, off: u64, data: &[u8]) -> Result<()> {
    let done = f.write_at(data, off)?;
    if done != data.len() {
        return Err(Error::Check(format!("{}: wrote {done} of {} bytes at {off}", f.name(), data.len())));
    }
    Ok(())
}

/// Run `work(t)` on `threads` threads started together; returns the
/// seconds from the start until the last returned, and every path they
/// created.
fn parallel<F>(threads: usize, work: F) -> Result<(f64, Vec<PathBuf>)>
where
    F: Fn(usize, &mut Vec<PathBuf>) -> Result<()> + Sync,
{
    let barrier = Barrier::new(threads + 1);
    let (secs, results) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let mut paths = Vec::new();
                    let r = work(t, &mut paths);
                    (paths, r)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> =
            joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        (start.elapsed().as_secs_f64(), results)
    });
    let mut all = Vec::new();
    let mut first_err = None;
    for (paths, r) in results {
        all.extend(paths);
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((secs, all)),
    }
}

/// The timed part of a workload: (seconds, files created, their paths).
fn run_workload(
    cache: &PageCache,
    w: Workload,
    opts: &ReclaimWritebackOpts,
    dir: &Path,
    buf: &[u8],
) -> Result<(f64, u64, Vec<PathBuf>)> {
    match w {
        Workload::Fsmark { threads, per_thread } => {
            let (secs, paths) = parallel(threads, |t, paths| {
                for i in 0..per_thread {
                    let path = dir.join(format!("fsmark-{t:03}-{i:05}"));
                    let f = cache.open(&path, CREATE)?;
                    paths.push(path);
                    write_seq(&f, opts.fsmark_file_bytes, FSMARK_CHUNK, buf)?;
                    f.close()?;
                }
                Ok(())
            })?;
            let n = paths.len() as u64;
            Ok((secs, n, paths))
        }
        Workload::SimpleWb { threads, blocks } => {
            let (secs, paths) = parallel(threads, |t, paths| {
                let path = dir.join(format!("dd-{t:03}"));
                let f = cache.open(&path, CREATE)?;
                paths.push(path);
                write_seq(&f, blocks as u64 * BLOCK, BLOCK, buf)?;
                f.close()?;
                Ok(())
            })?;
            let n = paths.len() as u64;
            Ok((secs, n, paths))
        }
        Workload::MmapStrm { blocks, mix_blocks } => {
            let (a_path, b_path) = (dir.join("strm-large"), dir.join("strm-mix"));
            let start = Instant::now();
            let a = cache.open(&a_path, CREATE)?;
            let mut paths = vec![a_path];
            let b = cache.open(&b_path, CREATE)?;
            paths.push(b_path);
            let block = &buf[..BLOCK as usize];
            // The streaming write.
            for i in 0..blocks {
                write_block(&a, i as u64 * BLOCK, block)?;
            }
            // The rewrite of the large file interleaved, in proportion,
            // with the second file.
            let mut j = 0usize;
            for i in 0..blocks {
                write_block(&a, i as u64 * BLOCK, block)?;
                while j < mix_blocks && j * blocks < (i + 1) * mix_blocks {
                    write_block(&b, j as u64 * BLOCK, block)?;
                    j += 1;
                }
            }
            a.close()?;
            b.close()?;
            Ok((start.elapsed().as_secs_f64(), 2, paths))
        }
    }
}

/// One run of `w` in a fresh cache; with `sample`, a sampler thread reads
/// the dirty, writeback and free pages from the start of the workload to
/// the end of its sync.
fn run_one(
    variant: &Variant,
    w: Workload,
    opts: &ReclaimWritebackOpts,
    dir: &Path,
    buf: &[u8],
    sample: bool,
) -> Result<RunOut> {
    let cache =
        PageCache::new(Config { memory_bytes: opts.mem_bytes, tunables: variant.tunables, ..Config::default() })?;
    let before = cache.vmstat();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (res, timeline) = std::thread::scope(|s| {
        let sampler = sample.then(|| s.spawn(|| sampler(&cache, &stop, t0)));
        let res = run_workload(&cache, w, opts, dir, buf).and_then(|(elapsed_s, files, paths)| {
            let t = Instant::now();
            cache.sync_all()?;
            Ok((elapsed_s, t.elapsed().as_secs_f64(), files, paths))
        });
        stop.store(true, Ordering::Release);
        let timeline = sampler.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or_default();
        (res, timeline)
    });
    let (elapsed_s, sync_s, files, paths) = res?;
    let vm = cache.vmstat().delta(&before);
    for p in &paths {
        cache.unlink(p)?;
    }
    drop(cache);
    Ok(RunOut { elapsed_s, sync_s, files, vm, timeline })
}

fn kswapd_efficiency(vm: &VmStat) -> f64 {
    let scan = vm.get(Item::pgscan_kswapd);
    if scan == 0 {
        f64::NAN
    } else {
        vm.get(Item::pgsteal_kswapd) as f64 / scan as f64 * 100.0
    }
}

/// The counters reported per run beyond the times: (measure, unit).
const COUNTER_MEASURES: [(&str, &str); 9] = [
    ("kswapd_efficiency_%", "%"),
    ("nr_vmscan_write_direct", "pages"),
    ("nr_vmscan_write_kswapd", "pages"),
    ("nr_vmscan_immediate_reclaim", "pages"),
    ("pgrotated", "pages"),
    ("allocstall", "events"),
    ("pgscan_direct", "pages"),
    ("throttled_ms", "ms"),
    ("congestion_waits", "events"),
];

/// The values of [`COUNTER_MEASURES`] in one run.
fn counter_values(vm: &VmStat) -> [f64; 9] {
    let g = |i: Item| vm.get(i) as f64;
    [
        kswapd_efficiency(vm),
        g(Item::nr_vmscan_write_direct),
        g(Item::nr_vmscan_write_kswapd),
        g(Item::nr_vmscan_immediate_reclaim),
        g(Item::pgrotated),
        g(Item::allocstall),
        g(Item::pgscan_direct),
        g(Item::balance_dirty_pages_pause_ns) / 1e6,
        g(Item::congestion_waits),
    ]
}

/// The vmstat counters the report shows per workload.
const VM_ITEMS: &[Item] = &[
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::pgscan_direct,
    Item::pgsteal_direct,
    Item::allocstall,
    Item::pageoutrun,
    Item::nr_vmscan_write,
    Item::nr_vmscan_write_direct,
    Item::nr_vmscan_write_kswapd,
    Item::nr_vmscan_immediate_reclaim,
    Item::pgrotated,
    Item::pgpgout,
    Item::pgwriteback,
    Item::flusher_wakeups,
    Item::balance_dirty_pages_pauses,
    Item::balance_dirty_pages_pause_ns,
    Item::congestion_waits,
];

/// Measure every workload, one variant at a time: the pcache columns, and
/// the runs (their timelines) for the plots.
fn measure(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> Result<(Measured, Matrix<RunOut>)> {
    let workloads = opts.workloads();
    let names: Vec<String> = workloads.iter().map(|w| w.name()).collect();
    let buf = pattern(BLOCK as usize);
    let outs = ctx.each_variant(opts.runs, &names, |r, wi, vi| {
        let sample = r == 0 && opts.plot_dir.is_some();
        run_one(&ctx.variants[vi], workloads[wi], opts, ctx.tmp.path(), &buf, sample)
    })?;

    // Metrics, in workload order.
    let mut specs = Vec::new();
    for &w in &workloads {
        let n = w.name();
        if matches!(w, Workload::Fsmark { .. }) {
            specs.push(MetricSpec::new(&n, "files/s", "files/s", Better::Higher, Mean::Harmonic, true));
        }
        specs.push(MetricSpec::new(&n, "elapsed_s", "s", Better::Lower, Mean::Arithmetic, true));
        specs.push(MetricSpec::new(&n, "sync_s", "s", Better::Lower, Mean::Arithmetic, false));
        for (measure, unit) in COUNTER_MEASURES {
            let better = if measure.starts_with("kswapd_eff") { Better::Higher } else { Better::Lower };
            specs.push(MetricSpec::new(&n, measure, unit, better, Mean::Arithmetic, false));
        }
    }
    let mut columns = Vec::new();
    for (vi, v) in ctx.variants.iter().enumerate() {
        let mut metrics: Named<Samples> = Named::new();
        let mut vmstat = Named::new();
        for (wi, &w) in workloads.iter().enumerate() {
            let n = w.name();
            let runs = outs.runs(vi, wi);
            let mut put = |measure: &str, v: Vec<f64>| metrics.insert(format!("{n} {measure}"), Samples(v));
            if matches!(w, Workload::Fsmark { .. }) {
                put("files/s", runs.iter().map(|o| o.files as f64 / o.elapsed_s.max(1e-9)).collect());
            }
            put("elapsed_s", runs.iter().map(|o| o.elapsed_s).collect());
            put("sync_s", runs.iter().map(|o| o.sync_s).collect());
            for (k, (measure, _)) in COUNTER_MEASURES.iter().enumerate() {
                put(measure, runs.iter().map(|o| counter_values(&o.vm)[k]).collect());
            }
            let deltas: Vec<VmStat> = runs.iter().map(|o| o.vm.clone()).collect();
            vmstat.insert(n, sum_vmstat(&deltas));
        }
        columns.push(v.column(metrics, vmstat));
    }

    let mut notes = vec![
        "anonymous mappings are not modelled yet: mmap-strm writes two files through write_at, so nothing is \
         swapped (the seed's mmap-strm slowdowns came from extra swapping)"
            .to_string(),
        "host files with O_DIRECT on the device holding the temporary directory; the seed used XFS on a \
         4-disk RAID-0"
            .to_string(),
    ];
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if let Some(&t) = opts.fsmark_threads.iter().filter(|&&t| t > cpus).max() {
        notes.push(format!("up to {t} fs_mark threads on {cpus} CPUs: the threads share CPUs"));
    }
    if opts.runs < 2 {
        notes.push("one run: no spread, so no difference can be marked significant".into());
    }
    if !opts.set.is_empty() {
        let sets: Vec<String> = opts.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        notes.push(format!("tunables set for every variant, after its preset: {}", sets.join(", ")));
    }
    if opts.plot_dir.is_some() {
        notes.push(format!(
            "plots: the first run of each workload, sampled every {SAMPLE_INTERVAL_MS} ms by a thread of its own, \
             which that run's timings carry"
        ));
    }
    let params = serde_json::json!({
        "page_size": Config::default().page_size,
        "workloads": workloads.iter().map(|w| serde_json::json!({
            "name": w.name(),
            "description": w.describe(opts),
        })).collect::<Vec<_>>(),
        "timing": "elapsed_s: first write to the return of the last (files closed), no sync; \
                   sync_s: the sync_all after, untimed in elapsed",
        "vmstat": "deltas per workload, event counters summed over the runs",
    });
    let m = Measured { variants: columns, specs, params: into_map(params), extra: Default::default(), notes };
    Ok((m, outs))
}

/// Which workloads reclaim met dirty pages in (`extra.exercised`), and a
/// note on those it did not.
fn finish(result: &mut ExperimentResult) {
    let exercised = exercised_workloads(result);
    let idle: Vec<&str> = exercised.iter().filter(|(_, e)| !e).map(|(w, _)| w.as_str()).collect();
    if !idle.is_empty() {
        result.notes.push(format!(
            "not exercised: {}: reclaim met no dirty page there under any variant (no reclaim writes, no \
             PG_reclaim tagging), so the variants ran the same code and their differences are noise; their \
             checks are not counted. The flushers kept the inactive tail clean: written-once pages are dirty \
             only while young, and this model has one zone (the seed's machines had several)",
            idle.join(", ")
        ));
    }
    let ex_map: serde_json::Map<String, Value> = exercised.iter().map(|(w, e)| (w.clone(), Value::from(*e))).collect();
    if let Some(extra) = result.extra.as_object_mut() {
        extra.insert("exercised".into(), Value::Object(ex_map));
        extra.insert(
            "exercised_means".into(),
            Value::from(
                "reclaim met dirty pages at the inactive tail in some variant: nr_vmscan_write + \
                 nr_vmscan_immediate_reclaim > 0",
            ),
        );
    }
}

/// The workloads in order, with whether reclaim met dirty pages in them.
fn exercised_workloads(r: &ExperimentResult) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for s in &r.metric_specs {
        if !out.iter().any(|(w, _)| *w == s.workload) {
            out.push((s.workload.clone(), exercised(r, &s.workload)));
        }
    }
    out
}
/// Run the kernel column (fsmark and simple-wb): the column, the worker's
/// JSON and notes, or why not.
fn kernel_column(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> std::result::Result<KernelColumn, String> {
    let (workloads, tmp) = (&opts.workloads()[..], ctx.tmp.path());
    let dir = tmp.join("kernel");
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ws: Vec<Value> = workloads
        .iter()
        .filter_map(|&w| match w {
            Workload::Fsmark { threads, per_thread } => Some(serde_json::json!({
                "name": w.name(), "kind": "fsmark", "threads": threads, "files": per_thread,
                "file_bytes": opts.fsmark_file_bytes, "chunk_bytes": FSMARK_CHUNK,
            })),
            Workload::SimpleWb { threads, blocks } => Some(serde_json::json!({
                "name": w.name(), "kind": "simple-wb", "threads": threads, "files": 1,
                "file_bytes": blocks as u64 * BLOCK, "chunk_bytes": BLOCK,
            })),
            Workload::MmapStrm { .. } => None,
        })
        .collect();
    let params = serde_json::json!({
        "dir": dir.to_string_lossy(),
        "runs": opts.runs,
        "workloads": ws,
    });
    let v = kernel::run(EXPERIMENT, opts.mem_bytes, &params)?;
    let out = v.get("workloads").and_then(|w| w.as_object()).ok_or("the kernel worker returned no workloads")?;
    let mut metrics: Named<Samples> = Named::new();
    for &w in workloads {
        let n = w.name();
        let Some(x) = out.get(&n) else { continue };
        let list = |k: &str| -> Vec<f64> {
            x.get(k)
                .and_then(|a| a.as_array())
                .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
                .unwrap_or_default()
        };
        let el = list("elapsed_s");
        if el.is_empty() {
            continue;
        }
        if matches!(w, Workload::Fsmark { .. }) {
            let files = x.get("files").and_then(|f| f.as_u64()).unwrap_or(0) as f64;
            metrics.insert(format!("{n} files/s"), Samples(el.iter().map(|&s| files / s.max(1e-9)).collect()));
        }
        metrics.insert(format!("{n} elapsed_s"), Samples(el));
        metrics.insert(format!("{n} sync_s"), Samples(list("sync_s")));
    }
    if metrics.is_empty() {
        return Err("the kernel worker measured nothing".into());
    }
    let fs = v.get("file_fs").and_then(|x| x.as_str()).unwrap_or("?");
    let notes = vec![format!(
        "kernel column: the host kernel ({}) through std::fs, buffered, in a memory cgroup of {}: fsmark and \
         simple-wb only (no mmap-strm), files on {fs} in {}, closed without fsync, then syncfs outside the \
         timing; no vmstat, so no counters, and the kernel's own dirty limits (not dirty_ratio 40)",
        kernel_release(),
        fmt_size(opts.mem_bytes),
        opts.dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "the system temp dir".into())
    )];
    let stands_for = format!(
        "the host kernel's page cache (Linux {}), the same fsmark and simple-wb through std::fs in a memory \
             cgroup of {}",
        kernel_release(),
        fmt_size(opts.mem_bytes)
    );
    Ok(KernelColumn::new(stands_for, metrics, v, notes))
}

/// The fsmark and simple-wb workloads through the kernel's page cache (run
/// in the memory cgroup by [`kernel::run`]), as fs_mark -S0 runs them:
/// every thread creates its files with `std::fs`, writes them in chunks and
/// closes them without fsync, timed; then a syncfs of the directory,
/// timed apart, and the files are removed. Parameters: `dir`, `runs`,
/// `workloads` (each `name`, `threads`, `files` per thread, `file_bytes`,
/// `chunk_bytes`). Returns `{"workloads": {"fsmark-1t": {"files": n,
/// "elapsed_s": [...], "sync_s": [...]}, ...}, "file_fs": "..."}`.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let dir = PathBuf::from(params.get("dir").and_then(|d| d.as_str()).ok_or("parameter dir missing")?);
    let runs = params.get("runs").and_then(|r| r.as_u64()).ok_or("parameter runs missing")?.max(1);
    let ws = params.get("workloads").and_then(|w| w.as_array()).ok_or("parameter workloads missing")?;
    let dir_file = std::fs::File::open(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let syncfs = || -> std::result::Result<(), String> {
        // SAFETY: a valid fd of an open directory.
        if unsafe { libc::syncfs(dir_file.as_raw_fd()) } != 0 {
            return Err(format!("syncfs {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        Ok(())
    };
    // Start from a clean filesystem.
    syncfs()?;
    let mut out = serde_json::Map::new();
    for w in ws {
        let num = |k: &str| w.get(k).and_then(|x| x.as_u64()).ok_or_else(|| format!("workload parameter {k} missing"));
        let name = w.get("name").and_then(|x| x.as_str()).ok_or("workload parameter name missing")?;
        let threads = num("threads")?.clamp(1, 256) as usize;
        let files = num("files")? as usize;
        let file_bytes = num("file_bytes")?;
        let chunk = num("chunk_bytes")?.clamp(1, 64 * MIB);
        let buf = pattern(chunk as usize);
        let (mut elapsed, mut sync) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let timed = parallel(threads, |t, paths| {
                for i in 0..files {
                    let path = dir.join(format!("{name}-{t:03}-{i:05}"));
                    let err = |e: std::io::Error| Error::io(format!("writing {}", path.display()), e);
                    let mut f = std::fs::File::create(&path).map_err(err)?;
                    paths.push(path.clone());
                    let mut off = 0;
                    while off < file_bytes {
                        let n = chunk.min(file_bytes - off) as usize;
                        f.write_all(&buf[..n]).map_err(err)?;
                        off += n as u64;
                    }
                    drop(f);
                }
                Ok(())
            });
            let (secs, paths) = timed.map_err(|e| e.to_string())?;
            let t = Instant::now();
            syncfs()?;
            sync.push(t.elapsed().as_secs_f64());
            elapsed.push(secs);
            for p in &paths {
                std::fs::remove_file(p).map_err(|e| format!("removing {}: {e}", p.display()))?;
            }
        }
        out.insert(
            name.to_string(),
            serde_json::json!({ "files": threads * files, "elapsed_s": elapsed, "sync_s": sync }),
        );
    }
    let file_fs = if is_tmpfs(&dir) { "tmpfs" } else { "a disk filesystem" };
    Ok(serde_json::json!({ "workloads": out, "file_fs": file_fs }))
}

/// Dirty + writeback and free pages over the first run of each workload,
/// one line per variant: two charts per workload.
/// Dirty and free pages over the first run of each workload, one line per
/// pcache variant (the kernel column has no timeline).
fn plot_timelines(
    dir: &Path,
    columns: &[VariantResult],
    outs: &Matrix<RunOut>,
    opts: &ReclaimWritebackOpts,
) -> Result<Vec<String>> {
    let workloads = opts.workloads();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let mut files = Vec::new();
    for (wi, &w) in workloads.iter().enumerate() {
        let n = w.name();
        for (what, label, f) in [
            ("dirty", "nr_dirty + nr_writeback (pages)", (|s: &Sample| s.dirty_wb) as fn(&Sample) -> u64),
            ("free", "nr_free_pages (pages)", |s: &Sample| s.nr_free),
        ] {
            let series: Vec<plot::Series> = columns
                .iter()
                .take(outs.variants())
                .enumerate()
                .filter_map(|(vi, col)| {
                    let tl = &outs.runs(vi, wi).first()?.timeline;
                    (!tl.is_empty()).then(|| plot::Series {
                        name: col.name.clone(),
                        points: tl.iter().map(|s| (s.ms, f(s) as f64)).collect(),
                    })
                })
                .collect();
            if series.is_empty() {
                continue;
            }
            let path = dir.join(format!("{EXPERIMENT}-{n}-{what}.svg"));
            plot::line_chart(
                &path,
                &format!(
                    "{EXPERIMENT} {n}: {what} pages, run 1, {} cache (the sync included)",
                    fmt_size(opts.mem_bytes)
                ),
                "time since the first write (ms)",
                label,
                &series,
            )?;
            files.push(path.display().to_string());
        }
    }
    Ok(files)
}

/// Whether reclaim met dirty pages in workload `w` under some variant:
/// wrote them (3.1) or tagged them for the flushers (3.2).
fn exercised(r: &ExperimentResult, w: &str) -> bool {
    r.variants.iter().any(|v| {
        v.vm(w, Item::nr_vmscan_write).unwrap_or(0) + v.vm(w, Item::nr_vmscan_immediate_reclaim).unwrap_or(0) > 0
    })
}

const NOT_EXERCISED: &str = " [not exercised]";

/// The seed's claims against this run, 3.1 against 3.2. Checks of
/// workloads that did not exercise the mechanism do not count.
fn checks(r: &ExperimentResult) -> Vec<Check> {
    let workloads = &exercised_workloads(r)[..];
    let (b, a) = match r.pair(BEFORE, AFTER) {
        Ok(pair) => pair,
        Err(missing) => return vec![missing],
    };
    let tag = |ex: bool| if ex { "" } else { NOT_EXERCISED };
    let mut out = Vec::new();
    // Files/s and elapsed, by the direction of the means.
    for (w, ex) in workloads {
        for (measure, seed) in [
            ("files/s", "up in all 13 configs (+0.7% to +14.4%)"),
            (
                "elapsed_s",
                if w == "mmap-strm" {
                    "down in 9 of 13; the slower 4 swapped more (no swap here)"
                } else {
                    "down in all 13 configs"
                },
            ),
        ] {
            let m = format!("{w} {measure}");
            let Some(spec) = r.spec(&m) else { continue };
            let (mb, ma) = (r.mean(BEFORE, &m), r.mean(AFTER, &m));
            let pct = pct_better(mb, ma, spec.better);
            let sig = significant(b.samples(&m), a.samples(&m));
            let (label, verb) = if measure == "files/s" { ("files/s", "up") } else { ("elapsed", "down") };
            out.push(Check {
                name: format!("{w} {label} {verb}"),
                seed: seed.into(),
                measured: format!(
                    "{} -> {} ({} better){}",
                    render::fmt_value(mb),
                    render::fmt_value(ma),
                    fmt_pct(pct, sig),
                    tag(*ex)
                ),
                agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                counts: *ex,
            });
        }
    }
    // No direct-reclaim writes with the series; told only when the
    // baseline wrote some.
    let sum = |v: &VariantResult, i: Item| workloads.iter().filter_map(|(w, _)| v.vm(w, i)).sum::<u64>();
    let (db, da) = (sum(b, Item::nr_vmscan_write_direct), sum(a, Item::nr_vmscan_write_direct));
    out.push(Check {
        name: format!("no direct-reclaim writes in {AFTER}"),
        seed: "none (patch 1)".into(),
        measured: format!(
            "nr_vmscan_write_direct per run {} -> {}{}",
            fmt_count(db as f64 / r.runs.max(1) as f64),
            fmt_count(da as f64 / r.runs.max(1) as f64),
            if db == 0 { format!(" ({BEFORE} wrote none either)") } else { String::new() }
        ),
        agrees: if db == 0 && da == 0 { None } else { Some(da == 0) },
        counts: true,
    });
    // Kswapd efficiency unchanged, per workload.
    for (w, ex) in workloads {
        let eff = |v: &VariantResult| {
            let scan = v.vm(w, Item::pgscan_kswapd).unwrap_or(0);
            let steal = v.vm(w, Item::pgsteal_kswapd).unwrap_or(0);
            if scan == 0 {
                f64::NAN
            } else {
                steal as f64 / scan as f64 * 100.0
            }
        };
        let (eb, ea) = (eff(b), eff(a));
        let d = ea - eb;
        out.push(Check {
            name: format!("{w} kswapd efficiency unchanged"),
            seed: format!("within a few points (+-{EFFICIENCY_TOLERANCE_POINTS:.0} allowed)"),
            measured: if d.is_nan() {
                format!("{} -> {} (kswapd scanned nothing){}", fmt_eff(eb), fmt_eff(ea), tag(*ex))
            } else {
                format!("{} -> {} ({d:+.1} points){}", fmt_eff(eb), fmt_eff(ea), tag(*ex))
            },
            agrees: if d.is_nan() { None } else { Some(d.abs() <= EFFICIENCY_TOLERANCE_POINTS) },
            counts: *ex,
        });
    }
    out
}

fn fmt_eff(e: f64) -> String {
    if e.is_nan() {
        "-".into()
    } else {
        format!("{e:.0}%")
    }
}

/// The report's title line.
fn title(r: &ExperimentResult, opts: &ReclaimWritebackOpts) -> String {
    format!(
        "reclaim-writeback (seed {}: do not write back filesystem pages in direct reclaim): {} of cache, {} run{}{}",
        r.seed,
        fmt_size(opts.mem_bytes),
        r.runs,
        if r.runs == 1 { "" } else { "s" },
        if r.quick { " (quick)" } else { "" }
    )
}

/// The report's body: how times are taken, the seed's summary, vmstat per
/// workload, which workloads reclaim met dirty pages in.
fn body(r: &ExperimentResult, opts: &ReclaimWritebackOpts) -> String {
    let mut s = String::new();
    let mem_label = format!("{}M", opts.mem_bytes / MIB);
    let _ = writeln!(
        s,
        "\nelapsed: first write to the return of the last, files closed, no sync (as fs_mark -S0); the dirty data \
         left is synced after, outside the timing (sync_s)"
    );

    // The seed's summary.
    let _ = writeln!(s);
    let _ = writeln!(s, "summary (means over runs; percentages against the first column, positive = better)");
    let workloads: Vec<String> =
        r.variants.first().map(|v| v.vmstat.keys().map(String::from).collect()).unwrap_or_default();
    let mut rows =
        vec![std::iter::once(String::new()).chain(r.variants.iter().map(|v| v.name.clone())).collect::<Vec<_>>()];
    let timed = |rows: &mut Vec<Vec<String>>, label: String, metric: &str| {
        let Some(spec) = r.spec(metric) else { return };
        let base = r.mean(&r.variants[0].name, metric);
        let mut row = vec![label];
        for v in &r.variants {
            let m = r.mean(&v.name, metric);
            if m.is_nan() {
                row.push("-".into());
                continue;
            }
            let sig = v.name != r.variants[0].name && significant(r.variants[0].samples(metric), v.samples(metric));
            row.push(fmt_cell(m, pct_better(base, m, spec.better), sig).trim_start().to_string());
        }
        rows.push(row);
    };
    for w in &workloads {
        timed(&mut rows, format!("{mem_label} Files/s mean {w}"), &format!("{w} files/s"));
    }
    for w in &workloads {
        timed(&mut rows, format!("{mem_label} Elapsed Time {w}"), &format!("{w} elapsed_s"));
    }
    for w in &workloads {
        timed(&mut rows, format!("{mem_label} Sync Time {w}"), &format!("{w} sync_s"));
    }
    let per_var = |rows: &mut Vec<Vec<String>>, label: String, f: &dyn Fn(&VariantResult) -> String| {
        let mut row = vec![label];
        row.extend(r.variants.iter().map(f));
        rows.push(row);
    };
    let runs = r.runs.max(1) as f64;
    for w in &workloads {
        per_var(&mut rows, format!("{mem_label} Kswapd efficiency {w}"), &|v| {
            let scan = v.vm(w, Item::pgscan_kswapd).unwrap_or(0);
            let steal = v.vm(w, Item::pgsteal_kswapd).unwrap_or(0);
            fmt_eff(if scan == 0 { f64::NAN } else { steal as f64 / scan as f64 * 100.0 })
        });
    }
    for (label, item, scale) in [
        ("nr_vmscan_write direct", Item::nr_vmscan_write_direct, 1.0),
        ("nr_vmscan_write kswapd", Item::nr_vmscan_write_kswapd, 1.0),
        ("Throttled ms", Item::balance_dirty_pages_pause_ns, 1e-6),
    ] {
        for w in &workloads {
            per_var(&mut rows, format!("{mem_label} {label} {w}"), &|v| {
                fmt_count(v.vm(w, item).map(|x| x as f64 * scale / runs).unwrap_or(f64::NAN))
            });
        }
    }
    let right: Vec<bool> = (0..=r.variants.len()).map(|c| c > 0).collect();
    s.push_str(&render_table(&rows, &right));

    s.push_str(&vmstat_section(r, "vmstat deltas, mean per run", VM_ITEMS, &|_, _| runs));

    if let Some(ex) = r.extra["exercised"].as_object() {
        let order: Vec<&str> = r.variants.first().map(|v| v.vmstat.keys().collect()).unwrap_or_default();
        let pick = |want: bool| {
            let v: Vec<&str> =
                order.iter().copied().filter(|w| ex.get(*w).and_then(|e| e.as_bool()) == Some(want)).collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let fsmark_tested = ex.iter().any(|(w, e)| w.starts_with("fsmark") && e.as_bool() == Some(true));
        let _ = writeln!(
            s,
            "exercised (reclaim met dirty pages): {}; not exercised: {}. The seed's headline, fs_mark files/s, {}",
            pick(true),
            pick(false),
            if fsmark_tested { "was tested" } else { "was not tested by this run" }
        );
    }
    s
}

/// `pcache bench reclaim-writeback`.
pub struct ReclaimWritebackExp;

impl SeedExperiment for ReclaimWritebackExp {
    type Params = ReclaimWritebackOpts;
    type Raw = Matrix<RunOut>;
    const NAME: &'static str = EXPERIMENT;
    const SEED: &'static str = SEED;
    const CLAIM: &'static str = SEED_CLAIM;
    const ABOUT: &'static str = "Seed 004, writeback from reclaim: fs_mark, parallel dd and streaming writes under \
                                 memory pressure, Linux 3.1 against 3.2, compare-kernels report.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "opts";
    const PARAMS: &'static [ParamDoc] = &[
        ParamDoc { name: "file_size", help: "fs_mark file size, e.g. 10M [default: 10M; quick: 1M]" },
        ParamDoc { name: "fsmark_threads", help: "fs_mark thread counts, comma-separated [default: 1,4,16]" },
        ParamDoc { name: "wb_threads", help: "simple-wb writers [default: one per CPU]" },
    ];

    fn smoke() -> ExpOpts {
        ExpOpts {
            mem_bytes: Some(8 << 20),
            runs: Some(1),
            quick: true,
            params: vec![("file_size".into(), "256K".into())],
            ..ExpOpts::default()
        }
    }
    fn params(opts: &ExpOpts) -> Result<ReclaimWritebackOpts> {
        ReclaimWritebackOpts::from_exp(opts)
    }
    fn shape(p: &ReclaimWritebackOpts) -> (&[String], usize, bool) {
        (&p.variants, p.runs, p.quick)
    }
    fn measure(ctx: &Ctx<'_>, p: &ReclaimWritebackOpts) -> Result<(Measured, Matrix<RunOut>)> {
        measure(ctx, p)
    }
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }
    fn kernel_column(ctx: &Ctx<'_>, p: &ReclaimWritebackOpts) -> std::result::Result<KernelColumn, String> {
        kernel_column(ctx, p)
    }
    fn plot(dir: &Path, r: &ExperimentResult, raw: &Matrix<RunOut>, p: &ReclaimWritebackOpts) -> Result<Vec<String>> {
        plot_timelines(dir, &r.variants, raw, p)
    }
    fn finish(r: &mut ExperimentResult) {
        finish(r)
    }
    fn checks(r: &ExperimentResult) -> Vec<Check> {
        checks(r)
    }
    fn title(r: &ExperimentResult, p: &ReclaimWritebackOpts) -> String {
        title(r, p)
    }
    fn report_body(r: &ExperimentResult, p: &ReclaimWritebackOpts) -> String {
        body(r, p)
    }
}

/// Run the experiment with every option spelled out (tests, and sizes the
/// command line does not reach).
pub fn run(opts: &ReclaimWritebackOpts) -> Result<(ExperimentResult, ReclaimWritebackOpts)> {
    opts.validate()?;
    let exp = ExpOpts {
        dir: opts.dir.clone(),
        progress: opts.progress,
        plot_dir: opts.plot_dir.clone(),
        set: opts.set.clone(),
        kernel: opts.kernel,
        ..ExpOpts::default()
    };
    runner::run_with::<ReclaimWritebackExp>(&exp, opts.clone())
}

impl ReclaimWritebackOpts {
    /// The options `pcache bench reclaim-writeback` asks for, checked.
    pub fn from_exp(opts: &ExpOpts) -> Result<ReclaimWritebackOpts> {
        let mut o = if opts.quick { Self::quick() } else { Self::default() };
        if let Some(v) = opts.mem_bytes {
            o.mem_bytes = v;
        }
        if let Some(v) = &opts.variants {
            o.variants = v.iter().map(|s| s.trim().to_string()).collect();
        }
        if let Some(v) = opts.runs {
            o.runs = v;
        }
        if let Some(v) = opts.param_size("file_size")? {
            o.fsmark_file_bytes = v;
        }
        if let Some(v) = opts.param_list("fsmark_threads")? {
            o.fsmark_threads = v;
        }
        if let Some(v) = opts.param_as("wb_threads")? {
            o.wb_threads = v;
        }
        o.set = opts.set.clone();
        o.plot_dir = opts.plot_dir.clone();
        o.kernel = opts.kernel;
        o.dir = opts.dir.clone();
        o.progress = opts.progress;
        o.validate()?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        assert!(ReclaimWritebackOpts::default().validate().is_ok());
        assert!(ReclaimWritebackOpts::quick().validate().is_ok());
        assert!(ReclaimWritebackOpts::tiny().validate().is_ok());
        let bad = [
            ReclaimWritebackOpts { mem_bytes: MIB, ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { runs: 0, ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { fsmark_file_bytes: 1, ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { fsmark_threads: vec![], ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { fsmark_threads: vec![0], ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { wb_ratio: f64::NAN, ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { strm_ratio: 0.0, ..ReclaimWritebackOpts::tiny() },
            ReclaimWritebackOpts { variants: vec!["2.6".into()], ..ReclaimWritebackOpts::tiny() },
        ];
        for o in bad {
            assert!(matches!(o.validate(), Err(Error::Invalid(_))), "{o:?}");
        }
    }

    #[test]
    fn sizes_scale_with_memory() {
        let o = ReclaimWritebackOpts { wb_threads: 2, ..ReclaimWritebackOpts::default() };
        let w = o.workloads();
        // 384 MiB of 10 MiB files: 38, split over the threads.
        assert_eq!(w[0], Workload::Fsmark { threads: 1, per_thread: 38 });
        assert_eq!(w[1], Workload::Fsmark { threads: 4, per_thread: 10 });
        assert_eq!(w[2], Workload::Fsmark { threads: 16, per_thread: 2 });
        assert_eq!(w[3], Workload::SimpleWb { threads: 2, blocks: 256 });
        assert_eq!(w[4], Workload::MmapStrm { blocks: 192, mix_blocks: 64 });
        let names: Vec<String> = w.iter().map(|w| w.name()).collect();
        assert_eq!(names, ["fsmark-1t", "fsmark-4t", "fsmark-16t", "simple-wb", "mmap-strm"]);
    }

    // Goal: the kernel workload (run here in-process, no cgroup) writes and
    // times every workload it is given, every run, and leaves no file.
    #[test]
    fn kernel_workload_times_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let params = serde_json::json!({
            "dir": dir.path().to_string_lossy(),
            "runs": 2,
            "workloads": [
                {"name": "fsmark-2t", "threads": 2, "files": 3, "file_bytes": 100_000, "chunk_bytes": FSMARK_CHUNK},
                {"name": "simple-wb", "threads": 2, "files": 1, "file_bytes": 2 * MIB, "chunk_bytes": BLOCK},
            ],
        });
        let v = kernel_workload(&params).unwrap();
        for (w, files) in [("fsmark-2t", 6), ("simple-wb", 2)] {
            assert_eq!(v["workloads"][w]["files"], files, "{v}");
            for k in ["elapsed_s", "sync_s"] {
                let el = v["workloads"][w][k].as_array().unwrap();
                assert_eq!(el.len(), 2, "{w} {k}");
                assert!(el.iter().all(|x| x.as_f64().is_some_and(|x| x >= 0.0)), "{w} {k}");
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(kernel_workload(&serde_json::json!({})).is_err());
    }

    // Goal: --set names are checked by validate, before anything runs.
    #[test]
    fn sets_are_validated() {
        let o = ReclaimWritebackOpts { set: vec![("dirty_ratio".into(), "20".into())], ..ReclaimWritebackOpts::tiny() };
        assert!(o.validate().is_ok());
        let p = variants::resolve(PRESETS, &o.variants).unwrap();
        assert_eq!(o.tunables(p[0]).unwrap().dirty_ratio, 20);
        let bad = ReclaimWritebackOpts { set: vec![("nosuch".into(), "1".into())], ..o };
        assert!(matches!(bad.validate(), Err(Error::Invalid(_))));
    }

    #[test]
    fn seed004_presets() {
        let v = variants::resolve(PRESETS, &variants::defaults(PRESETS)).unwrap();
        let names: Vec<&str> = v.iter().map(|p| p.name).collect();
        assert_eq!(names, ["3.1", "3.2"]);
        let t31 = (v[0].tunables)();
        let t32 = (v[1].tunables)();
        assert_eq!(t31.reclaim_writeback, ReclaimWriteback::Writepage31);
        assert_eq!(t32.reclaim_writeback, ReclaimWriteback::Flusher32);
        for t in [t31, t32] {
            assert_eq!((t.dirty_ratio, t.dirty_background_ratio), (40, 10));
        }
        assert!(variants::resolve(PRESETS, &["3.3".into()]).is_err());
        assert!(variants::resolve(PRESETS, &["3.1".into(), "3.1".into()]).is_err());
        assert!(variants::resolve(PRESETS, &[]).is_err());
    }
}

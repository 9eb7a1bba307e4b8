//! `lru-contention`: seed 002, Nikita Danilov's batched
//! `mark_page_accessed()` (2004), against 2.6.10's immediate activation and
//! against what Linux does today.
//!
//! The seed: Danilov put every `mark_page_accessed` call through a per-CPU
//! pagevec, so that the two-touch state machine runs under one
//! `zone->lru_lock` acquisition per 15 calls, "to decrease contention on
//! zone->lru_lock". Andrew Morton: it "does add more atomic ops (the extra
//! get_page/put_page)". Marcelo Tosatti's 8-way STP runs: reaim (database,
//! I/O intensive) peak jobs/min +6.4%, reaim compute -0.6%, kernbench -j4
//! 12% slower, "probably due to the additional atomic operations". Danilov
//! and Tosatti: batching changes the order of pages on the LRU lists, and
//! so the efficiency of VM scanning, mostly kswapd's.
//!
//! The workload, reaim/kernbench-like: `files` shared files whose pages
//! total `working_set_ratio` (1.25) times the cache; T threads (each of
//! `threads`, oversubscribing the CPUs on purpose) each open their own
//! handles on every file (POSIX_FADV_RANDOM, so a miss reads one page) and
//! read 4 KiB pages through [`File::read_at`] at Zipf(`zipf_s`) keys
//! scrambled over the whole working set, `ops_per_thread` reads each. The
//! working set does not fit, so misses keep coming, reclaim runs and pages
//! keep moving between the lists.
//!
//! Every (run, thread count, variant) gets a fresh cache: every page of
//! the working set is read once in file order (the cache ends full, its
//! pages inactive), each thread then reads `warm_ratio` times the working
//! set's page count (split over the threads) of its own Zipf keys untimed,
//! and then the timed reads start together on a barrier. Counters are
//! deltas over the timed part (kswapd's work included). Key streams depend
//! on the run, the thread count and the thread, not on the variant: every
//! variant reads the same keys. Runs alternate the order of the variants.
//!
//! Misses are served by a synthetic device that fills the frame in memory
//! (no I/O wait), so throughput is the CPU cost of hits, marking, list
//! moves and reclaim, which is where the variants differ; the hit ratio is
//! reported on its own. The kernel column ([`kernel_workload`]) reads real
//! files, whose misses wait for the disk.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pcache::{Advice, BackingDev, Config, File, Item, LruBatching, PageCache, Tunables, VmStat};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::ParamDoc;
use crate::experiment::{apply_sets, ExpOpts};
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_pct, fmt_size, fmt_value, vmstat_section};
use crate::report::{significant, sum_vmstat, Check, ExperimentResult, Mean, MetricSpec, Named, Samples};
use crate::runner::{self, into_map, Ctx, KernelColumn, Measured, SeedExperiment, KERNEL_COLUMN};
use crate::stats::{pct_better, Better};
use crate::sys::kernel_release;
use crate::variants::{self, Preset};
use crate::zipf::ZipfKeys;
use crate::{Error, Result};

pub const EXPERIMENT: &str = "lru-contention";
pub const SEED: &str = "002";
pub const SEED_CLAIM: &str = "batching mark_page_accessed through per-CPU pagevecs (Danilov, 2.6.10-rc2) cuts \
                              zone->lru_lock contention: reaim peak jobs/min +6.4% on an 8-way; but every batched \
                              page takes a reference, extra atomic ops (Andrew Morton), kernbench -j4 got 12% slower, \
                              and the batching changes the LRU order and so the efficiency of VM scanning, mostly \
                              kswapd's (Danilov, Tosatti)";
/// The variants the checks compare.
pub const BEFORE: &str = "2.6.10";
pub const DANILOV: &str = "danilov";
pub const TODAY: &str = "batched";

const MIB: u64 = 1 << 20;
/// The page size of every cache here, and the read size.
const PAGE: u64 = 4096;

fn tunables_2610() -> Tunables {
    Tunables { lru_batching: LruBatching::Immediate2610, ..Tunables::default() }
}

fn tunables_danilov() -> Tunables {
    Tunables { lru_batching: LruBatching::DanilovBatch, ..Tunables::default() }
}

fn tunables_batched() -> Tunables {
    Tunables { lru_batching: LruBatching::Batched, ..Tunables::default() }
}

/// This experiment's variants.
pub const PRESETS: &[Preset] = &[
    Preset {
        experiment: EXPERIMENT,
        name: BEFORE,
        stands_for: "Linux 2.6.10: mark_page_accessed activates an inactive, referenced page at once, taking \
                     lru_lock for each activation (LruBatching::Immediate2610)",
        default: true,
        tunables: tunables_2610,
    },
    Preset {
        experiment: EXPERIMENT,
        name: DANILOV,
        stands_for: "Nikita Danilov's patch: every mark_page_accessed call takes a page reference and goes into \
                     a per-CPU pagevec; the state machine runs under one lru_lock acquisition per 15 calls \
                     (LruBatching::DanilovBatch)",
        default: true,
        tunables: tunables_danilov,
    },
    Preset {
        experiment: EXPERIMENT,
        name: TODAY,
        stands_for: "Linux today: PG_referenced is set in place; only activations go through the per-CPU \
                     pagevec of 15 (LruBatching::Batched)",
        default: true,
        tunables: tunables_batched,
    },
];

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LruContentionOpts {
    /// Bytes of page cache (the arena).
    pub mem_bytes: u64,
    /// Variant names, the first the baseline column.
    pub variants: Vec<String>,
    /// Runs of every (thread count, variant).
    pub runs: usize,
    /// One workload per thread count.
    pub threads: Vec<usize>,
    /// Timed 4 KiB reads per thread.
    pub ops_per_thread: u64,
    /// Untimed Zipf reads before the timed ones, in multiples of the
    /// working set's page count, split over the threads.
    pub warm_ratio: f64,
    /// The files' pages in all, in multiples of the cache.
    pub working_set_ratio: f64,
    /// Files the working set is spread over (every thread reads all).
    pub files: usize,
    /// The Zipf exponent of the keys (0 is uniform).
    pub zipf_s: f64,
    /// Per-CPU batch sets (`Config::nr_cpus`); 0 means the machine's CPUs.
    pub nr_cpus: usize,
    /// Timed reads per thread in the kernel column (its misses wait for
    /// the disk, so it does fewer).
    pub kernel_ops_per_thread: u64,
    /// Run the kernel column.
    pub kernel: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// Tunables set by name for every variant, after the preset.
    pub set: Vec<(String, String)>,
    /// Where to make the kernel column's files (the system's temp dir if
    /// `None`).
    pub dir: Option<PathBuf>,
    /// Write SVG plots here.
    pub plot_dir: Option<PathBuf>,
    /// Draw progress bars on stderr (only when it is a terminal).
    pub progress: bool,
    /// A label: whether these are the reduced `quick` sizes.
    pub quick: bool,
}

impl Default for LruContentionOpts {
    fn default() -> Self {
        LruContentionOpts {
            mem_bytes: 128 * MIB,
            variants: variants::defaults(PRESETS),
            runs: 5,
            threads: vec![1, 2, 4],
            ops_per_thread: 1_000_000,
            warm_ratio: 4.0,
            working_set_ratio: 1.25,
            files: 4,
            zipf_s: 0.9,
            nr_cpus: 0,
            kernel_ops_per_thread: 100_000,
            kernel: true,
            seed: 1,
            set: Vec::new(),
            dir: None,
            plot_dir: None,
            progress: true,
            quick: false,
        }
    }
}

impl LruContentionOpts {
    /// Reduced sizes for the main job and CI: a 16 MiB cache, 500k reads
    /// per thread (50k in the kernel column), 3 runs.
    pub fn quick() -> Self {
        LruContentionOpts {
            mem_bytes: 16 * MIB,
            runs: 3,
            ops_per_thread: 500_000,
            kernel_ops_per_thread: 50_000,
            quick: true,
            ..Self::default()
        }
    }

    /// The smallest useful sizes, for tests: an 8 MiB cache, 1 and 2
    /// threads, 20k reads each, one run, no kernel column, no progress bars.
    pub fn tiny() -> Self {
        LruContentionOpts {
            mem_bytes: 8 * MIB,
            runs: 1,
            threads: vec![1, 2],
            ops_per_thread: 20_000,
            warm_ratio: 2.0,
            kernel_ops_per_thread: 5_000,
            kernel: false,
            progress: false,
            quick: true,
            ..Self::default()
        }
    }

    /// The common options over the defaults (quick or full).
    pub fn from_exp(o: &ExpOpts) -> Result<Self> {
        let base = if o.quick { Self::quick() } else { Self::default() };
        Ok(LruContentionOpts {
            threads: o.param_list("threads")?.unwrap_or(base.threads.clone()),
            ops_per_thread: o.param_as("ops_per_thread")?.unwrap_or(base.ops_per_thread),
            warm_ratio: o.param_as("warm_ratio")?.unwrap_or(base.warm_ratio),
            kernel_ops_per_thread: o.param_as("kernel_ops_per_thread")?.unwrap_or(base.kernel_ops_per_thread),
            mem_bytes: o.mem_bytes.unwrap_or(base.mem_bytes),
            variants: o.variants.clone().unwrap_or(base.variants.clone()),
            runs: o.runs.unwrap_or(base.runs),
            kernel: o.kernel,
            seed: o.seed,
            set: o.set.clone(),
            dir: o.dir.clone(),
            plot_dir: o.plot_dir.clone(),
            progress: o.progress,
            ..base
        })
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
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 256) {
            return bad(format!("thread counts {:?} must be a non-empty list of 1 to 256", self.threads));
        }
        let mut sorted = self.threads.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.threads.len() {
            return bad(format!("thread counts {:?} must not repeat", self.threads));
        }
        if !(1..=1_000_000_000).contains(&self.ops_per_thread) {
            return bad(format!("reads per thread {} must be from 1 to 10^9", self.ops_per_thread));
        }
        if self.kernel_ops_per_thread > self.ops_per_thread || self.kernel_ops_per_thread == 0 {
            return bad(format!(
                "kernel reads per thread {} must be from 1 to the reads per thread ({})",
                self.kernel_ops_per_thread, self.ops_per_thread
            ));
        }
        if !(self.warm_ratio >= 0.0 && self.warm_ratio <= 100.0) {
            return bad(format!("warm-up ratio {} must be from 0 to 100", self.warm_ratio));
        }
        if !(self.working_set_ratio > 0.0 && self.working_set_ratio <= 16.0) {
            return bad(format!("working set ratio {} must be above 0 and at most 16", self.working_set_ratio));
        }
        if !(1..=64).contains(&self.files) {
            return bad(format!("files {} must be from 1 to 64", self.files));
        }
        if !(self.zipf_s >= 0.0 && self.zipf_s <= 10.0) {
            return bad(format!("Zipf exponent {} must be from 0 to 10", self.zipf_s));
        }
        if self.nr_cpus > 1024 {
            return bad(format!("nr_cpus {} must be at most 1024", self.nr_cpus));
        }
        if self.pages_per_file() == 0 {
            return bad("the working set is smaller than one page per file".into());
        }
        for p in variants::resolve(PRESETS, &self.variants)? {
            apply_sets((p.tunables)(), &self.set)?;
        }
        Ok(())
    }

    fn cache_pages(&self) -> u64 {
        self.mem_bytes / PAGE
    }

    fn pages_per_file(&self) -> u64 {
        let total = (self.cache_pages() as f64 * self.working_set_ratio).round() as u64;
        total / self.files as u64
    }

    /// Pages of all the files: the key space.
    fn working_set_pages(&self) -> u64 {
        self.pages_per_file() * self.files as u64
    }

    fn warm_ops_per_thread(&self, threads: usize) -> u64 {
        let total = (self.working_set_pages() as f64 * self.warm_ratio).round() as u64;
        total.div_ceil(threads as u64)
    }

    fn nr_cpus(&self) -> usize {
        if self.nr_cpus > 0 {
            self.nr_cpus
        } else {
            cpus()
        }
    }

    fn describe(&self) -> String {
        let ws = self.working_set_pages() * PAGE;
        format!(
            "{} files of {} ({} in all, {:.2}x the cache), 4 KiB read_at at Zipf({}) keys scrambled over every \
             page, POSIX_FADV_RANDOM handles (one per thread and file); per cell: fresh cache, every page read \
             once in file order, {} untimed Zipf reads per thread (for {} threads: {}), then {} timed reads per \
             thread",
            self.files,
            fmt_size(self.pages_per_file() * PAGE),
            fmt_size(ws),
            ws as f64 / self.mem_bytes as f64,
            self.zipf_s,
            self.warm_ops_per_thread(1),
            self.threads.iter().max().copied().unwrap_or(1),
            self.warm_ops_per_thread(self.threads.iter().max().copied().unwrap_or(1)),
            self.ops_per_thread
        )
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn workload_name(threads: usize) -> String {
    format!("zipf-{threads}t")
}

/// SplitMix64: a well-mixed 64-bit value from `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ splitmix64(b))
}

/// The rank-to-key permutation's seed: the same hot pages in every run.
fn perm_seed(seed: u64) -> u64 {
    mix(seed, 0x5eed_0002)
}

/// Which stream: warm-up or timed.
const WARM: u64 = 1;
const TIMED: u64 = 2;

/// The seed of thread `thread`'s key stream in run `run` with `threads`
/// threads; the kernel column draws the same streams.
fn stream_seed(seed: u64, run: usize, threads: usize, thread: usize, phase: u64) -> u64 {
    mix(mix(mix(mix(seed, run as u64), threads as u64), thread as u64), phase)
}

/// `count` keys of a stream, as u32 (the key space is at most 2^32).
fn keys(z: &ZipfKeys, count: u64, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| z.sample(&mut rng) as u32).collect()
}

/// What page `index` of file `file` holds: its first 8 bytes.
fn stamp(file: usize, index: u64) -> u64 {
    ((file as u64) << 40) | index
}

/// The contents of page `index` of file `file`.
fn fill_page(buf: &mut [u8], file: usize, index: u64) {
    buf.fill((index % 251 + 1) as u8);
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&stamp(file, index).to_le_bytes()[..n]);
}

fn check_page(buf: &[u8], file: usize, index: u64, what: &str) -> std::result::Result<(), String> {
    let want = stamp(file, index).to_le_bytes();
    if buf.len() < 8 || buf[..8] != want {
        return Err(format!("{what}: file {file} page {index} holds the wrong data"));
    }
    Ok(())
}

/// A read-only device whose pages are made on demand: a miss costs a page
/// fill in memory, no I/O wait.
struct SynthDev {
    name: String,
    file: usize,
    len: u64,
    page_size: u64,
}

impl BackingDev for SynthDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let mut done = 0usize;
        for (i, b) in bufs.iter_mut().enumerate() {
            let off = pos + i as u64 * self.page_size;
            if off >= self.len {
                break;
            }
            fill_page(b, self.file, off / self.page_size);
            done += (self.len - off).min(b.len() as u64) as usize;
        }
        Ok(done)
    }

    fn write_pages(&self, _pos: u64, _bufs: &[&[u8]], _file_size: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn sync(&self, _data_only: bool) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn is_direct(&self) -> bool {
        true
    }

    fn bdi_name(&self) -> String {
        "lru-contention-synthetic".into()
    }
}

/// One timed cell: (run, thread count, variant).
struct CellOut {
    elapsed_s: f64,
    ops: u64,
    vm: VmStat,
    /// The LRU list sizes over the timed reads, if this cell was sampled.
    lru: Vec<LruSample>,
}

/// One look at the LRU lists during the timed reads.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LruSample {
    /// Seconds since the timed reads started.
    t_s: f64,
    active: u64,
    inactive: u64,
    free: u64,
}

impl LruSample {
    fn take(cache: &PageCache, start: Instant) -> Self {
        let vm = cache.vmstat();
        LruSample {
            t_s: start.elapsed().as_secs_f64(),
            active: vm.get(Item::nr_active_file),
            inactive: vm.get(Item::nr_inactive_file),
            free: vm.get(Item::nr_free_pages),
        }
    }

    /// nr_active_file / (nr_active_file + nr_inactive_file); NaN if both
    /// lists are empty.
    fn active_fraction(&self) -> f64 {
        let lru = self.active + self.inactive;
        if lru == 0 {
            f64::NAN
        } else {
            self.active as f64 / lru as f64
        }
    }
}

/// How often the LRU sampler looks when plots are asked for, and otherwise
/// (the series then only go to the JSON, so it looks less often).
const SAMPLE_MS_PLOT: u64 = 2;
const SAMPLE_MS: u64 = 5;
/// At most this many points of each sampled series go into the JSON.
const MAX_JSON_POINTS: usize = 200;

fn sample_interval_ms(opts: &LruContentionOpts) -> u64 {
    if opts.plot_dir.is_some() {
        SAMPLE_MS_PLOT
    } else {
        SAMPLE_MS
    }
}

/// The LRU sampler: passes both start barriers with the workers, then
/// takes a [`LruSample`] every `interval` until `stop` is set.
///
/// It hardly disturbs the measurement: it sleeps between looks, and a look
/// is one `cache.vmstat()`, which takes no lock and touches no page: it
/// reads the lists' length atomics and the free-page counters and sums the
/// event counters' per-thread rows (relaxed loads, some microseconds), so
/// at one look per 2-5 ms it costs well under 1% of one CPU, never makes a
/// worker wait for a lock, and at most costs a worker a cache miss on a
/// counter row it just read.
fn sampler(cache: &PageCache, barrier: &Barrier, stop: &AtomicBool, interval: Duration) -> Vec<LruSample> {
    barrier.wait();
    barrier.wait();
    let start = Instant::now();
    let mut out = Vec::with_capacity(1024);
    while !stop.load(Ordering::Relaxed) {
        out.push(LruSample::take(cache, start));
        std::thread::sleep(interval);
    }
    out
}

/// At most `max` of `v`, evenly spread, the first and the last included.
fn downsample<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    if v.len() <= max {
        return v.to_vec();
    }
    if max < 2 {
        return v[..max].to_vec();
    }
    let last = v.len() - 1;
    (0..max).map(|i| v[(i * last + (max - 1) / 2) / (max - 1)]).collect()
}

/// Read page `key` of the working set through `handles` into `buf` and
/// check what came back.
fn read_key(handles: &[File], pages_per_file: u64, key: u32, buf: &mut [u8]) -> Result<()> {
    let (file, index) = ((key as u64 / pages_per_file) as usize, key as u64 % pages_per_file);
    let n = handles[file].read_at(buf, index * PAGE)?;
    if n != buf.len() {
        return Err(Error::Check(format!("file {file} page {index}: read {n} of {} bytes", buf.len())));
    }
    check_page(buf, file, index, "pcache").map_err(Error::Check)
}

/// One worker: its handles, its warm-up reads, the two barriers, its timed
/// reads. Always reaches both barriers, so an error cannot hang the others.
fn worker(files: &[File], pages_per_file: u64, warm: &[u32], timed: &[u32], barrier: &Barrier) -> Result<()> {
    let mut buf = vec![0u8; PAGE as usize];
    let setup = (|| -> Result<Vec<File>> {
        let handles = files
            .iter()
            .map(|f| {
                let h = f.reopen()?;
                h.fadvise(0, 0, Advice::Random)?;
                Ok(h)
            })
            .collect::<Result<Vec<File>>>()?;
        for &k in warm {
            read_key(&handles, pages_per_file, k, &mut buf)?;
        }
        Ok(handles)
    })();
    barrier.wait();
    barrier.wait();
    let handles = setup?;
    for &k in timed {
        read_key(&handles, pages_per_file, k, &mut buf)?;
    }
    Ok(())
}

/// One cell; with `sample`, a sampler thread records the LRU list sizes
/// during the timed reads.
fn run_cell(
    tunables: Tunables,
    opts: &LruContentionOpts,
    zipf: &ZipfKeys,
    run: usize,
    threads: usize,
    sample: bool,
) -> Result<CellOut> {
    let cache = PageCache::new(Config {
        memory_bytes: opts.mem_bytes,
        page_size: PAGE as usize,
        nr_cpus: opts.nr_cpus(),
        tunables,
    })?;
    let ppf = opts.pages_per_file();
    let files = (0..opts.files)
        .map(|f| {
            let dev =
                SynthDev { name: format!("synthetic:lru-contention-{f}"), file: f, len: ppf * PAGE, page_size: PAGE };
            cache.open_dev(Arc::new(dev))
        })
        .collect::<pcache::Result<Vec<File>>>()?;
    // Every page once, in file order: the cache ends full of inactive pages.
    let mut buf = vec![0u8; PAGE as usize];
    for (fi, f) in files.iter().enumerate() {
        for index in 0..ppf {
            let n = f.read_at(&mut buf, index * PAGE)?;
            if n != buf.len() {
                return Err(Error::Check(format!("populate: file {fi} page {index}: read {n} bytes")));
            }
            check_page(&buf, fi, index, "populate").map_err(Error::Check)?;
        }
    }
    let warm_n = opts.warm_ops_per_thread(threads);
    let barrier = Barrier::new(threads + 1 + sample as usize);
    let stop = AtomicBool::new(false);
    let interval = Duration::from_millis(sample_interval_ms(opts));
    let (elapsed_s, before, results, mut lru) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|i| {
                let (files, barrier) = (&files, &barrier);
                s.spawn(move || {
                    let warm = keys(zipf, warm_n, stream_seed(opts.seed, run, threads, i, WARM));
                    let timed = keys(zipf, opts.ops_per_thread, stream_seed(opts.seed, run, threads, i, TIMED));
                    worker(files, ppf, &warm, &timed, barrier)
                })
            })
            .collect();
        let sampler = sample.then(|| {
            let (cache, barrier, stop) = (&cache, &barrier, &stop);
            s.spawn(move || sampler(cache, barrier, stop, interval))
        });
        barrier.wait();
        let before = cache.vmstat();
        let start = Instant::now();
        barrier.wait();
        let joined: Vec<std::thread::Result<Result<()>>> = joins.into_iter().map(|j| j.join()).collect();
        let elapsed_s = start.elapsed().as_secs_f64();
        // Stop the sampler before a worker's panic goes on, or the scope
        // would wait for it forever.
        stop.store(true, Ordering::Relaxed);
        let mut lru = sampler.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or_default();
        let results: Vec<Result<()>> =
            joined.into_iter().map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        if sample {
            // The lists as the last reader left them.
            lru.push(LruSample { t_s: elapsed_s, ..LruSample::take(&cache, start) });
        }
        (elapsed_s, before, results, lru)
    });
    let vm = cache.vmstat().delta(&before);
    for r in results {
        r?;
    }
    // The sampler's clock starts a moment after the main thread's.
    lru.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    drop(files);
    drop(cache);
    Ok(CellOut { elapsed_s, ops: opts.ops_per_thread * threads as u64, vm, lru })
}

/// The measures of every workload: (measure, unit, better, mean, in the
/// compare-kernels table).
const MEASURES: &[(&str, &str, Better, Mean, bool)] = &[
    ("ops/s", "reads/s", Better::Higher, Mean::Harmonic, true),
    ("lru_lock/access", "acquisitions", Better::Lower, Mean::Arithmetic, true),
    ("atomic_ops/access", "atomic RMWs", Better::Lower, Mean::Arithmetic, true),
    ("atomic_flag_rmw/access", "atomic RMWs", Better::Lower, Mean::Arithmetic, false),
    ("mark_batch_refs/access", "page references", Better::Lower, Mean::Arithmetic, false),
    ("pgactivate/access", "pages", Better::Lower, Mean::Arithmetic, true),
    ("hit_ratio_%", "%", Better::Higher, Mean::Arithmetic, true),
    ("kswapd_efficiency_%", "%", Better::Higher, Mean::Arithmetic, true),
    ("elapsed_s", "s", Better::Lower, Mean::Arithmetic, false),
];

/// The measures the kernel column has.
const KERNEL_MEASURES: [&str; 2] = ["ops/s", "hit_ratio_%"];

/// Page references taken by mark_page_accessed's per-CPU batches (each one
/// a get_page and a put_page, two atomic RMWs the flag counter does not
/// see): Danilov's batch takes one per call, today's only per activation
/// queued (about pgactivate), 2.6.10 none.
fn mark_batch_refs(mode: LruBatching, vm: &VmStat) -> u64 {
    match mode {
        LruBatching::Immediate2610 => 0,
        LruBatching::DanilovBatch => vm.get(Item::mark_page_accessed_calls),
        LruBatching::Batched => vm.get(Item::pgactivate),
    }
}

fn pct(num: u64, den: u64) -> f64 {
    if den == 0 {
        f64::NAN
    } else {
        num as f64 / den as f64 * 100.0
    }
}

/// The value of each of [`MEASURES`] in one cell.
fn measure_values(o: &CellOut, mode: LruBatching) -> Vec<f64> {
    let vm = &o.vm;
    let per = |x: u64| x as f64 / o.ops.max(1) as f64;
    let refs = mark_batch_refs(mode, vm);
    let (hit, miss) = (vm.get(Item::pgcache_hit), vm.get(Item::pgcache_miss));
    vec![
        o.ops as f64 / o.elapsed_s.max(1e-9),
        per(vm.get(Item::lru_lock_acquire)),
        per(vm.get(Item::atomic_flag_rmw) + 2 * refs),
        per(vm.get(Item::atomic_flag_rmw)),
        per(refs),
        per(vm.get(Item::pgactivate)),
        pct(hit, hit + miss),
        pct(vm.get(Item::pgsteal_kswapd), vm.get(Item::pgscan_kswapd)),
        o.elapsed_s,
    ]
}

/// Run the experiment with every option spelled out (tests, and sizes the
/// command line does not reach).
pub fn run_opts(opts: &LruContentionOpts) -> Result<(ExperimentResult, LruContentionOpts)> {
    opts.validate()?;
    let exp = ExpOpts {
        dir: opts.dir.clone(),
        progress: opts.progress,
        plot_dir: opts.plot_dir.clone(),
        set: opts.set.clone(),
        kernel: opts.kernel,
        seed: opts.seed,
        ..ExpOpts::default()
    };
    runner::run_with::<LruContention>(&exp, opts.clone())
}

/// The LRU list sizes sampled in the first run at the most threads, per
/// variant: what the plots draw beyond the columns.
pub struct LruSeries(Vec<(String, Vec<LruSample>)>);

/// The thread count whose first run samples the LRU list sizes.
fn sampled_threads(opts: &LruContentionOpts) -> usize {
    opts.threads.iter().copied().max().unwrap_or(1)
}

/// Run every thread count, one variant at a time: the pcache columns and
/// the sampled LRU list sizes.
fn measure(ctx: &Ctx<'_>, opts: &LruContentionOpts) -> Result<(Measured, LruSeries)> {
    let zipf = ZipfKeys::new(opts.working_set_pages(), opts.zipf_s, perm_seed(opts.seed)).map_err(Error::Invalid)?;
    let sampled = sampled_threads(opts);
    let workloads: Vec<String> = opts.threads.iter().map(|&t| workload_name(t)).collect();
    let mut outs = ctx.each_variant(opts.runs, &workloads, |r, ti, vi| {
        let t = opts.threads[ti];
        run_cell(ctx.variants[vi].tunables, opts, &zipf, r, t, r == 0 && t == sampled)
    })?;

    // (variant, samples) of the sampled cells.
    let lru_series: Vec<(String, Vec<LruSample>)> = ctx
        .variants
        .iter()
        .enumerate()
        .map(|(vi, v)| {
            let mut lru = Vec::new();
            for ti in 0..workloads.len() {
                if let Some(c) = outs.runs_mut(vi, ti).iter_mut().find(|c| !c.lru.is_empty()) {
                    lru = std::mem::take(&mut c.lru);
                    break;
                }
            }
            (v.preset.name.to_string(), lru)
        })
        .collect();
    let mut specs = Vec::new();
    for w in &workloads {
        for &(measure, unit, better, mean, table) in MEASURES {
            specs.push(MetricSpec::new(w, measure, unit, better, mean, table));
        }
    }
    let mut columns = Vec::new();
    for (vi, v) in ctx.variants.iter().enumerate() {
        let mode = v.tunables.lru_batching;
        let mut metrics: Named<Samples> = Named::new();
        let mut vmstat = Named::new();
        for (ti, w) in workloads.iter().enumerate() {
            let cells = outs.runs(vi, ti);
            let values: Vec<Vec<f64>> = cells.iter().map(|c| measure_values(c, mode)).collect();
            for (k, &(measure, ..)) in MEASURES.iter().enumerate() {
                metrics.insert(format!("{w} {measure}"), Samples(values.iter().map(|v| v[k]).collect()));
            }
            let deltas: Vec<VmStat> = cells.iter().map(|c| c.vm.clone()).collect();
            vmstat.insert(w.clone(), sum_vmstat(&deltas));
        }
        columns.push(v.column(metrics, vmstat));
    }

    let mut notes = vec![
        "misses are served by a synthetic device that fills the frame in memory (no I/O wait): throughput is \
         the CPU cost of hits, marking, list moves and reclaim, where the variants differ; a miss on a disk \
         would cost far more, so the hit ratio is reported on its own"
            .to_string(),
        "atomic_ops/access = atomic_flag_rmw/access + 2 x mark_batch_refs/access: each page reference a \
         mark_page_accessed batch takes is a get_page and a put_page (Andrew Morton's extra atomic ops), which \
         the flag counter does not see; the references are counted from vmstat: danilov = every \
         mark_page_accessed call, batched ~ pgactivate (one per activation queued), 2.6.10 = none"
            .to_string(),
        "the danilov variant marks every hit through its pagevec; the other two skip the mark when the page's \
         tree entry carries the PAGE_HOT hint (already active and referenced, where mark_page_accessed would \
         change nothing)"
            .to_string(),
        "a page waiting in a per-CPU batch (today's activations, every page Danilov marks) holds a reference, so \
         reclaim meeting it at the inactive tail cannot free it and puts it back: one way batching moves kswapd \
         efficiency (Morton: \"the page is only in the pagevec at that time\")"
            .to_string(),
    ];
    let ncpu = cpus();
    if let Some(&t) = opts.threads.iter().filter(|&&t| t > ncpu).max() {
        notes.push(format!(
            "up to {t} threads on {ncpu} CPUs: oversubscribed on purpose, as reaim and kernbench -j32 were; \
             per-CPU batches are keyed by the CPU a thread runs on ({} batch sets)",
            opts.nr_cpus()
        ));
    }
    notes.push(format!(
        "LRU list sizes (nr_active_file, nr_inactive_file, nr_free_pages) sampled every {} ms during the timed \
         reads of run 1 at {} threads, for every variant: extra.lru_sizes (at most {} points per series)",
        sample_interval_ms(opts),
        sampled,
        MAX_JSON_POINTS
    ));
    if opts.runs < 2 {
        notes.push("one run: no spread, so no difference can be marked significant".into());
    }
    // Throughput is timing; with other work on the machine it spreads.
    let spread = columns
        .iter()
        .flat_map(|v| workloads.iter().map(move |w| coeffvar(v.samples(&format!("{w} ops/s")))))
        .filter(|c| c.is_finite())
        .fold(0.0f64, f64::max);
    if spread > 10.0 {
        notes.push(format!(
            "throughput spread widely across runs (CoeffVar up to {spread:.0}%; see the load average): other \
             work on the machine; read the ops/s rows with that in mind. The per-access counts and the hit \
             ratio hardly depend on timing"
        ));
    }

    let lru_modes: serde_json::Map<String, Value> = ctx
        .variants
        .iter()
        .map(|v| (v.preset.name.to_string(), serde_json::to_value(v.tunables.lru_batching).unwrap_or(Value::Null)))
        .collect();
    let params = serde_json::json!({
        "page_size": PAGE,
        "read_bytes": PAGE,
        "nr_cpus": opts.nr_cpus(),
        "machine_cpus": ncpu,
        "cache_pages": opts.cache_pages(),
        "working_set_pages": opts.working_set_pages(),
        "pages_per_file": opts.pages_per_file(),
        "warm_ops_per_thread": opts.threads.iter()
            .map(|&t| (workload_name(t), Value::from(opts.warm_ops_per_thread(t))))
            .collect::<serde_json::Map<String, Value>>(),
        "lru_batching": lru_modes,
        "workload": opts.describe(),
        "workloads": opts.threads.iter().map(|&t| serde_json::json!({
            "name": workload_name(t),
            "description": format!("{t} thread{} reading the working set (see workload)", if t == 1 { "" } else { "s" }),
        })).collect::<Vec<_>>(),
        "timing": "ops/s: reads of all threads over the wall time from the barrier that starts them to the \
                   return of the last",
        "vmstat": "deltas over the timed reads (kswapd included), event counters summed over the runs",
    });
    let extra = serde_json::json!({ "lru_sizes": lru_sizes_json(opts, sampled, &lru_series) });
    let m = Measured { variants: columns, specs, params: into_map(params), extra: into_map(extra), notes };
    Ok((m, LruSeries(lru_series)))
}

/// The workloads of a result, in order.
fn result_workloads(r: &ExperimentResult) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in &r.metric_specs {
        if !out.contains(&s.workload) {
            out.push(s.workload.clone());
        }
    }
    out
}

/// The sampled LRU list sizes for the JSON: per variant, the series
/// downsampled to at most [`MAX_JSON_POINTS`] points.
fn lru_sizes_json(opts: &LruContentionOpts, threads: usize, series: &[(String, Vec<LruSample>)]) -> Value {
    let num = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
    let variants: serde_json::Map<String, Value> = series
        .iter()
        .map(|(name, samples)| {
            let d = downsample(samples, MAX_JSON_POINTS);
            let v = serde_json::json!({
                "samples": samples.len(),
                "t_ms": d.iter().map(|x| num((x.t_s * 1e6).round() / 1e3)).collect::<Vec<_>>(),
                "nr_active_file": d.iter().map(|x| x.active).collect::<Vec<_>>(),
                "nr_inactive_file": d.iter().map(|x| x.inactive).collect::<Vec<_>>(),
                "nr_free_pages": d.iter().map(|x| x.free).collect::<Vec<_>>(),
                "active_fraction": d.iter().map(|x| num(x.active_fraction())).collect::<Vec<_>>(),
            });
            (name.clone(), v)
        })
        .collect();
    serde_json::json!({
        "workload": workload_name(threads),
        "run": 1,
        "interval_ms": sample_interval_ms(opts),
        "cache_pages": opts.cache_pages(),
        "max_points": MAX_JSON_POINTS,
        "about": "pages on each list, sampled during the timed reads; t_ms from the start of the timed reads, \
                  the last point as the last reader finished; active_fraction = active / (active + inactive); \
                  evenly downsampled when more were taken (samples = how many)",
        "variants": variants,
    })
}

/// A variant's name as part of a file name.
fn file_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect()
}

/// Throughput against threads per variant; hit ratio against threads,
/// with the kernel where it ran; the LRU list sizes over time per variant
/// and the variants' active fractions over time.
fn plots(
    r: &ExperimentResult,
    opts: &LruContentionOpts,
    dir: &Path,
    lru_threads: usize,
    lru: &[(String, Vec<LruSample>)],
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let series = |measure: &str, with_kernel: bool| -> Vec<plot::Series> {
        r.variants
            .iter()
            .filter(|v| with_kernel || v.name != KERNEL_COLUMN)
            .map(|v| plot::Series {
                name: v.name.clone(),
                points: opts
                    .threads
                    .iter()
                    .map(|&t| (t as f64, r.mean(&v.name, &format!("{} {measure}", workload_name(t)))))
                    .collect(),
            })
            .collect()
    };
    let tp = dir.join("lru-contention-throughput.svg");
    plot::line_chart(
        &tp,
        &format!("lru-contention: 4 KiB Zipf reads, {} cache, {} CPUs", fmt_size(opts.mem_bytes), cpus()),
        "threads",
        "reads/s (Hmean over runs)",
        &series("ops/s", false),
    )?;
    let hp = dir.join("lru-contention-hit-ratio.svg");
    plot::line_chart(
        &hp,
        &format!("lru-contention: hit ratio, working set {:.2}x the cache", opts.working_set_ratio),
        "threads",
        "hit ratio % (mean over runs)",
        &series("hit_ratio_%", true),
    )?;
    let mut out = vec![tp, hp];
    let ms = |x: &LruSample| x.t_s * 1e3;
    for (name, samples) in lru.iter().filter(|(_, s)| !s.is_empty()) {
        let p = dir.join(format!("lru-sizes-{}.svg", file_part(name)));
        plot::line_chart(
            &p,
            &format!("lru-contention: LRU lists, {name}, {lru_threads} threads, {} cache", fmt_size(opts.mem_bytes)),
            "ms into the timed reads",
            "pages",
            &[
                plot::Series {
                    name: format!("{name} nr_active_file"),
                    points: samples.iter().map(|x| (ms(x), x.active as f64)).collect(),
                },
                plot::Series {
                    name: format!("{name} nr_inactive_file"),
                    points: samples.iter().map(|x| (ms(x), x.inactive as f64)).collect(),
                },
            ],
        )?;
        out.push(p);
    }
    let fractions: Vec<plot::Series> = lru
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(name, samples)| plot::Series {
            name: name.clone(),
            points: samples.iter().map(|x| (ms(x), x.active_fraction())).collect(),
        })
        .collect();
    if !fractions.is_empty() {
        let p = dir.join("lru-active-fraction.svg");
        plot::line_chart(
            &p,
            &format!("lru-contention: active / (active + inactive), {lru_threads} threads"),
            "ms into the timed reads",
            "active fraction of the file LRU",
            &fractions,
        )?;
        out.push(p);
    }
    Ok(out)
}

/// The coefficient of variation of the finite samples, in percent.
fn coeffvar(samples: &[f64]) -> f64 {
    let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return f64::NAN;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64;
    var.sqrt() / m * 100.0
}

/// The kernel workload's parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct KernelParams {
    files: Vec<PathBuf>,
    pages_per_file: u64,
    page_size: u64,
    zipf_s: f64,
    perm_seed: u64,
    seed: u64,
    threads: Vec<usize>,
    runs: usize,
    ops_per_thread: u64,
    warm_ops_per_thread: Vec<u64>,
}

/// Make the kernel column's files, run the workload in a memory cgroup,
/// and turn its answer into a column: (column, raw JSON, notes).
fn kernel_column(ctx: &Ctx<'_>, opts: &LruContentionOpts) -> std::result::Result<KernelColumn, String> {
    let workloads: Vec<String> = opts.threads.iter().map(|&t| workload_name(t)).collect();
    let tmp = &ctx.tmp;
    let ppf = opts.pages_per_file();
    let mut paths = Vec::new();
    let chunk_pages = (MIB / PAGE).min(ppf).max(1);
    let mut buf = vec![0u8; (chunk_pages * PAGE) as usize];
    for f in 0..opts.files {
        let path = tmp.path().join(format!("file-{f}"));
        let file = std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut index = 0;
        while index < ppf {
            let n = chunk_pages.min(ppf - index);
            for (i, page) in buf.chunks_mut(PAGE as usize).take(n as usize).enumerate() {
                fill_page(page, f, index + i as u64);
            }
            file.write_all_at(&buf[..(n * PAGE) as usize], index * PAGE)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            index += n;
        }
        file.sync_all().map_err(|e| format!("syncing {}: {e}", path.display()))?;
        kernel::drop_cached(&file);
        paths.push(path);
    }
    let params = KernelParams {
        files: paths,
        pages_per_file: ppf,
        page_size: PAGE,
        zipf_s: opts.zipf_s,
        perm_seed: perm_seed(opts.seed),
        seed: opts.seed,
        threads: opts.threads.clone(),
        runs: opts.runs,
        ops_per_thread: opts.kernel_ops_per_thread,
        warm_ops_per_thread: opts.threads.iter().map(|&t| opts.warm_ops_per_thread(t)).collect(),
    };
    let params = serde_json::to_value(&params).map_err(|e| format!("kernel parameters: {e}"))?;
    let v = kernel::run(EXPERIMENT, opts.mem_bytes, &params)?;
    let cells = v.get("cells").and_then(|c| c.as_array()).ok_or("the kernel worker returned no cells")?;
    let mut metrics: Named<Samples> = Named::new();
    for (w, &t) in workloads.iter().zip(&opts.threads) {
        let cell = cells
            .iter()
            .find(|c| c["threads"].as_u64() == Some(t as u64))
            .ok_or_else(|| format!("the kernel worker measured nothing for {t} threads"))?;
        for (measure, key) in KERNEL_MEASURES.iter().zip(["ops_s", "hit_ratio_%"]) {
            let samples: Vec<f64> = cell[key]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
                .unwrap_or_default();
            metrics.insert(format!("{w} {measure}"), Samples(samples));
        }
    }
    let mut notes = vec![format!(
        "kernel column: the host kernel (Linux {}) reading the same key streams with pread(2) from {} real files \
         on the temporary directory's filesystem, in a memory cgroup of {} (the worker process's own memory \
         is charged to it too), {} timed reads per thread (pcache: {}); hits told by cachestat(2) before each \
         read; ops/s = the sum over threads of reads / time inside pread, so the cachestat calls are not counted; \
         its misses wait for the disk",
        kernel_release(),
        opts.files,
        fmt_size(opts.mem_bytes),
        opts.kernel_ops_per_thread,
        opts.ops_per_thread
    )];
    if v["cachestat"].as_bool() == Some(false) {
        notes.push("kernel column: cachestat(2) is not available, so the kernel's hit ratio is unknown".into());
    }
    let stands_for = format!(
        "the host kernel's page cache (Linux {}), pread(2) of the same keys in a memory cgroup of {}",
        kernel_release(),
        fmt_size(opts.mem_bytes)
    );
    Ok(KernelColumn::new(stands_for, metrics, v, notes))
}

/// The same workload through the kernel's page cache, run by
/// `kernel::run` in a child process inside a memory cgroup: parameters in,
/// measurements out (JSON). For each run and thread count: drop the files'
/// cached pages, read every page once in file order, then the threads (each
/// with its own descriptors, POSIX_FADV_RANDOM) read their warm-up keys and
/// their timed keys, the same streams pcache reads, asking cachestat(2)
/// before each timed read whether the page is cached.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let p: KernelParams = serde_json::from_value(params.clone()).map_err(|e| format!("bad parameters: {e}"))?;
    if p.page_size == 0 || p.pages_per_file == 0 || p.files.is_empty() || p.warm_ops_per_thread.len() != p.threads.len()
    {
        return Err("bad parameters: empty files, pages or thread counts".into());
    }
    let n = p.pages_per_file * p.files.len() as u64;
    let zipf = ZipfKeys::new(n, p.zipf_s, p.perm_seed)?;
    let open = |path: &PathBuf| std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()));
    let mut cachestat = true;
    // results[thread count] = (ops_s, ops_s_wall, hit_ratio) per run
    let mut results: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); p.threads.len()];
    let mut buf = vec![0u8; p.page_size as usize];
    for run in 0..p.runs {
        for (ti, &threads) in p.threads.iter().enumerate() {
            // Cold, then every page once in file order.
            for (fi, path) in p.files.iter().enumerate() {
                let f = open(path)?;
                kernel::drop_cached(&f);
                for index in 0..p.pages_per_file {
                    let got = f.read_at(&mut buf, index * p.page_size).map_err(|e| format!("pread: {e}"))?;
                    if got != buf.len() {
                        return Err(format!("populate: short read of file {fi} page {index}"));
                    }
                }
            }
            let barrier = Barrier::new(threads + 1);
            let warm_n = p.warm_ops_per_thread[ti];
            let (wall_s, outs) = std::thread::scope(|s| {
                let joins: Vec<_> = (0..threads)
                    .map(|i| {
                        let (p, zipf, barrier, open) = (&p, &zipf, &barrier, &open);
                        s.spawn(move || kernel_thread(p, zipf, barrier, open, run, threads, i, warm_n))
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                barrier.wait();
                let outs: Vec<_> =
                    joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
                (start.elapsed().as_secs_f64(), outs)
            });
            let (mut rate, mut hits, mut told, mut ops) = (0.0, 0u64, 0u64, 0u64);
            for o in outs {
                let o = o?;
                rate += o.ops as f64 / o.pread_s.max(1e-9);
                hits += o.hits;
                told += o.told;
                ops += o.ops;
                cachestat &= o.told == o.ops;
            }
            let r = &mut results[ti];
            r.0.push(rate);
            r.1.push(ops as f64 / wall_s.max(1e-9));
            r.2.push(if told == 0 { f64::NAN } else { hits as f64 / told as f64 * 100.0 });
        }
    }
    let num = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
    let cells: Vec<Value> = p
        .threads
        .iter()
        .zip(&results)
        .map(|(&t, (rate, wall, hit))| {
            serde_json::json!({
                "threads": t,
                "ops_s": rate.iter().map(|&x| num(x)).collect::<Vec<_>>(),
                "ops_s_wall": wall.iter().map(|&x| num(x)).collect::<Vec<_>>(),
                "hit_ratio_%": hit.iter().map(|&x| num(x)).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(serde_json::json!({
        "kernel": kernel_release(),
        "cachestat": cachestat,
        "ops_per_thread": p.ops_per_thread,
        "ops_s_means": "reads / seconds inside pread, summed over threads (cachestat excluded); ops_s_wall: \
                        reads / wall time, cachestat included",
        "cells": cells,
    }))
}

/// One kernel-column thread's counts.
struct KernelThreadOut {
    ops: u64,
    pread_s: f64,
    hits: u64,
    /// Reads whose cached state cachestat could tell.
    told: u64,
}

#[allow(clippy::too_many_arguments)]
fn kernel_thread(
    p: &KernelParams,
    zipf: &ZipfKeys,
    barrier: &Barrier,
    open: &dyn Fn(&PathBuf) -> std::result::Result<std::fs::File, String>,
    run: usize,
    threads: usize,
    i: usize,
    warm_n: u64,
) -> std::result::Result<KernelThreadOut, String> {
    let ps = p.page_size;
    let mut buf = vec![0u8; ps as usize];
    let read = |fds: &[std::fs::File], key: u64, buf: &mut [u8]| -> std::result::Result<(), String> {
        let (file, index) = ((key / p.pages_per_file) as usize, key % p.pages_per_file);
        let got = fds[file].read_at(buf, index * ps).map_err(|e| format!("pread: {e}"))?;
        if got != buf.len() {
            return Err(format!("short read of file {file} page {index}"));
        }
        check_page(buf, file, index, "kernel")
    };
    let locate = |key: u64| ((key / p.pages_per_file) as usize, (key % p.pages_per_file) * ps);
    let setup = (|| -> std::result::Result<Vec<std::fs::File>, String> {
        let fds = p
            .files
            .iter()
            .map(|path| {
                let f = open(path)?;
                // SAFETY: a valid descriptor; fadvise only gives advice.
                unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_RANDOM) };
                Ok(f)
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let mut rng = StdRng::seed_from_u64(stream_seed(p.seed, run, threads, i, WARM));
        for _ in 0..warm_n {
            read(&fds, zipf.sample(&mut rng), &mut buf)?;
        }
        Ok(fds)
    })();
    barrier.wait();
    barrier.wait();
    let fds = setup?;
    let mut rng = StdRng::seed_from_u64(stream_seed(p.seed, run, threads, i, TIMED));
    let mut out = KernelThreadOut { ops: 0, pread_s: 0.0, hits: 0, told: 0 };
    let mut pread_ns = 0u128;
    for _ in 0..p.ops_per_thread {
        let key = zipf.sample(&mut rng);
        let (file, off) = locate(key);
        if let Some(c) = kernel::page_cached(&fds[file], off, ps) {
            out.told += 1;
            out.hits += c as u64;
        }
        let t0 = Instant::now();
        read(&fds, key, &mut buf)?;
        pread_ns += t0.elapsed().as_nanos();
        out.ops += 1;
    }
    out.pread_s = pread_ns as f64 / 1e9;
    Ok(out)
}

/// A hit ratio or kswapd efficiency must move this many points (and
/// significantly) to count as changed by the LRU order.
pub const CHANGE_POINTS: f64 = 0.5;

/// Per workload: (workload, mean of `a`, mean of `b`) for a metric.
fn per_workload(
    r: &ExperimentResult,
    workloads: &[String],
    a: &str,
    b: &str,
    measure: &str,
) -> Vec<(String, f64, f64)> {
    workloads
        .iter()
        .map(|w| {
            let m = format!("{w} {measure}");
            (w.clone(), r.mean(a, &m), r.mean(b, &m))
        })
        .collect()
}

fn short(w: &str) -> &str {
    w.strip_prefix("zipf-").unwrap_or(w)
}

/// The seed's claims against this run.
fn checks(r: &ExperimentResult) -> Vec<Check> {
    let workloads = &result_workloads(r)[..];
    let mut out = Vec::new();
    let have = |n: &str| r.variant(n).is_some();
    let most = workloads.last().cloned().unwrap_or_default();

    // 1. Batching cuts lru_lock acquisitions (Danilov's motive).
    if have(BEFORE) && have(TODAY) {
        let rows = per_workload(r, workloads, BEFORE, TODAY, "lru_lock/access");
        let told: Vec<bool> =
            rows.iter().filter(|(_, a, b)| a.is_finite() && b.is_finite()).map(|(_, a, b)| b < a).collect();
        out.push(Check {
            name: format!("{TODAY} takes fewer lru_lock acquisitions per access than {BEFORE}"),
            seed: "batching decreases contention on zone->lru_lock (Danilov)".into(),
            measured: rows
                .iter()
                .map(|(w, a, b)| format!("{} {} -> {}", short(w), fmt_value(*a), fmt_value(*b)))
                .collect::<Vec<_>>()
                .join("; "),
            agrees: if told.is_empty() { None } else { Some(told.iter().all(|&x| x)) },
            counts: true,
        });
    } else {
        out.extend(r.pair(BEFORE, TODAY).err());
    }
    if have(BEFORE) && have(DANILOV) {
        let rows = per_workload(r, workloads, BEFORE, DANILOV, "lru_lock/access");
        let told: Vec<bool> =
            rows.iter().filter(|(_, a, b)| a.is_finite() && b.is_finite()).map(|(_, a, b)| b < a).collect();
        out.push(Check {
            name: format!("{DANILOV} takes fewer lru_lock acquisitions per access than {BEFORE}"),
            seed: "batching decreases contention on zone->lru_lock (Danilov)".into(),
            measured: rows
                .iter()
                .map(|(w, a, b)| format!("{} {} -> {}", short(w), fmt_value(*a), fmt_value(*b)))
                .collect::<Vec<_>>()
                .join("; ")
                + &format!(
                    " (not counted: Danilov takes the lock once per 15 marks whatever they do, 2.6.10 once per \
                     activation, so which is fewer depends on how many marks activate; here pgactivate/access {})",
                    workloads
                        .iter()
                        .map(|w| fmt_value(r.mean(BEFORE, &format!("{w} pgactivate/access"))))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            agrees: if told.is_empty() { None } else { Some(told.iter().all(|&x| x)) },
            counts: false,
        });
    }

    // 2. Danilov's batch costs atomic ops (Andrew Morton).
    if have(DANILOV) && have(TODAY) {
        let rows = per_workload(r, workloads, TODAY, DANILOV, "atomic_ops/access");
        let told: Vec<bool> =
            rows.iter().filter(|(_, a, b)| a.is_finite() && b.is_finite()).map(|(_, a, b)| b > a).collect();
        out.push(Check {
            name: format!("{DANILOV} spends more atomic ops per access than {TODAY}"),
            seed: "the extra get_page/put_page adds atomic ops (Morton); kernbench -j4 12% slower (Tosatti)".into(),
            measured: rows
                .iter()
                .map(|(w, a, b)| format!("{} {} vs {}", short(w), fmt_value(*b), fmt_value(*a)))
                .collect::<Vec<_>>()
                .join("; "),
            agrees: if told.is_empty() { None } else { Some(told.iter().all(|&x| x)) },
            counts: true,
        });
    } else {
        out.extend(r.pair(DANILOV, TODAY).err());
    }
    if have(BEFORE) && have(DANILOV) {
        let rows = per_workload(r, workloads, BEFORE, DANILOV, "atomic_ops/access");
        let told: Vec<bool> =
            rows.iter().filter(|(_, a, b)| a.is_finite() && b.is_finite()).map(|(_, a, b)| b > a).collect();
        out.push(Check {
            name: format!("{DANILOV} spends more atomic ops per access than {BEFORE}"),
            seed: "the extra get_page/put_page adds atomic ops (Morton)".into(),
            measured: rows
                .iter()
                .map(|(w, a, b)| format!("{} {} vs {}", short(w), fmt_value(*b), fmt_value(*a)))
                .collect::<Vec<_>>()
                .join("; "),
            agrees: if told.is_empty() { None } else { Some(told.iter().all(|&x| x)) },
            counts: true,
        });
    }

    // 3. Throughput: the seed's evidence is mixed; not counted.
    let metric = format!("{most} ops/s");
    for (after, seed) in [
        (DANILOV, "reaim +6.4% peak jobs/min (8-way); reaim compute -0.6%; kernbench -j4 12% slower: mixed"),
        (TODAY, "not in the seed: today's answer to both objections (batch only activations)"),
    ] {
        let (Some(b), Some(a)) = (r.variant(BEFORE), r.variant(after)) else { continue };
        let (mb, ma) = (r.mean(BEFORE, &metric), r.mean(after, &metric));
        let p = pct_better(mb, ma, Better::Higher);
        let sig = significant(b.samples(&metric), a.samples(&metric));
        out.push(Check {
            name: format!("{after} throughput above {BEFORE} at {} threads", short(&most).trim_end_matches('t')),
            seed: seed.into(),
            measured: format!("{} -> {} reads/s ({})", fmt_value(mb), fmt_value(ma), fmt_pct(p, sig)),
            agrees: if p.is_nan() { None } else { Some(p > 0.0) },
            counts: false,
        });
    }

    // 4. LRU order: hit ratio and kswapd efficiency move; no direction
    //    claimed, so told as "changed" only when significant and at least
    //    CHANGE_POINTS.
    for (measure, label, seed) in [
        (
            "hit_ratio_%",
            "hit ratio",
            "batching changes the LRU order (Tosatti: better locality, less precise aging); no figure",
        ),
        (
            "kswapd_efficiency_%",
            "kswapd efficiency",
            "batching changes the efficiency of VM scanning, mostly kswapd's (Danilov; Tosatti agreed); no figure",
        ),
    ] {
        for after in [DANILOV, TODAY] {
            let (Some(b), Some(a)) = (r.variant(BEFORE), r.variant(after)) else { continue };
            let mut parts = Vec::new();
            let mut any_sig = false;
            let mut told = false;
            for w in workloads {
                let m = format!("{w} {measure}");
                let (mb, ma) = (r.mean(BEFORE, &m), r.mean(after, &m));
                let sig = significant(b.samples(&m), a.samples(&m));
                any_sig |= sig && (ma - mb).abs() >= CHANGE_POINTS;
                told |= mb.is_finite() && ma.is_finite();
                parts.push(format!(
                    "{} {} -> {} ({:+.3} pts{})",
                    short(w),
                    render::fmt_pct_value(mb),
                    render::fmt_pct_value(ma),
                    ma - mb,
                    if sig { " *" } else { "" }
                ));
            }
            out.push(Check {
                name: format!("{after} changes the {label} against {BEFORE}"),
                seed: format!("{seed} (told as a change: significant and at least {CHANGE_POINTS} points)"),
                measured: parts.join("; "),
                agrees: if !told || r.runs < 2 { None } else { Some(any_sig) },
                counts: false,
            });
        }
    }
    out
}

/// The vmstat counters the report shows per workload.
const VM_ITEMS: &[Item] = &[
    Item::pgcache_hit,
    Item::pgcache_miss,
    Item::mark_page_accessed_calls,
    Item::pgactivate,
    Item::pgdeactivate,
    Item::pgrefill,
    Item::lru_lock_acquire,
    Item::atomic_flag_rmw,
    Item::lru_drain,
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::pgscan_direct,
    Item::pgsteal_direct,
    Item::allocstall,
    Item::pageoutrun,
    Item::workingset_refault,
    Item::workingset_activate,
];

/// The report's title line.
fn title(r: &ExperimentResult, opts: &LruContentionOpts) -> String {
    format!(
        "lru-contention (seed {}: batched mark_page_accessed): {} of cache, {} run{}{}, {} CPUs",
        r.seed,
        fmt_size(opts.mem_bytes),
        r.runs,
        if r.runs == 1 { "" } else { "s" },
        if r.quick { " (quick)" } else { "" },
        r.params["machine_cpus"].as_u64().unwrap_or(0)
    )
}

/// The report's body: the workload and timing, the seed's summary,
/// vmstat.
fn body(r: &ExperimentResult) -> String {
    let mut s = String::from("\n");
    if let Some(w) = r.params["workload"].as_str() {
        let _ = writeln!(s, "workload: {w}");
    }
    if let Some(t) = r.params["timing"].as_str() {
        let _ = writeln!(s, "timing: {t}");
    }

    // Means of every measure, grouped by measure.
    let specs: Vec<&MetricSpec> =
        MEASURES.iter().flat_map(|&(m, ..)| r.metric_specs.iter().filter(move |s| s.measure == m)).collect();
    s.push_str(&render::means_table(r, &specs));

    let runs = r.runs.max(1) as f64;
    s.push_str(&vmstat_section(r, "vmstat deltas over the timed reads, mean per run", VM_ITEMS, &|_, _| runs));
    s
}

/// `pcache bench lru-contention`.
pub struct LruContention;

impl SeedExperiment for LruContention {
    type Params = LruContentionOpts;
    type Raw = LruSeries;
    const NAME: &'static str = EXPERIMENT;
    const SEED: &'static str = SEED;
    const CLAIM: &'static str = SEED_CLAIM;
    const ABOUT: &'static str = "Seed 002, threads hitting cached pages: 2.6.10 immediate activation against \
                                 batched mark_page_accessed.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "opts";
    const PARAMS: &'static [ParamDoc] = &[
        ParamDoc { name: "threads", help: "thread counts, one workload each, comma-separated [default: 1,2,4]" },
        ParamDoc { name: "ops_per_thread", help: "timed 4 KiB reads per thread [default: 1000000; quick: 500000]" },
        ParamDoc {
            name: "warm_ratio",
            help: "untimed Zipf reads first, in multiples of the working set's pages [default: 4]",
        },
        ParamDoc { name: "kernel_ops_per_thread", help: "timed reads per thread in the kernel column" },
    ];

    fn smoke() -> ExpOpts {
        let params =
            [("threads", "1,2"), ("ops_per_thread", "20000"), ("warm_ratio", "2"), ("kernel_ops_per_thread", "5000")];
        ExpOpts {
            mem_bytes: Some(8 << 20),
            runs: Some(1),
            quick: true,
            seed: 1,
            params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..ExpOpts::default()
        }
    }
    fn params(opts: &ExpOpts) -> Result<LruContentionOpts> {
        let o = LruContentionOpts::from_exp(opts)?;
        o.validate()?;
        Ok(o)
    }
    fn shape(p: &LruContentionOpts) -> (&[String], usize, bool) {
        (&p.variants, p.runs, p.quick)
    }
    fn measure(ctx: &Ctx<'_>, p: &LruContentionOpts) -> Result<(Measured, LruSeries)> {
        measure(ctx, p)
    }
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }
    fn kernel_column(ctx: &Ctx<'_>, p: &LruContentionOpts) -> std::result::Result<KernelColumn, String> {
        kernel_column(ctx, p)
    }
    fn checks(r: &ExperimentResult) -> Vec<Check> {
        checks(r)
    }
    fn plot(dir: &Path, r: &ExperimentResult, raw: &LruSeries, p: &LruContentionOpts) -> Result<Vec<String>> {
        let paths = plots(r, p, dir, sampled_threads(p), &raw.0)?;
        Ok(paths.iter().map(|p| p.display().to_string()).collect())
    }
    fn title(r: &ExperimentResult, p: &LruContentionOpts) -> String {
        title(r, p)
    }
    fn report_body(r: &ExperimentResult, _: &LruContentionOpts) -> String {
        body(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        assert!(LruContentionOpts::default().validate().is_ok());
        assert!(LruContentionOpts::quick().validate().is_ok());
        assert!(LruContentionOpts::tiny().validate().is_ok());
        let t = LruContentionOpts::tiny;
        let bad = [
            LruContentionOpts { mem_bytes: MIB, ..t() },
            LruContentionOpts { runs: 0, ..t() },
            LruContentionOpts { threads: vec![], ..t() },
            LruContentionOpts { threads: vec![0], ..t() },
            LruContentionOpts { threads: vec![2, 2], ..t() },
            LruContentionOpts { ops_per_thread: 0, ..t() },
            LruContentionOpts { kernel_ops_per_thread: 0, ..t() },
            LruContentionOpts { working_set_ratio: f64::NAN, ..t() },
            LruContentionOpts { zipf_s: -1.0, ..t() },
            LruContentionOpts { files: 0, ..t() },
            LruContentionOpts { variants: vec!["2.4".into()], ..t() },
            LruContentionOpts { set: vec![("nosuch".into(), "1".into())], ..t() },
        ];
        for o in bad {
            assert!(matches!(o.validate(), Err(Error::Invalid(_))), "{o:?}");
        }
    }

    // Goal: the presets select the three M5 variants, 2.6.10 first.
    #[test]
    fn presets() {
        let v = variants::resolve(PRESETS, &variants::defaults(PRESETS)).unwrap();
        let names: Vec<&str> = v.iter().map(|p| p.name).collect();
        assert_eq!(names, [BEFORE, DANILOV, TODAY]);
        let modes: Vec<LruBatching> = v.iter().map(|p| (p.tunables)().lru_batching).collect();
        assert_eq!(modes, [LruBatching::Immediate2610, LruBatching::DanilovBatch, LruBatching::Batched]);
    }

    #[test]
    fn sizes_and_streams() {
        let o = LruContentionOpts::default();
        // 128 MiB = 32768 pages; 1.25x = 40960 over 4 files.
        assert_eq!(o.pages_per_file(), 10240);
        assert_eq!(o.working_set_pages(), 40960);
        assert_eq!(o.warm_ops_per_thread(4), 40960);
        let z = ZipfKeys::new(1000, 0.9, perm_seed(1)).unwrap();
        let a = keys(&z, 100, stream_seed(1, 0, 2, 1, TIMED));
        let b = keys(&z, 100, stream_seed(1, 0, 2, 1, TIMED));
        let c = keys(&z, 100, stream_seed(1, 0, 2, 0, TIMED));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut page = vec![0u8; 4096];
        fill_page(&mut page, 3, 77);
        assert!(check_page(&page, 3, 77, "t").is_ok());
        assert!(check_page(&page, 3, 78, "t").is_err());
    }

    // Goal: downsampling keeps at most the asked-for points, evenly
    // spread, the first and the last among them, in order.
    #[test]
    fn downsampling() {
        let v: Vec<u32> = (0..1000).collect();
        let d = downsample(&v, 200);
        assert_eq!(d.len(), 200);
        assert_eq!((d[0], d[199]), (0, 999));
        assert!(d.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= 6));
        assert_eq!(downsample(&v[..150], 200), v[..150]);
        assert_eq!(downsample(&v[..3], 2), [0, 2]);
        assert_eq!(downsample(&v[..3], 1), [0]);
        assert!(downsample(&v, 0).is_empty());
        let s = LruSample { t_s: 0.0, active: 1, inactive: 3, free: 0 };
        assert_eq!(s.active_fraction(), 0.25);
        assert!(LruSample { active: 0, inactive: 0, ..s }.active_fraction().is_nan());
    }
}

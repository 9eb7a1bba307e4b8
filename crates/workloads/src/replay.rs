//! `replay`: miss-ratio curves of recorded block traces through pcache.
//!
//! Traces (any of them gzipped): LIRS text, one block (page) per line, `*`
//! and blank lines skipped; libCacheSim csv, the id column named like
//! `obj_id`/`key`/`block`/`lba`, an optional `size` column; oracleGeneral,
//! 24-byte records. A request of `size` bytes touches `ceil(size / 4096)`
//! pages; ids that are not integers are hashed, and sparse ids renumbered
//! densely in order of first touch (with readahead off only identity counts).
//!
//! Every (variant, cache size) replays the whole trace through a fresh
//! cache, readahead and kswapd off (reclaim is direct, hence deterministic),
//! as 4 KiB `read_at`s; misses are `pgcache_miss` deltas. The watermarks keep
//! a free reserve, so the most pages resident at once is reported as
//! `usable`. With `threads` > 1, thread `i` replays accesses `i, i + N, ...`
//! through one cache, and the counts depend on the interleaving.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pcache::policy::EvictionPolicy;
use pcache::{Admission, Config, Item, LruPolicy, PageCache, PolicyKind, Tunables, WorkingsetVersion};
use serde::Serialize;

use crate::experiment::{ExpOpts, Experiment, Outcome, ParamDoc};
use crate::plot;
use crate::render::{self, fmt_ratio_pct, render_table};
use crate::replay_kernel::{self, KernelColumn, KERNEL};
pub use crate::replay_kernel::{EXPERIMENT, PAGE};
use crate::variants::{self, seed_tunables, Preset};
use crate::{Error, Result};

pub const WORKINGSET_OFF: &str = "workingset-off";
pub const WORKINGSET_ON: &str = "workingset-on";
pub const ADAPTIVE: &str = "pcache-adaptive";
pub const WORKINGSET_6: &str = "workingset-6";
pub const MGLRU: &str = "mglru";
/// The eviction-policy plug-ins (pcache::policy), one variant each, named
/// as `Tunables::policy` names them.
pub const POLICY_VARIANTS: &[&str] = &["fifo", "lru", "clock", "sieve", "s3fifo", "mru", "lfuda", "pcache", "getscan"];

/// The smallest cache the engine builds.
pub const MIN_CACHE_PAGES: u64 = pcache::MIN_PAGES;
/// Default cache sizes, in percent of the trace's distinct pages.
pub const DEFAULT_PERCENTS: &[f64] = &[10.0, 20.0, 40.0, 80.0];

fn base_tunables() -> Tunables {
    Tunables { ra_pages: 0, kswapd: false, ..seed_tunables() }
}

/// A plug-in policy's variant: it evicts exactly when a page needs a frame
/// (`reclaim_batch` 1), so with `usable_equals_nominal` it holds exactly
/// the nominal pages, as libCacheSim's caches do.
fn policy_tunables(policy: PolicyKind) -> Tunables {
    Tunables { policy, reclaim_batch: 1, ..base_tunables() }
}

/// A caller's policy's cells (`CustomPolicy`): as the plug-ins' variants,
/// the policy given to `PageCache::with_policy` instead of by name.
fn custom_tunables() -> Tunables {
    policy_tunables(PolicyKind::Kernel)
}

/// The variants replay compares.
pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        WORKINGSET_OFF,
        "two-list LRU without refault detection (before Linux 3.15): evicted pages leave no shadow \
        entry; readahead off, kswapd off",
        || Tunables { workingset: false, ..base_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        WORKINGSET_ON,
        "Linux 3.15 workingset detection: shadow entries on eviction, refaults within the active \
        list's size are activated; readahead off, kswapd off",
        || Tunables { workingset: true, ..base_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        WORKINGSET_6,
        "Linux 5.9-6.18 workingset balancing (lru_gen off): the active file list is deactivated \
        whenever refaults were activated since the last reclaim, else only while the inactive list \
        is low; readahead off, kswapd off",
        || Tunables { workingset: true, workingset_version: WorkingsetVersion::Linux6, ..base_tunables() },
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        MGLRU,
        "Linux 6.1+ multi-gen LRU (CONFIG_LRU_GEN, enabled): generations, tiers by access count, \
        the refault feedback loop protecting tiers; readahead off, kswapd off",
        || Tunables { workingset: true, lru: LruPolicy::MultiGen, ..base_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        ADAPTIVE,
        "pcache's own: workingset detection plus adaptive W-TinyLFU admission (a window list in \
        front of the two lists, a frequency sketch deciding who enters, an ARC-style adaptive \
        window); readahead off, kswapd off",
        || Tunables { workingset: true, admission: Admission::AdaptiveTinyLfu, ..base_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        "fifo",
        "plug-in policy FIFO (pcache::policy): first in, first out; evicts one page per miss once \
        full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Fifo),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "lru",
        "plug-in policy LRU (pcache::policy): one list, a hit moves the page to the head; evicts \
        one page per miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Lru),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "clock",
        "plug-in policy CLOCK (pcache::policy): FIFO with a reference bit, a used page goes round \
        once more; evicts one page per miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Clock),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "sieve",
        "plug-in policy SIEVE (pcache::policy, NSDI'24): a hand sweeping from the oldest page spares \
        visited pages in place; evicts one page per miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Sieve),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "s3fifo",
        "plug-in policy S3-FIFO (pcache::policy, SOSP'23): a small FIFO for new pages, a main CLOCK \
        for pages used there twice, a ghost of keys evicted from the small one; evicts one page per \
        miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::S3fifo),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "mru",
        "plug-in policy MRU (pcache::policy): the most recently used page goes first, for loops \
        larger than the cache; evicts one page per miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Mru),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "lfuda",
        "plug-in policy LFU-DA (pcache::policy): least frequently used with dynamic aging, a page's \
        priority its use count plus the cache's age at its last use; evicts one page per miss once \
        full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Lfuda),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "pcache",
        "plug-in policy pcache (pcache::policy, pcache's own): follows whichever of five key-only \
        simulations (S3-FIFO with an adaptive small queue, ARC, LRU, LFU-DA, LIRS) missed least lately, \
        evicting first the pages it does not hold; evicts one page per miss once full; readahead off, \
        kswapd off",
        || policy_tunables(PolicyKind::Pcache),
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "getscan",
        "plug-in policy GET-SCAN (pcache::policy, after cache_ext's, SOSP'25): a probation FIFO for \
        pages not used since their insertion, evicted first down to a tenth of the cache, and a \
        protected LRU for pages used again; evicts one page per miss once full; readahead off, kswapd off",
        || policy_tunables(PolicyKind::Getscan),
    )
    .optional(),
];

pub fn default_variants() -> Vec<String> {
    variants::defaults(PRESETS)
}

pub fn resolve(names: &[String]) -> Result<Vec<&'static Preset>> {
    variants::resolve(PRESETS, names)
}

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Format {
    Lirs,
    Csv,
    OracleGeneral,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Lirs => "lirs",
            Format::Csv => "csv",
            Format::OracleGeneral => "oracleGeneral",
        }
    }

    /// Guess from the file name (`.csv`, `oracleGeneral`, else LIRS).
    pub fn guess(path: &Path) -> Format {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        if name.ends_with(".csv") {
            Format::Csv
        } else if name.contains("oraclegeneral") {
            Format::OracleGeneral
        } else {
            Format::Lirs
        }
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Format, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "lirs" => Ok(Format::Lirs),
            "csv" => Ok(Format::Csv),
            "oraclegeneral" | "oracle" => Ok(Format::OracleGeneral),
            _ => Err(format!("unknown trace format {s:?}; known: lirs, csv, oracleGeneral")),
        }
    }
}

/// A trace as page accesses (a csv/oracleGeneral record may touch several).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub name: String,
    pub records: u64,
    pub accesses: Vec<u64>,
    pub renumbered: bool,
}

impl Trace {
    pub fn from_pages(name: &str, pages: Vec<u64>) -> Trace {
        Trace { name: name.to_string(), records: pages.len() as u64, accesses: pages, renumbered: false }
    }

    pub fn distinct_pages(&self) -> u64 {
        self.accesses.iter().collect::<HashSet<_>>().len() as u64
    }

    /// Renumber sparse indices densely in order of first touch.
    fn densify(&mut self) {
        let distinct = self.distinct_pages();
        let max = self.accesses.iter().copied().max().unwrap_or(0);
        if max <= distinct.saturating_mul(16) + 1024 {
            return;
        }
        let mut map: HashMap<u64, u64> = HashMap::with_capacity(distinct as usize);
        for a in &mut self.accesses {
            let next = map.len() as u64;
            *a = *map.entry(*a).or_insert(next);
        }
        self.renumbered = true;
    }
}

fn trace_name(path: &Path) -> String {
    let n = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    let n = n.strip_suffix(".gz").unwrap_or(&n);
    let n = n.strip_suffix(".trace").unwrap_or(n);
    n.to_string()
}

/// Open `path`, gunzipping it if it starts with the gzip magic.
fn open_maybe_gz(path: &Path) -> Result<Box<dyn Read>> {
    let ctx = || path.display().to_string();
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(ctx(), e))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic).map_err(|e| Error::io(ctx(), e))?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let chained = head.chain(f);
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(chained)))
    } else {
        Ok(Box::new(chained))
    }
}

pub fn read_trace(path: &Path, format: Option<Format>) -> Result<Trace> {
    let format = format.unwrap_or_else(|| Format::guess(path));
    let r = open_maybe_gz(path)?;
    let ctx = path.display().to_string();
    let mut t = parse(r, format, &ctx)?;
    t.name = trace_name(path);
    Ok(t)
}

pub fn parse(r: impl Read, format: Format, ctx: &str) -> Result<Trace> {
    let mut t = match format {
        Format::Lirs => parse_lirs(BufReader::new(r), ctx)?,
        Format::Csv => parse_csv(BufReader::new(r), ctx)?,
        Format::OracleGeneral => parse_oracle(BufReader::new(r), ctx)?,
    };
    t.name = ctx.to_string();
    t.densify();
    Ok(t)
}

fn parse_lirs(r: impl BufRead, ctx: &str) -> Result<Trace> {
    let mut t = Trace::default();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|e| Error::io(ctx, e))?;
        let s = line.trim();
        if s.is_empty() || s == "*" {
            continue;
        }
        let b: u64 = s.parse().map_err(|_| Error::Invalid(format!("{ctx}:{}: {s:?} is not a block number", i + 1)))?;
        t.accesses.push(b);
        t.records += 1;
    }
    Ok(t)
}

fn push_request(t: &mut Trace, id: u64, size: Option<u64>) {
    let n = size.map(|s| s.div_ceil(PAGE)).unwrap_or(1).max(1);
    for k in 0..n {
        t.accesses.push(id.wrapping_add(k));
    }
    t.records += 1;
}

fn hash_str(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

fn parse_csv(r: impl BufRead, ctx: &str) -> Result<Trace> {
    let mut lines = r.lines();
    let header = match lines.find(|l| !l.as_ref().is_ok_and(|l| l.trim().is_empty())) {
        None => return Err(Error::Invalid(format!("{ctx}: empty csv"))),
        Some(l) => l.map_err(|e| Error::io(ctx, e))?,
    };
    let cols: Vec<String> =
        header.split(',').map(|c| c.trim().trim_start_matches('#').trim().to_ascii_lowercase()).collect();
    let find = |pred: &dyn Fn(&str) -> bool| cols.iter().position(|c| pred(c));
    let id_col = find(&|c| c == "obj_id" || c == "key" || c == "block")
        .or_else(|| find(&|c| c.contains("obj_id") || c.contains("key") || c.contains("block")))
        .or_else(|| find(&|c| c.contains("lbn") || c.contains("lba") || c.contains("addr") || c == "id"))
        .ok_or_else(|| Error::Invalid(format!("{ctx}: no obj_id/key/block column in header {header:?}")))?;
    let size_col = find(&|c| c == "size" || c == "obj_size").or_else(|| find(&|c| c.contains("size")));
    let mut t = Trace::default();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|e| Error::io(ctx, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let lineno = i + 2;
        let id_s =
            fields.get(id_col).ok_or_else(|| Error::Invalid(format!("{ctx}:{lineno}: no column {}", id_col + 1)))?;
        let id = id_s.parse::<u64>().unwrap_or_else(|_| hash_str(id_s));
        let size = match size_col.and_then(|c| fields.get(c)) {
            Some(s) if !s.is_empty() => Some(
                s.parse::<u64>().map_err(|_| Error::Invalid(format!("{ctx}:{lineno}: size {s:?} is not a number")))?,
            ),
            _ => None,
        };
        push_request(&mut t, id, size);
    }
    Ok(t)
}

pub const ORACLE_RECORD: usize = 24;

fn parse_oracle(mut r: impl Read, ctx: &str) -> Result<Trace> {
    let mut t = Trace::default();
    let mut rec = [0u8; ORACLE_RECORD];
    loop {
        let mut got = 0;
        while got < ORACLE_RECORD {
            let n = r.read(&mut rec[got..]).map_err(|e| Error::io(ctx, e))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got == 0 {
            break;
        }
        if got < ORACLE_RECORD {
            return Err(Error::Invalid(format!("{ctx}: truncated record ({got} of {ORACLE_RECORD} bytes)")));
        }
        let id = u64::from_le_bytes(rec[4..12].try_into().unwrap());
        let size = u32::from_le_bytes(rec[12..16].try_into().unwrap()) as u64;
        push_request(&mut t, id, Some(size));
    }
    Ok(t)
}

/// One oracleGeneral record (u32 timestamp, u64 obj_id, u32 obj_size, i64
/// next_access_vtime, little-endian), for tests and tools.
pub fn oracle_record(timestamp: u32, obj_id: u64, obj_size: u32, next_access_vtime: i64) -> [u8; ORACLE_RECORD] {
    let mut b = [0u8; ORACLE_RECORD];
    b[0..4].copy_from_slice(&timestamp.to_le_bytes());
    b[4..12].copy_from_slice(&obj_id.to_le_bytes());
    b[12..16].copy_from_slice(&obj_size.to_le_bytes());
    b[16..24].copy_from_slice(&next_access_vtime.to_le_bytes());
    b
}

/// Cache sizes: percentages of the trace's distinct pages, or page counts.
#[derive(Clone, Debug, PartialEq)]
pub enum Sizes {
    Percent(Vec<f64>),
    Pages(Vec<u64>),
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes::Percent(DEFAULT_PERCENTS.to_vec())
    }
}

impl Sizes {
    /// In pages for `distinct` pages: at least [`MIN_CACHE_PAGES`], sorted, deduplicated.
    pub fn pages(&self, distinct: u64) -> Vec<u64> {
        let mut v: Vec<u64> = match self {
            Sizes::Percent(p) => p.iter().map(|&pct| (distinct as f64 * pct / 100.0).round() as u64).collect(),
            Sizes::Pages(p) => p.clone(),
        };
        v.iter_mut().for_each(|x| *x = (*x).max(MIN_CACHE_PAGES));
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[derive(Clone, Debug)]
pub struct ReplayOpts {
    pub sizes: Sizes,
    pub variants: Vec<String>,
    /// A miss-ratio curve per trace (SVG) goes here.
    pub plot_dir: Option<PathBuf>,
    pub threads: usize,
    /// The `kernel` column, its files in `kernel_dir` (not tmpfs).
    pub kernel: bool,
    pub kernel_dir: Option<PathBuf>,
    /// Size each arena so that its usable pages equal the nominal size, for
    /// equal capacity with the kernel's memory cgroup and libCacheSim, which
    /// keep no free reserve.
    pub usable_equals_nominal: bool,
}

impl Default for ReplayOpts {
    fn default() -> Self {
        ReplayOpts {
            sizes: Sizes::default(),
            variants: default_variants(),
            plot_dir: None,
            threads: 1,
            kernel: false,
            kernel_dir: None,
            usable_equals_nominal: false,
        }
    }
}

/// One (variant, cache size) replay.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub variant: String,
    /// The nominal size: the frames, or with `usable_equals_nominal` the
    /// pages it can cache.
    pub cache_pages: u64,
    pub frames: u64,
    /// The most pages resident at once.
    pub usable_pages: u64,
    pub watermark_min: u64,
    pub watermark_low: u64,
    pub watermark_high: u64,
    pub requests: u64,
    pub misses: u64,
    pub hits: u64,
    pub miss_ratio: f64,
    pub compulsory_misses: u64,
    pub compulsory_miss_ratio: f64,
    pub workingset_refault: u64,
    pub workingset_activate: u64,
}

/// Here, beside [`RunResult`], so that [`crate::replay_kernel`] needs
/// nothing of this module.
impl KernelColumn {
    /// The runs as replay results (the kernel keeps no watermarks per group).
    pub fn results(&self, trace: &Trace) -> Vec<RunResult> {
        let compulsory = trace.distinct_pages();
        self.runs
            .iter()
            .map(|r| RunResult {
                variant: KERNEL.into(),
                cache_pages: r.cache_pages,
                frames: r.cache_pages,
                usable_pages: r.effective_pages,
                watermark_min: 0,
                watermark_low: 0,
                watermark_high: 0,
                requests: r.requests,
                misses: r.misses,
                hits: r.hits,
                miss_ratio: ratio(r.misses, r.hits + r.misses),
                compulsory_misses: compulsory,
                compulsory_miss_ratio: ratio(compulsory, r.requests),
                workingset_refault: r.workingset_refault.unwrap_or(0),
                workingset_activate: r.workingset_activate.unwrap_or(0),
            })
            .collect()
    }
}

/// A trace's replays.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayResult {
    pub trace: String,
    pub format: Format,
    pub records: u64,
    pub requests: u64,
    /// Distinct pages.
    pub pages: u64,
    pub renumbered: bool,
    pub compulsory_misses: u64,
    pub compulsory_miss_ratio: f64,
    pub variants: Vec<String>,
    pub sizes: Vec<u64>,
    /// The variants' runs, then the kernel's.
    pub results: Vec<RunResult>,
    pub threads: usize,
    pub kernel: Option<KernelColumn>,
    pub kernel_skipped: Option<String>,
    /// Runs merged from `--baseline` files.
    pub baselines: Vec<BaselineRun>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct BaselineRun {
    pub variant: String,
    pub cache_pages: u64,
    pub requests: u64,
    pub misses: u64,
    pub miss_ratio: f64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The frames that leave `usable` pages cacheable: with kswapd off the
/// arena keeps its low watermark free, so frames = usable + low(frames), a
/// fixed point a few rounds reach.
pub fn frames_for_usable(usable: u64, tunables: Tunables) -> Result<u64> {
    let mut frames = usable;
    for _ in 0..8 {
        let cfg = Config { memory_bytes: frames * PAGE, page_size: PAGE as usize, nr_cpus: 1, tunables };
        let wm = PageCache::new(cfg)?.watermarks();
        let reserve = if tunables.kswapd { wm.min } else { wm.low };
        let next = usable + reserve;
        if next == frames {
            break;
        }
        frames = next;
    }
    Ok(frames)
}

/// Replay `trace` through a fresh cache of `frames` frames (reported as
/// `cache_pages`) with `threads` threads; `usable` is the most any thread
/// saw resident.
pub fn replay_threads(
    trace: &Trace,
    tunables: Tunables,
    cache_pages: u64,
    frames: u64,
    variant: &str,
    threads: usize,
) -> Result<RunResult> {
    replay_cell(trace, tunables, cache_pages, frames, variant, threads, None)
}

/// A caller's eviction policy as one more replay column: `name` labels its
/// runs, `build` makes a fresh policy for each cache size (given the cell's
/// frames), as a built-in plug-in is built fresh per cell. Its cells run as
/// the plug-in variants do (readahead and kswapd off, one eviction per miss).
pub struct CustomPolicy<'a> {
    pub name: String,
    pub build: &'a (dyn Fn(u64) -> Result<Box<dyn EvictionPolicy>> + Sync),
}

/// As [`replay_threads`], the cache holding its file pages with `policy`
/// (`PageCache::with_policy`) when one is given.
pub fn replay_cell(
    trace: &Trace,
    tunables: Tunables,
    cache_pages: u64,
    frames: u64,
    variant: &str,
    threads: usize,
    policy: Option<Box<dyn EvictionPolicy>>,
) -> Result<RunResult> {
    let cfg = Config { memory_bytes: frames * PAGE, page_size: PAGE as usize, nr_cpus: threads, tunables };
    let cache = match policy {
        Some(p) => PageCache::with_policy(cfg, p)?,
        None => PageCache::new(cfg)?,
    };
    let wm = cache.watermarks();
    let f = cache.open_memory("trace")?;
    let max = trace.accesses.iter().copied().max().unwrap_or(0);
    f.set_len((max + 1) * PAGE)?;
    let before = cache.vmstat();
    let barrier = std::sync::Barrier::new(threads);
    let outs: Vec<Result<u64>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || -> Result<u64> {
                    let mut buf = vec![0u8; PAGE as usize];
                    let mut usable = 0u64;
                    barrier.wait();
                    for &p in trace.accesses.iter().skip(i).step_by(threads) {
                        let n = f.read_at(&mut buf, p * PAGE)?;
                        if n != PAGE as usize {
                            return Err(Error::Check(format!("page {p}: short read of {n} bytes")));
                        }
                        usable = usable.max(f.cached_pages());
                    }
                    Ok(usable)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut usable = 0;
    for o in outs {
        usable = usable.max(o?);
    }
    let d = cache.vmstat().delta(&before);
    let requests = trace.accesses.len() as u64;
    let misses = d.get(Item::pgcache_miss);
    let compulsory = trace.distinct_pages();
    f.close()?;
    Ok(RunResult {
        variant: variant.to_string(),
        cache_pages,
        frames,
        usable_pages: usable,
        watermark_min: wm.min,
        watermark_low: wm.low,
        watermark_high: wm.high,
        requests,
        misses,
        hits: d.get(Item::pgcache_hit),
        miss_ratio: ratio(misses, requests),
        compulsory_misses: compulsory,
        compulsory_miss_ratio: ratio(compulsory, requests),
        workingset_refault: d.get(Item::workingset_refault),
        workingset_activate: d.get(Item::workingset_activate),
    })
}

pub fn run(trace: &Trace, format: Format, opts: &ReplayOpts) -> Result<ReplayResult> {
    run_with_policy(trace, format, opts, None)
}

/// As [`run`], plus a column for `custom` after the variants' at each size.
pub fn run_with_policy(
    trace: &Trace,
    format: Format,
    opts: &ReplayOpts,
    custom: Option<&CustomPolicy<'_>>,
) -> Result<ReplayResult> {
    // The caller's policy may be the only column.
    let presets = if opts.variants.is_empty() && custom.is_some() { Vec::new() } else { resolve(&opts.variants)? };
    if let Some(c) = custom {
        if c.name.is_empty() || c.name == KERNEL || presets.iter().any(|p| p.name == c.name) {
            return Err(Error::Invalid(format!("policy name {:?} is empty or already a column", c.name)));
        }
    }
    if trace.accesses.is_empty() {
        return Err(Error::Invalid(format!("{}: the trace is empty", trace.name)));
    }
    if opts.threads == 0 || opts.threads > 1024 {
        return Err(Error::Invalid(format!("replay: {} threads (1 to 1024)", opts.threads)));
    }
    let distinct = trace.distinct_pages();
    let sizes = opts.sizes.pages(distinct);
    if sizes.is_empty() {
        return Err(Error::Invalid("no cache sizes given".into()));
    }
    let mut results = Vec::new();
    for &pages in &sizes {
        for p in &presets {
            let tunables = (p.tunables)();
            let frames = if opts.usable_equals_nominal { frames_for_usable(pages, tunables)? } else { pages };
            results.push(replay_threads(trace, tunables, pages, frames, p.name, opts.threads)?);
        }
        if let Some(c) = custom {
            let tunables = custom_tunables();
            let frames = if opts.usable_equals_nominal { frames_for_usable(pages, tunables)? } else { pages };
            let policy = (c.build)(frames)?;
            results.push(replay_cell(trace, tunables, pages, frames, &c.name, opts.threads, Some(policy))?);
        }
    }
    let (mut kernel, mut kernel_skipped) = (None, None);
    if opts.kernel {
        match replay_kernel::run(&trace.accesses, &sizes, opts.kernel_dir.as_deref(), None) {
            Ok(k) => {
                results.extend(k.results(trace));
                kernel = Some(k);
            }
            Err(why) => kernel_skipped = Some(why),
        }
    }
    let requests = trace.accesses.len() as u64;
    let res = ReplayResult {
        trace: trace.name.clone(),
        format,
        records: trace.records,
        requests,
        pages: distinct,
        renumbered: trace.renumbered,
        compulsory_misses: distinct,
        compulsory_miss_ratio: ratio(distinct, requests),
        variants: presets.iter().map(|p| p.name.to_string()).chain(custom.map(|c| c.name.clone())).collect(),
        sizes,
        results,
        threads: opts.threads,
        kernel,
        kernel_skipped,
        baselines: Vec::new(),
    };
    if let Some(dir) = &opts.plot_dir {
        plot_result(&res, dir)?;
    }
    Ok(res)
}

pub fn run_file(path: &Path, format: Option<Format>, opts: &ReplayOpts) -> Result<ReplayResult> {
    let format = format.unwrap_or_else(|| Format::guess(path));
    let trace = read_trace(path, Some(format))?;
    run(&trace, format, opts)
}

impl ReplayResult {
    pub fn get(&self, variant: &str, cache_pages: u64) -> Option<&RunResult> {
        self.results.iter().find(|r| r.variant == variant && r.cache_pages == cache_pages)
    }

    fn baseline_miss_ratio(&self, variant: &str, cache_pages: u64) -> Option<f64> {
        self.baselines.iter().find(|b| b.variant == variant && b.cache_pages == cache_pages).map(|b| b.miss_ratio)
    }

    /// A run's, else a baseline's.
    fn miss_ratio(&self, column: &str, cache_pages: u64) -> Option<f64> {
        self.get(column, cache_pages).map(|r| r.miss_ratio).or_else(|| self.baseline_miss_ratio(column, cache_pages))
    }

    pub fn baseline_variants(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for b in &self.baselines {
            if !v.contains(&b.variant.as_str()) {
                v.push(&b.variant);
            }
        }
        v
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} requests ({} records), {} distinct pages{}; readahead off, kswapd off{}",
            self.trace,
            self.requests,
            self.records,
            self.pages,
            if self.renumbered { " (renumbered)" } else { "" },
            if self.threads > 1 { format!("; {} threads", self.threads) } else { String::new() }
        );
        let rows = self.table();
        out.push_str(&render_table(&rows, &vec![true; rows[0].len()]));
        self.footnotes(&mut out);
        out
    }

    /// A row per cache size: the variants' miss ratios, the kernel's (and
    /// the pages it held at most), the baselines', the compulsory one.
    fn table(&self) -> Vec<Vec<String>> {
        let kernel = self.results.iter().any(|r| r.variant == KERNEL);
        let baselines = self.baseline_variants();
        let mut header = vec!["cache pages".to_string(), "usable".into(), "% distinct".into()];
        header.extend(self.variants.iter().map(|v| format!("{v} miss%")));
        if kernel {
            header.extend(["kernel miss%".to_string(), "kernel pages".into()]);
        }
        header.extend(baselines.iter().map(|v| format!("{v} miss%")));
        header.push("compulsory%".into());
        let mut rows = vec![header];
        for &s in &self.sizes {
            let runs: Vec<&RunResult> = self.variants.iter().filter_map(|v| self.get(v, s)).collect();
            let umin = runs.iter().map(|r| r.usable_pages).min().unwrap_or(0);
            let umax = runs.iter().map(|r| r.usable_pages).max().unwrap_or(0);
            let usable = if umin == umax { umin.to_string() } else { format!("{umin}-{umax}") };
            let mut row = vec![s.to_string(), usable, format!("{:.1}", 100.0 * ratio(s, self.pages))];
            row.extend(runs.iter().map(|r| fmt_ratio_pct(Some(r.miss_ratio))));
            if kernel {
                let k = self.get(KERNEL, s);
                row.push(fmt_ratio_pct(k.map(|r| r.miss_ratio)));
                row.push(k.map(|r| r.usable_pages.to_string()).unwrap_or_else(|| "-".into()));
            }
            row.extend(baselines.iter().map(|b| fmt_ratio_pct(self.baseline_miss_ratio(b, s))));
            row.push(fmt_ratio_pct(Some(self.compulsory_miss_ratio)));
            rows.push(row);
        }
        rows
    }

    fn footnotes(&self, out: &mut String) {
        let baselines = self.baseline_variants();
        if let Some(r) = self.results.first() {
            let _ = writeln!(
                out,
                "usable = most pages resident at once: the frames minus the free reserve the watermarks keep \
                 (e.g. {} frames: min {}, low {}, high {})",
                r.frames, r.watermark_min, r.watermark_low, r.watermark_high
            );
        }
        if let Some(k) = &self.kernel {
            let rounds = k.runs.iter().map(|r| r.calibration_rounds).max().unwrap_or(0);
            let method = k.runs.first().map(|r| r.method.as_str()).unwrap_or("cachestat");
            let _ = writeln!(
                out,
                "kernel = Linux {} page cache, pread(2) of a file of the trace's pages with POSIX_FADV_RANDOM \
                 (readahead off), in a memory cgroup whose limit was calibrated (up to {rounds} rounds) so that \
                 `cache pages` of another file fit; kernel pages = the most trace pages resident at once; hits \
                 told by {method} before each read",
                k.release
            );
        }
        if let Some(why) = &self.kernel_skipped {
            let _ = writeln!(out, "kernel column skipped: {why}");
        }
        if !baselines.is_empty() {
            let _ = writeln!(
                out,
                "{} ran at the nominal `cache pages` (from --baseline files); pcache's variants could use only \
                 `usable` of them",
                baselines.join(", ")
            );
        }
        if self.threads > 1 {
            let _ = writeln!(
                out,
                "{} threads replayed interleaved slices through one cache: counts depend on the interleaving",
                self.threads
            );
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("serializable")
    }
}

/// `DIR/replay-TRACE.svg`: miss ratio (%) against cache pages per column.
pub fn plot_result(res: &ReplayResult, dir: &Path) -> Result<PathBuf> {
    let safe: String =
        res.trace.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let curve = |name: &str, runs: &mut dyn Iterator<Item = (u64, f64)>| plot::Series {
        name: name.to_string(),
        points: runs.map(|(pages, miss)| (pages as f64, 100.0 * miss)).collect(),
    };
    let kernel = res.results.iter().any(|r| r.variant == KERNEL).then_some(KERNEL);
    let mut series: Vec<plot::Series> = res
        .variants
        .iter()
        .map(String::as_str)
        .chain(kernel)
        .map(|v| curve(v, &mut res.results.iter().filter(|r| r.variant == v).map(|r| (r.cache_pages, r.miss_ratio))))
        .collect();
    for b in res.baseline_variants() {
        series.push(curve(
            b,
            &mut res.baselines.iter().filter(|r| r.variant == b).map(|r| (r.cache_pages, r.miss_ratio)),
        ));
    }
    series.push(plot::Series {
        name: "compulsory".into(),
        points: res.sizes.iter().map(|&s| (s as f64, 100.0 * res.compulsory_miss_ratio)).collect(),
    });
    let title = format!("{}: miss ratio", res.trace);
    let path = plot::line_chart(dir, &format!("replay-{safe}.svg"), &title, "cache pages", "miss ratio (%)", &series)?;
    Ok(PathBuf::from(path))
}

/// Merge another simulator's runs (replay's JSON schema, one trace's object
/// or an array) into `res` where trace name and cache size match; a trace of
/// other distinct pages was numbered differently and is refused. Returns the
/// runs merged.
pub fn merge_baselines(res: &mut ReplayResult, v: &serde_json::Value, ctx: &str) -> Result<usize> {
    #[derive(serde::Deserialize)]
    struct Doc {
        trace: String,
        pages: u64,
        results: Vec<BaselineRun>,
    }
    let docs: Vec<Doc> = match v {
        serde_json::Value::Array(a) => a.iter().map(|d| serde_json::from_value(d.clone())).collect(),
        d => serde_json::from_value(d.clone()).map(|d| vec![d]),
    }
    .map_err(|e| Error::Invalid(format!("{ctx}: not in replay's schema: {e}")))?;
    let mut merged = 0;
    for d in docs.into_iter().filter(|d| d.trace == res.trace) {
        if d.pages != res.pages {
            return Err(Error::Invalid(format!(
                "{ctx}: trace {} has {} distinct pages there and {} here: numbered differently",
                d.trace, d.pages, res.pages
            )));
        }
        for run in d.results {
            if !res.sizes.contains(&run.cache_pages) {
                continue;
            }
            if res.variants.contains(&run.variant)
                || run.variant == KERNEL
                || res.baselines.iter().any(|b| b.variant == run.variant && b.cache_pages == run.cache_pages)
            {
                return Err(Error::Invalid(format!(
                    "{ctx}: {} at {} pages of {} is already in the results",
                    run.variant, run.cache_pages, d.trace
                )));
            }
            res.baselines.push(run);
            merged += 1;
        }
    }
    Ok(merged)
}

/// Read `--baseline` files before anything is replayed: (path, JSON, runs
/// merged so far).
fn load_baselines(paths: &[PathBuf]) -> Result<Vec<(String, serde_json::Value, usize)>> {
    let load = |p: &PathBuf| {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|e| Error::io(&name, e))?;
        let v = serde_json::from_str(&text).map_err(|e| Error::Invalid(format!("{name}: not JSON: {e}")))?;
        Ok((name, v, 0))
    };
    paths.iter().map(load).collect()
}

/// One Markdown table for many traces (BENCHMARKS.md's), "-" where a column
/// has no run.
pub fn markdown_table(results: &[ReplayResult]) -> String {
    let mut cols: Vec<String> = Vec::new();
    let mut push = |v: &str| {
        if !cols.iter().any(|c| c == v) {
            cols.push(v.to_string());
        }
    };
    results.iter().flat_map(|r| &r.variants).for_each(|v| push(v));
    if results.iter().any(|r| r.kernel.is_some()) {
        push(KERNEL);
    }
    results.iter().flat_map(|r| r.baseline_variants()).for_each(&mut push);
    let mut rows = vec![["trace (distinct pages)", "cache pages"]
        .into_iter()
        .map(String::from)
        .chain(cols.iter().cloned())
        .chain(["compulsory".to_string()])
        .collect::<Vec<String>>()];
    for r in results {
        for (i, &s) in r.sizes.iter().enumerate() {
            let name = if i == 0 { format!("{} ({})", r.trace, r.pages) } else { String::new() };
            let mut row = vec![name, format!("{s} ({:.0}%)", 100.0 * ratio(s, r.pages))];
            row.extend(cols.iter().map(|c| fmt_ratio_pct(r.miss_ratio(c, s))));
            row.push(fmt_ratio_pct(Some(r.compulsory_miss_ratio)));
            rows.push(row);
        }
    }
    render::markdown_table(&rows)
}

/// `pcache replay TRACE...` = `pcache bench replay --param trace=...`. Its
/// JSON keeps its own schema (one trace's object, or an array), which the
/// Python package and the sweep read.
pub struct Replay;

const PARAMS: &[ParamDoc] = &[
    ParamDoc { name: "trace", help: "trace files, comma-separated (gzip is detected); required" },
    ParamDoc { name: "format", help: "lirs, csv or oracleGeneral [default: from each file's name]" },
    ParamDoc {
        name: "sizes",
        help: "cache sizes in percent of the trace's distinct pages [default: 10,20,40,80]; \
               --mem SIZE or pages=N give one size instead",
    },
    ParamDoc { name: "pages", help: "one cache size in pages" },
    ParamDoc { name: "threads", help: "threads replaying interleaved slices through one cache [default: 1]" },
    ParamDoc { name: "baseline", help: "other simulators' results (JSON in replay's schema), comma-separated" },
    ParamDoc { name: "markdown", help: "also write one Markdown table of every trace, size and column here" },
    ParamDoc { name: "usable_equals_nominal", help: "true: size the arena so its usable pages equal the size" },
];

impl Replay {
    fn sizes(opts: &ExpOpts) -> Result<Sizes> {
        if let Some(n) = opts.param_as::<u64>("pages")? {
            return Ok(Sizes::Pages(vec![n]));
        }
        if let Some(bytes) = opts.mem_bytes {
            return Ok(Sizes::Pages(vec![bytes / PAGE]));
        }
        let pcts = opts.param_list::<f64>("sizes")?.unwrap_or_else(|| DEFAULT_PERCENTS.to_vec());
        if pcts.iter().any(|p| !(p.is_finite() && *p > 0.0)) {
            return Err(Error::Invalid(format!("--sizes {pcts:?}: percentages must be above 0")));
        }
        Ok(Sizes::Percent(pcts))
    }
}

impl Experiment for Replay {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }

    fn about(&self) -> &'static str {
        "Block traces (LIRS, libCacheSim csv or oracleGeneral) replayed as page reads through pcache: \
         miss ratios per cache size and variant, with the kernel's and other simulators' columns"
    }

    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }

    fn takes_set(&self) -> bool {
        false
    }

    fn params(&self) -> &'static [ParamDoc] {
        PARAMS
    }

    fn kernel_workload(&self) -> Option<crate::kernel::Workload> {
        Some(replay_kernel::kernel_workload)
    }

    fn smoke(&self) -> ExpOpts {
        let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/smoke.trace");
        let params = vec![("trace".into(), trace.into()), ("sizes".into(), "20,80".into())];
        ExpOpts { params, seed: 1, ..ExpOpts::default() }
    }

    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let traces: Vec<PathBuf> = opts.param_list::<PathBuf>("trace")?.unwrap_or_default();
        if traces.is_empty() {
            return Err(Error::Invalid("replay: no trace given (--param trace=FILE[,FILE])".into()));
        }
        let format = opts.param_as::<Format>("format")?;
        let baseline_files = opts.param_list::<PathBuf>("baseline")?.unwrap_or_default();
        let replay_opts = ReplayOpts {
            sizes: Self::sizes(opts)?,
            variants: opts.variants.clone().unwrap_or_else(default_variants),
            // Plots are drawn below, after the baselines are merged.
            plot_dir: None,
            threads: opts.param_as("threads")?.unwrap_or(1),
            kernel: opts.kernel,
            kernel_dir: opts.dir.clone(),
            usable_equals_nominal: opts.param_as("usable_equals_nominal")?.unwrap_or(false),
        };
        resolve(&replay_opts.variants)?;
        let mut baselines = load_baselines(&baseline_files)?;
        let (mut results, mut report) = (Vec::new(), String::new());
        for path in &traces {
            let mut res = run_file(path, format, &replay_opts)?;
            for (name, v, merged) in &mut baselines {
                *merged += merge_baselines(&mut res, v, name)?;
            }
            if let Some(dir) = &opts.plot_dir {
                plot_result(&res, dir)?;
            }
            let _ = writeln!(report, "{}", res.render());
            results.push(res);
        }
        if let Some(path) = opts.param("markdown") {
            std::fs::write(path, markdown_table(&results)).map_err(|e| Error::io(path, e))?;
        }
        for (name, _, _) in baselines.iter().filter(|b| b.2 == 0) {
            let _ = writeln!(report, "warning: {name} matched no trace and cache size here");
        }
        match results.as_slice() {
            [one] => Outcome::new(report, &one.to_json()),
            all => Outcome::new(report, &all.iter().map(ReplayResult::to_json).collect::<Vec<_>>()),
        }
    }
}

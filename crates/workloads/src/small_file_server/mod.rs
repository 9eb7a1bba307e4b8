//! `small-file-server`: the 2007 thread on when a `read()` that touches a page
//! again re-marks it accessed (M7), every rule the 2007 thread discussed.
//!
//! Ashif Harji's SPECweb99-like server re-sent files through long-lived
//! descriptors. Under 2.6.20's `prev_index != index` a file of one page is
//! marked accessed only on its first read through a descriptor, so however
//! hot it is it never reaches the active list and goes out with the
//! streaming data; marking on every read raised his throughput from 868 to
//! 1111 Mbps (+28%). The thread then worried about the opposite case: a
//! large file read in small chunks must not look hot (Xiaoning Ding, Andrew
//! Morton), and the 2.6.11 changelog's 128-byte random reads of a 64 MiB
//! file during streaming writes, which the page-aligned rule before it got
//! wrong. So three workloads (`Params::describe`), each on a cache too
//! small for everything: **server** (a SPECweb99 fileset served by 2
//! threads beside a streamer, in lockstep rounds so every rule sees the
//! same pressure; hits are asked of `File::cached_pages`, which touches
//! nothing), **scan** (an active working set, then a file read in 512-byte
//! chunks) and **random** (the changelog's test).
//!
//! The kernel column runs the server workload with `pread` in a memory
//! cgroup. Today's kernel is not the prev_pos fix merged in 2.6.23: the
//! folio-era `filemap_read` marks a folio unless the read starts in the
//! folio where the previous one ended, which for a one-page file re-read
//! from offset 0 is 2.6.20's prev_index rule.

use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::time::Instant;

use pcache::{Config, File, Item, LruPolicy, OpenOptions, PageCache, PolicyKind, RemarkRule, Tunables, VmStat};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::ExpOpts;
use crate::kernel;
use crate::plot::{self, Series};
use crate::render::{self, fmt_size, vmstat_section};
use crate::report::{significant, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult};
use crate::runner::SeedReport;
use crate::runner::{into_map, Ctx, KernelColumn, Measured, SeedChecks, SeedExperiment, SeedKernel, SeedMeasure};
use crate::stats::{pct_better, Better};
use crate::sys::{kernel_release, read_seq, write_seq};
use crate::variants::{seed_tunables, Preset};
use crate::zipf::ZipfKeys;
use crate::{Error, Result};

mod checks;
mod kernel_side;
mod report;
mod workload;

pub const EXPERIMENT: &str = "small-file-server";

pub const PREV_INDEX: &str = "2.6.20-prev-index";
pub const PAGE_ALIGNED: &str = "2.6.10-page-aligned";
pub const PIGGIN: &str = "piggin-offset0";
pub const HARJI: &str = "harji-unconditional";
pub const MOHR: &str = "mohr-every-32nd";
pub const PREV_POS: &str = "prev-pos";
/// Linux 6.1+'s multi-gen LRU, with the prev-pos rule.
pub const MGLRU: &str = "mglru";

pub const WORKLOADS: [&str; 3] = ["server", "scan", "random"];

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The streamer's and `cat`'s read size.
const STREAM_CHUNK: u64 = 128 * KIB;
const WRITE_BLOCK: u64 = MIB;
const SCAN_CHUNK: u64 = 512;
const RR_READ: u64 = 128;
const WS_CHUNK: u64 = 4 * KIB;

fn with_rule(rule: RemarkRule) -> Tunables {
    Tunables { remark_rule: rule, ..seed_tunables() }
}
/// One per M7 rule; 2.6.20-prev-index (the kernel Harji measured) is the
/// baseline.
pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        PREV_INDEX,
        "Linux 2.6.11-2.6.20 (Harji measured 2.6.20.1): re-mark when prev_index != index \
        (RemarkRule::PrevIndex)",
        || with_rule(RemarkRule::PrevIndex),
    ),
    Preset::new(
        EXPERIMENT,
        PAGE_ALIGNED,
        "Linux 2.6.10 and before: only reads that start at a page boundary mark \
        (RemarkRule::PageAligned)",
        || with_rule(RemarkRule::PageAligned),
    ),
    Preset::new(
        EXPERIMENT,
        PIGGIN,
        "Nick Piggin's fix (March 2007): prev_index != index || offset == 0 \
        (RemarkRule::PrevIndexOrOffsetZero)",
        || with_rule(RemarkRule::PrevIndexOrOffsetZero),
    ),
    Preset::new(
        EXPERIMENT,
        HARJI,
        "Ashif Harji's patch: mark_page_accessed on every read (RemarkRule::Unconditional)",
        || with_rule(RemarkRule::Unconditional),
    ),
    Preset::new(
        EXPERIMENT,
        MOHR,
        "Andreas Mohr's proposal: prev_index != index, or every 32nd repeated hit on the same page \
        (RemarkRule::Every32nd)",
        || with_rule(RemarkRule::Every32nd),
    ),
    Preset::new(
        EXPERIMENT,
        PREV_POS,
        "the fix merged in 2.6.23 and pcache's default: remember prev_pos (where the last read \
        ended) and re-mark unless the read continues it inside the same page (RemarkRule::PrevPos)",
        || with_rule(RemarkRule::PrevPos),
    ),
    Preset::new(
        EXPERIMENT,
        MGLRU,
        "Linux 6.1+ multi-gen LRU (CONFIG_LRU_GEN) with today's re-mark rule (prev_pos): re-reads \
        count in the page's tier, the refault feedback protects the tiers that refault",
        || Tunables { lru: LruPolicy::MultiGen, ..with_rule(RemarkRule::PrevPos) },
    ),
    Preset::new(
        EXPERIMENT,
        "s3fifo",
        "plug-in policy S3-FIFO (SOSP'23): a small FIFO for new pages, a main CLOCK, a ghost \
        (pcache::policy) with today's re-mark rule; the re-reads reach it as accesses",
        || Tunables { policy: PolicyKind::S3fifo, ..with_rule(RemarkRule::PrevPos) },
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "sieve",
        "plug-in policy SIEVE (NSDI'24): a hand sweeping from the oldest page spares visited ones \
        (pcache::policy) with today's re-mark rule; the re-reads reach it as accesses",
        || Tunables { policy: PolicyKind::Sieve, ..with_rule(RemarkRule::PrevPos) },
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "pcache",
        "plug-in policy pcache's own: follows the best of five simulated policies \
        (pcache::policy) with today's re-mark rule; the re-reads reach it as accesses",
        || Tunables { policy: PolicyKind::Pcache, ..with_rule(RemarkRule::PrevPos) },
    )
    .optional(),
];

// The SPECweb99 fileset: the share of requests per class, the size of each
// class's first file (file `i` is `i + 1` times it), the popularity of the 9
// files within a class (percent).
pub(super) const CLASS_MIX: [f64; 4] = [0.35, 0.50, 0.14, 0.01];
pub(super) const CLASS_BASE: [u64; 4] = [102, 1024, 10240, 102400];
pub(super) const IN_CLASS: [f64; 9] = [3.9, 5.9, 8.8, 17.7, 35.3, 11.8, 7.4, 5.3, 4.2];

pub(super) const FILES_PER_DIR: usize = 36;

pub(super) fn file_size(k: usize) -> u64 {
    CLASS_BASE[k / 9] * (k % 9 + 1) as u64
}

/// Bytes of one directory (about 4.9 MiB).
pub(super) fn dir_bytes() -> u64 {
    (0..FILES_PER_DIR).map(file_size).sum()
}

/// Everything a run needs, derived from [`ExpOpts`] and the cache size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub mem_bytes: u64,
    pub page_size: u64,
    pub runs: usize,
    pub quick: bool,
    pub seed: u64,
    pub variants: Vec<String>,
    pub server_threads: usize,
    pub dirs: usize,
    pub dir_zipf_s: f64,
    /// All threads, warm-up included.
    pub requests: usize,
    pub warmup_requests: usize,
    pub round_requests: usize,
    /// Pages the streamer reads per request served.
    pub stream_pages_per_request: u64,
    /// Also the scan's file.
    pub stream_bytes: u64,
    pub ws_bytes: u64,
    pub rr_file_bytes: u64,
    pub rr_reads: usize,
    /// Each streaming write's file (10 MB at 128 MB).
    pub junk_bytes: u64,
    /// Files the writer creates during the reads.
    pub junk_files: usize,
}

impl Params {
    /// The sizes for `opts`: a 64 MiB cache and 5 runs, or 16 MiB and 3
    /// quick; everything else scales with the cache.
    pub fn new(opts: &ExpOpts) -> Result<Params> {
        let quick = opts.quick;
        let c = opts.common(PRESETS, (16 * MIB, 64 * MIB), (3, 5), 4 << 30)?;
        let (mem, runs, variants) = (c.mem_bytes, c.runs, c.variants);
        let ps = Config::default().page_size as u64;
        let pages = |bytes: f64| ((bytes / ps as f64).round() as u64).max(1) * ps;
        let m = mem as f64;
        let server_threads = 2;
        let round_requests = 64;
        let per_mib = if quick { 1000.0 } else { 1500.0 };
        let rounds = ((per_mib * m / MIB as f64) as usize / round_requests).max(12);
        let rr_file_bytes = pages(m / 2.0);
        let junk_bytes = pages(m * 10.0 / 128.0);
        Ok(Params {
            mem_bytes: mem,
            page_size: ps,
            runs,
            quick,
            seed: opts.seed,
            variants,
            server_threads,
            dirs: ((2.0 * m / dir_bytes() as f64).round() as usize).max(2),
            dir_zipf_s: 1.0,
            requests: rounds * round_requests,
            warmup_requests: rounds / 3 * round_requests,
            round_requests,
            stream_pages_per_request: 2,
            stream_bytes: pages(2.0 * m),
            ws_bytes: pages(m * 0.35),
            rr_file_bytes,
            // 64000 reads of a 64 MiB file: 3.9 per page.
            rr_reads: (64000.0 * rr_file_bytes as f64 / (64 * MIB) as f64).round() as usize,
            junk_bytes,
            junk_files: ((1.5 * m / junk_bytes as f64).ceil() as usize).max(2),
        })
    }

    fn files(&self) -> usize {
        self.dirs * FILES_PER_DIR
    }

    fn rounds(&self) -> usize {
        self.requests / self.round_requests
    }

    fn warm_rounds(&self) -> usize {
        self.warmup_requests / self.round_requests
    }

    /// Bytes the streamer reads per round.
    fn stream_round_bytes(&self) -> u64 {
        self.stream_pages_per_request * self.round_requests as u64 * self.page_size
    }

    /// The workloads in words, for the report.
    fn describe(&self) -> Vec<(&'static str, String)> {
        let fileset = self.dirs as u64 * dir_bytes();
        let stream_total = self.requests as u64 * self.stream_pages_per_request * self.page_size;
        vec![
            (
                "server",
                format!(
                    "SPECweb99 fileset of {} dirs x 36 files ({}, {:.1}x cache; 53% of requests for files of 4 KiB \
                     or less), Zipf({}) over dirs; {} requests by {} threads re-reading whole files through one \
                     handle per file ({} warm-up, not measured), in rounds of {}; a streamer reads a file of {} \
                     sequentially in 128 KiB reads, {} pages per request ({} in all, {:.1}x cache)",
                    self.dirs,
                    fmt_size(fileset),
                    fileset as f64 / self.mem_bytes as f64,
                    self.dir_zipf_s,
                    self.requests,
                    self.server_threads,
                    self.warmup_requests,
                    self.round_requests,
                    fmt_size(self.stream_bytes),
                    self.stream_pages_per_request,
                    fmt_size(stream_total),
                    stream_total as f64 / self.mem_bytes as f64
                ),
            ),
            (
                "scan",
                format!(
                    "working set of {} ({:.0}% of cache) read twice in 4 KiB reads, then a file of {} read \
                     sequentially in 512-byte reads",
                    fmt_size(self.ws_bytes),
                    self.ws_bytes as f64 / self.mem_bytes as f64 * 100.0,
                    fmt_size(self.stream_bytes)
                ),
            ),
            (
                "random",
                format!(
                    "{} reads of 128 bytes at random offsets of a cold {} file ({:.0}% of cache); meanwhile a \
                     writer creates {} files of {} ({} in all, {:.1}x cache), each written in 1 MiB blocks, \
                     fsynced and read back (dd; sync; cat), one per {} reads",
                    self.rr_reads,
                    fmt_size(self.rr_file_bytes),
                    self.rr_file_bytes as f64 / self.mem_bytes as f64 * 100.0,
                    self.junk_files,
                    fmt_size(self.junk_bytes),
                    fmt_size(self.junk_bytes * self.junk_files as u64),
                    (self.junk_bytes * self.junk_files as u64) as f64 / self.mem_bytes as f64,
                    self.rr_reads / self.junk_files
                ),
            ),
        ]
    }
}

/// `pcache bench small-file-server`.
pub struct SmallFileServer;

impl SeedExperiment for SmallFileServer {
    type Params = Params;
    type Raw = ();
    const NAME: &'static str = EXPERIMENT;
    const ORIGIN: &'static str = "Ashif Harji and Nick Piggin, linux-kernel, March 2007, Linux 2.6.20";
    const CLAIM: &'static str = "unconditional marking raised a SPECweb99-like server's throughput ~20% (868 -> 1111 \
                                 Mbps) over 2.6.20's prev_index rule, which never re-marks a one-page file read again \
                                 through the same descriptor; Piggin's !offset and the prev_pos fix keep those pages \
                                 too; marking every small read lets a small-chunk scan flush the working set; \
                                 page-aligned-only marking (before 2.6.11) lets 128-byte random reads be evicted by \
                                 streaming writes";
    const SUBJECT: &'static str = "when read() re-marks a page accessed";
    const ABOUT: &'static str =
        "Ashif Harji's 2007 thread: a SPECweb99-like small-file server under streaming, every re-mark \
                                 rule; small-chunk scans and 128-byte random reads.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "params";

    fn smoke() -> ExpOpts {
        ExpOpts { mem_bytes: Some(4 << 20), ..ExpOpts::smoke(&[]) }
    }
    crate::runner::params_from!(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the fileset is SPECweb99's: 36 files per directory, about
    // 4.9 MiB, and about half the requests are for files of one page.
    #[test]
    fn fileset_is_specweb99() {
        assert_eq!(file_size(0), 102);
        assert_eq!(file_size(8), 918);
        assert_eq!(file_size(9 + 3), 4096);
        assert_eq!(file_size(35), 921_600);
        let d = dir_bytes() as f64 / MIB as f64;
        assert!((4.8..5.0).contains(&d), "{d}");
        let in_total: f64 = IN_CLASS.iter().sum();
        let small = CLASS_MIX[0] + CLASS_MIX[1] * IN_CLASS[..4].iter().sum::<f64>() / in_total;
        assert!((0.5..0.56).contains(&small), "{small}");
    }

    // Goal: bad options are refused, good ones scale with the cache.
    #[test]
    fn params() {
        let q = Params::new(&ExpOpts { quick: true, ..ExpOpts::default() }).unwrap();
        assert_eq!(q.mem_bytes, 16 * MIB);
        assert_eq!(q.variants[0], PREV_INDEX);
        assert_eq!(q.variants.len(), 7, "the six M7 rules and mglru");
        let f = Params::new(&ExpOpts::default()).unwrap();
        assert_eq!(f.rr_file_bytes, 32 * MIB);
        assert_eq!(f.rr_reads, 32000);
        assert!(f.requests > f.warmup_requests && f.warmup_requests > 0);
        let bad = [
            ExpOpts { mem_bytes: Some(MIB), ..ExpOpts::default() },
            ExpOpts { runs: Some(0), ..ExpOpts::default() },
            ExpOpts { variants: Some(vec!["2.4".into()]), ..ExpOpts::default() },
        ];
        crate::experiment::assert_checked(&[], &bad, |o| Params::new(o).map(drop));
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        // One preset per M7 rule, mglru, and three optional plug-ins.
        assert_eq!(names.len(), RemarkRule::ALL.len() + 1 + 3);
        assert_eq!(PRESETS.iter().filter(|p| p.default).count(), RemarkRule::ALL.len() + 1);
        for rule in RemarkRule::ALL {
            assert!(PRESETS.iter().any(|p| (p.tunables)().remark_rule == rule), "{}", rule.name());
        }
    }
}

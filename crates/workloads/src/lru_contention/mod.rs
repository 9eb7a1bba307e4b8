//! `lru-contention`: Nikita Danilov's batched
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
//! The workload (`LruContentionOpts::describe`): threads, oversubscribing
//! the CPUs on purpose, read 4 KiB pages at Zipf keys over a working set
//! that does not fit, so reclaim runs and pages keep moving between the
//! lists; every variant reads the same keys. Misses are served by a
//! synthetic device that fills the frame in memory (no I/O wait), so
//! throughput is the CPU cost of hits, marking, list moves and reclaim,
//! where the variants differ. The kernel column reads real files, whose
//! misses wait for the disk.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pcache::{Advice, BackingDev, Config, File, Item, LruBatching, LruPolicy, PageCache, PolicyKind, Tunables, VmStat};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{ExpOpts, ParamDoc};
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_pct, fmt_size, fmt_value, vmstat_section};
use crate::report::{significant, Check, ExperimentResult, Mean, MetricSpec, Named, Samples};
use crate::runner::{into_map, Ctx, KernelColumn, Measured, SeedChecks, SeedExperiment, SeedKernel};
use crate::runner::{SeedMeasure, SeedReport, KERNEL_COLUMN};
use crate::stats::{pct_better, ratio, Better, Summary};
use crate::sys::{cpus, kernel_release};
use crate::variants::{self, seed_tunables, Preset};
use crate::zipf::ZipfKeys;
use crate::{Error, Result};

mod checks;
mod kernel_side;
mod report;
mod workload;

pub const EXPERIMENT: &str = "lru-contention";
/// The variants the checks compare.
pub const BEFORE: &str = "2.6.10";
pub const DANILOV: &str = "danilov";
pub const TODAY: &str = "batched";
/// Linux 6.1+'s multi-gen LRU: marking counts in the page's
/// flags, no activation batch at all.
pub const MGLRU: &str = "mglru";

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        BEFORE,
        "Linux 2.6.10: mark_page_accessed activates an inactive, referenced page at once, taking \
        lru_lock for each activation (LruBatching::Immediate2610)",
        || Tunables { lru_batching: LruBatching::Immediate2610, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        DANILOV,
        "Nikita Danilov's patch: every mark_page_accessed call takes a page reference and goes into \
        a per-CPU pagevec; the state machine runs under one lru_lock acquisition per 15 calls \
        (LruBatching::DanilovBatch)",
        || Tunables { lru_batching: LruBatching::DanilovBatch, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        TODAY,
        "Linux today: PG_referenced is set in place; only activations go through the per-CPU \
        pagevec of 15 (LruBatching::Batched)",
        || Tunables { lru_batching: LruBatching::Batched, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        MGLRU,
        "Linux 6.1+ multi-gen LRU (CONFIG_LRU_GEN): mark_page_accessed only counts the access in the \
        page's flags (folio_inc_refs, one compare-and-swap until the count is full), no lru_lock",
        || Tunables { lru: LruPolicy::MultiGen, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        "s3fifo",
        "plug-in policy S3-FIFO (SOSP'23): a small FIFO for new pages, a main CLOCK, a ghost \
        (pcache::policy): a hit raises a per-frame count, with no lock",
        || Tunables { policy: PolicyKind::S3fifo, ..seed_tunables() },
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "sieve",
        "plug-in policy SIEVE (NSDI'24): a hand sweeping from the oldest page spares visited ones \
        (pcache::policy): a hit sets a per-frame visited bit, with no lock",
        || Tunables { policy: PolicyKind::Sieve, ..seed_tunables() },
    )
    .optional(),
    Preset::new(
        EXPERIMENT,
        "pcache",
        "plug-in policy pcache's own: follows the best of five simulated policies \
        (pcache::policy): accesses reach it through per-thread rings, 15 at a time",
        || Tunables { policy: PolicyKind::Pcache, ..seed_tunables() },
    )
    .optional(),
];

crate::experiment::params! {
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct LruContentionOpts {
        pub mem_bytes: u64 = 128 * MIB, quick 16 * MIB;
        pub variants: Vec<String> = variants::defaults(PRESETS);
        pub runs: usize = 5, quick 3;
        pub threads: Vec<usize> = vec![1, 2, 4],
            param param_list "thread counts, one workload each, comma-separated [default: 1,2,4]", each 1..=256;
        pub ops_per_thread: u64 = 1_000_000, quick 500_000,
            param param_as "timed 4 KiB reads per thread [default: 1000000; quick: 500000]", range 1..=1_000_000_000;
        pub warm_ratio: f64 = 4.0,
            param param_as "untimed Zipf reads first, in multiples of the working set's pages [default: 4]",
            range 0.0..=100.0;
        /// The files' pages in all, in multiples of the cache.
        pub working_set_ratio: f64 = 1.25;
        /// Every thread reads all.
        pub files: usize = 4;
        pub zipf_s: f64 = 0.9;
        /// `Config::nr_cpus`; 0 means the machine's CPUs.
        pub nr_cpus: usize = 0;
        /// Fewer: its misses wait for the disk.
        pub kernel_ops_per_thread: u64 = 100_000, quick 50_000,
            param param_as "timed reads per thread in the kernel column";
        pub seed: u64 = 1, opt seed;
        pub quick: bool = false, quick true;
    }
}

impl LruContentionOpts {
    pub fn from_exp(o: &ExpOpts) -> Result<Self> {
        let (quick, full) = (Self::defaults(true), Self::defaults(false));
        let c = o.common(PRESETS, (quick.mem_bytes, full.mem_bytes), (quick.runs, full.runs), 64 << 30)?;
        let mut opts =
            LruContentionOpts { mem_bytes: c.mem_bytes, variants: c.variants, runs: c.runs, ..Self::defaults(o.quick) };
        opts.set_params(o)?;
        opts.validate()?;
        Ok(opts)
    }

    pub fn validate(&self) -> Result<()> {
        self.check_ranges()?;
        let bad = |m: String| Err(Error::Invalid(m));
        let mut sorted = self.threads.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.threads.len() {
            return bad(format!("thread counts {:?} must not repeat", self.threads));
        }
        if self.kernel_ops_per_thread > self.ops_per_thread || self.kernel_ops_per_thread == 0 {
            return bad(format!(
                "kernel reads per thread {} must be from 1 to the reads per thread ({})",
                self.kernel_ops_per_thread, self.ops_per_thread
            ));
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

fn workload_name(threads: usize) -> String {
    format!("zipf-{threads}t")
}

/// One look at the LRU lists during the timed reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct LruSample {
    /// Seconds since the timed reads started.
    pub(super) t_s: f64,
    pub(super) active: u64,
    pub(super) inactive: u64,
    pub(super) free: u64,
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
    pub(super) fn active_fraction(&self) -> f64 {
        let lru = self.active + self.inactive;
        if lru == 0 {
            f64::NAN
        } else {
            self.active as f64 / lru as f64
        }
    }
}

/// The LRU list sizes sampled in the first run at the most threads, per
/// variant: what the plots draw beyond the columns.
pub struct LruSeries(Vec<(String, Vec<LruSample>)>);

/// `pcache bench lru-contention`.
pub struct LruContention;

impl SeedExperiment for LruContention {
    type Params = LruContentionOpts;
    type Raw = LruSeries;
    const NAME: &'static str = EXPERIMENT;
    const ORIGIN: &'static str = "Nikita Danilov, Nov 2004, for Linux 2.6.10-rc2";
    const CLAIM: &'static str = "batching mark_page_accessed through per-CPU pagevecs (Danilov, 2.6.10-rc2) cuts \
                                 zone->lru_lock contention: reaim peak jobs/min +6.4% on an 8-way; but every batched \
                                 page takes a reference, extra atomic ops (Andrew Morton), kernbench -j4 got 12% slower, \
                                 and the batching changes the LRU order and so the efficiency of VM scanning, mostly \
                                 kswapd's (Danilov, Tosatti)";
    const SUBJECT: &'static str = "batched mark_page_accessed";
    const ABOUT: &'static str =
        "Nikita Danilov's 2004 patch: threads hitting cached pages: 2.6.10 immediate activation against \
                                 batched mark_page_accessed.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "opts";
    const PARAMS: &'static [ParamDoc] = LruContentionOpts::PARAMS;

    fn smoke() -> ExpOpts {
        ExpOpts::smoke(&[
            ("threads", "1,2"),
            ("ops_per_thread", "20000"),
            ("warm_ratio", "2"),
            ("kernel_ops_per_thread", "5000"),
        ])
    }
    crate::runner::params_from!(from_exp);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let t = || LruContentionOpts::defaults(true);
        let ok = [LruContentionOpts::default(), t()];
        let bad = [
            LruContentionOpts { threads: vec![], ..t() },
            LruContentionOpts { threads: vec![0], ..t() },
            LruContentionOpts { threads: vec![2, 2], ..t() },
            LruContentionOpts { ops_per_thread: 0, ..t() },
            LruContentionOpts { kernel_ops_per_thread: 0, ..t() },
            LruContentionOpts { working_set_ratio: f64::NAN, ..t() },
            LruContentionOpts { zipf_s: -1.0, ..t() },
            LruContentionOpts { files: 0, ..t() },
        ];
        crate::experiment::assert_checked(&ok, &bad, LruContentionOpts::validate);
        // The shared options reach it, and bad ones are refused.
        let exp = ExpOpts {
            mem_bytes: Some(8 << 20),
            variants: Some(vec!["batched".into(), "2.6.10".into()]),
            runs: Some(2),
            quick: true,
            ..ExpOpts::default()
        };
        let o = LruContentionOpts::from_exp(&exp).unwrap();
        assert_eq!((o.mem_bytes, o.runs, o.quick), (8 << 20, 2, true));
        assert_eq!(o.variants, ["batched", "2.6.10"]);
        assert!(LruContentionOpts::from_exp(&ExpOpts { variants: Some(vec!["2.4".into()]), ..exp }).is_err());
    }

    // Goal: the presets select the three M5 variants, 2.6.10 first, and
    // the multi-gen LRU last.
    #[test]
    fn presets() {
        let v = variants::resolve(PRESETS, &variants::defaults(PRESETS)).unwrap();
        let names: Vec<&str> = v.iter().map(|p| p.name).collect();
        assert_eq!(names, [BEFORE, DANILOV, TODAY, MGLRU]);
        let modes: Vec<LruBatching> = v.iter().map(|p| (p.tunables)().lru_batching).collect();
        assert_eq!(modes[..3], [LruBatching::Immediate2610, LruBatching::DanilovBatch, LruBatching::Batched]);
        let lrus: Vec<LruPolicy> = v.iter().map(|p| (p.tunables)().lru).collect();
        assert_eq!(lrus, [LruPolicy::Classic, LruPolicy::Classic, LruPolicy::Classic, LruPolicy::MultiGen]);
    }
}

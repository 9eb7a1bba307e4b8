//! `hitpath`: how fast is a page cache hit? Every figure the median of
//! several rounds:
//!
//! 1. random 4 KiB reads of a fully cached file: pcache's `read_at`, the
//!    kernel's `pread(2)` and a bare 4 KiB copy (the physical limit),
//!    interleaved round by round; and hot reads of one page;
//! 2. the hit path alone: `find_page` and drop on a memory-backed file,
//!    keys Zipf(0.99) scrambled over it, with 1 and more threads;
//! 3. mapped access ([`pcache::Mapping`]) on the same keys, against the
//!    kernel's own mapped page cache (a populated shared mapping of a
//!    memfd): the kernel row is the hardware's cost of touching those
//!    pages, the difference what pcache's software page table adds.
//!
//! `workload.rs` times the phases, `kernel_side.rs` is the kernel's
//! mapping, `report.rs` the report and targets; this file holds what they
//! share.

mod kernel_side;
mod report;
mod workload;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::experiment::ExpOpts;
pub(crate) use crate::sys::Aligned;
use crate::{Error, Result};
pub use workload::{run, BATCH_KEYS};

pub const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;
/// Frames beyond the data, so that neither cache needs to reclaim.
const SLACK_BYTES: u64 = 64 * MIB;

pub const TARGET_KERNEL_OVER_PCACHE: f64 = 1.5;
pub const TARGET_PCACHE_OVER_MEMCPY: f64 = 1.25;
pub const TARGET_HOT_KERNEL_OVER_PCACHE: f64 = 4.0;
pub const TARGET_HIT_NS_1THREAD: f64 = 25.0;
pub const TARGET_SCALING_2THREADS: f64 = 1.8;
/// find_page with a plug-in policy over the built-in path's, at most.
pub const TARGET_POLICY_OVER_BUILTIN: f64 = 1.2;

crate::experiment::params! {
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct HitpathOpts {
        pub file_mib: u64 = 256, quick 64,
            param param_as "size of the host file for the read measurements, MiB [default: 256; quick: 64]",
            range 1..=1 << 20;
        pub hit_pages: u64 = 1 << 20, quick 64 << 10,
            param param_as "pages (4 KiB) of the memory-backed file for the hit path [default: 1048576; quick: 65536]",
            range 1..=1 << 30;
        pub ops: u64 = 2_000_000, quick 200_000,
            param param_as "operations per measurement, per thread on the hit path [default: 2000000; quick: 200000]",
            range 1..=1 << 32;
        /// 1 and 2 fill `hit_ns_1thread`, `hit_ns_2threads` and `scaling_2threads`.
        pub threads: Vec<usize> = vec![1, 2],
            param param_list "hit-path thread counts, comma-separated [default: 1,2]", each 1..=256;
        pub seed: u64 = 1, opt seed;
        pub rounds: usize = 5, quick 3;
        pub zipf_s: f64 = 0.99;
        #[serde(skip)]
        pub dir: Option<PathBuf> = None, opt dir;
        #[serde(skip)]
        pub progress: bool = true, opt progress;
        pub quick: bool = false, quick true;
    }
}

impl HitpathOpts {
    pub fn validate(&self) -> Result<()> {
        self.check_ranges()?;
        if !(1..=1000).contains(&self.rounds) {
            return Err(Error::Invalid(format!("rounds {} must be from 1 to 1000", self.rounds)));
        }
        if !(self.zipf_s >= 0.0 && self.zipf_s.is_finite()) {
            return Err(Error::Invalid(format!("zipf exponent {} must be finite and at least 0", self.zipf_s)));
        }
        Ok(())
    }

    /// `--runs` is its rounds.
    pub fn from_exp(opts: &ExpOpts) -> Result<HitpathOpts> {
        let mut o = HitpathOpts::defaults(opts.quick);
        o.set_params(opts)?;
        o.rounds = opts.runs.unwrap_or(o.rounds);
        o.validate().map(|()| o)
    }
}

/// The hit path at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitRun {
    /// What each op is: `find_page` (look up, pin, drop), `pageref` (the
    /// same, reading 8 bytes through the pin), `mapped` (`Mapping::page` of
    /// a present entry and an 8-byte `load_u64`), `pagemut` (a write pin,
    /// 8 bytes written, dropped: the page dirtied and throttled),
    /// `kernel_mapped` (an 8-byte load from the kernel's mapping of a
    /// memfd as large as the file), `mapped_batch` (`load_u64_many`; its
    /// figures are per key).
    #[serde(default = "find_page_access")]
    pub access: String,
    pub threads: usize,
    /// Median over rounds of the ns per op each thread saw (its CPU time
    /// over its ops, averaged over the threads; in older results, its
    /// elapsed time).
    pub ns_per_op: f64,
    /// The best round's ns per op: on a shared machine, the closest to the
    /// path's own cost. 0 in older results.
    #[serde(default)]
    pub best_ns_per_op: f64,
    /// Median over rounds of the total throughput, million ops per second
    /// (per thread, ops over CPU time, summed: the throughput were each
    /// thread on a CPU of its own).
    pub mops: f64,
    pub rounds_ns_per_op: Vec<f64>,
    pub rounds_mops: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadSamples {
    pub pcache_read_ns: Vec<f64>,
    pub kernel_pread_ns: Vec<f64>,
    pub memcpy_ns: Vec<f64>,
    pub pcache_hot_read_ns: Vec<f64>,
    pub kernel_hot_pread_ns: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    /// The key of the measured value in this result.
    pub key: String,
    pub value: Option<f64>,
    /// E.g. `>= 1.5`.
    pub goal: String,
    /// `PASS`, `MISS` or `NOT RUN`.
    pub status: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSecs {
    pub setup: f64,
    pub random_read: f64,
    pub hot_read: f64,
    pub hit_setup: f64,
    pub hit: f64,
    pub total: f64,
}

/// `pcache bench hitpath --json`; reads back older results, which lacked
/// some rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HitpathResult {
    pub experiment: String,
    #[serde(flatten)]
    pub opts: HitpathOpts,
    pub page_size: usize,
    pub optimized: bool,
    // Medians, ns per op.
    pub pcache_read_ns: f64,
    pub kernel_pread_ns: f64,
    pub memcpy_ns: f64,
    pub pcache_hot_read_ns: f64,
    pub kernel_hot_pread_ns: f64,
    pub hit_ns_1thread: Option<f64>,
    pub hit_ns_2threads: Option<f64>,
    /// find_page plus an 8-byte read through the PageRef (the validated
    /// copy of the sound frame access), 1 thread.
    pub pageref_hit_ns_1thread: Option<f64>,
    /// A mapped access with the page present (M15): entry load, pin,
    /// re-check, young byte, an 8-byte load, unpin.
    pub mapped_hit_ns_1thread: Option<f64>,
    pub mapped_hit_ns_2threads: Option<f64>,
    /// The kernel's mapped page cache on the same keys: an 8-byte load
    /// from a populated shared mapping of a memfd as large as the file.
    pub kernel_mapped_ns_1thread: Option<f64>,
    /// `mapped_hit_ns_1thread - kernel_mapped_ns_1thread`: what pcache's
    /// software page table, pin and guard add to the hardware's access.
    pub mapped_over_kernel_ns: Option<f64>,
    /// The same access without a guard (`Mapping::load_u64`: entry load,
    /// transient pin, re-check, young byte, the 8-byte load, unpin).
    pub mapped_load_ns_1thread: Option<f64>,
    pub mapped_load_ns_2threads: Option<f64>,
    /// `mapped_load_ns_1thread - kernel_mapped_ns_1thread`.
    pub mapped_load_over_kernel_ns: Option<f64>,
    /// The batched access (`Mapping::load_u64_many`, keys handed over
    /// [`BATCH_KEYS`] at a time), ns per key.
    pub mapped_batch_ns_1thread: Option<f64>,
    pub mapped_batch_ns_2threads: Option<f64>,
    /// A write pin of a cached page, 8 bytes written, dropped, 1 thread.
    pub pagemut_write_ns_1thread: Option<f64>,
    /// find_page on a cache built with the multi-gen LRU, 1
    /// and 2 threads, and what it adds to the classic find_page at 1
    /// thread: the cost of MGLRU's marking (folio_inc_refs) against the
    /// two lists' PAGE_HOT hint.
    pub mglru_hit_ns_1thread: Option<f64>,
    pub mglru_hit_ns_2threads: Option<f64>,
    pub mglru_marking_ns: Option<f64>,
    /// find_page on a cache whose pages the S3-FIFO plug-in holds (its
    /// per-frame access count, then the ceiling hint), 1 and 2 threads;
    /// its 1-thread time over that of the kernel's lists on a cache of the
    /// same pages alternated with it (rows `find_page_lists`), and its
    /// scaling.
    pub policy_hit_ns_1thread: Option<f64>,
    pub policy_hit_ns_2threads: Option<f64>,
    pub policy_over_builtin: Option<f64>,
    pub policy_scaling_2threads: Option<f64>,
    // Ratios.
    pub kernel_over_pcache: f64,
    pub pcache_over_memcpy: f64,
    pub hot_kernel_over_pcache: f64,
    /// throughput(2 threads) / throughput(1 thread).
    pub scaling_2threads: Option<f64>,
    /// The same for the mapped access.
    pub mapped_scaling_2threads: Option<f64>,
    // Details.
    pub hit: Vec<HitRun>,
    pub samples: ReadSamples,
    pub targets: Vec<Target>,
    pub phase_secs: PhaseSecs,
    /// pcache vmstat deltas: `read_setup` (creating the read cache and
    /// warming it), `read` (the timed reads), `hit_setup` (populating the
    /// hit-path cache), `hit` (the timed lookups), `hit_mglru` and
    /// `hit_policy` (the timed lookups of the multi-gen LRU's and the
    /// S3-FIFO plug-in's rows).
    pub vmstat: serde_json::Value,
    pub notes: Vec<String>,
}

fn find_page_access() -> String {
    "find_page".into()
}

pub struct Hitpath;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let bad = [
            HitpathOpts { file_mib: 0, ..HitpathOpts::defaults(true) },
            HitpathOpts { hit_pages: 0, ..HitpathOpts::defaults(true) },
            HitpathOpts { ops: 0, ..HitpathOpts::defaults(true) },
            HitpathOpts { rounds: 0, ..HitpathOpts::defaults(true) },
            HitpathOpts { threads: vec![], ..HitpathOpts::defaults(true) },
            HitpathOpts { threads: vec![1, 0], ..HitpathOpts::defaults(true) },
            HitpathOpts { zipf_s: f64::NAN, ..HitpathOpts::defaults(true) },
        ];
        crate::experiment::assert_checked(
            &[HitpathOpts::default(), HitpathOpts::defaults(true)],
            &bad,
            HitpathOpts::validate,
        );
    }
}

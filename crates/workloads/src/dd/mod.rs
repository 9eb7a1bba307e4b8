//! `pcache bench dd`: Mel Gorman's "non-atomically mark page
//! accessed during page cache allocation where possible" (accessed-v2,
//! commit 2457aec6), 3.15-rc3 vanilla against accessed-v2.
//!
//! The seed timed "a simple dd of a large file done multiple times with the
//! file deleted on each iteration", the file 1/10 of physical memory to keep
//! out of dirty balancing, async and with `conv=fdatasync`; it reported the
//! async Max elapsed time (accessed-v2 faster everywhere: tmpfs 3.9%, ext3
//! 17%, ext4 28%) and oprofile samples in `mark_page_accessed` (tmpfs 59562
//! in vanilla against 94 + 1210 in `init_page_accessed` with the patch).
//!
//! Here four workloads, memory-only files (tmpfs) and host files, each
//! async and fdatasync, `iterations` times after an untimed warm-up that
//! faults the arena in. Elapsed runs from the open to the return of the
//! close, as dd's own timing; `cpu_s` is the writer thread's CPU time,
//! which stops while the thread is preempted (on a shared machine most of
//! the wall-time noise). The cost counters per page written tell vanilla's
//! atomic RMW on the visible page from accessed-v2's plain store before it
//! is visible. The variants run side by side, the order alternating from
//! one iteration to the next, so that drifts of the machine fall on both.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pcache::{AccessedInit, Config, Item, OpenOptions, PageCache, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::ExpOpts;
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_cell, fmt_size, vmstat_section};
use crate::report::{amean, significant, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult};
use crate::runner::{into_map, Ctx, KernelColumn, Measured, SeedChecks, SeedExperiment, SeedKernel, SeedMeasure};
use crate::runner::{SeedReport, Variant};
use crate::stats::{pct_better, Better};
pub use crate::sys::Backend;
use crate::sys::{is_tmpfs, kernel_release, pattern, thread_cpu_s};
use crate::variants::{seed_tunables, Preset};
use crate::{Error, Result};

mod checks;
mod kernel_side;
mod report;
mod workload;

pub const EXPERIMENT: &str = "dd";
pub const BEFORE: &str = "3.15-vanilla";
pub const AFTER: &str = "accessed-v2";

const MIB: u64 = 1 << 20;
pub const BLOCK: u64 = MIB;
/// mark_page_accessed calls per page must fall by this fraction for the
/// "drops sharply" check (the seed's tmpfs profile fell by 98%).
pub const SHARP_DROP: f64 = 0.9;

pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        BEFORE,
        "Linux 3.15-rc3 vanilla: grab_cache_page_write_begin inserts the new page, then \
        mark_page_accessed sets PG_referenced on the visible page with an atomic RMW \
        (AccessedInit::Vanilla315)",
        || Tunables { accessed_init: AccessedInit::Vanilla315, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        AFTER,
        "3.15-rc3 + accessed-v2 (commit 2457aec6): pagecache_get_page(FGP_ACCESSED) calls \
        init_page_accessed, a plain store before the page is visible, and the write path skips \
        mark_page_accessed (AccessedInit::AccessedV2)",
        || Tunables { accessed_init: AccessedInit::AccessedV2, ..seed_tunables() },
    ),
];

/// How dd ends each file: dirty, or `conv=fdatasync` (timed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    Async,
    Fdatasync,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Async => "async",
            Mode::Fdatasync => "fdatasync",
        }
    }
}

pub const WORKLOADS: [(Backend, Mode); 4] = [
    (Backend::Tmpfs, Mode::Async),
    (Backend::Tmpfs, Mode::Fdatasync),
    (Backend::File, Mode::Async),
    (Backend::File, Mode::Fdatasync),
];

pub fn workload_name(b: Backend, m: Mode) -> String {
    format!("{}-{}", b.name(), m.name())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdParams {
    pub mem_bytes: u64,
    /// A tenth of the cache, whole pages.
    pub file_bytes: u64,
    pub block_bytes: u64,
    /// Timed, after one untimed warm-up.
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
    pub fn from_opts(opts: &ExpOpts) -> Result<DdParams> {
        let c = opts.common(PRESETS, (QUICK_MEM, FULL_MEM), (QUICK_RUNS, FULL_RUNS), 64 << 30)?;
        let page_size = Config::default().page_size;
        Ok(DdParams {
            mem_bytes: c.mem_bytes,
            file_bytes: (c.mem_bytes / 10 / page_size as u64).max(1) * page_size as u64,
            block_bytes: BLOCK,
            iterations: if opts.quick { QUICK_ITERATIONS } else { FULL_ITERATIONS },
            runs: c.runs,
            variants: c.variants,
            quick: opts.quick,
            page_size,
        })
    }

    fn pages(&self) -> u64 {
        self.file_bytes.div_ceil(self.page_size as u64)
    }
}

pub struct Dd;

impl SeedExperiment for Dd {
    type Params = DdParams;
    type Raw = ();
    const NAME: &'static str = EXPERIMENT;
    const ORIGIN: &'static str = "Mel Gorman, Linux 3.16, commit 2457aec6";
    const CLAIM: &'static str = "accessed-v2 against 3.15-rc3 vanilla: async dd Max elapsed down on every filesystem \
                                 (tmpfs 0.51->0.49s +3.9%, ext3 +17%, ext4 +28%, xfs +83%, btrfs +0.2%); \
                                 mark_page_accessed profile samples down sharply (tmpfs 59562 -> 94, plus 1210 in \
                                 init_page_accessed)";
    const SUBJECT: &'static str = "non-atomically mark page accessed during page cache allocation";
    const ABOUT: &'static str =
        "Mel Gorman's accessed-v2 (Linux 3.16): dd of a file of 1/10 of memory, repeated, async and fdatasync, memory \
                                 and real files: 3.15 vanilla against accessed-v2.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "dd";

    crate::runner::params_from!(from_opts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_sizes() {
        // Both presets run by default, the seed's before first.
        let v: Vec<_> = PRESETS.iter().map(|p| (p.name, p.default, (p.tunables)().accessed_init)).collect();
        assert_eq!(v, [(BEFORE, true, AccessedInit::Vanilla315), (AFTER, true, AccessedInit::AccessedV2)]);
        let p = DdParams::from_opts(&ExpOpts::default()).unwrap();
        assert_eq!((p.mem_bytes, p.file_bytes, p.iterations, p.runs), (FULL_MEM, FULL_MEM / 10 / 4096 * 4096, 10, 3));
        let q = DdParams::from_opts(&ExpOpts { quick: true, ..ExpOpts::default() }).unwrap();
        assert_eq!((q.mem_bytes, q.iterations, q.runs), (QUICK_MEM, 3, 3));
        let t = DdParams::from_opts(&ExpOpts { mem_bytes: Some(8 * MIB), ..ExpOpts::default() }).unwrap();
        assert_eq!(t.file_bytes, 8 * MIB / 10 / 4096 * 4096);
        assert!(t.file_bytes > 800 * 1024 - 4096);
        let bad = [
            ExpOpts { mem_bytes: Some(MIB), ..ExpOpts::default() },
            ExpOpts { runs: Some(0), ..ExpOpts::default() },
            ExpOpts { variants: Some(vec!["3.14".into()]), ..ExpOpts::default() },
        ];
        crate::experiment::assert_checked(&[], &bad, |o| DdParams::from_opts(o).map(drop));
    }
}

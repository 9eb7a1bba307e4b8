//! `pcache bench sparsetruncate`: Mel Gorman's "only drain per-cpu
//! pagevecs once per pagevec usage" ([PATCH 4/8] of Oct 2017, Linux 4.15;
//! 4.14-rc4 batchshadow-v1r1 against onedrain-v1r1).
//!
//! The original ran mmtests' sparsetruncate (tiny): sparse files are created
//! (`ftruncate`, no data) and read with a 16-byte `pread` at every page, so
//! that hole pages fill the page cache; then each file is unlinked and every
//! unlink timed. `__pagevec_release` called `lru_add_drain` on every release
//! of the truncation's pagevec; with the patch, once per pagevec lifecycle.
//! It reported the truncate times' distribution: Max 254 -> 208 µs, Stddev
//! 12.74 -> 9.62, Amean 145.12 -> 144.30.
//!
//! Here every cache is filled to `fill_ratio` with sparse files of 4 MiB
//! (as in Jan Kara's truncation benchmark of the same series), memory-only
//! and host files (the host's unlink inside the timing, as in the original),
//! then unlinked one by one, the variants taking turns file by file. Every
//! truncate's wall time and its thread CPU time (which leaves out
//! preemption, on a shared machine most of the wall-time tail) are pooled
//! over rounds and runs; the report prints the original's rows for every
//! variant and the cost of one drain implied by the difference of the CPU
//! times.
//!
//! A third variant, largefolios (onedrain with Linux 6.x's large folios),
//! runs beside the two and is reported in the same tables, with its median
//! truncate time against the kernel's; the checks and the verdict stay
//! batchshadow against onedrain, the seed's comparison.

use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pcache::{Config, Item, OpenOptions, PageCache, PagevecDrain, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::ExpOpts;
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_count, fmt_size, vmstat_section};
use crate::report::{amean, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult};
use crate::runner::{into_map, Ctx, KernelColumn, Measured, SeedChecks, SeedExperiment, SeedKernel, SeedMeasure};
use crate::runner::{SeedReport, Variant};
use crate::stats::{best_mean_sorted, pct_better, quantile_sorted, Better, Summary};
use crate::sys::kernel_release;
pub use crate::sys::Backend;
use crate::variants::{seed_tunables, Preset};
use crate::{Error, Result};

mod checks;
mod kernel_side;
mod report;
mod workload;

pub const EXPERIMENT: &str = "sparsetruncate";
pub const BEFORE: &str = "batchshadow";
pub const AFTER: &str = "onedrain";
/// Not part of the seed's comparison: what today's kernel does with the
/// same files.
pub const LARGE_FOLIOS: &str = "largefolios";

const MIB: u64 = 1 << 20;
/// Bytes read at every page.
pub const READ_BYTES: usize = 16;
/// Part of the cache the sparse files fill.
pub const FILL_RATIO: f64 = 0.6;
/// The largest file: 4 MiB.
pub const MAX_FILE_BYTES: u64 = 4 * MIB;

pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        BEFORE,
        "4.14-rc4 batchshadow-v1r1: drain per-CPU pagevecs on every pagevec_release \
        (PagevecDrain::EveryRelease)",
        || Tunables { pagevec_drain: PagevecDrain::EveryRelease, ..seed_tunables() },
    ),
    Preset::new(
        EXPERIMENT,
        AFTER,
        "4.14-rc4 onedrain-v1r1: __pagevec_release calls lru_add_drain once per pagevec lifecycle \
        (pvec->drained; PagevecDrain::Once)",
        onedrain,
    ),
    Preset::new(
        EXPERIMENT,
        LARGE_FOLIOS,
        "Linux 6.x large folios, not part of the seed's comparison: onedrain, with readahead allocating \
        folios up to order 9 and truncate freeing a folio at a time (folio_order_max FOLIO_ORDER_MAX_6)",
        || Tunables { folio_order_max: pcache::FOLIO_ORDER_MAX_6, ..onedrain() },
    ),
];

fn onedrain() -> Tunables {
    Tunables { pagevec_drain: PagevecDrain::Once, ..seed_tunables() }
}

pub const BACKENDS: [Backend; 2] = [Backend::Tmpfs, Backend::File];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseParams {
    pub mem_bytes: u64,
    pub file_bytes: u64,
    pub files: usize,
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
/// Quick: a 256 MiB cache (38 files of 4 MiB), 10 rounds (for the noise
/// of the Max of a round), 2 runs.
pub const QUICK_MEM: u64 = 256 * MIB;
pub const QUICK_ROUNDS: usize = 10;
pub const QUICK_RUNS: usize = 2;

impl SparseParams {
    pub fn from_opts(opts: &ExpOpts) -> Result<SparseParams> {
        let c = opts.common(PRESETS, (QUICK_MEM, FULL_MEM), (QUICK_RUNS, FULL_RUNS), 64 << 30)?;
        let page_size = Config::default().page_size;
        let ps = page_size as u64;
        let fill = (c.mem_bytes as f64 * FILL_RATIO) as u64;
        // 4 MiB files, or smaller so that a small cache still holds 16.
        let file_bytes = ((fill / 16).min(MAX_FILE_BYTES) / ps).max(1) * ps;
        Ok(SparseParams {
            mem_bytes: c.mem_bytes,
            file_bytes,
            files: ((fill / file_bytes) as usize).max(1),
            rounds: if opts.quick { QUICK_ROUNDS } else { FULL_ROUNDS },
            runs: c.runs,
            fill_ratio: FILL_RATIO,
            read_bytes: READ_BYTES,
            variants: c.variants,
            quick: opts.quick,
            page_size,
        })
    }

    fn pages_per_file(&self) -> u64 {
        self.file_bytes.div_ceil(self.page_size as u64)
    }
}

pub const ORIGINAL_ROWS: [&str; 17] = [
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

/// The original's rows of `samples` (lower is better): quantiles interpolated
/// as in [`crate::stats`], Stddev the sample standard deviation, Coeff the
/// Stddev in percent of the Amean, BestN%Amean the mean of the lowest
/// `floor(N% * n)` samples (at least one). None without samples.
pub fn original_rows(samples: &[f64]) -> Option<[f64; 17]> {
    let s = Summary::of(samples, Better::Lower)?;
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    let best = |f: f64| best_mean_sorted(&v, f, Better::Lower);
    Some([
        s.min,
        s.q1,
        s.q2,
        s.q3,
        s.max90,
        s.max95,
        s.max99,
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
    ORIGINAL_ROWS.iter().position(|r| *r == label).unwrap_or(0)
}

pub struct Sparsetruncate;

impl SeedExperiment for Sparsetruncate {
    type Params = SparseParams;
    type Raw = ();
    const NAME: &'static str = EXPERIMENT;
    const ORIGIN: &'static str = "Mel Gorman, [PATCH 4/8] of Oct 2017, Linux 4.15";
    const CLAIM: &'static str = "onedrain against 4.14-rc4 batchshadow-v1r1, sparsetruncate (tiny): truncate time Max \
                                 254 -> 208 us (+18.11%), Stddev 12.74 -> 9.62 (+24.49%), Amean 145.12 -> 144.30 \
                                 (+0.56%); lru_add_drain once per pagevec lifecycle instead of on every release";
    const SUBJECT: &'static str = "only drain per-cpu pagevecs once per pagevec usage";
    const ABOUT: &'static str = "Mel Gorman's pagevec drain once per truncate ([PATCH 4/8] of Oct 2017, Linux \
                                 4.15): sparse files read once then truncated, drain on every pagevec release \
                                 against once per lifecycle.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "sparsetruncate";

    crate::runner::params_from!(from_opts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_sizes() {
        // Every preset runs by default, the original's before first; large
        // folios only in the third.
        let v: Vec<_> = PRESETS
            .iter()
            .map(|p| {
                let t = (p.tunables)();
                (p.name, p.default, t.pagevec_drain, t.folio_order_max)
            })
            .collect();
        assert_eq!(
            v,
            [
                (BEFORE, true, PagevecDrain::EveryRelease, 0),
                (AFTER, true, PagevecDrain::Once, 0),
                (LARGE_FOLIOS, true, PagevecDrain::Once, pcache::FOLIO_ORDER_MAX_6)
            ]
        );
        // Apart from the folios, largefolios is onedrain.
        let large = (PRESETS[2].tunables)();
        assert_eq!(Tunables { folio_order_max: 0, ..large }, (PRESETS[1].tunables)());
        let p = SparseParams::from_opts(&ExpOpts::default()).unwrap();
        assert_eq!(p.variants, [BEFORE, AFTER, LARGE_FOLIOS]);
        // --variants picks a subset: the seed's pair alone, say.
        let pair = vec![BEFORE.to_string(), AFTER.to_string()];
        let two = SparseParams::from_opts(&ExpOpts { variants: Some(pair.clone()), ..ExpOpts::default() }).unwrap();
        assert_eq!(two.variants, pair);
        assert_eq!((p.file_bytes, p.files, p.rounds, p.runs), (4 * MIB, 153, 10, 3));
        let t = SparseParams::from_opts(&ExpOpts { mem_bytes: Some(8 * MIB), ..ExpOpts::default() }).unwrap();
        assert!(t.file_bytes < 512 << 10 && t.file_bytes.is_multiple_of(4096));
        assert!(t.files >= 16 && t.files as u64 * t.file_bytes <= 8 * MIB * 6 / 10);
        assert!(SparseParams::from_opts(&ExpOpts { mem_bytes: Some(MIB), ..ExpOpts::default() }).is_err());
        assert!(SparseParams::from_opts(&ExpOpts { variants: Some(vec!["x".into()]), ..ExpOpts::default() }).is_err());
    }

    #[test]
    fn original_rows_of_a_known_sample() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = original_rows(&v).unwrap();
        assert_eq!(r[row_index("Min")], 1.0);
        assert_eq!(r[row_index("Max")], 100.0);
        assert!((r[row_index("Amean")] - 50.5).abs() < 1e-9);
        assert!((r[row_index("Max-99%")] - 99.01).abs() < 1e-9);
        // Best 25%: the mean of 1..=25.
        assert!((r[row_index("Best25%Amean")] - 13.0).abs() < 1e-9);
        assert!((r[row_index("Best99%Amean")] - 50.0).abs() < 1e-9);
        assert!((r[row_index("Coeff")] - r[row_index("Stddev")] / 50.5 * 100.0).abs() < 1e-9);
        assert!(original_rows(&[]).is_none());
        assert_eq!(original_rows(&[7.0]).unwrap()[row_index("Best25%Amean")], 7.0);
    }
}

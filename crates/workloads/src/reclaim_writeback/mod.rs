//! `reclaim-writeback`: Mel Gorman's "do not writeback filesystem pages
//! in direct reclaim" series (commit ee72886d8ed5 and followers), Linux 3.1
//! against 3.2. The original's three workloads (XFS, dirty_ratio 40),
//! scaled to `mem_bytes`, on host files opened O_DIRECT:
//!
//! 1. **fsmark**, as `fs_mark -S0`: T threads each create files of
//!    `fsmark_file_bytes` in 64 KiB chunks, closed without fsync,
//!    `fsmark_ratio` times the cache in all, for each T of `fsmark_threads`;
//! 2. **simple-wb**, parallel dd: `wb_threads` writers of 1 MiB blocks;
//! 3. **mmap-strm** ([`mmap_strm`]): a streaming write through a shared
//!    file mapping, then [`MIX_PASSES`] passes over an anonymous region and
//!    a second file mapping, with swap, so that reclaim swaps out (and the
//!    second pass back in).
//!
//! Elapsed time runs from the first write to the return of the last, as
//! fs_mark -S0 times it; the dirty data left is synced after, untimed, as
//! `sync_s`. The kernel column (`kernel_side.rs`) runs the same through
//! std::fs, and mmap-strm through mmap(2) where the host has or lets us
//! make swap.
//!
//! Reclaim meets dirty file pages only when they pile up at the inactive
//! tail: a slow device ([`DeviceOpts`]) and a desktop holding most of
//! memory make them. The quick run (the main job's) has both by default,
//! fs_mark with 4 threads and no simple-wb, so that its fs_mark rows test
//! the original's headline in seconds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use pcache::backing::{parse_latency, parse_rate, IoStat, RateLimit, RateSpec};
use pcache::{Config, File, Item, OpenOptions, PageCache, ReclaimWriteback, Tunables, VmStat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{ExpOpts, ParamDoc};
use crate::kernel;
use crate::plot;
use crate::render::{self, fmt_count, fmt_size, vmstat_section};
use crate::report::{significant, Check, ExperimentResult, Mean, MetricSpec, Named, Samples, VariantResult};
use crate::runner::{into_map, Ctx, KernelColumn, Matrix, Measured, SeedChecks, SeedExperiment, SeedKernel};
use crate::runner::{SeedMeasure, SeedReport, Variant};
use crate::stats::{pct_better, ratio, Better};
use crate::sys::{is_tmpfs, kernel_release, pattern, write_seq, FileIo};
use crate::variants::{self, seed_tunables, Preset};
use crate::{Error, Result};

mod checks;
mod kernel_side;
mod mmap_strm;
mod report;
mod workload;

pub const EXPERIMENT: &str = "reclaim-writeback";
pub const ORIGIN: &str = "Mel Gorman, Linux 3.2, commit ee72886d8ed5";
pub const CLAIM: &str = "3.2 against 3.1: fs_mark files/s up 4-14%, elapsed times down, no writes from direct \
                              reclaim, kswapd efficiency unchanged";
pub const BEFORE: &str = "3.1";
pub const AFTER: &str = "3.2";

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const FSMARK_CHUNK: u64 = 64 * KIB;
const BLOCK: u64 = MIB;
/// Kswapd efficiency may move this many points and still be "unchanged".
pub const EFFICIENCY_TOLERANCE_POINTS: f64 = 10.0;
pub const SAMPLE_INTERVAL_MS: u64 = 2;

/// The original ran with dirty_ratio 40 (instead of 20).
fn original_tunables(mode: ReclaimWriteback) -> Tunables {
    Tunables { reclaim_writeback: mode, dirty_ratio: 40, dirty_background_ratio: 10, ..seed_tunables() }
}

pub const PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        "3.1",
        "Linux 3.1: direct reclaim and kswapd call ->writepage on dirty file pages at the inactive \
        tail (ReclaimWriteback::Writepage31), dirty_ratio 40, dirty_background_ratio 10",
        || original_tunables(ReclaimWriteback::Writepage31),
    ),
    Preset::new(
        EXPERIMENT,
        "3.2",
        "Linux 3.2 with Mel Gorman's series (ee72886d8ed5 and followers): no file writeback from \
        direct reclaim, kswapd only below DEF_PRIORITY-2, dirty pages tagged PG_reclaim for the \
        flushers, throttling on congestion (ReclaimWriteback::Flusher32), dirty_ratio 40, \
        dirty_background_ratio 10",
        || original_tunables(ReclaimWriteback::Flusher32),
    ),
];

crate::experiment::params! {
    #[derive(Clone, Debug, PartialEq, Serialize)]
    pub struct ReclaimWritebackOpts {
        pub mem_bytes: u64 = 128 * MIB, quick 16 * MIB;
        pub variants: Vec<String> = variants::defaults(PRESETS);
        /// Quick: enough runs for fs_mark's noise to be measured.
        pub runs: usize = 5, quick 6;
        pub fsmark_file_bytes: u64 = 10 * MIB, quick MIB,
            param param_size("file_size") "fs_mark file size, e.g. 10M [default: 10M; quick: 1M]";
        pub fsmark_threads: Vec<usize> = vec![1, 4, 16], quick vec![4],
            param param_list "fs_mark thread counts, comma-separated [default: 1,4,16; quick: 4]", each 1..=256;
        /// Data, in multiples of the cache.
        pub fsmark_ratio: f64 = 3.0;
        pub wb_threads: usize = 0, param param_as "simple-wb writers [default: one per CPU]", range 0..=256;
        /// Quick leaves it out: its seconds on the slow device go to more
        /// fs_mark runs, the original's headline.
        pub simple_wb: bool = true, quick false,
            param param_as "run simple-wb (parallel dd), true or false [default: true; quick: false]";
        pub wb_ratio: f64 = 4.0;
        pub strm_ratio: f64 = 1.5;
        pub strm_mix_ratio: f64 = 0.5,
            param param_as "mmap-strm's file mapping written with it, in multiples of memory [default: 0.5]";
        /// As large as memory: with the file mapping beside it the mix
        /// overcommits memory by half, and anonymous pages must be swapped.
        pub strm_anon_ratio: f64 = 1.0,
            param param_as "mmap-strm's anonymous region, in multiples of memory [default: 1.0]";
        pub dir: Option<PathBuf> = None, opt dir;
        pub progress: bool = true, opt progress;
        pub quick: bool = false, quick true;
        pub set: Vec<(String, String)> = Vec::new(), opt set;
        pub plot_dir: Option<PathBuf> = None, opt plot_dir;
        pub kernel: bool = true, opt kernel;
        pub device: DeviceOpts = DeviceOpts::default();
    }
    also [
        ParamDoc {
            name: "device_rate",
            help: "run fsmark and simple-wb on a simulated device of this bandwidth, reads and writes shared, \
                   e.g. 30M or 30MiB/s, or none [default: none, host files at disk speed; quick: 128M, its data \
                   in memory]",
        },
        ParamDoc { name: "device_latency", help: "that device's time per request, e.g. 5ms [default: 0; quick: 1ms]" },
        ParamDoc {
            name: "resident",
            help: "fsmark and simple-wb run beside a desktop holding this fraction of memory (mapped program text \
                   kept in use), e.g. 0.65 [default: 0; quick with a device: 0.75]",
        },
    ]
}

impl ReclaimWritebackOpts {
    pub fn from_exp(opts: &ExpOpts) -> Result<ReclaimWritebackOpts> {
        let (quick, full) = (Self::defaults(true), Self::defaults(false));
        let c = opts.common(PRESETS, (quick.mem_bytes, full.mem_bytes), (quick.runs, full.runs), 64 << 30)?;
        let mut o = ReclaimWritebackOpts {
            mem_bytes: c.mem_bytes,
            variants: c.variants,
            runs: c.runs,
            device: DeviceOpts::from_exp(opts)?,
            ..Self::defaults(opts.quick)
        };
        o.set_params(opts)?;
        o.validate()?;
        Ok(o)
    }

    pub fn validate(&self) -> Result<()> {
        self.check_ranges()?;
        let bad = |m: String| Err(Error::Invalid(m));
        if !(4 * KIB..=self.mem_bytes.saturating_mul(64)).contains(&self.fsmark_file_bytes) {
            return bad(format!("fs_mark file size {} must be from 4 KiB to 64x memory", self.fsmark_file_bytes));
        }
        for (what, r) in [
            ("fs_mark ratio", self.fsmark_ratio),
            ("simple-wb ratio", self.wb_ratio),
            ("mmap-strm ratio", self.strm_ratio),
            ("mmap-strm mix ratio", self.strm_mix_ratio),
            ("mmap-strm anonymous ratio", self.strm_anon_ratio),
        ] {
            if !(r > 0.0 && r <= 64.0) {
                return bad(format!("{what} {r} must be above 0 and at most 64"));
            }
        }
        self.device.validate()
    }

    fn wb_threads(&self) -> usize {
        if self.wb_threads > 0 {
            self.wb_threads
        } else {
            crate::sys::cpus()
        }
    }

    fn bytes(&self, ratio: f64) -> u64 {
        (self.mem_bytes as f64 * ratio).round() as u64
    }

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
        if self.simple_wb {
            let threads = self.wb_threads();
            let blocks = (self.bytes(self.wb_ratio).div_ceil(BLOCK) as usize).div_ceil(threads).max(1);
            w.push(Workload::SimpleWb { threads, blocks });
        }
        w.push(Workload::MmapStrm {
            blocks: self.bytes(self.strm_ratio).div_ceil(BLOCK).max(1),
            mix_blocks: self.bytes(self.strm_mix_ratio).div_ceil(BLOCK).max(1),
            anon_blocks: self.bytes(self.strm_anon_ratio).div_ceil(BLOCK).max(1),
        });
        w
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Workload {
    Fsmark { threads: usize, per_thread: usize },
    SimpleWb { threads: usize, blocks: usize },
    MmapStrm { blocks: u64, mix_blocks: u64, anon_blocks: u64 },
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::Fsmark { threads, .. } => format!("fsmark-{threads}t"),
            Workload::SimpleWb { .. } => "simple-wb".into(),
            Workload::MmapStrm { .. } => "mmap-strm".into(),
        }
    }
}

/// The simulated slow device fsmark and simple-wb run on: a [`RateLimit`]
/// in front of their files, one per run, shared by all its files, reads
/// and writes on one budget. The original's machines met dirty pages in
/// reclaim on slow storage (a RAID of 4 disks, a USB stick); at memory
/// speed the flushers keep the LRU tail clean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DeviceOpts {
    /// Bytes a second; `None`: host files at their own speed.
    pub rate: Option<u64>,
    pub latency: Duration,
    /// The fraction of memory a desktop holds meanwhile (the original's
    /// USB-stick run had one; see `workload::Resident`).
    pub resident: f64,
    /// The device keeps its data in memory rather than in host files: its
    /// token bucket is then its only cost, without the host disk's noise
    /// or its slow unlinks (the quick run's choice).
    pub in_memory: bool,
}

impl DeviceOpts {
    /// The quick run's device: the set-up that makes reclaim meet dirty
    /// pages at full size (a slow device, a desktop holding most of
    /// memory), sized to take seconds. With 65% resident, some 3.1 runs
    /// met almost no dirty page; 75% makes every run meet them. The
    /// request latency makes a page written alone cost more than one in a
    /// flusher's batch, as a seek did on the original's disks.
    pub const QUICK: DeviceOpts =
        DeviceOpts { rate: Some(128 * MIB), latency: Duration::from_millis(1), resident: 0.75, in_memory: true };
}

/// The workloads need room to run.
pub const MAX_RESIDENT: f64 = 0.8;

impl DeviceOpts {
    pub fn spec(&self) -> Result<Option<RateSpec>> {
        match self.rate {
            None if !self.latency.is_zero() => {
                Err(Error::Invalid("device_latency needs a device_rate (e.g. --param device_rate=30M)".into()))
            }
            None => Ok(None),
            Some(rate) => RateSpec::new(rate, self.latency).map(Some).map_err(invalid("device_rate")),
        }
    }

    fn validate(&self) -> Result<()> {
        if !(0.0..=MAX_RESIDENT).contains(&self.resident) {
            return Err(Error::Invalid(format!(
                "--param resident={}: must be a fraction of memory from 0 to {MAX_RESIDENT}",
                self.resident
            )));
        }
        self.spec().map(drop)
    }

    fn from_exp(opts: &ExpOpts) -> Result<DeviceOpts> {
        let base = if opts.quick { DeviceOpts::QUICK } else { DeviceOpts::default() };
        let rate = match opts.param("device_rate") {
            Some(s) if s.trim().eq_ignore_ascii_case("none") => None,
            Some(s) => Some(parse_rate(s).map_err(invalid("device_rate"))?),
            None => base.rate,
        };
        // No device: none of the quick set-up's either.
        let base = if rate.is_none() { DeviceOpts::default() } else { base };
        let latency = opts.param("device_latency").map(parse_latency).transpose().map_err(invalid("device_latency"))?;
        let resident = opts.param_as::<f64>("resident")?.unwrap_or(base.resident);
        let d = DeviceOpts {
            rate,
            latency: latency.unwrap_or(base.latency),
            resident,
            in_memory: opts.quick && rate.is_some(),
        };
        d.validate()?;
        Ok(d)
    }

    fn start(&self) -> Result<Option<Arc<RateLimit>>> {
        Ok(self.spec()?.map(|spec| RateLimit::new(EXPERIMENT, spec)))
    }
}

/// The engine parser's refusal as an error naming the parameter.
fn invalid(name: &'static str) -> impl Fn(pcache::Error) -> Error {
    move |e| match e {
        pcache::Error::InvalidArgument(m) => Error::Invalid(format!("--param {name}: {m}")),
        e => Error::Pcache(e),
    }
}

pub struct RunOut {
    pub(super) elapsed_s: f64,
    pub(super) sync_s: f64,
    pub(super) files: u64,
    pub(super) vm: VmStat,
    pub(super) timeline: Vec<Sample>,
    pub(super) io: Option<IoStat>,
}

/// One reading of the plots' sampler, since the workload started.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) ms: f64,
    /// nr_dirty + nr_writeback.
    pub(super) dirty_wb: u64,
    pub(super) nr_free: u64,
}

/// The second pass swaps pages back in, as a program working on its data
/// again does.
pub const MIX_PASSES: u64 = 2;

/// The swap file's size for an anonymous region of `anon` bytes: room for
/// all of it, and a quarter more for the slots the swap cache still holds
/// for pages read back (freed only when swap is half full, as
/// vm_swap_full says) and for the allocator's cluster alignment.
pub fn swap_bytes(anon: u64) -> u64 {
    anon + anon / 4 + MIB
}

pub struct ReclaimWritebackExp;

impl SeedExperiment for ReclaimWritebackExp {
    type Params = ReclaimWritebackOpts;
    type Raw = Matrix<RunOut>;
    const NAME: &'static str = EXPERIMENT;
    const ORIGIN: &'static str = ORIGIN;
    const CLAIM: &'static str = CLAIM;
    const SUBJECT: &'static str = "do not write back filesystem pages in direct reclaim";
    const ABOUT: &'static str = "Mel Gorman's \"do not write back filesystem pages in direct reclaim\" (Linux 3.2, \
                                 commit ee72886d8ed5): fs_mark, parallel dd and streaming writes under memory \
                                 pressure, Linux 3.1 against 3.2; quick runs fs_mark on a slow simulated device.";
    const PRESETS: &'static [Preset] = PRESETS;
    const PARAMS_KEY: &'static str = "opts";
    const PARAMS: &'static [ParamDoc] = ReclaimWritebackOpts::PARAMS;

    fn smoke() -> ExpOpts {
        ExpOpts::smoke(&[("file_size", "256K")])
    }
    crate::runner::params_from!(from_exp);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: sizes out of range are refused, from the command line's
    // shared options or from the experiment's own.
    #[test]
    fn options() {
        let q = || ReclaimWritebackOpts::defaults(true);
        let bad = [
            ReclaimWritebackOpts { fsmark_file_bytes: 1, ..q() },
            ReclaimWritebackOpts { fsmark_threads: vec![], ..q() },
            ReclaimWritebackOpts { fsmark_threads: vec![0], ..q() },
            ReclaimWritebackOpts { wb_ratio: f64::NAN, ..q() },
            ReclaimWritebackOpts { strm_ratio: 0.0, ..q() },
            ReclaimWritebackOpts { strm_anon_ratio: -1.0, ..q() },
        ];
        crate::experiment::assert_checked(
            &[ReclaimWritebackOpts::default(), q()],
            &bad,
            ReclaimWritebackOpts::validate,
        );
        let exp = |mem: u64, runs: usize, variant: &str| ExpOpts {
            mem_bytes: Some(mem),
            runs: Some(runs),
            variants: Some(vec![variant.into()]),
            ..ExpOpts::default()
        };
        let bad = [exp(MIB, 1, "3.1"), exp(8 * MIB, 0, "3.1"), exp(8 * MIB, 1, "2.6")];
        crate::experiment::assert_checked(&[exp(8 * MIB, 1, "3.2")], &bad, |o| {
            ReclaimWritebackOpts::from_exp(o).map(drop)
        });
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
        assert_eq!(w[4], Workload::MmapStrm { blocks: 192, mix_blocks: 64, anon_blocks: 128 });
        let names: Vec<String> = w.iter().map(|w| w.name()).collect();
        assert_eq!(names, ["fsmark-1t", "fsmark-4t", "fsmark-16t", "simple-wb", "mmap-strm"]);
    }

    #[test]
    fn original_presets() {
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

//! `pcache bench fuse-dd`: the dd of Mel Gorman's accessed-v2 patch as a real program, through
//! a `pcache mount`, beside the same dd through the library and through
//! the kernel's page cache: what the FUSE layer costs.
//!
//! Columns: **library** (`write_at`s in-process, no system call per
//! block), **fuse** (`/bin/dd bs=1M` on a `pcache mount`, every block a
//! FUSE request served by the same engine), **kernel** (the same dd on the
//! backing directory, no memory limit: a reference, not a match); each
//! writes async and with fdatasync and reads the cached file back, the
//! file 1/8 of the cache (out of dirty balancing, as the original kept it).
//! The columns take turns inside a run so that drifts of the machine fall
//! on all alike. Without FUSE the fuse column is skipped and the report
//! says why.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use pcache::{Config, OpenOptions, PageCache};
use serde::Serialize;

use crate::experiment::{ExpOpts, Experiment, Outcome, ParamDoc};
use crate::fuse_mount::{mount_unavailable, Daemon};
use crate::sys::{kernel_release, load_note, loadavg, tempdir_in};
use crate::{Error, Result};

pub const EXPERIMENT: &str = "fuse-dd";
const MIB: u64 = 1 << 20;
const BLOCK: usize = MIB as usize;
pub const WORKLOADS: [&str; 3] = ["write", "write-fdatasync", "read-cached"];

#[derive(Clone, Debug)]
pub struct FuseDdOpts {
    /// Of the library and the mount alike, as `set`.
    pub mem_bytes: u64,
    /// A multiple of 1 MiB.
    pub file_bytes: u64,
    pub runs: usize,
    pub dir: Option<PathBuf>,
    /// The `pcache` binary, whose `mount` subcommand serves the mount.
    pub mount_exe: PathBuf,
    pub set: Vec<(String, String)>,
}

impl FuseDdOpts {
    /// The running binary is the mount daemon.
    pub fn from_exp(opts: &ExpOpts) -> Result<FuseDdOpts> {
        let mount_exe = std::env::current_exe().map_err(|e| Error::io("finding this executable", e))?;
        let (mem_bytes, file_mib, runs) = if opts.quick { (64 * MIB, 8, 3) } else { (512 * MIB, 64, 5) };
        Ok(FuseDdOpts {
            mem_bytes: opts.mem_bytes.unwrap_or(mem_bytes),
            file_bytes: opts.param_as::<u64>("file_mib")?.unwrap_or(file_mib) << 20,
            runs: opts.runs.unwrap_or(runs),
            dir: opts.dir.clone(),
            mount_exe,
            set: opts.set.clone(),
        })
    }

    pub fn validate(&self) -> Result<()> {
        if self.file_bytes == 0 || !self.file_bytes.is_multiple_of(MIB) {
            return Err(Error::Invalid(format!("file size {} must be a positive multiple of 1 MiB", self.file_bytes)));
        }
        if !(1..=100).contains(&self.runs) {
            return Err(Error::Invalid(format!("runs {} must be from 1 to 100", self.runs)));
        }
        Ok(())
    }
}

/// One workload of one column.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub workload: String,
    pub elapsed_s: Vec<f64>,
    pub median_s: f64,
    pub mb_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Column {
    pub name: String,
    pub timings: Vec<Timing>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FuseDdResult {
    pub experiment: String,
    pub kernel_release: String,
    pub mem_bytes: u64,
    pub file_bytes: u64,
    pub runs: usize,
    pub columns: Vec<Column>,
    /// Why the fuse column is missing, if it is.
    pub fuse_skipped: Option<String>,
    pub load_note: String,
}

fn dd(args: &[String]) -> Result<f64> {
    let t = Instant::now();
    let st = Command::new("dd")
        .args(args)
        .arg("status=none")
        .status()
        .map_err(|e| Error::io("running dd (coreutils)", e))?;
    let s = t.elapsed().as_secs_f64();
    if !st.success() {
        return Err(Error::Check(format!("dd {args:?} failed: {st}")));
    }
    Ok(s)
}

/// One workload with real dd on `path` (the mount or the backing
/// directory).
fn dd_workload(path: &Path, workload: &str, blocks: u64) -> Result<f64> {
    let of = format!("of={}", path.display());
    let count = format!("count={blocks}");
    match workload {
        "write" | "write-fdatasync" => {
            let _ = std::fs::remove_file(path);
            let mut args = vec!["if=/dev/zero".to_string(), of, "bs=1M".into(), count];
            if workload == "write-fdatasync" {
                args.push("conv=fdatasync".into());
            }
            dd(&args)
        }
        _ => dd(&[format!("if={}", path.display()), "of=/dev/null".into(), "bs=1M".into()]),
    }
}

/// The same workload through the library.
fn library_workload(cache: &PageCache, path: &Path, workload: &str, blocks: u64) -> Result<f64> {
    let block = vec![0u8; BLOCK];
    match workload {
        "write" | "write-fdatasync" => {
            if cache.is_cached(&path.to_string_lossy()) || path.exists() {
                cache.unlink(path)?;
            }
            let t = Instant::now();
            let f = cache.open(path, OpenOptions { create: true, truncate: true, direct: true })?;
            for i in 0..blocks {
                f.write_at(&block, i * BLOCK as u64)?;
            }
            if workload == "write-fdatasync" {
                f.fdatasync()?;
            }
            f.close()?;
            Ok(t.elapsed().as_secs_f64())
        }
        _ => {
            let mut buf = vec![0u8; BLOCK];
            let t = Instant::now();
            let f = cache.open(path, OpenOptions { create: false, truncate: false, direct: true })?;
            let mut off = 0u64;
            while let n @ 1.. = f.read_at(&mut buf, off)? {
                off += n as u64;
            }
            f.close()?;
            Ok(t.elapsed().as_secs_f64())
        }
    }
}

pub fn run(opts: &FuseDdOpts) -> Result<FuseDdResult> {
    opts.validate()?;
    let load_before = loadavg();
    let tmp = tempdir_in(opts.dir.as_deref(), "pcache-fuse-dd")?;
    let mkdir = |name: &str| -> Result<PathBuf> {
        let p = tmp.path().join(name);
        std::fs::create_dir(&p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        Ok(p)
    };
    let (lib_dir, kernel_dir, backing, mnt) = (mkdir("library")?, mkdir("kernel")?, mkdir("backing")?, mkdir("mnt")?);
    let fuse_skipped = mount_unavailable(&opts.mount_exe);
    let mut daemon = match fuse_skipped {
        None => Some(Daemon::start(&opts.mount_exe, &backing, &mnt, opts.mem_bytes, &opts.set)?),
        Some(_) => None,
    };
    let tunables = crate::experiment::apply_sets(pcache::Tunables::default(), &opts.set)?;
    let cache = PageCache::new(Config { tunables, ..Config::with_memory(opts.mem_bytes) })?;
    let blocks = opts.file_bytes / MIB;
    let names: Vec<&str> =
        ["library", "fuse", "kernel"].into_iter().filter(|n| *n != "fuse" || daemon.is_some()).collect();
    let mut columns: Vec<Column> = names
        .iter()
        .map(|name| Column {
            name: name.to_string(),
            timings: WORKLOADS
                .iter()
                .map(|w| Timing { workload: w.to_string(), elapsed_s: Vec::new(), median_s: 0.0, mb_per_s: 0.0 })
                .collect(),
        })
        .collect();
    // One untimed round warms everything up (the arena faults in, the
    // daemon's threads start).
    for run in 0..=opts.runs {
        for k in 0..names.len() {
            // Rotate the column order from run to run.
            let c = (k + run) % names.len();
            for (w, workload) in WORKLOADS.iter().enumerate() {
                let s = match names[c] {
                    "library" => library_workload(&cache, &lib_dir.join("f"), workload, blocks)?,
                    "fuse" => dd_workload(&mnt.join("f"), workload, blocks)?,
                    _ => dd_workload(&kernel_dir.join("f"), workload, blocks)?,
                };
                if run > 0 {
                    columns[c].timings[w].elapsed_s.push(s);
                }
            }
        }
    }
    if let Some(d) = daemon.as_mut() {
        d.stop()?;
    }
    for t in columns.iter_mut().flat_map(|c| &mut c.timings) {
        t.median_s = crate::stats::median(&t.elapsed_s);
        t.mb_per_s = opts.file_bytes as f64 / 1e6 / t.median_s;
    }
    Ok(FuseDdResult {
        experiment: EXPERIMENT.into(),
        kernel_release: kernel_release(),
        mem_bytes: opts.mem_bytes,
        file_bytes: opts.file_bytes,
        runs: opts.runs,
        columns,
        fuse_skipped,
        load_note: load_note(load_before, loadavg()),
    })
}

impl FuseDdResult {
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fuse-dd: dd bs=1M of a {} MiB file, cache {} MiB, {} runs (median); kernel {}",
            self.file_bytes >> 20,
            self.mem_bytes >> 20,
            self.runs,
            self.kernel_release
        );
        if let Some(why) = &self.fuse_skipped {
            let _ = writeln!(s, "fuse column SKIPPED: {why}");
        }
        let _ = write!(s, "{:<18}", "workload");
        for c in &self.columns {
            let _ = write!(s, "{:>22}", format!("{} s (MB/s)", c.name));
        }
        let lib = self.columns.iter().find(|c| c.name == "library");
        let fuse = self.columns.iter().find(|c| c.name == "fuse");
        if fuse.is_some() {
            let _ = write!(s, "{:>16}", "fuse/library");
        }
        s.push('\n');
        for (w, name) in WORKLOADS.iter().enumerate() {
            let _ = write!(s, "{name:<18}");
            for c in &self.columns {
                let t = &c.timings[w];
                let _ = write!(s, "{:>22}", format!("{:.4} ({:.0})", t.median_s, t.mb_per_s));
            }
            if let (Some(l), Some(f)) = (lib, fuse) {
                let _ = write!(s, "{:>16}", format!("{:.2}x", f.timings[w].median_s / l.timings[w].median_s));
            }
            s.push('\n');
        }
        let _ = writeln!(s, "{}", self.load_note);
        s
    }
}

pub struct FuseDd;

impl Experiment for FuseDd {
    fn takes_set(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "accessed-v2's dd (Mel Gorman, Linux 3.16) as a real program through a `pcache mount`, against the \
         same dd through the library and through the kernel: the cost of FUSE. Skips the mount column without FUSE."
    }
    fn params(&self) -> &'static [ParamDoc] {
        &[ParamDoc { name: "file_mib", help: "size of dd's file in MiB [default: 64; quick: 8]" }]
    }
    fn smoke(&self) -> ExpOpts {
        ExpOpts { mem_bytes: Some(16 << 20), ..ExpOpts::smoke(&[("file_mib", "2")]) }
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        FuseDdOpts::from_exp(opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let o = FuseDdOpts::from_exp(opts)?;
        let result = run(&o)?;
        Outcome::new(result.report(), &result)
    }
}

//! `pcache bench mount`: real programs and standard tools on a `pcache
//! mount`, against the same programs on the backing directory through the
//! kernel's page cache in a memory cgroup of the mount's size.
//!
//! Two sides, each run by spawning the real program: **mount** (a `pcache
//! mount BACKING MNT --mem SIZE` daemon, fuse_mount.rs; its cache dropped
//! by remounting) and **kernel** (the backing filesystem, every program a
//! child that joins the memory cgroup before it execs; its cache dropped
//! by fsync and POSIX_FADV_DONTNEED). The workloads, in three groups:
//!
//! 1. data: dd writes a file in 1 MiB blocks with `conv=fsync`, reads it
//!    cold and warm; fio 4 KiB random reads of it cached and cold (each
//!    block once) and random writes, by 1 and 4 jobs; the FUSE floor: fio
//!    on the mount's `.pcache/zero` (answered with zeros on the thread
//!    that receives the request, no cache), beside fio on `/dev/zero`;
//! 2. tree: `tar x` of a generated source tree, a stat storm (`find -ls`
//!    over it N times), `git add` + `git commit` and `git status` on it,
//!    `make -j2` of its C files;
//! 3. SQLite: inserts in transactions and point selects by primary key,
//!    in rollback (DELETE) and WAL journal modes.
//!
//! Inside a run the sides take turns group by group, the first side
//! alternating from run to run, so that drift falls on both; figures are
//! medians over runs. A side that cannot be had (no FUSE, no memory
//! cgroup) or a program that is not installed leaves its cells empty with
//! the reason; the verdict judges what was measured.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::experiment::{ExpOpts, Experiment, MainJob, Outcome, ParamDoc};
use crate::fuse_mount::{mount_unavailable, Daemon};
use crate::kernel::{self, Memcg};
use crate::progress::Progress;
use crate::render::{fmt_size, render_table};
use crate::stats::Better;
use crate::verdict::{fmt_figure, Headline, Verdict};
use crate::{stats, sys, Error, Result};

mod tools;

use tools::{fio_args, fio_iops, join_on_exec, timed, TreeShape, JOURNAL_MODES};

pub const EXPERIMENT: &str = "mount";
const MIB: u64 = 1 << 20;

crate::experiment::params! {
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct MountOpts {
        /// The mount's cache and the kernel's memory cgroup alike.
        pub mem_bytes: u64 = 2048 * MIB, quick 256 * MIB;
        pub dd_mib: u64 = 1024, quick 64,
            param param_as "size of dd's file (and fio's), MiB [default: 1024; quick: 64]", range 1..=1 << 20;
        pub fio_ms: u64 = 2000, quick 200,
            param param_as "time of each fio run, ms [default: 2000; quick: 200]", range 100..=600_000;
        pub c_files: usize = 50, quick 12,
            param param_as "C files in the tree, built by make -j2 [default: 50; quick: 12]", range 1..=10_000;
        pub text_files: usize = 1000, quick 200,
            param param_as "text files in the tree [default: 1000; quick: 200]", range 0..=1_000_000;
        pub stat_rounds: usize = 20, quick 3,
            param param_as "find -ls passes over the tree [default: 20; quick: 3]", range 1..=10_000;
        pub rows: u64 = 100_000, quick 20_000,
            param param_as "SQLite rows inserted [default: 100000; quick: 20000]", range 1..=100_000_000;
        pub txns: u64 = 50, quick 20,
            param param_as "transactions the rows are inserted in [default: 50; quick: 20]", range 1..=1_000_000;
        pub selects: u64 = 20_000, quick 10_000,
            param param_as "SQLite point selects by primary key [default: 20000; quick: 10000]",
            range 1..=100_000_000;
        pub runs: usize = 5, quick 2;
        pub kernel: bool = true, opt kernel;
        pub set: Vec<(String, String)> = Vec::new(), opt set;
        #[serde(skip)]
        pub dir: Option<PathBuf> = None, opt dir;
        #[serde(skip)]
        pub progress: bool = true, opt progress;
        /// The `pcache` binary, whose `mount` subcommand serves the mount.
        #[serde(skip)]
        pub mount_exe: PathBuf = PathBuf::new();
    }
}

impl MountOpts {
    /// The running binary is the mount daemon.
    pub fn from_exp(opts: &ExpOpts) -> Result<MountOpts> {
        let mut o = MountOpts::defaults(opts.quick);
        o.set_params(opts)?;
        o.mem_bytes = opts.mem_bytes.unwrap_or(o.mem_bytes);
        o.runs = opts.runs.unwrap_or(o.runs);
        o.mount_exe = std::env::current_exe().map_err(|e| Error::io("finding this executable", e))?;
        o.validate()?;
        Ok(o)
    }

    pub fn validate(&self) -> Result<()> {
        self.check_ranges()?;
        let bad = |m: String| Err(Error::Invalid(m));
        // dd's warm read must find its file cached.
        if self.mem_bytes < 2 * self.dd_mib * MIB || self.mem_bytes < 64 * MIB {
            return bad(format!(
                "memory {} must be at least 64 MiB and twice dd's file ({} MiB): the warm read must be warm",
                fmt_size(self.mem_bytes),
                self.dd_mib
            ));
        }
        if !(1..=100).contains(&self.runs) {
            return bad(format!("runs {} must be from 1 to 100", self.runs));
        }
        if self.txns > self.rows {
            return bad(format!("txns {} must not exceed rows {}", self.txns, self.rows));
        }
        Ok(())
    }
}

/// The workloads' names, as the JSON and the report show them.
pub const DD_WRITE: &str = "dd write+fsync";
pub const DD_COLD: &str = "dd read cold";
pub const DD_WARM: &str = "dd read warm";
pub const FIO_CACHED: [&str; 2] = ["fio randread cached 1 job", "fio randread cached 4 jobs"];
pub const FIO_COLD: [&str; 2] = ["fio randread cold 1 job", "fio randread cold 4 jobs"];
pub const FIO_WRITE: [&str; 2] = ["fio randwrite 1 job", "fio randwrite 4 jobs"];
pub const FLOOR: [&str; 2] = ["FUSE floor 1 job", "FUSE floor 4 jobs"];
pub const TAR: &str = "tar x";
pub const STAT: &str = "stat storm (find -ls)";
pub const GIT_COMMIT: &str = "git add+commit";
pub const GIT_STATUS: &str = "git status";
pub const MAKE: &str = "make -j2";
pub const SQLITE: [[&str; 2]; 2] =
    [["sqlite DELETE inserts", "sqlite DELETE selects"], ["sqlite WAL inserts", "sqlite WAL selects"]];
const FIO_JOBS: [usize; 2] = [1, 4];

/// A workload: its unit, which way is better, and the programs it needs.
struct Spec {
    name: &'static str,
    unit: &'static str,
    better: Better,
    tools: &'static [&'static str],
}

const fn spec(name: &'static str, unit: &'static str, tools: &'static [&'static str]) -> Spec {
    // Times are the only unit where less is better.
    let better = if matches!(unit.as_bytes(), b"s") { Better::Lower } else { Better::Higher };
    Spec { name, unit, better, tools }
}

const DD: &[&str] = &["dd"];
const FIO: &[&str] = &["fio", "dd"];
const SPECS: &[Spec] = &[
    spec(DD_WRITE, "MB/s", DD),
    spec(DD_COLD, "MB/s", DD),
    spec(DD_WARM, "MB/s", DD),
    spec(FIO_CACHED[0], "IOPS", FIO),
    spec(FIO_CACHED[1], "IOPS", FIO),
    spec(FIO_COLD[0], "IOPS", FIO),
    spec(FIO_COLD[1], "IOPS", FIO),
    spec(FIO_WRITE[0], "IOPS", FIO),
    spec(FIO_WRITE[1], "IOPS", FIO),
    spec(FLOOR[0], "IOPS", &["fio"]),
    spec(FLOOR[1], "IOPS", &["fio"]),
    spec(TAR, "s", &["tar"]),
    spec(STAT, "s", &["tar", "find"]),
    spec(GIT_COMMIT, "s", &["tar", "git"]),
    spec(GIT_STATUS, "s", &["tar", "git"]),
    spec(MAKE, "s", &["tar", "make", "gcc"]),
    spec(SQLITE[0][0], "s", &["sqlite3"]),
    spec(SQLITE[0][1], "s", &["sqlite3"]),
    spec(SQLITE[1][0], "s", &["sqlite3"]),
    spec(SQLITE[1][1], "s", &["sqlite3"]),
];

/// A target of pcache's own: the mount at least `min` of the kernel's
/// speed in every one of `rows`.
pub struct Target {
    pub what: &'static str,
    pub rows: &'static [&'static str],
    pub min: f64,
}

pub const TARGETS: [Target; 3] = [
    Target { what: "dd write, cold and warm read", rows: &[DD_WRITE, DD_COLD, DD_WARM], min: 0.8 },
    Target {
        what: "SQLite DELETE and WAL, inserts and selects",
        rows: &[SQLITE[0][0], SQLITE[0][1], SQLITE[1][0], SQLITE[1][1]],
        min: 0.7,
    },
    Target { what: "tar x, git commit and status, make -j2", rows: &[TAR, GIT_COMMIT, GIT_STATUS, MAKE], min: 0.5 },
];

/// What the floor's kernel column runs.
pub const FLOOR_KERNEL: &str = "fio on /dev/zero: a read(2) with no cache behind it";

/// One workload on both sides: medians, the mount's speed over the
/// kernel's (above 1: the mount is faster, whichever way `better` runs),
/// every run's figure, and why a cell is empty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRow {
    pub name: String,
    pub unit: String,
    pub mount: Option<f64>,
    pub kernel: Option<f64>,
    /// "higher" or "lower".
    pub better: String,
    pub ratio: Option<f64>,
    pub mount_samples: Vec<f64>,
    pub kernel_samples: Vec<f64>,
    pub note: Option<String>,
}

/// `pcache bench mount --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MountResult {
    pub experiment: String,
    pub kernel_release: String,
    pub params: MountOpts,
    pub workloads: Vec<WorkloadRow>,
    /// Why a whole side is missing, if it is.
    pub mount_skipped: Option<String>,
    pub kernel_skipped: Option<String>,
    pub floor_kernel: String,
    /// Files and directories in the tree, and its bytes.
    pub tree_entries: u64,
    pub tree_bytes: u64,
    pub load_note: String,
    pub secs: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Mount,
    Kernel,
}

/// One run's state: the sides, the inputs made once, the samples.
struct Bench<'a> {
    o: &'a MountOpts,
    daemon: Option<Daemon>,
    memcg: Option<Memcg>,
    kernel_dir: PathBuf,
    tarball: PathBuf,
    scripts: PathBuf,
    /// Per workload (SPECS' order): the mount's samples, the kernel's.
    samples: Vec<[Vec<f64>; 2]>,
    /// Per workload: why it is not run at all, or on one side.
    skipped: Vec<Option<String>>,
    floor_missing: Option<String>,
}

impl Bench<'_> {
    /// Only this module's name constants are looked up, each in SPECS.
    fn index(name: &str) -> usize {
        let i = SPECS.iter().position(|s| s.name == name);
        debug_assert!(i.is_some(), "{name} is not in SPECS");
        i.unwrap_or(0)
    }

    fn runs(&self, name: &str) -> bool {
        self.skipped[Self::index(name)].is_none()
    }

    fn record(&mut self, side: Side, name: &str, v: f64) {
        self.samples[Self::index(name)][side as usize].push(v);
    }

    fn work(&self, side: Side) -> &Path {
        match (side, &self.daemon) {
            (Side::Mount, Some(d)) => d.mountpoint(),
            _ => &self.kernel_dir,
        }
    }

    /// `program` to run in `side`'s directory; the kernel's joins the
    /// memory cgroup.
    fn cmd(&self, side: Side, program: &str) -> Result<Command> {
        let mut c = Command::new(program);
        c.current_dir(self.work(side)).stdin(std::process::Stdio::null());
        if let (Side::Kernel, Some(m)) = (side, &self.memcg) {
            join_on_exec(&mut c, m.path())?;
        }
        Ok(c)
    }

    /// Start `side` with nothing of `file` cached: a new daemon, or the
    /// file synced and dropped from the kernel's cache.
    fn drop_cache(&mut self, side: Side, file: &Path) -> Result<()> {
        match (side, self.daemon.as_mut()) {
            (Side::Mount, Some(d)) => d.remount(),
            _ => {
                let f = fs::File::open(file).map_err(|e| Error::io(format!("opening {}", file.display()), e))?;
                f.sync_all().map_err(|e| Error::io(format!("syncing {}", file.display()), e))?;
                kernel::drop_cached(&f);
                Ok(())
            }
        }
    }

    fn fio(&self, side: Side, file: &Path, rw: &str, jobs: usize, size: u64, time_based: bool) -> Result<f64> {
        let mut c = self.cmd(side, "fio")?;
        c.args(fio_args(file, rw, jobs, size, self.o.fio_ms, time_based));
        let (_, out) = tools::run(&mut c, true)?;
        fio_iops(&String::from_utf8_lossy(&out), if rw.ends_with("read") { "read" } else { "write" })
    }

    /// dd and fio.
    fn data(&mut self, side: Side) -> Result<()> {
        let file = self.work(side).join("dd.bin");
        let bytes = self.o.dd_mib * MIB;
        if self.runs(DD_WRITE) {
            let _ = fs::remove_file(&file);
            let dd = |b: &Self, args: &[String]| -> Result<f64> {
                let mut c = b.cmd(side, "dd")?;
                c.args(args).arg("bs=1M").arg("status=none");
                timed(&mut c)
            };
            let (i, o) = (format!("if={}", file.display()), format!("of={}", file.display()));
            let count = format!("count={}", self.o.dd_mib);
            let s = dd(self, &["if=/dev/zero".into(), o, count, "conv=fsync".into()])?;
            self.record(side, DD_WRITE, bytes as f64 / 1e6 / s);
            self.drop_cache(side, &file)?;
            for name in [DD_COLD, DD_WARM] {
                let s = dd(self, &[i.clone(), "of=/dev/null".into()])?;
                self.record(side, name, bytes as f64 / 1e6 / s);
            }
        }
        if self.runs(FIO_CACHED[0]) {
            for (k, jobs) in FIO_JOBS.into_iter().enumerate() {
                let v = self.fio(side, &file, "randread", jobs, bytes, true)?;
                self.record(side, FIO_CACHED[k], v);
            }
            for (k, jobs) in FIO_JOBS.into_iter().enumerate() {
                let v = self.fio(side, &file, "randwrite", jobs, bytes, true)?;
                self.record(side, FIO_WRITE[k], v);
            }
            for (k, jobs) in FIO_JOBS.into_iter().enumerate() {
                self.drop_cache(side, &file)?;
                let v = self.fio(side, &file, "randread", jobs, bytes, false)?;
                self.record(side, FIO_COLD[k], v);
            }
        }
        if self.runs(FLOOR[0]) {
            let zero = match side {
                Side::Mount if self.floor_missing.is_some() => None,
                Side::Mount => Some(self.work(side).join(".pcache/zero")),
                Side::Kernel => Some(PathBuf::from("/dev/zero")),
            };
            if let Some(zero) = zero {
                // .pcache/zero is 1 GiB; /dev/zero has no end.
                for (k, jobs) in FIO_JOBS.into_iter().enumerate() {
                    let v = self.fio(side, &zero, "randread", jobs, 1 << 30, true)?;
                    self.record(side, FLOOR[k], v);
                }
            }
        }
        let _ = fs::remove_file(&file);
        Ok(())
    }

    fn git(&self, side: Side, tree: &Path, args: &[&str]) -> Result<Command> {
        let mut c = self.cmd(side, "git")?;
        // Neither the host's nor the user's configuration.
        c.env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").current_dir(tree);
        c.args(["-c", "user.name=pcache", "-c", "user.email=pcache@localhost", "-c", "init.defaultBranch=main"]);
        c.args(args);
        Ok(c)
    }

    /// tar x, the stat storm, git, make.
    fn tree(&mut self, side: Side) -> Result<()> {
        if !self.runs(TAR) {
            return Ok(());
        }
        let tree = self.work(side).join("tree");
        if tree.exists() {
            fs::remove_dir_all(&tree).map_err(|e| Error::io(format!("removing {}", tree.display()), e))?;
        }
        fs::create_dir(&tree).map_err(|e| Error::io(format!("creating {}", tree.display()), e))?;
        let mut c = self.cmd(side, "tar")?;
        c.arg("xf").arg(&self.tarball).arg("-C").arg(&tree);
        let s = timed(&mut c)?;
        self.record(side, TAR, s);
        if self.runs(STAT) {
            let mut s = 0.0;
            for _ in 0..self.o.stat_rounds {
                let mut c = self.cmd(side, "find")?;
                c.arg(&tree).arg("-ls");
                s += timed(&mut c)?;
            }
            self.record(side, STAT, s);
        }
        if self.runs(GIT_COMMIT) {
            timed(&mut self.git(side, &tree, &["init", "-q"])?)?;
            let s = timed(&mut self.git(side, &tree, &["add", "-A"])?)?
                + timed(&mut self.git(side, &tree, &["commit", "-q", "-m", "tree"])?)?;
            self.record(side, GIT_COMMIT, s);
            let (s, out) = tools::run(&mut self.git(side, &tree, &["status", "--porcelain"])?, true)?;
            if !out.is_empty() {
                let first = String::from_utf8_lossy(&out).lines().next().unwrap_or("").to_string();
                return Err(Error::Check(format!("git status after the commit is not clean: {first}")));
            }
            self.record(side, GIT_STATUS, s);
        }
        if self.runs(MAKE) {
            let mut c = self.cmd(side, "make")?;
            c.current_dir(&tree).args(["-s", "-j2"]);
            let s = timed(&mut c)?;
            self.record(side, MAKE, s);
        }
        Ok(())
    }

    /// SQLite in each journal mode: inserts, then selects in a new process.
    fn sqlite(&mut self, side: Side) -> Result<()> {
        if !self.runs(SQLITE[0][0]) {
            return Ok(());
        }
        for (m, mode) in JOURNAL_MODES.into_iter().enumerate() {
            let db = self.work(side).join(format!("{mode}.db"));
            for ext in ["", "-journal", "-wal", "-shm"] {
                let _ = fs::remove_file(format!("{}{ext}", db.display()));
            }
            for (k, script) in [format!("insert-{mode}.sql"), "select.sql".to_string()].iter().enumerate() {
                let path = self.scripts.join(script);
                let input = fs::File::open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
                let mut c = self.cmd(side, "sqlite3")?;
                c.arg(&db).stdin(input);
                let (s, out) = tools::run(&mut c, k == 1)?;
                if k == 1 && String::from_utf8_lossy(&out).trim() != self.o.selects.to_string() {
                    return Err(Error::Check(format!(
                        "sqlite3 selects found {:?} rows",
                        String::from_utf8_lossy(&out)
                    )));
                }
                self.record(side, SQLITE[m][k], s);
            }
        }
        Ok(())
    }
}

/// Where the kernel side cannot run, why.
fn kernel_unavailable(o: &MountOpts, dir: &Path) -> std::result::Result<Memcg, String> {
    if !o.kernel {
        return Err("--no-kernel".into());
    }
    if sys::is_tmpfs(dir) {
        return Err(format!("{} is on tmpfs, which a limited memory cgroup cannot reclaim", dir.display()));
    }
    Memcg::create(o.mem_bytes)
}

/// The tree (written under `gen`, packed into `tarball` when tar runs)
/// and the SQLite scripts: its entries and bytes.
fn inputs(o: &MountOpts, gen: &Path, tarball: &Path, scripts: &Path, tar: bool) -> Result<(u64, u64)> {
    let shape = TreeShape { c_files: o.c_files, text_files: o.text_files };
    let bytes = tools::write_tree(gen, shape)?;
    let entries = tools::count_entries(gen)?;
    if tar {
        timed(Command::new("tar").arg("cf").arg(tarball).arg("-C").arg(gen).arg("."))?;
    }
    let write = |name: String, text: String| {
        let p = scripts.join(name);
        fs::write(&p, text).map_err(|e| Error::io(format!("writing {}", p.display()), e))
    };
    for mode in JOURNAL_MODES {
        write(format!("insert-{mode}.sql"), tools::sqlite_inserts(mode, o.rows, o.txns))?;
    }
    write("select.sql".into(), tools::sqlite_selects(o.rows, o.selects))?;
    Ok((entries, bytes))
}

/// Every run: each group on each side, the first side turning from run
/// to run.
fn measure(b: &mut Bench<'_>, sides: &[Side]) -> Result<()> {
    let groups = ["dd, fio", "tar, git, make", "SQLite"];
    let phase = Progress::new(b.o.progress).phase("mount", (b.o.runs * groups.len() * sides.len()) as u64);
    for r in 0..b.o.runs {
        for (g, what) in groups.into_iter().enumerate() {
            for k in 0..sides.len() {
                let side = sides[(k + r) % sides.len()];
                let name = if side == Side::Mount { "mount" } else { "kernel" };
                phase.set_message(format!("run {}: {what} on the {name}", r + 1));
                match g {
                    0 => b.data(side)?,
                    1 => b.tree(side)?,
                    _ => b.sqlite(side)?,
                }
                phase.inc(1);
            }
        }
    }
    phase.finish();
    Ok(())
}

pub fn run(o: &MountOpts) -> Result<MountResult> {
    o.validate()?;
    let start = Instant::now();
    let load_before = sys::loadavg();
    let tmp = sys::tempdir_in(o.dir.as_deref(), "pcache-mount-bench")?;
    let mkdir = |name: &str| -> Result<PathBuf> {
        let p = tmp.path().join(name);
        fs::create_dir(&p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        Ok(p)
    };
    let (backing, mnt, kernel_dir, gen, scripts) =
        (mkdir("backing")?, mkdir("mnt")?, mkdir("kernel")?, mkdir("tree")?, mkdir("scripts")?);
    let mut skipped: Vec<Option<String>> =
        SPECS.iter().map(|s| s.tools.iter().find_map(|t| tools::missing(t))).collect();

    let tarball = tmp.path().join("tree.tar");
    let (tree_entries, tree_bytes) = inputs(o, &gen, &tarball, &scripts, skipped[Bench::index(TAR)].is_none())?;

    let mount_skipped = mount_unavailable(&o.mount_exe);
    let daemon = match mount_skipped {
        None => Some(Daemon::start(&o.mount_exe, &backing, &mnt, o.mem_bytes, &o.set)?),
        Some(_) => None,
    };
    let (memcg, kernel_skipped) = match kernel_unavailable(o, &kernel_dir) {
        Ok(m) => (Some(m), None),
        Err(why) => (None, Some(why)),
    };
    let floor_missing =
        (!mnt.join(".pcache/zero").exists()).then(|| "this pcache mount has no .pcache/zero".to_string());
    let mut sides = Vec::new();
    if daemon.is_some() {
        sides.push(Side::Mount);
    }
    if memcg.is_some() {
        sides.push(Side::Kernel);
    }
    if sides.is_empty() {
        // Nothing measurable: every row says why.
        for s in skipped.iter_mut() {
            *s = s.take().or(Some("neither side can run here".into()));
        }
    }
    let mut b = Bench {
        o,
        daemon,
        memcg,
        kernel_dir,
        tarball,
        scripts,
        samples: vec![[Vec::new(), Vec::new()]; SPECS.len()],
        skipped,
        floor_missing,
    };
    measure(&mut b, &sides)?;
    if let Some(d) = b.daemon.as_mut() {
        d.stop()?;
    }
    let workloads = summarise(&b, mount_skipped.as_deref(), kernel_skipped.as_deref());
    Ok(MountResult {
        experiment: EXPERIMENT.into(),
        kernel_release: sys::kernel_release(),
        params: o.clone(),
        workloads,
        mount_skipped,
        kernel_skipped,
        floor_kernel: FLOOR_KERNEL.into(),
        tree_entries,
        tree_bytes,
        load_note: sys::load_note(load_before, sys::loadavg()),
        secs: start.elapsed().as_secs_f64(),
    })
}

fn summarise(b: &Bench<'_>, mount_skipped: Option<&str>, kernel_skipped: Option<&str>) -> Vec<WorkloadRow> {
    SPECS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let [m, k] = &b.samples[i];
            let med = |v: &Vec<f64>| (!v.is_empty()).then(|| stats::median(v));
            let (mount, kernel) = (med(m), med(k));
            let ratio = match (mount, kernel, s.better) {
                (Some(m), Some(k), Better::Higher) if k > 0.0 => Some(m / k),
                (Some(m), Some(k), Better::Lower) if m > 0.0 => Some(k / m),
                _ => None,
            };
            let mut why: Vec<String> = b.skipped[i].iter().cloned().collect();
            if why.is_empty() {
                if let (None, Some(r)) = (mount, mount_skipped) {
                    why.push(format!("mount: {r}"));
                } else if let (None, true) = (mount, FLOOR.contains(&s.name)) {
                    why.push(format!("mount: {}", b.floor_missing.as_deref().unwrap_or("not run")));
                }
                if let (None, Some(r)) = (kernel, kernel_skipped) {
                    why.push(format!("kernel: {r}"));
                }
            }
            if FLOOR.contains(&s.name) && kernel.is_some() {
                why.push(format!("kernel: {FLOOR_KERNEL}"));
            }
            WorkloadRow {
                name: s.name.into(),
                unit: s.unit.into(),
                mount,
                kernel,
                better: if s.better == Better::Higher { "higher" } else { "lower" }.into(),
                ratio,
                mount_samples: m.clone(),
                kernel_samples: k.clone(),
                note: (!why.is_empty()).then(|| why.join("; ")),
            }
        })
        .collect()
}

/// How a target fared: its rows' ratios (None where unmeasured), and the
/// verdict: met when every measured ratio reaches it, missed when one
/// does not, cannot judge when none was measured or in a debug build.
pub fn judge(t: &Target, rows: &[WorkloadRow], debug: bool) -> (Vec<Option<f64>>, Verdict) {
    let ratios: Vec<Option<f64>> =
        t.rows.iter().map(|name| rows.iter().find(|r| r.name == *name).and_then(|r| r.ratio)).collect();
    let measured: Vec<f64> = ratios.iter().flatten().copied().collect();
    let verdict = if debug || measured.is_empty() {
        Verdict::CannotJudge
    } else if measured.iter().all(|&r| r >= t.min) {
        Verdict::Met
    } else {
        Verdict::Missed
    };
    (ratios, verdict)
}

impl MountResult {
    fn row(&self, name: &str) -> Option<&WorkloadRow> {
        self.workloads.iter().find(|r| r.name == name)
    }

    pub fn report(&self) -> String {
        let p = &self.params;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "mount: real programs on a pcache mount against the kernel in a memory cgroup, both {}; dd {} MiB, \
             fio {} ms a run, a tree of {} entries ({}), SQLite {} rows in {} transactions and {} selects; {} runs \
             (median); kernel {}",
            fmt_size(p.mem_bytes),
            p.dd_mib,
            p.fio_ms,
            self.tree_entries,
            fmt_size(self.tree_bytes),
            p.rows,
            p.txns,
            p.selects,
            p.runs,
            self.kernel_release
        );
        if let Some(why) = &self.mount_skipped {
            let _ = writeln!(s, "mount side SKIPPED: {why}");
        }
        if let Some(why) = &self.kernel_skipped {
            let _ = writeln!(s, "kernel side SKIPPED: {why}");
        }
        let cell = |v: Option<f64>| v.map_or("-".to_string(), fmt_figure);
        let mut rows = vec![vec![
            "workload".to_string(),
            "unit".into(),
            "mount".into(),
            "kernel".into(),
            "mount/kernel".into(),
            "target".into(),
        ]];
        for r in &self.workloads {
            let target = TARGETS
                .iter()
                .find(|t| t.rows.contains(&r.name.as_str()))
                .map_or(String::new(), |t| format!(">= {}x", t.min));
            rows.push(vec![
                r.name.clone(),
                r.unit.clone(),
                cell(r.mount),
                cell(r.kernel),
                r.ratio.map_or("-".into(), |x| format!("{x:.2}x")),
                target,
            ]);
        }
        s.push_str(&render_table(&rows, &[false, false, true, true, true, false]));
        let _ = writeln!(s, "mount/kernel is the mount's speed over the kernel's: above 1, the mount is faster.");
        for r in self.workloads.iter().filter(|r| r.note.is_some()) {
            let _ = writeln!(s, "{}: {}", r.name, r.note.as_deref().unwrap_or(""));
        }
        for t in &TARGETS {
            let (_, v) = judge(t, &self.workloads, cfg!(debug_assertions));
            let _ = writeln!(s, "target {}: >= {}x the kernel: {}", t.what, t.min, v.label());
        }
        let _ = writeln!(
            s,
            "The kernel's memory cgroup also holds the programs' own memory (gcc, sqlite3); the mount's cache holds \
             file pages only."
        );
        let _ = writeln!(s, "{}", self.load_note);
        let _ = writeln!(s, "time: {:.1}s", self.secs);
        s
    }

    /// One headline per target, two lines each where they fit; the dd
    /// one notes the cached 4 KiB reads and the FUSE floor (no target).
    pub fn headlines(&self) -> Vec<Headline> {
        let debug = cfg!(debug_assertions);
        TARGETS
            .iter()
            .map(|t| {
                let (ratios, verdict) = judge(t, &self.workloads, debug);
                let ratios: Vec<String> = ratios.iter().map(|r| r.map_or("-".into(), |x| format!("{x:.2}x"))).collect();
                let kernel: Vec<String> =
                    t.rows.iter().map(|n| self.row(n).and_then(|r| r.kernel).map_or("-".into(), fmt_figure)).collect();
                let unit = self.row(t.rows[0]).map_or("", |r| r.unit.as_str());
                let mut note = Vec::new();
                if debug {
                    note.push("a debug build".to_string());
                }
                if let Some(why) = t.rows.iter().find_map(|n| self.row(n).and_then(|r| r.note.clone())) {
                    note.push(why);
                }
                if t.rows[0] == DD_WRITE {
                    note.push(self.floor_note());
                }
                Headline {
                    experiment: format!("A pcache mount against the kernel in a memcg of its size: {}", t.what),
                    claimed: format!(">= {}x the kernel", t.min),
                    reproduced: ratios.join(", "),
                    kernel: match &self.kernel_skipped {
                        Some(why) => format!("not run ({why})"),
                        None => format!("{} {unit}", kernel.join(" / ")),
                    },
                    verdict,
                    note: note.join("; "),
                }
            })
            .collect()
    }

    /// Cached 4 KiB random reads against the kernel, and the floor.
    fn floor_note(&self) -> String {
        let ratio = |n: &str| self.row(n).and_then(|r| r.ratio).map_or("-".into(), |x| format!("{x:.2}x"));
        let floor = match (self.row(FLOOR[0]).and_then(|r| r.mount), self.row(FLOOR[1]).and_then(|r| r.mount)) {
            (Some(a), Some(b)) => format!("FUSE floor {} / {} k IOPS", fmt_figure(a / 1e3), fmt_figure(b / 1e3)),
            _ => "FUSE floor not measured".into(),
        };
        format!("4K cached reads {} / {} (1 / 4 jobs); {floor}", ratio(FIO_CACHED[0]), ratio(FIO_CACHED[1]))
    }
}

pub struct MountBench;

impl Experiment for MountBench {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "Real programs (dd, fio, tar, git, find, make, SQLite) on a `pcache mount` against the same on the backing \
         directory through the kernel in a memory cgroup of the same size. Skips a side without FUSE or a cgroup."
    }
    fn takes_set(&self) -> bool {
        true
    }
    fn main_job(&self) -> MainJob {
        MainJob::Quick
    }
    fn params(&self) -> &'static [ParamDoc] {
        MountOpts::PARAMS
    }
    fn smoke(&self) -> ExpOpts {
        let params = [
            ("dd_mib", "4"),
            ("fio_ms", "100"),
            ("c_files", "2"),
            ("text_files", "10"),
            ("stat_rounds", "1"),
            ("rows", "100"),
            ("txns", "2"),
            ("selects", "10"),
        ];
        ExpOpts { mem_bytes: Some(64 << 20), kernel: false, ..ExpOpts::smoke(&params) }
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        MountOpts::from_exp(opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let result = run(&MountOpts::from_exp(opts)?)?;
        Ok(Outcome::new(result.report(), &result)?.with_headlines(result.headlines()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, mount: Option<f64>, kernel: Option<f64>) -> WorkloadRow {
        let s = SPECS.iter().find(|s| s.name == name).unwrap();
        let ratio = match (mount, kernel) {
            (Some(m), Some(k)) if s.better == Better::Higher => Some(m / k),
            (Some(m), Some(k)) => Some(k / m),
            _ => None,
        };
        WorkloadRow {
            name: name.into(),
            unit: s.unit.into(),
            mount,
            kernel,
            better: String::new(),
            ratio,
            mount_samples: Vec::new(),
            kernel_samples: Vec::new(),
            note: None,
        }
    }

    // Goal: a target is met only when every measured row reaches it, in
    // speed whichever way the unit runs (MB/s up, seconds down), missed
    // when one does not, and cannot be judged with nothing measured or in
    // a debug build.
    #[test]
    fn targets_judge_what_was_measured() {
        let dd = &TARGETS[0];
        let rows = vec![row(DD_WRITE, Some(900.0), Some(1000.0)), row(DD_COLD, Some(800.0), Some(1000.0))];
        let (ratios, v) = judge(dd, &rows, false);
        assert_eq!(v, Verdict::Met);
        assert_eq!(ratios, vec![Some(0.9), Some(0.8), None]);
        let rows = vec![row(DD_WRITE, Some(900.0), Some(1000.0)), row(DD_WARM, Some(700.0), Some(1000.0))];
        assert_eq!(judge(dd, &rows, false).1, Verdict::Missed);
        assert_eq!(judge(dd, &rows, true).1, Verdict::CannotJudge);
        assert_eq!(judge(dd, &[row(DD_WRITE, Some(1.0), None)], false).1, Verdict::CannotJudge);
        // Seconds: the mount taking twice the kernel's time is 0.5x.
        let tree = &TARGETS[2];
        let rows = vec![row(TAR, Some(2.0), Some(1.0)), row(MAKE, Some(1.0), Some(1.0))];
        let (ratios, v) = judge(tree, &rows, false);
        assert_eq!((ratios[0], v), (Some(0.5), Verdict::Met));
        let rows = vec![row(TAR, Some(2.1), Some(1.0))];
        assert_eq!(judge(tree, &rows, false).1, Verdict::Missed);
    }

    // Goal: with neither side available nothing is timed, every row says
    // why, and the headlines (one per target) say they cannot judge.
    #[test]
    fn no_side_measures_nothing_and_says_why() {
        let o = MountOpts {
            dd_mib: 4,
            mem_bytes: 64 * MIB,
            c_files: 2,
            text_files: 5,
            rows: 10,
            txns: 2,
            selects: 5,
            runs: 1,
            kernel: false,
            progress: false,
            // Not the pcache binary: no mount.
            mount_exe: PathBuf::from("/bin/true"),
            ..MountOpts::defaults(true)
        };
        let r = run(&o).unwrap();
        assert_eq!(r.workloads.len(), SPECS.len());
        assert!(r.workloads.iter().all(|w| w.mount.is_none() && w.kernel.is_none() && w.note.is_some()));
        assert!(r.mount_skipped.as_deref().is_some_and(|m| m.contains("not the pcache binary")), "{r:?}");
        assert_eq!(r.kernel_skipped.as_deref(), Some("--no-kernel"));
        let h = r.headlines();
        assert_eq!(h.len(), TARGETS.len());
        let debug = cfg!(debug_assertions);
        assert!(h.iter().all(|h| h.verdict == Verdict::CannotJudge && (debug || !h.note.is_empty())), "{h:?}");
        assert!(h[0].note.contains("FUSE floor not measured"), "{}", h[0].note);
        assert!(r.report().contains("mount side SKIPPED"));
        // Root, Makefile, src and its 2 files, doc, one directory, 5 files.
        assert_eq!(r.tree_entries, 1 + 1 + 3 + 2 + 5);
    }

    // Goal: options that would not measure what the rows say (a warm read
    // of a file the cache cannot hold) or would not run are refused.
    #[test]
    fn refuses_bad_options() {
        let q = MountOpts::defaults(true);
        assert!(q.validate().is_ok() && MountOpts::defaults(false).validate().is_ok());
        let bad = [
            MountOpts { dd_mib: 200, ..q.clone() },
            MountOpts { runs: 0, ..q.clone() },
            MountOpts { txns: 10, rows: 5, ..q.clone() },
            MountOpts { fio_ms: 10, ..q.clone() },
            MountOpts { mem_bytes: 32 * MIB, dd_mib: 8, ..q },
        ];
        crate::experiment::assert_checked(&[MountOpts::defaults(true)], &bad, |o| o.validate());
    }
}

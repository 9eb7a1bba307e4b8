//! `pcache bench sqlite`: YCSB's workloads on SQLite, through the pcache
//! VFS (crates/sqlite) against SQLite's default VFS through the kernel's
//! page cache in a memory cgroup of the same size.
//!
//! One table `t(k INTEGER PRIMARY KEY, field BLOB)` of 1000-byte records,
//! built to `ratio` times the cache (2x and 4x by default) with the default
//! VFS, then copied once per side and dropped from the host's cache, so
//! both sides start cold on the same bytes. Each side runs C, B, A and E
//! in that order on its copy (read-only first), WAL mode, synchronous
//! NORMAL, the same small SQLite cache (`cache_size`), a quarter of the
//! operations as an unmeasured warm-up before each: C is 100% reads, B 95%
//! reads and 5% updates, A 50/50, E 95% short scans (1 to 100 records) and
//! 5% inserts; keys are Zipf(0.99) over the records, scrambled, the same
//! sequence on both sides. Per workload: throughput, p50 and p99 latency,
//! SQLite's cache misses, and the misses of the cache below it: pages read
//! from the disk (pcache's `pgpgin`; the kernel side's `read_bytes` of
//! /proc/self/io). The kernel side's SQLite heap is charged to its memory
//! cgroup too, so its page cache has a little less than pcache's arena.

use std::ffi::{c_int, CStr, CString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use libsqlite3_sys as ffi;
use pcache::PolicyKind;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{params, ExpOpts, Experiment, MainJob, Outcome, ParamDoc};
use crate::verdict::{fmt_figure, Headline, Verdict};
use crate::zipf::ZipfKeys;
use crate::{kernel, stats};
use crate::{Error, Result};

const EXPERIMENT: &str = "sqlite";
const RECORD: usize = 1000;
const WORKLOADS: [Workload; 4] = [Workload::C, Workload::B, Workload::A, Workload::E];

params! {
    pub struct SqliteOpts {
        pub mem_bytes: u64 = 64 << 20, quick 16 << 20;
        pub ratios: Vec<u64> = vec![2, 4], quick vec![4],
            param param_list "database sizes as multiples of the cache [default: 2,4; quick: 4]", each 1..=16;
        pub ops: u64 = 40_000, quick 4_000,
            param param_as "measured operations per workload [default: 40000; quick: 4000]", range 100..=100_000_000;
        pub sqlite_cache_kib: u64 = 2048,
            param param_as "SQLite's own cache (cache_size) on both sides, KiB [default: 2048]", range 64..=1 << 20;
        pub kernel: bool = true, opt kernel;
        pub dir: Option<PathBuf> = None, opt dir;
        /// The VFS's eviction policy (`--set policy=NAME`; the URI's
        /// `pcache_policy`): None for the kernel's lists.
        pub policy: Option<String> = None;
        pub seed: u64 = 1, opt seed;
    }
}

impl SqliteOpts {
    pub fn from_exp(opts: &ExpOpts) -> Result<SqliteOpts> {
        let mut o = SqliteOpts::defaults(opts.quick);
        o.set_params(opts)?;
        if let Some(m) = opts.mem_bytes {
            o.mem_bytes = m;
        }
        for (name, value) in &opts.set {
            // The VFS builds its own cache: only the policy reaches it.
            if name != "policy" || PolicyKind::from_name(value).is_none() {
                return Err(Error::Invalid(format!(
                    "--set {name}={value}: the sqlite bench takes only --set policy=NAME (`pcache tunables`)"
                )));
            }
            o.policy = Some(value.clone());
        }
        o.check_ranges()?;
        if !(4 << 20..=64 << 30).contains(&o.mem_bytes) {
            return Err(Error::Invalid(format!("memory {} must be from 4 MiB to 64 GiB", o.mem_bytes)));
        }
        Ok(o)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    A,
    B,
    C,
    E,
}

impl Workload {
    fn about(self) -> &'static str {
        match self {
            Workload::A => "A 50/50 read/update",
            Workload::B => "B 95/5 read/update",
            Workload::C => "C 100% read",
            Workload::E => "E 95/5 scan/insert",
        }
    }
}

/// One side's figures for one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Side {
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Pages SQLite's own cache missed (read through the VFS).
    pub sqlite_misses: u64,
    /// Pages the cache below SQLite read from the disk.
    pub disk_pages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub ratio: u64,
    pub db_bytes: u64,
    pub workload: Workload,
    pub pcache: Side,
    pub kernel: Option<Side>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SqliteResult {
    pub experiment: &'static str,
    pub mem_bytes: u64,
    pub ops: u64,
    pub sqlite_cache_kib: u64,
    /// The pcache side's eviction policy: "kernel" for the two lists.
    pub policy: String,
    pub rows: Vec<Row>,
    /// Why a side did not run, if one did not.
    pub skipped: Option<String>,
    pub kernel_note: String,
}

/// What the kernel worker runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Job {
    path: PathBuf,
    keys: u64,
    ops: u64,
    sqlite_cache_kib: u64,
    seed: u64,
}

/// A connection, closed on drop.
struct Db(*mut ffi::sqlite3);

impl Db {
    fn open(uri: &str) -> std::result::Result<Db, String> {
        let c = CString::new(uri).map_err(|e| e.to_string())?;
        let mut db = std::ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE | ffi::SQLITE_OPEN_URI;
        // SAFETY: a NUL-terminated name and an out-pointer; the API table
        // is set (init_in_process ran before any Db is opened).
        let rc = unsafe { ffi::sqlite3_open_v2(c.as_ptr(), &mut db, flags, std::ptr::null()) };
        let db = Db(db);
        if rc != ffi::SQLITE_OK {
            return Err(format!("opening {uri}: {}", db.errmsg()));
        }
        Ok(db)
    }

    fn errmsg(&self) -> String {
        if self.0.is_null() {
            return "out of memory".into();
        }
        // SAFETY: a live connection; the message is NUL-terminated and
        // copied before the next call.
        unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.0)) }.to_string_lossy().into_owned()
    }

    fn exec(&self, sql: &str) -> std::result::Result<(), String> {
        let c = CString::new(sql).map_err(|e| e.to_string())?;
        // SAFETY: a live connection and a NUL-terminated statement list.
        let rc = unsafe { ffi::sqlite3_exec(self.0, c.as_ptr(), None, std::ptr::null_mut(), std::ptr::null_mut()) };
        if rc != ffi::SQLITE_OK {
            return Err(format!("{sql}: {}", self.errmsg()));
        }
        Ok(())
    }

    fn prepare(&self, sql: &str) -> std::result::Result<Stmt<'_>, String> {
        let c = CString::new(sql).map_err(|e| e.to_string())?;
        let mut st = std::ptr::null_mut();
        // SAFETY: a live connection, a NUL-terminated statement, an out-pointer.
        let rc = unsafe { ffi::sqlite3_prepare_v2(self.0, c.as_ptr(), -1, &mut st, std::ptr::null_mut()) };
        if rc != ffi::SQLITE_OK {
            return Err(format!("{sql}: {}", self.errmsg()));
        }
        Ok(Stmt { db: self, st })
    }

    /// SQLite's cache misses since the last call.
    fn take_cache_misses(&self) -> u64 {
        let (mut cur, mut hi) = (0, 0);
        // SAFETY: a live connection and two out-pointers.
        unsafe { ffi::sqlite3_db_status(self.0, ffi::SQLITE_DBSTATUS_CACHE_MISS, &mut cur, &mut hi, 1) };
        cur.max(0) as u64
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: every statement borrows the Db, so all are finalized.
        unsafe { ffi::sqlite3_close(self.0) };
    }
}

struct Stmt<'a> {
    db: &'a Db,
    st: *mut ffi::sqlite3_stmt,
}

impl Stmt<'_> {
    fn bind_i64(&mut self, i: c_int, v: i64) {
        // SAFETY: a live statement; a bad index only returns an error.
        unsafe { ffi::sqlite3_bind_int64(self.st, i, v) };
    }

    fn bind_blob(&mut self, i: c_int, v: &[u8]) {
        // SAFETY: SQLITE_TRANSIENT: SQLite copies the bytes during the call.
        unsafe { ffi::sqlite3_bind_blob(self.st, i, v.as_ptr().cast(), v.len() as c_int, ffi::SQLITE_TRANSIENT()) };
    }

    /// Step to the end, returning the rows and the bytes of column 0 read.
    fn run(&mut self) -> std::result::Result<(u64, u64), String> {
        let (mut rows, mut bytes) = (0u64, 0u64);
        loop {
            // SAFETY: a live statement.
            match unsafe { ffi::sqlite3_step(self.st) } {
                ffi::SQLITE_ROW => {
                    rows += 1;
                    // SAFETY: a row is current; blob then bytes, as SQLite
                    // documents the order.
                    unsafe {
                        ffi::sqlite3_column_blob(self.st, 0);
                        bytes += ffi::sqlite3_column_bytes(self.st, 0).max(0) as u64;
                    }
                }
                ffi::SQLITE_DONE => break,
                _ => {
                    let e = self.db.errmsg();
                    // SAFETY: a live statement.
                    unsafe { ffi::sqlite3_reset(self.st) };
                    return Err(e);
                }
            }
        }
        // SAFETY: a live statement.
        unsafe { ffi::sqlite3_reset(self.st) };
        Ok((rows, bytes))
    }
}

impl Drop for Stmt<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, here.
        unsafe { ffi::sqlite3_finalize(self.st) };
    }
}

/// This process's bytes read from the storage layer (/proc/self/io).
fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("read_bytes: ")?.trim().parse().ok()))
        .unwrap_or(0)
}

/// pcache's pages read from devices (pgpgin is in KiB).
fn pcache_pages_in() -> u64 {
    pcache_sqlite::page_cache().and_then(|c| c.vmstat().by_name("pgpgin")).unwrap_or(0) / 4
}

/// Build the table with the default VFS to `target` bytes; its key count.
fn build(path: &Path, target: u64, seed: u64) -> std::result::Result<u64, String> {
    let db = Db::open(&path.to_string_lossy())?;
    db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; CREATE TABLE t(k INTEGER PRIMARY KEY, field BLOB)")?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rec = vec![0u8; RECORD];
    let mut keys = 0u64;
    let mut ins = db.prepare("INSERT INTO t VALUES (?, ?)")?;
    while std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) < target {
        db.exec("BEGIN")?;
        for _ in 0..5000 {
            rng.fill_bytes(&mut rec);
            ins.bind_i64(1, keys as i64);
            ins.bind_blob(2, &rec);
            ins.run()?;
            keys += 1;
        }
        db.exec("COMMIT; PRAGMA wal_checkpoint(TRUNCATE)")?;
    }
    drop(ins);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(keys)
}

/// Run C, B, A and E on `uri`; `pages_in` reads the disk-miss counter.
fn run_workloads(uri: &str, job: &Job, pages_in: fn() -> u64) -> std::result::Result<Vec<Side>, String> {
    let db = Db::open(uri)?;
    db.exec(&format!(
        "PRAGMA cache_size=-{}; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA mmap_size=0",
        job.sqlite_cache_kib
    ))?;
    let mut read = db.prepare("SELECT field FROM t WHERE k = ?")?;
    let mut update = db.prepare("UPDATE t SET field = ? WHERE k = ?")?;
    let mut scan = db.prepare("SELECT field FROM t WHERE k >= ? ORDER BY k LIMIT ?")?;
    let mut insert = db.prepare("INSERT INTO t VALUES (?, ?)")?;
    let zipf = ZipfKeys::new(job.keys, 0.99, job.seed)?;
    let mut rng = StdRng::seed_from_u64(job.seed ^ 0x5eed);
    let mut rec = vec![0u8; RECORD];
    let mut next_key = job.keys;
    let mut out = Vec::new();
    for w in WORKLOADS {
        let warm = job.ops / 4;
        let mut lat = Vec::with_capacity(job.ops as usize);
        let (mut t0, mut misses0, mut pages0) = (Instant::now(), 0, 0);
        for i in 0..warm + job.ops {
            if i == warm {
                db.take_cache_misses();
                (t0, misses0, pages0) = (Instant::now(), 0, pages_in());
            }
            let key = zipf.sample(&mut rng) as i64;
            let p: f64 = rng.gen();
            let t = Instant::now();
            match w {
                Workload::C => {
                    read.bind_i64(1, key);
                    read.run()?;
                }
                Workload::B | Workload::A if p < if w == Workload::B { 0.05 } else { 0.5 } => {
                    rng.fill_bytes(&mut rec);
                    update.bind_blob(1, &rec);
                    update.bind_i64(2, key);
                    update.run()?;
                }
                Workload::B | Workload::A => {
                    read.bind_i64(1, key);
                    read.run()?;
                }
                Workload::E if p < 0.05 => {
                    rng.fill_bytes(&mut rec);
                    insert.bind_i64(1, next_key as i64);
                    insert.bind_blob(2, &rec);
                    insert.run()?;
                    next_key += 1;
                }
                Workload::E => {
                    scan.bind_i64(1, key);
                    scan.bind_i64(2, rng.gen_range(1..=100));
                    scan.run()?;
                }
            }
            if i >= warm {
                lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let misses = db.take_cache_misses() - misses0;
        let pages = pages_in().saturating_sub(pages0);
        lat.sort_by(f64::total_cmp);
        out.push(Side {
            ops_per_s: job.ops as f64 / secs,
            p50_us: stats::quantile_sorted(&lat, 0.5),
            p99_us: stats::quantile_sorted(&lat, 0.99),
            sqlite_misses: misses,
            disk_pages: pages,
        });
    }
    Ok(out)
}

fn kernel_pages_in() -> u64 {
    read_bytes() / 4096
}

fn kernel_worker(params: &Value) -> std::result::Result<Value, String> {
    let job: Job = serde_json::from_value(params.clone()).map_err(|e| format!("bad sqlite job: {e}"))?;
    pcache_sqlite::init_in_process()?;
    let sides = run_workloads(&job.path.to_string_lossy(), &job, kernel_pages_in)?;
    serde_json::to_value(sides).map_err(|e| e.to_string())
}

fn err(e: String) -> Error {
    Error::Invalid(e)
}

pub fn run(o: &SqliteOpts) -> Result<SqliteResult> {
    let mut res = SqliteResult {
        experiment: EXPERIMENT,
        mem_bytes: o.mem_bytes,
        ops: o.ops,
        sqlite_cache_kib: o.sqlite_cache_kib,
        policy: o.policy.clone().unwrap_or_else(|| PolicyKind::Kernel.name().to_string()),
        rows: Vec::new(),
        skipped: None,
        kernel_note: String::new(),
    };
    if let Err(e) = pcache_sqlite::init_in_process() {
        res.skipped = Some(e);
        return Ok(res);
    }
    let tmp = crate::sys::tempdir_in(o.dir.as_deref(), "pcache-sqlite")?;
    let (kernel_ok, note) = if !o.kernel {
        (false, "not run".to_string())
    } else {
        match kernel::worker_exe().and_then(|_| kernel::Memcg::create(o.mem_bytes)) {
            Ok(_) => (true, format!("default VFS in a memory cgroup of {} bytes, a worker process", o.mem_bytes)),
            Err(e) => (false, format!("not run: {e}")),
        }
    };
    res.kernel_note = note;
    for &ratio in &o.ratios {
        let base = tmp.path().join(format!("base-{ratio}.db"));
        let keys = build(&base, ratio * o.mem_bytes, o.seed).map_err(err)?;
        let db_bytes = std::fs::metadata(&base).map_err(|e| Error::io("stat", e))?.len();
        let (pc, kc) = (tmp.path().join(format!("pcache-{ratio}.db")), tmp.path().join(format!("kernel-{ratio}.db")));
        for copy in [&pc, &kc] {
            std::fs::copy(&base, copy).map_err(|e| Error::io("copying the database", e))?;
            let f = std::fs::File::open(copy).map_err(|e| Error::io("open", e))?;
            f.sync_all().map_err(|e| Error::io("fsync", e))?;
            kernel::drop_cached(&f);
        }
        std::fs::remove_file(&base).map_err(|e| Error::io("remove", e))?;
        let job = Job { path: kc.clone(), keys, ops: o.ops, sqlite_cache_kib: o.sqlite_cache_kib, seed: o.seed };
        let mut uri = format!("file:{}?vfs=pcache&pcache_mem={}", pc.display(), o.mem_bytes);
        if let Some(p) = &o.policy {
            uri.push_str(&format!("&pcache_policy={p}"));
        }
        let pcache_sides = run_workloads(&uri, &job, pcache_pages_in).map_err(err)?;
        let kernel_sides: Option<Vec<Side>> = if kernel_ok {
            let v = kernel::run(EXPERIMENT, o.mem_bytes, &job).map_err(err)?;
            Some(serde_json::from_value(v).map_err(|e| err(format!("the kernel worker's result: {e}")))?)
        } else {
            None
        };
        for (i, w) in WORKLOADS.into_iter().enumerate() {
            res.rows.push(Row {
                ratio,
                db_bytes,
                workload: w,
                pcache: pcache_sides[i].clone(),
                kernel: kernel_sides.as_ref().map(|k| k[i].clone()),
            });
        }
        for p in [&pc, &kc] {
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(res)
}

impl SqliteResult {
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "sqlite: YCSB on SQLite, the pcache VFS against the default VFS (the kernel's page cache)\n\
             {} of cache, SQLite cache_size {} KiB, {} operations per workload, Zipf(0.99) keys, policy {}",
            crate::render::fmt_size(self.mem_bytes),
            self.sqlite_cache_kib,
            self.ops,
            self.policy
        );
        if let Some(why) = &self.skipped {
            let _ = writeln!(s, "skipped: {why}");
            return s;
        }
        let _ = writeln!(s, "kernel column: {}", self.kernel_note);
        let _ = writeln!(
            s,
            "{:<5} {:<20} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "db", "workload", "pc op/s", "k op/s", "pc p99", "k p99", "pc disk", "k disk", "pc sqlm", "k sqlm"
        );
        for r in &self.rows {
            let k = r.kernel.as_ref();
            let kf = |f: &dyn Fn(&Side) -> String| k.map_or("-".to_string(), f);
            let _ = writeln!(
                s,
                "{:<5} {:<20} {:>9.0} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
                format!("{}x", r.ratio),
                r.workload.about(),
                r.pcache.ops_per_s,
                kf(&|k| format!("{:.0}", k.ops_per_s)),
                format!("{:.0}us", r.pcache.p99_us),
                kf(&|k| format!("{:.0}us", k.p99_us)),
                r.pcache.disk_pages,
                kf(&|k| k.disk_pages.to_string()),
                r.pcache.sqlite_misses,
                kf(&|k| k.sqlite_misses.to_string()),
            );
        }
        let _ = writeln!(
            s,
            "pc = pcache VFS, k = default VFS; p99: latency per operation; disk: pages the cache under SQLite\n\
             read from the disk (pcache's pgpgin, the worker's read_bytes); sqlm: SQLite's own cache misses"
        );
        s
    }
}

impl SqliteResult {
    /// The verdict screen's line: YCSB C and A at the largest database.
    pub fn headlines(&self) -> Vec<Headline> {
        let experiment = "SQLite through the pcache VFS: YCSB C (reads) and A (50% updates), Zipf(0.99)".to_string();
        let claimed = "pcache's target: C at the kernel's op/s or more, reading no more from the disk".to_string();
        let at = |w: Workload| self.rows.iter().rev().find(|r| r.workload == w);
        let (Some(c), Some(a)) = (at(Workload::C), at(Workload::A)) else {
            let why = self.skipped.clone().unwrap_or_else(|| "no workload ran".into());
            return vec![Headline {
                experiment,
                claimed,
                reproduced: "not run".into(),
                kernel: "not run".into(),
                verdict: Verdict::CannotJudge,
                note: why,
            }];
        };
        let db = format!("db {}x the cache", c.ratio);
        let (reproduced, kernel, verdict, note) = match (&c.kernel, &a.kernel) {
            (Some(kc), Some(ka)) => {
                let speed = c.pcache.ops_per_s / kc.ops_per_s;
                let disk = c.pcache.disk_pages as f64 / (kc.disk_pages as f64).max(1.0);
                let met = speed >= 1.0 && c.pcache.disk_pages <= kc.disk_pages;
                (
                    format!(
                        "{db}: C {speed:.2}x the kernel's op/s, {disk:.2}x its disk reads; A {:.2}x its op/s",
                        a.pcache.ops_per_s / ka.ops_per_s
                    ),
                    format!("C {} op/s, A {} op/s", fmt_figure(kc.ops_per_s), fmt_figure(ka.ops_per_s)),
                    if cfg!(debug_assertions) {
                        Verdict::CannotJudge
                    } else if met {
                        Verdict::Met
                    } else {
                        Verdict::Missed
                    },
                    String::new(),
                )
            }
            _ => (
                format!("{db}: C {} op/s, A {} op/s", fmt_figure(c.pcache.ops_per_s), fmt_figure(a.pcache.ops_per_s)),
                self.kernel_note.clone(),
                Verdict::CannotJudge,
                "no kernel column".into(),
            ),
        };
        vec![Headline { experiment, claimed, reproduced, kernel, verdict, note }]
    }
}

pub struct SqliteYcsb;

impl Experiment for SqliteYcsb {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "YCSB A, B, C and E on SQLite over Zipf(0.99) keys, on databases 2x and 4x the cache: the pcache VFS \
         (libpcache_sqlite) against the default VFS through the kernel's page cache in a memory cgroup of the \
         same size; throughput, p99 latency and both caches' misses."
    }
    fn main_job(&self) -> MainJob {
        MainJob::Quick
    }
    fn params(&self) -> &'static [ParamDoc] {
        SqliteOpts::PARAMS
    }
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        Some(kernel_worker)
    }
    /// `--set policy=NAME` only: the VFS's cache takes its policy.
    fn takes_set(&self) -> bool {
        true
    }
    fn smoke(&self) -> ExpOpts {
        ExpOpts::smoke(&[("ratios", "2"), ("ops", "200")])
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        SqliteOpts::from_exp(opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let o = SqliteOpts::from_exp(opts)?;
        let result = run(&o)?;
        Ok(Outcome::new(result.report(), &result)?.with_headlines(result.headlines()))
    }
}

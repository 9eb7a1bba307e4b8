//! `pcache bench getscan`: point reads beside a long scan, the mix
//! cache_ext's GET-SCAN policy (SOSP'25) was written for, with a policy
//! chosen for the application (the `getscan` plug-in,
//! pcache::policy::getscan) against the kernel's.
//!
//! One data file `file_ratio` times the cache. `get_threads` threads read
//! 4 KiB pages at Zipf(0.99) indices (scrambled over the file) through one
//! ordinary handle; one scan thread reads `scan_bytes` ranges from random
//! starts in `scan_read_bytes` reads through a handle advised
//! POSIX_FADV_NOREUSE and POSIX_FADV_SEQUENTIAL, until the GET threads are
//! done: as fast as it can, or paced (`scan_kib_per_get`) so that every
//! side's GETs meet the same scan bytes per GET, which an unpaced scan
//! leaves to each side's scan speed. `warm_gets` unmeasured GETs first
//! (the scan running), then
//! `gets` measured ones. Per side: GET throughput, p50 and p99 latency
//! (of the read alone), the GET hit ratio (each GET asks first whether its
//! page is cached, without touching it: `File::page_state` for pcache,
//! cachestat(2) for the kernel) and the scan's throughput.
//!
//! pcache's sides are the variants (the kernel's two lists with
//! workingset detection, the multi-gen LRU, the plug-in), each a fresh
//! cache over the file opened O_DIRECT; the kernel column runs the same
//! threads with plain pread(2) in a memory cgroup of the same size, the
//! file dropped from the host's cache first. The worker's own memory (its
//! latency buffers, a few MiB) is charged to that group.

use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use pcache::{Advice, Config, LruPolicy, OpenOptions, PageCache, PolicyKind, Tunables};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::experiment::{params, variant_tunables, ExpOpts, Experiment, Outcome, ParamDoc};
use crate::variants::{seed_tunables, Preset};
use crate::verdict::{fmt_figure, Headline, Verdict};
use crate::zipf::ZipfKeys;
use crate::{kernel, stats, sys};
use crate::{Error, Result};

const EXPERIMENT: &str = "getscan";
const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;
/// The variant the headline judges.
const APP_POLICY: &str = "getscan";

pub static PRESETS: &[Preset] = &[
    Preset::new(
        EXPERIMENT,
        "workingset-on",
        "the kernel's two lists with workingset refault detection (pcache's defaults)",
        Tunables::default,
    ),
    Preset::new(EXPERIMENT, "mglru", "the multi-gen LRU (lru_gen)", || Tunables {
        lru: LruPolicy::MultiGen,
        ..seed_tunables()
    }),
    Preset::new(
        EXPERIMENT,
        APP_POLICY,
        "plug-in policy GET-SCAN (pcache::policy, after cache_ext's): pages not used since their \
        insertion (a NOREUSE scan's) evicted first, down to a tenth of the cache; pages used again in an LRU",
        || Tunables { policy: PolicyKind::Getscan, ..seed_tunables() },
    ),
];

params! {
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct GetscanOpts {
        pub mem_bytes: u64 = 64 * MIB, quick 16 * MIB;
        pub variants: Vec<String> = crate::variants::defaults(PRESETS);
        pub file_ratio: u64 = 4,
            param param_as "the data file in multiples of the cache [default: 4]", range 2..=64;
        pub gets: u64 = 200_000, quick 20_000,
            param param_as "measured GETs, all threads [default: 200000; quick: 20000]", range 10..=1_000_000_000;
        pub warm_gets: u64 = 100_000, quick 10_000,
            param param_as "unmeasured GETs first [default: 100000; quick: 10000]", range 0..=1_000_000_000;
        pub get_threads: usize = 2,
            param param_as "GET threads [default: 2]", range 1..=64;
        pub scan_bytes: u64 = 16 * MIB, quick 4 * MIB,
            param param_size "bytes per scan [default: 16M; quick: 4M]", range PAGE..=1 << 40;
        pub scan_read_bytes: u64 = 128 << 10,
            param param_size "bytes per scan read [default: 128K]", range PAGE..=64 * MIB;
        pub scan_kib_per_get: u64 = 0,
            param param_as "pace the scan: at most this many KiB read per GET done, 0 for unpaced [default: 0]",
            range 0..=1 << 30;
        pub zipf_s: f64 = 0.99,
            param param_as "the GETs' Zipf exponent [default: 0.99]", range 0.0..=5.0;
        pub kernel: bool = true, opt kernel;
        pub dir: Option<PathBuf> = None, opt dir;
        pub seed: u64 = 1, opt seed;
    }
}

impl GetscanOpts {
    pub fn from_exp(o: &ExpOpts) -> Result<GetscanOpts> {
        let (quick, full) = (Self::defaults(true), Self::defaults(false));
        let c = o.common(PRESETS, (quick.mem_bytes, full.mem_bytes), (1, 1), 64 << 30)?;
        let mut opts = GetscanOpts { mem_bytes: c.mem_bytes, variants: c.variants, ..Self::defaults(o.quick) };
        opts.set_params(o)?;
        opts.check_ranges()?;
        if opts.scan_bytes > opts.file_bytes() {
            return Err(Error::Invalid(format!(
                "scan_bytes {} must not exceed the file ({} bytes)",
                opts.scan_bytes,
                opts.file_bytes()
            )));
        }
        Ok(opts)
    }

    fn file_bytes(&self) -> u64 {
        (self.mem_bytes * self.file_ratio) / PAGE * PAGE
    }
}

/// One side's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Side {
    pub name: String,
    pub get_ops_per_s: f64,
    pub get_p50_us: f64,
    pub get_p99_us: f64,
    /// Measured GETs whose page was cached when asked; None where the
    /// kernel cannot say (no cachestat).
    pub get_hit_ratio: Option<f64>,
    pub scan_mib_per_s: f64,
    pub secs: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GetscanResult {
    pub experiment: &'static str,
    pub mem_bytes: u64,
    pub file_bytes: u64,
    pub gets: u64,
    pub warm_gets: u64,
    pub get_threads: usize,
    pub zipf_s: f64,
    pub scan_bytes: u64,
    pub scan_read_bytes: u64,
    /// 0: the scan ran as fast as it could.
    pub scan_kib_per_get: u64,
    pub pcache: Vec<Side>,
    pub kernel: Option<Side>,
    pub kernel_note: String,
}

/// What the kernel worker runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Job {
    path: PathBuf,
    opts: GetscanOpts,
}

/// The two handles a side reads through.
trait Io: Sync {
    /// A GET's read, through the ordinary handle.
    fn get(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String>;
    /// Whether `page` is cached, asked without marking it used.
    fn cached(&self, page: u64) -> Option<bool>;
    /// A scan's read, through the NOREUSE handle.
    fn scan(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String>;
}

struct PcacheIo {
    get: pcache::File,
    scan: pcache::File,
}

impl Io for PcacheIo {
    fn get(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String> {
        self.get.read_at(buf, off).map_err(|e| e.to_string())
    }
    fn cached(&self, page: u64) -> Option<bool> {
        Some(self.get.page_state(page).is_some())
    }
    fn scan(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String> {
        self.scan.read_at(buf, off).map_err(|e| e.to_string())
    }
}

struct KernelIo {
    get: std::fs::File,
    scan: std::fs::File,
}

impl Io for KernelIo {
    fn get(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String> {
        self.get.read_at(buf, off).map_err(|e| format!("pread: {e}"))
    }
    fn cached(&self, page: u64) -> Option<bool> {
        kernel::page_cached(&self.get, page * PAGE, PAGE)
    }
    fn scan(&self, buf: &mut [u8], off: u64) -> std::result::Result<usize, String> {
        self.scan.read_at(buf, off).map_err(|e| format!("pread: {e}"))
    }
}

/// One GET thread's measured figures.
#[derive(Default)]
struct GetStats {
    lat_us: Vec<f64>,
    hits: u64,
    asked: u64,
}

/// Run the GET threads and the scan thread on `io`; the side's figures.
fn run_side(name: &str, io: &dyn Io, o: &GetscanOpts) -> std::result::Result<Side, String> {
    let pages = o.file_bytes() / PAGE;
    let zipf = ZipfKeys::new(pages, o.zipf_s, o.seed)?;
    let threads = o.get_threads as u64;
    let warm_per = o.warm_gets.div_ceil(threads);
    let gets_per = o.gets.div_ceil(threads);
    let done = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let scanned = AtomicU64::new(0);
    // GETs done, warm-up included: what a paced scan may read against.
    let gets_done = AtomicU64::new(0);
    let barrier = Barrier::new(o.get_threads);
    let span: Mutex<(Option<Instant>, Option<Instant>)> = Mutex::new((None, None));
    let results = std::thread::scope(|s| -> std::result::Result<Vec<GetStats>, String> {
        let scanner = s.spawn(|| -> std::result::Result<(), String> {
            let mut rng = StdRng::seed_from_u64(o.seed ^ 0x5ca7);
            let mut buf = vec![0u8; o.scan_read_bytes as usize];
            let scan_pages = o.scan_bytes.div_ceil(PAGE);
            let mut read_total = 0u64;
            while !done.load(Ordering::Relaxed) {
                let start = rng.gen_range(0..=pages - scan_pages) * PAGE;
                let mut off = start;
                while off < start + o.scan_bytes && !done.load(Ordering::Relaxed) {
                    let len = (start + o.scan_bytes - off).min(o.scan_read_bytes) as usize;
                    if o.scan_kib_per_get > 0 {
                        // A paced scan waits for the GETs, so every side's
                        // GETs meet the same scan bytes per GET.
                        while read_total + len as u64 > gets_done.load(Ordering::Relaxed) * o.scan_kib_per_get * 1024
                            && !done.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        }
                        if done.load(Ordering::Relaxed) {
                            // The GETs ended while the scan waited: no read
                            // past its pace.
                            break;
                        }
                    }
                    let n = io.scan(&mut buf[..len], off)?;
                    read_total += n as u64;
                    if n == 0 {
                        return Err(format!("scan: EOF at {off}"));
                    }
                    if measuring.load(Ordering::Relaxed) {
                        scanned.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    off += n as u64;
                }
            }
            Ok(())
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (zipf, barrier, span, measuring, gets_done) = (&zipf, &barrier, &span, &measuring, &gets_done);
                s.spawn(move || -> std::result::Result<GetStats, String> {
                    let mut rng = StdRng::seed_from_u64(o.seed.wrapping_add(t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    let mut buf = [0u8; PAGE as usize];
                    let mut st = GetStats { lat_us: Vec::with_capacity(gets_per as usize), ..GetStats::default() };
                    for i in 0..warm_per + gets_per {
                        if i == warm_per {
                            // Every GET thread starts measuring together.
                            if barrier.wait().is_leader() {
                                measuring.store(true, Ordering::Relaxed);
                                if let Ok(mut sp) = span.lock() {
                                    sp.0 = Some(Instant::now());
                                }
                            }
                            barrier.wait();
                        }
                        let page = zipf.sample(&mut rng);
                        let measured = i >= warm_per;
                        if measured {
                            if let Some(hit) = io.cached(page) {
                                st.asked += 1;
                                st.hits += hit as u64;
                            }
                        }
                        let t0 = Instant::now();
                        if io.get(&mut buf, page * PAGE)? != PAGE as usize {
                            return Err(format!("GET: short read at page {page}"));
                        }
                        if measured {
                            st.lat_us.push(t0.elapsed().as_nanos() as f64 / 1000.0);
                        }
                        gets_done.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(mut sp) = span.lock() {
                        // The measured phase ends with the last GET thread.
                        let now = Instant::now();
                        sp.1 = Some(sp.1.map_or(now, |t| t.max(now)));
                    }
                    Ok(st)
                })
            })
            .collect();
        let mut out = Vec::new();
        let mut first_err = None;
        for w in workers {
            match w.join() {
                Ok(Ok(st)) => out.push(st),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some("a GET thread panicked".to_string())),
            }
        }
        done.store(true, Ordering::Relaxed);
        match scanner.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some("the scan thread panicked".to_string())),
        }
        first_err.map_or(Ok(out), Err)
    })?;
    let (t0, t1) = span.into_inner().map_err(|_| "a GET thread panicked".to_string())?;
    let secs = match (t0, t1) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64().max(1e-9),
        _ => return Err("no measured phase".into()),
    };
    let mut lat: Vec<f64> = results.iter().flat_map(|r| r.lat_us.iter().copied()).collect();
    lat.sort_by(f64::total_cmp);
    let (hits, asked) = results.iter().fold((0, 0), |(h, a), r| (h + r.hits, a + r.asked));
    Ok(Side {
        name: name.to_string(),
        get_ops_per_s: lat.len() as f64 / secs,
        get_p50_us: stats::quantile_sorted(&lat, 0.5),
        get_p99_us: stats::quantile_sorted(&lat, 0.99),
        get_hit_ratio: (asked > 0 && asked == lat.len() as u64).then(|| hits as f64 / asked as f64),
        scan_mib_per_s: scanned.load(Ordering::Relaxed) as f64 / MIB as f64 / secs,
        secs,
    })
}

fn kernel_worker(params: &Value) -> std::result::Result<Value, String> {
    let job: Job = serde_json::from_value(params.clone()).map_err(|e| format!("bad getscan job: {e}"))?;
    let open = || std::fs::File::open(&job.path).map_err(|e| format!("open {}: {e}", job.path.display()));
    let (get, scan) = (open()?, open()?);
    for advice in [libc::POSIX_FADV_NOREUSE, libc::POSIX_FADV_SEQUENTIAL] {
        // SAFETY: a valid fd; fadvise only gives advice.
        let r = unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&scan), 0, 0, advice) };
        if r != 0 {
            return Err(format!("posix_fadvise({advice}): {}", std::io::Error::from_raw_os_error(r)));
        }
    }
    let side = run_side("kernel", &KernelIo { get, scan }, &job.opts)?;
    serde_json::to_value(side).map_err(|e| e.to_string())
}

/// The data file, written once, synced and dropped from the host's cache.
fn make_file(path: &Path, len: u64) -> Result<()> {
    let io = |what: &str, e| Error::io(format!("{what} {}", path.display()), e);
    let f = std::fs::File::create(path).map_err(|e| io("create", e))?;
    let chunk = sys::pattern(MIB as usize);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(MIB) as usize;
        f.write_all_at(&chunk[..n], off).map_err(|e| io("write", e))?;
        off += n as u64;
    }
    f.sync_all().map_err(|e| io("fsync", e))?;
    kernel::drop_cached(&f);
    Ok(())
}

fn pcache_side(path: &Path, preset: &Preset, opts: &ExpOpts, o: &GetscanOpts) -> Result<Side> {
    let tunables = variant_tunables(preset, opts)?;
    let cache = PageCache::new(Config { tunables, ..Config::with_memory(o.mem_bytes) })?;
    // Resident before it is measured, as the kernel's page cache is.
    cache.wait_arena_populated(std::time::Duration::from_secs(30));
    let open = || cache.open(path, OpenOptions { create: false, truncate: false, direct: true });
    let (get, scan) = (open()?, open()?);
    scan.fadvise(0, 0, Advice::NoReuse)?;
    scan.fadvise(0, 0, Advice::Sequential)?;
    let io = PcacheIo { get, scan };
    let side = run_side(preset.name, &io, o).map_err(Error::Check)?;
    io.get.close()?;
    io.scan.close()?;
    Ok(side)
}

pub fn run(opts: &ExpOpts, o: &GetscanOpts) -> Result<GetscanResult> {
    let presets = crate::variants::resolve(PRESETS, &o.variants)?;
    let tmp = sys::tempdir_in(o.dir.as_deref(), "pcache-getscan")?;
    let path = tmp.path().join("data");
    make_file(&path, o.file_bytes())?;
    let mut res = GetscanResult {
        experiment: EXPERIMENT,
        mem_bytes: o.mem_bytes,
        file_bytes: o.file_bytes(),
        gets: o.gets,
        warm_gets: o.warm_gets,
        get_threads: o.get_threads,
        zipf_s: o.zipf_s,
        scan_bytes: o.scan_bytes,
        scan_read_bytes: o.scan_read_bytes,
        scan_kib_per_get: o.scan_kib_per_get,
        pcache: Vec::new(),
        kernel: None,
        kernel_note: "not run".into(),
    };
    let drop_host = || -> Result<()> {
        let f = std::fs::File::open(&path).map_err(|e| Error::io("open", e))?;
        kernel::drop_cached(&f);
        Ok(())
    };
    for p in presets {
        drop_host()?;
        res.pcache.push(pcache_side(&path, p, opts, o)?);
    }
    if o.kernel {
        drop_host()?;
        let job = Job { path: path.clone(), opts: o.clone() };
        match kernel::run(EXPERIMENT, o.mem_bytes, &job) {
            Ok(v) => {
                let side: Side = serde_json::from_value(v)
                    .map_err(|e| Error::Invalid(format!("the kernel worker's result: {e}")))?;
                res.kernel = Some(side);
                res.kernel_note = format!("pread(2) in a memory cgroup of {} bytes, a worker process", o.mem_bytes);
            }
            Err(e) => res.kernel_note = format!("not run: {e}"),
        }
    }
    Ok(res)
}

fn fmt_hit(h: Option<f64>) -> String {
    h.map_or("-".into(), |h| format!("{:.1}%", h * 100.0))
}

impl GetscanResult {
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "getscan: Zipf({}) 4 KiB GETs ({} threads) beside a NOREUSE scan ({} ranges in {} reads)\n\
             {} of cache, a file of {}, {} measured GETs after {} unmeasured",
            self.zipf_s,
            self.get_threads,
            crate::render::fmt_size(self.scan_bytes),
            crate::render::fmt_size(self.scan_read_bytes),
            crate::render::fmt_size(self.mem_bytes),
            crate::render::fmt_size(self.file_bytes),
            self.gets,
            self.warm_gets
        );
        if self.scan_kib_per_get > 0 {
            let _ = writeln!(s, "the scan paced: at most {} KiB per GET", self.scan_kib_per_get);
        }
        let _ = writeln!(s, "kernel column: {}", self.kernel_note);
        let _ = writeln!(
            s,
            "{:<14} {:>10} {:>9} {:>9} {:>8} {:>10} {:>12} {:>9}",
            "side", "GET op/s", "p50", "p99", "GET hit", "scan MiB/s", "scan KiB/GET", "x kernel"
        );
        let k = self.kernel.as_ref();
        for side in self.pcache.iter().chain(k) {
            let _ = writeln!(
                s,
                "{:<14} {:>10.0} {:>9} {:>9} {:>8} {:>10.0} {:>12.0} {:>9}",
                side.name,
                side.get_ops_per_s,
                format!("{:.0}us", side.get_p50_us),
                format!("{:.0}us", side.get_p99_us),
                fmt_hit(side.get_hit_ratio),
                side.scan_mib_per_s,
                side.scan_mib_per_s * 1024.0 / side.get_ops_per_s,
                k.map_or("-".into(), |k| format!("{:.2}", side.get_ops_per_s / k.get_ops_per_s)),
            );
        }
        let _ = writeln!(
            s,
            "GET hit: measured GETs whose page was cached when asked; scan KiB/GET: the scan's pressure on the \
             GETs' pages\n(a faster scan evicts more per GET); x kernel: GET op/s over the kernel's"
        );
        s
    }

    /// The verdict screen's line: the plug-in against the kernel.
    pub fn headlines(&self) -> Vec<Headline> {
        let experiment = "A policy chosen for the application: getscan plug-in, Zipf GETs beside a NOREUSE scan".into();
        let claimed = "target: getscan above the kernel in GET op/s and GET hit ratio".to_string();
        let app = self.pcache.iter().find(|s| s.name == APP_POLICY);
        let (reproduced, kernel, verdict, note) = match (app, &self.kernel) {
            (Some(a), Some(k)) => {
                let speed = a.get_ops_per_s / k.get_ops_per_s;
                let figures = format!(
                    "GET {speed:.2}x the kernel's op/s, hit {} against {}",
                    fmt_hit(a.get_hit_ratio),
                    fmt_hit(k.get_hit_ratio)
                );
                let kernel = format!("{} GET op/s, hit {}", fmt_figure(k.get_ops_per_s), fmt_hit(k.get_hit_ratio));
                match (a.get_hit_ratio, k.get_hit_ratio) {
                    _ if cfg!(debug_assertions) => (figures, kernel, Verdict::CannotJudge, "a debug build".into()),
                    (Some(ah), Some(kh)) => {
                        let met = speed > 1.0 && ah > kh;
                        (figures, kernel, if met { Verdict::Met } else { Verdict::Missed }, String::new())
                    }
                    _ => (figures, kernel, Verdict::CannotJudge, "the kernel's hit ratio unknown (cachestat)".into()),
                }
            }
            (Some(a), None) => (
                format!("{} GET op/s, hit {}", fmt_figure(a.get_ops_per_s), fmt_hit(a.get_hit_ratio)),
                self.kernel_note.clone(),
                Verdict::CannotJudge,
                "no kernel column".into(),
            ),
            (None, _) => {
                ("not run".into(), self.kernel_note.clone(), Verdict::CannotJudge, "the getscan variant not run".into())
            }
        };
        vec![Headline { experiment, claimed, reproduced, kernel, verdict, note }]
    }
}

pub struct Getscan;

impl Experiment for Getscan {
    fn name(&self) -> &'static str {
        EXPERIMENT
    }
    fn about(&self) -> &'static str {
        "Zipf(0.99) 4 KiB point reads (GETs) beside a long sequential scan read through a POSIX_FADV_NOREUSE \
         handle, as cache_ext's GET-SCAN: pcache's lists, the multi-gen LRU and the getscan plug-in against the \
         kernel's page cache in a memory cgroup of the same size; GET op/s, p99, hit ratio and scan MiB/s."
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn params(&self) -> &'static [ParamDoc] {
        GetscanOpts::PARAMS
    }
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        Some(kernel_worker)
    }
    fn smoke(&self) -> ExpOpts {
        ExpOpts::smoke(&[("gets", "400"), ("warm_gets", "200"), ("scan_bytes", "1M")])
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        GetscanOpts::from_exp(opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let o = GetscanOpts::from_exp(opts)?;
        let result = run(opts, &o)?;
        Ok(Outcome::new(result.report(), &result)?.with_headlines(result.headlines()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the options are checked: a scan longer than the file, a file
    // smaller than twice the cache and unknown variants are refused.
    #[test]
    fn options_checked() {
        let ok = [ExpOpts::smoke(&[]), ExpOpts { variants: Some(vec!["getscan".into()]), ..ExpOpts::smoke(&[]) }];
        let bad = [
            ExpOpts::smoke(&[("scan_bytes", "1G")]),
            ExpOpts::smoke(&[("file_ratio", "1")]),
            ExpOpts { variants: Some(vec!["nosuch".into()]), ..ExpOpts::smoke(&[]) },
        ];
        crate::experiment::assert_checked(&ok, &bad, |o| Getscan.check(o));
    }

    // Goal: a paced scan reads no more than its pace per GET done, on a
    // side whose scan could go much faster, and every
    // measured GET is asked whether it hit.
    #[test]
    fn paced_scan_keeps_its_pace() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("data");
        let o = GetscanOpts {
            mem_bytes: 4 * MIB,
            file_ratio: 2,
            gets: 2000,
            warm_gets: 0,
            scan_bytes: MIB,
            scan_read_bytes: 16 << 10,
            scan_kib_per_get: 8,
            ..GetscanOpts::defaults(true)
        };
        make_file(&path, o.file_bytes()).unwrap();
        let preset = PRESETS.iter().find(|p| p.name == APP_POLICY).unwrap();
        let side = pcache_side(&path, preset, &ExpOpts::smoke(&[]), &o).unwrap();
        let scanned_kib = side.scan_mib_per_s * side.secs * 1024.0;
        let gets = side.get_ops_per_s * side.secs;
        assert!((gets - 2000.0).abs() < 1.0, "{gets} GETs measured");
        // At most the pace: figures in f64 from rates, so a hair of slack.
        assert!(scanned_kib <= 8.0 * gets + 0.01, "{scanned_kib} KiB scanned for {gets} GETs");
        assert!(scanned_kib > 0.0, "nothing scanned");
        assert!(side.get_hit_ratio.is_some_and(|h| (0.0..=1.0).contains(&h)), "{:?}", side.get_hit_ratio);
    }
}

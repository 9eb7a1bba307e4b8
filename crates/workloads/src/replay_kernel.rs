//! The kernel column of `pcache replay`: the same trace through the host
//! kernel's page cache, in a memory cgroup sized to the same cache.
//!
//! For each cache size a fresh file of the trace's pages (fresh, so no
//! shadow entry of an earlier size is left in its tree) and a calibration
//! file, cold, and [`kernel_workload`] in a child in a fresh memory cgroup.
//! The child first loads the access list so that its own memory is charged,
//! then calibrates the limit, because the group is also charged for what is
//! not the file's pages (per-CPU charge caches of up to 64 pages, tree
//! nodes, the child's allocations): it reads the calibration file through,
//! takes the most of its pages resident at once, and moves the limit by the
//! difference to the nominal size, until within 1% or 6 rounds. Then it
//! replays with `POSIX_FADV_RANDOM` (a miss reads one page), asking
//! cachestat(2) (or mincore(2)) before each pread whether the page is cached;
//! the most pages resident at once is the effective cache (pcache's
//! `usable`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kernel;
use crate::sys::kernel_release;
use crate::sys::Mmap;

pub const KERNEL: &str = "kernel";

/// On this side so that this module needs nothing of replay's.
pub const EXPERIMENT: &str = "replay";
pub const PAGE: u64 = 4096;

const CALIBRATION_ROUNDS: u32 = 6;

/// What the child is told (the accesses as a file of little-endian u64s,
/// not on the command line).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Params {
    file: PathBuf,
    file_pages: u64,
    calib: PathBuf,
    calib_pages: u64,
    accesses: PathBuf,
    cache_pages: u64,
    /// Always true (see [`kernel::worker_main`]).
    pin_cpu: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelRun {
    pub cache_pages: u64,
    pub requests: u64,
    pub misses: u64,
    pub hits: u64,
    /// Accesses whose residency could not be told (counted as neither).
    pub unknown: u64,
    /// "cachestat" or "mincore".
    pub method: String,
    /// The most trace pages resident at once (sampled).
    pub effective_pages: u64,
    /// The most calibration pages resident at once in the last round.
    pub calibrated_pages: u64,
    pub calibration_rounds: u32,
    /// The group's charge before any file page was read.
    pub baseline_bytes: u64,
    pub limit_bytes: u64,
    pub workingset_refault: Option<u64>,
    pub workingset_activate: Option<u64>,
    pub replay_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelColumn {
    pub release: String,
    pub dir: PathBuf,
    pub runs: Vec<KernelRun>,
}

/// Replay `accesses` through the kernel at each of `sizes`, files in a
/// temporary directory in `dir`. `worker` makes the child's command (None:
/// this executable, which must be `pcache`). Err says why not.
pub fn run(
    accesses: &[u64],
    sizes: &[u64],
    dir: Option<&Path>,
    worker: Option<&dyn Fn() -> Command>,
) -> Result<KernelColumn, String> {
    // Find out whether it can work before writing any file.
    if worker.is_none() {
        kernel::worker_exe()?;
    }
    drop(kernel::Memcg::create(1 << 30)?);
    let tmp = crate::sys::tempdir_in(dir, "pcache-replay-kernel-").map_err(|e| e.to_string())?;
    if crate::sys::is_tmpfs(tmp.path()) {
        return Err(format!(
            "{} is on tmpfs, whose pages the kernel cannot reclaim without swap; give a directory on a disk",
            tmp.path().display()
        ));
    }
    let file_pages = accesses.iter().copied().max().unwrap_or(0) + 1;
    let mut bytes = Vec::with_capacity(accesses.len() * 8);
    for &a in accesses {
        bytes.extend_from_slice(&a.to_le_bytes());
    }
    let accesses = tmp.path().join("accesses.u64");
    std::fs::write(&accesses, &bytes).map_err(|e| format!("writing {}: {e}", accesses.display()))?;
    drop(bytes);
    let mut runs = Vec::new();
    for &cache_pages in sizes {
        let file = tmp.path().join(format!("trace-{cache_pages}"));
        let calib = tmp.path().join(format!("calib-{cache_pages}"));
        let calib_pages = 2 * cache_pages + 256;
        for (path, pages) in [(&file, file_pages), (&calib, calib_pages)] {
            crate::sys::write_numbered_pages(path, pages, || ())
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        let params = Params {
            file: file.clone(),
            file_pages,
            calib: calib.clone(),
            calib_pages,
            accesses: accesses.clone(),
            cache_pages,
            pin_cpu: true,
        };
        // The child sets its own limit; this one only bounds it until then.
        let start_limit = cache_pages * PAGE + (256 << 20);
        let v = match worker {
            Some(make) => kernel::run_with(make(), EXPERIMENT, start_limit, &params)?,
            None => kernel::run(EXPERIMENT, start_limit, &params)?,
        };
        let r: KernelRun = serde_json::from_value(v).map_err(|e| format!("the kernel worker's result: {e}"))?;
        runs.push(r);
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_file(&calib);
    }
    Ok(KernelColumn { release: kernel_release(), dir: tmp.path().to_path_buf(), runs })
}

/// Tells which pages of a file are cached: cachestat, or mincore on a
/// read-only shared mapping (never touched, so nothing is faulted in).
struct Residency {
    file: File,
    pages: u64,
    map: Option<Mmap>,
    /// mincore's output for the whole file, allocated up front.
    vec: Vec<u8>,
}

impl Residency {
    fn open(path: &Path, pages: u64) -> Result<Residency, String> {
        let file = File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        // Readahead off: a miss reads one order-0 page, as replay's model
        // wants (and as calibration needs to count in pages).
        // SAFETY: a valid descriptor; fadvise only gives advice.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let mut r = Residency { file, pages, map: None, vec: Vec::new() };
        if kernel::cached_pages(&r.file, 0, PAGE).is_none() {
            // Read-only and never touched: only passed to mincore.
            let map = Mmap::new((pages * PAGE) as usize, libc::PROT_READ, libc::MAP_SHARED, r.file.as_raw_fd())
                .map_err(|e| format!("mapping {}: {e}", path.display()))?;
            r.map = Some(map);
            r.vec = vec![0u8; pages as usize];
        }
        Ok(r)
    }

    fn method(&self) -> &'static str {
        if self.map.is_some() {
            "mincore"
        } else {
            "cachestat"
        }
    }

    /// Pages cached among the file's `n` pages from page `first`.
    fn cached_in(&mut self, first: u64, n: u64) -> Option<u64> {
        let Some(map) = &self.map else { return kernel::cached_pages(&self.file, first * PAGE, n * PAGE) };
        // SAFETY: the range lies inside the mapping (callers ask within the
        // file's pages); vec has a byte per page.
        let r = unsafe {
            libc::mincore(
                map.as_ptr().add((first * PAGE) as usize).cast(),
                (n * PAGE) as usize,
                self.vec.as_mut_ptr().add(first as usize),
            )
        };
        let resident = &self.vec[first as usize..(first + n) as usize];
        (r == 0).then(|| resident.iter().filter(|&&b| b & 1 == 1).count() as u64)
    }

    /// Whether page `index` is cached.
    fn cached(&mut self, index: u64) -> Option<bool> {
        self.cached_in(index, 1).map(|n| n > 0)
    }

    /// Pages of the file cached.
    fn count(&mut self) -> Option<u64> {
        self.cached_in(0, self.pages)
    }

    fn drop_cached(&self) {
        kernel::drop_cached(&self.file);
    }
}

/// Read page `index` of `f` into `buf` and check it is that page.
fn read_page(f: &File, index: u64, buf: &mut [u8]) -> Result<(), String> {
    let n = f.read_at(buf, index * PAGE).map_err(|e| format!("pread of page {index}: {e}"))?;
    if n != buf.len() || buf[..8] != index.to_le_bytes() {
        return Err(format!("page {index}: read {n} bytes of another page"));
    }
    Ok(())
}

/// Read every page of `r`'s file once, in order, and return the most
/// pages resident at once (sampled every `step` reads and at the end).
fn fill(r: &mut Residency, step: u64, buf: &mut [u8]) -> Result<u64, String> {
    let mut most = 0;
    for index in 0..r.pages {
        read_page(&r.file, index, buf)?;
        if index.is_multiple_of(step) || index + 1 == r.pages {
            most = most.max(r.count().ok_or("cannot count cached pages")?);
        }
    }
    Ok(most)
}

/// The trace's page indices from `p.accesses` (little-endian u64s), each
/// checked against the file, and the list's own pages dropped from the
/// cache.
fn read_accesses(p: &Params) -> Result<Vec<u64>, String> {
    let raw = std::fs::read(&p.accesses).map_err(|e| format!("reading {}: {e}", p.accesses.display()))?;
    if !raw.len().is_multiple_of(8) {
        return Err(format!("{}: not a list of u64", p.accesses.display()));
    }
    let accesses: Vec<u64> = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
    drop(raw);
    if let Some(&bad) = accesses.iter().find(|&&a| a >= p.file_pages) {
        return Err(format!("page {bad} is beyond the file's {} pages", p.file_pages));
    }
    if let Ok(f) = File::open(&p.accesses) {
        kernel::drop_cached(&f);
    }
    Ok(accesses)
}

/// Find the group limit at which `calib`, read through, keeps
/// `cache_pages` cached (within 1%): the limit, the pages it kept, and the
/// rounds it took. Leaves `calib` dropped from the cache.
fn calibrate(
    cg: &Path,
    calib: &mut Residency,
    cache_pages: u64,
    baseline: u64,
    step: u64,
    buf: &mut [u8],
) -> Result<(u64, u64, u32), String> {
    let tolerance = (cache_pages / 100).max(2);
    let mut limit = baseline + cache_pages * PAGE;
    let (mut calibrated, mut rounds) = (0, 0);
    while rounds < CALIBRATION_ROUNDS {
        calib.drop_cached();
        kernel::set_memcg_limit(cg, limit)?;
        calibrated = fill(calib, step, buf)?;
        rounds += 1;
        if calibrated.abs_diff(cache_pages) <= tolerance {
            break;
        }
        // Drop first, so the new limit is never below what is charged.
        calib.drop_cached();
        // The baseline may sit below the limit: it includes charges cached
        // per CPU (up to 64 pages) that the file's pages then use.
        limit = (limit as i64 + (cache_pages as i64 - calibrated as i64) * PAGE as i64).max(PAGE as i64) as u64;
    }
    calib.drop_cached();
    Ok((limit, calibrated, rounds))
}

/// The child's side (run by `kernel::run` in the memory cgroup): see the
/// module comment.
pub fn kernel_workload(params: &Value) -> Result<Value, String> {
    let p: Params = serde_json::from_value(params.clone()).map_err(|e| format!("bad parameters: {e}"))?;
    if p.cache_pages == 0 || p.file_pages == 0 || p.calib_pages == 0 {
        return Err("bad parameters: empty cache or files".into());
    }
    let cg = kernel::current_memcg().ok_or("the worker is not in a memory cgroup")?;
    // 1. Everything the child needs, allocated before measuring.
    let accesses = read_accesses(&p)?;
    let mut trace = Residency::open(&p.file, p.file_pages)?;
    let mut calib = Residency::open(&p.calib, p.calib_pages)?;
    trace.drop_cached();
    calib.drop_cached();
    let mut buf = vec![0u8; PAGE as usize];
    let step = (p.cache_pages / 128).max(1);
    let baseline = kernel::memcg_usage(cg)?;

    // 2. Calibrate the limit on the other file.
    let (limit, calibrated, rounds) = calibrate(cg, &mut calib, p.cache_pages, baseline, step, &mut buf)?;
    drop(calib);

    // 3. Replay.
    trace.drop_cached();
    let stat = |k: &str| kernel::memcg_stat(cg, k);
    let (refault0, activate0) = (stat("workingset_refault_file"), stat("workingset_activate_file"));
    let (mut hits, mut misses, mut unknown, mut effective) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    for (i, &page) in accesses.iter().enumerate() {
        match trace.cached(page) {
            Some(true) => hits += 1,
            Some(false) => misses += 1,
            None => unknown += 1,
        }
        read_page(&trace.file, page, &mut buf)?;
        if (i as u64).is_multiple_of(step) {
            effective = effective.max(trace.count().unwrap_or(0));
        }
    }
    let replay_s = start.elapsed().as_secs_f64();
    effective = effective.max(trace.count().unwrap_or(0));
    let delta = |after: Option<u64>, before: Option<u64>| Some(after?.saturating_sub(before?));
    let run = KernelRun {
        cache_pages: p.cache_pages,
        requests: accesses.len() as u64,
        misses,
        hits,
        unknown,
        method: trace.method().into(),
        effective_pages: effective,
        calibrated_pages: calibrated,
        calibration_rounds: rounds,
        baseline_bytes: baseline,
        limit_bytes: limit,
        workingset_refault: delta(stat("workingset_refault_file"), refault0),
        workingset_activate: delta(stat("workingset_activate_file"), activate0),
        replay_s,
    };
    serde_json::to_value(&run).map_err(|e| format!("kernel result: {e}"))
}

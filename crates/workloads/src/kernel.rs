//! The kernel column: the same workload through the kernel's own page
//! cache (buffered I/O), in a memory cgroup limited to the same memory as
//! pcache's arena, so the two can be set side by side.
//!
//! The workload runs in a child process (this executable, hidden
//! subcommand `__kernel-worker`) that joins a fresh memory cgroup: the
//! benchmark process must stay outside, or pcache's arena would be charged
//! to the limit. Each experiment names its kernel workload in its registry
//! entry; this module names none, so that there is no import cycle. Where
//! the column cannot be had (not root, no memory cgroup, not the `pcache`
//! binary) [`run`] says why and the experiment goes on without it.
//!
//! The child's own memory is charged to the group too, so a workload that
//! must size its cache exactly (replay) moves the limit itself
//! ([`current_memcg`], [`memcg_usage`], [`set_memcg_limit`]).

use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use serde_json::Value;

pub type Workload = fn(&Value) -> Result<Value, String>;

pub const WORKER_SUBCOMMAND: &str = "__kernel-worker";

/// A memory cgroup made for one run, removed on drop.
pub struct Memcg {
    path: PathBuf,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Memcg {
    pub fn create(bytes: u64) -> Result<Memcg, String> {
        let name = format!("pcache-kernel-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let (dir, limit_file) = if v2.exists() && fs::read_to_string(v2).is_ok_and(|c| c.contains("memory")) {
            (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
        } else if Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
            (Path::new("/sys/fs/cgroup/memory").join(&name), "memory.limit_in_bytes")
        } else {
            return Err("no memory cgroup controller is mounted".into());
        };
        fs::create_dir(&dir).map_err(|e| format!("cannot create a memory cgroup at {}: {e}", dir.display()))?;
        let memcg = Memcg { path: dir };
        fs::write(memcg.path.join(limit_file), bytes.to_string())
            .map_err(|e| format!("cannot set {limit_file} of {}: {e}", memcg.path.display()))?;
        Ok(memcg)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        // The child has exited; pages it left are charged to the group, so
        // empty it (v1) before removing it. Errors only leave a stale group.
        let _ = fs::write(self.path.join("memory.force_empty"), "0");
        let _ = fs::remove_dir(&self.path);
    }
}

static JOINED: OnceLock<PathBuf> = OnceLock::new();

pub fn join(path: &Path) -> Result<(), String> {
    fs::write(path.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("cannot join {}: {e}", path.display()))?;
    let _ = JOINED.set(path.to_path_buf());
    Ok(())
}

fn pin_to_this_cpu() -> Result<(), String> {
    // SAFETY: sched_getcpu has no preconditions; the cpu_set_t is zeroed
    // and filled with CPU_SET before sched_setaffinity reads it.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return Err(format!("sched_getcpu: {}", std::io::Error::last_os_error()));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

pub fn current_memcg() -> Option<&'static Path> {
    JOINED.get().map(PathBuf::as_path)
}

fn is_v2(path: &Path) -> bool {
    path.join("memory.max").exists()
}

/// Bytes charged, including the charges cached per CPU that no page uses
/// yet: an upper bound of what is in use.
pub fn memcg_usage(path: &Path) -> Result<u64, String> {
    let file = path.join(if is_v2(path) { "memory.current" } else { "memory.usage_in_bytes" });
    let s = fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    s.trim().parse().map_err(|_| format!("{}: {:?} is not a number", file.display(), s.trim()))
}

/// The kernel reclaims down to a lower limit before it returns.
pub fn set_memcg_limit(path: &Path, bytes: u64) -> Result<(), String> {
    let file = path.join(if is_v2(path) { "memory.max" } else { "memory.limit_in_bytes" });
    fs::write(&file, bytes.to_string()).map_err(|e| format!("writing {bytes} to {}: {e}", file.display()))
}

pub fn memcg_stat(path: &Path, key: &str) -> Option<u64> {
    let s = fs::read_to_string(path.join("memory.stat")).ok()?;
    s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Numbers from a worker's JSON, non-numbers as NaN.
pub fn samples(v: &Value) -> Vec<f64> {
    v.as_array().map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect()).unwrap_or_default()
}

/// `experiment`'s kernel workload in a child in a memory cgroup of
/// `mem_bytes`: its JSON, or why the column cannot be had here.
pub fn run(experiment: &str, mem_bytes: u64, params: &impl serde::Serialize) -> Result<Value, String> {
    run_with(Command::new(worker_exe()?), experiment, mem_bytes, params)
}

/// A worker never starts another.
const IN_WORKER_ENV: &str = "PCACHE_KERNEL_WORKER";

pub fn worker_exe() -> Result<PathBuf, String> {
    if std::env::var_os(IN_WORKER_ENV).is_some() {
        return Err("a kernel worker does not start another".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    // A binary rebuilt while it runs shows as "pcache (deleted)"; copies
    // may be renamed `pcache-NAME`. A cargo test binary (`pcache-HASH`,
    // `pcache_workloads-HASH`) has no worker subcommand: its harness would
    // take the worker's arguments as test filters and run the tests again.
    let name = exe.file_name().and_then(|s| s.to_str()).unwrap_or("");
    if !name.starts_with("pcache") || is_test_binary(name) {
        return Err("the kernel column runs only from the pcache binary".into());
    }
    Ok(exe)
}

/// Cargo's name for a test binary: `NAME-` and 16 hex digits.
fn is_test_binary(name: &str) -> bool {
    name.rsplit_once('-').is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// [`run`] with another worker program, which gets `__kernel-worker
/// EXPERIMENT CGROUP PARAMS`, calls [`worker_main`] and prints its JSON on a
/// line of its own (a test binary does, among its harness's lines).
pub fn run_with(
    mut program: Command,
    experiment: &str,
    mem_bytes: u64,
    params: &impl serde::Serialize,
) -> Result<Value, String> {
    let params = serde_json::to_string(params).map_err(|e| format!("the kernel worker's parameters: {e}"))?;
    let memcg = Memcg::create(mem_bytes)?;
    let mut child = program
        .env(IN_WORKER_ENV, "1")
        .arg(WORKER_SUBCOMMAND)
        .arg(experiment)
        .arg(memcg.path())
        .arg(params)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the kernel worker: {e}"))?;
    let mut out = String::new();
    if let Some(mut so) = child.stdout.take() {
        so.read_to_string(&mut out).map_err(|e| format!("reading the kernel worker: {e}"))?;
    }
    let status = child.wait().map_err(|e| format!("waiting for the kernel worker: {e}"))?;
    if !status.success() {
        return Err(format!("the kernel worker failed ({status})"));
    }
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or(out.trim());
    serde_json::from_str(line).map_err(|e| format!("the kernel worker's output is not JSON: {e}"))
}

/// The child's side. `"pin_cpu": true` pins the worker to its CPU before it
/// joins: the kernel keeps up to 64 pages of charge cached per CPU and
/// group, and a worker that moved between CPUs would leave some behind,
/// charged but unusable, shrinking its cache for a while.
pub fn worker_main(workload: Workload, cgroup: &Path, params: &str) -> Result<Value, String> {
    let params: Value = serde_json::from_str(params).map_err(|e| format!("bad worker parameters: {e}"))?;
    if params.get("pin_cpu").and_then(Value::as_bool) == Some(true) {
        pin_to_this_cpu()?;
    }
    join(cgroup)?;
    workload(&params)
}

/// POSIX_FADV_DONTNEED, so a run starts cold.
pub fn drop_cached(file: &fs::File) {
    // SAFETY: a valid fd; fadvise only gives advice.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[repr(C)]
#[derive(Default)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

const SYS_CACHESTAT: libc::c_long = 451;

/// Whether the page holding byte `offset` is in the kernel's page cache,
/// asked without touching it; None if the kernel cannot say.
pub fn page_cached(file: &fs::File, offset: u64, page_size: u64) -> Option<bool> {
    cached_pages(file, offset - offset % page_size, page_size).map(|n| n > 0)
}

/// Pages cached within `len` bytes from `offset` (cachestat, Linux 6.5+).
pub fn cached_pages(file: &fs::File, offset: u64, len: u64) -> Option<u64> {
    let range = CachestatRange { off: offset, len };
    let mut cs = Cachestat::default();
    // SAFETY: both structs are repr(C) as the syscall expects and live
    // across the call.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range, &mut cs, 0u32) };
    (r == 0).then_some(cs.nr_cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    // Goal: a test binary (whose harness would read a worker's arguments
    // as test filters and run the tests again, each starting workers) and
    // a worker never start a kernel worker.
    #[test]
    fn test_binaries_start_no_worker() {
        assert!(is_test_binary("pcache_workloads-ac57c75be6d678ad"));
        assert!(is_test_binary("pcache-0123456789abcdef"));
        assert!(!is_test_binary("pcache"));
        assert!(!is_test_binary("pcache-end"));
        assert!(!is_test_binary("pcache (deleted)"));
        // This very process is a test binary: no worker from here.
        assert!(worker_exe().is_err());
    }

    // Goal: cachestat tells a page that was just written (cached) from one
    // whose cache was dropped after being synced.
    #[test]
    fn page_cached_sees_the_kernel_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = fs::File::create(&path).unwrap();
        f.write_all(&vec![1u8; 8192]).unwrap();
        let Some(cached) = page_cached(&f, 0, 4096) else { return };
        assert!(cached);
        f.sync_all().unwrap();
        drop_cached(&f);
        assert_eq!(page_cached(&f, 4096, 4096), Some(false));
    }
}

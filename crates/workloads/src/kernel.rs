//! The kernel column: the same workload through the kernel's own page
//! cache (buffered I/O), in a memory cgroup limited to the same memory as
//! pcache's arena, so the two can be set side by side.
//!
//! The workload runs in a child process (this executable, hidden
//! subcommand `__kernel-worker`) that first joins a fresh memory cgroup: the
//! benchmark process itself must stay outside, or pcache's arena would be
//! charged to the limit. The child prints one JSON object on stdout. Each
//! experiment registers its kernel workload in [`WORKLOADS`].
//!
//! Where this is not possible (not root, no writable memory cgroup, not
//! running from the `pcache` binary) [`run`] says why, and the experiment
//! goes on without the column.
//!
//! [`page_cached`] tells whether a page of a file is in the kernel's page
//! cache without disturbing its LRU (cachestat(2), falling back to
//! mincore(2) on a mapping), for hit ratios measured the way pcache counts
//! them.

use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// A kernel workload: parameters in, results out.
pub type Workload = fn(&Value) -> Result<Value, String>;

/// The kernel workloads of the experiments, by experiment name.
pub static WORKLOADS: &[(&str, Workload)] = &[
    (crate::dd::EXPERIMENT, crate::dd::kernel_workload),
    (crate::sparsetruncate::EXPERIMENT, crate::sparsetruncate::kernel_workload),
    (crate::lru_contention::EXPERIMENT, crate::lru_contention::kernel_workload),
    (crate::small_file_server::EXPERIMENT, crate::small_file_server::kernel_workload),
    (crate::reclaim_writeback::EXPERIMENT, crate::reclaim_writeback::kernel_workload),
];

/// The hidden subcommand the child runs.
pub const WORKER_SUBCOMMAND: &str = "__kernel-worker";

/// A memory cgroup made for one run, removed on drop.
pub struct Memcg {
    path: PathBuf,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Memcg {
    /// Make a memory cgroup limited to `bytes` (v2 `memory.max` or v1
    /// `memory.limit_in_bytes`).
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

/// Join the memory cgroup at `path` (called in the child).
pub fn join(path: &Path) -> Result<(), String> {
    fs::write(path.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("cannot join {}: {e}", path.display()))
}

/// Run `experiment`'s kernel workload with `params` in a child process
/// inside a memory cgroup of `mem_bytes`. Returns its JSON result, or why
/// the kernel column cannot be had here.
pub fn run(experiment: &str, mem_bytes: u64, params: &Value) -> Result<Value, String> {
    if !WORKLOADS.iter().any(|(name, _)| *name == experiment) {
        return Err(format!("{experiment} has no kernel workload yet"));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    // A binary rebuilt while it runs shows as "pcache (deleted)".
    if !exe.file_name().and_then(|s| s.to_str()).is_some_and(|n| n.starts_with("pcache")) {
        return Err("the kernel column runs only from the pcache binary".into());
    }
    let memcg = Memcg::create(mem_bytes)?;
    let mut child = Command::new(exe)
        .arg(WORKER_SUBCOMMAND)
        .arg(experiment)
        .arg(memcg.path())
        .arg(params.to_string())
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
    serde_json::from_str(out.trim()).map_err(|e| format!("the kernel worker's output is not JSON: {e}"))
}

/// The child's side: join the cgroup, run the workload, return its JSON.
pub fn worker_main(experiment: &str, cgroup: &Path, params: &str) -> Result<Value, String> {
    join(cgroup)?;
    let params: Value = serde_json::from_str(params).map_err(|e| format!("bad worker parameters: {e}"))?;
    let (_, workload) = WORKLOADS
        .iter()
        .find(|(name, _)| *name == experiment)
        .ok_or_else(|| format!("no kernel workload for {experiment}"))?;
    workload(&params)
}

/// Drop the kernel's cached pages of a file (POSIX_FADV_DONTNEED), so a run
/// starts cold.
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

/// Whether the page of `file` holding byte `offset` is in the kernel's
/// page cache, asked without touching it (cachestat, Linux 6.5+). None if
/// the kernel cannot say.
pub fn page_cached(file: &fs::File, offset: u64, page_size: u64) -> Option<bool> {
    let range = CachestatRange { off: offset - offset % page_size, len: page_size };
    let mut cs = Cachestat::default();
    // SAFETY: both structs are repr(C) as the syscall expects and live
    // across the call.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range, &mut cs, 0u32) };
    (r == 0).then_some(cs.nr_cache > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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

//! Facts about the machine a run happened on, and the sequential reads and
//! writes of a pcache file, shared by the experiments.

use std::path::Path;

use crate::{Error, Result};

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The 1-minute load average, from /proc/loadavg (NaN if unreadable).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

pub fn load_note(before: f64, after: f64) -> String {
    let cpus = cpus();
    format!(
        "1-minute load average {before:.2} at the start, {after:.2} at the end, on {cpus} CPUs{}",
        if before.max(after) > cpus as f64 * 0.75 {
            ": other work shared the CPUs, so wall times carry its preemptions"
        } else {
            ""
        }
    )
}

pub fn tempdir_in(dir: Option<&Path>, prefix: &str) -> Result<tempfile::TempDir> {
    match dir {
        Some(d) => tempfile::Builder::new().prefix(prefix).tempdir_in(d),
        None => tempfile::Builder::new().prefix(prefix).tempdir(),
    }
    .map_err(|e| Error::io("creating a temporary directory", e))
}

/// Whether `path` is on tmpfs, whose pages the kernel cannot reclaim
/// without swap (a limited memory cgroup would kill its user instead).
pub fn is_tmpfs(path: &Path) -> bool {
    fs_magic(path) == Some(0x0102_1994)
}

/// The statfs(2) magic of the file system `path` is on.
pub fn fs_magic(path: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `struct statfs` is plain old data, all zeroes valid; `c` is
    // NUL-terminated and `st` writable.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_type as i64)
}

/// This thread's CPU time, seconds (NaN if unknown): unlike the wall clock
/// it stops while the thread is preempted by other load on the machine,
/// which on a shared machine makes most of the wall-time tail.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// `len` non-zero bytes to write (a zero page could hide a read of a
/// hole).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251 + 1) as u8).collect()
}

/// The positioned reads and writes a workload body needs, from pcache's
/// file or the kernel's, so that one body serves both columns.
pub trait FileIo {
    fn write_at(&self, buf: &[u8], off: u64) -> Result<usize>;
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize>;
}

impl FileIo for pcache::File {
    fn write_at(&self, buf: &[u8], off: u64) -> Result<usize> {
        Ok(pcache::File::write_at(self, buf, off)?)
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        Ok(pcache::File::read_at(self, buf, off)?)
    }
}

impl FileIo for std::fs::File {
    fn write_at(&self, buf: &[u8], off: u64) -> Result<usize> {
        std::os::unix::fs::FileExt::write_at(self, buf, off).map_err(|e| Error::io(format!("pwrite at {off}"), e))
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, off).map_err(|e| Error::io(format!("pread at {off}"), e))
    }
}

/// `len` bytes from offset 0 in `chunk`-byte writes of `buf`'s start.
pub fn write_seq(f: &impl FileIo, len: u64, chunk: u64, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off) as usize;
        let done = f.write_at(&buf[..n], off)?;
        if done != n {
            return Err(Error::Check(format!("wrote {done} of {n} bytes at {off}")));
        }
        off += n as u64;
    }
    Ok(())
}

pub fn read_seq(f: &impl FileIo, len: u64, chunk: u64, buf: &mut [u8]) -> Result<()> {
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off) as usize;
        let got = f.read_at(&mut buf[..n], off)?;
        if got != n {
            return Err(Error::Check(format!("read {got} of {n} bytes at {off}")));
        }
        off += n as u64;
    }
    Ok(())
}

/// syncfs(2) of the file system `dir` is on.
pub fn syncfs(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    // SAFETY: a valid fd of an open file; syncfs only flushes.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(Error::io(format!("syncfs {}", dir.display()), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A new file of `pages` 4 KiB pages, each starting with its index (so a
/// read can be checked cheaply) over [`pattern`], written a MiB at a time
/// (`each_mib` after each), synced and dropped from the kernel's cache.
pub fn write_numbered_pages(path: &Path, pages: u64, mut each_mib: impl FnMut()) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    const CHUNK: u64 = 256;
    let f = std::fs::File::create(path)?;
    let mut buf = pattern((CHUNK * PAGE) as usize);
    for first in (0..pages).step_by(CHUNK as usize) {
        let n = CHUNK.min(pages - first);
        for (k, page) in buf.chunks_mut(PAGE as usize).take(n as usize).enumerate() {
            page[..8].copy_from_slice(&(first + k as u64).to_le_bytes());
        }
        f.write_all_at(&buf[..(n * PAGE) as usize], first * PAGE)?;
        each_mib();
    }
    f.sync_all()?;
    crate::kernel::drop_cached(&f);
    Ok(())
}

/// Where an experiment's files live. The seeds ran on tmpfs and on disk
/// file systems; here a memory-only file stands for the one, a host file
/// written back with O_DIRECT for the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Backend {
    /// A memory-only file (`PageCache::open_memory`): the tmpfs case.
    Tmpfs,
    /// A host file in the temporary directory (`PageCache::open`).
    File,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tmpfs => "tmpfs",
            Backend::File => "file",
        }
    }
}

/// A page-aligned (4 KiB) byte buffer, for O_DIRECT reads and page copies.
pub struct Aligned {
    v: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        const PAGE: usize = 4096;
        let v = vec![0u8; len + PAGE];
        let start = v.as_ptr().align_offset(PAGE);
        Aligned { v, start, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.v[self.start..self.start + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.start..self.start + self.len]
    }
}

/// A mapping mmap(2) made at an address the kernel picked, unmapped on drop.
pub struct Mmap {
    ptr: *mut u8,
    size: usize,
}

impl Mmap {
    /// `size` bytes of `fd` (-1 with `MAP_ANONYMOUS`) from offset 0.
    pub fn new(size: usize, prot: i32, flags: i32, fd: i32) -> std::io::Result<Mmap> {
        // SAFETY: a fresh mapping at an address the kernel picks; no
        // existing memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), size, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mmap { ptr: p.cast(), size })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Copy `data` to `off` (the mapping must be writable).
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.size, "write past the mapping");
        // SAFETY: in bounds (checked); a file mapping's file is at least
        // `size` long.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }

    pub fn load_u64(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.size, "read past the mapping");
        // SAFETY: in bounds (checked), as for write.
        unsafe { std::ptr::read_unaligned(self.ptr.add(off).cast::<u64>()) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, unmapped once; nothing borrows
        // its memory past `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.size) };
    }
}

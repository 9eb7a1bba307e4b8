//! Backing devices: where pages come from and go to.
//!
//! Architecture invariant: the engine does no I/O except through
//! [`BackingDev`]. Every transfer is of whole pages at page-aligned file
//! offsets into page-aligned frames, so a device may use O_DIRECT.

use std::io;
use std::sync::Arc;

mod fault;
mod fdcache;
mod file;
mod memory;
mod ratelimit;

pub use fault::{Fault, FaultInjector, FaultOp, SpaceLimit};
pub use fdcache::{default_max_open_fds, CachedFd, FdCache, MIN_OPEN_FDS};
pub use file::{host_queue_limits, FileDev, Opener};
pub use memory::MemoryDev;
pub use ratelimit::{parse_latency, parse_rate, IoStat, RateLimit, RateLimitedDev, RateSpec};

/// A device's request-queue limits (the block layer's `queue_limits`, as
/// `/sys/block/DEV/queue/` shows them): its readahead window and the
/// largest request it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// `read_ahead_kb`: the window the kernel's readahead uses on it.
    pub read_ahead_kb: u64,
    /// `max_sectors_kb`: the largest request, which bounds a large read's
    /// window (the bdi's `io_pages`).
    pub max_sectors_kb: u64,
}

/// The direction of an asynchronous transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDir {
    Read,
    Write,
}

/// What an asynchronous engine (bio.rs's io_uring) needs to move a run of
/// pages itself, with `preadv`/`pwritev` semantics on a descriptor: the
/// descriptor, open until the transfer completes, and whatever else the
/// device needs held that long (a lock keeping the file's length still).
pub struct AsyncIo {
    pub fd: Arc<CachedFd>,
    /// Dropped when the transfer completes, before the engine calls the
    /// device again (a synchronous fix-up may need what it holds).
    pub hold: Option<Box<dyn Send>>,
    /// `preadv2`/`pwritev2` flags for the transfer (the SQE's rw_flags):
    /// `RWF_DONTCACHE` for a device reading through the host's cache
    /// without staying in it, else 0.
    pub rw_flags: libc::c_int,
}

/// A store of bytes behind one cached file.
///
/// Calls may come from many threads at once (readers, the flusher, kswapd),
/// always for disjoint page ranges except for `set_len`/`punch_hole`, which
/// the engine serialises against writeback of the pages they touch.
///
/// Implementations: [`FileDev`] (a host file, O_DIRECT where possible),
/// [`MemoryDev`] (a sparse in-memory file, the tmpfs case) and
/// [`FaultInjector`] (wraps another device and injects errors and delays)
/// and [`RateLimitedDev`] (wraps another behind a shared bandwidth and
/// latency: a slow disk, a USB stick).
// `len` is fallible I/O (fstat), not a collection length: no `is_empty`.
#[allow(clippy::len_without_is_empty)]
pub trait BackingDev: Send + Sync + 'static {
    /// A short name for messages (the path, or `memory:NAME`).
    fn name(&self) -> &str;

    /// Read pages starting at byte `pos` (a multiple of the page size) into
    /// `bufs`, each one page long and page aligned, in file order. Returns
    /// the number of bytes read; fewer than asked means end of file, and the
    /// caller zeroes the rest.
    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize>;

    /// Write whole pages starting at byte `pos` (a multiple of the page
    /// size). `file_size` is the file's logical size: bytes of the last page
    /// past it are not part of the file, and the device must not end up
    /// longer than `max(file_size, its length before)` because of them.
    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()>;

    /// Make written data durable (`fdatasync` when `data_only`, else `fsync`).
    fn sync(&self, data_only: bool) -> io::Result<()>;

    /// The device's length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Set the device's length (truncate or extend with zeroes).
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Deallocate `[offset, offset + len)`, which then reads as zeroes.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Promise the space that writing back `[pos, pos + len)` will need,
    /// as ext4's delayed allocation reserves blocks at write(2): the write
    /// path calls it before it dirties pages there, and fails the write with
    /// its error (ENOSPC, EFBIG past the file system's largest file)
    /// instead of accepting data it cannot write later. Space already
    /// allocated needs nothing. Devices that cannot run out of space (or
    /// cannot tell) keep the default, which promises nothing.
    fn reserve(&self, pos: u64, len: u64) -> io::Result<()> {
        let _ = (pos, len);
        Ok(())
    }

    /// Remove the underlying object (unlink). Later calls may fail.
    fn remove(&self) -> io::Result<()> {
        Ok(())
    }

    /// Rename the underlying object to `to` (rename(2), replacing whatever
    /// is there), so that later calls, `remove` among them, act on the new
    /// name. Devices without names do not support it.
    fn rename(&self, to: &std::path::Path) -> io::Result<()> {
        let _ = to;
        Err(io::Error::from_raw_os_error(libc::EXDEV))
    }

    /// A name the device may reopen its file by is about to go (unlink or
    /// rename of one of the file's names): keep it reachable, by holding a
    /// descriptor for the rest of the device's life. Devices that never
    /// reopen by name need nothing.
    fn hold_open(&self) -> io::Result<()> {
        Ok(())
    }

    /// One of the file's names moved from `from` to `to` (the host rename
    /// is done): a device that reopens by that name follows it.
    fn renamed(&self, from: &std::path::Path, to: &std::path::Path) {
        let _ = (from, to);
    }

    /// The host file's identity `(st_dev, st_ino)`, for devices on host
    /// files: the page cache keys them by it, so every spelling and every
    /// link of one file shares one inode.
    fn identity(&self) -> Option<(u64, u64)> {
        None
    }

    /// Let an asynchronous engine do the transfer of `[pos, pos + len)`
    /// itself, as one `preadv`/`pwritev` on the descriptor returned, with
    /// page-aligned frames: Some where that is exactly what `read_pages`
    /// or `write_pages` (with `file_size`) would do when it moves every
    /// byte. The engine finishes anything else (a short transfer, an
    /// error) by calling `read_pages`/`write_pages` for the rest, after
    /// dropping `hold`. The default, None, keeps the device on its own
    /// calls (on the I/O threads): wrappers that inject faults or limit
    /// the rate keep their semantics that way.
    fn async_io(&self, dir: IoDir, pos: u64, len: u64, file_size: u64) -> Option<AsyncIo> {
        let _ = (dir, pos, len, file_size);
        None
    }

    /// Whether the device bypasses the host page cache (O_DIRECT).
    fn is_direct(&self) -> bool {
        false
    }

    /// What the device says about its request queue, for sizing
    /// readahead as the kernel's bdi does: None for a device that says
    /// nothing (the cache-wide `read_ahead_kb` then applies).
    fn queue_limits(&self) -> Option<QueueLimits> {
        None
    }

    /// The backing device this file lives on (its `backing_dev_info`):
    /// files with the same key share dirty accounting, congestion state and
    /// a flusher thread. Host files are keyed by their filesystem's device.
    fn bdi_name(&self) -> String {
        "default".to_string()
    }
}

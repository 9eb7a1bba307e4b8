//! The backing device of one file on the mount: the engine's `FileDev`
//! (O_DIRECT, with its buffered fallback) on the backing inode, keyed by
//! the inode's identity rather than by a path.
//!
//! Why not by path: the kernel's page cache belongs to the inode, not to a
//! name. Keyed by `(st_dev, st_ino)`, a file keeps its cached pages across
//! renames (of itself or of any directory above it), hard links share one
//! cache, and an unlinked file that is still open keeps working. The key
//! cannot alias a new file that reuses the inode number: the descriptors
//! the mount holds (this device's and the node's `O_PATH` one) keep the old
//! inode alive, so its number is not free until the mount lets go of it,
//! and by then the engine has dropped the file (`PageCache::evict` or
//! `unlink_dev` at FUSE forget).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use pcache::backing::{BackingDev, FileDev};

/// The engine's name for a backing inode.
pub fn engine_key(dev: u64, ino: u64) -> String {
    format!("fuse:{dev}:{ino}")
}

/// A `FileDev` on a backing inode, named by its identity.
pub struct InodeDev {
    inner: FileDev,
    key: String,
}

impl InodeDev {
    /// Open the inode behind `opath` (an `O_PATH` descriptor) for reading
    /// and writing, with O_DIRECT where the backing filesystem allows it.
    pub fn open(opath: &OwnedFd, key: String, page_size: usize) -> io::Result<InodeDev> {
        let path = format!("/proc/self/fd/{}", opath.as_raw_fd());
        let inner = FileDev::open(Path::new(&path), false, false, true, page_size)?;
        Ok(InodeDev { inner, key })
    }
}

impl BackingDev for InodeDev {
    fn name(&self) -> &str {
        &self.key
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        self.inner.read_pages(pos, bufs)
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        self.inner.write_pages(pos, bufs, file_size)
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        self.inner.sync(data_only)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }

    fn reserve(&self, pos: u64, len: u64) -> io::Result<()> {
        self.inner.reserve(pos, len)
    }

    /// Names belong to the mount, which unlinks in the backing directory
    /// itself; the engine only drops the pages.
    fn remove(&self) -> io::Result<()> {
        Ok(())
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn bdi_name(&self) -> String {
        self.inner.bdi_name()
    }
}

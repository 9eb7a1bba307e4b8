//! The backing device of one file on the mount: the engine's `FileDev`
//! (O_DIRECT, with its buffered fallback) on the backing inode, keyed by
//! the inode's identity rather than by a path.
//!
//! Why not by path: the kernel's page cache belongs to the inode, not to a
//! name. Keyed by `(st_dev, st_ino)`, a file keeps its cached pages across
//! renames (of itself or of any directory above it), hard links share one
//! cache, and an unlinked file that is still open keeps working.
//!
//! The device holds no descriptor of its own: the engine's bounded fd
//! cache opens the file when a transfer needs it, through `opener` (which
//! reaches the inode through the mount's node table, fs.rs), and checks
//! that what it opened is the same `(st_dev, st_ino)`. The key cannot alias
//! a new file that reuses the inode number: the engine drops the file when
//! the kernel forgets its node (`PageCache::evict` or `unlink_dev` at FUSE
//! forget), and until then the inode has a name in the backing directory
//! or, once unlinked, the node's `O_PATH` descriptor keeps it alive.

use std::io;
use std::sync::Arc;

use pcache::backing::{AsyncIo, BackingDev, FdCache, FileDev, IoDir, Opener};

/// The engine's name for a backing inode.
pub fn engine_key(dev: u64, ino: u64) -> String {
    format!("fuse:{dev}:{ino}")
}

/// The backing inode of an engine key, for messages by path.
pub fn parse_engine_key(key: &str) -> Option<(u64, u64)> {
    let rest = key.strip_prefix("fuse:")?;
    let (dev, ino) = rest.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// A `FileDev` on a backing inode, named by its identity.
pub struct InodeDev {
    inner: FileDev,
    key: String,
}

impl InodeDev {
    /// A device on the inode `opener` opens (for reading and writing, with
    /// the flags it is given: O_DIRECT where the backing filesystem allows
    /// it), its descriptors from `fds`.
    pub fn open(fds: &Arc<FdCache>, key: String, page_size: usize, opener: Opener) -> io::Result<InodeDev> {
        let inner = FileDev::open_with(fds, key.clone(), true, page_size, opener)?;
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

    /// The inode's descriptor lent to the engine's io_uring, as `FileDev`
    /// lends it (plain O_DIRECT transfers only).
    fn async_io(&self, dir: IoDir, pos: u64, len: u64, file_size: u64) -> Option<AsyncIo> {
        self.inner.async_io(dir, pos, len, file_size)
    }

    fn bdi_name(&self) -> String {
        self.inner.bdi_name()
    }
}

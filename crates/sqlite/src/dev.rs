//! The backing device of a file SQLite opens through the VFS: one
//! descriptor of the host file, opened with O_DIRECT (buffered where the
//! file system refuses it), held for the device's whole life.
//!
//! Why not the engine's own `FileDev`: it takes descriptors from the
//! cache's bounded descriptor cache, which closes and reopens them at will,
//! and closing any descriptor of a file drops every POSIX lock the process
//! holds on it, the locks SQLite's unix VFS holds for the database among
//! them. This device opens one descriptor when the file is first opened in
//! the process and closes it only when the engine drops the inode, which
//! the VFS does at the close of the file's last connection in the process
//! (after SQLite has released its locks).
//!
//! Writes go through a second descriptor, opened without O_DIRECT and
//! held as long: into the host's page cache, not to the disk. A commit's
//! pages are written back when SQLite releases a lock another process
//! could take (vfs.rs), and a copy into the host's cache is enough for
//! that: another process's O_DIRECT read writes the host's dirty pages of
//! its range back first, and a buffered reader (the default VFS) reads
//! them. xSync's fdatasync makes them durable. A write to the disk at every
//! commit cost YCSB A about 7x its throughput.
//!
//! While [`SqliteDev::shadow`] is held, `set_len` and `punch_hole` change
//! only the cache: the VFS uses them to drop stale pages and to take the
//! size another process gave the file, which must not be written back.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use engine::BackingDev;
use parking_lot::{Mutex, MutexGuard};

pub struct SqliteDev {
    name: String,
    file: File,
    /// The descriptor writes go through: buffered (see above).
    wfile: File,
    direct: bool,
    /// Set while the VFS resynchronises the cache with the host file.
    shadow: AtomicBool,
    /// Serialises resynchronisation against SQLite's own truncations, so
    /// that a truncation is never mistaken for a shadow one.
    resync: Mutex<()>,
}

/// A resynchronisation in progress: `set_len` and `punch_hole` touch only
/// the cache until it drops.
pub struct Shadow<'a> {
    dev: &'a SqliteDev,
    _g: MutexGuard<'a, ()>,
}

impl Drop for Shadow<'_> {
    fn drop(&mut self) {
        self.dev.shadow.store(false, Ordering::Release);
    }
}

impl SqliteDev {
    pub fn open(path: &Path) -> io::Result<SqliteDev> {
        let name = path.to_string_lossy().into_owned();
        // Read-write, or read-only where that is all the process may do
        // (SQLite opened the file read-only then, and never writes it).
        let open = |flags| {
            let rw = std::fs::OpenOptions::new().read(true).write(true).custom_flags(flags).open(path);
            match rw {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EROFS)) => {
                    std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)
                }
                r => r,
            }
        };
        // tmpfs and some others refuse O_DIRECT with EINVAL: buffered then.
        let (file, direct) = match open(libc::O_DIRECT | libc::O_CLOEXEC) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(libc::O_CLOEXEC)?, false),
            Err(e) => return Err(e),
        };
        let wfile = if direct { open(libc::O_CLOEXEC)? } else { file.try_clone()? };
        Ok(SqliteDev { name, file, wfile, direct, shadow: AtomicBool::new(false), resync: Mutex::new(()) })
    }

    /// Enter a resynchronisation (see the module comment).
    pub fn shadow(&self) -> Shadow<'_> {
        let g = self.resync.lock();
        self.shadow.store(true, Ordering::Release);
        Shadow { dev: self, _g: g }
    }

    /// Held by SQLite's truncation, so that it is never shadowed.
    pub fn truncating(&self) -> MutexGuard<'_, ()> {
        self.resync.lock()
    }

    fn shadowed(&self) -> bool {
        self.shadow.load(Ordering::Acquire)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

/// Move every byte of `iov` at `pos` with `preadv`/`pwritev` (at most
/// IOV_MAX iovecs a call), resuming after short transfers and EINTR.
/// Returns the bytes moved: fewer than asked only for a read that met the
/// end of the file (at once for an O_DIRECT read stopping mid-sector).
///
/// # Safety
/// Every iovec covers a live buffer of its length, writable by the kernel
/// for a read, for the duration of the call.
unsafe fn vectored(file: &File, dir: Dir, pos: u64, iov: &[libc::iovec], direct: bool) -> io::Result<usize> {
    const IOV_MAX: usize = 1024;
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut done = 0usize;
    let mut rest: Vec<libc::iovec> = Vec::new();
    while done < total {
        // Skip the iovecs already moved whole; start inside the next.
        let (mut skip, mut first) = (done, 0);
        while skip >= iov[first].iov_len {
            skip -= iov[first].iov_len;
            first += 1;
        }
        rest.clear();
        rest.extend_from_slice(&iov[first..iov.len().min(first + IOV_MAX)]);
        // The iovec points into a buffer of at least iov_len bytes, and
        // `skip` is below its length.
        rest[0].iov_base = rest[0].iov_base.cast::<u8>().wrapping_add(skip).cast();
        rest[0].iov_len -= skip;
        let off = i64::try_from(pos + done as u64).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let (fd, count) = (file.as_raw_fd(), rest.len() as libc::c_int);
        // SAFETY: `rest` lies inside the caller's buffers (the caller's
        // promise and the skip above); the descriptor is open.
        let n = unsafe {
            match dir {
                Dir::Read => libc::preadv(fd, rest.as_ptr(), count, off),
                Dir::Write => libc::pwritev(fd, rest.as_ptr(), count, off),
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        if n == 0 {
            match dir {
                Dir::Read => break,
                Dir::Write => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            }
        }
        done += n;
        if dir == Dir::Read && direct && !done.is_multiple_of(512) {
            // O_DIRECT stops short of a sector only at end of file.
            break;
        }
    }
    Ok(done)
}

impl BackingDev for SqliteDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        // One preadv for the whole run (a readahead window is one request,
        // not one per page); the frames are page aligned and whole, as
        // O_DIRECT wants. A short read is end of file.
        let iov: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        // SAFETY: every iovec covers a buffer the caller lends exclusively
        // for this call.
        unsafe { vectored(&self.file, Dir::Read, pos, &iov, self.direct) }
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        // Only the bytes below the logical size: the descriptor is
        // buffered, so the last page may end anywhere, and the file never
        // grows past `file_size` (nor shrinks) for a page's zeroed tail.
        let mut left = file_size.saturating_sub(pos);
        let mut iov = Vec::with_capacity(bufs.len());
        for b in bufs {
            if left == 0 {
                break;
            }
            let len = b.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            iov.push(libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: len });
            left -= len as u64;
        }
        // SAFETY: every iovec covers (part of) a buffer the caller lends
        // for this call; the kernel only reads them.
        unsafe { vectored(&self.wfile, Dir::Write, pos, &iov, false)? };
        Ok(())
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        if data_only {
            self.file.sync_data()
        } else {
            self.file.sync_all()
        }
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.shadowed() {
            return Ok(());
        }
        self.file.set_len(len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.shadowed() {
            return Ok(());
        }
        // SAFETY: fallocate on a descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as i64,
                len as i64,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    fn bdi_name(&self) -> String {
        // Files on one host device share a flusher, as the engine's own
        // host files do.
        match self.file.metadata() {
            Ok(m) => format!("dev:{}:{}", libc::major(m.dev()), libc::minor(m.dev())),
            Err(_) => "default".to_string(),
        }
    }
}

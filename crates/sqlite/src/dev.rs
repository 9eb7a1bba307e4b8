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
//! While [`SqliteDev::shadow`] is held, `set_len` and `punch_hole` change
//! only the cache: the VFS uses them to drop stale pages and to take the
//! size another process gave the file, which must not be written back.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use engine::BackingDev;
use parking_lot::{Mutex, MutexGuard};

pub struct SqliteDev {
    name: String,
    file: File,
    direct: bool,
    /// Set while the VFS resynchronises the cache with the host file.
    shadow: AtomicBool,
    /// Serialises resynchronisation against SQLite's own truncations, so
    /// that a truncation is never mistaken for a shadow one.
    resync: Mutex<()>,
    /// Held by a write that may extend the file past its logical size and
    /// cut it back, so two such writes do not undo each other's length.
    tail: Mutex<()>,
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
        Ok(SqliteDev {
            name,
            file,
            direct,
            shadow: AtomicBool::new(false),
            resync: Mutex::new(()),
            tail: Mutex::new(()),
        })
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

fn iovecs(bufs: &[&[u8]]) -> Vec<libc::iovec> {
    bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() }).collect()
}

impl BackingDev for SqliteDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        // Page by page with pread: the frames are page aligned and whole,
        // as O_DIRECT wants; a short read is end of file.
        let mut done = 0usize;
        let mut off = pos;
        for buf in bufs.iter_mut() {
            let mut got = 0;
            while got < buf.len() {
                match self.file.read_at(&mut buf[got..], off + got as u64) {
                    Ok(0) => return Ok(done + got),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
                if self.direct && got % 512 != 0 {
                    // O_DIRECT stops short only at end of file.
                    return Ok(done + got);
                }
            }
            done += got;
            off += got as u64;
        }
        Ok(done)
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let end = pos + total as u64;
        // A write past the logical size (the whole last page) must leave
        // the file no longer than max(file_size, its length before).
        let tail = (end > file_size).then(|| self.tail.lock());
        let before = if tail.is_some() { self.file.metadata()?.len() } else { 0 };
        let iov = iovecs(bufs);
        let mut written = 0usize;
        while written < total {
            // Skip the iovecs already written whole; pwritev of the rest.
            let mut skip = written;
            let mut first = 0;
            while skip >= iov[first].iov_len {
                skip -= iov[first].iov_len;
                first += 1;
            }
            let mut rest = iov[first..].to_vec();
            // SAFETY: the iovec points into a caller's buffer of at least
            // iov_len bytes, and `skip` is below its length.
            rest[0].iov_base = unsafe { (rest[0].iov_base as *mut u8).add(skip) }.cast();
            rest[0].iov_len -= skip;
            // SAFETY: every iovec covers a live buffer the caller lends for
            // this call; the descriptor is open while `self` lives.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    rest.as_ptr(),
                    rest.len() as libc::c_int,
                    (pos + written as u64) as i64,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::WriteZero));
            }
            written += n as usize;
        }
        if tail.is_some() {
            let keep = file_size.max(before);
            if end > keep {
                self.file.set_len(keep)?;
            }
        }
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

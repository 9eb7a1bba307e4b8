//! A backing device on a host file, bypassing the host page cache with
//! O_DIRECT where the filesystem allows it.
//!
//! When the filesystem refuses O_DIRECT (at open, or with EINVAL at I/O
//! time) the device switches to buffered I/O for good and follows every
//! read and write with `POSIX_FADV_DONTNEED`, so the host does not keep a
//! second copy of the data this cache already holds.
//!
//! Reads may instead go through the host's page cache without staying in
//! it (`FileDev::use_dontcache_reads`, `Tunables::dev_read_mode`): a
//! second descriptor, buffered, advised POSIX_FADV_RANDOM (no host
//! readahead), read with `preadv2(RWF_DONTCACHE)` (Linux 6.14's uncached
//! buffered I/O: the host drops each folio once it is copied out). Writes
//! stay on the O_DIRECT descriptor. A probe read at start decides; a
//! kernel or file system that refuses the flag (EOPNOTSUPP, or EINVAL
//! before 6.14) leaves reads on O_DIRECT, said once per process.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, OnceLock};

use parking_lot::{Mutex, RwLock};

use super::fdcache::{CachedFd, FdCache};
use super::{AsyncIo, BackingDev, IoDir, QueueLimits};

/// Most iovecs passed to one `preadv`/`pwritev` call (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Pages of zeroes written per call when `punch_hole` has to write zeroes.
const ZERO_CHUNK_PAGES: usize = 64;

/// Set once the first time any `FileDev` in the process falls back to
/// buffered I/O, so the notice is printed only once.
static FALLBACK_NOTICE: Once = Once::new();

fn fallback_notice(name: &str) {
    FALLBACK_NOTICE.call_once(|| {
        eprintln!("pcache: {name}: O_DIRECT not supported, using buffered I/O + POSIX_FADV_DONTNEED");
    });
}

/// `RWF_DONTCACHE` (linux/fs.h, 6.14): uncached buffered I/O. Not in the
/// libc crate yet.
pub const RWF_DONTCACHE: libc::c_int = 0x80;

/// Set the first time a device's RWF_DONTCACHE reads are refused.
static DONTCACHE_NOTICE: Once = Once::new();

fn dontcache_notice(name: &str, err: &io::Error) {
    DONTCACHE_NOTICE.call_once(|| {
        eprintln!("pcache: {name}: RWF_DONTCACHE reads refused ({err}), reading with O_DIRECT");
    });
}

/// Whether an error says the kernel or file system does not do
/// RWF_DONTCACHE: EOPNOTSUPP from 6.14 on (no FOP_DONTCACHE, or DAX),
/// EINVAL or EOPNOTSUPP for an unknown flag before.
fn dontcache_refused(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL))
}

fn invalid_input(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// `base + add` as an `off_t`, or an error if it does not fit.
fn file_offset(base: u64, add: usize) -> io::Result<libc::off_t> {
    base.checked_add(add as u64)
        .and_then(|o| libc::off_t::try_from(o).ok())
        .ok_or_else(|| invalid_input("file offset out of range"))
}

/// How a [`FileDev`] reopens its file when its descriptor was closed
/// (the descriptor cache bounds how many stay open): given the open flags
/// to add (`O_DIRECT` or 0), a new descriptor of the same file, for reading
/// and writing. The device checks that it is the same inode.
pub type Opener = Box<dyn Fn(libc::c_int) -> io::Result<File> + Send + Sync>;

/// Where a device's file is reopened from.
enum Reopen {
    /// Its path (`FileDev::path`, kept current by `rename`).
    Path,
    /// The caller's way (the mount reaches a backing inode by its node).
    With(Opener),
}

/// A backing device on a host file.
///
/// Transfers are whole pages at page-aligned offsets. With O_DIRECT the
/// last page of a file is written whole and the file is then cut back to
/// its logical size; in buffered mode only the bytes below the logical size
/// are written.
///
/// The device holds no descriptor of its own: each call takes one from the
/// page cache's [`FdCache`] (bounded, LRU), which reopens the file on a
/// miss. A reopened file must be the inode first opened (`st_dev`,
/// `st_ino`), else the call fails with ESTALE rather than touch another
/// file. A removed file (unlinked while cached) pins its descriptor, since
/// it can no longer be reopened by name.
pub struct FileDev {
    fds: Arc<FdCache>,
    /// This device's key in `fds`.
    fd_id: u64,
    reopen: Reopen,
    /// `(st_dev, st_ino)` of the file, checked at every reopen.
    ident: (u64, u64),
    /// A descriptor held for the device's life (after `remove`): set once,
    /// never taken back, so every transfer reads it without a lock.
    pinned: OnceLock<Arc<CachedFd>>,
    bdi: String,
    /// The host block device's queue limits, read once from sysfs.
    limits: Option<QueueLimits>,
    /// Where the file is now: `rename` moves it, and `remove` must unlink
    /// the current name, not the one it was opened under.
    path: Mutex<PathBuf>,
    name: String,
    page_size: usize,
    /// Descriptors are opened with O_DIRECT. Only ever goes from true to
    /// false.
    direct: AtomicBool,
    /// O_DIRECT was asked for but is not available: drop the host's copy of
    /// the data after every transfer.
    dontneed: AtomicBool,
    /// Reads go through `read_fd_id`'s buffered descriptor with
    /// RWF_DONTCACHE (`use_dontcache_reads`). Only ever goes from true to
    /// false: a refusal at I/O time, or the file pinned (unlinked).
    dontcache: AtomicBool,
    /// The buffered read descriptor's key in `fds`.
    read_fd_id: u64,
    /// Taken shared by writes that cannot change the file's length beyond
    /// what the caller asked for, and exclusively by O_DIRECT tail writes
    /// (which grow the file and cut it back) and `set_len`, so that the
    /// cut-back never discards another writer's data.
    size_lock: Arc<RwLock<()>>,
    /// Space promised to written pages (see `reserve`).
    resv: Mutex<Reservations>,
}

/// The ranges of the file known to have space allocated, because this
/// device reserved them (fallocate with FALLOC_FL_KEEP_SIZE) or wrote
/// them. Byte ranges, page aligned, merged, at most `RESV_RANGES_MAX`
/// of them: forgetting one only costs a repeated (cheap) fallocate.
#[derive(Debug, Default)]
struct Reservations {
    ranges: std::collections::BTreeMap<u64, u64>,
    /// The host file system cannot fallocate (EOPNOTSUPP): nothing is
    /// reserved, and ENOSPC can only come from writeback.
    unsupported: bool,
}

/// Reservations kept per file; beyond this the lowest are forgotten.
const RESV_RANGES_MAX: usize = 256;
/// The most an appending writer reserves ahead of what it wrote, so a
/// sequential writer pays one fallocate per 16 MiB, not one per page.
/// Each call takes the host inode's lock exclusively (ext4), so it waits
/// for the O_DIRECT writeback write in flight (an extending one holds
/// that lock until it completes): at 1 MiB a dd's writer waited on the
/// device at every MiB; 16 MiB is four of the project's disk's largest
/// writeback requests.
const RESV_AHEAD_MAX: u64 = 16 << 20;

impl Reservations {
    /// Whether `[start, end)` lies inside one known range.
    fn covers(&self, start: u64, end: u64) -> bool {
        self.ranges.range(..=start).next_back().is_some_and(|(_, &e)| e >= end)
    }

    /// The length of the known range ending exactly at `start`, if any:
    /// the writer is appending to it.
    fn run_ending_at(&self, start: u64) -> Option<u64> {
        self.ranges.range(..=start).next_back().filter(|(_, &e)| e == start).map(|(&s, &e)| e - s)
    }

    fn insert(&mut self, mut start: u64, mut end: u64) {
        // Merge every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> =
            self.ranges.range(..=end).rev().take_while(|(_, &e)| e >= start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
        while self.ranges.len() > RESV_RANGES_MAX {
            self.ranges.pop_first();
        }
    }

    /// Forget everything at or past `from` (the file was cut there).
    fn cut(&mut self, from: u64) -> Vec<(u64, u64)> {
        let mut gone: Vec<(u64, u64)> = self.ranges.range(from..).map(|(&s, &e)| (s, e)).collect();
        for &(s, _) in &gone {
            self.ranges.remove(&s);
        }
        if let Some((&s, e)) = self.ranges.range_mut(..from).next_back() {
            if *e > from {
                gone.push((from, *e));
                *e = from;
                if s == from {
                    self.ranges.remove(&s);
                }
            }
        }
        gone
    }
}

impl std::fmt::Debug for FileDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileDev").field("name", &self.name).field("ident", &self.ident).finish_non_exhaustive()
    }
}

/// `(st_dev, st_ino)` of an open file.
fn identity(file: &File) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// Open with O_DIRECT if `direct`, falling back to buffered I/O where the
/// filesystem refuses it (EINVAL). Returns the file and whether it is
/// direct.
fn open_maybe_direct(
    direct: bool,
    name: &str,
    open: impl Fn(libc::c_int) -> io::Result<File>,
) -> io::Result<(File, bool)> {
    if !direct {
        return Ok((open(0)?, false));
    }
    match open(libc::O_DIRECT) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let file = open(0)?;
            fallback_notice(name);
            Ok((file, false))
        }
        Err(e) => Err(e),
    }
}

impl FileDev {
    /// Open (or create) the host file at `path`, its descriptor in the
    /// process-wide [`FdCache::global`].
    ///
    /// With `direct`, the file is opened with O_DIRECT; if the filesystem
    /// refuses that (EINVAL), it is opened for buffered I/O instead and the
    /// device advises the host to drop cached data after each transfer.
    /// `page_size` must be a power of two; with O_DIRECT every transfer
    /// must be a whole number of pages at a page-aligned offset.
    pub fn open(path: &Path, create: bool, truncate: bool, direct: bool, page_size: usize) -> io::Result<FileDev> {
        FileDev::open_in(FdCache::global(), path, create, truncate, direct, page_size)
    }

    /// As [`FileDev::open`], with descriptors from `fds` (a page cache's).
    pub fn open_in(
        fds: &Arc<FdCache>,
        path: &Path,
        create: bool,
        truncate: bool,
        direct: bool,
        page_size: usize,
    ) -> io::Result<FileDev> {
        if !page_size.is_power_of_two() {
            return Err(invalid_input("page size must be a power of two"));
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(create).truncate(truncate);
        let name = path.to_string_lossy().into_owned();
        let (file, is_direct) = open_maybe_direct(direct, &name, |flags| {
            let mut o = opts.clone();
            o.custom_flags(flags);
            o.open(path)
        })?;
        FileDev::new(fds, file, Reopen::Path, name, path.to_path_buf(), direct, is_direct, page_size)
    }

    /// A device on the file `opener` opens, named `name` (for messages), its
    /// descriptors from `fds`. `opener` is called now and again whenever the
    /// descriptor cache has closed the device's descriptor.
    pub fn open_with(
        fds: &Arc<FdCache>,
        name: String,
        direct: bool,
        page_size: usize,
        opener: Opener,
    ) -> io::Result<FileDev> {
        if !page_size.is_power_of_two() {
            return Err(invalid_input("page size must be a power of two"));
        }
        let (file, is_direct) = open_maybe_direct(direct, &name, &opener)?;
        let path = PathBuf::from(&name);
        FileDev::new(fds, file, Reopen::With(opener), name, path, direct, is_direct, page_size)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        fds: &Arc<FdCache>,
        file: File,
        reopen: Reopen,
        name: String,
        path: PathBuf,
        asked_direct: bool,
        is_direct: bool,
        page_size: usize,
    ) -> io::Result<FileDev> {
        let ident = identity(&file)?;
        let bdi = format!("dev:{}:{}", libc::major(ident.0), libc::minor(ident.0));
        let fd_id = fds.new_id();
        fds.insert(fd_id, file);
        let read_fd_id = fds.new_id();
        Ok(FileDev {
            fds: fds.clone(),
            fd_id,
            read_fd_id,
            dontcache: AtomicBool::new(false),
            reopen,
            ident,
            pinned: OnceLock::new(),
            bdi,
            path: Mutex::new(path),
            name,
            page_size,
            direct: AtomicBool::new(is_direct),
            dontneed: AtomicBool::new(asked_direct && !is_direct),
            size_lock: Arc::new(RwLock::new(())),
            resv: Mutex::new(Reservations::default()),
            limits: host_queue_limits(ident.0),
        })
    }

    /// The device's descriptor: pinned, cached, or reopened (and checked to
    /// be the same inode). It stays open while the caller holds it.
    fn file(&self) -> io::Result<Arc<CachedFd>> {
        if let Some(fd) = self.pinned.get() {
            return Ok(fd.clone());
        }
        self.fds.get(self.fd_id, || self.reopen_file(if self.is_direct() { libc::O_DIRECT } else { 0 }))
    }

    /// The file opened again by its path or opener, with `flags` added,
    /// checked to be the same inode.
    fn reopen_file(&self, flags: libc::c_int) -> io::Result<File> {
        let file = match &self.reopen {
            Reopen::Path => {
                let path = self.path.lock().clone();
                OpenOptions::new().read(true).write(true).custom_flags(flags).open(path)?
            }
            Reopen::With(opener) => opener(flags)?,
        };
        if identity(&file)? != self.ident {
            // The name now leads to another file: never write there.
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        Ok(file)
    }

    /// A buffered descriptor of the file for RWF_DONTCACHE reads, advised
    /// POSIX_FADV_RANDOM: the cache asks for exactly the pages it wants,
    /// so host readahead would only read pages it then drops.
    fn open_read_file(&self) -> io::Result<File> {
        let file = self.reopen_file(0)?;
        // SAFETY: an advisory call on a descriptor we own; no memory is
        // passed. Failing it only leaves the host's readahead on.
        let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        Ok(file)
    }

    /// The RWF_DONTCACHE read descriptor, cached or reopened.
    fn read_file(&self) -> io::Result<Arc<CachedFd>> {
        self.fds.get(self.read_fd_id, || self.open_read_file())
    }

    /// Read with RWF_DONTCACHE on a buffered descriptor from now on, if
    /// the host does it: a one-page probe read at offset 0 decides (a
    /// refusal says so once and leaves reads on O_DIRECT). Whether reads
    /// now take that path. Writes are not affected. A device already
    /// buffered (O_DIRECT refused) or pinned keeps its one descriptor.
    pub fn use_dontcache_reads(&self) -> bool {
        if !self.is_direct() || self.pinned.get().is_some() {
            return false;
        }
        let probe = || -> io::Result<()> {
            let file = self.open_read_file()?;
            let mut buf = AlignedBuf::zeroed(self.page_size, self.page_size)?;
            let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
            // SAFETY: one iovec over our own buffer, which lives across the
            // call; the descriptor is open.
            let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, 0, RWF_DONTCACHE) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            self.fds.insert(self.read_fd_id, file);
            Ok(())
        };
        match probe() {
            Ok(()) => {
                self.dontcache.store(true, Ordering::Release);
                true
            }
            Err(e) => {
                if dontcache_refused(&e) {
                    dontcache_notice(&self.name, &e);
                }
                false
            }
        }
    }

    /// Whether reads take the RWF_DONTCACHE path.
    pub fn dontcache_reads(&self) -> bool {
        self.dontcache.load(Ordering::Acquire)
    }

    /// Hold the descriptor for the rest of the device's life: the file is
    /// about to lose its last name and could not be reopened. Reads go
    /// back to it (O_DIRECT): the buffered one could not be reopened
    /// either.
    pub fn pin(&self) -> io::Result<()> {
        let fd = self.file()?;
        // Pinned twice: the first descriptor stays (the same file).
        let _ = self.pinned.set(fd);
        self.dontcache.store(false, Ordering::Release);
        self.fds.forget(self.read_fd_id);
        Ok(())
    }

    /// The page size this device was opened with.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The host path (after any rename).
    pub fn path(&self) -> PathBuf {
        self.path.lock().clone()
    }

    /// Switch this device to buffered I/O for good: clear O_DIRECT on the
    /// descriptor and drop the host's cached copy after every transfer.
    fn fall_back(&self, fd: &CachedFd) -> io::Result<()> {
        let fd = fd.as_raw_fd();
        // SAFETY: F_GETFL on a descriptor the caller holds open (an
        // `Arc<CachedFd>`); no memory is passed.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if flags & libc::O_DIRECT != 0 {
            // SAFETY: as above; F_SETFL only changes the descriptor's status
            // flags (O_DIRECT is one Linux lets us clear).
            if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        self.dontneed.store(true, Ordering::Release);
        self.direct.store(false, Ordering::Release);
        fallback_notice(&self.name);
        Ok(())
    }

    /// After a buffered transfer standing in for O_DIRECT, ask the host to
    /// drop its copy of the range.
    fn advise_dontneed(&self, fd: &CachedFd, pos: u64, len: usize) {
        if len == 0 || !self.dontneed.load(Ordering::Acquire) {
            return;
        }
        if let (Ok(off), Ok(len)) = (libc::off_t::try_from(pos), libc::off_t::try_from(len)) {
            // SAFETY: an advisory call on our own open descriptor; no memory
            // is passed. Its result is deliberately ignored: the advice only
            // limits double caching and failing it loses nothing.
            let _ = unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, len, libc::POSIX_FADV_DONTNEED) };
        }
    }

    /// O_DIRECT needs page-aligned offsets and whole pages.
    fn check_direct_shape(&self, pos: u64, lens: impl Iterator<Item = usize>) -> io::Result<()> {
        let ps = self.page_size;
        let mut ok = pos.is_multiple_of(ps as u64);
        for len in lens {
            ok &= len % ps == 0;
        }
        if ok {
            Ok(())
        } else {
            Err(invalid_input("O_DIRECT transfers must be whole pages at page-aligned offsets"))
        }
    }

    fn all_aligned(&self, mut ptrs: impl Iterator<Item = *const u8>) -> bool {
        ptrs.all(|p| (p as usize).is_multiple_of(self.page_size))
    }

    /// `read_pages` through the buffered descriptor with RWF_DONTCACHE:
    /// any alignment will do, a short read means end of file.
    fn read_dontcache(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let fd = self.read_file()?;
        self.transfer_flags(&fd, pos, &Segs::for_read(bufs), RWF_DONTCACHE)
    }

    /// The core loop: move every byte of `segs` at file offset `pos`,
    /// resuming after short transfers and EINTR, and switching to buffered
    /// I/O if O_DIRECT turns out to be refused (EINVAL). Returns the bytes
    /// transferred, which for reads is fewer than asked only at end of file.
    fn transfer(&self, fd: &CachedFd, pos: u64, segs: &Segs<'_>) -> io::Result<usize> {
        self.transfer_flags(fd, pos, segs, 0)
    }

    /// `transfer` with `preadv2`/`pwritev2` flags (`rw_flags`, 0 for none;
    /// nonzero only on a buffered descriptor).
    fn transfer_flags(&self, fd: &CachedFd, pos: u64, segs: &Segs<'_>, rw_flags: libc::c_int) -> io::Result<usize> {
        let ps = self.page_size;
        let mut done = 0usize;
        // The first segment not yet fully transferred, and how much of it was.
        let mut idx = 0usize;
        let mut skip = 0usize;
        // Built only to resume inside a segment; otherwise the call takes
        // `segs`' own iovecs (no allocation for a whole transfer, the
        // common case: a random miss is one page).
        let mut resumed: Vec<libc::iovec> = Vec::new();
        while done < segs.total {
            let rest = &segs.iov[idx..segs.iov.len().min(idx + IOV_MAX)];
            let iov: &[libc::iovec] = if skip == 0 {
                rest
            } else {
                resumed.clear();
                for (k, seg) in rest.iter().enumerate() {
                    let off = if k == 0 { skip } else { 0 };
                    resumed.push(libc::iovec {
                        iov_base: seg.iov_base.cast::<u8>().wrapping_add(off).cast(),
                        iov_len: seg.iov_len - off,
                    });
                }
                &resumed
            };
            let off = file_offset(pos, done)?;
            // The RWF_DONTCACHE descriptor is buffered whatever the device's.
            let direct = rw_flags == 0 && self.is_direct();
            let count = iov.len() as libc::c_int; // <= IOV_MAX
                                                  // SAFETY: every iovec lies inside one of the caller's buffers
                                                  // (the `Segs` invariant: `skip` is less than the first segment's
                                                  // length), which stay borrowed for the duration of this call.
                                                  // For reads those borrows are exclusive, so the kernel may write
                                                  // them; for writes the kernel only reads them. `count` matches
                                                  // the array and the descriptor is open.
            let n = unsafe {
                match segs.dir {
                    Dir::Read => libc::preadv2(fd.as_raw_fd(), iov.as_ptr(), count, off, rw_flags),
                    Dir::Write => libc::pwritev2(fd.as_raw_fd(), iov.as_ptr(), count, off, rw_flags),
                }
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EINVAL) if direct => {
                        self.fall_back(fd)?;
                        continue;
                    }
                    _ => return Err(err),
                }
            }
            let n = n as usize; // n >= 0 here
            if n == 0 {
                match segs.dir {
                    Dir::Read => break,
                    Dir::Write => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
                }
            }
            let mut advance = n;
            // While direct, `done` is page aligned (pos and every segment are
            // whole pages), so a short transfer ending mid-page cannot be
            // resumed where it stopped.
            if direct && !(done + n).is_multiple_of(ps) {
                match segs.dir {
                    // An O_DIRECT read stops mid-page only at end of file.
                    Dir::Read => {
                        done += n;
                        break;
                    }
                    // Rewrite the partial page from its start next time.
                    Dir::Write => {
                        advance -= (done + n) % ps;
                        if advance == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::WriteZero,
                                "O_DIRECT write made no whole-page progress",
                            ));
                        }
                    }
                }
            }
            done += advance;
            let mut left = advance;
            while left > 0 {
                let rest = segs.iov[idx].iov_len - skip;
                if left >= rest {
                    left -= rest;
                    idx += 1;
                    skip = 0;
                } else {
                    skip += left;
                    left = 0;
                }
            }
        }
        Ok(done)
    }

    /// Write all of `bufs` at `pos` (no length handling).
    fn write_all_at(&self, fd: &CachedFd, pos: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(());
        }
        if self.is_direct() && !self.all_aligned(bufs.iter().map(|b| b.as_ptr())) {
            // O_DIRECT needs aligned memory: bounce through an aligned copy.
            let mut bounce = AlignedBuf::zeroed(total, self.page_size)?;
            let mut at = 0;
            for b in bufs {
                bounce[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
            let one: [&[u8]; 1] = [&bounce[..]];
            self.transfer(fd, pos, &Segs::for_write(&one))?;
        } else {
            self.transfer(fd, pos, &Segs::for_write(bufs))?;
        }
        self.advise_dontneed(fd, pos, total);
        Ok(())
    }

    /// Cut the file back to `limit` if a whole-page write made it longer.
    /// Cutting frees every block past `limit`, reservations included, so
    /// those are taken again at once: pages dirtied under them may still
    /// be waiting for writeback. The caller holds `size_lock` exclusively.
    fn trim_to(&self, fd: &CachedFd, limit: u64) -> io::Result<()> {
        if fd.file().metadata()?.len() > limit {
            fd.file().set_len(limit)?;
            let mut resv = self.resv.lock();
            let ps = self.page_size as u64;
            for (s, e) in resv.cut(limit.div_ceil(ps) * ps) {
                // Best effort: space someone else took in between is simply
                // no longer promised, and writeback reports ENOSPC.
                if self.fallocate(libc::FALLOC_FL_KEEP_SIZE, s, e - s).is_ok() {
                    resv.insert(s, e);
                }
            }
        }
        Ok(())
    }

    /// fallocate(2) on the device's descriptor, retried on EINTR.
    fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
        let off = file_offset(offset, 0)?;
        let count = libc::off_t::try_from(len).map_err(|_| invalid_input("range length out of range"))?;
        if off.checked_add(count).is_none() {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let fd = self.file()?;
        loop {
            // SAFETY: fallocate on a descriptor we hold open, with in-range
            // offsets; no memory is passed.
            let r = unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, count) };
            if r == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }

    /// Forget the whole pages of `[offset, offset + len)`: their blocks
    /// are being deallocated.
    fn forget_reserved(&self, offset: u64, len: u64) {
        let ps = self.page_size as u64;
        let (lo, hi) = (offset.div_ceil(ps) * ps, offset.saturating_add(len) / ps * ps);
        if lo >= hi {
            return;
        }
        let mut resv = self.resv.lock();
        let kept_above: Vec<(u64, u64)> = resv.cut(lo).into_iter().filter(|&(_, e)| e > hi).collect();
        for (s, e) in kept_above {
            resv.insert(s.max(hi), e);
        }
    }

    /// Give back the space reserved past the end of the file and never
    /// written (an appending writer's reservation ahead).
    fn release_reserved_tail(&self) {
        let Ok(len) = self.len() else { return };
        let ps = self.page_size as u64;
        let from = len.div_ceil(ps) * ps;
        let tail = self.resv.lock().cut(from);
        if tail.is_empty() {
            return;
        }
        let end = tail.iter().map(|&(_, e)| e).max().unwrap_or(from);
        // Punching moves the file's mtime on (ext4, XFS), but no byte of it
        // changed: its times are put back, so that times set on the file
        // since its last write (tar, cp -p, rsync) stay.
        let Ok(fd) = self.file() else { return };
        let before = fd.file().metadata();
        let _ = self.fallocate(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, from, end - from);
        if let Ok(m) = before {
            use std::os::unix::fs::MetadataExt as _;
            let ts = [
                libc::timespec { tv_sec: m.atime(), tv_nsec: m.atime_nsec() },
                libc::timespec { tv_sec: m.mtime(), tv_nsec: m.mtime_nsec() },
            ];
            // SAFETY: futimens on a descriptor we hold open, reading two
            // timespecs from our stack.
            let _ = unsafe { libc::futimens(fd.as_raw_fd(), ts.as_ptr()) };
        }
    }

    /// Write zeroes over `[offset, offset + len)`, not extending the file:
    /// the fallback for filesystems that cannot punch holes.
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let size = self.len()?;
        let end = offset.saturating_add(len).min(size);
        if offset >= end {
            return Ok(());
        }
        let ps = self.page_size;
        let ps64 = ps as u64;
        let mut buf = AlignedBuf::zeroed(ZERO_CHUNK_PAGES * ps, ps)?;
        let mut cur = offset;
        while cur < end {
            let page_start = cur - cur % ps64;
            if cur != page_start || end - page_start < ps64 {
                // Partial page: read, zero the part in range, write back.
                let lo = (cur - page_start) as usize;
                let hi = (end.min(page_start + ps64) - page_start) as usize;
                let page = &mut buf[..ps];
                let n = self.read_pages(page_start, &mut [&mut *page])?;
                page[n..].fill(0);
                page[lo..hi].fill(0);
                self.write_pages(page_start, &[&*page], size)?;
                page.fill(0);
                cur = page_start + hi as u64;
            } else {
                let pages = ((end - cur) / ps64).min(ZERO_CHUNK_PAGES as u64) as usize;
                self.write_pages(cur, &[&buf[..pages * ps]], size)?;
                cur += (pages * ps) as u64;
            }
        }
        Ok(())
    }
}

impl Drop for FileDev {
    fn drop(&mut self) {
        self.release_reserved_tail();
        // Close the cached descriptors now rather than when the cache next
        // needs room.
        self.fds.forget(self.fd_id);
        self.fds.forget(self.read_fd_id);
    }
}

impl BackingDev for FileDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn bdi_name(&self) -> String {
        self.bdi.clone()
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        if self.dontcache_reads() {
            match self.read_dontcache(pos, bufs) {
                Err(e) if dontcache_refused(&e) => {
                    // Refused after the probe passed (the file moved to a
                    // file system without it?): O_DIRECT from now on.
                    self.dontcache.store(false, Ordering::Release);
                    dontcache_notice(&self.name, &e);
                }
                res => return res,
            }
        }
        let fd = self.file()?;
        let direct = self.is_direct();
        if direct {
            self.check_direct_shape(pos, bufs.iter().map(|b| b.len()))?;
        }
        let n = if direct && !self.all_aligned(bufs.iter().map(|b| b.as_ptr())) {
            // O_DIRECT needs aligned memory: bounce through an aligned buffer.
            let mut bounce = AlignedBuf::zeroed(total, self.page_size)?;
            let n = {
                let mut one: [&mut [u8]; 1] = [&mut bounce[..]];
                self.transfer(&fd, pos, &Segs::for_read(&mut one))?
            };
            let mut src: &[u8] = &bounce[..n];
            for b in bufs.iter_mut() {
                let k = b.len().min(src.len());
                b[..k].copy_from_slice(&src[..k]);
                src = &src[k..];
            }
            n
        } else {
            self.transfer(&fd, pos, &Segs::for_read(bufs))?
        };
        self.advise_dontneed(&fd, pos, n);
        Ok(n)
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let fd = self.file()?;
        let end = pos.checked_add(total as u64).ok_or_else(|| invalid_input("write past the largest file offset"))?;
        let direct = self.is_direct();
        if direct {
            self.check_direct_shape(pos, bufs.iter().map(|b| b.len()))?;
        }
        if end <= file_size {
            let _shared = self.size_lock.read();
            self.write_all_at(&fd, pos, bufs)?;
            // Written blocks are allocated: no need to reserve them again.
            self.resv.lock().insert(pos, end);
            return Ok(());
        }
        if !direct {
            // Buffered: write only the bytes that are part of the file.
            let mut keep = file_size.saturating_sub(pos);
            let mut trimmed: Vec<&[u8]> = Vec::with_capacity(bufs.len());
            for b in bufs {
                if keep == 0 {
                    break;
                }
                let take = (b.len() as u64).min(keep) as usize;
                trimmed.push(&b[..take]);
                keep -= take as u64;
            }
            let _shared = self.size_lock.read();
            return self.write_all_at(&fd, pos, &trimmed);
        }
        // O_DIRECT writes the last page whole; cut the file back afterwards
        // to the longer of its logical size and its length before.
        let _exclusive = self.size_lock.write();
        let before = fd.file().metadata()?.len();
        let res = self.write_all_at(&fd, pos, bufs);
        // Even a failed write may have extended the file: trim regardless,
        // but report the write's own error first.
        let trim = self.trim_to(&fd, file_size.max(before));
        res.and(trim)
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        if data_only {
            self.file()?.file().sync_data()
        } else {
            self.file()?.file().sync_all()
        }
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file()?.file().metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let fd = self.file()?;
        let _exclusive = self.size_lock.write();
        fd.file().set_len(len)?;
        let ps = self.page_size as u64;
        // Truncation freed the blocks past the new end.
        self.resv.lock().cut(len.div_ceil(ps) * ps);
        Ok(())
    }

    /// Delayed allocation's promise: make sure the blocks under
    /// `[pos, pos + len)` are allocated (fallocate with KEEP_SIZE, which
    /// allocates holes and leaves allocated blocks alone), so that writeback
    /// of pages dirtied there cannot meet ENOSPC. An appending writer
    /// reserves ahead (as much again as its run so far, at most
    /// `RESV_AHEAD_MAX`), so it pays one system call per 16 MiB. Ranges
    /// reserved or written before are not asked for again.
    fn reserve(&self, pos: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let ps = self.page_size as u64;
        let start = pos - pos % ps;
        let end = pos
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(ps))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        // Shared: a tail write's cut-back (exclusive) cannot free what is
        // reserved here between the fallocate and its record.
        let _shared = self.size_lock.read();
        let mut resv = self.resv.lock();
        if resv.unsupported || resv.covers(start, end) {
            return Ok(());
        }
        let ahead = resv.run_ending_at(start).map_or(0, |run| run.clamp(ps, RESV_AHEAD_MAX));
        let mut res = self.fallocate(libc::FALLOC_FL_KEEP_SIZE, start, end - start + ahead);
        let mut got = end + ahead;
        if ahead > 0 && res.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::ENOSPC)) {
            // The run ahead does not fit; what was asked for may.
            res = self.fallocate(libc::FALLOC_FL_KEEP_SIZE, start, end - start);
            got = end;
        }
        match res {
            Ok(()) => {
                resv.insert(start, got);
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) => {
                resv.unsupported = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.forget_reserved(offset, len);
        let off = file_offset(offset, 0)?;
        let count = libc::off_t::try_from(len).map_err(|_| invalid_input("hole length out of range"))?;
        if off.checked_add(count).is_none() {
            return Err(invalid_input("hole end out of range"));
        }
        let fd = self.file()?;
        loop {
            // SAFETY: fallocate on a descriptor we hold open with in-range
            // offsets; no memory is passed.
            let r = unsafe {
                libc::fallocate(fd.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, count)
            };
            if r == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EOPNOTSUPP) => return self.zero_range(offset, len),
                _ => return Err(err),
            }
        }
    }

    fn remove(&self) -> io::Result<()> {
        // Unlinked, the file can only be reached through a descriptor
        // already open: keep one (open handles keep working, as POSIX
        // says). If it cannot be had, the file is unlinked all the same.
        let _ = self.pin();
        match self.reopen {
            Reopen::Path => std::fs::remove_file(&*self.path.lock()),
            // Names belong to whoever gave the opener.
            Reopen::With(_) => Ok(()),
        }
    }

    fn rename(&self, to: &Path) -> io::Result<()> {
        // Under the lock, so a concurrent remove unlinks one name or the
        // other, never a name the file no longer has.
        if let Reopen::With(_) = self.reopen {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        let mut path = self.path.lock();
        std::fs::rename(&*path, to)?;
        *path = to.to_path_buf();
        Ok(())
    }

    fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Acquire)
    }

    fn hold_open(&self) -> io::Result<()> {
        self.pin()
    }

    fn renamed(&self, from: &Path, to: &Path) {
        if let Reopen::With(_) = self.reopen {
            return;
        }
        let mut path = self.path.lock();
        // Follow the move if the device's own name was the one that moved,
        // however it was spelled: it no longer leads to this file.
        let still_ours = std::fs::metadata(&*path).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino()) == self.ident
        });
        if !still_ours {
            *path = to.to_path_buf();
        }
        let _ = from;
    }

    fn identity(&self) -> Option<(u64, u64)> {
        Some(self.ident)
    }

    fn queue_limits(&self) -> Option<QueueLimits> {
        self.limits
    }

    /// Only the plain O_DIRECT transfer, or a read with RWF_DONTCACHE on
    /// the buffered read descriptor: buffered mode must drop the host's
    /// copy afterwards, and a write reaching past `file_size` must cut the
    /// file back (both stay on `read_pages`/`write_pages`). A write
    /// holds the size lock shared until it completes, as `write_pages`
    /// does for its call, so no tail write's cut-back discards it. Written
    /// ranges are not recorded as reserved: that only saves a fallocate.
    fn async_io(&self, dir: IoDir, pos: u64, len: u64, file_size: u64) -> Option<AsyncIo> {
        let ps = self.page_size as u64;
        if !self.is_direct() || len == 0 || !pos.is_multiple_of(ps) || !len.is_multiple_of(ps) {
            return None;
        }
        let end = pos.checked_add(len)?;
        file_offset(end, 0).ok()?;
        if dir == IoDir::Read && self.dontcache_reads() {
            // A refusal comes back as the CQE's error, and the engine's
            // fix-up through `read_pages` then falls back to O_DIRECT.
            let fd = self.read_file().ok()?;
            return Some(AsyncIo { fd, hold: None, rw_flags: RWF_DONTCACHE });
        }
        // An error here is the synchronous path's to report.
        let fd = self.file().ok()?;
        let hold: Option<Box<dyn Send>> = match dir {
            IoDir::Read => None,
            IoDir::Write if end <= file_size => Some(Box::new(SharedSizeHold::new(&self.size_lock))),
            IoDir::Write => return None,
        };
        Some(AsyncIo { fd, hold, rw_flags: 0 })
    }
}

/// `size_lock` held shared by an asynchronous write, from submission to
/// completion, which may be on another thread (a guard cannot move
/// between threads, hence the forgotten guard).
struct SharedSizeHold(Arc<RwLock<()>>);

impl SharedSizeHold {
    fn new(lock: &Arc<RwLock<()>>) -> SharedSizeHold {
        std::mem::forget(lock.read());
        SharedSizeHold(lock.clone())
    }
}

impl Drop for SharedSizeHold {
    fn drop(&mut self) {
        // SAFETY: `new` took exactly one shared hold and forgot its guard;
        // this releases that one hold, once. parking_lot's raw RwLock keeps
        // no owner thread for shared holds (no deadlock_detection feature),
        // so releasing it from the completing thread is sound.
        unsafe { self.0.force_unlock_read() }
    }
}

/// The queue limits of the block device `st_dev` names, from sysfs (a
/// partition's are its disk's). None where sysfs says nothing (tmpfs,
/// overlay and network filesystems, containers without /sys).
pub fn host_queue_limits(st_dev: u64) -> Option<QueueLimits> {
    let base = format!("/sys/dev/block/{}:{}", libc::major(st_dev), libc::minor(st_dev));
    let read = |name: &str| {
        [format!("{base}/queue/{name}"), format!("{base}/../queue/{name}")]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    };
    Some(QueueLimits { read_ahead_kb: read("read_ahead_kb")?, max_sectors_kb: read("max_sectors_kb")? })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Read,
    Write,
}

/// An iovec array over borrowed buffers.
///
/// Invariant: every iovec describes one or more non-empty buffers borrowed
/// for `'a` that lie end to end in memory — exclusively when `dir` is
/// `Read` (the kernel writes them), shared when `Write` (the kernel only
/// reads them). Adjacent buffers share one iovec: a readahead window's or
/// a writeback run's frames are mostly adjacent in the arena, and the host
/// kernel pins and maps one iovec over a huge page in one step where it
/// walks 4 KiB pages one by one across separate iovecs.
struct Segs<'a> {
    dir: Dir,
    iov: Vec<libc::iovec>,
    total: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> Segs<'a> {
    fn for_read(bufs: &'a mut [&mut [u8]]) -> Segs<'a> {
        let iov = coalesce(bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())));
        let total = iov.iter().map(|v| v.iov_len).sum();
        Segs { dir: Dir::Read, iov, total, _borrow: PhantomData }
    }

    fn for_write(bufs: &'a [&[u8]]) -> Segs<'a> {
        // The kernel only reads through these pointers (pwritev).
        let iov = coalesce(bufs.iter().map(|b| (b.as_ptr().cast_mut(), b.len())));
        let total = iov.iter().map(|v| v.iov_len).sum();
        Segs { dir: Dir::Write, iov, total, _borrow: PhantomData }
    }
}

/// iovecs over `(start, len)` buffers in order, skipping empty ones, a
/// buffer that starts where the previous one ended extending its iovec.
fn coalesce(bufs: impl Iterator<Item = (*mut u8, usize)>) -> Vec<libc::iovec> {
    let mut iov: Vec<libc::iovec> = Vec::new();
    for (ptr, len) in bufs.filter(|&(_, len)| len > 0) {
        match iov.last_mut() {
            Some(last) if last.iov_base.cast::<u8>().wrapping_add(last.iov_len) == ptr => last.iov_len += len,
            _ => iov.push(libc::iovec { iov_base: ptr.cast(), iov_len: len }),
        }
    }
    iov
}

/// A zero-initialised heap buffer aligned for O_DIRECT, freed on drop.
struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

impl AlignedBuf {
    fn zeroed(len: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(align), align)
            .map_err(|_| invalid_input("bad buffer size or alignment"))?;
        // SAFETY: the layout's size is at least `align`, which is non-zero
        // (Layout::from_size_align checked it is a power of two).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(AlignedBuf { ptr, len, layout })
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to an allocation of `layout.size() >= len`
        // bytes, initialised by alloc_zeroed, owned by `self` and alive until
        // drop; the shared borrow of `self` rules out writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; the exclusive borrow of `self` makes this
        // the only access to the allocation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from alloc_zeroed with exactly `layout` and is
        // freed only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::MIN_OPEN_FDS;
    use std::sync::Arc;

    const PS: usize = 4096;

    fn page(fill: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(PS, PS).unwrap();
        b.fill(fill);
        b
    }

    fn pages(n: usize, seed: u8) -> Vec<AlignedBuf> {
        (0..n).map(|i| page(seed.wrapping_add(i as u8))).collect()
    }

    fn write(dev: &FileDev, pos: u64, bufs: &[AlignedBuf], file_size: u64) -> io::Result<()> {
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        dev.write_pages(pos, &refs, file_size)
    }

    /// Read `n` pages at `pos` into fresh buffers filled with 0xEE.
    fn read(dev: &FileDev, pos: u64, n: usize) -> (usize, Vec<AlignedBuf>) {
        let mut bufs: Vec<AlignedBuf> = (0..n).map(|_| page(0xEE)).collect();
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let got = dev.read_pages(pos, &mut refs).unwrap();
        (got, bufs)
    }

    fn open(dir: &Path, name: &str, direct: bool) -> FileDev {
        FileDev::open(&dir.join(name), true, true, direct, PS).unwrap()
    }

    fn has_o_direct(dev: &FileDev) -> bool {
        // SAFETY: F_GETFL on the device's open descriptor.
        let flags = unsafe { libc::fcntl(dev.file().unwrap().as_raw_fd(), libc::F_GETFL) };
        assert!(flags >= 0);
        flags & libc::O_DIRECT != 0
    }

    /// `open`, then reads switched to RWF_DONTCACHE; None (the caller
    /// skips, saying so) where the host refuses it.
    fn open_dontcache(dir: &Path, name: &str) -> Option<FileDev> {
        let dev = open(dir, name, true);
        if !dev.use_dontcache_reads() {
            eprintln!("skipped: RWF_DONTCACHE refused here");
            return None;
        }
        Some(dev)
    }

    #[test]
    fn dontcache_reads_return_the_bytes_and_leave_writes_direct() {
        let dir = tempfile::tempdir().unwrap();
        let Some(dev) = open_dontcache(dir.path(), "f") else { return };
        assert!(dev.dontcache_reads());
        // Written O_DIRECT, read buffered: 3.5 pages of file.
        let data = pages(4, 7);
        write(&dev, 0, &data, 3 * PS as u64 + 100).unwrap();
        assert!(has_o_direct(&dev), "writes left O_DIRECT");
        assert_eq!(dev.len().unwrap(), 3 * PS as u64 + 100);
        let (n, back) = read(&dev, 0, 4);
        assert_eq!(n, 3 * PS + 100, "a short read at end of file");
        for (i, (a, b)) in data.iter().zip(&back).enumerate().take(3) {
            assert!(a[..] == b[..], "page {i}");
        }
        assert!(back[3][..100] == data[3][..100], "the tail page's bytes");
        // Rewritten O_DIRECT after a buffered read: the new bytes come back.
        let newer = pages(1, 90);
        write(&dev, PS as u64, &newer, 3 * PS as u64 + 100).unwrap();
        let (n, back) = read(&dev, PS as u64, 1);
        assert_eq!(n, PS);
        assert!(back[0][..] == newer[0][..], "a stale page after an O_DIRECT write");
        // Unaligned memory needs no bounce on this path.
        let mut odd = vec![0u8; PS + 1];
        let got = dev.read_pages(0, &mut [&mut odd[1..]]).unwrap();
        assert_eq!(got, PS);
        assert!(odd[1..] == data[0][..]);
        assert!(dev.dontcache_reads());
    }

    // A refusal at I/O time (the probe passed) falls back to O_DIRECT for
    // good and still returns the file's bytes: the read descriptor is
    // swapped for one of /dev/zero, whose reads refuse RWF_DONTCACHE.
    #[test]
    fn dontcache_refusal_falls_back_to_direct() {
        let dir = tempfile::tempdir().unwrap();
        let Some(dev) = open_dontcache(dir.path(), "f") else { return };
        let data = pages(2, 40);
        write(&dev, 0, &data, 2 * PS as u64).unwrap();
        let zero = File::open("/dev/zero").unwrap();
        dev.fds.forget(dev.read_fd_id);
        dev.fds.insert(dev.read_fd_id, zero);
        let (n, back) = read(&dev, 0, 2);
        assert_eq!(n, 2 * PS);
        assert!(back[0][..] == data[0][..] && back[1][..] == data[1][..], "the fallback read other bytes");
        assert!(!dev.dontcache_reads(), "still reading with RWF_DONTCACHE after a refusal");
        assert!(dev.is_direct());
    }

    // The probe refuses where the host does: a device already buffered
    // (O_DIRECT not asked for) keeps its one descriptor.
    #[test]
    fn dontcache_only_beside_direct() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open(dir.path(), "f", false);
        assert!(!dev.use_dontcache_reads());
        assert!(!dev.dontcache_reads());
    }

    #[test]
    fn direct_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open(dir.path(), "f", true);
        assert!(dev.is_direct(), "/tmp should support O_DIRECT");
        assert!(has_o_direct(&dev));
        assert_eq!(dev.name(), dir.path().join("f").to_string_lossy());

        let data = pages(3, 1);
        write(&dev, PS as u64, &data, 4 * PS as u64).unwrap();
        assert_eq!(dev.len().unwrap(), 4 * PS as u64);
        let (n, back) = read(&dev, PS as u64, 3);
        assert_eq!(n, 3 * PS);
        for (a, b) in data.iter().zip(&back) {
            assert_eq!(&a[..], &b[..]);
        }
        // The hole before the data reads as zeroes.
        let (n, back) = read(&dev, 0, 1);
        assert_eq!(n, PS);
        assert!(back[0].iter().all(|&b| b == 0));
        dev.sync(true).unwrap();
        dev.sync(false).unwrap();
        assert!(dev.is_direct());
    }

    #[test]
    fn more_than_iov_max_pages() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "big", direct);
            let n = IOV_MAX + 77;
            let data = pages(n, 3);
            write(&dev, 0, &data, (n * PS) as u64).unwrap();
            let (got, back) = read(&dev, 0, n);
            assert_eq!(got, n * PS);
            for (i, (a, b)) in data.iter().zip(&back).enumerate() {
                assert_eq!(&a[..], &b[..], "page {i}");
            }
        }
    }

    #[test]
    fn adjacent_buffers_share_an_iovec() {
        let mut mem = AlignedBuf::zeroed(4 * PS, PS).unwrap();
        let base = mem.as_mut_ptr();
        // Pages 0, 1 and 3 of one buffer: 0 and 1 adjacent, 3 after a gap;
        // an empty buffer between them is skipped without breaking the run.
        let (a, rest) = mem.split_at_mut(PS);
        let (b, rest) = rest.split_at_mut(PS);
        let (_, d) = rest.split_at_mut(PS);
        let mut empty: [u8; 0] = [];
        let mut bufs: [&mut [u8]; 4] = [a, &mut empty, b, d];
        let segs = Segs::for_read(&mut bufs);
        assert_eq!(segs.total, 3 * PS);
        let runs: Vec<(usize, usize)> =
            segs.iov.iter().map(|v| (v.iov_base as usize - base as usize, v.iov_len)).collect();
        assert_eq!(runs, [(0, 2 * PS), (3 * PS, PS)]);
    }

    #[test]
    fn coalesced_transfers_round_trip_and_stop_at_eof() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "runs", direct);
            // Eight pages, written as slices of one buffer (one iovec),
            // the file ending 100 bytes into the seventh.
            let mut src = AlignedBuf::zeroed(8 * PS, PS).unwrap();
            for (i, b) in src.iter_mut().enumerate() {
                *b = (i / PS) as u8 + 1;
            }
            let size = 6 * PS as u64 + 100;
            {
                let parts: Vec<&[u8]> = src.chunks(PS).collect();
                dev.write_pages(0, &parts, size).unwrap();
            }
            let mut dst = AlignedBuf::zeroed(8 * PS, PS).unwrap();
            dst.fill(0xEE);
            let n = {
                let mut parts: Vec<&mut [u8]> = dst.chunks_mut(PS).collect();
                dev.read_pages(0, &mut parts).unwrap()
            };
            assert_eq!(n, 6 * PS + 100, "direct={direct}");
            assert_eq!(&dst[..n], &src[..n], "direct={direct}");
        }
    }

    #[test]
    fn short_read_at_eof() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "eof", direct);
            let size = 2 * PS as u64 + 100;
            let data = pages(3, 7);
            write(&dev, 0, &data, size).unwrap();
            assert_eq!(dev.len().unwrap(), size, "direct={direct}");

            let (n, back) = read(&dev, 0, 5);
            assert_eq!(n, 2 * PS + 100, "direct={direct}");
            assert_eq!(&back[0][..], &data[0][..]);
            assert_eq!(&back[1][..], &data[1][..]);
            assert_eq!(&back[2][..100], &data[2][..100]);
            // Buffered reads leave bytes past EOF alone; O_DIRECT may write
            // anything there (ext4 zero-fills). The caller zeroes them.
            if !direct {
                assert!(back[2][100..].iter().all(|&b| b == 0xEE));
                assert!(back[3].iter().all(|&b| b == 0xEE));
            }

            // Entirely past EOF.
            let (n, _) = read(&dev, 8 * PS as u64, 2);
            assert_eq!(n, 0);
        }
    }

    #[test]
    fn tail_write_does_not_extend_past_file_size() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "tail", direct);
            // Grow the file a page at a time as an appending writer would.
            write(&dev, 0, &pages(1, 1), 10).unwrap();
            assert_eq!(dev.len().unwrap(), 10, "direct={direct}");
            write(&dev, 0, &pages(1, 1), 3000).unwrap();
            assert_eq!(dev.len().unwrap(), 3000);
            write(&dev, PS as u64, &pages(2, 1), PS as u64 + 1).unwrap();
            assert_eq!(dev.len().unwrap(), PS as u64 + 1);

            // A file already longer than file_size keeps its length.
            dev.set_len(5 * PS as u64).unwrap();
            write(&dev, 0, &pages(1, 9), 100).unwrap();
            assert_eq!(dev.len().unwrap(), 5 * PS as u64);
            let (n, back) = read(&dev, 0, 1);
            assert_eq!(n, PS);
            assert!(back[0][..100].iter().all(|&b| b == 9));
        }
    }

    #[test]
    fn set_len_truncates_and_extends_with_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "len", direct);
            write(&dev, 0, &pages(2, 5), 2 * PS as u64).unwrap();
            dev.set_len(PS as u64 + 10).unwrap();
            assert_eq!(dev.len().unwrap(), PS as u64 + 10);
            let (n, _) = read(&dev, 0, 2);
            assert_eq!(n, PS + 10);
            dev.set_len(3 * PS as u64).unwrap();
            let (n, back) = read(&dev, PS as u64, 2);
            assert_eq!(n, 2 * PS);
            assert!(back[0][..10].iter().all(|&b| b == 6));
            assert!(back[0][10..].iter().all(|&b| b == 0));
            assert!(back[1].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn punch_hole_reads_back_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "hole", direct);
            write(&dev, 0, &pages(4, 1), 4 * PS as u64).unwrap();
            dev.punch_hole(PS as u64, 2 * PS as u64).unwrap();
            assert_eq!(dev.len().unwrap(), 4 * PS as u64);
            let (n, back) = read(&dev, 0, 4);
            assert_eq!(n, 4 * PS);
            assert!(back[0].iter().all(|&b| b == 1));
            assert!(back[1].iter().all(|&b| b == 0));
            assert!(back[2].iter().all(|&b| b == 0));
            assert!(back[3].iter().all(|&b| b == 4));
            // Punching past the end does not extend the file.
            dev.punch_hole(3 * PS as u64, 10 * PS as u64).unwrap();
            assert_eq!(dev.len().unwrap(), 4 * PS as u64);
            dev.punch_hole(0, 0).unwrap();
        }
    }

    #[test]
    fn zero_range_fallback_for_punch_hole() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [true, false] {
            let dev = open(dir.path(), "zero", direct);
            let n = ZERO_CHUNK_PAGES + 10;
            let size = (n * PS) as u64 - 1000;
            write(&dev, 0, &pages(n, 1), size).unwrap();
            // Unaligned at both ends, spanning more than one zero chunk.
            let (lo, hi) = (100u64, (n * PS) as u64 - 3000);
            dev.zero_range(lo, hi - lo).unwrap();
            assert_eq!(dev.len().unwrap(), size);
            let (got, back) = read(&dev, 0, n);
            assert_eq!(got as u64, size);
            for (i, p) in back.iter().enumerate() {
                for (j, &b) in p.iter().enumerate() {
                    let at = (i * PS + j) as u64;
                    if at >= size {
                        break;
                    }
                    let want = if (lo..hi).contains(&at) { 0 } else { (i + 1) as u8 };
                    assert_eq!(b, want, "byte {at} direct={direct}");
                }
            }
            // Past the end it writes nothing and does not extend.
            dev.zero_range(size + 5, 10 * PS as u64).unwrap();
            assert_eq!(dev.len().unwrap(), size);
        }
    }

    #[test]
    fn buffered_when_not_direct() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open(dir.path(), "buf", false);
        assert!(!dev.is_direct());
        assert!(!has_o_direct(&dev));
        assert!(!dev.dontneed.load(Ordering::Relaxed));
        // Buffered mode takes unaligned offsets and lengths.
        let data = [7u8; 300];
        dev.write_pages(10, &[&data[..]], 1000).unwrap();
        let mut out = [0u8; 400];
        assert_eq!(dev.read_pages(10, &mut [&mut out[..]]).unwrap(), 300);
        assert_eq!(&out[..300], &data[..]);
    }

    #[test]
    fn fallback_to_buffered_at_io_time() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open(dir.path(), "fb", true);
        assert!(dev.is_direct());
        write(&dev, 0, &pages(2, 1), 2 * PS as u64).unwrap();
        // What an EINVAL from preadv/pwritev does.
        dev.fall_back(&dev.file().unwrap()).unwrap();
        assert!(!dev.is_direct());
        assert!(!has_o_direct(&dev));
        assert!(dev.dontneed.load(Ordering::Relaxed));
        // Data written before is still there, and I/O keeps working.
        let (n, back) = read(&dev, 0, 3);
        assert_eq!(n, 2 * PS);
        assert!(back[1].iter().all(|&b| b == 2));
        write(&dev, 2 * PS as u64, &pages(1, 9), 2 * PS as u64 + 5).unwrap();
        assert_eq!(dev.len().unwrap(), 2 * PS as u64 + 5);
        let (n, back) = read(&dev, 2 * PS as u64, 1);
        assert_eq!(n, 5);
        assert!(back[0][..5].iter().all(|&b| b == 9));
        // Idempotent.
        dev.fall_back(&dev.file().unwrap()).unwrap();
        assert!(!dev.is_direct());
    }

    #[test]
    fn direct_rejects_unaligned_offsets_but_bounces_unaligned_memory() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open(dir.path(), "al", true);
        let p = page(3);
        let err = dev.write_pages(512, &[&p[..]], 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = dev.write_pages(0, &[&p[..100]], 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(dev.is_direct(), "a caller's mistake must not cost O_DIRECT");

        // Memory that is not page aligned goes through a bounce buffer.
        let mut raw = vec![0u8; 2 * PS + 1];
        raw[1..=PS].fill(4);
        raw[PS + 1..].fill(5);
        let (a, b) = raw[1..].split_at(PS);
        dev.write_pages(0, &[a, b], 2 * PS as u64).unwrap();
        let mut out = vec![0u8; 2 * PS + 1];
        let (x, y) = out[1..].split_at_mut(PS);
        assert_eq!(dev.read_pages(0, &mut [x, y]).unwrap(), 2 * PS);
        assert_eq!(&out[1..], &raw[1..]);
        assert!(dev.is_direct());
    }

    #[test]
    fn concurrent_disjoint_writes() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Arc::new(open(dir.path(), "mt", true));
        let threads = 8;
        let per = 16;
        let size = (threads * per * PS) as u64 - 7;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let dev = Arc::clone(&dev);
                std::thread::spawn(move || {
                    for i in 0..per {
                        let pg = t * per + i;
                        write(&dev, (pg * PS) as u64, &[page(pg as u8)], size).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(dev.len().unwrap(), size);
        let (n, back) = read(&dev, 0, threads * per);
        assert_eq!(n as u64, size);
        for (pg, p) in back.iter().enumerate().take(threads * per - 1) {
            assert!(p.iter().all(|&b| b == pg as u8), "page {pg}");
        }
    }

    #[test]
    fn reopens_after_eviction_and_refuses_another_inode() {
        let dir = tempfile::tempdir().unwrap();
        let fds = FdCache::new(MIN_OPEN_FDS);
        let dev = FileDev::open_in(&fds, &dir.path().join("a"), true, true, true, PS).unwrap();
        write(&dev, 0, &pages(1, 4), PS as u64).unwrap();
        // Other devices push a's descriptor out of the cache.
        let others: Vec<FileDev> = (0..MIN_OPEN_FDS)
            .map(|i| FileDev::open_in(&fds, &dir.path().join(format!("o{i}")), true, true, true, PS).unwrap())
            .collect();
        assert!(fds.nr_open() <= MIN_OPEN_FDS as u64);
        // Reopened by path, same inode: the data is there.
        let (n, back) = read(&dev, 0, 1);
        assert_eq!(n, PS);
        assert!(back[0].iter().all(|&b| b == 4));
        // Renamed: the device follows its new name.
        dev.rename(&dir.path().join("a2")).unwrap();
        fds.forget(dev.fd_id);
        assert_eq!(dev.len().unwrap(), PS as u64);
        // Another file now at its name: refused, never written.
        std::fs::write(dir.path().join("b"), b"other").unwrap();
        std::fs::rename(dir.path().join("b"), dir.path().join("a2")).unwrap();
        fds.forget(dev.fd_id);
        let err = dev.len().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESTALE));
        assert_eq!(std::fs::read(dir.path().join("a2")).unwrap(), b"other");
        drop(others);
        drop(dev);
        assert_eq!(fds.nr_open(), 0, "every descriptor closed with its device");
    }

    #[test]
    fn enospc_is_an_error_not_a_panic() {
        let path = Path::new("/dev/full");
        let Ok(dev) = FileDev::open(path, false, false, true, PS) else {
            return; // no /dev/full here
        };
        let p = page(1);
        let err = dev.write_pages(0, &[&p[..]], PS as u64).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn open_errors_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = FileDev::open(&missing, false, false, true, PS).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let err = FileDev::open(&missing, true, false, true, 3000).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

        let dev = open(dir.path(), "rm", true);
        write(&dev, 0, &pages(1, 1), PS as u64).unwrap();
        // Reopening without truncate keeps the data; with it, drops it.
        let again = FileDev::open(&dir.path().join("rm"), false, false, true, PS).unwrap();
        assert_eq!(again.len().unwrap(), PS as u64);
        let again = FileDev::open(&dir.path().join("rm"), false, true, false, PS).unwrap();
        assert_eq!(again.len().unwrap(), 0);
        dev.remove().unwrap();
        assert!(!dir.path().join("rm").exists());
        assert!(dev.remove().is_err());
    }
}

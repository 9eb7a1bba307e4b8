//! libpcache: the engine's C ABI (`libpcache.so`, `libpcache.a`, `include/pcache.h`).
//!
//! A C program builds a cache, opens files through it and reads and writes
//! them with `pread`/`pwrite`-like calls; pages can be pinned and files
//! mapped, as the Rust API (`pcache::PageCache`, `File`, `Mapping`) allows.
//! The header `crates/capi/include/pcache.h` is generated from this file by
//! cbindgen (config: `crates/capi/cbindgen.toml`) and checked in; the test
//! `header` fails when it is stale (`PCACHE_BLESS=1 cargo test -p
//! pcache-capi header` rewrites it). `crates/capi/install.sh PREFIX`
//! installs the libraries, the header and `pcache.pc`.
//!
//! # Conventions (liburing's)
//!
//! - Functions that return `int`, `ssize_t` or `int64_t` return a value
//!   `>= 0` on success and `-errno` on failure. Functions that return a
//!   handle return NULL on failure and store `-errno` in `*err` (0 on
//!   success); `err` may be NULL.
//! - Handles are opaque pointers: `pcache_t`, `pcache_file_t`,
//!   `pcache_page_t` (a read pin's snapshot), `pcache_page_mut_t` (a write
//!   pin) and `pcache_map_t` (a mapping).
//! - No Rust panic crosses the boundary: every entry point runs inside
//!   `catch_unwind`, and a panic becomes `-EIO` (or NULL with `*err =
//!   -EIO`, or NULL for `pcache_vmstat`).
//! - The engine's errors map to errnos in one function (`errno_of`): the
//!   engine's own `Error::errno`, except that a shutdown that left dirty
//!   data unwritten is `-EIO`. Bad input: a NULL handle is `-EINVAL`, a
//!   NULL buffer, string or output pointer `-EFAULT`; an offset or length
//!   above `INT64_MAX`, or an offset plus length above it, `-EINVAL`
//!   (pread(2)'s negative `off_t`); a range past the largest file size
//!   `-EFBIG` for writes and truncation, end of file for reads (a short
//!   transfer where part of it fits, as Linux's `s_maxbytes`); a full disk
//!   `-ENOSPC` at the write that needs the space; a write through a handle
//!   opened `O_RDONLY` `-EBADF`, as write(2).
//!
//! # File handles and their lifetime
//!
//! A use after close must give `-EBADF`, never undefined behaviour, yet a
//! freed pointer cannot be checked. So `pcache_file_t` objects are never
//! freed before `pcache_free`: `pcache_close` marks the handle closed
//! (every later call on it returns `-EBADF`) and puts it at the back of the
//! cache's queue of closed handles. `pcache_open` reuses the oldest closed
//! handle only when more than 1024 are queued, and allocates a new one
//! otherwise. Memory stays bounded (the most handles ever open at once plus
//! 1024), and a stale pointer gives `-EBADF` until 1024 later closes have
//! gone by; after that it may name a newer open file, as a stale file
//! descriptor number does. `pcache_free` frees every handle of the cache:
//! no pointer from it may be used afterwards.
//!
//! A call that races with `pcache_close` of the same handle either runs on
//! the file (as a syscall in flight during close(2)) or returns `-EBADF`.
//!
//! # Pins and mappings
//!
//! The engine never lends a frame's bytes as a slice: other threads may
//! write a page at any time (under a sequence count), so a plain C load of
//! a frame could race with a store, which Rust counts as undefined
//! behaviour. The C side therefore works on copies, which the handle owns:
//!
//! - `pcache_find_page` / `pcache_get_page` take a read pin (the engine's
//!   `find_page`/`get_page`), copy the page (one consistent state of it),
//!   drop the pin and return a `pcache_page_t` whose `pcache_page_data`
//!   stays valid and unchanging until `pcache_page_put`. The handle may be
//!   put on any thread.
//! - `pcache_get_page_mut` takes a write pin (the engine's `get_page_mut`:
//!   the page locked, stable, space reserved) and keeps it until
//!   `pcache_page_mut_put`; `pcache_page_mut_data` is a copy of the page
//!   that the caller may change, and the put writes the changed bytes back
//!   in one write section, then unpins (dirty, i_size grown to what
//!   `pcache_page_mut_extend_to` asked). A write pin is a page lock held
//!   by the thread that took it: it must be put on that thread (elsewhere
//!   the put returns `-EPERM` and changes nothing), and while a thread
//!   holds one, its calls that could wait for that page's lock on the same
//!   file (pread, pwrite, fsync, ftruncate, fadvise, `pcache_get_page`,
//!   a second `pcache_get_page_mut`, mapping accesses) return `-EDEADLK`
//!   instead of hanging.
//! - `pcache_map` maps a file range (the engine's `File::map`): loads and
//!   copies through the mapping's software page table. The mapping keeps
//!   the file open after `pcache_close`, as mmap(2) does, until
//!   `pcache_unmap`.
//!
//! Pins and mappings keep the cache alive: release them before
//! `pcache_free` (after it they are still valid, and their memory goes when
//! the last is released).

// Every entry point is an `unsafe extern "C" fn`: its pointer arguments are
// the caller's promise. The promises are in each function's documentation,
// which the header carries, rather than under a `# Safety` heading.
#![allow(clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::mem::ManuallyDrop;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use engine::{Advice, Config, Error, File, MapFlags, Mapping, OpenOptions, PageCache, PageMut};
use libc::{size_t, ssize_t};
use parking_lot::{Mutex, RwLock};

/// Closed file handles queued before the oldest is reused.
const QUARANTINE: usize = 1024;
/// The most one read or write transfers, as Linux's MAX_RW_COUNT.
const MAX_RW_COUNT: usize = 0x7fff_f000;
/// The largest offset or end of a range: off_t's range.
const MAX_OFF: u64 = i64::MAX as u64;

/// A positive errno on failure.
type CResult<T> = Result<T, c_int>;

/// The errno of an engine error: the engine's own, except that a shutdown
/// that could not write some dirty data back is EIO (whatever the devices
/// said), as `pcache_shutdown` documents.
fn errno_of(e: &Error) -> c_int {
    let n = match e {
        Error::Unwritten { .. } => libc::EIO,
        e => e.errno(),
    };
    if n > 0 {
        n
    } else {
        libc::EIO
    }
}

fn eng<T>(r: engine::Result<T>) -> CResult<T> {
    r.map_err(|e| errno_of(&e))
}

/// Run an entry point returning `int`: a value, `-errno`, or `-EIO` for a
/// panic.
fn ffi_int(f: impl FnOnce() -> CResult<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -e,
        Err(_) => -libc::EIO,
    }
}

/// As `ffi_int` for 64-bit results.
fn ffi_i64(f: impl FnOnce() -> CResult<i64>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -i64::from(e),
        Err(_) => -i64::from(libc::EIO),
    }
}

/// As `ffi_int` for byte counts (at most MAX_RW_COUNT, so they fit).
fn ffi_ssize(f: impl FnOnce() -> CResult<usize>) -> ssize_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v as ssize_t,
        Ok(Err(e)) => -(e as ssize_t),
        Err(_) => -(libc::EIO as ssize_t),
    }
}

/// A handle-returning entry point's outcome: the handle, or NULL and a
/// positive errno.
struct PtrResult<T>(*mut T, c_int);

/// Run an entry point returning a handle: the handle, or NULL and the
/// errno (`EIO` for a panic). `report` hands it to the caller.
fn ffi_ptr<T>(f: impl FnOnce() -> CResult<*mut T>) -> PtrResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => PtrResult(p, 0),
        Ok(Err(e)) => PtrResult(std::ptr::null_mut(), e),
        Err(_) => PtrResult(std::ptr::null_mut(), libc::EIO),
    }
}

impl<T> PtrResult<T> {
    /// The handle, with `*err` set to 0 or `-errno`.
    ///
    /// # Safety
    /// `err` is NULL or valid for a write of an int.
    unsafe fn report(self, err: *mut c_int) -> *mut T {
        if !err.is_null() {
            // SAFETY: not NULL, so the caller's int (this function's contract).
            unsafe { err.write(-self.1) };
        }
        self.0
    }
}

/// A C string argument; EFAULT for NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn c_str<'a>(s: *const c_char) -> CResult<&'a CStr> {
    if s.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: not NULL, so a NUL-terminated string (the contract).
    Ok(unsafe { CStr::from_ptr(s) })
}

/// A C string argument that must be UTF-8 (EINVAL otherwise).
///
/// # Safety
/// As `c_str`.
unsafe fn c_utf8<'a>(s: *const c_char) -> CResult<&'a str> {
    // SAFETY: the contract, passed on.
    unsafe { c_str(s) }?.to_str().map_err(|_| libc::EINVAL)
}

/// Distinguishes caches in the per-thread record of write pins.
static NEXT_CACHE_ID: AtomicUsize = AtomicUsize::new(1);

/// `pcache_t`: a page cache and the table of its file handles.
pub struct Cache {
    /// Dropped first: the handles' files, then the cache handle.
    table: Arc<Table>,
    cache: PageCache,
    id: usize,
}

/// The file handles of one cache, all of them until `pcache_free`.
struct Table {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// Every handle ever allocated (those reused are here once).
    all: Vec<Arc<FileHandle>>,
    /// Closed handles, oldest first.
    closed: VecDeque<Arc<FileHandle>>,
}

/// `pcache_file_t`: an open file, or a closed handle (EBADF).
pub struct FileHandle {
    table: Weak<Table>,
    state: RwLock<Option<Open>>,
}

/// What an open handle holds.
#[derive(Clone)]
struct Open {
    file: Arc<File>,
    read: bool,
    write: bool,
    key: PinKey,
}

/// The file a write pin locks a page of: its cache and the engine's name
/// of the inode (one name per cached file, whichever path opened it).
#[derive(Clone, PartialEq, Eq)]
struct PinKey {
    cache: usize,
    name: Arc<str>,
}

thread_local! {
    /// The files this thread holds write pins of.
    static HELD: RefCell<Vec<PinKey>> = const { RefCell::new(Vec::new()) };
}

/// EDEADLK if this thread holds a write pin of `key`'s file: the call
/// could wait for that page's lock, which only this thread can release.
fn no_write_pin(key: &PinKey) -> CResult<()> {
    let held = HELD.with(|h| {
        let h = h.borrow();
        !h.is_empty() && h.contains(key)
    });
    if held {
        Err(libc::EDEADLK)
    } else {
        Ok(())
    }
}

impl Table {
    /// A handle for `open`: the oldest closed one once more than
    /// QUARANTINE wait, else a new one.
    fn install(self: &Arc<Table>, open: Open) -> *mut FileHandle {
        let mut s = self.slots.lock();
        let reused = if s.closed.len() > QUARANTINE { s.closed.pop_front() } else { None };
        let h = reused.unwrap_or_else(|| {
            let h = Arc::new(FileHandle { table: Arc::downgrade(self), state: RwLock::new(None) });
            s.all.push(h.clone());
            h
        });
        *h.state.write() = Some(open);
        Arc::as_ptr(&h).cast_mut()
    }
}

impl FileHandle {
    fn get(&self) -> CResult<Open> {
        self.state.read().clone().ok_or(libc::EBADF)
    }
}

/// The cache behind a `pcache_t` pointer; EINVAL for NULL.
///
/// # Safety
/// `c` is NULL or from `pcache_new` and not yet freed.
unsafe fn cache_ref<'a>(c: *const Cache) -> CResult<&'a Cache> {
    // SAFETY: NULL or live (the contract).
    unsafe { c.as_ref() }.ok_or(libc::EINVAL)
}

/// The handle behind a `pcache_file_t` pointer; EINVAL for NULL.
///
/// # Safety
/// `f` is NULL or from `pcache_open` of a cache not yet freed.
unsafe fn file_ref<'a>(f: *const FileHandle) -> CResult<&'a FileHandle> {
    // SAFETY: NULL or alive: the cache's table holds it until pcache_free.
    unsafe { f.as_ref() }.ok_or(libc::EINVAL)
}

/// The open file behind `f`: EINVAL for NULL, EBADF once closed.
///
/// # Safety
/// As `file_ref`.
unsafe fn open_of(f: *const FileHandle) -> CResult<Open> {
    // SAFETY: the contract, passed on.
    unsafe { file_ref(f) }?.get()
}

/// Check a read or write of `count` bytes at `offset` as rw_verify_area
/// does: EINVAL for a count above SSIZE_MAX (a negative size), an offset
/// or end past off_t, EFAULT for a NULL buffer. The count is clamped to
/// MAX_RW_COUNT.
fn check_rw(null_buf: bool, count: usize, offset: u64) -> CResult<usize> {
    if count > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    let count = count.min(MAX_RW_COUNT);
    if offset > MAX_OFF || offset + count as u64 > MAX_OFF {
        return Err(libc::EINVAL);
    }
    if null_buf && count > 0 {
        return Err(libc::EFAULT);
    }
    Ok(count)
}

/// A caller's buffer of `len` bytes, for a call that moves exactly `len`:
/// EINVAL above SSIZE_MAX (a negative size), EFAULT for NULL with `len` > 0.
fn check_buf(null_buf: bool, len: usize) -> CResult<()> {
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    if null_buf && len > 0 {
        return Err(libc::EFAULT);
    }
    Ok(())
}

/// Create a page cache of `memory_bytes` bytes of page frames (at least 16
/// pages; the arena is allocated now) with the engine's default tunables,
/// and start its background threads.
///
/// Returns the cache, or NULL with `*err` set to `-EINVAL` (a size out of
/// range), `-ENOMEM` or another `-errno`. `err` may be NULL.
/// The caller owns the cache: `pcache_shutdown` (optional) then
/// `pcache_free`.
#[no_mangle]
pub unsafe extern "C" fn pcache_new(memory_bytes: u64, err: *mut c_int) -> *mut Cache {
    let r = ffi_ptr(|| {
        let cache = eng(PageCache::new(Config::with_memory(memory_bytes)))?;
        let id = NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed);
        let table = Arc::new(Table { slots: Mutex::new(Slots::default()) });
        Ok(Box::into_raw(Box::new(Cache { table, cache, id })))
    });
    // SAFETY: `err` is NULL or the caller's int (documented above).
    unsafe { r.report(err) }
}

/// Shut the cache down: write back every dirty page and wait, stop the
/// background threads, and make later writes fail with `-ESHUTDOWN`.
///
/// Returns 0, or `-EIO` if some dirty data could not be written back (a
/// device error or a full disk): `pcache_unwritten` names the files; that
/// data is lost when the cache is freed. `-EINVAL` for NULL. Frees nothing: call `pcache_free` after.
#[no_mangle]
pub unsafe extern "C" fn pcache_shutdown(cache: *mut Cache) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        eng(c.cache.shutdown())?;
        Ok(0)
    })
}

/// Free the cache and every file handle it returned (open ones are
/// closed); dirty data is written back first, as far as it can be (call
/// `pcache_shutdown` first to learn whether all of it was). NULL is
/// ignored. No pointer to the cache or its file handles may be used after,
/// and no call on them may be running. Pins and mappings not yet released
/// stay valid and keep the cache's memory until they are.
#[no_mangle]
pub unsafe extern "C" fn pcache_free(cache: *mut Cache) {
    if cache.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: from Box::into_raw in pcache_new, freed once (documented).
        drop(unsafe { Box::from_raw(cache) });
    }));
}

/// The cache's page size in bytes (4096), or `-EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_size(cache: *const Cache) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        c_int::try_from(c.cache.page_size()).map_err(|_| libc::EOVERFLOW)
    })
}

/// Open a host file through the cache. `open_flags`: one of `O_RDONLY`,
/// `O_WRONLY`, `O_RDWR`, with any of `O_CREAT`, `O_TRUNC`, `O_EXCL` (with
/// `O_CREAT`: `-EEXIST` if the file exists); any other flag is `-EINVAL`.
/// Files are cached by identity: every path and link to one file shares
/// one cached copy.
///
/// Returns the handle, or NULL with `*err` set to `-errno` (`-ENOENT`,
/// `-EACCES`, `-EEXIST`, `-EINVAL`, `-EFAULT` for a NULL path, ...).
/// `err` may be NULL. The handle belongs to the cache: `pcache_close` it;
/// its memory is the cache's until `pcache_free` (see the module docs:
/// a closed handle returns `-EBADF`).
#[no_mangle]
pub unsafe extern "C" fn pcache_open(
    cache: *mut Cache,
    path: *const c_char,
    open_flags: c_int,
    err: *mut c_int,
) -> *mut FileHandle {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: NULL or a C string (documented).
        let path = Path::new(OsStr::from_bytes(unsafe { c_str(path) }?.to_bytes()));
        let known = libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL;
        if open_flags & !known != 0 {
            return Err(libc::EINVAL);
        }
        let (read, write) = match open_flags & libc::O_ACCMODE {
            libc::O_RDONLY => (true, false),
            libc::O_WRONLY => (false, true),
            libc::O_RDWR => (true, true),
            _ => return Err(libc::EINVAL),
        };
        let create = open_flags & libc::O_CREAT != 0;
        let excl = create && open_flags & libc::O_EXCL != 0;
        if excl {
            // The host's O_CREAT|O_EXCL decides; the cache then opens
            // the file it made.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        }
        let opts = OpenOptions { create: create && !excl, truncate: open_flags & libc::O_TRUNC != 0, direct: true };
        let file = eng(c.cache.open(path, opts))?;
        let key = PinKey { cache: c.id, name: Arc::from(file.name()) };
        Ok(c.table.install(Open { file: Arc::new(file), read, write, key }))
    });
    // SAFETY: `err` is NULL or the caller's int (documented).
    unsafe { r.report(err) }
}

/// Read up to `count` bytes at `offset` into `buf`, as pread(2).
///
/// Returns the bytes read (fewer at end of file, 0 at or past it; at most
/// 0x7ffff000 in one call, as Linux), or `-EBADF` (closed, or opened
/// `O_WRONLY`), `-EINVAL` (NULL handle; `count` above `SSIZE_MAX`;
/// `offset` or `offset + count` above `INT64_MAX`), `-EFAULT` (NULL `buf`
/// with `count` > 0), `-EDEADLK` (this thread holds a write pin of the
/// file), `-EIO`, ... `buf` must be valid for writes of `count` bytes; the
/// caller keeps it.
#[no_mangle]
pub unsafe extern "C" fn pcache_pread(f: *mut FileHandle, buf: *mut c_void, count: size_t, offset: u64) -> ssize_t {
    ffi_ssize(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.read {
            return Err(libc::EBADF);
        }
        let count = check_rw(buf.is_null(), count, offset)?;
        if count == 0 {
            return Ok(0);
        }
        no_write_pin(&open.key)?;
        // SAFETY: `buf` is not NULL and valid for writes of the caller's
        // count (documented), of which `count` is a prefix.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), count) };
        match open.file.read_at(buf, offset) {
            // Past the largest file: end of file, or up to it.
            Err(Error::Overflow { max, .. }) if offset >= max => Ok(0),
            Err(Error::Overflow { max, .. }) => eng(open.file.read_at(&mut buf[..(max - offset) as usize], offset)),
            r => eng(r),
        }
    })
}

/// Write `count` bytes of `buf` at `offset`, as pwrite(2), extending the
/// file as needed.
///
/// Returns the bytes written (fewer where the largest file size cuts the
/// write short; at most 0x7ffff000 in one call, as Linux), or `-EBADF`
/// (closed, or opened `O_RDONLY`), `-EINVAL` (NULL handle; `count` above
/// `SSIZE_MAX`; `offset` or `offset + count` above `INT64_MAX`), `-EFAULT` (NULL `buf` with `count` > 0), `-EFBIG`
/// (`offset` at or past the largest file size), `-ENOSPC` (no space for
/// the data on the backing file system), `-EDEADLK`, `-ESHUTDOWN`, ...
/// `buf` must be valid for reads of `count` bytes; the caller keeps it.
#[no_mangle]
pub unsafe extern "C" fn pcache_pwrite(f: *mut FileHandle, buf: *const c_void, count: size_t, offset: u64) -> ssize_t {
    ffi_ssize(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.write {
            return Err(libc::EBADF);
        }
        let count = check_rw(buf.is_null(), count, offset)?;
        if count == 0 {
            return Ok(0);
        }
        no_write_pin(&open.key)?;
        // SAFETY: `buf` is not NULL and valid for reads of the caller's
        // count (documented), of which `count` is a prefix.
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) };
        match open.file.write_at(buf, offset) {
            Err(Error::Overflow { max, .. }) if offset >= max => Err(libc::EFBIG),
            Err(Error::Overflow { max, .. }) => eng(open.file.write_at(&buf[..(max - offset) as usize], offset)),
            r => eng(r),
        }
    })
}

/// Write the file's dirty pages back, wait, and flush the device, as
/// fsync(2). Returns 0, or a writeback error this handle has not reported
/// yet (`-EIO`, `-ENOSPC`, ...; each once), `-EBADF`, `-EINVAL` (NULL),
/// `-EDEADLK`.
#[no_mangle]
pub unsafe extern "C" fn pcache_fsync(f: *mut FileHandle) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        no_write_pin(&open.key)?;
        eng(open.file.fsync())?;
        Ok(0)
    })
}

/// Truncate or extend the file to `length` bytes, as ftruncate(2).
/// Returns 0, or `-EBADF` (closed), `-EINVAL` (NULL; not opened for
/// writing; `length` above `INT64_MAX`), `-EFBIG` (past the largest file
/// size), `-EDEADLK`, ...
#[no_mangle]
pub unsafe extern "C" fn pcache_ftruncate(f: *mut FileHandle, length: u64) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.write || length > MAX_OFF {
            return Err(libc::EINVAL);
        }
        no_write_pin(&open.key)?;
        eng(open.file.set_len(length))?;
        Ok(0)
    })
}

/// The file's size in bytes (dirty data included), or `-EBADF`,
/// `-EINVAL` (NULL).
#[no_mangle]
pub unsafe extern "C" fn pcache_size(f: *mut FileHandle) -> i64 {
    ffi_i64(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        let len = eng(open.file.len())?;
        i64::try_from(len).map_err(|_| libc::EOVERFLOW)
    })
}

/// posix_fadvise(2) on `[offset, offset + len)` (`len` 0: to the end of
/// the file; a range past the largest file size reaches to the end).
/// `advice`: `POSIX_FADV_NORMAL`, `_SEQUENTIAL`, `_RANDOM`, `_NOREUSE`,
/// `_WILLNEED`, `_DONTNEED`. Returns 0, or `-EINVAL` (NULL; another
/// advice; `offset` or `len` above `INT64_MAX`), `-EBADF`, `-EDEADLK`.
#[no_mangle]
pub unsafe extern "C" fn pcache_fadvise(f: *mut FileHandle, offset: u64, len: u64, advice: c_int) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        let advice = match advice {
            libc::POSIX_FADV_NORMAL => Advice::Normal,
            libc::POSIX_FADV_SEQUENTIAL => Advice::Sequential,
            libc::POSIX_FADV_RANDOM => Advice::Random,
            libc::POSIX_FADV_NOREUSE => Advice::NoReuse,
            libc::POSIX_FADV_WILLNEED => Advice::WillNeed,
            libc::POSIX_FADV_DONTNEED => Advice::DontNeed,
            _ => return Err(libc::EINVAL),
        };
        if offset > MAX_OFF || len > MAX_OFF {
            return Err(libc::EINVAL);
        }
        no_write_pin(&open.key)?;
        match open.file.fadvise(offset, len, advice) {
            // As mm/fadvise.c: a range that overflows reaches to the end.
            Err(Error::Overflow { .. }) => eng(open.file.fadvise(offset, 0, advice))?,
            r => eng(r)?,
        }
        Ok(0)
    })
}

/// Close the handle. Dirty pages stay cached and are written back as
/// usual. Returns 0, or a writeback error this handle had not reported
/// (the handle is closed all the same), `-EBADF` (closed already),
/// `-EINVAL` (NULL). The pointer stays valid, every call on it returning
/// `-EBADF`, until at least 1024 later closes or `pcache_free`.
#[no_mangle]
pub unsafe extern "C" fn pcache_close(f: *mut FileHandle) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let h = unsafe { file_ref(f) }?;
        let open = h.state.write().take().ok_or(libc::EBADF)?;
        let res = eng(open.file.close());
        if let Some(table) = h.table.upgrade() {
            // SAFETY: `f` came from Arc::as_ptr of a handle the table
            // holds (alive: `h` was just read); the new strong count is
            // the queue's.
            let arc = unsafe {
                Arc::increment_strong_count(f.cast_const());
                Arc::from_raw(f.cast_const())
            };
            table.slots.lock().closed.push_back(arc);
        }
        res.map(|()| 0)
    })
}

/// Set a run-time tunable (a `/proc/sys/vm` name, e.g. "dirty_ratio", or
/// "read_ahead_kb") from text. Returns 0, or `-ENOENT` (no such tunable),
/// `-EINVAL` (NULL cache; a bad value, or a name or value that is not
/// UTF-8), `-EFAULT` (NULL name or value). The strings stay the caller's.
#[no_mangle]
pub unsafe extern "C" fn pcache_sysctl_set(cache: *mut Cache, name: *const c_char, value: *const c_char) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: NULL or C strings (documented).
        let (name, value) = unsafe { (c_utf8(name)?, c_utf8(value)?) };
        eng(c.cache.sysctl_write(name, value))?;
        Ok(0)
    })
}

/// Every counter, as /proc/vmstat prints them ("name value" lines). The
/// caller owns the string: free it with `pcache_string_free`. NULL for a
/// NULL cache or on failure.
#[no_mangle]
pub unsafe extern "C" fn pcache_vmstat(cache: *mut Cache) -> *mut c_char {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        let text = CString::new(c.cache.vmstat().to_text()).map_err(|_| libc::EIO)?;
        Ok(text.into_raw())
    });
    // SAFETY: no error pointer.
    unsafe { r.report(std::ptr::null_mut()) }
}

/// The files holding dirty data now, one line each: "NAME PAGES ERRNO"
/// (the dirty pages, and the last writeback error's errno, 0 if none).
/// After a `pcache_shutdown` that returned `-EIO` these are the files
/// whose data could not be written; empty when nothing is dirty. The
/// caller owns the string: free it with `pcache_string_free`. NULL for a
/// NULL cache or on failure.
#[no_mangle]
pub unsafe extern "C" fn pcache_unwritten(cache: *mut Cache) -> *mut c_char {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_new, not freed (documented).
        let c = unsafe { cache_ref(cache) }?;
        let mut text = String::new();
        for f in c.cache.unwritten_files() {
            text.push_str(&format!("{} {} {}\n", f.name, f.pages, f.errno));
        }
        // A name with a NUL byte cannot be a C string.
        let text = CString::new(text).map_err(|_| libc::EINVAL)?;
        Ok(text.into_raw())
    });
    // SAFETY: no error pointer.
    unsafe { r.report(std::ptr::null_mut()) }
}

/// Free a string from `pcache_vmstat` or `pcache_unwritten`. NULL is
/// ignored.
#[no_mangle]
pub unsafe extern "C" fn pcache_string_free(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: from CString::into_raw in pcache_vmstat or
        // pcache_unwritten, freed once (documented).
        drop(unsafe { CString::from_raw(s) });
    }));
}

/// `pcache_page_t`: a copy of a page made under a read pin.
pub struct PageSnapshot {
    data: Box<[u8]>,
}

/// Pin the page at `index` if it is cached and uptodate (the engine's
/// `find_page`, the hit path: no I/O), copy it, and unpin it.
///
/// Returns the copy, or NULL with `*err` set to `-ENODATA` (not cached),
/// `-EBADF` (closed, or opened `O_WRONLY`), `-EINVAL` (NULL). `err` may be
/// NULL. The caller owns the copy: `pcache_page_data` is valid, and does
/// not change, until `pcache_page_put`, on any thread.
#[no_mangle]
pub unsafe extern "C" fn pcache_find_page(f: *mut FileHandle, index: u64, err: *mut c_int) -> *mut PageSnapshot {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.read {
            return Err(libc::EBADF);
        }
        let page = eng(open.file.find_page(index))?.ok_or(libc::ENODATA)?;
        Ok(Box::into_raw(Box::new(PageSnapshot { data: page.to_vec().into_boxed_slice() })))
    });
    // SAFETY: `err` is NULL or the caller's int (documented).
    unsafe { r.report(err) }
}

/// As `pcache_find_page`, reading the page in if it is not cached (the
/// engine's `get_page`). `-EINVAL` for a page past the end of the file;
/// `-EIO` and others from the device; `-EDEADLK`.
#[no_mangle]
pub unsafe extern "C" fn pcache_get_page(f: *mut FileHandle, index: u64, err: *mut c_int) -> *mut PageSnapshot {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.read {
            return Err(libc::EBADF);
        }
        no_write_pin(&open.key)?;
        let page = eng(open.file.get_page(index))?;
        Ok(Box::into_raw(Box::new(PageSnapshot { data: page.to_vec().into_boxed_slice() })))
    });
    // SAFETY: `err` is NULL or the caller's int (documented).
    unsafe { r.report(err) }
}

/// The bytes of a page copy (`pcache_page_len` of them), valid until
/// `pcache_page_put`; NULL for NULL.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_data(p: *const PageSnapshot) -> *const c_void {
    // SAFETY: NULL or from pcache_find_page/pcache_get_page, not yet put
    // (documented).
    match unsafe { p.as_ref() } {
        Some(p) => p.data.as_ptr().cast(),
        None => std::ptr::null(),
    }
}

/// The length of a page copy in bytes (the page size); 0 for NULL.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_len(p: *const PageSnapshot) -> size_t {
    // SAFETY: NULL or from pcache_find_page/pcache_get_page, not yet put
    // (documented).
    unsafe { p.as_ref() }.map_or(0, |p| p.data.len())
}

/// Release a page copy; its data pointer is invalid after. NULL is
/// ignored.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_put(p: *mut PageSnapshot) {
    if p.is_null() {
        return;
    }
    // SAFETY: from Box::into_raw in pcache_find_page/pcache_get_page, put
    // once (documented). Dropping a byte buffer cannot panic.
    drop(unsafe { Box::from_raw(p) });
}

/// `pcache_page_mut_t`: a write pin (the page locked) and the caller's
/// copy of the page.
pub struct PageMutPin {
    /// Borrows `*file`: dropped first, by hand (`Drop`).
    pin: ManuallyDrop<PageMut<'static>>,
    _file: Arc<File>,
    /// The caller's copy (a raw allocation: C writes through pointers to
    /// it that no Rust reference may invalidate), `len` bytes.
    buf: *mut u8,
    /// The page as the pin found it, to find what the caller changed.
    orig: Box<[u8]>,
    thread: ThreadId,
    key: PinKey,
}

impl PageMutPin {
    /// The caller's copy.
    fn copy(&self) -> &[u8] {
        // SAFETY: `buf` is this pin's allocation of `orig.len()` bytes
        // (get_page_mut), alive until Drop; the caller does not write it
        // during a call on the pin (documented).
        unsafe { std::slice::from_raw_parts(self.buf, self.orig.len()) }
    }

    /// Write the bytes the caller changed back into the page, as one
    /// write section.
    fn write_back(&mut self) -> CResult<()> {
        let (copy, orig) = (self.copy(), &self.orig);
        let Some(first) = copy.iter().zip(orig.iter()).position(|(a, b)| a != b) else {
            return Ok(());
        };
        let last = copy.iter().zip(orig.iter()).rposition(|(a, b)| a != b).unwrap_or(first);
        let changed = copy[first..=last].to_vec();
        eng(self.pin.write(first, &changed))
    }
}

impl Drop for PageMutPin {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before `file` (which it borrows) and
        // never used again.
        unsafe { ManuallyDrop::drop(&mut self.pin) };
        // SAFETY: from Box::into_raw of a boxed slice of `orig.len()` bytes
        // (get_page_mut), freed once, here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.buf, self.orig.len())) });
        let key = &self.key;
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().position(|k| k == key) {
                h.swap_remove(i);
            }
        });
    }
}

/// Take a write pin on the page at `index` (the engine's `get_page_mut`):
/// the page is locked, out of writeback, uptodate (read in inside the
/// file, zeros past its end) and its space reserved. The caller changes
/// the copy at `pcache_page_mut_data` and calls `pcache_page_mut_put`,
/// which writes the changed bytes into the page and unlocks it, on the
/// same thread.
///
/// Returns the pin, or NULL with `*err` set to `-EBADF` (closed, or opened
/// `O_RDONLY`), `-EINVAL` (NULL), `-EFBIG` (past the largest file size),
/// `-ENOSPC`, `-EDEADLK` (this thread holds a write pin of the file
/// already), ... `err` may be NULL. The caller owns the pin: put it.
#[no_mangle]
pub unsafe extern "C" fn pcache_get_page_mut(f: *mut FileHandle, index: u64, err: *mut c_int) -> *mut PageMutPin {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        if !open.write {
            return Err(libc::EBADF);
        }
        no_write_pin(&open.key)?;
        let file = open.file.clone();
        // SAFETY: the File lives in the Arc's allocation, which moving
        // `file` does not move; `file` outlives `pin` here (declared
        // before it) and in the PageMutPin (whose Drop drops the pin
        // first).
        let file_ref: &'static File = unsafe { &*Arc::as_ptr(&file) };
        let pin = eng(file_ref.get_page_mut(index))?;
        let mut orig = vec![0u8; pin.len()].into_boxed_slice();
        eng(pin.read_into(0, &mut orig))?;
        let buf = Box::into_raw(orig.clone()).cast::<u8>();
        HELD.with(|h| h.borrow_mut().push(open.key.clone()));
        let pin = PageMutPin {
            pin: ManuallyDrop::new(pin),
            _file: file,
            buf,
            orig,
            thread: std::thread::current().id(),
            key: open.key,
        };
        Ok(Box::into_raw(Box::new(pin)))
    });
    // SAFETY: `err` is NULL or the caller's int (documented).
    unsafe { r.report(err) }
}

/// The caller's copy of a write-pinned page (`pcache_page_mut_len`
/// bytes), readable and writable until `pcache_page_mut_put`; NULL for
/// NULL.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_mut_data(p: *mut PageMutPin) -> *mut c_void {
    // SAFETY: NULL or from pcache_get_page_mut, not yet put (documented).
    unsafe { p.as_ref() }.map_or(std::ptr::null_mut(), |p| p.buf.cast())
}

/// The length of a write-pinned page in bytes; 0 for NULL.
#[no_mangle]
pub unsafe extern "C" fn pcache_page_mut_len(p: *const PageMutPin) -> size_t {
    // SAFETY: NULL or from pcache_get_page_mut, not yet put (documented).
    unsafe { p.as_ref() }.map_or(0, |p| p.orig.len())
}

/// Grow the file to at least `new_size` bytes when the pin is put (bytes
/// written past the end of the file are otherwise not part of it and read
/// as zeros). `new_size` may not pass the end of the page (`-EINVAL`);
/// below the file's size it changes nothing. Returns 0, `-EINVAL` (NULL),
/// `-EPERM` (not the thread that took the pin).
#[no_mangle]
pub unsafe extern "C" fn pcache_page_mut_extend_to(p: *mut PageMutPin, new_size: u64) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_get_page_mut, not yet put, not in use
        // by another call (documented).
        let p = unsafe { p.as_mut() }.ok_or(libc::EINVAL)?;
        if p.thread != std::thread::current().id() {
            return Err(libc::EPERM);
        }
        eng(p.pin.extend_to(new_size))?;
        Ok(0)
    })
}

/// Write the bytes of the copy that the caller changed into the page (one
/// write section: readers see all of them or none), then release the pin:
/// the page is marked dirty if it changed, the file grows as
/// `pcache_page_mut_extend_to` asked, and the page is unlocked. Frees the
/// pin: its pointer and data are invalid after.
///
/// Returns 0, or `-EPERM` from a thread other than the one that took the
/// pin (nothing is done: put it on its thread), `-EINVAL` (NULL).
#[no_mangle]
pub unsafe extern "C" fn pcache_page_mut_put(p: *mut PageMutPin) -> c_int {
    ffi_int(|| {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: from pcache_get_page_mut, not yet put (documented).
        if unsafe { &*p }.thread != std::thread::current().id() {
            return Err(libc::EPERM);
        }
        // SAFETY: from Box::into_raw in pcache_get_page_mut, put once
        // (documented); owned here, so a panic below still unpins.
        let mut pin = unsafe { Box::from_raw(p) };
        pin.write_back()?;
        drop(pin);
        Ok(0)
    })
}

/// `pcache_map_t`: a mapping of a file range.
pub struct MapHandle {
    map: Mapping,
    key: PinKey,
}

/// Map `[offset, offset + len)` of the file, as mmap(2): `prot` is
/// `PROT_READ` with optionally `PROT_WRITE` and `PROT_EXEC`, `flags` is
/// `MAP_SHARED` (writes reach the file) or `MAP_PRIVATE` (copy on write).
/// `offset` is page aligned; `len` above 0, rounded up to pages; the
/// mapping may reach past the end of the file (accesses there fail).
///
/// Returns the mapping, or NULL with `*err` set to `-EINVAL` (NULL; bad
/// `prot`, `flags`, `offset` or `len`), `-EACCES` (a handle not opened for
/// reading; `MAP_SHARED` with `PROT_WRITE` on one not opened for writing),
/// `-EBADF`, `-EFBIG`, `-ENOMEM`. `err` may be NULL. The caller owns the
/// mapping: `pcache_unmap` it. It keeps the file open after
/// `pcache_close`. A mapping may be used from several threads at once.
#[no_mangle]
pub unsafe extern "C" fn pcache_map(
    f: *mut FileHandle,
    offset: u64,
    len: u64,
    prot: c_int,
    flags: c_int,
    err: *mut c_int,
) -> *mut MapHandle {
    let r = ffi_ptr(|| {
        // SAFETY: NULL or from pcache_open of a live cache (documented).
        let open = unsafe { open_of(f) }?;
        let all = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
        if prot & libc::PROT_READ == 0 || prot & !all != 0 || offset > MAX_OFF || len == 0 {
            return Err(libc::EINVAL);
        }
        let private = match flags {
            libc::MAP_SHARED => false,
            libc::MAP_PRIVATE => true,
            _ => return Err(libc::EINVAL),
        };
        let writable = prot & libc::PROT_WRITE != 0;
        if !open.read || (writable && !private && !open.write) {
            return Err(libc::EACCES);
        }
        let mut mf = MapFlags::READ;
        if writable {
            mf = mf | MapFlags::WRITE;
        }
        if prot & libc::PROT_EXEC != 0 {
            mf = mf | MapFlags::EXEC;
        }
        if private {
            mf = mf | MapFlags::PRIVATE;
        }
        let map = eng(open.file.map(offset, len, mf))?;
        Ok(Box::into_raw(Box::new(MapHandle { map, key: open.key })))
    });
    // SAFETY: `err` is NULL or the caller's int (documented).
    unsafe { r.report(err) }
}

/// The aligned 8-byte word at byte `offset` (a multiple of 8) of page
/// `page` of the mapping (counted from its start), in native byte order,
/// into `*out`: one access, faulting the page in if needed. Returns 0, or
/// `-EINVAL` (NULL mapping; past the mapping; unaligned; a page past the
/// end of the file), `-EFAULT` (NULL `out`), `-EDEADLK`, `-EIO`, ...
#[no_mangle]
pub unsafe extern "C" fn pcache_map_load_u64(m: *const MapHandle, page: u64, offset: size_t, out: *mut u64) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_map, not yet unmapped (documented).
        let m = unsafe { m.as_ref() }.ok_or(libc::EINVAL)?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        no_write_pin(&m.key)?;
        let word = eng(m.map.load_u64(page, offset))?;
        // SAFETY: not NULL, so the caller's u64 (documented).
        unsafe { out.write(word) };
        Ok(0)
    })
}

/// Copy `len` bytes at byte `pos` of the mapping into `buf` (each page one
/// consistent state of it). Returns 0, or `-EINVAL` (NULL mapping; bytes
/// past the mapping or the end of the file; `len` above `SSIZE_MAX`), `-EFAULT` (NULL `buf` with
/// `len` > 0), `-EDEADLK`, ... `buf` must be valid for writes of `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn pcache_map_read(m: *const MapHandle, pos: u64, buf: *mut c_void, len: size_t) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_map, not yet unmapped (documented).
        let m = unsafe { m.as_ref() }.ok_or(libc::EINVAL)?;
        check_buf(buf.is_null(), len)?;
        if len == 0 {
            return Ok(0);
        }
        no_write_pin(&m.key)?;
        // SAFETY: not NULL, so valid for writes of `len` bytes (documented).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        eng(m.map.read(pos, buf))?;
        Ok(0)
    })
}

/// Write `len` bytes of `buf` at byte `pos` of the mapping (each page one
/// write section; the first write to a page faults it writable). Writes
/// never grow the file. Returns 0, or `-EACCES` (a mapping without
/// `PROT_WRITE`), `-EINVAL` (NULL mapping; bytes past the mapping or the
/// end of the file; `len` above `SSIZE_MAX`), `-EFAULT` (NULL `buf` with `len` > 0), `-ENOSPC`,
/// `-EDEADLK`, ... `buf` must be valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn pcache_map_write(m: *const MapHandle, pos: u64, buf: *const c_void, len: size_t) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_map, not yet unmapped (documented).
        let m = unsafe { m.as_ref() }.ok_or(libc::EINVAL)?;
        check_buf(buf.is_null(), len)?;
        if len == 0 {
            return Ok(0);
        }
        no_write_pin(&m.key)?;
        // SAFETY: not NULL, so valid for reads of `len` bytes (documented).
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        eng(m.map.write(pos, buf))?;
        Ok(0)
    })
}

/// msync(2) with MS_SYNC on bytes `[offset, offset + len)` of the mapping
/// (`offset` page aligned): write the range's dirty pages back and wait.
/// Returns 0, or a writeback error the mapping had not reported (once),
/// `-EINVAL`, `-EDEADLK`.
#[no_mangle]
pub unsafe extern "C" fn pcache_map_msync(m: *const MapHandle, offset: u64, len: u64) -> c_int {
    ffi_int(|| {
        // SAFETY: NULL or from pcache_map, not yet unmapped (documented).
        let m = unsafe { m.as_ref() }.ok_or(libc::EINVAL)?;
        no_write_pin(&m.key)?;
        eng(m.map.msync(offset, len))?;
        Ok(0)
    })
}

/// Unmap and free the mapping (munmap(2)): dirty entries mark their pages
/// dirty, written back as usual. The pointer is invalid after, and no
/// other call on the mapping may be running. Returns 0, or `-EINVAL`
/// (NULL).
#[no_mangle]
pub unsafe extern "C" fn pcache_unmap(m: *mut MapHandle) -> c_int {
    ffi_int(|| {
        if m.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: from Box::into_raw in pcache_map, unmapped once
        // (documented).
        drop(unsafe { Box::from_raw(m) });
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_eio_and_crosses_nothing() {
        assert_eq!(ffi_int(|| panic!("boom")), -libc::EIO);
        assert_eq!(ffi_i64(|| panic!("boom")), -i64::from(libc::EIO));
        assert_eq!(ffi_ssize(|| panic!("boom")), -(libc::EIO as ssize_t));
        let mut err = 0;
        // SAFETY: `err` is a live int.
        let p = unsafe { ffi_ptr::<u8>(|| panic!("boom")).report(&mut err) };
        assert!(p.is_null());
        assert_eq!(err, -libc::EIO);
    }

    #[test]
    fn errors_map_to_their_errnos() {
        assert_eq!(ffi_int(|| Err(libc::ENOSPC)), -libc::ENOSPC);
        assert_eq!(errno_of(&Error::Closed), libc::EBADF);
        assert_eq!(errno_of(&Error::Overflow { offset: 1, len: 2, max: 3 }), libc::EFBIG);
        assert_eq!(errno_of(&Error::NoSpace { name: "f".into() }), libc::ENOSPC);
        // A shutdown that left data unwritten is EIO whatever the device said.
        assert_eq!(errno_of(&Error::Unwritten { files: Vec::new() }), libc::EIO);
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(errno_of(&Error::Io { name: "f".into(), source: enospc }), libc::ENOSPC);
        let other = std::io::Error::other("no errno");
        assert_eq!(errno_of(&Error::Io { name: "f".into(), source: other }), libc::EIO);
    }

    #[test]
    fn ranges_are_checked_as_rw_verify_area() {
        assert_eq!(check_rw(false, usize::MAX, 0), Err(libc::EINVAL));
        assert_eq!(check_rw(false, usize::MAX >> 1, 0), Ok(MAX_RW_COUNT));
        assert_eq!(check_rw(false, 10, MAX_OFF + 1), Err(libc::EINVAL));
        assert_eq!(check_rw(false, 10, MAX_OFF - 10), Ok(10));
        assert_eq!(check_rw(false, 11, MAX_OFF - 10), Err(libc::EINVAL));
        assert_eq!(check_rw(true, 1, 0), Err(libc::EFAULT));
        assert_eq!(check_rw(true, 0, 0), Ok(0));
    }
}

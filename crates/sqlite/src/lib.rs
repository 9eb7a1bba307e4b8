//! SQLite on pcache: a loadable extension (`libpcache_sqlite.so`) that
//! registers a VFS named `pcache`.
//!
//! `.load ./libpcache_sqlite` (or `sqlite3_load_extension`) registers it,
//! permanently (`SQLITE_OK_LOAD_PERMANENTLY`), not as the default. A
//! database opened as `file:x.db?vfs=pcache` then has its main file, its
//! rollback journal and its WAL read and written through one pcache page
//! cache per process. The files on disk stay ordinary SQLite files.
//!
//! # Cache size
//!
//! The first database opened with the VFS in a process builds the cache:
//! its URI's `pcache_mem` (`64M`, `4096K`, bytes), else the environment's
//! `PCACHE_MEM`, else 64 MiB. Later sizes are ignored (the first wins);
//! a malformed size fails the open with SQLITE_CANTOPEN, saying why on
//! stderr and through `sqlite3_log`. The eviction policy comes the same
//! way: the URI's `pcache_policy` (a name `--set policy=` takes: `s3fifo`,
//! `pcache`, ...), else `PCACHE_POLICY`, else the kernel's two lists.
//!
//! # What goes where
//!
//! Every file is opened by the default VFS (`sqlite3_vfs_find(NULL)`, the
//! unix VFS) too, and that file object keeps doing everything but data:
//! locks (xLock, xUnlock, xCheckReservedLock: POSIX advisory locks on the
//! same bytes as always, PENDING_BYTE, RESERVED_BYTE, the SHARED range, so
//! a process on this VFS and one on the default VFS exclude each other),
//! the -shm wal-index (xShmMap, xShmLock, xShmBarrier, xShmUnmap), sector
//! size and device characteristics. Only xRead, xWrite, xTruncate, xSync
//! and xFileSize go through pcache. Temporary files (temp databases,
//! statement journals, ...) go to the default VFS untouched.
//!
//! # Descriptors and POSIX locks
//!
//! Closing any descriptor of a file drops all the POSIX locks the process
//! holds on it. The unix VFS copes for its own descriptors (it shares one
//! inode record per file and defers closes while locks are held). pcache's
//! I/O needs descriptors too, and the engine's host-file device takes them
//! from a bounded cache that closes and reopens them at any time, which
//! would silently drop SQLite's locks. So each file gets a device of this
//! crate's (dev.rs) holding two descriptors, O_DIRECT for reads and
//! buffered for writes, from its first open in the process until the close
//! of its last connection in the process, when SQLite holds no lock on it. What remains: a process that also opens the
//! same database through another VFS (or plain `open`/`close`) may lose
//! that other connection's locks when the last pcache connection closes,
//! as it would with any library that opens and closes the file.
//!
//! # Coherence across processes
//!
//! pcache must never serve a page another process has changed since it
//! was cached. Two rules, at the moments SQLite itself rereads:
//!
//! - Rollback mode. When xLock takes the database from no lock to SHARED,
//!   the VFS reads the change counter (bytes 24..28) and the length from
//!   the host file (through the default VFS's file object, past pcache)
//!   and compares them with what it last knew. If they differ, it drops
//!   every cached page of the database (hole punching that reaches only
//!   the cache) and takes the host's length. What this process writes it
//!   knows: when xUnlock goes from RESERVED or above down to SHARED or
//!   none, the database, its journal and its WAL are written back first
//!   (into the host's page cache: another process's O_DIRECT read writes
//!   that back before it reads, a buffered one reads it), and the counter
//!   and length of the host file are what it knows from then on.
//! - WAL mode. The wal-index (the -shm file, shared memory) says what
//!   changed: its header (mxFrame, salts, checksums) changes with every
//!   commit and WAL restart, nBackfill with every checkpoint. When a
//!   connection takes a WAL read lock, the VFS compares them with what it
//!   knows: a new header drops the cached WAL pages; a new nBackfill, or
//!   new salts (a restart resets nBackfill, which could then come back to
//!   the value last seen), drop the cached database pages (checkpoints
//!   write the database). A connection taking the write (checkpoint) lock
//!   catches up the same way first, so while a connection of this process
//!   holds that lock every change to the WAL (database) is this
//!   process's, and readers of this process drop nothing for it. Releasing
//!   the write, checkpoint or recovery lock writes back the WAL and the
//!   database first and records the header (nBackfill and salts) as
//!   known. A WAL restart by this process's writer, which SQLite does only
//!   once every frame is in the database, is recognised when the writer
//!   takes the read marks for it: its nBackfill of 0 and new salts are
//!   recorded, nothing dropped. Recovery drops the cached WAL first (it
//!   reads it all).
//!
//! Dropping is safe while other connections of the process read: a reader
//! holding a page copies the old bytes out, which are the ones its own
//! snapshot needs; the pages a foreign change touched are ones no snapshot
//! older than the change reads from that file.
//!
//! Durability: xSync is pcache's fsync (write back, then fsync the host
//! file) followed by the default VFS's xSync (which also syncs the
//! directory of a new journal). With `PRAGMA synchronous=OFF`, data not
//! yet written back is lost if the process dies, as the default VFS loses
//! it if the machine does.
//!
//! Cost: a commit copies its pages into the host's page cache before its
//! lock goes (no disk write, no fsync), where the default VFS leaves them
//! there in the first place. With
//! `PRAGMA locking_mode=EXCLUSIVE` no other process can open the database,
//! SQLite keeps its locks until it closes, and dirty pages stay cached
//! until writeback or xSync.

mod cache;
mod dev;
mod vfs;

use std::ffi::{c_char, c_int, CStr};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use libsqlite3_sys as ffi;

/// The process's page cache, once a database was opened through the VFS
/// (for statistics: `vmstat`).
pub fn page_cache() -> Option<&'static engine::PageCache> {
    cache::built()
}

/// For a Rust program that links this crate instead of loading the
/// extension: SQLite's API comes from the system's `libsqlite3.so.0`,
/// opened here, and the VFS is registered, as `.load` would. Afterwards
/// `libsqlite3_sys`'s functions work in the program (they call through
/// the same API table). SQLite hands that table only to an extension's
/// entry point, so this registers one with `sqlite3_auto_extension` and
/// opens an in-memory database once: the two functions (and
/// `sqlite3_open`) are looked up with dlsym, as nothing else is available
/// before the table is.
pub fn init_in_process() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        catch_unwind(|| {
            // SAFETY: the lookups name SQLite's public functions with their
            // documented signatures; the entry point is SQLite's extension
            // entry point type, which auto_extension takes as `void(*)(void)`.
            unsafe { bootstrap() }
        })
        .unwrap_or_else(|_| Err("pcache: panic while loading SQLite".into()))
    })
    .clone()
}

type AutoExtension = unsafe extern "C" fn(Option<unsafe extern "C" fn()>) -> c_int;
type Open = unsafe extern "C" fn(*const c_char, *mut *mut ffi::sqlite3) -> c_int;
type Close = unsafe extern "C" fn(*mut ffi::sqlite3) -> c_int;

unsafe extern "C" fn boot_entry(
    _db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: called by SQLite as an extension entry point, with its table.
    match catch_unwind(|| unsafe { ffi::rusqlite_extension_init2(api) }) {
        Ok(Ok(())) => ffi::SQLITE_OK,
        _ => ffi::SQLITE_ERROR,
    }
}

/// # Safety
/// Called once (init_in_process).
unsafe fn bootstrap() -> Result<(), String> {
    let dlerr = || {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated (above).
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: dlopen/dlsym with NUL-terminated names; RTLD_GLOBAL so the
    // library stays for the life of the process (never dlclosed).
    let lib = unsafe { libc::dlopen(c"libsqlite3.so.0".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if lib.is_null() {
        return Err(format!("cannot load libsqlite3.so.0 (Debian: apt-get install libsqlite3-0): {}", dlerr()));
    }
    let sym = |name: &CStr| {
        // SAFETY: `lib` is a live handle and `name` NUL-terminated.
        let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
        if p.is_null() {
            Err(format!("libsqlite3.so.0 has no {}: {}", name.to_string_lossy(), dlerr()))
        } else {
            Ok(p)
        }
    };
    let (auto, open, close) = (sym(c"sqlite3_auto_extension")?, sym(c"sqlite3_open")?, sym(c"sqlite3_close")?);
    // SAFETY: the symbols are SQLite's functions of these C signatures.
    let (auto, open, close) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, AutoExtension>(auto),
            std::mem::transmute::<*mut libc::c_void, Open>(open),
            std::mem::transmute::<*mut libc::c_void, Close>(close),
        )
    };
    // SAFETY: SQLite calls auto extensions with the entry-point signature
    // boot_entry has, through a `void(*)(void)` it takes as an opaque pointer.
    let entry = unsafe {
        std::mem::transmute::<
            unsafe extern "C" fn(*mut ffi::sqlite3, *mut *mut c_char, *mut ffi::sqlite3_api_routines) -> c_int,
            unsafe extern "C" fn(),
        >(boot_entry)
    };
    // SAFETY: SQLite's own functions, with valid arguments.
    unsafe {
        if auto(Some(entry)) != ffi::SQLITE_OK {
            return Err("sqlite3_auto_extension failed".into());
        }
        let mut db = std::ptr::null_mut();
        let rc = open(c":memory:".as_ptr(), &mut db);
        close(db);
        if rc != ffi::SQLITE_OK {
            return Err(format!("sqlite3_open(:memory:): error {rc}"));
        }
        // The table is known now: the rest goes through it.
        ffi::sqlite3_cancel_auto_extension(Some(entry));
    }
    vfs::register()
}

/// The entry point SQLite derives from the file name libpcache_sqlite.so
/// ("sqlite3_" + the letters after "lib" + "_init").
///
/// # Safety
/// Called by SQLite's extension loader with its API routines.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_pcachesqlite_init(
    db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: the same contract, passed on.
    unsafe { sqlite3_extension_init(db, err, api) }
}

/// The generic entry point, which SQLite tries first.
///
/// # Safety
/// Called by SQLite's extension loader with its API routines.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_extension_init(
    _db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    let res = catch_unwind(|| {
        // SAFETY: `api` is the routine table SQLite hands its extensions,
        // valid for the life of the process (it is SQLite's static table).
        unsafe { ffi::rusqlite_extension_init2(api) }.map_err(|e| format!("pcache: {e}"))?;
        vfs::register()
    });
    match res {
        Ok(Ok(())) => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        Ok(Err(msg)) => {
            // SAFETY: `err` is SQLite's out-pointer for a message it frees
            // with sqlite3_free, so the message is allocated with
            // sqlite3_malloc (the API is initialised unless that failed,
            // in which case the message is dropped).
            unsafe { set_err(err, &msg) };
            ffi::SQLITE_ERROR
        }
        Err(_) => ffi::SQLITE_ERROR,
    }
}

/// Hand `msg` to SQLite in `*err`, allocated with sqlite3_malloc.
///
/// # Safety
/// `err` is null or SQLite's error out-pointer.
unsafe fn set_err(err: *mut *mut c_char, msg: &str) {
    if err.is_null() {
        return;
    }
    let bytes = msg.as_bytes();
    // Calling through the API table panics if it was never initialised.
    let p = catch_unwind(|| {
        // SAFETY: plain allocation through SQLite's allocator.
        unsafe { ffi::sqlite3_malloc(bytes.len() as c_int + 1) }
    });
    let Ok(p) = p else { return };
    if p.is_null() {
        return;
    }
    // SAFETY: `p` has bytes.len() + 1 bytes; `err` is valid (checked).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len());
        *p.cast::<u8>().add(bytes.len()) = 0;
        *err = p.cast();
    }
}

//! The `pcache` VFS and its file methods (the design is in lib.rs).

use std::alloc::Layout;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, OnceLock};

use libsqlite3_sys as ffi;

use crate::cache::{self, Known, Shared};

const LOCK_NONE: c_int = ffi::SQLITE_LOCK_NONE;
const LOCK_SHARED: c_int = ffi::SQLITE_LOCK_SHARED;
/// wal-index lock slots: WAL_WRITE_LOCK, WAL_CKPT_LOCK, WAL_RECOVER_LOCK,
/// then the read marks WAL_READ_LOCK(0..5).
const WAL_WRITE: usize = 0;
const WAL_CKPT: usize = 1;
const WAL_RECOVER: usize = 2;
const WAL_READ0: usize = 3;
/// The wal-index header is 48 bytes, stored twice; nBackfill is the first
/// field of the checkpoint information after the two copies.
const WAL_HDR: usize = 48;
const NBACKFILL_OFFSET: usize = 96;

/// Which of SQLite's files this is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    MainDb,
    Journal,
    Wal,
}

/// What the VFS keeps of one open file besides SQLite's own `sqlite3_file`.
struct FileState {
    kind: Kind,
    shared: Arc<Shared>,
    /// The lock level this connection holds (xLock/xUnlock).
    lock: c_int,
    /// Region 0 of the wal-index, once mapped.
    shm0: *mut u8,
    /// WAL write, checkpoint and recovery locks this connection holds.
    excl: [bool; 3],
}

/// Our `sqlite3_file`: SQLite allocates `szOsFile` bytes and hands them to
/// xOpen. Files the VFS passes through are the default VFS's objects in
/// the same bytes (szOsFile covers both).
#[repr(C)]
struct PcFile {
    base: ffi::sqlite3_file,
    /// The default VFS's file object for this file (heap, `real_layout`).
    real: *mut ffi::sqlite3_file,
    state: *mut FileState,
}

struct Vfs {
    vfs: ffi::sqlite3_vfs,
}

// SAFETY: the VFS structure is written once before registration and then
// only read (by SQLite and by us); its pointers are to 'static data (our
// name, the default VFS, which SQLite never frees while registered).
unsafe impl Send for Vfs {}
// SAFETY: as above: read-only after registration.
unsafe impl Sync for Vfs {}

static VFS: OnceLock<Box<Vfs>> = OnceLock::new();

/// Register the VFS (once per process; later loads find it registered).
pub fn register() -> Result<(), String> {
    // SAFETY: sqlite3_vfs_find with a NUL-terminated name only reads it.
    if !unsafe { ffi::sqlite3_vfs_find(c"pcache".as_ptr()) }.is_null() {
        return Ok(());
    }
    // SAFETY: NULL asks for the default VFS; SQLite owns what it returns.
    let real = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
    if real.is_null() {
        return Err("pcache: SQLite has no default VFS".into());
    }
    // SAFETY: `real` is a registered VFS, valid while registered (the
    // default VFS stays registered for the life of the process).
    let r = unsafe { &*real };
    let sz = (r.szOsFile as usize).max(std::mem::size_of::<PcFile>());
    let vfs = VFS.get_or_init(|| {
        Box::new(Vfs {
            vfs: ffi::sqlite3_vfs {
                iVersion: 2,
                szOsFile: sz as c_int,
                mxPathname: r.mxPathname,
                pNext: ptr::null_mut(),
                zName: c"pcache".as_ptr(),
                pAppData: real.cast(),
                xOpen: Some(x_open),
                xDelete: Some(x_delete),
                xAccess: Some(x_access),
                xFullPathname: Some(x_full_pathname),
                xDlOpen: Some(x_dl_open),
                xDlError: Some(x_dl_error),
                xDlSym: Some(x_dl_sym),
                xDlClose: Some(x_dl_close),
                xRandomness: Some(x_randomness),
                xSleep: Some(x_sleep),
                xCurrentTime: Some(x_current_time),
                xGetLastError: Some(x_get_last_error),
                xCurrentTimeInt64: Some(x_current_time_int64),
                xSetSystemCall: None,
                xGetSystemCall: None,
                xNextSystemCall: None,
            },
        })
    });
    let p = &vfs.vfs as *const ffi::sqlite3_vfs as *mut ffi::sqlite3_vfs;
    // SAFETY: `p` lives in a static for the rest of the process, as a
    // registered VFS must; 0: not the default.
    let rc = unsafe { ffi::sqlite3_vfs_register(p, 0) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("pcache: sqlite3_vfs_register: error {rc}"));
    }
    Ok(())
}

/// The default VFS behind ours.
///
/// # Safety
/// `vfs` is our registered VFS.
unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: the caller passes our VFS, whose pAppData is the default VFS.
    unsafe { (*vfs).pAppData.cast() }
}

/// Say why an open failed: SQLite reports only SQLITE_CANTOPEN.
fn report(msg: &str) {
    eprintln!("pcache vfs: {msg}");
    if let Ok(c) = std::ffi::CString::new(msg) {
        // SAFETY: sqlite3_log with a "%s" format and one C string argument.
        unsafe { ffi::sqlite3_log(ffi::SQLITE_CANTOPEN, c"pcache vfs: %s".as_ptr(), c.as_ptr()) };
    }
}

fn real_layout(vfs: &ffi::sqlite3_vfs) -> Layout {
    Layout::from_size_align((vfs.szOsFile as usize).max(8), 16).expect("szOsFile layout")
}

/// Run `f`, turning a panic into `err`: no panic crosses into SQLite.
fn guard(err: c_int, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(err)
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    guard(ffi::SQLITE_CANTOPEN, || {
        // SAFETY: SQLite calls xOpen with our VFS and a file of szOsFile
        // bytes; `name` is NULL or a NUL-terminated path.
        unsafe { open(vfs, name, file, flags, out_flags) }
    })
}

/// # Safety
/// As xOpen's contract.
unsafe fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: our VFS (xOpen is only registered on it).
    let real = unsafe { real_vfs(vfs) };
    // SAFETY: the default VFS is valid while registered.
    let r = unsafe { &*real };
    let x_open = r.xOpen.expect("default VFS xOpen");
    let kind = if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
        Some(Kind::MainDb)
    } else if flags & ffi::SQLITE_OPEN_MAIN_JOURNAL != 0 {
        Some(Kind::Journal)
    } else if flags & ffi::SQLITE_OPEN_WAL != 0 {
        Some(Kind::Wal)
    } else {
        None
    };
    let (Some(kind), false) = (kind, name.is_null()) else {
        // Temporary files: the default VFS's object in our bytes (szOsFile
        // is at least its size), its methods, nothing of ours.
        // SAFETY: the arguments are SQLite's, passed on.
        return unsafe { x_open(real, name, file, flags, out_flags) };
    };
    // SAFETY: checked non-null above; SQLite's names are NUL-terminated.
    let path = match unsafe { CStr::from_ptr(name) }.to_str() {
        Ok(p) => p.to_string(),
        Err(_) => {
            report("a file name that is not UTF-8");
            return ffi::SQLITE_CANTOPEN;
        }
    };
    let param = |key: &CStr| {
        if kind != Kind::MainDb {
            return None;
        }
        // SAFETY: `name` is the database name SQLite passed to xOpen, for
        // which sqlite3_uri_parameter is defined.
        let v = unsafe { ffi::sqlite3_uri_parameter(name, key.as_ptr()) };
        // SAFETY: a NUL-terminated string inside SQLite's name buffer.
        (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
    };
    let (mem, policy) = (param(c"pcache_mem"), param(c"pcache_policy"));
    let pc = match cache::cache(mem.as_deref(), policy.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            report(&format!("{path}: {e}"));
            return ffi::SQLITE_CANTOPEN;
        }
    };
    let layout = real_layout(r);
    // SAFETY: a non-zero-sized layout.
    let real_file = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<ffi::sqlite3_file>();
    if real_file.is_null() {
        return ffi::SQLITE_NOMEM;
    }
    // SAFETY: `real_file` has the default VFS's szOsFile bytes, zeroed.
    let rc = unsafe { x_open(real, name, real_file, flags, out_flags) };
    let free_real = || {
        // SAFETY: a failed xOpen that set pMethods still wants xClose; the
        // bytes were allocated above with `layout`.
        unsafe {
            if !(*real_file).pMethods.is_null() {
                if let Some(close) = (*(*real_file).pMethods).xClose {
                    close(real_file);
                }
            }
            std::alloc::dealloc(real_file.cast(), layout);
        }
    };
    if rc != ffi::SQLITE_OK {
        free_real();
        return rc;
    }
    let shared = match cache::open(pc, &path) {
        Ok(s) => s,
        Err(e) => {
            report(&e.to_string());
            free_real();
            return ffi::SQLITE_CANTOPEN;
        }
    };
    let state = Box::new(FileState { kind, shared, lock: LOCK_NONE, shm0: ptr::null_mut(), excl: [false; 3] });
    // SAFETY: `file` has szOsFile >= size_of::<PcFile>() bytes, SQLite's
    // allocation (8-byte aligned, as PcFile needs).
    unsafe {
        file.cast::<PcFile>().write(PcFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            real: real_file,
            state: Box::into_raw(state),
        })
    };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_DELETE, || {
        // SAFETY: our VFS; SQLite's arguments passed on.
        let rc = unsafe {
            let real = real_vfs(vfs);
            ((*real).xDelete.expect("xDelete"))(real, name, sync_dir)
        };
        if rc == ffi::SQLITE_OK && !name.is_null() {
            // SAFETY: a NUL-terminated name from SQLite.
            if let (Ok(p), Some(pc)) = (unsafe { CStr::from_ptr(name) }.to_str(), cache::built()) {
                // A file deleted while the engine still holds it (no
                // connection open): drop its pages, never write them.
                cache::forget(pc, p);
            }
        }
        rc
    })
}

unsafe extern "C" fn x_access(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, flags: c_int, out: *mut c_int) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(ffi::SQLITE_IOERR_ACCESS, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xAccess.expect("xAccess"))(real, name, flags, out)
    })
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(ffi::SQLITE_CANTOPEN, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xFullPathname.expect("xFullPathname"))(real, name, n, out)
    })
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    catch_unwind(|| unsafe {
        let real = real_vfs(vfs);
        ((*real).xDlOpen.expect("xDlOpen"))(real, name)
    })
    .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, msg: *mut c_char) {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    let _ = catch_unwind(|| unsafe {
        let real = real_vfs(vfs);
        ((*real).xDlError.expect("xDlError"))(real, n, msg)
    });
}

type DlSym = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char);

unsafe extern "C" fn x_dl_sym(vfs: *mut ffi::sqlite3_vfs, h: *mut c_void, sym: *const c_char) -> Option<DlSym> {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    catch_unwind(|| unsafe {
        let real = real_vfs(vfs);
        ((*real).xDlSym.expect("xDlSym"))(real, h, sym)
    })
    .unwrap_or(None)
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, h: *mut c_void) {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    let _ = catch_unwind(|| unsafe {
        let real = real_vfs(vfs);
        ((*real).xDlClose.expect("xDlClose"))(real, h)
    });
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(0, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xRandomness.expect("xRandomness"))(real, n, out)
    })
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, us: c_int) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(0, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xSleep.expect("xSleep"))(real, us)
    })
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(ffi::SQLITE_ERROR, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xCurrentTime.expect("xCurrentTime"))(real, out)
    })
}

unsafe extern "C" fn x_get_last_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(0, || unsafe {
        let real = real_vfs(vfs);
        ((*real).xGetLastError.expect("xGetLastError"))(real, n, out)
    })
}

unsafe extern "C" fn x_current_time_int64(vfs: *mut ffi::sqlite3_vfs, out: *mut ffi::sqlite3_int64) -> c_int {
    // SAFETY: our VFS; SQLite's arguments passed on to the default VFS.
    guard(ffi::SQLITE_ERROR, || unsafe {
        let real = real_vfs(vfs);
        match (*real).xCurrentTimeInt64 {
            Some(f) => f(real, out),
            None => ffi::SQLITE_ERROR,
        }
    })
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(f_close),
    xRead: Some(f_read),
    xWrite: Some(f_write),
    xTruncate: Some(f_truncate),
    xSync: Some(f_sync),
    xFileSize: Some(f_file_size),
    xLock: Some(f_lock),
    xUnlock: Some(f_unlock),
    xCheckReservedLock: Some(f_check_reserved_lock),
    xFileControl: Some(f_file_control),
    xSectorSize: Some(f_sector_size),
    xDeviceCharacteristics: Some(f_device_characteristics),
    xShmMap: Some(f_shm_map),
    xShmLock: Some(f_shm_lock),
    xShmBarrier: Some(f_shm_barrier),
    xShmUnmap: Some(f_shm_unmap),
    xFetch: Some(f_fetch),
    xUnfetch: Some(f_unfetch),
};

/// Call the default VFS's method `$m` on the real file of `$pf`.
macro_rules! real {
    ($pf:expr, $m:ident $(, $a:expr)*) => {{
        let r = $pf.real;
        // SAFETY (callers'): `r` is the default VFS's open file object.
        ((*(*r).pMethods).$m.expect(stringify!($m)))(r $(, $a)*)
    }};
}

/// Our file object and its state, or `err` after a panic.
///
/// # Safety
/// `file` is a file this VFS opened through pcache (METHODS are only ever
/// installed on those), still open.
unsafe fn with_file(
    file: *mut ffi::sqlite3_file,
    err: c_int,
    f: impl FnOnce(&PcFile, &mut FileState) -> c_int,
) -> c_int {
    guard(err, || {
        // SAFETY: the caller's contract: a PcFile with a live state, used by
        // one connection at a time (SQLite serialises calls on one file).
        let pf = unsafe { &*file.cast::<PcFile>() };
        // SAFETY: set at open, freed only by xClose, after which SQLite
        // makes no call on the file.
        let st = unsafe { &mut *pf.state };
        f(pf, st)
    })
}

fn ioerr(e: &engine::Error, code: c_int) -> c_int {
    match e {
        engine::Error::NoSpace { .. } => ffi::SQLITE_FULL,
        engine::Error::NoMemory { .. } => ffi::SQLITE_IOERR_NOMEM,
        _ => code,
    }
}

unsafe extern "C" fn f_close(file: *mut ffi::sqlite3_file) -> c_int {
    guard(ffi::SQLITE_IOERR_CLOSE, || {
        // SAFETY: xClose on one of our pcache files: take its state back
        // (once: SQLite closes a file once) and close the real file.
        unsafe {
            let pf = &mut *file.cast::<PcFile>();
            let st = Box::from_raw(pf.state);
            pf.state = ptr::null_mut();
            let mut rc = ffi::SQLITE_OK;
            if let Some(pc) = cache::built() {
                let FileState { shared, .. } = *st;
                if let Err(e) = cache::close(pc, shared) {
                    report(&format!("close: {e}"));
                    rc = ffi::SQLITE_IOERR_CLOSE;
                }
            }
            let real = pf.real;
            let real_rc = real!(pf, xClose);
            let vfs = &*VFS.get().expect("registered").vfs.pAppData.cast::<ffi::sqlite3_vfs>();
            std::alloc::dealloc(real.cast(), real_layout(vfs));
            pf.real = ptr::null_mut();
            if rc == ffi::SQLITE_OK {
                real_rc
            } else {
                rc
            }
        }
    })
}

unsafe extern "C" fn f_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: one of our files; `buf` has `amt` bytes (xRead's contract).
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_READ, |_, st| {
            let out = std::slice::from_raw_parts_mut(buf.cast::<u8>(), amt as usize);
            let mut got = 0;
            while got < out.len() {
                match st.shared.file.read_at(&mut out[got..], off as u64 + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) => return ioerr(&e, ffi::SQLITE_IOERR_READ),
                }
            }
            if got < out.len() {
                // SQLite wants the rest zeroed on a short read.
                out[got..].fill(0);
                return ffi::SQLITE_IOERR_SHORT_READ;
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn f_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: one of our files; `buf` has `amt` bytes (xWrite's contract).
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_WRITE, |_, st| {
            let data = std::slice::from_raw_parts(buf.cast::<u8>(), amt as usize);
            let mut put = 0;
            while put < data.len() {
                match st.shared.file.write_at(&data[put..], off as u64 + put as u64) {
                    Ok(0) => return ffi::SQLITE_IOERR_WRITE,
                    Ok(n) => put += n,
                    Err(e) => return ioerr(&e, ffi::SQLITE_IOERR_WRITE),
                }
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn f_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: one of our files.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_TRUNCATE, |_, st| {
            let _g = st.shared.dev.truncating();
            match st.shared.file.set_len(size as u64) {
                Ok(()) => ffi::SQLITE_OK,
                Err(e) => ioerr(&e, ffi::SQLITE_IOERR_TRUNCATE),
            }
        })
    }
}

unsafe extern "C" fn f_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: one of our files; the real file object is open.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_FSYNC, |pf, st| {
            let res = if flags & ffi::SQLITE_SYNC_DATAONLY != 0 {
                st.shared.file.fdatasync()
            } else {
                st.shared.file.fsync()
            };
            if let Err(e) = res {
                return ioerr(&e, ffi::SQLITE_IOERR_FSYNC);
            }
            // The default VFS's sync also syncs the directory of a new
            // journal; its data sync finds nothing left to write.
            real!(pf, xSync, flags)
        })
    }
}

unsafe extern "C" fn f_file_size(file: *mut ffi::sqlite3_file, out: *mut ffi::sqlite3_int64) -> c_int {
    // SAFETY: one of our files; `out` is SQLite's out-pointer.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_FSTAT, |_, st| match st.shared.file.len() {
            Ok(n) => {
                *out = n as ffi::sqlite3_int64;
                ffi::SQLITE_OK
            }
            Err(e) => ioerr(&e, ffi::SQLITE_IOERR_FSTAT),
        })
    }
}

/// The change counter and length of the database on disk, read through
/// the default VFS's file object (past pcache).
///
/// # Safety
/// `pf` is an open file of ours.
unsafe fn disk_state(pf: &PcFile) -> Result<([u8; 4], u64), c_int> {
    let mut counter = [0u8; 4];
    // SAFETY: a 4-byte buffer for a 4-byte read on the open real file.
    let rc = unsafe { real!(pf, xRead, counter.as_mut_ptr().cast(), 4, 24) };
    if rc != ffi::SQLITE_OK && rc != ffi::SQLITE_IOERR_SHORT_READ {
        return Err(rc);
    }
    let mut len: ffi::sqlite3_int64 = 0;
    // SAFETY: an out-pointer to a local.
    let rc = unsafe { real!(pf, xFileSize, &mut len) };
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    Ok((counter, len as u64))
}

/// Rollback mode's rule: on taking SHARED, drop the cached database if
/// its change counter or length moved since this process last knew them.
///
/// # Safety
/// `pf` is an open main database of ours.
unsafe fn check_rollback(pf: &PcFile, st: &FileState) -> c_int {
    // SAFETY: the caller's contract.
    let (counter, len) = match unsafe { disk_state(pf) } {
        Ok(s) => s,
        Err(rc) => return rc,
    };
    let mut k = st.shared.known.lock();
    if k.counter != Some(counter) || k.len != Some(len) {
        if let Err(e) = st.shared.resync() {
            report(&format!("{}: {e}", st.shared.path));
            return ioerr(&e, ffi::SQLITE_IOERR_READ);
        }
        k.counter = Some(counter);
        k.len = Some(len);
    }
    ffi::SQLITE_OK
}

/// Write back the database, its journal and its WAL: before a lock that
/// let this process write is released, another process reads the disk.
fn flush_all(db: &Shared) -> Result<(), engine::Error> {
    for suffix in ["-journal", "-wal"] {
        if let Some(s) = cache::lookup(&format!("{}{suffix}", db.path)) {
            s.flush()?;
        }
    }
    db.flush()
}

unsafe extern "C" fn f_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: one of our files; the real file object is open.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_LOCK, |pf, st| {
            let rc = real!(pf, xLock, level);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            let from = st.lock;
            st.lock = st.lock.max(level);
            if st.kind == Kind::MainDb && from == LOCK_NONE && level >= LOCK_SHARED {
                let rc = check_rollback(pf, st);
                if rc != ffi::SQLITE_OK {
                    real!(pf, xUnlock, LOCK_NONE);
                    st.lock = LOCK_NONE;
                    return rc;
                }
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn f_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: one of our files; the real file object is open.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_UNLOCK, |pf, st| {
            let mut rc = ffi::SQLITE_OK;
            if st.kind == Kind::MainDb && st.lock > LOCK_SHARED && level <= LOCK_SHARED {
                // Still holding the write lock: what is on disk after the
                // flush is this process's own.
                match flush_all(&st.shared) {
                    Ok(()) => match disk_state(pf) {
                        Ok((counter, len)) => {
                            let mut k = st.shared.known.lock();
                            k.counter = Some(counter);
                            k.len = Some(len);
                        }
                        Err(e) => rc = e,
                    },
                    Err(e) => {
                        report(&format!("{}: write back: {e}", st.shared.path));
                        rc = ioerr(&e, ffi::SQLITE_IOERR_WRITE);
                    }
                }
            }
            let real_rc = real!(pf, xUnlock, level);
            if real_rc == ffi::SQLITE_OK {
                st.lock = level;
            }
            if rc == ffi::SQLITE_OK {
                real_rc
            } else {
                rc
            }
        })
    }
}

unsafe extern "C" fn f_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: one of our files; `out` is SQLite's out-pointer.
    unsafe { with_file(file, ffi::SQLITE_IOERR_CHECKRESERVEDLOCK, |pf, _| real!(pf, xCheckReservedLock, out)) }
}

unsafe extern "C" fn f_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: one of our files; `arg` is what `op` says it is.
    unsafe {
        with_file(file, ffi::SQLITE_ERROR, |pf, _| match op {
            // The default VFS would grow its own descriptor's file behind
            // pcache's back: pcache sizes the file itself.
            ffi::SQLITE_FCNTL_SIZE_HINT | ffi::SQLITE_FCNTL_CHUNK_SIZE => ffi::SQLITE_NOTFOUND,
            // No memory mapping of the database: xFetch hands out nothing,
            // and the old limit reported is 0.
            ffi::SQLITE_FCNTL_MMAP_SIZE => {
                if !arg.is_null() {
                    *arg.cast::<ffi::sqlite3_int64>() = 0;
                }
                ffi::SQLITE_OK
            }
            _ => real!(pf, xFileControl, op, arg),
        })
    }
}

unsafe extern "C" fn f_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: one of our files.
    unsafe { with_file(file, 4096, |pf, _| real!(pf, xSectorSize)) }
}

unsafe extern "C" fn f_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: one of our files.
    unsafe { with_file(file, 0, |pf, _| real!(pf, xDeviceCharacteristics)) }
}

unsafe extern "C" fn f_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: one of our files; `pp` is SQLite's out-pointer.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_SHMMAP, |pf, st| {
            let rc = real!(pf, xShmMap, region, size, extend, pp);
            if rc == ffi::SQLITE_OK && region == 0 && !(*pp).is_null() {
                st.shm0 = (*pp).cast();
            }
            rc
        })
    }
}

/// The wal-index header and nBackfill, or None if the two copies of the
/// header disagree (a writer is changing it): read as SQLite's readers do,
/// the first copy, a barrier, the second.
///
/// # Safety
/// `shm0` is region 0 of a mapped wal-index (at least 136 bytes).
unsafe fn read_wal_index(shm0: *const u8) -> Option<([u8; WAL_HDR], u32)> {
    for _ in 0..8 {
        let mut a = [0u8; WAL_HDR];
        let mut b = [0u8; WAL_HDR];
        for (i, x) in a.iter_mut().enumerate() {
            // SAFETY: inside region 0; volatile, as another process writes it.
            *x = unsafe { ptr::read_volatile(shm0.add(i)) };
        }
        fence(Ordering::SeqCst);
        for (i, x) in b.iter_mut().enumerate() {
            // SAFETY: as above, the second copy.
            *x = unsafe { ptr::read_volatile(shm0.add(WAL_HDR + i)) };
        }
        fence(Ordering::SeqCst);
        // SAFETY: nBackfill, an aligned u32 in native byte order.
        let nb = unsafe { ptr::read_volatile(shm0.add(NBACKFILL_OFFSET).cast::<u32>()) };
        if a == b {
            return Some((a, nb));
        }
        std::hint::spin_loop();
    }
    None
}

/// The WAL salts (wal-index header bytes 32..40): they change at every
/// WAL restart.
fn salt(hdr: &[u8; WAL_HDR]) -> [u8; 8] {
    hdr[32..40].try_into().expect("8 bytes")
}

/// WAL mode's rule for the WAL file: drop its cached pages if the
/// wal-index header moved since this process last knew it.
fn wal_part(db: &Shared, k: &mut Known, hdr: Option<[u8; WAL_HDR]>) -> c_int {
    if hdr.is_some() && k.wal_hdr == hdr {
        return ffi::SQLITE_OK;
    }
    if let Some(w) = cache::lookup(&format!("{}-wal", db.path)) {
        if let Err(e) = w.resync() {
            report(&format!("{}: {e}", w.path));
            return ioerr(&e, ffi::SQLITE_IOERR_READ);
        }
    }
    k.wal_hdr = hdr;
    ffi::SQLITE_OK
}

/// WAL mode's rule for the database: a checkpoint writes it, and moves
/// nBackfill, unless a WAL restart reset nBackfill meanwhile, which moves
/// the salts. Either drops its cached pages.
fn db_part(db: &Shared, k: &mut Known, snap: Option<([u8; WAL_HDR], u32)>) -> c_int {
    let (salt_now, nb) = (snap.map(|s| salt(&s.0)), snap.map(|s| s.1));
    if snap.is_some() && k.backfill == nb && k.db_salt == salt_now {
        return ffi::SQLITE_OK;
    }
    if k.restart_expected && k.excl[WAL_WRITE] > 0 && nb == Some(0) {
        // This process's writer restarted the WAL, after it saw (and this
        // process knew) every frame in the database: the database is
        // unchanged, only nBackfill and the salts moved.
        k.restart_expected = false;
        k.backfill = nb;
        k.db_salt = salt_now;
        return ffi::SQLITE_OK;
    }
    if let Err(e) = db.resync() {
        report(&format!("{}: {e}", db.path));
        return ioerr(&e, ffi::SQLITE_IOERR_READ);
    }
    k.backfill = nb;
    k.db_salt = salt_now;
    ffi::SQLITE_OK
}

/// The wal-index as it is now, or None if region 0 is not mapped.
fn snapshot(st: &FileState) -> Option<Option<([u8; WAL_HDR], u32)>> {
    // SAFETY: region 0 stays mapped until xShmUnmap, which clears shm0.
    (!st.shm0.is_null()).then(|| unsafe { read_wal_index(st.shm0) })
}

/// On taking a WAL read lock: drop what another process changed since
/// this one last knew the wal-index. A connection of this process holding
/// the write (checkpoint) lock checked when it took it, and every change
/// since is its own: nothing to drop for that file then.
fn check_wal(st: &FileState) -> c_int {
    let Some(snap) = snapshot(st) else { return ffi::SQLITE_OK };
    let db = &st.shared;
    let mut k = db.known.lock();
    if k.excl[WAL_WRITE] == 0 {
        let rc = wal_part(db, &mut k, snap.map(|s| s.0));
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if k.excl[WAL_CKPT] == 0 {
        return db_part(db, &mut k, snap);
    }
    ffi::SQLITE_OK
}

/// This connection holds the write lock and took read marks exclusively:
/// SQLite is about to restart the WAL (walRestartLog), which it does only
/// when every frame is in the database, so nBackfill cannot move any more.
/// Catch the database up with the state before the restart, and expect
/// the restart's nBackfill of 0 and new salts.
fn restart_begins(st: &FileState) -> c_int {
    let snap = snapshot(st).flatten();
    let mut k = st.shared.known.lock();
    let rc = db_part(&st.shared, &mut k, snap);
    if rc == ffi::SQLITE_OK {
        k.restart_expected = true;
    }
    rc
}

/// This connection took the WAL write, checkpoint or recovery lock: catch
/// up with foreign changes now, so that while it holds the lock every
/// change to that file is this process's.
fn took_excl(st: &mut FileState, slot: usize) -> c_int {
    let snap = snapshot(st).flatten();
    let db = &st.shared;
    let mut k = db.known.lock();
    let rc = match slot {
        WAL_WRITE if k.excl[WAL_WRITE] == 0 => wal_part(db, &mut k, snap.map(|s| s.0)),
        WAL_CKPT if k.excl[WAL_CKPT] == 0 => db_part(db, &mut k, snap),
        // Recovery reads the whole WAL: none of it may be stale.
        WAL_RECOVER => wal_part(db, &mut k, None),
        _ => ffi::SQLITE_OK,
    };
    k.excl[slot] += 1;
    st.excl[slot] = true;
    rc
}

unsafe extern "C" fn f_shm_lock(file: *mut ffi::sqlite3_file, ofst: c_int, n: c_int, flags: c_int) -> c_int {
    // SAFETY: one of our files; the real file object is open.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_SHMLOCK, |pf, st| {
            let slots = (ofst.max(0) as usize)..((ofst + n).max(0) as usize);
            let exclusive = flags & ffi::SQLITE_SHM_EXCLUSIVE != 0;
            let mut rc = ffi::SQLITE_OK;
            if flags & ffi::SQLITE_SHM_UNLOCK != 0 && exclusive && st.kind == Kind::MainDb {
                let held: Vec<usize> = slots.clone().filter(|&s| s <= WAL_RECOVER && st.excl[s]).collect();
                for s in held {
                    rc = release_excl(st, s);
                }
            }
            let real_rc = real!(pf, xShmLock, ofst, n, flags);
            if real_rc != ffi::SQLITE_OK {
                return real_rc;
            }
            if flags & ffi::SQLITE_SHM_LOCK != 0 && st.kind == Kind::MainDb {
                if exclusive {
                    for s in slots.clone().filter(|&s| s <= WAL_RECOVER) {
                        let r = took_excl(st, s);
                        if r != ffi::SQLITE_OK {
                            rc = r;
                        }
                    }
                }
                if slots.clone().any(|s| s >= WAL_READ0) {
                    let r = if exclusive && st.excl[WAL_WRITE] { restart_begins(st) } else { check_wal(st) };
                    if r != ffi::SQLITE_OK {
                        rc = r;
                    }
                }
            }
            rc
        })
    }
}

/// Before this connection releases the WAL write, checkpoint or recovery
/// lock: write back, and record what it changed as known.
fn release_excl(st: &mut FileState, slot: usize) -> c_int {
    let mut rc = ffi::SQLITE_OK;
    if let Err(e) = flush_all(&st.shared) {
        report(&format!("{}: write back: {e}", st.shared.path));
        rc = ioerr(&e, ffi::SQLITE_IOERR_WRITE);
    }
    let snap = snapshot(st).flatten();
    let mut k = st.shared.known.lock();
    match slot {
        WAL_WRITE => {
            k.wal_hdr = snap.map(|s| s.0);
            if std::mem::take(&mut k.restart_expected) && snap.map(|s| s.1) == Some(0) {
                // This writer restarted the WAL (restart_begins) and no
                // reader of this process has seen it since.
                k.backfill = Some(0);
                k.db_salt = snap.map(|s| salt(&s.0));
            }
        }
        WAL_CKPT => {
            k.backfill = snap.map(|s| s.1);
            k.db_salt = snap.map(|s| salt(&s.0));
        }
        _ => {}
    }
    k.excl[slot] = k.excl[slot].saturating_sub(1);
    st.excl[slot] = false;
    rc
}

unsafe extern "C" fn f_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: one of our files.
    unsafe {
        with_file(file, 0, |pf, _| {
            real!(pf, xShmBarrier);
            0
        })
    };
}

unsafe extern "C" fn f_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: one of our files.
    unsafe {
        with_file(file, ffi::SQLITE_IOERR_SHMMAP, |pf, st| {
            st.shm0 = ptr::null_mut();
            real!(pf, xShmUnmap, delete)
        })
    }
}

unsafe extern "C" fn f_fetch(
    _file: *mut ffi::sqlite3_file,
    _off: ffi::sqlite3_int64,
    _amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // No mapping: SQLite falls back to xRead.
    if !pp.is_null() {
        // SAFETY: SQLite's out-pointer.
        unsafe { *pp = ptr::null_mut() };
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn f_unfetch(_file: *mut ffi::sqlite3_file, _off: ffi::sqlite3_int64, _p: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

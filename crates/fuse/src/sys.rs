//! Thin, safe wrappers of the `*at` system calls the mount passes through
//! to the backing directory. Every call works relative to an `O_PATH`
//! descriptor of a directory (the parent) or of the inode itself, so a
//! rename of any ancestor never leaves a stale path behind (the design of
//! libfuse's passthrough_ll). Errors are raw errno values, ready for a FUSE
//! reply.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// An errno for a FUSE reply.
pub type Errno = libc::c_int;

pub fn last_errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// The errno of an `io::Error`, EIO when it carries none.
pub fn io_errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A name as a C string; a NUL inside is EINVAL, as the kernel would say.
pub fn cstr(name: &OsStr) -> Result<CString, Errno> {
    CString::new(name.as_bytes()).map_err(|_| libc::EINVAL)
}

/// The `/proc/self/fd/N` path of a descriptor: opening it reopens the
/// inode with new flags, which is how an `O_PATH` descriptor is turned
/// into a readable or writable one.
pub fn proc_path(fd: RawFd) -> CString {
    // A decimal number never contains NUL.
    CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

fn check(ret: libc::c_int) -> Result<libc::c_int, Errno> {
    if ret < 0 {
        Err(last_errno())
    } else {
        Ok(ret)
    }
}

fn owned(fd: libc::c_int) -> Result<OwnedFd, Errno> {
    let fd = check(fd)?;
    // SAFETY: `fd` was just returned by a successful open call and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// openat(2), close-on-exec.
pub fn openat(dir: &OwnedFd, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd, Errno> {
    let name = cstr(name)?;
    // SAFETY: `name` is a NUL-terminated string alive for the call; `dir`
    // is an open descriptor.
    owned(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })
}

/// Reopen the inode behind `fd` (an `O_PATH` descriptor) with `flags`.
pub fn reopen(fd: &OwnedFd, flags: libc::c_int) -> Result<OwnedFd, Errno> {
    let path = proc_path(fd.as_raw_fd());
    // SAFETY: `path` is a NUL-terminated string alive for the call.
    owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// open(2) of an absolute path with `O_PATH` (the backing root).
pub fn open_path(path: &std::path::Path) -> Result<OwnedFd, Errno> {
    let p = cstr(path.as_os_str())?;
    // SAFETY: `p` is a NUL-terminated string alive for the call.
    owned(unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })
}

fn zeroed_stat() -> libc::stat {
    // SAFETY: `struct stat` is plain old data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// fstat of the inode behind `fd` (works on `O_PATH` descriptors).
pub fn fstat(fd: &OwnedFd) -> Result<libc::stat, Errno> {
    let mut st = zeroed_stat();
    // SAFETY: `st` is a valid, writable `struct stat`; the empty path with
    // AT_EMPTY_PATH names `fd` itself.
    check(unsafe {
        libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
    })?;
    Ok(st)
}

/// fstatat(2) of `name` in `dir`, not following a final symlink.
pub fn fstatat(dir: &OwnedFd, name: &OsStr) -> Result<libc::stat, Errno> {
    let name = cstr(name)?;
    let mut st = zeroed_stat();
    // SAFETY: `st` is a valid, writable `struct stat`; `name` is
    // NUL-terminated and alive for the call.
    check(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn mkdirat(dir: &OwnedFd, name: &OsStr, mode: libc::mode_t) -> Result<(), Errno> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated and alive for the call.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: &OwnedFd, name: &OsStr, mode: libc::mode_t, rdev: libc::dev_t) -> Result<(), Errno> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated and alive for the call.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &OsStr, dir: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    let (target, name) = (cstr(target)?, cstr(name)?);
    // SAFETY: both strings are NUL-terminated and alive for the call.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// A hard link to the inode behind `fd` (an `O_PATH` descriptor), made
/// through its /proc path so that no special capability is needed.
pub fn linkat(fd: &OwnedFd, dir: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    let (from, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
    // SAFETY: both strings are NUL-terminated and alive for the call.
    check(unsafe {
        libc::linkat(libc::AT_FDCWD, from.as_ptr(), dir.as_raw_fd(), name.as_ptr(), libc::AT_SYMLINK_FOLLOW)
    })
    .map(drop)
}

pub fn unlinkat(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> Result<(), Errno> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated and alive for the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(dir: &OwnedFd, name: &OsStr, newdir: &OwnedFd, newname: &OsStr, flags: u32) -> Result<(), Errno> {
    let (name, newname) = (cstr(name)?, cstr(newname)?);
    // SAFETY: both strings are NUL-terminated and alive for the call.
    check(unsafe { libc::renameat2(dir.as_raw_fd(), name.as_ptr(), newdir.as_raw_fd(), newname.as_ptr(), flags) })
        .map(drop)
}

/// The target of the symlink behind `fd` (an `O_PATH | O_NOFOLLOW`
/// descriptor).
pub fn readlink(fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for its whole length; the empty path names
    // `fd` itself.
    let n = unsafe { libc::readlinkat(fd.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(last_errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// chmod of the inode behind `fd` (through its /proc path: fchmod refuses
/// `O_PATH` descriptors).
pub fn chmod(fd: &OwnedFd, mode: libc::mode_t) -> Result<(), Errno> {
    let p = proc_path(fd.as_raw_fd());
    // SAFETY: `p` is NUL-terminated and alive for the call.
    check(unsafe { libc::chmod(p.as_ptr(), mode) }).map(drop)
}

/// chown of the inode behind `fd`, not following symlinks; `u32::MAX`
/// (-1) leaves an id as it is.
pub fn chown(fd: &OwnedFd, uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: the empty path with AT_EMPTY_PATH names `fd` itself.
    check(unsafe {
        libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
    })
    .map(drop)
}

/// utimensat of the inode behind `fd` (through its /proc path).
pub fn utimens(fd: &OwnedFd, times: &[libc::timespec; 2]) -> Result<(), Errno> {
    let p = proc_path(fd.as_raw_fd());
    // SAFETY: `p` is NUL-terminated and `times` points at two timespecs,
    // both alive for the call.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) }).map(drop)
}

pub fn fallocate(fd: &OwnedFd, mode: libc::c_int, offset: i64, len: i64) -> Result<(), Errno> {
    // SAFETY: a plain system call on an open descriptor; no memory passed.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) }).map(drop)
}

pub fn fsync(fd: &OwnedFd, datasync: bool) -> Result<(), Errno> {
    // SAFETY: plain system calls on an open descriptor; no memory passed.
    check(unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })
    .map(drop)
}

pub fn statvfs(fd: &OwnedFd) -> Result<libc::statvfs, Errno> {
    let p = proc_path(fd.as_raw_fd());
    // SAFETY: `struct statvfs` is plain old data; all zeroes is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `p` is NUL-terminated; `st` is valid and writable.
    check(unsafe { libc::statvfs(p.as_ptr(), &mut st) })?;
    Ok(st)
}

/// Unmount `mountpoint`; when it is busy, detach it lazily (the kernel
/// ends the FUSE connection when the last file open on it closes). Falls
/// back to `fusermount3 -u -z` where umount2 is not permitted (a mount
/// made by a user other than root).
pub fn unmount(mountpoint: &std::path::Path) -> Result<(), Errno> {
    let p = cstr(mountpoint.as_os_str())?;
    // SAFETY: `p` is NUL-terminated and alive for the calls.
    let first = check(unsafe { libc::umount2(p.as_ptr(), 0) });
    match first {
        Ok(_) => return Ok(()),
        Err(libc::EBUSY) => {
            // SAFETY: as above.
            return check(unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) }).map(drop);
        }
        Err(libc::EPERM) => {}
        Err(e) => return Err(e),
    }
    let status = std::process::Command::new("fusermount3")
        .args(["-u", "-z", "-q", "--"])
        .arg(mountpoint)
        .status()
        .map_err(|e| io_errno(&e))?;
    if status.success() {
        Ok(())
    } else {
        Err(libc::EPERM)
    }
}

/// The extended attributes of the inode behind an `O_PATH` descriptor of
/// a regular file or a directory, through its `/proc/self/fd` path (the
/// f*xattr calls refuse `O_PATH` descriptors). An empty `buf` asks for the
/// size only, as the syscalls do.
pub fn getxattr(fd: &OwnedFd, name: &OsStr, buf: &mut [u8]) -> Result<usize, Errno> {
    let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
    let ptr = if buf.is_empty() { std::ptr::null_mut() } else { buf.as_mut_ptr().cast() };
    // SAFETY: both strings are NUL-terminated; `ptr` is null with length 0
    // or writable for `buf.len()` bytes, all alive for the call.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), ptr, buf.len()) };
    if n < 0 {
        return Err(last_errno());
    }
    Ok(n as usize)
}

/// listxattr of the inode behind `fd` (as `getxattr`): NUL-terminated
/// names into `buf`, or the size they need when `buf` is empty.
pub fn listxattr(fd: &OwnedFd, buf: &mut [u8]) -> Result<usize, Errno> {
    let p = proc_path(fd.as_raw_fd());
    let ptr = if buf.is_empty() { std::ptr::null_mut() } else { buf.as_mut_ptr().cast() };
    // SAFETY: `p` is NUL-terminated; `ptr` is null with length 0 or
    // writable for `buf.len()` bytes, all alive for the call.
    let n = unsafe { libc::listxattr(p.as_ptr(), ptr, buf.len()) };
    if n < 0 {
        return Err(last_errno());
    }
    Ok(n as usize)
}

/// setxattr of the inode behind `fd` (as `getxattr`); `flags` is
/// XATTR_CREATE, XATTR_REPLACE or 0.
pub fn setxattr(fd: &OwnedFd, name: &OsStr, value: &[u8], flags: libc::c_int) -> Result<(), Errno> {
    let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
    // SAFETY: both strings are NUL-terminated and `value` readable for its
    // length, all alive for the call.
    check(unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), flags) }).map(drop)
}

/// removexattr of the inode behind `fd` (as `getxattr`).
pub fn removexattr(fd: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    let (p, name) = (proc_path(fd.as_raw_fd()), cstr(name)?);
    // SAFETY: both strings are NUL-terminated and alive for the call.
    check(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
}

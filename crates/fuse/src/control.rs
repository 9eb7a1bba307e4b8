//! The `.pcache` directory at the mount root: the cache's `/proc` files.
//!
//! ```text
//!   .pcache/vmstat                 read-only, /proc/vmstat format
//!   .pcache/dirty_ratio            read-write, as /proc/sys/vm/dirty_ratio
//!   .pcache/dirty_background_ratio ... one file per PageCache::sysctl_names()
//!   .pcache/read_ahead_kb          (the bdi's knob in Linux)
//!   .pcache/zero                   1 GiB of zeros, writes discarded, no cache
//! ```
//!
//! The files are virtual: they exist in no backing directory (a real
//! `.pcache` in the backing root is hidden by them). As with procfs, a file
//! shows size 0 and its text is produced when it is opened (a seq_file
//! snapshot), which the handle then serves; direct I/O on the handle lets
//! the reader see past the size of 0. A write to a tunable is applied at
//! once, and a bad value fails the write(2) with the engine's errno
//! (EINVAL), leaving the tunable as it was.
//!
//! `zero` is the floor of a request's cost through FUSE: its reads are
//! answered with zeros and its writes discarded (as /dev/zero's) by the
//! thread that receives them, touching neither the cache nor the backing
//! disk, so what a benchmark measures on it is the kernel's FUSE round trip
//! and the daemon's dispatch alone.

use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};
use pcache::PageCache;

use crate::sys::Errno;

/// The name of the directory at the mount root.
pub const CTL_DIR_NAME: &str = ".pcache";
/// Node ids 2 to 63 are the control files; backing inodes get 64 and up.
pub const CTL_DIR: u64 = 2;
const CTL_FILE_BASE: u64 = 3;
pub const FIRST_BACKING_NODE: u64 = 64;

/// What a control file shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtlFile {
    VmStat,
    Sysctl(&'static str),
    Zero,
}

/// The size of `.pcache/zero`.
pub const ZERO_BYTES: u64 = 1 << 30;

pub fn is_ctl(nodeid: u64) -> bool {
    (CTL_DIR..FIRST_BACKING_NODE).contains(&nodeid)
}

/// The control files with their node ids, in directory order.
pub fn files(pc: &PageCache) -> Vec<(u64, &'static str, CtlFile)> {
    let mut v = vec![(CTL_FILE_BASE, "vmstat", CtlFile::VmStat), (CTL_FILE_BASE + 1, "zero", CtlFile::Zero)];
    for (i, name) in pc.sysctl_names().iter().enumerate() {
        v.push((CTL_FILE_BASE + 2 + i as u64, name, CtlFile::Sysctl(name)));
    }
    debug_assert!(v.iter().all(|(id, _, _)| *id < FIRST_BACKING_NODE));
    v
}

pub fn file_of(pc: &PageCache, nodeid: u64) -> Option<CtlFile> {
    files(pc).into_iter().find(|(id, _, _)| *id == nodeid).map(|(_, _, f)| f)
}

pub fn lookup(pc: &PageCache, name: &str) -> Option<u64> {
    files(pc).into_iter().find(|(_, n, _)| *n == name).map(|(id, _, _)| id)
}

/// Attributes of a control node; owned by the daemon's user, timestamps
/// of the mount.
pub fn attr(pc: &PageCache, nodeid: u64, mounted_at: SystemTime) -> Option<FileAttr> {
    let (kind, perm, size) = if nodeid == CTL_DIR {
        (FileType::Directory, 0o555, 0)
    } else {
        match file_of(pc, nodeid)? {
            CtlFile::VmStat => (FileType::RegularFile, 0o444, 0),
            CtlFile::Sysctl(_) => (FileType::RegularFile, 0o644, 0),
            CtlFile::Zero => (FileType::RegularFile, 0o666, ZERO_BYTES),
        }
    };
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    Some(FileAttr {
        ino: INodeNo(nodeid),
        size,
        blocks: 0,
        atime: mounted_at,
        mtime: mounted_at,
        ctime: mounted_at,
        crtime: mounted_at,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

/// A LOOKUP's answer that the name does not exist (node id 0): the kernel
/// keeps it as a negative entry for the entry's TTL.
pub fn negative_entry() -> FileAttr {
    let t = std::time::UNIX_EPOCH;
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The text a control file shows now.
pub fn render(pc: &PageCache, f: CtlFile) -> Vec<u8> {
    match f {
        CtlFile::VmStat => pc.vmstat().to_text().into_bytes(),
        CtlFile::Sysctl(name) => format!("{}\n", pc.sysctl_read(name).unwrap_or_default()).into_bytes(),
        CtlFile::Zero => Vec::new(),
    }
}

/// Apply a write to a control file.
pub fn write(pc: &PageCache, f: CtlFile, data: &[u8]) -> Result<(), Errno> {
    match f {
        CtlFile::VmStat => Err(libc::EACCES),
        CtlFile::Zero => Ok(()),
        CtlFile::Sysctl(name) => {
            let text = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
            pc.sysctl_write(name, text).map_err(|e| e.errno())
        }
    }
}

/// How long the kernel may cache a control node's attributes: not at all,
/// so that nothing about them is ever stale.
pub const TTL: Duration = Duration::ZERO;

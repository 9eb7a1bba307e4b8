//! The FUSE filesystem: names and metadata pass through to the backing
//! directory, file data goes through pcache.
//!
//! Nodes. The kernel names inodes by node id, and fuser takes `attr.ino`
//! as both the node id and `st_ino`. A backing inode's node id is a
//! function of its identity: `st_ino + 64` on the backing root's device
//! (ids below 64 are the root and the `.pcache` files), and for inodes on
//! other devices mounted inside the backing directory a number from
//! `Nodes::foreign`, kept for the life of the mount. So `st_ino` on the
//! mount is stable across a FORGET and a new lookup, and nothing is kept
//! per inode the kernel does not hold.
//!
//! Reaching a backing inode. A node holds no descriptor: the kernel may
//! keep 100,000 nodes looked up, and RLIMIT_NOFILE is usually far lower.
//! It holds its location instead (`Loc`): the parent node and the name it
//! was last looked up, created or renamed under (the dentry's `d_parent`
//! and `d_name`). Each operation opens an `O_PATH` descriptor by walking
//! that chain from the backing root (held open for the mount's life), in
//! one `openat` below PATH_MAX or in chunks for deeper trees, checks that
//! it reached the node's `(st_dev, st_ino)` (ESTALE otherwise, so a stale
//! name never touches another file) and closes it when done. Renames and
//! unlinks update the locations under `rename_lock`, which resolutions hold
//! shared (the kernel's rename_lock): a resolution never sees half a
//! rename. A node whose name goes (unlink, rmdir, rename over it) while the
//! kernel still knows it, and which is open or has other links, takes an
//! `O_PATH` descriptor of its inode just before, and holds it until its
//! last handle closes or FORGET (`Loc::Detached`): that is the only
//! descriptor a node ever holds. A regular file that loses its last name
//! while nothing has it open holds none (`Loc::Gone`) and its pages go at
//! once, so the backing filesystem frees its space when unlink(2) returns,
//! as it would without the mount (FORGET comes later, from another
//! session thread). Directories a node id refers to keep their parents'
//! nodes alive (`Arc`), as dentries pin their parents.
//!
//! Data. A regular file's data is the engine file keyed by the backing
//! inode (dev.rs). Each FUSE open takes its own engine handle (its own
//! readahead state and error cursor, as a `struct file`); the engine's
//! device opens the backing file on demand through the engine's bounded fd
//! cache, reaching it as above. When the last handle closes, the engine
//! keeps the inode only while it caches pages of it; an inode with nothing
//! cached is freed. When the kernel forgets the node, the engine drops the
//! file as the kernel evicts an inode: dirty pages are written back first
//! (`PageCache::evict`), unless the file has no name left, in which case
//! they are discarded (`unlink_dev`). If that writeback fails, the node
//! stays in the table (so the shutdown report can name the file by path)
//! and the flusher keeps trying. The engine's copy of a file's size is the
//! truth while it is cached; `getattr` reports it.
//!
//! Threads. fuser calls these methods on several session threads at once,
//! each serving the request it read (inflight.rs); requests that may wait
//! run under the interrupt watch. Shared state sits behind the mutexes of
//! `Shared`; the read and write of cached data take none of them beyond
//! the handle table's lookup, one of `HANDLE_SHARDS` locks (handle ids
//! are consecutive, so readers of different files meet on none). A FORGET and a LOOKUP of one node may now
//! run at once: `Node::data` orders the engine's eviction of the node's
//! file against a new open of it.
//!
//! Lock order: `Shared::rename_lock` → `Shared::nodes` → `Node::loc` → the
//! engine's locks; `Shared::handles` is never held with another of ours.
//! The engine's fd cache calls back into resolution (taking `rename_lock`
//! shared), so no engine call is made with `rename_lock` held.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::ops::Deref;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BsdFileFlags, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::{Mutex, RwLock};
use pcache::backing::Opener;
use pcache::{BackingDev, PageCache};

use crate::control::{self, CtlFile, CTL_DIR, CTL_DIR_NAME, FIRST_BACKING_NODE};
use crate::dev::{engine_key, parse_engine_key, InodeDev};
use crate::inflight::Watch;
use crate::sys::{self, Errno};

/// The root's node id (FUSE_ROOT_ID).
const FUSE_ROOT_ID: u64 = INodeNo::ROOT.0;

/// How long the kernel may trust names and attributes. Everything goes
/// through this mount, so its view only goes stale if the backing
/// directory is changed behind the mount's back (not supported).
const TTL: Duration = Duration::from_secs(1);

/// Node ids from here up name inodes on devices other than the backing
/// root's (`Nodes::foreign`); below it, `st_ino + FIRST_BACKING_NODE`.
const FOREIGN_BASE: u64 = 1 << 63;

/// The longest name a directory entry may have (NAME_MAX).
const NAME_MAX: usize = 255;

/// The longest relative path handed to one `openat` when resolving a deep
/// node (PATH_MAX less room for the terminating NUL).
const PATH_CHUNK: usize = libc::PATH_MAX as usize - 96;

/// Where a node's backing inode is reached from.
enum Loc {
    /// The backing root, held open for the mount's life.
    Root(Arc<OwnedFd>),
    /// `name` in the directory of `parent`.
    Named { parent: Arc<Node>, name: OsString },
    /// No name the mount knows (unlinked, replaced by a rename): an
    /// `O_PATH` descriptor held until the node's last handle closes or the
    /// kernel forgets it.
    Detached(Arc<OwnedFd>),
    /// No name and nothing open: no way to reach the inode (ESTALE).
    Gone,
}

/// An `O_PATH` descriptor of a node for one operation: one the node holds,
/// or one opened for the operation and closed after it.
pub enum NodeFd {
    Held(Arc<OwnedFd>),
    Fresh(OwnedFd),
}

impl Deref for NodeFd {
    type Target = OwnedFd;
    fn deref(&self) -> &OwnedFd {
        match self {
            NodeFd::Held(fd) => fd,
            NodeFd::Fresh(fd) => fd,
        }
    }
}

/// A backing inode the kernel knows.
pub struct Node {
    pub nodeid: u64,
    /// `(st_dev, st_ino)` of the backing inode.
    key: (u64, u64),
    loc: Mutex<Loc>,
    is_reg: bool,
    /// Lookups the kernel has not yet forgotten (nlookup).
    nlookup: AtomicU64,
    /// The last name of the file went (unlink, rename over it): its cached
    /// pages are discarded at forget instead of written back.
    unlinked: AtomicBool,
    /// Held while the engine opens, evicts or discards the node's file
    /// and while `opens` changes, so that an eviction at FORGET and an open
    /// after a new LOOKUP do not interleave.
    data: Mutex<()>,
    /// Data handles open on the node.
    opens: AtomicU64,
    /// Reached by a name `--kernel-cache` matches: every open from then on
    /// goes through the kernel's page cache (sticky, so that hard links of
    /// other names share the kernel's one copy instead of bypassing it).
    kernel_cached: AtomicBool,
    /// Times set explicitly (utimensat, as tar does after writing) while
    /// the file's data was still in the cache: that data's writeback moves
    /// the backing mtime on, so these are set again once it is written
    /// (fsync, FORGET, unmount) and reported from here until then. A write
    /// clears them.
    times: Mutex<Option<[libc::timespec; 2]>>,
    /// When data was last written through the mount (ns since the epoch;
    /// 0: never). The backing mtime only moves at writeback, so getattr
    /// shows the later of the two, as the kernel updates mtime at write.
    written_ns: AtomicU64,
}

impl Node {
    fn engine_key(&self) -> String {
        engine_key(self.key.0, self.key.1)
    }

    /// Whether a LOOKUP that found this node's `(st_dev, st_ino)` found a
    /// new inode under a reused number: this node's inode lost its last
    /// name with nothing holding it (so the number was free to reuse), or
    /// the type differs.
    fn reused_by(&self, is_reg: bool) -> bool {
        self.is_reg != is_reg || matches!(*self.loc.lock(), Loc::Gone)
    }

    /// Data was written at `ns`: its mtime is now, not any time set before.
    fn written(&self, ns: u64) {
        self.written_ns.store(ns, Ordering::Relaxed);
        *self.times.lock() = None;
    }

    /// Whether the node's location is `name` in `parent`.
    fn is_at(&self, parent: &Node, name: &OsStr) -> bool {
        matches!(&*self.loc.lock(), Loc::Named { parent: p, name: n } if p.nodeid == parent.nodeid && n == name)
    }
}

/// What a SETATTR asks to change.
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<u64>,
}

/// An open file.
enum Handle {
    Data {
        node: Arc<Node>,
        file: pcache::File,
        writable: bool,
    },
    Ctl {
        file: CtlFile,
        text: Vec<u8>,
    },
    /// `.pcache/zero`.
    Zero,
    Dir {
        entries: Vec<(u64, FileType, Vec<u8>)>,
    },
}

#[derive(Default)]
struct Nodes {
    /// The nodes the kernel holds (nlookup > 0), by node id, and those
    /// whose eviction from the engine failed (their dirty data waits).
    live: HashMap<u64, Arc<Node>>,
    /// Node ids of inodes on devices other than the root's, for the life
    /// of the mount (a device mounted inside the backing directory).
    foreign: HashMap<(u64, u64), u64>,
    next_foreign: u64,
}

/// Locks of the handle table: a power of two, several per session thread.
const HANDLE_SHARDS: usize = 16;

/// Open handles by id, in `HANDLE_SHARDS` maps each behind its own lock
/// on its own cache lines, so that session threads serving different
/// files do not share one lock on the read and write path.
#[derive(Default)]
struct HandleTable {
    shards: [HandleShard; HANDLE_SHARDS],
}

#[derive(Default)]
#[repr(align(128))]
struct HandleShard(Mutex<HashMap<u64, Arc<Handle>>>);

impl HandleTable {
    fn shard(&self, fh: u64) -> parking_lot::MutexGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.shards[fh as usize % HANDLE_SHARDS].0.lock()
    }

    fn clear(&self) {
        for s in &self.shards {
            s.0.lock().clear();
        }
    }
}

/// State shared by the session threads.
pub struct Shared {
    pub cache: PageCache,
    nodes: Mutex<Nodes>,
    /// Held shared while a node's location is resolved to a descriptor,
    /// exclusively while a rename or unlink changes names and locations.
    rename_lock: RwLock<()>,
    root_key: (u64, u64),
    root_fd: Arc<OwnedFd>,
    backing: PathBuf,
    handles: HandleTable,
    next_fh: AtomicU64,
    mounted_at: SystemTime,
    /// Whether the daemon runs as root: it then gives new files the
    /// caller's owner, as the kernel would.
    as_root: bool,
    /// This, for the engine devices' openers.
    self_ref: Weak<Shared>,
    /// The shutdown's verdict, once made: the files (by path) whose dirty
    /// data could not be written back.
    report: Mutex<Option<Vec<String>>>,
    /// The names of files opened through the kernel's page cache, fixed
    /// at INIT (`FsOptions::kernel_cache`, or the fallback's default).
    kernel_cache: OnceLock<Vec<glob::Pattern>>,
}

/// How the mount serves files; fixed for its life.
#[derive(Clone, Debug)]
pub struct FsOptions {
    /// Files whose name matches one of these are opened without
    /// FOPEN_DIRECT_IO: the kernel's page cache sits in front of pcache for
    /// them, so they can be mapped shared on any kernel, and their hits
    /// cost no round trip.
    pub kernel_cache: Vec<glob::Pattern>,
    /// Ask for FUSE_DIRECT_IO_ALLOW_MMAP; false behaves as on a kernel
    /// before 6.6 (the fallback, testable on any kernel).
    pub direct_io_mmap: bool,
}

impl Default for FsOptions {
    fn default() -> FsOptions {
        FsOptions { kernel_cache: Vec::new(), direct_io_mmap: true }
    }
}

/// What `--kernel-cache` is where the kernel cannot map direct-I/O files
/// and none was given: SQLite's WAL index, the commonest file that
/// programs map shared.
pub const FALLBACK_KERNEL_CACHE: &[&str] = &["*-shm"];

/// The filesystem fuser drives.
pub struct PcacheFs {
    shared: Arc<Shared>,
    watch: Watch,
    options: FsOptions,
}

fn file_type(mode: libc::mode_t) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn time_of(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs())
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

fn timespec_of(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        Some(TimeOrNow::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as _ },
            Err(e) => libc::timespec { tv_sec: -(e.duration().as_secs() as libc::time_t), tv_nsec: 0 },
        },
    }
}

/// A name for a new directory entry: ENAMETOOLONG past NAME_MAX, as the
/// kernel's filesystems say (FUSE itself lets names up to 1024 through).
fn check_name(name: &OsStr) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        Err(libc::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

impl Shared {
    fn node(&self, nodeid: u64) -> Result<Arc<Node>, Errno> {
        self.nodes.lock().live.get(&nodeid).cloned().ok_or(libc::ESTALE)
    }

    /// The backing descriptor for an extended-attribute call on `nodeid`,
    /// or None where there are none to pass on: the control files, and
    /// symlinks, whose `/proc/self/fd` path would lead to their target
    /// (Linux refuses user attributes on symlinks in any case).
    fn xattr_fd(&self, nodeid: u64) -> Result<Option<NodeFd>, Errno> {
        if control::is_ctl(nodeid) {
            return Ok(None);
        }
        let node = self.node(nodeid)?;
        let fd = self.fd_of(&node)?;
        if !node.is_reg && sys::fstat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Ok(None);
        }
        Ok(Some(fd))
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        self.handles.shard(fh).get(&fh).cloned().ok_or(libc::EBADF)
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.shard(fh).insert(fh, Arc::new(h));
        fh
    }

    /// Whether a file named `name` is opened through the kernel's page
    /// cache.
    fn serve_cached(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else { return false };
        self.kernel_cache.get().is_some_and(|globs| globs.iter().any(|g| g.matches(name)))
    }

    /// The node id of a backing inode.
    fn nodeid_of(&self, nodes: &mut Nodes, key: (u64, u64)) -> u64 {
        if key == self.root_key {
            return FUSE_ROOT_ID;
        }
        if key.0 == self.root_key.0 {
            if let Some(id) = key.1.checked_add(FIRST_BACKING_NODE).filter(|&id| id < FOREIGN_BASE) {
                return id;
            }
        }
        let next = &mut nodes.next_foreign;
        *nodes.foreign.entry(key).or_insert_with(|| {
            *next += 1;
            FOREIGN_BASE + *next
        })
    }

    /// The live node of a backing inode, if the kernel knows it.
    fn live_node(&self, key: (u64, u64)) -> Option<Arc<Node>> {
        let mut nodes = self.nodes.lock();
        let id = self.nodeid_of(&mut nodes, key);
        nodes.live.get(&id).filter(|n| n.key == key).cloned()
    }

    /// An `O_PATH` descriptor of `node`'s backing inode.
    fn fd_of(&self, node: &Arc<Node>) -> Result<NodeFd, Errno> {
        let _r = self.rename_lock.read();
        self.resolve(node)
    }

    /// The chain of names from a held descriptor (the root, or a detached
    /// node's) down to `node`.
    fn location(node: &Arc<Node>) -> Result<(Arc<OwnedFd>, Vec<OsString>), Errno> {
        let mut names = Vec::new();
        let mut cur = node.clone();
        loop {
            let next = match &*cur.loc.lock() {
                Loc::Root(fd) | Loc::Detached(fd) => {
                    names.reverse();
                    return Ok((fd.clone(), names));
                }
                Loc::Gone => return Err(libc::ESTALE),
                Loc::Named { parent, name } => {
                    names.push(name.clone());
                    parent.clone()
                }
            };
            // Defensive: renames never make a cycle, as the kernel refuses
            // to move a directory below itself.
            if names.len() > libc::PATH_MAX as usize {
                return Err(libc::ELOOP);
            }
            cur = next;
        }
    }

    /// Resolve `node` to a descriptor (the caller holds `rename_lock`):
    /// one `openat` of its path from the held descriptor, in chunks below
    /// PATH_MAX for deep trees, checked to be the node's inode.
    fn resolve(&self, node: &Arc<Node>) -> Result<NodeFd, Errno> {
        let (base, names) = Self::location(node)?;
        let mut fd = NodeFd::Held(base);
        let mut i = 0;
        while i < names.len() {
            let mut path: Vec<u8> = Vec::new();
            while i < names.len() && (path.is_empty() || path.len() + 1 + names[i].len() < PATH_CHUNK) {
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(names[i].as_bytes());
                i += 1;
            }
            let last = if i == names.len() { libc::O_NOFOLLOW } else { libc::O_DIRECTORY };
            fd = NodeFd::Fresh(sys::openat(&fd, OsStr::from_bytes(&path), libc::O_PATH | last, 0)?);
        }
        if !names.is_empty() {
            let st = sys::fstat(&fd)?;
            if (st.st_dev, st.st_ino) != node.key {
                return Err(libc::ESTALE);
            }
        }
        Ok(fd)
    }

    /// The backing path of a node, for messages ("unlinked" when it has
    /// no name left).
    fn path_of(&self, node: &Arc<Node>) -> String {
        let _r = self.rename_lock.read();
        match Self::location(node) {
            Ok((base, names)) if Arc::ptr_eq(&base, &self.root_fd) => {
                let mut p = self.backing.clone();
                for n in &names {
                    p.push(n);
                }
                p.display().to_string()
            }
            Ok(_) => format!("{} (unlinked)", node.engine_key()),
            Err(_) => node.engine_key(),
        }
    }

    /// The path of the file an engine key names (`fuse:DEV:INO`), by its
    /// node; the key itself when no node knows it.
    fn path_of_key(&self, key: &str) -> String {
        match parse_engine_key(key).and_then(|k| self.live_node(k)) {
            Some(node) => self.path_of(&node),
            None => format!("{key} (no path known)"),
        }
    }

    /// Attributes of a node: the backing inode's, with the engine's size
    /// and the latest write time while the file is cached.
    fn attr(&self, node: &Arc<Node>) -> Result<FileAttr, Errno> {
        let st = sys::fstat(&*self.fd_of(node)?)?;
        Ok(self.attr_st(node, &st))
    }

    fn attr_st(&self, node: &Node, st: &libc::stat) -> FileAttr {
        let mut attr = self.attr_of(node.nodeid, st);
        if node.is_reg {
            if let Some(size) = self.cache.cached_len(&node.engine_key()) {
                attr.size = size;
            }
            if let Some([a, m]) = *node.times.lock() {
                attr.atime = time_of(a.tv_sec, a.tv_nsec);
                attr.mtime = time_of(m.tv_sec, m.tv_nsec);
            }
            let w = node.written_ns.load(Ordering::Relaxed);
            if w > 0 {
                let written = UNIX_EPOCH + Duration::from_nanos(w);
                attr.mtime = attr.mtime.max(written);
                attr.ctime = attr.ctime.max(written);
            }
        }
        attr
    }

    fn attr_of(&self, nodeid: u64, st: &libc::stat) -> FileAttr {
        FileAttr {
            ino: INodeNo(nodeid),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: time_of(st.st_atime, st.st_atime_nsec),
            mtime: time_of(st.st_mtime, st.st_mtime_nsec),
            ctime: time_of(st.st_ctime, st.st_ctime_nsec),
            crtime: time_of(st.st_ctime, st.st_ctime_nsec),
            kind: file_type(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
            flags: 0,
        }
    }

    /// LOOKUP: find `name` in `parent` and count a lookup on its node,
    /// whose location becomes that name.
    fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        if parent == FUSE_ROOT_ID && name == CTL_DIR_NAME {
            return control::attr(&self.cache, CTL_DIR, self.mounted_at).ok_or(libc::ENOENT);
        }
        if parent == CTL_DIR {
            let id = name.to_str().and_then(|n| control::lookup(&self.cache, n)).ok_or(libc::ENOENT)?;
            return control::attr(&self.cache, id, self.mounted_at).ok_or(libc::ENOENT);
        }
        if control::is_ctl(parent) {
            return Err(libc::ENOTDIR);
        }
        check_name(name)?;
        let p = self.node(parent)?;
        let r = self.rename_lock.read();
        let st = sys::fstatat(&*self.resolve(&p)?, name)?;
        let key = (st.st_dev, st.st_ino);
        let node = {
            let mut nodes = self.nodes.lock();
            let id = self.nodeid_of(&mut nodes, key);
            let is_reg = st.st_mode & libc::S_IFMT == libc::S_IFREG;
            let live = nodes.live.get(&id).cloned();
            match live {
                // The same inode, found again: the latest name is the one to
                // reach it by (a detached node found under a new hard link
                // lets its descriptor go).
                Some(n) if !n.reused_by(is_reg) => {
                    n.nlookup.fetch_add(1, Ordering::Relaxed);
                    if id != FUSE_ROOT_ID {
                        *n.loc.lock() = Loc::Named { parent: p.clone(), name: name.to_owned() };
                    }
                    n
                }
                // No node, or one whose inode is gone and whose number the
                // backing filesystem has given to a new inode (the kernel's
                // FORGET of the old one may still be on its way): a new node
                // under the same id, taking over the old one's lookup count,
                // which that FORGET will subtract.
                old => {
                    let before = old.map_or(0, |o| o.nlookup.load(Ordering::Relaxed));
                    let n = Arc::new(Node {
                        nodeid: id,
                        key,
                        loc: Mutex::new(Loc::Named { parent: p.clone(), name: name.to_owned() }),
                        is_reg,
                        nlookup: AtomicU64::new(before + 1),
                        unlinked: AtomicBool::new(false),
                        data: Mutex::new(()),
                        opens: AtomicU64::new(0),
                        kernel_cached: AtomicBool::new(false),
                        times: Mutex::new(None),
                        written_ns: AtomicU64::new(0),
                    });
                    nodes.live.insert(id, n.clone());
                    n
                }
            }
        };
        if node.is_reg && self.serve_cached(name) {
            node.kernel_cached.store(true, Ordering::Release);
        }
        // No engine call under rename_lock: the engine's fd cache resolves
        // nodes (taking it shared) while holding its own locks.
        drop(r);
        Ok(self.attr_st(&node, &st))
    }

    /// FORGET: drop `n` lookups; at zero the node goes, and with it the
    /// engine's copy of the file (written back first if it still has a
    /// name). A node whose data could not be written back stays.
    fn forget(&self, nodeid: u64, n: u64) {
        let node = {
            let nodes = self.nodes.lock();
            let Some(node) = nodes.live.get(&nodeid) else { return };
            let left = node.nlookup.load(Ordering::Relaxed).saturating_sub(n);
            node.nlookup.store(left, Ordering::Relaxed);
            if left > 0 {
                return;
            }
            node.clone()
        };
        // A LOOKUP on another thread may have found the node since: it
        // stays, and keeps its file. Checked under `data`, which an open
        // of the node's file takes too, so the eviction never drops a file
        // opened after that LOOKUP.
        let _data = node.data.lock();
        if node.nlookup.load(Ordering::Relaxed) != 0 {
            return;
        }
        if self.release_data(&node) {
            let mut nodes = self.nodes.lock();
            let same = nodes.live.get(&nodeid).is_some_and(|n| Arc::ptr_eq(n, &node));
            if node.nlookup.load(Ordering::Relaxed) == 0 && same {
                nodes.live.remove(&nodeid);
            }
        }
    }

    /// `node`'s data is written back: set the times kept since they were
    /// set (`Node::times`) on the backing file again, over the writeback's.
    fn settle_times(&self, node: &Arc<Node>) {
        if node.times.lock().is_none() {
            return;
        }
        if let Ok(fd) = self.fd_of(node) {
            if let Some(ts) = node.times.lock().take() {
                let _ = sys::utimens(&fd, &ts);
            }
        }
    }

    /// The engine lets go of a node's file (forget, unmount). False when
    /// its dirty data could not be written back: it stays cached.
    fn release_data(&self, node: &Arc<Node>) -> bool {
        if !node.is_reg {
            return true;
        }
        // A file whose last name went was discarded then (`last_link_gone`:
        // the engine drops its pages at its last close); its number may
        // since name a new file, whose engine file this key now is.
        if node.unlinked.load(Ordering::Acquire) {
            return true;
        }
        let res = self.cache.evict(&node.engine_key()).map(drop);
        match res {
            Ok(()) => {
                self.settle_times(node);
                true
            }
            Err(e) => {
                // The file stays cached with its dirty pages; the flusher
                // and the final writeback at unmount retry them.
                eprintln!("pcache mount: writing back {}: {e}", self.path_of(node));
                false
            }
        }
    }

    /// A new engine handle on a node's data. The engine finds the file by
    /// its key if it is cached; else a device is made, which opens the
    /// backing file through the fd cache, reaching it by the node.
    fn open_data(&self, node: &Arc<Node>) -> Result<pcache::File, Errno> {
        if !node.is_reg {
            return Err(libc::EINVAL);
        }
        let key = node.engine_key();
        let _data = node.data.lock();
        let make = || {
            let opener = self.opener(node);
            let dev = InodeDev::open(self.cache.fd_cache(), key.clone(), self.cache.page_size(), opener)
                .map_err(|e| pcache::Error::io(&key, e))?;
            Ok(Arc::new(dev) as Arc<dyn BackingDev>)
        };
        self.cache.open_dev_with(&key, make).map_err(|e| e.errno())
    }

    /// A handle the kernel will hold (OPEN, CREATE) on `node`'s data, with
    /// the open's O_TRUNC applied; counted in `opens` until `close_data`.
    /// Counted first, so that an unlink racing the open keeps the inode
    /// reachable.
    fn open_handle(&self, node: Arc<Node>, flags: i32) -> Result<u64, Errno> {
        node.opens.fetch_add(1, Ordering::AcqRel);
        let file = self.open_data(&node).and_then(|file| {
            if flags & libc::O_TRUNC != 0 {
                file.set_len(0).map_err(|e| e.errno())?;
            }
            Ok(file)
        });
        match file {
            Ok(file) => {
                let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
                Ok(self.add_handle(Handle::Data { node, file, writable }))
            }
            Err(e) => {
                self.close_data(&node);
                Err(e)
            }
        }
    }

    /// A data handle on `node` closed. When it was the last and the file
    /// has no name left, the node lets its inode go (the engine drops the
    /// pages as the handle's engine file closes), so that the backing
    /// filesystem frees the space now rather than at FORGET.
    fn close_data(&self, node: &Node) {
        let _data = node.data.lock();
        if node.opens.fetch_sub(1, Ordering::AcqRel) == 1 && node.unlinked.load(Ordering::Acquire) {
            let _w = self.rename_lock.write();
            let mut loc = node.loc.lock();
            if matches!(*loc, Loc::Detached(_)) {
                *loc = Loc::Gone;
            }
        }
    }

    /// How the engine reopens a node's backing file: resolve the node to
    /// an `O_PATH` descriptor and open that inode through /proc.
    fn opener(&self, node: &Arc<Node>) -> Opener {
        let (shared, node) = (self.self_ref.clone(), Arc::downgrade(node));
        Box::new(move |flags| {
            let stale = || std::io::Error::from_raw_os_error(libc::ESTALE);
            let (shared, node) = (shared.upgrade().ok_or_else(stale)?, node.upgrade().ok_or_else(stale)?);
            let fd = shared.fd_of(&node).map_err(std::io::Error::from_raw_os_error)?;
            let path = sys::proc_path(fd.as_raw_fd());
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(OsStr::from_bytes(path.as_bytes()))
        })
    }

    /// The last name of the backing inode `key` is gone: its pages are
    /// discarded, now if no handle has it open, else when the last closes
    /// (the engine's unlink); the node, if the kernel still holds it, is
    /// marked so that FORGET discards rather than writes back.
    fn last_link_gone(&self, key: (u64, u64)) {
        let node = self.live_node(key);
        let _data = node.as_ref().map(|n| {
            let g = n.data.lock();
            n.unlinked.store(true, Ordering::Release);
            g
        });
        let _ = self.cache.unlink_dev(&engine_key(key.0, key.1));
    }

    /// The node named `name` in `p`, if the kernel knows it by that name,
    /// with an `O_PATH` descriptor of it to hold once the name is gone:
    /// none for a regular file's last link that nothing has open, whose
    /// inode is then let go (its space freed) with the name. The caller
    /// holds `rename_lock` exclusively.
    fn detachable(&self, pfd: &OwnedFd, p: &Node, name: &OsStr) -> Option<(Arc<Node>, Option<OwnedFd>)> {
        let st = sys::fstatat(pfd, name).ok()?;
        let node = self.live_node((st.st_dev, st.st_ino)).filter(|n| n.is_at(p, name))?;
        let unused = node.is_reg && st.st_nlink <= 1 && node.opens.load(Ordering::Acquire) == 0;
        let fd = if unused { None } else { sys::openat(pfd, name, libc::O_PATH | libc::O_NOFOLLOW, 0).ok() };
        Some((node, fd))
    }

    /// An `O_PATH` descriptor of `name` in `pfd`, held from before a file's
    /// last link goes until the engine has let go of its pages: while it is
    /// open the backing filesystem cannot give the inode's number to a new
    /// file, whose engine key (`fuse:DEV:INO`) would otherwise meet the old
    /// file's pages.
    fn pin(pfd: &OwnedFd, name: &OsStr) -> Option<OwnedFd> {
        sys::openat(pfd, name, libc::O_PATH | libc::O_NOFOLLOW, 0).ok()
    }

    /// The node lost its name: it keeps its inode through `fd`, or with
    /// none can no longer reach it (ESTALE).
    fn detach(node: &Node, fd: Option<OwnedFd>) {
        *node.loc.lock() = match fd {
            Some(fd) => Loc::Detached(Arc::new(fd)),
            None => Loc::Gone,
        };
    }

    /// UNLINK and RMDIR.
    fn remove(&self, parent: u64, name: &OsStr, flags: libc::c_int) -> Result<(), Errno> {
        if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
            return Err(libc::EPERM);
        }
        check_name(name)?;
        let p = self.node(parent)?;
        let last_link = {
            let _w = self.rename_lock.write();
            let pfd = self.resolve(&p)?;
            let st = sys::fstatat(&pfd, name)?;
            let detach = self.detachable(&pfd, &p, name);
            let last = st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink <= 1;
            let pin = if last { Self::pin(&pfd, name) } else { None };
            sys::unlinkat(&pfd, name, flags)?;
            if let Some((node, fd)) = detach {
                Self::detach(&node, fd);
            }
            last.then_some(((st.st_dev, st.st_ino), pin))
        };
        if let Some((key, pin)) = last_link {
            self.last_link_gone(key);
            drop(pin);
        }
        Ok(())
    }

    /// RENAME: the moved node's location follows it; a node replaced by it
    /// is detached; RENAME_EXCHANGE swaps the two.
    fn rename(&self, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<(), Errno> {
        let ctl = |p: u64, n: &OsStr| control::is_ctl(p) || (p == FUSE_ROOT_ID && n == CTL_DIR_NAME);
        if ctl(parent, name) || ctl(newparent, newname) {
            return Err(libc::EPERM);
        }
        check_name(name)?;
        check_name(newname)?;
        let (p, np) = (self.node(parent)?, self.node(newparent)?);
        let exchanged = flags & libc::RENAME_EXCHANGE != 0;
        let replaced_last = {
            let _w = self.rename_lock.write();
            let (pfd, npfd) = (self.resolve(&p)?, self.resolve(&np)?);
            let src = sys::fstatat(&pfd, name)?;
            let replaced = sys::fstatat(&npfd, newname).ok();
            let same = replaced.is_some_and(|t| (t.st_dev, t.st_ino) == (src.st_dev, src.st_ino));
            let moving = self.live_node((src.st_dev, src.st_ino)).filter(|n| n.is_at(&p, name));
            let target = if same { None } else { self.detachable(&npfd, &np, newname) };
            let last = replaced.filter(|t| !exchanged && t.st_mode & libc::S_IFMT == libc::S_IFREG && t.st_nlink <= 1);
            let pin = if last.is_some() && !same { Self::pin(&npfd, newname) } else { None };
            sys::renameat2(&pfd, name, &npfd, newname, flags)?;
            if same {
                return Ok(());
            }
            if let Some(n) = &moving {
                *n.loc.lock() = Loc::Named { parent: np.clone(), name: newname.to_owned() };
            }
            if let Some((t, fd)) = target {
                if exchanged {
                    *t.loc.lock() = Loc::Named { parent: p.clone(), name: name.to_owned() };
                } else {
                    Self::detach(&t, fd);
                }
            }
            last.map(|t| ((t.st_dev, t.st_ino), pin))
        };
        if let Some((key, pin)) = replaced_last {
            self.last_link_gone(key);
            drop(pin);
        }
        Ok(())
    }

    /// Give a new backing inode the caller's owner (a root daemon creates
    /// everything as root otherwise).
    fn own(&self, req: &Request, fd: &OwnedFd) {
        if self.as_root {
            // Best effort, as the file exists already; a failure leaves it
            // owned by root, which the caller can still use.
            let _ = sys::chown(fd, req.uid(), req.gid());
        }
    }

    /// After creating `name` in `parent`: give it its owner and look it up.
    fn created(&self, req: &Request, parent: &Arc<Node>, name: &OsStr) -> Result<FileAttr, Errno> {
        if self.as_root {
            let fd = sys::openat(&*self.fd_of(parent)?, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
            self.own(req, &fd);
        }
        self.lookup(parent.nodeid, name)
    }

    fn setattr(&self, nodeid: u64, a: SetAttr) -> Result<FileAttr, Errno> {
        let SetAttr { mode, uid, gid, size, atime, mtime, fh } = a;
        if control::is_ctl(nodeid) {
            // Truncation of a tunable before a write (echo N > file) is
            // accepted and means nothing; the rest is not allowed.
            if mode.is_some() || uid.is_some() || gid.is_some() {
                return Err(libc::EPERM);
            }
            return control::attr(&self.cache, nodeid, self.mounted_at).ok_or(libc::ENOENT);
        }
        let node = self.node(nodeid)?;
        let fd = self.fd_of(&node)?;
        if let Some(mode) = mode {
            sys::chmod(&fd, mode & 0o7777)?;
        }
        if uid.is_some() || gid.is_some() {
            sys::chown(&fd, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))?;
        }
        if let Some(size) = size {
            if !node.is_reg {
                return Err(if file_type(sys::fstat(&fd)?.st_mode) == FileType::Directory {
                    libc::EISDIR
                } else {
                    libc::EINVAL
                });
            }
            let by_handle = fh.and_then(|fh| match self.handle(fh).ok().as_deref() {
                Some(Handle::Data { file, .. }) => file.reopen().ok(),
                _ => None,
            });
            let f = match by_handle {
                Some(f) => f,
                None => self.open_data(&node)?,
            };
            f.set_len(size).map_err(|e| e.errno())?;
            node.written(now_ns());
        }
        if atime.is_some() || mtime.is_some() {
            sys::utimens(&fd, &[timespec_of(atime), timespec_of(mtime)])?;
            if node.is_reg {
                node.written_ns.store(0, Ordering::Relaxed);
                // The writeback of data still cached would overtake these
                // times on the backing file: keep them, as the backing
                // filesystem resolved them, to set again once it is written
                // (without waiting for that writeback here: tar sets the
                // times of every file it writes).
                let mut times = node.times.lock();
                *times = None;
                if self.cache.is_cached(&node.engine_key()) {
                    let st = sys::fstat(&fd)?;
                    *times = Some([
                        libc::timespec { tv_sec: st.st_atime, tv_nsec: st.st_atime_nsec },
                        libc::timespec { tv_sec: st.st_mtime, tv_nsec: st.st_mtime_nsec },
                    ]);
                }
            }
        }
        drop(fd);
        self.attr(&node)
    }

    fn readdir_entries(&self, nodeid: u64) -> Result<Vec<(u64, FileType, Vec<u8>)>, Errno> {
        let mut out: Vec<(u64, FileType, Vec<u8>)> =
            vec![(nodeid, FileType::Directory, b".".to_vec()), (nodeid, FileType::Directory, b"..".to_vec())];
        if nodeid == CTL_DIR {
            for (id, name, _) in control::files(&self.cache) {
                out.push((id, FileType::RegularFile, name.as_bytes().to_vec()));
            }
            return Ok(out);
        }
        let node = self.node(nodeid)?;
        let fd = self.fd_of(&node)?;
        let dev = sys::fstat(&fd)?.st_dev;
        let dirfd = sys::reopen(&fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
        drop(fd);
        let path = sys::proc_path(dirfd.as_raw_fd());
        let rd = std::fs::read_dir(OsStr::from_bytes(path.as_bytes())).map_err(|e| sys::io_errno(&e))?;
        let mut nodes = self.nodes.lock();
        for entry in rd {
            let entry = entry.map_err(|e| sys::io_errno(&e))?;
            let name = entry.file_name();
            if nodeid == FUSE_ROOT_ID && name == CTL_DIR_NAME {
                continue; // hidden by the control directory
            }
            use std::os::unix::fs::DirEntryExt;
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                Ok(t) if t.is_file() => FileType::RegularFile,
                Ok(_) => FileType::NamedPipe,
                Err(_) => FileType::RegularFile,
            };
            // d_ino must match st_ino: the node id the entry will have.
            let id = self.nodeid_of(&mut nodes, (dev, entry.ino()));
            out.push((id, kind, name.as_bytes().to_vec()));
        }
        if nodeid == FUSE_ROOT_ID {
            out.push((CTL_DIR, FileType::Directory, CTL_DIR_NAME.as_bytes().to_vec()));
        }
        Ok(out)
    }

    fn fallocate(
        &self,
        node: &Arc<Node>,
        file: &pcache::File,
        offset: i64,
        length: i64,
        mode: i32,
    ) -> Result<(), Errno> {
        if offset < 0 || length <= 0 {
            return Err(libc::EINVAL);
        }
        let (off, len) = (offset as u64, length as u64);
        let end = off.checked_add(len).ok_or(libc::EFBIG)?;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => {
                // Reserve the blocks in the backing file (ENOSPC now rather
                // than at writeback), then grow the cached size.
                let fd = sys::reopen(&*self.fd_of(node)?, libc::O_WRONLY)?;
                sys::fallocate(&fd, libc::FALLOC_FL_KEEP_SIZE, offset, length)?;
                if !keep_size && end > file.len().map_err(|e| e.errno())? {
                    file.set_len(end).map_err(|e| e.errno())?;
                }
                Ok(())
            }
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => file.punch_hole(off, len).map_err(|e| e.errno()),
            libc::FALLOC_FL_ZERO_RANGE => {
                let size = file.len().map_err(|e| e.errno())?;
                let punch_end = end.min(size);
                if off < punch_end {
                    file.punch_hole(off, punch_end - off).map_err(|e| e.errno())?;
                }
                if !keep_size && end > size {
                    file.set_len(end).map_err(|e| e.errno())?;
                }
                Ok(())
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    /// Unmount: let go of every node's file, write back everything that
    /// can be written, stop the cache, and keep the verdict: the files (by
    /// backing path) whose dirty data could not be written. Runs once;
    /// later calls return the same verdict.
    pub fn shutdown(&self) -> Vec<String> {
        let mut report = self.report.lock();
        if let Some(r) = report.as_ref() {
            return r.clone();
        }
        self.handles.clear();
        let nodes: Vec<Arc<Node>> = self.nodes.lock().live.values().cloned().collect();
        for node in &nodes {
            self.release_data(node);
        }
        // Writes back what it can, stops the flushers and kswapd, and names
        // what is left; paths come from the node table, still intact.
        let failed = match self.cache.shutdown() {
            Ok(()) => Vec::new(),
            Err(pcache::Error::Unwritten { files }) => files
                .iter()
                .map(|f| {
                    format!(
                        "{}: {} dirty pages not written ({})",
                        self.path_of_key(&f.name),
                        f.pages,
                        std::io::Error::from_raw_os_error(f.errno)
                    )
                })
                .collect(),
            Err(e) => vec![format!("shutting the cache down: {e}")],
        };
        self.nodes.lock().live.clear();
        *report = Some(failed.clone());
        failed
    }

    /// Files (by path) with dirty pages now, and why they are not written.
    pub fn unwritten(&self) -> Vec<String> {
        self.cache
            .unwritten_files()
            .iter()
            .map(|f| format!("{}: {} dirty pages", self.path_of_key(&f.name), f.pages))
            .collect()
    }
}

impl PcacheFs {
    /// A filesystem serving `backing` through `cache`.
    pub fn new(cache: PageCache, backing: &std::path::Path, options: FsOptions) -> Result<PcacheFs, Errno> {
        let root_fd = Arc::new(sys::open_path(backing)?);
        let st = sys::fstat(&root_fd)?;
        let root_key = (st.st_dev, st.st_ino);
        let root = Arc::new(Node {
            nodeid: FUSE_ROOT_ID,
            key: root_key,
            loc: Mutex::new(Loc::Root(root_fd.clone())),
            is_reg: false,
            nlookup: AtomicU64::new(1),
            unlinked: AtomicBool::new(false),
            data: Mutex::new(()),
            opens: AtomicU64::new(0),
            kernel_cached: AtomicBool::new(false),
            times: Mutex::new(None),
            written_ns: AtomicU64::new(0),
        });
        let mut nodes = Nodes::default();
        nodes.live.insert(FUSE_ROOT_ID, root);
        let shared = Arc::new_cyclic(|self_ref| Shared {
            cache,
            nodes: Mutex::new(nodes),
            rename_lock: RwLock::new(()),
            root_key,
            root_fd,
            backing: backing.to_path_buf(),
            handles: HandleTable::default(),
            next_fh: AtomicU64::new(1),
            mounted_at: SystemTime::now(),
            // SAFETY: geteuid cannot fail and touches no memory.
            as_root: unsafe { libc::geteuid() } == 0,
            self_ref: self_ref.clone(),
            report: Mutex::new(None),
            kernel_cache: OnceLock::new(),
        });
        let watch = Watch::new().map_err(|e| sys::io_errno(&e))?;
        Ok(PcacheFs { shared, watch, options })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// A read of `buf.len()` bytes at `off` that met a page to read in
    /// (or one under I/O) `done` bytes in: it goes on here, reading pages in
    /// and waiting for them, under the interrupt watch.
    fn read_rest(
        &self,
        req: &Request,
        file: &pcache::File,
        buf: &mut [u8],
        mut done: usize,
        off: u64,
        reply: ReplyData,
    ) {
        let res = self.watch.run(req.pid(), || {
            // read_at returns short only at end of file; loop anyway,
            // stopping at a zero-length read.
            while done < buf.len() {
                match file.read_at(&mut buf[done..], off + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) => return Err(e.errno()),
                }
            }
            Ok(())
        });
        match res {
            Ok(()) => reply.data(&buf[..done]),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Filesystem for PcacheFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large requests: up to 1 MiB per read and write where the kernel
        // allows (max_pages), fewer round trips per byte.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // Shared mappings of our direct-I/O files (Linux 6.6, protocol
        // 7.39): the kernel keeps page-cache pages for mapped files only,
        // writes their dirty pages back to us before a direct read and
        // drops them after a direct write of the range, so mapped and
        // unmapped access stay coherent; everything else still reaches us
        // alone. Without it mmap(MAP_SHARED) fails with ENODEV: say so once.
        let mut kernel_cache = self.options.kernel_cache.clone();
        let allow_mmap =
            self.options.direct_io_mmap && config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP).is_ok();
        if !allow_mmap {
            // The fallback: files chosen by name are served through the
            // kernel's page cache, where they can be mapped shared.
            if kernel_cache.is_empty() {
                kernel_cache = FALLBACK_KERNEL_CACHE.iter().filter_map(|g| glob::Pattern::new(g).ok()).collect();
            }
            let names: Vec<&str> = kernel_cache.iter().map(|p| p.as_str()).collect();
            eprintln!(
                "pcache mount: no FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6): shared mappings fail with ENODEV, \
                 except of files served through the kernel's page cache (--kernel-cache: {})",
                names.join(" ")
            );
        }
        let _ = self.shared.kernel_cache.set(kernel_cache);
        // POSIX ACLs enforced by the kernel (Linux 4.9): it reads
        // system.posix_acl_access through getxattr, checks permissions
        // with it, and keeps it current across chmod; the backing
        // filesystem stores it. Needs default_permissions, which the mount
        // sets.
        // Lookups and readdirs in one directory run in parallel (the
        // kernel otherwise serialises them per directory), and directory
        // listings carry their entries' attributes (READDIRPLUS) when the
        // kernel judges they will be used (a `stat` of the entries follows).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        if config.add_capabilities(InitFlags::FUSE_POSIX_ACL).is_err() {
            eprintln!("pcache mount: this kernel lacks FUSE_POSIX_ACL: ACLs on the mount are not enforced");
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // Every session thread has returned: write back what can be
        // written; the verdict is kept for `run` to report.
        self.watch.shutdown();
        let _ = self.shared.shutdown();
    }

    fn lookup(&self, _req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.lookup(parent, name) {
            Ok(attr) => {
                reply.entry(if control::is_ctl(attr.ino.0) { &control::TTL } else { &TTL }, &attr, Generation(0))
            }
            // A name that does not exist is cached by the kernel for TTL as
            // a negative entry (node id 0): programs probe for files that
            // are not there on every operation (SQLite for its hot journal
            // before each read transaction, compilers along include paths),
            // and the kernel drops the entry when the name is created
            // through the mount.
            Err(libc::ENOENT) if !control::is_ctl(parent) => {
                reply.entry(&TTL, &control::negative_entry(), Generation(0))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, INodeNo(ino): INodeNo, nlookup: u64) {
        if ino != FUSE_ROOT_ID && !control::is_ctl(ino) {
            self.shared.forget(ino, nlookup);
        }
    }

    fn getattr(&self, _req: &Request, INodeNo(ino): INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = &self.shared;
        let res = if control::is_ctl(ino) {
            control::attr(&s.cache, ino, s.mounted_at).ok_or(libc::ENOENT).map(|a| (control::TTL, a))
        } else {
            s.node(ino).and_then(|n| s.attr(&n)).map(|a| (TTL, a))
        };
        match res {
            Ok((ttl, attr)) => reply.attr(&ttl, &attr),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Truncation and time setting may wait for writeback.
        let fh = fh.map(|f| f.0);
        let res =
            self.watch.run(req.pid(), || self.shared.setattr(ino, SetAttr { mode, uid, gid, size, atime, mtime, fh }));
        match res {
            Ok(attr) => reply.attr(if control::is_ctl(ino) { &control::TTL } else { &TTL }, &attr),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, INodeNo(ino): INodeNo, reply: ReplyData) {
        let s = &self.shared;
        match s.node(ino).and_then(|n| s.fd_of(&n)).and_then(|fd| sys::readlink(&fd)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn mknod(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = (|| {
            check_name(name)?;
            let p = s.node(parent)?;
            sys::mknodat(&*s.fd_of(&p)?, name, mode, rdev as libc::dev_t)?;
            s.created(req, &p, name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn mkdir(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
                return Err(libc::EEXIST);
            }
            check_name(name)?;
            let p = s.node(parent)?;
            sys::mkdirat(&*s.fd_of(&p)?, name, mode)?;
            s.created(req, &p, name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn unlink(&self, _req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.shared.remove(parent, name, 0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn rmdir(&self, _req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.shared.remove(parent, name, libc::AT_REMOVEDIR) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn symlink(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = (|| {
            check_name(link_name)?;
            // A target is a path: at most PATH_MAX with its NUL.
            if target.as_os_str().len() >= libc::PATH_MAX as usize {
                return Err(libc::ENAMETOOLONG);
            }
            let p = s.node(parent)?;
            sys::symlinkat(target.as_os_str(), &*s.fd_of(&p)?, link_name)?;
            s.created(req, &p, link_name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn rename(
        &self,
        _req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.shared.rename(parent, name, newparent, newname, flags.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn link(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(ino) || control::is_ctl(newparent) {
                return Err(libc::EPERM);
            }
            check_name(newname)?;
            let (n, np) = (s.node(ino)?, s.node(newparent)?);
            sys::linkat(&*s.fd_of(&n)?, &*s.fd_of(&np)?, newname)?;
            n.unlinked.store(false, Ordering::Release);
            // The new name becomes the node's location.
            s.lookup(newparent, newname)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }
    fn open(&self, _req: &Request, INodeNo(ino): INodeNo, OpenFlags(flags): OpenFlags, reply: ReplyOpen) {
        let s = &self.shared;
        if control::is_ctl(ino) {
            return match control::file_of(&s.cache, ino) {
                Some(file) => {
                    let text = control::render(&s.cache, file);
                    let fh =
                        s.add_handle(if file == CtlFile::Zero { Handle::Zero } else { Handle::Ctl { file, text } });
                    reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
                }
                None => reply.error(errno(libc::EISDIR)),
            };
        }
        let res = (|| {
            let node = s.node(ino)?;
            if !node.is_reg {
                return Err(if file_type(sys::fstat(&*s.fd_of(&node)?)?.st_mode) == FileType::Directory {
                    libc::EISDIR
                } else {
                    libc::EINVAL
                });
            }
            let cached = node.kernel_cached.load(Ordering::Acquire);
            Ok((s.open_handle(node, flags)?, cached))
        })();
        match res {
            Ok((fh, cached)) => reply.opened(FileHandle(fh), open_flags(cached)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
                return Err(libc::EPERM);
            }
            check_name(name)?;
            let p = s.node(parent)?;
            let fd = sys::openat(&*s.fd_of(&p)?, name, libc::O_CREAT | libc::O_WRONLY | (flags & libc::O_EXCL), mode)?;
            s.own(req, &fd);
            drop(fd);
            let attr = s.lookup(parent, name)?;
            let node = s.node(attr.ino.0)?;
            let cached = node.kernel_cached.load(Ordering::Acquire);
            let fh = s.open_handle(node.clone(), flags)?;
            Ok((s.attr(&node)?, fh, cached))
        })();
        match res {
            Ok((attr, fh, cached)) => reply.created(&TTL, &attr, Generation(0), FileHandle(fh), open_flags(cached)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        off: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        match &*h {
            Handle::Data { file, .. } => {
                // Cached pages are copied here without waiting; a read that
                // meets a page to read in goes on from there (read_rest), so
                // each page is marked accessed once.
                READ_BUF.with_borrow_mut(|buf| {
                    // The thread's buffer, grown once to the largest request:
                    // a fresh 1 MiB allocation per read would be mapped,
                    // faulted in and zeroed each time.
                    if buf.len() < size as usize {
                        buf.resize(size as usize, 0);
                    }
                    let buf = &mut buf[..size as usize];
                    match file.read_at_nowait(buf, off) {
                        Ok((n, false)) => reply.data(&buf[..n]),
                        Ok((n, true)) => self.read_rest(req, file, buf, n, off, reply),
                        Err(e) => reply.error(errno(e.errno())),
                    }
                })
            }
            Handle::Zero => {
                let start = off.min(control::ZERO_BYTES);
                let n = (control::ZERO_BYTES - start).min(size as u64).min(ZEROS.len() as u64);
                reply.data(&ZEROS[..n as usize]);
            }
            Handle::Ctl { text, .. } => {
                let start = usize::try_from(off).unwrap_or(usize::MAX).min(text.len());
                let end = start.saturating_add(size as usize).min(text.len());
                reply.data(&text[start..end]);
            }
            Handle::Dir { .. } => reply.error(errno(libc::EISDIR)),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        match &*h {
            Handle::Ctl { file, .. } => match control::write(&self.shared.cache, *file, data) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(e)),
            },
            Handle::Zero => reply.written(data.len() as u32),
            Handle::Dir { .. } => reply.error(errno(libc::EISDIR)),
            Handle::Data { writable: false, .. } => reply.error(errno(libc::EBADF)),
            Handle::Data { file, node, .. } => {
                // May wait in balance_dirty_pages or for a page to read in.
                match self.watch.run(req.pid(), || file.write_at(data, offset)) {
                    Ok(n) => {
                        node.written(now_ns());
                        reply.written(n as u32)
                    }
                    Err(e) => reply.error(errno(e.errno())),
                }
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) does not write back, as with the kernel's page cache:
        // fsync does, and the flusher in its time. But it reports a
        // writeback error this handle has not seen yet, once (as
        // filp_close's filemap_check_wb_err in NFS and FUSE's own flush).
        match self.shared.handle(fh).as_deref() {
            Ok(Handle::Data { file, .. }) => match file.check_wb_err() {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e.errno())),
            },
            _ => reply.ok(),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.shared.handles.shard(fh).remove(&fh);
        if let Some(Handle::Data { node, .. }) = h.as_deref() {
            let node = node.clone();
            drop(h);
            self.shared.close_data(&node);
        }
        reply.ok();
    }

    fn fsync(&self, req: &Request, _ino: INodeNo, FileHandle(fh): FileHandle, datasync: bool, reply: ReplyEmpty) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        match &*h {
            // Writes back the file's dirty pages, waits, and fsyncs the
            // backing file: acknowledged data is on the backing disk.
            Handle::Data { file, node, .. } => {
                let res = self.watch.run(req.pid(), || if datasync { file.fdatasync() } else { file.fsync() });
                match res {
                    Ok(()) => {
                        self.shared.settle_times(node);
                        reply.ok()
                    }
                    Err(e) => reply.error(errno(e.errno())),
                }
            }
            _ => reply.ok(),
        }
    }

    fn opendir(&self, _req: &Request, INodeNo(ino): INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The listing is read whole at opendir, so offsets stay valid
        // however the directory changes while it is read.
        match self.shared.readdir_entries(ino) {
            Ok(entries) => {
                reply.opened(FileHandle(self.shared.add_handle(Handle::Dir { entries })), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        let Handle::Dir { entries } = &*h else { return reply.error(errno(libc::ENOTDIR)) };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    // READDIRPLUS: each entry with its attributes, as a LOOKUP of it would
    // give (and counting a lookup on it, which the kernel forgets later), so
    // that `ls -l`, `find`, `git status` and tar need no LOOKUP per name.
    fn readdirplus(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let s = &self.shared;
        let h = match s.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        let Handle::Dir { entries } = &*h else { return reply.error(errno(libc::ENOTDIR)) };
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (_, _, name)) in entries.iter().enumerate().skip(skip) {
            let name = OsStr::from_bytes(name);
            // The kernel takes no lookup for "." and ".."; a name gone since
            // opendir is left out.
            let dots = name == "." || name == "..";
            let attr = if dots {
                if control::is_ctl(ino) {
                    control::attr(&s.cache, ino, s.mounted_at).ok_or(libc::ENOENT)
                } else {
                    s.node(ino).and_then(|n| s.attr(&n))
                }
            } else {
                s.lookup(ino, name)
            };
            let Ok(attr) = attr else { continue };
            let ctl = control::is_ctl(attr.ino.0);
            if reply.add(attr.ino, i as u64 + 1, name, if ctl { &control::TTL } else { &TTL }, &attr, Generation(0)) {
                // Full: this entry was not sent, so its lookup is undone.
                if !dots && !ctl {
                    s.forget(attr.ino.0, 1);
                }
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.handles.shard(fh).remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, INodeNo(ino): INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        if control::is_ctl(ino) {
            return reply.ok();
        }
        let s = &self.shared;
        let res = self.watch.run(req.pid(), || {
            s.node(ino)
                .and_then(|n| s.fd_of(&n))
                .and_then(|fd| sys::reopen(&fd, libc::O_RDONLY | libc::O_DIRECTORY))
                .and_then(|fd| sys::fsync(&fd, datasync))
        });
        reply_empty(reply, res);
    }

    // Extended attributes pass through to the backing inode, as the
    // backing filesystem keeps them: user.*, trusted.*, security.* and the
    // POSIX ACLs' system.* names. The kernel's VFS has checked the
    // caller's right to them (xattr_permission) before the request comes.
    fn setxattr(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.shared.xattr_fd(ino) {
            Ok(Some(fd)) => reply_empty(reply, sys::setxattr(&fd, name, value, flags)),
            Ok(None) => reply.error(errno(libc::EPERM)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getxattr(&self, _req: &Request, INodeNo(ino): INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.shared.xattr_fd(ino) {
            // A size of 0 asks how large the value is.
            Ok(Some(fd)) if size == 0 => reply_xattr_size(reply, sys::getxattr(&fd, name, &mut [])),
            Ok(Some(fd)) => {
                let mut buf = vec![0u8; size.min(XATTR_SIZE_MAX) as usize];
                match sys::getxattr(&fd, name, &mut buf) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(errno(e)),
                }
            }
            Ok(None) => reply.error(errno(libc::ENODATA)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn listxattr(&self, _req: &Request, INodeNo(ino): INodeNo, size: u32, reply: ReplyXattr) {
        match self.shared.xattr_fd(ino) {
            Ok(Some(fd)) if size == 0 => reply_xattr_size(reply, sys::listxattr(&fd, &mut [])),
            Ok(Some(fd)) => {
                let mut buf = vec![0u8; size.min(XATTR_LIST_MAX) as usize];
                match sys::listxattr(&fd, &mut buf) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(errno(e)),
                }
            }
            Ok(None) if size == 0 => reply.size(0),
            Ok(None) => reply.data(&[]),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn removexattr(&self, _req: &Request, INodeNo(ino): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.shared.xattr_fd(ino) {
            Ok(Some(fd)) => reply_empty(reply, sys::removexattr(&fd, name)),
            Ok(None) => reply.error(errno(libc::EPERM)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let res = sys::statvfs(&self.shared.root_fd);
        match res {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        let Handle::Data { file, node, writable: true } = &*h else { return reply.error(errno(libc::EBADF)) };
        let (Ok(offset), Ok(length)) = (i64::try_from(offset), i64::try_from(length)) else {
            return reply.error(errno(libc::EFBIG));
        };
        let res = self.watch.run(req.pid(), || self.shared.fallocate(node, file, offset, length, mode));
        reply_empty(reply, res);
    }
}

/// How a data file is opened: with FOPEN_DIRECT_IO, so the kernel keeps no
/// page cache of its own and every read and write reaches pcache (no double
/// caching), unless it is one the kernel's page cache serves
/// (`--kernel-cache`).
fn open_flags(cached: bool) -> FopenFlags {
    if cached {
        FopenFlags::empty()
    } else {
        FopenFlags::FOPEN_DIRECT_IO
    }
}

thread_local! {
    /// Each session thread's read buffer.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What `.pcache/zero` reads return: the largest request's worth (max_pages
/// of 4 KiB) of zeros, in the binary's zeroed data.
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// fuser's errno from ours (a positive `c_int`; anything else is EIO).
fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e)
}

/// The largest value and name list Linux hands over (XATTR_SIZE_MAX,
/// XATTR_LIST_MAX in include/uapi/linux/limits.h).
const XATTR_SIZE_MAX: u32 = 65536;
const XATTR_LIST_MAX: u32 = 65536;

fn reply_empty(reply: ReplyEmpty, res: Result<(), Errno>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_xattr_size(reply: ReplyXattr, res: Result<usize, Errno>) {
    match res {
        Ok(n) => reply.size(n as u32),
        Err(e) => reply.error(errno(e)),
    }
}

//! The FUSE filesystem: names and metadata pass through to the backing
//! directory, file data goes through pcache.
//!
//! Nodes. The kernel names inodes by node id. Each backing inode,
//! identified by `(st_dev, st_ino)`, gets a node id the first time it is
//! seen and keeps it for the life of the mount (`ids`), so `st_ino` on the
//! mount is stable even after the kernel forgets a node and looks it up
//! again. A node the kernel knows (looked up, not yet forgotten) holds an
//! `O_PATH` descriptor of its backing inode (`Node::fd`); every operation
//! works through these descriptors and the `*at` calls (sys.rs).
//!
//! Data. A regular file's node holds, once the file is first opened, an
//! engine handle on it (`Node::data`; the engine keys the file by the
//! backing inode, dev.rs). Each FUSE open takes its own engine handle
//! (`reopen`: its own readahead state and error cursor, as a `struct
//! file`). When the kernel forgets the node, the engine drops the file as
//! the kernel evicts an inode: dirty pages are written back first
//! (`PageCache::evict`), unless the file has no name left, in which case
//! they are discarded (`unlink_dev`). The engine's copy of a file's size is
//! the truth while it is cached; `getattr` reports it.
//!
//! Threads. fuser calls these methods on its one session thread; data
//! requests go to the worker pool (workers.rs) and are answered from there.
//! Shared state sits behind the mutexes of `Shared`.
//!
//! Lock order: `Shared::nodes` → `Node::data` → the engine's locks;
//! `Shared::handles` is never held with another of ours.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::consts::FOPEN_DIRECT_IO;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, FUSE_ROOT_ID,
};
use parking_lot::Mutex;
use pcache::PageCache;

use crate::control::{self, CtlFile, CTL_DIR, CTL_DIR_NAME, FIRST_BACKING_NODE};
use crate::dev::{engine_key, InodeDev};
use crate::sys::{self, Errno};
use crate::workers::Workers;

/// How long the kernel may trust names and attributes. Everything goes
/// through this mount, so its view only goes stale if the backing
/// directory is changed behind the mount's back (not supported).
const TTL: Duration = Duration::from_secs(1);

/// A backing inode the kernel knows.
pub struct Node {
    pub nodeid: u64,
    /// `(st_dev, st_ino)` of the backing inode.
    key: (u64, u64),
    /// `O_PATH | O_NOFOLLOW` descriptor of the backing inode.
    fd: OwnedFd,
    is_reg: bool,
    /// Lookups the kernel has not yet forgotten (nlookup).
    nlookup: AtomicU64,
    /// The engine's handle on the file's data, from the first open to
    /// forget (regular files only).
    data: Mutex<Option<pcache::File>>,
    /// The last name of the file went (unlink, rename over it): its cached
    /// pages are discarded at forget instead of written back.
    unlinked: AtomicBool,
    /// When data was last written through the mount (ns since the epoch;
    /// 0: never). The backing mtime only moves at writeback, so getattr
    /// shows the later of the two, as the kernel updates mtime at write.
    written_ns: AtomicU64,
}

impl Node {
    fn engine_key(&self) -> String {
        engine_key(self.key.0, self.key.1)
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
    Data { node: Arc<Node>, file: pcache::File, writable: bool },
    Ctl { file: CtlFile, text: Vec<u8> },
    Dir { entries: Vec<(u64, FileType, Vec<u8>)> },
}

#[derive(Default)]
struct Nodes {
    /// Node ids of every backing inode seen, for the life of the mount.
    ids: HashMap<(u64, u64), u64>,
    /// The nodes the kernel holds (nlookup > 0), by node id.
    live: HashMap<u64, Arc<Node>>,
    next_id: u64,
}

/// State shared by the session thread and the workers.
pub struct Shared {
    pub cache: PageCache,
    nodes: Mutex<Nodes>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    mounted_at: SystemTime,
    /// Whether the daemon runs as root: it then gives new files the
    /// caller's owner, as the kernel would.
    as_root: bool,
}

/// The filesystem fuser drives.
pub struct PcacheFs {
    shared: Arc<Shared>,
    workers: Workers,
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

impl Shared {
    fn node(&self, nodeid: u64) -> Result<Arc<Node>, Errno> {
        self.nodes.lock().live.get(&nodeid).cloned().ok_or(libc::ESTALE)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        self.handles.lock().get(&fh).cloned().ok_or(libc::EBADF)
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, Arc::new(h));
        fh
    }

    /// The node id of a backing inode, allocated on first sight.
    fn id_of(nodes: &mut Nodes, key: (u64, u64)) -> u64 {
        let next = &mut nodes.next_id;
        *nodes.ids.entry(key).or_insert_with(|| {
            let id = *next;
            *next += 1;
            id
        })
    }

    /// Attributes of a node: the backing inode's, with the engine's size
    /// and the latest write time while the file is cached.
    fn attr(&self, node: &Node) -> Result<FileAttr, Errno> {
        let st = sys::fstat(&node.fd)?;
        let mut attr = self.attr_of(node.nodeid, &st);
        if node.is_reg {
            if let Some(f) = node.data.lock().as_ref() {
                attr.size = f.len().map_err(|e| e.errno())?;
            }
            let w = node.written_ns.load(Ordering::Relaxed);
            if w > 0 {
                let written = UNIX_EPOCH + Duration::from_nanos(w);
                attr.mtime = attr.mtime.max(written);
                attr.ctime = attr.ctime.max(written);
            }
        }
        Ok(attr)
    }

    fn attr_of(&self, nodeid: u64, st: &libc::stat) -> FileAttr {
        FileAttr {
            ino: nodeid,
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

    /// LOOKUP: find `name` in `parent` and count a lookup on its node.
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
        let p = self.node(parent)?;
        let fd = sys::openat(&p.fd, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let st = sys::fstat(&fd)?;
        let key = (st.st_dev, st.st_ino);
        let node = {
            let mut nodes = self.nodes.lock();
            let id = Self::id_of(&mut nodes, key);
            match nodes.live.get(&id) {
                Some(n) => {
                    n.nlookup.fetch_add(1, Ordering::Relaxed);
                    n.clone()
                }
                None => {
                    let n = Arc::new(Node {
                        nodeid: id,
                        key,
                        fd,
                        is_reg: st.st_mode & libc::S_IFMT == libc::S_IFREG,
                        nlookup: AtomicU64::new(1),
                        data: Mutex::new(None),
                        unlinked: AtomicBool::new(false),
                        written_ns: AtomicU64::new(0),
                    });
                    nodes.live.insert(id, n.clone());
                    n
                }
            }
        };
        // An error here leaves the lookup counted; the kernel, not given
        // the entry, never forgets it, which costs one descriptor.
        self.attr(&node)
    }

    /// FORGET: drop `n` lookups; at zero the node goes, and with it the
    /// engine's copy of the file (written back first if it still has a
    /// name).
    fn forget(&self, nodeid: u64, n: u64) {
        let node = {
            let mut nodes = self.nodes.lock();
            let Some(node) = nodes.live.get(&nodeid) else { return };
            let left = node.nlookup.load(Ordering::Relaxed).saturating_sub(n);
            node.nlookup.store(left, Ordering::Relaxed);
            if left > 0 {
                return;
            }
            match nodes.live.remove(&nodeid) {
                Some(node) => node,
                None => return,
            }
        };
        self.release_data(&node);
    }

    /// The engine lets go of a node's file (forget, unmount).
    fn release_data(&self, node: &Node) {
        let Some(file) = node.data.lock().take() else { return };
        drop(file);
        let key = node.engine_key();
        let res = if node.unlinked.load(Ordering::Acquire) {
            self.cache.unlink_dev(&key).map(drop)
        } else {
            self.cache.evict(&key).map(drop)
        };
        if let Err(e) = res {
            // The file stays cached with its dirty pages; the flusher and
            // the final sync at unmount retry them.
            eprintln!("pcache mount: writing back {key}: {e}");
        }
    }

    /// The engine's handle on a node's data, opening the file in the engine
    /// on first use; each call returns a new handle.
    fn open_data(&self, node: &Node) -> Result<pcache::File, Errno> {
        if !node.is_reg {
            return Err(libc::EINVAL);
        }
        let mut data = node.data.lock();
        if data.is_none() {
            let dev =
                InodeDev::open(&node.fd, node.engine_key(), self.cache.page_size()).map_err(|e| sys::io_errno(&e))?;
            *data = Some(self.cache.open_dev(Arc::new(dev)).map_err(|e| e.errno())?);
        }
        match data.as_ref() {
            Some(f) => f.reopen().map_err(|e| e.errno()),
            None => Err(libc::EIO),
        }
    }

    /// The last name of the backing inode `key` is gone.
    fn last_link_gone(&self, key: (u64, u64)) {
        let nodes = self.nodes.lock();
        if let Some(node) = nodes.ids.get(&key).and_then(|id| nodes.live.get(id)) {
            node.unlinked.store(true, Ordering::Release);
        }
    }

    /// Give a new backing inode the caller's owner (a root daemon creates
    /// everything as root otherwise).
    fn own(&self, req: &Request<'_>, fd: &OwnedFd) {
        if self.as_root {
            // Best effort, as the file exists already; a failure leaves it
            // owned by root, which the caller can still use.
            let _ = sys::chown(fd, req.uid(), req.gid());
        }
    }

    /// After creating `name` in `parent`: give it its owner and look it up.
    fn created(&self, req: &Request<'_>, parent: &Node, name: &OsStr) -> Result<FileAttr, Errno> {
        if self.as_root {
            let fd = sys::openat(&parent.fd, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
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
        if let Some(mode) = mode {
            sys::chmod(&node.fd, mode & 0o7777)?;
        }
        if uid.is_some() || gid.is_some() {
            sys::chown(&node.fd, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))?;
        }
        if let Some(size) = size {
            if !node.is_reg {
                return Err(if file_type(sys::fstat(&node.fd)?.st_mode) == FileType::Directory {
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
            node.written_ns.store(now_ns(), Ordering::Relaxed);
        }
        if atime.is_some() || mtime.is_some() {
            if node.is_reg {
                // Times set now must not be overtaken by the writeback of
                // data written before (tar sets mtime after writing): write
                // that data back first.
                if let Some(f) = node.data.lock().as_ref() {
                    f.fdatasync().map_err(|e| e.errno())?;
                }
                node.written_ns.store(0, Ordering::Relaxed);
            }
            sys::utimens(&node.fd, &[timespec_of(atime), timespec_of(mtime)])?;
        }
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
        let dirfd = sys::reopen(&node.fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let path = sys::proc_path(std::os::fd::AsRawFd::as_raw_fd(&dirfd));
        let rd = std::fs::read_dir(OsStr::from_bytes(path.as_bytes())).map_err(|e| sys::io_errno(&e))?;
        let dev = sys::fstat(&node.fd)?.st_dev;
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
            let id = Self::id_of(&mut nodes, (dev, entry.ino()));
            out.push((id, kind, name.as_bytes().to_vec()));
        }
        if nodeid == FUSE_ROOT_ID {
            out.push((CTL_DIR, FileType::Directory, CTL_DIR_NAME.as_bytes().to_vec()));
        }
        Ok(out)
    }

    fn fallocate(&self, node: &Node, file: &pcache::File, offset: i64, length: i64, mode: i32) -> Result<(), Errno> {
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
                let fd = sys::reopen(&node.fd, libc::O_WRONLY)?;
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

    /// Let go of every node's file and write back everything (unmount).
    pub fn shutdown(&self) {
        self.handles.lock().clear();
        let nodes: Vec<Arc<Node>> = self.nodes.lock().live.drain().map(|(_, n)| n).collect();
        for node in &nodes {
            self.release_data(node);
        }
        if let Err(e) = self.cache.sync_all() {
            eprintln!("pcache mount: final writeback: {e}");
        }
    }
}

impl PcacheFs {
    /// A filesystem serving `backing` through `cache`, with `threads`
    /// workers for data requests.
    pub fn new(cache: PageCache, backing: &std::path::Path, threads: usize) -> Result<PcacheFs, Errno> {
        let root_fd = sys::open_path(backing)?;
        let st = sys::fstat(&root_fd)?;
        let root = Arc::new(Node {
            nodeid: FUSE_ROOT_ID,
            key: (st.st_dev, st.st_ino),
            fd: root_fd,
            is_reg: false,
            nlookup: AtomicU64::new(1),
            data: Mutex::new(None),
            unlinked: AtomicBool::new(false),
            written_ns: AtomicU64::new(0),
        });
        let mut nodes = Nodes { next_id: FIRST_BACKING_NODE, ..Nodes::default() };
        nodes.ids.insert(root.key, FUSE_ROOT_ID);
        nodes.live.insert(FUSE_ROOT_ID, root);
        let shared = Arc::new(Shared {
            cache,
            nodes: Mutex::new(nodes),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            mounted_at: SystemTime::now(),
            // SAFETY: geteuid cannot fail and touches no memory.
            as_root: unsafe { libc::geteuid() } == 0,
        });
        let workers = Workers::new(threads).map_err(|e| sys::io_errno(&e))?;
        Ok(PcacheFs { shared, workers })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    fn open_flags(&self) -> u32 {
        // No double caching: the kernel passes every read and write of the
        // file to us instead of keeping its own page cache of it.
        FOPEN_DIRECT_IO
    }
}

impl Filesystem for PcacheFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // Large requests: up to 1 MiB per read and write where the kernel
        // allows (max_pages), fewer round trips per byte.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn destroy(&mut self) {
        // Answer what is queued, then write every dirty page back.
        self.workers.shutdown();
        self.shared.shutdown();
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.shared.lookup(parent, name) {
            Ok(attr) => reply.entry(if control::is_ctl(attr.ino) { &control::TTL } else { &TTL }, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        if ino != FUSE_ROOT_ID && !control::is_ctl(ino) {
            self.shared.forget(ino, nlookup);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let s = &self.shared;
        let res = if control::is_ctl(ino) {
            control::attr(&s.cache, ino, s.mounted_at).ok_or(libc::ENOENT).map(|a| (control::TTL, a))
        } else {
            s.node(ino).and_then(|n| s.attr(&n)).map(|a| (TTL, a))
        };
        match res {
            Ok((ttl, attr)) => reply.attr(&ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        // Truncation and time setting may wait for writeback: a worker's job.
        let s = self.shared.clone();
        self.workers.spawn(move || match s.setattr(ino, SetAttr { mode, uid, gid, size, atime, mtime, fh }) {
            Ok(attr) => reply.attr(if control::is_ctl(ino) { &control::TTL } else { &TTL }, &attr),
            Err(e) => reply.error(e),
        });
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.shared.node(ino).and_then(|n| sys::readlink(&n.fd)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = (|| {
            let p = s.node(parent)?;
            sys::mknodat(&p.fd, name, mode, rdev as libc::dev_t)?;
            s.created(req, &p, name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
                return Err(libc::EEXIST);
            }
            let p = s.node(parent)?;
            sys::mkdirat(&p.fd, name, mode)?;
            s.created(req, &p, name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
                return Err(libc::EPERM);
            }
            let p = s.node(parent)?;
            let st = sys::fstatat(&p.fd, name)?;
            sys::unlinkat(&p.fd, name, 0)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink <= 1 {
                s.last_link_gone((st.st_dev, st.st_ino));
            }
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(parent) || (parent == FUSE_ROOT_ID && name == CTL_DIR_NAME) {
                return Err(libc::EPERM);
            }
            let p = s.node(parent)?;
            sys::unlinkat(&p.fd, name, libc::AT_REMOVEDIR)
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let s = &self.shared;
        let res = (|| {
            let p = s.node(parent)?;
            sys::symlinkat(target.as_os_str(), &p.fd, link_name)?;
            s.created(req, &p, link_name)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let s = &self.shared;
        let res = (|| {
            let ctl = |p: u64, n: &OsStr| control::is_ctl(p) || (p == FUSE_ROOT_ID && n == CTL_DIR_NAME);
            if ctl(parent, name) || ctl(newparent, newname) {
                return Err(libc::EPERM);
            }
            let (p, np) = (s.node(parent)?, s.node(newparent)?);
            let src = sys::fstatat(&p.fd, name)?;
            let replaced = sys::fstatat(&np.fd, newname).ok();
            sys::renameat2(&p.fd, name, &np.fd, newname, flags)?;
            if let Some(t) = replaced {
                let same = (t.st_dev, t.st_ino) == (src.st_dev, src.st_ino);
                let exchanged = flags & libc::RENAME_EXCHANGE != 0;
                if !same && !exchanged && t.st_mode & libc::S_IFMT == libc::S_IFREG && t.st_nlink <= 1 {
                    s.last_link_gone((t.st_dev, t.st_ino));
                }
            }
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let s = &self.shared;
        let res = (|| {
            if control::is_ctl(ino) || control::is_ctl(newparent) {
                return Err(libc::EPERM);
            }
            let (n, np) = (s.node(ino)?, s.node(newparent)?);
            sys::linkat(&n.fd, &np.fd, newname)?;
            n.unlinked.store(false, Ordering::Release);
            s.lookup(newparent, newname)
        })();
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let s = &self.shared;
        if control::is_ctl(ino) {
            return match control::file_of(&s.cache, ino) {
                Some(file) => {
                    let text = control::render(&s.cache, file);
                    let fh = s.add_handle(Handle::Ctl { file, text });
                    reply.opened(fh, FOPEN_DIRECT_IO)
                }
                None => reply.error(libc::EISDIR),
            };
        }
        let res = (|| {
            let node = s.node(ino)?;
            if !node.is_reg {
                return Err(if file_type(sys::fstat(&node.fd)?.st_mode) == FileType::Directory {
                    libc::EISDIR
                } else {
                    libc::EINVAL
                });
            }
            let file = s.open_data(&node)?;
            if flags & libc::O_TRUNC != 0 {
                file.set_len(0).map_err(|e| e.errno())?;
            }
            let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
            Ok(s.add_handle(Handle::Data { node, file, writable }))
        })();
        match res {
            Ok(fh) => reply.opened(fh, self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
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
            let p = s.node(parent)?;
            let fd = sys::openat(&p.fd, name, libc::O_CREAT | libc::O_WRONLY | (flags & libc::O_EXCL), mode)?;
            s.own(req, &fd);
            drop(fd);
            let attr = s.lookup(parent, name)?;
            let node = s.node(attr.ino)?;
            let file = s.open_data(&node)?;
            if flags & libc::O_TRUNC != 0 {
                file.set_len(0).map_err(|e| e.errno())?;
            }
            let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
            let attr = s.attr(&node)?;
            Ok((attr, s.add_handle(Handle::Data { node, file, writable })))
        })();
        match res {
            Ok((attr, fh)) => reply.created(&TTL, &attr, 0, fh, self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        if offset < 0 {
            return reply.error(libc::EINVAL);
        }
        let off = offset as u64;
        match &*h {
            Handle::Ctl { text, .. } => {
                let start = (off as usize).min(text.len());
                let end = start.saturating_add(size as usize).min(text.len());
                reply.data(&text[start..end]);
            }
            Handle::Dir { .. } => reply.error(libc::EISDIR),
            Handle::Data { .. } => self.workers.spawn(move || {
                let Handle::Data { file, .. } = &*h else { return reply.error(libc::EBADF) };
                let mut buf = vec![0u8; size as usize];
                let mut done = 0;
                // read_at returns short only at end of file; loop anyway,
                // stopping at a zero-length read.
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], off + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) => return reply.error(e.errno()),
                    }
                }
                reply.data(&buf[..done]);
            }),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        if offset < 0 {
            return reply.error(libc::EINVAL);
        }
        match &*h {
            Handle::Ctl { file, .. } => match control::write(&self.shared.cache, *file, data) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(e),
            },
            Handle::Dir { .. } => reply.error(libc::EISDIR),
            Handle::Data { writable: false, .. } => reply.error(libc::EBADF),
            Handle::Data { .. } => {
                // The request buffer is reused for the next request: copy.
                let data = data.to_vec();
                self.workers.spawn(move || {
                    let Handle::Data { file, node, .. } = &*h else { return reply.error(libc::EBADF) };
                    match file.write_at(&data, offset as u64) {
                        Ok(n) => {
                            node.written_ns.store(now_ns(), Ordering::Relaxed);
                            reply.written(n as u32)
                        }
                        Err(e) => reply.error(e.errno()),
                    }
                })
            }
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        // close(2) does not write back, as with the kernel's page cache:
        // fsync does, and the flusher in its time.
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.shared.handles.lock().remove(&fh);
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        self.workers.spawn(move || match &*h {
            // Writes back the file's dirty pages, waits, and fsyncs the
            // backing file: acknowledged data is on the backing disk.
            Handle::Data { file, .. } => {
                let res = if datasync { file.fdatasync() } else { file.fsync() };
                match res {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e.errno()),
                }
            }
            _ => reply.ok(),
        });
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        // The listing is read whole at opendir, so offsets stay valid
        // however the directory changes while it is read.
        match self.shared.readdir_entries(ino) {
            Ok(entries) => reply.opened(self.shared.add_handle(Handle::Dir { entries }), 0),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let Handle::Dir { entries } = &*h else { return reply.error(libc::ENOTDIR) };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, i as i64 + 1, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty) {
        self.shared.handles.lock().remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, datasync: bool, reply: ReplyEmpty) {
        if control::is_ctl(ino) {
            return reply.ok();
        }
        let s = self.shared.clone();
        self.workers.spawn(move || {
            let res = s
                .node(ino)
                .and_then(|n| sys::reopen(&n.fd, libc::O_RDONLY | libc::O_DIRECTORY))
                .and_then(|fd| sys::fsync(&fd, datasync));
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let res = self.shared.node(FUSE_ROOT_ID).and_then(|n| sys::statvfs(&n.fd));
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
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let h = match self.shared.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let s = self.shared.clone();
        self.workers.spawn(move || {
            let Handle::Data { file, node, writable } = &*h else { return reply.error(libc::EBADF) };
            if !writable {
                return reply.error(libc::EBADF);
            }
            match s.fallocate(node, file, offset, length, mode) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }
}

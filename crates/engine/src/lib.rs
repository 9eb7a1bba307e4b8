//! pcache: the Linux page cache and its reclaim machinery, in userspace.
//!
//! A [`PageCache`] owns a fixed arena of page frames. Files opened through
//! it ([`File`]) are cached page by page; reads and writes go through the
//! cache as `read(2)`/`write(2)` go through Linux's, with the same aging
//! (two LRU lists, `mark_page_accessed`), per-CPU batching, readahead,
//! background reclaim (kswapd) and writeback. See ARCHITECTURE.md.
//!
//! ```no_run
//! use pcache::{Config, PageCache, OpenOptions};
//! let cache = PageCache::new(Config::with_memory(64 << 20))?;
//! let f = cache.open("/tmp/data", OpenOptions::default())?;
//! f.write_at(b"hello", 0)?;
//! let mut buf = [0u8; 5];
//! f.read_at(&mut buf, 0)?;
//! f.fsync()?;
//! # Ok::<(), pcache::Error>(())
//! ```
//!
//! Many files: the cache keeps at most `Tunables::max_open_fds` host
//! descriptors open (default: half the soft RLIMIT_NOFILE when the cache is
//! built, at most 4096) and reopens files on demand, so a program may open
//! and close any number of files. It does not change the process's limits:
//! a program that wants a larger bound raises its soft RLIMIT_NOFILE (to
//! the hard limit, as `pcache mount` does) before building the cache, or
//! sets `max_open_fds`. Closed files with nothing cached are freed.

mod admission;
mod arena;
pub mod backing;
mod backing_dev;
mod bio;
mod error;
mod errseq;
mod filemap;
mod hazard;
mod highmem;
mod huge_memory;
mod inode;
#[cfg(all(loom, test))]
mod loom_tests;
mod lru_gen;
mod lruvec;
mod memory;
mod mm;
mod mmap;
mod mmdebug;
mod page;
mod page_io;
mod page_writeback;
mod pagetree;
mod pagevec;
pub mod percpu;
pub mod policy;
mod readahead;
mod rmap;
mod signal;
mod swap;
mod swap_state;
mod swapfile;
mod sync;
mod sysctl;
mod truncate;
mod tunables;
mod vmscan;
pub mod vmstat;
mod wait;
mod workingset;
mod writeback;

// The README's Rust blocks are doctests, so the example a newcomer pastes is the one that is compiled and run.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The host's MemAvailable in bytes, as the arena sizes its pre-fault by it.
pub use arena::mem_available as host_mem_available;
pub use backing::BackingDev;
pub use error::{Error, Result, UnwrittenFile};
pub use lru_gen::{LruGenGeneration, LruGenPage, LruGenStats};
#[doc(hidden)]
pub use memory::LoadSteps;
pub use mmap::{Madvise, MapFlags, MappedPage, Mapping};
pub use signal::Interrupt;
pub use swapfile::{SwapBacking, SwapConfig};
pub use sysctl::SYSCTL_NAMES;
pub use tunables::{
    AccessedInit, Admission, Advice, AnonLru, Config, DevReadMode, FolioRamp, IoEngine, LruBatching, LruPolicy,
    MappedActivation, MthpSwapout, PagevecDrain, PolicyKind, ReclaimWriteback, RemarkRule, Tunables, WorkingsetVersion,
    ANON_MTHP_64K, ANON_MTHP_ALL, FOLIO_ORDER_MAX_5_18, FOLIO_ORDER_MAX_6, MAX_PAGECACHE_ORDER, MAX_PAGE_SIZE,
    MIN_PAGES, MIN_PAGE_SIZE,
};
pub use vmstat::{Item, VmStat};

use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use crate::backing::{FileDev, MemoryDev};
use crate::filemap::{Inode, Pin};
use crate::mm::Cache;
use crate::page::*;
use crate::readahead::{FileRaState, FMODE_NOREUSE, FMODE_RANDOM};

pub use crate::backing_dev::BdiStat;
pub use crate::pagevec::PAGEVEC_SIZE;
pub use crate::vmscan::DEF_PRIORITY;

/// Which LRU list a page is on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LruList {
    InactiveAnon,
    ActiveAnon,
    InactiveFile,
    ActiveFile,
    Unevictable,
    /// New pages waiting for admission (admission.rs; only with
    /// `Admission::AdaptiveTinyLfu`).
    Window,
}

/// A page's state as tests and tools see it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PageState {
    /// The list the page is on, or `None` when it is off the LRU (in a
    /// per-CPU add batch, or isolated by reclaim).
    pub lru: Option<LruList>,
    pub referenced: bool,
    pub active: bool,
    pub uptodate: bool,
    pub dirty: bool,
    pub writeback: bool,
    pub locked: bool,
    pub reclaim: bool,
    pub readahead: bool,
    pub error: bool,
    /// References held: the page cache's own, pins, batch entries, and one
    /// per page table entry mapping the page.
    pub refcount: u32,
    /// Page table entries mapping the page (page_mapcount).
    pub mapcount: u32,
    /// The order of the folio holding the page (0: a page of its own);
    /// the state above is the folio's.
    pub folio_order: u32,
}

/// The free-frame watermarks, in pages.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

/// The arena's buddy lists by order, 0 to 10 (a block of order n is 2^n
/// frames): /proc/buddyinfo and debugfs's `unusable_index` and
/// `extfrag_index`, whose figures are in thousandths.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BuddyInfo {
    /// Free blocks of each order on the buddy lists.
    pub free_blocks: [u64; 11],
    /// Free frames on the per-CPU lists, which are in no block above.
    pub pcp_frames: u64,
    /// The share of the lists' free frames in blocks too small for each
    /// order (0: none, 1000: all, or nothing free).
    pub unusable: [u32; 11],
    /// The fragmentation index of each order: -1000 while a block of that
    /// order is free; else towards 0 if an allocation of it would fail for
    /// lack of memory, towards 1000 if for fragmentation.
    pub fragmentation: [i32; 11],
}

/// How [`PageCache::open`] opens a host file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Truncate the file to zero length.
    pub truncate: bool,
    /// Try O_DIRECT (falls back to buffered I/O plus POSIX_FADV_DONTNEED,
    /// saying so once, where the filesystem refuses it).
    pub direct: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { create: true, truncate: false, direct: true }
    }
}

/// The icache key of a host file: its identity, so that every spelling
/// and every link of one file is one cached inode.
fn host_key(dev: u64, ino: u64) -> String {
    format!("host:{dev}:{ino}")
}

/// The icache key of the regular file `m` describes (None for anything
/// else: the icache holds only regular files).
fn host_key_of(m: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    m.is_file().then(|| host_key(m.dev(), m.ino()))
}

/// Owns the background threads; the last handle to drop stops them.
pub(crate) struct Owner {
    cache: Arc<Cache>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Best effort: dirty data reaches the devices before the cache goes.
        // Whoever must know what could not be written calls
        // `PageCache::shutdown` first.
        let _ = self.cache.shutdown_all();
    }
}

/// A page cache: an arena of frames, the LRU, kswapd and the flushers.
/// Cheap to clone; every clone is the same cache.
#[derive(Clone)]
pub struct PageCache {
    owner: Arc<Owner>,
}

impl PageCache {
    /// Build a cache: allocate the arena and start kswapd (if enabled);
    /// each backing device's flusher starts with its first file.
    pub fn new(config: Config) -> Result<PageCache> {
        PageCache::build(config, None)
    }

    /// Build a cache whose file pages an eviction policy of the caller's
    /// holds (`pcache::policy`), instead of the one `Tunables::policy`
    /// names. It is sized for [`Config::nr_pages`] frames.
    pub fn with_policy(config: Config, policy: Box<dyn policy::EvictionPolicy>) -> Result<PageCache> {
        PageCache::build(config, Some(policy))
    }

    fn build(config: Config, policy: Option<Box<dyn policy::EvictionPolicy>>) -> Result<PageCache> {
        let cache = Cache::with_policy(config, policy)?;
        if cache.config.tunables.swap_bytes > 0 {
            cache.swapon(SwapConfig::memory(cache.config.tunables.swap_bytes))?;
        }
        if cache.config.tunables.kswapd {
            let c = cache.clone();
            let t = std::thread::Builder::new()
                .name("kswapd0".into())
                .spawn(move || vmscan::kswapd_thread(c))
                .map_err(|e| Error::io("kswapd", e))?;
            cache.kthread_add(t);
        }
        if cache.config.tunables.arena_prefault {
            let c = cache.clone();
            let t = std::thread::Builder::new()
                .name("pcache-prefault".into())
                // It holds the cache, so the arena outlives it.
                .spawn(move || c.arena.prefault(|| c.shutting_down()))
                .map_err(|e| Error::io("prefault", e))?;
            cache.kthread_add(t);
        } else {
            cache.arena.skip_populate();
        }
        // Owned before the workers start, so a failure stops those started.
        let owner = Arc::new(Owner { cache: cache.clone() });
        let n = cache.config.tunables.io_threads;
        cache.start_io_workers(n).map_err(|e| Error::io("I/O workers", e))?;
        Ok(PageCache { owner })
    }

    /// Wait up to `timeout` for the arena's background pre-fault
    /// (`Tunables::arena_prefault`) to finish; whether it has. For
    /// measurements of a cache whose memory is resident, as the kernel's
    /// page cache is.
    pub fn wait_arena_populated(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while !self.cache().arena.populated() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }

    /// The bounded cache of host descriptors this cache's files use
    /// (`Tunables::max_open_fds`); devices made outside the cache (the
    /// mount's) take their descriptors from it too.
    pub fn fd_cache(&self) -> &Arc<backing::FdCache> {
        &self.cache().fds
    }

    /// Dirty and writeback counts of each backing device.
    pub fn bdi_stats(&self) -> Vec<BdiStat> {
        self.cache().bdi_stats()
    }

    fn cache(&self) -> &Arc<Cache> {
        &self.owner.cache
    }

    pub fn config(&self) -> &Config {
        &self.cache().config
    }

    pub fn page_size(&self) -> usize {
        self.cache().page_size()
    }

    pub fn watermarks(&self) -> Watermarks {
        self.cache().arena.watermarks
    }

    pub fn nr_free_pages(&self) -> u64 {
        self.cache().nr_free_pages()
    }

    /// The arena's free blocks by order and its fragmentation.
    pub fn buddyinfo(&self) -> BuddyInfo {
        let arena = &self.cache().arena;
        let free_blocks = arena.buddyinfo();
        BuddyInfo {
            free_blocks,
            pcp_frames: arena.nr_pcp(),
            unusable: arena.unusable_free_index(),
            fragmentation: std::array::from_fn(|o| arena::fragmentation_index(&free_blocks, o)),
        }
    }

    /// Open (and by default create) a host file. Files are cached by
    /// identity (`st_dev`, `st_ino`), not by name: every spelling of a path,
    /// every hard link and every symlink to one file shares one cached copy
    /// and one writeback.
    pub fn open(&self, path: impl AsRef<Path>, opts: OpenOptions) -> Result<File> {
        let path = path.as_ref();
        let name = path.to_string_lossy().into_owned();
        let cache = self.cache();
        // Cached already (under any name)? Then no descriptor is opened.
        let cached = match std::fs::metadata(path) {
            Ok(m) => host_key_of(&m).and_then(|key| cache.igrab(&key)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && opts.create => None,
            Err(e) => return Err(Error::io(&name, e)),
        };
        let inode = match cached {
            Some(inode) => inode,
            None => {
                // Opened outside the icache lock (an open can block), never
                // with O_TRUNC (truncation goes through the cache below, in
                // case another open cached the file meanwhile).
                let dev = FileDev::open_in(&cache.fds, path, opts.create, false, opts.direct, self.page_size())
                    .map_err(|e| Error::io(&name, e))?;
                if cache.config.tunables.dev_read_mode == DevReadMode::Dontcache {
                    // A refusal leaves reads on O_DIRECT, said once.
                    dev.use_dontcache_reads();
                }
                let key = dev.identity().map_or_else(|| name.clone(), |(d, i)| host_key(d, i));
                cache.iget(&key, &name, || Ok(Arc::new(dev) as Arc<dyn BackingDev>))?
            }
        };
        let file = self.new_file(inode);
        if opts.truncate && file.inode.size.load(Ordering::Acquire) != 0 {
            let _g = file.inode.rwsem.lock();
            self.cache().truncate_inode(&file.inode, 0)?;
        }
        Ok(file)
    }

    /// Open (creating if new) a memory-only file: the tmpfs case.
    pub fn open_memory(&self, name: &str) -> Result<File> {
        let ps = self.page_size();
        let inode = self.cache().iget(&format!("memory:{name}"), &format!("memory:{name}"), || {
            Ok(Arc::new(MemoryDev::new(name, ps)) as Arc<dyn BackingDev>)
        })?;
        Ok(self.new_file(inode))
    }

    /// Open a file on any device (a fault injector in tests, say), keyed by
    /// the device's name.
    pub fn open_dev(&self, dev: Arc<dyn BackingDev>) -> Result<File> {
        let name = dev.name().to_string();
        let inode = self.cache().iget(&name, &name, move || Ok(dev))?;
        Ok(self.new_file(inode))
    }

    /// Open the file keyed `name`, making its device with `make` only if
    /// the file is not cached already (the mount opens a backing inode this
    /// way, reopening nothing while its pages are cached).
    pub fn open_dev_with(&self, name: &str, make: impl FnOnce() -> Result<Arc<dyn BackingDev>>) -> Result<File> {
        let inode = self.cache().iget(name, name, make)?;
        Ok(self.new_file(inode))
    }

    /// The size of the file keyed `name` if it is cached (open, or closed
    /// with pages still cached): the truth while dirty pages may extend it.
    pub fn cached_len(&self, name: &str) -> Option<u64> {
        let key = self.resolve_key(name);
        self.cache().icache.lookup(&key).map(|i| i.size.load(Ordering::Acquire))
    }

    /// A handle on `inode`, whose handle count already includes it (iget).
    fn new_file(&self, inode: Arc<Inode>) -> File {
        let ra = FileRaState::new(self.cache().default_ra_pages(&inode));
        File {
            cache: self.cache().clone(),
            owner: self.owner.clone(),
            wb_err_since: AtomicU32::new(errseq::errseq_sample(&inode.wb_err)),
            inode,
            ra,
            closed: AtomicBool::new(false),
        }
    }

    fn unlink_name(&self, name: &str) -> Result<()> {
        let cache = self.cache();
        let inode = cache.icache.remove_key(name);
        let Some(inode) = inode else {
            return Err(Error::InvalidArgument(format!("{name}: not open in this cache")));
        };
        inode.unlinked.store(true, Ordering::Release);
        let res = inode.dev.remove().map_err(|e| Error::io(name, e));
        if inode.handles.load(Ordering::Acquire) == 0 {
            cache.evict_inode(&inode);
        }
        res
    }

    /// Unlink a host file's name, as unlink(2) does. When it was the file's
    /// last name its cached pages are dropped (once no handle is open);
    /// another hard link keeps the file, and its cache, alive. Handles open
    /// on the file keep working either way.
    pub fn unlink(&self, path: impl AsRef<Path>) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let path = path.as_ref();
        let name = path.to_string_lossy().into_owned();
        let cache = self.cache();
        // The name itself, not what a symlink leads to.
        let m = std::fs::symlink_metadata(path).map_err(|e| Error::io(&name, e))?;
        let inode = host_key_of(&m).and_then(|key| cache.icache.lookup(&key));
        let Some(inode) = inode else {
            return std::fs::remove_file(path).map_err(|e| Error::io(&name, e));
        };
        // The device may reopen its file by this very name.
        let _ = inode.dev.hold_open();
        std::fs::remove_file(path).map_err(|e| Error::io(&name, e))?;
        if m.nlink() <= 1 {
            self.forget_unlinked(&inode);
        }
        Ok(())
    }

    /// The file lost its last name: out of the icache, and its pages go
    /// with its last handle.
    fn forget_unlinked(&self, inode: &Arc<Inode>) {
        let cache = self.cache();
        inode.unlinked.store(true, Ordering::Release);
        cache.icache.unhash_if(inode, || true);
        if inode.handles.load(Ordering::Acquire) == 0 {
            cache.evict_inode(inode);
        }
    }

    /// Unlink a memory-only file.
    pub fn unlink_memory(&self, name: &str) -> Result<()> {
        self.unlink_name(&format!("memory:{name}"))
    }

    /// Unlink a file opened with [`PageCache::open_dev`], by its device's
    /// name: its device's `remove` is called and its pages are dropped,
    /// dirty or not, once no handle is open (handles already open keep
    /// working, as on an unlinked file). Returns false, changing nothing,
    /// when no such file is cached.
    pub fn unlink_dev(&self, name: &str) -> Result<bool> {
        if !self.cache().icache.contains(name) {
            return Ok(false);
        }
        self.unlink_name(name).map(|()| true)
    }

    /// Rename a host file, as rename(2) does (replacing `new` if it
    /// exists). Files are cached by identity, so a cached file keeps its
    /// pages, dirty data and open handles whatever its names do; a cached
    /// file that `new` named before loses that name, and is dropped as
    /// unlink drops it if it was its last (handles open on it keep
    /// working). Messages and `lru_snapshot` keep showing the name a file
    /// was opened under.
    pub fn rename(&self, old: impl AsRef<Path>, new: impl AsRef<Path>) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let (old, new) = (old.as_ref(), new.as_ref());
        let old_name = old.to_string_lossy().into_owned();
        let cache = self.cache();
        let cached_at = |p: &Path| {
            let m = std::fs::symlink_metadata(p).ok()?;
            let inode = cache.icache.lookup(&host_key_of(&m)?)?;
            Some((inode, m.nlink()))
        };
        let moving = cached_at(old);
        let replaced = cached_at(new).filter(|(r, _)| !moving.as_ref().is_some_and(|(m, _)| Arc::ptr_eq(m, r)));
        // Both may reopen by a name that is about to change.
        for (inode, _) in moving.iter().chain(replaced.iter()) {
            let _ = inode.dev.hold_open();
        }
        std::fs::rename(old, new).map_err(|e| Error::io(&old_name, e))?;
        if let Some((inode, _)) = &moving {
            inode.dev.renamed(old, new);
        }
        if let Some((inode, nlink)) = replaced {
            if nlink <= 1 {
                self.forget_unlinked(&inode);
            }
        }
        Ok(())
    }

    /// Drop a file no handle has open from the cache, as the kernel evicts
    /// an unused inode: write back its dirty pages, then free every page
    /// and close its device. `name` is what the file is keyed by (the path
    /// given to [`PageCache::open`], or the device's name). Returns false,
    /// changing nothing, when the file is not cached or a handle is open;
    /// a writeback error is returned and the file stays cached with its
    /// dirty pages, so no data is lost. The caller makes sure no open of
    /// the same file races with this call.
    pub fn evict(&self, name: &str) -> Result<bool> {
        let cache = self.cache();
        let name = &self.resolve_key(name);
        let Some(inode) = cache.icache.lookup(name) else {
            return Ok(false);
        };
        if inode.handles.load(Ordering::Acquire) > 0 {
            return Ok(false);
        }
        cache.write_and_wait_range(&inode, 0, u64::MAX)?;
        let unused = || inode.handles.load(Ordering::Acquire) == 0 && inode.nr_dirty.load(Ordering::Acquire) == 0;
        if !cache.icache.unhash_if(&inode, unused) {
            return Ok(false);
        }
        cache.evict_inode(&inode);
        Ok(true)
    }

    /// Whether a file keyed by `name` is cached (open, or closed with
    /// pages or state still held). A host file may be named by any of its
    /// paths.
    pub fn is_cached(&self, name: &str) -> bool {
        let key = self.resolve_key(name);
        self.cache().icache.contains(&key)
    }

    /// The icache key `name` stands for: itself if a file is cached under
    /// it (a device's or memory file's name, a key), else the identity key
    /// of the host file at that path, if there is one.
    fn resolve_key(&self, name: &str) -> String {
        if self.cache().icache.contains(name) {
            return name.to_string();
        }
        std::fs::metadata(name).ok().and_then(|m| host_key_of(&m)).unwrap_or_else(|| name.to_string())
    }

    /// An anonymous region of `len` bytes (rounded up to pages), as
    /// mmap(2) with MAP_PRIVATE | MAP_ANONYMOUS: readable and writable,
    /// every page zero until written. It is a [`Mapping`] like a file's:
    /// [`Mapping::page`] returns a [`MappedPage`] guard (`read_into`,
    /// `load_u64`, `write`), [`Mapping::read`]/[`Mapping::write`] copy.
    ///
    /// Its pages come from the cache's frames, as the first access to each
    /// needs one (a fault), so anonymous memory and cached file pages
    /// share one budget and one reclaim: with swap on
    /// ([`PageCache::swapon`] or `Tunables::swap_bytes`) cold anonymous
    /// pages are written to swap and read back on access; without swap
    /// they cannot be reclaimed, and when nothing else can be either an
    /// access fails with [`Error::NoMemory`]. An error reading swap is
    /// returned to the access ([`Error::Io`]), and the data stays on swap
    /// for the next try. Dropping the region frees its frames and its swap
    /// slots; [`Madvise::DontNeed`] does the same for a range (it reads as
    /// zeroes again).
    pub fn map_anon(&self, len: u64) -> Result<Mapping> {
        if self.cache().shutting_down() {
            return Err(Error::ShutDown);
        }
        Mapping::new_anon(self.cache().clone(), self.owner.clone(), len)
    }

    /// swapon(2): give anonymous memory somewhere to go under pressure
    /// ([`SwapConfig`]: a host file, memory, or any [`BackingDev`]). One
    /// swap device per cache: a second call is refused
    /// ([`Error::InvalidArgument`], the kernel's EBUSY) and changes
    /// nothing. There is no swapoff: the device stays until the cache is
    /// dropped.
    pub fn swapon(&self, cfg: SwapConfig) -> Result<()> {
        self.cache().swapon(cfg)
    }

    /// The run-time tunables' names (the files of `/proc/sys/vm` this
    /// cache has, plus `read_ahead_kb`).
    pub fn sysctl_names(&self) -> &'static [&'static str] {
        sysctl::SYSCTL_NAMES
    }

    /// A run-time tunable's value as `/proc/sys/vm/NAME` shows it, or None
    /// for an unknown name.
    pub fn sysctl_read(&self, name: &str) -> Option<String> {
        self.cache().sysctl.read(name)
    }

    /// Set a run-time tunable from text (`echo 30 > dirty_ratio`). It takes
    /// effect at the next decision that uses it; a bad value is refused
    /// ([`Error::InvalidSysctl`], [`Error::UnknownSysctl`]) and changes
    /// nothing.
    pub fn sysctl_write(&self, name: &str, value: &str) -> Result<()> {
        self.cache().sysctl.write(name, value)
    }

    /// A snapshot of every counter.
    pub fn vmstat(&self) -> VmStat {
        self.cache().vmstat()
    }

    /// lru_add_drain: apply the calling CPU's LRU batches.
    pub fn lru_add_drain(&self) {
        self.cache().lru_add_drain();
    }

    /// lru_add_drain_all: apply every CPU's LRU batches.
    pub fn lru_add_drain_all(&self) {
        self.cache().lru_add_drain_all();
    }

    /// Reclaim up to `nr` pages now, as a direct reclaimer would (without
    /// counting an allocstall). Returns pages freed.
    pub fn reclaim(&self, nr: u64) -> u64 {
        self.cache().reclaim_pages(nr, false)
    }

    /// Write back every dirty page and wait (sync(2)).
    pub fn sync_all(&self) -> Result<()> {
        self.cache().sync_all()
    }

    /// Shut the cache down: write back every dirty page and wait, stop
    /// kswapd and the flushers, and wake every thread waiting in the cache
    /// (the dirty throttle, the allocator) with [`Error::ShutDown`]; later
    /// writes fail with it too. Returns [`Error::Unwritten`], naming each
    /// file with the pages it could not write and the error, when some
    /// dirty data could not be written back: it was not written, and
    /// nothing says otherwise. Dropping the last handle does the same but
    /// can only ignore the result.
    pub fn shutdown(&self) -> Result<()> {
        self.cache().shutdown_all()
    }

    /// The files holding dirty pages now, with their last writeback error
    /// (errno 0: none yet). After [`PageCache::sync_all`] these are the
    /// files whose data could not be written.
    pub fn unwritten_files(&self) -> Vec<UnwrittenFile> {
        self.cache().unwritten_files()
    }

    /// Drop every clean, unpinned page (echo 1 > /proc/sys/vm/drop_caches).
    pub fn drop_caches(&self) {
        let cache = self.cache();
        cache.lru_add_drain_all();
        let inodes = cache.icache.collect(|_| true);
        for inode in inodes {
            cache.invalidate_mapping_pages(&inode, 0, u64::MAX);
        }
        // Inodes emptied above and no longer open go too (drop_caches' 2).
        let listed = cache.icache.nr_unused();
        cache.prune_icache(listed);
    }

    /// The pages of each LRU list from head (newest) to tail, for tests
    /// and tools: (file name, page index) per page.
    pub fn lru_snapshot(&self, list: LruList) -> Vec<(String, u64)> {
        let cache = self.cache();
        let pfns = cache.lruvec.lock(&cache.arena, &cache.vm).collect(list);
        pfns.into_iter()
            .map(|pfn| {
                let page = cache.page(pfn);
                let name = cache.inode_by_id(page.mapping()).map(|i| i.name.clone()).unwrap_or_default();
                (name, page.index())
            })
            .collect()
    }
}

/// An open file: a handle with its own readahead state and error cursor.
pub struct File {
    cache: Arc<Cache>,
    owner: Arc<Owner>,
    inode: Arc<Inode>,
    ra: FileRaState,
    wb_err_since: AtomicU32,
    closed: AtomicBool,
}

impl File {
    #[inline]
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<u64> {
        let max = Inode::max_bytes(self.cache.page_shift());
        match offset.checked_add(len) {
            Some(end) if end <= max => Ok(end),
            _ => Err(Error::Overflow { offset, len, max }),
        }
    }

    /// The file's name (its path, or `memory:NAME`).
    pub fn name(&self) -> &str {
        &self.inode.name
    }

    /// The page size of the cache holding the file, in bytes.
    pub fn page_size(&self) -> usize {
        self.cache.page_size()
    }

    /// Read up to `buf.len()` bytes at `offset`; fewer at end of file.
    #[inline]
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.check_open()?;
        self.check_range(offset, buf.len() as u64)?;
        self.cache.filemap_read(&self.inode, &self.ra, buf, offset)
    }

    /// Read what is cached at `offset` without waiting, as a read with
    /// RWF_NOWAIT: the bytes of the leading pages that are cached and
    /// uptodate. Returns them and whether it stopped short of `buf.len()`
    /// and of end of file at a page that `read_at` would read in, wait for
    /// or start readahead at; `read_at` from `offset` plus the bytes
    /// returned goes on from there, each page marked accessed once. Never
    /// does I/O and never sleeps: a server thread can answer hits itself
    /// and hand only misses to its workers.
    #[inline]
    pub fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<(usize, bool)> {
        self.check_open()?;
        self.check_range(offset, buf.len() as u64)?;
        Ok(self.cache.filemap_read_nowait(&self.inode, &self.ra, buf, offset))
    }

    /// Write `buf` at `offset`, extending the file as needed. Returns bytes
    /// written (all of them unless an error stopped it part way).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.check_open()?;
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let _g = self.inode.rwsem.lock();
        self.cache.generic_perform_write(&self.inode, buf, offset)
    }

    fn sync(&self, data_only: bool) -> Result<()> {
        self.check_open()?;
        // Writeback errors (this pass's or the flusher's) are recorded in
        // the inode's errseq and reported from there, once per handle.
        let _ = self.cache.write_and_wait_range(&self.inode, 0, u64::MAX);
        let dev = self.inode.dev.sync(data_only).map_err(|e| Error::io(&self.inode.name, e));
        self.take_wb_err()?;
        dev
    }

    /// Write back the file's dirty pages, wait, and flush the device.
    pub fn fsync(&self) -> Result<()> {
        self.sync(false)
    }

    /// As fsync, flushing only data on the device.
    pub fn fdatasync(&self) -> Result<()> {
        self.sync(true)
    }

    /// sync_file_range(2) with WAIT_BEFORE | WRITE | WAIT_AFTER: write the
    /// dirty pages of `[offset, offset + len)` (`len` 0: to the end of the
    /// file) and wait for their writeback, without flushing the device's
    /// cache. A writeback error not yet seen by this handle is returned,
    /// once, as file_fdatawait_range does.
    pub fn sync_range(&self, offset: u64, len: u64) -> Result<()> {
        self.check_open()?;
        let shift = self.cache.page_shift();
        let end = if len == 0 { u64::MAX } else { self.check_range(offset, len)?.div_ceil(1 << shift) };
        let _ = self.cache.write_and_wait_range(&self.inode, offset >> shift, end);
        self.take_wb_err()
    }

    /// The file's size in bytes.
    pub fn len(&self) -> Result<u64> {
        self.check_open()?;
        Ok(self.inode.size.load(Ordering::Acquire))
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncate or extend the file to `len` bytes.
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.check_open()?;
        self.check_range(len, 0)?;
        let _g = self.inode.rwsem.lock();
        self.cache.truncate_inode(&self.inode, len)
    }

    /// Deallocate `[offset, offset + len)`: it reads back as zeroes.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        self.check_open()?;
        self.check_range(offset, len)?;
        let _g = self.inode.rwsem.lock();
        self.cache.punch_hole(&self.inode, offset, len)
    }

    /// posix_fadvise(2). `len` 0 means to the end of the file.
    pub fn fadvise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.check_open()?;
        let end = if len == 0 { u64::MAX } else { self.check_range(offset, len)? };
        let shift = self.cache.page_shift();
        let ra = &self.ra;
        let default_ra = self.cache.default_ra_pages(&self.inode);
        match advice {
            Advice::Normal => {
                ra.ra_pages.store(default_ra, Ordering::Relaxed);
                ra.mode.fetch_and(!(FMODE_RANDOM | FMODE_NOREUSE), Ordering::Relaxed);
            }
            Advice::Sequential => {
                ra.ra_pages.store(default_ra.saturating_mul(2), Ordering::Relaxed);
                ra.mode.fetch_and(!FMODE_RANDOM, Ordering::Relaxed);
            }
            Advice::Random => {
                ra.mode.fetch_or(FMODE_RANDOM, Ordering::Relaxed);
            }
            Advice::NoReuse => {
                ra.mode.fetch_or(FMODE_NOREUSE, Ordering::Relaxed);
            }
            Advice::WillNeed => {
                let size = self.inode.size.load(Ordering::Acquire);
                let end = end.min(size);
                if offset < end {
                    let first = offset >> shift;
                    let last = (end - 1) >> shift;
                    self.cache.force_page_cache_readahead(&self.inode, first, last - first + 1);
                }
            }
            Advice::DontNeed => {
                // As mm/fadvise.c: start writeback of every page the range
                // touches, drain this CPU's LRU batches (their references
                // would keep pages), drop the clean pages wholly inside the
                // range, and if some could not go, drain every CPU and try
                // once more.
                let first = offset >> shift;
                let touched_end = if end == u64::MAX { u64::MAX } else { ((end - 1) >> shift) + 1 };
                let _ = self.cache.write_cache_pages(&self.inode, first, touched_end, u64::MAX, false);
                let start = offset.div_ceil(1 << shift);
                let whole_end = if end == u64::MAX { u64::MAX } else { end >> shift };
                if start < whole_end {
                    self.cache.lru_add_drain();
                    let before = self.inode.nrpages.load(Ordering::Relaxed);
                    let dropped = self.cache.invalidate_mapping_pages(&self.inode, start, whole_end);
                    if dropped < before && self.cached_in(start, whole_end) > 0 {
                        self.cache.lru_add_drain_all();
                        self.cache.invalidate_mapping_pages(&self.inode, start, whole_end);
                    }
                }
            }
        }
        Ok(())
    }

    /// Look the page at `index` up, reading it in if needed, pin it and
    /// mark it accessed. The page must lie below the end of the file.
    pub fn get_page(&self, index: u64) -> Result<PageRef<'_>> {
        self.check_open()?;
        let shift = self.cache.page_shift();
        let size = self.inode.size.load(Ordering::Acquire);
        if index >= size.div_ceil(1 << shift) {
            return Err(Error::PastEof { offset: index.saturating_mul(1 << shift), size });
        }
        let pfn = self.cache.read_cache_page(&self.inode, None, index, 1)?;
        self.cache.mark_page_accessed(pfn);
        Ok(PageRef::new(self, pfn, index, Pin::Ref))
    }

    /// A write pin on the page at `index`: the page is locked (PG_locked),
    /// out of writeback (stable pages) and uptodate, read in if it lies
    /// inside the file and zero-filled past EOF, and its backing space is
    /// reserved (ENOSPC and EFBIG come back here). Write it in place with
    /// [`PageMut::write`] and [`PageMut::fill`]; grow the file with
    /// [`PageMut::extend_to`]. Dropping the pin marks the page dirty,
    /// grows i_size, unlocks the page and runs the dirty throttle.
    ///
    /// Pins of different pages of one file do not wait for each other.
    /// Truncation and hole punching of the file wait until no pin of it is
    /// held. A pin is a page lock: while its thread holds one, that thread
    /// must not take a second pin of the same file, nor call methods of it
    /// that lock pages or wait for them (`write_at`, `read_at`, `get_page`,
    /// `set_len`, `punch_hole`, `fsync`, `fdatasync`, `sync_range`,
    /// `fadvise`); [`File::find_page`] and [`PageRef`] reads are fine.
    ///
    /// ```
    /// use pcache::{Config, PageCache};
    /// let cache = PageCache::new(Config::with_memory(16 << 20))?;
    /// let f = cache.open_memory("doc")?;
    /// {
    ///     let mut page = f.get_page_mut(0)?; // locked, zero-filled past EOF
    ///     page.write(0, b"hello")?;
    ///     page.extend_to(5)?;
    /// } // dirty, i_size 5, unlocked
    /// let mut buf = [0u8; 5];
    /// f.find_page(0)?.expect("cached").read_into(0, &mut buf)?;
    /// assert_eq!((&buf, f.len()?), (b"hello", 5));
    /// # Ok::<(), pcache::Error>(())
    /// ```
    pub fn get_page_mut(&self, index: u64) -> Result<PageMut<'_>> {
        self.check_open()?;
        let ps = self.cache.page_size() as u64;
        self.check_range(index.saturating_mul(ps), ps)?;
        // Shared: pins of one file proceed together, while truncation and
        // hole punching (exclusive) wait for them, and they for it.
        let inval = self.inode.invalidate_lock.read();
        let pfn = self.cache.write_begin_pin(&self.inode, index)?;
        Ok(PageMut { file: self, pfn, index, new_size: 0, written_end: 0, dirtied: false, inval: Some(inval) })
    }

    /// Map `[offset, offset + len)` of the file (mmap(2) of a shared file
    /// mapping): `offset` page aligned, `len` above 0 (rounded up to
    /// pages). The mapping may reach past the end of the file; accesses
    /// there fail with [`Error::PastEof`] (the kernel's SIGBUS). With
    /// [`MapFlags::WRITE`] writes through it reach the file; with
    /// [`MapFlags::EXEC`] reclaim treats its pages as code. The mapping
    /// keeps the file open until it is dropped.
    pub fn map(&self, offset: u64, len: u64, flags: MapFlags) -> Result<Mapping> {
        self.check_open()?;
        self.check_range(offset, len)?;
        Mapping::new(self.cache.clone(), self.owner.clone(), self.inode.clone(), offset, len, flags)
    }

    /// The hit path: look up, pin and mark accessed a cached, uptodate page;
    /// None if it is not cached.
    #[inline(always)]
    pub fn find_page(&self, index: u64) -> Result<Option<PageRef<'_>>> {
        self.check_open()?;
        if let Some((pfn, h, hot)) = self.cache.find_page_fast(&self.inode, index) {
            self.cache.mark_page_accessed_hit(pfn, hot);
            return Ok(Some(PageRef::new(self, pfn, index, Pin::Hazard(h))));
        }
        let Some(pfn) = self.cache.find_get_page(&self.inode, index) else {
            return Ok(None);
        };
        // A large folio's state is its head's.
        let head = self.cache.arena.compound_head(pfn);
        if !self.cache.page(head).test(PG_UPTODATE) {
            self.cache.put_page(pfn);
            return Ok(None);
        }
        self.cache.mark_page_accessed(head);
        Ok(Some(PageRef::new(self, pfn, index, Pin::Ref)))
    }

    /// The state of the cached page at `index`, if any.
    pub fn page_state(&self, index: u64) -> Option<PageState> {
        let pfn = self.cache.find_get_page(&self.inode, index)?;
        // A large folio's state is its head's.
        let page = self.cache.page(self.cache.arena.compound_head(pfn));
        let f = page.flags();
        let st = PageState {
            lru: (f & PG_LRU != 0).then(|| LruList::of_flags(f)),
            referenced: f & PG_REFERENCED != 0,
            active: f & PG_ACTIVE != 0,
            uptodate: f & PG_UPTODATE != 0,
            dirty: f & PG_DIRTY != 0,
            writeback: f & PG_WRITEBACK != 0,
            locked: f & PG_LOCKED != 0,
            reclaim: f & PG_RECLAIM != 0,
            readahead: f & PG_READAHEAD != 0,
            error: f & PG_ERROR != 0,
            // Less the reference this call took.
            refcount: page.refcount() - 1,
            mapcount: page.mapcount.load(Ordering::Relaxed),
            folio_order: page.folio_order(),
        };
        self.cache.put_page(pfn);
        Some(st)
    }

    /// Pages of this file cached in the page range `[start, end)`.
    fn cached_in(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        self.inode.tree.for_each(start, end, None, &mut |i, e| {
            if pagetree::entry_pfn(e).is_some() {
                // A large folio's pages inside the range (`i` is where it
                // starts, or `start` if it starts before).
                let order = pagetree::entry_order(e);
                let folio_end = (i & !((1u64 << order) - 1)) + (1u64 << order);
                n += folio_end.min(end) - i;
            }
            true
        });
        n
    }

    /// Pages of this file in the cache.
    pub fn cached_pages(&self) -> u64 {
        self.inode.nrpages.load(Ordering::Relaxed)
    }

    /// Another handle on the same file, with its own readahead state.
    pub fn reopen(&self) -> Result<File> {
        self.check_open()?;
        if self.inode.unlinked.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!("{}: unlinked", self.inode.name)));
        }
        let pc = PageCache { owner: self.owner.clone() };
        self.inode.handles.fetch_add(1, Ordering::AcqRel);
        Ok(pc.new_file(self.inode.clone()))
    }

    /// Report a writeback error of this file that this handle has not
    /// seen yet (filemap_check_wb_err), once: the next call returns Ok
    /// unless another error happens. Writes nothing back.
    pub fn check_wb_err(&self) -> Result<()> {
        self.check_open()?;
        self.take_wb_err()
    }

    fn take_wb_err(&self) -> Result<()> {
        match errseq::errseq_check_and_advance(&self.inode.wb_err, &self.wb_err_since) {
            0 => Ok(()),
            errno => Err(Error::io(&self.inode.name, std::io::Error::from_raw_os_error(errno))),
        }
    }

    /// Close the handle: later calls fail with [`Error::Closed`]. Dirty
    /// pages stay cached and are written back as usual. A writeback error
    /// this handle has not reported yet is returned (as close(2) returns
    /// one on NFS and FUSE), once; the handle is closed all the same.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::Closed);
        }
        let res = self.take_wb_err();
        self.release();
        res
    }

    fn release(&self) {
        self.cache.ra_forget_pending(&self.ra);
        if self.inode.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if self.inode.unlinked.load(Ordering::Acquire) {
                self.cache.evict_inode(&self.inode);
            } else {
                // An inode left with nothing cached is freed (filemap.rs
                // `iput`), so memory does not grow with files ever opened.
                self.cache.iput(&self.inode);
            }
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.release();
        }
    }
}

/// A pinned page: its frame stays this page's until the ref is dropped.
/// It must be dropped on the thread that took it (hazard pins are
/// per-thread), so it is not `Send`.
///
/// The bytes are not lent out as a slice: other threads may write the page
/// meanwhile (`write_at`, a [`PageMut`], truncation zeroing its tail), so
/// each read is a copy validated against the page's sequence count. A copy
/// is one state of the page between two write sections: never a mix of two
/// `write_at` calls within the page. It takes no lock and no atomic
/// read-modify-write unless writers keep the page busy (ARCHITECTURE.md,
/// "Frame access").
pub struct PageRef<'a> {
    file: &'a File,
    pfn: Pfn,
    index: u64,
    pin: Pin,
    _not_send: PhantomData<*const ()>,
}

impl<'a> PageRef<'a> {
    fn new(file: &'a File, pfn: Pfn, index: u64, pin: Pin) -> PageRef<'a> {
        PageRef { file, pfn, index, pin, _not_send: PhantomData }
    }
}

thread_local! {
    /// `PageRef::with_bytes`'s copy, reused so a hit allocates nothing.
    static PAGE_COPY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl PageRef<'_> {
    /// The page's index in its file.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The page's size in bytes.
    pub fn len(&self) -> usize {
        self.file.cache.page_size()
    }

    /// Always false: a page has `page_size` bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copy `buf.len()` bytes at `offset` in the page into `buf`.
    /// [`Error::InvalidArgument`] if the range passes the page's end.
    #[inline]
    pub fn read_into(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        check_page_range(self.len(), offset, buf.len())?;
        self.file.cache.memcpy_from_page(self.pfn, offset, buf);
        Ok(())
    }

    /// Call `f` with a copy of the whole page (one consistent state of
    /// it), made into a per-thread buffer: no allocation after the first.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let ps = self.len();
        PAGE_COPY.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                buf.resize(ps, 0);
                self.file.cache.memcpy_from_page(self.pfn, 0, &mut buf);
                f(&buf)
            }
            // Called from inside another with_bytes: a buffer of its own.
            Err(_) => f(&self.to_vec()),
        })
    }

    /// A copy of the whole page.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut buf = vec![0; self.len()];
        self.file.cache.memcpy_from_page(self.pfn, 0, &mut buf);
        buf
    }
}

/// A write pin: the page locked for in-place update, from
/// [`File::get_page_mut`]. Readers of the page ([`PageRef`], `read_at`)
/// keep reading without waiting; each sees the page before or after each
/// `write` or `fill` call, never part of one. Dropping the pin marks the
/// page dirty (if it was written), grows i_size to what
/// [`PageMut::extend_to`] asked, zeroes what was written past i_size (it
/// is not part of the file; a page left wholly past EOF leaves the cache),
/// unlocks the page and runs
/// balance_dirty_pages_ratelimited (whose errors, an interrupt or the
/// shutdown, it can only drop).
pub struct PageMut<'a> {
    file: &'a File,
    pfn: Pfn,
    index: u64,
    /// What i_size grows to at drop (0: no growth).
    new_size: u64,
    /// The end of the furthest store into the page, in bytes.
    written_end: usize,
    dirtied: bool,
    /// Held shared for the pin's life: truncation and hole punching wait.
    inval: Option<parking_lot::RwLockReadGuard<'a, ()>>,
}

impl PageMut<'_> {
    /// The page's index in its file.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The page's size in bytes.
    pub fn len(&self) -> usize {
        self.file.cache.page_size()
    }

    /// Always false: a page has `page_size` bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copy `buf.len()` bytes at `offset` in the page into `buf`.
    pub fn read_into(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        check_page_range(self.len(), offset, buf.len())?;
        self.file.cache.__memcpy_from_page(self.pfn, offset, buf);
        Ok(())
    }

    /// Write `data` at `offset` in the page, as one write section.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        check_page_range(self.len(), offset, data.len())?;
        self.file.cache.memcpy_to_page(self.pfn, offset, data);
        self.written_end = self.written_end.max(offset + data.len());
        self.dirtied = true;
        Ok(())
    }

    /// Set `len` bytes at `offset` to `value`, as one write section.
    pub fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_page_range(self.len(), offset, len)?;
        self.file.cache.memset_page(self.pfn, offset, len, value);
        self.written_end = self.written_end.max(offset + len);
        self.dirtied = true;
        Ok(())
    }

    /// Grow the file to at least `new_size` bytes when the pin is dropped
    /// (generic_write_end's i_size update). `new_size` may not pass the
    /// end of this page ([`Error::InvalidArgument`]); a size below the
    /// file's changes nothing. Without it, bytes written past EOF are not
    /// part of the file and are zeroed at drop.
    pub fn extend_to(&mut self, new_size: u64) -> Result<()> {
        let ps = self.len() as u64;
        let end = (self.index + 1) * ps;
        if new_size > end {
            return Err(Error::InvalidArgument(format!(
                "extend_to({new_size}) passes the end of page {} ({end})",
                self.index
            )));
        }
        self.new_size = self.new_size.max(new_size);
        self.dirtied = true;
        Ok(())
    }
}

impl Drop for PageMut<'_> {
    fn drop(&mut self) {
        let (cache, inode) = (&self.file.cache, &self.file.inode);
        cache.write_end_pin(inode, self.pfn, self.index, self.new_size, self.written_end, self.dirtied);
        // Truncation may go on; the throttle may sleep, so no lock is held.
        drop(self.inval.take());
        if self.dirtied {
            let _ = cache.balance_dirty_pages_ratelimited(inode, 1);
        }
    }
}

/// Refuse a byte range `[offset, offset + len)` that passes a page.
pub(crate) fn check_page_range(page_size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= page_size => Ok(()),
        _ => Err(Error::InvalidArgument(format!("bytes {offset}+{len} pass the page's {page_size}"))),
    }
}

impl Drop for PageRef<'_> {
    #[inline]
    fn drop(&mut self) {
        self.file.cache.unpin(self.pfn, self.pin);
    }
}

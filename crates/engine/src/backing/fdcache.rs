//! A bounded cache of open host file descriptors, in LRU order.
//!
//! The kernel never runs out of "open files" for its page cache: an inode
//! reaches its blocks without a descriptor. A userspace cache over host
//! files needs one per file it does I/O on, and a process may hold only
//! RLIMIT_NOFILE of them. So a [`super::FileDev`] does not keep its
//! descriptor: it asks this cache for one at each transfer, and the cache
//! reopens the file on a miss (the device knows how, and checks that the
//! reopened file is the same inode) and closes the least recently used
//! descriptor beyond its bound.
//!
//! A descriptor in use is never closed under its user: [`FdCache::get`]
//! hands out an `Arc<CachedFd>`, and dropping the cache's reference only
//! closes the descriptor once the last I/O using it lets go. Eviction
//! prefers descriptors nobody holds; when every candidate is busy, the
//! oldest leaves the cache anyway and closes when its I/O ends, so the
//! open count may pass the bound by the number of transfers in flight at
//! that moment (at most the threads doing I/O), never more.
//!
//! `nr_open_fds` (vmstat) counts every descriptor opened through here and
//! not yet closed, in the cache or out of it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

/// The fewest descriptors a cache may be bounded to.
pub const MIN_OPEN_FDS: usize = 4;

/// How many of the oldest entries eviction looks at for one nobody holds.
const EVICT_SCAN: usize = 8;

/// The default bound: half the soft RLIMIT_NOFILE (the other half is
/// headroom for the embedding program, sockets, the mount's own transient
/// descriptors), at most 4096.
pub fn default_max_open_fds() -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `rlimit` we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / 2).clamp(MIN_OPEN_FDS, 4096)
}

/// An open descriptor handed out by the cache; closed when the last
/// reference goes.
#[derive(Debug)]
pub struct CachedFd {
    file: File,
    open: Arc<AtomicU64>,
}

impl CachedFd {
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl AsRawFd for CachedFd {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Drop for CachedFd {
    fn drop(&mut self) {
        // The File closes itself right after this.
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default, Debug)]
struct Lru {
    /// Device id -> (descriptor, its last-use stamp).
    map: HashMap<u64, (Arc<CachedFd>, u64)>,
    /// Last-use stamp -> device id, oldest first.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl Lru {
    fn touch(&mut self, id: u64) -> Option<Arc<CachedFd>> {
        let Lru { map, order, clock } = self;
        let (fd, stamp) = map.get_mut(&id)?;
        // Already the most recent (a file streaming I/O): nothing moves.
        if *stamp != *clock {
            *clock += 1;
            order.remove(stamp);
            *stamp = *clock;
            order.insert(*clock, id);
        }
        Some(fd.clone())
    }

    /// Device `id`'s descriptor if it is already the most recent: `touch`
    /// would move nothing, so a shared lock does. Sixteen threads reading
    /// one file at random took the exclusive lock at every read, and a
    /// holder preempted on 2 CPUs made the rest spin and yield (7% of
    /// their yields); readers of a shared lock do not wait on each other.
    fn most_recent(&self, id: u64) -> Option<Arc<CachedFd>> {
        let (fd, stamp) = self.map.get(&id)?;
        (*stamp == self.clock).then(|| fd.clone())
    }

    fn remove(&mut self, id: u64) -> Option<Arc<CachedFd>> {
        let (fd, stamp) = self.map.remove(&id)?;
        self.order.remove(&stamp);
        Some(fd)
    }

    /// Take one entry out to make room: the oldest nobody holds among the
    /// few oldest, else the oldest. The caller drops it outside the lock.
    fn evict_one(&mut self) -> Option<Arc<CachedFd>> {
        let idle = self.order.values().take(EVICT_SCAN).copied().find(|id| {
            // Only the cache holds it: no transfer is using it.
            self.map.get(id).is_some_and(|(fd, _)| Arc::strong_count(fd) == 1)
        });
        let id = idle.or_else(|| self.order.values().next().copied())?;
        self.remove(id)
    }
}

/// A bounded, LRU-ordered cache of host descriptors, shared by the devices
/// of one page cache.
#[derive(Debug)]
pub struct FdCache {
    /// Read-locked for the lookup of the most recent descriptor (every
    /// transfer of a file doing I/O alone), write-locked to reorder.
    lru: RwLock<Lru>,
    max: AtomicUsize,
    open: Arc<AtomicU64>,
    next_id: AtomicU64,
}

impl FdCache {
    /// A cache holding at most `max` descriptors (0: the default bound,
    /// [`default_max_open_fds`]).
    pub fn new(max: usize) -> Arc<FdCache> {
        let max = if max == 0 { default_max_open_fds() } else { max.max(MIN_OPEN_FDS) };
        Arc::new(FdCache {
            lru: RwLock::new(Lru::default()),
            max: AtomicUsize::new(max),
            open: Arc::new(AtomicU64::new(0)),
            next_id: AtomicU64::new(1),
        })
    }

    /// The cache of devices opened outside any page cache
    /// (`FileDev::open`), with the default bound.
    pub fn global() -> &'static Arc<FdCache> {
        static GLOBAL: OnceLock<Arc<FdCache>> = OnceLock::new();
        GLOBAL.get_or_init(|| FdCache::new(0))
    }

    /// The bound.
    pub fn max_open_fds(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Change the bound; extra descriptors close at once (those in use as
    /// their transfers end).
    pub fn set_max_open_fds(&self, max: usize) {
        self.max.store(max.max(MIN_OPEN_FDS), Ordering::Relaxed);
        self.shrink_to(self.max_open_fds());
    }

    /// Descriptors open now (nr_open_fds), cached or still in use.
    pub fn nr_open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Descriptors the cache holds.
    pub fn nr_cached(&self) -> usize {
        self.lru.read().map.len()
    }

    /// A new device id.
    pub fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Close cached descriptors until at most `keep` remain.
    fn shrink_to(&self, keep: usize) {
        let mut victims = Vec::new();
        {
            let mut lru = self.lru.write();
            while lru.map.len() > keep {
                match lru.evict_one() {
                    Some(fd) => victims.push(fd),
                    None => break,
                }
            }
        }
        // Closed here, outside the lock (close may block on some
        // filesystems).
        drop(victims);
    }

    /// The descriptor of device `id`, from the cache or from `open` (called
    /// without the cache's lock held). A descriptor opened here enters the
    /// cache, evicting the least recently used beyond the bound. EMFILE or
    /// ENFILE from `open` closes half the cache and retries once.
    pub fn get(&self, id: u64, open: impl Fn() -> io::Result<File>) -> io::Result<Arc<CachedFd>> {
        if let Some(fd) = self.lru.read().most_recent(id) {
            return Ok(fd);
        }
        if let Some(fd) = self.lru.write().touch(id) {
            return Ok(fd);
        }
        // Make room first, so the open itself stays under the bound.
        self.shrink_to(self.max_open_fds().saturating_sub(1));
        let file = match open() {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                self.shrink_to(self.nr_cached() / 2);
                open()?
            }
            Err(e) => return Err(e),
        };
        Ok(self.insert(id, file))
    }

    /// Put a freshly opened descriptor of device `id` in the cache (a
    /// device's first open). If another thread cached one meanwhile, that
    /// one is kept and `file` is closed when the caller drops it.
    pub fn insert(&self, id: u64, file: File) -> Arc<CachedFd> {
        self.open.fetch_add(1, Ordering::Relaxed);
        let fd = Arc::new(CachedFd { file, open: self.open.clone() });
        let victim = {
            let mut lru = self.lru.write();
            if let Some(theirs) = lru.touch(id) {
                return theirs;
            }
            let victim = if lru.map.len() >= self.max_open_fds() { lru.evict_one() } else { None };
            lru.clock += 1;
            let clock = lru.clock;
            lru.map.insert(id, (fd.clone(), clock));
            lru.order.insert(clock, id);
            victim
        };
        drop(victim);
        fd
    }

    /// Drop device `id`'s descriptor from the cache (the device is gone,
    /// or its file must be reopened).
    pub fn forget(&self, id: u64) {
        let fd = self.lru.write().remove(id);
        drop(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_tmp(dir: &std::path::Path, i: u64) -> impl Fn() -> io::Result<File> + '_ {
        move || std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(i.to_string()))
    }

    #[test]
    fn bounded_lru_and_busy_descriptors_survive() {
        let dir = tempfile::tempdir().unwrap();
        let c = FdCache::new(4);
        let held = c.get(1, open_tmp(dir.path(), 1)).unwrap();
        for i in 2..=10 {
            c.get(i, open_tmp(dir.path(), i)).unwrap();
            assert!(c.nr_cached() <= 4);
        }
        // 1 was held throughout: it stayed open (out of the cache or in it).
        assert!(c.nr_open() <= 5, "{}", c.nr_open());
        // SAFETY: fcntl(F_GETFD) on a descriptor we hold open.
        assert!(unsafe { libc::fcntl(held.as_raw_fd(), libc::F_GETFD) } >= 0);
        drop(held);
        assert!(c.nr_open() <= 4);
        // The most recent ones are cached: a hit opens nothing.
        let before = c.nr_open();
        c.get(10, || Err(io::Error::from_raw_os_error(libc::EIO))).unwrap();
        assert_eq!(c.nr_open(), before);
        c.set_max_open_fds(MIN_OPEN_FDS);
        c.forget(10);
        assert!(c.nr_cached() < MIN_OPEN_FDS);
    }

    // Goal: the shared-lock lookup (the most recent descriptor again)
    // returns the cached descriptor and leaves the LRU order as a touch
    // would; an older one still moves to the front.
    #[test]
    fn most_recent_lookup_keeps_lru_order() {
        let dir = tempfile::tempdir().unwrap();
        let c = FdCache::new(4);
        let refuse = || Err(io::Error::from_raw_os_error(libc::EIO));
        for i in 1..=4 {
            c.get(i, open_tmp(dir.path(), i)).unwrap();
        }
        let a = c.get(4, refuse).unwrap();
        let b = c.get(4, refuse).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the most recent descriptor, not a new one");
        drop((a, b));
        // 1 (oldest) moves to the front; 5 then evicts 2, the oldest now.
        c.get(1, refuse).unwrap();
        c.get(5, open_tmp(dir.path(), 5)).unwrap();
        assert!(c.get(1, refuse).is_ok(), "1 was touched, not evicted");
        assert_eq!(c.nr_cached(), 4);
        assert!(c.get(2, refuse).is_err(), "2 was the least recent");
    }
}

//! The cache's shared state and the page allocator's slow path
//! (mm/page_alloc.c's `__alloc_pages_slowpath`, reduced).
//!
//! Allocation takes a frame from the free list while the free count stays
//! above the min watermark (above low when kswapd is off). Below low it
//! wakes kswapd; below min the allocating thread reclaims directly
//! (`allocstall`). A thread that can free nothing waits briefly for
//! writeback or kswapd and retries; the number of fruitless retries is
//! bounded, after which it fails with ENOMEM rather than hang.

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::arena::Arena;
use crate::backing_dev::BdiList;
use crate::error::{Error, Result};
use crate::filemap::Inode;
use crate::hazard::HazardTable;
use crate::inode::Icache;
use crate::lru_gen::LruGenState;
use crate::lruvec::Lruvec;
use crate::page::{LockedPage, Page, Pfn};
use crate::pagetree::NodeCache;
use crate::pagevec::PerCpu;
use crate::sysctl::VmSysctl;
use crate::tunables::Config;
use crate::vmstat::{Item, NodeStat, NodeStats, VmCounters, VmStat, NR_ITEMS};
use crate::wait::Wakeup;
use crate::LruList;

pub struct Cache {
    pub(crate) config: Config,
    /// The knobs that can change while the cache runs (sysctl.rs); the
    /// paths that use them read these, not `config.tunables`.
    pub(crate) sysctl: VmSysctl,
    pub(crate) arena: Arena,
    pub(crate) lruvec: Lruvec,
    pub(crate) percpu: Box<[PerCpu]>,
    pub(crate) vm: VmCounters,
    /// Inodes by key and by id, and the unused ones (inode.rs).
    pub(crate) icache: Icache<Inode>,
    /// Page counts by kind: file, mapped, shadow, anonymous (vmstat.rs).
    pub(crate) node_stat: NodeStats,
    /// Dirty and writeback counts, and the failing files
    /// (page_writeback.rs, the only writer).
    pub(crate) wb: crate::writeback::WbAccounting,
    /// What every page tree shares: node accounting, the walk protocol
    /// that defers node reuse, and the shadow-node list (pagetree.rs).
    pub(crate) node_cache: Arc<NodeCache>,
    /// kswapd's doorbell (vmscan.rs).
    pub(crate) kswapd: crate::vmscan::Kswapd,
    /// The read queue of asynchronous readahead and its workers (bio.rs).
    pub(crate) bio: crate::bio::IoQueue,
    /// Asynchronous readahead windows for the readahead thread (readahead.rs).
    pub(crate) ra_queue: crate::readahead::RaQueue,
    /// Backing devices, each with its flusher (backing_dev.rs).
    pub(crate) bdis: BdiList,
    /// Signalled when frames are freed or writeback ends, for allocators
    /// and throttled writers waiting for progress.
    pub(crate) progress: Wakeup,
    /// Background threads, this cache's weak self and the shutdown flag.
    life: Lifecycle,
    /// Hazard pins of the hit path (hazard.rs).
    pub(crate) hazards: Arc<HazardTable>,
    /// pcache's adaptive admission and the hit path's PAGE_HOT hint
    /// (admission.rs).
    pub(crate) admission: crate::admission::AdmissionCtl,
    /// The eviction policy plug-in, if one is selected (policy.rs).
    pub(crate) policy: crate::policy::PolicyCtl,
    /// Frames whose last reference is gone, waiting for a hazard scan
    /// before they are reused.
    pending: PendingFrees,
    /// Open host descriptors of file-backed devices, bounded (fdcache.rs).
    pub(crate) fds: Arc<crate::backing::FdCache>,
    /// The swap device, once `swapon` has run (swapfile.rs); read through
    /// `swap()`, set once by `swapon`.
    swap: std::sync::OnceLock<crate::swapfile::SwapInfo>,
    /// Anonymous regions by id and the anon inode (mmap.rs).
    pub(crate) anon: crate::mmap::AnonVmas,
}

/// The cache's life: its background threads, joined at shutdown
/// (`kthread_add`), itself for threads started from `&self` (`arc`), the
/// shutdown flag and the clock's origin. Private to mm.rs.
struct Lifecycle {
    threads: Mutex<Vec<JoinHandle<()>>>,
    self_ref: Weak<Cache>,
    /// Set once by `shutdown_all`; read through `shutting_down`.
    shutdown: AtomicBool,
    start: Instant,
}

/// Folios whose last reference is gone, waiting until no hazard pin can
/// still see any of their frames (hazard.rs) before they join the free
/// lists whole: the free side of the allocator, private to mm.rs.
struct PendingFrees {
    /// The folios' heads.
    list: Mutex<Vec<Pfn>>,
    /// The frames they hold, readable without the lock (`nr_free_pages`).
    nr: AtomicU64,
    /// How many frames wait before a flush.
    batch: usize,
}

impl PendingFrees {
    fn new(nr_pages: u64) -> PendingFrees {
        PendingFrees {
            list: Mutex::new(Vec::with_capacity(64)),
            nr: AtomicU64::new(0),
            // A flush costs a membarrier and a scan of every hazard slot;
            // up to 1/64 of memory (at most 512 frames) waits for one.
            batch: (nr_pages / 64).clamp(1, 512) as usize,
        }
    }

    /// Queue the folios headed by `pfns`, of `frames` frames in all; true
    /// when the queue is long enough to flush.
    fn push(&self, pfns: &[Pfn], frames: u64) -> bool {
        let mut list = self.list.lock();
        // Counted before they can be taken by a flush, which subtracts.
        self.nr.fetch_add(frames, Ordering::Relaxed);
        list.extend_from_slice(pfns);
        list.len() >= self.batch
    }

    /// Move the frames no hazard pin announces to `arena`'s free list;
    /// the number moved.
    fn flush(&self, hazards: &HazardTable, arena: &Arena) -> u64 {
        let mut batch = std::mem::take(&mut *self.list.lock());
        if batch.is_empty() {
            return 0;
        }
        // Highest frame first: the free list is a stack, so frames freed
        // together are then allocated lowest first, in address order, and
        // the pages written or read into them next (one write call's, one
        // window's) make long runs of memory, few segments per request.
        batch.sort_unstable_by(|a, b| b.cmp(a));
        let mut pinned = Vec::new();
        hazards.scan(&mut pinned);
        let mut keep = Vec::new();
        let mut freed = 0;
        for pfn in batch {
            let order = arena.page(pfn).folio_order() as usize;
            let nr = 1u32 << order;
            // A pin on any frame of the folio keeps all of it.
            let first_pin = pinned.partition_point(|&p| p < pfn);
            if pinned.get(first_pin).is_some_and(|&p| p - pfn < nr) {
                keep.push(pfn);
            } else {
                // Leaves the pending count before it joins the free one, so
                // no frame is ever counted twice.
                self.nr.fetch_sub(nr as u64, Ordering::Relaxed);
                arena.free_folio(pfn, order);
                freed += nr as u64;
            }
        }
        if !keep.is_empty() {
            self.list.lock().extend(keep);
        }
        freed
    }

    fn nr(&self) -> u64 {
        self.nr.load(Ordering::Relaxed)
    }
}

/// How many fruitless direct-reclaim rounds an allocation makes before it
/// fails with ENOMEM. The wait after each doubles, from 1 ms up to
/// `ALLOC_NO_PROGRESS_WAIT_MAX_MS` (about 0.65 s in all): pages locked or
/// pinned by threads the scheduler has set aside (a loaded machine) are
/// busy for a while, not gone.
const ALLOC_NO_PROGRESS_MAX: u32 = 16;
const ALLOC_NO_PROGRESS_WAIT_MAX_MS: u64 = 64;
/// The longest an allocation waits for writeback in all.
const ALLOC_WAIT_MAX: Duration = Duration::from_secs(60);

impl Cache {
    /// The unit tests' cache (`PageCache::new` starts the threads too).
    #[cfg(test)]
    pub fn new(config: Config) -> Result<Arc<Cache>> {
        Cache::with_policy(config, None)
    }

    /// A cache whose file pages `custom` holds (policy.rs), instead of
    /// the plug-in `Tunables::policy` names.
    pub fn with_policy(config: Config, custom: Option<Box<dyn crate::policy::EvictionPolicy>>) -> Result<Arc<Cache>> {
        config.validate()?;
        let t = &config.tunables;
        if custom.is_some() && (t.lru != crate::LruPolicy::Classic || t.admission != crate::Admission::Kernel) {
            return Err(Error::InvalidConfig(
                "an eviction policy replaces the kernel's lists: it needs lru Classic and admission Kernel".into(),
            ));
        }
        let nr_cpus = if config.nr_cpus == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            config.nr_cpus
        };
        let arena = Arena::with_cpus(config.nr_pages(), config.page_size, nr_cpus)?;
        // What the cache holds once full: reclaim keeps `high` free with
        // kswapd, `low` without (direct reclaim only).
        let wm = arena.watermarks;
        let reserve = if t.kswapd { wm.high } else { wm.low };
        let capacity = config.nr_pages().saturating_sub(reserve).max(1);
        let policy = custom.or_else(|| config.tunables.policy.build(config.nr_pages(), capacity));
        let hazards = Arc::new(HazardTable::new());
        Ok(Arc::new_cyclic(|self_ref| Cache {
            config,
            sysctl: VmSysctl::new(&config.tunables, config.page_size),
            arena,
            lruvec: Lruvec::with_lrugen(LruGenState::new(&config.tunables)),
            percpu: (0..nr_cpus).map(|_| PerCpu::default()).collect(),
            vm: VmCounters::new(),
            icache: Icache::default(),
            node_stat: NodeStats::default(),
            wb: crate::writeback::WbAccounting::new(),
            node_cache: Arc::new(NodeCache::new(hazards.clone())),
            kswapd: crate::vmscan::Kswapd::default(),
            bio: crate::bio::IoQueue::default(),
            ra_queue: crate::readahead::RaQueue::default(),
            bdis: BdiList::default(),
            progress: Wakeup::default(),
            life: Lifecycle {
                threads: Mutex::new(Vec::new()),
                self_ref: self_ref.clone(),
                shutdown: AtomicBool::new(false),
                start: Instant::now(),
            },
            hazards,
            admission: crate::admission::AdmissionCtl::new(&config, policy.is_some()),
            policy: crate::policy::PolicyCtl::new(policy),
            pending: PendingFrees::new(config.nr_pages()),
            fds: crate::backing::FdCache::new(config.tunables.max_open_fds),
            swap: std::sync::OnceLock::new(),
            anon: crate::mmap::AnonVmas::default(),
        }))
    }

    #[inline]
    pub fn page(&self, pfn: Pfn) -> &Page {
        self.arena.page(pfn)
    }

    #[inline]
    pub fn page_shift(&self) -> u32 {
        self.arena.page_shift
    }

    #[inline]
    pub fn page_size(&self) -> usize {
        self.arena.page_size
    }

    /// Whether `shutdown_all` has begun: writers are refused, waiters
    /// return, background threads leave.
    #[inline]
    pub fn shutting_down(&self) -> bool {
        self.life.shutdown.load(Ordering::Acquire)
    }

    /// A background thread of this cache, joined by `shutdown_all`.
    pub fn kthread_add(&self, t: JoinHandle<()>) {
        self.life.threads.lock().push(t);
    }

    /// This cache as an `Arc` (for a thread started from `&self`); None
    /// while it is being dropped.
    pub fn arc(&self) -> Option<Arc<Cache>> {
        self.life.self_ref.upgrade()
    }

    pub fn now_ms(&self) -> u64 {
        self.life.start.elapsed().as_millis() as u64 + 1
    }

    pub fn inode_by_id(&self, id: u32) -> Option<Arc<Inode>> {
        self.icache.by_id(id)
    }

    /// lock_page: the page's lock, as a guard that unlocks on drop.
    #[inline]
    pub fn lock_page(&self, pfn: Pfn) -> LockedPage<'_> {
        LockedPage::lock(self.page(pfn), pfn, &self.vm)
    }

    /// trylock_page.
    #[inline]
    pub fn trylock_page(&self, pfn: Pfn) -> Option<LockedPage<'_>> {
        LockedPage::trylock(self.page(pfn), pfn, &self.vm)
    }

    /// The guard of a lock handed over as a bare pfn: a page a function
    /// returned locked (`FGP_LOCK`, `into_raw`), whose unlock is now ours.
    #[inline]
    pub(crate) fn adopt_page_lock(&self, pfn: Pfn) -> LockedPage<'_> {
        LockedPage::adopt(self.page(pfn), pfn, &self.vm)
    }

    /// The swap device, if swap is on.
    #[inline]
    pub(crate) fn swap(&self) -> Option<&crate::swapfile::SwapInfo> {
        self.swap.get()
    }

    /// Whether anonymous pages can be reclaimed now: swap is on and has a
    /// free slot (the kernel's `nr_swap_pages > 0`).
    pub(crate) fn nr_swap_pages(&self) -> u64 {
        self.swap().map_or(0, |si| si.nr_free())
    }

    /// total_swap_pages.
    pub(crate) fn total_swap_pages(&self) -> u64 {
        self.swap().map_or(0, |si| si.total())
    }

    /// vm_swap_full: more than half of swap is in use.
    pub(crate) fn vm_swap_full(&self) -> bool {
        let total = self.total_swap_pages();
        total > 0 && self.nr_swap_pages() * 2 < total
    }

    /// swapon(2): make `cfg` the swap device (swapfile.rs). One device per
    /// cache: a second call is refused (EBUSY as InvalidArgument) and
    /// changes nothing.
    pub(crate) fn swapon(&self, cfg: crate::SwapConfig) -> Result<()> {
        use crate::swapfile::SwapInfo;
        let busy = || Error::InvalidArgument("swapon: swap is already on".into());
        let pages = SwapInfo::nr_slots(cfg.size_bytes, self.page_size())?;
        if self.swap.get().is_some() {
            return Err(busy());
        }
        let si = SwapInfo::swapon(cfg, pages, self.page_size(), &self.fds)?;
        self.swap.set(si).map_err(|_| busy())
    }

    /// Allocate a frame for the page cache, reclaiming if memory is short.
    /// The frame comes back with refcount 1 and no flags.
    pub fn alloc_page(&self) -> Result<Pfn> {
        let wm = self.arena.watermarks;
        let floor = if self.config.tunables.kswapd { wm.min } else { wm.low };
        let started = Instant::now();
        let mut fruitless = 0;
        loop {
            let free = self.arena.nr_free_against(wm.low.max(floor));
            if free <= wm.low && self.config.tunables.kswapd {
                // Only a sleeping kswapd needs the doorbell; one that is
                // about to sleep re-checks the watermark within 100 ms, and
                // direct reclaim covers the gap.
                self.kswapd.wake_if_sleeping();
            }
            if free > floor {
                if let Some(pfn) = self.arena.alloc() {
                    self.vm.inc(Item::pgalloc);
                    return Ok(pfn);
                }
            }
            if self.flush_pending_frees() > 0 {
                continue;
            }
            crate::lru_gen::lru_gen_take_oom();
            let reclaimed = self.try_to_free_pages();
            if let Some(pfn) = self.arena.alloc() {
                self.vm.inc(Item::pgalloc);
                return Ok(pfn);
            }
            if reclaimed == 0 && crate::lru_gen::lru_gen_take_oom() {
                // min_ttl_ms protects every generation (lru_gen.rs).
                return Err(Error::NoMemory { frames: self.arena.nr_pages as usize });
            }
            // Dirty pages whose writeback keeps failing are no reason to
            // wait: they will not become free.
            let busy = self.wb.nr_writeback() > 0 || self.wb.nr_dirty() > self.nr_dirty_failing();
            if reclaimed == 0 && !busy {
                fruitless += 1;
            }
            if fruitless >= ALLOC_NO_PROGRESS_MAX || started.elapsed() > ALLOC_WAIT_MAX {
                return Err(Error::NoMemory { frames: self.arena.nr_pages as usize });
            }
            if self.shutting_down() {
                return Err(Error::ShutDown);
            }
            if crate::signal::signal_pending() {
                return Err(Error::Interrupted);
            }
            // Let writeback and kswapd make progress (congestion_wait).
            self.wakeup_flusher_threads();
            let wait_ms =
                if busy { 5 } else { (1u64 << fruitless.saturating_sub(1).min(6)).min(ALLOC_NO_PROGRESS_WAIT_MAX_MS) };
            self.progress.wait(Duration::from_millis(wait_ms));
        }
    }

    /// Return a frame whose last reference is gone. It waits on the pending
    /// list until no hazard pin can still see it (hazard.rs).
    pub fn free_page(&self, pfn: Pfn) {
        self.free_pages(&[pfn]);
    }

    /// free_page for a batch of folios (their heads), with one lock of the
    /// pending list.
    pub fn free_pages(&self, pfns: &[Pfn]) {
        let frames: u64 = pfns.iter().map(|&p| 1u64 << self.page(p).folio_order()).sum();
        self.vm.add(Item::pgfree, frames);
        let flush = self.pending.push(pfns, frames);
        if flush {
            self.flush_pending_frees();
        }
    }

    /// Move pending frames that no hazard pin announces to the free list.
    pub fn flush_pending_frees(&self) -> u64 {
        let freed = self.pending.flush(&self.hazards, &self.arena);
        if freed > 0 {
            self.progress.wake_if_waiting();
        }
        freed
    }

    /// Shut the cache down: write back every dirty page, then stop kswapd
    /// and the flushers and wake every waiter (they return
    /// `Error::ShutDown`). Returns `Error::Unwritten`, naming each file,
    /// when dirty data could not be written; it stays in memory until the
    /// cache is dropped, and nothing claims it was written. A second call
    /// writes back again and reports what is still unwritten.
    pub fn shutdown_all(&self) -> Result<()> {
        // Writers are refused and throttled ones released first, so that
        // the final writeback is not chasing new dirty pages.
        self.life.shutdown.store(true, Ordering::Release);
        self.progress.wake();
        let synced = self.sync_all();
        let unwritten = self.unwritten_files();
        self.kswapd.wake();
        self.wakeup_flusher_threads();
        self.bio.close();
        self.ra_queue_close();
        let threads: Vec<JoinHandle<()>> = self.life.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        if !unwritten.is_empty() {
            return Err(Error::Unwritten { files: unwritten });
        }
        synced
    }

    /// Free frames, counting those in the hazard grace period. The two
    /// counters are read one after the other while other threads allocate
    /// and free, so the sum is approximate, as the kernel's per-CPU vmstat
    /// is: a frame allocated between the reads and another freed into the
    /// grace period can be counted twice. It is clamped to the arena's size
    /// so that the snapshot never claims more free frames than exist.
    pub fn nr_free_pages(&self) -> u64 {
        let pending = self.pending.nr();
        (self.arena.nr_free_exact() + pending).min(self.arena.nr_pages)
    }

    /// A snapshot of every counter.
    pub fn vmstat(&self) -> VmStat {
        let mut values = vec![0u64; NR_ITEMS];
        for &item in Item::ALL {
            values[item as usize] = match item {
                Item::nr_free_pages => self.nr_free_pages(),
                Item::nr_inactive_anon => self.lruvec.len(LruList::InactiveAnon),
                Item::nr_active_anon => self.lruvec.len(LruList::ActiveAnon),
                Item::nr_inactive_file => self.lruvec.len(LruList::InactiveFile),
                Item::nr_active_file => self.lruvec.len(LruList::ActiveFile),
                Item::nr_admission_window => self.lruvec.len(LruList::Window),
                Item::admission_window_target => {
                    self.admission.state().map_or(0, |a| a.window_target.load(Ordering::Relaxed))
                }
                Item::nr_file_pages => self.node_stat.read(NodeStat::FilePages),
                Item::nr_dirty => self.wb.nr_dirty(),
                Item::nr_writeback => self.wb.nr_writeback(),
                Item::nr_mapped => self.node_stat.read(NodeStat::Mapped),
                Item::nr_dirty_threshold => self.dirty_thresholds().1,
                Item::nr_dirty_background_threshold => self.dirty_thresholds().0,
                Item::nr_workingset_shadows => self.node_stat.read(NodeStat::Shadows),
                Item::workingset_nodes => self.node_cache.nr_shadow_nodes(),
                Item::nr_pagetree_nodes => self.node_cache.nr_nodes(),
                Item::nr_pagetree_nodes_retired => self.node_cache.nr_retired(),
                Item::pagetree_node_bytes => self.node_cache.bytes(),
                Item::nr_open_fds => self.fds.nr_open(),
                Item::nr_inodes => self.icache.nr_inodes(),
                Item::nr_anon_pages => self.node_stat.read(NodeStat::AnonPages),
                Item::nr_swapcached => self.swap().map_or(0, |si| si.lock().cache.len() as u64),
                Item::swap_total_pages => self.total_swap_pages(),
                Item::swap_used_pages => self.swap().map_or(0, |si| si.lock().inuse_pages as u64),
                Item::kswapd_efficiency => {
                    let scanned = self.vm.sum(Item::pgscan_kswapd);
                    self.vm.sum(Item::pgsteal_kswapd) * 100 / scanned.max(1)
                }
                _ => self.vm.sum(item),
            };
        }
        VmStat::new(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tunables;

    // Goal: a folio's last reference, dropped through any of its frames,
    // frees the whole folio, and not while a hazard pin is on any one of its
    // frames (a reader copying a tail page); the free counts every frame.
    #[test]
    fn a_folio_is_freed_whole_once_no_frame_is_pinned() {
        let c = Cache::new(Config {
            memory_bytes: 256 * 4096,
            tunables: Tunables { kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap();
        c.arena.drain_all_pages();
        let free = c.nr_free_pages();
        let (head, order) = c.arena.alloc_folio(4).expect("an order-4 folio");
        assert_eq!(order, 4);
        assert_eq!(c.nr_free_pages(), free - 16);
        let row = crate::percpu::thread_slot();
        let pin = c.hazards.pin_in_row(row, head + 9).expect("a pin slot");
        // The cache's reference goes through a tail frame, as a reader's
        // put of the page it looked up does.
        c.put_page(head + 3);
        assert_eq!(c.nr_free_pages(), free, "pending frames count as free");
        c.flush_pending_frees();
        assert_eq!(c.arena.nr_free_exact(), free - 16, "a pinned tail keeps the whole folio");
        c.hazards.unpin(pin);
        c.flush_pending_frees();
        assert_eq!(c.arena.nr_free_exact(), free, "freed whole once unpinned");
        assert!((head..head + 16).all(|p| !c.page(p).is_tail()), "no frame kept folio state");
        c.arena.drain_all_pages();
        assert!(c.arena.buddyinfo()[4..].iter().any(|&n| n > 0), "the block merged back");
    }
}

//! Configuration and run-time knobs, including the named historical
//! variants each seed compares ("before" and "after"). Defaults are the
//! "after" behaviour of every seed, i.e. what Linux does today.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::policy::PolicyKind;

/// accessed-v2, Linux 3.16: how a page created by `pagecache_get_page(FGP_ACCESSED)`
/// gets its accessed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum AccessedInit {
    /// 3.15-rc3 vanilla: the page is inserted, then `mark_page_accessed`
    /// sets PG_referenced with an atomic read-modify-write.
    Vanilla315,
    /// accessed-v2: `init_page_accessed` sets PG_referenced with a plain
    /// store before the page is visible; callers skip `mark_page_accessed`.
    #[default]
    AccessedV2,
}

/// The asynchronous I/O engine (bio.rs).
///
/// The default is the thread pool: io_uring has not yet beaten it here
/// (BENCHMARKS.md, seqread), and a writer on a frozen store is not yet
/// released by an interrupt while ring writes hold the device's size lock
/// (crates/fuse/tests/exhaustion.rs passes with the threads only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum IoEngine {
    /// io_uring where the kernel allows it (set up at start), else the
    /// thread pool, saying so once.
    Auto,
    /// io_uring or fail to start: for measurements.
    Uring,
    /// The thread pool only, even where io_uring works.
    #[default]
    Threads,
}

/// How a host file's pages are read from it (backing/file.rs). Writes
/// are O_DIRECT either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum DevReadMode {
    /// O_DIRECT: no copy in the host's page cache.
    #[default]
    Direct,
    /// Buffered reads with RWF_DONTCACHE (Linux 6.14+) on a descriptor
    /// advised POSIX_FADV_RANDOM: the host's buffered read path, its
    /// folios dropped once copied. Probed when a file is opened; where
    /// refused, O_DIRECT (said once). Measured slower than O_DIRECT on
    /// this project's virtio disk (measured; docs/history/decisions.md).
    Dontcache,
}

/// Danilov's batching, Linux 2.6.10: how `mark_page_accessed` activates a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum LruBatching {
    /// 2.6.10: `activate_page` takes lru_lock for every activation.
    Immediate2610,
    /// Danilov's 2004 patch: every `mark_page_accessed` call takes a page
    /// reference and goes into a per-CPU pagevec; the whole state machine is
    /// applied under one lru_lock acquisition when it fills.
    DanilovBatch,
    /// Linux today: PG_referenced is set directly; only activations go
    /// through the per-CPU pagevec of 15 pages.
    #[default]
    Batched,
}

/// onedrain, Linux 4.15: when `pagevec_release` drains the per-CPU LRU batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum PagevecDrain {
    /// 4.14-rc4 batchshadow: `lru_add_drain` on every release.
    EveryRelease,
    /// onedrain: once per pagevec lifecycle.
    #[default]
    Once,
}

/// the Harji/Piggin thread, Linux 2.6.20: when a read that touches a page again re-marks it
/// accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum RemarkRule {
    /// Before 2.6.11: only reads that start at a page boundary mark.
    PageAligned,
    /// 2.6.11-2.6.20: mark when `prev_index != index`.
    PrevIndex,
    /// Piggin: `prev_index != index || offset == 0`.
    PrevIndexOrOffsetZero,
    /// Harji: always mark.
    Unconditional,
    /// Mohr: `prev_index != index`, or every 32nd repeated hit.
    Every32nd,
    /// The fix that was merged (2.6.23, "readahead: combine prev_index and
    /// prev_offset into prev_pos"): remember where the last read ended and
    /// mark unless this read continues it inside the same page. The
    /// default. (Linux 5.x/6.x's folio-based filemap_read skips the mark
    /// whenever a read starts in the folio where the last one ended, which
    /// for a one-page file re-read from offset 0 behaves like PrevIndex.)
    #[default]
    PrevPos,
}

impl RemarkRule {
    pub const ALL: [RemarkRule; 6] = [
        RemarkRule::PageAligned,
        RemarkRule::PrevIndex,
        RemarkRule::PrevIndexOrOffsetZero,
        RemarkRule::Unconditional,
        RemarkRule::Every32nd,
        RemarkRule::PrevPos,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            RemarkRule::PageAligned => "page-aligned",
            RemarkRule::PrevIndex => "prev-index",
            RemarkRule::PrevIndexOrOffsetZero => "prev-index-or-offset0",
            RemarkRule::Unconditional => "unconditional",
            RemarkRule::Every32nd => "every-32nd",
            RemarkRule::PrevPos => "prev-pos",
        }
    }
}

/// the Linux 3.2 reclaim-writeback series: who writes dirty pages met at the inactive tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ReclaimWriteback {
    /// 3.1: reclaim (direct and kswapd) calls writepage itself.
    Writepage31,
    /// The 3.2 series: direct reclaim never writes file pages; kswapd only
    /// when its priority is below DEF_PRIORITY - 2; otherwise the page is
    /// tagged PG_reclaim and the flushers are woken.
    #[default]
    Flusher32,
}

/// Which pages reach the LRU lists' protected part (pcache's own; the
/// kernel has only `Kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Admission {
    /// Every new page starts at the inactive head; a refault within the
    /// active list's size goes to the active list (workingset.c).
    #[default]
    Kernel,
    /// Adaptive W-TinyLFU admission in front of the two lists
    /// (admission.rs): new pages wait in a window list; when the window is
    /// over its target, its oldest page is admitted to the inactive head
    /// only if a frequency sketch says it is used more often than the
    /// inactive tail, else it goes to the tail, next to be reclaimed. The
    /// window's target adapts to which side's evicted pages refault.
    AdaptiveTinyLfu,
}

/// Which kernel's workingset-driven list balancing (workingset detection and after). Only
/// what changes a file-only workload without mapped pages is modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum WorkingsetVersion {
    /// Linux 3.15: the active file list is deactivated only while the
    /// inactive list is low (`inactive_list_is_low`), checked per batch;
    /// the eviction clock is read after it advances.
    #[default]
    Linux315,
    /// Linux 5.9 to 6.18 with the classic two lists (lru_gen off). Reclaim
    /// decides once per shrink_node whether the active file list may be
    /// deactivated (`sc->may_deactivate & DEACTIVATE_FILE`): when refaults
    /// were activated since the last reclaim invocation ended
    /// (`WORKINGSET_ACTIVATE_FILE` against `lruvec->refaults`, 4.12's "fix
    /// IO/refault regression in cache workingset transition", moved to the
    /// reclaim root by 5.5's "detect file thrashing at the reclaim root"),
    /// or when the inactive list is low; `snapshot_refaults` at the end of
    /// `do_try_to_free_pages` and kswapd's pass. No file-list rebalancing
    /// after the scan loop (shrink_lruvec does that for anon only). The
    /// shadow records `nonresident_age` before the eviction ages it (5.9).
    Linux6,
}

/// Mapped pages (the Harji/Piggin thread and the Linux 3.2 series): how reclaim ages a mapped file page whose
/// page table entries were referenced (page_check_references).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MappedActivation {
    /// 2.6.33: a referenced page (young entries or PG_referenced) of a file
    /// that is mapped anywhere (`page_mapping_inuse`) is activated at once,
    /// so a stream through a large mapping floods the active list.
    Linux2_6_33,
    /// 2.6.34's "vmscan: detect mapped file pages used only once" (plus
    /// 3.3's exec rule): a page referenced by more than one mapping, or
    /// referenced again (PG_referenced already set), is activated; a
    /// referenced VM_EXEC page on first use; any other referenced page gets
    /// PG_referenced and another trip round the inactive list.
    #[default]
    UsedOnce,
}

/// which kernel's rules place anonymous pages on their lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum AnonLru {
    /// 3.x (the kernels of the Linux 3.2 reclaim-writeback series): a new anonymous page starts on the active
    /// list ("they are likely to be used again soon"), the inactive anon
    /// list is kept at 1/inactive_ratio (sqrt(10 x GiB)) of the active
    /// one, and evicted anonymous pages leave no trace.
    #[default]
    Linux3,
    /// 5.9+ ("mm/swap: make anon pages start at inactive list",
    /// "workingset: age nonresident information alongside anonymous
    /// pages"): a new anonymous page starts inactive, the anon lists are
    /// kept 1:1, and a page swapped out leaves a shadow entry in the swap
    /// cache; a swap-in whose refault distance is within the workingset
    /// (the file lists plus the active anon list) is activated at once.
    /// get_scan_count stays 3.2's.
    Linux5_9,
}

/// Issue 15: which aging policy holds the evictable pages.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum LruPolicy {
    /// The two lists (active and inactive) of every kernel since 2.6.28,
    /// and of today's defaults (CONFIG_LRU_GEN off).
    #[default]
    Classic,
    /// The multi-gen LRU of Linux 6.1+ (CONFIG_LRU_GEN=y,
    /// CONFIG_LRU_GEN_ENABLED=y): generations, tiers and the refault
    /// feedback loop (lru_gen.rs). Its run-time switches
    /// (`PageCache::lru_gen_set_enabled`) work only in a cache built
    /// with it, as /sys/kernel/mm/lru_gen exists only with CONFIG_LRU_GEN.
    /// Pcache's admission window is not used with it.
    MultiGen,
}

/// fadvise(2) advice.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    NoReuse,
    WillNeed,
    DontNeed,
}

/// Knobs that select mechanisms; each field is one seed's before/after.
///
/// The dirty-page knobs and `ra_pages` are only start values: the cache
/// copies them into its run-time sysctls (sysctl.rs), which
/// `PageCache::sysctl_write` changes while it runs and which the writeback
/// and readahead paths read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tunables {
    pub accessed_init: AccessedInit,
    pub lru_batching: LruBatching,
    pub pagevec_drain: PagevecDrain,
    pub remark_rule: RemarkRule,
    pub reclaim_writeback: ReclaimWriteback,
    /// Default readahead window in pages (the bdi's ra_pages; 128 KiB at 4 KiB
    /// pages). 0 disables readahead.
    pub ra_pages: u32,
    /// dirty_background_ratio, percent of memory.
    pub dirty_background_ratio: u32,
    /// dirty_ratio, percent of memory.
    pub dirty_ratio: u32,
    /// dirty_background_bytes: when non-zero, overrides the ratio.
    pub dirty_background_bytes: u64,
    /// dirty_bytes: when non-zero, overrides the ratio.
    pub dirty_bytes: u64,
    /// dirty_expire_centisecs: pages dirty longer than this are written by
    /// the periodic flusher.
    pub dirty_expire_centisecs: u32,
    /// dirty_writeback_centisecs: the flusher's period.
    pub dirty_writeback_centisecs: u32,
    /// leave shadow entries on eviction and activate pages that
    /// refault within the active list's size (Linux 3.15 workingset.c).
    pub workingset: bool,
    /// Which kernel's refault-driven list balancing: 3.15's (the default)
    /// or 5.9-6.18's (`WorkingsetVersion::Linux6`).
    pub workingset_version: WorkingsetVersion,
    /// Admission to the lists: the kernel's, or pcache's adaptive
    /// W-TinyLFU (frequency-aware, scan- and loop-resistant).
    pub admission: Admission,
    /// Whether background kswapd runs. With it off, allocations below the
    /// low watermark reclaim directly (useful for deterministic tests).
    pub kswapd: bool,
    /// Reserve backing space when a write dirties pages
    /// (`BackingDev::reserve`, ext4's delayed-allocation reservation), so a
    /// full store fails the write with ENOSPC at the call. Off: pcache
    /// before full-disk handling was added, where only writeback meets ENOSPC (for measuring
    /// the reservation's cost).
    pub reserve_space: bool,
    /// Most host file descriptors the cache keeps open (its `FdCache`,
    /// backing/fdcache.rs); files beyond it are reopened on demand. 0: half
    /// the soft RLIMIT_NOFILE when the cache is built, at most 4096.
    #[serde(default)]
    pub max_open_fds: usize,
    /// how reclaim activates referenced mapped pages.
    #[serde(default)]
    pub mapped_activation: MappedActivation,
    /// bytes of swap in memory made when the cache is built (0: none,
    /// the default; anonymous pages are then not reclaimable). A swap file
    /// on the host, or any device, is given with `PageCache::swapon`.
    #[serde(default)]
    pub swap_bytes: u64,
    /// vm_swappiness, 0 to 100 (default 60), the start value of the
    /// run-time sysctl `swappiness`: reclaim's relative preference for
    /// anonymous pages (anon_prio) against file pages (200 - swappiness)
    /// in get_scan_count.
    #[serde(default = "default_swappiness")]
    pub swappiness: u32,
    /// page_cluster (default 3), the start value of the sysctl
    /// `page-cluster`: swap-in reads 2^page_cluster slots around the one
    /// faulted (swapin_readahead), 0 reads only the one.
    #[serde(default = "default_page_cluster")]
    pub page_cluster: u32,
    /// 3.x's or 5.9+'s placement of anonymous pages on their lists.
    #[serde(default)]
    pub anon_lru: AnonLru,
    /// bytes around a read fault whose cached pages the fault also
    /// maps (do_fault_around; the kernel's debugfs `fault_around_bytes`,
    /// default 64 KiB). Rounded down to a power of two of pages; one page
    /// or less turns fault-around off.
    #[serde(default = "default_fault_around_bytes")]
    pub fault_around_bytes: u64,
    /// I/O worker threads that read asynchronous readahead windows while
    /// the reader copies (bio.rs), and the io_uring engine's requests in
    /// flight at most (bio/uring.rs). 0: the caller reads every window.
    #[serde(default = "default_io_threads")]
    pub io_threads: usize,
    /// How asynchronous I/O reaches devices that can be driven directly
    /// (host files opened O_DIRECT): io_uring, or the `io_threads` pool.
    /// Chosen once, when the cache starts; `io_threads = 0` keeps all I/O
    /// synchronous whatever this says.
    #[serde(default)]
    pub io_engine: IoEngine,
    /// Readahead sized from the device where it reports its queue limits
    /// (a host file's block device: its read_ahead_kb as the window, its
    /// max_sectors_kb bounding a large read's), as the kernel's bdi is.
    /// Off: every device uses `ra_pages`.
    #[serde(default = "default_true")]
    pub ra_from_device: bool,
    /// the largest readahead request, KiB (a window is split
    /// into requests of at most this, as the block layer splits a bio at
    /// max_sectors_kb). 0: the device's max_sectors_kb where it reports
    /// one (and `ra_from_device` is on), else 1 MiB.
    #[serde(default)]
    pub max_read_request_kb: u32,
    /// How host files are read: O_DIRECT, or buffered with RWF_DONTCACHE
    /// (`DevReadMode`).
    #[serde(default)]
    pub dev_read_mode: DevReadMode,
    /// the largest writeback request, KiB (the
    /// flushers and fsync gather a contiguous dirty run up to this before
    /// one device write). 0: the device's max_sectors_kb where it reports
    /// one (and `ra_from_device` is on), else 256 KiB (the old fixed batch
    /// of 64 pages).
    #[serde(default)]
    pub max_write_request_kb: u32,
    /// a device's readahead window covers at least
    /// this many of its largest requests (max_sectors_kb), so that many
    /// are at the device while the reader copies the window before
    /// (readahead.rs `device_ra_pages`; still at most 16 MiB and an eighth
    /// of the cache). 0: the device's read_ahead_kb alone, as the kernel.
    #[serde(default = "default_ra_device_requests")]
    pub ra_device_requests: u32,
    /// an asynchronous readahead window on a device
    /// that reports queue limits is allocated, inserted and submitted by
    /// the cache's readahead thread, not by the reader that hit its marker
    /// (readahead.rs `RaQueue`). Needs `io_threads > 0`.
    #[serde(default = "default_true")]
    pub ra_async_thread: bool,
    /// Issue 15: the classic two lists or the multi-gen LRU.
    #[serde(default)]
    pub lru: LruPolicy,
    /// The multi-gen LRU's min_ttl_ms at start
    /// (/sys/kernel/mm/lru_gen/min_ttl_ms; 0: off): the working set of
    /// the last N ms is not evicted (lru_gen.rs).
    #[serde(default)]
    pub lru_gen_min_ttl_ms: u32,
    /// pre-fault the arena in a background thread at start-up
    /// (arena.rs), so cold reads do not pay first-touch zeroing.
    #[serde(default = "default_true")]
    pub arena_prefault: bool,
    /// The eviction policy plug-in (policy.rs): `kernel` (none: the
    /// lists `lru` selects), `fifo`, `lru`, `clock`, `sieve`, `s3fifo`,
    /// `mru`, `lfuda`, `pcache`, `getscan`. A plug-in holds the file pages; anonymous pages
    /// stay on the kernel's lists.
    #[serde(default)]
    pub policy: PolicyKind,
    /// With a plug-in: the pages a direct reclaimer asks it to free at
    /// once (SWAP_CLUSTER_MAX, 32). 1 evicts exactly when an allocation
    /// finds no frame above the watermark, so the cache holds exactly its
    /// usable pages, as a simulator's does (replay's policy variants).
    #[serde(default = "default_reclaim_batch")]
    pub reclaim_batch: u32,
    /// The largest page-cache folio readahead allocates, as an order (a
    /// folio of 2^order pages, physically contiguous in the arena;
    /// huge_memory.rs). The default, `FOLIO_ORDER_MAX_6` (9, as
    /// `FOLIO_ORDER_MAX_5_18`), is the kernel's MAX_PAGECACHE_ORDER at
    /// 4 KiB pages. 0: single pages only, the kernels of the seeds and
    /// pcache before large folios, exactly. Deviation: a plug-in policy
    /// or the admission window holds single pages, whatever this says
    /// (`page_cache_order_max`).
    #[serde(default = "default_folio_order_max")]
    pub folio_order_max: u32,
    /// How readahead grows the folio order (5.18's or 6.16's).
    #[serde(default)]
    pub folio_ramp: FolioRamp,
    /// Anonymous multi-size THP (Linux 6.8's mTHP): the orders a first
    /// touch of anonymous memory may allocate a folio of, as a bit mask
    /// (bit n: order n, 2..=9; the kernel's per-size `enabled` files). A
    /// fault takes the largest enabled order whose aligned range lies in
    /// the region with every entry empty and a free block above the low
    /// watermark, else the next, else a page. 0 (the default, and the
    /// kernel's for every size below the PMD's): pages only. Needs the
    /// kernel's lists (no plug-in policy, no admission window).
    #[serde(default)]
    pub anon_mthp_orders: u32,
    /// How reclaim swaps out an anonymous large folio: whole (6.10) or
    /// split into pages first (6.8).
    #[serde(default)]
    pub mthp_swapout: MthpSwapout,
}

/// Which kernel's reclaim swaps out an anonymous mTHP folio.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MthpSwapout {
    /// 6.8: split it, then swap its pages out one by one.
    Linux6_8,
    /// 6.10 ("mm: swap: swap out mTHP without splitting"): whole, to an
    /// aligned run of free slots, in one write; split as in 6.8 only
    /// where the device has no such run (vmstat mthp_swpout_fallback).
    #[default]
    Linux6_10,
}

/// Anonymous 64 KiB folios (order 4), the mTHP size most deployments
/// enable.
pub const ANON_MTHP_64K: u32 = 1 << 4;
/// Every anonymous mTHP order, 16 KiB to 2 MiB.
pub const ANON_MTHP_ALL: u32 = 0b11_1111_1100;

/// Linux 5.18's page_cache_ra_order (large folios for file systems that
/// ask for them, XFS first): up to a PMD's worth, order 9 at 4 KiB pages;
/// with `FolioRamp::Linux5_18`.
pub const FOLIO_ORDER_MAX_5_18: u32 = 9;
/// Linux 6.x (ext4 too since 6.16): still capped at MAX_PAGECACHE_ORDER,
/// the PMD order, for readahead; with `FolioRamp::Linux6`.
pub const FOLIO_ORDER_MAX_6: u32 = 9;

/// Which kernel's readahead ramps the folio order from window to window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum FolioRamp {
    /// 5.18: two orders above the folio that carried the marker. A
    /// window that starts unaligned begins with a small folio, which
    /// carries the marker when the whole window is asynchronous, so a
    /// stream's order stays near its windows' alignment.
    Linux5_18,
    /// 6.16 ("mm/readahead: Store folio order in struct file_ra_state"):
    /// two orders above the last window's, kept in the handle's
    /// readahead state, so a stream reaches the largest order.
    #[default]
    Linux6,
}
/// The largest `folio_order_max` accepted: the PMD order at 4 KiB pages.
pub const MAX_PAGECACHE_ORDER: u32 = 9;

fn default_folio_order_max() -> u32 {
    FOLIO_ORDER_MAX_6
}

fn default_reclaim_batch() -> u32 {
    crate::vmscan::SWAP_CLUSTER_MAX as u32
}

fn default_true() -> bool {
    true
}

fn default_ra_device_requests() -> u32 {
    4
}

fn default_io_threads() -> usize {
    4
}

fn default_fault_around_bytes() -> u64 {
    65536
}

fn default_swappiness() -> u32 {
    60
}

fn default_page_cluster() -> u32 {
    3
}

/// The largest `page_cluster` accepted: readahead of 2^8 = 256 pages.
pub const MAX_PAGE_CLUSTER: u32 = 8;

impl Tunables {
    /// The largest page-cache folio order in effect: `folio_order_max`,
    /// or 0 under a plug-in policy or the admission window, whose lists
    /// count pages.
    pub fn page_cache_order_max(&self) -> u32 {
        if self.policy != PolicyKind::Kernel || self.admission != Admission::Kernel {
            return 0;
        }
        self.folio_order_max
    }

    /// Set fields by name (`dirty_ratio=40`, `remark_rule=PrevIndex`,
    /// `reserve_space=false`): numbers and booleans as JSON, enum variants
    /// by name. An unknown name or a bad value is refused
    /// (`Error::InvalidConfig`) and nothing is changed.
    pub fn with_sets<'a>(self, sets: impl IntoIterator<Item = (&'a str, &'a str)>) -> crate::Result<Tunables> {
        let bad = |m: String| crate::Error::InvalidConfig(m);
        let mut v = serde_json::to_value(self).map_err(|e| bad(format!("tunables: {e}")))?;
        let obj = v.as_object_mut().ok_or_else(|| bad("tunables are not an object".into()))?;
        for (k, val) in sets {
            let Some(slot) = obj.get_mut(k) else {
                let known: Vec<&String> = obj.keys().collect();
                return Err(bad(format!("unknown tunable {k:?}; known: {known:?}")));
            };
            *slot = serde_json::from_str(val).unwrap_or_else(|_| serde_json::Value::String(val.to_string()));
        }
        serde_json::from_value(v).map_err(|e| bad(format!("bad tunable value: {e}")))
    }
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            accessed_init: AccessedInit::default(),
            lru_batching: LruBatching::default(),
            pagevec_drain: PagevecDrain::default(),
            remark_rule: RemarkRule::default(),
            reclaim_writeback: ReclaimWriteback::default(),
            ra_pages: 32,
            dirty_background_ratio: 10,
            dirty_ratio: 20,
            dirty_background_bytes: 0,
            dirty_bytes: 0,
            dirty_expire_centisecs: 3000,
            dirty_writeback_centisecs: 500,
            workingset: true,
            workingset_version: WorkingsetVersion::Linux315,
            admission: Admission::Kernel,
            kswapd: true,
            reserve_space: true,
            max_open_fds: 0,
            mapped_activation: MappedActivation::UsedOnce,
            swap_bytes: 0,
            swappiness: default_swappiness(),
            page_cluster: default_page_cluster(),
            anon_lru: AnonLru::Linux3,
            fault_around_bytes: default_fault_around_bytes(),
            io_threads: default_io_threads(),
            io_engine: IoEngine::default(),
            ra_from_device: true,
            max_read_request_kb: 0,
            dev_read_mode: DevReadMode::Direct,
            max_write_request_kb: 0,
            ra_device_requests: default_ra_device_requests(),
            ra_async_thread: true,
            lru: LruPolicy::Classic,
            lru_gen_min_ttl_ms: 0,
            arena_prefault: true,
            policy: PolicyKind::Kernel,
            reclaim_batch: default_reclaim_batch(),
            folio_order_max: FOLIO_ORDER_MAX_6,
            anon_mthp_orders: 0,
            mthp_swapout: MthpSwapout::Linux6_10,
            folio_ramp: FolioRamp::Linux6,
        }
    }
}

/// How to build a [`crate::PageCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Bytes of page frames (the arena). Rounded down to whole pages.
    pub memory_bytes: u64,
    /// Page size in bytes: a power of two from 4 KiB to 64 KiB.
    pub page_size: usize,
    /// Number of per-CPU batch sets (the kernel's nr_cpu_ids). 0 means the
    /// machine's CPU count.
    pub nr_cpus: usize,
    /// Mechanism knobs.
    pub tunables: Tunables,
}

pub const MIN_PAGE_SIZE: usize = 4096;
pub const MAX_PAGE_SIZE: usize = 65536;
/// The smallest arena that leaves room for watermarks and batches.
pub const MIN_PAGES: u64 = 16;
/// Frame numbers are 31-bit (the top bit tags shadow entries in the tree).
pub const MAX_PAGES: u64 = (1 << 31) - 1;

impl Default for Config {
    fn default() -> Self {
        Config { memory_bytes: 256 << 20, page_size: 4096, nr_cpus: 0, tunables: Tunables::default() }
    }
}

impl Config {
    /// A config with `memory_bytes` of frames and defaults elsewhere.
    pub fn with_memory(memory_bytes: u64) -> Config {
        Config { memory_bytes, ..Config::default() }
    }

    /// Check every value, so that a bad config is refused at open.
    pub fn validate(&self) -> Result<()> {
        let ps = self.page_size;
        if !ps.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&ps) {
            return Err(Error::InvalidConfig(format!(
                "page_size {ps} must be a power of two from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}"
            )));
        }
        let pages = self.memory_bytes / ps as u64;
        if !(MIN_PAGES..=MAX_PAGES).contains(&pages) {
            return Err(Error::InvalidConfig(format!(
                "memory_bytes {} gives {pages} pages; it must give {MIN_PAGES} to {MAX_PAGES}",
                self.memory_bytes
            )));
        }
        let t = &self.tunables;
        if t.dirty_ratio == 0 || t.dirty_ratio > 100 || t.dirty_background_ratio > 100 {
            return Err(Error::InvalidConfig(format!(
                "dirty_ratio {} must be 1..=100 and dirty_background_ratio {} at most 100",
                t.dirty_ratio, t.dirty_background_ratio
            )));
        }
        if t.swappiness > 100 || t.page_cluster > MAX_PAGE_CLUSTER {
            return Err(Error::InvalidConfig(format!(
                "swappiness {} must be 0..=100 and page_cluster {} at most {MAX_PAGE_CLUSTER}",
                t.swappiness, t.page_cluster
            )));
        }
        if t.swap_bytes != 0 && t.swap_bytes < ps as u64 {
            return Err(Error::InvalidConfig(format!("swap_bytes {} is less than a page", t.swap_bytes)));
        }
        if t.policy != PolicyKind::Kernel && (t.lru != LruPolicy::Classic || t.admission != Admission::Kernel) {
            return Err(Error::InvalidConfig(format!(
                "policy {} replaces the kernel's lists: it needs lru Classic and admission Kernel",
                t.policy.name()
            )));
        }
        if t.reclaim_batch == 0 || t.reclaim_batch > 1024 {
            return Err(Error::InvalidConfig(format!("reclaim_batch {} must be 1..=1024", t.reclaim_batch)));
        }
        if t.folio_order_max > MAX_PAGECACHE_ORDER {
            return Err(Error::InvalidConfig(format!(
                "folio_order_max {} is above {MAX_PAGECACHE_ORDER} (2 MiB folios at 4 KiB pages)",
                t.folio_order_max
            )));
        }
        if t.anon_mthp_orders & !ANON_MTHP_ALL != 0 {
            return Err(Error::InvalidConfig(format!(
                "anon_mthp_orders {:#x} names an order outside 2..=9",
                t.anon_mthp_orders
            )));
        }
        if t.anon_mthp_orders != 0 && (t.policy != PolicyKind::Kernel || t.admission != Admission::Kernel) {
            return Err(Error::InvalidConfig(format!(
                "anon_mthp_orders {:#x} needs the kernel's lists (policy kernel, admission Kernel)",
                t.anon_mthp_orders
            )));
        }
        if self.nr_cpus > 1024 {
            return Err(Error::InvalidConfig(format!("nr_cpus {} is above 1024", self.nr_cpus)));
        }
        Ok(())
    }

    /// Number of page frames.
    pub fn nr_pages(&self) -> u64 {
        self.memory_bytes / self.page_size as u64
    }
}

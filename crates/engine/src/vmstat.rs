//! Counters with `/proc/vmstat` names (mm/vmstat.c).
//!
//! Event counters (`pgactivate`, `pgscan_kswapd`, ...) live in per-thread
//! rows and are summed when read, as the kernel folds its per-CPU diffs.
//! State counters (`nr_free_pages`, `nr_dirty`, ...) are read from the
//! structures that own them when a snapshot is taken. Besides the kernel's
//! names there are cost counters for what the seeds argue about: atomic
//! flag read-modify-writes, lru_lock acquisitions and per-CPU drains.

use std::fmt::Write as _;

use serde::Serialize;

use crate::percpu::SlotCounters;
use crate::sync::atomic::{AtomicI64, Ordering};

macro_rules! items {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// One counter. `Item::name` is its `/proc/vmstat` name.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Item { $( $(#[$doc])* $name, )* }
        impl Item {
            pub const ALL: &'static [Item] = &[ $( Item::$name, )* ];
            pub fn name(self) -> &'static str {
                match self { $( Item::$name => stringify!($name), )* }
            }
            pub fn from_name(name: &str) -> Option<Item> {
                match name { $( stringify!($name) => Some(Item::$name), )* _ => None }
            }
        }
    };
}

items! {
    // State, filled in at snapshot time.
    nr_free_pages,
    nr_inactive_anon,
    nr_active_anon,
    nr_inactive_file,
    nr_active_file,
    nr_file_pages,
    nr_dirty,
    nr_writeback,
    /// Pages mapped by at least one `Mapping`'s page table (the kernel's
    /// NR_FILE_MAPPED, `nr_mapped` in /proc/vmstat).
    nr_mapped,
    nr_dirty_threshold,
    nr_dirty_background_threshold,
    /// pgsteal_kswapd * 100 / pgscan_kswapd, in percent, since the cache
    /// started (the Linux 3.2 reclaim-writeback series' "kswapd efficiency"; pcache's own line).
    kswapd_efficiency,
    /// Host file descriptors open for cached files (pcache's own;
    /// backing/fdcache.rs), at most `Tunables::max_open_fds` but for
    /// transfers in flight.
    nr_open_fds,
    /// Inodes (address spaces) the cache holds, open or not
    /// (/proc/sys/fs/inode-nr's first field); unused ones with nothing
    /// cached are freed.
    nr_inodes,
    /// Page-tree nodes allocated, in trees or retired and waiting for
    /// lock-free readers to move on (pcache's own; the kernel shows its
    /// xa_nodes as the `radix_tree_node` slab in /proc/slabinfo).
    nr_pagetree_nodes,
    /// Of those, retired nodes not yet reclaimed (pagetree.rs).
    nr_pagetree_nodes_retired,
    /// Bytes of memory held for page-tree nodes: the node chunks of every
    /// tree, free nodes in them included (576 bytes a node).
    pagetree_node_bytes,
    /// Page-tree leaves holding only shadow entries (the kernel's
    /// workingset_nodes), bounded by the shadow-node shrinker.
    workingset_nodes,
    /// Pages in the admission window and its adaptive target (pcache's
    /// own, admission.rs; 0 with the kernel's admission).
    nr_admission_window,
    admission_window_target,
    /// Anonymous pages mapped by a region (the kernel's NR_ANON_PAGES).
    nr_anon_pages,
    /// Pages in the swap cache (the kernel's NR_SWAPCACHE; /proc/meminfo's
    /// SwapCached).
    nr_swapcached,
    /// Swap slots of the swap device (the kernel's total_swap_pages;
    /// /proc/meminfo's SwapTotal in pages), and those in use (SwapTotal -
    /// SwapFree): swapped-out pages and swap-cache pages holding a slot.
    swap_total_pages,
    swap_used_pages,
    /// Workingset shadow entries held in page trees (pcache's own; the
    /// kernel counts the nodes holding them, workingset_nodes). The last
    /// state counter: `is_state` goes by this order.
    nr_workingset_shadows,
    // Events.
    /// KiB read from backing devices.
    pgpgin,
    /// KiB written to backing devices.
    pgpgout,
    pgalloc,
    pgfree,
    pgactivate,
    pgdeactivate,
    pgrotated,
    pgrefill,
    pgscan_kswapd,
    pgscan_direct,
    pgsteal_kswapd,
    pgsteal_direct,
    /// pgscan and pgsteal split by list type, as Linux 5.x+ names them.
    pgscan_anon,
    pgscan_file,
    pgsteal_anon,
    pgsteal_file,
    /// Pages read from and written to swap.
    pswpin,
    pswpout,
    /// Pages swapin_readahead read beyond the one faulted, and faults that
    /// found their page in the swap cache (Linux 4.14+'s names).
    swap_ra,
    swap_ra_hit,
    /// Swap writes that failed (pcache's own; the kernel logs "Write-error
    /// on swap-device"). The page stays dirty in memory.
    swap_write_errors,
    allocstall,
    pageoutrun,
    kswapd_low_wmark_hit_quickly,
    kswapd_high_wmark_hit_quickly,
    /// File pages reclaim wrote itself (pageout), in all and by direct
    /// reclaim and kswapd. Deviation: the kernel counts swap writes here
    /// too; pcache counts them in `pswpout` only, so these stay the Linux 3.2 reclaim-writeback series'
    /// "file pages written by reclaim".
    nr_vmscan_write,
    nr_vmscan_write_direct,
    nr_vmscan_write_kswapd,
    nr_vmscan_immediate_reclaim,
    pgreadahead,
    /// Large page-cache folios allocated by readahead, the orders it
    /// wanted but the buddy lists could not serve (it tried halves), and
    /// large folios split into pages (the kernel's thp_file_alloc,
    /// thp_file_fallback and thp_split_page, for every order above 0).
    thp_file_alloc,
    thp_file_fallback,
    thp_split_page,
    /// Anonymous mTHP folios a first touch allocated, and the orders it
    /// wanted but could not have (the kernel's per-size anon_fault_alloc
    /// and anon_fault_fallback, summed over the sizes). Their splits count
    /// in thp_split_page.
    mthp_anon_fault_alloc,
    mthp_anon_fault_fallback,
    /// Anonymous mTHP folios swapped out whole, and those split first
    /// because the swap device had no free aligned run (the per-size
    /// swpout and swpout_fallback, summed).
    mthp_swpout,
    mthp_swpout_fallback,
    workingset_refault,
    workingset_activate,
    /// Refaults activated that had been active before eviction.
    workingset_restore,
    /// Swap-ins that found a shadow entry, and those activated by it
    /// (`AnonLru::Linux5_9`; Linux 5.9+'s workingset_refault_anon and
    /// workingset_activate_anon).
    workingset_refault_anon,
    workingset_activate_anon,
    /// Shadow nodes whose entries the shrinker dropped (the kernel's
    /// workingset_nodereclaim).
    workingset_nodereclaim,
    /// Window pages that won the admission contest against the inactive
    /// tail, and those that lost it (pcache's own, admission.rs).
    admission_admit,
    admission_reject,
    /// The multi-gen LRU (lru_gen.rs; pcache's own names, the kernel shows
    /// these in debugfs lru_gen): generations made (inc_max_seq) and
    /// retired (min_seq advanced);
    lru_gen_aging,
    lru_gen_min_seq_inc,
    /// pages sort_folio moved out of the oldest generation: promoted
    /// (their generation was already younger), protected by their tier
    /// (also counted in `workingset_activate`, as the kernel's
    /// WORKINGSET_ACTIVATE), or set aside for writeback;
    lru_gen_promoted,
    lru_gen_protected,
    lru_gen_writeback_deferred,
    /// refaults whose shadow's generation is still the oldest (they feed
    /// the refault controller), of all `workingset_refault`s;
    lru_gen_refault_recent,
    /// reclaim refused because every generation is younger than
    /// min_ttl_ms (the kernel OOM-kills there; pcache's allocation fails
    /// with ENOMEM);
    lru_gen_min_ttl_oom,
    /// young page-table entries the aging walk (walk_mm) and the rmap
    /// look-around harvested.
    lru_gen_walk_young,
    lru_gen_look_around_young,
    /// count-full hints cleared where an access count was reset (pcache's
    /// own; lru_gen.rs `set_count_full_hint`).
    lru_gen_hint_clear,
    /// Faults on a `Mapping` (an access or write that found no usable
    /// page table entry), and those that had to read the page in.
    pgfault,
    pgmajfault,
    /// Write faults on a clean or write-protected entry (page_mkwrite;
    /// pcache's own).
    pgmkwrite,
    /// Entries a read fault mapped around itself (do_fault_around, pages
    /// already cached and uptodate); pcache's own.
    pgfault_around,
    /// Readahead runs queued to the I/O workers (bio.rs), and runs meant
    /// for them that the submitter read itself (queue full, no workers,
    /// or shutting down); pcache's own.
    ra_submit_async,
    ra_submit_inline,
    /// Queued readahead runs that the reader waiting on one of their pages
    /// read itself before a worker took them (a subset of
    /// `ra_submit_async`); pcache's own.
    ra_reader_completed,
    /// Asynchronous readahead windows inserted by the readahead thread
    /// (readahead.rs `RaQueue`); those their reader, missing in the window
    /// before the thread took it, inserted itself; and those the reader
    /// missed in while the thread was inserting them, and waited for
    /// (each such miss counted in `pgcache_miss`); pcache's own.
    ra_async_thread,
    ra_async_reader,
    ra_async_waited,
    /// Readahead windows that asked kswapd to free their room ahead of
    /// the reader (vmscan.rs `wakeup_kswapd_ra`); pcache's own.
    kswapd_ra_boost,
    /// Writeback runs queued to the I/O workers; and the last run of a
    /// data-integrity write, which the writer, about to wait for it
    /// anyway, wrote itself (no hand-off to a worker and back). pcache's
    /// own.
    wb_submit_async,
    wb_waiter_inline,
    /// Readahead and writeback runs submitted to the cache's io_uring
    /// (bio/uring.rs), a subset of `ra_submit_async`/`wb_submit_async`;
    /// runs it gave back to the thread pool (ring full, a device it cannot
    /// drive); and completions it finished synchronously (short transfer
    /// or error, redone through the device's own path). pcache's own.
    ra_submit_uring,
    wb_submit_uring,
    uring_fallback,
    uring_fixup,
    /// io_uring instances set up, and set-ups that failed (the thread pool
    /// then does the cache's asynchronous I/O). pcache's own.
    uring_setup,
    uring_setup_failed,
    /// Mapped pages reclaim found referenced through page table young bits
    /// (page_check_references), and what became of them: activated, or
    /// given another trip round the inactive list (PAGEREF_KEEP). pcache's
    /// own; the kernel counts only the activation, in pgactivate.
    mapped_referenced,
    mapped_activated,
    mapped_kept,
    /// Referenced exec-mapped pages `shrink_active_list` kept on the active
    /// list (pcache's own).
    exec_rotated,
    /// Page table entries cleared by try_to_unmap (reclaim) and
    /// unmap_mapping_range (truncation); pcache's own.
    pgunmap,
    /// Page cache lookups that found an uptodate page (pcache's own).
    pgcache_hit,
    /// Page cache lookups that had to read the page in (pcache's own).
    pgcache_miss,
    pgwriteback,
    flusher_wakeups,
    balance_dirty_pages_pause_ns,
    /// Files whose writeback started failing (each entry into the
    /// failing state; pcache's own, the kernel's AS_EIO/AS_ENOSPC).
    writeback_error_files,
    balance_dirty_pages_pauses,
    congestion_waits,
    // Costs the seeds argue about.
    /// Atomic read-modify-writes of page flags (SetPageX, ClearPageX,
    /// TestSetPageX); plain stores to pages not yet visible are not counted.
    atomic_flag_rmw,
    mark_page_accessed_calls,
    init_page_accessed_calls,
    lru_lock_acquire,
    /// `lru_add_drain` of one CPU's batches.
    lru_drain,
    /// `lru_add_drain_all` calls.
    lru_drain_all,
    pagevec_release,
}

pub const NR_ITEMS: usize = Item::ALL.len();

/// The live event counters of one cache.
/// Page state counters (the kernel's node_page_state items that count
/// pages by kind), one atomic each, changed by the paths that add or
/// remove such a page (`add`, `sub`: one relaxed RMW, as the fields they
/// replace) and read at snapshot time.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub(crate) enum NodeStat {
    /// Pages in the page cache (NR_FILE_PAGES; filemap.rs).
    FilePages,
    /// Pages with a mapcount above zero (NR_FILE_MAPPED; rmap.rs).
    Mapped,
    /// Shadow entries in all page trees (WORKINGSET_NODES' entries;
    /// filemap.rs, truncate.rs, workingset.rs).
    Shadows,
    /// Anonymous pages mapped by a region (NR_ANON_PAGES; rmap.rs).
    AnonPages,
}

#[derive(Default)]
pub(crate) struct NodeStats {
    v: [AtomicI64; 4],
}

impl NodeStats {
    #[inline]
    pub(crate) fn add(&self, item: NodeStat, n: i64) {
        self.v[item as usize].fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn sub(&self, item: NodeStat, n: i64) {
        self.v[item as usize].fetch_sub(n, Ordering::Relaxed);
    }

    /// The count; racing changes may take it below zero for a moment,
    /// which reads as 0.
    pub(crate) fn read(&self, item: NodeStat) -> u64 {
        self.v[item as usize].load(Ordering::Relaxed).max(0) as u64
    }
}

pub struct VmCounters {
    events: SlotCounters<NR_ITEMS>,
}

impl VmCounters {
    pub fn new() -> Self {
        VmCounters { events: SlotCounters::new() }
    }

    #[inline]
    pub fn inc(&self, item: Item) {
        self.events.add(item as usize, 1);
    }

    #[inline]
    pub fn add(&self, item: Item, delta: u64) {
        self.events.add(item as usize, delta);
    }

    pub fn sum(&self, item: Item) -> u64 {
        self.events.sum(item as usize)
    }
}

impl Default for VmCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// A snapshot of every counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VmStat {
    #[serde(skip)]
    values: Vec<u64>,
}

impl VmStat {
    pub(crate) fn new(values: Vec<u64>) -> VmStat {
        debug_assert_eq!(values.len(), NR_ITEMS);
        VmStat { values }
    }

    pub fn get(&self, item: Item) -> u64 {
        self.values[item as usize]
    }

    /// Look a counter up by its `/proc/vmstat` name.
    pub fn by_name(&self, name: &str) -> Option<u64> {
        Item::from_name(name).map(|i| self.get(i))
    }

    /// The counters that changed from `earlier` to `self`, as differences
    /// (state counters keep their current value).
    pub fn delta(&self, earlier: &VmStat) -> VmStat {
        let values = Item::ALL
            .iter()
            .map(|&i| if i.is_state() { self.get(i) } else { self.get(i).wrapping_sub(earlier.get(i)) })
            .collect();
        VmStat { values }
    }

    /// `/proc/vmstat` format: one `name value` line each.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for &i in Item::ALL {
            let _ = writeln!(s, "{} {}", i.name(), self.get(i));
        }
        s
    }

    /// A JSON object of name to value, in `/proc/vmstat` order.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for &i in Item::ALL {
            m.insert(i.name().to_string(), serde_json::Value::from(self.get(i)));
        }
        serde_json::Value::Object(m)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Item::ALL.iter().map(|&i| (i.name(), self.get(i)))
    }
}

impl Item {
    /// Whether this is a state counter (a level, not a count of events).
    pub fn is_state(self) -> bool {
        (self as usize) <= Item::nr_workingset_shadows as usize
    }
}

//! The page cache proper (mm/filemap.c): address spaces, lookup, insertion
//! and removal, and the buffered read and write paths.
//!
//! Lock order (outermost first), as at the top of mm/filemap.c:
//!
//! ```text
//!   inode.rwsem (i_rwsem: write, truncate, punch)
//!     page lock (PG_locked)
//!       inode.tree_lock (i_pages lock)
//!         the tree's node slab lock (pagetree.rs)
//!         shadow-node list lock (pagetree.rs's NodeCache, list_lru)
//!       CPU batch lock (swap.rs)
//!         lru_lock
//! ```
//!
//! Reclaim takes page locks only with trylock, after dropping lru_lock.
//!
//! The lookups take no lock: `find_get_entry` walks the page tree, takes a
//! reference with `get_page_unless_zero`, and re-checks that the slot still
//! holds the page (it may have been removed and its frame reused);
//! `find_page_fast` pins with a hazard slot instead, and re-checks the slot
//! inside its walk announcement, which keeps the leaf from being reused
//! meanwhile (pagetree.rs). A page whose count is frozen at 0 is being
//! removed under the tree lock; the lookup waits for that lock and
//! retries, so it never spins unboundedly.

use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::backing::BackingDev;
use crate::backing_dev::Bdi;
use crate::error::{Error, Result};
use crate::hazard::Hazard;
use crate::mm::Cache;
use crate::page::*;
use crate::pagetree::{
    entry_page_pfn, entry_pfn, folio_entry, single_page_pfn, PageTree, TreeLocked, MARK_DIRTY, PAGE_HOT, SHADOW_BIT,
    SINGLE_PAGE, SINGLE_PAGE_MASK, SLOT_FROZEN,
};
use crate::percpu::thread_slot;
use crate::readahead::FileRaState;
use crate::vmstat::Item;
use crate::vmstat::NodeStat;
use crate::{AccessedInit, RemarkRule};

/// Mark the page accessed (or initialise its accessed state if new).
pub const FGP_ACCESSED: u32 = 1 << 0;
/// Return the page locked.
pub const FGP_LOCK: u32 = 1 << 1;
/// Create the page if it is not cached.
pub const FGP_CREAT: u32 = 1 << 2;
/// The page will be written to.
pub const FGP_WRITE: u32 = 1 << 3;
/// Do not sleep on the page lock or in reclaim.
pub const FGP_NOWAIT: u32 = 1 << 4;
/// With FGP_LOCK: the caller takes a large folio whole (its head comes
/// back, locked, holding the index); without it a large folio is split
/// and the single page comes back (`find_get_single_page`). The kernel's
/// callers all take folios; here only buffered writes do.
pub const FGP_FOLIO: u32 = 1 << 5;

/// The largest file: page indices stay below 2^40.
pub const MAX_FILE_PAGES_SHIFT: u32 = 40;

/// Listed inodes the inode shrinker looks at per pass.
pub const PRUNE_ICACHE_BATCH: usize = 128;

/// A cached file: its address_space (page tree) and inode fields.
pub struct Inode {
    pub id: u32,
    /// What the icache knows the file by: a host file's identity
    /// (`host:DEV:INO`, so every spelling and link of it is one inode),
    /// `memory:NAME`, or a device's name.
    pub key: String,
    /// The name it was first opened under, for messages.
    pub name: String,
    pub dev: Arc<dyn BackingDev>,
    /// The backing device's shared state and flusher.
    pub bdi: Arc<Bdi>,
    pub tree: PageTree,
    /// The i_pages lock: serialises tree changes and marks.
    pub tree_lock: Mutex<()>,
    pub nrpages: AtomicU64,
    /// i_size in bytes.
    pub size: AtomicU64,
    /// i_rwsem: writers, truncation and hole punching.
    pub rwsem: Mutex<()>,
    /// mapping->invalidate_lock: held shared by paths that create pages
    /// from the device (readahead, read misses), exclusive by truncation
    /// and hole punching, so no page read from a stale size reappears
    /// after its range was cut.
    pub invalidate_lock: RwLock<()>,
    /// errseq_t of writeback errors.
    pub wb_err: AtomicU32,
    /// Dirty pages of this inode.
    pub nr_dirty: AtomicU64,
    /// Pages of this inode under writeback (counted after PG_writeback is
    /// set and before the page leaves the dirty tag), so that a wait for a
    /// range's writeback need not walk a file that has none in flight.
    pub nr_writeback: AtomicU64,
    /// When the inode became dirty (ms since cache start; 0 = clean).
    pub dirtied_when: AtomicU64,
    pub unlinked: AtomicBool,
    /// Open handles.
    pub handles: AtomicU64,
    /// On the icache's list of unused inodes (`Inodes::unused`; the
    /// kernel's I_LRU-ish state), so it is listed once.
    pub on_unused: AtomicBool,
    /// Writeback of this file is failing (the kernel's AS_EIO/AS_ENOSPC
    /// mapping flags, with a retry clock): when the flusher may try it
    /// again (ms since cache start; 0 = healthy), and the current backoff.
    pub wb_retry_at: AtomicU64,
    pub wb_backoff_ms: AtomicU64,
    /// mapping->i_mmap: the file's mappings, for the reverse map
    /// (rmap.rs). Read by reclaim and writeback under a page lock; written
    /// when a `Mapping` is made or dropped. A list, not the kernel's
    /// interval tree: rmap walks test each mapping's range.
    pub i_mmap: RwLock<Vec<Arc<crate::mmap::Vma>>>,
    /// The device's own readahead window and largest request, in pages
    /// (the bdi's `ra_pages` and `io_pages`, from its queue limits; 0 where
    /// the device says nothing or `Tunables::ra_from_device` is off).
    pub dev_ra_pages: u32,
    pub dev_io_pages: u32,
}

impl crate::inode::IcacheEntry for Inode {
    fn key(&self) -> &str {
        &self.key
    }

    fn id(&self) -> u32 {
        self.id
    }

    fn handles(&self) -> &AtomicU64 {
        &self.handles
    }
}

impl Inode {
    /// A fresh inode (one handle counted) for `dev`, of `size` bytes, on
    /// `bdi`, with the device's readahead window and largest request in
    /// pages (`Cache::device_ra_pages`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        key: &str,
        name: &str,
        dev: Arc<dyn BackingDev>,
        bdi: Arc<Bdi>,
        node_cache: &Arc<crate::pagetree::NodeCache>,
        size: u64,
        (dev_ra_pages, dev_io_pages): (u32, u32),
    ) -> Inode {
        Inode {
            id,
            key: key.to_string(),
            name: name.to_string(),
            dev,
            bdi,
            tree: PageTree::new(node_cache.clone(), id),
            tree_lock: Mutex::new(()),
            nrpages: AtomicU64::new(0),
            size: AtomicU64::new(size),
            rwsem: Mutex::new(()),
            invalidate_lock: RwLock::new(()),
            wb_err: AtomicU32::new(0),
            nr_dirty: AtomicU64::new(0),
            nr_writeback: AtomicU64::new(0),
            dirtied_when: AtomicU64::new(0),
            unlinked: AtomicBool::new(false),
            handles: AtomicU64::new(1),
            on_unused: AtomicBool::new(false),
            wb_retry_at: AtomicU64::new(0),
            wb_backoff_ms: AtomicU64::new(0),
            i_mmap: RwLock::new(Vec::new()),
            dev_ra_pages,
            dev_io_pages,
        }
    }

    pub fn max_bytes(page_shift: u32) -> u64 {
        1u64 << (MAX_FILE_PAGES_SHIFT + page_shift)
    }
}

/// How a reader holds a page: a hazard pin (the hit path) or a reference.
#[derive(Clone, Copy, Debug)]
pub enum Pin {
    Hazard(Hazard),
    Ref,
}

impl Cache {
    /// The hit path: a cached, uptodate page without the readahead marker,
    /// pinned by a hazard slot, with no atomic read-modify-write. None when
    /// the page is not there or the caller must take the slow path. The
    /// flag says the entry carries PAGE_HOT: the page is active and
    /// referenced, so marking it accessed would change nothing.
    ///
    /// The hint is set here, the first time a hit sees an active,
    /// referenced page, and re-checked after it is set; whoever clears
    /// PG_active or PG_referenced clears the hint afterwards
    /// (`clear_page_hot`). A stale hint can only cost a page its marks
    /// until reclaim next looks at it; it never affects which bytes a
    /// reader sees.
    #[inline(always)]
    pub fn find_page_fast(&self, inode: &Inode, index: u64) -> Option<(Pfn, Hazard, bool)> {
        // The walk announcement covers the re-check below: until it drops,
        // the leaf holding `slot` is not reused (pagetree.rs), so the
        // re-check reads this index's slot or, if the leaf was deleted, 0.
        let row = thread_slot();
        let walk = self.hazards.walk_begin_in_row(row);
        let (mut slot, mut entry) = inode.tree.lookup_leaf(index, &walk)?;
        let (pfn, head) = if entry & SINGLE_PAGE_MASK == SINGLE_PAGE {
            // A single page (the common case): one test.
            let pfn = single_page_pfn(entry);
            (pfn, pfn)
        } else {
            // A sibling, a large folio's entry, or nothing to take: the
            // head's slot and entry, a sibling's from its own node. The
            // folio's state is its head's.
            (slot, entry) = inode.tree.resolve_leaf(index, slot, entry, &walk)?;
            if entry & SLOT_FROZEN != 0 {
                return None;
            }
            (entry_page_pfn(entry, index)?, entry_pfn(entry)?)
        };
        let h = self.hazards.pin_in_row(row, pfn)?;
        // Re-check after announcing: still this index's page.
        if slot.load(Ordering::Acquire) != entry {
            self.hazards.unpin(h);
            return None;
        }
        if entry & PAGE_HOT != 0 {
            return Some((pfn, h, true));
        }
        let page = self.page(head);
        let flags = page.flags();
        if flags & (PG_UPTODATE | PG_READAHEAD) != PG_UPTODATE {
            self.hazards.unpin(h);
            return None;
        }
        const HOT: u32 = PG_ACTIVE | PG_REFERENCED;
        if self.admission.hot_hints() {
            if flags & (HOT | PG_UNEVICTABLE) == HOT
                && slot.compare_exchange(entry, entry | PAGE_HOT, Ordering::AcqRel, Ordering::Relaxed).is_ok()
                && page.flags() & HOT != HOT
            {
                // Deactivated meanwhile: take the hint back.
                let _ = slot.compare_exchange(entry | PAGE_HOT, entry, Ordering::AcqRel, Ordering::Relaxed);
            }
        } else if crate::lru_gen::count_full(flags) {
            // The multi-gen LRU's count-full hint (lru_gen.rs).
            crate::lru_gen::set_count_full_hint(slot, entry, &page.flags);
        } else if let Some(counts) = self.policy.counts() {
            // A counted plug-in's ceiling hint (policy.rs).
            if flags & (PG_REFERENCED | PG_SWAPBACKED) == PG_REFERENCED {
                counts.set_ceiling_hint(pfn, slot, entry);
            }
        }
        Some((pfn, h, false))
    }

    /// Clear the PAGE_HOT hint of `pfn`, after clearing PG_active or
    /// PG_referenced, or lowering a plug-in's access count (policy.rs,
    /// `AccessCounts`). A frame that now caches another page of `inode`
    /// may lose that page's hint: that costs it only marks.
    pub fn clear_page_hot(&self, inode: &Inode, pfn: Pfn) {
        let page = self.page(pfn);
        if page.mapping() != inode.id {
            return;
        }
        let walk = inode.tree.walk();
        if let Some(slot) = inode.tree.slot(page.index(), &walk) {
            let entry = folio_entry(pfn, page.folio_order());
            let _ = slot.compare_exchange(entry | PAGE_HOT, entry, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// mark_page_accessed for a hit: a page with the hot hint only counts.
    #[inline(always)]
    pub fn mark_page_accessed_hit(&self, pfn: Pfn, hot: bool) {
        if hot {
            self.vm.inc(Item::mark_page_accessed_calls);
        } else {
            self.mark_page_accessed(pfn);
        }
    }

    /// The frames of the folio headed by `head`, in index order (a read
    /// run: the I/O fills them all, the state is the head's).
    pub(crate) fn folio_frames(&self, head: Pfn) -> Vec<Pfn> {
        let nr = 1 << self.page(head).folio_order();
        (head..head + nr).collect()
    }

    /// find_get_page for a caller that works on one page (locks or pins
    /// it, zeroes part of it): a page of a large folio is split out of it
    /// first (buffered writes and faults take folios whole, `FGP_FOLIO`
    /// and filemap_fault). The split needs the folio idle but for the
    /// cache and this lookup: out of writeback, which it waits for, and
    /// unmapped, which it does first (as the kernel's unmap_folio; the
    /// entries' dirty bits go to the folio, and the pages fault back in
    /// one by one); a transient reference (a reader's, an LRU batch's)
    /// makes it wait and retry, draining the batches.
    pub fn find_get_single_page(&self, inode: &Inode, index: u64) -> Option<Pfn> {
        let mut tries = 0u32;
        loop {
            let pfn = self.find_get_page(inode, index)?;
            let head = self.arena.compound_head(pfn);
            if head == pfn && self.page(pfn).folio_order() == 0 {
                return Some(pfn);
            }
            let locked = self.lock_page(head);
            if locked.mapping() == inode.id {
                locked.wait_on_writeback();
                self.try_to_unmap(inode, &locked, true);
            }
            let split = locked.mapping() != inode.id || self.split_folio(inode, head);
            locked.unlock();
            self.put_page(head);
            if !split {
                tries += 1;
                self.lru_add_drain_all();
                if tries > 3 {
                    std::thread::sleep(std::time::Duration::from_micros(50 << tries.min(8)));
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// First half of __remove_mapping, page locked: freeze the page at
    /// exactly `refs` references (so no reference pin can appear) and mark
    /// its slot frozen (so no hazard pin can appear), under the tree lock.
    /// False if the page is pinned by reference or dirty.
    pub fn freeze_for_removal(&self, inode: &Inode, pfn: Pfn, refs: u32) -> bool {
        let page = self.page(pfn);
        let g = inode.tree_lock.lock();
        if page.mapping() != inode.id || !page.freeze(refs) {
            return false;
        }
        let slot = inode.tree.slot_locked(page.index(), &g);
        match slot {
            Some(slot) if !page.test(PG_DIRTY) && entry_pfn(slot.load(Ordering::Acquire)) == Some(pfn) => {
                slot.store(folio_entry(pfn, page.folio_order()) | SLOT_FROZEN, Ordering::Release);
                true
            }
            _ => {
                page.unfreeze(refs);
                false
            }
        }
    }

    /// Second half of __remove_mapping, for a batch frozen by
    /// `freeze_for_removal`: one hazard scan for all, then pages no hit-path
    /// reader has pinned leave their mappings (`removed`); pinned ones are
    /// thawed with `refs` references back and stay (`kept`). Pages stay
    /// locked either way.
    /// Evicted pages (`evict`, from reclaim) leave shadow entries when
    /// workingset detection is on.
    pub fn finish_removal(
        &self,
        batch: &[(Pfn, Arc<Inode>)],
        refs: u32,
        evict: bool,
        removed: &mut Vec<Pfn>,
        kept: &mut Vec<Pfn>,
    ) {
        if batch.is_empty() {
            return;
        }
        let mut pinned = Vec::new();
        self.hazards.scan(&mut pinned);
        for (pfn, inode) in batch {
            let page = self.page(*pfn);
            let g = inode.tree_lock.lock();
            // A pin on any frame of a folio keeps it.
            let nr = 1 << page.folio_order();
            let at = pinned.partition_point(|&p| p < *pfn);
            if pinned.get(at).is_some_and(|&p| p < *pfn + nr) {
                if let Some(slot) = inode.tree.slot_locked(page.index(), &g) {
                    slot.store(folio_entry(*pfn, page.folio_order()), Ordering::Release);
                }
                page.unfreeze(refs);
                kept.push(*pfn);
            } else {
                let shadow =
                    if evict && self.config.tunables.workingset { self.workingset_eviction_page(*pfn) } else { 0 };
                let why = if evict { crate::policy::Removal::Evicted } else { crate::policy::Removal::Invalidated };
                self.__delete_from_page_cache(inode, *pfn, shadow, why, &g);
                removed.push(*pfn);
                if inode.nrpages.load(Ordering::Relaxed) == 0 {
                    // The last page of a file maybe no one has open: the
                    // inode shrinker (prune_icache, run after reclaim
                    // drops its locks) frees it if it is unused.
                    drop(g);
                    self.inode_add_lru(inode);
                }
            }
        }
    }

    /// No handle, no page, nothing dirty: an unused inode (the kernel's
    /// `inode->i_count == 0` with an empty mapping).
    fn inode_unused(inode: &Inode) -> bool {
        inode.handles.load(Ordering::Acquire) == 0
            && inode.nrpages.load(Ordering::Acquire) == 0
            && inode.nr_dirty.load(Ordering::Acquire) == 0
    }

    /// Whether the inode's tree holds anything (pages or shadow entries).
    fn mapping_has_entries(inode: &Inode) -> bool {
        let mut any = false;
        inode.tree.for_each(0, u64::MAX, None, &mut |_, e| {
            any = e != 0;
            !any
        });
        any
    }

    /// inode_add_lru: list an inode that may be unused, for `prune_icache`.
    pub fn inode_add_lru(&self, inode: &Arc<Inode>) {
        if Self::inode_unused(inode) && !inode.on_unused.swap(true, Ordering::AcqRel) {
            self.icache.list_unused(inode);
        }
    }

    /// iput: a handle went. An inode left with no handle and no entry at
    /// all is freed at once, as evict_inode does; one still holding pages
    /// stays cached (reclaim's last eviction lists it); one holding only
    /// shadow entries is listed for `prune_icache`, which keeps it while
    /// the list is short, so a file reopened soon still sees its refaults.
    pub fn iput(&self, inode: &Arc<Inode>) {
        if !Self::inode_unused(inode) {
            return;
        }
        if Self::mapping_has_entries(inode) {
            self.inode_add_lru(inode);
            self.prune_icache(PRUNE_ICACHE_BATCH);
        } else {
            self.free_unused_inode(inode);
        }
    }

    /// Free an unused inode: out of the icache (so no open finds it), its
    /// shadow entries dropped, its id and device released. False, changing
    /// nothing, when it is in use again or its rwsem is busy.
    fn free_unused_inode(&self, inode: &Arc<Inode>) -> bool {
        // Trylock: the caller may hold another inode's rwsem (reclaim from
        // a writer's allocation).
        let Some(_w) = inode.rwsem.try_lock() else { return false };
        // Handles are taken under the icache's lock (iget), so the check
        // holds once the name is gone.
        if !self.icache.unhash_if(inode, || Self::inode_unused(inode)) {
            return false;
        }
        self.truncate_inode_pages_final(inode);
        self.icache.release_id(inode);
        true
    }

    /// The inode shrinker (prune_icache_sb, run where the kernel runs
    /// shrink_slab): look at up to `nr_to_scan` listed inodes, oldest
    /// first. Those in use again leave the list; unused ones with no entry
    /// are freed; unused ones holding only shadows stay (rotated) unless
    /// the list is longer than one per 8 frames, the shadow-node limit
    /// (`count_shadow_nodes`), in which case the oldest are freed with
    /// their shadows.
    pub fn prune_icache(&self, nr_to_scan: usize) {
        let limit = (self.arena.nr_pages / 8).max(64) as usize;
        for _ in 0..nr_to_scan {
            let Some((weak, over)) = self.icache.pop_unused(limit) else { return };
            let Some(inode) = weak.upgrade() else { continue };
            inode.on_unused.store(false, Ordering::Release);
            if !Self::inode_unused(&inode) {
                continue;
            }
            if (over || !Self::mapping_has_entries(&inode)) && self.free_unused_inode(&inode) {
                continue;
            }
            self.inode_add_lru(&inode);
        }
    }

    /// Release a page held by `pin`.
    #[inline(always)]
    pub fn unpin(&self, pfn: Pfn, pin: Pin) {
        match pin {
            Pin::Hazard(h) => self.hazards.unpin(h),
            Pin::Ref => self.put_page(pfn),
        }
    }

    /// The cached inode known as `key`, with a handle counted, if any.
    pub fn igrab(&self, key: &str) -> Option<Arc<Inode>> {
        self.icache.grab(key)
    }

    /// iget: the inode known as `key`, made with `make_dev` (and called
    /// `name` in messages) if it is not cached.
    ///
    /// The caller gets the inode with one handle counted, taken under the
    /// icache lock, so an unused inode is never freed (`prune_icache`)
    /// between the lookup and its new handle.
    pub fn iget(
        &self,
        key: &str,
        name: &str,
        make_dev: impl FnOnce() -> Result<Arc<dyn BackingDev>>,
    ) -> Result<Arc<Inode>> {
        let open = || {
            let dev = make_dev()?;
            let size = dev.len().map_err(|e| Error::io(name, e))?;
            Ok((dev, size))
        };
        self.icache.get_or_insert(key, open, |id, (dev, size)| {
            let bdi = self.bdi_get(&dev.bdi_name());
            let (dev_ra_pages, dev_io_pages) = self.device_ra_pages(dev.as_ref());
            Arc::new(Inode::new(id, key, name, dev, bdi, &self.node_cache, size, (dev_ra_pages, dev_io_pages)))
        })
    }

    /// evict_inode: an unlinked inode's last handle is gone; drop its
    /// pages and forget it.
    pub fn evict_inode(&self, inode: &Inode) {
        inode.on_unused.store(true, Ordering::Release); // never listed again
        {
            let _g = inode.rwsem.lock();
            self.truncate_inode_pages_final(inode);
        }
        self.icache.unhash_if(inode, || true);
        self.icache.release_id(inode);
    }

    /// find_get_entry: the page at `index` with a reference, or None.
    #[inline]
    pub fn find_get_page(&self, inode: &Inode, index: u64) -> Option<Pfn> {
        let mut frozen_seen = 0u32;
        loop {
            let entry = inode.tree.load(index);
            let pfn = entry_page_pfn(entry, index)?;
            // The reference is the folio's, taken on its head (folio_try_get).
            let head = entry_pfn(entry)?;
            if !self.page(head).get_unless_zero() {
                // Frozen by a remover: it holds the tree lock, or waits for
                // one hazard check of its batch. Wait for the lock, and let
                // the remover run if it takes longer.
                drop(inode.tree_lock.lock());
                frozen_seen += 1;
                if frozen_seen > 8 {
                    std::thread::yield_now();
                }
                continue;
            }
            let now = inode.tree.load(index);
            if entry_pfn(now) != Some(head) || entry_page_pfn(now, index) != Some(pfn) {
                // Removed (and maybe reused), or split, between the load and
                // the get: the reference is on `head`, whatever `pfn` is now
                // (after a split the page is no longer the head's to count).
                self.put_page(head);
                continue;
            }
            return Some(pfn);
        }
    }

    /// pagecache_get_page: the core of every lookup (accessed-v2, Linux 3.16).
    /// With FGP_LOCK | FGP_FOLIO the page returned is the head of the
    /// folio holding `index` (itself, for a single page).
    pub fn pagecache_get_page(&self, inode: &Inode, index: u64, fgp: u32) -> Result<Option<Pfn>> {
        loop {
            // A caller that locks the page gets a single page unless it
            // takes folios (`find_get_single_page`); one that takes folios
            // gets the head, which holds the reference and the lock.
            let found = if fgp & (FGP_LOCK | FGP_FOLIO) == FGP_LOCK {
                self.find_get_single_page(inode, index)
            } else if fgp & FGP_FOLIO != 0 {
                self.find_get_page(inode, index).map(|pfn| self.arena.compound_head(pfn))
            } else {
                self.find_get_page(inode, index)
            };
            if let Some(pfn) = found {
                if fgp & FGP_LOCK != 0 {
                    let page = if fgp & FGP_NOWAIT != 0 {
                        let Some(page) = self.trylock_page(pfn) else {
                            self.put_page(pfn);
                            return Ok(None);
                        };
                        page
                    } else {
                        self.lock_page(pfn)
                    };
                    // Truncated (or split, or freed and reused) while we
                    // slept on the lock?
                    let first = page.index();
                    if page.mapping() != inode.id || index < first || index - first >= page.folio_nr_pages() {
                        page.unlock();
                        self.put_page(pfn);
                        continue;
                    }
                    // The caller unlocks.
                    page.into_raw();
                }
                if fgp & FGP_ACCESSED != 0 {
                    self.mark_page_accessed(pfn);
                }
                return Ok(Some(pfn));
            }
            if fgp & FGP_CREAT == 0 {
                return Ok(None);
            }
            let pfn = if fgp & FGP_NOWAIT != 0 {
                match self.arena.alloc() {
                    Some(p) => p,
                    None => return Ok(None),
                }
            } else {
                self.alloc_page()?
            };
            let v2 = self.config.tunables.accessed_init == AccessedInit::AccessedV2;
            if fgp & FGP_ACCESSED != 0 && v2 {
                self.init_page_accessed(pfn);
            }
            let Some(page) = self.add_to_page_cache_lru(pfn, inode, index) else {
                // Someone else inserted it first.
                self.put_page(pfn);
                continue;
            };
            if fgp & FGP_ACCESSED != 0 && !v2 {
                // 3.15 vanilla: the caller marks the now-visible page.
                self.mark_page_accessed(pfn);
            }
            if fgp & FGP_LOCK == 0 {
                page.unlock();
            } else {
                // FGP_LOCK: the caller unlocks.
                page.into_raw();
            }
            return Ok(Some(pfn));
        }
    }

    /// find_lock_page.
    pub fn find_lock_page(&self, inode: &Inode, index: u64) -> Result<Option<Pfn>> {
        self.pagecache_get_page(inode, index, FGP_LOCK)
    }

    /// find_or_create_page.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn find_or_create_page(&self, inode: &Inode, index: u64) -> Result<Option<Pfn>> {
        self.pagecache_get_page(inode, index, FGP_LOCK | FGP_ACCESSED | FGP_CREAT)
    }

    /// grab_cache_page_nowait.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn grab_cache_page_nowait(&self, inode: &Inode, index: u64) -> Result<Option<Pfn>> {
        self.pagecache_get_page(inode, index, FGP_LOCK | FGP_CREAT | FGP_NOWAIT)
    }

    /// grab_cache_page_write_begin. With accessed-v2 the page is marked
    /// accessed here (FGP_ACCESSED); 3.15 vanilla marks it after the copy.
    /// With `folio`, a large folio holding `index` comes back whole, by its
    /// head; without, split to the page.
    pub fn grab_cache_page_write_begin(&self, inode: &Inode, index: u64, folio: bool) -> Result<Pfn> {
        let mut fgp = FGP_LOCK | FGP_WRITE | FGP_CREAT;
        if folio {
            fgp |= FGP_FOLIO;
        }
        if self.config.tunables.accessed_init == AccessedInit::AccessedV2 {
            fgp |= FGP_ACCESSED;
        }
        match self.pagecache_get_page(inode, index, fgp)? {
            Some(pfn) => Ok(pfn),
            None => Err(Error::NoMemory { frames: self.arena.nr_pages as usize }),
        }
    }

    /// add_to_page_cache_lru: insert a new page locked, then queue it for
    /// the LRU; the page's lock comes back to the caller. None if the
    /// index is already taken. The caller's reference stays the caller's;
    /// the cache takes its own.
    pub fn add_to_page_cache_lru(&self, pfn: Pfn, inode: &Inode, index: u64) -> Option<LockedPage<'_>> {
        self.filemap_add_folio(pfn, 0, inode, index)
    }

    /// __filemap_add_folio and the LRU add: insert the folio of `1 <<
    /// order` pages headed by `pfn` (from `Arena::alloc_folio`) at `index`,
    /// aligned to its size, as `add_to_page_cache_lru` inserts a page. None
    /// if any page of its range is cached. The range's shadows go (one of
    /// them, the first, decides the refault); a larger shadow around the
    /// range is split and keeps its other parts. The cache holds one
    /// reference on the head for the whole folio.
    pub fn filemap_add_folio(&self, pfn: Pfn, order: u32, inode: &Inode, index: u64) -> Option<LockedPage<'_>> {
        let nr = 1u64 << order;
        debug_assert!(index.is_multiple_of(nr) && self.page(pfn).folio_order() == order);
        let page = self.page(pfn);
        // Invisible until stored in the tree: plain stores suffice.
        page.set_nonatomic(PG_LOCKED);
        page.mapping.store(inode.id, Ordering::Relaxed);
        page.index.store(index, Ordering::Relaxed);
        page.get();
        let mut refault = None;
        {
            let g = inode.tree_lock.lock();
            let (old, shadows, taken) = if order == 0 {
                let old = inode.tree.load(index);
                (old, (old & SHADOW_BIT != 0) as i64, entry_pfn(old).is_some())
            } else {
                self.folio_range_entries(inode, index, order, &g)
            };
            if old & SHADOW_BIT != 0 {
                // The folio takes the shadows' slots below.
                self.node_stat.sub(NodeStat::Shadows, shadows);
            }
            if old & SHADOW_BIT != 0 && self.config.tunables.workingset && self.policy.active() {
                // The plug-in decides what a refault means (after the add).
                refault = Some(self.workingset_refault_policy(old));
            } else if old & SHADOW_BIT != 0 && self.config.tunables.workingset {
                let key = crate::admission::page_key(inode.id, index);
                let (activate, restore) = self.workingset_refault(old, key, nr);
                if restore {
                    // It had been in the working set (the multi-gen LRU
                    // restores this without activating).
                    page.set_nonatomic(PG_WORKINGSET);
                }
                if activate {
                    // Refaulted within the active list's size: it was part
                    // of the working set; it goes straight to the active
                    // list.
                    page.set_nonatomic(PG_ACTIVE);
                    self.workingset_activation_nr(nr);
                }
            }
            if taken {
                drop(g);
                page.refcount.fetch_sub(1, Ordering::Relaxed);
                page.mapping.store(NO_MAPPING, Ordering::Relaxed);
                page.clear_nonatomic(PG_LOCKED);
                return None;
            }
            // Release: the descriptor's fields are visible before the entry.
            // Counted under the tree lock, before anyone can delete the
            // page and uncount it.
            self.node_stat.add(NodeStat::FilePages, nr as i64);
            inode.nrpages.fetch_add(nr, Ordering::Relaxed);
            inode.tree.store_order(index, order, crate::pagetree::folio_entry(pfn, order), &g);
        }
        self.lru_cache_add(pfn);
        if let Some(r) = refault {
            self.policy_refault(crate::policy::FolioRef { pfn, order: order as u8, mapping: inode.id, index }, r);
        }
        Some(LockedPage::adopt(page, pfn, &self.vm))
    }

    /// What the range of an order-`order` folio at `index` holds, tree lock
    /// held: the first shadow (0 if none), the shadow entries the folio's
    /// store takes away (those inside the range, and a larger one around
    /// it less the parts it keeps), and whether a page is cached there.
    fn folio_range_entries(&self, inode: &Inode, index: u64, order: u32, g: &TreeLocked<'_>) -> (usize, i64, bool) {
        let end = index + (1u64 << order);
        let (mut first, mut shadows, mut taken) = (0, 0i64, false);
        inode.tree.for_each(index, end, None, &mut |_, e| {
            if e & SHADOW_BIT != 0 {
                if first == 0 {
                    first = e;
                }
                shadows += 1;
            } else if entry_pfn(e).is_some() {
                taken = true;
            }
            !taken
        });
        if let Some((e, _, big)) = inode.tree.load_order(index, g) {
            if e & SHADOW_BIT != 0 && big > order {
                // Split into 2^(big - order) parts, all kept but ours.
                shadows -= (1i64 << (big - order)) - 1;
            }
        }
        (first, shadows, taken)
    }

    /// __delete_from_page_cache with the tree lock held (`locked`): the slot empties (or
    /// takes `shadow`, the workingset record of an evicted page), the page
    /// forgets its mapping. The caller drops the cache's reference
    /// afterwards.
    pub fn __delete_from_page_cache(
        &self,
        inode: &Inode,
        pfn: Pfn,
        shadow: usize,
        why: crate::policy::Removal,
        locked: &TreeLocked<'_>,
    ) {
        let page = self.page(pfn);
        let index = page.index();
        let order = page.folio_order();
        if let Some(p) = self.policy.get() {
            p.folio_removed(crate::policy::FolioRef { pfn, order: order as u8, mapping: inode.id, index }, why);
        }
        debug_assert_eq!(entry_pfn(inode.tree.load(index)), Some(pfn));
        self.cancel_dirty_page(inode, pfn);
        inode.tree.clear_mark(index, MARK_DIRTY, locked);
        if shadow != 0 {
            // One shadow for the whole folio (workingset_eviction per folio).
            inode.tree.store_order(index, order, shadow, locked);
            self.node_stat.add(NodeStat::Shadows, 1);
        } else {
            inode.tree.store(index, 0, locked);
        }
        let nr = 1u64 << order;
        inode.nrpages.fetch_sub(nr, Ordering::Relaxed);
        self.node_stat.sub(NodeStat::FilePages, nr as i64);
        page.mapping.store(NO_MAPPING, Ordering::Release);
    }

    /// Read pages in: `pages` are locked, not uptodate, and consecutive from
    /// `first` (the readpage/readpages of a filesystem). On return they are
    /// uptodate, or carry PG_error; they stay locked.
    pub fn read_pages_io(&self, inode: &Inode, first: u64, pages: &[Pfn]) -> Result<()> {
        let res = self.read_pages_raw(inode, first, pages);
        let ok = res.is_ok();
        // A large folio's state is its head's.
        for page in pages.iter().map(|&p| self.page(p)).filter(|p| !p.is_tail()) {
            if ok {
                page.clear(PG_ERROR, &self.vm);
                page.set(PG_UPTODATE, &self.vm);
            } else {
                page.set(PG_ERROR, &self.vm);
            }
        }
        res
    }

    /// The device read of `read_pages_io`, leaving the flags to the caller:
    /// the bytes (zeroes past the device's end) in the frames, or the error.
    pub(crate) fn read_pages_raw(&self, inode: &Inode, first: u64, pages: &[Pfn]) -> Result<()> {
        let shift = self.page_shift();
        let res = if let [pfn] = pages {
            // A single page (a plain miss) needs no heap allocation.
            // SAFETY: the page is locked, not uptodate and held (by the
            // caller's reference, or, for readahead, by being cached while
            // locked); the slice is gone before it is marked uptodate.
            let mut one = [unsafe { self.arena.frame_for_io_mut(*pfn) }];
            inode.dev.read_pages(first << shift, &mut one)
        } else {
            let mut bufs: Vec<&mut [u8]> = pages
                .iter()
                // SAFETY: as above, for each page of the run.
                .map(|&p| unsafe { self.arena.frame_for_io_mut(p) })
                .collect();
            inode.dev.read_pages(first << shift, &mut bufs)
        };
        self.end_read_pages(inode, pages, res)
    }

    /// The completion half of `read_pages_io` (the I/O done, its frames no
    /// longer borrowed): `res` is the bytes read from the run's start.
    /// Bytes past them read as zeroes; the pages become uptodate, or carry
    /// PG_error on failure. They stay locked.
    pub(crate) fn end_read_pages(&self, inode: &Inode, pages: &[Pfn], res: std::io::Result<usize>) -> Result<()> {
        let ps = self.page_size();
        match res {
            Ok(n) => {
                self.zero_past(pages, n);
                self.vm.add(Item::pgpgin, (pages.len() * ps / 1024) as u64);
                Ok(())
            }
            Err(e) => Err(Error::io(&inode.name, e)),
        }
    }

    /// After a device read of `n` bytes into the frames of `pages` (in
    /// order): the bytes past them read as zeroes, as past a device's end.
    pub(crate) fn zero_past(&self, pages: &[Pfn], n: usize) {
        let ps = self.page_size();
        for (i, &pfn) in pages.iter().enumerate() {
            let start = i * ps;
            if n < start + ps {
                let from = n.saturating_sub(start);
                self.memzero_page(pfn, from, ps - from);
            }
        }
    }

    /// Make sure a referenced page is uptodate: wait for I/O in flight, and
    /// read it ourselves if that failed. Returns false if the page was
    /// truncated meanwhile (the caller retries the lookup).
    pub fn wait_page_uptodate(&self, inode: &Inode, pfn: Pfn) -> Result<bool> {
        // A large folio's state is its head's (the reference, on the
        // head, keeps it from being split meanwhile).
        let head = self.arena.compound_head(pfn);
        let page = self.page(head);
        if page.test(PG_UPTODATE) {
            return Ok(true);
        }
        // Its read still queued (no worker free yet): read it here rather
        // than sleep until a worker takes it (bio.rs).
        if page.test(PG_LOCKED) && self.run_queued_read(inode, page.index()) && page.test(PG_UPTODATE) {
            return Ok(true);
        }
        let page = self.lock_page(head);
        if page.mapping() != inode.id {
            return Ok(false);
        }
        let res = if page.test(PG_UPTODATE) {
            Ok(())
        } else {
            self.read_pages_io(inode, page.index(), &self.folio_frames(head))
        };
        page.unlock();
        res.map(|_| true)
    }

    /// Look a page up, reading it in (with readahead when `ra` is given) if
    /// it is not cached. Returns it referenced and uptodate.
    pub fn read_cache_page(&self, inode: &Inode, ra: Option<&FileRaState>, index: u64, req: u64) -> Result<Pfn> {
        loop {
            let pfn = match self.find_get_page(inode, index) {
                Some(p) => {
                    self.vm.inc(Item::pgcache_hit);
                    p
                }
                None => {
                    self.vm.inc(Item::pgcache_miss);
                    if let Some(ra) = ra {
                        self.page_cache_sync_readahead(inode, ra, index, req);
                        if let Some(p) = self.find_get_page(inode, index) {
                            p
                        } else {
                            self.read_one_page(inode, index)?
                        }
                    } else {
                        self.read_one_page(inode, index)?
                    }
                }
            };
            if let Some(ra) = ra {
                if self.page(self.arena.compound_head(pfn)).test(PG_READAHEAD) {
                    self.page_cache_async_readahead_file(inode, ra, pfn, index, req);
                }
            }
            match self.wait_page_uptodate(inode, pfn) {
                Ok(true) => return Ok(pfn),
                Ok(false) => self.put_page(pfn),
                Err(e) => {
                    self.put_page(pfn);
                    return Err(e);
                }
            }
        }
    }

    /// no_cached_page: allocate, insert and read one page.
    fn read_one_page(&self, inode: &Inode, index: u64) -> Result<Pfn> {
        let _inval = inode.invalidate_lock.read();
        let size = inode.size.load(Ordering::Acquire);
        if index >= size.div_ceil(self.page_size() as u64) {
            return Err(Error::PastEof { offset: index << self.page_shift(), size });
        }
        let pfn = self
            .pagecache_get_page(inode, index, FGP_LOCK | FGP_CREAT)?
            .ok_or(Error::NoMemory { frames: self.arena.nr_pages as usize })?;
        let page = self.adopt_page_lock(pfn);
        let res = if page.test(PG_UPTODATE) { Ok(()) } else { self.read_pages_io(inode, index, &[pfn]) };
        page.unlock();
        match res {
            Ok(()) => Ok(pfn),
            Err(e) => {
                self.put_page(pfn);
                Err(e)
            }
        }
    }

    /// The buffered read path (filemap_read / do_generic_file_read).
    #[inline]
    pub fn filemap_read(&self, inode: &Inode, ra: &FileRaState, buf: &mut [u8], pos: u64) -> Result<usize> {
        self.filemap_read_from::<false>(inode, ra, buf, pos).map(|(n, _)| n)
    }

    /// filemap_read with IOCB_NOWAIT: only the leading pages the hit path
    /// finds (cached, uptodate, no readahead marker); it stops at the first
    /// page that would need a read, a wait or a readahead, and says so
    /// (`true`), so that the caller can go on with `filemap_read` from
    /// where it stopped and every page is marked once.
    pub fn filemap_read_nowait(&self, inode: &Inode, ra: &FileRaState, buf: &mut [u8], pos: u64) -> (usize, bool) {
        // Without the slow path nothing here can fail.
        self.filemap_read_from::<true>(inode, ra, buf, pos).unwrap_or((0, true))
    }

    fn filemap_read_from<const NOWAIT: bool>(
        &self,
        inode: &Inode,
        ra: &FileRaState,
        buf: &mut [u8],
        pos: u64,
    ) -> Result<(usize, bool)> {
        let shift = self.page_shift();
        let ps = self.page_size() as u64;
        let size = inode.size.load(Ordering::Acquire);
        if pos >= size || buf.is_empty() {
            return Ok((0, false));
        }
        let count = (buf.len() as u64).min(size - pos);
        let last_index = (pos + count - 1) >> shift;
        let mut prev_pos = ra.prev_pos.load(Ordering::Relaxed);
        let mut cur = pos;
        let end = pos + count;
        let noreuse = ra.noreuse();
        while cur < end {
            let index = cur >> shift;
            let offset = cur & (ps - 1);
            let (pfn, pin, hot) = match self.find_page_fast(inode, index) {
                Some((pfn, h, hot)) => {
                    self.vm.inc(Item::pgcache_hit);
                    (pfn, Pin::Hazard(h), hot)
                }
                None if NOWAIT => {
                    ra.prev_pos.store(prev_pos, Ordering::Relaxed);
                    return Ok(((cur - pos) as usize, true));
                }
                None => match self.read_cache_page(inode, Some(ra), index, last_index - index + 1) {
                    Ok(pfn) => (pfn, Pin::Ref, false),
                    // Truncated under us: the read ends at the new EOF.
                    Err(Error::PastEof { .. }) => break,
                    Err(e) => return Err(e),
                },
            };
            // i_size may have shrunk while we waited.
            let size = inode.size.load(Ordering::Acquire);
            if cur >= size {
                self.unpin(pfn, pin);
                break;
            }
            // The folio holding the page: one lookup, one mark and one
            // copy per page of it that this read covers (filemap_read's
            // folio batch). The descriptor's flags are loaded first but
            // used after this page's copy, whose bounds come from `index`
            // alone: on a random read the descriptor is a cache miss, which
            // the copy then overlaps instead of waiting for it.
            let flags = self.page(pfn).flags();
            let at = cur;
            let page_stop = end.min(size).min((index + 1) << shift);
            let done = (cur - pos) as usize;
            // The pin keeps the folio's frames its own; the copy is one
            // state of the page between two write sections (highmem.rs).
            self.memcpy_from_page(pfn, offset as usize, &mut buf[done..done + (page_stop - cur) as usize]);
            cur = page_stop;
            let (first, folio_end) = if flags & (PG_TAIL | FOLIO_ORDER_MASK) == 0 {
                (index, index + 1)
            } else {
                // Whole and unfreed while the pin or reference is held (a
                // split checks both), so the tail's link and every frame
                // of the folio are stable.
                let head = self.arena.compound_head(pfn);
                let first = index - (pfn - head) as u64;
                (first, first + (1u64 << self.page(head).folio_order()))
            };
            if !noreuse && self.should_mark_accessed(ra, prev_pos, first..folio_end, index, at) {
                self.mark_page_accessed_hit(pfn, hot);
                // Counted after the lookup, so a refault's admission saw
                // the count of its earlier accesses only.
                self.admission_access(inode.id, index);
            }
            // The folio's next pages that this read covers.
            let stop = end.min(size).min(folio_end << shift);
            let mut frame = pfn + 1;
            while cur < stop {
                let nr = ps.min(stop - cur);
                let done = (cur - pos) as usize;
                self.memcpy_from_page(frame, 0, &mut buf[done..done + nr as usize]);
                cur += nr;
                frame += 1;
            }
            self.unpin(pfn, pin);
            prev_pos = cur;
        }
        ra.prev_pos.store(cur, Ordering::Relaxed);
        Ok(((cur - pos) as usize, false))
    }

    /// The re-mark rule (`Tunables::remark`): does a read starting at byte
    /// `pos` in page `index` re-mark it?
    /// `prev_pos` is where the previous read through this handle ended.
    /// `folio`: the indices of the folio holding it; for a large folio
    /// the rule is 6.x filemap_read's whatever the tunable says: mark
    /// unless the last read ended in this folio.
    #[inline]
    fn should_mark_accessed(
        &self,
        ra: &FileRaState,
        prev_pos: u64,
        folio: std::ops::Range<u64>,
        index: u64,
        pos: u64,
    ) -> bool {
        let shift = self.page_shift();
        let offset = pos & ((1 << shift) - 1);
        let prev_index = if prev_pos == 0 || prev_pos == u64::MAX { None } else { Some((prev_pos - 1) >> shift) };
        if folio.end - folio.start > 1 {
            return !prev_index.is_some_and(|p| folio.contains(&p));
        }
        let same_page = prev_index == Some(index);
        match self.config.tunables.remark_rule {
            RemarkRule::PageAligned => offset == 0,
            RemarkRule::PrevIndex => !same_page,
            RemarkRule::PrevIndexOrOffsetZero => !same_page || offset == 0,
            RemarkRule::Unconditional => true,
            RemarkRule::Every32nd => {
                if same_page {
                    let hits = ra.repeat_hits.load(Ordering::Relaxed).wrapping_add(1);
                    ra.repeat_hits.store(hits, Ordering::Relaxed);
                    hits.is_multiple_of(32)
                } else {
                    ra.repeat_hits.store(0, Ordering::Relaxed);
                    true
                }
            }
            RemarkRule::PrevPos => !(same_page && prev_pos == pos),
        }
    }

    /// The buffered write path (generic_perform_write with
    /// write_begin/write_end). The caller holds `inode.rwsem`.
    ///
    /// Before any page is dirtied: a cache that is shut down refuses the
    /// write; a file whose writeback is failing is written back first and
    /// the write fails with that error if it still fails (so no writer
    /// piles up data that cannot be written); and the space the pages will
    /// need is reserved on the device (`BackingDev::reserve`), so ENOSPC
    /// and EFBIG come back from this call, not from a later writeback.
    pub fn generic_perform_write(&self, inode: &Inode, buf: &[u8], pos: u64) -> Result<usize> {
        self.generic_write_checks(inode, pos, buf.len() as u64)?;
        let mut written = 0usize;
        while written < buf.len() {
            let res = self.write_one_folio(inode, pos + written as u64, &buf[written..]);
            let (bytes, pages) = match res {
                Ok(done) => done,
                Err(e) if written == 0 => return Err(e),
                Err(_) => break,
            };
            written += bytes;
            if let Err(e) = self.balance_dirty_pages_ratelimited(inode, pages) {
                // Interrupted or shut down while throttled: what is written
                // stays written; the call reports it, or the error.
                return if written == 0 { Err(e) } else { Ok(written) };
            }
        }
        Ok(written)
    }

    /// What a write must pass before it dirties a page of `[pos, pos +
    /// len)` (generic_perform_write's checks, shared with `PageMut`): the
    /// cache is not shut down, a file whose writeback is failing is written
    /// back first (its error fails the write), and the space is reserved.
    pub fn generic_write_checks(&self, inode: &Inode, pos: u64, len: u64) -> Result<()> {
        if self.shutting_down() {
            return Err(Error::ShutDown);
        }
        if inode.wb_retry_at.load(Ordering::Acquire) != 0 {
            self.write_and_wait_range(inode, 0, u64::MAX)?;
        }
        if self.config.tunables.reserve_space {
            inode.dev.reserve(pos, len).map_err(|e| Error::io_at(&inode.name, pos, e))?;
        }
        Ok(())
    }

    /// write_begin, copy, write_end for the folio holding `pos`: as much
    /// of `data` as falls in it (a page's worth, or up to a large folio's
    /// end). Returns the bytes written and the pages they touched.
    fn write_one_folio(&self, inode: &Inode, pos: u64, data: &[u8]) -> Result<(usize, u32)> {
        let (shift, ps) = (self.page_shift(), self.page_size());
        let index = pos >> shift;
        let offset = pos as usize & (ps - 1);
        let head = self.write_begin_locked(inode, index, offset == 0 && data.len() >= ps, true)?;
        let page = self.adopt_page_lock(head);
        let first = page.index();
        let folio_end = (first + page.folio_nr_pages()) << shift;
        let bytes = (folio_end - pos).min(data.len() as u64) as usize;
        // One write section per page: a reader of this uptodate page sees
        // the page before or after its copy, never part of it (highmem.rs).
        let mut done = 0;
        while done < bytes {
            let at = pos + done as u64;
            let off = at as usize & (ps - 1);
            let n = (ps - off).min(bytes - done);
            self.memcpy_to_page(head + ((at >> shift) - first) as Pfn, off, &data[done..done + n]);
            done += n;
        }
        // Only a single page can be here not uptodate (write_begin_locked),
        // and the write covers it whole.
        if !page.test(PG_UPTODATE) {
            page.set(PG_UPTODATE, &self.vm);
        }
        self.set_page_dirty(inode, head);
        // i_size grows before the folio is unlocked (generic_write_end), so
        // writeback, which locks the folio first, never writes these bytes
        // with a stale size and cuts them off the device.
        inode.size.fetch_max(pos + bytes as u64, Ordering::AcqRel);
        page.unlock();
        if self.config.tunables.accessed_init == AccessedInit::Vanilla315 {
            self.mark_page_accessed(head);
        }
        self.admission_access(inode.id, index);
        self.put_page(head);
        let pages = ((pos + bytes as u64 - 1) >> shift) - index + 1;
        Ok((bytes, pages as u32))
    }
}

impl Cache {
    /// write_begin for a write pin (`PageMut`, the page_mkwrite of an
    /// embedder): the page at `index`, locked, out of writeback (stable
    /// pages) and uptodate: read in if it lies inside the file, zeroed if
    /// it lies wholly past EOF. Its space is reserved first. The caller
    /// holds `inode.invalidate_lock` shared until `write_end_pin`, so no
    /// truncation or hole punch runs meanwhile (ARCHITECTURE.md, "Write
    /// pins").
    pub fn write_begin_pin(&self, inode: &Inode, index: u64) -> Result<Pfn> {
        let ps = self.page_size();
        let pos = index << self.page_shift();
        self.generic_write_checks(inode, pos, ps as u64)?;
        self.write_begin_locked(inode, index, false, false)
    }

    /// The page at `index` for a writer, or with `folio` the large folio
    /// holding it (by its head): locked, out of writeback (stable pages:
    /// bytes being written out never change; a signal ends that wait with
    /// `Interrupted`) and, unless the writer overwrites a single page
    /// `whole`, uptodate: read in if it lies inside the file, zeroed past
    /// EOF. A large folio that is not uptodate (its read failed) is split,
    /// and the page comes back. On a read error the page is unlocked and
    /// released.
    fn write_begin_locked(&self, inode: &Inode, index: u64, whole: bool, folio: bool) -> Result<Pfn> {
        let ps = self.page_size();
        let pfn = self.grab_cache_page_write_begin(inode, index, folio)?;
        let page = self.adopt_page_lock(pfn);
        if page.folio_order() > 0 && !page.test(PG_UPTODATE) {
            page.unlock();
            self.put_page(pfn);
            return self.write_begin_locked(inode, index, whole, false);
        }
        // Killable: the write it waits for may not end while the store is
        // frozen or hung (a FUSE writer's partial page, written by two
        // requests with writeback started between them).
        if !page.wait_on_writeback_killable() {
            page.unlock();
            self.put_page(pfn);
            return Err(Error::Interrupted);
        }
        if !page.test(PG_UPTODATE) && !whole {
            if index << self.page_shift() < inode.size.load(Ordering::Acquire) {
                if let Err(e) = self.read_pages_io(inode, index, &[pfn]) {
                    page.unlock();
                    self.put_page(pfn);
                    return Err(e);
                }
            } else {
                self.memzero_page(pfn, 0, ps);
                page.set(PG_UPTODATE, &self.vm);
            }
        }
        // The caller (write_one_page, or the pin until write_end_pin)
        // unlocks.
        Ok(page.into_raw())
    }

    /// write_end for a write pin, as generic_write_end: i_size grows to
    /// `new_size` (at most the page's end; 0: no growth) before the page
    /// is unlocked, so writeback never writes it with a stale size. A page
    /// left wholly past i_size leaves the cache, as a failed write's pages
    /// do (ext4_write_failed truncates them): no page lingers past EOF. When
    /// the pin wrote (`dirtied`; its stores ended at byte `written_end` of
    /// the page at most), what it wrote past i_size is zeroed, for it is
    /// not part of the file and must read as zero if the file grows later,
    /// and the page is marked dirty. Unlocks the page and drops the pin's
    /// reference; the caller then runs balance_dirty_pages_ratelimited with
    /// no lock held.
    pub fn write_end_pin(&self, inode: &Inode, pfn: Pfn, index: u64, new_size: u64, written_end: usize, dirtied: bool) {
        let ps = self.page_size() as u64;
        let start = index << self.page_shift();
        debug_assert!(new_size <= start + ps, "write pin grows the file past its page");
        // The lock write_begin_pin handed to the pin.
        let page = self.adopt_page_lock(pfn);
        if dirtied {
            inode.size.fetch_max(new_size, Ordering::AcqRel);
        }
        // The pin's invalidate_lock keeps truncation out, so i_size only
        // grows meanwhile: a page inside the file now stays inside it.
        if start >= inode.size.load(Ordering::Acquire) {
            self.truncate_inode_page(inode, pfn);
            page.unlock();
            self.put_page(pfn);
            return;
        }
        if dirtied {
            let eof = inode.size.load(Ordering::Acquire).saturating_sub(start).min(ps) as usize;
            if eof < written_end {
                self.memzero_page(pfn, eof, written_end - eof);
            }
            self.set_page_dirty(inode, pfn);
        }
        page.unlock();
        if dirtied {
            if self.config.tunables.accessed_init == AccessedInit::Vanilla315 {
                self.mark_page_accessed(pfn);
            }
            self.admission_access(inode.id, index);
        }
        self.put_page(pfn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::MemoryDev;
    use crate::{Config, Tunables};

    fn cache(accessed_init: AccessedInit) -> (Arc<Cache>, Arc<Inode>) {
        let cache = Cache::new(Config {
            memory_bytes: 64 * 4096,
            tunables: Tunables { accessed_init, kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap();
        let inode = cache.iget("t", "t", || Ok(Arc::new(MemoryDev::new("t", 4096)) as Arc<dyn BackingDev>)).unwrap();
        (cache, inode)
    }

    // Goal: the wrappers behave as their kernel namesakes, and a page created
    // with FGP_ACCESSED is referenced without an atomic RMW under
    // accessed-v2 (Linux 3.16), with one under 3.15 vanilla.
    #[test]
    fn fgp_wrappers_and_init_page_accessed() {
        for (mode, rmw_for_referenced) in [(AccessedInit::AccessedV2, 0), (AccessedInit::Vanilla315, 1)] {
            let (c, inode) = cache(mode);
            assert_eq!(c.find_get_page(&inode, 0), None);
            assert_eq!(c.find_lock_page(&inode, 0).unwrap(), None);
            let before = c.vm.sum(Item::atomic_flag_rmw);
            let pfn = c.find_or_create_page(&inode, 0).unwrap().unwrap();
            let after = c.vm.sum(Item::atomic_flag_rmw);
            let page = c.page(pfn);
            assert!(page.test(PG_LOCKED) && page.test(PG_REFERENCED));
            // Creating touches no flag atomically, except the vanilla mark.
            assert_eq!(after - before, rmw_for_referenced, "{mode:?}");
            // Locked by us: the nowait variant gives up instead of sleeping.
            assert_eq!(c.grab_cache_page_nowait(&inode, 0).unwrap(), None);
            c.adopt_page_lock(pfn).unlock();
            let again = c.grab_cache_page_nowait(&inode, 0).unwrap().unwrap();
            assert_eq!(again, pfn);
            c.adopt_page_lock(again).unlock();
            c.put_page(again);
            let w = c.grab_cache_page_write_begin(&inode, 1, false).unwrap();
            assert!(c.page(w).test(PG_LOCKED));
            c.adopt_page_lock(w).unlock();
            c.put_page(w);
            c.put_page(pfn);
            assert_eq!(inode.nrpages.load(Ordering::Relaxed), 2);
        }
    }
}

//! The swap cache (mm/swap_state.c): anonymous pages on their way to and
//! from swap.
//!
//! Reclaim cannot free a dirty anonymous page until it is on the device,
//! and a fault on a swapped-out page must find the page if it is still in
//! memory. Both go through the swap cache, a map from swap slot to page:
//!
//! ```text
//!  mapped anon page ──add_to_swap──> + swap cache (slot, PG_swapcache, dirty)
//!        ^                               │ try_to_unmap: pte := swap entry
//!        │ do_swap_page                  v
//!        │ (pte := page)          swap_writepage ──> clean, unmapped
//!        │                               │ __remove_mapping
//!  swap cache page <──read_swap_cache_async── slot on the device (pte holds it)
//! ```
//!
//! A page in the swap cache holds its slot (SWAP_HAS_CACHE) and one page
//! reference. A page swapped in stays in the swap cache, clean: if it is
//! reclaimed again before it is written to, it needs no I/O. The first
//! write to it (a write fault, `reuse_swap_page`) takes it out of the swap
//! cache and frees the slot, whose copy is now stale; so does the region
//! going away (`free_swap_and_cache`), and, when swap is over half full,
//! the swap-in itself (`try_to_free_swap`).
//!
//! A large anonymous folio (mTHP) goes in whole, as in 6.10: it takes an
//! aligned run of slots, frame i at the first slot + i, and the cache
//! holds an entry (naming the frame) and a reference per frame. Its
//! entries become swap entries together and it is written in one
//! request. A fault on one of them finds its frame in the cache and maps
//! it, with a reference and a mapcount on the head, so the folio may be
//! partly mapped while in the cache; a write to it keeps it there, dirty,
//! while any of its slots is still held by a swap entry. It leaves the
//! cache whole (reclaim, `try_to_free_swap` once no slot is held) and is
//! never split while in it, so a cache entry's head is stable. Swap-in
//! reads pages, as 6.10 does.
//!
//! Swap-in reads ahead: `swapin_readahead` reads the 2^page_cluster slots
//! of the aligned block around the one faulted (page_cluster 3: 8 pages),
//! those in use and not cached, into swap-cache pages that no region maps
//! yet; a later fault on their swap entries finds them (`swap_ra_hit`).
//! Since `scan_swap_map` hands out slots in runs, neighbours on the device
//! are pages reclaim evicted together.
//!
//! Implementation: the cache is a `HashMap` under the swap lock
//! (swapfile.rs), so a lookup, an insertion that checks the slot is still
//! in use, and a removal that freezes the page's count are each one
//! critical section; no lookup can see a page being removed. A page's
//! slot is kept in the top half of its `index` (page.rs), the kernel's
//! `page_private`. Reads are synchronous: the reading thread holds the
//! new pages locked until the data is in.

use crate::error::{Error, Result};
use crate::mm::Cache;
use crate::mmdebug::vm_bug_on_page;
use crate::page::*;
use crate::swapfile::SWAP_HAS_CACHE;
use crate::vmstat::Item;

/// What `add_new_to_swap_cache` found at a slot.
enum RaSlot {
    /// Already cached: this frame, with a reference to its folio for the
    /// caller.
    Cached(Pfn),
    /// The new page is now the slot's swap-cache page; the shadow entry
    /// its last eviction left, if any.
    Added(Option<usize>),
    /// The slot is free (or bad): nothing to read.
    Unused,
}

impl Cache {
    /// add_to_swap: give the locked anonymous folio `pfn` (a page or a
    /// large folio's head) swap slots and put it in the swap cache, dirty
    /// (its only copy is in memory). A large folio takes an aligned run of
    /// slots, frame i at the first + i, and the cache holds an entry and
    /// a reference per frame (6.10). False when swap is off or full, or
    /// for a large folio when no aligned run is free (the caller splits).
    pub(crate) fn add_to_swap(&self, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        vm_bug_on_page!(
            !page.test(PG_LOCKED) || !page.test(PG_SWAPBACKED) || page.test(PG_SWAPCACHE),
            page,
            "add_to_swap"
        );
        let Some(si) = self.swap() else { return false };
        let nr = page.folio_nr_pages() as u32;
        {
            let mut inner = si.lock();
            let slot = if nr == 1 { inner.get_swap_page() } else { inner.get_swap_pages(nr) };
            let Some(slot) = slot else { return false };
            page.folio_ref_add(nr);
            page.set(PG_SWAPCACHE, &self.vm);
            page.set_anon(page.mapping(), anon_index(page.anon_slot(), Some(slot)));
            for i in 0..nr {
                inner.cache.insert(slot + i, pfn + i);
            }
        }
        page.set(PG_DIRTY, &self.vm);
        true
    }

    /// delete_from_swap_cache, folio locked: out of the swap cache, each
    /// slot's cache hold dropped (a slot is freed if no swap pte holds
    /// it), the cache's references put. The caller holds a reference too.
    pub(crate) fn delete_from_swap_cache(&self, page: &LockedPage) {
        let pfn = page.pfn();
        vm_bug_on_page!(!page.test(PG_SWAPCACHE), page, "delete_from_swap_cache of a page not in it");
        let (Some(si), Some(slot)) = (self.swap(), page.swap_slot()) else { return };
        let nr = page.folio_nr_pages() as u32;
        {
            let mut inner = si.lock();
            Self::__delete_from_swap_cache(&mut inner, pfn, slot, nr, || None);
            page.clear(PG_SWAPCACHE, &self.vm);
            page.set_anon(page.mapping(), anon_index(page.anon_slot(), None));
        }
        let last = page.folio_ref_sub_and_test(nr);
        vm_bug_on_page!(last, page, "the swap cache held a page's last reference");
    }

    /// __remove_mapping for a swap-cache folio, locked, clean, unmapped
    /// and isolated: freeze its count at exactly the cache's references
    /// and reclaim's one, so nobody holds or can take a reference, and
    /// take it out of the swap cache, all under the swap lock. The folio
    /// is then frozen at 0 and the caller frees it.
    pub(crate) fn remove_swap_mapping(&self, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        let (Some(si), Some(slot)) = (self.swap(), page.swap_slot()) else { return false };
        let nr = page.folio_nr_pages() as u32;
        let mut inner = si.lock();
        if page.test(PG_DIRTY) || !page.freeze(1 + nr) {
            return false;
        }
        // 5.9+ leaves a shadow (the multi-gen LRU's lru_gen_eviction,
        // whatever the anon preset).
        let shadows = self.config.tunables.anon_lru == crate::AnonLru::Linux5_9 || self.lru_gen_enabled();
        Self::__delete_from_swap_cache(&mut inner, pfn, slot, nr, || {
            shadows.then(|| self.workingset_eviction_page(pfn))
        });
        // Frozen at 0, but still locked, and a hazard-pinned waiter may be
        // setting PG_waiters on it now: an atomic clear, so that bit is not
        // lost and the unlock wakes the waiter.
        page.clear(PG_SWAPCACHE, &self.vm);
        true
    }

    /// __delete_from_swap_cache(folio, entry, shadow), the swap lock held:
    /// the `nr` entries of the folio at `pfn` leave the cache and each
    /// slot from `slot` loses the cache's hold. A slot a swap entry still
    /// holds gets the folio's shadow, if `shadow` gives one (asked once).
    fn __delete_from_swap_cache(
        inner: &mut crate::swapfile::SwapInner,
        pfn: Pfn,
        slot: u32,
        nr: u32,
        shadow: impl FnOnce() -> Option<usize>,
    ) {
        let mut shadow = Some(shadow);
        let mut left = None;
        for i in 0..nr {
            let removed = inner.cache.remove(&(slot + i));
            debug_assert_eq!(removed, Some(pfn + i));
            if inner.swapcache_free(slot + i) != 0 {
                if let Some(make) = shadow.take() {
                    left = make();
                }
                if let Some(s) = left {
                    inner.shadows.insert(slot + i, s);
                }
            }
        }
    }

    /// lookup_swap_cache: the frame caching `slot`, with a reference to
    /// its folio.
    pub(crate) fn lookup_swap_cache(&self, slot: u32) -> Option<Pfn> {
        let si = self.swap()?;
        let inner = si.lock();
        let pfn = *inner.cache.get(&slot)?;
        self.get_swapcache_folio(pfn);
        Some(pfn)
    }

    /// A reference to the folio of `pfn`, a frame the swap cache holds,
    /// the swap lock held. Folios are frozen only under this lock, and
    /// leave the cache in the same section, so a cached one always has a
    /// reference; and a folio in the swap cache is never split, so its
    /// head is stable.
    fn get_swapcache_folio(&self, pfn: Pfn) {
        self.page(self.arena.compound_head(pfn)).get();
    }

    /// folio_swapped: whether a swap pte holds any of the `nr` slots from
    /// `slot` (a folio's).
    fn folio_swapped(&self, slot: u32, nr: u32) -> bool {
        self.swap().is_some_and(|si| {
            let inner = si.lock();
            (slot..slot + nr).any(|s| inner.swap_count(s) != 0)
        })
    }

    /// try_to_free_swap, folio locked: a swap-cache folio no swap pte
    /// needs (none of its slots) leaves the cache and frees its slots;
    /// its only copy is now in memory, so it is dirty.
    pub(crate) fn try_to_free_swap(&self, page: &LockedPage) -> bool {
        let Some(slot) = page.swap_slot() else { return false };
        if !page.test(PG_SWAPCACHE) || page.test(PG_WRITEBACK) || self.folio_swapped(slot, page.folio_nr_pages() as u32)
        {
            return false;
        }
        self.delete_from_swap_cache(page);
        page.set(PG_DIRTY, &self.vm);
        true
    }

    /// reuse_swap_page, folio locked, at a write fault: the page may be
    /// written in place (it always may here: no fork, so no other process
    /// shares it). A swap-cache copy would be stale after the write, so
    /// the folio leaves the swap cache and its slots are freed; a large
    /// folio some of whose frames are still on swap stays in the cache,
    /// dirty, and is written to its slots again when reclaimed.
    pub(crate) fn reuse_swap_page(&self, page: &LockedPage) -> bool {
        if page.test(PG_SWAPCACHE) {
            self.try_to_free_swap(page);
        }
        page.set(PG_DIRTY, &self.vm);
        true
    }

    /// free_swap_and_cache: a swap pte holding `slot` went (munmap,
    /// MADV_DONTNEED). Drop its count; if only the swap cache holds the
    /// slot now, take the page out of the cache too, so the slot is free.
    pub(crate) fn free_swap_and_cache(&self, slot: u32) {
        let Some(si) = self.swap() else { return };
        let pfn = {
            let mut inner = si.lock();
            if inner.swap_free(slot) != SWAP_HAS_CACHE {
                return;
            }
            let Some(&pfn) = inner.cache.get(&slot) else { return };
            self.get_swapcache_folio(pfn);
            self.arena.compound_head(pfn)
        };
        // Bounded: a page lock is held across one transfer at most.
        let page = self.lock_page(pfn);
        let nr = page.folio_nr_pages() as u32;
        let holds = page.swap_slot().is_some_and(|first| (first..first + nr).contains(&slot));
        if page.test(PG_SWAPCACHE) && holds && !page.mapped() {
            self.try_to_free_swap(&page);
            // Nobody maps it: a page only the LRU still knows, reclaimed
            // (freed) when reclaim meets it.
            page.set_anon(NO_MAPPING, page.index());
        }
        page.unlock();
        self.put_page(pfn);
    }

    /// The second half of read_swap_cache_async, for a new page: make the
    /// locked page `pfn` the swap-cache page of `slot` if the slot is in
    /// use and not cached yet, in one swap-lock section.
    fn add_new_to_swap_cache(&self, slot: u32, pfn: Pfn) -> RaSlot {
        let Some(si) = self.swap() else { return RaSlot::Unused };
        let mut inner = si.lock();
        if let Some(&cached) = inner.cache.get(&slot) {
            self.get_swapcache_folio(cached);
            return RaSlot::Cached(cached);
        }
        if !inner.in_use(slot) {
            return RaSlot::Unused;
        }
        let page = self.page(pfn);
        // A fresh page: locked, anonymous, flagged for the swap cache and
        // on no list yet (lru_cache_add comes after its read).
        vm_bug_on_page!(
            !page.test(PG_LOCKED) || !page.test(PG_SWAPCACHE) || page.test(PG_LRU),
            page,
            "add_to_swap_cache of a page not fresh"
        );
        inner.set_has_cache(slot);
        page.get();
        inner.cache.insert(slot, pfn);
        RaSlot::Added(inner.shadows.remove(&slot))
    }

    /// A fresh page for a swap-in, locked, anonymous, not yet visible:
    /// for the faulted slot an allocation that may reclaim; for readahead
    /// only a free frame above the low watermark (readahead must not
    /// make memory pressure worse).
    fn alloc_swapin_page(&self, slot: u32, may_reclaim: bool) -> Result<Option<LockedPage<'_>>> {
        let pfn = if may_reclaim {
            self.alloc_page()?
        } else {
            if self.arena.nr_free_against(self.arena.watermarks.low) <= self.arena.watermarks.low {
                return Ok(None);
            }
            match self.arena.alloc() {
                Some(pfn) => {
                    self.vm.inc(Item::pgalloc);
                    pfn
                }
                None => return Ok(None),
            }
        };
        let page = self.page(pfn);
        page.set_nonatomic(PG_LOCKED | PG_SWAPBACKED | PG_SWAPCACHE);
        page.set_anon(NO_MAPPING, anon_index(0, Some(slot)));
        Ok(Some(LockedPage::adopt(page, pfn, &self.vm)))
    }

    /// Give back a page `alloc_swapin_page` made that did not go in.
    fn free_unused_swapin_page(&self, page: LockedPage) {
        // Never visible: no waiters, plain stores unlock.
        let pfn = page.into_raw();
        self.page(pfn).clear_nonatomic(PG_LOCKED | PG_SWAPCACHE);
        self.put_page(pfn);
    }

    /// swapin_readahead: the page of `target`, in the swap cache, with a
    /// reference, reading it (and the in-use, uncached slots of the
    /// aligned 2^page_cluster block around it) if it is not cached.
    /// Ok(None): the slot is no longer in use (the pte changed under us;
    /// the caller retries the fault). A failed read of the target is the
    /// error; failed readahead pages are dropped.
    pub(crate) fn swapin_readahead(&self, target: u32) -> Result<Option<Pfn>> {
        let Some(si) = self.swap() else { return Err(Error::InvalidArgument("swap is off".into())) };
        let cluster = 1u32 << self.sysctl.page_cluster().min(crate::tunables::MAX_PAGE_CLUSTER);
        let start = target & !(cluster - 1);
        let end = start.saturating_add(cluster).min(si.pages);
        // The faulted slot first: its allocation may reclaim.
        let Some(tpage) = self.alloc_swapin_page(target, true)? else { return Ok(None) };
        let mut shadows: Vec<(Pfn, usize)> = Vec::new();
        match self.add_new_to_swap_cache(target, tpage.pfn()) {
            RaSlot::Added(shadow) => shadows.extend(shadow.map(|s| (tpage.pfn(), s))),
            RaSlot::Cached(p) => {
                self.free_unused_swapin_page(tpage);
                return Ok(Some(p));
            }
            RaSlot::Unused => {
                self.free_unused_swapin_page(tpage);
                return Ok(None);
            }
        }
        // New pages, locked and cached, by slot.
        let mut new: Vec<(u32, LockedPage)> = Vec::with_capacity(cluster as usize);
        new.push((target, tpage));
        for slot in (start..end).filter(|&s| s != target) {
            let Ok(Some(page)) = self.alloc_swapin_page(slot, false) else { break };
            match self.add_new_to_swap_cache(slot, page.pfn()) {
                RaSlot::Added(shadow) => {
                    shadows.extend(shadow.map(|s| (page.pfn(), s)));
                    new.push((slot, page));
                }
                RaSlot::Cached(p) => {
                    self.put_page(p);
                    self.free_unused_swapin_page(page);
                }
                RaSlot::Unused => self.free_unused_swapin_page(page),
            }
        }
        self.swapin_refault(&shadows);
        new.sort_unstable_by_key(|&(slot, _)| slot);
        self.swapin_read(si, target, new)
    }

    /// workingset_refault for each page coming back (5.9+): within the
    /// workingset it goes straight to the active list.
    fn swapin_refault(&self, shadows: &[(Pfn, usize)]) {
        for &(pfn, shadow) in shadows {
            let (activate, restore) = self.workingset_refault_anon(shadow);
            let page = self.page(pfn);
            if activate {
                page.set(PG_ACTIVE, &self.vm);
                self.workingset_activation();
            }
            if restore {
                page.set(PG_WORKINGSET, &self.vm);
            }
        }
    }

    /// Read the new swap-cache pages `new` (locked, by slot), one device
    /// read per run of consecutive slots, and unlock them: uptodate ones
    /// go to the LRU, failed ones leave the swap cache. The target's page
    /// with its reference, or its read's error; the others' references
    /// are dropped.
    fn swapin_read(
        &self,
        si: &crate::swapfile::SwapInfo,
        target: u32,
        new: Vec<(u32, LockedPage)>,
    ) -> Result<Option<Pfn>> {
        let mut target_pfn = None;
        let mut target_err = None;
        let mut rest = new.into_iter().peekable();
        while let Some(first) = rest.next() {
            let mut run = vec![first];
            while let Some(next) = rest.next_if(|(s, _)| run.last().is_some_and(|(l, _)| *s == l + 1)) {
                run.push(next);
            }
            let pfns: Vec<Pfn> = run.iter().map(|(_, p)| p.pfn()).collect();
            let res = self.swap_read_pages(run[0].0, &pfns);
            for (slot, page) in run {
                let pfn = page.pfn();
                if slot == target {
                    target_pfn = Some(pfn);
                }
                if let Err(e) = &res {
                    // Not uptodate: out of the cache, so the next fault
                    // reads the slot again; its data is still there.
                    self.delete_from_swap_cache(&page);
                    if slot == target {
                        target_err = Some(Error::io(si.dev.name(), std::io::Error::from_raw_os_error(e.errno())));
                    }
                    page.unlock();
                    if slot != target {
                        self.put_page(pfn);
                    }
                    continue;
                }
                page.unlock();
                // Swapped-in pages start on the inactive anon list (5.9+:
                // unless their shadow activated them).
                self.lru_cache_add(pfn);
                if slot != target {
                    self.vm.inc(Item::swap_ra);
                    self.put_page(pfn);
                }
            }
        }
        match (target_pfn, target_err) {
            (Some(pfn), Some(e)) => {
                self.put_page(pfn);
                Err(e)
            }
            (pfn, None) => Ok(pfn),
            (None, Some(e)) => Err(e),
        }
    }
}

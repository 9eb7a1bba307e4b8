//! The reverse map (mm/rmap.c): from a page to the page table entries
//! that map it, and the operations reclaim, writeback and truncation run
//! over them: `page_referenced`, `try_to_unmap`, `page_mkclean`, and the
//! mapcount (`page_add_file_rmap`, `page_remove_rmap`). Plus the zap of a
//! range of one mapping (mm/memory.c `zap_page_range`, for munmap and
//! MADV_DONTNEED) and MADV_COLD's aging (mm/madvise.c).
//!
//! The walk is rmap_walk_file's: a file page at index i is mapped only by
//! the file's mappings that cover i, at slot i - pgoff, so the walk looks
//! at the inode's `i_mmap` list (the kernel's interval tree) and at one
//! entry of each mapping that covers the index. The walk holds `i_mmap`
//! read-locked (i_mmap_lock_read); entries change under the ptl.
//!
//! Every walk that changes entries runs under the page lock, as the
//! kernel's try_to_unmap and page_mkclean do, so that a fault (which
//! installs under the page lock) cannot map the page again halfway.
//! `page_referenced` only swaps young bytes and needs no lock.
//!
//! A large file folio is mapped page by page: each entry maps one frame of
//! it, and holds a reference to the folio (on its head, as every folio
//! reference). The head's mapcount counts the entries mapping any of its
//! frames (the kernel's folio mapcount; a page's own count is not kept),
//! so `mapped()` on the head says whether the folio is mapped, and the
//! walks above visit every index of the folio in each mapping
//! (`rmap_walk_folio`). NR_FILE_MAPPED counts the folio's pages from its
//! first entry to its last.
//!
//! Anonymous pages have a simpler map (no fork: one entry at most): the
//! page's `mapping` names its region (`PAGE_MAPPING_ANON | id`, looked up
//! in `Cache::anon`, mmap.rs's `AnonVmas`), its `index` the entry's slot. `try_to_unmap_anon`
//! turns the entry into the page's swap entry; zapping a swap entry frees
//! its slot (`free_swap_and_cache`).

use crate::mmdebug::{vm_bug_on, vm_bug_on_page};
use crate::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::filemap::Inode;
use crate::memory::ptep_get_and_clear;
use crate::mm::Cache;
use crate::mmap::{pte_pfn, pte_swap_slot, swp_pte, Vma, PTE_DIRTY, PTE_WRITE};
use crate::page::*;
use crate::vmstat::Item;
use crate::vmstat::NodeStat;

impl Cache {
    /// page_add_file_rmap: one more entry maps a frame of the folio
    /// headed by `head` (folio locked).
    pub(crate) fn page_add_file_rmap(&self, head: Pfn) {
        let page = self.page(head);
        vm_bug_on_page!(page.anon() || page.is_tail(), page, "page_add_file_rmap of an anonymous or tail page");
        if page.mapcount.fetch_add(1, Ordering::Relaxed) == 0 {
            self.node_stat.add(NodeStat::Mapped, page.folio_nr_pages() as i64);
        }
    }

    /// page_remove_rmap: one entry fewer (folio locked).
    pub(crate) fn page_remove_rmap(&self, head: Pfn) {
        let page = self.page(head);
        let old = page.mapcount.fetch_sub(1, Ordering::Relaxed);
        vm_bug_on_page!(old == 0 || page.is_tail(), page, "page_remove_rmap of an unmapped or tail page");
        if old == 1 {
            self.node_stat.sub(NodeStat::Mapped, page.folio_nr_pages() as i64);
        }
    }

    /// Drop the references of `n` entries just cleared, which mapped
    /// frames of the folio headed by `head`. The caller holds a reference
    /// of its own, so none of these is the last.
    pub(crate) fn put_pte_refs(&self, head: Pfn, n: u32) {
        for _ in 0..n {
            self.page_remove_rmap(head);
            let last = self.page(head).put_testzero();
            vm_bug_on_page!(last, self.page(head), "an entry held a page's last reference");
        }
    }

    /// rmap_walk_file for the folio headed by `head`, of `inode`: `f(vma,
    /// slot, frame)` for every slot of every mapping that covers one of
    /// the folio's indices, with the frame of the folio that belongs
    /// there (the entry maps the folio there if it maps that frame). `f`
    /// returns false to stop the walk. `i_mmap` is read-locked throughout.
    fn rmap_walk_folio(&self, inode: &Inode, head: Pfn, f: &mut dyn FnMut(&Vma, usize, Pfn) -> bool) {
        let page = self.page(head);
        let (first, nr) = (page.index(), page.folio_nr_pages());
        for vma in inode.i_mmap.read().iter() {
            let lo = first.max(vma.pgoff);
            let hi = (first + nr).min(vma.pgoff + vma.nr_pages);
            for index in lo..hi {
                if !f(vma, (index - vma.pgoff) as usize, head + (index - first) as Pfn) {
                    return;
                }
            }
        }
    }

    /// page_referenced: test and clear the young byte of every entry that
    /// maps `pfn`. Returns how many mappings referenced the page, and
    /// whether one of them is VM_EXEC. References through a
    /// MADV_SEQUENTIAL mapping are cleared but not counted
    /// (page_referenced_one: "Don't treat a reference through a
    /// sequentially read mapping as such").
    pub(crate) fn page_referenced(&self, inode: &Inode, pfn: Pfn) -> (u32, bool) {
        let page = self.page(pfn);
        if !page.mapped() {
            return (0, false);
        }
        let (mut referenced, mut exec) = (0, false);
        self.rmap_walk_folio(inode, pfn, &mut |vma, slot, frame| {
            if pte_pfn(vma.table.pte(slot).load(Ordering::Acquire)) != Some(frame) {
                return true;
            }
            // ptep_clear_flush_young: look first, so an old entry's byte
            // is not written (no cache line taken from the readers).
            let young = vma.table.young(slot);
            if young.load(Ordering::Relaxed) != 0 && young.swap(0, Ordering::Relaxed) != 0 && !vma.seq_read() {
                referenced += 1;
                exec |= vma.is_exec();
                // The multi-gen LRU scans the neighbours too (lru_gen.rs).
                self.lru_gen_look_around(vma, slot);
            }
            true
        });
        (referenced, exec)
    }

    /// try_to_unmap, page locked: clear every entry mapping the page, moving
    /// their dirty bits to the page and dropping their references. Unless
    /// `ignore_access` (truncation's TTU_IGNORE_ACCESS), an entry found
    /// young (used since page_referenced looked) stops the unmap, as the
    /// kernel's SWAP_FAIL: false, and reclaim activates the page. Entries
    /// cleared before that stay cleared.
    pub(crate) fn try_to_unmap(&self, inode: &Inode, page: &LockedPage<'_>, ignore_access: bool) -> bool {
        let pfn = page.pfn();
        if !page.mapped() {
            return true;
        }
        let (mut cleared, mut dirty, mut unmapped) = (0u32, false, true);
        self.rmap_walk_folio(inode, pfn, &mut |vma, slot, frame| {
            let _ptl = vma.ptl.lock();
            let pte = vma.table.pte(slot);
            if pte_pfn(pte.load(Ordering::Relaxed)) != Some(frame) {
                return true;
            }
            let young = vma.table.young(slot).swap(0, Ordering::Relaxed) != 0;
            if young && !ignore_access {
                unmapped = false;
                return false;
            }
            let old = ptep_get_and_clear(pte);
            vma.pte_removed();
            dirty |= old & PTE_DIRTY != 0;
            cleared += 1;
            true
        });
        if dirty && !page.test(PG_DIRTY) {
            self.set_page_dirty(inode, pfn);
        }
        self.put_pte_refs(pfn, cleared);
        self.vm.add(Item::pgunmap, cleared as u64);
        unmapped
    }

    /// page_mkclean, page locked (from clear_page_dirty_for_io, before
    /// writeback): write-protect and clean every entry mapping the page,
    /// so the next write through a mapping faults, waits for the writeback
    /// and dirties the page again. Returns whether an entry was dirty.
    pub(crate) fn page_mkclean(&self, inode: &Inode, page: &LockedPage<'_>) -> bool {
        let pfn = page.pfn();
        if !page.mapped() {
            return false;
        }
        let mut dirty = false;
        self.rmap_walk_folio(inode, pfn, &mut |vma, slot, frame| {
            let _ptl = vma.ptl.lock();
            let pte = vma.table.pte(slot);
            let e = pte.load(Ordering::Relaxed);
            if pte_pfn(e) == Some(frame) && e & (PTE_WRITE | PTE_DIRTY) != 0 {
                pte.store(e & !(PTE_WRITE | PTE_DIRTY), Ordering::Release);
                dirty |= e & PTE_DIRTY != 0;
            }
            true
        });
        dirty
    }

    /// zap_page_range: clear the entries of slots `[first, end)` of `vma`
    /// (munmap, MADV_DONTNEED). Each page is locked while its entry goes
    /// (the rule of mmap.rs); a dirty entry dirties the page, a young one
    /// is a mark_page_accessed unless the mapping is MADV_SEQUENTIAL
    /// (zap_pte_range), so a reference is not lost with the mapping.
    pub(crate) fn zap_page_range(&self, inode: &Inode, vma: &Vma, first: usize, end: usize) {
        for slot in first..end {
            let Some((pfn, head)) = self.get_mapped_folio(vma, slot, None) else { continue };
            let page = self.lock_page(head);
            let old = {
                let _ptl = vma.ptl.lock();
                let pte = vma.table.pte(slot);
                let old = (pte_pfn(pte.load(Ordering::Relaxed)) == Some(pfn)).then(|| ptep_get_and_clear(pte));
                if old.is_some() {
                    vma.pte_removed();
                }
                old
            };
            let mut accessed = false;
            if let Some(old) = old {
                let young = vma.table.young(slot).swap(0, Ordering::Relaxed) != 0;
                let cached = page.mapping() == inode.id;
                if old & PTE_DIRTY != 0 && cached && !page.test(PG_DIRTY) {
                    self.set_page_dirty(inode, head);
                }
                self.put_pte_refs(head, 1);
                accessed = young && cached && !vma.seq_read();
            }
            page.unlock();
            if accessed {
                self.mark_page_accessed(head);
            }
            self.put_page(head);
        }
    }

    /// The frame the entry at `slot` maps (`expect`, if given) and a
    /// reference to its folio, by the folio's head: (frame, head). None if
    /// the entry is empty or maps another frame. Read under the region's
    /// ptl, under which an entry's frame has a stable head: the entry's
    /// reference keeps its folio alive and unfrozen (removal and a file
    /// split need the folio unmapped), and an anonymous folio is split
    /// only under the ptl (huge_memory.rs).
    pub(crate) fn get_mapped_folio(&self, vma: &Vma, slot: usize, expect: Option<Pfn>) -> Option<(Pfn, Pfn)> {
        let _ptl = vma.ptl.lock();
        let pfn = pte_pfn(vma.table.pte(slot).load(Ordering::Relaxed))?;
        if expect.is_some_and(|e| e != pfn) {
            return None;
        }
        let head = self.arena.compound_head(pfn);
        let got = self.page(head).get_unless_zero();
        vm_bug_on_page!(!got, self.page(head), "a mapped folio at count 0");
        got.then_some((pfn, head))
    }

    /// MADV_COLD on slots `[first, end)`: clear the young bytes and
    /// deactivate the pages only this mapping maps (madvise_cold_pte_range
    /// skips shared pages). A large folio is looked at once, from its
    /// first slot in the range: it is this mapping's alone when every one
    /// of its entries (its mapcount) is in this mapping. Deviation: a clean
    /// page goes to the inactive tail (lru_deactivate_file_fn's move), not
    /// the head.
    pub(crate) fn madvise_cold(&self, inode: &Inode, vma: &Vma, first: usize, end: usize) {
        let mut slot = first;
        while slot < end {
            vma.table.young(slot).store(0, Ordering::Relaxed);
            let Some((pfn, head)) = self.get_mapped_folio(vma, slot, None) else {
                slot += 1;
                continue;
            };
            let page = self.page(head);
            let mapped_here = |s: usize| pte_pfn(vma.table.pte(s).load(Ordering::Acquire));
            let (exclusive, next) = if page.folio_order() == 0 {
                (mapped_here(slot) == Some(pfn) && page.mapcount.load(Ordering::Relaxed) == 1, slot + 1)
            } else {
                // A file folio (anonymous ones are in anonymous regions):
                // its slots in this mapping, from its first index's.
                let nr = page.folio_nr_pages() as i64;
                let s0 = page.index() as i64 - vma.pgoff as i64;
                let in_vma = s0.max(0) as usize..((s0 + nr).min(vma.nr_pages as i64)) as usize;
                let entries = in_vma.clone().filter(|&s| mapped_here(s) == Some(head + (s as i64 - s0) as Pfn)).count();
                let next = in_vma.end.min(end).max(slot + 1);
                for s in slot + 1..next {
                    vma.table.young(s).store(0, Ordering::Relaxed);
                }
                (entries > 0 && entries as u32 == page.mapcount.load(Ordering::Relaxed), next)
            };
            if exclusive {
                if page.test(PG_REFERENCED) {
                    page.clear(PG_REFERENCED, &self.vm);
                    self.clear_page_hot(inode, head);
                }
                self.deactivate_page(head);
            }
            self.put_page(head);
            slot = next;
        }
    }
}

/// The reverse map of anonymous pages. An anonymous page is mapped by one
/// entry at most (no fork, so no anon_vma chains): the entry at its slot
/// (`Page::anon_slot`) of the region its `mapping` names. The page lock
/// serialises everything that changes that entry or the page's identity.
/// An anonymous large folio (mTHP, memory.rs) is its head's identity: its
/// frame i is mapped, if at all, at the head's slot + i; each entry holds
/// a reference and a mapcount on the head, and counts one page in
/// NR_ANON_MAPPED, so a folio partly zapped counts what is still mapped.
impl Cache {
    /// Register a new anonymous region, giving it an id (anon_vma_prepare).
    pub(crate) fn anon_vma_register(&self, make: impl FnOnce(u32) -> Vma) -> Result<Arc<Vma>> {
        self.anon.register((PAGE_MAPPING_ANON - 1) as usize, make)
    }

    /// page_anon_vma, page locked: the region mapping an anonymous page.
    pub(crate) fn anon_vma_of(&self, pfn: Pfn) -> Option<Arc<Vma>> {
        let page = self.page(pfn);
        if !page.anon() {
            return None;
        }
        let id = page.mapping() & !PAGE_MAPPING_ANON;
        self.anon.get(id)
    }

    /// page_add_anon_rmap: one more entry maps a frame of the anonymous
    /// folio headed by `head` (locked).
    pub(crate) fn page_add_anon_rmap(&self, head: Pfn) {
        let page = self.page(head);
        vm_bug_on_page!(!page.anon() || !page.test(PG_SWAPBACKED), page, "page_add_anon_rmap of a file page");
        page.mapcount.fetch_add(1, Ordering::Relaxed);
        self.node_stat.add(NodeStat::AnonPages, 1);
    }

    /// page_remove_rmap of an anonymous folio, locked; drops the entry's
    /// reference, which is never the last (the caller holds one).
    fn page_remove_anon_rmap(&self, head: Pfn) {
        let old = self.page(head).mapcount.fetch_sub(1, Ordering::Relaxed);
        vm_bug_on_page!(old == 0, self.page(head), "page_remove_rmap of an unmapped anonymous page");
        self.node_stat.sub(NodeStat::AnonPages, 1);
        let last = self.page(head).put_testzero();
        vm_bug_on_page!(last, self.page(head), "an entry held an anonymous page's last reference");
    }

    /// page_referenced for an anonymous folio headed by `pfn`: test and
    /// clear the young byte of each of its entries. How many were young.
    pub(crate) fn page_referenced_anon(&self, vma: &Vma, pfn: Pfn) -> u32 {
        let page = self.page(pfn);
        let first = page.anon_slot();
        let end = (first + page.folio_nr_pages() as usize).min(vma.nr_pages as usize);
        let mut referenced = 0;
        for slot in first..end {
            if pte_pfn(vma.table.pte(slot).load(Ordering::Acquire)) != Some(pfn + (slot - first) as Pfn) {
                continue;
            }
            let young = vma.table.young(slot);
            if young.load(Ordering::Relaxed) != 0 && young.swap(0, Ordering::Relaxed) != 0 {
                referenced += 1;
                self.lru_gen_look_around(vma, slot);
            }
        }
        referenced
    }

    /// try_to_unmap of an anonymous folio, locked and in the swap cache:
    /// each entry mapping one of its frames becomes that frame's swap
    /// entry (its slot gains a count), a dirty bit goes to the folio.
    /// All under one hold of the ptl, and all or nothing: false, changing
    /// nothing, if an entry was used since `page_referenced_anon` looked.
    pub(crate) fn try_to_unmap_anon(&self, vma: &Vma, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        vm_bug_on_page!(
            !page.test(PG_LOCKED) || !page.test(PG_SWAPCACHE),
            page,
            "try_to_unmap_anon: not locked in the swap cache"
        );
        let (Some(swap), Some(si)) = (page.swap_slot(), self.swap()) else { return false };
        let first = page.anon_slot();
        let end = (first + page.folio_nr_pages() as usize).min(vma.nr_pages as usize);
        let (unmapped, dirty) = {
            let _ptl = vma.ptl.lock();
            let maps = |slot: &usize| {
                pte_pfn(vma.table.pte(*slot).load(Ordering::Relaxed)) == Some(pfn + (slot - first) as Pfn)
            };
            // Every young byte cleared (not only up to the first), as
            // page_referenced would have.
            let mut young = false;
            for s in (first..end).filter(maps) {
                young |= vma.table.young(s).swap(0, Ordering::Relaxed) != 0;
            }
            if young {
                return false;
            }
            let mut inner = si.lock();
            let (mut unmapped, mut dirty) = (0, false);
            for slot in (first..end).filter(maps) {
                let entry = swap + (slot - first) as u32;
                inner.swap_duplicate(entry);
                // AcqRel: ordered before the frame can be freed, as
                // ptep_get_and_clear (pte_pin's re-check then fails).
                let old = vma.table.pte(slot).swap(swp_pte(entry), Ordering::AcqRel);
                vma.pte_removed();
                dirty |= old & PTE_DIRTY != 0;
                unmapped += 1;
            }
            (unmapped, dirty)
        };
        if dirty {
            page.set(PG_DIRTY, &self.vm);
        }
        for _ in 0..unmapped {
            self.page_remove_anon_rmap(pfn);
        }
        self.vm.add(Item::pgunmap, unmapped as u64);
        true
    }

    /// zap_page_range on an anonymous region (munmap, MADV_DONTNEED):
    /// each present page is unmapped and, if nothing else holds it, freed;
    /// each swap entry's slot is freed (with its swap-cache page).
    pub(crate) fn zap_anon_range(&self, vma: &Vma, first: usize, end: usize) {
        let end = end.min(vma.nr_pages as usize);
        for slot in first..end {
            self.zap_anon_pte(vma, slot);
        }
        // Only a folio across an edge of the range can be left partly
        // mapped: split it now, so its zapped frames are freed (the
        // kernel's deferred split, done at once).
        for slot in [first.checked_sub(1), (end < vma.nr_pages as usize).then_some(end)].into_iter().flatten() {
            self.deferred_split_at(vma, slot);
        }
    }

    /// Split the anonymous large folio mapped at `slot` if some of its
    /// frames are no longer mapped.
    fn deferred_split_at(&self, vma: &Vma, slot: usize) {
        let Some((_, head)) = self.get_mapped_folio(vma, slot, None) else { return };
        let page = self.lock_page(head);
        // Not a folio in the swap cache (swapped out whole, some frames
        // faulted back): its cache entries name its frames, so it stays
        // whole until reclaim frees it or it leaves the cache.
        let partly = (page.mapcount.load(Ordering::Relaxed) as u64) < page.folio_nr_pages();
        if page.anon() && partly && !page.test(PG_SWAPCACHE) {
            self.split_anon_folio(vma, &page, None);
        }
        drop(page);
        self.put_page(head);
    }

    /// Zap one entry. Bounded: each retry follows a change of the entry
    /// by a racing fault or reclaim; a region being dropped has neither
    /// faults nor (after one swap-out) further changes.
    fn zap_anon_pte(&self, vma: &Vma, slot: usize) {
        let pte = vma.table.pte(slot);
        for _ in 0..8 {
            let e = pte.load(Ordering::Acquire);
            if let Some(seen) = pte_pfn(e) {
                let Some((pfn, head)) = self.get_mapped_folio(vma, slot, Some(seen)) else { continue };
                let page = self.lock_page(head);
                let cleared = {
                    let _ptl = vma.ptl.lock();
                    let old = (pte_pfn(pte.load(Ordering::Relaxed)) == Some(pfn)).then(|| ptep_get_and_clear(pte));
                    if old.is_some() {
                        vma.pte_removed();
                    }
                    old
                };
                let mut accessed = false;
                if cleared.is_some() {
                    let young = vma.table.young(slot).swap(0, Ordering::Relaxed) != 0;
                    if page.anon() {
                        self.page_remove_anon_rmap(head);
                        if page.test(PG_SWAPCACHE) {
                            self.try_to_free_swap(&page);
                        }
                        if !page.mapped() {
                            // Nobody maps it now: reclaim (or our put)
                            // frees it. A large folio partly zapped
                            // stays whole until its last entry goes.
                            page.set_anon(NO_MAPPING, page.index());
                        }
                    } else {
                        // A private mapping's read-only entry for a page of
                        // its file (never dirty: writes copied the page);
                        // young is a reference, as in zap_page_range.
                        self.put_pte_refs(head, 1);
                        accessed = young && !vma.seq_read();
                    }
                }
                page.unlock();
                if accessed {
                    self.mark_page_accessed(head);
                }
                self.put_page(head);
                if cleared.is_some() {
                    return;
                }
            } else if let Some(swap) = pte_swap_slot(e) {
                let cleared = {
                    let _ptl = vma.ptl.lock();
                    pte.compare_exchange(e, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
                };
                if cleared {
                    vma.table.young(slot).store(0, Ordering::Relaxed);
                    self.free_swap_and_cache(swap);
                    return;
                }
            } else {
                return;
            }
        }
    }

    /// zap_page_range on a private file mapping (munmap, MADV_DONTNEED):
    /// its copies go as an anonymous region's pages do (frames, swap
    /// slots), its entries for file pages as a shared mapping's do. The
    /// range then reads the file again.
    pub(crate) fn zap_cow_range(&self, _inode: &Inode, vma: &Vma, first: usize, end: usize) {
        vm_bug_on!(!vma.is_cow_mapping(), "zap_cow_range of a shared mapping");
        self.zap_anon_range(vma, first, end);
    }

    /// exit_mmap for an anonymous region: zap it all, then retire its id.
    pub(crate) fn exit_anon_vma(&self, vma: &Arc<Vma>) {
        self.zap_anon_range(vma, 0, vma.nr_pages as usize);
        self.anon_vma_unregister(vma);
    }

    /// Retire a region's anonymous id, once its pages are gone (reclaim
    /// no longer finds the region from a page).
    pub(crate) fn anon_vma_unregister(&self, vma: &Arc<Vma>) {
        self.anon.unregister(vma);
    }
}

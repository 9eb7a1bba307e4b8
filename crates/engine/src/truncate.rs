//! Truncation, hole punching and invalidation (mm/truncate.c).
//!
//! Pages are found in batches of PAGEVEC_SIZE with a gang lookup, each is
//! locked, waited out of writeback, stripped of its dirty state and deleted
//! from the page tree; then `pagevec_release` drops the lookup references.
//! onedrain, Linux 4.15: `pagevec_release` drains the per-CPU LRU batches (pages still
//! queued there hold references that delay their freeing), either on every
//! release (4.14-rc4) or once per pagevec lifecycle (default).
//!
//! Partial pages at the edges of the range are zeroed in place, not removed.

use crate::mmdebug::vm_bug_on_page;
use crate::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::*;
use crate::pagetree::{entry_order, entry_pfn, SHADOW_BIT};
use crate::pagevec::{PageVec, PAGEVEC_SIZE};
use crate::vmstat::NodeStat;

impl Cache {
    /// Gather up to PAGEVEC_SIZE pages of `[start, end)` with references
    /// (pagevec_lookup_entries). Returns the next index to look at.
    fn pagevec_lookup(&self, inode: &Inode, start: u64, end: u64, pv: &mut PageVec) -> Option<u64> {
        let mut found: [(u64, u32); PAGEVEC_SIZE] = [(0, 0); PAGEVEC_SIZE];
        let mut n = 0;
        inode.tree.for_each(start, end, None, &mut |idx, e| {
            if entry_pfn(e).is_some() {
                found[n] = (idx, entry_order(e));
                n += 1;
            }
            n < PAGEVEC_SIZE
        });
        if n == 0 {
            return None;
        }
        for &(idx, order) in &found[..n] {
            let nr = 1u64 << order;
            let first = idx & !(nr - 1);
            if order > 0 && (first < start || first + nr > end) {
                // The range's edge cuts through a large folio: it is split
                // (truncate_inode_partial_folio), and its pages inside the
                // range are looked up again as pages.
                if let Some(pfn) = self.find_get_single_page(inode, idx) {
                    self.put_page(pfn);
                }
                // `idx` is where the folio starts, maybe before the range.
                return Some(idx.max(start));
            }
            // A whole folio: its head, with the folio's reference.
            if let Some(pfn) = self.find_get_page(inode, idx) {
                if self.page(pfn).folio_order() != order {
                    // Split (or replaced) since the walk: look again.
                    self.put_page(pfn);
                    return Some(idx.max(start));
                }
                pv.add(pfn);
            }
        }
        Some(found[n - 1].0 + (1u64 << found[n - 1].1))
    }

    /// truncate_inode_pages_range: drop every page wholly inside the byte
    /// range `[lstart, lend)`; zero the parts of partial pages inside it.
    pub fn truncate_inode_pages_range(&self, inode: &Inode, lstart: u64, lend: u64) {
        if lstart >= lend {
            return;
        }
        let shift = self.page_shift();
        let ps = self.page_size() as u64;
        let start = lstart.div_ceil(ps);
        let end = lend >> shift; // whole pages: [start, end)
        let mut pv = PageVec::new();
        let mut locked = Vec::with_capacity(PAGEVEC_SIZE);
        let mut index = start;
        while index < end {
            let Some(next) = self.pagevec_lookup(inode, index, end, &mut pv) else {
                break;
            };
            // Lock the batch in index order and wait out its writeback...
            let mut batch = [NO_PFN; PAGEVEC_SIZE];
            for &pfn in pv.pages() {
                let page = self.lock_page(pfn);
                if page.mapping() == inode.id {
                    page.wait_on_writeback();
                    // unmap_mapping_range before the page goes: no entry
                    // may outlive the page's place in the cache.
                    self.try_to_unmap(inode, &page, true);
                    batch[locked.len()] = pfn;
                    locked.push(page);
                }
            }
            let n = locked.len();
            // ...delete it under one tree lock (delete_from_page_cache_batch),
            // unlock it...
            self.delete_from_page_cache_batch(inode, &locked);
            locked.clear();
            // ...and drop the cache's references, then the lookup's.
            self.release_pages(&batch[..n]);
            self.pagevec_release(&mut pv);
            index = next;
        }
        self.clear_shadows(inode, start, end);
        // The nodes this emptied go back now, not at the tree's next batch.
        inode.tree.reclaim_retired();
        // Partial pages at the edges.
        let first_page = lstart >> shift;
        let last_page = (lend - 1) >> shift;
        let start_partial = lstart & (ps - 1) != 0;
        if start_partial {
            let to = if last_page == first_page { lend } else { (first_page + 1) << shift };
            self.zero_page_range(inode, first_page, lstart, to);
        }
        if lend & (ps - 1) != 0 && !(start_partial && last_page == first_page) {
            self.zero_page_range(inode, last_page, lstart.max(last_page << shift), lend);
        }
    }

    /// Remove the workingset shadow entries of `[start, end)`: what was
    /// truncated is not a refault when it comes back.
    fn clear_shadows(&self, inode: &Inode, start: u64, end: u64) {
        let mut shadows = Vec::new();
        inode.tree.for_each(start, end, None, &mut |idx, e| {
            if e & SHADOW_BIT != 0 {
                shadows.push(idx);
            }
            true
        });
        if shadows.is_empty() {
            return;
        }
        let g = inode.tree_lock.lock();
        for idx in shadows {
            // Only if still a shadow: a page may have been read in since.
            if inode.tree.load(idx) & SHADOW_BIT != 0 {
                inode.tree.store(idx, 0, &g);
                self.node_stat.sub(NodeStat::Shadows, 1);
            }
        }
    }

    /// Zero bytes `[from, to)` of the cached page `index`, if cached.
    fn zero_page_range(&self, inode: &Inode, index: u64, from: u64, to: u64) {
        let Ok(Some(pfn)) = self.find_lock_page(inode, index) else {
            return;
        };
        let page = self.adopt_page_lock(pfn);
        if page.test(PG_UPTODATE) {
            page.wait_on_writeback();
            let base = index << self.page_shift();
            // Page locked and out of writeback: one write section.
            self.memzero_page(pfn, (from - base) as usize, (to - from) as usize);
        }
        page.unlock();
        self.put_page(pfn);
    }

    /// truncate_inode_page: drop one locked page, out of writeback, from
    /// `inode` and put the cache's reference (the caller keeps its own).
    /// False if the page had already left the mapping.
    pub fn truncate_inode_page(&self, inode: &Inode, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        vm_bug_on_page!(
            !page.test(PG_LOCKED) || page.test(PG_WRITEBACK),
            page,
            "truncating a page not locked or under writeback"
        );
        {
            let g = inode.tree_lock.lock();
            if page.mapping() != inode.id {
                return false;
            }
            self.__delete_from_page_cache(inode, pfn, 0, crate::policy::Removal::Truncated, &g);
        }
        self.put_page(pfn);
        true
    }

    /// delete_from_page_cache_batch: the pages are locked and in `inode`.
    fn delete_from_page_cache_batch(&self, inode: &Inode, pages: &[LockedPage<'_>]) {
        if pages.is_empty() {
            return;
        }
        let g = inode.tree_lock.lock();
        for page in pages {
            self.__delete_from_page_cache(inode, page.pfn(), 0, crate::policy::Removal::Truncated, &g);
        }
    }

    /// truncate_setsize + the device's truncate.
    pub fn truncate_inode(&self, inode: &Inode, len: u64) -> Result<()> {
        let _inval = inode.invalidate_lock.write();
        let set_len = |len| inode.dev.set_len(len).map_err(|e| crate::Error::io_at(&inode.name, len, e));
        let old = inode.size.load(Ordering::Acquire);
        if len > old {
            // Growing: the device first, so a size it refuses (EFBIG past
            // the file system's largest file, ENOSPC) changes nothing.
            set_len(len)?;
            inode.size.store(len, Ordering::Release);
            return Ok(());
        }
        inode.size.store(len, Ordering::Release);
        if len < old {
            let ps = self.page_size() as u64;
            self.truncate_inode_pages_range(inode, len, old.div_ceil(ps) * ps);
            self.unmap_cow_copies(inode, len.div_ceil(ps));
        }
        set_len(len)
    }

    /// truncate_pagecache's unmap_mapping_range(holebegin, 0, even_cows=1)
    /// for what the file's rmap cannot reach: the private mappings' copies
    /// (and their swap entries) of pages from `first` on, so an access
    /// past the new EOF faults and gets PastEof. One pass after the pages
    /// went is enough: a copy is installed under the lock of the file's
    /// page with i_size checked under it, so a fault that saw the old size
    /// finished before truncation could lock and remove that page.
    fn unmap_cow_copies(&self, inode: &Inode, first: u64) {
        // Out of i_mmap before zapping: the zap takes page locks, which
        // come before i_mmap in the lock order.
        let cows: Vec<_> = inode.i_mmap.read().iter().filter(|v| v.is_cow_mapping()).cloned().collect();
        for vma in cows {
            let from = first.saturating_sub(vma.pgoff).min(vma.nr_pages) as usize;
            self.zap_cow_range(inode, &vma, from, vma.nr_pages as usize);
        }
    }

    /// Hole punch: drop the cached range, then deallocate it on the device.
    /// Private mappings keep their copies of the hole's pages (the
    /// kernel's punch unmaps with even_cows = 0): only the file's pages
    /// are unmapped, through their rmap.
    pub fn punch_hole(&self, inode: &Inode, offset: u64, len: u64) -> Result<()> {
        let _inval = inode.invalidate_lock.write();
        let size = inode.size.load(Ordering::Acquire);
        let end = (offset + len).min(size);
        if offset >= end {
            return Ok(());
        }
        self.truncate_inode_pages_range(inode, offset, end);
        inode.dev.punch_hole(offset, end - offset).map_err(|e| crate::Error::io(&inode.name, e))
    }

    /// invalidate_mapping_pages: drop clean, unlocked, unpinned pages of
    /// the page range `[start, end)`; pages that cannot be dropped are
    /// deactivated instead. Returns pages dropped.
    pub fn invalidate_mapping_pages(&self, inode: &Arc<Inode>, start: u64, end: u64) -> u64 {
        let inode_arc = inode;
        let inode: &Inode = inode;
        let mut pv = PageVec::new();
        let mut index = start;
        let mut dropped = 0;
        while index < end {
            let Some(next) = self.pagevec_lookup(inode, index, end, &mut pv) else {
                break;
            };
            let mut frozen = Vec::with_capacity(PAGEVEC_SIZE);
            for &pfn in pv.pages() {
                let Some(page) = self.trylock_page(pfn) else {
                    continue;
                };
                // Only the cache's and our lookup reference may remain.
                if !page.test(PG_WRITEBACK) && self.freeze_for_removal(inode, pfn, 2) {
                    // Unlocked below, after the batch's hazard check.
                    frozen.push((page.into_raw(), inode_arc.clone()));
                } else {
                    page.unlock();
                    self.deactivate_file_page(pfn);
                }
            }
            let (mut removed, mut pinned) = (Vec::new(), Vec::new());
            self.finish_removal(&frozen, 2, false, &mut removed, &mut pinned);
            for pfn in removed {
                // Our lookup reference is the page's last.
                dropped += 1u64 << self.page(pfn).folio_order();
                self.page(pfn).unfreeze(1);
                self.adopt_page_lock(pfn).unlock();
            }
            for pfn in pinned {
                self.adopt_page_lock(pfn).unlock();
                self.deactivate_file_page(pfn);
            }
            self.pagevec_release(&mut pv);
            index = next;
        }
        dropped
    }

    /// Forget every page of an inode (evict_inode), writing nothing.
    pub fn truncate_inode_pages_final(&self, inode: &Inode) {
        self.truncate_inode_pages_range(inode, 0, !(self.page_size() as u64 - 1));
    }
}

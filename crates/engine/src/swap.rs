//! Per-CPU LRU batches and page aging (mm/swap.c).
//!
//! Touching lru_lock for every page would serialise every CPU, so LRU
//! operations are collected in per-CPU pagevecs of PAGEVEC_SIZE (15) pages
//! and applied under one lru_lock acquisition when a pagevec fills or is
//! drained (`lru_add_drain`). Each page in a pagevec holds a reference, so it
//! cannot be freed while it waits (the "extra atomic ops" Andrew Morton
//! pointed out in the thread of Danilov's patch, Linux 2.6.10).
//! Batches: lru_add, activate, rotate (to the
//! inactive tail), deactivate, and Danilov's whole-mark_page_accessed batch.
//!
//! With the multi-gen LRU on (lru_gen.rs), every move here goes through
//! `lruvec_add_folio`/`lruvec_del_folio`, which place the page in a
//! generation, and `mark_page_accessed` only counts the access
//! (`folio_inc_refs`).
//!
//! `mark_page_accessed` is the two-touch state machine of Linux 2.6 (Danilov, Harji/Piggin):
//!
//! | before                    | after                      |
//! |---------------------------|----------------------------|
//! | inactive, unreferenced    | inactive, referenced       |
//! | inactive, referenced      | active, unreferenced       |
//! | active, unreferenced      | active, referenced         |
//! | active, referenced        | (no change)                |
//!
//! Variants: `Immediate2610` activates under lru_lock at once (and,
//! like 2.6.10, only pages already on the LRU); `DanilovBatch` puts every
//! call in a per-CPU pagevec and applies the whole state machine under
//! lru_lock when it fills; `Batched` (today's Linux) sets PG_referenced
//! directly and batches only the activation. A page still in this CPU's
//! lru_add batch is activated by setting PG_active there
//! (`__lru_cache_activate_page`).
//!
//! Per-CPU batches are keyed by the CPU the caller runs on
//! (`sched_getcpu`); each has its own small lock, so a thread preempted and
//! migrated mid-operation is still correct. Lock order: a CPU's batch lock,
//! then lru_lock.

use crate::mm::Cache;
use crate::mmdebug::vm_bug_on_page;
use crate::page::*;
use crate::pagevec::{CpuBatches, PageVec, PerCpu, PAGEVEC_SIZE};
use crate::vmstat::Item;
use crate::{LruBatching, LruList, PagevecDrain};

#[derive(Clone, Copy)]
enum MoveFn {
    Activate,
    RotateTail,
    DeactivateFile,
    MarkAccessed,
}

impl Cache {
    fn this_cpu(&self) -> &PerCpu {
        &self.percpu[crate::percpu::current_cpu(self.percpu.len())]
    }

    /// lru_cache_add: queue a new page for the LRU (PG_active decides the
    /// list at drain time).
    pub fn lru_cache_add(&self, pfn: Pfn) {
        if self.policy.active() && self.policy_lru_add(pfn) {
            return;
        }
        self.lru_gen_fault_activate(pfn);
        let page = self.page(pfn);
        page.get();
        // A large folio goes to the lists at once (6.x's
        // folio_batch_add_and_move): 15 of them queued could hold a small
        // cache's every frame off the lists, out of reclaim's reach.
        let large = page.folio_order() > 0;
        let mut b = self.this_cpu().batches.lock();
        if b.lru_add.add(pfn) == 0 || large {
            let pv = b.lru_add.take();
            drop(b);
            self.pagevec_lru_add(&pv);
        }
    }

    /// __pagevec_lru_add: put the batch on the lists, drop batch references.
    fn pagevec_lru_add(&self, pv: &PageVec) {
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for &pfn in pv.pages() {
                let page = self.page(pfn);
                vm_bug_on_page!(page.test(PG_LRU), page, "lru_add of a page on a list");
                if self.admission_windowed() && page.flags() & (PG_ACTIVE | PG_UNEVICTABLE | PG_SWAPBACKED) == 0 {
                    // New file pages wait in the admission window.
                    page.set(PG_WINDOW, &self.vm);
                }
                page.set(PG_LRU, &self.vm);
                let list = LruList::of_flags(page.flags());
                // update_page_reclaim_stat (3.x): a new page counts as
                // scanned, and as rotated if it starts active.
                lru.reclaim_stat().note(list.file_idx(), list.is_active());
                self.lruvec_add_folio(&mut lru, pfn);
            }
            self.window_balance(&mut lru);
        }
        self.release_pages(pv.pages());
    }

    /// Apply `f` to every page of `pv` under one lru_lock acquisition, then
    /// drop the batch references (pagevec_lru_move_fn).
    fn pagevec_lru_move(&self, pv: &PageVec, f: MoveFn) {
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for &pfn in pv.pages() {
                let page = self.page(pfn);
                let flags = page.flags();
                match f {
                    MoveFn::Activate => {
                        if flags & PG_LRU != 0 && flags & (PG_ACTIVE | PG_UNEVICTABLE) == 0 {
                            self.__activate_page(&mut lru, pfn);
                        }
                    }
                    MoveFn::RotateTail => {
                        if flags & PG_LRU != 0 && flags & (PG_ACTIVE | PG_UNEVICTABLE) == 0 {
                            self.lruvec_del_folio(&mut lru, pfn);
                            self.lruvec_add_folio_tail(&mut lru, pfn);
                            self.vm.inc(Item::pgrotated);
                        }
                    }
                    MoveFn::DeactivateFile => {
                        if flags & PG_LRU != 0 && flags & PG_UNEVICTABLE == 0 {
                            self.lruvec_del_folio(&mut lru, pfn);
                            // With the multi-gen LRU, PG_active now says
                            // whether it was in a young generation.
                            let old = flags;
                            let flags = page.flags();
                            page.clear(PG_ACTIVE | PG_REFERENCED, &self.vm);
                            // Its count is no longer full (lru_gen.rs).
                            self.lru_gen_clear_hint(pfn, old);
                            if flags & (PG_DIRTY | PG_WRITEBACK) != 0 {
                                // Freed as soon as its writeback completes.
                                page.set(PG_RECLAIM, &self.vm);
                                self.lruvec_add_folio(&mut lru, pfn);
                            } else {
                                self.lruvec_add_folio_tail(&mut lru, pfn);
                                self.vm.inc(Item::pgrotated);
                            }
                            if flags & PG_ACTIVE != 0 {
                                self.vm.inc(Item::pgdeactivate);
                            }
                        }
                    }
                    MoveFn::MarkAccessed => {
                        // Danilov's __pagevec_mark_accessed.
                        if flags & PG_ACTIVE == 0 && flags & PG_REFERENCED != 0 && flags & PG_LRU != 0 {
                            self.__activate_page(&mut lru, pfn);
                            page.clear(PG_REFERENCED, &self.vm);
                        } else if flags & PG_REFERENCED == 0 {
                            page.set(PG_REFERENCED, &self.vm);
                        }
                    }
                }
            }
        }
        if matches!(f, MoveFn::DeactivateFile) && self.admission.hot_hints() {
            // PG_active and PG_referenced are gone: so is the hint.
            for &pfn in pv.pages() {
                if let Some(inode) = self.inode_by_id(self.page(pfn).mapping()) {
                    self.clear_page_hot(&inode, pfn);
                }
            }
        }
        self.release_pages(pv.pages());
    }

    /// __activate_page with lru_lock held: inactive to active.
    fn __activate_page(&self, lru: &mut crate::lruvec::LruGuard<'_>, pfn: Pfn) {
        let page = self.page(pfn);
        let flags = page.flags();
        self.lruvec_del_folio(lru, pfn);
        if flags & (PG_WINDOW | PG_PROBATION) != 0 {
            // Used twice: admitted whatever the sketch says.
            page.clear(PG_WINDOW | PG_PROBATION, &self.vm);
        }
        page.set(PG_ACTIVE, &self.vm);
        let list = LruList::of_flags(page.flags());
        self.lruvec_add_folio(lru, pfn);
        // update_page_reclaim_stat: an activation is a rotation.
        lru.reclaim_stat().note(list.file_idx(), true);
        self.vm.inc(Item::pgactivate);
        self.workingset_activation_nr(1 << page.folio_order());
    }

    /// Queue a per-CPU batched move of `pfn`.
    fn batch_move(&self, pfn: Pfn, f: MoveFn) {
        // The caller may hold only a hazard pin: never resurrect a page
        // whose last reference is gone.
        if !self.page(pfn).get_unless_zero() {
            return;
        }
        let mut b = self.this_cpu().batches.lock();
        let pv = match f {
            MoveFn::Activate => &mut b.activate,
            MoveFn::RotateTail => &mut b.rotate,
            MoveFn::DeactivateFile => &mut b.deactivate,
            MoveFn::MarkAccessed => &mut b.accessed,
        };
        // A large folio moves at once, as in lru_cache_add.
        if pv.add(pfn) == 0 || self.page(pfn).folio_order() > 0 {
            let full = pv.take();
            drop(b);
            self.pagevec_lru_move(&full, f);
        }
    }

    /// activate_page.
    pub fn activate_page(&self, pfn: Pfn) {
        match self.config.tunables.lru_batching {
            LruBatching::Immediate2610 => {
                let mut lru = self.lruvec.lock(&self.arena, &self.vm);
                let flags = self.page(pfn).flags();
                if flags & PG_LRU != 0 && flags & (PG_ACTIVE | PG_UNEVICTABLE) == 0 {
                    self.__activate_page(&mut lru, pfn);
                }
            }
            _ => {
                let flags = self.page(pfn).flags();
                if flags & PG_LRU != 0 && flags & (PG_ACTIVE | PG_UNEVICTABLE) == 0 {
                    self.batch_move(pfn, MoveFn::Activate);
                }
            }
        }
    }

    /// __lru_cache_activate_page: the page is not on the LRU yet; if it
    /// waits in this CPU's lru_add batch, make it go to the active list.
    fn lru_cache_activate_page(&self, pfn: Pfn) {
        let b = self.this_cpu().batches.lock();
        if b.lru_add.pages().iter().rev().any(|&p| p == pfn) {
            self.page(pfn).set(PG_ACTIVE, &self.vm);
        }
    }

    /// mark_page_accessed (see the module comment for the state machine).
    /// The caller holds a reference on the page. A page of a large folio
    /// marks the folio (folio_mark_accessed).
    #[inline]
    pub fn mark_page_accessed(&self, pfn: Pfn) {
        let pfn = self.arena.compound_head(pfn);
        self.vm.inc(Item::mark_page_accessed_calls);
        if self.lru_gen_enabled() {
            // folio_mark_accessed with the multi-gen LRU: count the
            // access; no list moves (lru_gen.rs).
            self.folio_inc_refs(pfn);
            return;
        }
        if self.policy.active() && self.policy_mark_accessed(pfn) {
            return;
        }
        let page = self.page(pfn);
        let flags = page.flags();
        if flags & PG_WINDOW != 0 {
            // In the admission window only the sketch counts a re-access;
            // the contest decides (admission.rs).
            if flags & PG_REFERENCED == 0 {
                page.set(PG_REFERENCED, &self.vm);
            }
            return;
        }
        match self.config.tunables.lru_batching {
            LruBatching::DanilovBatch => self.batch_move(pfn, MoveFn::MarkAccessed),
            LruBatching::Immediate2610 => {
                if flags & PG_ACTIVE == 0 && flags & PG_REFERENCED != 0 && flags & PG_LRU != 0 {
                    self.activate_page(pfn);
                    page.clear(PG_REFERENCED, &self.vm);
                } else if flags & PG_REFERENCED == 0 {
                    page.set(PG_REFERENCED, &self.vm);
                }
            }
            LruBatching::Batched => {
                if flags & (PG_ACTIVE | PG_UNEVICTABLE) == 0 && flags & PG_REFERENCED != 0 {
                    if flags & PG_LRU != 0 {
                        self.activate_page(pfn);
                    } else {
                        self.lru_cache_activate_page(pfn);
                    }
                    page.clear(PG_REFERENCED, &self.vm);
                } else if flags & PG_REFERENCED == 0 {
                    page.set(PG_REFERENCED, &self.vm);
                }
            }
        }
    }

    /// init_page_accessed: the first mark_page_accessed of a page nobody
    /// else can see yet, with a plain store.
    #[inline]
    pub fn init_page_accessed(&self, pfn: Pfn) {
        self.vm.inc(Item::init_page_accessed_calls);
        self.page(pfn).set_nonatomic(PG_REFERENCED);
    }

    /// rotate_reclaimable_page: writeback of a PG_reclaim page ended; move it
    /// to the inactive tail so reclaim frees it next.
    pub fn rotate_reclaimable_page(&self, pfn: Pfn) {
        if self.policy.active() && self.policy_rotate_reclaimable(pfn) {
            return;
        }
        let flags = self.page(pfn).flags();
        if flags & (PG_LOCKED | PG_DIRTY | PG_ACTIVE | PG_UNEVICTABLE) == 0 && flags & PG_LRU != 0 {
            self.batch_move(pfn, MoveFn::RotateTail);
        }
    }

    /// deactivate_file_page: a page invalidation could not drop; make it
    /// reclaimed soon.
    pub fn deactivate_file_page(&self, pfn: Pfn) {
        // "Some processes are using the page" (lru_deactivate_file_fn):
        // invalidation does not age a mapped page.
        if !self.page(pfn).mapped() {
            self.deactivate_page(pfn);
        }
    }

    /// deactivate_page (MADV_COLD): as deactivate_file_page, mapped or not.
    pub fn deactivate_page(&self, pfn: Pfn) {
        if self.policy.active() && !self.page(pfn).test(PG_SWAPBACKED) {
            // A plug-in's page: its policy decides (the list move would
            // also clear the PG_referenced its first use set, policy.rs).
            self.policy_deactivate(pfn);
            return;
        }
        if self.page(pfn).test(PG_LRU) {
            self.batch_move(pfn, MoveFn::DeactivateFile);
        }
    }

    fn drain_batches(&self, b: &mut CpuBatches) {
        if b.is_empty() {
            return;
        }
        let add = b.lru_add.take();
        if !add.is_empty() {
            self.pagevec_lru_add(&add);
        }
        for (pv, f) in [
            (b.rotate.take(), MoveFn::RotateTail),
            (b.deactivate.take(), MoveFn::DeactivateFile),
            (b.activate.take(), MoveFn::Activate),
            (b.accessed.take(), MoveFn::MarkAccessed),
        ] {
            if !pv.is_empty() {
                self.pagevec_lru_move(&pv, f);
            }
        }
    }

    /// lru_add_drain: apply this CPU's batches.
    pub fn lru_add_drain(&self) {
        self.vm.inc(Item::lru_drain);
        self.drain_this_cpu();
    }

    /// Apply this CPU's batches, not counted in `lru_drain`: for a
    /// background thread's own bookkeeping (the readahead thread after a
    /// window), which the drains an experiment counts per truncate or per
    /// reclaim pass must not include.
    pub(crate) fn drain_this_cpu(&self) {
        let mut b = self.this_cpu().batches.lock();
        self.drain_batches(&mut b);
    }

    /// lru_add_drain_all: apply every CPU's batches.
    pub fn lru_add_drain_all(&self) {
        self.vm.inc(Item::lru_drain_all);
        for pc in self.percpu.iter() {
            self.vm.inc(Item::lru_drain);
            let mut b = pc.batches.lock();
            self.drain_batches(&mut b);
        }
    }

    /// put_page: drop a reference; the last one frees the page.
    #[inline]
    pub fn put_page(&self, pfn: Pfn) {
        // A reference to any page of a folio is one to the folio (folio_put).
        let head = self.arena.compound_head(pfn);
        if self.page(head).put_testzero() {
            self.free_unref_pages(&[head]);
        }
    }

    /// release_pages: drop one reference on each page, freeing the ones that
    /// reach zero with one lru_lock acquisition for those still on a list.
    pub fn release_pages(&self, pages: &[Pfn]) {
        let mut to_free = [NO_PFN; PAGEVEC_SIZE];
        let mut n = 0;
        for &pfn in pages {
            let head = self.arena.compound_head(pfn);
            if self.page(head).put_testzero() {
                to_free[n] = head;
                n += 1;
                if n == PAGEVEC_SIZE {
                    self.free_unref_pages(&to_free[..n]);
                    n = 0;
                }
            }
        }
        if n > 0 {
            self.free_unref_pages(&to_free[..n]);
        }
    }

    /// __page_cache_release + free: pages whose count reached 0 leave the
    /// LRU and return to the arena.
    fn free_unref_pages(&self, pages: &[Pfn]) {
        if pages.iter().any(|&p| self.page(p).test(PG_LRU)) {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for &pfn in pages {
                let page = self.page(pfn);
                // PG_lru changes only under lru_lock, so this test is stable.
                if page.test(PG_LRU) {
                    self.lruvec_del_folio(&mut lru, pfn);
                    page.clear_frozen(PG_LRU);
                }
            }
        }
        self.free_pages(pages);
    }

    /// __pagevec_release: drain the per-CPU batches (once per lifecycle, or
    /// on every release in the 4.14-rc4 variant), then drop the references.
    pub fn pagevec_release(&self, pv: &mut PageVec) {
        self.vm.inc(Item::pagevec_release);
        let drain = match self.config.tunables.pagevec_drain {
            PagevecDrain::EveryRelease => true,
            PagevecDrain::Once => !pv.drained,
        };
        if drain {
            self.lru_add_drain();
            pv.drained = true;
        }
        self.release_pages(pv.pages());
        pv.reinit();
    }
}

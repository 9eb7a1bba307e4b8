//! The LRU lists of the (single) node and their lock (mm_inline.h,
//! struct lruvec).
//!
//! Lists are intrusive and doubly linked through `Page::lru_prev/lru_next`,
//! which only the holder of `lru_lock` touches. New and rotated-back pages
//! go to the head; reclaim takes from the tail (`list_add` and
//! `list_add_tail` as in the kernel). List lengths are mirrored in atomics
//! so that heuristics and vmstat read them without the lock.
//!
//! Beside the six classic lists sit the multi-gen LRU's (lru_gen.rs):
//! one list per generation and type (`lrugen->lists[gen][type]`, one zone
//! here), under the same lock. A page on one of them has its generation
//! in its flags (`LRU_GEN_MASK`), and the flags always name the list it
//! is on: generations change only under `lru_lock`, with the move. While
//! the multi-gen LRU holds the pages, the classic lists' lengths are kept
//! as the kernel keeps them for compatibility (`lru_gen_update_size`):
//! the two youngest generations count as active, the rest as inactive.

use crate::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::arena::Arena;
use crate::lru_gen::{lru_gen_from_seq, LruGenState, MAX_NR_GENS};
use crate::mmdebug::vm_bug_on_page;
use crate::page::{folio_lru_gen, Pfn, NO_PFN, PG_ACTIVE, PG_LRU, PG_SWAPBACKED, PG_UNEVICTABLE, PG_WINDOW};
use crate::vmstat::{Item, VmCounters};
use crate::LruList;

pub const NR_LRU_LISTS: usize = 6;
/// The multi-gen LRU's lists: MAX_NR_GENS generations of two types.
const NR_GEN_LISTS: usize = MAX_NR_GENS * 2;
const NR_LISTS: usize = NR_LRU_LISTS + NR_GEN_LISTS;

/// The index of generation `gen`'s list of `type` (0 anon, 1 file).
#[inline]
fn gen_list(gen: usize, typ: usize) -> usize {
    NR_LRU_LISTS + gen * 2 + typ
}

impl LruList {
    pub const ALL: [LruList; NR_LRU_LISTS] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
        LruList::Unevictable,
        LruList::Window,
    ];

    #[inline]
    pub fn idx(self) -> usize {
        self as usize
    }

    pub fn is_active(self) -> bool {
        matches!(self, LruList::ActiveAnon | LruList::ActiveFile)
    }

    /// is_file_lru, as reclaim_stat's index: 0 anon, 1 file (the
    /// admission window holds file pages).
    pub fn file_idx(self) -> usize {
        !matches!(self, LruList::InactiveAnon | LruList::ActiveAnon) as usize
    }

    /// The list a page belongs on, from its flags (page_lru()).
    #[inline]
    pub fn of_flags(flags: u32) -> LruList {
        if flags & PG_UNEVICTABLE != 0 {
            return LruList::Unevictable;
        }
        if flags & PG_WINDOW != 0 {
            return LruList::Window;
        }
        match (flags & PG_SWAPBACKED != 0, flags & PG_ACTIVE != 0) {
            (false, false) => LruList::InactiveFile,
            (false, true) => LruList::ActiveFile,
            (true, false) => LruList::InactiveAnon,
            (true, true) => LruList::ActiveAnon,
        }
    }
}

#[derive(Clone, Copy)]
struct ListHead {
    head: Pfn,
    tail: Pfn,
}

/// struct zone_reclaim_stat (3.x): pages reclaim scanned on each type's
/// lists lately, and those it found in use ("rotated": activated, or
/// referenced on the active list). Index 0 anon, 1 file. get_scan_count
/// weighs each type's priority by scanned/rotated, and halves both when
/// scanned passes a quarter of the type's pages, so the figures follow
/// recent behaviour. Under lru_lock.
#[derive(Default, Clone, Copy, Debug)]
pub struct ZoneReclaimStat {
    pub recent_scanned: [u64; 2],
    pub recent_rotated: [u64; 2],
}

impl ZoneReclaimStat {
    /// update_page_reclaim_stat: one page of type `file` scanned (added to
    /// the LRU or activated), and rotated if `rotated`.
    #[inline]
    pub fn note(&mut self, file: usize, rotated: bool) {
        self.recent_scanned[file] += 1;
        self.recent_rotated[file] += rotated as u64;
    }
}

/// The lists themselves; only reachable through the lock.
pub struct Lists {
    heads: [ListHead; NR_LISTS],
    lens: [u64; NR_LISTS],
    /// Pages on the multi-gen lists, all generations and types.
    gen_pages: u64,
    reclaim_stat: ZoneReclaimStat,
}

pub struct Lruvec {
    lock: Mutex<Lists>,
    lens: [AtomicU64; NR_LRU_LISTS],
    /// Each list's tail, mirrored like `lens` for lock-free heuristics
    /// (admission.rs); NO_PFN when empty.
    tails: [AtomicU64; NR_LRU_LISTS],
    /// The workingset clock: evictions plus activations (workingset.rs).
    pub inactive_age: AtomicU64,
    /// WORKINGSET_ACTIVATE_FILE as reclaim reads it: refaults activated.
    pub refaults_activated: AtomicU64,
    /// lruvec->refaults[WORKINGSET_FILE]: `refaults_activated` when the
    /// last reclaim invocation ended (snapshot_refaults, Linux6 only).
    pub refaults_snapshot: AtomicU64,
    /// The multi-gen LRU's sequence numbers and feedback (lru_gen.rs).
    pub lrugen: LruGenState,
}

/// lru_lock held.
pub struct LruGuard<'a> {
    lists: MutexGuard<'a, Lists>,
    lruvec: &'a Lruvec,
    arena: &'a Arena,
}

impl Lruvec {
    pub fn new() -> Lruvec {
        Lruvec::with_lrugen(LruGenState::new(&crate::Tunables::default()))
    }

    /// An lruvec whose multi-gen state is `lrugen`.
    pub fn with_lrugen(lrugen: LruGenState) -> Lruvec {
        Lruvec {
            lock: Mutex::new(Lists {
                heads: [ListHead { head: NO_PFN, tail: NO_PFN }; NR_LISTS],
                lens: [0; NR_LISTS],
                gen_pages: 0,
                reclaim_stat: ZoneReclaimStat::default(),
            }),
            lens: std::array::from_fn(|_| AtomicU64::new(0)),
            tails: std::array::from_fn(|_| AtomicU64::new(NO_PFN as u64)),
            inactive_age: AtomicU64::new(0),
            refaults_activated: AtomicU64::new(0),
            refaults_snapshot: AtomicU64::new(0),
            lrugen,
        }
    }

    /// spin_lock_irq(&lruvec->lru_lock), counted.
    pub fn lock<'a>(&'a self, arena: &'a Arena, vm: &VmCounters) -> LruGuard<'a> {
        vm.inc(Item::lru_lock_acquire);
        LruGuard { lists: self.lock.lock(), lruvec: self, arena }
    }

    /// Lock-free read of a list's length.
    #[inline]
    pub fn len(&self, lru: LruList) -> u64 {
        self.lens[lru.idx()].load(Ordering::Relaxed)
    }

    /// Lock-free read of a list's tail page: only a hint, the page may
    /// have moved or been freed by the time the caller looks at it.
    #[inline]
    pub fn tail_hint(&self, lru: LruList) -> Option<Pfn> {
        let t = self.tails[lru.idx()].load(Ordering::Relaxed) as Pfn;
        (t != NO_PFN).then_some(t)
    }
}

impl Default for Lruvec {
    fn default() -> Self {
        Self::new()
    }
}

impl LruGuard<'_> {
    pub fn len(&self, lru: LruList) -> u64 {
        self.lists.lens[lru.idx()]
    }

    /// The lruvec's reclaim_stat.
    pub fn reclaim_stat(&mut self) -> &mut ZoneReclaimStat {
        &mut self.lists.reclaim_stat
    }

    /// The page goes on (or comes off) `lru`: it is marked PG_LRU and its
    /// flags name that list (VM_BUG_ON_PAGE in the kernel's list helpers).
    #[inline]
    fn check_list(&self, pfn: Pfn, lru: LruList, what: &str) {
        let page = self.arena.page(pfn);
        page.check_flags(what);
        let f = page.flags();
        vm_bug_on_page!(
            f & PG_LRU == 0 || LruList::of_flags(f) != lru,
            page,
            "{what} {lru:?}: the page's flags say {:?}",
            (f & PG_LRU != 0).then(|| LruList::of_flags(f))
        );
    }

    /// Link `pfn` at the head (or the tail) of list `idx`.
    fn link(&mut self, pfn: Pfn, idx: usize, tail: bool) {
        let h = self.lists.heads[idx];
        let page = self.arena.page(pfn);
        if tail {
            page.lru_next.store(NO_PFN, Ordering::Relaxed);
            page.lru_prev.store(h.tail, Ordering::Relaxed);
            if h.tail != NO_PFN {
                self.arena.page(h.tail).lru_next.store(pfn, Ordering::Relaxed);
            }
            self.lists.heads[idx].tail = pfn;
            if h.head == NO_PFN {
                self.lists.heads[idx].head = pfn;
            }
        } else {
            page.lru_prev.store(NO_PFN, Ordering::Relaxed);
            page.lru_next.store(h.head, Ordering::Relaxed);
            if h.head != NO_PFN {
                self.arena.page(h.head).lru_prev.store(pfn, Ordering::Relaxed);
            }
            self.lists.heads[idx].head = pfn;
            if h.tail == NO_PFN {
                self.lists.heads[idx].tail = pfn;
            }
        }
        // Lengths count pages: a folio counts its size (folio_nr_pages).
        let nr = 1u64 << page.folio_order();
        self.lists.lens[idx] += nr;
        self.lists.gen_pages += (idx >= NR_LRU_LISTS) as u64 * nr;
    }

    /// Unlink `pfn` from list `idx`.
    fn unlink(&mut self, pfn: Pfn, idx: usize) {
        let page = self.arena.page(pfn);
        let prev = page.lru_prev.load(Ordering::Relaxed);
        let next = page.lru_next.load(Ordering::Relaxed);
        if prev != NO_PFN {
            self.arena.page(prev).lru_next.store(next, Ordering::Relaxed);
        } else {
            vm_bug_on_page!(self.lists.heads[idx].head != pfn, page, "delete from list {idx}: not on it");
            self.lists.heads[idx].head = next;
        }
        if next != NO_PFN {
            self.arena.page(next).lru_prev.store(prev, Ordering::Relaxed);
        } else {
            self.lists.heads[idx].tail = prev;
        }
        page.lru_prev.store(NO_PFN, Ordering::Relaxed);
        page.lru_next.store(NO_PFN, Ordering::Relaxed);
        let nr = 1u64 << page.folio_order();
        self.lists.lens[idx] -= nr;
        self.lists.gen_pages -= (idx >= NR_LRU_LISTS) as u64 * nr;
    }

    /// Mirror a classic list's length and tail in the atomics.
    fn mirror(&mut self, lru: LruList) {
        let i = lru.idx();
        self.lruvec.tails[i].store(self.lists.heads[i].tail as u64, Ordering::Relaxed);
        if self.lists.gen_pages == 0 {
            self.lruvec.lens[i].store(self.lists.lens[i], Ordering::Relaxed);
        } else {
            self.update_compat_sizes();
            let other = [LruList::Unevictable, LruList::Window];
            if other.contains(&lru) {
                self.lruvec.lens[i].store(self.lists.lens[i], Ordering::Relaxed);
            }
        }
    }

    /// add_page_to_lru_list: at the head (most recent end).
    pub fn add(&mut self, pfn: Pfn, lru: LruList) {
        self.check_list(pfn, lru, "add to");
        self.link(pfn, lru.idx(), false);
        self.mirror(lru);
    }

    /// add_page_to_lru_list_tail: at the tail, next in line for reclaim.
    pub fn add_tail(&mut self, pfn: Pfn, lru: LruList) {
        self.check_list(pfn, lru, "add to the tail of");
        self.link(pfn, lru.idx(), true);
        self.mirror(lru);
    }

    /// A folio on `lru` became `nr` single pages' worth smaller in place
    /// (split_folio: the head stays, now one page; its tails are added
    /// one by one).
    pub fn shrink_folio_len(&mut self, lru: LruList, nr: u64) {
        self.lists.lens[lru.idx()] -= nr;
        self.mirror(lru);
    }

    /// del_page_from_lru_list.
    pub fn del(&mut self, pfn: Pfn, lru: LruList) {
        let page = self.arena.page(pfn);
        // PG_LRU may already be clear (a page freed off the list), but the
        // flags still name the list it is on.
        vm_bug_on_page!(LruList::of_flags(page.flags()) != lru, page, "delete from {lru:?}: not its list");
        self.unlink(pfn, lru.idx());
        self.mirror(lru);
    }

    // ---- the multi-gen LRU's lists (lru_gen.rs) ----

    /// Pages on generation `gen`'s list of `typ` (lrugen->nr_pages).
    pub fn gen_len(&self, gen: usize, typ: usize) -> u64 {
        self.lists.lens[gen_list(gen, typ)]
    }

    /// Link a page whose flags already carry generation `gen` at the head
    /// (or the tail: next to be scanned) of that generation's list.
    pub fn gen_add(&mut self, pfn: Pfn, gen: usize, typ: usize, tail: bool) {
        let page = self.arena.page(pfn);
        vm_bug_on_page!(folio_lru_gen(page.flags()) != Some(gen), page, "gen_add to {gen}: the flags say otherwise");
        self.link(pfn, gen_list(gen, typ), tail);
        self.update_compat_sizes();
    }

    /// Unlink a page from generation `gen`'s list (the flags still name it).
    pub fn gen_del(&mut self, pfn: Pfn, gen: usize, typ: usize) {
        let page = self.arena.page(pfn);
        vm_bug_on_page!(folio_lru_gen(page.flags()) != Some(gen), page, "gen_del from {gen}: the flags say otherwise");
        self.unlink(pfn, gen_list(gen, typ));
        self.update_compat_sizes();
    }

    /// As `shrink_folio_len`, for a folio on generation `gen`'s list of
    /// `typ`.
    pub fn gen_shrink_folio_len(&mut self, gen: usize, typ: usize, nr: u64) {
        self.lists.lens[gen_list(gen, typ)] -= nr;
        self.lists.gen_pages -= nr;
        self.update_compat_sizes();
    }

    /// The oldest page of generation `gen`'s list of `typ`.
    pub fn gen_tail(&self, gen: usize, typ: usize) -> Option<Pfn> {
        let t = self.lists.heads[gen_list(gen, typ)].tail;
        (t != NO_PFN).then_some(t)
    }

    /// Generation `gen`'s list of `typ` from head (newest) to tail.
    pub fn gen_collect(&self, gen: usize, typ: usize) -> Vec<Pfn> {
        self.collect_idx(gen_list(gen, typ))
    }

    /// The classic lists' lengths while the multi-gen LRU holds the pages
    /// (lru_gen_update_size, inc_max_seq): pages in the two youngest
    /// generations count as active, the others as inactive.
    pub fn update_compat_sizes(&mut self) {
        let max_seq = self.lruvec.lrugen.max_seq.load(Ordering::Relaxed);
        let young = [lru_gen_from_seq(max_seq), lru_gen_from_seq(max_seq.wrapping_sub(1))];
        for (typ, inactive, active) in
            [(0, LruList::InactiveAnon, LruList::ActiveAnon), (1, LruList::InactiveFile, LruList::ActiveFile)]
        {
            let total: u64 = (0..MAX_NR_GENS).map(|g| self.gen_len(g, typ)).sum();
            let act: u64 = young.iter().map(|&g| self.gen_len(g, typ)).sum();
            let classic_inactive = self.lists.lens[inactive.idx()];
            let classic_active = self.lists.lens[active.idx()];
            self.lruvec.lens[inactive.idx()].store(classic_inactive + total - act, Ordering::Relaxed);
            self.lruvec.lens[active.idx()].store(classic_active + act, Ordering::Relaxed);
        }
    }

    /// The page at the tail (oldest), if any.
    pub fn tail(&self, lru: LruList) -> Option<Pfn> {
        let t = self.lists.heads[lru.idx()].tail;
        (t != NO_PFN).then_some(t)
    }

    /// The page before `pfn` (towards the head).
    pub fn prev(&self, pfn: Pfn) -> Option<Pfn> {
        let p = self.arena.page(pfn).lru_prev.load(Ordering::Relaxed);
        (p != NO_PFN).then_some(p)
    }

    /// Walk a list from the head, for tests and tools.
    pub fn collect(&self, lru: LruList) -> Vec<Pfn> {
        self.collect_idx(lru.idx())
    }

    fn collect_idx(&self, idx: usize) -> Vec<Pfn> {
        let mut v = Vec::with_capacity(self.lists.lens[idx] as usize);
        let mut p = self.lists.heads[idx].head;
        while p != NO_PFN {
            v.push(p);
            p = self.arena.page(p).lru_next.load(Ordering::Relaxed);
        }
        v
    }
}

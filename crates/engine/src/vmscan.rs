//! Page reclaim (mm/vmscan.c).
//!
//! Free frames are kept between watermarks. When an allocation finds fewer
//! than `low` free, it wakes kswapd, which reclaims until `high` are free
//! (`balance_pgdat`). An allocation that finds fewer than `min` reclaims
//! directly (`try_to_free_pages`, counted in `allocstall`).
//!
//! A streaming reader would otherwise do nearly all of its own reclaim:
//! a readahead window is far larger than the watermarks' gap, so each
//! window found fewer than its pages free and reclaimed them itself. So
//! readahead also wakes kswapd early, asking it to keep two windows'
//! worth free above `high` (`wakeup_kswapd_ra`, a per-stream form of the
//! kernel's watermark_boost): kswapd frees the next window's room on
//! another CPU while the reader copies this one.
//!
//! Either way reclaim scans at a priority from DEF_PRIORITY (12) down to 0:
//! at priority p it scans `list_size >> p` pages of each list, in batches of
//! SWAP_CLUSTER_MAX (32), until enough are reclaimed.
//!
//! ```text
//!   new pages ──> inactive head ... inactive tail ──> reclaimed
//!                  ^     (mark_page_accessed x2)  |
//!                  |                              v
//!   deactivated <── active tail ... active head <─┘ activated
//! ```
//!
//! `shrink_active_list` runs only while the inactive list is too small
//! (`inactive_list_is_low`: inactive * ratio < active, ratio =
//! sqrt(10 * GiB of the two lists), 1 below 1 GiB); it moves pages from the
//! active tail to the inactive head, keeping their PG_referenced.
//! `shrink_inactive_list` isolates pages from the inactive tail and decides
//! for each (`shrink_page_list`): locked, under writeback or pinned pages
//! are kept; PG_referenced is tested and cleared, and an unmapped file page
//! that had it is still reclaimed if clean (PAGEREF_RECLAIM_CLEAN: "vmscan
//! throws away page cache pages with PageReferenced set, unless they are
//! mapped", the Harji/Piggin thread, Linux 2.6.20); dirty pages are
//! written first (3.1) or left to the
//! flushers and tagged PG_reclaim (the Linux 3.2 reclaim-writeback series); clean pages are frozen,
//! removed from their mapping and freed.

use crate::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::filemap::Inode;
use crate::lruvec::{LruGuard, NR_LRU_LISTS};
use crate::mm::Cache;
use crate::mmdebug::vm_bug_on_page;
use crate::page::*;
use crate::tunables::{MappedActivation, MthpSwapout, ReclaimWriteback, WorkingsetVersion};
use crate::vmstat::Item;
use crate::wait::Wakeup;
use crate::LruList;

pub const DEF_PRIORITY: i32 = 12;
pub const SWAP_CLUSTER_MAX: u64 = 32;
/// The inactive file pages kswapd isolates at once in a pass boosted by
/// readahead (deviation: the kernel's kswapd isolates SWAP_CLUSTER_MAX).
/// Removing a batch from the page cache costs one hazard scan and one
/// membarrier (hazard.rs) whatever its size; in a cold stream, in 32-page
/// batches, that was about half of kswapd's CPU. The pages a stream
/// leaves are used once and come off the list's tail in order, so a
/// larger batch changes which pages go by nothing but its size.
pub const KSWAPD_RA_BATCH: u64 = 128;
/// Shadow-node queue entries the shrinker looks at per shrink_node.
const SHADOW_SCAN_BATCH: usize = 128;

/// struct scan_control.
pub struct ScanControl {
    pub nr_to_reclaim: u64,
    pub priority: i32,
    pub nr_scanned: u64,
    pub nr_reclaimed: u64,
    /// Pages scanned by the last isolation.
    pub last_scanned: u64,
    pub kswapd: bool,
    /// sc->may_deactivate & DEACTIVATE_FILE (Linux6): set per shrink_node.
    pub may_deactivate_file: bool,
    /// Inactive file pages isolated per shrink_inactive_list call
    /// (SWAP_CLUSTER_MAX, except kswapd's boosted passes: `KSWAPD_RA_BATCH`).
    pub file_batch: u64,
}

impl ScanControl {
    pub fn new(nr_to_reclaim: u64, kswapd: bool) -> ScanControl {
        ScanControl {
            nr_to_reclaim,
            priority: DEF_PRIORITY,
            nr_scanned: 0,
            nr_reclaimed: 0,
            last_scanned: 0,
            kswapd,
            may_deactivate_file: false,
            file_batch: SWAP_CLUSTER_MAX,
        }
    }
}

/// What shrink_page_list met.
#[derive(Default)]
pub(crate) struct ReclaimStat {
    nr_dirty: u64,
    nr_writeback: u64,
}

/// What shrink_anon_page decided.
enum AnonVerdict {
    /// Handled and unlocked: pages freed (0, or the folio's).
    Done(u64),
    /// Locked, unmapped, dirty, in the swap cache: to be written.
    Pageout,
}

/// page_check_references' verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageRefs {
    /// PAGEREF_ACTIVATE: to the active list.
    Activate,
    /// PAGEREF_KEEP: another trip round the inactive list.
    Keep,
    Reclaim,
    /// Referenced but unmapped: reclaim it if it is clean.
    ReclaimClean,
}

/// A small memo from mapping id to inode, so a batch looks each up once.
struct InodeMemo(Option<Arc<Inode>>);

impl InodeMemo {
    fn get(&mut self, cache: &Cache, id: u32) -> Option<Arc<Inode>> {
        if let Some(i) = &self.0 {
            if i.id == id {
                return Some(i.clone());
            }
        }
        self.0 = cache.inode_by_id(id);
        self.0.clone()
    }
}

impl Cache {
    /// inactive_list_is_low for the file lists.
    pub fn inactive_is_low(&self) -> bool {
        let inactive = self.lruvec.len(LruList::InactiveFile);
        let active = self.lruvec.len(LruList::ActiveFile);
        let gb = ((inactive + active) * self.page_size() as u64) >> 30;
        let ratio = if gb > 0 { ((10 * gb) as f64).sqrt() as u64 } else { 1 };
        inactive * ratio < active
    }

    /// inactive_anon_is_low (3.x): the inactive anon list is too small for
    /// the active one, by the zone's inactive_ratio (sqrt(10 x GiB of
    /// memory), at least 1). Never without swap: anonymous pages are then
    /// not aged at all.
    pub fn inactive_anon_is_low(&self) -> bool {
        if self.total_swap_pages() == 0 {
            return false;
        }
        let inactive = self.lruvec.len(LruList::InactiveAnon);
        let active = self.lruvec.len(LruList::ActiveAnon);
        let gb = (self.arena.nr_pages * self.page_size() as u64) >> 30;
        // 5.9's "make active/inactive ratio as 1:1 for anon lru".
        let linux3 = self.config.tunables.anon_lru == crate::AnonLru::Linux3;
        let ratio = if gb > 0 && linux3 { ((10 * gb) as f64).sqrt() as u64 } else { 1 };
        inactive * ratio < active
    }

    /// get_scan_count (3.2): how many pages of each list to scan at this
    /// priority, indexed by `LruList::idx` (the admission window counts
    /// with the inactive file list).
    ///
    /// - No swap (or none free): only file pages, `size >> priority`.
    /// - File plus free pages at or below the high watermark: only anon
    ///   ("force-scan anon": the file pages cannot bring the zone back).
    /// - Otherwise each type gets `size >> priority` scaled by its share:
    ///   anon_prio = swappiness, file_prio = 200 - swappiness, each
    ///   weighted by (recent_scanned + 1) / (recent_rotated + 1) of its
    ///   reclaim_stat, so a type whose scanned pages keep proving in use
    ///   is scanned less; the denominator is ap + fp + 1. At priority 0
    ///   every page is a target.
    pub fn get_scan_count(&self, sc: &ScanControl) -> [u64; NR_LRU_LISTS] {
        let prio = sc.priority as u32;
        let len = |l| self.lruvec.len(l);
        let file_inactive = len(LruList::InactiveFile) + len(LruList::Window);
        let anon = len(LruList::InactiveAnon) + len(LruList::ActiveAnon);
        let file = file_inactive + len(LruList::ActiveFile);
        let noswap = self.nr_swap_pages() == 0;
        let (fraction, denominator) = if noswap {
            ([0, 1], 1)
        } else if file + self.nr_free_pages() <= self.arena.watermarks.high {
            ([1, 0], 1)
        } else {
            let anon_prio = self.sysctl.swappiness().min(100) as u64;
            let file_prio = 200 - anon_prio;
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            let rs = lru.reclaim_stat();
            for (t, size) in [(0, anon), (1, file)] {
                if rs.recent_scanned[t] > size / 4 {
                    rs.recent_scanned[t] /= 2;
                    rs.recent_rotated[t] /= 2;
                }
            }
            let ap = (anon_prio + 1) * (rs.recent_scanned[0] + 1) / (rs.recent_rotated[0] + 1);
            let fp = (file_prio + 1) * (rs.recent_scanned[1] + 1) / (rs.recent_rotated[1] + 1);
            ([ap, fp], ap + fp + 1)
        };
        let mut nr = [0u64; NR_LRU_LISTS];
        for (list, size) in [
            (LruList::InactiveAnon, len(LruList::InactiveAnon)),
            (LruList::ActiveAnon, len(LruList::ActiveAnon)),
            (LruList::InactiveFile, file_inactive),
            (LruList::ActiveFile, len(LruList::ActiveFile)),
        ] {
            let mut scan = size;
            if prio > 0 || noswap {
                scan >>= prio;
                scan = scan * fraction[list.file_idx()] / denominator;
            }
            nr[list.idx()] = scan;
        }
        nr
    }

    /// Direct reclaim (try_to_free_pages / do_try_to_free_pages).
    pub fn try_to_free_pages(&self) -> u64 {
        self.vm.inc(Item::allocstall);
        let nr = if self.policy.active() { self.config.tunables.reclaim_batch as u64 } else { SWAP_CLUSTER_MAX };
        self.reclaim_pages(nr, false)
    }

    /// Reclaim up to `nr` pages at falling priority, as a direct reclaimer
    /// (or as kswapd). Returns pages reclaimed.
    pub fn reclaim_pages(&self, nr: u64, kswapd: bool) -> u64 {
        let mut sc = ScanControl::new(nr, kswapd);
        // do_try_to_free_pages' `while (--sc->priority >= 0)`: the
        // multi-gen LRU may lower the start (set_initial_priority).
        while sc.priority >= 0 {
            self.shrink_node(&mut sc);
            if sc.nr_reclaimed >= sc.nr_to_reclaim {
                break;
            }
            sc.priority -= 1;
        }
        // do_try_to_free_pages' end (Linux6).
        self.snapshot_refaults();
        sc.nr_reclaimed
    }

    /// shrink_node / shrink_lruvec (3.x's shrink_zone): scan each list
    /// by get_scan_count's targets, in batches of SWAP_CLUSTER_MAX.
    pub fn shrink_node(&self, sc: &mut ScanControl) {
        if self.policy.active() {
            // The plug-in chooses the file pages (policy.rs).
            self.policy_shrink_node(sc);
            self.shrink_slab();
            return;
        }
        if self.lru_gen_enabled() {
            // The multi-gen LRU's own shrink_node (lru_gen.rs).
            self.lru_gen_shrink_node(sc);
            self.shrink_slab();
            return;
        }
        let linux6 = self.config.tunables.workingset_version == WorkingsetVersion::Linux6;
        if linux6 {
            // prepare_scan_count: "When refaults are being observed, it
            // means a new workingset is being established. Deactivate to
            // get rid of any stale active pages quickly."
            let refaults = self.lruvec.refaults_activated.load(Ordering::Relaxed);
            let snapshot = self.lruvec.refaults_snapshot.load(Ordering::Relaxed);
            sc.may_deactivate_file = refaults != snapshot || self.inactive_is_low();
        }
        let nr = self.get_scan_count(sc);
        let mut nr_inactive_anon = nr[LruList::InactiveAnon.idx()];
        let mut nr_active_anon = nr[LruList::ActiveAnon.idx()];
        let mut nr_inactive = nr[LruList::InactiveFile.idx()];
        let mut nr_active = nr[LruList::ActiveFile.idx()];
        // 3.x's loop: for_each_evictable_lru (anon lists first) while
        // inactive anon or either file list has a target left.
        while nr_inactive_anon > 0 || nr_inactive > 0 || nr_active > 0 {
            if nr_inactive_anon > 0 {
                let n = nr_inactive_anon.min(SWAP_CLUSTER_MAX);
                nr_inactive_anon -= n;
                self.shrink_inactive_list(n, LruList::InactiveAnon, sc);
            }
            if nr_active_anon > 0 {
                let n = nr_active_anon.min(SWAP_CLUSTER_MAX);
                nr_active_anon -= n;
                if self.inactive_anon_is_low() {
                    self.shrink_active_list(n, LruList::ActiveAnon, sc);
                }
            }
            if nr_inactive > 0 {
                let n = nr_inactive.min(sc.file_batch);
                nr_inactive -= n;
                self.shrink_inactive_list(n, LruList::InactiveFile, sc);
            }
            if nr_active > 0 {
                let n = nr_active.min(SWAP_CLUSTER_MAX);
                nr_active -= n;
                // shrink_list: 3.15 asks inactive_list_is_low per batch;
                // Linux6 uses the decision made once above.
                let deactivate = if linux6 { sc.may_deactivate_file } else { self.inactive_is_low() };
                if deactivate {
                    self.shrink_active_list(n, LruList::ActiveFile, sc);
                }
            }
            if sc.nr_reclaimed >= sc.nr_to_reclaim {
                break;
            }
        }
        // "Even if we did not try to evict anon pages at all, we want to
        // rebalance the anon lru active/inactive ratio" (shrink_zone). No
        // file rebalancing here: as every version since 2.6.28, the file
        // lists are balanced inside the loop above.
        if self.inactive_anon_is_low() {
            self.shrink_active_list(SWAP_CLUSTER_MAX, LruList::ActiveAnon, sc);
        }
        self.shrink_slab();
    }

    /// shrink_slab's part here: the shadow-node shrinker and the inode
    /// shrinker.
    fn shrink_slab(&self) {
        self.shrink_shadow_nodes(SHADOW_SCAN_BATCH);
        self.prune_icache(crate::filemap::PRUNE_ICACHE_BATCH);
    }

    /// isolate_lru_pages: take up to `nr` pages from the tail of `lru`,
    /// each with a reference and PG_lru cleared. Returns pages scanned.
    fn isolate_lru_pages(&self, lru: &mut LruGuard<'_>, list: LruList, nr: u64, out: &mut Vec<Pfn>) -> u64 {
        let mut scanned = 0;
        let mut cur = lru.tail(list);
        while let Some(pfn) = cur {
            if scanned >= nr {
                break;
            }
            cur = lru.prev(pfn);
            let page = self.page(pfn);
            // Counted in pages: a folio scans its size.
            scanned += 1u64 << page.folio_order();
            // A page at count 0 is being freed and waits for lru_lock to
            // leave the list: skip it.
            if !page.get_unless_zero() {
                continue;
            }
            lru.del(pfn, list);
            let was_lru = page.test_clear(PG_LRU, &self.vm);
            vm_bug_on_page!(!was_lru, page, "isolating a page off {list:?} without PG_lru");
            out.push(pfn);
        }
        scanned
    }

    /// Put pages back on their lists and drop the isolation references;
    /// pages whose count reaches zero are freed (putback_inactive_pages).
    /// `stat`: (list type, pages taken, pages rotated) for reclaim_stat.
    fn putback_lru_pages(&self, pages: &[Pfn], stat: Option<(usize, u64, u64)>) {
        let mut to_free = Vec::new();
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            if let Some((t, scanned, rotated)) = stat {
                let rs = lru.reclaim_stat();
                rs.recent_scanned[t] += scanned;
                rs.recent_rotated[t] += rotated;
            }
            for &pfn in pages {
                let page = self.page(pfn);
                // Isolation took it off its list; nobody else puts it back.
                vm_bug_on_page!(page.test(PG_LRU), page, "putback of a page on a list");
                page.set(PG_LRU, &self.vm);
                let list = LruList::of_flags(page.flags());
                lru.add(pfn, list);
                if page.put_testzero() {
                    page.clear_frozen(PG_LRU);
                    lru.del(pfn, list);
                    to_free.push(pfn);
                }
            }
        }
        for pfn in to_free {
            self.free_page(pfn);
        }
    }

    /// Drain this CPU's batches (their pages are not on the lists yet), then
    /// isolate up to `nr` pages from the tail of `list` under one lru_lock.
    fn isolate_from_tail(&self, list: LruList, nr: u64, sc: &mut ScanControl) -> Vec<Pfn> {
        self.lru_add_drain();
        let mut isolated = Vec::with_capacity(nr as usize);
        let scanned = {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            let short = nr.saturating_sub(lru.len(list));
            if list == LruList::InactiveFile && short > 0 {
                // The window holds what reclaim needs: pass it on through
                // the admission contest.
                self.window_shrink(&mut lru, short);
            }
            self.isolate_lru_pages(&mut lru, list, nr, &mut isolated)
        };
        sc.nr_scanned += scanned;
        sc.last_scanned = scanned;
        isolated
    }

    /// shrink_active_list: deactivate pages from the tail of `list`
    /// (ActiveFile or ActiveAnon).
    pub fn shrink_active_list(&self, nr: u64, list: LruList, sc: &mut ScanControl) {
        let isolated = self.isolate_from_tail(list, nr, sc);
        self.vm.add(Item::pgrefill, sc.last_scanned);
        let mut memo = InodeMemo(None);
        let (mut deactivated, mut rotated) = (0, 0);
        for &pfn in &isolated {
            let page = self.page(pfn);
            if page.test(PG_SWAPBACKED) {
                // 3.x: a referenced anonymous page is counted (rotated)
                // but deactivated all the same: "we do not want to
                // protect anon pages over file pages"; its young bit is
                // cleared, so it must be used again to be activated.
                if page.mapped() {
                    if let Some(vma) = self.anon_vma_of(pfn) {
                        rotated += self.page_referenced_anon(&vma, pfn) as u64;
                    }
                }
                page.clear(PG_ACTIVE, &self.vm);
                page.set(PG_WORKINGSET, &self.vm);
                deactivated += 1;
                continue;
            }
            let id = page.mapping();
            let inode = if id == NO_MAPPING { None } else { memo.get(self, id) };
            if let Some(inode) = &inode {
                // page_referenced clears the young bytes of every mapped
                // page scanned here. Referenced exec-mapped pages get
                // another trip on the active list, "so that executable
                // code get better chances to stay in memory under
                // moderate memory pressure"; other pages go inactive,
                // their PG_referenced kept (another trip).
                if page.mapped() {
                    let (referenced, exec) = self.page_referenced(inode, pfn);
                    rotated += (referenced > 0) as u64;
                    if referenced > 0 && exec {
                        self.vm.inc(Item::exec_rotated);
                        continue;
                    }
                }
            }
            page.clear(PG_ACTIVE, &self.vm);
            page.set(PG_WORKINGSET, &self.vm);
            deactivated += 1;
            if let Some(inode) = &inode {
                self.clear_page_hot(inode, pfn);
            }
        }
        self.vm.add(Item::pgdeactivate, deactivated);
        self.putback_lru_pages(&isolated, Some((list.file_idx(), isolated.len() as u64, rotated)));
    }

    /// shrink_inactive_list: reclaim from the tail of `list`
    /// (InactiveFile, with the admission window, or InactiveAnon).
    pub fn shrink_inactive_list(&self, nr: u64, list: LruList, sc: &mut ScanControl) {
        let isolated = self.isolate_from_tail(list, nr, sc);
        let file = list.file_idx() == 1;
        self.vm.add(if sc.kswapd { Item::pgscan_kswapd } else { Item::pgscan_direct }, sc.last_scanned);
        self.vm.add(if file { Item::pgscan_file } else { Item::pgscan_anon }, sc.last_scanned);
        let mut keep = Vec::with_capacity(isolated.len());
        let mut stat = ReclaimStat::default();
        let reclaimed = self.shrink_page_list(&isolated, sc, &mut keep, &mut stat);
        sc.nr_reclaimed += reclaimed;
        self.vm.add(if sc.kswapd { Item::pgsteal_kswapd } else { Item::pgsteal_direct }, reclaimed);
        self.vm.add(if file { Item::pgsteal_file } else { Item::pgsteal_anon }, reclaimed);
        let rotated = keep.iter().filter(|&&p| self.page(p).test(PG_ACTIVE)).count() as u64;
        self.putback_lru_pages(&keep, Some((list.file_idx(), isolated.len() as u64, rotated)));
        // the Linux 3.2 reclaim-writeback series, patch 6: a reclaimer that meets mostly pages under
        // writeback, the more so the harder it is trying, waits for the
        // devices a little instead of spinning, if one is congested.
        let taken = isolated.len() as u64;
        if stat.nr_writeback > 0 && stat.nr_writeback >= taken >> (DEF_PRIORITY - sc.priority) as u32 {
            self.wait_iff_congested(Duration::from_millis(10));
        }
    }

    /// page_check_references, page locked. The young bytes of the entries
    /// mapping the page (page_referenced) and PG_referenced decide:
    ///
    /// | referenced_ptes | PG_referenced | VM_EXEC | verdict (UsedOnce)          |
    /// |-----------------|---------------|---------|-----------------------------|
    /// | > 1             | any           | any     | Activate (sets PG_referenced) |
    /// | 1               | set           | any     | Activate (sets PG_referenced) |
    /// | 1               | clear         | yes     | Activate (sets PG_referenced) |
    /// | 1               | clear         | no      | Keep, PG_referenced set     |
    /// | 0               | set           | -       | ReclaimClean                |
    /// | 0               | clear         | -       | Reclaim                     |
    ///
    /// "All mapped pages start out with page table references from the
    /// instantiating fault, so we need to look twice if a mapped file page
    /// is used more than once" (2.6.34). Under `MappedActivation::
    /// Linux2_6_33` any reference (young entries or PG_referenced) to a
    /// page of a file that is mapped anywhere (page_mapping_inuse)
    /// activates it. Deviation: 2.6.33 reclaimed a referenced page of an
    /// unmapped file even if dirty; pcache keeps ReclaimClean for those, so
    /// the preset changes only what concerns mapped files.
    fn page_check_references(&self, inode: &Inode, pfn: Pfn) -> PageRefs {
        let page = self.page(pfn);
        let (referenced_ptes, exec) = self.page_referenced(inode, pfn);
        if self.policy.active() {
            // The plug-in chose it; young entries are an access it has
            // not heard of: report it, and the page goes back to it.
            if referenced_ptes > 0 {
                self.vm.inc(Item::mapped_referenced);
                self.policy_young(pfn);
                return PageRefs::Keep;
            }
            return PageRefs::Reclaim;
        }
        let referenced_page = page.test_clear(PG_REFERENCED, &self.vm);
        if referenced_ptes > 0 {
            self.vm.inc(Item::mapped_referenced);
        }
        match self.config.tunables.mapped_activation {
            MappedActivation::Linux2_6_33 => {
                let referenced = referenced_ptes > 0 || referenced_page;
                if referenced && (page.mapped() || !inode.i_mmap.read().is_empty()) {
                    return PageRefs::Activate;
                }
            }
            MappedActivation::UsedOnce => {
                if referenced_ptes > 0 {
                    // Mark it and spare it for another trip; another page
                    // table reference will activate it. The mark is set for
                    // activated pages too, so a recently deactivated but
                    // used page is quickly recovered.
                    page.set(PG_REFERENCED, &self.vm);
                    if referenced_page || referenced_ptes > 1 || exec {
                        return PageRefs::Activate;
                    }
                    return PageRefs::Keep;
                }
            }
        }
        if referenced_page {
            PageRefs::ReclaimClean
        } else {
            PageRefs::Reclaim
        }
    }

    /// activate_locked: the page goes back to the active list.
    fn activate_locked(&self, pfn: Pfn) {
        let page = self.page(pfn);
        page.set(PG_ACTIVE, &self.vm);
        self.vm.inc(Item::pgactivate);
        if page.mapped() {
            self.vm.inc(Item::mapped_activated);
        }
    }

    /// shrink_page_list: returns pages freed; the rest go to `keep`. Each
    /// page is locked (trylock: a busy one stays) and goes its kernel way:
    /// an anonymous page through `shrink_anon_page`, a file page through
    /// `shrink_file_page` (page_check_references, try_to_unmap, the dirty
    /// page's handling and pageout), which freezes it for removal; the
    /// frozen batch leaves its mapping together (`remove_mapping_batch`,
    /// the kernel's __remove_mapping), and the anonymous pages to write
    /// go to swap last (`pageout_anon`).
    pub(crate) fn shrink_page_list(
        &self,
        pages: &[Pfn],
        sc: &ScanControl,
        keep: &mut Vec<Pfn>,
        stat: &mut ReclaimStat,
    ) -> u64 {
        let mut reclaimed = 0;
        let mut memo = InodeMemo(None);
        let mut frozen: Vec<(Pfn, Arc<Inode>)> = Vec::with_capacity(pages.len());
        let mut swap_batch: Vec<Pfn> = Vec::new();
        for &pfn in pages {
            let Some(page) = self.trylock_page(pfn) else {
                keep.push(pfn);
                continue;
            };
            if self.lru_gen_enabled() && page.mapped() && page.test(PG_REFERENCED) {
                // "folio_update_gen() tried to promote this page?": the
                // multi-gen look-around found it young while isolated.
                page.unlock();
                keep.push(pfn);
                continue;
            }
            if page.test(PG_SWAPBACKED) {
                // shrink_anon_page unlocks it on every path.
                match self.shrink_anon_page(page, keep, stat) {
                    AnonVerdict::Done(freed) => reclaimed += freed,
                    AnonVerdict::Pageout => swap_batch.push(pfn),
                }
                continue;
            }
            let id = page.mapping();
            let inode = if id == NO_MAPPING { None } else { memo.get(self, id) };
            let Some(inode) = inode else {
                // Truncated under us: our isolation reference may be the last.
                let page = {
                    let p = page.page();
                    page.unlock();
                    p
                };
                if page.put_testzero() {
                    reclaimed += 1u64 << page.folio_order();
                    self.free_page(pfn);
                } else {
                    // Someone else still holds it; it is off the LRU and will
                    // be freed by their put_page.
                }
                continue;
            };
            if self.shrink_file_page(page, &inode, sc, stat) {
                frozen.push((pfn, inode));
            } else {
                keep.push(pfn);
            }
        }
        reclaimed += self.remove_mapping_batch(&frozen, keep);
        // Swap writes last, so no file page stays frozen across them.
        if !swap_batch.is_empty() {
            reclaimed += self.pageout_anon(&mut swap_batch, keep);
        }
        reclaimed
    }

    /// shrink_page_list for one locked file page: under writeback it
    /// stays; page_check_references may activate or keep it; its entries
    /// go (try_to_unmap, which may find it used again and activate it); a
    /// dirty page is handled by `shrink_dirty_page`; then it is frozen for
    /// removal. Returns true when frozen: still locked, its lock passed to
    /// `remove_mapping_batch`. Otherwise it is unlocked and the caller
    /// keeps it.
    fn shrink_file_page(&self, page: LockedPage<'_>, inode: &Inode, sc: &ScanControl, stat: &mut ReclaimStat) -> bool {
        let pfn = page.pfn();
        if page.test(PG_WRITEBACK) {
            // Being cleaned already: leave it be.
            stat.nr_writeback += page.folio_nr_pages();
            return false;
        }
        let refs = self.page_check_references(inode, pfn);
        match refs {
            PageRefs::Activate => {
                self.activate_locked(pfn);
                return false;
            }
            PageRefs::Keep => {
                self.vm.inc(Item::mapped_kept);
                return false;
            }
            PageRefs::Reclaim | PageRefs::ReclaimClean => {}
        }
        // try_to_unmap: every entry goes before the page can; an entry
        // used since page_referenced looked activates the page instead.
        if page.mapped() && !self.try_to_unmap(inode, &page, false) {
            self.activate_locked(pfn);
            return false;
        }
        let page = if page.test(PG_DIRTY) {
            match self.shrink_dirty_page(page, inode, refs, sc, stat) {
                Some(page) => page,
                None => return false,
            }
        } else {
            page
        };
        if !self.freeze_for_removal(inode, pfn, 2) {
            return false;
        }
        page.into_raw();
        true
    }

    /// shrink_page_list's dirty page: counted; left to the flushers
    /// (tagged PG_reclaim) when this reclaimer may not write; kept if
    /// referenced (PageRefs::ReclaimClean); otherwise written now
    /// (`pageout`, which unlocks it) and, relocked, returned if it is
    /// still clean, idle and in the file, to be freed. None: unlocked, the
    /// caller keeps it.
    fn shrink_dirty_page<'a>(
        &'a self,
        page: LockedPage<'a>,
        inode: &Inode,
        refs: PageRefs,
        sc: &ScanControl,
        stat: &mut ReclaimStat,
    ) -> Option<LockedPage<'a>> {
        let pfn = page.pfn();
        stat.nr_dirty += page.folio_nr_pages();
        if !self.may_writepage(sc) {
            // The Linux 3.2 reclaim-writeback series, patches 1, 5, 7: leave the write to the
            // flushers and have the page rotated to the tail, to be freed
            // at once, when its writeback ends.
            self.vm.inc(Item::nr_vmscan_immediate_reclaim);
            page.set(PG_RECLAIM, &self.vm);
            self.wakeup_flusher_for_reclaim(inode);
            return None;
        }
        if matches!(refs, PageRefs::ReclaimClean) {
            // Referenced: reclaim it only if clean.
            return None;
        }
        if !self.pageout(inode, page, sc) {
            return None;
        }
        // Written synchronously: relock and free it if still clean.
        let page = self.trylock_page(pfn)?;
        if page.test(PG_DIRTY) || page.test(PG_WRITEBACK) || page.mapping() != inode.id {
            return None;
        }
        Some(page)
    }

    /// __remove_mapping for the pages `shrink_file_page` froze (locked,
    /// their locks passed here): one hazard check for the batch; pages
    /// out of their mapping are unlocked and freed, pages a reader pinned
    /// meanwhile unlocked and kept. Returns pages freed.
    fn remove_mapping_batch(&self, frozen: &[(Pfn, Arc<Inode>)], keep: &mut Vec<Pfn>) -> u64 {
        let (mut removed, mut pinned) = (Vec::new(), Vec::new());
        self.finish_removal(frozen, 2, true, &mut removed, &mut pinned);
        let freed = removed.iter().map(|&p| 1u64 << self.page(p).folio_order()).sum();
        for pfn in removed {
            // Frozen at 0 and out of the tree, but a thread that found it
            // earlier under a hazard pin (no reference, unlike the
            // kernel's lock_page callers) may be parked on its lock: an
            // atomic unlock that wakes it, not the kernel's
            // __folio_clear_locked. It then sees the page gone.
            self.adopt_page_lock(pfn).unlock();
            self.free_page(pfn);
        }
        for pfn in pinned {
            self.adopt_page_lock(pfn).unlock();
            keep.push(pfn);
        }
        freed
    }

    /// shrink_page_list for one anonymous page, locked and isolated
    /// (3.x): referenced through its entry, it is activated; otherwise it
    /// gets a swap slot and goes into the swap cache (`add_to_swap`; swap
    /// off or full: activated, it cannot be reclaimed), its entry becomes
    /// a swap entry (`try_to_unmap`), it is written to swap if dirty
    /// (`Pageout`: the caller writes the batch's dirty pages by runs of
    /// slots, `pageout_anon`; by any reclaimer, under 3.1 and 3.2 alike,
    /// since no flusher writes anonymous pages; the Linux 3.2 reclaim-writeback series: "Anonymous pages
    /// are still written") and, clean, leaves the swap cache and is freed.
    /// `Done`: the page is unlocked, freed (its pages) or kept (0).
    ///
    /// A large folio (mTHP) goes whole, as in 6.10: an aligned run of
    /// slots, every mapped frame's entry a swap entry, one write. Where
    /// no run is free, or under `MthpSwapout::Linux6_8`, it is split
    /// first: its head goes on as a page, its other mapped pages back to
    /// the LRU for the next pass.
    fn shrink_anon_page(&self, page: LockedPage, keep: &mut Vec<Pfn>, stat: &mut ReclaimStat) -> AnonVerdict {
        let pfn = page.pfn();
        let mut swapcache = page.test(PG_SWAPCACHE);
        let nr = page.folio_nr_pages();
        if !page.anon() && !swapcache {
            // Its region dropped it: our isolation reference may be the last.
            page.unlock();
            if self.page(pfn).put_testzero() {
                self.free_page(pfn);
                return AnonVerdict::Done(nr);
            }
            return AnonVerdict::Done(0);
        }
        let activate = |page: LockedPage| {
            page.set(PG_ACTIVE, &self.vm);
            self.vm.inc(Item::pgactivate);
            page.unlock();
        };
        if page.test(PG_WRITEBACK) {
            stat.nr_writeback += nr;
            page.unlock();
            keep.push(pfn);
            return AnonVerdict::Done(0);
        }
        let vma = self.anon_vma_of(pfn);
        // page_check_references: "if (PageAnon(page)) return
        // PAGEREF_ACTIVATE" for any young entry; PG_referenced alone does
        // not save an anonymous page.
        let referenced_ptes = vma.as_ref().map_or(0, |v| self.page_referenced_anon(v, pfn));
        page.test_clear(PG_REFERENCED, &self.vm);
        if referenced_ptes > 0 {
            activate(page);
            keep.push(pfn);
            return AnonVerdict::Done(0);
        }
        if nr > 1 && !swapcache && self.swap().is_some() {
            let whole = self.config.tunables.mthp_swapout == MthpSwapout::Linux6_10;
            if whole && self.add_to_swap(pfn) {
                swapcache = true;
            } else {
                if whole {
                    self.vm.inc(Item::mthp_swpout_fallback);
                }
                if !vma.as_ref().is_some_and(|v| self.split_anon_folio(v, &page, Some(keep))) {
                    page.unlock();
                    keep.push(pfn);
                    return AnonVerdict::Done(0);
                }
                return self.shrink_anon_page(page, keep, stat);
            }
        }
        if !swapcache && !self.add_to_swap(pfn) {
            activate(page);
            keep.push(pfn);
            return AnonVerdict::Done(0);
        }
        if page.mapped() && !vma.as_ref().is_some_and(|v| self.try_to_unmap_anon(v, pfn)) {
            activate(page);
            keep.push(pfn);
            return AnonVerdict::Done(0);
        }
        if page.test(PG_DIRTY) {
            stat.nr_dirty += nr;
            // Locked until pageout_anon has written the batch.
            page.into_raw();
            return AnonVerdict::Pageout;
        }
        AnonVerdict::Done(self.free_swapcache_page(page, keep))
    }

    /// The end of an anonymous folio's reclaim, locked, clean and
    /// unmapped: out of the swap cache and freed (its pages), or kept (0)
    /// if someone took a reference meanwhile.
    fn free_swapcache_page(&self, page: LockedPage, keep: &mut Vec<Pfn>) -> u64 {
        let pfn = page.pfn();
        // Only reclaim writes anonymous pages, under this lock: none is
        // being written now, and the page is in the swap cache.
        vm_bug_on_page!(
            page.test(PG_WRITEBACK) || !page.test(PG_SWAPCACHE),
            page,
            "free_swapcache_page under writeback or out of the swap cache"
        );
        if page.mapped() || !self.remove_swap_mapping(pfn) {
            page.unlock();
            keep.push(pfn);
            return 0;
        }
        let nr = page.folio_nr_pages();
        // Frozen at 0 and out of the swap cache; a hazard-pinned waiter
        // may still be parked on the lock (see shrink_page_list's frees).
        page.unlock();
        self.free_page(pfn);
        nr
    }

    /// pageout of the batch's dirty anonymous folios (locked, unmapped,
    /// in the swap cache): one device write per run of consecutive slots,
    /// then each written folio is freed. A folio whose write failed stays
    /// dirty and is kept. Returns pages freed.
    fn pageout_anon(&self, batch: &mut [Pfn], keep: &mut Vec<Pfn>) -> u64 {
        let slot = |p: &Pfn| self.page(*p).swap_slot().unwrap_or(u32::MAX);
        let nr = |p: &Pfn| self.page(*p).folio_nr_pages() as u32;
        batch.sort_unstable_by_key(slot);
        let mut freed = 0;
        for run in batch.chunk_by(|a, b| slot(a).checked_add(nr(a)) == Some(slot(b))) {
            let written = self.swap_writepages(slot(&run[0]), run);
            for &pfn in run {
                // The lock shrink_anon_page handed over with the pfn.
                let page = self.adopt_page_lock(pfn);
                if written {
                    freed += self.free_swapcache_page(page, keep);
                } else {
                    // Write error: still dirty, kept; nothing is lost.
                    page.unlock();
                    keep.push(pfn);
                }
            }
        }
        freed
    }

    /// May this reclaimer write a dirty file page itself?
    fn may_writepage(&self, sc: &ScanControl) -> bool {
        match self.config.tunables.reclaim_writeback {
            ReclaimWriteback::Writepage31 => true,
            // Direct reclaim never writes file pages; kswapd only "in
            // trouble", below DEF_PRIORITY - 2 (the Linux 3.2 reclaim-writeback series, patches 1 and 5).
            ReclaimWriteback::Flusher32 => sc.kswapd && sc.priority < DEF_PRIORITY - 2,
        }
    }

    /// pageout: write one locked dirty folio synchronously, whole.
    /// Unlocks it. Returns whether the write succeeded.
    fn pageout(&self, inode: &Inode, page: LockedPage<'_>, sc: &ScanControl) -> bool {
        let pfn = page.pfn();
        let nr = page.folio_nr_pages() as Pfn;
        self.vm.inc(Item::nr_vmscan_write);
        self.vm.inc(if sc.kswapd { Item::nr_vmscan_write_kswapd } else { Item::nr_vmscan_write_direct });
        let index = page.index();
        let started = self.start_writeback_locked(inode, &page);
        let page = {
            let p = page.page();
            page.unlock();
            p
        };
        if !started {
            return false;
        }
        // write_pages_now drops a reference per folio; keep our isolation
        // one. Under writeback the folio stays whole.
        page.get();
        let frames: Vec<Pfn> = (pfn..pfn + nr).collect();
        self.write_pages_now(inode, index, &frames).is_ok()
    }

    /// One kswapd pass (balance_pgdat): reclaim until `high` pages, plus
    /// any boost readahead asked for, are free.
    pub fn balance_pgdat(&self) -> u64 {
        self.vm.inc(Item::pageoutrun);
        // Taken, not read: a window asking during this pass asks again.
        let boost = self.kswapd.boost.swap(0, std::sync::atomic::Ordering::Relaxed);
        let target = self.arena.watermarks.high + boost;
        let mut total = 0;
        for prio in (0..=DEF_PRIORITY).rev() {
            let free = self.arena.nr_free_against(target);
            if free >= target {
                break;
            }
            let mut sc = ScanControl::new((target - free).max(SWAP_CLUSTER_MAX), true);
            sc.priority = prio;
            if boost > 0 {
                sc.file_batch = KSWAPD_RA_BATCH;
            }
            self.shrink_node(&mut sc);
            total += sc.nr_reclaimed;
        }
        // balance_pgdat's end (Linux6).
        self.snapshot_refaults();
        total
    }
}

impl Cache {
    /// Readahead about to need `nr` frames: when fewer than two such
    /// windows are free above `high`, ask kswapd to free that much and
    /// wake it, so that the reader finds the room of its next window made
    /// (see the module comment). At most a quarter of the cache.
    pub(crate) fn wakeup_kswapd_ra(&self, nr: u64) {
        if !self.config.tunables.kswapd || nr == 0 {
            return;
        }
        let want = (2 * nr).min(self.arena.nr_pages / 4);
        if self.arena.nr_free_against(self.arena.watermarks.high + want) >= self.arena.watermarks.high + want {
            return;
        }
        let raised = self.kswapd.boost.fetch_max(want, std::sync::atomic::Ordering::Relaxed) < want;
        if raised {
            self.vm.inc(Item::kswapd_ra_boost);
        }
        if raised && nr >= SWAP_CLUSTER_MAX {
            // The doorbell kept (not only rung for a sleeper): a kswapd
            // between its check and its sleep must not nap 100 ms on it.
            // Once per window, so the mutex costs nothing. A random miss
            // (a page or a few) rings only a sleeping kswapd, as the
            // kernel's wakeup_kswapd does: ringing it at every miss took
            // the doorbell's mutex per read (18% of 16 random readers'
            // yields); a kswapd about to sleep meets the next miss's ring,
            // and alloc_page's at `low`.
            self.kswapd.wake();
        } else {
            self.kswapd.wake_if_sleeping();
        }
    }
}

/// kswapd's doorbell (pgdat->kswapd_wait): allocators ring it below the
/// low watermark, shutdown to stop it.
#[derive(Default)]
pub struct Kswapd {
    wait: Wakeup,
    /// Pages readahead wants free above `high` (`wakeup_kswapd_ra`);
    /// taken by the next pass. (std's atomic: no loom model covers it.)
    boost: std::sync::atomic::AtomicU64,
}

impl Kswapd {
    /// wakeup_kswapd: only a sleeping kswapd needs the doorbell; one about
    /// to sleep re-checks the watermark within 100 ms.
    #[inline]
    pub fn wake_if_sleeping(&self) {
        self.wait.wake_if_waiting();
    }

    /// Whether a readahead boost waits for a pass.
    pub fn boosted(&self) -> bool {
        self.boost.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Wake it whatever it does (shutdown).
    pub fn wake(&self) {
        self.wait.wake();
    }
}

/// kswapd's body: sleep until woken below the low watermark, balance.
pub fn kswapd_thread(cache: Arc<Cache>) {
    let wm = cache.arena.watermarks;
    while !cache.shutting_down() {
        if cache.arena.nr_free_against(wm.low) > wm.low && !cache.kswapd.boosted() {
            cache.kswapd.wait.wait(Duration::from_millis(100));
            continue;
        }
        let reclaimed = cache.balance_pgdat();
        if reclaimed == 0 {
            // Nothing reclaimable now (all dirty, pinned or under
            // writeback): let the flushers work before trying again.
            cache.wakeup_flusher_threads();
            cache.kswapd.wait.wait(Duration::from_millis(10));
        }
    }
}

//! Workingset detection (mm/workingset.c, as merged in Linux 3.15).
//!
//! The two lists cannot tell a page that is used again soon after being
//! evicted (it was part of the working set but the inactive list was too
//! short to see its second access) from one that is simply used once:
//!
//! ```text
//!   fault --> inactive list --(second access)--> active list
//!                  |
//!              evicted: a shadow entry stays in the page tree
//! ```
//!
//! Each eviction from the inactive list and each activation advance a
//! per-lruvec clock, `inactive_age`. An evicted page leaves the clock's
//! value in its page-tree slot (a shadow entry). When the page faults back
//! in, the clock has advanced by the *refault distance*: how many evictions
//! and activations happened while it was out, i.e. how much longer the
//! inactive list would have had to be for the page to stay cached. If that
//! distance is at most the size of the active list, the page would have been
//! kept had the active pages been inactive instead, so it is activated
//! straight away instead of starting on the inactive list again
//! (`workingset_refault`, `workingset_activate`).
//!
//! Implementation: the clock is `Lruvec::inactive_age`; shadow entries are
//! page-tree entries with `SHADOW_BIT` set holding the low `EVICTION_BITS`
//! bits of the clock. Truncation removes the shadows of its range.
//! With pcache's adaptive admission (admission.rs) a shadow also records
//! whether the page lost the admission contest, and refaults feed the
//! window's adaptation.
//!
//! `Tunables::workingset_version = Linux6` selects what 5.9-6.18 changed
//! for file pages (see vmscan.rs's shrink_node): refault activations since
//! the last reclaim let reclaim deactivate the active list whatever the
//! list ratio, and the shadow records the clock before the eviction ages
//! it. The refault test itself (distance against NR_ACTIVE_FILE, without
//! swap) is the same in both.
//!
//! With the multi-gen LRU (`LruPolicy::MultiGen`, lru_gen.rs) the shadow
//! holds the evicting generation and the page's access count instead
//! (lru_gen_eviction), and a refault feeds the refault controller rather
//! than activating the page (lru_gen_refault), as in Linux 6.1+.
//!
//! Shadow entries are bounded as the kernel's shadow-node shrinker bounds
//! them (count_shadow_nodes / shadow_lru_isolate): a page-tree node that
//! holds only shadows (a leaf, or a node above that holds large folios'
//! shadows) is a shadow node (`workingset_nodes`); when there are
//! more than one per 8 frames of memory (`nr_pages >> (6 - 3)`, the
//! kernel's limit for 64-slot nodes, i.e. at most 8 shadows per frame in
//! dense nodes), reclaim drops every shadow of the oldest shadow nodes
//! (`workingset_nodereclaim`) and the emptied nodes are freed, deferred
//! until no lock-free reader can be in them (pagetree.rs).
//!
//! Implementation of the list: shadow nodes are linked through the node
//! itself on one list shared by all trees (`NodeCache`, the kernel's
//! `shadow_nodes` list_lru). The page tree keeps membership exact as it
//! stores (`workingset_update_node`): a node joins when it holds shadows
//! and nothing else, and leaves when it gains a page or a child, or
//! empties. The shrinker reads the oldest node's (mapping, index, level)
//! under the list lock, rotates it to the tail, then takes that inode's
//! tree lock and checks the node again before dropping its shadows, so the list lock is never held
//! while waiting for a tree lock (tree lock, then list lock, is the order).

use crate::filemap::Inode;
use crate::mm::Cache;
use crate::pagetree::SHADOW_BIT;
use crate::sync::atomic::Ordering;
use crate::vmstat::Item;
use crate::vmstat::NodeStat;
use crate::{LruList, WorkingsetVersion};

/// Bits of the clock kept in a shadow entry; distances wrap modulo 2^47.
const EVICTION_BITS: u32 = 47;
pub(crate) const EVICTION_MASK: u64 = (1 << EVICTION_BITS) - 1;
/// In a shadow entry: the page had been active (PG_workingset) when it was
/// evicted.
pub(crate) const SHADOW_WORKINGSET: usize = 1 << EVICTION_BITS;
/// In a shadow entry: the page lost the admission contest (PG_probation,
/// admission.rs), so it was evicted from the window side.
const SHADOW_PROBATION: usize = 1 << (EVICTION_BITS + 1);

impl Cache {
    /// workingset_eviction(folio): the shadow entry page `pfn` (locked,
    /// frozen) leaves behind, from the multi-gen LRU when it is on, else
    /// from its PG_workingset and PG_probation.
    pub fn workingset_eviction_page(&self, pfn: crate::page::Pfn) -> usize {
        if self.lru_gen_enabled() {
            return self.lru_gen_eviction(pfn);
        }
        let page = self.page(pfn);
        let nr = 1u64 << page.folio_order();
        self.workingset_eviction(page.test(crate::page::PG_WORKINGSET), page.test(crate::page::PG_PROBATION), nr)
    }

    /// workingset_eviction: the shadow entry a page leaves behind when it
    /// is reclaimed from the inactive list; `workingset` says the page had
    /// been active, `probation` that it lost the admission contest.
    /// A folio of `nr` pages leaves one shadow and ages the clock by its
    /// size (workingset_age_nonresident(lruvec, nr)).
    pub fn workingset_eviction(&self, workingset: bool, probation: bool, nr: u64) -> usize {
        let before = self.lruvec.inactive_age.fetch_add(nr, Ordering::Relaxed);
        // 3.15 stores the clock after this eviction advanced it
        // (atomic_long_inc_return); 5.9+ reads nonresident_age first and
        // ages it after, so the same refault is one step further away.
        let eviction = match self.config.tunables.workingset_version {
            WorkingsetVersion::Linux315 => before.wrapping_add(nr),
            WorkingsetVersion::Linux6 => before,
        };
        let mut flags = if workingset { SHADOW_WORKINGSET } else { 0 };
        if probation {
            flags |= SHADOW_PROBATION;
        }
        SHADOW_BIT | flags | (eviction & EVICTION_MASK) as usize
    }

    /// workingset_refault: a folio of `nr` pages, with admission sketch
    /// key `key`, is faulting back in where `shadow` was. Returns (activate
    /// it, it was in the workingset before).
    pub fn workingset_refault(&self, shadow: usize, key: u64, nr: u64) -> (bool, bool) {
        self.vm.add(Item::workingset_refault, nr);
        if self.lru_gen_enabled() {
            return self.lru_gen_refault(shadow, true, nr);
        }
        let eviction = shadow as u64 & EVICTION_MASK;
        let now = self.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK;
        let distance = now.wrapping_sub(eviction) & EVICTION_MASK;
        if let Some(a) = self.admission.state() {
            a.ghost_hit(distance, shadow & SHADOW_PROBATION != 0);
        }
        if distance > self.lruvec.len(LruList::ActiveFile) {
            return (false, false);
        }
        // With adaptive admission, a refault must also be used more often
        // than the inactive tail, or loops would cycle through the active
        // list (admission.rs).
        if !self.admission_beats_victim(key) {
            return (false, false);
        }
        self.vm.inc(Item::workingset_activate);
        // WORKINGSET_ACTIVATE_FILE, which Linux6 reclaim compares with its
        // snapshot to decide whether to deactivate (vmscan.rs).
        self.lruvec.refaults_activated.fetch_add(1, Ordering::Relaxed);
        let restore = shadow & SHADOW_WORKINGSET != 0;
        if restore {
            self.vm.inc(Item::workingset_restore);
        }
        (true, restore)
    }

    /// workingset_refault with a plug-in policy (policy.rs): the refault
    /// is counted and its distance reported; activation is the policy's.
    pub fn workingset_refault_policy(&self, shadow: usize) -> crate::policy::Refault {
        self.vm.inc(Item::workingset_refault);
        let eviction = shadow as u64 & EVICTION_MASK;
        let now = self.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK;
        let distance = now.wrapping_sub(eviction) & EVICTION_MASK;
        crate::policy::Refault { distance, workingset: shadow & SHADOW_WORKINGSET != 0 }
    }

    /// workingset_refault for an anonymous page swapped back in
    /// (`AnonLru::Linux5_9`): activate it if its refault distance is
    /// within the workingset 5.9 measures for anon, the file lists and the
    /// active anon list ("the anon page could have stayed had the file
    /// pages and the active anon pages made room"). Returns (activate it,
    /// it was in the workingset before).
    pub fn workingset_refault_anon(&self, shadow: usize) -> (bool, bool) {
        self.vm.inc(Item::workingset_refault_anon);
        if self.lru_gen_enabled() {
            return self.lru_gen_refault(shadow, false, 1);
        }
        let eviction = shadow as u64 & EVICTION_MASK;
        let now = self.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK;
        let distance = now.wrapping_sub(eviction) & EVICTION_MASK;
        let len = |l| self.lruvec.len(l);
        let workingset_size = len(LruList::ActiveFile) + len(LruList::InactiveFile) + len(LruList::ActiveAnon);
        if distance > workingset_size {
            return (false, false);
        }
        self.vm.inc(Item::workingset_activate_anon);
        (true, shadow & SHADOW_WORKINGSET != 0)
    }

    /// snapshot_refaults (Linux6): remember the activated refaults at the
    /// end of a reclaim invocation; the next one deactivates the active
    /// file list freely only if more have come since.
    pub fn snapshot_refaults(&self) {
        if self.config.tunables.workingset_version == WorkingsetVersion::Linux6 {
            let now = self.lruvec.refaults_activated.load(Ordering::Relaxed);
            self.lruvec.refaults_snapshot.store(now, Ordering::Relaxed);
        }
    }

    /// workingset_activation: a page was activated; the clock advances.
    #[inline]
    pub fn workingset_activation(&self) {
        self.workingset_activation_nr(1);
    }

    /// workingset_activation of a folio of `nr` pages.
    #[inline]
    pub fn workingset_activation_nr(&self, nr: u64) {
        self.lruvec.inactive_age.fetch_add(nr, Ordering::Relaxed);
    }

    /// The most shadow nodes kept (count_shadow_nodes): one per 8 frames.
    pub fn max_shadow_nodes(&self) -> u64 {
        (self.arena.nr_pages >> 3).max(1)
    }

    /// The shadow-node shrinker (scan_shadow_nodes): while more shadow
    /// nodes than `max_shadow_nodes` are on the list, drop the shadows of
    /// the oldest, which frees the node. Looks at no more than
    /// `nr_to_scan` nodes. Returns the shadow nodes reclaimed.
    pub fn shrink_shadow_nodes(&self, nr_to_scan: usize) -> u64 {
        let max = self.max_shadow_nodes();
        let mut reclaimed = 0;
        for _ in 0..nr_to_scan {
            let Some((id, index, level)) = self.node_cache.oldest_shadow_node_over(max) else { break };
            // A node whose inode is no longer reachable by id stays at the
            // tail until its tree drops (which takes it off the list).
            let Some(inode) = self.inode_by_id(id) else { continue };
            if self.shadow_lru_isolate(&inode, index, level) {
                reclaimed += 1;
            }
        }
        reclaimed
    }

    /// shadow_lru_isolate: drop every shadow entry of the node at `level`
    /// holding `index` and free the node, if it still holds nothing else
    /// (the list was read without the tree lock, so it may have changed
    /// since).
    fn shadow_lru_isolate(&self, inode: &Inode, index: u64, level: usize) -> bool {
        let g = inode.tree_lock.lock();
        let dropped = inode.tree.drop_shadow_node(index, level, &g);
        if dropped == 0 {
            return false;
        }
        self.node_stat.sub(NodeStat::Shadows, dropped as i64);
        self.vm.inc(Item::workingset_nodereclaim);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Tunables};

    fn cache() -> std::sync::Arc<Cache> {
        Cache::new(Config {
            memory_bytes: 64 * 4096,
            tunables: Tunables { kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap()
    }

    // Goal: the refault distance is the clock's advance since the eviction,
    // modulo 2^EVICTION_BITS, so it stays right when the clock wraps; and
    // the page is activated only if that distance fits in the active list
    // (empty here, so only a distance of 0 does).
    #[test]
    fn refault_distance_wraps() {
        let c = cache();
        c.lruvec.inactive_age.store(EVICTION_MASK - 1, Ordering::Relaxed);
        let shadow = c.workingset_eviction(true, false, 1); // clock: MASK
        assert_eq!(shadow as u64 & EVICTION_MASK, EVICTION_MASK);
        assert!(shadow & SHADOW_BIT != 0 && shadow & SHADOW_WORKINGSET != 0);
        // Refault at once: distance 0 fits even an empty active list.
        assert_eq!(c.workingset_refault(shadow, 0, 1), (true, true));
        // One more eviction wraps the masked clock to 0: distance 1.
        let _ = c.workingset_eviction(false, false, 1);
        assert_eq!(c.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK, 0);
        assert_eq!(c.workingset_refault(shadow, 0, 1), (false, false));
        assert_eq!(c.vm.sum(Item::workingset_refault), 2);
        assert_eq!(c.vm.sum(Item::workingset_activate), 1);
        assert_eq!(c.vm.sum(Item::workingset_restore), 1);
    }
}

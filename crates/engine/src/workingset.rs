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
//! Deviation: shadow entries are not themselves reclaimed (the kernel's
//! shadow-node shrinker); they only ever replace a page in a slot, so they
//! take no memory a page's slot did not already take.

use crate::mm::Cache;
use crate::pagetree::SHADOW_BIT;
use crate::sync::atomic::Ordering;
use crate::vmstat::Item;
use crate::LruList;

/// Bits of the clock kept in a shadow entry; distances wrap modulo 2^47.
const EVICTION_BITS: u32 = 47;
const EVICTION_MASK: u64 = (1 << EVICTION_BITS) - 1;
/// In a shadow entry: the page had been active (PG_workingset) when it was
/// evicted.
const SHADOW_WORKINGSET: usize = 1 << EVICTION_BITS;
/// In a shadow entry: the page lost the admission contest (PG_probation,
/// admission.rs), so it was evicted from the window side.
const SHADOW_PROBATION: usize = 1 << (EVICTION_BITS + 1);

impl Cache {
    /// workingset_eviction: the shadow entry a page leaves behind when it
    /// is reclaimed from the inactive list; `workingset` says the page had
    /// been active, `probation` that it lost the admission contest.
    pub fn workingset_eviction(&self, workingset: bool, probation: bool) -> usize {
        let eviction = self.lruvec.inactive_age.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let mut flags = if workingset { SHADOW_WORKINGSET } else { 0 };
        if probation {
            flags |= SHADOW_PROBATION;
        }
        SHADOW_BIT | flags | (eviction & EVICTION_MASK) as usize
    }

    /// workingset_refault: a page with admission sketch key `key` is
    /// faulting back in where `shadow` was. Returns (activate it, it was in
    /// the workingset before).
    pub fn workingset_refault(&self, shadow: usize, key: u64) -> (bool, bool) {
        self.vm.inc(Item::workingset_refault);
        let eviction = shadow as u64 & EVICTION_MASK;
        let now = self.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK;
        let distance = now.wrapping_sub(eviction) & EVICTION_MASK;
        if let Some(a) = &self.admission {
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
        let restore = shadow & SHADOW_WORKINGSET != 0;
        if restore {
            self.vm.inc(Item::workingset_restore);
        }
        (true, restore)
    }

    /// workingset_activation: a page was activated; the clock advances.
    #[inline]
    pub fn workingset_activation(&self) {
        self.lruvec.inactive_age.fetch_add(1, Ordering::Relaxed);
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
        let shadow = c.workingset_eviction(true, false); // clock: MASK
        assert_eq!(shadow as u64 & EVICTION_MASK, EVICTION_MASK);
        assert!(shadow & SHADOW_BIT != 0 && shadow & SHADOW_WORKINGSET != 0);
        // Refault at once: distance 0 fits even an empty active list.
        assert_eq!(c.workingset_refault(shadow, 0), (true, true));
        // One more eviction wraps the masked clock to 0: distance 1.
        let _ = c.workingset_eviction(false, false);
        assert_eq!(c.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK, 0);
        assert_eq!(c.workingset_refault(shadow, 0), (false, false));
        assert_eq!(c.vm.sum(Item::workingset_refault), 2);
        assert_eq!(c.vm.sum(Item::workingset_activate), 1);
        assert_eq!(c.vm.sum(Item::workingset_restore), 1);
    }
}

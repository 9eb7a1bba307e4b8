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
//! Deviation: shadow entries are not themselves reclaimed (the kernel's
//! shadow-node shrinker); they only ever replace a page in a slot, so they
//! take no memory a page's slot did not already take.

use crate::mm::Cache;
use crate::pagetree::SHADOW_BIT;
use crate::sync::atomic::Ordering;
use crate::vmstat::Item;
use crate::LruList;

/// Bits of the clock kept in a shadow entry; distances wrap modulo 2^48.
const EVICTION_BITS: u32 = 48;
const EVICTION_MASK: u64 = (1 << EVICTION_BITS) - 1;

impl Cache {
    /// workingset_eviction: the shadow entry a page leaves behind when it
    /// is reclaimed from the inactive list.
    pub fn workingset_eviction(&self) -> usize {
        let eviction = self.lruvec.inactive_age.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        SHADOW_BIT | (eviction & EVICTION_MASK) as usize
    }

    /// workingset_refault: a page is faulting back in where `shadow` was.
    /// Whether it should go straight to the active list.
    pub fn workingset_refault(&self, shadow: usize) -> bool {
        self.vm.inc(Item::workingset_refault);
        let eviction = (shadow & !SHADOW_BIT) as u64 & EVICTION_MASK;
        let now = self.lruvec.inactive_age.load(Ordering::Relaxed) & EVICTION_MASK;
        let distance = now.wrapping_sub(eviction) & EVICTION_MASK;
        if distance <= self.lruvec.len(LruList::ActiveFile) {
            self.vm.inc(Item::workingset_activate);
            true
        } else {
            false
        }
    }

    /// workingset_activation: a page was activated; the clock advances.
    #[inline]
    pub fn workingset_activation(&self) {
        self.lruvec.inactive_age.fetch_add(1, Ordering::Relaxed);
    }
}

//! CLOCK (second chance): pages queue in insertion order with a
//! reference bit; the oldest page is evicted unless its bit is set, in
//! which case the bit is cleared and the page goes round again (as
//! libCacheSim's Clock with one bit). Written only against the plug-in
//! trait (policy.rs).

use std::sync::Arc;

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{AccessCounts, AccessMode, EvictionPolicy, FolioRef, Putback, Removal};

const QUEUE: usize = 0;

pub struct Clock {
    q: Mutex<FolioLists<1>>,
    /// The reference bits (counts up to 1), set by the engine on access.
    referenced: Arc<AccessCounts>,
}

impl Clock {
    pub fn new(nr_frames: usize) -> Clock {
        Clock { q: Mutex::new(FolioLists::new(nr_frames)), referenced: Arc::new(AccessCounts::new(nr_frames, 1)) }
    }
}

impl EvictionPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn access_mode(&self) -> AccessMode {
        AccessMode::Counted(self.referenced.clone())
    }

    fn folio_added(&self, folio: FolioRef) {
        if self.q.lock().push_head(QUEUE, folio.pfn) {
            self.referenced.set(folio.pfn, 0);
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.q.lock().remove(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut q = self.q.lock();
        // Each page is spared at most once per call: bounded by 2 x len.
        let mut budget = 2 * q.len(QUEUE) + nr;
        while out.len() < nr && budget > 0 {
            budget -= 1;
            let Some(pfn) = q.tail(QUEUE) else { break };
            if self.referenced.take(pfn) != 0 {
                q.move_to_head(pfn);
                continue;
            }
            q.remove(pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        if self.q.lock().push_head(QUEUE, folio.pfn) {
            self.referenced.set(folio.pfn, (why == Putback::Referenced) as u8);
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // To the oldest end, unreferenced: freed next.
        let mut q = self.q.lock();
        if q.remove(folio.pfn).is_some() {
            q.push_tail(QUEUE, folio.pfn);
            self.referenced.take(folio.pfn);
        }
    }
}

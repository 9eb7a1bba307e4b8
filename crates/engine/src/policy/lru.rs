//! LRU: an access moves a page to the head; the tail is evicted.
//! Written only against the plug-in trait (policy.rs).

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};

const QUEUE: usize = 0;

pub struct Lru {
    q: Mutex<FolioLists<1>>,
}

impl Lru {
    pub fn new(nr_frames: usize) -> Lru {
        Lru { q: Mutex::new(FolioLists::new(nr_frames)) }
    }
}

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn folio_added(&self, folio: FolioRef) {
        self.q.lock().push_head(QUEUE, folio.pfn);
    }

    fn folio_accessed(&self, folio: FolioRef) {
        self.folios_accessed(&[folio]);
    }

    fn folios_accessed(&self, folios: &[FolioRef]) {
        let mut q = self.q.lock();
        for f in folios {
            q.move_to_head(f.pfn);
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.q.lock().remove(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut q = self.q.lock();
        while out.len() < nr {
            let Some(pfn) = q.pop_tail(QUEUE) else { break };
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, _why: Putback) {
        // As the kernel puts back what it could not free: at the new end,
        // so that the next candidates are others.
        self.q.lock().push_head(QUEUE, folio.pfn);
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // rotate_reclaimable_page: to the oldest end, freed next.
        let mut q = self.q.lock();
        if q.remove(folio.pfn).is_some() {
            q.push_tail(QUEUE, folio.pfn);
        }
    }
}

//! MRU: an access moves a page to the head, and the head (the most
//! recently used or inserted page) is evicted: right for loops larger
//! than the cache, where LRU misses every time. Written only against the
//! plug-in trait (policy.rs).

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};

const QUEUE: usize = 0;

pub struct Mru {
    q: Mutex<FolioLists<1>>,
}

impl Mru {
    pub fn new(nr_frames: usize) -> Mru {
        Mru { q: Mutex::new(FolioLists::new(nr_frames)) }
    }
}

impl EvictionPolicy for Mru {
    fn name(&self) -> &'static str {
        "mru"
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
            let Some(pfn) = q.head(QUEUE) else { break };
            q.remove(pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, _why: Putback) {
        // At the far end, so that the next candidates are others.
        self.q.lock().push_tail(QUEUE, folio.pfn);
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // To the end evicted first.
        self.q.lock().move_to_head(folio.pfn);
    }
}

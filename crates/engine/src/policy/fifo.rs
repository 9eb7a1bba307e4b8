//! FIFO: pages leave in the order they came; accesses change nothing.
//! Written only against the plug-in trait (policy.rs).

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{AccessMode, EvictionPolicy, FolioRef, Putback, Removal};

const QUEUE: usize = 0;

pub struct Fifo {
    q: Mutex<FolioLists<1>>,
}

impl Fifo {
    pub fn new(nr_frames: usize) -> Fifo {
        Fifo { q: Mutex::new(FolioLists::new(nr_frames)) }
    }
}

impl EvictionPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn folio_added(&self, folio: FolioRef) {
        self.q.lock().push_head(QUEUE, folio.pfn);
    }

    fn access_mode(&self) -> AccessMode {
        AccessMode::Ignored
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

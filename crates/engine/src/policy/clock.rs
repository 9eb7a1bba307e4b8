//! CLOCK (second chance): pages queue in insertion order with a
//! reference bit; the oldest page is evicted unless its bit is set, in
//! which case the bit is cleared and the page goes round again (as
//! libCacheSim's Clock with one bit). Written only against the plug-in
//! trait (policy.rs).

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};

const QUEUE: usize = 0;

struct State {
    q: FolioLists<1>,
    referenced: Vec<bool>,
}

pub struct Clock {
    s: Mutex<State>,
}

impl Clock {
    pub fn new(nr_frames: usize) -> Clock {
        Clock { s: Mutex::new(State { q: FolioLists::new(nr_frames), referenced: vec![false; nr_frames] }) }
    }
}

impl EvictionPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn folio_added(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if s.q.push_head(QUEUE, folio.pfn) {
            s.referenced[folio.pfn as usize] = false;
        }
    }

    fn folio_accessed(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if s.q.list_of(folio.pfn).is_some() {
            s.referenced[folio.pfn as usize] = true;
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.s.lock().q.remove(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut s = self.s.lock();
        // Each page is spared at most once per call: bounded by 2 x len.
        let mut budget = 2 * s.q.len(QUEUE) + nr;
        while out.len() < nr && budget > 0 {
            budget -= 1;
            let Some(pfn) = s.q.tail(QUEUE) else { break };
            if s.referenced[pfn as usize] {
                s.referenced[pfn as usize] = false;
                s.q.move_to_head(pfn);
                continue;
            }
            s.q.remove(pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        let mut s = self.s.lock();
        if s.q.push_head(QUEUE, folio.pfn) {
            s.referenced[folio.pfn as usize] = why == Putback::Referenced;
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if s.q.remove(folio.pfn).is_some() {
            s.q.push_tail(QUEUE, folio.pfn);
        }
    }
}

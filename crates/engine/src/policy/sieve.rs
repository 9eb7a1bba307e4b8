//! SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI'24): one FIFO
//! queue and a hand. New pages enter at the head, unvisited; an access
//! only marks a page visited. Eviction moves the hand from where it
//! stopped toward the head (wrapping to the tail): a visited page is
//! unmarked and stays in place, the first unvisited one is evicted.
//! Written only against the plug-in trait (policy.rs).

use std::sync::Arc;

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{AccessCounts, AccessMode, EvictionPolicy, FolioRef, Putback, Removal};
use crate::page::Pfn;

const QUEUE: usize = 0;

struct State {
    q: FolioLists<1>,
    /// Where the last sweep stopped: the next page it looks at.
    hand: Option<Pfn>,
}

impl State {
    /// Take `pfn` off the queue, moving the hand past it first.
    fn unlink(&mut self, pfn: Pfn) -> bool {
        if self.hand == Some(pfn) {
            self.hand = self.q.newer(pfn);
        }
        self.q.remove(pfn).is_some()
    }
}

pub struct Sieve {
    s: Mutex<State>,
    /// The visited bits (counts up to 1), set by the engine on access.
    visited: Arc<AccessCounts>,
}

impl Sieve {
    pub fn new(nr_frames: usize) -> Sieve {
        Sieve {
            s: Mutex::new(State { q: FolioLists::new(nr_frames), hand: None }),
            visited: Arc::new(AccessCounts::new(nr_frames, 1)),
        }
    }
}

impl EvictionPolicy for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }

    fn access_mode(&self) -> AccessMode {
        AccessMode::Counted(self.visited.clone())
    }

    fn folio_added(&self, folio: FolioRef) {
        if self.s.lock().q.push_head(QUEUE, folio.pfn) {
            self.visited.set(folio.pfn, 0);
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.s.lock().unlink(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut s = self.s.lock();
        // Each page is unmarked at most once per call: bounded by 2 x len.
        let mut budget = 2 * s.q.len(QUEUE) + nr;
        while out.len() < nr && budget > 0 {
            budget -= 1;
            let Some(pfn) = s.hand.or_else(|| s.q.tail(QUEUE)) else { break };
            if self.visited.take(pfn) != 0 {
                s.hand = s.q.newer(pfn);
                continue;
            }
            s.unlink(pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        let mut s = self.s.lock();
        if s.q.push_head(QUEUE, folio.pfn) {
            self.visited.set(folio.pfn, (why == Putback::Referenced) as u8);
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // SIEVE moves no page: unvisited, it goes when the hand comes.
        if self.s.lock().q.list_of(folio.pfn).is_some() {
            self.visited.set(folio.pfn, 0);
        }
    }
}

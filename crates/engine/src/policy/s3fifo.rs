//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP'23): a small FIFO (10% of the pages) where new pages
//! wait, a main FIFO, and a ghost FIFO of keys recently evicted from the
//! small one. A page leaving the small queue goes to main if it was used
//! there `MOVE_TO_MAIN` times, else it is evicted and its key remembered; a page whose key is in the ghost enters main
//! directly. Main is a CLOCK with a 2-bit counter. The queues' targets are
//! fractions of the pages held, since a policy is not told the capacity.
//! Written only against the plug-in trait (policy.rs).

use std::collections::{HashSet, VecDeque};

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};

const SMALL: usize = 0;
const MAIN: usize = 1;
/// Accesses in the small queue that earn a page its place in main.
const MOVE_TO_MAIN: u8 = 2;
/// The counter's ceiling (two bits).
const MAX_FREQ: u8 = 3;

struct State {
    q: FolioLists<2>,
    freq: Vec<u8>,
    /// The key of the page each held frame caches (for the ghost).
    key: Vec<u64>,
    /// Keys evicted from the small queue, oldest first, at most as many
    /// as main's target; `ghost_set` indexes them.
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
}

impl State {
    fn held(&self) -> usize {
        self.q.len(SMALL) + self.q.len(MAIN)
    }

    fn remember(&mut self, key: u64) {
        let cap = (self.held() * 9 / 10).max(1);
        while self.ghost.len() >= cap {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
        if self.ghost_set.insert(key) {
            self.ghost.push_back(key);
        }
    }

    /// One candidate: from small while it is over its target (or main is
    /// empty), else from main; None when nothing is held.
    fn evict_one(&mut self) -> Option<u32> {
        // Each page is moved or spared at most once per page held, so
        // bound the walk.
        let mut budget = 2 * self.held() + 2;
        while budget > 0 {
            budget -= 1;
            let small_target = self.held().div_ceil(10);
            if self.q.len(SMALL) >= small_target.max(1) || self.q.is_empty(MAIN) {
                let pfn = self.q.tail(SMALL)?;
                self.q.remove(pfn);
                if self.freq[pfn as usize] >= MOVE_TO_MAIN {
                    self.freq[pfn as usize] = 0;
                    self.q.push_head(MAIN, pfn);
                    continue;
                }
                let key = self.key[pfn as usize];
                self.remember(key);
                return Some(pfn);
            }
            let pfn = self.q.tail(MAIN)?;
            if self.freq[pfn as usize] > 0 {
                self.freq[pfn as usize] -= 1;
                self.q.move_to_head(pfn);
                continue;
            }
            self.q.remove(pfn);
            return Some(pfn);
        }
        None
    }
}

pub struct S3Fifo {
    s: Mutex<State>,
}

impl S3Fifo {
    pub fn new(nr_frames: usize) -> S3Fifo {
        S3Fifo {
            s: Mutex::new(State {
                q: FolioLists::new(nr_frames),
                freq: vec![0; nr_frames],
                key: vec![0; nr_frames],
                ghost: VecDeque::new(),
                ghost_set: HashSet::new(),
            }),
        }
    }
}

impl EvictionPolicy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn folio_added(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        let key = folio.key();
        let list = if s.ghost_set.remove(&key) { MAIN } else { SMALL };
        if s.q.push_head(list, folio.pfn) {
            s.freq[folio.pfn as usize] = 0;
            s.key[folio.pfn as usize] = key;
        }
    }

    fn folio_accessed(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        let i = folio.pfn as usize;
        if s.q.list_of(folio.pfn).is_some() && s.freq[i] < MAX_FREQ {
            s.freq[i] += 1;
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.s.lock().q.remove(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut s = self.s.lock();
        while out.len() < nr {
            let Some(pfn) = s.evict_one() else { break };
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        let mut s = self.s.lock();
        if s.q.push_head(MAIN, folio.pfn) {
            s.freq[folio.pfn as usize] = (why == Putback::Referenced) as u8;
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if let Some(list) = s.q.remove(folio.pfn) {
            s.freq[folio.pfn as usize] = 0;
            s.q.push_tail(list, folio.pfn);
        }
    }
}

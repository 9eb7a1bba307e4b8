//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP'23), in the form libCacheSim's S3FIFO.c gives it: a
//! small FIFO (10% of the capacity) where new pages wait, a main FIFO
//! (the rest) run as a CLOCK with a 2-bit counter, and a ghost FIFO (90%
//! of the capacity) of keys evicted from the small one. Eviction takes
//! from main while main is over its size or small is empty, else from
//! small: a page used there `MOVE_TO_MAIN` times moves to main, the first
//! other one is evicted and its key remembered. A page whose key is in the
//! ghost enters main; so does a new page while small is full and nothing
//! has been evicted yet. Written only against the plug-in trait
//! (policy.rs).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{AccessCounts, AccessMode, EvictionPolicy, FolioRef, Putback, Removal};
use crate::page::Pfn;

const SMALL: usize = 0;
const MAIN: usize = 1;
/// Accesses in the small queue that earn a page its place in main.
pub(super) const MOVE_TO_MAIN: u8 = 2;
/// The counter's ceiling (two bits).
pub(super) const MAX_FREQ: u8 = 3;

/// Keys in FIFO order, at most `cap` once trimmed; a key removed early
/// leaves a stale deque entry that its sequence number tells apart.
///
/// A simulator looks a missed key up in the ghost before it evicts for
/// it; the engine evicts (allocating the frame) before it adds the page.
/// So insertions do not trim: `folio_added` looks the key up first and
/// trims after, which keeps the simulator's order. At most `GHOST_SLACK`
/// keys wait over the cap between two adds.
pub(super) struct Ghost {
    pub(super) cap: usize,
    seq: u64,
    order: VecDeque<(u64, u64)>,
    live: super::experts::KeyMap<u64>,
}

/// Keys a ghost may hold over its cap until the next add.
pub(super) const GHOST_SLACK: usize = 64;

impl Ghost {
    pub(super) fn new(cap: usize) -> Ghost {
        Ghost { cap, seq: 0, order: VecDeque::new(), live: Default::default() }
    }

    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    pub(super) fn insert(&mut self, key: u64) {
        if self.cap == 0 || self.live.contains_key(&key) {
            return;
        }
        self.seq += 1;
        self.live.insert(key, self.seq);
        self.order.push_back((key, self.seq));
        self.trim(self.cap + GHOST_SLACK);
    }

    /// Forget the oldest keys until at most `max` are left.
    pub(super) fn trim(&mut self, max: usize) {
        while self.live.len() > max {
            let Some((k, s)) = self.order.pop_front() else { break };
            if self.live.get(&k) == Some(&s) {
                self.live.remove(&k);
            }
        }
    }

    pub(super) fn remove(&mut self, key: u64) -> bool {
        let hit = self.live.remove(&key).is_some();
        // Keep the deque from growing with stale entries.
        if self.order.len() > 2 * (self.cap + GHOST_SLACK) {
            let live = &self.live;
            self.order.retain(|(k, s)| live.get(k) == Some(s));
        }
        hit
    }
}

struct State {
    q: FolioLists<2>,
    /// Each frame's 2-bit frequency, raised by the engine on access.
    freq: Arc<AccessCounts>,
    /// The key of the page each held frame caches (for the ghost).
    key: Vec<u64>,
    ghost: Ghost,
    small_size: usize,
    capacity: usize,
    has_evicted: bool,
}

impl State {
    fn evict_small(&mut self) -> Option<Pfn> {
        while let Some(pfn) = self.q.tail(SMALL) {
            self.q.remove(pfn);
            if self.freq.get(pfn) >= MOVE_TO_MAIN {
                self.freq.take(pfn);
                self.q.push_head(MAIN, pfn);
                continue;
            }
            let key = self.key[pfn as usize];
            self.ghost.insert(key);
            return Some(pfn);
        }
        None
    }

    fn evict_main(&mut self) -> Option<Pfn> {
        // Each pass lowers a counter; at most MAX_FREQ passes.
        let mut budget = (MAX_FREQ as usize + 1) * self.q.len(MAIN) + 1;
        while let Some(pfn) = self.q.tail(MAIN) {
            if self.freq.get(pfn) >= 1 && budget > 0 {
                budget -= 1;
                self.freq.lower(pfn);
                self.q.move_to_head(pfn);
                continue;
            }
            self.q.remove(pfn);
            return Some(pfn);
        }
        None
    }

    fn evict_one(&mut self) -> Option<Pfn> {
        self.has_evicted = true;
        let main_size = self.capacity - self.small_size.min(self.capacity);
        if self.q.len(MAIN) > main_size || self.q.is_empty(SMALL) {
            return self.evict_main();
        }
        // Small may empty into main without evicting: then main's turn.
        self.evict_small().or_else(|| self.evict_main())
    }
}

pub struct S3Fifo {
    s: Mutex<State>,
}

impl S3Fifo {
    /// For `nr_frames` frames and a cache of `capacity` pages.
    pub fn new(nr_frames: usize, capacity: usize) -> S3Fifo {
        let small_size = capacity / 10;
        S3Fifo {
            s: Mutex::new(State {
                q: FolioLists::new(nr_frames),
                freq: Arc::new(AccessCounts::new(nr_frames, MAX_FREQ)),
                key: vec![0; nr_frames],
                ghost: Ghost::new(capacity * 9 / 10),
                small_size,
                capacity,
                has_evicted: false,
            }),
        }
    }
}

impl EvictionPolicy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn access_mode(&self) -> AccessMode {
        AccessMode::Counted(self.s.lock().freq.clone())
    }

    fn folio_added(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        let key = folio.key();
        let ghost_hit = s.ghost.remove(key);
        let cap = s.ghost.cap;
        s.ghost.trim(cap);
        let list = if ghost_hit || (!s.has_evicted && s.q.len(SMALL) >= s.small_size) { MAIN } else { SMALL };
        if s.q.push_head(list, folio.pfn) {
            s.freq.set(folio.pfn, 0);
            s.key[folio.pfn as usize] = key;
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
            s.freq.set(folio.pfn, (why == Putback::Referenced) as u8);
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if let Some(list) = s.q.remove(folio.pfn) {
            s.freq.set(folio.pfn, 0);
            s.q.push_tail(list, folio.pfn);
        }
    }
}

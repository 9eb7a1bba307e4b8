//! pcache's own plug-in policy (`policy=pcache`): follow whichever of a
//! few simulated policies has missed least lately.
//!
//! No single policy wins everywhere. LIRS (Jiang and Zhang, SIGMETRICS'02)
//! and S3-FIFO (Yang et al., SOSP'23) keep part of a loop longer than the
//! cache and survive scans, where LRU and ARC (Megiddo and Modha, FAST'03)
//! miss on every request; where recency rules, hot sets shift or popular
//! pages age out, their probation queues let go of pages LRU and ARC keep;
//! LFU-DA (Arlitt et al.) wins on skewed popularity that LRU forgets. The
//! kernel's two lists are one more such compromise. Adaptive caching with
//! multiple experts (ACME, Ari et al.; LeCaR, Vietri et al., HotStorage'18)
//! settles it online by weighing experts by their recent misses.
//!
//! Here each expert is a whole policy simulated over keys only
//! (experts.rs: S3-FIFO with an ARC-sized small queue, ARC, LRU, LFU-DA,
//! LIRS), run at the cache's capacity on every request the engine reports
//! (a miss is `folio_added`, a hit `folio_accessed`). Each keeps a miss
//! count that decays by 1 - 1/(`WINDOW` x capacity) per request; the real
//! cache follows the leader, the expert with the fewest, and a challenger
//! takes over only with `MARGIN` fewer than the leader's, so that near
//! ties do not make the cache flap between contents. S3-FIFO leads first:
//! it is the best generalist of the five, and a late switch to it on a
//! loop costs a whole cache of misses.
//!
//! Following means evicting what the leader does not hold. Each resident
//! page that an expert has evicted (or never held) waits on that expert's
//! `outcast` list, in the order the expert let it go; reclaim takes the
//! leader's oldest outcast. When there is none the real cache holds only
//! pages the leader holds, so the leader makes room itself
//! (`Expert::evict`; the engine frees a frame before it reports the miss
//! the frame is for) and the page it lets go is the candidate. So while
//! one expert leads, the cache evicts exactly what it does; after a
//! switch it first sheds what the new leader would not have kept, and
//! converges to the new leader's contents.
//!
//! Memory is bounded by the capacity: each expert holds at most that many
//! keys and ghosts of at most that many (LIRS's non-resident keys, ARC's
//! and S3-FIFO's ghosts), plus per-frame links. Written only against the
//! plug-in trait (policy.rs).

use parking_lot::Mutex;

use super::experts::{AdaptiveS3Fifo, Arc, Expert, KeyMap, Lfuda, Lirs, Lru};
use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};
use crate::page::Pfn;

/// The miss counts' memory, in capacities of requests: long enough that a
/// phase's misses, not a burst's, choose; short enough to follow a shift.
const WINDOW: f64 = 8.0;
/// How much fewer recent misses a challenger needs to take over.
const MARGIN: f64 = 0.02;

/// A frame's relation to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Not a page of the policy's.
    No,
    /// On the policy's lists.
    Yes,
    /// A candidate: the engine's until it is put back or removed.
    Isolated,
}

struct State {
    experts: Vec<Box<dyn Expert>>,
    /// Each expert's decayed recent misses.
    score: Vec<f64>,
    /// The factor scores decay by per request.
    decay: f64,
    leader: usize,
    /// Per expert: resident pages it does not hold, oldest first.
    outcast: Vec<FolioLists<1>>,
    /// Every held page in insertion order: the last resort.
    all: FolioLists<1>,
    /// Per frame: whether it is the policy's, and the key it caches.
    held: Vec<Held>,
    key: Vec<u64>,
    /// The frame of each key the policy holds or has handed out.
    pfn_of: KeyMap<Pfn>,
    /// Scratch for the keys an expert evicts on one request.
    evicted: Vec<u64>,
}

impl State {
    /// Report a request for `key` to every expert; `pfn` is its frame if
    /// it is resident and held. Updates scores, outcasts and the leader.
    fn request(&mut self, key: u64, pfn: Option<Pfn>) {
        for s in &mut self.score {
            *s *= self.decay;
        }
        for e in 0..self.experts.len() {
            let mut evicted = std::mem::take(&mut self.evicted);
            evicted.clear();
            let hit = self.experts[e].request(key, &mut evicted);
            if !hit {
                self.score[e] += 1.0;
                if let Some(pfn) = pfn {
                    self.outcast[e].remove(pfn);
                }
            }
            for k in &evicted {
                if let Some(&p) = self.pfn_of.get(k) {
                    if self.held[p as usize] == Held::Yes {
                        self.outcast[e].push_head(0, p);
                    }
                }
            }
            self.evicted = evicted;
        }
        let best = (0..self.score.len()).min_by(|&a, &b| self.score[a].total_cmp(&self.score[b])).unwrap_or(0);
        if self.score[best] < self.score[self.leader] * (1.0 - MARGIN) {
            self.leader = best;
        }
    }

    /// Take `pfn` off every list: it is a candidate now.
    fn isolate(&mut self, pfn: Pfn) {
        for o in &mut self.outcast {
            o.remove(pfn);
        }
        self.all.remove(pfn);
        self.held[pfn as usize] = Held::Isolated;
    }

    /// Put a held page on the lists: on `all`, and on the outcast list of
    /// each expert that does not hold it, as the newest.
    fn hold(&mut self, pfn: Pfn) {
        self.held[pfn as usize] = Held::Yes;
        self.all.push_head(0, pfn);
        let key = self.key[pfn as usize];
        for (e, o) in self.outcast.iter_mut().enumerate() {
            if !self.experts[e].contains(key) {
                o.push_head(0, pfn);
            }
        }
    }

    fn evict_one(&mut self) -> Option<Pfn> {
        let l = self.leader;
        if let Some(pfn) = self.outcast[l].tail(0) {
            return Some(pfn);
        }
        // The leader holds every resident page: it makes room itself. Keys
        // it holds that the cache does not (it has not led for long, or
        // the cache holds fewer pages than its capacity) go on the way:
        // it then tracks what the cache can hold.
        for _ in 0..64 {
            let Some(k) = self.experts[l].evict() else { break };
            if let Some(&pfn) = self.pfn_of.get(&k) {
                if self.held[pfn as usize] == Held::Yes {
                    return Some(pfn);
                }
            }
        }
        // Only pages handed out and put back since: any expert's, or the
        // oldest.
        (0..self.outcast.len()).find_map(|e| self.outcast[e].tail(0)).or_else(|| self.all.tail(0))
    }
}

pub struct Pcache {
    s: Mutex<State>,
}

impl Pcache {
    /// For `nr_frames` frames and a cache of `capacity` pages.
    pub fn new(nr_frames: usize, capacity: usize) -> Pcache {
        let cap = capacity.max(1);
        let experts: Vec<Box<dyn Expert>> = vec![
            Box::new(AdaptiveS3Fifo::new(cap)),
            Box::new(Arc::new(cap)),
            Box::new(Lru::new(cap)),
            Box::new(Lfuda::new(cap)),
            Box::new(Lirs::new(cap)),
        ];
        let n = experts.len();
        Pcache {
            s: Mutex::new(State {
                experts,
                score: vec![0.0; n],
                decay: 1.0 - 1.0 / (WINDOW * cap as f64).max(1.0),
                leader: 0,
                outcast: (0..n).map(|_| FolioLists::new(nr_frames)).collect(),
                all: FolioLists::new(nr_frames),
                held: vec![Held::No; nr_frames],
                key: vec![0; nr_frames],
                pfn_of: KeyMap::default(),
                evicted: Vec::new(),
            }),
        }
    }

    /// The expert followed now (an index into `new`'s list).
    #[cfg(test)]
    fn leader(&self) -> usize {
        self.s.lock().leader
    }
}

impl EvictionPolicy for Pcache {
    fn name(&self) -> &'static str {
        "pcache"
    }

    fn folio_added(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        let i = folio.pfn as usize;
        if i >= s.held.len() || s.held[i] != Held::No {
            return;
        }
        let key = folio.key();
        s.request(key, None);
        s.key[i] = key;
        s.pfn_of.insert(key, folio.pfn);
        // Every expert holds it now: on no outcast list.
        s.held[i] = Held::Yes;
        s.all.push_head(0, folio.pfn);
    }

    fn folio_accessed(&self, folio: FolioRef) {
        self.folios_accessed(&[folio]);
    }

    fn folios_accessed(&self, folios: &[FolioRef]) {
        let mut s = self.s.lock();
        for folio in folios {
            let i = folio.pfn as usize;
            if i >= s.held.len() || s.held[i] == Held::No || s.key[i] != folio.key() {
                continue;
            }
            let pfn = (s.held[i] == Held::Yes).then_some(folio.pfn);
            s.request(folio.key(), pfn);
        }
    }

    fn folio_removed(&self, folio: FolioRef, why: Removal) {
        let mut s = self.s.lock();
        let i = folio.pfn as usize;
        if i >= s.held.len() || s.held[i] == Held::No {
            return;
        }
        s.isolate(folio.pfn);
        s.held[i] = Held::No;
        let key = s.key[i];
        s.pfn_of.remove(&key);
        if why != Removal::Evicted {
            // The data is gone: a later read is new to every expert.
            for e in &mut s.experts {
                e.remove(key);
            }
        }
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut s = self.s.lock();
        while out.len() < nr {
            let Some(pfn) = s.evict_one() else { break };
            s.isolate(pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, _why: Putback) {
        let mut s = self.s.lock();
        if s.held.get(folio.pfn as usize) == Some(&Held::Isolated) {
            s.hold(folio.pfn);
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        let (i, l) = (folio.pfn as usize, s.leader);
        if s.held.get(i) == Some(&Held::Yes) {
            // Freed next: to the oldest end of the leader's outcasts.
            s.outcast[l].remove(folio.pfn);
            s.outcast[l].push_tail(0, folio.pfn);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A cache of `cap` frames driven as the engine drives a plug-in in a
    /// replay: a hit is an access; a miss frees a frame (once full) by
    /// the policy's candidate, then adds the page.
    struct Sim {
        p: Pcache,
        frame_of: HashMap<u64, Pfn>,
        free: Vec<Pfn>,
        misses: u64,
    }

    impl Sim {
        fn new(cap: usize) -> Sim {
            Sim { p: Pcache::new(cap, cap), frame_of: HashMap::new(), free: (0..cap as Pfn).rev().collect(), misses: 0 }
        }

        fn folio(pfn: Pfn, index: u64) -> FolioRef {
            FolioRef { pfn, order: 0, mapping: 1, index }
        }

        /// Request page `index`; for a miss that evicted, whether the
        /// leader (when the page was taken) still holds the victim.
        fn request(&mut self, index: u64) -> Option<bool> {
            if let Some(&pfn) = self.frame_of.get(&index) {
                self.p.folio_accessed(Sim::folio(pfn, index));
                return None;
            }
            self.misses += 1;
            let mut victim = None;
            if self.free.is_empty() {
                let mut out = Vec::new();
                self.p.evict_candidates(1, &mut out);
                let pfn = out[0].pfn;
                let (&index, _) = self.frame_of.iter().find(|(_, &f)| f == pfn).unwrap();
                self.frame_of.remove(&index);
                self.p.folio_removed(Sim::folio(pfn, index), Removal::Evicted);
                self.free.push(pfn);
                let s = self.p.s.lock();
                victim = Some(s.experts[s.leader].contains(Sim::folio(pfn, index).key()));
            }
            let pfn = self.free.pop().unwrap();
            self.frame_of.insert(index, pfn);
            self.p.folio_added(Sim::folio(pfn, index));
            victim
        }

        /// Resident pages the leader does not hold.
        fn off_leader(&self) -> usize {
            let s = self.p.s.lock();
            let leader = &s.experts[s.leader];
            self.frame_of.keys().filter(|&&i| !leader.contains(Sim::folio(0, i).key())).count()
        }
    }

    /// A tiny deterministic generator (xorshift).
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    // Goal: on a loop longer than the cache, where LRU and ARC miss every
    // time, pcache follows a loop-resistant expert (S3-FIFO or LIRS) and
    // keeps most of the cache's worth of the loop.
    #[test]
    fn loop_longer_than_the_cache_follows_a_loop_resistant_expert() {
        let mut c = Sim::new(100);
        for r in 0..30_000u64 {
            c.request(r % 120);
        }
        assert!([0, 4].contains(&c.p.leader()), "leader {}", c.p.leader());
        // LRU misses all 30000; the best keeps ~99 of 120 per pass.
        assert!(c.misses < 30_000 * 35 / 100, "{} misses", c.misses);
    }

    /// Request `r` of a hot set of 180 pages whose base moves every 2000
    /// requests, with one request in four anywhere in a wide range.
    fn shifting_hot_set(r: u64, seed: &mut u64) -> u64 {
        let x = rng(seed);
        if x.is_multiple_of(4) {
            1_000_000 + x % 5000
        } else {
            r / 2000 * 60 + x % 180
        }
    }

    // Goal: where recency rules (a hot set that moves), pcache switches
    // from S3-FIFO to an expert that misses less there, and then evicts
    // as it does: the cache's contents converge to the leader's.
    #[test]
    fn shifting_hot_set_switches_leader_and_converges() {
        let mut c = Sim::new(200);
        let mut s3 = AdaptiveS3Fifo::new(200);
        let (mut seed, mut switched, mut s3_misses, mut ev) = (7u64, false, 0, Vec::new());
        for r in 0..60_000u64 {
            let index = shifting_hot_set(r, &mut seed);
            c.request(index);
            switched |= c.p.leader() != 0;
            ev.clear();
            s3_misses += !s3.request(Sim::folio(0, index).key(), &mut ev) as u64;
        }
        assert!(switched, "never left S3-FIFO");
        assert!(c.misses < s3_misses, "pcache {} misses, S3-FIFO {s3_misses}", c.misses);
        // Whoever leads now, the cache holds (nearly) only its pages.
        assert!(c.off_leader() <= 2, "{} resident pages the leader does not hold", c.off_leader());
    }

    // Goal: every page reclaim takes is one the leader does not hold (it
    // evicted it now or before), whichever expert leads.
    #[test]
    fn victims_are_never_the_leaders() {
        let mut c = Sim::new(64);
        let mut seed = 3u64;
        for r in 0..20_000u64 {
            let x = rng(&mut seed);
            // Phases: a loop, then Zipf-like skew, then random.
            let index = match r / 5000 {
                0 | 2 => r % 80,
                1 => (x % 64) * (x % 64) / 64,
                _ => x % 300,
            };
            assert_ne!(c.request(index), Some(true), "request {r}: the leader holds the victim");
        }
    }

    // Goal: the engine's contract beyond a replay: a candidate put back is
    // held again (on the outcast lists of experts that lack it), a
    // reclaimable page goes first, a truncated page is forgotten by the
    // experts too.
    #[test]
    fn putback_reclaimable_and_truncation() {
        let p = Pcache::new(16, 8);
        for pfn in 0..8 {
            p.folio_added(Sim::folio(pfn, pfn as u64));
        }
        let mut out = Vec::new();
        p.evict_candidates(2, &mut out);
        assert_eq!(out.len(), 2);
        p.folio_putback(out[0], Putback::Dirty);
        p.folio_reclaimable(Sim::folio(out[0].pfn, 0));
        let mut next = Vec::new();
        p.evict_candidates(1, &mut next);
        assert_eq!(next[0].pfn, out[0].pfn, "the reclaimable page goes first");
        p.folio_removed(Sim::folio(3, 3), Removal::Truncated);
        let s = p.s.lock();
        assert!(s.experts.iter().all(|e| !e.contains(Sim::folio(3, 3).key())));
        assert_eq!(s.held[3], Held::No);
    }
}

//! Adaptive W-TinyLFU admission in front of the two LRU lists (pcache's
//! own; no kernel counterpart). Selected by `Tunables::admission`.
//!
//! The kernel's two lists lose everything on a loop or a scan slightly
//! larger than memory: every page is evicted from the inactive list before
//! it is used again, and workingset detection cannot help because the
//! active list it compares refault distances against stays empty.
//! TinyLFU (Einziger, Friedman and Manes, 2017) keeps an approximate
//! access count of every page, resident or not, in a small count-min
//! sketch, and lets a new page displace an old one only if it is used more
//! often. Here that becomes:
//!
//! ```text
//!   miss --> window list --(window over target: contest)--> inactive head
//!                 |                       \--(lost)--------> inactive tail (probation)
//!                 +--(second access)--> active list
//! ```
//!
//! * A new page goes to the head of a window list.
//! * When the window is longer than its target, its oldest page (the
//!   candidate) meets the inactive tail (the victim): the candidate is
//!   admitted to the inactive head if the sketch counts it strictly more
//!   often than the victim; otherwise it goes to the inactive tail with
//!   PG_probation and is the next page reclaimed. On a loop every page has
//!   the same count, so candidates lose and a fixed part of the loop stays
//!   cached instead of none of it.
//! * A refault that workingset detection would activate is activated only
//!   if it also beats the victim's count, so loops cannot flush the active
//!   list through refault activation either.
//! * The window is FIFO-like: a second access there only sets
//!   PG_referenced (and counts in the sketch); it does not activate, so the
//!   pages around the turn of a zigzag or a short loop do not churn the
//!   active list.
//! * The window's target adapts as ARC's does (Megiddo and Modha, 2003):
//!   evicted pages leave a shadow entry saying whether they lost the
//!   contest (window side) or aged out of the lists (main side). A refault
//!   of a window-side page within four window lengths means recency was
//!   undervalued: the window grows by one page; a refault of a main-side
//!   page within the cache's size means frequency was undervalued: it
//!   shrinks by one. The target stays between 1% of memory (at least 4
//!   pages) and all of it. A recency-friendly workload thus drifts towards
//!   the kernel's behaviour, a looping one towards LFU.
//!
//! Use-once pages (a stream, a scan) have a count of one, lose the contest
//! and leave through the inactive tail without touching the working set.
//!
//! * Frequency admission loses where recency is all there is (a hot set
//!   that moves, objects that are born popular, LRU-friendly stack
//!   distances): newcomers lose the contest to pages whose counts are
//!   stale. So the policy duels (set dueling, Qureshi et al. 2007, done
//!   as miniature simulations, Waldspurger et al. 2017): a sample of the
//!   page keys (one in `rate`, so that the miniature caches hold
//!   `DUEL_PAGES` to four times as many) runs through two small simulated
//!   caches of the cache's size over `rate`, a plain LRU and a W-TinyLFU
//!   with the same sketch and the window scaled down. Their misses are
//!   counted with decay; while the LRU misses at least `DUEL_MARGIN_PML`
//!   fewer, the contest is off ("admit all"): new pages skip the window
//!   and go to the inactive list, what is left in the window drains to
//!   the inactive head, and refaults are judged by workingset detection
//!   alone, i.e. exactly the kernel's lists. The hit path only puts a
//!   sampled key in a lossy ring (one fetch_add and one store); the
//!   simulations run under lru_lock when the window is balanced.
//!
//! The sketch has 4-bit counters, four per page in one 64-bit word, so an
//! increment is four relaxed read-modify-writes on one cache line; it ages
//! (halves every counter) after 10 accesses per frame, as TinyLFU's reset.

use std::collections::HashMap;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::lruvec::LruGuard;
use crate::mm::Cache;
use crate::page::*;
use crate::vmstat::Item;
use crate::LruList;

/// The sketch has at least this many words (16 counters each): small
/// caches over large files would otherwise alias most pages.
const SKETCH_MIN_WORDS: u64 = 4096;
/// The window never shrinks below 1% of memory nor below this many pages.
const WINDOW_MIN_PAGES: u64 = 4;
/// Window-side refaults are evidence for a larger window only within this
/// many times its target.
const WINDOW_GHOST_FACTOR: u64 = 4;
/// Accesses a thread counts before adding them to a sketch's sample.
const SAMPLE_BATCH: u32 = 64;
/// The dueling miniature caches hold at least this many sampled pages and
/// fewer than four times as many (all pages when the cache is smaller).
const DUEL_PAGES: u64 = 1024;
/// Slots of the ring that carries sampled keys from the hit path.
const DUEL_RING: usize = 4096;
/// The LRU must miss this much less (per mille) than the W-TinyLFU
/// simulation to turn the contest off, and this much more to turn it
/// back on (hysteresis: both simulations are only approximations of the
/// engine's two modes, and each switch costs misses while the lists
/// settle).
const DUEL_MARGIN_PML: u64 = 100;
/// The duel's miss counts halve every this many miniature cache sizes of
/// sampled accesses, so the verdict follows phases.
const DUEL_DECAY: u64 = 2;

std::thread_local! {
    /// This thread's accesses not yet added to a sample, and the sketch
    /// (its id) they belong to.
    static SAMPLES: std::cell::Cell<(u64, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counters saturate at 15.
const COUNTER_MAX: u64 = 15;
/// Every nibble's low three bits: halving is `(w >> 1) & RESET_MASK`.
const RESET_MASK: u64 = 0x7777_7777_7777_7777;

/// A count-min sketch of 4-bit counters: each key picks one 64-bit word
/// (16 counters) and four counters in it, one per hash.
pub struct FrequencySketch {
    table: Box<[AtomicU64]>,
    mask: u64,
    samples: AtomicU64,
    sample_size: u64,
    /// Unique per sketch (addresses are reused), for the per-thread sample.
    id: u64,
}

// std, not loom: a process-wide counter outside any model.
static NEXT_SKETCH_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[inline]
fn mix(mut h: u64) -> u64 {
    // splitmix64's finaliser: cheap and well spread.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The sketch key of page `index` of file `id`.
#[inline]
pub fn page_key(id: u32, index: u64) -> u64 {
    mix(((id as u64) << 40) ^ index)
}

impl FrequencySketch {
    /// A sketch for a cache of `nr_pages` frames: one word per frame
    /// (rounded to a power of two), aging every 10 accesses per frame.
    pub fn new(nr_pages: u64) -> FrequencySketch {
        let words = nr_pages.max(SKETCH_MIN_WORDS).next_power_of_two();
        FrequencySketch {
            table: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: words - 1,
            samples: AtomicU64::new(0),
            sample_size: 10 * nr_pages.max(64),
            id: NEXT_SKETCH_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The word and the four nibble shifts of `key`.
    #[inline]
    fn slots(&self, key: u64) -> (usize, [u32; 4]) {
        let word = (key & self.mask) as usize;
        let h = key >> 32;
        // Four distinct nibbles of the 16, from 4 bits of the hash each.
        let mut shifts = [0u32; 4];
        for (i, s) in shifts.iter_mut().enumerate() {
            let nib = ((h >> (i * 8)) & 3) as u32 + (i as u32) * 4;
            *s = nib * 4;
        }
        (word, shifts)
    }

    /// The estimated access count of `key` (0..=15).
    #[inline]
    pub fn frequency(&self, key: u64) -> u64 {
        let (word, shifts) = self.slots(key);
        let w = self.table[word].load(Ordering::Relaxed);
        shifts.iter().map(|&s| (w >> s) & COUNTER_MAX).min().unwrap_or(0)
    }

    /// Count one access of `key`. Increments race benignly: a lost update
    /// only makes the estimate a little low. A saturated key (a hot page)
    /// costs one load and no shared write: the aging sample is counted
    /// per thread and added to the shared count every `SAMPLE_BATCH`
    /// accesses.
    pub fn increment(&self, key: u64) {
        let (word, shifts) = self.slots(key);
        let slot = &self.table[word];
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            let mut new = w;
            for &s in &shifts {
                if (new >> s) & COUNTER_MAX < COUNTER_MAX {
                    new += 1 << s;
                }
            }
            if new == w {
                break;
            }
            match slot.compare_exchange_weak(w, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(cur) => w = cur,
            }
        }
        let me = self.id;
        let batch = SAMPLES.with(|c| {
            let (owner, n) = c.get();
            // Another sketch's leftover is dropped, so a single-threaded
            // replay ages at the same accesses whatever ran before it.
            let n = if owner == me { n + 1 } else { 1 };
            c.set((me, if n == SAMPLE_BATCH { 0 } else { n }));
            n == SAMPLE_BATCH
        });
        if batch {
            let before = self.samples.fetch_add(SAMPLE_BATCH as u64, Ordering::Relaxed);
            if before < self.sample_size && before + SAMPLE_BATCH as u64 >= self.sample_size {
                self.reset();
            }
        }
    }

    /// Age every counter by half, so the sketch follows a changing
    /// workload. The one thread that reaches the sample size does it.
    fn reset(&self) {
        for w in self.table.iter() {
            let v = w.load(Ordering::Relaxed);
            w.store((v >> 1) & RESET_MASK, Ordering::Relaxed);
        }
        self.samples.fetch_sub(self.sample_size / 2, Ordering::Relaxed);
    }
}

/// What the hit and miss paths ask about admission: the adaptive state
/// when it is selected, and whether hits may set the PAGE_HOT hint. Set
/// once at `Cache::new`; read-only after.
pub struct AdmissionCtl {
    state: Option<AdmissionState>,
    hot_hints: bool,
}

impl AdmissionCtl {
    /// `plug_in`: an eviction policy plug-in holds the file pages.
    pub fn new(config: &crate::tunables::Config, plug_in: bool) -> AdmissionCtl {
        let t = &config.tunables;
        AdmissionCtl {
            // The admission window sits in front of the classic lists only.
            state: (t.admission == crate::tunables::Admission::AdaptiveTinyLfu && t.lru == crate::LruPolicy::Classic)
                .then(|| AdmissionState::new(config.nr_pages())),
            // Not with Danilov's batch, which queues even no-op marks; the
            // multi-gen LRU counts every access (folio_inc_refs).
            // A plug-in policy's pages are never active: a counted one has
            // its own hint (policy.rs).
            hot_hints: t.lru_batching != crate::LruBatching::DanilovBatch
                && t.lru == crate::LruPolicy::Classic
                && !plug_in,
        }
    }

    /// The adaptive state, when `Admission::AdaptiveTinyLfu` is selected.
    #[inline]
    pub fn state(&self) -> Option<&AdmissionState> {
        self.state.as_ref()
    }

    /// Whether hits may use the PAGE_HOT hint.
    #[inline]
    pub fn hot_hints(&self) -> bool {
        self.hot_hints
    }
}

/// The adaptive admission state of a cache.
pub struct AdmissionState {
    pub sketch: FrequencySketch,
    /// The window list's target length in pages.
    pub window_target: AtomicU64,
    pub window_min: u64,
    /// Frames of the cache: the window's largest target, and the farthest
    /// main-side refault that counts as a ghost hit.
    pub nr_pages: u64,
    /// The duel's verdict: the LRU simulation is winning, admit every
    /// window page and let workingset detection judge refaults.
    pub admit_all: AtomicBool,
    /// Sampled keys from the hit path, for the duel.
    pub ring: SampleRing,
    /// One key in `duel_rate` is sampled (a power of two).
    pub duel_rate: u64,
    duel: parking_lot::Mutex<Duel>,
}

impl AdmissionState {
    pub fn new(nr_pages: u64) -> AdmissionState {
        let window_min = (nr_pages / 100).max(WINDOW_MIN_PAGES);
        // Half the power of two at or above pages / DUEL_PAGES: the
        // miniature caches hold DUEL_PAGES to 4 * DUEL_PAGES - 1 keys.
        let duel_rate = if nr_pages / DUEL_PAGES >= 2 { (nr_pages / DUEL_PAGES).next_power_of_two() / 2 } else { 1 };
        let duel_pages = (nr_pages / duel_rate).max(2);
        AdmissionState {
            sketch: FrequencySketch::new(nr_pages),
            window_target: AtomicU64::new(window_min),
            window_min,
            nr_pages: nr_pages.max(window_min),
            admit_all: AtomicBool::new(false),
            ring: SampleRing::new(DUEL_RING),
            duel_rate,
            duel: parking_lot::Mutex::new(Duel::new(duel_pages)),
        }
    }

    /// Is `key` in the duel's sample?
    #[inline]
    pub fn sampled(&self, key: u64) -> bool {
        // The low bits pick the sketch's word; the sample uses others.
        (key >> 48) & (self.duel_rate - 1) == 0
    }

    /// Run the sampled keys waiting in the ring through both simulations
    /// and update the verdict. Called with lru_lock held (the one
    /// consumer).
    pub fn duel_drain(&self) {
        let mut d = self.duel.lock();
        let window = (self.window_target.load(Ordering::Relaxed) / self.duel_rate).max(1);
        let mut any = false;
        self.ring.drain(|key| {
            any = true;
            d.access(key, window, &self.sketch);
        });
        if any {
            let (lru, tlfu) = (d.lru_misses, d.tlfu_misses);
            let all = self.admit_all.load(Ordering::Relaxed);
            let verdict = if all {
                lru * 1000 <= tlfu * (1000 + DUEL_MARGIN_PML)
            } else {
                lru * 1000 < tlfu * (1000 - DUEL_MARGIN_PML)
            };
            if verdict != all {
                self.admit_all.store(verdict, Ordering::Relaxed);
            }
        }
    }

    /// A refault of a page evicted `distance` clock ticks ago from the
    /// window side (`probation`) or the main side: move the window target
    /// one page towards the side that would have kept it.
    pub fn ghost_hit(&self, distance: u64, probation: bool) {
        let t = self.window_target.load(Ordering::Relaxed);
        // A window-side page counts only if a window a few times larger
        // would have kept it: on a loop larger than memory every rejected
        // page comes back, but from too far for any window to help.
        let limit = if probation { t * WINDOW_GHOST_FACTOR } else { self.nr_pages };
        if distance > limit {
            return;
        }
        let new = if probation { (t + 1).min(self.nr_pages) } else { t.saturating_sub(1).max(self.window_min) };
        self.window_target.store(new, Ordering::Relaxed);
    }
}

impl Cache {
    /// Do new file pages go to the admission window? Not while the duel
    /// says LRU: they go to the inactive list as with the kernel's
    /// admission.
    #[inline]
    pub fn admission_windowed(&self) -> bool {
        self.admission.state().is_some_and(|a| !a.admit_all.load(Ordering::Relaxed))
    }

    /// Count an access to page `index` of file `id` in the sketch.
    #[inline]
    pub fn admission_access(&self, id: u32, index: u64) {
        if let Some(a) = self.admission.state() {
            let key = page_key(id, index);
            a.sketch.increment(key);
            if a.sampled(key) {
                a.ring.push(key);
            }
        }
    }

    /// The sketch's count of the page at `pfn`.
    fn page_frequency(&self, a: &AdmissionState, pfn: Pfn) -> u64 {
        let page = self.page(pfn);
        a.sketch.frequency(page_key(page.mapping(), page.index()))
    }

    /// Does a refaulting page with sketch key `key` beat the inactive tail?
    /// Read without lru_lock: the tail may change under us, which only
    /// makes this heuristic compare against a neighbour.
    pub fn admission_beats_victim(&self, key: u64) -> bool {
        let Some(a) = self.admission.state() else { return true };
        if a.admit_all.load(Ordering::Relaxed) {
            return true;
        }
        match self.lruvec.tail_hint(LruList::InactiveFile) {
            Some(victim) => a.sketch.frequency(key) > self.page_frequency(a, victim),
            None => true,
        }
    }

    /// With lru_lock held: while the window is over its target, let its
    /// oldest page contest the inactive tail (see the module comment).
    /// Pages move only between lists; at most `window_len - target` of
    /// them.
    pub fn window_balance(&self, lru: &mut LruGuard<'_>) {
        let Some(a) = self.admission.state() else { return };
        a.duel_drain();
        let target = if a.admit_all.load(Ordering::Relaxed) { 0 } else { a.window_target.load(Ordering::Relaxed) };
        while lru.len(LruList::Window) > target {
            let Some(cand) = lru.tail(LruList::Window) else { break };
            self.window_admit(a, lru, cand);
        }
    }

    /// Move window page `cand` (lru_lock held) to the inactive head if it
    /// wins against the inactive tail, else to the inactive tail.
    fn window_admit(&self, a: &AdmissionState, lru: &mut LruGuard<'_>, cand: Pfn) {
        let page = self.page(cand);
        lru.del(cand, LruList::Window);
        page.clear(PG_WINDOW, &self.vm);
        let wins = a.admit_all.load(Ordering::Relaxed)
            || match lru.tail(LruList::InactiveFile) {
                Some(victim) => self.page_frequency(a, cand) > self.page_frequency(a, victim),
                None => true,
            };
        if wins {
            self.vm.inc(Item::admission_admit);
            lru.add(cand, LruList::InactiveFile);
        } else {
            self.vm.inc(Item::admission_reject);
            page.set(PG_PROBATION, &self.vm);
            lru.add_tail(cand, LruList::InactiveFile);
        }
    }

    /// With lru_lock held: reclaim needs inactive pages but the window
    /// holds them; move up to `nr` window pages to the inactive tail
    /// through the contest.
    pub fn window_shrink(&self, lru: &mut LruGuard<'_>, nr: u64) {
        let Some(a) = self.admission.state() else { return };
        for _ in 0..nr {
            let Some(cand) = lru.tail(LruList::Window) else { break };
            self.window_admit(a, lru, cand);
        }
    }
}

/// A lossy multi-producer ring of sampled keys with one consumer (under
/// lru_lock). A producer takes a slot index with one fetch_add and stores
/// its key there; the consumer swaps every slot up to the head with 0.
/// A key stored after the consumer passed its slot waits for the next
/// lap; one overwritten before it was read is lost: the duel only needs
/// a sample.
pub struct SampleRing {
    slots: Box<[AtomicU64]>,
    head: AtomicU64,
    tail: AtomicU64,
}

impl SampleRing {
    pub fn new(size: usize) -> SampleRing {
        let size = size.next_power_of_two();
        SampleRing {
            slots: (0..size).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// Queue `key` (0 is stored as 1: 0 marks an empty slot).
    #[inline]
    pub fn push(&self, key: u64) {
        let i = self.head.fetch_add(1, Ordering::Relaxed) as usize & (self.slots.len() - 1);
        self.slots[i].store(key.max(1), Ordering::Release);
    }

    /// Hand every key queued since the last drain to `f`, oldest first
    /// (the newest `slots.len()` of them if more were pushed). One
    /// consumer at a time.
    pub fn drain(&self, mut f: impl FnMut(u64)) {
        let head = self.head.load(Ordering::Acquire);
        let n = self.slots.len() as u64;
        let tail = self.tail.load(Ordering::Relaxed).max(head.saturating_sub(n));
        for i in tail..head {
            let k = self.slots[i as usize & (n as usize - 1)].swap(0, Ordering::Acquire);
            if k != 0 {
                f(k);
            }
        }
        self.tail.store(head, Ordering::Relaxed);
    }
}

const NIL: u32 = u32::MAX;

/// An LRU list of keys with O(1) lookup, for the miniature simulations.
struct MiniLru {
    map: HashMap<u64, u32>,
    /// (key, prev, next); prev points towards the head (most recent).
    nodes: Vec<(u64, u32, u32)>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl MiniLru {
    fn new() -> MiniLru {
        MiniLru { map: HashMap::new(), nodes: Vec::new(), free: Vec::new(), head: NIL, tail: NIL }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn unlink(&mut self, i: u32) {
        let (_, prev, next) = self.nodes[i as usize];
        if prev == NIL {
            self.head = next
        } else {
            self.nodes[prev as usize].2 = next
        }
        if next == NIL {
            self.tail = prev
        } else {
            self.nodes[next as usize].1 = prev
        }
    }

    fn link_head(&mut self, i: u32) {
        self.nodes[i as usize].1 = NIL;
        self.nodes[i as usize].2 = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].1 = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Is `key` here? If so and `touch`, move it to the head.
    fn lookup(&mut self, key: u64, touch: bool) -> bool {
        let Some(&i) = self.map.get(&key) else { return false };
        if touch && self.head != i {
            self.unlink(i);
            self.link_head(i);
        }
        true
    }

    fn push_head(&mut self, key: u64) {
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize].0 = key;
                i
            }
            None => {
                self.nodes.push((key, NIL, NIL));
                (self.nodes.len() - 1) as u32
            }
        };
        self.link_head(i);
        self.map.insert(key, i);
    }

    fn tail_key(&self) -> Option<u64> {
        (self.tail != NIL).then(|| self.nodes[self.tail as usize].0)
    }

    fn pop_tail(&mut self) -> Option<u64> {
        let i = self.tail;
        if i == NIL {
            return None;
        }
        self.unlink(i);
        let key = self.nodes[i as usize].0;
        self.map.remove(&key);
        self.free.push(i);
        Some(key)
    }
}

/// The two miniature caches of the duel and their decayed miss counts.
struct Duel {
    pages: usize,
    lru: MiniLru,
    window: MiniLru,
    main: MiniLru,
    lru_misses: u64,
    tlfu_misses: u64,
    accesses: u64,
}

impl Duel {
    fn new(pages: u64) -> Duel {
        Duel {
            pages: pages as usize,
            lru: MiniLru::new(),
            window: MiniLru::new(),
            main: MiniLru::new(),
            lru_misses: 0,
            tlfu_misses: 0,
            accesses: 0,
        }
    }

    /// One sampled access through both simulations; `window` is the
    /// W-TinyLFU window in sampled pages.
    fn access(&mut self, key: u64, window: u64, sketch: &FrequencySketch) {
        self.accesses += 1;
        if self.accesses >= DUEL_DECAY * self.pages as u64 {
            self.accesses = 0;
            self.lru_misses /= 2;
            self.tlfu_misses /= 2;
        }
        if !self.lru.lookup(key, true) {
            self.lru_misses += 1;
            if self.lru.len() >= self.pages {
                self.lru.pop_tail();
            }
            self.lru.push_head(key);
        }
        let window = (window as usize).min(self.pages - 1).max(1);
        if self.window.lookup(key, true) || self.main.lookup(key, true) {
            return;
        }
        self.tlfu_misses += 1;
        self.window.push_head(key);
        while self.window.len() > window {
            let Some(cand) = self.window.pop_tail() else { break };
            if self.main.len() + self.window.len() < self.pages {
                self.main.push_head(cand);
                continue;
            }
            let Some(victim) = self.main.tail_key() else {
                self.main.push_head(cand);
                continue;
            };
            if sketch.frequency(cand) > sketch.frequency(victim) {
                self.main.pop_tail();
                self.main.push_head(cand);
            }
        }
        while self.main.len() + self.window.len() > self.pages {
            if self.main.pop_tail().is_none() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the sketch counts up to 15, estimates never undercount a key
    // that was not aged, and aging halves counts.
    #[test]
    fn sketch_counts_and_ages() {
        let s = FrequencySketch::new(1024);
        let k = page_key(1, 42);
        assert_eq!(s.frequency(k), 0);
        for i in 1..=20 {
            s.increment(k);
            assert_eq!(s.frequency(k), i.min(COUNTER_MAX));
        }
        // Other keys only ever add to k's estimate (count-min).
        for i in 0..500 {
            s.increment(page_key(2, i));
        }
        assert_eq!(s.frequency(k), COUNTER_MAX);
        s.reset();
        assert_eq!(s.frequency(k), 7);
    }

    // Goal: the window target moves one page towards the side whose
    // evicted pages refault within the cache's size, within its bounds.
    #[test]
    fn ghost_hits_move_the_window_target() {
        let a = AdmissionState::new(1000);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 10);
        a.ghost_hit(5, true);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 11);
        // Window side: within 4 window lengths only.
        a.ghost_hit(44, true);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 12);
        a.ghost_hit(49, true);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 12);
        // Main side: within the cache's size.
        a.ghost_hit(1000, false);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 11);
        a.ghost_hit(1001, false);
        assert_eq!(a.window_target.load(Ordering::Relaxed), 11);
        for _ in 0..5 {
            a.ghost_hit(5, false);
        }
        assert_eq!(a.window_target.load(Ordering::Relaxed), 10);
    }

    // Goal: the ring hands over what was pushed, oldest first, each key
    // once; past its size only the newest keys survive; 0 is stored as 1.
    #[test]
    fn sample_ring_drains_in_order_and_drops_the_oldest() {
        let r = SampleRing::new(4);
        let mut got = Vec::new();
        r.drain(|k| got.push(k));
        assert!(got.is_empty());
        for k in [5, 0, 7] {
            r.push(k);
        }
        r.drain(|k| got.push(k));
        assert_eq!(got, [5, 1, 7]);
        got.clear();
        r.drain(|k| got.push(k));
        assert!(got.is_empty(), "drained twice");
        for k in 10..16 {
            r.push(k);
        }
        r.drain(|k| got.push(k));
        assert_eq!(got, [12, 13, 14, 15]);
    }

    // Goal: the miniature LRU keeps the most recent keys and evicts from
    // the tail; a touched key moves to the head.
    #[test]
    fn mini_lru_order() {
        let mut l = MiniLru::new();
        for k in 1..=3 {
            l.push_head(k);
        }
        assert_eq!(l.tail_key(), Some(1));
        assert!(l.lookup(1, true));
        assert_eq!(l.tail_key(), Some(2));
        assert_eq!(l.pop_tail(), Some(2));
        assert!(!l.lookup(2, false));
        l.push_head(4);
        assert_eq!(l.len(), 3);
        assert_eq!((l.pop_tail(), l.pop_tail(), l.pop_tail(), l.pop_tail()), (Some(3), Some(1), Some(4), None));
    }

    /// Feed `keys` through the sketch and the duel, as the cache does.
    fn duel_run(a: &AdmissionState, keys: impl Iterator<Item = u64>) {
        for (i, k) in keys.enumerate() {
            let key = page_key(1, k);
            a.sketch.increment(key);
            a.ring.push(key);
            if i % 512 == 511 {
                a.duel_drain();
            }
        }
        a.duel_drain();
    }

    // Goal: the duel's verdict. A loop 1.5 times the cache: the LRU
    // simulation misses everything, W-TinyLFU keeps part: contest on. A
    // working set that moves to new pages after the old ones were used
    // often: W-TinyLFU keeps the stale pages, the LRU follows: admit all.
    // Back on the loop, the contest returns.
    #[test]
    fn duel_verdict_follows_the_workload() {
        let a = AdmissionState::new(512);
        assert_eq!(a.duel_rate, 1);
        duel_run(&a, (0..10).flat_map(|_| 0..768));
        assert!(!a.admit_all.load(Ordering::Relaxed), "loop: contest");
        duel_run(&a, (0..8).flat_map(|_| 10_000..10_400));
        duel_run(&a, (0..8).flat_map(|_| 20_000..20_400));
        assert!(a.admit_all.load(Ordering::Relaxed), "moving working set: admit all");
        duel_run(&a, (0..20).flat_map(|_| 30_000..30_768));
        assert!(!a.admit_all.load(Ordering::Relaxed), "loop again: contest");
    }

    // Goal: large caches sample one key in `duel_rate` so the miniature
    // caches hold between DUEL_PAGES and four times that.
    #[test]
    fn duel_samples_large_caches() {
        for pages in [100, 2047, 2048, 4096, 5000, 9000, 1 << 20] {
            let a = AdmissionState::new(pages);
            assert!(a.duel_rate.is_power_of_two());
            let mini = pages / a.duel_rate;
            assert!(a.duel_rate == 1 || (DUEL_PAGES..4 * DUEL_PAGES).contains(&mini), "{pages}: rate {}", a.duel_rate);
        }
    }
}

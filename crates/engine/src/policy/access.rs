//! How a `Batched` plug-in hears of accesses without a lock on the hit
//! path: one ring of `PAGEVEC_SIZE` entries per thread slot (percpu.rs),
//! as the kernel keeps one pagevec per CPU.
//!
//! A ring has one producer, the thread that owns the slot, and consumers
//! that take its entries under the ring's `drain` mutex: the owner when the
//! ring fills or before it adds a page, and reclaim (every ring) before it
//! asks the policy for candidates. The producer writes an entry, then
//! publishes it by storing `head` (release); a consumer reads `head`
//! (acquire), copies the entries up to it, then frees them by storing
//! `tail` (release), and the producer reads `tail` (acquire) before it
//! writes over a slot. So an entry is copied only after it was written and
//! overwritten only after it was copied (loom model
//! `policy_access_ring_delivers_each_entry_once`). Threads past the slots
//! share the overflow ring and produce under its mutex.
//!
//! An entry is a `FolioRef` in two words and holds no reference: delivery
//! drops those whose frame no longer caches the same page.

use crate::page::Pfn;
use crate::percpu::{thread_slot, OVERFLOW_SLOT};
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::Mutex;

use super::FolioRef;
#[cfg(not(loom))]
use crate::pagevec::PAGEVEC_SIZE;

/// Entries a ring holds: a pagevec's (two in the loom model).
#[cfg(not(loom))]
pub(crate) const RING: usize = PAGEVEC_SIZE;
#[cfg(loom)]
pub(crate) const RING: usize = 2;

/// One thread slot's queued accesses, on its own cache lines.
#[repr(align(128))]
pub(crate) struct AccessRing {
    /// Entries published; written by the producer only.
    head: AtomicUsize,
    /// Entries taken; written under `drain` only.
    tail: AtomicUsize,
    entries: [[AtomicU64; 2]; RING],
    drain: Mutex<()>,
}

impl Default for AccessRing {
    fn default() -> Self {
        AccessRing {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            entries: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            drain: Mutex::new(()),
        }
    }
}

/// A batch taken from a ring.
pub(crate) struct Taken {
    n: usize,
    folios: [FolioRef; RING],
}

impl Taken {
    pub(crate) fn folios(&self) -> &[FolioRef] {
        &self.folios[..self.n]
    }
}

fn pack(f: FolioRef) -> [u64; 2] {
    debug_assert!(f.index < 1 << 56, "index {} does not fit an access entry", f.index);
    [f.pfn as u64 | (f.mapping as u64) << 32, f.index | (f.order as u64) << 56]
}

fn unpack(w: [u64; 2]) -> FolioRef {
    FolioRef {
        pfn: w[0] as Pfn,
        mapping: (w[0] >> 32) as u32,
        index: w[1] & ((1 << 56) - 1),
        order: (w[1] >> 56) as u8,
    }
}

impl AccessRing {
    /// The producer's side: publish `f`; a batch when the ring is full
    /// (taken under `drain`), for the caller to deliver. The caller owns
    /// the ring, or holds `drain` (`locked`: the overflow ring).
    fn push(&self, f: FolioRef, locked: bool) -> Option<Taken> {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        debug_assert!(h - t < RING, "a full ring is taken when it fills");
        let [w0, w1] = pack(f);
        let e = &self.entries[h % RING];
        e[0].store(w0, Ordering::Relaxed);
        e[1].store(w1, Ordering::Relaxed);
        self.head.store(h + 1, Ordering::Release);
        if h + 1 - t < RING {
            return None;
        }
        if locked {
            Some(self.take_locked())
        } else {
            let _g = self.drain.lock();
            Some(self.take_locked())
        }
    }

    /// A consumer's side, under `drain`: copy what is published, free it.
    fn take_locked(&self) -> Taken {
        let t = self.tail.load(Ordering::Relaxed);
        let h = self.head.load(Ordering::Acquire);
        let mut out = Taken { n: h - t, folios: [FolioRef { pfn: 0, order: 0, mapping: 0, index: 0 }; RING] };
        for (i, slot) in (t..h).zip(out.folios.iter_mut()) {
            let e = &self.entries[i % RING];
            *slot = unpack([e[0].load(Ordering::Relaxed), e[1].load(Ordering::Relaxed)]);
        }
        self.tail.store(h, Ordering::Release);
        out
    }

    /// The owner's push (see `push`).
    pub(crate) fn push_owned(&self, f: FolioRef) -> Option<Taken> {
        self.push(f, false)
    }

    /// Take whatever is published (any thread).
    pub(crate) fn take(&self) -> Option<Taken> {
        let _g = self.drain.lock();
        let taken = self.take_locked();
        (taken.n > 0).then_some(taken)
    }
}

/// Every thread slot's ring, the overflow one last.
pub(crate) struct AccessRings {
    rings: Box<[AccessRing]>,
}

impl AccessRings {
    /// `n` rings: one per thread slot and the overflow one (0 for none).
    pub(crate) fn new(n: usize) -> AccessRings {
        AccessRings { rings: (0..n).map(|_| AccessRing::default()).collect() }
    }

    /// Queue an access on this thread's ring; a full ring's batch is
    /// handed to `deliver` with no lock held.
    #[inline]
    pub(crate) fn queue(&self, f: FolioRef, deliver: impl FnOnce(&[FolioRef])) {
        let slot = thread_slot();
        let taken = if slot == OVERFLOW_SLOT {
            let ring = &self.rings[self.rings.len() - 1];
            let _g = ring.drain.lock();
            ring.push(f, true)
        } else {
            self.rings[slot].push_owned(f)
        };
        if let Some(t) = taken {
            deliver(t.folios());
        }
    }

    /// Hand this thread's queued accesses (or every ring's, `all`) to
    /// `deliver`, each ring's in the order they were queued.
    pub(crate) fn drain(&self, all: bool, mut deliver: impl FnMut(&[FolioRef])) {
        if self.rings.is_empty() {
            return;
        }
        if all {
            // Slots never handed out have empty rings.
            let used = crate::percpu::slots_in_use();
            let last = self.rings.len() - 1;
            for ring in self.rings[..used.min(last)].iter().chain(std::iter::once(&self.rings[last])) {
                if let Some(t) = ring.take() {
                    deliver(t.folios());
                }
            }
        } else {
            let slot = thread_slot().min(self.rings.len() - 1);
            if let Some(t) = self.rings[slot].take() {
                deliver(t.folios());
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // Goal: an entry survives its packing, the widest fields included.
    #[test]
    fn entries_pack_and_unpack() {
        for f in [
            FolioRef { pfn: 0, order: 0, mapping: 0, index: 0 },
            FolioRef { pfn: u32::MAX - 1, order: 9, mapping: u32::MAX, index: (1 << 56) - 1 },
        ] {
            assert_eq!(unpack(pack(f)), f);
        }
    }

    // Goal: a ring hands over each entry once, in order: when it fills,
    // and what is left when taken.
    #[test]
    fn a_ring_fills_and_drains_in_order() {
        let ring = AccessRing::default();
        let f = |i: u64| FolioRef { pfn: i as u32, order: 0, mapping: 1, index: i };
        let mut seen = Vec::new();
        for i in 0..(RING as u64 * 2 + 3) {
            if let Some(t) = ring.push_owned(f(i)) {
                assert_eq!(t.folios().len(), RING);
                seen.extend(t.folios().iter().map(|f| f.index));
            }
        }
        seen.extend(ring.take().expect("three left").folios().iter().map(|f| f.index));
        assert!(ring.take().is_none());
        assert_eq!(seen, (0..RING as u64 * 2 + 3).collect::<Vec<_>>());
    }
}

//! pcache's own plug-in policy (`policy=pcache`): S3-FIFO's queues with
//! the small queue sized as ARC sizes its recency list.
//!
//! S3-FIFO (s3fifo.rs) keeps new pages in a small FIFO and promotes those
//! used there to a main CLOCK; its small queue is a fixed tenth of the
//! cache. That tenth is right for traces of many one-hit wonders and
//! wrong for a working set whose reuse distance is longer than the small
//! queue but shorter than the cache (every page leaves before its second
//! use) or for loops and frequency-heavy mixes where main needs all the
//! room it can get. ARC (Megiddo and Modha, FAST'03) settles that kind of
//! split online from its two ghost lists: a hit in the ghost of one list
//! says that list was too short, by how much the ratio of the ghosts'
//! sizes says.
//!
//! Here the small queue's target `p` moves the same way. Two ghosts of
//! keys: those the small queue evicted (`gs`) and those main evicted
//! (`gm`). A miss whose key is in `gs` was a page the small queue let go
//! before its second use: `p` grows by a quarter of max(1, |gm| / |gs|),
//! and the page enters main directly, as S3-FIFO admits it. A miss in `gm`
//! was a page main let go: `p` shrinks by max(1, |gs| / |gm|). Eviction
//! then takes from main while main holds more than `capacity - p` pages
//! (or small is empty), else from small, exactly as S3-FIFO. `p` stays
//! between one page and 30% of the cache; it starts at 5%. Only the small
//! ghost admits to main (a main-ghost page comes back through small).
//!
//! The design was fixed on the LIRS traces and synthetic shapes only;
//! the validation traces judge it (BENCHMARKS.md). Written only against
//! the plug-in trait (policy.rs).

use super::s3fifo::{Ghost, S3Fifo};

/// The small queue's target at the start and at most, as fractions of
/// the capacity, and how much of ARC's step a small-ghost hit grows it
/// by (a main-ghost hit shrinks it by a whole step). Fixed on the LIRS
/// traces and `scripts/policy_traces.py tune`: growing by whole steps let
/// loops longer than the cache, whose every return is a small-ghost hit,
/// starve main.
const P_START: f64 = 0.05;
const P_MAX: f64 = 0.3;
const GROW: f64 = 0.25;

/// The policy: S3-FIFO (s3fifo.rs) with this sizing.
pub fn new(nr_frames: usize, capacity: usize) -> S3Fifo {
    S3Fifo::with_sizing(nr_frames, capacity, Some(Sizing::new(capacity)))
}

/// The small queue's adaptive target and the main queue's ghost.
pub(super) struct Sizing {
    gm: Ghost,
    /// The small queue's target, in pages (ARC's `p`).
    p: f64,
    p_max: f64,
}

impl Sizing {
    fn new(capacity: usize) -> Sizing {
        let c = capacity.max(1) as f64;
        Sizing { gm: Ghost::new(capacity), p: (c * P_START).max(1.0), p_max: (c * P_MAX).max(1.0) }
    }

    pub(super) fn small_target(&self) -> usize {
        self.p as usize
    }

    /// Main evicted the page of `key`.
    pub(super) fn main_evicted(&mut self, key: u64) {
        self.gm.insert(key);
    }

    /// A missed key, `in_gs` if the small queue's ghost held it (already
    /// taken out of it): move `p`. Only the small ghost admits to main: a
    /// page main let go comes back through small, as in S3-FIFO (admitting
    /// it to main again cycled loops longer than the cache through main).
    pub(super) fn missed(&mut self, key: u64, in_gs: bool, gs_len: usize) {
        let in_gm = self.gm.remove(key);
        let (gs, gm) = (gs_len.max(1) as f64, self.gm.len().max(1) as f64);
        if in_gs {
            self.p = (self.p + GROW * (gm / gs).max(1.0)).min(self.p_max);
        } else if in_gm {
            self.p = (self.p - (gs / gm).max(1.0)).max(1.0);
        }
        let cap = self.gm.cap;
        self.gm.trim(cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the split moves as the module says: a small-ghost hit grows the
    // small queue's target by a quarter of ARC's step, a main-ghost hit
    // shrinks it by a whole one, within [1, 30%] of the cache.
    #[test]
    fn ghost_hits_move_the_split() {
        let mut sz = Sizing::new(1000);
        assert_eq!(sz.small_target(), 50);
        // Main's ghost holds 400 keys, the small one 100: a small-ghost
        // hit grows p by 0.25 * 400 / 100 = 1 page.
        for k in 0..400 {
            sz.main_evicted(k);
        }
        sz.missed(10_000, true, 100);
        assert_eq!(sz.small_target(), 51);
        for _ in 0..1000 {
            sz.missed(10_000, true, 100);
        }
        assert_eq!(sz.small_target(), 300, "capped at 30%");
        // A main-ghost hit with the small ghost 4x main's: 4 pages down
        // (the key leaves main's ghost, which then holds 399).
        sz.missed(7, false, 1600);
        assert_eq!(sz.small_target(), 295);
        // A key neither ghost holds moves nothing.
        sz.missed(7, false, 1600);
        assert_eq!(sz.small_target(), 295);
        for k in 0..400 {
            sz.missed(k, false, 1_000_000);
        }
        assert_eq!(sz.small_target(), 1, "at least one page");
    }
}

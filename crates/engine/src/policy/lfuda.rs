//! LFU with dynamic aging (LFU-DA, Arlitt et al., 2000): each page's
//! priority is the cache's age `L` when it was last used plus its use
//! count; the page of least priority goes (the least recently touched
//! first among equals), and `L` becomes its priority, so counts earned
//! long ago age out instead of pinning pages forever, as plain LFU's
//! would. Written only against the plug-in trait (policy.rs).

use std::collections::BTreeSet;

use parking_lot::Mutex;

use super::{EvictionPolicy, FolioRef, Putback, Removal};
use crate::page::Pfn;

/// A held page's place in the order: (priority, touch sequence).
#[derive(Clone, Copy)]
struct Entry {
    priority: u64,
    seq: u64,
    count: u64,
}

struct State {
    /// (priority, seq, pfn) of every held page, least first.
    order: BTreeSet<(u64, u64, Pfn)>,
    pages: Vec<Option<Entry>>,
    /// The cache's age: the priority of the last page evicted.
    age: u64,
    seq: u64,
}

impl State {
    fn place(&mut self, pfn: Pfn, count: u64) {
        self.seq += 1;
        let e = Entry { priority: self.age + count, seq: self.seq, count };
        self.order.insert((e.priority, e.seq, pfn));
        self.pages[pfn as usize] = Some(e);
    }

    fn unplace(&mut self, pfn: Pfn) -> Option<Entry> {
        let e = self.pages.get_mut(pfn as usize)?.take()?;
        self.order.remove(&(e.priority, e.seq, pfn));
        Some(e)
    }
}

pub struct Lfuda {
    s: Mutex<State>,
}

impl Lfuda {
    pub fn new(nr_frames: usize) -> Lfuda {
        Lfuda { s: Mutex::new(State { order: BTreeSet::new(), pages: vec![None; nr_frames], age: 0, seq: 0 }) }
    }
}

impl EvictionPolicy for Lfuda {
    fn name(&self) -> &'static str {
        "lfuda"
    }

    fn folio_added(&self, folio: FolioRef) {
        let mut s = self.s.lock();
        if s.pages.get(folio.pfn as usize).is_some_and(|e| e.is_none()) {
            s.place(folio.pfn, 1);
        }
    }

    fn folio_accessed(&self, folio: FolioRef) {
        self.folios_accessed(&[folio]);
    }

    fn folios_accessed(&self, folios: &[FolioRef]) {
        let mut s = self.s.lock();
        for f in folios {
            if let Some(e) = s.unplace(f.pfn) {
                s.place(f.pfn, e.count + 1);
            }
        }
    }

    fn folio_removed(&self, folio: FolioRef, _why: Removal) {
        self.s.lock().unplace(folio.pfn);
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let mut s = self.s.lock();
        while out.len() < nr {
            let Some(&(priority, _, pfn)) = s.order.first() else { break };
            s.unplace(pfn);
            s.age = s.age.max(priority);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        let mut s = self.s.lock();
        if s.pages.get(folio.pfn as usize).is_some_and(|e| e.is_none()) {
            s.place(folio.pfn, 1 + (why == Putback::Referenced) as u64);
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // Least priority: freed next.
        let mut s = self.s.lock();
        if s.unplace(folio.pfn).is_some() {
            s.seq += 1;
            let e = Entry { priority: 0, seq: s.seq, count: 0 };
            s.order.insert((0, e.seq, folio.pfn));
            s.pages[folio.pfn as usize] = Some(e);
        }
    }
}

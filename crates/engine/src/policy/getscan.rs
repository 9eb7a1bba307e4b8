//! GET-SCAN: a policy for an application that mixes point reads with
//! long scans, after the GET-SCAN policy of cache_ext (SOSP'25), which
//! evicts the pages of a key-value store's range scans before those of
//! its point lookups. cache_ext tells the two apart by the thread that
//! reads; a plug-in here sees no threads, so it uses the hint the kernel
//! offers: reads through a handle advised POSIX_FADV_NOREUSE do not mark
//! pages accessed (filemap.rs), so a page a scan brought in is inserted
//! (`folio_added`) and never accessed.
//!
//! Two lists. Probation, a FIFO, holds pages inserted and not used since;
//! protected, an LRU, holds pages used again (an access moves a page to
//! its head; an access to a probation page promotes it). Eviction takes
//! probation's oldest page while probation holds more than a floor, else
//! protected's least recently used one. So scan pages leave first and the
//! point reads' pages stay, however long the scan.
//!
//! The floor is a tenth of the capacity, the size S3-FIFO gives its small
//! queue for the same job: a new page waits there for its second use
//! before it can displace anything that proved itself. Without a floor, a
//! cache whose protected list had filled would evict every new page at
//! once, before its second use could promote it.
//!
//! The engine treats a page's first use as its insertion (policy.rs): a
//! point read of a page a scan brought in is that first use, and only its
//! next one promotes it. Written only against the plug-in trait.

use parking_lot::Mutex;

use super::list::FolioLists;
use super::{EvictionPolicy, FolioRef, Putback, Removal};
use crate::page::Pfn;

const PROBATION: usize = 0;
const PROTECTED: usize = 1;

struct State {
    q: FolioLists<2>,
    /// The pages probation keeps before protected gives any up.
    floor: usize,
    /// Per frame: the list a candidate came from, so a putback returns it
    /// there (a candidate is on no list while the engine holds it).
    was_protected: Vec<bool>,
}

impl State {
    fn evict_one(&mut self) -> Option<Pfn> {
        let from = if self.q.len(PROBATION) > self.floor || self.q.is_empty(PROTECTED) { PROBATION } else { PROTECTED };
        let (pfn, list) = match self.q.pop_tail(from) {
            Some(pfn) => (pfn, from),
            None => (self.q.pop_tail(PROTECTED)?, PROTECTED),
        };
        self.was_protected[pfn as usize] = list == PROTECTED;
        Some(pfn)
    }
}

pub struct GetScan {
    s: Mutex<State>,
}

impl GetScan {
    /// For `nr_frames` frames and a cache of `capacity` pages.
    pub fn new(nr_frames: usize, capacity: usize) -> GetScan {
        GetScan {
            s: Mutex::new(State {
                q: FolioLists::new(nr_frames),
                floor: (capacity / 10).max(1),
                was_protected: vec![false; nr_frames],
            }),
        }
    }
}

impl EvictionPolicy for GetScan {
    fn name(&self) -> &'static str {
        "getscan"
    }

    fn folio_added(&self, folio: FolioRef) {
        self.s.lock().q.push_head(PROBATION, folio.pfn);
    }

    fn folio_accessed(&self, folio: FolioRef) {
        self.folios_accessed(&[folio]);
    }

    fn folios_accessed(&self, folios: &[FolioRef]) {
        let mut s = self.s.lock();
        for f in folios {
            match s.q.list_of(f.pfn) {
                Some(PROBATION) => {
                    s.q.remove(f.pfn);
                    s.q.push_head(PROTECTED, f.pfn);
                }
                Some(_) => {
                    s.q.move_to_head(f.pfn);
                }
                // A frame not held (removed, or a candidate): ignored.
                None => {}
            }
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
        // Back at the new end of the list it came from, as the kernel puts
        // back what it could not free, so that the next candidates are
        // others; a page used through a mapping meanwhile is protected.
        let mut s = self.s.lock();
        let protected = why == Putback::Referenced || s.was_protected.get(folio.pfn as usize) == Some(&true);
        s.q.push_head(if protected { PROTECTED } else { PROBATION }, folio.pfn);
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // rotate_reclaimable_page: its writeback ended; it goes next.
        let mut s = self.s.lock();
        if s.q.remove(folio.pfn).is_some() {
            s.q.push_tail(PROBATION, folio.pfn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folio(pfn: Pfn) -> FolioRef {
        FolioRef { pfn, order: 0, mapping: 1, index: pfn as u64 }
    }

    fn evict(p: &GetScan, nr: usize) -> Vec<Pfn> {
        let mut out = Vec::new();
        p.evict_candidates(nr, &mut out);
        out.into_iter().map(|f| f.pfn).collect()
    }

    /// Pages never used again (a NOREUSE scan's) go before used ones, even
    /// those used long before the scan; the floor stays in probation.
    #[test]
    fn scan_pages_go_before_protected() {
        // Capacity 20: a floor of 2.
        let p = GetScan::new(64, 20);
        for pfn in 0..4 {
            p.folio_added(folio(pfn));
            p.folio_accessed(folio(pfn));
        }
        for pfn in 10..20 {
            p.folio_added(folio(pfn));
        }
        // Probation's oldest first, down to the floor (2 pages).
        assert_eq!(evict(&p, 8), (10..18).collect::<Vec<_>>());
        // Then protected's least recently used, though the rest of the
        // scan is newer.
        assert_eq!(evict(&p, 2), vec![0, 1]);
        assert_eq!(evict(&p, 10), vec![2, 3, 18, 19]);
    }

    /// An access promotes a probation page; protected is an LRU.
    #[test]
    fn access_promotes_and_protected_is_lru() {
        let p = GetScan::new(64, 10); // floor 1
        for pfn in 0..6 {
            p.folio_added(folio(pfn));
        }
        p.folio_accessed(folio(1));
        p.folio_accessed(folio(3));
        p.folio_accessed(folio(2));
        // Used again: 1 to protected's head, then the LRU order is 3, 2, 1.
        p.folio_accessed(folio(1));
        {
            let s = p.s.lock();
            assert_eq!((s.q.len(PROBATION), s.q.len(PROTECTED)), (3, 3));
            assert_eq!(s.q.list_of(1), Some(PROTECTED));
            assert_eq!(s.q.list_of(0), Some(PROBATION));
        }
        // Probation (0, 4, 5) down to its floor, then protected by recency.
        assert_eq!(evict(&p, 2), vec![0, 4]);
        assert_eq!(evict(&p, 3), vec![3, 2, 1]);
        assert_eq!(evict(&p, 3), vec![5]);
    }

    /// A candidate put back returns to the list it came from.
    #[test]
    fn putback_returns_to_its_list() {
        let p = GetScan::new(64, 10); // floor 1
        p.folio_added(folio(0));
        p.folio_added(folio(1));
        p.folio_accessed(folio(1));
        // Probation holds 1 page (the floor): protected gives 1 up first.
        assert_eq!(evict(&p, 1), vec![1]);
        p.folio_putback(folio(1), Putback::Dirty);
        assert_eq!(p.s.lock().q.list_of(1), Some(PROTECTED));
        assert_eq!(evict(&p, 1), vec![1]);
        assert_eq!(evict(&p, 1), vec![0]);
        p.folio_putback(folio(0), Putback::Busy);
        assert_eq!(p.s.lock().q.list_of(0), Some(PROBATION));
        p.folio_putback(folio(1), Putback::Writeback);
        p.folio_reclaimable(folio(1));
        assert_eq!(p.s.lock().q.list_of(1), Some(PROBATION));
        assert_eq!(evict(&p, 2), vec![1, 0]);
    }
}

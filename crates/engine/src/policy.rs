//! Eviction policies as plug-ins (pcache's own, in the spirit of cache_ext,
//! SOSP'25: a policy is told of a folio's insertion, accesses and removal,
//! and chooses the folios reclaim evicts, over lists it owns).
//!
//! The engine keeps the mechanics: it isolates the candidates a policy
//! names, writes dirty ones back (a dirty or writeback candidate is not
//! freed now: it comes back to the policy, `Putback::Dirty`, and the
//! engine rotates it again, `folio_reclaimable`, when that writeback
//! ends, as PG_reclaim does), keeps workingset shadows and frees frames.
//! kswapd and direct reclaim call `shrink_node`, which dispatches to
//! `policy_shrink_node` when a plug-in is selected (`Tunables::policy`).
//!
//! Only file pages are the policy's; anonymous pages stay on the kernel's
//! anon lists. Each file page is on the kernel's inactive file list while
//! it is the policy's (PG_lru, so isolation, freeing and vmstat work as
//! they do); that list's order means nothing then.
//!
//! Accesses (`mark_page_accessed`, and young page-table entries found by
//! `page_referenced`) are queued in per-CPU batches of `PAGEVEC_SIZE` and
//! handed over when a batch fills, before this CPU adds a page (so one
//! thread's events reach the policy in the order they happened) and at
//! reclaim (every CPU's batch), unless the policy's `sync_access` asks
//! for each access at once. A batch entry names the page's (mapping,
//! index) and holds no reference: a page that left the cache, or whose
//! frame now holds another page, is dropped at delivery.
//!
//! The first use of a page (the read or write that brought it in, or the
//! first read of a readahead page) is part of its insertion, not an
//! access: PG_referenced, which nothing else reads while a plug-in holds
//! the pages, records that it happened. This is what a simulator does: a
//! miss inserts, a hit accesses.
//!
//! The kernel's two lists and the multi-gen LRU are not behind this
//! trait: they are the faithful reference, written as the kernel writes
//! them (their state lives in the page flags and the lruvec, under
//! lru_lock, with lock-free marking on the hit path), and a plug-in
//! selected at start changes none of their code.

pub mod clock;
mod experts;
pub mod fifo;
pub mod getscan;
pub mod lfuda;
pub mod list;
pub mod lru;
pub mod mru;
pub mod pcache;
pub mod s3fifo;
pub mod sieve;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::mm::Cache;
use crate::mmdebug::vm_bug_on_page;
use crate::page::*;
use crate::pagevec::PAGEVEC_SIZE;
use crate::vmscan::{ReclaimStat, ScanControl, SWAP_CLUSTER_MAX};
use crate::vmstat::Item;
use crate::LruList;

/// A folio as the engine names it to a policy: its frame, its order (0:
/// one page, the only order today) and what it caches, (mapping, index).
/// A frame is reused once its page is removed; (mapping, index) names the
/// data, so a policy that remembers evicted pages (ghosts) keys them by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FolioRef {
    pub pfn: Pfn,
    pub order: u8,
    pub mapping: u32,
    pub index: u64,
}

impl FolioRef {
    /// The data's identity, stable across evictions and refaults.
    #[inline]
    pub fn key(&self) -> u64 {
        ((self.mapping as u64) << 40) ^ self.index
    }
}

/// Why a folio left the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Reclaim freed it (one of the policy's candidates).
    Evicted,
    /// Truncation or hole punch removed it.
    Truncated,
    /// Invalidation (`fadvise(DONTNEED)`, `drop_caches`) removed it.
    Invalidated,
}

/// Why a candidate was not freed: it is the policy's again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Putback {
    /// Dirty: writeback was started or left to the flushers (PG_reclaim);
    /// `folio_reclaimable` follows when it ends.
    Dirty,
    /// Already under writeback.
    Writeback,
    /// Used through a mapping since the policy chose it (the access has
    /// been reported first).
    Referenced,
    /// Locked, pinned or mapped by someone: it could not go now.
    Busy,
}

/// A page faulting back in where its shadow entry was (workingset.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refault {
    /// Evictions and activations since this page was evicted (the refault
    /// distance of workingset.rs).
    pub distance: u64,
    /// It had been in the workingset (PG_workingset) when evicted.
    pub workingset: bool,
}

/// An eviction policy. The engine calls the hooks below; the policy keeps
/// its own state under its own locks, which must be leaves: a hook never
/// calls back into the engine. Hooks may run on any thread, concurrently.
///
/// What the engine guarantees:
/// - `folio_added` once when a file page enters the cache, before any
///   other hook names it; `folio_removed` once when it leaves, whether it
///   is on the policy's lists or a candidate at that moment.
/// - Each candidate `evict_candidates` returns is, from then on, the
///   engine's: it comes back exactly once, `folio_putback` (then it is the
///   policy's again) or `folio_removed`. A candidate the engine finds no
///   longer cached is dropped silently (its `folio_removed` came first).
/// - `folio_accessed` and `folio_refault` name only pages the engine holds
///   at the time it checked; an access racing with a removal may still
///   arrive after it: ignore frames you do not hold.
pub trait EvictionPolicy: Send + Sync {
    /// The name `Tunables::policy` selects it by.
    fn name(&self) -> &'static str;

    /// Deliver every access at once instead of in per-CPU batches (costs
    /// the hit path a call into the policy and its lock).
    fn sync_access(&self) -> bool {
        false
    }

    /// A page entered the cache: it is the policy's.
    fn folio_added(&self, folio: FolioRef);

    /// A page the policy holds was used again (a hit, or young entries).
    fn folio_accessed(&self, folio: FolioRef);

    /// A page left the cache.
    fn folio_removed(&self, folio: FolioRef, why: Removal);

    /// Right after `folio_added`: the page had been evicted before and its
    /// shadow entry was still there.
    fn folio_refault(&self, _folio: FolioRef, _refault: Refault) {}

    /// Choose up to `nr` pages to evict, best first, and push them onto
    /// `out` (which the engine clears before the call; it reads only
    /// `pfn`). They leave the policy's lists: see the trait's guarantees.
    /// Fewer than `nr` (or none) says the policy has no more.
    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>);

    /// A candidate that was not freed comes back.
    fn folio_putback(&self, folio: FolioRef, why: Putback);

    /// The writeback that reclaim started on a page (`Putback::Dirty`)
    /// ended: the kernel rotates it to the inactive tail so that it is
    /// freed next (`rotate_reclaimable_page`). The page is the policy's.
    fn folio_reclaimable(&self, _folio: FolioRef) {}
}

/// The built-in plug-ins, by name (`Tunables::policy`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// No plug-in: the kernel's lists or the multi-gen LRU (`Tunables::lru`).
    #[default]
    Kernel,
    /// First in, first out; accesses change nothing.
    Fifo,
    /// Least recently used: an access moves a page to the head.
    Lru,
    /// CLOCK (second chance): a used page gets one more trip.
    Clock,
    /// SIEVE (Zhang et al., NSDI'24): a hand sweeping from the oldest
    /// page, sparing used ones in place.
    Sieve,
    /// S3-FIFO (Yang et al., SOSP'23): small, main and ghost FIFOs.
    S3fifo,
    /// Most recently used: the newest page goes first (loops).
    Mru,
    /// LFU with dynamic aging (LFU-DA): use counts plus the cache's age.
    Lfuda,
    /// pcache's own: follows whichever of five simulated policies missed
    /// least lately (policy/pcache.rs).
    Pcache,
    /// Point reads before scans, after cache_ext's GET-SCAN: pages never
    /// used again (a NOREUSE scan's) go first (policy/getscan.rs).
    Getscan,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::Kernel,
        PolicyKind::Fifo,
        PolicyKind::Lru,
        PolicyKind::Clock,
        PolicyKind::Sieve,
        PolicyKind::S3fifo,
        PolicyKind::Mru,
        PolicyKind::Lfuda,
        PolicyKind::Pcache,
        PolicyKind::Getscan,
    ];

    /// The name `--set policy=NAME` takes.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Kernel => "kernel",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Lru => "lru",
            PolicyKind::Clock => "clock",
            PolicyKind::Sieve => "sieve",
            PolicyKind::S3fifo => "s3fifo",
            PolicyKind::Mru => "mru",
            PolicyKind::Lfuda => "lfuda",
            PolicyKind::Pcache => "pcache",
            PolicyKind::Getscan => "getscan",
        }
    }

    /// The policy by name, None for an unknown name.
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A fresh plug-in for `nr_frames` frames, of which about `capacity`
    /// can hold pages at once (the rest is the watermarks' free reserve);
    /// None for `Kernel`.
    pub fn build(self, nr_frames: u64, capacity: u64) -> Option<Box<dyn EvictionPolicy>> {
        let n = nr_frames as usize;
        match self {
            PolicyKind::Kernel => None,
            PolicyKind::Fifo => Some(Box::new(fifo::Fifo::new(n))),
            PolicyKind::Lru => Some(Box::new(lru::Lru::new(n))),
            PolicyKind::Clock => Some(Box::new(clock::Clock::new(n))),
            PolicyKind::Sieve => Some(Box::new(sieve::Sieve::new(n))),
            PolicyKind::S3fifo => Some(Box::new(s3fifo::S3Fifo::new(n, capacity as usize))),
            PolicyKind::Mru => Some(Box::new(mru::Mru::new(n))),
            PolicyKind::Lfuda => Some(Box::new(lfuda::Lfuda::new(n))),
            PolicyKind::Pcache => Some(Box::new(pcache::Pcache::new(n, capacity as usize))),
            PolicyKind::Getscan => Some(Box::new(getscan::GetScan::new(n, capacity as usize))),
        }
    }
}

/// One CPU's queued accesses.
struct AccessBatch {
    n: usize,
    folios: [FolioRef; PAGEVEC_SIZE],
}

impl Default for AccessBatch {
    fn default() -> Self {
        AccessBatch { n: 0, folios: [FolioRef { pfn: 0, order: 0, mapping: 0, index: 0 }; PAGEVEC_SIZE] }
    }
}

/// A CPU's batch on its own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct CpuAccessBatch(Mutex<AccessBatch>);

/// The selected plug-in and its per-CPU access batches. Set once at
/// `Cache::new`; with no plug-in every test of it is one `Option` test.
pub struct PolicyCtl {
    policy: Option<Box<dyn EvictionPolicy>>,
    sync: bool,
    batches: Box<[CpuAccessBatch]>,
}

impl PolicyCtl {
    pub fn new(policy: Option<Box<dyn EvictionPolicy>>, nr_cpus: usize) -> PolicyCtl {
        let sync = policy.as_ref().is_some_and(|p| p.sync_access());
        let n = if policy.is_some() { nr_cpus.max(1) } else { 0 };
        PolicyCtl { policy, sync, batches: (0..n).map(|_| CpuAccessBatch::default()).collect() }
    }

    /// The plug-in, if one is selected.
    #[inline]
    pub fn get(&self) -> Option<&dyn EvictionPolicy> {
        self.policy.as_deref()
    }

    /// Whether a plug-in is selected.
    #[inline]
    pub fn active(&self) -> bool {
        self.policy.is_some()
    }

    /// Queue an access on this CPU's batch; a full batch is handed to
    /// `deliver` (with no batch lock held). Sync policies get it at once.
    pub(crate) fn queue_access(&self, folio: FolioRef, deliver: impl FnOnce(&[FolioRef])) {
        if self.sync {
            deliver(&[folio]);
            return;
        }
        let cpu = crate::percpu::current_cpu(self.batches.len());
        let mut b = self.batches[cpu].0.lock();
        let n = b.n;
        b.folios[n] = folio;
        b.n += 1;
        if b.n == PAGEVEC_SIZE {
            let full = b.folios;
            b.n = 0;
            drop(b);
            deliver(&full);
        }
    }

    /// Hand this CPU's queued accesses (or every CPU's, `all`) to
    /// `deliver`, each batch in the order it was queued.
    pub(crate) fn drain(&self, all: bool, mut deliver: impl FnMut(&[FolioRef])) {
        if self.batches.is_empty() {
            return;
        }
        let mut one = |i: usize| {
            let mut b = self.batches[i].0.lock();
            if b.n == 0 {
                return;
            }
            let (n, folios) = (b.n, b.folios);
            b.n = 0;
            drop(b);
            deliver(&folios[..n]);
        };
        if all {
            (0..self.batches.len()).for_each(&mut one);
        } else {
            one(crate::percpu::current_cpu(self.batches.len()));
        }
    }
}

impl Cache {
    /// The folio `pfn` caches now.
    #[inline]
    fn folio_ref(&self, pfn: Pfn) -> FolioRef {
        let page = self.page(pfn);
        FolioRef { pfn, order: 0, mapping: page.mapping(), index: page.index() }
    }

    /// lru_cache_add with a plug-in: a file page goes on the lists at
    /// once (no lru_add batch: the policy is told now, after this CPU's
    /// queued accesses, so it sees one thread's events in order). False
    /// for a page the plug-in does not hold (anonymous, unevictable).
    pub(crate) fn policy_lru_add(&self, pfn: Pfn) -> bool {
        let Some(policy) = self.policy.get() else { return false };
        let page = self.page(pfn);
        if page.flags() & (PG_SWAPBACKED | PG_UNEVICTABLE) != 0 {
            return false;
        }
        self.policy_drain(false);
        let folio = self.folio_ref(pfn);
        let mut lru = self.lruvec.lock(&self.arena, &self.vm);
        vm_bug_on_page!(page.test(PG_LRU), page, "policy add of a page on a list");
        if page.test(PG_ACTIVE) {
            // Nothing activates a plug-in's pages; the list must be one.
            page.clear(PG_ACTIVE, &self.vm);
        }
        page.set(PG_LRU, &self.vm);
        lru.reclaim_stat().note(1, false);
        lru.add(pfn, LruList::InactiveFile);
        policy.folio_added(folio);
        true
    }

    /// mark_page_accessed with a plug-in: the first use of a page is its
    /// insertion's (PG_referenced records it); later ones are queued for
    /// the policy. False for anonymous pages (the kernel's lists).
    pub(crate) fn policy_mark_accessed(&self, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        let flags = page.flags();
        if flags & PG_SWAPBACKED != 0 {
            return false;
        }
        if flags & PG_REFERENCED == 0 {
            page.set(PG_REFERENCED, &self.vm);
            return true;
        }
        self.policy.queue_access(self.folio_ref(pfn), |b| self.policy_deliver(b));
        true
    }

    /// Young entries found by page_referenced on a plug-in's page: an
    /// access, reported at once (reclaim is about to decide on it).
    pub(crate) fn policy_young(&self, pfn: Pfn) {
        self.policy_drain(false);
        if let Some(p) = self.policy.get() {
            p.folio_accessed(self.folio_ref(pfn));
        }
    }

    /// Hand queued accesses to the policy, dropping those whose frame no
    /// longer caches what it did when they were queued.
    fn policy_deliver(&self, batch: &[FolioRef]) {
        let Some(policy) = self.policy.get() else { return };
        for f in batch {
            let page = self.page(f.pfn);
            if page.mapping() == f.mapping && page.index() == f.index {
                policy.folio_accessed(*f);
            }
        }
    }

    /// Deliver this CPU's (or every CPU's) queued accesses.
    pub(crate) fn policy_drain(&self, all: bool) {
        self.policy.drain(all, |b| self.policy_deliver(b));
    }

    /// rotate_reclaimable_page with a plug-in: tell it the page's
    /// writeback ended. False for pages it does not hold.
    pub(crate) fn policy_rotate_reclaimable(&self, pfn: Pfn) -> bool {
        let Some(policy) = self.policy.get() else { return false };
        let flags = self.page(pfn).flags();
        if flags & (PG_SWAPBACKED | PG_UNEVICTABLE) != 0 {
            return false;
        }
        if flags & (PG_LRU | PG_DIRTY | PG_LOCKED) == PG_LRU {
            policy.folio_reclaimable(self.folio_ref(pfn));
            self.vm.inc(Item::pgrotated);
        }
        true
    }

    /// shrink_node with a plug-in: deliver every CPU's queued accesses,
    /// then ask the policy for candidates, isolate them and reclaim them
    /// through shrink_page_list (writeback, shadows, the hazard check);
    /// what was not freed goes back to the policy. At most
    /// `held >> priority` candidates are looked at (at least what is
    /// still to reclaim, at most SWAP_CLUSTER_MAX per batch), so a policy
    /// that keeps naming busy pages cannot keep reclaim here. Anonymous
    /// pages are then reclaimed from the kernel's lists if short.
    pub(crate) fn policy_shrink_node(&self, sc: &mut ScanControl) {
        let Some(policy) = self.policy.get() else { return };
        self.policy_drain(true);
        let held = self.lruvec.len(LruList::InactiveFile);
        let mut budget = (held >> sc.priority.max(0)).max(sc.nr_to_reclaim.saturating_sub(sc.nr_reclaimed));
        let (mut cands, mut isolated, mut keep) = (Vec::new(), Vec::new(), Vec::new());
        while sc.nr_reclaimed < sc.nr_to_reclaim && budget > 0 {
            let want = (sc.nr_to_reclaim - sc.nr_reclaimed).min(SWAP_CLUSTER_MAX).min(budget);
            cands.clear();
            policy.evict_candidates(want as usize, &mut cands);
            if cands.is_empty() {
                break;
            }
            budget = budget.saturating_sub(cands.len() as u64);
            isolated.clear();
            {
                let mut lru = self.lruvec.lock(&self.arena, &self.vm);
                for c in &cands {
                    if c.pfn as u64 >= self.arena.nr_pages {
                        continue;
                    }
                    let page = self.page(c.pfn);
                    let flags = page.flags();
                    // Not (or no longer) a cached page of the policy's:
                    // its removal was reported; a page at count 0 is
                    // being freed and leaves the list itself.
                    if flags & (PG_LRU | PG_SWAPBACKED | PG_UNEVICTABLE) != PG_LRU || !page.get_unless_zero() {
                        continue;
                    }
                    lru.del(c.pfn, LruList::of_flags(flags));
                    page.test_clear(PG_LRU, &self.vm);
                    isolated.push(c.pfn);
                }
            }
            let scanned = cands.len() as u64;
            sc.nr_scanned += scanned;
            sc.last_scanned = scanned;
            self.vm.add(if sc.kswapd { Item::pgscan_kswapd } else { Item::pgscan_direct }, scanned);
            self.vm.add(Item::pgscan_file, scanned);
            keep.clear();
            let mut stat = ReclaimStat::default();
            let reclaimed = self.shrink_page_list(&isolated, sc, &mut keep, &mut stat);
            sc.nr_reclaimed += reclaimed;
            self.vm.add(if sc.kswapd { Item::pgsteal_kswapd } else { Item::pgsteal_direct }, reclaimed);
            self.vm.add(Item::pgsteal_file, reclaimed);
            self.policy_putback(policy, &keep);
        }
        if sc.nr_reclaimed < sc.nr_to_reclaim && self.nr_swap_pages() > 0 {
            let nr = (sc.nr_to_reclaim - sc.nr_reclaimed).min(SWAP_CLUSTER_MAX);
            self.shrink_inactive_list(nr, LruList::InactiveAnon, sc);
            if self.inactive_anon_is_low() {
                self.shrink_active_list(SWAP_CLUSTER_MAX, LruList::ActiveAnon, sc);
            }
        }
    }

    /// putback_inactive_pages for a plug-in's candidates: back on the
    /// list and to the policy, with why they stayed; the isolation
    /// reference dropped. A page that left the cache meanwhile (its
    /// removal reported) is not handed back.
    fn policy_putback(&self, policy: &dyn EvictionPolicy, pages: &[Pfn]) {
        let mut to_free = Vec::new();
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for &pfn in pages {
                let page = self.page(pfn);
                let flags = page.flags();
                vm_bug_on_page!(flags & PG_LRU != 0, page, "putback of a page on a list");
                let why = if flags & PG_ACTIVE != 0 {
                    // activate_locked: try_to_unmap found it used.
                    page.clear(PG_ACTIVE, &self.vm);
                    Putback::Referenced
                } else if flags & PG_WRITEBACK != 0 && flags & PG_RECLAIM == 0 {
                    Putback::Writeback
                } else if flags & (PG_DIRTY | PG_WRITEBACK) != 0 {
                    Putback::Dirty
                } else if page.mapped() {
                    Putback::Referenced
                } else {
                    Putback::Busy
                };
                page.set(PG_LRU, &self.vm);
                lru.add(pfn, LruList::InactiveFile);
                if page.mapping() != NO_MAPPING {
                    policy.folio_putback(self.folio_ref(pfn), why);
                }
                if page.put_testzero() {
                    page.clear_frozen(PG_LRU);
                    lru.del(pfn, LruList::InactiveFile);
                    to_free.push(pfn);
                }
            }
        }
        for pfn in to_free {
            self.free_page(pfn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn folio(pfn: Pfn) -> FolioRef {
        FolioRef { pfn, order: 0, mapping: 1, index: pfn as u64 }
    }

    /// Every built-in plug-in keeps the contract's bookkeeping: candidates
    /// leave its lists, putbacks return, removals forget, unknown frames
    /// are ignored.
    #[test]
    fn contract_of_every_builtin() {
        for kind in PolicyKind::ALL.into_iter().skip(1) {
            let p = kind.build(64, 64).unwrap();
            assert_eq!(PolicyKind::from_name(p.name()), Some(kind));
            for pfn in 0..8 {
                p.folio_added(folio(pfn));
            }
            p.folio_accessed(folio(3));
            p.folio_accessed(folio(40)); // not held: ignored
            p.folio_removed(folio(5), Removal::Truncated);
            p.folio_removed(folio(41), Removal::Invalidated); // not held
            let mut out = Vec::new();
            p.evict_candidates(3, &mut out);
            assert_eq!(out.len(), 3, "{kind:?}");
            assert!(!out.iter().any(|f| f.pfn == 5), "{kind:?}: a removed page is a candidate");
            // The rest, in full, then nothing.
            let mut rest = Vec::new();
            p.evict_candidates(100, &mut rest);
            assert_eq!(rest.len(), 4, "{kind:?}: {rest:?}");
            let mut none = Vec::new();
            p.evict_candidates(1, &mut none);
            assert!(none.is_empty(), "{kind:?}");
            // A putback is held again; a removal of an isolated page is fine.
            p.folio_putback(out[0], Putback::Dirty);
            p.folio_removed(out[1], Removal::Evicted);
            p.folio_reclaimable(out[0]);
            let mut again = Vec::new();
            p.evict_candidates(10, &mut again);
            assert_eq!(again, vec![out[0]], "{kind:?}");
        }
    }

    #[test]
    fn batches_keep_order_and_drain() {
        let ctl = PolicyCtl::new(PolicyKind::Lru.build(64, 64), 1);
        let mut seen = Vec::new();
        for pfn in 0..(PAGEVEC_SIZE as Pfn + 3) {
            ctl.queue_access(folio(pfn), |b| seen.extend(b.iter().map(|f| f.pfn)));
        }
        assert_eq!(seen, (0..PAGEVEC_SIZE as Pfn).collect::<Vec<_>>());
        ctl.drain(true, |b| seen.extend(b.iter().map(|f| f.pfn)));
        assert_eq!(seen, (0..PAGEVEC_SIZE as Pfn + 3).collect::<Vec<_>>());
        assert!(PolicyCtl::new(None, 4).get().is_none());
    }
}

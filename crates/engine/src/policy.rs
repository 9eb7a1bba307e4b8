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
//! `page_referenced`) reach a policy in the way its `access_mode` asks:
//! - `Batched` (the default): queued without a lock in per-thread rings of
//!   `PAGEVEC_SIZE` (policy/access.rs) and handed over, `folios_accessed`,
//!   when a ring fills, before this thread adds a page (so one thread's
//!   events reach the policy in the order they happened) and at reclaim
//!   (every ring). An entry names the page's (mapping, index) and holds no
//!   reference: a page that left the cache, or whose frame now holds
//!   another page, is dropped at delivery.
//! - `Sync`: each access at once, a call into the policy on the hit path.
//! - `Counted`: a saturating per-frame count (`AccessCounts`) the hit path
//!   raises with one load and, below the ceiling, one compare-and-swap;
//!   the policy reads and lowers it when it decides, as reclaim reads
//!   PG_referenced and the young bits. For policies that need no more of
//!   an access than how many there were since they last looked: CLOCK's
//!   reference bit, SIEVE's visited bit, S3-FIFO's two-bit frequency. A
//!   count at its ceiling sets the PAGE_HOT hint in the page's tree slot,
//!   so that later hits skip even the load (`AccessCounts::hit`).
//! - `Ignored`: nothing (FIFO).
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

pub mod access;
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

use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use access::AccessRings;

use crate::lru_gen::SlotWord;
use crate::mm::Cache;
use crate::mmdebug::vm_bug_on_page;
use crate::page::*;
use crate::pagetree::PAGE_HOT;
use crate::pagevec::PAGEVEC_SIZE;
use crate::sync::atomic::{AtomicU8, Ordering};
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

    /// How accesses reach the policy (see the module's doc); asked once,
    /// when the cache starts.
    fn access_mode(&self) -> AccessMode {
        AccessMode::Batched
    }

    /// A page entered the cache: it is the policy's.
    fn folio_added(&self, folio: FolioRef);

    /// A page the policy holds was used again (a hit, or young entries);
    /// `Batched` and `Sync` policies only.
    fn folio_accessed(&self, _folio: FolioRef) {}

    /// A batch of accesses, in the order they happened (`Batched`: one
    /// thread's ring at a time). By default one `folio_accessed` each; a
    /// policy with one lock takes it once here.
    fn folios_accessed(&self, folios: &[FolioRef]) {
        for &f in folios {
            self.folio_accessed(f);
        }
    }

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

    /// The application will not need the page soon: `fadvise(DONTNEED)`
    /// met it dirty, under writeback or in use (so invalidation could not
    /// drop it), or `MADV_COLD` named it. The kernel moves such a page to
    /// the inactive list's tail (`deactivate_file_folio`); by default, as
    /// `folio_reclaimable`, freed next. A dirty page chosen then is written
    /// back first (`Putback::Dirty`). A frame the policy does not hold
    /// (a candidate now) is ignored.
    fn folio_deactivated(&self, folio: FolioRef) {
        self.folio_reclaimable(folio);
    }
}

/// How a policy wants to hear of accesses (the module's doc says what
/// each costs the hit path).
#[derive(Clone)]
pub enum AccessMode {
    /// In per-thread rings, `folios_accessed` (the default).
    Batched,
    /// Each at once, `folio_accessed` on the hit path.
    Sync,
    /// A count per frame that the engine raises and the policy reads.
    Counted(Arc<AccessCounts>),
    /// Not at all.
    Ignored,
}

/// Per-frame access counts for a `Counted` policy: the engine raises a
/// frame's count on each access to the page in it, up to `ceiling`; the
/// policy reads and lowers it when it decides (`get`, `take`, `lower`,
/// `set`) and sets it to 0 in `folio_added`. Counts of frames the policy
/// does not hold mean nothing.
///
/// The hint: once a page's count is at its ceiling, a hit sets PAGE_HOT in
/// its tree slot and later hits skip the count (filemap.rs,
/// `find_page_fast`). The setter first marks the count `HINTED`
/// (`claim_hint`, a compare-and-swap from exactly the ceiling), then sets
/// PAGE_HOT, then re-loads the count and takes PAGE_HOT back unless it is
/// still the ceiling and marked; that re-load is an RMW (`fetch_or(0)`),
/// so it reads the latest count. A policy that lowers a marked count (an
/// RMW) queues its frame (`cooled`), and the engine clears PAGE_HOT with a
/// compare-and-swap of the slot when the policy's call returns. The
/// lowering and the re-load are RMWs of one count, so they are ordered: if
/// the lowering comes first, the re-load sees it and takes the hint back;
/// if the re-load comes first, the lowering reads from it, so the setter's
/// PAGE_HOT happens before the clear, which removes it (loom model
/// `policy_ceiling_hint_never_outlives_lowering`). Only a claim from
/// exactly the ceiling marks a count, so a lowered count is not marked
/// again until hits raise it back. Between
/// the policy's call and the clear, hits are not counted (none happen
/// there when one thread replays a trace); a stale hint never changes the
/// bytes a reader sees.
pub struct AccessCounts {
    counts: Box<[AtomicU8]>,
    ceiling: u8,
    cooled: Mutex<Vec<Pfn>>,
}

/// A count's mark: its page's slot may hold PAGE_HOT.
const HINTED: u8 = 0x80;

impl AccessCounts {
    /// Counts for `nr_frames` frames, each saturating at `ceiling` (1 to
    /// 127).
    pub fn new(nr_frames: usize, ceiling: u8) -> AccessCounts {
        assert!((1..HINTED).contains(&ceiling), "an access count's ceiling is 1 to 127, not {ceiling}");
        AccessCounts {
            counts: (0..nr_frames).map(|_| AtomicU8::new(0)).collect(),
            ceiling,
            cooled: Mutex::new(Vec::new()),
        }
    }

    /// The count of `pfn`.
    #[inline]
    pub fn get(&self, pfn: Pfn) -> u8 {
        self.counts[pfn as usize].load(Ordering::Acquire) & !HINTED
    }

    /// Set the count of `pfn` (at most the ceiling).
    pub fn set(&self, pfn: Pfn, count: u8) {
        self.replace(pfn, |_| count.min(self.ceiling));
    }

    /// Set the count of `pfn` to 0; what it was.
    pub fn take(&self, pfn: Pfn) -> u8 {
        self.replace(pfn, |_| 0)
    }

    /// Lower the count of `pfn` by one unless it is 0; what it was.
    pub fn lower(&self, pfn: Pfn) -> u8 {
        self.replace(pfn, |c| c.saturating_sub(1))
    }

    /// The policy's RMW: a marked count that changes queues its frame for
    /// the engine to clear the hint.
    fn replace(&self, pfn: Pfn, f: impl Fn(u8) -> u8) -> u8 {
        let slot = &self.counts[pfn as usize];
        let mut old = slot.load(Ordering::Acquire);
        loop {
            let new = f(old & !HINTED);
            if new == old & !HINTED {
                // Unchanged (a marked count stays the ceiling: its hint
                // stays true).
                return new;
            }
            match slot.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => old = now,
            }
        }
        if old & HINTED != 0 {
            self.cooled.lock().push(pfn);
        }
        old & !HINTED
    }

    /// An access to the page in `pfn`: raise its count unless at the
    /// ceiling (one load then; a CAS, retried only while other hits race,
    /// below it).
    #[inline]
    pub(crate) fn raise(&self, pfn: Pfn) {
        let slot = &self.counts[pfn as usize];
        let mut c = slot.load(Ordering::Relaxed);
        while c & !HINTED < self.ceiling {
            match slot.compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => c = now,
            }
        }
    }

    /// Mark the count of `pfn` as hinted if it is exactly the ceiling:
    /// whether the caller may set PAGE_HOT.
    #[inline]
    pub(crate) fn claim_hint(&self, pfn: Pfn) -> bool {
        let slot = &self.counts[pfn as usize];
        slot.load(Ordering::Relaxed) == self.ceiling
            && slot.compare_exchange(self.ceiling, self.ceiling | HINTED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Whether the count of `pfn` is still the ceiling and marked (the
    /// setter's re-load: an RMW, see the hint's protocol).
    #[inline]
    pub(crate) fn still_hinted(&self, pfn: Pfn) -> bool {
        self.counts[pfn as usize].fetch_or(0, Ordering::AcqRel) == self.ceiling | HINTED
    }

    /// Set PAGE_HOT in `slot`, which held `entry` (the page in `pfn`,
    /// without the hint) when a hit loaded it, if the count is at its
    /// ceiling; the setter's side of the protocol above.
    #[inline]
    pub(crate) fn set_ceiling_hint<S: SlotWord>(&self, pfn: Pfn, slot: &S, entry: usize) {
        if self.claim_hint(pfn) && slot.cas(entry, entry | PAGE_HOT) && !self.still_hinted(pfn) {
            // Lowered meanwhile: take the hint back (unless the clear did).
            slot.cas(entry | PAGE_HOT, entry);
        }
    }

    /// Frames whose hint the policy's lowering made stale, for the engine.
    pub(crate) fn take_cooled(&self) -> Vec<Pfn> {
        let mut c = self.cooled.lock();
        if c.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut *c)
        }
    }
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

/// The selected plug-in, its access mode and, for a `Batched` one, the
/// per-thread access rings (policy/access.rs). Set once at `Cache::new`;
/// with no plug-in every test of it is one `Option` test.
pub struct PolicyCtl {
    policy: Option<Box<dyn EvictionPolicy>>,
    mode: AccessMode,
    rings: AccessRings,
}

impl PolicyCtl {
    pub fn new(policy: Option<Box<dyn EvictionPolicy>>) -> PolicyCtl {
        let mode = policy.as_ref().map_or(AccessMode::Ignored, |p| p.access_mode());
        let n = if matches!(mode, AccessMode::Batched) { crate::percpu::MAX_SLOTS + 1 } else { 0 };
        PolicyCtl { policy, mode, rings: AccessRings::new(n) }
    }

    /// The access counts of a `Counted` plug-in.
    #[inline]
    pub(crate) fn counts(&self) -> Option<&AccessCounts> {
        match &self.mode {
            AccessMode::Counted(c) => Some(c),
            _ => None,
        }
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

    /// Queue an access on this thread's ring; a full ring's batch is
    /// handed to `deliver` (with no lock held). Sync policies get it at
    /// once.
    #[inline]
    pub(crate) fn queue_access(&self, folio: FolioRef, deliver: impl FnOnce(&[FolioRef])) {
        if matches!(self.mode, AccessMode::Batched) {
            self.rings.queue(folio, deliver);
        } else {
            deliver(&[folio]);
        }
    }

    /// Hand this thread's queued accesses (or every thread's, `all`) to
    /// `deliver`, each ring's in the order they were queued.
    pub(crate) fn drain(&self, all: bool, deliver: impl FnMut(&[FolioRef])) {
        self.rings.drain(all, deliver);
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
    /// once (no lru_add batch: the policy is told now, after this thread's
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
        match &self.policy.mode {
            AccessMode::Counted(c) => c.raise(pfn),
            AccessMode::Ignored => {}
            AccessMode::Batched | AccessMode::Sync => {
                self.policy.queue_access(self.folio_ref(pfn), |b| self.policy_deliver(b))
            }
        }
        true
    }

    /// Young entries found by page_referenced on a plug-in's page: an
    /// access, reported at once (reclaim is about to decide on it).
    pub(crate) fn policy_young(&self, pfn: Pfn) {
        match &self.policy.mode {
            AccessMode::Counted(c) => c.raise(pfn),
            AccessMode::Ignored => {}
            AccessMode::Batched | AccessMode::Sync => {
                self.policy_drain(false);
                if let Some(p) = self.policy.get() {
                    p.folio_accessed(self.folio_ref(pfn));
                }
            }
        }
    }

    /// Clear PAGE_HOT in the slots of the frames whose counts the policy
    /// lowered from a hinted ceiling (`AccessCounts`): an RMW of each
    /// slot that still holds the frame. A frame reused meanwhile names
    /// another page, whose hint this may clear: that costs it only marks.
    fn policy_clear_cooled(&self) {
        let Some(counts) = self.policy.counts() else { return };
        let mut cooled = counts.take_cooled();
        if cooled.is_empty() {
            return;
        }
        cooled.sort_unstable_by_key(|&pfn| self.page(pfn).mapping());
        let mut inode: Option<Arc<crate::filemap::Inode>> = None;
        for pfn in cooled {
            let mapping = self.page(pfn).mapping();
            if inode.as_ref().is_none_or(|i| i.id != mapping) {
                inode = self.inode_by_id(mapping);
            }
            if let Some(inode) = &inode {
                self.clear_page_hot(inode, pfn);
            }
        }
    }

    /// deactivate_page with a plug-in: a page it holds (on the lists, not a
    /// candidate) is passed on, after this thread's queued accesses so that
    /// they do not undo it.
    pub(crate) fn policy_deactivate(&self, pfn: Pfn) {
        let Some(policy) = self.policy.get() else { return };
        if self.page(pfn).flags() & (PG_LRU | PG_UNEVICTABLE) == PG_LRU {
            self.policy_drain(false);
            policy.folio_deactivated(self.folio_ref(pfn));
            // A counted policy's lowering: its hint goes now.
            self.policy_clear_cooled();
        }
    }

    /// Hand queued accesses to the policy, dropping those whose frame no
    /// longer caches what it did when they were queued.
    fn policy_deliver(&self, batch: &[FolioRef]) {
        let Some(policy) = self.policy.get() else { return };
        let mut live = [FolioRef { pfn: 0, order: 0, mapping: 0, index: 0 }; PAGEVEC_SIZE];
        for chunk in batch.chunks(PAGEVEC_SIZE) {
            let mut n = 0;
            for f in chunk {
                let page = self.page(f.pfn);
                if page.mapping() == f.mapping && page.index() == f.index {
                    live[n] = *f;
                    n += 1;
                }
            }
            if n > 0 {
                policy.folios_accessed(&live[..n]);
            }
        }
    }

    /// Deliver this thread's (or every thread's) queued accesses.
    pub(crate) fn policy_drain(&self, all: bool) {
        self.policy.drain(all, |b| self.policy_deliver(b));
        self.policy_clear_cooled();
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

    /// shrink_node with a plug-in: deliver every thread's queued accesses,
    /// then reclaim as shrink_lruvec does, from the two kinds of page in
    /// turn, each by the share `get_scan_count` gives it: file pages in
    /// batches the policy names (`policy_shrink_file`), anonymous ones from
    /// the kernel's anon lists. A policy's file pages all sit on the
    /// inactive file list, so its share is that list's `size >> priority`
    /// times the file fraction; with nothing to balance against (no swap,
    /// or no anon pages) at least what is still to reclaim, so one reclaim
    /// at the first priority frees exactly its target. The budgets bound the
    /// loop: a policy that keeps naming busy pages cannot keep reclaim here.
    pub(crate) fn policy_shrink_node(&self, sc: &mut ScanControl) {
        let Some(policy) = self.policy.get() else { return };
        self.policy_drain(true);
        let nr = self.get_scan_count(sc);
        let mut file = nr[LruList::InactiveFile.idx()] + nr[LruList::ActiveFile.idx()];
        let mut anon = nr[LruList::InactiveAnon.idx()];
        let anon_active = nr[LruList::ActiveAnon.idx()];
        let left = |sc: &ScanControl| sc.nr_to_reclaim.saturating_sub(sc.nr_reclaimed);
        let anon_pages = self.lruvec.len(LruList::InactiveAnon) + self.lruvec.len(LruList::ActiveAnon);
        if self.nr_swap_pages() == 0 || anon_pages == 0 {
            file = file.max(left(sc));
        }
        let mut bufs = (Vec::new(), Vec::new(), Vec::new());
        while left(sc) > 0 && (file > 0 || anon > 0) {
            if file > 0 {
                let want = left(sc).min(SWAP_CLUSTER_MAX).min(file);
                let scanned = self.policy_shrink_file(policy, want, sc, &mut bufs);
                // A policy with no more candidates ends the file side.
                file = if scanned == 0 { 0 } else { file.saturating_sub(scanned) };
            }
            if anon > 0 && left(sc) > 0 {
                let n = anon.min(SWAP_CLUSTER_MAX);
                self.shrink_inactive_list(n, LruList::InactiveAnon, sc);
                anon -= n;
            }
        }
        if anon_active > 0 && self.inactive_anon_is_low() {
            self.shrink_active_list(SWAP_CLUSTER_MAX.min(anon_active), LruList::ActiveAnon, sc);
        }
    }

    /// shrink_inactive_list over the policy's pages: ask it for up to
    /// `want` candidates, isolate them and reclaim them through
    /// shrink_page_list (writeback, shadows, the hazard check); what was
    /// not freed goes back to the policy. Returns the candidates named.
    fn policy_shrink_file(
        &self,
        policy: &dyn EvictionPolicy,
        want: u64,
        sc: &mut ScanControl,
        (cands, isolated, keep): &mut (Vec<FolioRef>, Vec<Pfn>, Vec<Pfn>),
    ) -> u64 {
        cands.clear();
        policy.evict_candidates(want as usize, cands);
        self.policy_clear_cooled();
        if cands.is_empty() {
            return 0;
        }
        isolated.clear();
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for c in cands.iter() {
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
            lru.reclaim_stat().recent_scanned[1] += isolated.len() as u64;
        }
        let scanned = cands.len() as u64;
        sc.nr_scanned += scanned;
        sc.last_scanned = scanned;
        self.vm.add(if sc.kswapd { Item::pgscan_kswapd } else { Item::pgscan_direct }, scanned);
        self.vm.add(Item::pgscan_file, scanned);
        keep.clear();
        let mut stat = ReclaimStat::default();
        let reclaimed = self.shrink_page_list(isolated, sc, keep, &mut stat);
        sc.nr_reclaimed += reclaimed;
        self.vm.add(if sc.kswapd { Item::pgsteal_kswapd } else { Item::pgsteal_direct }, reclaimed);
        self.vm.add(Item::pgsteal_file, reclaimed);
        self.policy_putback(policy, keep);
        scanned
    }

    /// A file page refaulted where its shadow was: tell the policy. A
    /// refault the kernel's lists would have activated (within the pages
    /// the policy holds) counts as a rotation for `get_scan_count`, as an
    /// activated refault does there, so thrashing file pages turn reclaim
    /// toward anonymous ones.
    pub(crate) fn policy_refault(&self, folio: FolioRef, refault: Refault) {
        let Some(policy) = self.policy.get() else { return };
        if refault.distance <= self.lruvec.len(LruList::InactiveFile) {
            self.lruvec.lock(&self.arena, &self.vm).reclaim_stat().recent_rotated[1] += 1;
        }
        policy.folio_refault(folio, refault);
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
                    // activate_locked: try_to_unmap found it used (a
                    // rotation for get_scan_count, as the kernel counts it).
                    page.clear(PG_ACTIVE, &self.vm);
                    lru.reclaim_stat().recent_rotated[1] += 1;
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
        let ctl = PolicyCtl::new(PolicyKind::Lru.build(64, 64));
        let mut seen = Vec::new();
        for pfn in 0..(PAGEVEC_SIZE as Pfn + 3) {
            ctl.queue_access(folio(pfn), |b| seen.extend(b.iter().map(|f| f.pfn)));
        }
        assert_eq!(seen, (0..PAGEVEC_SIZE as Pfn).collect::<Vec<_>>());
        ctl.drain(true, |b| seen.extend(b.iter().map(|f| f.pfn)));
        assert_eq!(seen, (0..PAGEVEC_SIZE as Pfn + 3).collect::<Vec<_>>());
        assert!(PolicyCtl::new(None).get().is_none());
    }
}

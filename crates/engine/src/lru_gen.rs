//! The multi-gen LRU (Linux 6.1+, `CONFIG_LRU_GEN`): Documentation/mm/
//! multigen_lru.rst, the lru_gen sections of mm/vmscan.c,
//! `lru_gen_eviction`/`lru_gen_refault` of mm/workingset.c,
//! `lru_gen_add_folio`/`lru_gen_del_folio` of include/linux/mm_inline.h and
//! `folio_inc_refs` of mm/swap.c. Selected by `Tunables::lru = MultiGen`.
//!
//! Instead of two lists, evictable pages sit in *generations*, numbered by
//! sequence: `max_seq` (the youngest, shared by file and anon) down to
//! `min_seq[type]` (the oldest of each type). There are MIN_NR_GENS = 2 to
//! MAX_NR_GENS = 4 of them; a page's generation, `seq % MAX_NR_GENS`, is kept
//! in its flags (`LRU_GEN_MASK`), and each generation has a list per type.
//!
//! ```text
//!   read(2) --> min_seq ....... max_seq <-- activated, faulted in (in_lru_fault)
//!                 |   ^ protected tiers, dirty (inc_gen)
//!                 v
//!              evicted: shadow = (min_seq, refs)
//! ```
//!
//! - **Aging** (`inc_max_seq`) opens a new youngest generation; when four
//!   exist, the oldest is folded into the next first (`inc_min_seq`). Mapped
//!   pages whose page-table entries are young are moved to the youngest
//!   generation: by walking the mappings' page tables (`walk_mm`, below,
//!   with a Bloom filter of the dense regions) and by the rmap walk of
//!   eviction, which looks at the neighbouring entries too
//!   (`lru_gen_look_around`). Aging runs when eviction finds too few
//!   generations (`should_run_aging`).
//! - **Tiers**: a page read N times through file descriptors is in tier
//!   order_base_2(N) (0 to MAX_NR_TIERS - 1 = 3). The first access sets
//!   PG_referenced, the second PG_workingset, the next ones count in the
//!   flags' 2-bit field (`folio_inc_refs`, lockless: one compare-and-swap,
//!   none once the count is full; no lru_lock, no list move on a hit).
//!   Once the count is full, a hint in the page's tree slot lets hits skip
//!   the page descriptor (`set_count_full_hint`, pcache's own).
//! - **Eviction** (`evict_folios`) scans the oldest generation of the type
//!   `get_type_to_scan` picks. `sort_folio` keeps pages whose tier the
//!   refault feedback protects (to the next generation, their count reset)
//!   and dirty or locked ones (likewise, tagged PG_reclaim);
//!   `isolate_folio` takes the rest to `shrink_page_list` (vmscan.rs).
//! - **Feedback** (a PID controller without the D term): per type and tier,
//!   refaulted / (evicted + protected) over the generation being evicted
//!   (P) and its running average over past ones (I, halved at each
//!   `min_seq` step). Tier 0 of a type is the set point; a higher tier is
//!   protected while its refault rate exceeds the set point's
//!   (`positive_ctrl_err`, gain 1:2). Across types, the gains are
//!   swappiness and 200 - swappiness. An evicted page leaves
//!   `(min_seq, refs)` in its shadow entry; a refault while that generation
//!   is still the oldest counts as a refault of its tier (`lru_gen_refault`).
//!
//! Large folios are aged and evicted whole; every count (generation
//! sizes, scans, protections, evictions, refaults) is in pages, a folio
//! counting its size, as the kernel's `folio_nr_pages` deltas.
//!
//! pcache's deviations: one node, one zone, no memcg (NR_HIST_GENS = 1, as
//! without CONFIG_LRU_GEN_STATS); a page's generation always names the list
//! it is on, because every generation change is made under `lru_lock` with
//! the move (the kernel's page-table walk changes generations locklessly
//! and `sort_folio` moves the page later); the walk therefore moves young
//! pages under the lock, in batches. `min_ttl_ms` is checked by every
//! reclaimer, not only kswapd, and where the kernel OOM-kills, pcache's
//! reclaim refuses (the allocation fails with ENOMEM at once). `current->in_lru_fault`
//! is a thread-local flag set for the length of `handle_mm_fault`
//! (`lru_gen_enter_fault`). Reclaim that meets dirty
//! pages in the oldest generation wakes the flushers (later kernels do the
//! same; 6.1 leaves it to the writeback clock).

// The loops over types and tiers index several arrays at once, as the
// kernel's `for (type = ...; type < ANON_AND_FILE; type++)` do.
#![allow(clippy::needless_range_loop)]

use std::cell::Cell;
use std::fmt::Write as _;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lruvec::LruGuard;
use crate::mm::Cache;
use crate::mmap::{pte_pfn, Vma, VM_RAND_READ, VM_SEQ_READ};
use crate::page::*;
use crate::pagetree::PAGE_HOT;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::tunables::{LruPolicy, Tunables};
use crate::vmscan::{ScanControl, DEF_PRIORITY};
use crate::vmstat::Item;
use crate::LruList;

pub const MIN_NR_GENS: u64 = 2;
pub const MAX_NR_GENS: usize = 4;
pub const MAX_NR_TIERS: usize = 4;
/// Without CONFIG_LRU_GEN_STATS: the feedback keeps one generation's counts.
const NR_HIST_GENS: usize = 1;
/// MIN_LRU_BATCH (BITS_PER_LONG) and MAX_LRU_BATCH.
const MIN_LRU_BATCH: u64 = 64;
const MAX_LRU_BATCH: u64 = MIN_LRU_BATCH * 64;
/// MEMCG_NR_GENS, which set_initial_priority divides by.
const MEMCG_NR_GENS: u64 = 3;
pub const LRU_GEN_ANON: usize = 0;
pub const LRU_GEN_FILE: usize = 1;

/// The `enabled` bits (/sys/kernel/mm/lru_gen/enabled).
pub const LRU_GEN_CORE: u32 = 1 << 0;
pub const LRU_GEN_MM_WALK: u32 = 1 << 1;
/// The bits this machine has: pcache's flat page tables have no non-leaf
/// young bits, so LRU_GEN_NONLEAF_YOUNG (0x0004) never shows (as on arm64).
const LRU_GEN_CAPS: u32 = LRU_GEN_CORE | LRU_GEN_MM_WALK;

/// lru_gen_from_seq.
#[inline]
pub fn lru_gen_from_seq(seq: u64) -> usize {
    (seq % MAX_NR_GENS as u64) as usize
}

/// order_base_2: log2 rounded up (0 for 0 and 1).
#[inline]
fn order_base_2(n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// lru_tier_from_refs: refs is accesses - 1 (folio_lru_refs).
#[inline]
pub fn lru_tier_from_refs(refs: usize) -> usize {
    order_base_2(refs + 1)
}

/// folio_is_file_lru as the type index.
#[inline]
pub(crate) fn folio_type(flags: u32) -> usize {
    (flags & PG_SWAPBACKED == 0) as usize
}

type TierCounts = [[AtomicU64; MAX_NR_TIERS]; 2];

fn tier_counts() -> TierCounts {
    std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0)))
}

/// struct lru_gen_folio: the sequence numbers, the generations' birth
/// times and the feedback counters. Sequence numbers change under
/// lru_lock and are read without it (READ_ONCE). The counters are atomics
/// (the kernel's atomic_long_t and WRITE_ONCEs under the lock).
pub struct LruGenState {
    pub max_seq: AtomicU64,
    pub min_seq: [AtomicU64; 2],
    /// Birth of each generation, in ms of the cache's clock (jiffies).
    timestamps: [AtomicU64; MAX_NR_GENS],
    avg_refaulted: TierCounts,
    avg_total: TierCounts,
    refaulted: TierCounts,
    evicted: TierCounts,
    /// protected[type][tier - 1]: pages sort_folio kept for their tier.
    protected: TierCounts,
    /// The `enabled` bits.
    caps: AtomicU32,
    /// min_ttl_ms.
    min_ttl_ms: AtomicU64,
    /// Built with `LruPolicy::MultiGen` (CONFIG_LRU_GEN).
    built: bool,
    /// The page-table walk's Bloom filters and counters (below).
    walk: WalkState,
}

impl LruGenState {
    /// lru_gen_init_lruvec: max_seq = MIN_NR_GENS + 1, min_seq = 0, so
    /// four generations exist (0 to 3), all empty.
    pub fn new(t: &Tunables) -> LruGenState {
        let built = t.lru == LruPolicy::MultiGen;
        LruGenState {
            max_seq: AtomicU64::new(MIN_NR_GENS + 1),
            min_seq: [AtomicU64::new(0), AtomicU64::new(0)],
            timestamps: std::array::from_fn(|_| AtomicU64::new(0)),
            avg_refaulted: tier_counts(),
            avg_total: tier_counts(),
            refaulted: tier_counts(),
            evicted: tier_counts(),
            protected: tier_counts(),
            caps: AtomicU32::new(if built { LRU_GEN_CAPS } else { 0 }),
            min_ttl_ms: AtomicU64::new(t.lru_gen_min_ttl_ms as u64),
            built,
            walk: WalkState::default(),
        }
    }

    fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Acquire)
    }

    fn min_seq(&self) -> [u64; 2] {
        [self.min_seq[0].load(Ordering::Acquire), self.min_seq[1].load(Ordering::Acquire)]
    }

    /// get_nr_gens.
    fn nr_gens(&self, typ: usize) -> u64 {
        self.max_seq() - self.min_seq[typ].load(Ordering::Acquire) + 1
    }

    /// lru_gen_is_active: the two youngest generations count as active.
    fn is_active(&self, gen: usize) -> bool {
        let max_seq = self.max_seq();
        gen == lru_gen_from_seq(max_seq) || gen == lru_gen_from_seq(max_seq - 1)
    }

    /// read_ctrl_pos.
    fn read_ctrl_pos(&self, typ: usize, tier: usize, gain: u64) -> CtrlPos {
        let ld = |c: &TierCounts| c[typ][tier].load(Ordering::Relaxed);
        let mut total = ld(&self.avg_total) + ld(&self.evicted);
        if tier > 0 {
            total += self.protected[typ][tier - 1].load(Ordering::Relaxed);
        }
        CtrlPos { refaulted: ld(&self.avg_refaulted) + ld(&self.refaulted), total, gain }
    }

    /// reset_ctrl_pos, lru_lock held: at a min_seq step (`carryover`), the
    /// averages take half of themselves plus half of the generation just
    /// retired, whose counts then start again.
    fn reset_ctrl_pos(&self, typ: usize, carryover: bool) {
        let clear = if carryover { NR_HIST_GENS == 1 } else { NR_HIST_GENS > 1 };
        if !carryover && !clear {
            return;
        }
        for tier in 0..MAX_NR_TIERS {
            let protected = if tier > 0 { self.protected[typ][tier - 1].load(Ordering::Relaxed) } else { 0 };
            if carryover {
                let sum = self.avg_refaulted[typ][tier].load(Ordering::Relaxed)
                    + self.refaulted[typ][tier].load(Ordering::Relaxed);
                self.avg_refaulted[typ][tier].store(sum / 2, Ordering::Relaxed);
                let sum = self.avg_total[typ][tier].load(Ordering::Relaxed)
                    + self.evicted[typ][tier].load(Ordering::Relaxed)
                    + protected;
                self.avg_total[typ][tier].store(sum / 2, Ordering::Relaxed);
            }
            if clear {
                self.refaulted[typ][tier].store(0, Ordering::Relaxed);
                self.evicted[typ][tier].store(0, Ordering::Relaxed);
                if tier > 0 {
                    self.protected[typ][tier - 1].store(0, Ordering::Relaxed);
                }
            }
        }
    }
}

/// struct ctrl_pos: a position of the controller.
#[derive(Clone, Copy, Debug)]
struct CtrlPos {
    refaulted: u64,
    total: u64,
    gain: u64,
}

/// positive_ctrl_err: the process variable (PV) has few refaults, or a
/// refault rate, weighed by the gains, at most the set point's (SP).
fn positive_ctrl_err(sp: CtrlPos, pv: CtrlPos) -> bool {
    let w = |a: u64, b: u64, c: u64| a as u128 * b as u128 * c as u128;
    pv.refaulted < MIN_LRU_BATCH
        || w(pv.refaulted, sp.total + MIN_LRU_BATCH, sp.gain) <= w(sp.refaulted + 1, pv.total, pv.gain)
}

/// One generation's line of [`LruGenStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LruGenGeneration {
    pub seq: u64,
    /// Milliseconds since the generation was made.
    pub age_ms: u64,
    /// Pages of each type (0 anon, 1 file).
    pub nr_pages: [u64; 2],
}

/// The multi-gen LRU's state, as the debugfs file shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LruGenStats {
    pub max_seq: u64,
    pub min_seq: [u64; 2],
    /// From min(min_seq) to max_seq.
    pub generations: Vec<LruGenGeneration>,
    /// Per type and tier: refaulted, evicted and protected (tier 0 has no
    /// protected count) in the generation being evicted, and the averages
    /// over those evicted before (refaulted, evicted + protected).
    pub refaulted: [[u64; MAX_NR_TIERS]; 2],
    pub evicted: [[u64; MAX_NR_TIERS]; 2],
    pub protected: [[u64; MAX_NR_TIERS]; 2],
    pub avg_refaulted: [[u64; MAX_NR_TIERS]; 2],
    pub avg_total: [[u64; MAX_NR_TIERS]; 2],
}

/// Where a cached page stands in the multi-gen LRU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LruGenPage {
    /// Its generation's sequence number, and the generation (seq % 4).
    pub seq: u64,
    pub gen: usize,
    /// Accesses beyond the first (folio_lru_refs) and the tier they give.
    pub refs: usize,
    pub tier: usize,
    pub referenced: bool,
    pub workingset: bool,
}

std::thread_local! {
    /// current->in_lru_fault: this thread is handling a fault on a mapping
    /// whose accesses have recency (not MADV_SEQUENTIAL or MADV_RANDOM).
    static IN_LRU_FAULT: Cell<bool> = const { Cell::new(false) };
    /// This thread's last direct reclaim was refused by min_ttl_ms: the
    /// point where lru_gen_age_node would call out_of_memory.
    static MIN_TTL_OOM: Cell<bool> = const { Cell::new(false) };
}

/// Take the min_ttl refusal of this thread's last direct reclaim:
/// alloc_page fails at once with ENOMEM, where the kernel OOM-kills (there
/// is no process to kill, and nothing else would free a frame).
pub(crate) fn lru_gen_take_oom() -> bool {
    MIN_TTL_OOM.with(|f| f.replace(false))
}

/// lru_gen_enter_fault .. lru_gen_exit_fault, as a guard: the flag is back
/// to what it was however the fault returns (errors included).
pub(crate) struct LruGenFault {
    prev: bool,
}

impl Drop for LruGenFault {
    fn drop(&mut self) {
        IN_LRU_FAULT.with(|f| f.set(self.prev));
    }
}

/// lru_gen_enter_fault (memory.c, 6.1): "the LRU algorithm doesn't apply
/// to sequential or random reads".
pub(crate) fn lru_gen_enter_fault(vma: &Vma) -> LruGenFault {
    let recency = vma.hint.load(Ordering::Relaxed) & (VM_SEQ_READ | VM_RAND_READ) == 0;
    LruGenFault { prev: IN_LRU_FAULT.with(|f| f.replace(recency)) }
}

/// Reclaim's PF_MEMALLOC as far as folio_add_lru cares: while the guard
/// lives, pages added to the LRU are not "in fault" (a reclaim run from a
/// fault's allocation is not the fault's access).
fn lru_gen_memalloc() -> LruGenFault {
    LruGenFault { prev: IN_LRU_FAULT.with(|f| f.replace(false)) }
}

/// lru_gen_in_fault.
#[inline]
fn lru_gen_in_fault() -> bool {
    IN_LRU_FAULT.with(|f| f.get())
}

impl Cache {
    /// lru_gen_enabled: whether the multi-gen LRU holds the pages now.
    #[inline]
    pub fn lru_gen_enabled(&self) -> bool {
        self.lruvec.lrugen.caps.load(Ordering::Relaxed) & LRU_GEN_CORE != 0
    }

    /// folio_add_lru's multi-gen step (mm/swap.c, 6.1): a page added while
    /// this thread handles a fault (and is not reclaiming) is set active,
    /// so lru_gen_add_folio puts it in the youngest generation: it was
    /// just accessed through a page table, which the tiers do not count.
    #[inline]
    pub(crate) fn lru_gen_fault_activate(&self, pfn: Pfn) {
        if self.lru_gen_enabled() && lru_gen_in_fault() {
            let page = self.page(pfn);
            if page.flags() & (PG_UNEVICTABLE | PG_ACTIVE) == 0 {
                page.set(PG_ACTIVE, &self.vm);
            }
        }
    }

    /// get_swappiness: 0 without free swap (only file pages are aged and
    /// evicted), else vm.swappiness.
    fn lru_gen_swappiness(&self) -> u32 {
        if self.nr_swap_pages() == 0 {
            0
        } else {
            self.sysctl.swappiness()
        }
    }

    /// lru_gen_add_folio, lru_lock held: a page joins a generation. An
    /// active page (fresh and hot) goes to the youngest; a page that
    /// cannot be evicted at once (anon outside the swap cache, dirty or
    /// under writeback and tagged for reclaim) to the second oldest; the
    /// rest to the oldest. PG_active is folded into the generation.
    /// `reclaiming` adds at the tail (folio_rotate_reclaimable). False if
    /// the multi-gen LRU is off or the page unevictable.
    pub(crate) fn lru_gen_add_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn, reclaiming: bool) -> bool {
        let page = self.page(pfn);
        let flags = page.flags();
        crate::mmdebug::vm_bug_on_page!(folio_lru_gen(flags).is_some(), page, "lru_gen_add_folio: already on one");
        if flags & PG_UNEVICTABLE != 0 || !self.lru_gen_enabled() {
            return false;
        }
        let g = &self.lruvec.lrugen;
        let typ = folio_type(flags);
        let seq = if flags & PG_ACTIVE != 0 {
            g.max_seq()
        } else if (typ == LRU_GEN_ANON && flags & PG_SWAPCACHE == 0)
            || (flags & PG_RECLAIM != 0 && flags & (PG_DIRTY | PG_WRITEBACK) != 0)
        {
            g.min_seq[typ].load(Ordering::Acquire) + 1
        } else {
            g.min_seq[typ].load(Ordering::Acquire)
        };
        let gen = lru_gen_from_seq(seq);
        page.set_mask_bits(LRU_GEN_MASK | PG_ACTIVE, ((gen + 1) as u32) << LRU_GEN_PGOFF, &self.vm);
        lru.gen_add(pfn, gen, typ, reclaiming);
        true
    }

    /// lru_gen_del_folio, lru_lock held: the page leaves its generation.
    /// Unless `reclaiming`, a page of the two youngest generations gets
    /// PG_active back. False if it is on no generation list.
    pub(crate) fn lru_gen_del_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn, reclaiming: bool) -> bool {
        let page = self.page(pfn);
        let flags = page.flags();
        let Some(gen) = folio_lru_gen(flags) else { return false };
        lru.gen_del(pfn, gen, folio_type(flags));
        let active = !reclaiming && self.lruvec.lrugen.is_active(gen);
        page.set_mask_bits(LRU_GEN_MASK, if active { PG_ACTIVE } else { 0 }, &self.vm);
        true
    }

    /// lruvec_add_folio: to a generation, or else to the list the flags name.
    pub(crate) fn lruvec_add_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn) {
        if !self.lru_gen_add_folio(lru, pfn, false) {
            lru.add(pfn, LruList::of_flags(self.page(pfn).flags()));
        }
    }

    /// lruvec_add_folio_tail.
    pub(crate) fn lruvec_add_folio_tail(&self, lru: &mut LruGuard<'_>, pfn: Pfn) {
        if !self.lru_gen_add_folio(lru, pfn, true) {
            lru.add_tail(pfn, LruList::of_flags(self.page(pfn).flags()));
        }
    }

    /// lruvec_del_folio: from its generation, or from the list the flags name.
    pub(crate) fn lruvec_del_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn) {
        if !self.lru_gen_del_folio(lru, pfn, false) {
            lru.del(pfn, LruList::of_flags(self.page(pfn).flags()));
        }
    }

    /// folio_inc_refs (folio_mark_accessed with the multi-gen LRU): count
    /// one access through a file descriptor, without any lock (see
    /// [`inc_refs`]).
    #[inline]
    pub(crate) fn folio_inc_refs(&self, pfn: Pfn) {
        let rmw = inc_refs(&self.page(pfn).flags);
        if rmw > 0 {
            self.vm.add(Item::atomic_flag_rmw, rmw);
        }
    }

    /// Clear the count-full hint of `pfn` if its flags were `old` (taken
    /// before the flag RMW that reset the count or took the page off a
    /// generation): see [`set_count_full_hint`]. The page is held by the
    /// caller (lru_lock: it is on a generation, or isolated by us).
    pub(crate) fn lru_gen_clear_hint(&self, pfn: Pfn, old: u32) {
        if !count_full(old) {
            return;
        }
        let page = self.page(pfn);
        // Anonymous pages are in no file's page tree (their mapping ids are
        // above every inode id); the hint exists only in file slots.
        let Some(inode) = self.inode_by_id(page.mapping()) else { return };
        let walk = inode.tree.walk();
        if let Some(slot) = inode.tree.slot(page.index(), &walk) {
            clear_count_full_hint(slot);
            self.vm.inc(Item::lru_gen_hint_clear);
        }
    }

    /// folio_inc_gen, lru_lock held, the page in the oldest generation of
    /// its type: move it to the next one, its access count reset
    /// (PG_referenced, PG_workingset and the counter), tagged PG_reclaim if
    /// `reclaiming`, at the list's tail (or head). Returns the new gen.
    fn folio_inc_gen(&self, lru: &mut LruGuard<'_>, pfn: Pfn, reclaiming: bool, tail: bool) -> usize {
        let page = self.page(pfn);
        let flags = page.flags();
        let typ = folio_type(flags);
        let old_gen = lru_gen_from_seq(self.lruvec.lrugen.min_seq[typ].load(Ordering::Relaxed));
        let cur = folio_lru_gen(flags);
        crate::mmdebug::vm_bug_on_page!(cur.is_none(), page, "folio_inc_gen: on no generation");
        let cur = cur.unwrap_or(old_gen);
        // "folio_update_gen() has promoted this page?": then it only moves.
        let new_gen = if cur != old_gen { cur } else { (old_gen + 1) % MAX_NR_GENS };
        lru.gen_del(pfn, cur, typ);
        if new_gen != cur || cur == old_gen {
            let mut bits = ((new_gen + 1) as u32) << LRU_GEN_PGOFF;
            if reclaiming {
                bits |= PG_RECLAIM;
            }
            let old = page.set_mask_bits(LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS, bits, &self.vm);
            self.lru_gen_clear_hint(pfn, old);
        }
        lru.gen_add(pfn, new_gen, typ, tail);
        new_gen
    }

    /// inc_min_seq, lru_lock held: fold the oldest generation of `typ`
    /// into the next (at most MAX_LRU_BATCH pages per call; false if more
    /// remain), then retire it.
    fn inc_min_seq(&self, lru: &mut LruGuard<'_>, typ: usize, can_swap: bool) -> bool {
        let g = &self.lruvec.lrugen;
        let old_gen = lru_gen_from_seq(g.min_seq[typ].load(Ordering::Relaxed));
        if typ == LRU_GEN_FILE || can_swap {
            let mut remaining = MAX_LRU_BATCH;
            while let Some(pfn) = lru.gen_tail(old_gen, typ) {
                self.folio_inc_gen(lru, pfn, false, true);
                remaining -= 1;
                if remaining == 0 {
                    return false;
                }
            }
        }
        g.reset_ctrl_pos(typ, true);
        g.min_seq[typ].fetch_add(1, Ordering::Release);
        self.vm.inc(Item::lru_gen_min_seq_inc);
        true
    }

    /// try_to_inc_min_seq, lru_lock held: retire the empty oldest
    /// generations (keeping MIN_NR_GENS); with swap, anon's min_seq never
    /// passes file's, and file's never falls behind anon's.
    fn try_to_inc_min_seq(&self, lru: &mut LruGuard<'_>, can_swap: bool) -> bool {
        let g = &self.lruvec.lrugen;
        let max_seq = g.max_seq();
        let old = g.min_seq();
        let mut min_seq = old;
        for typ in (!can_swap) as usize..2 {
            while min_seq[typ] + MIN_NR_GENS <= max_seq {
                if lru.gen_len(lru_gen_from_seq(min_seq[typ]), typ) != 0 {
                    break;
                }
                min_seq[typ] += 1;
            }
        }
        if can_swap {
            min_seq[LRU_GEN_ANON] = min_seq[LRU_GEN_ANON].min(min_seq[LRU_GEN_FILE]);
            min_seq[LRU_GEN_FILE] = min_seq[LRU_GEN_ANON].max(old[LRU_GEN_FILE]);
        }
        let mut success = false;
        for typ in (!can_swap) as usize..2 {
            if min_seq[typ] == old[typ] {
                continue;
            }
            g.reset_ctrl_pos(typ, true);
            g.min_seq[typ].store(min_seq[typ], Ordering::Release);
            self.vm.add(Item::lru_gen_min_seq_inc, min_seq[typ] - old[typ]);
            success = true;
        }
        success
    }

    /// inc_max_seq, lru_lock held: make a new youngest generation, folding
    /// the oldest of a type that already has MAX_NR_GENS.
    fn inc_max_seq(&self, lru: &mut LruGuard<'_>, can_swap: bool) {
        let g = &self.lruvec.lrugen;
        for typ in (0..2).rev() {
            if g.nr_gens(typ) != MAX_NR_GENS as u64 {
                continue;
            }
            while !self.inc_min_seq(lru, typ, can_swap) {}
        }
        for typ in 0..2 {
            g.reset_ctrl_pos(typ, false);
        }
        let next = lru_gen_from_seq(g.max_seq() + 1);
        g.timestamps[next].store(self.now_ms(), Ordering::Relaxed);
        g.max_seq.fetch_add(1, Ordering::Release);
        // The two youngest generations changed: so did active/inactive.
        lru.update_compat_sizes();
        self.vm.inc(Item::lru_gen_aging);
    }

    /// try_to_inc_max_seq: age once, unless someone else already made
    /// generation `max_seq + 1`. With LRU_GEN_MM_WALK, the mappings' page
    /// tables are walked first, promoting the young pages they map.
    fn try_to_inc_max_seq(&self, max_seq: u64, can_swap: bool, force_scan: bool) -> bool {
        let g = &self.lruvec.lrugen;
        if g.max_seq() != max_seq {
            return false;
        }
        if g.caps.load(Ordering::Relaxed) & LRU_GEN_MM_WALK != 0 {
            self.lru_gen_walk_mm(max_seq, can_swap, force_scan);
        }
        let mut lru = self.lruvec.lock(&self.arena, &self.vm);
        if g.max_seq() != max_seq {
            return false;
        }
        self.inc_max_seq(&mut lru, can_swap);
        true
    }

    /// lruvec_is_reclaimable's min_ttl test (lru_gen_age_node): false if
    /// the oldest file generation is younger than min_ttl_ms. Deviation:
    /// the size test (lruvec_is_sizable, `total >> priority`) is for
    /// memcgs and is left out; the check runs at every priority.
    fn lru_gen_age_node(&self) -> bool {
        let g = &self.lruvec.lrugen;
        let min_ttl = g.min_ttl_ms.load(Ordering::Relaxed);
        if min_ttl == 0 {
            return true;
        }
        let gen = lru_gen_from_seq(g.min_seq[LRU_GEN_FILE].load(Ordering::Acquire));
        let birth = g.timestamps[gen].load(Ordering::Relaxed);
        birth + min_ttl <= self.now_ms()
    }

    /// should_run_aging: (age now, pages to scan at this priority). Aging is
    /// needed when a type eviction may take from is down to MIN_NR_GENS;
    /// with MIN_NR_GENS + 1 generations it is run when the youngest holds
    /// more than half the pages or the oldest less than a quarter.
    fn should_run_aging(&self, sc: &ScanControl, can_swap: bool) -> (bool, u64) {
        let g = &self.lruvec.lrugen;
        let lru = self.lruvec.lock(&self.arena, &self.vm);
        let max_seq = g.max_seq();
        let min_seq = g.min_seq();
        let first = (!can_swap) as usize;
        if min_seq[first] + MIN_NR_GENS > max_seq {
            return (true, 0);
        }
        let (mut old, mut young, mut total) = (0, 0, 0);
        for (typ, &min) in min_seq.iter().enumerate().skip(first) {
            for seq in min..=max_seq {
                let size = lru.gen_len(lru_gen_from_seq(seq), typ);
                total += size;
                if seq == max_seq {
                    young += size;
                } else if seq + MIN_NR_GENS == max_seq {
                    old += size;
                }
            }
        }
        let nr_to_scan = total >> sc.priority;
        if min_seq[first] + MIN_NR_GENS < max_seq {
            return (false, nr_to_scan);
        }
        let run = young * MIN_NR_GENS > total || old * (MIN_NR_GENS + 2) < total;
        (run, nr_to_scan)
    }

    /// get_nr_to_scan: pages to scan, or 0 (nothing to do here) or -1
    /// (aged instead). No aging at DEF_PRIORITY.
    fn get_nr_to_scan(&self, sc: &ScanControl, can_swap: bool) -> i64 {
        let max_seq = self.lruvec.lrugen.max_seq();
        let (run, nr) = self.should_run_aging(sc, can_swap);
        if !run || sc.priority == DEF_PRIORITY {
            return nr as i64;
        }
        if self.try_to_inc_max_seq(max_seq, can_swap, false) {
            -1
        } else {
            0
        }
    }

    /// get_tier_idx: the last tier of `typ` not to protect, comparing each
    /// tier's refault rate with tier 0's (gains 1:2, a margin for noise).
    fn get_tier_idx(&self, typ: usize) -> usize {
        let g = &self.lruvec.lrugen;
        let sp = g.read_ctrl_pos(typ, 0, 1);
        let mut tier = 1;
        while tier < MAX_NR_TIERS {
            if !positive_ctrl_err(sp, g.read_ctrl_pos(typ, tier, 2)) {
                break;
            }
            tier += 1;
        }
        tier - 1
    }

    /// get_type_to_scan: anon or file by their tier 0's refault rates
    /// weighed by swappiness and 200 - swappiness, and the last tier of
    /// that type to evict, against the other type's tier 0.
    fn get_type_to_scan(&self, swappiness: u64) -> (usize, usize) {
        let g = &self.lruvec.lrugen;
        let gain = [swappiness, 200 - swappiness];
        let sp = g.read_ctrl_pos(LRU_GEN_ANON, 0, gain[LRU_GEN_ANON]);
        let pv = g.read_ctrl_pos(LRU_GEN_FILE, 0, gain[LRU_GEN_FILE]);
        let typ = positive_ctrl_err(sp, pv) as usize;
        let sp = g.read_ctrl_pos(1 - typ, 0, gain[1 - typ]);
        let mut tier = 1;
        while tier < MAX_NR_TIERS {
            if !positive_ctrl_err(sp, g.read_ctrl_pos(typ, tier, gain[typ])) {
                break;
            }
            tier += 1;
        }
        (typ, tier - 1)
    }

    /// sort_folio, lru_lock held, the page at the oldest generation's
    /// tail: true if it stays (moved to its own generation's list if it
    /// was promoted, to the next generation if its tier is protected or
    /// it is dirty, locked or under writeback).
    fn sort_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn, tier_idx: usize, dirty_seen: &mut bool) -> bool {
        let page = self.page(pfn);
        let flags = page.flags();
        let typ = folio_type(flags);
        let g = &self.lruvec.lrugen;
        let Some(gen) = folio_lru_gen(flags) else { return false };
        let refs = folio_lru_refs(flags);
        let tier = lru_tier_from_refs(refs);
        // promoted
        if gen != lru_gen_from_seq(g.min_seq[typ].load(Ordering::Relaxed)) {
            lru.gen_del(pfn, gen, typ);
            lru.gen_add(pfn, gen, typ, false);
            self.vm.inc(Item::lru_gen_promoted);
            return true;
        }
        // protected
        if tier > tier_idx || refs == 1 << LRU_REFS_WIDTH {
            // Counted in pages, a folio by its size.
            let delta = page.folio_nr_pages();
            self.folio_inc_gen(lru, pfn, false, true);
            g.protected[typ][tier - 1].fetch_add(delta, Ordering::Relaxed);
            self.vm.add(Item::lru_gen_protected, delta);
            let item = if typ == LRU_GEN_FILE { Item::workingset_activate } else { Item::workingset_activate_anon };
            self.vm.add(item, delta);
            return true;
        }
        // waiting for writeback
        if flags & (PG_LOCKED | PG_WRITEBACK) != 0 || (typ == LRU_GEN_FILE && flags & PG_DIRTY != 0) {
            self.folio_inc_gen(lru, pfn, true, false);
            self.vm.inc(Item::lru_gen_writeback_deferred);
            *dirty_seen |= flags & PG_DIRTY != 0;
            return true;
        }
        false
    }

    /// isolate_folio, lru_lock held: take the page off its generation with
    /// a reference and PG_lru cleared. An unreferenced page forgets its
    /// tier (see the comment on MAX_NR_TIERS); PG_referenced and
    /// PG_reclaim are cleared for shrink_page_list.
    fn isolate_folio(&self, lru: &mut LruGuard<'_>, pfn: Pfn) -> bool {
        let page = self.page(pfn);
        // raced with release_pages()
        if !page.get_unless_zero() {
            return false;
        }
        // PG_lru changes under lru_lock only, which we hold: it is set.
        let old = page.flags();
        page.clear(PG_LRU, &self.vm);
        self.lru_gen_clear_hint(pfn, old);
        let mask = if page.flags() & PG_REFERENCED == 0 {
            LRU_REFS_MASK | LRU_REFS_FLAGS | PG_RECLAIM
        } else {
            PG_REFERENCED | PG_RECLAIM
        };
        page.set_mask_bits(mask, 0, &self.vm);
        self.lru_gen_del_folio(lru, pfn, true)
    }

    /// scan_folios, lru_lock held: sort or isolate folios from the tail of
    /// `typ`'s oldest generation until MIN_LRU_BATCH pages are isolated
    /// (or folios skipped) or MAX_LRU_BATCH folios scanned. Returns pages
    /// scanned (a folio counts its size), or 0 if none could be isolated.
    fn scan_folios(
        &self,
        lru: &mut LruGuard<'_>,
        sc: &ScanControl,
        typ: usize,
        tier: usize,
        out: &mut Vec<Pfn>,
        dirty_seen: &mut bool,
    ) -> u64 {
        let g = &self.lruvec.lrugen;
        if g.nr_gens(typ) == MIN_NR_GENS {
            return 0;
        }
        let gen = lru_gen_from_seq(g.min_seq[typ].load(Ordering::Relaxed));
        let (mut sorted, mut scanned, mut isolated) = (0u64, 0u64, 0u64);
        let mut remaining = MAX_LRU_BATCH;
        let mut moved = Vec::new();
        while let Some(pfn) = lru.gen_tail(gen, typ) {
            let delta = self.page(pfn).folio_nr_pages();
            scanned += delta;
            if self.sort_folio(lru, pfn, tier, dirty_seen) {
                sorted += delta;
            } else if self.isolate_folio(lru, pfn) {
                out.push(pfn);
                isolated += delta;
            } else {
                lru.gen_del(pfn, gen, typ);
                moved.push(pfn);
            }
            remaining -= 1;
            if remaining == 0 || isolated.max(moved.len() as u64) >= MIN_LRU_BATCH {
                break;
            }
        }
        // list_splice(&moved, head): the skipped pages, at the head.
        for &pfn in &moved {
            lru.gen_add(pfn, gen, typ, false);
        }
        self.vm.add(if sc.kswapd { Item::pgscan_kswapd } else { Item::pgscan_direct }, isolated);
        self.vm.add(if typ == LRU_GEN_FILE { Item::pgscan_file } else { Item::pgscan_anon }, isolated);
        self.vm.add(Item::pgrefill, sorted);
        if isolated > 0 || remaining == 0 {
            scanned
        } else {
            0
        }
    }

    /// isolate_folios: choose the type (the obvious choice first: file
    /// without swappiness, anon if its oldest generation is older), then
    /// scan it, or the other type if nothing could be taken. Returns
    /// (scanned, type).
    fn isolate_folios(
        &self,
        lru: &mut LruGuard<'_>,
        sc: &ScanControl,
        swappiness: u32,
        out: &mut Vec<Pfn>,
        dirty_seen: &mut bool,
    ) -> (u64, usize) {
        let min_seq = self.lruvec.lrugen.min_seq();
        let mut tier = None;
        let mut typ = if swappiness == 0 {
            LRU_GEN_FILE
        } else if min_seq[LRU_GEN_ANON] < min_seq[LRU_GEN_FILE] {
            LRU_GEN_ANON
        } else if swappiness == 1 {
            LRU_GEN_FILE
        } else if swappiness == 200 {
            LRU_GEN_ANON
        } else {
            let (t, idx) = self.get_type_to_scan(swappiness as u64);
            tier = Some(idx);
            t
        };
        let mut scanned = 0;
        for _ in (swappiness == 0) as usize..2 {
            let t = tier.unwrap_or_else(|| self.get_tier_idx(typ));
            scanned = self.scan_folios(lru, sc, typ, t, out, dirty_seen);
            if scanned > 0 {
                break;
            }
            typ = 1 - typ;
            tier = None;
        }
        (scanned, typ)
    }

    /// move_folios_to_lru: put the isolated pages back (to the generation
    /// lru_gen_add_folio picks) and drop the isolation references; pages
    /// whose count reaches zero are freed.
    fn move_folios_to_lru(&self, pages: &[Pfn]) {
        let mut to_free = Vec::new();
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            for &pfn in pages {
                let page = self.page(pfn);
                page.set(PG_LRU, &self.vm);
                if page.put_testzero() {
                    page.clear_frozen(PG_LRU | PG_ACTIVE);
                    to_free.push(pfn);
                    continue;
                }
                self.lruvec_add_folio(&mut lru, pfn);
            }
        }
        if !to_free.is_empty() {
            self.free_pages(&to_free);
        }
    }

    /// evict_folios: isolate a batch from the oldest generation, reclaim
    /// it (shrink_page_list), put back what stays: pages rejected for
    /// being in use go to the youngest generation ("don't add rejected
    /// folios to the oldest generation"), clean ones get one retry.
    /// Returns pages scanned (0: nothing more to do).
    fn evict_folios(&self, sc: &mut ScanControl, swappiness: u32) -> u64 {
        let mut list = Vec::new();
        let mut dirty_seen = false;
        let (scanned, typ) = {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            let (mut scanned, typ) = self.isolate_folios(&mut lru, sc, swappiness, &mut list, &mut dirty_seen);
            scanned += self.try_to_inc_min_seq(&mut lru, swappiness != 0) as u64;
            if self.lruvec.lrugen.nr_gens((swappiness == 0) as usize) == MIN_NR_GENS {
                scanned = 0;
            }
            (scanned, typ)
        };
        if dirty_seen {
            // Deviation (see the module comment): have the flushers clean
            // what reclaim set aside.
            self.wakeup_flusher_threads();
        }
        if list.is_empty() {
            return scanned;
        }
        sc.nr_scanned += list.iter().map(|&p| self.page(p).folio_nr_pages()).sum::<u64>();
        let mut skip_retry = false;
        loop {
            let mut keep = Vec::with_capacity(list.len());
            let mut stat = crate::vmscan::ReclaimStat::default();
            let reclaimed = self.shrink_page_list(&list, sc, &mut keep, &mut stat);
            sc.nr_reclaimed += reclaimed;
            self.vm.add(if sc.kswapd { Item::pgsteal_kswapd } else { Item::pgsteal_direct }, reclaimed);
            self.vm.add(if typ == LRU_GEN_FILE { Item::pgsteal_file } else { Item::pgsteal_anon }, reclaimed);
            let mut clean = Vec::new();
            let mut back = Vec::with_capacity(keep.len());
            for pfn in keep {
                let page = self.page(pfn);
                let f = page.flags();
                if f & PG_RECLAIM != 0 && f & (PG_DIRTY | PG_WRITEBACK) != 0 {
                    // restore LRU_REFS_FLAGS cleared by isolate_folio()
                    if f & PG_WORKINGSET != 0 {
                        page.set(PG_REFERENCED, &self.vm);
                    }
                    back.push(pfn);
                    continue;
                }
                if skip_retry
                    || f & (PG_ACTIVE | PG_REFERENCED | PG_LOCKED | PG_DIRTY | PG_WRITEBACK) != 0
                    || page.mapped()
                {
                    page.set_mask_bits(LRU_REFS_MASK | LRU_REFS_FLAGS, PG_ACTIVE, &self.vm);
                    back.push(pfn);
                    continue;
                }
                // retry folios that may have missed folio_rotate_reclaimable()
                clean.push(pfn);
            }
            self.move_folios_to_lru(&back);
            if clean.is_empty() {
                break;
            }
            list = clean;
            skip_retry = true;
        }
        scanned
    }

    /// set_initial_priority: at DEF_PRIORITY, for a large enough target,
    /// start where (inactive / MEMCG_NR_GENS) >> priority meets it.
    fn set_initial_priority(&self, sc: &mut ScanControl) {
        if sc.priority != DEF_PRIORITY || sc.nr_to_reclaim < MIN_LRU_BATCH {
            return;
        }
        let fls = |x: u64| (u64::BITS - x.leading_zeros()) as i32;
        let mut reclaimable = self.lruvec.len(LruList::InactiveFile);
        if self.lru_gen_swappiness() != 0 {
            reclaimable += self.lruvec.len(LruList::InactiveAnon);
        }
        reclaimable /= MEMCG_NR_GENS;
        let priority = fls(reclaimable) - 1 - fls(sc.nr_to_reclaim - 1);
        sc.priority = priority.clamp(0, DEF_PRIORITY);
    }

    /// try_to_shrink_lruvec: evict until the target or the priority's scan
    /// budget is met, aging when should_run_aging says so. True if it aged.
    fn try_to_shrink_lruvec(&self, sc: &mut ScanControl) -> bool {
        let swappiness = self.lru_gen_swappiness();
        let mut scanned = 0;
        let mut nr_to_scan;
        loop {
            nr_to_scan = self.get_nr_to_scan(sc, swappiness != 0);
            if nr_to_scan <= 0 {
                break;
            }
            let delta = self.evict_folios(sc, swappiness);
            if delta == 0 {
                break;
            }
            scanned += delta;
            if scanned >= nr_to_scan as u64 || sc.nr_reclaimed >= sc.nr_to_reclaim {
                break;
            }
        }
        nr_to_scan < 0
    }

    /// lru_gen_shrink_node: reclaim at `sc.priority` through the
    /// generations (shrink_node's multi-gen branch, vmscan.rs).
    pub(crate) fn lru_gen_shrink_node(&self, sc: &mut ScanControl) {
        let _memalloc = lru_gen_memalloc();
        self.lru_add_drain();
        if !self.lru_gen_age_node() {
            // Every generation is younger than min_ttl_ms: the kernel
            // OOM-kills rather than evict the working set; pcache refuses.
            self.vm.inc(Item::lru_gen_min_ttl_oom);
            if !sc.kswapd {
                MIN_TTL_OOM.with(|f| f.set(true));
            }
            return;
        }
        self.set_initial_priority(sc);
        self.try_to_shrink_lruvec(sc);
    }

    // ---- state change (lru_gen_change_state) ----

    /// Move every evictable page from the classic lists to the generations
    /// (fill_evictable) or back (drain_evictable), under lru_lock.
    fn lru_gen_change_state(&self, enable: bool) {
        let g = &self.lruvec.lrugen;
        self.lru_add_drain_all();
        let mut lru = self.lruvec.lock(&self.arena, &self.vm);
        if enable == self.lru_gen_enabled() {
            return;
        }
        if enable {
            g.caps.fetch_or(LRU_GEN_CORE, Ordering::Relaxed);
            for list in [
                LruList::InactiveAnon,
                LruList::ActiveAnon,
                LruList::InactiveFile,
                LruList::ActiveFile,
                LruList::Window,
            ] {
                while let Some(pfn) = lru.tail(list) {
                    lru.del(pfn, list);
                    self.page(pfn).clear(PG_WINDOW | PG_PROBATION, &self.vm);
                    if !self.lru_gen_add_folio(&mut lru, pfn, false) {
                        lru.add(pfn, LruList::of_flags(self.page(pfn).flags()));
                    }
                }
            }
        } else {
            for gen in 0..MAX_NR_GENS {
                for typ in 0..2 {
                    while let Some(pfn) = lru.gen_tail(gen, typ) {
                        let old = self.page(pfn).flags();
                        self.lru_gen_del_folio(&mut lru, pfn, false);
                        // The hint means "active and referenced" to the lists.
                        self.lru_gen_clear_hint(pfn, old);
                        lru.add(pfn, LruList::of_flags(self.page(pfn).flags()));
                    }
                }
            }
            g.caps.fetch_and(!LRU_GEN_CORE, Ordering::Relaxed);
            lru.update_compat_sizes();
        }
    }

    // ---- the debugfs interface ----

    /// run_aging (`+ memcg_id node_id seq [can_swap [force_scan]]`).
    fn run_aging(&self, seq: u64, can_swap: bool, force_scan: bool) -> Result<()> {
        let g = &self.lruvec.lrugen;
        let max_seq = g.max_seq();
        let min_seq = g.min_seq();
        if seq < max_seq {
            return Ok(());
        }
        if seq > max_seq {
            return Err(Error::InvalidArgument(format!("lru_gen: seq {seq} is past max_seq {max_seq} (EINVAL)")));
        }
        if !force_scan && min_seq[(!can_swap) as usize] + MAX_NR_GENS as u64 - 1 <= max_seq {
            return Err(Error::InvalidArgument(format!(
                "lru_gen: already {MAX_NR_GENS} generations; aging needs force_scan (ERANGE)"
            )));
        }
        self.lru_add_drain_all();
        self.try_to_inc_max_seq(max_seq, can_swap, force_scan);
        Ok(())
    }

    /// run_eviction (`- memcg_id node_id seq [swappiness [nr_to_reclaim]]`):
    /// evict generations up to `seq`, which must leave MIN_NR_GENS.
    /// Returns pages reclaimed.
    fn run_eviction(&self, seq: u64, swappiness: u32, nr_to_reclaim: u64) -> Result<u64> {
        let g = &self.lruvec.lrugen;
        if seq + MIN_NR_GENS > g.max_seq() {
            return Err(Error::InvalidArgument(format!(
                "lru_gen: seq {seq} leaves fewer than {MIN_NR_GENS} generations (EINVAL)"
            )));
        }
        self.lru_add_drain_all();
        let mut sc = ScanControl::new(nr_to_reclaim, false);
        loop {
            if seq < g.min_seq[(swappiness == 0) as usize].load(Ordering::Acquire) {
                break;
            }
            if sc.nr_reclaimed >= nr_to_reclaim || crate::signal::signal_pending() {
                break;
            }
            if self.evict_folios(&mut sc, swappiness) == 0 {
                break;
            }
        }
        Ok(sc.nr_reclaimed)
    }

    /// A snapshot of the state (lru_gen_seq_show's figures).
    fn lru_gen_stats(&self) -> LruGenStats {
        let g = &self.lruvec.lrugen;
        let lru = self.lruvec.lock(&self.arena, &self.vm);
        let max_seq = g.max_seq();
        let min_seq = g.min_seq();
        let now = self.now_ms();
        let from = min_seq[0].min(min_seq[1]);
        let generations = (from..=max_seq)
            .map(|seq| {
                let gen = lru_gen_from_seq(seq);
                LruGenGeneration {
                    seq,
                    age_ms: now.saturating_sub(g.timestamps[gen].load(Ordering::Relaxed)),
                    nr_pages: [lru.gen_len(gen, 0), lru.gen_len(gen, 1)],
                }
            })
            .collect();
        let rd = |c: &TierCounts| std::array::from_fn(|t| std::array::from_fn(|i| c[t][i].load(Ordering::Relaxed)));
        let mut protected = [[0; MAX_NR_TIERS]; 2];
        for (t, row) in protected.iter_mut().enumerate() {
            for tier in 1..MAX_NR_TIERS {
                row[tier] = g.protected[t][tier - 1].load(Ordering::Relaxed);
            }
        }
        LruGenStats {
            max_seq,
            min_seq,
            generations,
            refaulted: rd(&g.refaulted),
            evicted: rd(&g.evicted),
            protected,
            avg_refaulted: rd(&g.avg_refaulted),
            avg_total: rd(&g.avg_total),
        }
    }

    /// lru_gen_seq_show: the debugfs file (`lru_gen`, or `lru_gen_full`).
    fn lru_gen_dump(&self, full: bool) -> String {
        let st = self.lru_gen_stats();
        let (max_seq, min_seq) = (st.max_seq, st.min_seq);
        let mut m = String::new();
        let _ = writeln!(m, "memcg {:5} ", 0);
        let _ = writeln!(m, " node {:5}", 0);
        let first = if !full {
            min_seq[LRU_GEN_ANON]
        } else if max_seq >= MAX_NR_GENS as u64 {
            max_seq - MAX_NR_GENS as u64 + 1
        } else {
            0
        };
        let walk = self.lruvec.lrugen.walk.stats();
        for seq in first..=max_seq {
            let line = st.generations.iter().find(|l| l.seq == seq);
            let age = line.map_or_else(
                || {
                    self.now_ms()
                        .saturating_sub(self.lruvec.lrugen.timestamps[lru_gen_from_seq(seq)].load(Ordering::Relaxed))
                },
                |l| l.age_ms,
            );
            let _ = write!(m, " {seq:10} {age:10}");
            for typ in 0..2 {
                let size = line.map_or(0, |l| l.nr_pages[typ]);
                let mark = if full && seq < min_seq[typ] { 'x' } else { ' ' };
                let _ = write!(m, " {size:10}{mark}");
            }
            m.push('\n');
            if !full {
                continue;
            }
            for tier in 0..MAX_NR_TIERS {
                let _ = write!(m, "            {tier:10}");
                for typ in 0..2 {
                    let (s, n) = if seq == max_seq {
                        ("RT ", [st.avg_refaulted[typ][tier], st.avg_total[typ][tier], 0])
                    } else if seq == min_seq[typ] || NR_HIST_GENS > 1 {
                        ("rep", [st.refaulted[typ][tier], st.evicted[typ][tier], st.protected[typ][tier]])
                    } else {
                        ("   ", [0, 0, 0])
                    };
                    for (i, c) in s.chars().enumerate() {
                        let _ = write!(m, " {:10}{c}", n[i]);
                    }
                }
                m.push('\n');
            }
            let _ = write!(m, "                      ");
            for (i, c) in "LOYNFA".chars().enumerate() {
                let (c, n) = if seq == max_seq { (c, walk[i]) } else { (' ', 0) };
                let _ = write!(m, " {n:10}{c}");
            }
            m.push('\n');
        }
        m
    }

    /// lru_gen_seq_write: `+`/`-` commands separated by `,`, `;` or newlines.
    fn lru_gen_write(&self, cmds: &str) -> Result<()> {
        for cur in cmds.split([',', ';', '\n']) {
            let cur = cur.trim();
            if cur.is_empty() {
                continue;
            }
            let bad = || Error::InvalidArgument(format!("lru_gen: bad command {cur:?} (EINVAL)"));
            let (cmd, rest) = cur.split_at(1);
            let nums: Vec<u64> =
                rest.split_whitespace().map(|w| parse_num(w).ok_or_else(bad)).collect::<Result<_>>()?;
            if !(3..=5).contains(&nums.len()) || nums[0] != 0 || nums[1] != 0 {
                // memcg 0 and node 0 are the only ones.
                return Err(bad());
            }
            let seq = nums[2];
            match cmd {
                "+" => {
                    let can_swap = nums.get(3).map_or(self.lru_gen_swappiness() != 0, |&v| v != 0);
                    let force_scan = nums.get(4).is_some_and(|&v| v != 0);
                    self.run_aging(seq, can_swap, force_scan)?;
                }
                "-" => {
                    let swappiness = match nums.get(3) {
                        None => self.lru_gen_swappiness(),
                        Some(&s) if s <= 200 => s as u32,
                        Some(_) => return Err(bad()),
                    };
                    let nr = nums.get(4).copied().unwrap_or(u64::MAX);
                    self.run_eviction(seq, swappiness, nr)?;
                }
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    // ---- workingset (mm/workingset.c) ----

    /// lru_gen_eviction: the shadow entry of a page evicted from the
    /// oldest generation: (min_seq, refs - 1) and whether refs > 0; the
    /// eviction counts for the page's tier.
    pub(crate) fn lru_gen_eviction(&self, pfn: Pfn) -> usize {
        use crate::workingset::{EVICTION_MASK, SHADOW_WORKINGSET};
        let flags = self.page(pfn).flags();
        let typ = folio_type(flags);
        let refs = folio_lru_refs(flags);
        let tier = lru_tier_from_refs(refs);
        let g = &self.lruvec.lrugen;
        let min_seq = g.min_seq[typ].load(Ordering::Acquire);
        let token = (min_seq << LRU_REFS_WIDTH) | refs.saturating_sub(1) as u64;
        g.evicted[typ][tier].fetch_add(self.page(pfn).folio_nr_pages(), Ordering::Relaxed);
        let ws = if refs != 0 { SHADOW_WORKINGSET } else { 0 };
        crate::pagetree::SHADOW_BIT | ws | (token & EVICTION_MASK) as usize
    }

    /// lru_gen_refault (6.1): a folio of `nr` pages of type `file` comes
    /// back where `shadow` was. If it was evicted from the generation that
    /// is still the oldest, the refault counts for its tier (the
    /// controller's input), by its size. It is not activated; a page that had used up its counter,
    /// or that comes back through a fault, gets PG_workingset back.
    /// Returns (false, set PG_workingset).
    pub(crate) fn lru_gen_refault(&self, shadow: usize, file: bool, nr: u64) -> (bool, bool) {
        use crate::workingset::{EVICTION_MASK, SHADOW_WORKINGSET};
        let typ = file as usize;
        let token = shadow as u64 & EVICTION_MASK;
        let workingset = shadow & SHADOW_WORKINGSET != 0;
        let g = &self.lruvec.lrugen;
        let min_seq = g.min_seq[typ].load(Ordering::Acquire);
        if token >> LRU_REFS_WIDTH != min_seq & (EVICTION_MASK >> LRU_REFS_WIDTH) {
            return (false, false);
        }
        let refs = (token & ((1 << LRU_REFS_WIDTH) - 1)) as usize + workingset as usize;
        let tier = lru_tier_from_refs(refs);
        g.refaulted[typ][tier].fetch_add(nr, Ordering::Relaxed);
        self.vm.add(Item::lru_gen_refault_recent, nr);
        // "Count the following two cases as stalls: 1. For pages accessed
        // through page tables, hotter pages pushed out hot pages which
        // refaulted immediately. 2. For pages accessed multiple times
        // through file descriptors, numbers of accesses might have been
        // out of the range."
        if lru_gen_in_fault() || refs == 1 << LRU_REFS_WIDTH {
            self.vm.add(if file { Item::workingset_restore } else { Item::workingset_activate_anon }, nr);
            return (false, true);
        }
        (false, false)
    }
}

/// folio_inc_refs' protocol on a page's flags word: the first access sets
/// PG_referenced, the second PG_workingset, the next ones count in the
/// 2-bit LRU_REFS field by compare-and-swap, which fails and retries if
/// any bit changed meanwhile (folio_inc_gen resetting the count under
/// lru_lock, any flag set or cleared); once the field is full the word is
/// only read. Returns the atomic RMWs made. Loom model: loom_tests.rs.
#[inline]
pub(crate) fn inc_refs(flags: &AtomicU32) -> u64 {
    let mut old = flags.load(Ordering::Acquire);
    if old & PG_UNEVICTABLE != 0 {
        return 0;
    }
    if old & PG_REFERENCED == 0 {
        flags.fetch_or(PG_REFERENCED, Ordering::AcqRel);
        return 1;
    }
    if old & PG_WORKINGSET == 0 {
        flags.fetch_or(PG_WORKINGSET, Ordering::AcqRel);
        return 1;
    }
    let mut rmw = 0;
    while old & LRU_REFS_MASK != LRU_REFS_MASK {
        rmw += 1;
        match flags.compare_exchange_weak(old, old + (1 << LRU_REFS_PGOFF), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return rmw,
            Err(cur) => old = cur,
        }
    }
    rmw
}

/// The flags of a page whose access count is full and that sits on a
/// generation list: PG_lru, a generation, PG_referenced, PG_workingset and
/// the 2-bit counter at 3. `folio_inc_refs` on such a page writes nothing.
const COUNT_FULL: u32 = PG_LRU | PG_REFERENCED | PG_WORKINGSET | LRU_REFS_MASK;

/// Whether `flags` say the access count is full (see [`COUNT_FULL`]).
#[inline]
pub(crate) fn count_full(flags: u32) -> bool {
    flags & (COUNT_FULL | PG_UNEVICTABLE) == COUNT_FULL && flags & LRU_GEN_MASK != 0
}

/// The count-full hint (pcache's, for the hit path; the kernel's
/// folio_inc_refs reads the flags on every access): a hit that finds the
/// count full sets PAGE_HOT in the page's tree slot, and later hits see it
/// in the slot they load anyway and skip the page descriptor altogether,
/// as a classic hit does on an active, referenced page.
///
/// Protocol, with the clearer (`clear_count_full_hint`): the setter CASes
/// the hint into the slot, then re-loads the flags and takes the hint back
/// if the count is no longer full. Whoever resets the count (folio_inc_gen,
/// isolate_folio, the walk, deactivate_file, turning the multi-gen LRU off) does so by an
/// RMW of the flags and only then clears the hint by an RMW of the slot
/// (`fetch_and`). Both slot operations are RMWs, so they are ordered: if
/// the clear comes later, it removes the hint; if earlier, the setter's CAS
/// reads from it, which makes the reset visible to the setter's re-load,
/// and the setter takes the hint back. Either way no hint outlives a reset
/// (loom model `mglru_count_full_hint_never_outlives_reset`). A hint that is
/// stale for a moment only costs the page the marks of that moment; it
/// never affects which bytes a reader sees.
#[inline]
pub(crate) fn set_count_full_hint<S: SlotWord>(slot: &S, entry: usize, flags: &AtomicU32) {
    if slot.cas(entry, entry | PAGE_HOT) && !count_full(flags.load(Ordering::Acquire)) {
        // Reset meanwhile: take the hint back (unless the clearer did).
        slot.cas(entry | PAGE_HOT, entry);
    }
}

/// A page-tree slot word: the tree's (std) atomic, and loom's in the model.
pub(crate) trait SlotWord {
    /// compare_exchange(AcqRel, Relaxed): whether it succeeded.
    fn cas(&self, current: usize, new: usize) -> bool;
    /// fetch_and(!PAGE_HOT, AcqRel).
    fn clear_hint(&self);
}

impl SlotWord for std::sync::atomic::AtomicUsize {
    #[inline]
    fn cas(&self, current: usize, new: usize) -> bool {
        use std::sync::atomic::Ordering as O;
        self.compare_exchange(current, new, O::AcqRel, O::Relaxed).is_ok()
    }
    #[inline]
    fn clear_hint(&self) {
        self.fetch_and(!PAGE_HOT, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(loom)]
impl SlotWord for loom::sync::atomic::AtomicUsize {
    fn cas(&self, current: usize, new: usize) -> bool {
        self.compare_exchange(current, new, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }
    fn clear_hint(&self) {
        self.fetch_and(!PAGE_HOT, Ordering::AcqRel);
    }
}

/// The clearer's half of the protocol above, after the flag RMW. An RMW
/// even when the bit looks clear (a plain load could miss a hint being set
/// now); it touches only the hint bit, and a hint it clears on another
/// page that took the slot since only costs that page a mark.
#[inline]
pub(crate) fn clear_count_full_hint<S: SlotWord>(slot: &S) {
    slot.clear_hint();
}

/// A number as the kernel's sscanf reads it (decimal, or 0x hex).
fn parse_num(w: &str) -> Option<u64> {
    match w.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => w.parse().ok(),
    }
}

// ---- the page-table walk (walk_mm) ----

/// Bloom filters of dense page-table regions, two (this generation's,
/// next generation's), as the kernel's lru_gen_mm_state.filters: the walk
/// of generation N visits only the regions the walk of N - 1 (or the rmap
/// look-around) found dense with young entries, plus every region the
/// first time (force). Here a "region" is a mapping's run of 64 entries
/// (a PTE table's cache lines in the kernel; pcache's tables are flat).
#[derive(Default)]
struct WalkState {
    filters: [BloomFilter; 2],
    /// mm_stats: LOYNFA (leaf total, old, young, non-leaf total, found,
    /// added), of the last walk.
    stats: [AtomicU64; 6],
}

impl WalkState {
    fn stats(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.stats[i].load(Ordering::Relaxed))
    }
}

/// BLOOM_FILTER_SHIFT = 15: 2^15 bits, two hashes.
const BLOOM_FILTER_SHIFT: u32 = 15;

struct BloomFilter {
    seq: AtomicU64,
    bits: Box<[AtomicU64]>,
}

impl Default for BloomFilter {
    fn default() -> Self {
        BloomFilter {
            seq: AtomicU64::new(u64::MAX),
            bits: (0..(1usize << BLOOM_FILTER_SHIFT) / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl BloomFilter {
    fn keys(item: u64) -> [usize; 2] {
        // hash_ptr's golden-ratio multiply, split in two keys.
        let h = item.wrapping_mul(0x61c8_8646_80b5_83eb);
        let mask = (1u64 << BLOOM_FILTER_SHIFT) - 1;
        [(h >> 32 & mask) as usize, (h >> (64 - BLOOM_FILTER_SHIFT)) as usize]
    }

    fn test(&self, item: u64) -> bool {
        Self::keys(item).iter().all(|&k| self.bits[k / 64].load(Ordering::Relaxed) & (1 << (k % 64)) != 0)
    }

    fn set(&self, item: u64) {
        for k in Self::keys(item) {
            let w = &self.bits[k / 64];
            if w.load(Ordering::Relaxed) & (1 << (k % 64)) == 0 {
                w.fetch_or(1 << (k % 64), Ordering::Relaxed);
            }
        }
    }

    fn reset(&self, seq: u64) {
        for w in self.bits.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.seq.store(seq, Ordering::Relaxed);
    }
}

/// Entries per region of the walk (a PTE table's MIN_LRU_BATCH).
const REGION_PAGES: usize = 64;

/// The Bloom filter's item for the region of `vma` starting at `start`
/// (the kernel hashes the PMD entry's address).
fn region_key(vma: &Vma, start: usize) -> u64 {
    (vma as *const Vma as u64).rotate_left(20) ^ (start / REGION_PAGES) as u64
}

impl Cache {
    /// The mappings the walk visits (the kernel's mm_list and
    /// should_skip_vma): every file mapping not marked MADV_SEQUENTIAL or
    /// MADV_RANDOM (vma_has_recency), and anonymous regions with swap.
    fn lru_gen_vmas(&self, can_swap: bool) -> Vec<Arc<Vma>> {
        let mut out = Vec::new();
        let inodes = self.icache.collect(|_| true);
        for inode in inodes {
            out.extend(
                inode
                    .i_mmap
                    .read()
                    .iter()
                    .filter(|v| v.hint.load(Ordering::Relaxed) & (VM_SEQ_READ | VM_RAND_READ) == 0)
                    .cloned(),
            );
        }
        if can_swap {
            self.anon.collect(&mut out);
        }
        out
    }

    /// ptep_test_and_clear_young on `slot` of `vma`, for the walks: the
    /// page an entry found young maps, with a reference; None if the entry
    /// is old, not present, or changed under us.
    fn young_pfn(&self, vma: &Vma, slot: usize) -> Option<Pfn> {
        let (pte, young) = vma.table.get(slot)?;
        // Look first, so an old entry's byte is not written.
        if young.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let pfn = pte_pfn(pte.load(Ordering::Acquire))?;
        if young.swap(0, Ordering::Relaxed) == 0 {
            return None;
        }
        if self.page(pfn).is_tail() {
            // A frame of a large folio: its head, with a reference, is read
            // under the ptl, where an entry's head is stable (rmap.rs).
            return self.get_mapped_folio(vma, slot, Some(pfn)).map(|(_, head)| head);
        }
        // The entry holds a reference: the count is not zero while it maps
        // the page, and a page it no longer maps is let go.
        if !self.page(pfn).get_unless_zero() {
            return None;
        }
        if pte_pfn(pte.load(Ordering::Acquire)) != Some(pfn) {
            self.put_page(pfn);
            return None;
        }
        Some(pfn)
    }

    /// The filter of generation `seq` (reset when its turn comes).
    fn bloom_filter(&self, seq: u64) -> &BloomFilter {
        &self.lruvec.lrugen.walk.filters[(seq % 2) as usize]
    }

    /// update_bloom_filter: mark a dense region for the walk making `seq`.
    fn update_bloom_filter(&self, seq: u64, region: u64) {
        let f = self.bloom_filter(seq);
        if f.seq.load(Ordering::Relaxed) != seq {
            f.reset(seq);
        }
        f.set(region);
    }

    /// test_bloom_filter: no filter for `seq` yet means every region.
    fn test_bloom_filter(&self, seq: u64, region: u64) -> bool {
        let f = self.bloom_filter(seq);
        f.seq.load(Ordering::Relaxed) != seq || f.test(region)
    }

    /// walk_mm for every mapping (the kernel's mm_list): the young entries
    /// of regions the filter names are cleared and their pages moved to
    /// the youngest generation (folio_update_gen, here with the move under
    /// lru_lock, batched); regions where at least one entry in eight was
    /// young (suitable_to_scan) are carried to the next generation's
    /// filter. Anonymous regions only with `can_swap`.
    fn lru_gen_walk_mm(&self, max_seq: u64, can_swap: bool, force_scan: bool) {
        let walk = &self.lruvec.lrugen.walk;
        let mut stats = [0u64; 6];
        let mut batch: Vec<Pfn> = Vec::with_capacity(MIN_LRU_BATCH as usize);
        for vma in self.lru_gen_vmas(can_swap) {
            let nr = vma.nr_pages as usize;
            for start in (0..nr).step_by(REGION_PAGES) {
                let region = region_key(&vma, start);
                stats[3] += 1;
                if !force_scan && !self.test_bloom_filter(max_seq, region) {
                    continue;
                }
                stats[4] += 1;
                let end = (start + REGION_PAGES).min(nr);
                let (mut total, mut young) = (0, 0);
                for slot in start..end {
                    total += 1;
                    stats[0] += 1;
                    let Some(pfn) = self.young_pfn(&vma, slot) else {
                        stats[1] += 1;
                        continue;
                    };
                    young += 1;
                    stats[2] += 1;
                    batch.push(pfn);
                    if batch.len() as u64 >= MIN_LRU_BATCH {
                        self.promote_young(&mut batch, max_seq);
                    }
                }
                if young * 8 >= total && young > 0 {
                    stats[5] += 1;
                    self.update_bloom_filter(max_seq + 1, region);
                }
            }
        }
        self.promote_young(&mut batch, max_seq);
        for (i, n) in stats.iter().enumerate() {
            walk.stats[i].store(*n, Ordering::Relaxed);
        }
    }

    /// folio_update_gen for a batch of pages found young (each held by a
    /// reference the walk took): on a generation, moved to `max_seq`'s,
    /// their access counts reset; isolated (no generation), marked
    /// PG_referenced for shrink_page_list. Drops the references.
    fn promote_young(&self, batch: &mut Vec<Pfn>, max_seq: u64) {
        if batch.is_empty() {
            return;
        }
        let new_gen = lru_gen_from_seq(max_seq);
        {
            let mut lru = self.lruvec.lock(&self.arena, &self.vm);
            if self.lruvec.lrugen.max_seq() == max_seq {
                for &pfn in batch.iter() {
                    let page = self.page(pfn);
                    let flags = page.flags();
                    match folio_lru_gen(flags) {
                        None => {
                            if flags & PG_REFERENCED == 0 {
                                page.set(PG_REFERENCED, &self.vm);
                            }
                        }
                        Some(g) if g != new_gen => {
                            let typ = folio_type(flags);
                            lru.gen_del(pfn, g, typ);
                            let old = page.set_mask_bits(
                                LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS,
                                ((new_gen + 1) as u32) << LRU_GEN_PGOFF,
                                &self.vm,
                            );
                            self.lru_gen_clear_hint(pfn, old);
                            lru.gen_add(pfn, new_gen, typ, false);
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        self.vm.add(Item::lru_gen_walk_young, batch.len() as u64);
        self.release_pages(batch);
        batch.clear();
    }

    /// lru_gen_look_around, from the rmap walk of reclaim (vmscan.rs's
    /// page_check_references) that found `slot` of `vma` young: scan up to
    /// MIN_LRU_BATCH neighbouring entries, promote the young ones' pages
    /// (folio_activate: to the youngest generation), and if the region was
    /// dense feed it to the next walk's Bloom filter.
    pub(crate) fn lru_gen_look_around(&self, vma: &Vma, slot: usize) {
        if !self.lru_gen_enabled() {
            return;
        }
        let nr = vma.nr_pages as usize;
        let half = REGION_PAGES / 2;
        let start = slot.saturating_sub(half).min(nr.saturating_sub(REGION_PAGES));
        let end = (start + REGION_PAGES).min(nr);
        let max_seq = self.lruvec.lrugen.max_seq();
        let mut batch = Vec::new();
        let (mut total, mut young) = (0, 0);
        for s in start..end {
            total += 1;
            if s == slot {
                young += 1;
                continue;
            }
            if let Some(pfn) = self.young_pfn(vma, s) {
                young += 1;
                batch.push(pfn);
            }
        }
        self.vm.add(Item::lru_gen_look_around_young, batch.len() as u64);
        self.promote_young(&mut batch, max_seq);
        if young * 8 >= total {
            self.update_bloom_filter(max_seq, region_key(vma, slot - slot % REGION_PAGES));
        }
    }
}

// ---- the public interface (sysfs and debugfs) ----

impl crate::PageCache {
    /// /sys/kernel/mm/lru_gen/enabled: the bits in effect (LRU_GEN_CORE
    /// 0x0001, LRU_GEN_MM_WALK 0x0002; LRU_GEN_NONLEAF_YOUNG 0x0004 never,
    /// pcache's tables have no non-leaf entries). 0 in a Classic cache.
    pub fn lru_gen_enabled(&self) -> u32 {
        self.cache().lruvec.lrugen.caps.load(Ordering::Relaxed)
    }

    /// Write the `enabled` bits: turning LRU_GEN_CORE on or off moves every
    /// evictable page between the two lists and the generations
    /// (lru_gen_change_state). Refused in a cache built with
    /// `LruPolicy::Classic` (no /sys/kernel/mm/lru_gen without
    /// CONFIG_LRU_GEN).
    pub fn lru_gen_set_enabled(&self, caps: u32) -> Result<()> {
        let c = self.cache();
        let g = &c.lruvec.lrugen;
        if !g.built {
            return Err(Error::InvalidConfig("lru_gen: the cache was built with LruPolicy::Classic".into()));
        }
        c.lru_gen_change_state(caps & LRU_GEN_CORE != 0);
        let others = caps & LRU_GEN_CAPS & !LRU_GEN_CORE;
        let _ = g.caps.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some((v & LRU_GEN_CORE) | others));
        Ok(())
    }

    /// /sys/kernel/mm/lru_gen/min_ttl_ms.
    pub fn lru_gen_min_ttl_ms(&self) -> u64 {
        self.cache().lruvec.lrugen.min_ttl_ms.load(Ordering::Relaxed)
    }

    /// Set min_ttl_ms: while the oldest generation is younger, reclaim
    /// evicts nothing and allocations that need it fail with ENOMEM (the
    /// kernel OOM-kills). 0 turns it off.
    pub fn lru_gen_set_min_ttl_ms(&self, ms: u64) {
        self.cache().lruvec.lrugen.min_ttl_ms.store(ms, Ordering::Relaxed);
    }

    /// Write commands to debugfs lru_gen: `+ memcg_id node_id seq
    /// [can_swap [force_scan]]` ages (makes generation seq + 1),
    /// `- memcg_id node_id seq [swappiness [nr_to_reclaim]]` evicts
    /// generations up to seq; memcg and node are 0. Several commands are
    /// separated by `,`, `;` or newlines. Errors as the kernel's: EINVAL
    /// for a bad command or seq, ERANGE for aging past MAX_NR_GENS
    /// without force_scan.
    pub fn lru_gen_write(&self, cmds: &str) -> Result<()> {
        self.require_lru_gen()?;
        self.cache().lru_gen_write(cmds)
    }

    /// `+ 0 0 seq can_swap force_scan` as a method.
    pub fn lru_gen_run_aging(&self, seq: u64, can_swap: bool, force_scan: bool) -> Result<()> {
        self.require_lru_gen()?;
        self.cache().run_aging(seq, can_swap, force_scan)
    }

    /// `- 0 0 seq swappiness nr_to_reclaim` as a method; pages reclaimed.
    pub fn lru_gen_run_eviction(&self, seq: u64, swappiness: u32, nr_to_reclaim: u64) -> Result<u64> {
        self.require_lru_gen()?;
        if swappiness > 200 {
            return Err(Error::InvalidArgument(format!("lru_gen: swappiness {swappiness} above 200 (EINVAL)")));
        }
        self.cache().run_eviction(seq, swappiness, nr_to_reclaim)
    }

    /// The debugfs file: `lru_gen` (`full` false) or `lru_gen_full`.
    pub fn lru_gen_dump(&self, full: bool) -> String {
        self.cache().lru_gen_dump(full)
    }

    /// The figures of the dump.
    pub fn lru_gen_stats(&self) -> LruGenStats {
        self.cache().lru_gen_stats()
    }

    /// Generation `seq`'s list of `typ` (0 anon, 1 file) from head
    /// (newest) to tail (next to be scanned): (file name, page index) per
    /// page, for tests and tools.
    pub fn lru_gen_snapshot(&self, seq: u64, typ: usize) -> Vec<(String, u64)> {
        let c = self.cache();
        let pfns = c.lruvec.lock(&c.arena, &c.vm).gen_collect(lru_gen_from_seq(seq), typ.min(1));
        pfns.into_iter()
            .map(|pfn| {
                let page = c.page(pfn);
                let name = c.inode_by_id(page.mapping()).map(|i| i.name.clone()).unwrap_or_default();
                (name, page.index())
            })
            .collect()
    }

    fn require_lru_gen(&self) -> Result<()> {
        if !self.cache().lru_gen_enabled() {
            return Err(Error::InvalidConfig("lru_gen: the multi-gen LRU is not enabled".into()));
        }
        Ok(())
    }
}

impl crate::File {
    /// Where the cached page at `index` stands in the multi-gen LRU: its
    /// generation (None if on none: not yet on a list, or isolated) and
    /// its access count.
    pub fn lru_gen_page(&self, index: u64) -> Option<LruGenPage> {
        let c = &self.cache;
        let pfn = c.find_get_page(&self.inode, index)?;
        // A large folio's generation and count are its head's.
        let flags = c.page(c.arena.compound_head(pfn)).flags();
        c.put_page(pfn);
        let gen = folio_lru_gen(flags)?;
        let g = &c.lruvec.lrugen;
        let max_seq = g.max_seq();
        // The sequence number at or below max_seq with this generation.
        let back = (lru_gen_from_seq(max_seq) + MAX_NR_GENS - gen) % MAX_NR_GENS;
        let refs = folio_lru_refs(flags);
        Some(LruGenPage {
            seq: max_seq - back as u64,
            gen,
            refs,
            tier: lru_tier_from_refs(refs),
            referenced: flags & PG_REFERENCED != 0,
            workingset: flags & PG_WORKINGSET != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: tiers are order_base_2(N) for N accesses (refs = N - 1), as
    // the documentation states: N = 1 -> 0, 2 -> 1, 3..4 -> 2, 5..8 -> 3.
    #[test]
    fn tiers_of_accesses() {
        let tiers: Vec<usize> = (1..=8).map(|n| lru_tier_from_refs(n - 1)).collect();
        assert_eq!(tiers, [0, 1, 2, 2, 3, 3, 3, 3]);
    }

    // Goal: positive_ctrl_err is true while the PV has fewer than
    // MIN_LRU_BATCH refaults, and then compares the weighted rates.
    #[test]
    fn controller_error() {
        let sp = CtrlPos { refaulted: 100, total: 1000, gain: 1 };
        let few = CtrlPos { refaulted: 63, total: 64, gain: 2 };
        assert!(positive_ctrl_err(sp, few));
        // PV 200/400 = 0.5 against SP ~101/1064 weighted 2:1: protect.
        let hot = CtrlPos { refaulted: 200, total: 400, gain: 2 };
        assert!(!positive_ctrl_err(sp, hot));
        // PV 64/10000: a lower rate than SP's, no protection.
        let cold = CtrlPos { refaulted: 64, total: 10000, gain: 2 };
        assert!(positive_ctrl_err(sp, cold));
    }
}

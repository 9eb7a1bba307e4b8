//! Faults on mappings (mm/memory.c: `handle_mm_fault`, `finish_fault`,
//! `do_page_mkwrite`; mm/filemap.c: `filemap_fault` and the mmap
//! readahead, `do_sync_mmap_readahead`/`do_async_mmap_readahead`).
//!
//! An access to a page whose entry is present is `follow_pte`: a load of
//! the entry, a hazard pin of its frame (a plain store, hazard.rs), a
//! re-load that must still show the frame, and a store of the young byte
//! if it was 0. No lock, no atomic read-modify-write, no
//! mark_page_accessed: aging is reclaim's business, through the young
//! bytes (rmap.rs `page_referenced`).
//!
//! Why the re-load makes the pin safe: every path that frees a mapped
//! frame clears the entry first (try_to_unmap, truncation's unmap, zap),
//! and only then lets the frame go through `finish_removal` or the pending
//! free list, both of which scan the hazard slots after a membarrier. A
//! reader whose re-load still saw the entry announced its pin before the
//! clear, so the scan sees it and the frame stays; a reader that pinned
//! after the clear fails its re-load and faults. loom_tests.rs checks it.
//!
//! Any other access faults. `filemap_fault` finds the page in the page
//! cache or reads it, with mmap readahead: read-around of `ra_pages`
//! centred on the fault for a normal mapping (unless misses outnumber hits
//! by `MMAP_LOTSAMISS`), the sequential window for MADV_SEQUENTIAL, none
//! for MADV_RANDOM, and the asynchronous window on PG_readahead. Then
//! `finish_fault` installs the entry under the page lock and the ptl:
//! one page reference and one mapcount per entry, young set (the access
//! that faulted is a reference, as the MMU sets the accessed bit when it
//! retries it). A write fault is `do_page_mkwrite` first: the page's space
//! is reserved, it waits for writeback (stable pages), is marked dirty,
//! the entry is made writable and dirty, and the dirty throttle runs after
//! the page is unlocked.
//!
//! On an anonymous region (`vma.is_anon()`) a fault is `do_anonymous_page`
//! (an empty entry: a zeroed frame) or `do_swap_page` (a swap entry: the
//! swap cache or swap readahead), below.
//!
//! On a private file mapping (`vma.is_cow_mapping()`) a read fault maps
//! the file's page read-only and the first write copies it into an
//! anonymous page of the mapping (`do_cow_fault`, `wp_page_copy`), below.
//!
//! `Mapping::load_u64` is the access without a guard
//! (`follow_pte_load_u64`): the same protocol through the thread's
//! transient hazard slot, with nothing between pin and unpin.

use crate::mmdebug::vm_bug_on_page;
use crate::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

use crate::error::{Error, Result};
use crate::filemap::Inode;
use crate::hazard::{Hazard, HazardTable};
use crate::mm::Cache;
use crate::mmap::{
    mk_pte, pte_pfn, pte_swap_slot, swp_pte, AtomicPte, FastPath, Pte, Vma, PTE_DIRTY, PTE_PFN_MASK, PTE_PRESENT,
    PTE_WRITE, VM_RAND_READ, VM_SEQ_READ,
};
use crate::page::*;
use crate::pagetree::{entry_page_pfn, entry_pfn};
use crate::vmstat::Item;
use std::sync::atomic::AtomicU64 as FrameWord;

/// Misses beyond hits after which read-around stops (MMAP_LOTSAMISS).
const MMAP_LOTSAMISS: u32 = 100;

/// What a write through a mapping did (`Cache::mapped_write`).
pub(crate) enum WriteFault {
    /// The bytes are in the page.
    Written,
    /// A private mapping's write fault copied the page: here is the copy,
    /// with a reference for the caller, which retries the write on it.
    Copied(Pfn),
    /// The page is no longer the one mapped at the slot: fault and retry.
    Stale,
}

/// The access fast path on one entry, shared with loom_tests.rs: pin the
/// frame the entry maps in hazard row `row`, re-check the entry, set the
/// young byte. None if the entry is not present, changed under us, or no
/// hazard slot is free (the caller faults).
#[inline(always)]
pub(crate) fn pte_pin(hazards: &HazardTable, row: usize, pte: &AtomicPte, young: &AtomicU8) -> Option<(Pfn, Hazard)> {
    // Acquire: pairs with finish_fault's Release store, so the page is
    // uptodate and referenced before we see its entry.
    let entry = pte.load(Ordering::Acquire);
    let pfn = pte_pfn(entry)?;
    let h = hazards.pin_in_row(row, pfn)?;
    // Re-check after announcing (the pin is ordered before this load by
    // membarrier on the remover's side, or by pin_in_row's fence).
    if pte_pfn(pte.load(Ordering::Acquire)) != Some(pfn) {
        hazards.unpin(h);
        return None;
    }
    // The accessed bit: a plain store, and none when already set, so a
    // hot page's young byte is only read. A store racing reclaim's swap
    // loses or adds one reference; it never touches the entry.
    if young.load(Ordering::Relaxed) == 0 {
        young.store(1, Ordering::Relaxed);
    }
    Some((pfn, h))
}

/// ptep_get_and_clear: empty an entry, returning what it held. The caller
/// holds the mapping's ptl and the page lock of the page it maps.
#[inline]
pub(crate) fn ptep_get_and_clear(pte: &AtomicPte) -> Pte {
    // Release: the clear is ordered before the hazard scan that decides
    // whether the frame may go (pairs with pte_pin's re-check).
    pte.swap(0, Ordering::AcqRel)
}

/// A load of the aligned word at byte `offset` of the present page at
/// `slot`, as one access with nothing between pin and unpin: load the
/// entry, announce its frame in this thread's transient hazard slot,
/// re-load the entry (unchanged, or fault), set the young byte, load the
/// word, clear the slot. None: not present, changed, or no hazard row (the
/// caller takes the guarded path). Every load and instruction here counts:
/// a CPU overlaps the cache misses of consecutive accesses only as far as
/// its load queue and reorder window reach, so a shorter access is a
/// faster one on a large mapping (BENCHMARKS.md,
/// "Mapped access"). Hence the raw `FastPath` view rather than the
/// `Arc`s.
///
/// # Safety
/// `f` is the `FastPath` of a live mapping (its tables, the arena and the
/// hazard table outlive the call); `slot < f.nr_pages`; `offset` is a
/// multiple of 8 and below the page size.
// x86_64 reads optimistically instead (`follow_pte_load_u64_optimistic`).
#[cfg_attr(all(target_arch = "x86_64", not(loom), not(miri)), allow(dead_code))]
#[inline(always)]
pub(crate) unsafe fn follow_pte_load_u64(f: &FastPath, slot: usize, offset: usize) -> Option<u64> {
    // SAFETY: both arrays of the page table have nr_pages items and `slot`
    // is below it; they live as long as the mapping (the caller's promise).
    let (pte, young) = unsafe { (&*f.ptes.add(slot), &*f.young.add(slot)) };
    // SAFETY: the cache's hazard table, alive as long as the mapping.
    let hazards = unsafe { &*f.hazards };
    pte_access_transient(hazards, crate::percpu::thread_slot(), pte, young, |pfn| {
        // SAFETY: a present entry maps a frame of the arena (`frames` is
        // its base), pinned (the closure runs between pin and unpin) and
        // uptodate (finish_fault maps only uptodate pages), so no `&mut`
        // of it exists (only a device read into a locked, not-uptodate
        // page makes one); `offset` is an aligned word inside the frame
        // (the caller's promise), and frames are page aligned.
        let word = unsafe { &*f.frames.add(((pfn as usize) << f.page_shift) + offset).cast::<FrameWord>() };
        word.load(std::sync::atomic::Ordering::Relaxed)
    })
}

/// `Mapping::load_u64` on x86_64: the aligned word at byte `offset` of the
/// present page at `slot`, read optimistically (`pte_read_optimistic`):
/// no hazard pin, no thread slot, no store but a clear young byte's. None:
/// not present, or an unmap overlapped the read (the caller takes the
/// guarded path).
///
/// The word is loaded from a frame that may have been freed and reused
/// since the entry was loaded, and may be being written by its new owner,
/// a device read included (plain stores into a `&mut [u8]`). A Rust load
/// racing those would be a data race; the load is therefore one `mov` in
/// an `asm!` block (`load_word_unpinned`), which the abstract machine
/// sees as an opaque call returning some `u64` without touching Rust
/// memory, and whose value is used only after the validation says the
/// frame still held the entry's page (the module comment of highmem.rs,
/// "The copy", has the longer argument). The frame itself is always
/// mapped: the arena lives as long as the cache, which the mapping holds.
///
/// # Safety
/// As `follow_pte_load_u64`.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
pub(crate) unsafe fn follow_pte_load_u64_optimistic(f: &FastPath, slot: usize, offset: usize) -> Option<u64> {
    // SAFETY: both arrays of the page table have nr_pages items and `slot`
    // is below it; they and the VMA's unmap sequence live as long as the
    // mapping (the caller's promise).
    let (pte, young, unmap_seq) = unsafe { (&*f.ptes.add(slot), &*f.young.add(slot), &*f.unmap_seq) };
    pte_read_optimistic(unmap_seq, pte, young, |pfn| {
        // SAFETY: an entry holds a frame number of the arena (`frames` is
        // its base, mapped for the cache's lifetime), whatever became of
        // the frame since; `offset` is an aligned word inside a frame (the
        // caller's promise), and frames are page aligned.
        unsafe { load_word_unpinned(f.frames.add(((pfn as usize) << f.page_shift) + offset).cast::<u64>()) }
    })
}

/// One 8-byte load the compiler cannot see: `mov` in an `asm!` block.
///
/// # Safety
/// `p` is 8-byte aligned and points into memory that stays mapped
/// (a frame of the arena): the load must not fault.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
unsafe fn load_word_unpinned(p: *const u64) -> u64 {
    let v: u64;
    // SAFETY: `p` is aligned and mapped (the caller's promise), so the
    // `mov` cannot fault, and an aligned 8-byte load is single-copy atomic
    // on x86. `readonly`: it writes no memory, so the compiler keeps it
    // between the acquire load of the entry and the acquire fence after
    // it (a read does not move across either), but may not drop it (not
    // `pure`). To the abstract machine it is an opaque call that returns
    // some value: racing stores to the frame, atomic or not, are the
    // hardware's business, and validation discards what they produced.
    unsafe {
        std::arch::asm!(
            "mov {v}, qword ptr [{p}]",
            p = in(reg) p,
            v = lateout(reg) v,
            options(nostack, preserves_flags, readonly),
        );
    }
    v
}

/// The optimistic read of a mapped page (vmcache's and LeanStore's
/// optimistic latch), shared with loom_tests.rs: run `read` on the frame
/// the entry maps, with no pin, and keep its result only if the VMA's
/// unmap sequence did not move meanwhile:
///
/// ```text
///   reader                              remover (ptl, page lock)
///   s1 = unmap_seq       (Acquire)      entry = 0 / swap / copy  (AcqRel)
///   e  = pte             (Acquire)      unmap_seq += 1           (Release)
///   e present? else None                ... hazard scan, free, reuse:
///   w  = read(pfn(e))                       new owner stores the frame
///   fence(Acquire)                          (after a release: a write
///   s2 = unmap_seq       (Relaxed)           section, or the free list)
///   s1 != s2? None
///   young = 1 if it was 0
/// ```
///
/// Why an accepted `w` is a word of the page `e` mapped: if the frame
/// was reused before the load of `w`, the removal of `e` and its bump came
/// before the reuse, and `w` saw a store of the frame's new owner, which
/// happens after the bump; the acquire fence then makes `s2` see the bump.
/// And `s1` cannot have seen it: an acquire load that saw the bump would
/// have made the removal visible to the load of `e`, which would then not
/// be the removed entry (the bump is after the removal). So `s1 != s2`.
/// ABA is caught too (the frame freed, reused and mapped again at the
/// same slot, `e` the same value before and after): the removal in
/// between bumped the count. A frame that left the table but was not yet
/// reused still holds the page's bytes: `w` is a value of the page at a
/// moment the entry mapped it or just after, as a read ordered before
/// the unmap would return.
///
/// The young byte is set after validation, only if clear (a load and a
/// rare store, as `pte_pin`); a stale young byte behind an entry cleared
/// meanwhile is at worst one extra reference (mmap.rs).
// Only x86_64 reads optimistically; loom_tests.rs checks it everywhere.
#[cfg_attr(not(all(target_arch = "x86_64", not(loom), not(miri))), allow(dead_code))]
#[inline(always)]
pub(crate) fn pte_read_optimistic<R>(
    unmap_seq: &AtomicU64,
    pte: &AtomicPte,
    young: &AtomicU8,
    read: impl FnOnce(Pfn) -> R,
) -> Option<R> {
    // Acquire: pairs with `Vma::pte_removed`'s Release (see above).
    let start = unmap_seq.load(Ordering::Acquire);
    // Acquire: pairs with finish_fault's Release store, so the page is
    // uptodate before we read it (as pte_pin).
    let entry = pte.load(Ordering::Acquire);
    if entry & PTE_PRESENT == 0 {
        return None;
    }
    let r = read(entry & PTE_PFN_MASK);
    // smp_rmb: the read is ordered before the re-check (read_seqcount_retry).
    fence(Ordering::Acquire);
    if unmap_seq.load(Ordering::Relaxed) != start {
        return None;
    }
    if young.load(Ordering::Relaxed) == 0 {
        young.store(1, Ordering::Relaxed);
    }
    Some(r)
}

/// The transient access protocol, shared with loom_tests.rs: load the
/// entry, announce its frame in row `row`'s transient hazard slot,
/// re-load the entry (unchanged, else None), set the young byte, run
/// `read` on the frame, clear the slot. `read` runs while the frame
/// cannot be freed: every path that frees a mapped frame clears its
/// entries first and then scans the hazard slots, transient ones included
/// (pte_pin's argument; the re-check here is stricter: the whole entry).
#[inline(always)]
pub(crate) fn pte_access_transient<R>(
    hazards: &HazardTable,
    row: usize,
    pte: &AtomicPte,
    young: &AtomicU8,
    read: impl FnOnce(Pfn) -> R,
) -> Option<R> {
    // Acquire: pairs with finish_fault's Release store (as pte_pin).
    let entry = pte.load(Ordering::Acquire);
    if entry & PTE_PRESENT == 0 {
        return None;
    }
    let pfn = entry & PTE_PFN_MASK;
    let hazard = hazards.pin_transient(row, pfn)?;
    if pte.load(Ordering::Acquire) != entry {
        HazardTable::unpin_transient(hazard);
        return None;
    }
    if young.load(Ordering::Relaxed) == 0 {
        young.store(1, Ordering::Relaxed);
    }
    let r = read(pfn);
    HazardTable::unpin_transient(hazard);
    Some(r)
}

/// Accesses per chunk of `pte_load_many`: as many as the thread has
/// batch hazard slots.
pub(crate) const LOAD_BATCH: usize = crate::hazard::BATCH_PINS;

/// How many chunks ahead of its access `pte_load_many` loads a key's entry
/// (and prefetches its word's line through it): 8 chunks, 64 keys (2 in an
/// earlier version). With keys spread over their pages, the words'
/// lines no longer evict each other from one L1 set, and the further
/// ahead the better up to a whole call of 64 keys, where the loop's first
/// chunk starts every entry load and word prefetch of the call at once
/// (measured; docs/history/decisions.md: 4 and 6 chunks measured
/// between 2 and 8).
const WORD_AHEAD: usize = 8;

/// How many chunks ahead of its access `pte_load_many` prefetches a key's
/// entry and young byte: four chunks before the entry's load (two in an earlier version).
/// Prefetched no earlier than loaded (12 = 8 here),
/// calls of 512 keys measured some 1.5x slower (measured; docs/history/decisions.md).
const PTE_AHEAD: usize = WORD_AHEAD + 4;

/// What `pte_load_many` reads a page table and its frames through: the
/// mapping's `FastPath`, or loom_tests.rs's `PageTable`.
pub(crate) trait PteView {
    fn page_shift(&self) -> u32;
    fn nr_pages(&self) -> u64;
    /// The entry and young byte of `slot`.
    ///
    /// # Safety
    /// `slot < self.nr_pages()`.
    unsafe fn entry(&self, slot: usize) -> (&AtomicPte, &AtomicU8);
    /// The aligned word at `offset` of frame `pfn`.
    ///
    /// # Safety
    /// `pfn` was mapped by a present entry and is pinned (announced, then
    /// the entry re-checked); `offset` is a multiple of 8 below the page
    /// size.
    unsafe fn load_word(&self, pfn: Pfn, offset: usize) -> u64;
    /// Hints: start loading `page`'s entry, its young byte (any `page`),
    /// or the word at `offset` of frame `pfn` (any frame).
    fn prefetch_pte(&self, page: u64);
    fn prefetch_young(&self, page: u64);
    fn prefetch_word(&self, pfn: Pfn, offset: u64);
}

/// A page shift, for `FastPath`: a `u32` known at run time, or a
/// constant (`ConstShift`).
pub(crate) trait PageShift: Copy {
    fn get(self) -> u32;
}

impl PageShift for u32 {
    #[inline(always)]
    fn get(self) -> u32 {
        self
    }
}

/// A page shift known at compile time, so `pte_load_many`'s splits of keys
/// into page and offset are a shift and a mask by immediates, not by a
/// register the loop must keep (`Mapping::load_u64_many` picks it for
/// 4 KiB pages, `FastPath::const_shift`).
#[derive(Clone, Copy)]
pub(crate) struct ConstShift<const SHIFT: u32>;

impl<const SHIFT: u32> PageShift for ConstShift<SHIFT> {
    #[inline(always)]
    fn get(self) -> u32 {
        SHIFT
    }
}

impl<S: PageShift> PteView for FastPath<S> {
    #[inline(always)]
    fn page_shift(&self) -> u32 {
        self.page_shift.get()
    }

    #[inline(always)]
    fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    #[inline(always)]
    unsafe fn entry(&self, slot: usize) -> (&AtomicPte, &AtomicU8) {
        // SAFETY: both arrays of the page table have nr_pages items and
        // `slot` is below it (the caller's promise); they live as long as
        // the mapping whose view this is.
        unsafe { (&*self.ptes.add(slot), &*self.young.add(slot)) }
    }

    #[inline(always)]
    unsafe fn load_word(&self, pfn: Pfn, offset: usize) -> u64 {
        // SAFETY: as in follow_pte_load_u64: a present entry maps a frame
        // of the arena (`frames` is its base), pinned (the caller's
        // promise) and uptodate (finish_fault maps only uptodate pages),
        // so no `&mut` of it exists; `offset` is an aligned word inside
        // the frame, and frames are page aligned.
        let word = unsafe { &*self.frames.add(((pfn as usize) << self.page_shift.get()) + offset).cast::<FrameWord>() };
        word.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[inline(always)]
    fn prefetch_pte(&self, page: u64) {
        // Any address will do for a hint; a key past the mapping (the
        // chunk's padding) wastes one.
        crate::mmap::prefetch(self.ptes.wrapping_add(page as usize));
    }

    #[inline(always)]
    fn prefetch_young(&self, page: u64) {
        crate::mmap::prefetch(self.young.wrapping_add(page as usize));
    }

    #[inline(always)]
    fn prefetch_word(&self, pfn: Pfn, offset: u64) {
        crate::mmap::prefetch(self.frames.wrapping_add(((pfn as usize) << self.page_shift.get()) + offset as usize));
    }
}

/// The keys `pos[at..at + LOAD_BATCH]`, `u64::MAX` (a page past any
/// mapping, which nothing loads) past the end: one bounds check per chunk
/// while the chunk is whole, rather than one per key.
#[inline(always)]
fn chunk_keys(pos: &[u64], at: usize) -> [u64; LOAD_BATCH] {
    match pos.get(at..).and_then(|s| s.first_chunk::<LOAD_BATCH>()) {
        Some(keys) => *keys,
        None => std::array::from_fn(|j| pos.get(at + j).copied().unwrap_or(u64::MAX)),
    }
}

/// The steps of `pte_load_many` beyond what any software page table must
/// do (load the entry, load the word, each prefetched on the same
/// schedule), as bits of `pte_load_many`'s `STEPS`, so a benchmark
/// can leave them out one at a time and measure what each costs
/// (`Mapping::load_u64_many_steps`). Only `ALL` is sound while anything can unmap a page.
#[doc(hidden)]
pub struct LoadSteps;

impl LoadSteps {
    /// The young byte: prefetched with the entry, stored if clear.
    pub const YOUNG: u8 = 1;
    /// The entry re-loaded after the barrier and compared.
    pub const RECHECK: u8 = 2;
    /// The chunk's frames announced in the batch slots, then the barrier.
    pub const ANNOUNCE: u8 = 4;
    /// All of them: `pte_load_many`.
    pub const ALL: u8 = 7;
}

/// The word of key `k` whose entry `e` was loaded a chunk or two before
/// and announced since (behind the barrier): re-check the entry, set the
/// young byte, load the word (the steps in `STEPS`, as `pte_load_many`).
/// None: not present, or changed since (the slow path's).
///
/// # Safety
/// As `pte_load_many`: with every step, `e` was announced in the caller's
/// batch slot and the barrier issued since; with a step left out, nothing
/// unmaps the page during the call.
#[inline(always)]
unsafe fn read_pinned<V: PteView, const STEPS: u8>(view: &V, k: u64, e: Pte) -> Option<u64> {
    if e & PTE_PRESENT == 0 {
        return None;
    }
    let shift = view.page_shift();
    // SAFETY: a present entry was loaded for this key, so `load_ahead`
    // found its page below nr_pages.
    let (pte, young) = unsafe { view.entry((k >> shift) as usize) };
    // Acquire: pairs with finish_fault's Release store (as pte_pin), so
    // the page is uptodate; unchanged since the first load, so the
    // announcement covers it.
    if STEPS & LoadSteps::RECHECK != 0 && pte.load(Ordering::Acquire) != e {
        return None;
    }
    // The accessed bit, stored only when clear (as pte_pin).
    if STEPS & LoadSteps::YOUNG != 0 && young.load(Ordering::Relaxed) == 0 {
        young.store(1, Ordering::Relaxed);
    }
    // SAFETY: announced, barrier, re-checked: pinned (with a step left
    // out, nothing unmaps the page during the call: the caller's
    // promise); `load_ahead` checked the offset is an aligned word of a
    // page.
    Some(unsafe { view.load_word(e & PTE_PFN_MASK, (k & ((1u64 << shift) - 1)) as usize) })
}

/// `Mapping::load_u64_many`: the aligned word at byte `pos[i]` of the
/// mapping into `out[i]` (as long as `pos`), through the transient
/// protocol by chunks of `LOAD_BATCH`, software-pipelined:
///
/// ```text
///   key i + PTE_AHEAD*LOAD_BATCH   prefetch its entry and young byte
///   key i + WORD_AHEAD*LOAD_BATCH  check it, load its entry, prefetch its word
///   key i                          announce its frame (batch slot)
///   -- barrier, once per chunk --
///   key i                          re-load the entry (unchanged, else slow),
///                                  young byte, load the word (`read_pinned`)
/// ```
///
/// Each entry is loaded once before the re-check, and the chunk's slots are
/// announced over the last chunk's without clearing in between
/// (`BatchPins`). The word's line is prefetched `WORD_AHEAD` chunks (64
/// keys) before its load, so in a call of up to 64 keys every entry load
/// and word prefetch is started before the first announcement; the loop
/// stops looking ahead at the end of `pos`. What crosses from one chunk
/// to the next is only the entries loaded ahead, in a ring of
/// `WORD_AHEAD` chunks (a key is split into page and offset where it is
/// used, by a shift and a mask that the page size known at compile time
/// makes immediates). A key not read this way (not present, changed,
/// invalid) goes to `slow`, after the slots are cleared, which faults or
/// returns the error; the first error stops the call. Sound as
/// `pte_access_transient` is: each frame is read after its announcement,
/// the barrier and a re-check that still saw its entry, and every path
/// that frees a mapped frame clears the entry and then scans every slot,
/// batch slots included; a slot is overwritten only after the reads of the
/// frame it announced (release). loom_tests.rs runs this function.
///
/// `STEPS` (bits of `LoadSteps`) is `LoadSteps::ALL` but in benches/mapped.rs's
/// ablations, which leave steps out.
///
/// # Safety
/// Without `LoadSteps::RECHECK` and `LoadSteps::ANNOUNCE`, a frame may be
/// read after it was unmapped and reused: unless `STEPS` is
/// `LoadSteps::ALL`, nothing may unmap, reclaim or truncate a page of the
/// mapping during the call.
#[inline]
pub(crate) unsafe fn pte_load_many<V: PteView, const STEPS: u8>(
    view: &V,
    hazards: &HazardTable,
    row: usize,
    pos: &[u64],
    out: &mut [u64],
    mut slow: impl FnMut(u64) -> Result<u64>,
) -> Result<()> {
    let young_on = STEPS & LoadSteps::YOUNG != 0;
    let announce_on = STEPS & LoadSteps::ANNOUNCE != 0;
    debug_assert_eq!(pos.len(), out.len());
    let Some(pins) = hazards.batch_pins(row) else {
        for (o, &p) in out.iter_mut().zip(pos) {
            *o = slow(p)?;
        }
        return Ok(());
    };
    let shift = view.page_shift();
    // A key's entry as first loaded, its word's line prefetched through
    // it; 0 (not present) for a key past the mapping or unaligned, which
    // the slow path refuses. A function, not a closure: a closure's
    // captures (the page shift among them) went to the stack when
    // `array::map` of it was not inlined, and the loop reloaded them from
    // there (the shift a `shr %cl`, not an immediate).
    #[inline(always)]
    fn load_ahead<V: PteView>(view: &V, k: u64) -> Pte {
        let (page, offset) = (k >> view.page_shift(), k & ((1u64 << view.page_shift()) - 1));
        if page >= view.nr_pages() || offset & 7 != 0 {
            return 0;
        }
        // SAFETY: page < nr_pages, just checked.
        let entry = unsafe { view.entry(page as usize) }.0.load(Ordering::Relaxed);
        if entry & PTE_PRESENT != 0 {
            view.prefetch_word(entry & PTE_PFN_MASK, offset);
        }
        entry
    }
    for k in pos.iter().take(PTE_AHEAD * LOAD_BATCH) {
        view.prefetch_pte(k >> shift);
        if young_on {
            view.prefetch_young(k >> shift);
        }
    }
    // Chunk c's entries in ring[c % WORD_AHEAD], from their load (and
    // their words' prefetch) until their announcement WORD_AHEAD chunks
    // later.
    let mut ring: [[Pte; LOAD_BATCH]; WORD_AHEAD] = [[0; LOAD_BATCH]; WORD_AHEAD];
    for (c, r) in ring.iter_mut().enumerate().take(pos.len().div_ceil(LOAD_BATCH)) {
        let keys = chunk_keys(pos, c * LOAD_BATCH);
        for j in 0..LOAD_BATCH {
            r[j] = load_ahead(view, keys[j]);
        }
    }
    for (c, out) in out.chunks_mut(LOAD_BATCH).enumerate() {
        let base = c * LOAD_BATCH;
        let cur = ring[c % WORD_AHEAD];
        // The look-ahead stops at the end of `pos` (a chunk at a time): a
        // padded chunk would cost hints at wild addresses, in a call of
        // 64 keys most of the loop.
        if base + PTE_AHEAD * LOAD_BATCH < pos.len() {
            let far = chunk_keys(pos, base + PTE_AHEAD * LOAD_BATCH);
            for k in far {
                view.prefetch_pte(k >> shift);
                if young_on {
                    view.prefetch_young(k >> shift);
                }
            }
        }
        if base + WORD_AHEAD * LOAD_BATCH < pos.len() {
            let ahead = chunk_keys(pos, base + WORD_AHEAD * LOAD_BATCH);
            for j in 0..LOAD_BATCH {
                ring[c % WORD_AHEAD][j] = load_ahead(view, ahead[j]);
            }
        }
        if announce_on {
            for (j, &e) in cur.iter().enumerate() {
                pins.announce(j, if e & PTE_PRESENT != 0 { e & PTE_PFN_MASK } else { NO_PFN });
            }
            pins.barrier();
        }
        let keys = chunk_keys(pos, base);
        let mut done = 0u32;
        // A whole chunk by a loop of constant length, which the compiler
        // unrolls (one as long as `out` compiled to a loop that scanned for
        // the next present entry, some 35 instructions a key); the last,
        // partial chunk by the same steps, in a loop.
        match <&mut [u64; LOAD_BATCH]>::try_from(&mut *out) {
            Ok(whole) => {
                for j in 0..LOAD_BATCH {
                    // SAFETY: `cur[j]` announced, then the barrier (or the
                    // caller's promise, with steps left out).
                    if let Some(w) = unsafe { read_pinned::<V, STEPS>(view, keys[j], cur[j]) } {
                        whole[j] = w;
                        done |= 1 << j;
                    }
                }
            }
            Err(_) => {
                for (j, ((o, &k), &e)) in out.iter_mut().zip(&keys).zip(&cur).enumerate() {
                    // SAFETY: as above.
                    if let Some(w) = unsafe { read_pinned::<V, STEPS>(view, k, e) } {
                        *o = w;
                        done |= 1 << j;
                    }
                }
            }
        }
        if done != (1 << out.len()) - 1 {
            // No announcement is held across a fault.
            pins.clear();
            for (j, o) in out.iter_mut().enumerate() {
                if done & (1 << j) == 0 {
                    *o = slow(keys[j])?;
                }
            }
        }
    }
    Ok(())
}

impl Cache {
    /// An access to slot `slot` of `vma` whose entry is present: the frame,
    /// pinned. None: fault.
    ///
    /// # Safety
    /// `slot < vma.nr_pages`. The VMA's page table has exactly
    /// `nr_pages` slots (Mapping::new), so the bounds check is skipped:
    /// the access path stays short.
    #[inline(always)]
    pub(crate) unsafe fn follow_pte(&self, vma: &Vma, slot: usize) -> Option<(Pfn, Hazard)> {
        // SAFETY: in bounds, by the caller's promise and the table's
        // length (nr_pages slots).
        let (pte, young) = unsafe { vma.table.get_unchecked(slot) };
        pte_pin(&self.hazards, crate::percpu::thread_slot(), pte, young)
    }

    /// Drop a `MappedPage`'s hold on its frame: a hazard pin inline (the
    /// access path), a reference out of line.
    #[inline(always)]
    pub(crate) fn unpin_mapped(&self, pfn: Pfn, pin: crate::filemap::Pin) {
        match pin {
            crate::filemap::Pin::Hazard(h) => self.hazards.unpin(h),
            crate::filemap::Pin::Ref => self.put_mapped_ref(pfn),
        }
    }

    #[cold]
    #[inline(never)]
    fn put_mapped_ref(&self, pfn: Pfn) {
        self.put_page(pfn);
    }

    /// handle_mm_fault for a shared file mapping: map the page at `slot`
    /// (for writing: make it dirty and the entry writable) and return it
    /// with a reference the caller drops.
    pub(crate) fn handle_mm_fault(&self, inode: &Inode, vma: &Vma, slot: usize, write: bool) -> Result<Pfn> {
        self.vm.inc(Item::pgfault);
        let _lru_fault = crate::lru_gen::lru_gen_enter_fault(vma);
        if vma.is_anon() {
            return self.handle_anon_fault(vma, slot, write);
        }
        if vma.is_cow_mapping() {
            return self.handle_cow_fault(inode, vma, slot, write);
        }
        let index = vma.pgoff + slot as u64;
        if write {
            // page_mkwrite's reservation, made before any page lock:
            // failing-file writeback and the device may need page locks.
            self.generic_write_checks(inode, index << self.page_shift(), self.page_size() as u64)?;
        }
        let (page, pfn, major) = self.filemap_fault(inode, vma, index)?;
        if major {
            self.vm.inc(Item::pgmajfault);
        }
        if write {
            self.do_page_mkwrite(inode, &page);
        }
        self.finish_fault(vma, slot, &page, pfn, write);
        page.unlock();
        if !write {
            self.do_fault_around(inode, vma, slot);
        }
        if write {
            // Throttled with no lock held. An interrupt or the shutdown
            // arriving here leaves the fault done; the write goes on.
            let _ = self.balance_dirty_pages_ratelimited(inode, 1);
        }
        Ok(pfn)
    }

    /// do_page_mkwrite, folio locked: stable pages, then dirty (a large
    /// folio whole).
    fn do_page_mkwrite(&self, inode: &Inode, page: &LockedPage) {
        self.vm.inc(Item::pgmkwrite);
        page.wait_on_writeback();
        self.set_page_dirty(inode, page.pfn());
    }

    /// filemap_fault: the folio holding `index`, referenced, locked,
    /// uptodate, still in `inode` and below EOF; the frame of it that
    /// caches `index`; and whether it took I/O (a major fault). PastEof
    /// past the end of the file (SIGBUS).
    fn filemap_fault(&self, inode: &Inode, vma: &Vma, index: u64) -> Result<(LockedPage<'_>, Pfn, bool)> {
        let ps = self.page_size() as u64;
        let past_eof = |size: u64| Error::PastEof { offset: index << self.page_shift(), size };
        let mut major = false;
        // Each retry follows a truncation or punch that removed the page
        // between our lookup and our lock: bounded by theirs.
        loop {
            let size = inode.size.load(Ordering::Acquire);
            if index >= size.div_ceil(ps) {
                return Err(past_eof(size));
            }
            // The reference is the folio's, on its head, and keeps it
            // whole (a split needs it to itself).
            let pfn = match self.find_get_page(inode, index) {
                Some(pfn) => {
                    self.vm.inc(Item::pgcache_hit);
                    // The marker is on a folio's head.
                    if self.page(self.arena.compound_head(pfn)).test(PG_READAHEAD) {
                        self.do_async_mmap_readahead(inode, vma, pfn, index);
                    }
                    pfn
                }
                None => {
                    major = true;
                    self.do_sync_mmap_readahead(inode, vma, index);
                    self.read_cache_page(inode, None, index, 1)?
                }
            };
            let head = self.arena.compound_head(pfn);
            let page = self.lock_page(head);
            if page.mapping() != inode.id || page.index() + (pfn - head) as u64 != index {
                page.unlock();
                self.put_page(head);
                continue;
            }
            if !page.test(PG_UPTODATE) {
                // Readahead's I/O failed: read it ourselves; a large folio
                // is split first, and its page read alone on the next try.
                major = true;
                if page.folio_order() > 0 {
                    page.unlock();
                    self.put_page(head);
                    if let Some(p) = self.find_get_single_page(inode, index) {
                        self.put_page(p);
                    }
                    continue;
                }
                if let Err(e) = self.read_pages_io(inode, index, &[pfn]) {
                    page.unlock();
                    self.put_page(pfn);
                    return Err(e);
                }
            }
            // Again under the page lock, which truncation takes to remove
            // the page: a page we map is below EOF now.
            let size = inode.size.load(Ordering::Acquire);
            if index >= size.div_ceil(ps) {
                page.unlock();
                self.put_page(pfn);
                return Err(past_eof(size));
            }
            return Ok((page, pfn, major));
        }
    }

    /// do_sync_mmap_readahead: a fault missed the page cache.
    fn do_sync_mmap_readahead(&self, inode: &Inode, vma: &Vma, index: u64) {
        let hint = vma.hint.load(Ordering::Relaxed);
        if hint & VM_RAND_READ != 0 {
            return;
        }
        let ra = &vma.ra;
        let ra_pages = ra.ra_pages.load(Ordering::Relaxed) as u64;
        if ra_pages == 0 {
            return;
        }
        if hint & VM_SEQ_READ != 0 {
            self.page_cache_sync_readahead(inode, ra, index, ra_pages);
            return;
        }
        // Racy like the kernel's: a lost update changes a heuristic.
        let miss = vma.mmap_miss.load(Ordering::Relaxed);
        if miss < MMAP_LOTSAMISS * 10 {
            vma.mmap_miss.store(miss + 1, Ordering::Relaxed);
        }
        if miss + 1 > MMAP_LOTSAMISS {
            return;
        }
        // mmap read-around: ra->start = index - ra_pages / 2, ra->size =
        // ra_pages, ra->async_size = ra_pages / 4; ra_submit.
        let start = index.saturating_sub(ra_pages / 2);
        ra.start.store(start, Ordering::Relaxed);
        ra.size.store(ra_pages as u32, Ordering::Relaxed);
        ra.async_size.store((ra_pages / 4) as u32, Ordering::Relaxed);
        self.do_page_cache_ra(inode, start, ra_pages, ra_pages / 4);
    }

    /// do_async_mmap_readahead: a fault found the page cached.
    fn do_async_mmap_readahead(&self, inode: &Inode, vma: &Vma, pfn: Pfn, index: u64) {
        if vma.hint.load(Ordering::Relaxed) & VM_RAND_READ != 0 {
            return;
        }
        let miss = vma.mmap_miss.load(Ordering::Relaxed);
        if miss > 0 {
            vma.mmap_miss.store(miss - 1, Ordering::Relaxed);
        }
        if self.page(self.arena.compound_head(pfn)).test(PG_READAHEAD) {
            let ra_pages = vma.ra.ra_pages.load(Ordering::Relaxed) as u64;
            self.page_cache_async_readahead(inode, &vma.ra, pfn, index, ra_pages);
        }
    }

    /// do_fault_around (filemap_map_pages): after a read fault, map the
    /// pages around it that are already cached, uptodate and unlocked, in
    /// the `fault_around_bytes` window aligned around the faulting slot
    /// and clipped to the mapping and to EOF. Nothing is read and nothing
    /// waits: a locked, not-uptodate or PG_readahead page (whose access
    /// must reach the async readahead in `filemap_fault`) is skipped, so
    /// the next access to it faults as before.
    ///
    /// The kernel runs it before the fault and, on x86, maps the pages
    /// young. Here it runs after the fault, so the synchronous read-around
    /// the fault just did is mapped too, and it maps them old (as arm64's
    /// arch_wants_old_prefaulted_pte does): a page nobody touched through
    /// this mapping is not a reference for reclaim. Its first access sets
    /// the young byte with the usual plain store.
    fn do_fault_around(&self, inode: &Inode, vma: &Vma, slot: usize) {
        let nr = self.fault_around_pages();
        if nr <= 1 {
            return;
        }
        let start = slot & !(nr - 1);
        let size = inode.size.load(Ordering::Acquire);
        let eof = size.div_ceil(self.page_size() as u64);
        let end = (start + nr).min(vma.nr_pages as usize);
        let mut mapped = 0u64;
        for s in (start..end).filter(|&s| s != slot) {
            let index = vma.pgoff + s as u64;
            if index >= eof {
                break;
            }
            // Any entry, present or (a private mapping's) swap entry.
            if vma.table.pte(s).load(Ordering::Relaxed) != 0 {
                continue;
            }
            // A large folio's state, reference and lock are its head's.
            let entry = inode.tree.load(index);
            let (Some(pfn), Some(head)) = (entry_page_pfn(entry, index), entry_pfn(entry)) else { continue };
            let page = self.page(head);
            let f = page.flags();
            if f & (PG_LOCKED | PG_READAHEAD) != 0 || f & PG_UPTODATE == 0 || !page.get_unless_zero() {
                continue;
            }
            // The reference taken, the folio is ours to check: still the
            // one cached at `index`, lockable without waiting, uptodate
            // and below EOF under its lock (truncation takes the lock to
            // remove it, after lowering i_size).
            let now = inode.tree.load(index);
            let same = entry_pfn(now) == Some(head) && entry_page_pfn(now, index) == Some(pfn);
            let locked = if same { self.trylock_page(head) } else { None };
            let Some(locked) = locked else {
                self.put_page(head);
                continue;
            };
            let valid = page.mapping() == inode.id
                && page.index() + (pfn - head) as u64 == index
                && page.test(PG_UPTODATE)
                && index < inode.size.load(Ordering::Acquire).div_ceil(self.page_size() as u64);
            if valid && self.set_pte_old(vma, s, &locked, pfn) {
                mapped += 1;
            } else {
                self.put_page(head);
            }
            locked.unlock();
        }
        if mapped > 0 {
            self.vm.add(Item::pgfault_around, mapped);
            // filemap_map_pages: pages found cached are hits for mmap_miss.
            let miss = vma.mmap_miss.load(Ordering::Relaxed);
            vma.mmap_miss.store(miss.saturating_sub(mapped.min(u32::MAX as u64) as u32), Ordering::Relaxed);
        }
    }

    /// Pages in the fault-around window: `fault_around_bytes` in pages,
    /// rounded down to a power of two.
    fn fault_around_pages(&self) -> usize {
        let pages = (self.config.tunables.fault_around_bytes >> self.page_shift()).min(1 << 10) as usize;
        if pages == 0 {
            0
        } else {
            1 << pages.ilog2()
        }
    }

    /// Install an old, clean entry for the frame `pfn` of the locked folio
    /// `page` at `slot`, handing it the caller's folio reference. False if
    /// the slot got an entry meanwhile (the caller keeps its reference).
    fn set_pte_old(&self, vma: &Vma, slot: usize, page: &LockedPage, pfn: Pfn) -> bool {
        let pte = vma.table.pte(slot);
        let _ptl = vma.ptl.lock();
        if pte.load(Ordering::Relaxed) != 0 {
            return false;
        }
        self.page_add_file_rmap(page.pfn());
        // Old: a young byte left behind by an access racing an earlier
        // unmap of this slot (mmap.rs) must not count as a reference.
        vma.table.young(slot).store(0, Ordering::Relaxed);
        // Release: pairs with pte_pin's Acquire load.
        pte.store(mk_pte(pfn), Ordering::Release);
        true
    }

    /// finish_fault (do_set_pte): install the entry for the frame `pfn`
    /// of the locked folio `page` at `slot`, or upgrade it for a write. A
    /// new entry takes a folio reference and a mapcount. The young byte is
    /// set: the access that faulted is the page's first reference through
    /// this mapping.
    pub(crate) fn finish_fault(&self, vma: &Vma, slot: usize, page: &LockedPage, pfn: Pfn, write: bool) {
        let pte = vma.table.pte(slot);
        let bits = if write { PTE_WRITE | PTE_DIRTY } else { 0 };
        {
            let _ptl = vma.ptl.lock();
            let old = pte.load(Ordering::Relaxed);
            match pte_pfn(old) {
                Some(mapped) => {
                    // Every path that removes a page from the page cache
                    // unmaps it first, under its lock: an entry maps the
                    // page cached at its index, which we hold locked.
                    assert_eq!(mapped, pfn, "an entry maps a page no longer cached");
                    if old & bits != bits {
                        pte.store(old | bits, Ordering::Release);
                    }
                }
                None => {
                    page.get();
                    self.page_add_file_rmap(page.pfn());
                    // Release: pairs with pte_pin's Acquire load.
                    pte.store(mk_pte(pfn) | bits, Ordering::Release);
                }
            }
        }
        let young = vma.table.young(slot);
        if young.load(Ordering::Relaxed) == 0 {
            young.store(1, Ordering::Relaxed);
        }
    }

    /// A write through a mapping to the page `pfn` at `slot`, which the
    /// caller holds pinned: under the page lock, a write fault if the
    /// entry is not a writable one mapping `pfn` (wp_page_shared), then
    /// one write section. `Stale`: the page left the page cache (or, for
    /// anonymous pages, the slot) since it was pinned; the caller faults
    /// the current one in and retries. `Copied`: a private mapping's
    /// write fault copied the file's page; the caller retries on the copy.
    pub(crate) fn mapped_write(
        &self,
        inode: &Inode,
        vma: &Vma,
        slot: usize,
        pfn: Pfn,
        offset: usize,
        data: &[u8],
    ) -> Result<WriteFault> {
        let written = |done: bool| if done { WriteFault::Written } else { WriteFault::Stale };
        if vma.is_anon() {
            return Ok(written(self.anon_mapped_write(vma, slot, pfn, offset, data)));
        }
        if vma.is_cow_mapping() {
            if self.page(self.arena.compound_head(pfn)).mapping() == vma.anon_mapping() {
                // Our own copy (do_wp_page's reuse if read-only after a
                // swap-in).
                return Ok(written(self.anon_mapped_write(vma, slot, pfn, offset, data)));
            }
            return Ok(match self.wp_page_copy(vma, slot, pfn)? {
                Some(copy) => WriteFault::Copied(copy),
                None => WriteFault::Stale,
            });
        }
        let index = vma.pgoff + slot as u64;
        let pos = index << self.page_shift();
        let pte = vma.table.pte(slot);
        let granted = |e: Pte| pte_pfn(e) == Some(pfn) && e & PTE_WRITE != 0;
        let mut reserved = false;
        // At most two rounds: the second runs with the space reserved.
        loop {
            if !reserved && !granted(pte.load(Ordering::Acquire)) {
                self.generic_write_checks(inode, pos, self.page_size() as u64)?;
                reserved = true;
            }
            // The caller's pin keeps the folio whole: its head is
            // stable, and holds its lock.
            let head = self.arena.compound_head(pfn);
            let page = self.lock_page(head);
            if page.mapping() != inode.id || page.index() + (pfn - head) as u64 != index {
                return Ok(WriteFault::Stale);
            }
            let size = inode.size.load(Ordering::Acquire);
            let end = pos + (offset + data.len()) as u64;
            if end > size {
                // Mapped writes never grow the file; bytes past EOF in
                // the last page are not the file's (they stay zero).
                return Err(Error::PastEof { offset: end, size });
            }
            let mut faulted = false;
            if !granted(pte.load(Ordering::Acquire)) {
                if !reserved {
                    // Write-protected since we looked (writeback): reserve
                    // without the lock, then come back.
                    page.unlock();
                    continue;
                }
                self.vm.inc(Item::pgfault);
                self.do_page_mkwrite(inode, &page);
                self.finish_fault(vma, slot, &page, pfn, true);
                faulted = true;
            }
            // A writable entry was granted by page_mkwrite, which dirtied
            // the page; writeback write-protects entries before it starts
            // (page_mkclean), so the page is dirty and not being written.
            vm_bug_on_page!(
                !page.test(PG_DIRTY) || page.test(PG_WRITEBACK),
                page,
                "a writable entry on a clean or writeback page"
            );
            self.memcpy_to_page(pfn, offset, data);
            page.unlock();
            if faulted {
                let _ = self.balance_dirty_pages_ratelimited(inode, 1);
            }
            return Ok(WriteFault::Written);
        }
    }
}

/// Faults on anonymous regions (mm/memory.c `do_anonymous_page`,
/// `do_swap_page`, and `do_wp_page`'s reuse of an anonymous page).
///
/// An empty entry is a first touch: a zero-filled frame from the same
/// allocator as the page cache (so anonymous and file pages compete for
/// one budget), mapped writable and dirty whatever the access, as the
/// kernel maps a new anonymous page in a writable VMA, and queued for the
/// active anon list (3.x: "new anonymous pages start active"). A swap
/// entry is `do_swap_page`: the page from the swap cache, or read with
/// swap readahead (a major fault), mapped read-only unless the fault is a
/// write, which takes the page out of the swap cache (`reuse_swap_page`)
/// since the copy on swap is about to go stale. A later write to a
/// read-only entry is `do_wp_page`: the same reuse, under the page lock.
impl Cache {
    /// handle_mm_fault on an anonymous region: the page at `slot`, mapped,
    /// with a reference the caller drops.
    fn handle_anon_fault(&self, vma: &Vma, slot: usize, write: bool) -> Result<Pfn> {
        self.handle_pte_fault(vma, slot, write, || self.do_anonymous_page(vma, slot))
            .ok_or_else(|| Error::InvalidArgument(format!("anonymous page {slot} kept changing under its fault")))?
    }

    /// handle_pte_fault for the entries anonymous pages live in (an
    /// anonymous region, a private mapping): a present entry is returned
    /// as is (a racing fault mapped it, or no hazard slot was free), a
    /// swap entry is `do_swap_page`, an empty one `do_none` (which differs
    /// by region). Some(the page with a reference the caller drops, or the
    /// fault's error); None if the entry kept changing: bounded, each
    /// retry follows a change by a racing fault, reclaim or MADV_DONTNEED.
    fn handle_pte_fault(
        &self,
        vma: &Vma,
        slot: usize,
        write: bool,
        mut do_none: impl FnMut() -> Result<Option<Pfn>>,
    ) -> Option<Result<Pfn>> {
        let pte = vma.table.pte(slot);
        for _ in 0..16 {
            let e = pte.load(Ordering::Acquire);
            if let Some(pfn) = pte_pfn(e) {
                // The reference is the folio's; the caller's put_page finds
                // the head from the frame.
                if self.get_mapped_folio(vma, slot, Some(pfn)).is_some() {
                    return Some(Ok(pfn));
                }
                continue;
            }
            let done = match pte_swap_slot(e) {
                Some(swap) => self.do_swap_page(vma, slot, swap, write),
                None => do_none(),
            };
            match done {
                Ok(Some(pfn)) => return Some(Ok(pfn)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// do_anonymous_page: a zero-filled page for an empty entry, or with
    /// mTHP a zero-filled folio for the empty aligned range around it
    /// (`do_anonymous_folio`). None if a racing fault filled the entry
    /// first.
    fn do_anonymous_page(&self, vma: &Vma, slot: usize) -> Result<Option<Pfn>> {
        if let Some((head, order, first)) = self.alloc_anon_folio(vma, slot) {
            return Ok(self.do_anonymous_folio(vma, slot, head, order, first));
        }
        // Allocate (maybe reclaiming) before any lock is taken.
        let pfn = self.alloc_page()?;
        let page = self.page(pfn);
        // Invisible until its entry is stored: plain flag stores. 3.x: a
        // new anonymous page starts active; 5.9+: inactive.
        let active = if self.config.tunables.anon_lru == crate::AnonLru::Linux3 { PG_ACTIVE } else { 0 };
        page.set_nonatomic(PG_LOCKED | PG_SWAPBACKED | PG_UPTODATE | active);
        let page = LockedPage::adopt(page, pfn, &self.vm);
        page.set_anon(vma.anon_mapping(), anon_index(slot, None));
        self.memzero_page(pfn, 0, self.page_size());
        {
            let _ptl = vma.ptl.lock();
            let pte = vma.table.pte(slot);
            if pte.load(Ordering::Relaxed) != 0 {
                drop(_ptl);
                // Never visible: no waiters, a plain store unlocks.
                self.page(page.into_raw()).clear_nonatomic(PG_LOCKED);
                self.put_page(pfn);
                return Ok(None);
            }
            page.get();
            self.page_add_anon_rmap(pfn);
            // Release: pairs with pte_pin's Acquire load.
            pte.store(mk_pte(pfn) | PTE_WRITE | PTE_DIRTY, Ordering::Release);
        }
        vma.table.young(slot).store(1, Ordering::Relaxed);
        page.unlock();
        // lru_cache_add_active_or_unevictable (3.x), lru_cache_add (5.9+).
        self.lru_cache_add(pfn);
        Ok(Some(pfn))
    }

    /// alloc_anon_folio (6.8's mTHP): the largest enabled order whose
    /// aligned range around `slot` lies in the region with every entry
    /// empty (no page, no swap entry: pte_range_none), and a free block of
    /// it above the low watermark; none at all (pages only) falls back to
    /// a page, with no reclaim for a folio (__GFP_NORETRY). Returns the
    /// folio (the allocation's reference), its order and first slot.
    fn alloc_anon_folio(&self, vma: &Vma, slot: usize) -> Option<(Pfn, u32, usize)> {
        let orders = self.config.tunables.anon_mthp_orders;
        if orders == 0 || !vma.is_anon() {
            return None;
        }
        let low = self.arena.watermarks.low;
        for order in (2..=crate::MAX_PAGECACHE_ORDER).rev().filter(|o| orders & (1 << o) != 0) {
            let nr = 1usize << order;
            let first = slot & !(nr - 1);
            if first + nr > vma.nr_pages as usize
                || (first..first + nr).any(|s| vma.table.pte(s).load(Ordering::Relaxed) != 0)
            {
                continue;
            }
            let want = low + nr as u64;
            let head = if self.arena.nr_free_against(want) >= want {
                self.arena.alloc_large_folio(order as usize)
            } else {
                None
            };
            match head {
                Some(head) => {
                    self.vm.inc(Item::mthp_anon_fault_alloc);
                    self.vm.add(Item::pgalloc, nr as u64);
                    return Some((head, order, first));
                }
                None => self.vm.inc(Item::mthp_anon_fault_fallback),
            }
        }
        None
    }

    /// do_anonymous_page for the fresh folio `head` of `order` over the
    /// slots from `first`: zeroed, mapped writable and dirty at every slot
    /// (each entry a reference and a mapcount on the head) if they are all
    /// still empty, and queued for the LRU whole. Returns the frame at
    /// `slot`, with the allocation's reference for the caller; None (the
    /// folio freed) if a racing fault filled one of the entries.
    fn do_anonymous_folio(&self, vma: &Vma, slot: usize, head: Pfn, order: u32, first: usize) -> Option<Pfn> {
        let nr = 1usize << order;
        let page = self.page(head);
        let active = if self.config.tunables.anon_lru == crate::AnonLru::Linux3 { PG_ACTIVE } else { 0 };
        page.set_nonatomic(PG_LOCKED | PG_SWAPBACKED | PG_UPTODATE | active);
        let page = LockedPage::adopt(page, head, &self.vm);
        page.set_anon(vma.anon_mapping(), anon_index(first, None));
        for i in 0..nr {
            self.memzero_page(head + i as Pfn, 0, self.page_size());
        }
        {
            let _ptl = vma.ptl.lock();
            if (first..first + nr).any(|s| vma.table.pte(s).load(Ordering::Relaxed) != 0) {
                drop(_ptl);
                // Never visible: no waiters, a plain store unlocks.
                self.page(page.into_raw()).clear_nonatomic(PG_LOCKED);
                self.put_page(head);
                return None;
            }
            for i in 0..nr {
                page.get();
                self.page_add_anon_rmap(head);
                // Release: pairs with pte_pin's Acquire load.
                vma.table.pte(first + i).store(mk_pte(head + i as Pfn) | PTE_WRITE | PTE_DIRTY, Ordering::Release);
            }
        }
        // Young, as set_ptes maps a new anonymous folio.
        for s in first..first + nr {
            vma.table.young(s).store(1, Ordering::Relaxed);
        }
        page.unlock();
        self.lru_cache_add(head);
        Some(head + (slot - first) as Pfn)
    }

    /// do_swap_page: map the page of swap slot `swap` at `slot`. None if
    /// the entry changed meanwhile (the caller looks again). A read error
    /// is returned to the faulting accessor (the kernel's SIGBUS); the
    /// entry stays, so the data on swap is not lost and the next access
    /// tries again.
    fn do_swap_page(&self, vma: &Vma, slot: usize, swap: u32, write: bool) -> Result<Option<Pfn>> {
        let (pfn, major) = match self.lookup_swap_cache(swap) {
            Some(pfn) => {
                self.vm.inc(Item::swap_ra_hit);
                (pfn, false)
            }
            None => match self.swapin_readahead(swap)? {
                Some(pfn) => (pfn, true),
                None => return Ok(None),
            },
        };
        // `pfn` is a frame; a folio swapped out whole (6.10) is still one
        // in the swap cache, frame i at its first slot + i, and maps frame
        // by frame, each entry a reference and a mapcount on the head.
        let head = self.arena.compound_head(pfn);
        let i = (pfn - head) as usize;
        let pte = vma.table.pte(slot);
        let page = self.lock_page(head);
        if !page.test(PG_SWAPCACHE)
            || page.swap_slot().map(|s| s + i as u32) != Some(swap)
            || slot < i
            || pte.load(Ordering::Acquire) != swp_pte(swap)
        {
            // Reclaimed and reused, or the entry was faulted in by
            // another thread, or zapped: look again.
            page.unlock();
            self.put_page(head);
            return Ok(None);
        }
        if !page.test(PG_UPTODATE) {
            // A read that failed (its reader takes such pages out of the
            // cache; this is a second line of defence).
            self.delete_from_swap_cache(&page);
            page.unlock();
            self.put_page(head);
            return Err(Error::Io { name: "swap".into(), source: std::io::Error::from_raw_os_error(libc::EIO) });
        }
        if major {
            self.vm.inc(Item::pgmajfault);
        }
        let mapped = {
            let _ptl = vma.ptl.lock();
            if pte.load(Ordering::Relaxed) != swp_pte(swap) {
                false
            } else {
                page.set_anon(vma.anon_mapping(), anon_index(slot - i, page.swap_slot()));
                page.get();
                self.page_add_anon_rmap(head);
                if let Some(si) = self.swap() {
                    si.lock().swap_free(swap);
                }
                let bits = if write && self.reuse_swap_page(&page) { PTE_WRITE | PTE_DIRTY } else { 0 };
                pte.store(mk_pte(pfn) | bits, Ordering::Release);
                true
            }
        };
        if !mapped {
            page.unlock();
            self.put_page(head);
            return Ok(None);
        }
        if !write && self.vm_swap_full() {
            // Swap is filling up: keep no second copy of a page in memory.
            self.try_to_free_swap(&page);
        }
        vma.table.young(slot).store(1, Ordering::Relaxed);
        page.unlock();
        Ok(Some(pfn))
    }

    /// A write through an anonymous region to the page `pfn` at `slot`,
    /// which the caller holds pinned: under the page lock, `do_wp_page`'s
    /// reuse if the entry is read-only (the page leaves the swap cache and
    /// is dirty), then one write section. False: the page is no longer
    /// mapped there (swapped out or zapped since it was pinned); the
    /// caller faults it in and retries.
    fn anon_mapped_write(&self, vma: &Vma, slot: usize, pfn: Pfn, offset: usize, data: &[u8]) -> bool {
        let pte = vma.table.pte(slot);
        // The folio's head holds the lock and the identity; it is read
        // under the ptl, with a reference (a split may run otherwise).
        let Some((_, head)) = self.get_mapped_folio(vma, slot, Some(pfn)) else { return false };
        let page = self.lock_page(head);
        let e = pte.load(Ordering::Acquire);
        if pte_pfn(e) != Some(pfn) || page.mapping() != vma.anon_mapping() {
            drop(page);
            self.put_page(head);
            return false;
        }
        if e & PTE_WRITE == 0 {
            self.vm.inc(Item::pgfault);
            self.reuse_swap_page(&page);
            let _ptl = vma.ptl.lock();
            let cur = pte.load(Ordering::Relaxed);
            pte.store(cur | PTE_WRITE | PTE_DIRTY, Ordering::Release);
        }
        // Reclaim writes a page to swap only unmapped and under its lock.
        vm_bug_on_page!(page.test(PG_WRITEBACK), page, "under writeback");
        self.memcpy_to_page(pfn, offset, data);
        page.unlock();
        self.put_page(head);
        true
    }
}

/// Faults on private file mappings (MAP_PRIVATE; mm/memory.c
/// `do_read_fault`, `do_cow_fault`, `do_wp_page` → `wp_page_copy`).
///
/// A read fault maps the page-cache page read-only, as a shared read
/// fault does (file rmap, fault-around), so until a page is written here
/// the mapping shows the file's current data. The first write to a page
/// copies it into a new anonymous page (from the same allocator as every
/// frame) and maps the copy writable and dirty in place of the file's
/// page: `wp_page_copy` when the file's page was mapped, `do_cow_fault`
/// when nothing was (the file's page is read for the copy, never mapped).
/// The copy belongs to the mapping's anonymous id (registered at map
/// time), so reclaim swaps it out and `do_swap_page` brings it back as it
/// does for an anonymous region; the file never sees it.
///
/// Allocation happens before any page lock, as in the kernel: reclaim may
/// need the locks. With no frame to be had (no swap, everything pinned),
/// the write fails with `Error::NoMemory` and the mapping is unchanged.
impl Cache {
    /// handle_mm_fault on a private file mapping: the page at `slot`,
    /// mapped, with a reference the caller drops. A present entry is
    /// returned as is: a write to a file page the caller then makes is
    /// `wp_page_copy` (mapped_write). An empty entry is a read fault (the
    /// file's page, read-only) or a write fault (a copy).
    fn handle_cow_fault(&self, inode: &Inode, vma: &Vma, slot: usize, write: bool) -> Result<Pfn> {
        let do_none = || if write { self.do_cow_fault(inode, vma, slot) } else { self.do_read_fault(inode, vma, slot) };
        self.handle_pte_fault(vma, slot, write, do_none).ok_or_else(|| {
            Error::InvalidArgument(format!("page {slot} of a private mapping of {} kept changing", inode.name))
        })?
    }

    /// do_read_fault on a private mapping: map the file's page read-only.
    /// None if a racing fault filled the entry first.
    fn do_read_fault(&self, inode: &Inode, vma: &Vma, slot: usize) -> Result<Option<Pfn>> {
        let (page, pfn, major) = self.filemap_fault(inode, vma, vma.pgoff + slot as u64)?;
        if major {
            self.vm.inc(Item::pgmajfault);
        }
        let pte = vma.table.pte(slot);
        let installed = {
            let _ptl = vma.ptl.lock();
            // Any entry (a copy, a swap entry, the file's page) wins.
            let empty = pte.load(Ordering::Relaxed) == 0;
            if empty {
                page.get();
                self.page_add_file_rmap(page.pfn());
                // Release: pairs with pte_pin's Acquire load.
                pte.store(mk_pte(pfn), Ordering::Release);
            }
            empty
        };
        if installed {
            vma.table.young(slot).store(1, Ordering::Relaxed);
        }
        page.unlock();
        if !installed {
            self.put_page(pfn);
            return Ok(None);
        }
        self.do_fault_around(inode, vma, slot);
        Ok(Some(pfn))
    }

    /// do_cow_fault: a write to a page not mapped yet. The file's page is
    /// found or read (filemap_fault), copied, and the copy mapped. None if
    /// a racing fault filled the entry first.
    fn do_cow_fault(&self, inode: &Inode, vma: &Vma, slot: usize) -> Result<Option<Pfn>> {
        let copy = self.alloc_page()?;
        let (page, pfn, major) = match self.filemap_fault(inode, vma, vma.pgoff + slot as u64) {
            Ok(found) => found,
            Err(e) => {
                self.put_page(copy);
                return Err(e);
            }
        };
        if major {
            self.vm.inc(Item::pgmajfault);
        }
        let done = self.install_cow_copy(vma, slot, pfn, copy, None);
        page.unlock();
        self.put_page(pfn);
        Ok(done.then_some(copy))
    }

    /// wp_page_copy: a write to the file's page `old`, mapped read-only at
    /// `slot` and pinned by the caller. The copy replaces it in the entry;
    /// the file's page loses this mapping. Returns the copy with a
    /// reference for the caller, or None if the entry no longer maps `old`
    /// (the caller faults and retries).
    pub(crate) fn wp_page_copy(&self, vma: &Vma, slot: usize, old: Pfn) -> Result<Option<Pfn>> {
        // do_wp_page runs inside handle_mm_fault in the kernel.
        let _lru_fault = crate::lru_gen::lru_gen_enter_fault(vma);
        let pte = vma.table.pte(slot);
        if pte_pfn(pte.load(Ordering::Acquire)) != Some(old) {
            return Ok(None);
        }
        // A write fault, counted as the shared mapping's write faults are.
        self.vm.inc(Item::pgfault);
        let copy = self.alloc_page()?;
        // The caller's pin keeps the frame from reuse and its folio whole,
        // so the folio can be locked (by its head).
        let head = self.arena.compound_head(old);
        let page = self.lock_page(head);
        let done = self.install_cow_copy(vma, slot, old, copy, Some(old));
        if done {
            // The entry held a reference and a mapcount on the file's
            // folio. The page cache holds another (the entry mapped `old`
            // under its lock, so it is still cached): this put is never
            // the last.
            self.put_pte_refs(head, 1);
        }
        page.unlock();
        Ok(done.then_some(copy))
    }

    /// Fill the fresh frame `copy` (the allocator's reference, which goes
    /// to the caller on success) from the frame `src` of a folio the
    /// caller holds locked, and map it
    /// writable and dirty at `slot` if the entry still maps `expect` (or
    /// is empty, for None). On failure the copy is freed.
    fn install_cow_copy(&self, vma: &Vma, slot: usize, src: Pfn, copy: Pfn, expect: Option<Pfn>) -> bool {
        let new = self.page(copy);
        // Invisible until its entry is stored: plain flag stores, as for
        // do_anonymous_page's page, and the same LRU placement.
        let active = if self.config.tunables.anon_lru == crate::AnonLru::Linux3 { PG_ACTIVE } else { 0 };
        new.set_nonatomic(PG_LOCKED | PG_SWAPBACKED | PG_UPTODATE | active);
        let new = LockedPage::adopt(new, copy, &self.vm);
        new.set_anon(vma.anon_mapping(), anon_index(slot, None));
        self.copy_user_highpage(&new, src);
        let pte = vma.table.pte(slot);
        let installed = {
            let _ptl = vma.ptl.lock();
            let e = pte.load(Ordering::Relaxed);
            let ok = match expect {
                Some(old) => pte_pfn(e) == Some(old),
                None => e == 0,
            };
            if ok {
                new.get();
                self.page_add_anon_rmap(copy);
                // Release: pairs with pte_pin's Acquire load, so an access
                // sees the copied bytes. The old frame (if any) stays
                // cached; readers pinning it meanwhile read the file's
                // bytes, which are what this slot showed until now.
                let old = pte.swap(mk_pte(copy) | PTE_WRITE | PTE_DIRTY, Ordering::AcqRel);
                if pte_pfn(old).is_some() {
                    // The file's frame left this entry: optimistic readers
                    // that loaded it must re-check (it may be reclaimed).
                    vma.pte_removed();
                }
            }
            ok
        };
        if !installed {
            // Never visible: no waiters, a plain store unlocks.
            self.page(new.into_raw()).clear_nonatomic(PG_LOCKED);
            self.put_page(copy);
            return false;
        }
        vma.table.young(slot).store(1, Ordering::Relaxed);
        new.unlock();
        self.lru_cache_add(copy);
        true
    }

    /// copy_user_highpage: the bytes of the frame `src`, of a locked
    /// folio, into the locked, unmapped frame `dst`, in one write section.
    fn copy_user_highpage(&self, dst: &LockedPage, src: Pfn) {
        let mut buf = vec![0u8; self.page_size()];
        self.__memcpy_from_page(src, 0, &mut buf);
        self.memcpy_to_page(dst.pfn(), 0, &buf);
    }
}

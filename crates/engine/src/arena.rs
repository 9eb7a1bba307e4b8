//! The frame arena (mm/page_alloc.c, much reduced): one page-aligned
//! allocation of `nr_pages` frames made at start-up, their descriptors, the
//! buddy allocator over them with per-CPU lists in front, and the
//! watermarks.
//!
//! The buddy allocator, as the kernel's: free frames are kept in blocks of
//! 2^order frames, each aligned to its size, on one free list per order
//! (0..=MAX_ORDER, 4 MiB of 4 KiB frames at the top, the kernel's
//! MAX_PAGE_ORDER). An allocation of order n takes the first block of the
//! smallest order ≥ n that has one and, if it is larger, splits it
//! (`expand`): the lower half is kept, the upper half goes on the list one
//! order down, until a block of order n is left. A free does the reverse
//! (`__free_one_page`): the block's buddy, the other half of the block one
//! order up, is at `pfn ^ (1 << order)`; while that buddy is itself a free
//! block of the same order, it is taken off its list and the two merge.
//! So a freed frame rejoins the largest block it can, and fragmentation
//! comes only from frames still in use. The frame count need not be a power
//! of two: at start the frames go on the lists as the largest aligned
//! blocks that fit, and a block whose buddy would lie past the end never
//! merges. A free block's first frame carries PG_buddy and its order in
//! `index`; its frames are linked through `lru_next`/`lru_prev`, unused
//! while a frame is free; every frame of a free block carries PG_free, so
//! a double free is caught on the frame itself. One mutex (the zone lock)
//! guards the lists.
//!
//! Order 0 mostly bypasses it (the kernel's per-CPU pagesets): each CPU has
//! a short stack of free frames under its own spin lock. An allocation pops
//! from it and, when it is empty, refills `batch` frames from the buddy
//! lists under one zone lock (`rmqueue_bulk`); a free pushes and, past
//! `high`, returns the `batch` coldest frames (`free_pcppages_bulk`). The
//! frames held there are counted in `nr_free` (unlike the kernel's
//! NR_FREE_PAGES), so the watermark checks never see a shortage that is
//! only frames parked on another CPU; in exchange an allocation that finds
//! its CPU's list and the buddy lists empty drains every CPU's list before
//! it fails (`drain_all_pages`), as does a failing allocation of order > 0.
//! So that an order-0 alloc and free touch no shared cache line, each CPU
//! keeps the frames it handed out as a debt, paid back by its next frees or
//! folded into `nr_free` once it reaches a batch (the kernel's per-CPU
//! vmstat diffs): `nr_free` may count up to a batch per CPU too many, never
//! too few, and `nr_free_exact` subtracts the debts. Lock order: a per-CPU
//! lock, then the zone lock; both are leaves: nothing else is locked under
//! them, and no two per-CPU locks are held at once.
//!
//! Watermarks are derived as the kernel derives them from
//! `min_free_kbytes = sqrt(lowmem_kbytes * 16)` (clamped to 128 KiB..256 MiB),
//! with `watermark_scale_factor` 10 (0.1%): low = min + max(min/4, 0.1%),
//! high = low + the same step. Deviation: for small arenas min is capped at
//! 1/16 of the frames so that tiny test caches still hold pages.
//!
//! Pre-faulting (`populate`): the mapping is made lazily, so the first
//! use of each frame pays a page fault and the zeroing of its (huge) page,
//! which the kernel's page cache never pays, its memory being resident.
//! On the Firecracker guest this runs at about 0.45 GB/s (128 MiB in
//! 340 ms), a third of a cold read's CPU. So at start-up a background
//! thread populates the arena with MADV_POPULATE_WRITE in 2 MiB steps
//! (`Arena::prefault`): in the background rather than up front
//! because up front it would add a third of a second per 128 MiB to every
//! cache's start; and at most half of MemAvailable.
//! MADV_POPULATE_WRITE only fills page tables and never
//! reads or writes the frames' bytes, so it is safe beside frames in use.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{Mutex, SpinLock};
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::mmdebug::{vm_bug_on, vm_bug_on_page};
use crate::page::{
    Page, Pfn, FOLIO_ORDER_MASK, FOLIO_ORDER_PGOFF, NO_PFN, PG_BUDDY, PG_DIRTY, PG_FREE, PG_LOCKED, PG_LRU,
    PG_SWAPBACKED, PG_SWAPCACHE, PG_TAIL, PG_WRITEBACK,
};
use crate::Watermarks;

/// The largest block order (the kernel's MAX_PAGE_ORDER): 1024 frames.
pub const MAX_ORDER: usize = 10;
/// Orders 0..=MAX_ORDER.
pub const NR_ORDERS: usize = MAX_ORDER + 1;

/// The buddy lists (the kernel's zone free_area), under the zone lock.
struct Zone {
    /// The first free block of each order; blocks are linked through their
    /// first frame's `lru_next`/`lru_prev`.
    head: [Pfn; NR_ORDERS],
    /// Free blocks per order (`free_area.nr_free`).
    nr_blocks: [u64; NR_ORDERS],
}

/// One CPU's free order-0 frames (the kernel's per_cpu_pages): a stack,
/// hottest on top, with room for `high + 1` frames made at start, so that
/// no allocation or free touches the heap. On its own cache lines, as the
/// kernel's are per CPU. A spin lock, as the kernel's pcp lock: only the
/// CPU's own threads take it, but for a drain, and hold it for a push or a
/// pop, so that an allocation or a free costs one atomic swap (a parking
/// mutex's release would cost a second).
#[repr(align(128))]
struct Pcp {
    list: SpinLock<Vec<Pfn>>,
    /// Frames taken from this list and not yet subtracted from `nr_free`
    /// (the kernel's per-CPU vmstat diff): written only under `list`'s
    /// lock, with a load and a store, and folded into `nr_free` once it
    /// reaches `batch`, so that an alloc and free pair touches no shared
    /// counter. A free pays a debt back before it adds to `nr_free`.
    debt: AtomicU32,
}

pub struct Arena {
    base: NonNull<u8>,
    bytes: usize,
    pub page_size: usize,
    pub page_shift: u32,
    pub nr_pages: u64,
    pages: Box<[Page]>,
    /// Each frame's sequence count (highmem.rs), beside the descriptors
    /// rather than in them: a hit with the PAGE_HOT hint reads its bytes
    /// without touching the descriptor, and 16 counts share a cache line.
    seqs: Box<[AtomicU32]>,
    /// The buddy lists (the zone lock), inner to every `pcp` lock.
    zone: Mutex<Zone>,
    /// Per-CPU lists of free order-0 frames, indexed by `this_cpu`.
    pcp: Box<[Pcp]>,
    /// Frames a per-CPU list takes from, or gives back to, the buddy lists
    /// at once, and the most it holds (0: no per-CPU lists).
    pcp_batch: usize,
    pcp_high: usize,
    /// Free frames, those on per-CPU lists included, plus the per-CPU
    /// debts: raised before a freed frame can be taken and lowered after an
    /// allocation took it, so it is never below the frames really free.
    nr_free: AtomicU64,
    pub watermarks: Watermarks,
    /// Bytes from the base already populated (`populate`); `bytes` once
    /// done or given up.
    populated: AtomicU64,
}

// SAFETY: the frame memory is shared by design. Rust code touches frame
// bytes only as atomic words (`frame_words`, used by highmem.rs); devices
// get plain slices (`frame_for_io*`) only while no Rust code can touch the
// frame (see those functions). A frame is reused only when no pin holds it.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// An arena with per-CPU lists for every CPU of the host.
    #[cfg(all(test, not(loom)))]
    pub fn new(nr_pages: u64, page_size: usize) -> Result<Arena> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_cpus(nr_pages, page_size, cpus)
    }

    /// An arena with `nr_cpus` per-CPU lists, sized as `pcp_sizes` says.
    pub fn with_cpus(nr_pages: u64, page_size: usize, nr_cpus: usize) -> Result<Arena> {
        let (batch, high) = Self::pcp_sizes(nr_pages, nr_cpus.max(1));
        Self::with_pcp(nr_pages, page_size, nr_cpus.max(1), batch, high)
    }

    /// An arena with `nr_cpus` per-CPU lists that hold at most `high`
    /// frames and move `batch` at a time (`high` 0: none; tests and loom).
    pub(crate) fn with_pcp(
        nr_pages: u64,
        page_size: usize,
        nr_cpus: usize,
        batch: usize,
        high: usize,
    ) -> Result<Arena> {
        if nr_pages >= NO_PFN as u64 {
            return Err(Error::InvalidConfig(format!("{nr_pages} pages: frame numbers are 32 bits")));
        }
        let bytes = (nr_pages as usize)
            .checked_mul(page_size)
            .ok_or_else(|| Error::InvalidConfig(format!("{nr_pages} pages of {page_size} bytes overflow")))?;
        // Frames of 64 KiB need only 4 KiB alignment for O_DIRECT.
        let base = map_zeroed(bytes).ok_or(Error::NoMemory { frames: nr_pages as usize })?;
        let mut pages: Vec<Page> = Vec::with_capacity(nr_pages as usize);
        // Before the descriptors are first touched, so they fault in huge.
        advise_huge(pages.as_mut_ptr().cast(), nr_pages as usize * std::mem::size_of::<Page>());
        pages.extend((0..nr_pages).map(|_| {
            let page = Page::new();
            page.flags.store(PG_FREE, Ordering::Relaxed);
            page
        }));
        let pages = pages.into_boxed_slice();
        // The frames as the largest aligned blocks that fit, listed so that
        // the lowest block of each order is taken first (low frames are
        // handed out first, and pre-faulted first).
        let mut zone = Zone { head: [NO_PFN; NR_ORDERS], nr_blocks: [0; NR_ORDERS] };
        let mut blocks = Vec::new();
        let mut pfn = 0u64;
        while pfn < nr_pages {
            let fits = (nr_pages - pfn).ilog2() as usize;
            let aligned = if pfn == 0 { MAX_ORDER } else { pfn.trailing_zeros() as usize };
            let order = fits.min(aligned).min(MAX_ORDER);
            blocks.push((pfn as Pfn, order));
            pfn += 1 << order;
        }
        for &(pfn, order) in blocks.iter().rev() {
            zone.add(&pages, pfn, order);
        }
        let (batch, high) = if high == 0 { (0, 0) } else { (batch.clamp(1, high), high) };
        let pcp = (0..nr_cpus.max(1))
            .map(|_| Pcp { list: SpinLock::new(Vec::with_capacity(high + 1)), debt: AtomicU32::new(0) })
            .collect();
        Ok(Arena {
            base,
            bytes,
            page_size,
            page_shift: page_size.trailing_zeros(),
            nr_pages,
            pages,
            seqs: (0..nr_pages).map(|_| AtomicU32::new(0)).collect(),
            zone: Mutex::new(zone),
            pcp,
            pcp_batch: batch,
            pcp_high: high,
            nr_free: AtomicU64::new(nr_pages),
            watermarks: Self::watermarks_for(nr_pages, page_size),
            populated: AtomicU64::new(0),
        })
    }

    /// The per-CPU lists' `batch` and `high` (zone_batchsize and the
    /// pageset's high, scaled to an arena): a batch of nr_pages/256 frames,
    /// at most 63, and high four batches; but all CPUs' lists together
    /// hold at most an eighth of the arena, and an arena too small for two
    /// frames per CPU has none.
    pub fn pcp_sizes(nr_pages: u64, nr_cpus: usize) -> (usize, usize) {
        let cap = (nr_pages / 8 / nr_cpus.max(1) as u64) as usize;
        let batch = ((nr_pages >> 8) as usize).clamp(1, 63);
        let high = (4 * batch).min(cap);
        if high < 2 {
            (0, 0)
        } else {
            (batch.min(high / 2).max(1), high)
        }
    }

    /// The kernel's derivation of min/low/high (see the module comment).
    pub fn watermarks_for(nr_pages: u64, page_size: usize) -> Watermarks {
        let kbytes = nr_pages * page_size as u64 / 1024;
        let min_free_kbytes = ((kbytes * 16) as f64).sqrt() as u64;
        let min_free_kbytes = min_free_kbytes.clamp(128, 262_144);
        let min = (min_free_kbytes * 1024 / page_size as u64).min(nr_pages / 16).max(1);
        let step = (min / 4).max(nr_pages * 10 / 10_000).max(1);
        Watermarks { min, low: min + step, high: min + 2 * step }
    }

    #[inline]
    pub fn page(&self, pfn: Pfn) -> &Page {
        &self.pages[pfn as usize]
    }

    /// The frame's first byte.
    #[inline]
    pub fn frame_ptr(&self, pfn: Pfn) -> *mut u8 {
        debug_assert!((pfn as u64) < self.nr_pages);
        // SAFETY: pfn < nr_pages, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add((pfn as usize) << self.page_shift) }
    }

    /// The frame as atomic words: how Rust code reads and writes frame
    /// bytes (through highmem.rs, under its sequence count).
    #[inline]
    pub fn frame_words(&self, pfn: Pfn) -> &[std::sync::atomic::AtomicU64] {
        const WORD: usize = std::mem::size_of::<u64>();
        // SAFETY: the frame is in bounds (frame_ptr) and page aligned, so
        // 8-byte aligned; AtomicU64 has the size and alignment of u64 and
        // every bit pattern is valid. Any number of shared atomic views may
        // coexist. No `&mut [u8]` of the frame exists meanwhile: those are
        // made only for a device read into a locked, not uptodate page, which
        // no accessor touches (`frame_for_io_mut`).
        unsafe { std::slice::from_raw_parts(self.frame_ptr(pfn).cast(), self.page_size / WORD) }
    }

    /// The frame's sequence count (highmem.rs).
    #[inline]
    pub fn frame_seq(&self, pfn: Pfn) -> &AtomicU32 {
        &self.seqs[pfn as usize]
    }

    /// The frame's bytes as a device write (writeback) reads them.
    ///
    /// # Safety
    /// The page is held (so the frame is not reused while the slice lives)
    /// and under PG_writeback, set under the page lock: every writer takes
    /// the page lock and then waits for PG_writeback to clear before it
    /// stores, so no store races the slice's reads (readers only load).
    #[inline]
    pub unsafe fn frame_for_io(&self, pfn: Pfn) -> &[u8] {
        // SAFETY: in bounds and aligned; no concurrent store per the caller.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(pfn), self.page_size) }
    }

    /// The frame's bytes as a device read fills them.
    ///
    /// # Safety
    /// The page is locked and not uptodate, and held (by a reference, or
    /// by being in the page cache while locked: every path that removes a
    /// page takes its lock, so a locked cached page stays): no Rust code reads
    /// it (readers copy only uptodate pages; PG_uptodate is never cleared
    /// while the page is cached and its frame is not reused while pinned)
    /// and no Rust code writes it (writers hold the page lock). The slice
    /// must be gone before the page is unlocked or marked uptodate.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn frame_for_io_mut(&self, pfn: Pfn) -> &mut [u8] {
        // SAFETY: in bounds and aligned; exclusive per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(pfn), self.page_size) }
    }

    /// Pre-fault the next `step` bytes of the arena (see the module
    /// comment). Returns false once the whole arena is done, or when the
    /// kernel refuses (MADV_POPULATE_WRITE is Linux 5.14+, and a cgroup
    /// may be out of memory): then the rest faults on first use as before.
    pub fn populate_step(&self, step: usize) -> bool {
        let from = self.populated.load(Ordering::Relaxed) as usize;
        if from >= self.bytes {
            return false;
        }
        let len = step.min(self.bytes - from);
        // SAFETY: the range lies inside our mapping (from + len <= bytes).
        // MADV_POPULATE_WRITE faults the pages in writable without reading
        // or writing their contents, so frames in use are left as they are.
        let rc = unsafe { libc::madvise(self.base.as_ptr().add(from).cast(), len, libc::MADV_POPULATE_WRITE) };
        let next = if rc == 0 { from + len } else { self.bytes };
        self.populated.store(next as u64, Ordering::Release);
        next < self.bytes
    }

    /// Whether the pre-fault pass has finished (or given up).
    pub fn populated(&self) -> bool {
        self.populated.load(Ordering::Acquire) as usize >= self.bytes
    }

    /// Mark the pre-fault pass finished without doing it (turned off).
    pub fn skip_populate(&self) {
        self.populated.store(self.bytes as u64, Ordering::Release);
    }

    /// The pre-fault pass (`Tunables::arena_prefault`, run on its own
    /// thread by `PageCache::new`): the arena in 2 MiB steps, lowest first
    /// (the frames handed out first), until done or `stop()` (shutdown).
    ///
    /// It populates at most half of the host's MemAvailable at start: a
    /// cache configured larger than the memory free for it must not make
    /// the host kernel reclaim or OOM-kill at start-up for frames it may
    /// never use; the rest faults on first use, as with the pass turned off.
    pub(crate) fn prefault(&self, stop: impl Fn() -> bool) {
        const STEP: usize = 2 << 20;
        let budget = mem_available().map_or(0, |avail| avail / 2);
        let mut done = 0u64;
        while done + STEP as u64 <= budget && !stop() && self.populate_step(STEP) {
            done += STEP as u64;
        }
        self.skip_populate();
    }

    /// Free frames, those on the per-CPU lists included, for the
    /// watermark checks: one load, never below the frames really free and
    /// above them by at most the per-CPU debts (each below `batch`), as the
    /// kernel's NR_FREE_PAGES drifts by its per-CPU vmstat diffs.
    #[inline]
    pub fn nr_free(&self) -> u64 {
        self.nr_free.load(Ordering::Acquire)
    }

    /// The free count to hold against `mark`: `nr_free`, or, when the
    /// per-CPU debts could put it on the other side of `mark`, the exact
    /// count (the kernel's `percpu_drift_mark`, below which
    /// zone_watermark_ok_safe reads `zone_page_state_snapshot`). Exact
    /// watermark decisions keep the number of cached pages what the
    /// watermarks say (replay's `usable_equals_nominal`).
    #[inline]
    pub fn nr_free_against(&self, mark: u64) -> u64 {
        let free = self.nr_free();
        let drift = (self.pcp.len() * self.pcp_batch) as u64;
        if free > mark.saturating_add(drift) {
            free
        } else {
            self.nr_free_exact()
        }
    }

    /// Free frames less the per-CPU debts: exact when nothing allocates or
    /// frees meanwhile (statistics, tests). The count is read before the
    /// debts, which a fold clears before it lowers the count, so a racing
    /// fold can make this high for a moment, never low.
    pub fn nr_free_exact(&self) -> u64 {
        let free = self.nr_free.load(Ordering::Acquire);
        let debts: u64 = self.pcp.iter().map(|p| p.debt.load(Ordering::Acquire) as u64).sum();
        free.saturating_sub(debts)
    }

    /// This thread's per-CPU list.
    #[cfg(not(loom))]
    #[inline]
    fn this_cpu(&self) -> usize {
        crate::percpu::current_cpu(self.pcp.len())
    }

    #[cfg(loom)]
    fn this_cpu(&self) -> usize {
        LOOM_CPU.with(|c| c.get()) % self.pcp.len()
    }

    /// Take a free frame: from this CPU's list, refilled from the buddy
    /// lists when empty; when those are empty too, after draining every
    /// CPU's list. None only when no frame was free anywhere. The returned
    /// page has refcount 1, no flags.
    pub fn alloc(&self) -> Option<Pfn> {
        let pfn = self.rmqueue_pcplist().or_else(|| self.rmqueue_drained(0))?;
        self.prep_new_page(pfn, 0);
        Some(pfn)
    }

    /// rmqueue_pcplist: a frame from this CPU's list, refilled with `batch`
    /// frames from the buddy lists if it is empty; counted as a debt.
    #[inline]
    fn rmqueue_pcplist(&self) -> Option<Pfn> {
        if self.pcp_high == 0 {
            let pfn = self.zone.lock().rmqueue_smallest(&self.pages, 0)?;
            self.nr_free.fetch_sub(1, Ordering::Release);
            return Some(pfn);
        }
        let pcp = &self.pcp[self.this_cpu()];
        let mut list = pcp.list.lock();
        let pfn = match list.pop() {
            Some(pfn) => pfn,
            None => {
                self.rmqueue_bulk(&mut list);
                list.pop()?
            }
        };
        let debt = pcp.debt.load(Ordering::Relaxed) + 1;
        if debt as usize >= self.pcp_batch {
            Self::fold_debt(pcp, debt, &self.nr_free);
        } else {
            pcp.debt.store(debt, Ordering::Relaxed);
        }
        Some(pfn)
    }

    /// A per-CPU debt into `nr_free`, under the list's lock: the debt is
    /// cleared first (see `nr_free_exact`).
    #[cold]
    fn fold_debt(pcp: &Pcp, debt: u32, nr_free: &AtomicU64) {
        pcp.debt.store(0, Ordering::Release);
        nr_free.fetch_sub(debt as u64, Ordering::Release);
    }

    /// rmqueue_bulk: `batch` frames onto an empty per-CPU list, pushed so
    /// that they pop lowest first (ascending, as readahead wants them).
    #[cold]
    fn rmqueue_bulk(&self, list: &mut Vec<Pfn>) {
        let mut zone = self.zone.lock();
        for _ in 0..self.pcp_batch {
            match zone.rmqueue_smallest(&self.pages, 0) {
                Some(pfn) => list.push(pfn),
                None => break,
            }
        }
        drop(zone);
        list.reverse();
    }

    /// The last resort of a failed allocation: every CPU's list back on the
    /// buddy lists, then one more try there.
    #[cold]
    fn rmqueue_drained(&self, order: usize) -> Option<Pfn> {
        self.drain_all_pages();
        let pfn = self.zone.lock().rmqueue_smallest(&self.pages, order)?;
        self.nr_free.fetch_sub(1 << order, Ordering::Release);
        Some(pfn)
    }

    /// drain_all_pages: return every CPU's free frames to the buddy lists,
    /// where they merge. Each list is locked in turn, never two at once.
    pub fn drain_all_pages(&self) {
        for pcp in self.pcp.iter() {
            let mut list = pcp.list.lock();
            let debt = pcp.debt.load(Ordering::Relaxed);
            if debt > 0 {
                Self::fold_debt(pcp, debt, &self.nr_free);
            }
            if !list.is_empty() {
                let mut zone = self.zone.lock();
                for pfn in list.drain(..) {
                    zone.free_one(&self.pages, pfn, 0);
                }
            }
        }
    }

    /// A block of 2^order frames, aligned to its size, from the buddy lists
    /// (order 0 as `alloc`). None when no block of that order is free even
    /// after draining the per-CPU lists: the caller tries a smaller order,
    /// as readahead does. The first frame has refcount 1 (it holds the
    /// block's reference, as a compound page's head), the others 0; none
    /// has flags.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn alloc_order(&self, order: usize) -> Option<Pfn> {
        if order == 0 {
            return self.alloc();
        }
        if order > MAX_ORDER {
            return None;
        }
        let taken = self.zone.lock().rmqueue_smallest(&self.pages, order);
        let pfn = match taken {
            Some(pfn) => {
                self.nr_free.fetch_sub(1 << order, Ordering::Release);
                pfn
            }
            None => self.rmqueue_drained(order)?,
        };
        self.prep_new_page(pfn, order);
        Some(pfn)
    }

    /// prep_new_page: a block just taken, checked and made ready; its
    /// frames still carry PG_free, which nobody else reads while the
    /// allocator holds them.
    #[inline]
    fn prep_new_page(&self, pfn: Pfn, order: usize) {
        for p in pfn..pfn + (1 << order) {
            let page = self.page(p);
            vm_bug_on_page!(
                page.flags.load(Ordering::Relaxed) != PG_FREE || page.refcount.load(Ordering::Relaxed) != 0,
                page,
                "allocating a frame that is not free (order {order} block at {pfn})"
            );
            page.flags.store(0, Ordering::Relaxed);
            page.lru_next.store(NO_PFN, Ordering::Relaxed);
            page.lru_prev.store(NO_PFN, Ordering::Relaxed);
            page.index.store(0, Ordering::Relaxed);
        }
        self.page(pfn).refcount.store(1, Ordering::Release);
    }

    /// Give back a frame whose refcount dropped to 0 and that is off every
    /// list: onto this CPU's list, and from there, past `high`, a batch of
    /// the coldest back to the buddy lists (free_unref_page).
    pub fn free(&self, pfn: Pfn) {
        self.free_pages_prepare(pfn, 0);
        // Counted before it can be taken (and uncounted by `alloc`), so the
        // count never dips below the frames really free.
        if self.pcp_high == 0 {
            self.nr_free.fetch_add(1, Ordering::Release);
            self.zone.lock().free_one(&self.pages, pfn, 0);
            return;
        }
        let pcp = &self.pcp[self.this_cpu()];
        let mut list = pcp.list.lock();
        match pcp.debt.load(Ordering::Relaxed) {
            0 => {
                self.nr_free.fetch_add(1, Ordering::Release);
            }
            debt => pcp.debt.store(debt - 1, Ordering::Relaxed),
        }
        list.push(pfn);
        if list.len() > self.pcp_high {
            self.free_pcppages_bulk(&mut list);
        }
    }

    /// free_pcppages_bulk: the `batch` coldest frames (the bottom of the
    /// stack) back to the buddy lists.
    #[cold]
    fn free_pcppages_bulk(&self, list: &mut Vec<Pfn>) {
        let mut zone = self.zone.lock();
        for pfn in list.drain(..self.pcp_batch) {
            zone.free_one(&self.pages, pfn, 0);
        }
    }

    /// A folio of the largest order up to `order_max` that the buddy lists
    /// have a block for, down to a single page (the fallback of
    /// page_cache_ra_order and of the kernel's mTHP orders): the orders
    /// above 0 are tried on the buddy lists only, without draining the
    /// per-CPU lists (__GFP_NORETRY), so a fragmented arena costs a few
    /// lock round trips, and order 0 is an ordinary `alloc`. Returns the
    /// head and the order got. A large folio's head carries its order and
    /// refcount 1, its tails PG_tail and the head's pfn in `lru_prev`
    /// (prep_compound_page). None only when no frame is free.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn alloc_folio(&self, order_max: usize) -> Option<(Pfn, usize)> {
        for order in (1..=order_max.min(MAX_ORDER)).rev() {
            if let Some(pfn) = self.alloc_large_folio(order) {
                return Some((pfn, order));
            }
        }
        self.alloc().map(|pfn| (pfn, 0))
    }

    /// A folio of exactly `order` (1..=MAX_ORDER) from the buddy lists,
    /// without draining the per-CPU lists (__GFP_NORETRY): None when no
    /// block that large is free. The caller falls back to smaller orders.
    pub fn alloc_large_folio(&self, order: usize) -> Option<Pfn> {
        debug_assert!((1..=MAX_ORDER).contains(&order));
        let pfn = self.zone.lock().rmqueue_smallest(&self.pages, order)?;
        self.nr_free.fetch_sub(1 << order, Ordering::Release);
        self.prep_new_page(pfn, order);
        self.prep_compound_page(pfn, order);
        Some(pfn)
    }

    /// prep_compound_page: the order on the head, the head's pfn on each
    /// tail. The folio is invisible: plain stores.
    fn prep_compound_page(&self, head: Pfn, order: usize) {
        let h = self.page(head);
        let f = h.flags.load(Ordering::Relaxed) & !FOLIO_ORDER_MASK;
        h.flags.store(f | ((order as u32) << FOLIO_ORDER_PGOFF), Ordering::Relaxed);
        for p in head + 1..head + (1 << order) {
            let t = self.page(p);
            t.flags.store(PG_TAIL, Ordering::Relaxed);
            t.lru_prev.store(head, Ordering::Relaxed);
        }
    }

    /// compound_head: the head of the folio holding frame `pfn` (itself
    /// for a single page or a head). A tail's link is written only while
    /// the folio is invisible or frozen, so a reader that holds a pin on
    /// the frame reads a stable one.
    #[inline]
    pub fn compound_head(&self, pfn: Pfn) -> Pfn {
        let page = self.page(pfn);
        if page.is_tail() {
            page.lru_prev.load(Ordering::Relaxed)
        } else {
            pfn
        }
    }

    /// Give back a folio `alloc_folio` returned, its head's refcount 0:
    /// the tails lose their links and the block goes back whole.
    pub fn free_folio(&self, head: Pfn, order: usize) {
        if order == 0 {
            return self.free(head);
        }
        let h = self.page(head);
        vm_bug_on_page!(h.folio_order() as usize != order, h, "free_folio: not an order-{order} folio");
        h.flags.fetch_and(!FOLIO_ORDER_MASK, Ordering::Relaxed);
        for p in head + 1..head + (1 << order) {
            let t = self.page(p);
            vm_bug_on_page!(!t.is_tail() || t.lru_prev.load(Ordering::Relaxed) != head, t, "free_folio: a lost tail");
            t.flags.fetch_and(!PG_TAIL, Ordering::Relaxed);
        }
        self.free_order(head, order);
    }

    /// Give back a block `alloc_order(order)` returned, every frame's
    /// refcount 0 (order 0: as `free`).
    pub fn free_order(&self, pfn: Pfn, order: usize) {
        if order == 0 {
            return self.free(pfn);
        }
        vm_bug_on!(
            order > MAX_ORDER || !(pfn as u64).is_multiple_of(1 << order) || pfn as u64 + (1 << order) > self.nr_pages,
            "free_order: no order {order} block at {pfn}"
        );
        for p in pfn..pfn + (1 << order) {
            self.free_pages_prepare(p, order);
        }
        self.nr_free.fetch_add(1 << order, Ordering::Release);
        self.zone.lock().free_one(&self.pages, pfn, order);
    }

    /// free_pages_prepare for one frame: nothing may still use it, and it
    /// must not be free already. It leaves the frame marked PG_free.
    #[inline]
    fn free_pages_prepare(&self, pfn: Pfn, order: usize) {
        let page = self.page(pfn);
        // free_pages_check: nothing may still use the frame (a locked or
        // writeback page has a user, a listed one a list). Anonymous pages
        // are freed dirty when their region goes, as in the kernel; a
        // dirty file page freed is data lost.
        page.check_flags("free");
        let f = page.flags();
        vm_bug_on_page!(f & (PG_FREE | PG_BUDDY) != 0, page, "freeing a free frame (order {order})");
        let busy = PG_LOCKED | PG_WRITEBACK | PG_LRU | PG_SWAPCACHE;
        let lost = f & PG_DIRTY != 0 && f & PG_SWAPBACKED == 0;
        vm_bug_on_page!(
            page.refcount() != 0 || f & busy != 0 || lost || page.mapcount.load(Ordering::Relaxed) != 0,
            page,
            "freeing a page in use"
        );
        page.reset_for_free();
        page.flags.store(PG_FREE, Ordering::Relaxed);
    }

    /// /proc/buddyinfo: free blocks of each order on the buddy lists (the
    /// per-CPU lists' frames are not in it).
    pub fn buddyinfo(&self) -> [u64; NR_ORDERS] {
        self.zone.lock().nr_blocks
    }

    /// The unusable free space index of each order (mm/vmstat.c's
    /// `unusable_free_index`, in thousandths): the share of the buddy lists'
    /// free frames that lie in blocks too small for that order.
    pub fn unusable_free_index(&self) -> [u32; NR_ORDERS] {
        let info = self.buddyinfo();
        std::array::from_fn(|order| unusable_free_index(&info, order))
    }

    /// Frames on the per-CPU lists now (a snapshot, each list locked in turn).
    pub fn nr_pcp(&self) -> u64 {
        self.pcp.iter().map(|p| p.list.lock().len() as u64).sum()
    }
}

/// mm/vmstat.c's unusable_free_index for `order` from a buddyinfo, in
/// thousandths: 0 when every free frame is in a block of at least that
/// order, 1000 when none is (or nothing is free).
pub fn unusable_free_index(info: &[u64; NR_ORDERS], order: usize) -> u32 {
    let free: u64 = info.iter().enumerate().map(|(o, &n)| n << o).sum();
    if free == 0 {
        return 1000;
    }
    let suitable: u64 = info.iter().enumerate().skip(order).map(|(o, &n)| n << (o - order)).sum();
    ((free - (suitable << order)) * 1000 / free) as u32
}

/// Mel Gorman's fragmentation index for `order` (mm/vmstat.c's
/// `__fragmentation_index`, in thousandths): -1000 when a block of that
/// order is free; otherwise towards 0 when an allocation would fail for
/// want of memory, towards 1000 when for fragmentation.
pub fn fragmentation_index(info: &[u64; NR_ORDERS], order: usize) -> i32 {
    let blocks: u64 = info.iter().sum();
    if blocks == 0 {
        return 0;
    }
    if info[order..].iter().any(|&n| n > 0) {
        return -1000;
    }
    let free: u64 = info.iter().enumerate().map(|(o, &n)| n << o).sum();
    1000 - ((1000 + free * 1000 / (1u64 << order)) / blocks) as i32
}

impl Zone {
    /// A free block onto the front of its order's list (the caller has
    /// marked its frames PG_free).
    fn add(&mut self, pages: &[Page], pfn: Pfn, order: usize) {
        let page = &pages[pfn as usize];
        let next = self.head[order];
        page.lru_prev.store(NO_PFN, Ordering::Relaxed);
        page.lru_next.store(next, Ordering::Relaxed);
        if next != NO_PFN {
            pages[next as usize].lru_prev.store(pfn, Ordering::Relaxed);
        }
        self.head[order] = pfn;
        page.index.store(order as u64, Ordering::Relaxed);
        page.flags.store(PG_FREE | PG_BUDDY, Ordering::Relaxed);
        self.nr_blocks[order] += 1;
    }

    /// A free block off its list; its frames stay PG_free.
    fn del(&mut self, pages: &[Page], pfn: Pfn, order: usize) {
        let page = &pages[pfn as usize];
        let prev = page.lru_prev.load(Ordering::Relaxed);
        let next = page.lru_next.load(Ordering::Relaxed);
        if prev == NO_PFN {
            self.head[order] = next;
        } else {
            pages[prev as usize].lru_next.store(next, Ordering::Relaxed);
        }
        if next != NO_PFN {
            pages[next as usize].lru_prev.store(prev, Ordering::Relaxed);
        }
        page.lru_prev.store(NO_PFN, Ordering::Relaxed);
        page.lru_next.store(NO_PFN, Ordering::Relaxed);
        page.index.store(0, Ordering::Relaxed);
        page.flags.store(PG_FREE, Ordering::Relaxed);
        self.nr_blocks[order] -= 1;
    }

    /// page_is_buddy: the block at `pfn` is free and of exactly `order`.
    #[inline]
    fn is_buddy(pages: &[Page], pfn: Pfn, order: usize) -> bool {
        let page = &pages[pfn as usize];
        let f = page.flags.load(Ordering::Relaxed);
        if f & PG_BUDDY == 0 {
            return false;
        }
        let o = page.index.load(Ordering::Relaxed);
        vm_bug_on_page!(f & PG_FREE == 0 || o > MAX_ORDER as u64, page, "inconsistent buddy state");
        o == order as u64
    }

    /// __rmqueue_smallest: the first block of the smallest order ≥ `order`
    /// that has one, split down to `order` (`expand`).
    fn rmqueue_smallest(&mut self, pages: &[Page], order: usize) -> Option<Pfn> {
        let high = (order..NR_ORDERS).find(|&o| self.head[o] != NO_PFN)?;
        let pfn = self.head[high];
        let page = &pages[pfn as usize];
        vm_bug_on_page!(
            page.flags.load(Ordering::Relaxed) != PG_FREE | PG_BUDDY
                || page.index.load(Ordering::Relaxed) != high as u64,
            page,
            "order {high} free list holds a block that is not one"
        );
        self.del(pages, pfn, high);
        // expand: keep the lower half, list the upper.
        for o in (order..high).rev() {
            self.add(pages, pfn + (1 << o), o);
        }
        Some(pfn)
    }

    /// __free_one_page: a free block (frames marked PG_free) merged with its
    /// buddies while they are free blocks of the same order, then listed.
    fn free_one(&mut self, pages: &[Page], mut pfn: Pfn, mut order: usize) {
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy as usize >= pages.len() || !Self::is_buddy(pages, buddy, order) {
                break;
            }
            self.del(pages, buddy, order);
            pfn &= buddy;
            order += 1;
        }
        self.add(pages, pfn, order);
    }
}

#[cfg(loom)]
loom::thread_local! {
    /// The CPU a loom thread runs on: a model sets it, so that which list a
    /// thread uses is part of the model, not of the host's scheduling.
    pub(crate) static LOOM_CPU: std::cell::Cell<usize> = std::cell::Cell::new(0);
}

/// The host's MemAvailable in bytes (/proc/meminfo), if it can be read.
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `bytes` of anonymous memory straight from mmap, advised onto huge
/// pages: page aligned, zero, and not touched until used, so the advice
/// applies to all of it (an aligned allocator would memset it first). The
/// caller unmaps it with `munmap(ptr, bytes)`. None if the kernel refuses.
pub(crate) fn map_zeroed(bytes: usize) -> Option<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is
    // affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    let base = NonNull::new(ptr.cast::<u8>())?;
    advise_huge(base.as_ptr(), bytes);
    Some(base)
}

/// Ask for transparent huge pages on the 2 MiB-aligned part of a region:
/// the descriptors, the frames and the tree nodes are walked at random, and
/// 4 KiB TLB entries would not cover them. Advice only; errors are ignored.
pub fn advise_huge(ptr: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + len) & !(HUGE - 1);
    if end > start {
        // SAFETY: the range lies inside an allocation we own; MADV_HUGEPAGE
        // changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length; no frame is referenced
        // once the arena is dropped (it outlives every File and PageRef).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.bytes) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicU32 as StdAtomicU32;

    /// Drop the block's reference (alloc_order's head holds it) and free it.
    fn put(arena: &Arena, pfn: Pfn, order: usize) {
        arena.page(pfn).refcount.store(0, Ordering::Relaxed);
        arena.free_order(pfn, order);
    }

    /// The blocks the arena starts with, as (order, count).
    fn initial_blocks(nr_pages: u64) -> [u64; NR_ORDERS] {
        Arena::with_pcp(nr_pages, 4096, 1, 0, 0).expect("arena").buddyinfo()
    }

    /// Every frame free and on the buddy lists, as at the start.
    fn assert_pristine(arena: &Arena) {
        arena.drain_all_pages();
        assert_eq!(arena.nr_pcp(), 0);
        assert_eq!(arena.nr_free(), arena.nr_pages, "every frame counted free");
        assert_eq!(arena.nr_free_exact(), arena.nr_pages);
        assert_eq!(arena.buddyinfo(), initial_blocks(arena.nr_pages), "the lists merged back to the first blocks");
    }

    // Goal: the frames start as the largest aligned blocks that fit, an odd
    // count included (3000 = 2 * 1024 + 512 + 256 + 128 + 32 + 16 + 8).
    #[test]
    fn initial_blocks_are_the_largest_aligned() {
        let info = initial_blocks(3000);
        assert_eq!(info, [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 2]);
        for n in [1u64, 2, 3, 5, 7, 1023, 1024, 1025, 2047, 4099, 10_000] {
            let info = initial_blocks(n);
            let frames: u64 = info.iter().enumerate().map(|(o, &c)| c << o).sum();
            assert_eq!(frames, n, "{n} frames: {info:?}");
        }
    }

    // Goal: splitting and merging undo each other: every frame taken at
    // order 0 (through the per-CPU lists) and given back, in either order,
    // leaves the lists as they started; nothing is handed out twice; an
    // empty arena says None, not a panic.
    #[test]
    fn split_and_merge_return_to_the_first_blocks() {
        for nr_pages in [3000u64, 1, 5, 1025, 4096] {
            for reverse in [false, true] {
                let arena = Arena::with_pcp(nr_pages, 4096, 2, 8, 32).expect("arena");
                let mut seen = vec![false; nr_pages as usize];
                let mut held = Vec::new();
                while let Some(pfn) = arena.alloc() {
                    assert!(!std::mem::replace(&mut seen[pfn as usize], true), "frame {pfn} handed out twice");
                    assert_eq!(arena.page(pfn).refcount(), 1);
                    assert_eq!(arena.page(pfn).flags(), 0);
                    held.push(pfn);
                }
                assert_eq!(held.len() as u64, nr_pages, "every frame allocated before None");
                assert_eq!(arena.nr_free_exact(), 0);
                assert_eq!(arena.buddyinfo(), [0; NR_ORDERS]);
                assert_eq!(arena.alloc(), None);
                assert_eq!(arena.alloc_order(3), None);
                if reverse {
                    held.reverse();
                }
                for pfn in held {
                    put(&arena, pfn, 0);
                }
                assert_pristine(&arena);
            }
        }
    }

    // Goal: a block of order n starts at a multiple of 2^n, lies inside the
    // arena, and comes with the head's reference only; orders past
    // MAX_ORDER and orders no free block can serve give None.
    #[test]
    fn alloc_order_is_aligned_and_exhausts_to_none() {
        let arena = Arena::with_pcp(3000, 4096, 1, 4, 16).expect("arena");
        assert_eq!(arena.alloc_order(MAX_ORDER + 1), None);
        let mut held = Vec::new();
        for order in (0..=MAX_ORDER).rev() {
            while let Some(pfn) = arena.alloc_order(order) {
                assert_eq!(pfn as u64 % (1 << order), 0, "order {order} block at {pfn}");
                assert!(pfn as u64 + (1 << order) <= arena.nr_pages);
                assert_eq!(arena.page(pfn).refcount(), 1);
                for p in pfn + 1..pfn + (1 << order) {
                    assert_eq!(arena.page(p).refcount(), 0, "a tail holds no reference");
                }
                held.push((pfn, order));
            }
            // Exhausted at this order: no block that large is left.
            assert!(arena.buddyinfo()[order..].iter().all(|&n| n == 0));
        }
        assert_eq!(arena.nr_free_exact(), 0);
        assert_eq!(held.iter().map(|&(_, o)| 1u64 << o).sum::<u64>(), 3000);
        // 3000 frames as the largest blocks: two of 1024, then one each.
        assert_eq!(held.iter().filter(|&&(_, o)| o == MAX_ORDER).count(), 2);
        for (pfn, order) in held {
            put(&arena, pfn, order);
        }
        assert_pristine(&arena);
    }

    // Goal: an order > 0 allocation that only frames parked on per-CPU
    // lists could serve drains them and succeeds.
    #[test]
    fn a_failing_order_drains_the_per_cpu_lists() {
        let arena = Arena::with_pcp(64, 4096, 1, 8, 32).expect("arena");
        let all: Vec<Pfn> = std::iter::from_fn(|| arena.alloc()).collect();
        for &pfn in &all {
            put(&arena, pfn, 0);
        }
        assert!(arena.nr_pcp() > 0, "frees went to the per-CPU list");
        assert_eq!(arena.nr_free(), 64);
        let pfn = arena.alloc_order(6).expect("the whole arena once the lists are drained");
        assert_eq!(pfn, 0);
        put(&arena, pfn, 6);
        assert_pristine(&arena);
    }

    // Goal: an order-0 allocation does not fail while another CPU's list
    // holds the only free frames.
    #[test]
    fn order_0_takes_frames_from_other_cpus_lists() {
        let arena = Arena::with_pcp(64, 4096, 4, 8, 32).expect("arena");
        let all: Vec<Pfn> = std::iter::from_fn(|| arena.alloc()).collect();
        // Park frames on another list by hand, as a free on that CPU would.
        let other = (arena.this_cpu() + 1) % 4;
        for &pfn in &all[..5] {
            arena.page(pfn).refcount.store(0, Ordering::Relaxed);
            arena.free_pages_prepare(pfn, 0);
            arena.pcp[other].list.lock().push(pfn);
            arena.nr_free.fetch_add(1, Ordering::Relaxed);
        }
        for _ in 0..5 {
            assert!(arena.alloc().is_some(), "a frame on another CPU's list is free");
        }
        assert_eq!(arena.alloc(), None);
    }

    // Goal: the per-CPU debts keep `nr_free` at or above the frames free,
    // and exact once folded.
    #[test]
    fn nr_free_never_counts_too_few() {
        let arena = Arena::with_pcp(4096, 4096, 1, 16, 64).expect("arena");
        let mut held = Vec::new();
        for i in 0..1000u64 {
            if i % 3 == 2 {
                put(&arena, held.pop().expect("held"), 0);
            } else {
                held.push(arena.alloc().expect("a frame"));
            }
            let free = 4096 - held.len() as u64;
            assert!(arena.nr_free() >= free);
            assert!(arena.nr_free() < free + 16, "the drift stays below a batch");
            assert_eq!(arena.nr_free_exact(), free);
        }
    }

    // Goal: the fragmentation figures match mm/vmstat.c's on known lists.
    #[test]
    fn fragmentation_indices() {
        let mut info = [0u64; NR_ORDERS];
        assert_eq!(unusable_free_index(&info, 0), 1000, "nothing free is all unusable");
        assert_eq!(fragmentation_index(&info, 3), 0);
        info[0] = 4;
        info[2] = 1;
        // 8 frames free: 4 alone and one block of 4.
        assert_eq!(unusable_free_index(&info, 0), 0);
        assert_eq!(unusable_free_index(&info, 1), 500);
        assert_eq!(unusable_free_index(&info, 2), 500);
        assert_eq!(unusable_free_index(&info, 3), 1000);
        assert_eq!(fragmentation_index(&info, 2), -1000);
        // Order 3 (8 frames) with 8 free in 5 blocks: 1000 - (1000 + 1000) / 5.
        assert_eq!(fragmentation_index(&info, 3), 600);
        let arena = Arena::with_pcp(3000, 4096, 1, 0, 0).expect("arena");
        assert_eq!(arena.unusable_free_index()[MAX_ORDER], (3000 - 2048) * 1000 / 3000);
    }

    // Goal: a second free of a frame is caught, whether it still sits on a
    // per-CPU list or has merged into a larger free block, as is a free of
    // a frame never allocated.
    #[test]
    #[should_panic(expected = "freeing a free frame")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn double_free_on_a_per_cpu_list_is_caught() {
        let arena = Arena::with_pcp(64, 4096, 1, 4, 16).expect("arena");
        let pfn = arena.alloc().expect("a frame");
        put(&arena, pfn, 0);
        arena.free(pfn);
    }

    #[test]
    #[should_panic(expected = "freeing a free frame")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn double_free_after_merging_is_caught() {
        let arena = Arena::with_pcp(64, 4096, 1, 4, 16).expect("arena");
        let pfn = arena.alloc().expect("a frame");
        put(&arena, pfn, 0);
        arena.drain_all_pages();
        assert_eq!(arena.buddyinfo()[6], 1, "merged back into the one block");
        arena.free(pfn);
    }

    #[test]
    #[should_panic(expected = "freeing a free frame")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn freeing_a_block_never_allocated_is_caught() {
        let arena = Arena::with_pcp(64, 4096, 1, 0, 0).expect("arena");
        arena.free_order(8, 3);
    }

    // Goal: a buddy whose recorded order is impossible stops the merge.
    #[test]
    #[should_panic(expected = "inconsistent buddy state")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn a_corrupt_buddy_is_caught() {
        let arena = Arena::with_pcp(64, 4096, 1, 0, 0).expect("arena");
        let pfn = arena.alloc_order(5).expect("a block");
        // The other half of the arena is free: corrupt its order.
        arena.page(32).index.store(99, Ordering::Relaxed);
        put(&arena, pfn, 5);
    }

    /// A random workload against a model of which frames are held: the
    /// frames of each block handed out were all free, an order-0 failure
    /// means no frame was free, an order-n failure means no aligned run of
    /// 2^n frames was free (the lists merge eagerly), and at the end, every
    /// block given back, the lists are as they started.
    fn run_model(nr_pages: u64, nr_cpus: usize, batch: usize, high: usize, ops: &[(u8, u8, u16)]) {
        let arena = Arena::with_pcp(nr_pages, 4096, nr_cpus, batch, high).expect("arena");
        let mut owned = vec![false; nr_pages as usize];
        let mut held: Vec<(Pfn, usize)> = Vec::new();
        let mut nr_held = 0u64;
        for &(kind, order, pick) in ops {
            if kind < 3 || held.is_empty() {
                // Mostly small orders, as readahead asks for them.
                let order = match order % 8 {
                    0..=3 => 0,
                    4 => 1,
                    5 => 2,
                    6 => (order as usize / 8) % 5 + 3,
                    _ => (order as usize / 8) % 3 + 7,
                };
                match arena.alloc_order(order) {
                    Some(pfn) => {
                        assert_eq!(pfn as u64 % (1 << order), 0);
                        for p in pfn..pfn + (1 << order) {
                            assert!(!std::mem::replace(&mut owned[p as usize], true), "frame {p} handed out twice");
                        }
                        held.push((pfn, order));
                        nr_held += 1 << order;
                    }
                    None => {
                        let size = 1usize << order;
                        let run_free =
                            (0..owned.len() / size).any(|b| owned[b * size..(b + 1) * size].iter().all(|&o| !o));
                        assert!(!run_free, "order {order} failed with an aligned free run ({nr_held} held)");
                        if order == 0 {
                            assert_eq!(nr_held, nr_pages, "order 0 failed with frames free");
                        }
                    }
                }
            } else {
                let (pfn, order) = held.swap_remove(pick as usize % held.len());
                for p in pfn..pfn + (1 << order) {
                    owned[p as usize] = false;
                }
                nr_held -= 1 << order;
                put(&arena, pfn, order);
            }
            assert!(arena.nr_free() >= nr_pages - nr_held, "nr_free counted too few");
            assert_eq!(arena.nr_free_exact(), nr_pages - nr_held);
        }
        arena.drain_all_pages();
        let on_lists: u64 = arena.buddyinfo().iter().enumerate().map(|(o, &n)| n << o).sum();
        assert_eq!(on_lists, nr_pages - nr_held, "every free frame on the lists after a drain");
        assert_eq!(arena.nr_free(), nr_pages - nr_held, "exact after a drain");
        for (pfn, order) in held {
            put(&arena, pfn, order);
        }
        assert_pristine(&arena);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        // Goal: run_model's properties over random workloads of orders
        // 0..=9 on arenas of odd sizes, with and without per-CPU lists.
        #[test]
        fn random_workloads_match_the_model(
            nr_pages in prop_oneof![Just(1024u64), Just(1500), 64u64..3000],
            pcp in 0usize..3,
            ops in proptest::collection::vec((0u8..5, any::<u8>(), any::<u16>()), 1..3000),
        ) {
            let (batch, high) = [(0, 0), (1, 2), (8, 32)][pcp];
            run_model(nr_pages, 2, batch, high, &ops);
        }
    }

    // Goal: a long run of the same, with the arena kept nearly full, where
    // fragmentation would show: an allocation fails only when the model has
    // no room for it.
    #[test]
    fn a_long_mixed_workload_never_fails_what_the_free_frames_allow() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let ops: Vec<(u8, u8, u16)> = (0..200_000).map(|_| (rng.gen_range(0..6), rng.gen(), rng.gen())).collect();
        run_model(2500, 2, 8, 32, &ops);
    }

    // Goal: folios of mixed orders (0, 2, 4, 9) under a long random
    // workload that keeps the arena nearly full: `alloc_folio` never fails
    // while a frame is free (it falls back to smaller orders, down to one
    // page), every frame of a folio names its head, the fallbacks happen
    // (the arena does fragment), and at the end the lists merge back whole.
    #[test]
    fn alloc_folio_never_fails_what_order_0_could_serve() {
        use rand::{Rng, SeedableRng};
        const NR: u64 = 3000;
        let arena = Arena::with_pcp(NR, 4096, 2, 8, 32).expect("arena");
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut held: Vec<(Pfn, usize)> = Vec::new();
        let (mut nr_held, mut fallbacks, mut full) = (0u64, 0u64, 0u64);
        for _ in 0..100_000 {
            if rng.gen_range(0..5) < 3 || held.is_empty() {
                let want = [0usize, 2, 4, 9][rng.gen_range(0..4)];
                match arena.alloc_folio(want) {
                    Some((head, order)) => {
                        assert!(order <= want && (head as u64).is_multiple_of(1 << order));
                        assert_eq!(arena.page(head).folio_order() as usize, order);
                        for p in head..head + (1 << order) {
                            assert_eq!(arena.compound_head(p), head, "frame {p} of the order-{order} folio at {head}");
                        }
                        fallbacks += (order < want) as u64;
                        held.push((head, order));
                        nr_held += 1 << order;
                    }
                    None => {
                        assert_eq!(nr_held, NR, "alloc_folio({want}) failed with {} frames free", NR - nr_held);
                        full += 1;
                    }
                }
            } else {
                let (head, order) = held.swap_remove(rng.gen_range(0..held.len()));
                arena.page(head).refcount.store(0, Ordering::Relaxed);
                arena.free_folio(head, order);
                nr_held -= 1 << order;
            }
            assert_eq!(arena.nr_free_exact(), NR - nr_held);
        }
        assert!(fallbacks > 1000 && full > 0, "the workload never pressed the arena ({fallbacks}, {full})");
        for (head, order) in held {
            arena.page(head).refcount.store(0, Ordering::Relaxed);
            arena.free_folio(head, order);
        }
        for p in 0..NR as Pfn {
            assert!(!arena.page(p).is_tail() && arena.page(p).folio_order() == 0, "frame {p} kept folio state");
        }
        assert_pristine(&arena);
    }

    // Goal: under threads allocating and freeing mixed orders at once, no
    // frame is ever held by two of them (each claims a block's frames in a
    // shared owner table), and every frame comes back.
    #[test]
    fn threads_never_share_a_frame() {
        const THREADS: u32 = 4;
        let arena = Arena::with_pcp(4096, 4096, 2, 8, 32).expect("arena");
        let owner: Vec<StdAtomicU32> = (0..4096).map(|_| StdAtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for t in 1..=THREADS {
                let (arena, owner) = (&arena, &owner);
                s.spawn(move || {
                    use rand::{Rng, SeedableRng};
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                    let mut held: Vec<(Pfn, usize)> = Vec::new();
                    for _ in 0..100_000 {
                        if held.len() < 24 && rng.gen_bool(0.55) {
                            let order = if rng.gen_bool(0.7) { 0 } else { rng.gen_range(1..=9) };
                            if let Some(pfn) = arena.alloc_order(order) {
                                for p in pfn..pfn + (1 << order) {
                                    let was = owner[p as usize].swap(t, std::sync::atomic::Ordering::Relaxed);
                                    assert_eq!(was, 0, "frame {p} held by {was} handed to {t}");
                                }
                                held.push((pfn, order));
                            }
                        } else if !held.is_empty() {
                            let (pfn, order) = held.swap_remove(rng.gen_range(0..held.len()));
                            for p in pfn..pfn + (1 << order) {
                                let was = owner[p as usize].swap(0, std::sync::atomic::Ordering::Relaxed);
                                assert_eq!(was, t, "frame {p} was taken from {t} by {was}");
                            }
                            put(arena, pfn, order);
                        }
                    }
                    for (pfn, order) in held {
                        for p in pfn..pfn + (1 << order) {
                            owner[p as usize].store(0, std::sync::atomic::Ordering::Relaxed);
                        }
                        put(arena, pfn, order);
                    }
                });
            }
        });
        assert_pristine(&arena);
    }

    /// Nanoseconds per alloc+free pair on `threads` threads at once, each
    /// holding `depth` frames at a time (1: a pair back to back; more: the
    /// frames cycle through the per-CPU lists' depth): the median of 5 runs.
    fn time_pairs(arena: &Arena, threads: usize, depth: usize, pairs: usize) -> f64 {
        let mut runs: Vec<f64> = (0..5)
            .map(|_| {
                let start = std::time::Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(|| {
                            let mut held = Vec::with_capacity(depth);
                            for _ in 0..pairs / depth {
                                for _ in 0..depth {
                                    held.push(arena.alloc().expect("a frame"));
                                }
                                for pfn in held.drain(..) {
                                    arena.page(pfn).refcount.store(0, Ordering::Relaxed);
                                    arena.free(pfn);
                                }
                            }
                        });
                    }
                });
                start.elapsed().as_nanos() as f64 / (pairs / depth * depth) as f64
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        runs[2]
    }

    // Not a check: the order-0 hot path's cost, for before/after figures
    // (`cargo test --release -p pcache --lib arena::tests::alloc_free_timing
    // -- --ignored --nocapture`).
    #[test]
    #[ignore = "timing, not a check"]
    fn alloc_free_timing() {
        let arena = Arena::new(16384, 4096).expect("arena");
        for (threads, depth) in [(1, 1), (1, 32), (2, 1), (2, 32)] {
            let ns = time_pairs(&arena, threads, depth, 2_000_000);
            println!("alloc+free: {threads} thread(s), {depth} held: {ns:.1} ns per pair");
        }
    }
}

//! The frame arena (mm/page_alloc.c, much reduced): one page-aligned
//! allocation of `nr_pages` frames made at start-up, their descriptors, the
//! free list and the watermarks.
//!
//! The free list is a Treiber stack threaded through `Page::lru_next`, with a
//! 32-bit tag beside the head to defeat ABA. Allocation and freeing are
//! lock-free; nothing on any path allocates heap memory per page.
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
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::mmdebug::vm_bug_on_page;
use crate::page::{Page, Pfn, NO_PFN, PG_DIRTY, PG_LOCKED, PG_LRU, PG_SWAPBACKED, PG_SWAPCACHE, PG_WRITEBACK};
use crate::Watermarks;

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
    /// Tag (high 32 bits) and top pfn (low 32 bits) of the free stack.
    free_head: AtomicU64,
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
    pub fn new(nr_pages: u64, page_size: usize) -> Result<Arena> {
        let bytes = (nr_pages as usize)
            .checked_mul(page_size)
            .ok_or_else(|| Error::InvalidConfig(format!("{nr_pages} pages of {page_size} bytes overflow")))?;
        // Frames of 64 KiB need only 4 KiB alignment for O_DIRECT.
        let base = map_zeroed(bytes).ok_or(Error::NoMemory { frames: nr_pages as usize })?;
        let mut pages: Vec<Page> = Vec::with_capacity(nr_pages as usize);
        // Before the descriptors are first touched, so they fault in huge.
        advise_huge(pages.as_mut_ptr().cast(), nr_pages as usize * std::mem::size_of::<Page>());
        pages.extend((0..nr_pages).map(|_| Page::new()));
        let pages = pages.into_boxed_slice();
        // Build the free stack so that low frames are handed out first.
        for pfn in 0..nr_pages as u32 {
            let next = if (pfn as u64) + 1 < nr_pages { pfn + 1 } else { NO_PFN };
            pages[pfn as usize].lru_next.store(next, Ordering::Relaxed);
        }
        Ok(Arena {
            base,
            bytes,
            page_size,
            page_shift: page_size.trailing_zeros(),
            nr_pages,
            pages,
            seqs: (0..nr_pages).map(|_| AtomicU32::new(0)).collect(),
            free_head: AtomicU64::new(0),
            nr_free: AtomicU64::new(nr_pages),
            watermarks: Self::watermarks_for(nr_pages, page_size),
            populated: AtomicU64::new(0),
        })
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

    #[inline]
    pub fn nr_free(&self) -> u64 {
        self.nr_free.load(Ordering::Relaxed)
    }

    /// Pop a free frame. The returned page has refcount 1, no flags.
    pub fn alloc(&self) -> Option<Pfn> {
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            let pfn = head as u32;
            if pfn == NO_PFN {
                return None;
            }
            let next = self.page(pfn).lru_next.load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | next as u64;
            match self.free_head.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.nr_free.fetch_sub(1, Ordering::Relaxed);
                    let page = self.page(pfn);
                    page.lru_next.store(NO_PFN, Ordering::Relaxed);
                    page.refcount.store(1, Ordering::Release);
                    return Some(pfn);
                }
                Err(cur) => head = cur,
            }
        }
    }

    /// Push a frame whose refcount dropped to 0 and that is off every list.
    pub fn free(&self, pfn: Pfn) {
        let page = self.page(pfn);
        // free_pages_check: nothing may still use the frame (a locked or
        // writeback page has a user, a listed one a list). Anonymous pages
        // are freed dirty when their region goes, as in the kernel; a
        // dirty file page freed is data lost.
        page.check_flags("free");
        let f = page.flags();
        let busy = PG_LOCKED | PG_WRITEBACK | PG_LRU | PG_SWAPCACHE;
        let lost = f & PG_DIRTY != 0 && f & PG_SWAPBACKED == 0;
        vm_bug_on_page!(
            page.refcount() != 0 || f & busy != 0 || lost || page.mapcount.load(Ordering::Relaxed) != 0,
            page,
            "freeing a page in use"
        );
        page.reset_for_free();
        // Counted before it can be popped (and uncounted by `alloc`), so
        // the count never dips below the frames really free.
        self.nr_free.fetch_add(1, Ordering::Relaxed);
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            page.lru_next.store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | pfn as u64;
            match self.free_head.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(cur) => head = cur,
            }
        }
    }
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

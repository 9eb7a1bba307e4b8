//! Hazard pins: the hit path's page references, without atomic
//! read-modify-writes (pcache's own; the kernel pins with `get_page`).
//!
//! A reference count costs two locked instructions per hit (get and put),
//! each of which stalls the pipeline and, when two CPUs hit the same page,
//! bounces its cache line between them. In userspace we can do better: a
//! reader announces the frame it is about to use in its own per-thread
//! hazard slot (a plain store), re-checks that the page tree still maps the
//! index to that frame, and uses it; unpinning is another plain store.
//!
//! The other half of the protocol lives where frames are freed. A frame
//! whose last reference is gone is not returned to the free list at once
//! but parked on a pending list. Before pending frames are reused, the
//! freeing thread issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` (a
//! full memory barrier on every thread of the process, so the readers' plain
//! stores need no fence of their own) and scans every hazard slot; frames
//! still announced stay pending. Either the reader's announcement is visible
//! to that scan, or the reader's re-check runs after the page left the tree
//! and fails, so a frame is never reused under a reader.
//!
//! Where membarrier is unavailable, readers issue a full fence after
//! announcing instead (`HazardTable::fence_on_pin`).
//!
//! A thread has `HAZARDS_PER_THREAD` slots; a reader that finds none free
//! (or has no thread slot) falls back to a reference count. Beside them,
//! one transient slot for an access that pins, reads and unpins with
//! nothing in between (`Mapping::load_u64`): it never nests, so it needs
//! no free mask, and the access stays a handful of instructions. And
//! `BATCH_PINS` batch slots for `Mapping::load_u64_many`, which announces
//! the frames of a chunk of accesses with one barrier, then re-checks and
//! reads them all; the next chunk's announcements replace them (release
//! stores), and the slots are cleared once, when the call ends or before
//! it faults (`BatchPins`; memory.rs, `pte_load_many`).
//!
//! Walk announcements: the same scheme keeps page-tree *nodes* alive under
//! lock-free readers (the kernel frees xa_nodes by RCU). Before walking a
//! tree, a reader stores the current node epoch in its row's `walk` word
//! (a plain store, `WalkGuard`) and clears it when done, after its last
//! access to any node, including the re-check of a slot after a hazard pin.
//! A writer that unlinks nodes (under the tree lock) retires them tagged
//! with the epoch it then advances (`retire_epoch`); retired nodes are
//! reused only once `walk_sync` (membarrier, then a scan of every row in use)
//! finds no walk announcing an epoch at or before their tag:
//!
//! ```text
//!   reader                              writer (tree lock)
//!   walk = epoch          (plain)       unlink node N (release)
//!   compiler fence                      tag = epoch++ (RMW: writers may)
//!   load root, slots... (may reach N)   ... later: membarrier, scan rows
//!   walk = 0              (release)     N reusable iff every walk is 0 or > tag
//! ```
//!
//! A reader that loaded an epoch above `tag` loaded it after the unlink was
//! published (acquire), so it cannot reach N. A reader that announced `tag`
//! or less is seen by the scan, unless its announcement comes after the
//! membarrier's barrier on its CPU, in which case its loads come after the
//! unlink too. Walks may nest (a gang lookup's callback looking a page up):
//! the inner one keeps the outer, older announcement. Threads without a row
//! (past `MAX_SLOTS`) count themselves in `overflow_walkers` with RMWs;
//! while any such walk runs, nothing retired is reused.

use std::marker::PhantomData;
use std::sync::atomic::compiler_fence;

use crate::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::page::{Pfn, NO_PFN};
use crate::percpu::thread_slot;

/// The rows a scan must read: those of slots ever handed out. A thread
/// announces only in its own slot's row (`thread_slot`), and it took the
/// slot before its first announcement, so when the scan's barrier makes
/// that announcement visible it makes the slot's allocation
/// (`percpu::NEXT_SLOT`, loaded after the barrier) visible too; rows past
/// it were never written. Under loom the tests pick their rows
/// themselves: all are read.
#[cfg(not(loom))]
fn rows_in_use() -> usize {
    crate::percpu::slots_in_use()
}
#[cfg(loom)]
fn rows_in_use() -> usize {
    ROWS
}

/// Hazard slots per thread (shrunk under loom to keep the model small).
#[cfg(not(loom))]
pub const HAZARDS_PER_THREAD: usize = 8;
#[cfg(loom)]
pub const HAZARDS_PER_THREAD: usize = 2;
/// Batch slots per thread (`batch_pins`): the accesses of one
/// `load_u64_many` chunk. 16 measured no better on 4 GiB (measured; docs/history/decisions.md).
#[cfg(not(loom))]
pub const BATCH_PINS: usize = 8;
#[cfg(loom)]
pub const BATCH_PINS: usize = 2;
/// Rows: one per thread slot.
#[cfg(not(loom))]
const ROWS: usize = crate::percpu::MAX_SLOTS;
#[cfg(loom)]
const ROWS: usize = 2;

#[repr(align(128))]
struct HazardRow {
    slots: [AtomicU32; HAZARDS_PER_THREAD],
    /// The transient slot (`pin_transient`). Written only by the owning
    /// thread.
    transient: AtomicU32,
    /// The batch slots (`batch_pins`). Written only by the owning thread.
    batch: [AtomicU32; BATCH_PINS],
    /// Bit i set: slot i is free. Written only by the owning thread.
    free: AtomicU32,
    /// The node epoch announced by a page-tree walk in progress, 0 when
    /// none. Written only by the owning thread.
    walk: AtomicU64,
}

// One row per 128 bytes (two cache lines, the adjacent-line prefetcher's
// pair): rows of different threads never share a line.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<HazardRow>() == 128);

pub struct HazardTable {
    rows: Box<[HazardRow]>,
    fence_on_pin: AtomicBool,
    /// The page-tree node epoch, from 1: advanced each time nodes are
    /// retired (`retire_epoch`).
    node_epoch: AtomicU64,
    /// Walks in progress by threads without a row.
    overflow_walkers: AtomicU64,
}

/// A page-tree walk in progress on this thread (see the module comment):
/// nodes reached while it lives are not reused. Not `Send`: it is the
/// thread's own row.
pub struct WalkGuard<'a> {
    /// The announcement this guard made and clears on drop: its row's
    /// `walk` word, or `overflow_walkers` (a count). None when an outer
    /// walk on this thread already announces an older epoch.
    clear: Option<(&'a AtomicU64, bool)>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for WalkGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        match self.clear {
            // Release: our loads of nodes happen before the clear, which
            // `walk_sync`'s acquire scan reads before reusing them.
            Some((walk, false)) => walk.store(0, Ordering::Release),
            Some((count, true)) => {
                count.fetch_sub(1, Ordering::Release);
            }
            None => {}
        }
    }
}

/// The calling thread's batch slots, held for one `load_u64_many` call
/// (memory.rs, `pte_load_many`). Each chunk of accesses announces its
/// frames over the last chunk's (`announce`: the new announcement is the
/// old one's withdrawal), then issues one barrier; the slots are cleared
/// only when the call ends or before it faults (`clear`, and Drop). A
/// stale announcement only delays the reuse of a frame, so the per-key
/// clear stores are not needed. Not `Send`: the thread's own row.
pub struct BatchPins<'a> {
    table: &'a HazardTable,
    slots: &'a [AtomicU32; BATCH_PINS],
    _not_send: PhantomData<*const ()>,
}

impl BatchPins<'_> {
    /// Announce `pfn` (`NO_PFN` for none) in batch slot `j`, replacing the
    /// slot's last announcement. The caller must then `barrier` and
    /// re-check, as after `HazardTable::pin_in_row`.
    #[inline(always)]
    pub fn announce(&self, j: usize, pfn: Pfn) {
        // Release: the reads of the frame this slot announced before
        // happen before the announcement is replaced (a scan that sees
        // the new value may free the old frame).
        self.slots[j].store(pfn, Ordering::Release);
    }

    /// Order the announcements before the re-checks that follow (pairs
    /// with the membarrier in `HazardTable::scan`): one per chunk.
    #[inline(always)]
    pub fn barrier(&self) {
        self.table.reader_barrier();
    }

    /// Withdraw every announcement.
    #[inline]
    pub fn clear(&self) {
        for slot in self.slots {
            // Release: our reads of the frames happen before the slots clear.
            slot.store(NO_PFN, Ordering::Release);
        }
    }
}

impl Drop for BatchPins<'_> {
    #[inline]
    fn drop(&mut self) {
        self.clear();
    }
}

/// A held hazard slot: (thread slot, index in the row).
#[derive(Clone, Copy, Debug)]
pub struct Hazard {
    row: u16,
    idx: u8,
}

#[cfg(loom)]
fn membarrier_register() -> bool {
    // loom cannot model membarrier: readers fence instead.
    false
}

#[cfg(loom)]
fn membarrier() -> bool {
    false
}

#[cfg(not(loom))]
fn membarrier_register() -> bool {
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
    // SAFETY: membarrier takes integer arguments only.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
}

#[cfg(not(loom))]
fn membarrier() -> bool {
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    // SAFETY: membarrier takes integer arguments only.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0 }
}

impl HazardTable {
    pub fn new() -> HazardTable {
        let rows = (0..ROWS)
            .map(|_| HazardRow {
                slots: std::array::from_fn(|_| AtomicU32::new(NO_PFN)),
                transient: AtomicU32::new(NO_PFN),
                batch: std::array::from_fn(|_| AtomicU32::new(NO_PFN)),
                free: AtomicU32::new((1 << HAZARDS_PER_THREAD) - 1),
                walk: AtomicU64::new(0),
            })
            .collect();
        HazardTable {
            rows,
            fence_on_pin: AtomicBool::new(!membarrier_register()),
            node_epoch: AtomicU64::new(1),
            overflow_walkers: AtomicU64::new(0),
        }
    }

    /// Announce a page-tree walk by this thread (see the module comment).
    #[inline]
    pub fn walk_begin(&self) -> WalkGuard<'_> {
        self.walk_begin_in_row(thread_slot())
    }

    /// `walk_begin` in an explicit row: the row of the calling thread's slot.
    #[inline]
    pub fn walk_begin_in_row(&self, row_idx: usize) -> WalkGuard<'_> {
        let clear = match self.rows.get(row_idx) {
            Some(row) => {
                if row.walk.load(Ordering::Relaxed) != 0 {
                    None
                } else {
                    // Acquire pairs with `retire_epoch`: an epoch past a
                    // node's tag means its unlink is visible to our walk.
                    let epoch = self.node_epoch.load(Ordering::Acquire);
                    row.walk.store(epoch, Ordering::Release);
                    // Pairs with the membarrier in `walk_sync`: order the
                    // announcement before the walk's loads.
                    self.reader_barrier();
                    Some((&row.walk, false))
                }
            }
            None => {
                self.overflow_walkers.fetch_add(1, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                Some((&self.overflow_walkers, true))
            }
        };
        WalkGuard { clear, _not_send: PhantomData }
    }

    /// Tag for nodes a writer has just unlinked (before this call): walks
    /// announcing a later epoch cannot reach them.
    pub fn retire_epoch(&self) -> u64 {
        // Release: the unlinks before this are visible to a walk that
        // loads the new epoch.
        self.node_epoch.fetch_add(1, Ordering::AcqRel)
    }

    /// Make every walk announcement visible and return the oldest epoch
    /// announced (`u64::MAX` when no walk runs): nodes retired with a tag
    /// below it are reachable by no reader and may be reused.
    pub fn walk_sync(&self) -> u64 {
        self.barrier();
        if self.overflow_walkers.load(Ordering::SeqCst) != 0 {
            return 0;
        }
        let mut oldest = u64::MAX;
        for row in self.rows.iter().take(rows_in_use()) {
            let e = row.walk.load(Ordering::Acquire);
            if e != 0 {
                oldest = oldest.min(e);
            }
        }
        oldest
    }

    /// The reader's side of `barrier`: a compiler fence while membarrier
    /// works, else a full fence.
    #[inline]
    fn reader_barrier(&self) {
        if self.fence_on_pin.load(Ordering::Relaxed) {
            fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
    }

    /// The scanner's side: a full barrier on every thread of the process
    /// (membarrier), or, where that fails, readers are told to fence.
    fn barrier(&self) {
        if !membarrier() {
            self.fence_on_pin.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
    }

    /// Announce `pfn` in row `row_idx`, the row of the calling thread's
    /// slot (`thread_slot()`). The caller must then re-check that the page
    /// is still what it looked up, and `unpin` on failure.
    #[inline]
    pub fn pin_in_row(&self, row_idx: usize, pfn: Pfn) -> Option<Hazard> {
        let row = self.rows.get(row_idx)?;
        let free = row.free.load(Ordering::Relaxed);
        if free == 0 {
            return None;
        }
        let idx = free.trailing_zeros();
        row.free.store(free & !(1 << idx), Ordering::Relaxed);
        row.slots[idx as usize].store(pfn, Ordering::Relaxed);
        // Pairs with the membarrier in `scan`: order the announcement before
        // the re-check loads.
        self.reader_barrier();
        Some(Hazard { row: row_idx as u16, idx: idx as u8 })
    }

    /// Announce `pfn` in the transient slot of row `row_idx` (the calling
    /// thread's), for an access that unpins (`unpin_transient`) before it
    /// pins anything else transiently. The caller must then re-check, as
    /// after `pin_in_row`. None if the row does not exist.
    #[inline(always)]
    pub fn pin_transient(&self, row_idx: usize, pfn: Pfn) -> Option<&AtomicU32> {
        let slot = &self.rows.get(row_idx)?.transient;
        slot.store(pfn, Ordering::Relaxed);
        self.reader_barrier();
        Some(slot)
    }

    /// Withdraw a transient announcement.
    #[inline(always)]
    pub fn unpin_transient(slot: &AtomicU32) {
        // Release: our reads of the frame happen before the slot clears.
        slot.store(NO_PFN, Ordering::Release);
    }

    /// The batch slots of row `row_idx` (the calling thread's), for one
    /// `Mapping::load_u64_many` call: None if the row does not exist.
    /// Not reentrant: one `BatchPins` per thread at a time (only
    /// `load_u64_many` takes them, and it calls out to nothing that does).
    #[inline(always)]
    pub fn batch_pins(&self, row_idx: usize) -> Option<BatchPins<'_>> {
        let slots = &self.rows.get(row_idx)?.batch;
        Some(BatchPins { table: self, slots, _not_send: PhantomData })
    }

    /// Withdraw an announcement. Must run on the thread that pinned.
    #[inline]
    pub fn unpin(&self, h: Hazard) {
        let row = &self.rows[h.row as usize];
        // Release: our reads of the frame happen before the slot clears.
        row.slots[h.idx as usize].store(NO_PFN, Ordering::Release);
        let free = row.free.load(Ordering::Relaxed);
        row.free.store(free | (1 << h.idx), Ordering::Relaxed);
    }

    /// Make every reader's announcements visible, then collect them, sorted.
    pub fn scan(&self, out: &mut Vec<Pfn>) {
        self.barrier();
        out.clear();
        // Only the rows of threads that ever had a slot: 16 readers cost
        // a scan of about 20 rows, not all 128.
        for row in self.rows.iter().take(rows_in_use()) {
            for s in row.slots.iter().chain(std::iter::once(&row.transient)).chain(row.batch.iter()) {
                let p = s.load(Ordering::Acquire);
                if p != NO_PFN {
                    out.push(p);
                }
            }
        }
        out.sort_unstable();
    }
}

impl Default for HazardTable {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    // The scan reads only the rows of slots handed out so far: every
    // announcement of a live thread, whichever slot it got (new or
    // reused), must still be found, and its walk's epoch too.
    #[test]
    fn scan_sees_every_live_threads_pin() {
        const THREADS: usize = 24;
        let hz = Arc::new(HazardTable::new());
        let pinned = Arc::new(Barrier::new(THREADS + 1));
        let release = Arc::new(Barrier::new(THREADS + 1));
        let joins: Vec<_> = (0..THREADS)
            .map(|k| {
                let (hz, pinned, release) = (hz.clone(), pinned.clone(), release.clone());
                std::thread::spawn(move || {
                    let row = thread_slot();
                    let h = hz.pin_in_row(row, 1000 + k as Pfn);
                    let walk = hz.walk_begin_in_row(row);
                    pinned.wait();
                    release.wait();
                    drop(walk);
                    if let Some(h) = h {
                        hz.unpin(h);
                    }
                    row
                })
            })
            .collect();
        pinned.wait();
        let mut seen = Vec::new();
        hz.scan(&mut seen);
        let oldest = hz.walk_sync();
        release.wait();
        let rows: Vec<usize> = joins.into_iter().map(|j| j.join().expect("pinning thread")).collect();
        for (k, row) in rows.iter().enumerate() {
            // A thread past MAX_SLOTS has no row and pins nothing.
            if *row < crate::percpu::MAX_SLOTS {
                assert!(seen.binary_search(&(1000 + k as Pfn)).is_ok(), "row {row}'s pin missed by the scan");
            }
        }
        assert_eq!(oldest, 1, "the walks' epoch missed by walk_sync");
        let mut after = Vec::new();
        hz.scan(&mut after);
        assert!(after.is_empty(), "pins left after unpin: {after:?}");
    }
}

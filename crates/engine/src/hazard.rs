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
//! (or has no thread slot) falls back to a reference count.

use std::sync::atomic::compiler_fence;

use crate::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};

use crate::page::{Pfn, NO_PFN};
use crate::percpu::thread_slot;

/// Hazard slots per thread (shrunk under loom to keep the model small).
#[cfg(not(loom))]
pub const HAZARDS_PER_THREAD: usize = 8;
#[cfg(loom)]
pub const HAZARDS_PER_THREAD: usize = 2;
/// Rows: one per thread slot.
#[cfg(not(loom))]
const ROWS: usize = crate::percpu::MAX_SLOTS;
#[cfg(loom)]
const ROWS: usize = 2;

#[repr(align(128))]
struct HazardRow {
    slots: [AtomicU32; HAZARDS_PER_THREAD],
    /// Bit i set: slot i is free. Written only by the owning thread.
    free: AtomicU32,
}

pub struct HazardTable {
    rows: Box<[HazardRow]>,
    fence_on_pin: AtomicBool,
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
                free: AtomicU32::new((1 << HAZARDS_PER_THREAD) - 1),
            })
            .collect();
        HazardTable { rows, fence_on_pin: AtomicBool::new(!membarrier_register()) }
    }

    /// Announce `pfn`. The caller must then re-check that the page is still
    /// what it looked up, and `unpin` on failure.
    #[inline]
    pub fn pin(&self, pfn: Pfn) -> Option<Hazard> {
        self.pin_in_row(thread_slot(), pfn)
    }

    /// `pin` in an explicit row: the row of the calling thread's slot.
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
        if self.fence_on_pin.load(Ordering::Relaxed) {
            fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
        Some(Hazard { row: row_idx as u16, idx: idx as u8 })
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
        if !membarrier() {
            self.fence_on_pin.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
        out.clear();
        for row in self.rows.iter() {
            for s in &row.slots {
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

//! Per-thread slots: the userspace stand-in for `this_cpu` data.
//!
//! The kernel updates per-CPU counters with one non-atomic instruction
//! because preemption is off. A thread cannot turn preemption off, so
//! single-writer data is keyed by *thread slot* instead: each thread takes a
//! slot number on first use and gives it back when it exits. Only the owner
//! of a slot writes it (a relaxed load and store, no read-modify-write);
//! anyone may read it. Threads past [`MAX_SLOTS`] share the overflow slot and
//! fall back to atomic read-modify-writes.
//!
//! Per-CPU *batches* (pagevecs) are keyed by the CPU the thread runs on, as
//! the kernel keys them; see `swap.rs`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Slots for single-writer data. Threads beyond this share [`OVERFLOW_SLOT`].
pub const MAX_SLOTS: usize = 128;
/// The shared slot, updated with atomic read-modify-writes.
pub const OVERFLOW_SLOT: usize = MAX_SLOTS;

static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static NEXT_SLOT: AtomicU64 = AtomicU64::new(0);

struct SlotGuard {
    slot: Cell<usize>,
}

impl SlotGuard {
    fn take() -> usize {
        if let Some(s) = FREE_SLOTS.lock().pop() {
            return s;
        }
        let s = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) as usize;
        if s < MAX_SLOTS {
            s
        } else {
            OVERFLOW_SLOT
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let s = self.slot.get();
        // Later accesses from this thread's remaining destructors must not
        // use the slot we give back.
        let _ = FAST.try_with(|f| f.set(OVERFLOW_SLOT));
        if s < MAX_SLOTS {
            // The mutex orders this thread's last writes to the slot before
            // the next owner's first (release here, acquire in `take`).
            FREE_SLOTS.lock().push(s);
        }
    }
}

thread_local! {
    /// Gives the slot back when the thread exits.
    static GUARD: SlotGuard = const { SlotGuard { slot: Cell::new(usize::MAX) } };
    /// The slot, in a const thread-local without a destructor: reading it
    /// is one load, with no registration check.
    static FAST: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// How many slots have ever been handed out (at most [`MAX_SLOTS`]):
/// every thread's slot is below it, or is [`OVERFLOW_SLOT`]. It only
/// grows, so a scan of per-slot data may stop there (hazard.rs `scan`).
#[inline]
pub fn slots_in_use() -> usize {
    (NEXT_SLOT.load(Ordering::Acquire) as usize).min(MAX_SLOTS)
}

/// This thread's slot number: `0..MAX_SLOTS`, or [`OVERFLOW_SLOT`].
#[inline]
pub fn thread_slot() -> usize {
    let s = FAST.with(|f| f.get());
    if s != usize::MAX {
        return s;
    }
    thread_slot_slow()
}

#[cold]
fn thread_slot_slow() -> usize {
    let s = GUARD
        .try_with(|g| {
            let s = g.slot.get();
            if s != usize::MAX {
                return s;
            }
            let s = SlotGuard::take();
            g.slot.set(s);
            s
        })
        .unwrap_or(OVERFLOW_SLOT);
    // During thread teardown the guard may already be gone: use the shared
    // slot then, and do not cache it.
    if s != OVERFLOW_SLOT {
        FAST.with(|f| f.set(s));
    }
    s
}

/// The CPU this thread is running on, for keying per-CPU batches. Any value
/// is correct (batches are locked); the CPU number only keeps contention and
/// the number of batch sets low.
#[inline]
pub fn current_cpu(nr_cpus: usize) -> usize {
    // SAFETY: sched_getcpu has no preconditions; it reads the rseq area or
    // makes a syscall.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        thread_slot() % nr_cpus
    } else {
        cpu as usize % nr_cpus
    }
}

/// A row of `N` single-writer counters per slot, plus the shared overflow row.
pub struct SlotCounters<const N: usize> {
    rows: Box<[CounterRow<N>]>,
}

#[repr(align(128))]
struct CounterRow<const N: usize>([AtomicU64; N]);

impl<const N: usize> SlotCounters<N> {
    pub fn new() -> Self {
        let rows = (0..=MAX_SLOTS).map(|_| CounterRow(std::array::from_fn(|_| AtomicU64::new(0)))).collect();
        SlotCounters { rows }
    }

    /// Add `delta` to counter `item` in this thread's row.
    #[inline]
    pub fn add(&self, item: usize, delta: u64) {
        let slot = thread_slot();
        let c = &self.rows[slot].0[item];
        if slot == OVERFLOW_SLOT {
            c.fetch_add(delta, Ordering::Relaxed);
        } else {
            // Single writer: a load and a store, no locked instruction.
            c.store(c.load(Ordering::Relaxed).wrapping_add(delta), Ordering::Relaxed);
        }
    }

    /// The sum over all rows.
    pub fn sum(&self, item: usize) -> u64 {
        self.rows.iter().fold(0u64, |acc, r| acc.wrapping_add(r.0[item].load(Ordering::Relaxed)))
    }
}

impl<const N: usize> Default for SlotCounters<N> {
    fn default() -> Self {
        Self::new()
    }
}

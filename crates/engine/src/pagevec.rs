//! Page vectors and the per-CPU batches built of them
//! (include/linux/pagevec.h, the `lru_pvecs` of mm/swap.c).
//!
//! Only the containers: what the batches do (lru_add, activate, rotate,
//! deactivate, Danilov's accessed batch) is swap.rs's. They live apart so
//! that `Cache` (mm.rs) can hold them without mm.rs naming swap.rs.

use parking_lot::Mutex;

use crate::page::{Pfn, NO_PFN};

/// PAGEVEC_SIZE. Shrunk under loom to keep the state space small.
#[cfg(not(loom))]
pub const PAGEVEC_SIZE: usize = 15;
#[cfg(loom)]
pub const PAGEVEC_SIZE: usize = 2;

/// A small batch of pages (struct pagevec). `drained` records whether
/// `pagevec_release` already drained the per-CPU batches in this pagevec's
/// lifecycle (onedrain, Linux 4.15).
pub struct PageVec {
    nr: usize,
    pub drained: bool,
    pages: [Pfn; PAGEVEC_SIZE],
}

impl PageVec {
    pub const fn new() -> PageVec {
        PageVec { nr: 0, drained: false, pages: [NO_PFN; PAGEVEC_SIZE] }
    }

    /// pagevec_add: returns the space left (0 means full: flush now).
    #[inline]
    pub fn add(&mut self, pfn: Pfn) -> usize {
        self.pages[self.nr] = pfn;
        self.nr += 1;
        PAGEVEC_SIZE - self.nr
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.nr == 0
    }

    #[inline]
    pub fn pages(&self) -> &[Pfn] {
        &self.pages[..self.nr]
    }

    /// pagevec_reinit: empty, keeping `drained`.
    pub fn reinit(&mut self) {
        self.nr = 0;
    }

    #[inline]
    pub(crate) fn take(&mut self) -> PageVec {
        let mut out = PageVec::new();
        out.pages[..self.nr].copy_from_slice(&self.pages[..self.nr]);
        out.nr = self.nr;
        self.nr = 0;
        out
    }
}

impl Default for PageVec {
    fn default() -> Self {
        Self::new()
    }
}

/// One CPU's batches.
#[derive(Default)]
pub struct CpuBatches {
    pub(crate) lru_add: PageVec,
    pub(crate) activate: PageVec,
    pub(crate) rotate: PageVec,
    pub(crate) deactivate: PageVec,
    pub(crate) accessed: PageVec,
}

impl CpuBatches {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.lru_add.is_empty()
            && self.activate.is_empty()
            && self.rotate.is_empty()
            && self.deactivate.is_empty()
            && self.accessed.is_empty()
    }
}

/// A CPU's batches on their own cache lines.
#[repr(align(128))]
#[derive(Default)]
pub struct PerCpu {
    pub batches: Mutex<CpuBatches>,
}

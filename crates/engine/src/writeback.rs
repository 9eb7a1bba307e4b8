//! The node's writeback state (include/linux/writeback.h's side of
//! mm/page-writeback.c): what the allocator, reclaim and vmstat read, kept
//! apart from the code that changes it (page_writeback.rs), so that the
//! modules that only read it need nothing of page_writeback.rs's.

use parking_lot::Mutex;

use crate::sync::atomic::{AtomicI64, Ordering};

/// Writeback accounting: the node's dirty and writeback page counts (the
/// kernel's NR_FILE_DIRTY and NR_WRITEBACK) and the files whose writeback
/// is failing. Written only by page_writeback.rs's
/// `account_page_dirtied`, `account_page_cleaned`,
/// `account_page_writeback`, `test_clear_page_writeback` (which also keep
/// the inode's and the bdi's counts in step) and
/// `mapping_set_error`/`mapping_clear_error`; others read them.
pub struct WbAccounting {
    nr_dirty: AtomicI64,
    nr_writeback: AtomicI64,
    /// Ids of the files whose writeback is failing (mapping_set_error), for
    /// the dirty throttle and the allocator to leave their pages out.
    failing: Mutex<Vec<u32>>,
}

impl WbAccounting {
    pub fn new() -> WbAccounting {
        WbAccounting { nr_dirty: AtomicI64::new(0), nr_writeback: AtomicI64::new(0), failing: Mutex::new(Vec::new()) }
    }

    /// Dirty pages (NR_FILE_DIRTY). Racy counters may dip below zero for a
    /// moment (a clean counted before its dirty), so readers see 0 then.
    #[inline]
    pub fn nr_dirty(&self) -> u64 {
        self.nr_dirty.load(Ordering::Relaxed).max(0) as u64
    }

    /// Pages under writeback (NR_WRITEBACK). Acquire: `sync_all` reads it
    /// to decide whether writeback others started may still be in flight.
    #[inline]
    pub fn nr_writeback(&self) -> u64 {
        self.nr_writeback.load(Ordering::Acquire).max(0) as u64
    }

    /// Dirty plus under writeback, read as balance_dirty_pages does
    /// (relaxed, the sum clamped at 0).
    #[inline]
    pub fn nr_dirty_and_writeback(&self) -> u64 {
        (self.nr_dirty.load(Ordering::Relaxed) + self.nr_writeback.load(Ordering::Relaxed)).max(0) as u64
    }

    /// `nr` pages (a folio) became dirty; returns the count before them.
    #[inline]
    pub(crate) fn inc_dirty(&self, nr: i64) -> i64 {
        self.nr_dirty.fetch_add(nr, Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn dec_dirty(&self, nr: i64) {
        self.nr_dirty.fetch_sub(nr, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn inc_writeback(&self, nr: i64) {
        self.nr_writeback.fetch_add(nr, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn dec_writeback(&self, nr: i64) {
        self.nr_writeback.fetch_sub(nr, Ordering::Relaxed);
    }

    /// The file `id`'s writeback is failing (listed once).
    pub(crate) fn set_failing(&self, id: u32) {
        let mut failing = self.failing.lock();
        if !failing.contains(&id) {
            failing.push(id);
        }
    }

    pub(crate) fn clear_failing(&self, id: u32) {
        self.failing.lock().retain(|&f| f != id);
    }

    /// The ids of the files whose writeback is failing, copied.
    pub(crate) fn failing(&self) -> Vec<u32> {
        self.failing.lock().clone()
    }
}

impl Default for WbAccounting {
    fn default() -> WbAccounting {
        WbAccounting::new()
    }
}

//! Swap devices and their slots (mm/swapfile.c), and the page I/O to them
//! (mm/page_io.c's `swap_writepage` and `swap_readpage`).
//!
//! A swap device is an array of page-sized slots on a [`BackingDev`]: a host
//! file opened with O_DIRECT, a memory device (zram without the
//! compression), or any device an embedder supplies. Each slot has a count
//! in `swap_map`, one byte as in the kernel:
//!
//! ```text
//!   swap_map[offset]:  | HAS_CACHE (0x40) | count (6 bits) |
//!     0            free
//!     count n      n swap ptes hold the slot (here at most 1: no fork)
//!     HAS_CACHE    a page in the swap cache holds the slot
//!     0x3f         SWAP_MAP_BAD, never handed out
//! ```
//!
//! A slot is free only when both the count and HAS_CACHE are gone. The
//! swap cache (swap_state.rs) lives beside the map under the same lock,
//! so "is it cached, else mark it cached" is one step.
//!
//! Allocation is `scan_swap_map` as in 2.6.29 to 3.x: slots are handed out
//! in runs of `SWAPFILE_CLUSTER` (256) from a cluster that was entirely
//! free when the run began, so that pages reclaim swaps out together lie
//! together on the device (and swap readahead, which reads the aligned
//! 2^page_cluster slots around a fault, reads neighbours that were
//! evicted together). When no free cluster is left, it takes the next free
//! slot after `cluster_next`, wrapping to `lowest_bit`. `lowest_bit` and
//! `highest_bit` bound the free slots, so a scan never looks outside them.
//!
//! A large anonymous folio swapped out whole (6.10's mTHP swap-out) takes
//! `nr` slots at once, aligned to `nr` as the folio's frames are (the
//! kernel takes them from a free cluster kept per order):
//! `get_swap_pages` looks for a naturally aligned run of free slots,
//! from a cursor of its own, once round the device at most. None, and
//! the caller splits the folio and swaps its pages, as before 6.10.
//!
//! Implementation: one device (no swap types, priorities or swapoff); no
//! header page, every slot is usable; the swap_map is a `Box<[u8]>` under
//! a mutex (the kernel's `si->lock`), which is also the swap cache's lock.
//! Lock order: page lock → a mapping's ptl → the swap lock (innermost; no
//! page lock is waited for under it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::backing::{BackingDev, FdCache, FileDev, MemoryDev};
use crate::error::{Error, Result};
use crate::mmdebug::vm_bug_on;
use crate::page::*;

/// Slots handed out together from a free cluster (SWAPFILE_CLUSTER).
pub const SWAPFILE_CLUSTER: u32 = 256;
/// The swap cache holds the slot.
pub const SWAP_HAS_CACHE: u8 = 0x40;
/// A slot that must not be used.
pub const SWAP_MAP_BAD: u8 = 0x3f;
/// The most slots a device may have: slot + 1 must fit the top half of a
/// page's `index`, and a slot must fit a swap entry's 28 bits (mmap.rs,
/// `PTE_PFN_MASK`).
pub const MAX_SWAP_PAGES: u64 = (1 << 28) - 1;

/// Where swapped-out pages go (see [`crate::PageCache::swapon`]).
#[derive(Clone)]
#[non_exhaustive]
pub enum SwapBacking {
    /// A memory device (tmpfs/zram-like): pages swapped out cost heap
    /// memory outside the cache's budget, but no I/O.
    Memory,
    /// A host file, created or truncated and opened with O_DIRECT where
    /// the file system allows it (else buffered, dropped after each
    /// transfer).
    File(PathBuf),
    /// Any device, e.g. a [`crate::backing::FaultInjector`] in tests.
    Dev(Arc<dyn BackingDev>),
}

impl std::fmt::Debug for SwapBacking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwapBacking::Memory => write!(f, "Memory"),
            SwapBacking::File(p) => write!(f, "File({})", p.display()),
            SwapBacking::Dev(d) => write!(f, "Dev({})", d.name()),
        }
    }
}

/// A swap device to turn on: its size and where it lives.
#[derive(Clone, Debug)]
pub struct SwapConfig {
    /// Bytes of swap; rounded down to whole pages.
    pub size_bytes: u64,
    pub backing: SwapBacking,
}

impl SwapConfig {
    /// Swap of `size_bytes` in memory.
    pub fn memory(size_bytes: u64) -> SwapConfig {
        SwapConfig { size_bytes, backing: SwapBacking::Memory }
    }

    /// Swap of `size_bytes` in the host file at `path`.
    pub fn file(path: impl Into<PathBuf>, size_bytes: u64) -> SwapConfig {
        SwapConfig { size_bytes, backing: SwapBacking::File(path.into()) }
    }
}

/// The state under the swap lock: the map, the allocator's cursor and the
/// swap cache (slot → page).
pub(crate) struct SwapInner {
    map: Box<[u8]>,
    /// The swap cache (swapper_space): pages by swap slot.
    pub(crate) cache: HashMap<u32, Pfn>,
    /// Shadow entries of pages swapped out (`AnonLru::Linux5_9`), by
    /// slot: at most one per slot in use, dropped when the slot is freed.
    pub(crate) shadows: HashMap<u32, usize>,
    lowest_bit: u32,
    highest_bit: u32,
    cluster_next: u32,
    cluster_nr: u32,
    /// Where the next aligned run for a folio is looked for.
    folio_next: u32,
    pub(crate) inuse_pages: u32,
}

/// One swap device (swap_info_struct).
pub struct SwapInfo {
    pub(crate) dev: Arc<dyn BackingDev>,
    /// Slots on the device.
    pub(crate) pages: u32,
    inner: Mutex<SwapInner>,
}

impl SwapInner {
    fn new(pages: u32) -> SwapInner {
        SwapInner {
            map: vec![0u8; pages as usize].into_boxed_slice(),
            cache: HashMap::new(),
            shadows: HashMap::new(),
            lowest_bit: 0,
            highest_bit: pages - 1,
            cluster_next: 0,
            cluster_nr: SWAPFILE_CLUSTER,
            folio_next: 0,
            inuse_pages: 0,
        }
    }

    fn pages(&self) -> u32 {
        self.map.len() as u32
    }

    /// scan_swap_map: a free slot, marked `usage`; None when the device is
    /// full. Looks at each slot at most twice (the cluster search, then
    /// the first-fit scan), so it is bounded by the device's size.
    pub(crate) fn scan_swap_map(&mut self, usage: u8) -> Option<u32> {
        let pages = self.pages();
        if self.inuse_pages >= pages {
            return None;
        }
        let mut offset = self.cluster_next;
        if self.cluster_nr == 0 {
            self.cluster_nr = SWAPFILE_CLUSTER - 1;
            if pages - self.inuse_pages >= SWAPFILE_CLUSTER {
                // Locate the first empty (unaligned) cluster.
                let mut start = self.lowest_bit;
                let mut o = self.lowest_bit;
                let mut found = None;
                while o <= self.highest_bit {
                    if self.map[o as usize] != 0 {
                        start = o + 1;
                    } else if o - start + 1 == SWAPFILE_CLUSTER {
                        found = Some(start);
                        break;
                    }
                    o += 1;
                }
                offset = found.unwrap_or(self.lowest_bit);
            }
        } else {
            self.cluster_nr -= 1;
        }
        if offset > self.highest_bit || offset < self.lowest_bit {
            offset = self.lowest_bit;
        }
        if self.map[offset as usize] != 0 {
            // First fit from offset to highest_bit, then from lowest_bit.
            let next =
                (offset..=self.highest_bit).chain(self.lowest_bit..offset).find(|&o| self.map[o as usize] == 0)?;
            offset = next;
        }
        self.take_slots(offset, 1, usage);
        self.cluster_next = offset + 1;
        Some(offset)
    }

    /// Mark the free slots `[first, first + nr)` `usage`, keeping
    /// `lowest_bit` and `highest_bit` true bounds of the free slots.
    fn take_slots(&mut self, first: u32, nr: u32, usage: u8) {
        let pages = self.pages();
        let last = first + nr - 1;
        self.map[first as usize..=last as usize].fill(usage);
        self.inuse_pages += nr;
        if self.inuse_pages == pages {
            (self.lowest_bit, self.highest_bit) = (pages - 1, 0);
        } else {
            if (first..=last).contains(&self.lowest_bit) {
                self.lowest_bit = (last + 1..pages).find(|&o| self.map[o as usize] == 0).unwrap_or(self.lowest_bit);
            }
            if (first..=last).contains(&self.highest_bit) {
                self.highest_bit = (0..first).rev().find(|&o| self.map[o as usize] == 0).unwrap_or(self.highest_bit);
            }
        }
    }

    /// swap_entry_free: drop one count (`usage` 1) or the cache's hold
    /// (`usage` SWAP_HAS_CACHE); the slot is free when nothing is left.
    /// Returns what is left.
    pub(crate) fn swap_entry_free(&mut self, offset: u32, usage: u8) -> u8 {
        let v = &mut self.map[offset as usize];
        vm_bug_on!(*v == 0 || *v == SWAP_MAP_BAD, "freeing free swap slot {offset}");
        if usage == SWAP_HAS_CACHE {
            debug_assert!(*v & SWAP_HAS_CACHE != 0);
            *v &= !SWAP_HAS_CACHE;
        } else {
            debug_assert!(*v & !SWAP_HAS_CACHE > 0);
            *v -= 1;
        }
        let left = *v;
        if left == 0 {
            self.shadows.remove(&offset);
            self.inuse_pages -= 1;
            if self.inuse_pages + 1 == self.pages() {
                (self.lowest_bit, self.highest_bit) = (offset, offset);
            } else {
                self.lowest_bit = self.lowest_bit.min(offset);
                self.highest_bit = self.highest_bit.max(offset);
            }
        }
        left
    }

    /// get_swap_pages for a folio of `nr` pages (a power of two above 1):
    /// the first of `nr` free slots aligned to `nr`, all marked for the
    /// swap cache; None when no such run is free. Looks at each aligned
    /// run at most once (from `folio_next`, wrapping), and within a run
    /// stops at its first used slot.
    pub(crate) fn get_swap_pages(&mut self, nr: u32) -> Option<u32> {
        debug_assert!(nr.is_power_of_two() && nr > 1);
        let pages = self.pages();
        if pages - self.inuse_pages < nr {
            return None;
        }
        // At least one run: the device has `nr` free slots.
        let runs = pages / nr;
        let start = (self.folio_next / nr) % runs;
        let free = |map: &[u8], r: u32| map[(r * nr) as usize..((r + 1) * nr) as usize].iter().all(|&v| v == 0);
        let run = (start..runs).chain(0..start).find(|&r| free(&self.map, r))?;
        let first = run * nr;
        self.take_slots(first, nr, SWAP_HAS_CACHE);
        self.folio_next = first + nr;
        Some(first)
    }

    /// get_swap_page: a free slot for a page entering the swap cache
    /// (SWAP_HAS_CACHE), or None when swap is full.
    pub(crate) fn get_swap_page(&mut self) -> Option<u32> {
        self.scan_swap_map(SWAP_HAS_CACHE)
    }

    /// swap_free: a swap pte holding `offset` went (swapped in, or
    /// zapped). Returns what is left of the slot's count.
    pub(crate) fn swap_free(&mut self, offset: u32) -> u8 {
        self.swap_entry_free(offset, 1)
    }

    /// swapcache_free: the swap cache let go of `offset`.
    pub(crate) fn swapcache_free(&mut self, offset: u32) -> u8 {
        self.swap_entry_free(offset, SWAP_HAS_CACHE)
    }

    /// The swap ptes holding `offset` (page_swapcount / swap_count).
    pub(crate) fn swap_count(&self, offset: u32) -> u8 {
        match self.map[offset as usize] {
            SWAP_MAP_BAD => 0,
            v => v & !SWAP_HAS_CACHE,
        }
    }

    /// swap_duplicate: one more swap pte holds `offset`.
    pub(crate) fn swap_duplicate(&mut self, offset: u32) {
        let v = &mut self.map[offset as usize];
        debug_assert!(*v != 0 && *v != SWAP_MAP_BAD && *v & !SWAP_HAS_CACHE < SWAP_MAP_BAD - 1);
        *v += 1;
    }

    /// Whether the slot may be read into the swap cache (used, not bad).
    pub(crate) fn in_use(&self, offset: u32) -> bool {
        self.swap_count(offset) > 0
    }

    /// Mark `offset` as held by the swap cache (swapcache_prepare).
    pub(crate) fn set_has_cache(&mut self, offset: u32) {
        self.map[offset as usize] |= SWAP_HAS_CACHE;
    }
}

impl SwapInfo {
    /// The swap lock (si->lock, also the swap cache's tree lock).
    pub(crate) fn lock(&self) -> MutexGuard<'_, SwapInner> {
        self.inner.lock()
    }
}

impl SwapInfo {
    /// Free slots (the kernel's `nr_swap_pages`).
    #[inline]
    pub(crate) fn nr_free(&self) -> u64 {
        (self.pages - self.lock().inuse_pages) as u64
    }

    /// Slots in all (`total_swap_pages`).
    #[inline]
    pub(crate) fn total(&self) -> u64 {
        self.pages as u64
    }

    /// The number of slots a swap device of `size_bytes` has; refused
    /// unless 1 to MAX_SWAP_PAGES.
    pub(crate) fn nr_slots(size_bytes: u64, page_size: usize) -> Result<u64> {
        let pages = size_bytes / page_size as u64;
        if pages == 0 || pages > MAX_SWAP_PAGES {
            return Err(Error::InvalidArgument(format!(
                "swapon: {size_bytes} bytes is {pages} pages; it must be 1 to {MAX_SWAP_PAGES}"
            )));
        }
        Ok(pages)
    }

    /// swapon(2)'s work: the device `cfg` names, sized to `pages` slots
    /// (`nr_slots`) and reserved. The caller (`Cache::swapon`, mm.rs)
    /// installs it, once.
    pub(crate) fn swapon(cfg: SwapConfig, pages: u64, page_size: usize, fds: &Arc<FdCache>) -> Result<SwapInfo> {
        let ps = page_size as u64;
        let size = pages * ps;
        let dev: Arc<dyn BackingDev> = match cfg.backing {
            SwapBacking::Memory => Arc::new(MemoryDev::new("swap", page_size)),
            SwapBacking::File(path) => {
                let name = path.display().to_string();
                let dev = FileDev::open_in(fds, &path, true, true, true, page_size).map_err(|e| Error::io(&name, e))?;
                Arc::new(dev)
            }
            SwapBacking::Dev(dev) => dev,
        };
        dev.set_len(size).map_err(|e| Error::io(dev.name(), e))?;
        // A swap file may have no holes (swapon refuses them): allocate
        // it all now, so a full disk is ENOSPC here, not a page that
        // cannot be swapped out later. Devices that cannot reserve skip it.
        dev.reserve(0, size).map_err(|e| Error::io(dev.name(), e))?;
        Ok(SwapInfo { dev, pages: pages as u32, inner: Mutex::new(SwapInner::new(pages as u32)) })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // Goal: scan_swap_map hands out a free cluster's slots in a run, never
    // one slot twice, every slot before reporting full, and reuses freed
    // slots (lowest_bit/highest_bit stay true bounds).
    #[test]
    fn slots_come_in_runs_and_are_all_used_once() {
        let mut si = SwapInner::new(1024);
        let first: Vec<u32> = (0..300).map(|_| si.scan_swap_map(SWAP_HAS_CACHE).expect("slot")).collect();
        assert!(first.windows(2).take(255).all(|w| w[1] == w[0] + 1), "a cluster's slots in a run");
        let mut seen = std::collections::HashSet::new();
        for &s in &first {
            assert!(seen.insert(s), "slot {s} twice");
        }
        while let Some(s) = si.scan_swap_map(1) {
            assert!(seen.insert(s), "slot {s} twice");
        }
        assert_eq!(seen.len(), 1024);
        assert_eq!(si.inuse_pages, 1024);
        // Free every other slot of the first run, then take them again.
        for &s in first.iter().step_by(2) {
            assert_eq!(si.swap_entry_free(s, SWAP_HAS_CACHE), 0);
        }
        let freed = first.iter().step_by(2).count();
        let mut again = Vec::new();
        while let Some(s) = si.scan_swap_map(1) {
            again.push(s);
        }
        assert_eq!(again.len(), freed);
        assert!(again.iter().all(|s| first.contains(s)));
    }

    // Goal: a folio's slots are a free run aligned to its size, never a
    // used slot, the bounds stay true, and a device with no free aligned
    // run refuses though it has free slots enough.
    #[test]
    fn folio_slots_are_an_aligned_free_run() {
        let mut si = SwapInner::new(64);
        let single = si.scan_swap_map(SWAP_HAS_CACHE).expect("slot");
        assert_eq!(single, 0);
        let a = si.get_swap_pages(16).expect("run");
        assert_eq!(a, 16, "the run holding slot 0 is not free");
        let b = si.get_swap_pages(16).expect("run");
        assert_eq!(b, 32);
        assert_eq!(si.inuse_pages, 33);
        assert!((a..a + 16).chain(b..b + 16).all(|o| si.map[o as usize] == SWAP_HAS_CACHE));
        // One used slot in each remaining run: no run of 16 is free.
        let used = si.get_swap_pages(16).expect("run");
        assert_eq!(used, 48);
        for o in (used + 1)..(used + 16) {
            si.swap_entry_free(o, SWAP_HAS_CACHE);
        }
        assert_eq!(si.get_swap_pages(16), None, "28 free slots but no free aligned run");
        assert_eq!(si.get_swap_pages(8), Some(8));
        assert_eq!(si.inuse_pages, 42);
        // Single slots still come from the bounds, which stay true.
        let mut rest = Vec::new();
        while let Some(s) = si.scan_swap_map(1) {
            rest.push(s);
        }
        assert_eq!(rest.len(), 22);
        assert!(rest.iter().all(|&s| (1..8).contains(&s) || (49..64).contains(&s)));
    }

    #[test]
    fn counts_and_cache_hold_a_slot_until_both_go() {
        let mut si = SwapInner::new(16);
        let s = si.scan_swap_map(SWAP_HAS_CACHE).expect("slot");
        si.swap_duplicate(s);
        assert_eq!(si.swap_count(s), 1);
        assert_eq!(si.swap_entry_free(s, SWAP_HAS_CACHE), 1);
        assert_eq!(si.inuse_pages, 1);
        si.set_has_cache(s);
        assert_eq!(si.swap_entry_free(s, 1), SWAP_HAS_CACHE);
        assert_eq!(si.swap_entry_free(s, SWAP_HAS_CACHE), 0);
        assert_eq!(si.inuse_pages, 0);
    }
}

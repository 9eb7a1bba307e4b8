//! Readahead (mm/readahead.c): per-handle state and the on-demand
//! algorithm.
//!
//! Each open handle has a `file_ra_state`: the current window
//! `[start, start + size)`, of which the last `async_size` pages are the
//! asynchronous part; the page at `start + size - async_size` carries
//! PG_readahead. A cache miss runs *synchronous* readahead: a sequential
//! miss (the read continues `prev_pos`) or a read at offset 0 opens an
//! initial window sized from the request (`get_init_ra_size`); a random miss
//! reads just what was asked. Hitting a PG_readahead page runs
//! *asynchronous* readahead: the window moves forward and grows
//! (`get_next_ra_size`: x4 while small, then x2, capped at `ra_pages`), so a
//! sequential reader finds its next pages already cached.
//!
//! I/O: the pages of a window are inserted locked and not uptodate. The
//! part before the PG_readahead marker (what the reader needs now) is read
//! by the calling thread; the part from the marker on, and the whole of an
//! asynchronous window, is queued to the I/O workers (bio.rs) and the call
//! returns, so the device reads the next window while the reader copies
//! this one. Readers of a page in flight wait on its lock, as they wait on
//! a locked folio in the kernel. With `io_threads = 0` every run is read by
//! the caller (the synchronous readahead of earlier pcache). An
//! asynchronous run goes to the device as soon as it is one request long,
//! not when the whole window is inserted. A device's window is at least
//! `Tunables::ra_device_requests` of its largest requests (deviation: the
//! kernel uses read_ahead_kb alone), so that many requests are at the
//! device while the reader copies the window before.
//!
//! Memory: each window asks kswapd to keep two windows' worth free
//! above the high watermark (vmscan.rs `wakeup_kswapd_ra`), so that in a
//! stream kswapd does the reclaim on another CPU. Whatever is still short
//! when a window's pages are allocated, below the low watermark, is
//! reclaimed by the reader in one pass (`ra_make_room`), as
//! the kernel's readahead allocation may reclaim; readahead itself stops
//! at the min watermark, which without that pass cut a device-sized window
//! to the few frames between the watermarks. A window's frames are taken
//! together and handed to its pages in address order (`ra_alloc_frames`),
//! so its requests cover a few long runs of memory rather than a page
//! each, as the kernel's large folios do.
//!
//! Off the reader: an asynchronous window the
//! reader's `read` hits the marker of, on a device that reports queue
//! limits, is allocated, inserted and submitted by the cache's readahead
//! thread (`RaQueue`, started with the first such window), so the reader
//! only queues it and goes back to copying. The kernel inserts it in the
//! reader's context; its large folios make that a few dozen insertions,
//! where here a 16 MiB window is 4,096. A reader that misses inside a
//! window still queued runs it itself; one still being inserted, it waits
//! for (the job's own lock and condition variable, no new lock-free state).
//!
//! The state is a handful of relaxed atomics, not locked: like the kernel's
//! `struct file_ra_state`, concurrent users of one handle may race on it
//! harmlessly.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::bio::ReadRequest;
use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::*;
use crate::tunables::FolioRamp;
use crate::vmstat::Item;

/// FMODE_RANDOM: no readahead (POSIX_FADV_RANDOM).
pub const FMODE_RANDOM: u32 = 1 << 0;
/// FMODE_NOREUSE: reads through this handle do not mark pages accessed.
pub const FMODE_NOREUSE: u32 = 1 << 1;

/// struct file_ra_state, plus the handle's fmode bits.
pub struct FileRaState {
    pub start: AtomicU64,
    pub size: AtomicU32,
    pub async_size: AtomicU32,
    pub ra_pages: AtomicU32,
    /// The byte after the last one read through this handle (u64::MAX: none).
    pub prev_pos: AtomicU64,
    /// Mohr's counter of repeated hits on the same page (the every-32nd re-mark rule).
    pub repeat_hits: AtomicU32,
    pub mode: AtomicU32,
    /// The folio order of the last window (6.16's `ra->order`): the next
    /// asynchronous window's starts two above it (`FolioRamp::Linux6`).
    pub order: AtomicU32,
    /// Asynchronous windows queued to the readahead thread from this
    /// handle and not known to be inserted: the reader can hit the marker
    /// on a window's first page, and queue the next, while the thread is
    /// still inserting the rest of that window.
    pending: Mutex<Vec<Arc<RaJob>>>,
}

impl FileRaState {
    pub fn new(ra_pages: u32) -> FileRaState {
        FileRaState {
            start: AtomicU64::new(0),
            size: AtomicU32::new(0),
            async_size: AtomicU32::new(0),
            ra_pages: AtomicU32::new(ra_pages),
            prev_pos: AtomicU64::new(u64::MAX),
            repeat_hits: AtomicU32::new(0),
            mode: AtomicU32::new(0),
            order: AtomicU32::new(0),
            pending: Mutex::new(Vec::new()),
        }
    }

    #[inline]
    pub fn noreuse(&self) -> bool {
        self.mode.load(Ordering::Relaxed) & FMODE_NOREUSE != 0
    }

    fn window(&self) -> (u64, u64, u64) {
        (
            self.start.load(Ordering::Relaxed),
            self.size.load(Ordering::Relaxed) as u64,
            self.async_size.load(Ordering::Relaxed) as u64,
        )
    }

    fn set_window(&self, start: u64, size: u64, async_size: u64) {
        self.start.store(start, Ordering::Relaxed);
        self.size.store(size as u32, Ordering::Relaxed);
        self.async_size.store(async_size as u32, Ordering::Relaxed);
    }
}

/// get_init_ra_size: the first window for a request of `size` pages.
pub fn get_init_ra_size(size: u64, max: u64) -> u64 {
    let newsize = size.max(1).next_power_of_two();
    let r = if newsize <= max / 32 {
        newsize * 4
    } else if newsize <= max / 4 {
        newsize * 2
    } else {
        max
    };
    r.min(max).max(1)
}

/// get_next_ra_size: ramp the window up.
pub fn get_next_ra_size(cur: u64, max: u64) -> u64 {
    let r = if cur < max / 16 { 4 * cur } else { 2 * cur };
    r.min(max).max(1)
}

/// page_cache_ra_order's folio order for a window of `size` pages whose
/// marker folio (the one that triggered it; 0 for a synchronous window)
/// had order `prev`: two orders up from it, at most `max` and at most
/// ilog2 of the window, so the order grows with the window as a stream
/// goes on. A window under 4 pages reads single pages (`None`), as does
/// `max` 0: `folio_order_max = 0` is today's behaviour.
pub(crate) fn ra_folio_order(size: u64, prev: u32, max: u32) -> Option<u32> {
    if max == 0 || size < 4 {
        return None;
    }
    let order = if prev < max { prev + 2 } else { prev };
    Some(order.min(max).min(size.ilog2()))
}

/// The folios of a window `[index, index + size)`, at most `order` each
/// (`ra_folio_order`): page_cache_ra_order's loop. A folio is aligned to
/// its size in the file, so an unaligned index takes the order its
/// alignment allows first (`__ffs(index)`), and none reaches past `limit`
/// (the window's last page, or the file's last): there the order drops
/// until it fits. Yields (first index, order).
pub(crate) fn ra_folios(index: u64, size: u64, limit: u64, order: u32) -> impl Iterator<Item = (u64, u32)> {
    let limit = limit.min(index.saturating_add(size).saturating_sub(1));
    let mut next = index;
    std::iter::from_fn(move || {
        if size == 0 || next > limit {
            return None;
        }
        let mut o = order.min(next.trailing_zeros());
        while o > 0 && next + (1u64 << o) - 1 > limit {
            o -= 1;
        }
        let at = next;
        next += 1u64 << o;
        Some((at, o))
    })
}

/// The largest window taken from a device, 16 MiB (a device may advertise
/// any read_ahead_kb; the kernel's default maximum for `blockdev --setra`
/// users is far above what a page cache of this size should read ahead).
const MAX_DEV_RA_BYTES: u64 = 16 << 20;

impl Cache {
    /// A device's window and largest request in pages, from its queue
    /// limits (the kernel's `disk_update_readahead` reads them into the
    /// bdi): at most 16 MiB, and at most an eighth of the cache, so one
    /// reader's window never crowds out the rest. (0, 0) when the device
    /// says nothing or `Tunables::ra_from_device` is off.
    ///
    /// Deviation: the window is at least `Tunables::ra_device_requests`
    /// of the device's largest requests. The asynchronous window is what
    /// the device has to work on while the reader copies the window
    /// before it; the kernel's read_ahead_kb (8 MiB on the project's disk:
    /// two 4 MiB requests) left the disk idle between windows whenever a
    /// completion or the reader was late to run (a sequential read's
    /// requests, traced: no request in flight most of the time).
    pub(crate) fn device_ra_pages(&self, dev: &dyn crate::backing::BackingDev) -> (u32, u32) {
        let Some(l) = dev.queue_limits().filter(|_| self.config.tunables.ra_from_device) else {
            return (0, 0);
        };
        let cap = (MAX_DEV_RA_BYTES >> self.page_shift()).min(self.arena.nr_pages / 8).max(1);
        let pages = |kb: u64| ((kb * 1024) >> self.page_shift()).min(cap) as u32;
        let deep = l.max_sectors_kb.saturating_mul(self.config.tunables.ra_device_requests as u64);
        (pages(l.read_ahead_kb.max(deep)), pages(l.max_sectors_kb))
    }

    /// The window a new handle on `inode` starts with (file_ra_state_init):
    /// the device's own where it reports one, else the cache-wide
    /// `read_ahead_kb`. A cache-wide 0 turns readahead off everywhere.
    pub fn default_ra_pages(&self, inode: &Inode) -> u32 {
        let global = self.sysctl.ra_pages();
        if global == 0 || inode.dev_ra_pages == 0 {
            global
        } else {
            inode.dev_ra_pages
        }
    }

    /// page_cache_sync_readahead: a miss at `index` for a read of `req` pages.
    pub fn page_cache_sync_readahead(&self, inode: &Inode, ra: &FileRaState, index: u64, req: u64) {
        // A miss inside a window queued to the readahead thread is that
        // window late, not a new stream.
        if self.ra_wait_pending(inode, ra, index) {
            return;
        }
        if ra.mode.load(Ordering::Relaxed) & FMODE_RANDOM != 0 {
            self.force_page_cache_readahead(inode, index, req);
            return;
        }
        if ra.ra_pages.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.ondemand_readahead(inode, ra, false, false, index, req, 0);
    }

    /// page_cache_async_readahead: the reader hit the PG_readahead marker.
    pub fn page_cache_async_readahead(&self, inode: &Inode, ra: &FileRaState, pfn: Pfn, index: u64, req: u64) {
        self.async_readahead(inode, ra, pfn, index, req, false);
    }

    /// page_cache_async_readahead for `read` (filemap_read): the window
    /// may go to the readahead thread. A fault's readahead stays on the
    /// faulting thread, which should not wait on another.
    pub fn page_cache_async_readahead_file(&self, inode: &Inode, ra: &FileRaState, pfn: Pfn, index: u64, req: u64) {
        self.async_readahead(inode, ra, pfn, index, req, true);
    }

    fn async_readahead(&self, inode: &Inode, ra: &FileRaState, pfn: Pfn, index: u64, req: u64, defer: bool) {
        if ra.ra_pages.load(Ordering::Relaxed) == 0 {
            return;
        }
        // The marker is on a folio's head; the window's expected start is
        // the folio's index, and its order feeds the next window's.
        let head = self.arena.compound_head(pfn);
        let page = self.page(head);
        if page.test(PG_WRITEBACK) {
            return;
        }
        page.clear(PG_READAHEAD, &self.vm);
        let order = page.folio_order();
        let index = if order > 0 { index & !((1u64 << order) - 1) } else { index };
        self.ondemand_readahead(inode, ra, true, defer, index, req, order);
    }

    /// ondemand_readahead: decide the window and read it (`defer`: an
    /// asynchronous window may be handed to the readahead thread).
    #[allow(clippy::too_many_arguments)]
    fn ondemand_readahead(
        &self,
        inode: &Inode,
        ra: &FileRaState,
        hit_marker: bool,
        defer: bool,
        index: u64,
        req: u64,
        prev_order: u32,
    ) {
        let mut max = ra.ra_pages.load(Ordering::Relaxed) as u64;
        // A read larger than the window may take up to the device's
        // largest request in one go (4.10's bdi->io_pages).
        let io_pages = inode.dev_io_pages as u64;
        if req > max && io_pages > max {
            max = req.min(io_pages);
        }
        let (start, size, async_size) = ra.window();
        let initial = |ra: &FileRaState| {
            let size = get_init_ra_size(req, max);
            let async_size = if size > req { size - req } else { size };
            ra.set_window(index, size, async_size);
        };
        // A large folio's marker can sit on the folio at 0 (the mark
        // rounded down to the folio): that is the window's marker hit,
        // which 6.x's page_cache_async_ra ramps, not a new stream.
        if index == 0 && !(hit_marker && prev_order > 0) {
            initial(ra);
        } else if size > 0 && (index == ra_mark(start, size, async_size, prev_order) || index == start + size) {
            // Sequential: the expected next window.
            let next = get_next_ra_size(size, max);
            ra.set_window(start + size, next, next);
        } else if hit_marker {
            // A marker hit without matching state (interleaved readers): find
            // the first page not cached and ramp from there.
            let mut first_missing = index + 1;
            while first_missing <= index + max && entry_present(inode, first_missing) {
                first_missing += 1;
            }
            if first_missing - index > max {
                return;
            }
            let size = get_next_ra_size(first_missing - index + req, max);
            ra.set_window(first_missing, size, size);
        } else if req > max {
            initial(ra);
        } else {
            let prev_pos = ra.prev_pos.load(Ordering::Relaxed);
            let prev_index = if prev_pos == u64::MAX { u64::MAX } else { prev_pos >> self.page_shift() };
            if prev_index != u64::MAX && index.wrapping_sub(prev_index) <= 1 {
                // A sequential cache miss.
                initial(ra);
            } else {
                // Random: read just what was asked, with no window.
                self.do_page_cache_ra(inode, index, req, 0);
                return;
            }
        }
        let (mut start, mut size, mut async_size) = ra.window();
        // Merge the first async window into a fresh sync one.
        if !hit_marker && index == start && size == async_size {
            async_size = get_next_ra_size(size, max);
            size += async_size;
            ra.set_window(start, size, async_size);
        }
        if start < index && !hit_marker {
            start = index;
        }
        // page_cache_ra_order: the window's folio order (0 without large
        // folios, and for windows under 4 pages).
        // The order the window ramps from: the marker folio's (5.18), or
        // the last window's (6.16: a window's first folio, which carries
        // the marker, is cut small where the window starts unaligned, so
        // the marker's order alone would hold the ramp at its alignment).
        let prev = match self.config.tunables.folio_ramp {
            FolioRamp::Linux6 if hit_marker => ra.order.load(Ordering::Relaxed).max(prev_order),
            _ => prev_order,
        };
        let order = ra_folio_order(size, prev, self.folio_order_cap(inode)).unwrap_or(0);
        ra.order.store(order, Ordering::Relaxed);
        if defer && hit_marker && size == async_size && self.ra_queue_window(inode, ra, start, size, order) {
            return;
        }
        self.page_cache_ra_order(inode, start, size, async_size, order);
    }

    /// The largest folio order readahead allocates for `inode`:
    /// `folio_order_max`, but (deviations) a folio is at most 1/32 of the
    /// cache, so the folios a few readers hold while they copy, lock for
    /// their reads or have isolated for reclaim cannot take all of a small
    /// cache (three readers of a 32-frame cache failed with ENOMEM at 1/16,
    /// never with single pages), and at most one read request
    /// where the device or `max_read_request_kb` sets one, since a request
    /// never ends inside a folio (bio.rs `split_read_front`).
    pub(crate) fn folio_order_cap(&self, inode: &Inode) -> u32 {
        let t = &self.config.tunables;
        let mut cap = (self.arena.nr_pages / 32).max(1);
        if t.max_read_request_kb > 0 || inode.dev_io_pages > 0 {
            cap = cap.min(self.read_request_pages(inode) as u64);
        }
        self.page_cache_order_max().min(cap.ilog2())
    }

    /// The largest page-cache folio order in effect: `folio_order_max`,
    /// or 0 while a plug-in policy (one `Tunables::policy` names, or the
    /// embedder's own) or the admission window holds the pages.
    pub(crate) fn page_cache_order_max(&self) -> u32 {
        if self.policy.active() {
            return 0;
        }
        self.config.tunables.page_cache_order_max()
    }

    /// page_cache_ra_order: read the window `[index, index + nr)`, its
    /// last `lookahead` pages asynchronously, in folios of at most
    /// `order` (`ra_folios`: aligned, none past the window or EOF). A
    /// folio whose range is partly cached, or for which the buddy lists
    /// have no block that large (the kernel's NORETRY allocation, without
    /// draining), is tried again as two halves, down to single pages; so a
    /// fragmented arena reads smaller folios, never fewer pages. Order 0
    /// is `do_page_cache_ra`, exactly as before large folios.
    pub(crate) fn page_cache_ra_order(&self, inode: &Inode, index: u64, nr: u64, lookahead: u64, order: u32) {
        if order == 0 {
            return self.do_page_cache_ra(inode, index, nr, lookahead);
        }
        self.ra_make_room(inode, index, nr);
        let _inval = inode.invalidate_lock.read();
        let size = inode.size.load(Ordering::Acquire);
        if size == 0 || nr == 0 {
            return;
        }
        let limit = ((size - 1) >> self.page_shift()).min(index + nr - 1);
        // The folio holding the window's async start carries the marker
        // and starts the asynchronous part.
        let mark = if lookahead > 0 { index + nr - lookahead.min(nr) } else { u64::MAX };
        let max_req = self.read_request_pages(inode);
        let min = self.arena.watermarks.min;
        let mut run: Vec<Pfn> = Vec::with_capacity(nr.min(1024) as usize);
        let mut run_start = index;
        let mut is_async = false;
        // Folios still to read, the lowest index on top; each split
        // pushes its halves, so the stack stays in index order and holds
        // at most `order` more entries than the window's folios.
        let mut todo: Vec<(u64, u32)> = ra_folios(index, nr, limit, order).collect();
        todo.reverse();
        while let Some((at, o)) = todo.pop() {
            let n = 1u64 << o;
            let has_mark = (at..at + n).contains(&mark);
            if has_mark {
                // What comes before the marker the caller needs now.
                self.submit_ra_run(inode, run_start, &mut run, false);
                is_async = true;
            }
            let halves = |todo: &mut Vec<(u64, u32)>| {
                todo.push((at + n / 2, o - 1));
                todo.push((at, o - 1));
            };
            if range_present(inode, at, n) {
                self.submit_ra_run(inode, run_start, &mut run, is_async);
                if o > 0 {
                    halves(&mut todo);
                }
                continue;
            }
            // Readahead does not push hard for memory: out of frames (the
            // min watermark reached), the window stops here.
            if self.arena.nr_free_against(min + n) < min + n {
                if o > 0 {
                    halves(&mut todo);
                    continue;
                }
                break;
            }
            let pfn = if o > 0 { self.arena.alloc_large_folio(o as usize) } else { self.arena.alloc() };
            let Some(pfn) = pfn else {
                if o > 0 {
                    self.vm.inc(Item::thp_file_fallback);
                    halves(&mut todo);
                    continue;
                }
                break;
            };
            self.vm.add(Item::pgalloc, n);
            if o > 0 {
                self.vm.inc(Item::thp_file_alloc);
            }
            if has_mark {
                self.page(pfn).set_nonatomic(PG_READAHEAD);
            }
            let Some(page) = self.filemap_add_folio(pfn, o, inode, at) else {
                // Inserted by someone else meanwhile.
                self.put_page(pfn);
                self.submit_ra_run(inode, run_start, &mut run, is_async);
                if o > 0 {
                    halves(&mut todo);
                }
                continue;
            };
            if run.is_empty() {
                run_start = at;
            }
            // Locked until its read completes; every frame goes in the run.
            let head = page.into_raw();
            run.extend(head..head + n as Pfn);
            self.vm.add(Item::pgreadahead, n);
            if is_async && run.len() >= max_req {
                self.submit_ra_run(inode, run_start, &mut run, true);
            }
        }
        self.submit_ra_run(inode, run_start, &mut run, is_async);
    }

    /// force_page_cache_readahead: read `[index, index + nr)` in chunks of
    /// at most the default window, no marker.
    pub fn force_page_cache_readahead(&self, inode: &Inode, index: u64, nr: u64) {
        let chunk = (self.sysctl.ra_pages().max(1)) as u64;
        let mut i = index;
        while i < index + nr {
            let n = chunk.min(index + nr - i);
            self.do_page_cache_ra(inode, i, n, 0);
            i += n;
        }
    }

    /// __do_page_cache_readahead: allocate and insert the missing pages of
    /// `[index, index + nr)` below EOF, mark the page where the async part
    /// starts, and read each contiguous run with one device call.
    pub fn do_page_cache_ra(&self, inode: &Inode, index: u64, nr: u64, lookahead: u64) {
        self.ra_make_room(inode, index, nr);
        let _inval = inode.invalidate_lock.read();
        let size = inode.size.load(Ordering::Acquire);
        if size == 0 || nr == 0 {
            return;
        }
        let end_index = (size - 1) >> self.page_shift();
        // The window's frames, taken up front and handed out lowest first.
        let mut frames = self.ra_alloc_frames(inode, index, nr, end_index).into_iter();
        let mut run: Vec<Pfn> = Vec::with_capacity(nr.min(256) as usize);
        let mut run_start = index;
        // The asynchronous part starts at the marker.
        let async_from = if lookahead > 0 { nr - lookahead.min(nr) } else { nr };
        // An asynchronous run goes to the device as soon as it is one
        // request long, so the device starts on a window's first request
        // while the rest of the window's pages are still being inserted.
        let max_req = self.read_request_pages(inode);
        let mut is_async = false;
        for i in 0..nr {
            let idx = index + i;
            if idx > end_index {
                break;
            }
            if i == async_from {
                self.submit_ra_run(inode, run_start, &mut run, false);
            }
            is_async = i >= async_from;
            if entry_present(inode, idx) {
                self.submit_ra_run(inode, run_start, &mut run, is_async);
                continue;
            }
            // Readahead does not push hard for memory: out of frames (the
            // min watermark reached), the window stops here.
            let Some(pfn) = frames.next() else { break };
            if lookahead > 0 && i == nr - lookahead {
                self.page(pfn).set_nonatomic(PG_READAHEAD);
            }
            let Some(page) = self.add_to_page_cache_lru(pfn, inode, idx) else {
                self.put_page(pfn);
                self.submit_ra_run(inode, run_start, &mut run, is_async);
                continue;
            };
            if run.is_empty() {
                run_start = idx;
            }
            // Locked until its read completes (end_read).
            run.push(page.into_raw());
            self.vm.inc(Item::pgreadahead);
            if is_async && run.len() >= max_req {
                self.submit_ra_run(inode, run_start, &mut run, true);
            }
        }
        self.submit_ra_run(inode, run_start, &mut run, is_async);
        // Frames left over (pages another reader inserted meanwhile).
        for pfn in frames {
            self.put_page(pfn);
        }
    }

    /// The frames for the missing pages of `[index, index + nr)` (up to
    /// `end_index`), allocated while more than the min watermark are free,
    /// sorted by address. The free list is a stack: frames come off it in
    /// the reverse of the order reclaim freed them, so a window's frames
    /// allocated one by one run downwards, and a request over them is one
    /// 4 KiB segment per page. Sorted, the frames of a window freed
    /// together run upwards, contiguous within the arena's huge pages, so
    /// the host's block layer merges them into a few large segments, as
    /// it does for the kernel's large folios (page_cache_ra_order). On a
    /// virtio disk a request's cost grows with its segments: O_DIRECT
    /// into 4 KiB-page buffers ran at a sixth of the rate into huge-page
    /// buffers (measured; docs/history/decisions.md).
    fn ra_alloc_frames(&self, inode: &Inode, index: u64, nr: u64, end_index: u64) -> Vec<Pfn> {
        let end = index.saturating_add(nr).min(end_index.saturating_add(1));
        let missing = (index..end).filter(|&i| !entry_present(inode, i)).count();
        let mut frames = Vec::with_capacity(missing);
        let min = self.arena.watermarks.min;
        while frames.len() < missing && self.arena.nr_free_against(min) > min {
            let Some(pfn) = self.arena.alloc() else { break };
            frames.push(pfn);
        }
        self.vm.add(Item::pgalloc, frames.len() as u64);
        frames.sort_unstable();
        frames
    }

    /// Free frames for a window before allocating it. Readahead takes
    /// frames only while more than the min watermark are free, and the
    /// watermarks' gap is small beside a device-sized window (for a 128 MiB
    /// cache: min 362 pages, high 542, against a 2048-page window), so
    /// without this a window was cut to a few hundred pages, the reader
    /// missed on the rest and restarted from a small synchronous window
    /// (about 1,000 misses in a 1 GiB cold read, each read by the reader).
    /// The kernel's readahead allocates with __GFP_NORETRY, which may
    /// reclaim once; here the window's whole shortfall is reclaimed in one
    /// pass (one scan control for all of it, not a page at a time), after
    /// kswapd is woken. The pages it finds are, in a stream, the used-once
    /// pages of windows the reader is done with.
    fn ra_make_room(&self, inode: &Inode, index: u64, nr: u64) {
        let size = inode.size.load(Ordering::Acquire);
        if size == 0 || nr == 0 {
            return;
        }
        let wm = self.arena.watermarks;
        let end = (index + nr).min(((size - 1) >> self.page_shift()) + 1);
        let missing = (index..end).filter(|&i| !entry_present(inode, i)).count() as u64;
        // kswapd frees the next windows' room ahead of the reader; the
        // reader reclaims itself only what is still short.
        self.wakeup_kswapd_ra(missing);
        let need = missing + wm.low;
        if self.arena.nr_free_against(need) >= need {
            return;
        }
        self.flush_pending_frees();
        let free = self.arena.nr_free_against(need);
        if free < need {
            self.reclaim_pages(need - free, false);
            // Reclaimed frames wait on the pending list (hazard.rs).
            self.flush_pending_frees();
        }
    }

    /// Read a run of locked new pages, unlock them and drop our references:
    /// here, or (`is_async`) on an I/O worker. Errors stay on the pages
    /// (PG_error, not uptodate); a reader that needs one retries the read
    /// itself and reports the error.
    fn submit_ra_run(&self, inode: &Inode, first: u64, run: &mut Vec<Pfn>, is_async: bool) {
        if run.is_empty() {
            return;
        }
        let pages = std::mem::take(run);
        // As readahead_folio does, the submitter's references go now: a
        // locked page in the page cache stays (its removal takes the page
        // lock), and no reference outlives the read to keep a page the
        // reader has done with from being dropped or reclaimed. One per
        // folio: a large folio's tails are in the run for the I/O only.
        if self.page_cache_order_max() == 0 {
            self.release_pages(&pages);
        } else {
            let heads: Vec<Pfn> = pages.iter().copied().filter(|&p| !self.page(p).is_tail()).collect();
            self.release_pages(&heads);
        }
        if is_async {
            if let Some(inode) = self.inode_by_id(inode.id) {
                self.submit_read(ReadRequest { inode, first, pages });
                return;
            }
        }
        self.end_page_read(inode, first, &pages);
    }
}

/// Where a queued window is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum JobState {
    Queued,
    Running,
    Done,
}

/// One asynchronous window for the readahead thread: what
/// `do_page_cache_ra` would have been called with, and who has it. A job
/// holds a handle on its inode (`handles`), as the kernel's readahead runs
/// under the reader's open file, so the file cannot be evicted, and its id
/// reused, under the window's insertion; whoever claims the job drops it.
pub(crate) struct RaJob {
    inode: Arc<Inode>,
    start: u64,
    nr: u64,
    /// The window's folio order (page_cache_ra_order).
    order: u32,
    state: Mutex<JobState>,
    done: Condvar,
}

impl RaJob {
    /// Take the job to run it: only one of the thread and the reader does.
    fn claim(&self) -> bool {
        let mut st = self.state.lock();
        let mine = *st == JobState::Queued;
        if mine {
            *st = JobState::Running;
        }
        mine
    }

    fn is_done(&self) -> bool {
        *self.state.lock() == JobState::Done
    }

    /// Wait until whoever claimed it has inserted and submitted it. A
    /// claimed job always ends (`FinishJob`); the bound is only a re-check.
    fn wait_done(&self) {
        let mut st = self.state.lock();
        while *st != JobState::Done {
            self.done.wait_for(&mut st, Duration::from_millis(100));
        }
    }
}

/// Marks a job done when its runner leaves, however it leaves, so that a
/// reader waiting for it cannot wait forever.
struct FinishJob<'a>(&'a RaJob);

impl Drop for FinishJob<'_> {
    fn drop(&mut self) {
        *self.0.state.lock() = JobState::Done;
        self.0.done.notify_all();
    }
}

/// Windows queued at most: one per stream is the usual (a stream's next
/// window is queued only once this one's marker is inserted); past this
/// the reader inserts its window itself, as before.
const RA_QUEUE_DEPTH: usize = 16;

#[derive(Default)]
struct RaJobs {
    jobs: VecDeque<Arc<RaJob>>,
    started: bool,
    closed: bool,
}

/// The readahead thread's queue (`pcache-ra`, started by the first window
/// queued, joined at shutdown).
#[derive(Default)]
pub struct RaQueue {
    jobs: Mutex<RaJobs>,
    cv: Condvar,
}

impl Cache {
    /// Stop queueing windows and let the readahead thread leave; windows
    /// still queued are dropped (readahead is a hint: their pages were
    /// never inserted, and a reader finds its page missing and reads it),
    /// each claimed so that no reader runs it later, and its inode handle
    /// given back.
    pub(crate) fn ra_queue_close(&self) {
        let dropped = {
            let mut q = self.ra_queue.jobs.lock();
            q.closed = true;
            std::mem::take(&mut q.jobs)
        };
        self.ra_queue.cv.notify_all();
        for job in dropped {
            self.ra_job_cancel(&job);
        }
    }

    /// Drop a job nobody has started: claim it (the thread then skips it),
    /// give back its handle, mark it done. False if someone else runs it.
    fn ra_job_cancel(&self, job: &RaJob) -> bool {
        if !job.claim() {
            return false;
        }
        let _done = FinishJob(job);
        self.ra_job_put(&job.inode);
        true
    }

    /// Give back a job's handle on its inode, as closing a `File` does.
    fn ra_job_put(&self, inode: &Arc<Inode>) {
        if inode.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if inode.unlinked.load(Ordering::Acquire) {
                self.evict_inode(inode);
            } else {
                self.iput(inode);
            }
        }
    }

    /// Hand the asynchronous window `[start, start + nr)` (marker on its
    /// first page) to the readahead thread. False, and nothing queued,
    /// when it should be read here: no I/O threads (synchronous I/O), the
    /// tunable off, a device reporting no queue limits (a memory device:
    /// small windows whose insertion costs less than the hand-off), the
    /// queue full or closed.
    fn ra_queue_window(&self, inode: &Inode, ra: &FileRaState, start: u64, nr: u64, order: u32) -> bool {
        let t = &self.config.tunables;
        if !t.ra_async_thread || t.io_threads == 0 || inode.dev_io_pages == 0 || self.shutting_down() {
            return false;
        }
        let Some(owner) = self.inode_by_id(inode.id) else { return false };
        // The reader's own handle is open, so the count is not 0 here and
        // the inode cannot be freed between the lookup and this.
        owner.handles.fetch_add(1, Ordering::AcqRel);
        let job = Arc::new(RaJob {
            inode: owner,
            start,
            nr,
            order,
            state: Mutex::new(JobState::Queued),
            done: Condvar::new(),
        });
        // The handle knows the job before the thread can see it, so a
        // reader that gets there first always finds it.
        {
            let mut p = ra.pending.lock();
            p.retain(|j| !j.is_done());
            p.push(job.clone());
        }
        let queued = {
            let mut q = self.ra_queue.jobs.lock();
            if q.closed || q.jobs.len() >= RA_QUEUE_DEPTH || !(q.started || self.start_ra_thread()) {
                false
            } else {
                q.started = true;
                q.jobs.push_back(job);
                true
            }
        };
        if !queued {
            let mut p = ra.pending.lock();
            if let Some(at) = p.iter().position(|j| j.start == start && j.inode.id == inode.id) {
                let job = p.swap_remove(at);
                drop(p);
                // Not visible to the thread: ours to give back.
                self.ra_job_cancel(&job);
            }
            return false;
        }
        self.ra_queue.cv.notify_one();
        true
    }

    /// Start the readahead thread; whether it started.
    fn start_ra_thread(&self) -> bool {
        let Some(cache) = self.arc() else { return false };
        match std::thread::Builder::new().name("pcache-ra".into()).spawn(move || cache.ra_thread()) {
            Ok(h) => {
                self.kthread_add(h);
                true
            }
            Err(_) => false,
        }
    }

    /// The readahead thread: run queued windows until the cache shuts down.
    fn ra_thread(self: Arc<Self>) {
        loop {
            let job = {
                let mut q = self.ra_queue.jobs.lock();
                loop {
                    if q.closed || self.shutting_down() {
                        return;
                    }
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    self.ra_queue.cv.wait_for(&mut q, Duration::from_millis(100));
                }
            };
            if job.claim() {
                self.ra_run_job(&job, Item::ra_async_thread);
            }
        }
    }

    /// Insert and submit a claimed window, give back its handle on the
    /// inode, then mark it done: a reader that waited for the job and
    /// then closes and unlinks the file finds no handle but its own, so
    /// the file's pages go with its last close, as with a window the
    /// reader inserted itself.
    fn ra_run_job(&self, job: &RaJob, item: Item) {
        let _done = FinishJob(job);
        self.page_cache_ra_order(&job.inode, job.start, job.nr, job.nr, job.order);
        // The window's pages sit in this thread's CPU's LRU batch; the
        // thread may not run again for a while, so apply it now
        // (uncounted: a drain an experiment counts per truncate or per
        // reclaim pass is one its caller asked for).
        self.drain_this_cpu();
        self.vm.inc(item);
        self.ra_job_put(&job.inode);
    }

    /// A handle closes: its windows not yet started are dropped (the
    /// thread finds them claimed and skips them), the running ones waited
    /// for. After this no queued window holds the inode for the handle,
    /// so its last close still evicts an unlinked file at once.
    pub(crate) fn ra_forget_pending(&self, ra: &FileRaState) {
        let jobs = std::mem::take(&mut *ra.pending.lock());
        for job in jobs {
            if !self.ra_job_cancel(&job) {
                job.wait_done();
            }
        }
    }

    /// A miss at `index`: if it is inside a window this handle queued and
    /// that is not known to be inserted, run that window here (the thread has not started it) or
    /// wait until the thread has inserted it. True if `index` is then
    /// cached (the caller need not read ahead).
    fn ra_wait_pending(&self, inode: &Inode, ra: &FileRaState, index: u64) -> bool {
        let job = {
            let mut p = ra.pending.lock();
            p.iter()
                .position(|j| j.inode.id == inode.id && (j.start..j.start + j.nr).contains(&index))
                .map(|at| p.swap_remove(at))
        };
        let Some(job) = job else { return false };
        if job.claim() {
            self.ra_run_job(&job, Item::ra_async_reader);
        } else {
            self.vm.inc(Item::ra_async_waited);
            job.wait_done();
        }
        entry_present(inode, index)
    }
}

fn entry_present(inode: &Inode, index: u64) -> bool {
    crate::pagetree::entry_pfn(inode.tree.load(index)).is_some()
}

/// Whether any page of `[index, index + n)` is cached.
fn range_present(inode: &Inode, index: u64, n: u64) -> bool {
    if n == 1 {
        return entry_present(inode, index);
    }
    let mut found = false;
    inode.tree.for_each(index, index + n, None, &mut |_, e| {
        found = crate::pagetree::entry_pfn(e).is_some();
        !found
    });
    found
}

/// The index where a window's asynchronous part starts, rounded down to
/// the marker folio's start (`order`): the index a reader hitting the
/// marker reports (ondemand_readahead's `expected`).
fn ra_mark(start: u64, size: u64, async_size: u64, order: u32) -> u64 {
    (start + size - async_size) & !((1u64 << order) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the order grows by two per window from the marker's, capped by
    // the maximum and by the window's size; small windows and a maximum of
    // 0 read single pages.
    #[test]
    fn ra_folio_order_ramps_with_the_window() {
        assert_eq!(ra_folio_order(32, 0, 9), Some(2), "a synchronous window starts at order 2");
        assert_eq!(ra_folio_order(128, 2, 9), Some(4));
        assert_eq!(ra_folio_order(512, 8, 9), Some(9), "capped at the maximum");
        assert_eq!(ra_folio_order(512, 9, 9), Some(9));
        assert_eq!(ra_folio_order(16, 6, 9), Some(4), "capped at ilog2 of the window");
        assert_eq!(ra_folio_order(3, 0, 9), None, "under 4 pages");
        assert_eq!(ra_folio_order(1024, 4, 0), None, "folio_order_max 0");
    }

    // Goal: a window decomposes into folios aligned to their size, none
    // past the limit, covering every page once: an aligned window in
    // folios of the full order; an unaligned start climbing by alignment;
    // an end cut by EOF stepping down.
    #[test]
    fn ra_folios_align_and_stop_at_the_limit() {
        let all = |i, n, l, o| ra_folios(i, n, l, o).collect::<Vec<_>>();
        assert_eq!(all(64, 64, u64::MAX, 4), vec![(64, 4), (80, 4), (96, 4), (112, 4)]);
        assert_eq!(all(5, 11, u64::MAX, 3), vec![(5, 0), (6, 1), (8, 3)]);
        assert_eq!(all(0, 32, 12, 4), vec![(0, 3), (8, 2), (12, 0)], "EOF at page 12");
        assert_eq!(all(7, 0, u64::MAX, 4), vec![]);
        for (i, n, l, o) in [(3u64, 1000u64, 900u64, 9u32), (512, 512, u64::MAX, 9), (1, 77, 50, 5), (0, 1, 0, 9)] {
            let mut next = i;
            for (at, ord) in ra_folios(i, n, l, o) {
                assert_eq!(at, next, "gap or overlap");
                assert!(ord <= o && at % (1 << ord) == 0, "({at}, {ord}) unaligned or too large");
                assert!(at + (1 << ord) - 1 <= l.min(i + n - 1), "({at}, {ord}) past the limit");
                next = at + (1 << ord);
            }
            assert_eq!(next, l.min(i + n - 1) + 1, "the window covered");
        }
    }
}

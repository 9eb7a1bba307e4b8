//! Dirty page accounting and writeback (mm/page-writeback.c,
//! fs/fs-writeback.c, lib/errseq.c), in the simple form of the core engine.
//!
//! `set_page_dirty` tags the folio in its tree (PAGECACHE_TAG_DIRTY) and
//! counts its pages globally and per inode. Writeback (`write_cache_pages`)
//! walks the dirty tags in file-offset order, clears PG_dirty and sets
//! PG_writeback folio by folio, and writes each contiguous run with one device
//! call of up to the device's largest request (`write_request_pages`: its
//! max_sectors_kb, 4 MiB on the project's disk), as the kernel's
//! writepages builds one bio across pagevecs until the run breaks or the
//! bio is full. A failed write leaves the pages
//! dirty (their data is never dropped) and records the error in the inode's
//! errseq, which each handle's next fsync reports once.
//!
//! The flusher thread (backing_dev.rs, beside the bdi it serves) wakes
//! every `dirty_writeback_centisecs`, or when woken, and calls
//! `wb_do_writeback` here: it writes inodes dirty for longer than
//! `dirty_expire_centisecs`, and everything while dirty pages exceed the
//! background threshold. The counts it works from are `WbAccounting`'s,
//! written only by this module's `account_*` functions.
//! Writers that push dirty + writeback pages past the dirty limit wait in
//! `balance_dirty_pages` until the flusher brings them back under it.

use crate::mmdebug::{vm_bug_on, vm_bug_on_page};
use crate::sync::atomic::Ordering;
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backing_dev::Bdi;
use crate::error::{Error, Result};
use crate::errseq::{errseq_set, ERRSEQ_ERRNO_MASK};
use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::*;
use crate::pagetree::{entry_order, entry_pfn, MARK_DIRTY};
use crate::vmstat::Item;

/// Dirty pages looked up per walk of the tree's dirty marks (the
/// kernel's pagevec); a run to write spans as many walks as it needs.
pub const WRITEBACK_BATCH: usize = 64;
/// The flusher's backoff on a file whose writeback fails: it grows from
/// the first to the second, doubling at each failure.
const WB_BACKOFF_MIN_MS: u64 = 100;
const WB_BACKOFF_MAX_MS: u64 = 30_000;
/// The longest a writer waits in balance_dirty_pages.
const BALANCE_DIRTY_MAX: Duration = Duration::from_secs(30);
/// How many pages a writer dirties between dirty-limit checks
/// (ratelimit_pages, per thread).
const RATELIMIT_PAGES: u32 = 32;

thread_local! {
    static DIRTIED: Cell<u32> = const { Cell::new(0) };
}

impl Cache {
    /// (background threshold, dirty limit) in pages (global_dirty_limits):
    /// `dirty_bytes` / `dirty_background_bytes` when set, else the ratios of
    /// the dirtyable memory (all frames, as global_dirtyable_memory counts
    /// free plus file pages). The background threshold stays below the
    /// limit, as the kernel keeps it at half when set above.
    pub fn dirty_thresholds(&self) -> (u64, u64) {
        // Read once each: a concurrent sysctl write may land between the
        // loads, and either value of each knob is a valid answer.
        let t = &self.sysctl;
        let (dirty_bytes, dirty_bg_bytes) = (t.dirty_bytes(), t.dirty_background_bytes());
        let dirtyable = self.arena.nr_pages;
        let ps = self.page_size() as u64;
        let limit = if dirty_bytes > 0 { dirty_bytes.div_ceil(ps) } else { dirtyable * t.dirty_ratio() as u64 / 100 }
            .clamp(1, dirtyable);
        let bg = if dirty_bg_bytes > 0 {
            dirty_bg_bytes.div_ceil(ps)
        } else {
            dirtyable * t.dirty_background_ratio() as u64 / 100
        };
        let bg = if bg >= limit { limit / 2 } else { bg };
        (bg.max(1), limit)
    }

    /// set_page_dirty (filemap_dirty_folio): the folio headed by `pfn` (a
    /// single page, or a large folio's head: its dirty state, tag and
    /// accounting are the whole folio's, counted in pages as the kernel's
    /// NR_FILE_DIRTY is) becomes dirty. The folio is locked or otherwise
    /// held against truncation by the caller.
    pub fn set_page_dirty(&self, inode: &Inode, pfn: Pfn) {
        let page = self.page(pfn);
        vm_bug_on_page!(page.is_tail(), page, "set_page_dirty on a tail page");
        if page.test_set(PG_DIRTY, &self.vm) {
            return;
        }
        {
            let g = inode.tree_lock.lock();
            if page.mapping() == inode.id {
                inode.tree.set_mark(page.index(), MARK_DIRTY, &g);
            }
        }
        self.account_page_dirtied(inode, page.folio_nr_pages());
    }

    /// account_page_dirtied (folio_account_dirtied): `nr` pages of `inode`
    /// became dirty (the caller just set their folio's PG_dirty).
    fn account_page_dirtied(&self, inode: &Inode, nr: u64) {
        let was = self.wb.inc_dirty(nr as i64);
        vm_bug_on!(
            was + nr as i64 > self.arena.nr_pages as i64,
            "nr_dirty {} past the {} frames",
            was + nr as i64,
            self.arena.nr_pages
        );
        inode.bdi.account_dirtied(nr as i64);
        if inode.nr_dirty.fetch_add(nr, Ordering::Relaxed) == 0 {
            let _ = inode.dirtied_when.compare_exchange(0, self.now_ms(), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// account_page_cleaned (folio_account_cleaned): the dirty accounting
    /// half of cancel_dirty_page / clear_page_dirty_for_io for a folio of
    /// `nr` pages (the caller cleared its PG_dirty, or is about to).
    fn account_page_cleaned(&self, inode: &Inode, nr: u64) {
        self.wb.dec_dirty(nr as i64);
        inode.bdi.account_cleaned(nr as i64);
        // Release: pairs with dirty_inodes' Acquire, so sync_all that finds
        // this inode clean also sees the writeback counted before it
        // (start_writeback_locked).
        if inode.nr_dirty.fetch_sub(nr, Ordering::Release) == nr {
            inode.dirtied_when.store(0, Ordering::Relaxed);
        }
    }

    /// cancel_dirty_page: a folio leaving the cache (tree lock held) drops
    /// its dirty state and its accounting without being written.
    pub fn cancel_dirty_page(&self, inode: &Inode, pfn: Pfn) {
        let page = self.page(pfn);
        if page.test(PG_DIRTY) {
            self.account_page_cleaned(inode, page.folio_nr_pages());
            page.clear(PG_DIRTY, &self.vm);
        }
    }

    /// clear_page_dirty_for_io + set_page_writeback, page locked.
    pub fn start_writeback_locked(&self, inode: &Inode, page: &LockedPage<'_>) -> bool {
        let pfn = page.pfn();
        // clear_page_dirty_for_io: write-protect mapped entries first, so a
        // write through a mapping faults and waits for this writeback.
        if page.mapped() && self.page_mkclean(inode, page) && !page.test(PG_DIRTY) {
            self.set_page_dirty(inode, pfn);
        }
        if !page.test_clear(PG_DIRTY, &self.vm) {
            return false;
        }
        // PG_writeback and its count before the page leaves the dirty
        // counts (the kernel keeps the dirty tag until the writeback tag is
        // set): otherwise sync_all, between the two, finds the inode clean
        // and no writeback in flight, and returns before this page's write.
        let nr = page.folio_nr_pages();
        page.set(PG_WRITEBACK, &self.vm);
        self.account_page_writeback(inode, nr);
        {
            let g = inode.tree_lock.lock();
            inode.tree.clear_mark(page.index(), MARK_DIRTY, &g);
        }
        self.account_page_cleaned(inode, nr);
        true
    }

    /// The accounting half of set_page_writeback (the caller set
    /// PG_writeback on a locked folio of `nr` pages).
    fn account_page_writeback(&self, inode: &Inode, nr: u64) {
        inode.nr_writeback.fetch_add(nr, Ordering::AcqRel);
        self.wb.inc_writeback(nr as i64);
        inode.bdi.account_writeback_start(nr as i64);
    }

    /// test_clear_page_writeback: clear PG_writeback of a folio of `nr`
    /// pages (waking its waiters) and take it out of the writeback counts.
    fn test_clear_page_writeback(&self, inode: &Inode, page: &Page, nr: u64) {
        vm_bug_on_page!(!page.test(PG_WRITEBACK), page, "end_page_writeback without PG_writeback");
        // The global and device counts go down before the flag clears (a
        // waiter that finds the flag clear never sleeps, so waking after
        // them is not enough): whoever waited for the flag (fsync,
        // sync_all) reads counts that no longer hold the page. The inode's
        // goes down after: `wait_writeback_range` trusts a 0 there to mean
        // no page of the file is under writeback.
        self.wb.dec_writeback(nr as i64);
        inode.bdi.account_writeback_end(nr as i64);
        page.clear_and_wake(PG_WRITEBACK, &self.vm);
        inode.nr_writeback.fetch_sub(nr, Ordering::AcqRel);
    }

    /// end_page_writeback (folio_end_writeback) for the folio headed by
    /// `pfn`, of `nr` pages: on failure it is redirtied so its data is
    /// written again later; a PG_reclaim folio is rotated for reclaim.
    fn end_page_writeback(&self, inode: &Inode, pfn: Pfn, nr: u64, ok: bool) {
        let page = self.page(pfn);
        if ok {
            page.clear(PG_ERROR, &self.vm);
        } else {
            page.set(PG_ERROR, &self.vm);
            if page.mapping() == inode.id {
                self.set_page_dirty(inode, pfn);
            }
        }
        // Rotated before PG_writeback is cleared, as folio_end_writeback
        // does: whoever waited for the writeback (fsync, then a drain of
        // the CPU batches) then finds the page in a rotate batch, not
        // still on its way there.
        if ok && page.test_clear(PG_RECLAIM, &self.vm) {
            self.rotate_reclaimable_page(pfn);
        }
        self.test_clear_page_writeback(inode, page, nr);
        if ok {
            inode.bdi.account_written(nr);
        }
        self.progress.wake_if_waiting();
    }

    /// mapping_set_error: the file's writeback failed. Its pages stay
    /// dirty (nothing is dropped) and the flusher leaves it alone for a
    /// backoff that doubles from `WB_BACKOFF_MIN` to `WB_BACKOFF_MAX`, so a
    /// device that keeps failing costs one attempt per backoff, not a
    /// spinning flusher; the dirty throttle stops counting its pages
    /// (`nr_dirty_failing`), so writers of other files are not held
    /// waiting for pages that cannot move; writers of this file retry its
    /// writeback first and get the error (generic_perform_write).
    fn mapping_set_error(&self, inode: &Inode) {
        let backoff = (inode.wb_backoff_ms.load(Ordering::Relaxed) * 2).clamp(WB_BACKOFF_MIN_MS, WB_BACKOFF_MAX_MS);
        inode.wb_backoff_ms.store(backoff, Ordering::Relaxed);
        let was = inode.wb_retry_at.swap(self.now_ms() + backoff, Ordering::AcqRel);
        if was == 0 {
            self.vm.inc(Item::writeback_error_files);
            self.wb.set_failing(inode.id);
        }
    }

    /// A write of the file succeeded: it is healthy again.
    fn mapping_clear_error(&self, inode: &Inode) {
        if inode.wb_retry_at.load(Ordering::Relaxed) == 0 {
            return;
        }
        inode.wb_retry_at.store(0, Ordering::Release);
        inode.wb_backoff_ms.store(0, Ordering::Relaxed);
        self.wb.clear_failing(inode.id);
    }

    /// Dirty pages of files whose writeback is failing.
    pub fn nr_dirty_failing(&self) -> u64 {
        let ids = self.wb.failing();
        ids.into_iter().filter_map(|id| self.inode_by_id(id)).map(|i| i.nr_dirty.load(Ordering::Relaxed)).sum()
    }

    /// Files with dirty pages now, with their last writeback error.
    pub fn unwritten_files(&self) -> Vec<crate::error::UnwrittenFile> {
        self.dirty_inodes(None)
            .into_iter()
            .map(|i| crate::error::UnwrittenFile {
                name: i.name.clone(),
                pages: i.nr_dirty.load(Ordering::Relaxed),
                errno: (i.wb_err.load(Ordering::Acquire) & ERRSEQ_ERRNO_MASK) as i32,
            })
            .collect()
    }

    /// Write one run of pages under writeback, consecutive from `first`,
    /// ending their writeback and dropping one reference on each folio.
    /// The run lists every frame of its folios (each folio's head first).
    pub fn write_pages_now(&self, inode: &Inode, first: u64, run: &[Pfn]) -> Result<()> {
        let size = inode.size.load(Ordering::Acquire);
        // SAFETY: each page of the run is held (a reference per page) and
        // under PG_writeback, set under its page lock by
        // start_writeback_locked; writers wait for it under the lock.
        let bufs: Vec<&[u8]> = run.iter().map(|&p| unsafe { self.arena.frame_for_io(p) }).collect();
        let res = inode.dev.write_pages(first << self.page_shift(), &bufs, size);
        drop(bufs);
        self.end_write_pages(inode, run, res)
    }

    /// The completion half of `write_pages_now` (the device call done,
    /// the frames no longer borrowed): the error into the file's errseq,
    /// end_page_writeback and a reference dropped on each folio.
    pub(crate) fn end_write_pages(&self, inode: &Inode, run: &[Pfn], res: std::io::Result<()>) -> Result<()> {
        let ok = res.is_ok();
        if let Err(e) = &res {
            errseq_set(&inode.wb_err, e.raw_os_error().unwrap_or(libc::EIO));
            self.mapping_set_error(inode);
        } else {
            self.mapping_clear_error(inode);
            self.vm.add(Item::pgpgout, (run.len() * self.page_size() / 1024) as u64);
            self.vm.add(Item::pgwriteback, run.len() as u64);
        }
        let mut i = 0;
        while i < run.len() {
            let pfn = run[i];
            // The folio's size is read while it is under writeback, which
            // keeps it whole (split_folio refuses it); once that ends, a
            // split may make its tails pages of their own.
            let nr = self.page(pfn).folio_nr_pages();
            vm_bug_on_page!(
                i + nr as usize > run.len() || run[i + nr as usize - 1] != pfn + nr as Pfn - 1,
                self.page(pfn),
                "a write run ends inside a folio"
            );
            self.end_page_writeback(inode, pfn, nr, ok);
            self.put_page(pfn);
            i += nr as usize;
        }
        res.map_err(|e| Error::io(&inode.name, e))
    }

    /// write_cache_pages: write dirty pages of `[start, end)` in file order,
    /// at most `nr_to_write` of them. With `sync`, pages already under
    /// writeback are waited for (data integrity); without, skipped.
    /// Returns pages written and the first error.
    pub fn write_cache_pages(
        &self,
        inode: &Inode,
        start: u64,
        end: u64,
        nr_to_write: u64,
        sync: bool,
    ) -> (u64, Result<()>) {
        self.write_cache_pages_async(inode, start, end, nr_to_write, sync, None)
    }

    /// write_cache_pages with each run submitted to the I/O workers
    /// (bio.rs), so up to the queue's depth of runs are in flight while
    /// the next batch is gathered. The result holds the errors of runs
    /// written inline; queued runs report to `wait` (if given) and to the
    /// file's errseq when they end.
    fn write_cache_pages_async(
        &self,
        inode: &Inode,
        start: u64,
        end: u64,
        nr_to_write: u64,
        sync: bool,
        wait: Option<&Arc<crate::bio::WbWait>>,
    ) -> (u64, Result<()>) {
        // The queue needs the inode by Arc; without it, write inline.
        let owned = self.inode_by_id(inode.id).filter(|i| std::ptr::eq(i.as_ref(), inode));
        // `last`: the final run of a writer that waits for them all.
        let submit = |first: u64, run: &mut Vec<Pfn>, last: bool| -> Result<()> {
            let pages = std::mem::take(run);
            match &owned {
                Some(i) => {
                    let req = crate::bio::WriteRequest { inode: i.clone(), first, pages, wait: wait.cloned() };
                    self.submit_write(req, last)
                }
                None => self.write_pages_now(inode, first, &pages),
            }
        };
        let mut written = 0u64;
        let mut first_err = Ok(());
        let mut next = start;
        let mut batch: Vec<(u64, Pfn)> = Vec::with_capacity(WRITEBACK_BATCH);
        // The run being built: pages under writeback, consecutive from
        // `run_first`, kept across walks and written when it breaks, when
        // the next folio would take it past the device's largest request
        // (a folio larger than that is a run of its own: a request never
        // ends inside a folio), or at the end.
        let cap = self.write_request_pages(inode);
        let mut run: Vec<Pfn> = Vec::with_capacity(cap.min(1024));
        let mut run_first = 0u64;
        while written < nr_to_write && next < end {
            batch.clear();
            // Gather a pagevec-sized batch of dirty-tagged pages in order.
            // A folio is found at its first index, which may lie before
            // `next`; the walk goes on past its last.
            let mut after = next;
            inode.tree.for_each(next, end, Some(MARK_DIRTY), &mut |idx, e| {
                if let Some(pfn) = entry_pfn(e) {
                    batch.push((idx, pfn));
                    after = idx + (1u64 << entry_order(e));
                }
                batch.len() < WRITEBACK_BATCH
            });
            if batch.is_empty() {
                break;
            }
            next = after;
            for &(idx, _) in batch.iter() {
                let Some(found) = self.find_get_page(inode, idx) else {
                    continue;
                };
                // The reference and the lock are the folio's, on its head.
                // A folio read in over `idx` since the walk, starting
                // before it, is not the one the walk found dirty: skipped.
                let pfn = self.arena.compound_head(found);
                let page = self.lock_page(pfn);
                if page.mapping() != inode.id || page.index() != idx || !page.test(PG_DIRTY) {
                    page.unlock();
                    self.put_page(pfn);
                    continue;
                }
                if page.test(PG_WRITEBACK) {
                    if sync {
                        page.wait_on_writeback();
                    } else {
                        page.unlock();
                        self.put_page(pfn);
                        continue;
                    }
                }
                // The folio's size holds while it is locked.
                let nr = page.folio_nr_pages();
                let started = self.start_writeback_locked(inode, &page);
                page.unlock();
                if !started {
                    self.put_page(pfn);
                    continue;
                }
                if !run.is_empty() && (run_first + run.len() as u64 != idx || run.len() + nr as usize > cap) {
                    let r = submit(run_first, &mut run, false);
                    if first_err.is_ok() {
                        first_err = r;
                    }
                }
                if run.is_empty() {
                    run_first = idx;
                }
                run.extend(pfn..pfn + nr as Pfn);
                written += nr;
                if written >= nr_to_write {
                    break;
                }
            }
        }
        if !run.is_empty() {
            let r = submit(run_first, &mut run, wait.is_some());
            if first_err.is_ok() {
                first_err = r;
            }
        }
        (written, first_err)
    }

    /// Wait for writeback of every page of `[start, end)` to end
    /// (filemap_fdatawait_range).
    pub fn wait_writeback_range(&self, inode: &Inode, start: u64, end: u64) {
        // Nothing in flight: no walk (the kernel walks only the writeback
        // tag; this tree has the dirty one only). A page whose writeback
        // starts after this load was not in flight when the wait began.
        if inode.nr_writeback.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut pages = Vec::new();
        inode.tree.for_each(start, end, None, &mut |_, e| {
            if let Some(pfn) = entry_pfn(e) {
                pages.push(pfn);
            }
            true
        });
        for pfn in pages {
            // The page may have been freed and reused; waiting on an
            // unrelated page's writeback is harmless and bounded by its I/O.
            self.page(pfn).wait_on_writeback();
        }
    }

    /// filemap_write_and_wait_range: submit every dirty page of the range,
    /// then wait for all of it, and report the first error of either.
    pub fn write_and_wait_range(&self, inode: &Inode, start: u64, end: u64) -> Result<()> {
        let wait = Arc::new(crate::bio::WbWait::default());
        let (_, res) = self.write_cache_pages_async(inode, start, end, u64::MAX, true, Some(&wait));
        // Ours first (to their end, references dropped), then any other
        // writeback of the range in flight.
        let errno = wait.wait();
        self.wait_writeback_range(inode, start, end);
        res?;
        match errno {
            0 => Ok(()),
            errno => Err(Error::io(&inode.name, std::io::Error::from_raw_os_error(errno))),
        }
    }

    /// balance_dirty_pages_ratelimited: every RATELIMIT_PAGES dirtied pages
    /// per thread, check the thresholds; over background wake the flusher,
    /// over the limit wait for it.
    /// ratelimit_pages: how many pages a thread dirties between checks,
    /// small enough that all CPUs together cannot overshoot the limit by
    /// much (the kernel's dirty_thresh / (cpus * 32), here / (cpus * 8)
    /// since our caches can be tiny).
    fn ratelimit_pages(&self) -> u32 {
        let (_, limit) = self.dirty_thresholds();
        (limit / (self.percpu.len() as u64 * 8)).clamp(1, RATELIMIT_PAGES as u64) as u32
    }

    /// balance_dirty_pages_ratelimited: the caller just dirtied `pages`
    /// pages (a folio's worth or less); every `ratelimit_pages` of them, it
    /// is checked against the dirty limit.
    pub fn balance_dirty_pages_ratelimited(&self, inode: &Inode, pages: u32) -> Result<()> {
        let ratelimit = self.ratelimit_pages();
        let due = DIRTIED.with(|d| {
            let n = d.get().saturating_add(pages);
            d.set(if n >= ratelimit { 0 } else { n });
            n >= ratelimit
        });
        if !due {
            return Ok(());
        }
        self.balance_dirty_pages(inode)
    }

    /// balance_dirty_pages: throttle the writer while dirty + writeback
    /// pages exceed the dirty limit. Bounded: the wait gives up after a
    /// while so a dead device cannot hang writers forever.
    ///
    /// Dirty pages of files whose writeback is failing are not counted:
    /// waiting cannot make them go (their writers get the error instead,
    /// see generic_perform_write). The wait ends when the count falls to
    /// the setpoint, after `BALANCE_DIRTY_MAX`, at shutdown, or when the
    /// thread is interrupted (signal.rs), which is returned as an error.
    pub fn balance_dirty_pages(&self, inode: &Inode) -> Result<()> {
        let (bg, limit) = self.dirty_thresholds();
        let raw = |c: &Cache| c.wb.nr_dirty_and_writeback();
        if raw(self) <= bg {
            return Ok(());
        }
        // Dirty pages over the background threshold: the flushers start
        // (all of them: the threshold is global). Counted without the
        // pages already under writeback, as balance_dirty_pages tests
        // nr_dirty against bg_thresh and the flusher's own test
        // (`wb_do_writeback`, wb_over_bg_thresh) does: a ring for pages
        // in flight wakes a flusher that has nothing to write, at every
        // ratelimit period, and on a busy machine each wake-up costs the
        // writer its CPU.
        if self.wb.nr_dirty() > bg {
            self.wakeup_flusher_threads();
        }
        let nr = |c: &Cache| raw(c).saturating_sub(c.nr_dirty_failing());
        if raw(self) <= limit || nr(self) <= limit {
            return Ok(());
        }
        let started = Instant::now();
        self.vm.inc(Item::balance_dirty_pages_pauses);
        let setpoint = (bg + limit) / 2;
        let mut res = Ok(());
        while nr(self) > setpoint && started.elapsed() < BALANCE_DIRTY_MAX {
            if self.shutting_down() {
                res = Err(Error::ShutDown);
                break;
            }
            if crate::signal::signal_pending() {
                res = Err(Error::Interrupted);
                break;
            }
            inode.bdi.wait.wake();
            self.progress.wait(Duration::from_millis(10));
        }
        self.vm.add(Item::balance_dirty_pages_pause_ns, started.elapsed().as_nanos() as u64);
        res
    }

    /// Reclaim met a dirty page of `inode` at the inactive tail: have its
    /// device's flusher clean pages now, whatever the thresholds.
    pub fn wakeup_flusher_for_reclaim(&self, inode: &Inode) {
        self.vm.inc(Item::flusher_wakeups);
        inode.bdi.reclaim_wanted.store(true, Ordering::Release);
        inode.bdi.wait.wake();
    }

    /// Inodes with dirty pages (of one device, if given), oldest first.
    fn dirty_inodes(&self, bdi: Option<&Bdi>) -> Vec<Arc<Inode>> {
        let mut v =
            self.icache.collect(|i| i.nr_dirty.load(Ordering::Acquire) > 0 && bdi.is_none_or(|b| b.id == i.bdi.id));
        v.sort_by_key(|i| i.dirtied_when.load(Ordering::Relaxed));
        v
    }

    /// The bdi called `name`, registered (and its flusher started) on first
    /// use (backing_dev.rs holds the list and the thread's loop).
    pub fn bdi_get(&self, name: &str) -> Arc<Bdi> {
        let (bdi, new) = self.bdis.register(name);
        if let (true, Some(cache)) = (new, self.arc()) {
            // Without a flusher, writeback still happens in fsync, in
            // balance_dirty_pages' waits and (3.1 mode) in reclaim.
            if let Ok(t) = crate::backing_dev::spawn_flusher(cache, bdi.clone()) {
                self.kthread_add(t);
            }
        }
        bdi
    }

    /// Wake every bdi's flusher (wakeup_flusher_threads).
    pub fn wakeup_flusher_threads(&self) {
        self.vm.inc(Item::flusher_wakeups);
        self.bdis.wake_all();
    }

    /// Per-device counters.
    pub fn bdi_stats(&self) -> Vec<crate::backing_dev::BdiStat> {
        self.bdis.stats()
    }

    /// wait_iff_congested: sleep up to `timeout` for writeback to make
    /// progress, if any device is congested. Returns whether it waited.
    pub fn wait_iff_congested(&self, timeout: std::time::Duration) -> bool {
        if !self.bdis.any_congested() {
            return false;
        }
        self.vm.inc(Item::congestion_waits);
        self.progress.wait(timeout);
        true
    }

    /// One flusher pass for a device (wb_do_writeback): inodes dirty for
    /// longer than dirty_expire, everything while over the background
    /// threshold, and the oldest pages when reclaim asked for them.
    pub fn wb_do_writeback(&self, bdi: &Bdi) {
        let expire_ms = self.sysctl.dirty_expire_centisecs() as u64 * 10;
        let (bg, _) = self.dirty_thresholds();
        let mut for_reclaim = bdi.reclaim_wanted.swap(false, Ordering::AcqRel);
        // Bounded: each round writes something or stops.
        for _round in 0..1024 {
            let now = self.now_ms();
            let mut wrote = 0;
            for inode in self.dirty_inodes(Some(bdi)) {
                let retry_at = inode.wb_retry_at.load(Ordering::Acquire);
                if retry_at != 0 && now < retry_at {
                    // Failing: left alone until its backoff is over.
                    continue;
                }
                let when = inode.dirtied_when.load(Ordering::Relaxed);
                let over_bg = self.wb.nr_dirty() > bg;
                let expired = when != 0 && now.saturating_sub(when) >= expire_ms;
                if over_bg || expired || for_reclaim {
                    wrote += self.write_cache_pages(&inode, 0, u64::MAX, 1024, false).0;
                }
                if self.shutting_down() {
                    return;
                }
            }
            for_reclaim = false;
            let over_bg = self.wb.nr_dirty() > bg;
            if wrote == 0 || !over_bg {
                return;
            }
        }
    }

    /// Write every dirty page of every inode and wait (sync(2)), then wait
    /// for the writeback others started (the flushers' queued runs, whose
    /// inodes are no longer dirty), as sync_inodes_sb's wait_sb_inodes
    /// does: when it returns, nothing written before it is in flight.
    pub fn sync_all(&self) -> Result<()> {
        let mut first = Ok(());
        for inode in self.dirty_inodes(None) {
            let r = self.write_and_wait_range(&inode, 0, u64::MAX);
            if first.is_ok() {
                first = r;
            }
        }
        if self.wb.nr_writeback() > 0 {
            let cached = self.icache.collect(|i| i.nrpages.load(Ordering::Relaxed) > 0);
            for inode in cached {
                self.wait_writeback_range(&inode, 0, u64::MAX);
            }
        }
        first
    }
}

/// The flusher threads' work (backing_dev.rs runs the loop).
impl crate::backing_dev::WbWork for Cache {
    fn should_stop(&self) -> bool {
        self.shutting_down()
    }

    fn dirty_writeback_centisecs(&self) -> u32 {
        self.sysctl.dirty_writeback_centisecs()
    }

    fn wb_do_writeback(&self, bdi: &Bdi) {
        Cache::wb_do_writeback(self, bdi)
    }
}

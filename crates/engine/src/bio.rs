//! Asynchronous I/O submission: the block layer's request queue, reduced
//! to what readahead and writeback need (block/blk-mq.c's submission and
//! completion; mm/readahead.c's `read_pages`, filemap's `end_page_read`;
//! page-writeback.c's writeback bios and `end_page_writeback`).
//!
//! In the kernel, readahead inserts locked, not-uptodate pages into the
//! page cache, submits bios and returns; the reader then waits only on the
//! page it needs (`folio_wait_locked`), and the completion interrupt marks
//! each page uptodate (or not, on error), unlocks it and wakes its
//! waiters. So the device works on the next window while the reader copies
//! the current one. Writeback likewise sets PG_writeback, submits, and goes
//! on to the next batch; completion clears PG_writeback, rotates PG_reclaim
//! pages and records errors in the file's errseq.
//!
//! Here a request is a run of such pages, queued to a small pool of I/O
//! threads (`Tunables::io_threads`) that do the device call and then the
//! completion work. Several files' readers, several windows of one file,
//! and the flushers' batches keep several requests in flight at once.
//! Reads are served before writes (as mq-deadline prefers reads): a reader
//! waits on its page, a flusher on nobody.
//!
//! A readahead run is split into requests of at most the device's
//! max_sectors_kb (1 MiB where it says nothing; the block layer's bio
//! split), so several workers read one window and each piece
//! unlocks its pages when it ends. A reader about to wait on a page whose
//! request is still queued takes that request and does it itself
//! (`run_queued_read`), rather than sleep until a worker is free.
//!
//! Bounded: the queue holds at most `QUEUE_DEPTH` requests. A submitter
//! that finds it full, or finds the pool stopped (no threads configured, or
//! the cache shutting down), does the request itself, as the synchronous
//! path always did; nothing waits for room. Workers leave only when the
//! queue is empty, so every queued page is completed: unlocked (reads) or
//! out of writeback (writes).

use std::collections::VecDeque;
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::Pfn;
use crate::tunables::IoEngine;
use crate::vmstat::Item;

mod uring;

/// Requests queued at most (the block layer's nr_requests, per cache).
pub const QUEUE_DEPTH: usize = 64;
/// Writeback requests queued at most (each up to `write_request_pages`),
/// so a flusher that outruns the device soon writes inline and waits, as
/// the kernel's flusher waits for a request tag.
pub const WRITE_QUEUE_DEPTH: usize = 16;
/// The largest read request where neither the tunable nor the device
/// says: 1 MiB, a common max_sectors_kb.
pub const MAX_READ_REQUEST_BYTES: usize = 1 << 20;
/// The largest write request where neither the tunable nor the device
/// says: 256 KiB, the fixed batch of 64 pages every device had before, so
/// memory devices and FUSE mounts write as they did.
pub const MAX_WRITE_REQUEST_BYTES: usize = 256 << 10;

/// One read: a run of locked, not-uptodate pages of `inode` starting at
/// page `first` (kept in the page cache by their lock, not by a reference).
/// A large folio's frames are all in `pages`, head first; its state (the
/// lock, uptodate) is its head's, so a request is never split inside one.
pub struct ReadRequest {
    pub inode: Arc<Inode>,
    pub first: u64,
    pub pages: Vec<Pfn>,
}

/// One write: a run of pages of `inode` under PG_writeback starting at
/// page `first`, each with a reference the completion drops; `wait`, when
/// a data-integrity writer waits for the batch, receives the first error.
pub struct WriteRequest {
    pub inode: Arc<Inode>,
    pub first: u64,
    pub pages: Vec<Pfn>,
    pub wait: Option<Arc<WbWait>>,
}

/// A data-integrity writer's (fsync, sync_file_range) hold on its queued
/// writes: how many have not completed (device call, end_page_writeback
/// and the references dropped), and the first error among them.
#[derive(Default)]
pub struct WbWait {
    state: Mutex<(usize, i32)>,
    cv: Condvar,
}

impl WbWait {
    fn add(&self) {
        self.state.lock().0 += 1;
    }

    fn done(&self, errno: i32) {
        let mut st = self.state.lock();
        st.0 -= 1;
        if st.1 == 0 {
            st.1 = errno;
        }
        if st.0 == 0 {
            self.cv.notify_all();
        }
    }

    /// Wait until every write submitted with this has completed, and
    /// return the first error as an errno (0: none). Bounded by the
    /// device calls of the requests queued ahead (QUEUE_DEPTH at most).
    pub fn wait(&self) -> i32 {
        let mut st = self.state.lock();
        while st.0 > 0 {
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
        st.1
    }
}

#[derive(Default)]
struct Queue {
    reads: VecDeque<ReadRequest>,
    writes: VecDeque<WriteRequest>,
    /// Workers running; 0 means submitters do their own I/O.
    workers: usize,
    /// Set at shutdown: no new requests are queued.
    closed: bool,
}

impl Queue {
    fn has_room(&self) -> bool {
        self.workers > 0 && !self.closed && self.reads.len() + self.writes.len() < QUEUE_DEPTH
    }
}

/// The cache's I/O queue and its workers' doorbell, and its io_uring
/// when one was set up.
#[derive(Default)]
pub struct IoQueue {
    queue: Mutex<Queue>,
    cv: Condvar,
    uring: OnceLock<Arc<uring::Uring>>,
}

impl IoQueue {
    /// Stop queueing; the workers finish what is queued and leave, the
    /// ring's reaper what is in flight.
    pub fn close(&self) {
        if let Some(r) = self.uring.get() {
            r.close();
        }
        self.queue.lock().closed = true;
        self.cv.notify_all();
    }
}

/// Said once per process: io_uring could not be set up.
static URING_FALLBACK_NOTICE: Once = Once::new();

impl Cache {
    /// Start the I/O workers (at cache creation), and the io_uring beside
    /// them as `Tunables::io_engine` says. With `Auto`, a kernel that
    /// refuses io_uring (too old, seccomp, io_uring_disabled) leaves the
    /// workers doing it all, said once on stderr and in vmstat
    /// (`uring_setup_failed`); `Uring` makes that an error. No workers
    /// (`io_threads = 0`) means synchronous I/O: no ring either.
    pub(crate) fn start_io_workers(self: &Arc<Self>, n: usize) -> std::io::Result<()> {
        if n > 0 && self.config.tunables.io_engine != IoEngine::Threads {
            if let Err(e) = self.start_uring() {
                self.vm.inc(Item::uring_setup_failed);
                if self.config.tunables.io_engine == IoEngine::Uring {
                    return Err(e);
                }
                URING_FALLBACK_NOTICE.call_once(|| {
                    eprintln!("pcache: io_uring unavailable ({e}), asynchronous I/O on {n} threads");
                });
            }
        }
        for i in 0..n {
            let c = self.clone();
            let t = std::thread::Builder::new().name(format!("pcache-io/{i}")).spawn(move || c.io_worker())?;
            self.bio.queue.lock().workers += 1;
            self.kthread_add(t);
        }
        Ok(())
    }

    /// submit_bio for a readahead run: queue it, or, when the queue is
    /// full or stopped, do it here. Either way the pages end unlocked and
    /// the references go.
    ///
    /// A run for the threads is split as the block layer splits a bio (the
    /// ring splits its own the same way): pieces of at most
    /// `read_request_pages`, each
    /// completed, and its pages unlocked, on its own, so several workers
    /// read one window at once and the reader of its first pages does not
    /// wait for the whole window.
    pub(crate) fn submit_read(&self, req: ReadRequest) {
        let Err(mut req) = self.uring_submit_read(req) else {
            self.vm.inc(Item::ra_submit_async);
            return;
        };
        let max = self.read_request_pages(&req.inode);
        let mut pieces = Vec::with_capacity(req.pages.len().div_ceil(max));
        while let Some(piece) = self.split_read_front(&mut req, max) {
            pieces.push(piece);
        }
        pieces.push(req);
        let mut inline = Vec::new();
        let mut queued = 0;
        {
            let mut q = self.bio.queue.lock();
            for piece in pieces {
                if q.has_room() {
                    q.reads.push_back(piece);
                    queued += 1;
                } else {
                    inline.push(piece);
                }
            }
        }
        if queued > 0 {
            self.vm.add(Item::ra_submit_async, queued);
            if queued == 1 {
                self.bio.cv.notify_one();
            } else {
                self.bio.cv.notify_all();
            }
        }
        for req in inline {
            self.vm.inc(Item::ra_submit_inline);
            self.end_page_read(&req.inode, req.first, &req.pages);
        }
    }

    /// Split the front off a read run longer than `max` pages: `max`
    /// pages, or more, to the end of the large folio `max` falls in (a
    /// folio completes as one, on its head). `req` keeps the rest; None
    /// when it is short enough whole.
    pub(crate) fn split_read_front(&self, req: &mut ReadRequest, max: usize) -> Option<ReadRequest> {
        let mut at = max;
        while at < req.pages.len() && self.page(req.pages[at]).is_tail() {
            at += 1;
        }
        if at >= req.pages.len() {
            return None;
        }
        let rest = req.pages.split_off(at);
        let next = ReadRequest { inode: req.inode.clone(), first: req.first + at as u64, pages: rest };
        Some(std::mem::replace(req, next))
    }

    /// The largest read request, in pages, for either engine: the
    /// `max_read_request_kb` tunable, else the device's max_sectors_kb
    /// (the kernel splits a readahead bio there, so a device that takes
    /// 4 MiB gets 4 MiB requests), else 1 MiB.
    pub(crate) fn read_request_pages(&self, inode: &Inode) -> usize {
        self.request_pages(inode, self.config.tunables.max_read_request_kb, MAX_READ_REQUEST_BYTES)
    }

    /// The largest writeback request, in pages: the `max_write_request_kb`
    /// tunable, else the device's max_sectors_kb (the block layer merges a
    /// contiguous writeback run into requests that large), else 256 KiB.
    pub(crate) fn write_request_pages(&self, inode: &Inode) -> usize {
        self.request_pages(inode, self.config.tunables.max_write_request_kb, MAX_WRITE_REQUEST_BYTES)
    }

    /// A request's largest size in pages: `tunable_kb` if set, else the
    /// device's limit, else `default_bytes`; at least one page.
    fn request_pages(&self, inode: &Inode, tunable_kb: u32, default_bytes: usize) -> usize {
        let max = if tunable_kb > 0 {
            ((tunable_kb as usize) << 10) >> self.page_shift()
        } else if inode.dev_io_pages > 0 {
            inode.dev_io_pages as usize
        } else {
            default_bytes >> self.page_shift()
        };
        max.max(1)
    }

    /// A reader about to wait on the locked page `index` of `inode` runs
    /// the queued read that covers it itself, if no worker has taken it
    /// yet, instead of sleeping until one does (the waiter doing the
    /// end_io work: no thread hand-off on the page the reader needs, and
    /// a fifth "worker" while the others are busy). Returns whether it ran
    /// one; the page is then unlocked, uptodate or PG_error.
    pub(crate) fn run_queued_read(&self, inode: &Inode, index: u64) -> bool {
        let req = {
            let mut q = self.bio.queue.lock();
            let Some(i) = q
                .reads
                .iter()
                .position(|r| r.inode.id == inode.id && r.first <= index && index - r.first < r.pages.len() as u64)
            else {
                return false;
            };
            q.reads.remove(i)
        };
        let Some(req) = req else { return false };
        self.vm.inc(Item::ra_reader_completed);
        self.end_page_read(&req.inode, req.first, &req.pages);
        true
    }

    /// Submit a writeback run: to the ring if it takes it, else queue it,
    /// or, when the queue is full or stopped, write it here. Either way
    /// its pages end their writeback and the references go. The result is
    /// the inline write's; a queued write reports to `req.wait` and the
    /// file's errseq.
    ///
    /// `last_waited`: the last run of a writer that then waits for its
    /// runs (fsync, `write_and_wait_range`). Queued to a worker, the writer
    /// would only sleep until the worker ended it, so it writes it itself,
    /// as a reader runs its own queued read (`run_queued_read`): a commit's
    /// few pages then cost no hand-off and no wake-up.
    pub(crate) fn submit_write(&self, req: WriteRequest, last_waited: bool) -> Result<()> {
        let Err(req) = self.uring_submit_write(req) else {
            self.vm.inc(Item::wb_submit_async);
            return Ok(());
        };
        let req = if last_waited {
            self.vm.inc(Item::wb_waiter_inline);
            req
        } else {
            let mut q = self.bio.queue.lock();
            if !q.has_room() || q.writes.len() >= WRITE_QUEUE_DEPTH {
                req
            } else {
                if let Some(w) = &req.wait {
                    w.add();
                }
                q.writes.push_back(req);
                drop(q);
                self.vm.inc(Item::wb_submit_async);
                self.bio.cv.notify_one();
                return Ok(());
            }
        };
        // Inline: the caller gets the result itself.
        self.write_pages_now(&req.inode, req.first, &req.pages)
    }

    /// A queued write, on a worker: the device call and end_page_writeback
    /// (write_pages_now), then the waiter told.
    fn complete_queued_write(&self, req: WriteRequest) {
        let res = self.write_pages_now(&req.inode, req.first, &req.pages);
        if let Some(w) = &req.wait {
            w.done(res.as_ref().err().map_or(0, |e| e.errno()));
        }
    }

    /// The completion of a write the ring did: end_page_writeback and
    /// the rest (end_write_pages), then the waiter told.
    fn end_queued_write(&self, req: &WriteRequest, res: std::io::Result<()>) {
        let res = self.end_write_pages(&req.inode, &req.pages, res);
        if let Some(w) = &req.wait {
            w.done(res.as_ref().err().map_or(0, |e| e.errno()));
        }
    }

    /// Do a run's read and its completion work (end_page_read for each
    /// page): uptodate, or PG_error and not uptodate, whose next reader
    /// retries the read and reports the error; then unlock, waking the
    /// readers waiting on the page. The pages hold no reference of the
    /// submitter's (dropped at submission, as readahead_folio does): the
    /// page lock keeps each in the page cache until this unlock.
    pub(crate) fn end_page_read(&self, inode: &Inode, first: u64, pages: &[Pfn]) {
        let ok = self.read_pages_raw(inode, first, pages).is_ok();
        self.end_read_folios(pages, ok);
    }

    /// folio_end_read for each folio of a read run (its tails' frames
    /// are in the run too: the state is the head's): uptodate (or PG_error)
    /// and unlocked in one atomic step, so no reader copies a page that is
    /// still locked and a folio's lock is not held past its own completion.
    pub(crate) fn end_read_folios(&self, pages: &[Pfn], ok: bool) {
        // Folio by folio, each one's size read from its head while it is
        // still locked: once a head is unlocked its folio may be split (its
        // tails become pages of their own, maybe freed), so no frame after
        // it may be judged by its flags then.
        let mut i = 0;
        while let Some(&head) = pages.get(i) {
            let page = self.page(head);
            i += 1 << page.folio_order();
            page.end_read(ok, &self.vm);
        }
    }

    fn io_worker(self: Arc<Self>) {
        enum Job {
            Read(ReadRequest),
            Write(WriteRequest),
        }
        loop {
            let job = {
                let mut q = self.bio.queue.lock();
                loop {
                    if let Some(r) = q.reads.pop_front() {
                        break Job::Read(r);
                    }
                    if let Some(w) = q.writes.pop_front() {
                        break Job::Write(w);
                    }
                    if q.closed {
                        q.workers -= 1;
                        return;
                    }
                    // A timeout only as a safety net: close() notifies.
                    self.bio.cv.wait_for(&mut q, Duration::from_millis(500));
                }
            };
            match job {
                Job::Read(r) => self.end_page_read(&r.inode, r.first, &r.pages),
                // Reported to the waiter and the file's errseq.
                Job::Write(w) => self.complete_queued_write(w),
            }
        }
    }
}

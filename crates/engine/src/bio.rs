//! Asynchronous read submission: the block layer's request queue, reduced
//! to what readahead needs (block/blk-mq.c's submission and completion,
//! mm/readahead.c's `read_pages` and filemap's `end_page_read`).
//!
//! In the kernel, readahead inserts locked, not-uptodate pages into the
//! page cache, submits bios and returns; the reader then waits only on the
//! page it needs (`folio_wait_locked`), and the completion interrupt marks
//! each page uptodate (or not, on error), unlocks it and wakes its
//! waiters. So the device works on the next window while the reader copies
//! the current one.
//!
//! Here a request is a run of such pages, queued to a small pool of I/O
//! threads (`Tunables::io_threads`) that do the device call and then the
//! completion work (`end_page_read`: uptodate or PG_error, unlock, drop the
//! submitter's references). Several files' readers, and several windows of
//! one, keep several requests in flight at once.
//!
//! Bounded: the queue holds at most `QUEUE_DEPTH` requests. A submitter
//! that finds it full, or finds the pool stopped (no threads configured, or
//! the cache shutting down), does the request itself, as the synchronous
//! path always did; nothing waits for room. Workers leave only when the
//! queue is empty, so every queued page is completed and unlocked.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::Pfn;
use crate::vmstat::Item;

/// Requests queued at most (the block layer's nr_requests, per cache).
pub const QUEUE_DEPTH: usize = 64;

/// One read: a run of locked, not-uptodate pages of `inode` starting at
/// page `first`, each with a reference the completion drops.
pub struct ReadRequest {
    pub inode: Arc<Inode>,
    pub first: u64,
    pub pages: Vec<Pfn>,
}

#[derive(Default)]
struct Queue {
    requests: VecDeque<ReadRequest>,
    /// Workers running; 0 means submitters do their own I/O.
    workers: usize,
    /// Set at shutdown: no new requests are queued.
    closed: bool,
}

/// The cache's read queue and its workers' doorbell.
#[derive(Default)]
pub struct IoQueue {
    queue: Mutex<Queue>,
    cv: Condvar,
}

impl IoQueue {
    /// Stop queueing; the workers finish what is queued and leave.
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.cv.notify_all();
    }
}

impl Cache {
    /// Start the I/O workers (at cache creation).
    pub(crate) fn start_io_workers(self: &Arc<Self>, n: usize) -> std::io::Result<()> {
        for i in 0..n {
            let c = self.clone();
            let t = std::thread::Builder::new().name(format!("pcache-io/{i}")).spawn(move || c.io_worker())?;
            self.bio.queue.lock().workers += 1;
            self.threads.lock().push(t);
        }
        Ok(())
    }

    /// submit_bio for a readahead run: queue it, or, when the queue is
    /// full or stopped, do it here. Either way the pages end unlocked and
    /// the references go.
    pub(crate) fn submit_read(&self, req: ReadRequest) {
        let req = {
            let mut q = self.bio.queue.lock();
            if q.workers == 0 || q.closed || q.requests.len() >= QUEUE_DEPTH {
                req
            } else {
                q.requests.push_back(req);
                drop(q);
                self.vm.inc(Item::ra_submit_async);
                self.bio.cv.notify_one();
                return;
            }
        };
        self.vm.inc(Item::ra_submit_inline);
        self.end_page_read(&req.inode, req.first, &req.pages);
    }

    /// Do a run's read and its completion work (end_page_read for each
    /// page): uptodate, or PG_error and not uptodate, whose next reader
    /// retries the read and reports the error; then unlock (waking the
    /// readers waiting on the page) and drop the submitter's references.
    pub(crate) fn end_page_read(&self, inode: &Inode, first: u64, pages: &[Pfn]) {
        let _ = self.read_pages_io(inode, first, pages);
        for &pfn in pages {
            self.page(pfn).unlock(&self.vm);
        }
        self.release_pages(pages);
    }

    fn io_worker(self: Arc<Self>) {
        loop {
            let req = {
                let mut q = self.bio.queue.lock();
                loop {
                    if let Some(r) = q.requests.pop_front() {
                        break r;
                    }
                    if q.closed {
                        q.workers -= 1;
                        return;
                    }
                    // A timeout only as a safety net: close() notifies.
                    self.bio.cv.wait_for(&mut q, Duration::from_millis(500));
                }
            };
            self.end_page_read(&req.inode, req.first, &req.pages);
        }
    }
}

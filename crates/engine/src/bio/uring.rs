//! io_uring submission (issue 13): the device's queue without a thread
//! per request in flight.
//!
//! A request whose device lends its descriptor (`BackingDev::async_io`:
//! a host file opened O_DIRECT) goes to the cache's ring as one READV or
//! WRITEV over the page frames; the submitter returns at once. One reaper
//! thread (`pcache-uring`) waits for completions and runs the same
//! completion work the I/O threads run: end_page_read for reads
//! (uptodate or PG_error, unlock, references dropped), end_page_writeback
//! for writes (errseq, PG_writeback cleared, references dropped, the
//! data-integrity waiter told). A transfer the kernel ended short or
//! failed is finished through the device's own synchronous path, which
//! knows end of file, O_DIRECT refusal and EINTR: reads on the reaper
//! (the read path takes no lock an in-flight request holds), writes on a
//! short-lived helper thread, since `write_pages` takes the device's size
//! lock and a tail writer waiting for it may be waiting for another
//! in-flight write only the reaper can complete.
//!
//! Completion in the reader's context: a reader about to sleep on a
//! locked page whose read is on the ring reaps completions itself
//! (`uring_reap_for`): it becomes the CQ's consumer for a moment, waits
//! in the kernel for the next CQE and runs the completion work of all it
//! finds, so the page it needs is unlocked by its own thread, without a
//! wake-up of the reaper and then of the reader (two context switches on
//! a loaded machine, each a scheduler's delay). The CQ has one consumer
//! at a time (`Uring::cq`); a reader that finds it taken sleeps on the
//! page as before, and the reaper stays for the completions nobody waits
//! on.
//!
//! Bounded: at most `RING_DEPTH` requests in flight (the slot table); a
//! submitter that finds no slot, or the ring closing, gets its request
//! back and uses the thread pool (or does it inline) as before. The CQ
//! (twice the SQ) cannot overflow. Shutdown: `close` refuses new requests
//! and wakes the reaper, which leaves only once every slot is free and
//! every fix-up helper joined, so no page stays locked or under writeback
//! and the ring outlives every transfer using its buffers.
//!
//! Lock order: the slot table's mutex is a leaf (nothing is taken under
//! it; completion work runs after the slot is taken out).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use super::{ReadRequest, WriteRequest};
use crate::backing::{AsyncIo, IoDir};
use crate::mm::Cache;
use crate::page::Pfn;
use crate::vmstat::Item;

/// Requests in flight at most on one cache's ring (the SQ's size).
pub const RING_DEPTH: u32 = 64;
/// Most iovecs in one READV/WRITEV (UIO_MAXIOV); longer runs use threads.
const IOV_MAX: usize = 1024;
/// The user_data of the NOP `close` submits to wake the reaper.
const WAKE: u64 = u64::MAX;
/// The reaper's wait, as a safety net only: completions and `close` wake it.
const REAP_TIMEOUT: Duration = Duration::from_millis(500);
/// A reaping reader's wait in the kernel for one CQE, and how many it
/// makes before it sleeps on the page instead: a bound, not a timing
/// assumption (the page unlocks either way).
const READER_REAP_WAIT: Duration = Duration::from_millis(10);
const READER_REAP_ROUNDS: u32 = 100;

/// The iovecs an SQE points at.
struct IoVecs(Box<[libc::iovec]>);

// SAFETY: the raw pointers are into page frames that stay the request's
// for its whole flight (locked, not-uptodate pages for a read, which a
// lock keeps in the page cache; pages under PG_writeback, referenced, for
// a write). The array is
// only read (by the kernel), and freed by whichever thread completes the
// request, after the kernel is done with it.
unsafe impl Send for IoVecs {}

enum Op {
    Read(ReadRequest),
    Write(WriteRequest),
}

/// A request on the ring.
struct InFlight {
    op: Op,
    /// Bytes asked for.
    len: usize,
    /// Kept until the completion: a request punted to the kernel's io-wq
    /// may read its iovecs after submission.
    _iov: IoVecs,
    /// The descriptor (and the device's hold) the kernel is using.
    io: AsyncIo,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    /// Set by `close`: no new requests.
    closed: bool,
}

impl Slots {
    fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// One cache's io_uring and its in-flight requests.
pub struct Uring {
    ring: IoUring,
    slots: Mutex<Slots>,
    /// The kernel takes a timeout on the completion wait (5.11+).
    ext_arg: bool,
    /// The reaper is running (else nothing would complete: refuse).
    reaping: AtomicBool,
    /// Held by whoever consumes the CQ (the reaper or a reaping reader):
    /// the ring's CompletionQueue must have one user at a time.
    cq: Mutex<()>,
    /// Write fix-up helpers not yet joined (see `uring_complete`).
    helpers: Mutex<Vec<JoinHandle<()>>>,
}

impl Uring {
    /// Set a ring up; fails where the kernel has no io_uring, or a
    /// seccomp filter or sysctl (kernel.io_uring_disabled) forbids it.
    pub fn setup() -> io::Result<Uring> {
        let ring = IoUring::new(RING_DEPTH)?;
        let ext_arg = ring.params().is_feature_ext_arg();
        let n = RING_DEPTH as usize;
        let slots = Slots { slots: (0..n).map(|_| None).collect(), free: (0..n).rev().collect(), closed: false };
        Ok(Uring {
            ring,
            slots: Mutex::new(slots),
            ext_arg,
            reaping: AtomicBool::new(false),
            cq: Mutex::new(()),
            helpers: Mutex::new(Vec::new()),
        })
    }

    /// Put `req` on the ring, or give it back (no slot, closing).
    fn submit(&self, op: Op, iov: Box<[libc::iovec]>, pos: u64, len: usize, io: AsyncIo) -> Result<(), Op> {
        use std::os::fd::AsRawFd;
        let iov = IoVecs(iov);
        let fd = types::Fd(io.fd.as_raw_fd());
        let count = iov.0.len() as u32; // <= IOV_MAX
        let ptr = iov.0.as_ptr();
        {
            let mut s = self.slots.lock();
            if s.closed || !self.reaping.load(Ordering::Acquire) {
                return Err(op);
            }
            let Some(idx) = s.free.pop() else {
                return Err(op);
            };
            let sqe = match op {
                Op::Read(_) => opcode::Readv::new(fd, ptr, count).offset(pos).rw_flags(io.rw_flags).build(),
                Op::Write(_) => opcode::Writev::new(fd, ptr, count).offset(pos).build(),
            }
            .user_data(idx as u64);
            // SAFETY: the SQE's iovec array and the frames it points at stay
            // valid and owned by this request until its CQE is reaped: the
            // array (heap, not moved by moving the Box) and the descriptor
            // (`io.fd`) are stored in slot `idx` below, which only the
            // reaper empties, after the CQE; the frames belong to pages
            // the request holds locked and not uptodate (reads: the lock
            // keeps each in the page cache, so its frame is not reused) or
            // under PG_writeback with a reference (writes), and nobody else
            // reads or writes such a frame. The slot table's mutex
            // makes this the only SubmissionQueue in existence.
            let pushed = unsafe { self.ring.submission_shared().push(&sqe) };
            if pushed.is_err() {
                // Cannot happen with one SQE per slot; give it back anyway.
                s.free.push(idx);
                return Err(op);
            }
            s.slots[idx] = Some(InFlight { op, len, _iov: iov, io });
        }
        // Outside the lock: submitters may enter the kernel together. An
        // error leaves the SQE queued; the reaper's next enter submits it.
        let _ = self.ring.submit();
        Ok(())
    }

    /// Refuse new requests and wake the reaper to drain and leave.
    pub fn close(&self) {
        let mut s = self.slots.lock();
        if s.closed {
            return;
        }
        s.closed = true;
        let nop = opcode::Nop::new().build().user_data(WAKE);
        // SAFETY: a NOP carries no pointers; the mutex makes this the only
        // SubmissionQueue. If the SQ were full, requests are in flight and
        // their completions wake the reaper instead.
        let _ = unsafe { self.ring.submission_shared().push(&nop) };
        drop(s);
        let _ = self.ring.submit();
    }

    /// Wait for at least one completion (or the safety-net timeout).
    fn wait(&self) {
        self.wait_for(REAP_TIMEOUT)
    }

    /// Wait for at least one completion, or `timeout` where the kernel
    /// takes one.
    fn wait_for(&self, timeout: Duration) {
        let res = if self.ext_arg {
            let ts = types::Timespec::from(timeout);
            let args = types::SubmitArgs::new().timespec(&ts);
            self.ring.submitter().submit_with_args(1, &args)
        } else {
            self.ring.submit_and_wait(1)
        };
        if let Err(e) = res {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                // Unexpected: do not spin on it.
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// The completions posted so far: (slot, result). `_cq` is the
    /// consumer's hold on `self.cq`.
    fn reap(&self, _cq: &parking_lot::MutexGuard<'_, ()>) -> Vec<(u64, i32)> {
        // SAFETY: the caller holds `self.cq`, so this is the only
        // CompletionQueue in existence.
        unsafe { self.ring.completion_shared() }.map(|c| (c.user_data(), c.result())).collect()
    }

    /// Whether page `index` of inode `id` is in a read on the ring.
    fn covers(&self, id: u32, index: u64) -> bool {
        let s = self.slots.lock();
        s.slots.iter().flatten().any(|f| match &f.op {
            Op::Read(r) => r.inode.id == id && r.first <= index && index - r.first < r.pages.len() as u64,
            Op::Write(_) => false,
        })
    }

    fn take(&self, idx: u64) -> Option<InFlight> {
        let mut s = self.slots.lock();
        let slot = s.slots.get_mut(usize::try_from(idx).ok()?)?.take()?;
        s.free.push(idx as usize);
        Some(slot)
    }

    /// Closed, and nothing in flight.
    fn drained(&self) -> bool {
        let s = self.slots.lock();
        s.closed && s.in_use() == 0
    }
}

impl Cache {
    /// Set up the cache's ring and its reaper (at start, `Auto` or
    /// `Uring`); the error if the kernel refuses io_uring.
    pub(crate) fn start_uring(self: &Arc<Self>) -> io::Result<()> {
        let ring = Arc::new(Uring::setup()?);
        let (c, r) = (self.clone(), ring.clone());
        let t = std::thread::Builder::new().name("pcache-uring".into()).spawn(move || c.uring_reaper(r))?;
        ring.reaping.store(true, Ordering::Release);
        self.kthread_add(t);
        let _ = self.bio.uring.set(ring);
        self.vm.inc(Item::uring_setup);
        Ok(())
    }

    /// The frames of `pages` as iovecs, frames adjacent in the arena in
    /// one iovec (a readahead window's frames are sorted, so most are),
    /// or None if too many for one call.
    fn frame_iovecs(&self, pages: &[Pfn]) -> Option<Box<[libc::iovec]>> {
        if pages.is_empty() || pages.len() > IOV_MAX {
            return None;
        }
        let ps = self.page_size();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(pages.len());
        for (i, &p) in pages.iter().enumerate() {
            match iov.last_mut() {
                Some(last) if i > 0 && p.checked_sub(pages[i - 1]) == Some(1) => last.iov_len += ps,
                _ => iov.push(libc::iovec { iov_base: self.arena.frame_ptr(p).cast(), iov_len: ps }),
            }
        }
        Some(iov.into_boxed_slice())
    }

    /// submit_bio on the ring for a readahead run; gives it back when the
    /// ring cannot take it (no ring, a device that is not lent, ring full).
    pub(super) fn uring_submit_read(&self, mut req: ReadRequest) -> Result<(), ReadRequest> {
        if self.bio.uring.get().is_none() {
            return Err(req);
        }
        // Split as the block layer splits a bio: each piece completes, and
        // unlocks its pages, on its own, so the reader of the first pages
        // does not wait for the last ones of a large window.
        let max = self.read_request_pages(&req.inode).min(IOV_MAX);
        while req.pages.len() > max {
            let rest = req.pages.split_off(max);
            let next = ReadRequest { inode: req.inode.clone(), first: req.first + max as u64, pages: rest };
            let head = std::mem::replace(&mut req, next);
            if let Err(mut head) = self.uring_submit_read_one(head) {
                // The ring is full or refuses this device: the rest goes
                // back to the caller in one run, as it came.
                head.pages.append(&mut req.pages);
                return Err(head);
            }
        }
        self.uring_submit_read_one(req)
    }

    fn uring_submit_read_one(&self, req: ReadRequest) -> Result<(), ReadRequest> {
        let Some(ring) = self.bio.uring.get() else { return Err(req) };
        let pos = req.first << self.page_shift();
        let len = req.pages.len() * self.page_size();
        let Some(iov) = self.frame_iovecs(&req.pages) else { return Err(req) };
        let Some(io) = req.inode.dev.async_io(IoDir::Read, pos, len as u64, 0) else { return Err(req) };
        match ring.submit(Op::Read(req), iov, pos, len, io) {
            Ok(()) => {
                self.vm.inc(Item::ra_submit_uring);
                Ok(())
            }
            Err(Op::Read(req)) => {
                self.vm.inc(Item::uring_fallback);
                Err(req)
            }
            Err(Op::Write(_)) => unreachable!("a read was submitted"),
        }
    }

    /// As `uring_submit_read`, for a writeback run.
    pub(super) fn uring_submit_write(&self, req: WriteRequest) -> Result<(), WriteRequest> {
        let Some(ring) = self.bio.uring.get() else { return Err(req) };
        let pos = req.first << self.page_shift();
        let len = req.pages.len() * self.page_size();
        let size = req.inode.size.load(std::sync::atomic::Ordering::Acquire);
        let Some(iov) = self.frame_iovecs(&req.pages) else { return Err(req) };
        let Some(io) = req.inode.dev.async_io(IoDir::Write, pos, len as u64, size) else { return Err(req) };
        if let Some(w) = &req.wait {
            w.add();
        }
        match ring.submit(Op::Write(req), iov, pos, len, io) {
            Ok(()) => {
                self.vm.inc(Item::wb_submit_uring);
                Ok(())
            }
            Err(Op::Write(req)) => {
                if let Some(w) = &req.wait {
                    // Not queued after all (no error): the caller submits it
                    // again, adding it again.
                    w.done(0);
                }
                self.vm.inc(Item::uring_fallback);
                Err(req)
            }
            Err(Op::Read(_)) => unreachable!("a write was submitted"),
        }
    }

    /// The reaper: completions until the ring is closed and drained.
    fn uring_reaper(self: Arc<Self>, ring: Arc<Uring>) {
        loop {
            ring.wait();
            let done = {
                let cq = ring.cq.lock();
                ring.reap(&cq)
            };
            self.uring_complete_all(&ring, done);
            ring.helpers.lock().retain(|h| !h.is_finished());
            if ring.drained() {
                break;
            }
        }
        // Nothing is in flight, so no reader adds a helper any more.
        let helpers = std::mem::take(&mut *ring.helpers.lock());
        for h in helpers {
            let _ = h.join();
        }
    }

    /// The completion work of reaped CQEs (the `close` NOP skipped).
    fn uring_complete_all(&self, ring: &Uring, done: Vec<(u64, i32)>) {
        for (ud, res) in done {
            if ud == WAKE {
                continue;
            }
            if let Some(req) = ring.take(ud) {
                self.uring_complete(ring, req, res);
            }
        }
    }

    /// A reader about to sleep on the locked page `pfn` (page `index` of
    /// `inode`) whose read is on the ring: reap completions here until the
    /// page is unlocked (see the module comment). Returns whether it is;
    /// false (sleep on the page) where another thread is reaping, the
    /// page's read is not on the ring, or the kernel has no timed wait.
    pub(crate) fn uring_reap_for(&self, inode_id: u32, index: u64, pfn: Pfn) -> bool {
        let Some(ring) = self.bio.uring.get() else { return false };
        let page = self.page(pfn);
        if !ring.ext_arg || !ring.covers(inode_id, index) {
            return !page.test(crate::page::PG_LOCKED);
        }
        for _ in 0..READER_REAP_ROUNDS {
            if !page.test(crate::page::PG_LOCKED) {
                return true;
            }
            let done = {
                let Some(cq) = ring.cq.try_lock() else { return false };
                let mut done = ring.reap(&cq);
                if done.is_empty() {
                    // Our own wait for the device: no one else's wake-up.
                    ring.wait_for(READER_REAP_WAIT);
                    done = ring.reap(&cq);
                }
                done
            };
            self.vm.add(Item::uring_reader_reaped, done.len() as u64);
            self.uring_complete_all(ring, done);
        }
        !page.test(crate::page::PG_LOCKED)
    }

    /// A request's completion work; `res` is the CQE's result.
    fn uring_complete(&self, ring: &Uring, req: InFlight, res: i32) {
        let InFlight { op, len, _iov, io } = req;
        // The kernel is done with the iovecs and the descriptor; the hold
        // goes before any synchronous fix-up calls the device again.
        drop(_iov);
        drop(io);
        let done = usize::try_from(res).ok().filter(|&n| n <= len);
        match op {
            Op::Read(r) => {
                let got = match done {
                    Some(n) if n == len => Ok(n),
                    _ => {
                        self.vm.inc(Item::uring_fixup);
                        self.read_rest(&r, done.unwrap_or(0))
                    }
                };
                // end_page_read's completion half, as the I/O threads run it:
                // uptodate (or PG_error) and unlocked in one step per page;
                // the submitter's references went at submission.
                let ok = self.end_read_pages(&r.inode, &r.pages, got).is_ok();
                for &pfn in &r.pages {
                    self.page(pfn).end_read(ok, &self.vm);
                }
            }
            Op::Write(w) if done == Some(len) => self.end_queued_write(&w, Ok(())),
            Op::Write(w) => {
                self.vm.inc(Item::uring_fixup);
                // Written again, whole, through the device's own path (as an
                // I/O thread would), off the reaper: see the module comment.
                let job = Arc::new(Mutex::new(Some(w)));
                let j = job.clone();
                // None only while the cache is being dropped, when nothing
                // is in flight; then the write is done here.
                let spawned = self.arc().ok_or(()).and_then(|c| {
                    std::thread::Builder::new()
                        .name("pcache-uring-fix".into())
                        .spawn(move || {
                            let w = j.lock().take();
                            if let Some(w) = w {
                                c.complete_queued_write(w);
                            }
                        })
                        .map_err(|_| ())
                });
                match spawned {
                    Ok(h) => ring.helpers.lock().push(h),
                    // No thread to be had: here, at the risk of waiting on
                    // the size lock (the request is not lost either way).
                    Err(_) => {
                        let w = job.lock().take();
                        if let Some(w) = w {
                            self.complete_queued_write(w);
                        }
                    }
                }
            }
        }
    }

    /// Finish a read the ring ended after `done` bytes (short, or an error
    /// with `done` 0) through the device's synchronous path, from the
    /// first page not wholly read: the bytes read in all.
    fn read_rest(&self, r: &ReadRequest, done: usize) -> io::Result<usize> {
        let ps = self.page_size();
        let k = done / ps;
        let pos = (r.first << self.page_shift()) + (k * ps) as u64;
        let mut bufs: Vec<&mut [u8]> = r.pages[k..]
            .iter()
            // SAFETY: the pages are locked and not uptodate, so they stay
            // in the page cache (every removal takes the lock), and the
            // ring no longer uses them; the slices are gone before they
            // are marked uptodate.
            .map(|&p| unsafe { self.arena.frame_for_io_mut(p) })
            .collect();
        let n = r.inode.dev.read_pages(pos, &mut bufs)?;
        Ok(k * ps + n)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Config, OpenOptions, PageCache, Tunables};
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::mpsc;

    const PS: usize = 4096;

    fn page_bytes(i: usize) -> Vec<u8> {
        (0..PS).map(|b| ((b * 31 + i * 7) % 251) as u8).collect()
    }

    // Goal: a reader waiting on a page whose read is on the ring completes
    // it itself, and sees the page only after its I/O completed. Method:
    // a ring with no reaper (so only readers can complete anything; if
    // reader-context reaping did nothing, the read would hang, caught by
    // the 60 s bound); a 64-page host file read page by page, each page's
    // bytes checked (a page seen before its read would hold zeroes); then
    // every request the readahead put on the ring has been reaped by the
    // reader, and counted so.
    #[test]
    fn reader_reaps_its_own_completions() {
        let dir = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")).unwrap();
        let path = dir.path().join("cold");
        std::fs::write(&path, (0..64).flat_map(page_bytes).collect::<Vec<u8>>()).unwrap();
        if std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).is_err() {
            eprintln!("skipped: no O_DIRECT here, so the ring has nothing to drive");
            return;
        }
        // No I/O threads (so no ring or reaper of the cache's own), no
        // kswapd, no flusher activity.
        let tunables = Tunables { io_threads: 0, kswapd: false, ra_from_device: false, ..Tunables::default() };
        let cache = PageCache::new(Config { memory_bytes: 512 * PS as u64, tunables, ..Config::default() }).unwrap();
        let ring = match Uring::setup() {
            Ok(r) if r.ext_arg => Arc::new(r),
            Ok(_) => {
                eprintln!("skipped: the kernel's io_uring has no timed wait (5.11+)");
                return;
            }
            Err(e) => {
                eprintln!("skipped: io_uring unavailable here ({e})");
                return;
            }
        };
        ring.reaping.store(true, Ordering::Release);
        assert!(cache.cache().bio.uring.set(ring.clone()).is_ok());
        let f = cache.open(&path, OpenOptions { create: false, ..OpenOptions::default() }).unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; PS];
            for i in 0..64 {
                let n = f.read_at(&mut buf, (i * PS) as u64).unwrap();
                assert_eq!(n, PS, "read of page {i}");
                assert!(buf == page_bytes(i), "page {i} seen before its read completed");
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("the reader did not complete its own reads");
        reader.join().unwrap();
        let v = cache.vmstat();
        assert!(v.get(Item::ra_submit_uring) > 0, "no readahead went through the ring");
        assert!(v.get(Item::uring_reader_reaped) > 0, "no completion was reaped by the reader");
        assert_eq!(ring.slots.lock().in_use(), 0, "a request left on the ring");
        ring.close();
        cache.shutdown().unwrap();
    }
}

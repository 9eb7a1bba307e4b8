//! io_uring submission: the device's queue without a thread
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
//! A depth, and one submitter, the reaper. The ring keeps
//! at most `depth` requests in flight (`Tunables::io_threads`, 4, as
//! many as the threads engine has workers); the rest wait, in order, on
//! the slot table's pending list. On this host's virtio disk, more large
//! reads in flight than a readahead window holds made a cold read slower,
//! whichever engine: 8-9 requests of 4 MiB in flight, then none for
//! 17-21% of the active time, about 1.8-2.0 GB/s, for the ring with 64
//! slots and for 8 I/O threads alike, against 1-8% idle and 2.2-2.7 GB/s
//! with 4 (docs/history/decisions.md). The host serves the requests in flight together, so the one the
//! reader needs next ends no sooner than the others, the reader then
//! copies two windows while nothing is queued, and the stream runs in
//! bursts.
//! Holding requests back needs someone to submit them when room comes,
//! and that is the reaper: a submitter takes a slot and leaves its SQE
//! pending; the reaper, before each wait, moves pending SQEs to the SQ
//! up to the depth and submits them in the call that waits
//! (`submit_with_args`). Being the only submitter also puts completions
//! where they are wanted: io_uring posts a read's CQE from task_work of
//! the task that submitted it, and the reaper is the task in the ring's
//! wait (before, the readahead thread submitted most reads and was asleep
//! on its queue when they ended). A submitter that finds the reaper
//! waiting with room wakes it through an eventfd the reaper polls on the
//! ring (one write per batch: the first submitter to see the flag clears
//! it). Only the reaper enters the ring and consumes the CQ; an earlier
//! reader-side reaping went, since a reader in the ring's wait does not
//! post a CQE whose task_work is the reaper's, and it took the eventfd's
//! completion from the reaper.
//!
//! Bounded: at most `RING_DEPTH` requests pending or in flight (the slot
//! table), of which at most `depth` in flight; a submitter that finds no
//! slot, or the ring closing, gets its request back and uses the thread
//! pool (or does it inline) as before. The SQ has room for every slot
//! and the eventfd's poll; the CQ (twice the SQ) cannot overflow.
//! Shutdown: `close` refuses new requests and wakes the reaper, which
//! submits what is pending and leaves only once every slot is free and
//! every fix-up helper joined, so no page stays locked or under writeback
//! and the ring outlives every transfer using its buffers.
//!
//! Lock order: the slot table's mutex is a leaf (nothing is taken under
//! it; completion work runs after the slot is taken out).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use super::{ReadRequest, WriteRequest};
use crate::backing::{AsyncIo, IoDir};
use crate::mm::Cache;
use crate::page::Pfn;
use crate::vmstat::Item;

/// Requests pending or in flight at most on one cache's ring (its slots).
pub const RING_DEPTH: u32 = 64;
/// Most iovecs in one READV/WRITEV (UIO_MAXIOV); longer runs use threads.
const IOV_MAX: usize = 1024;
/// The user_data of the reaper's poll on its eventfd.
const WAKE: u64 = u64::MAX;
/// The reaper's wait, as a safety net only: completions, submitters and
/// `close` wake it (through the eventfd).
const REAP_TIMEOUT: Duration = Duration::from_millis(500);

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
    /// SQEs for the reaper to put on the ring (it is the only submitter),
    /// in the order they came.
    pending: VecDeque<squeue::Entry>,
    /// Requests the reaper submitted whose CQE is not reaped yet: at most
    /// `Uring::depth`.
    in_flight: usize,
    /// The reaper is about to wait, or waiting, in the kernel with room
    /// for more requests: the next submitter writes the eventfd to wake it.
    reaper_waiting: bool,
}

impl Slots {
    fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// One cache's io_uring and its in-flight requests.
pub struct Uring {
    ring: IoUring,
    /// Written by a submitter to wake the reaper (a POLL_ADD on the ring).
    efd: std::os::fd::OwnedFd,
    slots: Mutex<Slots>,
    /// The kernel takes a timeout on the completion wait (5.11+).
    ext_arg: bool,
    /// The reaper is running (else nothing would complete: refuse).
    reaping: AtomicBool,
    /// Held by the CQ's consumer, the reaper: the ring's CompletionQueue
    /// must have one user at a time.
    cq: Mutex<()>,
    /// Requests in flight at most (`Tunables::io_threads`, as many as the
    /// threads engine has workers).
    depth: usize,
    /// The reaper's safety-net wait (`REAP_TIMEOUT`; tests lengthen it to
    /// show that the eventfd, not the timeout, wakes the reaper).
    reap_timeout: Duration,
    /// Write fix-up helpers not yet joined (see `uring_complete`).
    helpers: Mutex<Vec<JoinHandle<()>>>,
}

impl Uring {
    /// Set a ring up; fails where the kernel has no io_uring, or a
    /// seccomp filter or sysctl (kernel.io_uring_disabled) forbids it.
    pub fn setup(depth: usize) -> io::Result<Uring> {
        // Room for every slot's SQE and the eventfd's poll.
        let ring = IoUring::new(RING_DEPTH * 2)?;
        let ext_arg = ring.params().is_feature_ext_arg();
        let n = RING_DEPTH as usize;
        let slots = Slots {
            slots: (0..n).map(|_| None).collect(),
            free: (0..n).rev().collect(),
            closed: false,
            pending: VecDeque::with_capacity(n),
            in_flight: 0,
            reaper_waiting: false,
        };
        // SAFETY: eventfd takes no pointers; a non-negative result is a new
        // descriptor this process owns alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let efd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(Uring {
            ring,
            efd,
            slots: Mutex::new(slots),
            ext_arg,
            reaping: AtomicBool::new(false),
            cq: Mutex::new(()),
            depth: depth.clamp(1, n),
            reap_timeout: REAP_TIMEOUT,
            helpers: Mutex::new(Vec::new()),
        })
    }

    /// Hand `req` to the reaper for the ring, or give it back (no slot,
    /// closing).
    fn submit(&self, op: Op, iov: Box<[libc::iovec]>, pos: u64, len: usize, io: AsyncIo) -> Result<(), Op> {
        use std::os::fd::AsRawFd;
        let iov = IoVecs(iov);
        let fd = types::Fd(io.fd.as_raw_fd());
        let count = iov.0.len() as u32; // <= IOV_MAX
        let ptr = iov.0.as_ptr();
        let wake = {
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
            s.pending.push_back(sqe);
            s.slots[idx] = Some(InFlight { op, len, _iov: iov, io });
            std::mem::take(&mut s.reaper_waiting)
        };
        if wake {
            self.wake_reaper();
        }
        Ok(())
    }

    /// Add to the eventfd, which completes the reaper's poll on it.
    fn wake_reaper(&self) {
        use std::os::fd::AsRawFd;
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own.
        // EAGAIN (the counter at its maximum) still leaves it readable.
        let _ = unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Empty the eventfd (the reaper, after its poll completed).
    fn drain_eventfd(&self) {
        use std::os::fd::AsRawFd;
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a non-blocking
        // descriptor we own.
        let _ = unsafe { libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The reaper, before its wait: put pending SQEs on the SQ, oldest
    /// first, up to `depth` in flight (and, `arm`, the eventfd's poll), and
    /// say whether it waits with room, so that the next submitter wakes it
    /// rather than leave its SQE until a completion does. Returns whether
    /// the poll went on.
    fn push_pending(&self, arm: bool) -> bool {
        let mut s = self.slots.lock();
        // SAFETY: only the reaper pushes to the SQ, and it holds the slot
        // table's mutex, so this is the only SubmissionQueue in existence.
        // Each READV/WRITEV's iovec array and frames stay valid and owned
        // by its request until its CQE is reaped: the array (heap, not
        // moved by moving the Box) and the descriptor (`io.fd`) are in its
        // slot, which is emptied only after the CQE; the frames belong to
        // pages the request holds locked and not uptodate (reads: the lock
        // keeps each in the page cache, so its frame is not reused) or under
        // PG_writeback with a reference (writes), and nobody else reads or
        // writes such a frame. The poll carries no pointer.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: as above.
        let armed = arm && unsafe { sq.push(&Self::eventfd_poll(&self.efd)) }.is_ok();
        while s.in_flight < self.depth {
            let Some(sqe) = s.pending.front() else { break };
            // SAFETY: as above. The SQ has room for every slot and the poll,
            // so this fails only if earlier submissions were refused; then
            // the rest waits, in order, for the next round.
            if unsafe { sq.push(sqe) }.is_err() {
                break;
            }
            s.pending.pop_front();
            s.in_flight += 1;
        }
        sq.sync();
        s.reaper_waiting = s.in_flight < self.depth;
        armed
    }

    /// The reaper's wake-up: a one-shot poll for the eventfd readable.
    fn eventfd_poll(efd: &std::os::fd::OwnedFd) -> squeue::Entry {
        use std::os::fd::AsRawFd;
        opcode::PollAdd::new(types::Fd(efd.as_raw_fd()), libc::POLLIN as u32).build().user_data(WAKE)
    }

    /// Refuse new requests and wake the reaper to drain and leave.
    pub fn close(&self) {
        let mut s = self.slots.lock();
        if s.closed {
            return;
        }
        s.closed = true;
        drop(s);
        self.wake_reaper();
    }

    /// Submit what `push_pending` put on the SQ and wait for at least one
    /// completion (or `timeout` where the kernel takes one).
    fn wait(&self, timeout: Duration) {
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

    /// The request of a reaped CQE, its slot freed.
    fn take(&self, idx: u64) -> Option<InFlight> {
        let mut s = self.slots.lock();
        let slot = s.slots.get_mut(usize::try_from(idx).ok()?)?.take()?;
        s.free.push(idx as usize);
        s.in_flight = s.in_flight.saturating_sub(1);
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
        let ring = Arc::new(Uring::setup(self.config.tunables.io_threads)?);
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
        // Room for a split point moved to a large folio's end.
        let room = (1usize << self.page_cache_order_max()) - 1;
        let max = self.read_request_pages(&req.inode).min(IOV_MAX - room);
        while let Some(head) = self.split_read_front(&mut req, max) {
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

    /// The reaper: the ring's only submitter, and its completions, until
    /// the ring is closed and drained.
    fn uring_reaper(self: Arc<Self>, ring: Arc<Uring>) {
        // Whether the eventfd's poll is on the ring (one-shot: it leaves
        // the ring with its CQE).
        let mut armed = false;
        loop {
            armed |= ring.push_pending(!armed);
            ring.wait(ring.reap_timeout);
            let done = {
                let cq = ring.cq.lock();
                ring.reap(&cq)
            };
            if done.iter().any(|&(ud, _)| ud == WAKE) {
                armed = false;
                ring.drain_eventfd();
            }
            self.uring_complete_all(&ring, done);
            ring.helpers.lock().retain(|h| !h.is_finished());
            if ring.drained() {
                break;
            }
        }
        // Nothing is in flight, so no completion adds a helper any more.
        let helpers = std::mem::take(&mut *ring.helpers.lock());
        for h in helpers {
            let _ = h.join();
        }
    }

    /// The completion work of reaped CQEs (the eventfd's poll skipped).
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
                self.end_read_folios(&r.pages, ok);
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

    // Goal: the reaper is the ring's only submitter, submitters wake it
    // through the eventfd (not its safety-net timeout), no more than
    // `depth` requests are in flight, and a reader sees a page only after
    // its I/O completed. Method: a ring of depth 2 whose reaper's timeout
    // is an hour, so a submission or a `close` that failed to wake it would
    // stall past the 60 s bounds; three readers of three 256-page host
    // files at once, page by page, each page's bytes checked (a page seen
    // before its read would hold zeroes); then nothing is left pending or
    // in flight, and `close` lets the reaper leave.
    #[test]
    fn reaper_alone_submits_woken_by_submitters() {
        const PAGES: usize = 256;
        let dir = tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")).unwrap();
        let paths: Vec<_> = (0..3).map(|f| dir.path().join(format!("cold{f}"))).collect();
        for (f, path) in paths.iter().enumerate() {
            std::fs::write(path, (0..PAGES).flat_map(|i| page_bytes(i + f * PAGES)).collect::<Vec<u8>>()).unwrap();
        }
        if std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&paths[0]).is_err() {
            eprintln!("skipped: no O_DIRECT here, so the ring has nothing to drive");
            return;
        }
        // No I/O threads (so no ring or reaper of the cache's own), no
        // kswapd; every asynchronous window goes to this ring.
        let tunables = Tunables { io_threads: 0, kswapd: false, ra_from_device: false, ..Tunables::default() };
        let cache = PageCache::new(Config { memory_bytes: 2048 * PS as u64, tunables, ..Config::default() }).unwrap();
        let mut ring = match Uring::setup(2) {
            Ok(r) if r.ext_arg => r,
            Ok(_) => {
                eprintln!("skipped: the kernel's io_uring has no timed wait (5.11+)");
                return;
            }
            Err(e) => {
                eprintln!("skipped: io_uring unavailable here ({e})");
                return;
            }
        };
        ring.reap_timeout = Duration::from_secs(3600);
        assert_eq!(ring.depth, 2);
        let ring = Arc::new(ring);
        let (c, r) = (cache.cache().clone(), ring.clone());
        let (gone_tx, gone_rx) = mpsc::channel();
        let reaper = std::thread::spawn(move || {
            c.uring_reaper(r);
            gone_tx.send(()).unwrap();
        });
        ring.reaping.store(true, Ordering::Release);
        assert!(cache.cache().bio.uring.set(ring.clone()).is_ok());
        let (tx, rx) = mpsc::channel();
        let readers: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(f, path)| {
                let file = cache.open(path, OpenOptions { create: false, ..OpenOptions::default() }).unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; PS];
                    for i in 0..PAGES {
                        let n = file.read_at(&mut buf, (i * PS) as u64).unwrap();
                        assert_eq!(n, PS, "read of page {i} of file {f}");
                        assert!(
                            buf == page_bytes(i + f * PAGES),
                            "page {i} of file {f} seen before its read completed"
                        );
                    }
                    tx.send(()).unwrap();
                })
            })
            .collect();
        for _ in 0..readers.len() {
            rx.recv_timeout(Duration::from_secs(60))
                .expect("a read on the ring stalled: its submitter did not wake the reaper");
        }
        for r in readers {
            r.join().unwrap();
        }
        let v = cache.vmstat();
        assert!(v.get(Item::ra_submit_uring) >= 3, "the readers' windows did not go through the ring");
        {
            let s = ring.slots.lock();
            assert_eq!(s.in_use(), 0, "a request left on the ring");
            assert!(s.pending.is_empty() && s.in_flight == 0, "a request left pending or counted in flight");
        }
        ring.close();
        gone_rx.recv_timeout(Duration::from_secs(60)).expect("close did not wake the reaper");
        reaper.join().unwrap();
        cache.shutdown().unwrap();
    }
}

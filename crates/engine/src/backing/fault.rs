//! A fault-injecting wrapper around another device, for tests.
//!
//! Faults apply to reads (`read_pages`), writes (`write_pages`) and syncs
//! (`sync`); the other calls are passed straight through. A call that is
//! failed never reaches the inner device, so a failed write writes nothing
//! and a test model knows exactly what is durable.
//!
//! Around a device that lends its descriptor to io_uring (`async_io`), a
//! transfer no rule touches is lent too, so the ring is tested under the
//! injector; a transfer a rule touches stays on the device's own calls.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::BackingDev;

/// The kind of call a fault applies to.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// `read_pages`.
    Read,
    /// `write_pages`.
    Write,
    /// `sync`.
    Sync,
}

impl FaultOp {
    fn index(self) -> usize {
        match self {
            FaultOp::Read => 0,
            FaultOp::Write => 1,
            FaultOp::Sync => 2,
        }
    }
}

/// What happens to a faulted call.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail with EIO, touching nothing.
    Eio,
    /// Fail with ENOSPC, touching nothing.
    Enospc,
    /// Sleep this long, then carry out the call.
    Delay(Duration),
}

impl Fault {
    /// Apply the fault: `Err` for a failure, `Ok` once a delay has passed.
    fn apply(self) -> io::Result<()> {
        match self {
            Fault::Eio => Err(io::Error::from_raw_os_error(libc::EIO)),
            Fault::Enospc => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            Fault::Delay(d) => {
                thread::sleep(d);
                Ok(())
            }
        }
    }
}

struct RangeRule {
    op: FaultOp,
    start: u64,
    end: u64,
    fault: Fault,
}

#[derive(Default)]
struct Rules {
    /// Per op: faults for the next calls, as (fault, calls left), oldest first.
    next: [VecDeque<(Fault, u32)>; 3],
    always: [Option<Fault>; 3],
    ranges: Vec<RangeRule>,
    delay: [Option<Duration>; 3],
}

/// The free space of a small simulated file system, shared by the
/// [`FaultInjector`]s built on it with [`FaultInjector::with_space_limit`].
#[derive(Debug)]
pub struct SpaceLimit {
    page_size: u64,
    capacity: u64,
    used: Mutex<u64>,
}

impl SpaceLimit {
    /// A file system of `capacity` bytes (rounded down to pages).
    pub fn new(capacity: u64, page_size: usize) -> Arc<SpaceLimit> {
        let page_size = page_size.max(1) as u64;
        Arc::new(SpaceLimit { page_size, capacity: capacity / page_size, used: Mutex::new(0) })
    }

    /// Bytes allocated now.
    pub fn used_bytes(&self) -> u64 {
        *self.used.lock() * self.page_size
    }

    /// Bytes still free.
    pub fn free_bytes(&self) -> u64 {
        (self.capacity - *self.used.lock()) * self.page_size
    }
}

/// One device's allocated pages on a [`SpaceLimit`].
struct Space {
    limit: Arc<SpaceLimit>,
    pages: Mutex<std::collections::BTreeSet<u64>>,
}

impl Space {
    /// Allocate every page of `[first, end)` not yet allocated, all or none.
    fn allocate(&self, first: u64, end: u64) -> io::Result<()> {
        let mut pages = self.pages.lock();
        let missing: Vec<u64> = (first..end).filter(|p| !pages.contains(p)).collect();
        let mut used = self.limit.used.lock();
        if *used + missing.len() as u64 > self.limit.capacity {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        *used += missing.len() as u64;
        pages.extend(missing);
        Ok(())
    }

    /// Free the allocated pages of `[first, end)`.
    fn free(&self, first: u64, end: u64) {
        let mut pages = self.pages.lock();
        let gone: Vec<u64> = pages.range(first..end).copied().collect();
        for p in &gone {
            pages.remove(p);
        }
        *self.limit.used.lock() -= gone.len() as u64;
    }

    fn page_range(&self, pos: u64, len: u64) -> (u64, u64) {
        let ps = self.limit.page_size;
        (pos / ps, pos.saturating_add(len).div_ceil(ps))
    }
}

/// A [`BackingDev`] that delegates to another and injects faults on demand.
///
/// When several rules could apply to a call, a pending `fail_next` fault
/// wins, then the first matching `fail_page_range` rule, then
/// `fail_always`. A `set_delay` delay is slept before any of them.
pub struct FaultInjector {
    inner: Arc<dyn BackingDev>,
    rules: Mutex<Rules>,
    calls: [AtomicU64; 3],
    faults: AtomicU64,
    space: Option<Space>,
}

impl FaultInjector {
    /// Wrap `inner`, injecting nothing until told to.
    pub fn new(inner: Arc<dyn BackingDev>) -> FaultInjector {
        FaultInjector {
            inner,
            rules: Mutex::new(Rules::default()),
            calls: Default::default(),
            faults: AtomicU64::new(0),
            space: None,
        }
    }

    /// Wrap `inner` as a file on the small file system `limit`: writes and
    /// reservations of pages not yet allocated take space from it and fail
    /// with ENOSPC when it is full; the pages `inner` already holds (its
    /// length) are counted as allocated from the start.
    pub fn with_space_limit(inner: Arc<dyn BackingDev>, limit: Arc<SpaceLimit>) -> io::Result<FaultInjector> {
        let space = Space { limit, pages: Mutex::new(Default::default()) };
        let (first, end) = space.page_range(0, inner.len()?);
        space.allocate(first, end)?;
        Ok(FaultInjector { space: Some(space), ..FaultInjector::new(inner) })
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BackingDev> {
        &self.inner
    }

    /// Give the next `count` calls of `op` the fault (queued after any
    /// `fail_next` faults still pending for `op`).
    pub fn fail_next(&self, op: FaultOp, fault: Fault, count: u32) {
        if count > 0 {
            self.rules.lock().next[op.index()].push_back((fault, count));
        }
    }

    /// Give every call of `op` the fault, until [`clear`](Self::clear).
    pub fn fail_always(&self, op: FaultOp, fault: Fault) {
        self.rules.lock().always[op.index()] = Some(fault);
    }

    /// Give the fault to every call of `op` whose byte range meets
    /// `[start, end)`, until [`clear`](Self::clear). The whole call fails,
    /// including any pages outside the range. Sync calls have no byte range
    /// and never match.
    pub fn fail_page_range(&self, op: FaultOp, start: u64, end: u64, fault: Fault) {
        self.rules.lock().ranges.push(RangeRule { op, start, end, fault });
    }

    /// Make every call of `op` sleep `delay` first: a slow device.
    /// `Duration::ZERO` removes the delay.
    pub fn set_delay(&self, op: FaultOp, delay: Duration) {
        self.rules.lock().delay[op.index()] = (!delay.is_zero()).then_some(delay);
    }

    /// Remove all faults and delays. The counters are kept.
    pub fn clear(&self) {
        *self.rules.lock() = Rules::default();
    }

    /// How many calls of `op` were made, faulted or not.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.calls[op.index()].load(Ordering::Relaxed)
    }

    /// How many faults (failures and `Fault::Delay`s) were injected.
    pub fn faults_injected(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// Count a call and apply whatever applies to it; `range` is the byte
    /// range it touches.
    fn check(&self, op: FaultOp, range: Option<(u64, u64)>) -> io::Result<()> {
        let i = op.index();
        self.calls[i].fetch_add(1, Ordering::Relaxed);
        let (delay, fault) = {
            let mut rules = self.rules.lock();
            let delay = rules.delay[i];
            let mut fault = None;
            if let Some((f, left)) = rules.next[i].front_mut() {
                fault = Some(*f);
                *left -= 1;
                if *left == 0 {
                    rules.next[i].pop_front();
                }
            }
            if fault.is_none() {
                if let Some((lo, hi)) = range {
                    fault = rules.ranges.iter().find(|r| r.op == op && r.start < hi && lo < r.end).map(|r| r.fault);
                }
            }
            (delay, fault.or(rules.always[i]))
        };
        if let Some(d) = delay {
            thread::sleep(d);
        }
        match fault {
            None => Ok(()),
            Some(f) => {
                self.faults.fetch_add(1, Ordering::Relaxed);
                f.apply()
            }
        }
    }
}

impl fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultInjector")
            .field("inner", &self.inner.name())
            .field("reads", &self.calls(FaultOp::Read))
            .field("writes", &self.calls(FaultOp::Write))
            .field("syncs", &self.calls(FaultOp::Sync))
            .field("faults_injected", &self.faults_injected())
            .finish()
    }
}

/// The byte range `[pos, pos + total)` of a transfer, or `None` if empty.
fn span(pos: u64, total: usize) -> Option<(u64, u64)> {
    (total > 0).then(|| (pos, pos.saturating_add(total as u64)))
}

impl BackingDev for FaultInjector {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn bdi_name(&self) -> String {
        format!("fault:{}", self.inner.bdi_name())
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.check(FaultOp::Read, span(pos, total))?;
        self.inner.read_pages(pos, bufs)
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.check(FaultOp::Write, span(pos, total))?;
        if let Some(space) = &self.space {
            // Only the pages that hold bytes of the file take space.
            let end = (pos.saturating_add(total as u64)).min(file_size.max(self.inner.len()?));
            if end > pos {
                let (first, end) = space.page_range(pos, end - pos);
                space.allocate(first, end)?;
            }
        }
        self.inner.write_pages(pos, bufs, file_size)
    }

    fn reserve(&self, pos: u64, len: u64) -> io::Result<()> {
        if let Some(space) = &self.space {
            let (first, end) = space.page_range(pos, len);
            space.allocate(first, end)?;
        }
        self.inner.reserve(pos, len)
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        self.check(FaultOp::Sync, None)?;
        self.inner.sync(data_only)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let before = if self.space.is_some() { self.inner.len()? } else { 0 };
        self.inner.set_len(len)?;
        if let (Some(space), true) = (&self.space, len < before) {
            // Truncation frees every block past the new end (reservations
            // past the old end among them); extension allocates nothing.
            let ps = space.limit.page_size;
            space.free(len.div_ceil(ps), u64::MAX);
        }
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)?;
        if let Some(space) = &self.space {
            let ps = space.limit.page_size;
            space.free(offset.div_ceil(ps), offset.saturating_add(len) / ps);
        }
        Ok(())
    }

    fn remove(&self) -> io::Result<()> {
        self.inner.remove()?;
        if let Some(space) = &self.space {
            space.free(0, u64::MAX);
        }
        Ok(())
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn queue_limits(&self) -> Option<super::QueueLimits> {
        self.inner.queue_limits()
    }

    /// The inner device's descriptor, lent to an asynchronous engine
    /// (io_uring) only for a call no rule could touch: no pending
    /// `fail_next`, no `fail_always`, no delay for the op, no range rule
    /// meeting the transfer, no space limit to charge a write to. Any other
    /// call stays on `read_pages`/`write_pages`, where the fault applies
    /// exactly as it does for the I/O threads. A lent call is counted.
    fn async_io(&self, dir: super::IoDir, pos: u64, len: u64, file_size: u64) -> Option<super::AsyncIo> {
        let op = match dir {
            super::IoDir::Read => FaultOp::Read,
            super::IoDir::Write if self.space.is_some() => return None,
            super::IoDir::Write => FaultOp::Write,
        };
        let i = op.index();
        let (lo, hi) = (pos, pos.saturating_add(len));
        let rules = self.rules.lock();
        let touched = !rules.next[i].is_empty()
            || rules.always[i].is_some()
            || rules.delay[i].is_some()
            || rules.ranges.iter().any(|r| r.op == op && r.start < hi && lo < r.end);
        drop(rules);
        if touched {
            return None;
        }
        // A rule added from here on applies from the next call, as it
        // would to a call already past `check`.
        let io = self.inner.async_io(dir, pos, len, file_size)?;
        self.calls[i].fetch_add(1, Ordering::Relaxed);
        Some(io)
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemoryDev;
    use super::*;
    use std::time::Instant;

    const PS: usize = 4096;

    fn dev() -> (Arc<MemoryDev>, FaultInjector) {
        let mem = Arc::new(MemoryDev::new("f", PS));
        let fi = FaultInjector::new(mem.clone());
        (mem, fi)
    }

    fn write(d: &dyn BackingDev, page: u64, fill: u8) -> io::Result<()> {
        let buf = vec![fill; PS];
        d.write_pages(page * PS as u64, &[&buf[..]], 16 * PS as u64)
    }

    fn read(d: &dyn BackingDev, page: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0xEE; PS];
        let n = d.read_pages(page * PS as u64, &mut [&mut buf[..]])?;
        assert_eq!(n, PS);
        Ok(buf)
    }

    fn errno(r: io::Result<impl Sized>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn passes_through_when_idle() {
        let (mem, fi) = dev();
        assert_eq!(fi.name(), "memory:f");
        write(&fi, 1, 5).unwrap();
        assert!(read(&fi, 1).unwrap().iter().all(|&b| b == 5));
        assert!(read(&*mem, 1).unwrap().iter().all(|&b| b == 5));
        fi.sync(true).unwrap();
        assert_eq!(fi.len().unwrap(), 2 * PS as u64);
        fi.set_len(3 * PS as u64).unwrap();
        assert_eq!(mem.len().unwrap(), 3 * PS as u64);
        fi.punch_hole(PS as u64, PS as u64).unwrap();
        assert!(read(&*mem, 1).unwrap().iter().all(|&b| b == 0));
        assert!(!fi.is_direct());
        assert_eq!(fi.calls(FaultOp::Write), 1);
        assert_eq!(fi.calls(FaultOp::Read), 1);
        assert_eq!(fi.calls(FaultOp::Sync), 1);
        assert_eq!(fi.faults_injected(), 0);
        assert!(format!("{fi:?}").contains("memory:f"));
    }

    #[test]
    fn fail_next_counts_and_failed_write_leaves_old_data() {
        let (mem, fi) = dev();
        write(&fi, 0, 1).unwrap();
        fi.fail_next(FaultOp::Write, Fault::Eio, 2);
        assert_eq!(errno(write(&fi, 0, 2)), Some(libc::EIO));
        assert_eq!(errno(write(&fi, 0, 3)), Some(libc::EIO));
        // Nothing of the failed writes reached the device.
        assert!(read(&*mem, 0).unwrap().iter().all(|&b| b == 1));
        // Reads were not affected, and the third write goes through.
        assert!(read(&fi, 0).unwrap().iter().all(|&b| b == 1));
        write(&fi, 0, 4).unwrap();
        assert!(read(&*mem, 0).unwrap().iter().all(|&b| b == 4));
        assert_eq!(fi.calls(FaultOp::Write), 4);
        assert_eq!(fi.faults_injected(), 2);
        // Queued faults are taken in order.
        fi.fail_next(FaultOp::Sync, Fault::Enospc, 1);
        fi.fail_next(FaultOp::Sync, Fault::Eio, 1);
        fi.fail_next(FaultOp::Sync, Fault::Eio, 0);
        assert_eq!(errno(fi.sync(false)), Some(libc::ENOSPC));
        assert_eq!(errno(fi.sync(false)), Some(libc::EIO));
        fi.sync(false).unwrap();
        assert_eq!(fi.faults_injected(), 4);
    }

    #[test]
    fn failed_read_leaves_buffer_alone() {
        let (_mem, fi) = dev();
        write(&fi, 0, 1).unwrap();
        fi.fail_next(FaultOp::Read, Fault::Eio, 1);
        let mut buf = vec![0xEE; PS];
        let err = fi.read_pages(0, &mut [&mut buf[..]]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(buf.iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn fail_always_until_clear() {
        let (mem, fi) = dev();
        fi.fail_always(FaultOp::Write, Fault::Enospc);
        for _ in 0..5 {
            assert_eq!(errno(write(&fi, 2, 9)), Some(libc::ENOSPC));
        }
        assert_eq!(mem.len().unwrap(), 0);
        assert_eq!(fi.faults_injected(), 5);
        fi.clear();
        write(&fi, 2, 9).unwrap();
        assert_eq!(fi.calls(FaultOp::Write), 6);
        assert_eq!(fi.faults_injected(), 5);
    }

    #[test]
    fn fail_page_range_only_hits_overlapping_calls() {
        let (mem, fi) = dev();
        let ps = PS as u64;
        fi.fail_page_range(FaultOp::Write, 3 * ps, 5 * ps, Fault::Eio);
        write(&fi, 2, 1).unwrap();
        assert_eq!(errno(write(&fi, 3, 1)), Some(libc::EIO));
        assert_eq!(errno(write(&fi, 4, 1)), Some(libc::EIO));
        write(&fi, 5, 1).unwrap();
        // A multi-page call touching the range fails entirely, writing
        // nothing even outside it.
        let bufs = [vec![7u8; PS], vec![7u8; PS]];
        let err = fi.write_pages(2 * ps, &[&bufs[0][..], &bufs[1][..]], 16 * ps).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(read(&*mem, 2).unwrap().iter().all(|&b| b == 1));
        assert!(read(&*mem, 3).unwrap().iter().all(|&b| b == 0));
        // Reads of the range are fine: the rule is for writes.
        read(&fi, 3).unwrap();
        assert_eq!(fi.faults_injected(), 3);
        fi.clear();
        write(&fi, 3, 1).unwrap();
    }

    #[test]
    fn delays() {
        let (_mem, fi) = dev();
        let d = Duration::from_millis(100);
        fi.fail_next(FaultOp::Write, Fault::Delay(d), 1);
        let t = Instant::now();
        write(&fi, 0, 3).unwrap();
        assert!(t.elapsed() >= d);
        assert_eq!(fi.faults_injected(), 1);
        let t = Instant::now();
        write(&fi, 0, 3).unwrap();
        assert!(t.elapsed() < d);

        fi.set_delay(FaultOp::Read, d);
        for _ in 0..2 {
            let t = Instant::now();
            assert!(read(&fi, 0).unwrap().iter().all(|&b| b == 3));
            assert!(t.elapsed() >= d);
        }
        fi.set_delay(FaultOp::Read, Duration::ZERO);
        let t = Instant::now();
        read(&fi, 0).unwrap();
        assert!(t.elapsed() < d);
        assert_eq!(fi.faults_injected(), 1, "a slow device is not a fault");
    }
}

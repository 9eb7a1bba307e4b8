//! The device limit of `seqread`: O_DIRECT reads of the whole file, by
//! request size and queue depth, issued two ways. `Threads`: `qd` threads
//! each keep one request in flight (pread), taking the next offset from a
//! shared counter. `Uring`: one thread keeps `qd` requests in flight on an
//! io_uring, submitting the next as each completes (what fio's io_uring
//! engine does). The best of all settings is the limit.
//!
//! `UringHuge` is `Uring` into buffers on transparent huge pages. On this
//! project's virtio disk a request's cost grows with its memory segments:
//! a 4 MiB O_DIRECT read into ordinary 4 KiB pages is 1,024 segments (the
//! block layer then splits it at max_segments), into a huge page a few;
//! the kernel's buffered read, reading into large folios, gets the same
//! advantage. Without huge buffers the "limit" measured the segments.
//!
//! `UringPool` is `UringHuge` into memory the size of pcache's cache, each
//! request into the next request-sized slot in turn (the oldest free one),
//! as a page cache fills its frames. The other forms reuse `qd` buffers,
//! at most a few MiB that are still in the CPU's cache when the next
//! request lands in them; on this virtio disk the host's copy into a
//! cache-hot buffer runs 20-30% faster (1 MiB requests at depth 4 into
//! 4 MiB: 3.4-3.6 GB/s; into a 16 or 128 MiB pool: 2.5-3.1 GB/s, the same
//! minutes). No cache reading a file larger than itself can reuse its
//! memory that soon: the pool form is the device as a cache of that size
//! meets it.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

use super::mbps;
use crate::hitpath::Aligned;
use crate::sys::Mmap;
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DevEngine {
    Threads,
    Uring,
    UringHuge,
    UringPool,
}

impl DevEngine {
    pub(super) fn name(self) -> &'static str {
        match self {
            DevEngine::Threads => "threads",
            DevEngine::Uring => "io_uring",
            DevEngine::UringHuge => "io_uring+huge",
            DevEngine::UringPool => "io_uring+pool",
        }
    }
}

/// The alignment (and size) of a transparent huge page on x86-64 and
/// arm64 with 4 KiB pages.
const HUGE: usize = 2 << 20;

/// An I/O buffer: ordinary aligned memory, or anonymous memory advised
/// onto transparent huge pages (MADV_HUGEPAGE) and aligned to one.
enum Buf {
    Small(Aligned),
    Huge { map: Mmap, start: usize, len: usize },
}

impl Buf {
    fn new(len: usize, huge: bool) -> Result<Buf> {
        if !huge {
            return Ok(Buf::Small(Aligned::new(len)));
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // Whole huge pages from the aligned start: with `len + HUGE` a
        // 1 MiB buffer's huge page ran past the mapping's end whenever the
        // kernel placed it more than 1 MiB short of a 2 MiB boundary (it
        // aligns only mappings of whole huge pages), and that buffer got
        // 4 KiB pages: the 1 MiB `io_uring+huge` rows were huge or not
        // by where mmap put them.
        let map = Mmap::new(len.next_multiple_of(HUGE) + HUGE, libc::PROT_READ | libc::PROT_WRITE, flags, -1)
            .map_err(|source| Error::Io { context: "mmap".into(), source })?;
        let start = map.as_ptr().align_offset(HUGE);
        // SAFETY: the range lies inside the mapping just made; the advice
        // only changes how it is backed (failure leaves small pages).
        unsafe { libc::madvise(map.as_ptr().cast(), map.size(), libc::MADV_HUGEPAGE) };
        let mut b = Buf::Huge { map, start, len };
        // Fault it in now, so the reads time the device, not the zeroing.
        for i in (0..len).step_by(4096) {
            // SAFETY: i < len, inside the mapping at `start`.
            unsafe { b.as_mut_ptr_len().0.add(i).write(0) };
        }
        Ok(b)
    }

    fn as_mut_ptr_len(&mut self) -> (*mut u8, usize) {
        match self {
            Buf::Small(a) => {
                let s = a.as_mut_slice();
                (s.as_mut_ptr(), s.len())
            }
            // SAFETY: start + len <= the mapping's size (start < HUGE).
            // No request uses a buffer once it is dropped (see
            // device_read_uring).
            Buf::Huge { map, start, len } => (unsafe { map.as_ptr().add(*start) }, *len),
        }
    }
}

pub(super) fn open_direct(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| Error::Io { context: format!("open O_DIRECT {}", path.display()), source: e })
}

/// Whether this kernel lets us set up an io_uring (seccomp and
/// kernel.io_uring_disabled may refuse it).
pub(super) fn uring_available() -> std::result::Result<(), String> {
    IoUring::new(2).map(drop).map_err(|e| e.to_string())
}

/// O_DIRECT reads of the whole file, `block` bytes a request, `qd` in
/// flight, issued by `engine` (`pool`: the pool form's memory, bytes);
/// MB/s.
pub(super) fn device_read(
    path: &Path,
    len: u64,
    block: usize,
    qd: usize,
    engine: DevEngine,
    pool: usize,
) -> Result<f64> {
    match engine {
        DevEngine::Threads => device_read_threads(path, len, block, qd),
        DevEngine::Uring => device_read_uring(path, len, block, qd, Slots::new(block, qd, false)?),
        DevEngine::UringHuge => device_read_uring(path, len, block, qd, Slots::new(block, qd, true)?),
        DevEngine::UringPool => device_read_uring(path, len, block, qd, Slots::pool(block, qd, pool)?),
    }
}

/// Where the requests land: `nr` slots of one request each, in `bufs`
/// (one buffer a slot, or one buffer of all the slots end to end).
struct Slots {
    bufs: Vec<Buf>,
    block: usize,
    per_buf: usize,
    nr: usize,
}

impl Slots {
    /// A buffer for each request in flight, reused as each completes.
    fn new(block: usize, qd: usize, huge: bool) -> Result<Slots> {
        let bufs = (0..qd).map(|_| Buf::new(block, huge)).collect::<Result<Vec<Buf>>>()?;
        Ok(Slots { bufs, block, per_buf: 1, nr: qd })
    }

    /// One huge-page pool of `bytes` (at least a slot per request in
    /// flight), cut into request-sized slots.
    fn pool(block: usize, qd: usize, bytes: usize) -> Result<Slots> {
        let nr = (bytes / block).max(qd);
        Ok(Slots { bufs: vec![Buf::new(nr * block, true)?], block, per_buf: nr, nr })
    }

    /// The start of slot `slot` (< nr). Makes no reference to the bytes
    /// of other slots, which may have reads in flight: a pool is `Huge`,
    /// whose pointer comes from the mapping; a `Small` buffer holds one
    /// slot.
    fn ptr(&mut self, slot: usize) -> *mut u8 {
        let (b, i) = (slot / self.per_buf, slot % self.per_buf);
        // SAFETY: slot < nr, so (i + 1) * block <= the buffer's length
        // (`per_buf` slots of `block` bytes each): the offset stays inside it.
        unsafe { self.bufs[b].as_mut_ptr_len().0.add(i * self.block) }
    }
}

fn device_read_threads(path: &Path, len: u64, block: usize, qd: usize) -> Result<f64> {
    let f = open_direct(path)?;
    let next = AtomicU64::new(0);
    let t = Instant::now();
    let res: Vec<Result<()>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..qd)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut buf = Aligned::new(block);
                    loop {
                        let off = next.fetch_add(block as u64, Ordering::Relaxed);
                        if off >= len {
                            return Ok(());
                        }
                        let want = (len - off).min(block as u64) as usize;
                        let n = f
                            .read_at(&mut buf.as_mut_slice()[..want], off)
                            .map_err(|e| Error::Io { context: format!("O_DIRECT read at {off}"), source: e })?;
                        if n < want {
                            return Err(Error::Check(format!("O_DIRECT read at {off}: {n} of {want} bytes")));
                        }
                    }
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    res.into_iter().collect::<Result<()>>()?;
    Ok(mbps(len, t))
}

fn device_read_uring(path: &Path, len: u64, block: usize, qd: usize, mut bufs: Slots) -> Result<f64> {
    let f = open_direct(path)?;
    let uerr = |e| Error::Io { context: "io_uring".into(), source: e };
    let mut ring = IoUring::new(qd.next_power_of_two() as u32).map_err(uerr)?;
    let fd = types::Fd(f.as_raw_fd());
    // Per slot: the offset and length of its request in flight.
    let mut asked = vec![(0u64, 0usize); bufs.nr];
    // Oldest free first: a pool's slots are used in turn.
    let mut free: std::collections::VecDeque<usize> = (0..bufs.nr).collect();
    let (mut next, mut inflight) = (0u64, 0usize);
    let mut failed: Option<Error> = None;
    let t = Instant::now();
    loop {
        while failed.is_none() && next < len && inflight < qd {
            let Some(slot) = free.pop_front() else { break };
            let n = (len - next).min(block as u64) as usize;
            let sqe = opcode::Read::new(fd, bufs.ptr(slot), n as u32).offset(next).build().user_data(slot as u64);
            // SAFETY: the read targets slot `slot` of `bufs`, which is neither
            // touched nor dropped until this request's CQE is reaped: the
            // slot goes back to `free` only then, the loop leaves only
            // with nothing in flight, and where the ring fails with
            // requests still in flight the buffers are leaked, not freed.
            // `f` (the descriptor) outlives the ring.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                // Cannot happen: the SQ has a slot per request in flight.
                free.push_front(slot);
                break;
            }
            asked[slot] = (next, n);
            next += n as u64;
            inflight += 1;
        }
        if inflight == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // Requests may still be in flight into the buffers: keep them.
            std::mem::forget(bufs);
            return Err(uerr(e));
        }
        for c in ring.completion() {
            let slot = c.user_data() as usize;
            let Some(&(off, want)) = asked.get(slot) else { continue };
            inflight -= 1;
            free.push_back(slot);
            if usize::try_from(c.result()).ok() != Some(want) && failed.is_none() {
                failed = Some(if c.result() < 0 {
                    Error::Io {
                        context: format!("O_DIRECT io_uring read at {off}"),
                        source: std::io::Error::from_raw_os_error(-c.result()),
                    }
                } else {
                    Error::Check(format!("O_DIRECT io_uring read at {off}: {} of {want} bytes", c.result()))
                });
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(mbps(len, t))
}

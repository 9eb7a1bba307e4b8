//! An in-memory backing device: the tmpfs case.
//!
//! A sparse, growable file kept in page-sized chunks allocated on first
//! write. Holes (never written, truncated away or punched) read as zeroes
//! without allocating, so a device standing for a large file that is only
//! read costs no memory.
//!
//! Invariant: bytes of a chunk at or past the device's length are zero, so
//! extending the length exposes zeroes as a real file would.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::BackingDev;

/// Chunk maps are sharded by page number so concurrent transfers of
/// different pages rarely meet on one lock.
const SHARDS: usize = 64;

/// Above this many pages, dropping a range scans the maps instead of
/// removing page by page.
const DROP_SCAN_THRESHOLD: u64 = 256;

type Chunks = HashMap<u64, Box<[u8]>>;

fn is_zero(buf: &[u8]) -> bool {
    // OR-fold in fixed blocks so the compiler can vectorise it.
    buf.chunks(64).all(|c| c.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

/// A sparse, growable in-memory file.
pub struct MemoryDev {
    name: String,
    page_size: usize,
    len: AtomicU64,
    shards: Box<[RwLock<Chunks>]>,
    /// Serialises `set_len` and `punch_hole` with each other.
    resize: Mutex<()>,
    /// What the device reports as its queue limits (none by default; set
    /// by tests and tools that model a block device).
    limits: Option<super::QueueLimits>,
}

impl MemoryDev {
    /// An empty device called `memory:<name>`.
    ///
    /// # Panics
    ///
    /// If `page_size` is not a power of two.
    pub fn new(name: &str, page_size: usize) -> MemoryDev {
        assert!(page_size.is_power_of_two(), "page size {page_size} is not a power of two");
        MemoryDev {
            name: format!("memory:{name}"),
            page_size,
            len: AtomicU64::new(0),
            limits: None,
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            resize: Mutex::new(()),
        }
    }

    /// The same device, reporting `limits` as its request queue's (a
    /// modelled block device, for readahead sizing).
    pub fn with_queue_limits(mut self, limits: super::QueueLimits) -> MemoryDev {
        self.limits = Some(limits);
        self
    }

    /// The page size this device was created with.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// How many pages of memory the device holds.
    pub fn allocated_pages(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    fn shard(&self, page: u64) -> &RwLock<Chunks> {
        &self.shards[(page % SHARDS as u64) as usize]
    }

    /// Copy `[pos, pos + out.len())` into `out`, zeroes for holes.
    fn read_at(&self, mut pos: u64, mut out: &mut [u8]) {
        let ps = self.page_size as u64;
        while !out.is_empty() {
            let page = pos / ps;
            let off = (pos % ps) as usize;
            let n = out.len().min(self.page_size - off);
            let (dst, rest) = out.split_at_mut(n);
            match self.shard(page).read().get(&page) {
                Some(chunk) => dst.copy_from_slice(&chunk[off..off + n]),
                None => dst.fill(0),
            }
            out = rest;
            pos += n as u64;
        }
    }

    /// Store `data` at `pos`, allocating chunks only for non-zero data.
    fn write_at(&self, mut pos: u64, mut data: &[u8]) {
        let ps = self.page_size as u64;
        while !data.is_empty() {
            let page = pos / ps;
            let off = (pos % ps) as usize;
            let n = data.len().min(self.page_size - off);
            let (src, rest) = data.split_at(n);
            let zero = is_zero(src);
            let mut shard = self.shard(page).write();
            match shard.get_mut(&page) {
                Some(_) if zero && n == self.page_size => {
                    shard.remove(&page);
                }
                Some(chunk) => chunk[off..off + n].copy_from_slice(src),
                None if zero => {}
                None => {
                    let mut chunk = vec![0u8; self.page_size].into_boxed_slice();
                    chunk[off..off + n].copy_from_slice(src);
                    shard.insert(page, chunk);
                }
            }
            data = rest;
            pos += n as u64;
        }
    }

    /// Zero `[lo, hi)` within one page, dropping the chunk if that is all of it.
    fn zero_in_page(&self, page: u64, lo: usize, hi: usize) {
        let mut shard = self.shard(page).write();
        if lo == 0 && hi >= self.page_size {
            shard.remove(&page);
        } else if let Some(chunk) = shard.get_mut(&page) {
            chunk[lo..hi].fill(0);
        }
    }

    /// Drop every chunk for pages in `[first, end)`.
    fn drop_pages(&self, first: u64, end: u64) {
        if first >= end {
            return;
        }
        if end - first <= DROP_SCAN_THRESHOLD {
            for page in first..end {
                self.shard(page).write().remove(&page);
            }
        } else {
            for shard in self.shards.iter() {
                shard.write().retain(|&p, _| p < first || p >= end);
            }
        }
    }
}

impl fmt::Debug for MemoryDev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryDev")
            .field("name", &self.name)
            .field("page_size", &self.page_size)
            .field("len", &self.len.load(Ordering::Relaxed))
            .field("allocated_pages", &self.allocated_pages())
            .finish()
    }
}

impl BackingDev for MemoryDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn bdi_name(&self) -> String {
        "memory".to_string()
    }

    fn queue_limits(&self) -> Option<super::QueueLimits> {
        self.limits
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let len = self.len.load(Ordering::Acquire);
        let mut avail = len.saturating_sub(pos);
        let mut cur = pos;
        let mut done = 0usize;
        for buf in bufs.iter_mut() {
            let want = (buf.len() as u64).min(avail) as usize;
            self.read_at(cur, &mut buf[..want]);
            done += want;
            cur += want as u64;
            avail -= want as u64;
            if want < buf.len() {
                break;
            }
        }
        Ok(done)
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if total == 0 {
            return Ok(());
        }
        let end = pos
            .checked_add(total)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past the largest file offset"))?;
        // Bytes at or past `stop` are not part of the file: not stored, and
        // the device grows at most to `stop`.
        let limit = file_size.max(self.len.load(Ordering::Acquire));
        let stop = end.min(limit);
        let mut cur = pos;
        for buf in bufs {
            if cur >= stop {
                break;
            }
            let n = (buf.len() as u64).min(stop - cur) as usize;
            self.write_at(cur, &buf[..n]);
            cur += buf.len() as u64;
        }
        if stop > pos {
            self.len.fetch_max(stop, Ordering::AcqRel);
        }
        Ok(())
    }

    fn sync(&self, _data_only: bool) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len.load(Ordering::Acquire))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let _guard = self.resize.lock();
        let old = self.len.load(Ordering::Acquire);
        if len >= old {
            // Bytes past the old length are already zero.
            self.len.store(len, Ordering::Release);
            return Ok(());
        }
        self.len.store(len, Ordering::Release);
        let ps = self.page_size as u64;
        let first_gone = len.div_ceil(ps);
        let old_end = old.div_ceil(ps);
        self.drop_pages(first_gone, old_end);
        if !len.is_multiple_of(ps) {
            self.zero_in_page(len / ps, (len % ps) as usize, self.page_size);
        }
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let _guard = self.resize.lock();
        // Past the length everything is zero already.
        let end = offset.saturating_add(len).min(self.len.load(Ordering::Acquire));
        if offset >= end {
            return Ok(());
        }
        let ps = self.page_size as u64;
        let (first, last) = (offset / ps, (end - 1) / ps);
        self.drop_pages(offset.div_ceil(ps), end / ps);
        if !offset.is_multiple_of(ps) {
            let hi = (end - first * ps).min(ps);
            self.zero_in_page(first, (offset % ps) as usize, hi as usize);
        }
        if !end.is_multiple_of(ps) && (last != first || offset.is_multiple_of(ps)) {
            self.zero_in_page(last, 0, (end % ps) as usize);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const PS: usize = 4096;

    fn read(dev: &MemoryDev, pos: u64, n: usize) -> (usize, Vec<Vec<u8>>) {
        let mut bufs = vec![vec![0xEEu8; PS]; n];
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let got = dev.read_pages(pos, &mut refs).unwrap();
        (got, bufs)
    }

    fn write(dev: &MemoryDev, pos: u64, fills: &[u8], file_size: u64) {
        let bufs: Vec<Vec<u8>> = fills.iter().map(|&f| vec![f; PS]).collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        dev.write_pages(pos, &refs, file_size).unwrap();
    }

    #[test]
    fn name_and_empty() {
        let dev = MemoryDev::new("x", PS);
        assert_eq!(dev.name(), "memory:x");
        assert_eq!(dev.len().unwrap(), 0);
        assert_eq!(read(&dev, 0, 2).0, 0);
        dev.sync(true).unwrap();
        dev.remove().unwrap();
        assert!(!dev.is_direct());
    }

    #[test]
    fn round_trip_and_holes() {
        let dev = MemoryDev::new("rt", PS);
        write(&dev, 2 * PS as u64, &[1, 2], 4 * PS as u64);
        assert_eq!(dev.len().unwrap(), 4 * PS as u64);
        assert_eq!(dev.allocated_pages(), 2);
        let (n, back) = read(&dev, 0, 4);
        assert_eq!(n, 4 * PS);
        assert!(back[0].iter().all(|&b| b == 0), "hole reads zero");
        assert!(back[1].iter().all(|&b| b == 0));
        assert!(back[2].iter().all(|&b| b == 1));
        assert!(back[3].iter().all(|&b| b == 2));
        assert_eq!(dev.allocated_pages(), 2, "reading holes allocates nothing");
    }

    #[test]
    fn reads_stop_at_len() {
        let dev = MemoryDev::new("eof", PS);
        write(&dev, 0, &[3, 4], PS as u64 + 10);
        assert_eq!(dev.len().unwrap(), PS as u64 + 10);
        let (n, back) = read(&dev, 0, 3);
        assert_eq!(n, PS + 10);
        assert!(back[1][..10].iter().all(|&b| b == 4));
        assert!(back[1][10..].iter().all(|&b| b == 0xEE), "past EOF untouched");
        assert!(back[2].iter().all(|&b| b == 0xEE));
        assert_eq!(read(&dev, 5 * PS as u64, 1).0, 0);
    }

    #[test]
    fn tail_bytes_past_file_size_are_not_kept() {
        let dev = MemoryDev::new("tail", PS);
        write(&dev, 0, &[9], 100);
        assert_eq!(dev.len().unwrap(), 100);
        // Growing the file must expose zeroes, not the old tail bytes.
        dev.set_len(PS as u64).unwrap();
        let (_, back) = read(&dev, 0, 1);
        assert!(back[0][..100].iter().all(|&b| b == 9));
        assert!(back[0][100..].iter().all(|&b| b == 0));
        // A longer device keeps its length.
        dev.set_len(3 * PS as u64).unwrap();
        write(&dev, 0, &[8], 50);
        assert_eq!(dev.len().unwrap(), 3 * PS as u64);
        // Pages wholly past file_size and the length are dropped.
        write(&dev, 10 * PS as u64, &[7], 50);
        assert_eq!(dev.len().unwrap(), 3 * PS as u64);
        assert_eq!(dev.allocated_pages(), 1);
    }

    #[test]
    fn zero_pages_do_not_allocate() {
        let dev = MemoryDev::new("z", PS);
        write(&dev, 0, &[0, 0, 0], 3 * PS as u64);
        assert_eq!(dev.len().unwrap(), 3 * PS as u64);
        assert_eq!(dev.allocated_pages(), 0);
        write(&dev, 0, &[5], 3 * PS as u64);
        assert_eq!(dev.allocated_pages(), 1);
        // Overwriting with zeroes frees the chunk and reads back zero.
        write(&dev, 0, &[0], 3 * PS as u64);
        assert_eq!(dev.allocated_pages(), 0);
        assert!(read(&dev, 0, 1).1[0].iter().all(|&b| b == 0));
    }

    #[test]
    fn truncate_drops_and_zeroes() {
        let dev = MemoryDev::new("tr", PS);
        write(&dev, 0, &[1, 2, 3, 4], 4 * PS as u64);
        dev.set_len(PS as u64 + 7).unwrap();
        assert_eq!(dev.len().unwrap(), PS as u64 + 7);
        assert_eq!(dev.allocated_pages(), 2);
        let (n, back) = read(&dev, 0, 4);
        assert_eq!(n, PS + 7);
        assert!(back[1][..7].iter().all(|&b| b == 2));
        dev.set_len(4 * PS as u64).unwrap();
        let (n, back) = read(&dev, 0, 4);
        assert_eq!(n, 4 * PS);
        assert!(back[0].iter().all(|&b| b == 1));
        assert!(back[1][..7].iter().all(|&b| b == 2));
        assert!(back[1][7..].iter().all(|&b| b == 0));
        assert!(back[2].iter().all(|&b| b == 0));
        assert!(back[3].iter().all(|&b| b == 0));
        dev.set_len(0).unwrap();
        assert_eq!(dev.allocated_pages(), 0);
    }

    #[test]
    fn truncate_large_range_scans() {
        let dev = MemoryDev::new("big", PS);
        let n = DROP_SCAN_THRESHOLD as usize + 50;
        let fills: Vec<u8> = (0..n).map(|i| i as u8 | 1).collect();
        write(&dev, 0, &fills, (n * PS) as u64);
        assert_eq!(dev.allocated_pages(), n);
        dev.set_len(10).unwrap();
        assert_eq!(dev.allocated_pages(), 1);
    }

    #[test]
    fn punch_hole_zeroes_range() {
        let dev = MemoryDev::new("ph", PS);
        write(&dev, 0, &[1, 2, 3, 4], 4 * PS as u64);
        // Whole pages 1..3 dropped.
        dev.punch_hole(PS as u64, 2 * PS as u64).unwrap();
        assert_eq!(dev.allocated_pages(), 2);
        assert_eq!(dev.len().unwrap(), 4 * PS as u64);
        // Partial ranges inside one page and across a boundary.
        dev.punch_hole(10, 20).unwrap();
        dev.punch_hole(4 * PS as u64 - 5, 100).unwrap();
        let (n, back) = read(&dev, 0, 4);
        assert_eq!(n, 4 * PS);
        for (j, &b) in back[0].iter().enumerate() {
            assert_eq!(b, if (10..30).contains(&j) { 0 } else { 1 }, "byte {j}");
        }
        assert!(back[1].iter().all(|&b| b == 0));
        assert!(back[2].iter().all(|&b| b == 0));
        assert!(back[3][..PS - 5].iter().all(|&b| b == 4));
        assert!(back[3][PS - 5..].iter().all(|&b| b == 0));
        assert_eq!(dev.len().unwrap(), 4 * PS as u64, "punch keeps size");
        // Unaligned start spanning pages; huge length.
        dev.punch_hole(PS as u64 - 1, u64::MAX).unwrap();
        let (_, back) = read(&dev, 0, 4);
        assert_eq!(back[0][PS - 2], 1);
        assert_eq!(back[0][PS - 1], 0);
        assert!(back[3].iter().all(|&b| b == 0));
        assert_eq!(dev.allocated_pages(), 1);
    }

    #[test]
    fn large_sparse_file_costs_nothing_to_read() {
        let dev = MemoryDev::new("4g", PS);
        let size = 4u64 << 30;
        dev.set_len(size).unwrap();
        for pos in [0, 1 << 20, (2u64 << 30) + 8192, size - PS as u64] {
            let (n, back) = read(&dev, pos, 16);
            assert_eq!(n as u64, (16 * PS as u64).min(size - pos));
            assert!(back.iter().take(n / PS).all(|p| p.iter().all(|&b| b == 0)));
        }
        assert_eq!(dev.allocated_pages(), 0);
        dev.punch_hole(0, size).unwrap();
        dev.set_len(PS as u64).unwrap();
        assert_eq!(dev.allocated_pages(), 0);
    }

    #[test]
    fn concurrent_writers() {
        let dev = Arc::new(MemoryDev::new("mt", PS));
        let (threads, per) = (8usize, 64usize);
        let size = (threads * per * PS) as u64;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let dev = Arc::clone(&dev);
                std::thread::spawn(move || {
                    for i in 0..per {
                        let pg = t * per + i;
                        write(&dev, (pg * PS) as u64, &[pg as u8 | 1], size);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(dev.len().unwrap(), size);
        let (n, back) = read(&dev, 0, threads * per);
        assert_eq!(n as u64, size);
        for (pg, p) in back.iter().enumerate() {
            assert!(p.iter().all(|&b| b == pg as u8 | 1), "page {pg}");
        }
    }
}

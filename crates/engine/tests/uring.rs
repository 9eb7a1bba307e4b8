//! Asynchronous I/O through io_uring (bio/uring.rs): host files
//! opened O_DIRECT are read ahead and written back through the cache's
//! ring, with the same results as the I/O threads give. Each test skips,
//! saying so, where the kernel refuses io_uring or the file system refuses
//! O_DIRECT (then the ring has nothing to drive).

mod common;

use common::{delta, scratch, stamped_page, write_stamped_file};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pcache::{Config, File, IoEngine, Item, OpenOptions, PageCache, Tunables};

const PS: u64 = 4096;

/// No kswapd, and a flusher that never finds anything old enough to write.
fn quiet(engine: IoEngine) -> Tunables {
    Tunables {
        kswapd: false,
        dirty_expire_centisecs: 360_000,
        dirty_writeback_centisecs: 360_000,
        io_engine: engine,
        ..Tunables::default()
    }
}

/// A cache of `pages` pages with its I/O on `engine`; None (the test
/// skips) if io_uring was asked for and the kernel refuses it.
fn cache_with(engine: IoEngine, pages: u64) -> Option<PageCache> {
    match PageCache::new(Config { memory_bytes: pages * PS, tunables: quiet(engine), ..Config::default() }) {
        Ok(c) => Some(c),
        Err(e) if engine == IoEngine::Uring => {
            eprintln!("skipped: io_uring unavailable here ({e})");
            None
        }
        Err(e) => panic!("cache: {e}"),
    }
}

/// Open `path` through the cache; None (skip) if O_DIRECT was refused.
fn open_direct(cache: &PageCache, path: &Path) -> Option<File> {
    let probe = std::fs::OpenOptions::new().read(true).custom_flags_direct().open(path);
    if probe.is_err() {
        eprintln!("skipped: {} refuses O_DIRECT, so io_uring has nothing to drive", path.display());
        return None;
    }
    Some(cache.open(path, OpenOptions { create: false, ..OpenOptions::default() }).unwrap())
}

trait DirectFlag {
    fn custom_flags_direct(&mut self) -> &mut Self;
}

impl DirectFlag for std::fs::OpenOptions {
    fn custom_flags_direct(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECT)
    }
}

/// Read pages `[from, to)` of `f` in `chunk`-page calls and check them.
fn read_and_check(f: &File, seed: u64, from: u64, to: u64, chunk: u64) {
    let mut buf = vec![0u8; (chunk * PS) as usize];
    let mut i = from;
    while i < to {
        let n = chunk.min(to - i);
        let got = f.read_at(&mut buf[..(n * PS) as usize], i * PS).unwrap();
        assert_eq!(got, (n * PS) as usize, "read at page {i}");
        for k in 0..n {
            let page = &buf[(k * PS) as usize..((k + 1) * PS) as usize];
            assert!(page == stamped_page(seed, i + k), "page {} wrong (first 16: {:?})", i + k, &page[..16]);
        }
        i += n;
    }
}

// Goal: a cold host file read sequentially arrives by readahead through
// the ring (ra_submit_uring counts its runs, uring_setup the ring) with
// the file's bytes, and the same read with io_engine = Threads uses no
// ring at all. Method: a 4 MiB host file written directly, read through a
// 1 MiB cache in 4 KiB and 64 KiB calls, every byte checked.
#[test]
fn readahead_of_a_cold_host_file_goes_through_the_ring() {
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "cold", 1, 1024);
    let Some(cache) = cache_with(IoEngine::Uring, 256) else { return };
    assert_eq!(cache.vmstat().get(Item::uring_setup), 1);
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    read_and_check(&f, 1, 0, 1024, 1);
    cache.drop_caches();
    read_and_check(&f, 1, 0, 1024, 16);
    let ra = delta(&cache, &before, Item::ra_submit_uring);
    assert!(ra > 0, "no readahead run went through the ring");
    eprintln!("ring runs {ra}, fix-ups {}", delta(&cache, &before, Item::uring_fixup));
    drop(f);
    cache.shutdown().unwrap();

    let threads = cache_with(IoEngine::Threads, 256).unwrap();
    let f = open_direct(&threads, &path).unwrap();
    read_and_check(&f, 1, 0, 1024, 16);
    let v = threads.vmstat();
    assert_eq!((v.get(Item::uring_setup), v.get(Item::ra_submit_uring)), (0, 0));
    assert!(v.get(Item::ra_submit_async) > 0);
}

// Goal: writeback through the ring puts the right bytes on disk, and
// fsync waits for it: after fsync the host file, read directly, holds
// every page written, including a partial last page (which goes through
// the device's own path: it needs the file cut back to its size).
// Method: 300 pages and 100 bytes written through the cache into a new
// host file, overwritten in part, fsync'd; the file read with std::fs.
#[test]
fn fsync_after_writes_through_the_ring_puts_the_bytes_on_disk() {
    let dir = scratch();
    let path = dir.path().join("written");
    let Some(cache) = cache_with(IoEngine::Uring, 1024) else { return };
    let f = cache.open(&path, OpenOptions::default()).unwrap();
    if !probe_direct(&path) {
        return;
    }
    let before = cache.vmstat();
    let n = 300;
    for i in 0..n {
        assert_eq!(f.write_at(&stamped_page(2, i), i * PS).unwrap(), PS as usize);
    }
    let tail = &stamped_page(2, n)[..100];
    f.write_at(tail, n * PS).unwrap();
    f.fsync().unwrap();
    // Rewritten in part: the second writeback must land too.
    for i in (0..n).step_by(3) {
        f.write_at(&stamped_page(3, i), i * PS).unwrap();
    }
    f.fsync().unwrap();
    let wb = delta(&cache, &before, Item::wb_submit_uring);
    assert!(wb > 0, "no writeback run went through the ring");
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(disk.len() as u64, n * PS + 100);
    for i in 0..n {
        let want = stamped_page(if i % 3 == 0 { 3 } else { 2 }, i);
        assert!(disk[(i * PS) as usize..((i + 1) * PS) as usize] == want[..], "page {i} on disk is wrong");
    }
    assert!(&disk[(n * PS) as usize..] == tail);
    let v = cache.vmstat();
    assert_eq!((v.get(Item::nr_writeback), v.get(Item::nr_dirty)), (0, 0));
    drop(f);
    cache.shutdown().unwrap();
}

fn probe_direct(path: &Path) -> bool {
    let ok = std::fs::OpenOptions::new().read(true).custom_flags_direct().open(path).is_ok();
    if !ok {
        eprintln!("skipped: {} refuses O_DIRECT, so io_uring has nothing to drive", path.display());
    }
    ok
}

// Goal: many readers of several cold host files at once, each reading
// its own and each other's files, all get the right bytes through the
// ring, and nothing stays locked: after they finish, every file drops
// from the cache completely, and shutdown drains the ring.
// Method: 4 files of 512 pages in a 2 MiB cache (so reclaim runs too), 8
// threads reading them in different orders and call sizes.
#[test]
fn concurrent_readers_through_the_ring() {
    let dir = scratch();
    let paths: Vec<PathBuf> = (0..4).map(|k| write_stamped_file(dir.path(), &format!("f{k}"), 10 + k, 512)).collect();
    let Some(cache) = cache_with(IoEngine::Uring, 512) else { return };
    let Some(first) = open_direct(&cache, &paths[0]) else { return };
    let files: Vec<Arc<File>> = std::iter::once(first)
        .chain(paths[1..].iter().map(|p| open_direct(&cache, p).unwrap()))
        .map(Arc::new)
        .collect();
    let before = cache.vmstat();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let files = &files;
            s.spawn(move || {
                for round in 0..2 {
                    let k = ((t + round) % 4) as usize;
                    let chunk = [1, 8, 32, 3][(t % 4) as usize];
                    let from = (t * 37) % 128;
                    read_and_check(&files[k], 10 + k as u64, from, 512, chunk);
                }
            });
        }
    });
    assert!(delta(&cache, &before, Item::ra_submit_uring) > 0);
    // An asynchronous window a reader queued may still be on the ring,
    // its pages locked, for a moment after the readers are done (under
    // load, the readahead thread runs late); nothing may stay for good.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        cache.drop_caches();
        let left: Vec<u64> = files.iter().map(|f| f.cached_pages()).collect();
        if left.iter().all(|&n| n == 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "pages left cached (locked or referenced?): {left:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(files);
    cache.shutdown().unwrap();
}

// Goal: shutdown right after submitting readahead drains the ring: no
// page stays locked and the cache shuts down cleanly.
// Method: start a 16-page read on each of 4 cold files (each submits an
// async window), then shut down at once.
#[test]
fn shutdown_drains_requests_in_flight() {
    let dir = scratch();
    let paths: Vec<PathBuf> = (0..4).map(|k| write_stamped_file(dir.path(), &format!("s{k}"), 20 + k, 256)).collect();
    let Some(cache) = cache_with(IoEngine::Uring, 1024) else { return };
    let mut files = Vec::new();
    for (k, p) in paths.iter().enumerate() {
        let Some(f) = open_direct(&cache, p) else { return };
        read_and_check(&f, 20 + k as u64, 0, 16, 16);
        files.push(f);
    }
    cache.shutdown().unwrap();
    assert_eq!(cache.vmstat().get(Item::nr_writeback), 0);
}

// Goal: the ring's short read at end of file is finished through the
// device's own path: the file's bytes, then zeroes to the page's end, and
// reads stop at EOF. Method: a host file of 100 pages and 123 bytes, read
// cold through the cache in 4 KiB calls; its last window's O_DIRECT read
// ends short (uring_fixup counts it).
#[test]
fn short_read_at_eof_is_finished_and_zero_filled() {
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "tail", 4, 101);
    let full = std::fs::read(&path).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100 * PS + 123).unwrap();
    let Some(cache) = cache_with(IoEngine::Uring, 1024) else { return };
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    read_and_check(&f, 4, 0, 100, 1);
    let mut buf = vec![0xAAu8; PS as usize];
    assert_eq!(f.read_at(&mut buf, 100 * PS).unwrap(), 123);
    assert!(buf[..123] == full[(100 * PS) as usize..(100 * PS) as usize + 123]);
    assert_eq!(f.read_at(&mut buf, 101 * PS).unwrap(), 0);
    assert!(delta(&cache, &before, Item::ra_submit_uring) > 0);
    eprintln!("fix-ups: {}", delta(&cache, &before, Item::uring_fixup));
    drop(f);
    cache.shutdown().unwrap();
}

// Goal: a descriptor the fd cache evicts while a ring request uses it
// stays open until the request completes (the request holds it): readers
// of more files than the cache keeps descriptors for get the right bytes.
// Method: 12 cold host files, max_open_fds 4, 6 threads each reading
// every file in turn in 16-page calls.
#[test]
fn descriptors_evicted_in_flight_stay_open_until_completion() {
    let dir = scratch();
    let paths: Vec<PathBuf> = (0..12).map(|k| write_stamped_file(dir.path(), &format!("e{k}"), 40 + k, 128)).collect();
    let t = Tunables { max_open_fds: 4, ..quiet(IoEngine::Uring) };
    let cache = match PageCache::new(Config { memory_bytes: 1024 * PS, tunables: t, ..Config::default() }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: io_uring unavailable here ({e})");
            return;
        }
    };
    let mut files = Vec::new();
    for p in &paths {
        let Some(f) = open_direct(&cache, p) else { return };
        files.push(f);
    }
    let before = cache.vmstat();
    std::thread::scope(|s| {
        for t in 0..6usize {
            let files = &files;
            s.spawn(move || {
                for k in 0..files.len() {
                    let k = (k + t) % files.len();
                    read_and_check(&files[k], 40 + k as u64, 0, 128, 16);
                }
            });
        }
    });
    assert!(delta(&cache, &before, Item::ra_submit_uring) > 0);
    drop(files);
    cache.shutdown().unwrap();
    assert!(cache.vmstat().get(Item::nr_open_fds) <= 4 + 6);
}

//! Asynchronous I/O under both engines: errors, races with
//! in-flight I/O, fsync under writers and PG_reclaim rotation, each test
//! written once and run by `both_engines!` under `IoEngine::Threads` and
//! `IoEngine::Uring`.
//!
//! The devices are host files opened O_DIRECT, so under io_uring their
//! readahead and writeback go through the ring; the error tests wrap them
//! in a `FaultInjector`, which lends the ring the transfers no rule touches
//! and keeps the faulted ones on the device's own calls. Under io_uring a
//! test skips, saying so, where the kernel refuses io_uring or the file
//! system refuses O_DIRECT.

mod common;

use common::{delta, scratch, stamped_page, write_stamped_file};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pcache::backing::{BackingDev, Fault, FaultInjector, FaultOp, FileDev};
use pcache::{Advice, Config, DevReadMode, File, IoEngine, Item, OpenOptions, PageCache, Tunables, VmStat};

const PS: u64 = 4096;

/// Each test body once, as a function of the engine; a test per engine.
macro_rules! both_engines {
    ($($name:ident),* $(,)?) => {
        mod threads {
            $(#[test] fn $name() { super::$name(pcache::IoEngine::Threads) })*
        }
        mod uring {
            $(#[test] fn $name() { super::$name(pcache::IoEngine::Uring) })*
        }
    };
}

both_engines!(
    read_eio_reaches_the_reader,
    write_eio_reaches_fsync_once_per_handle,
    truncate_races_in_flight_readahead_and_writeback,
    punch_races_in_flight_readahead_and_writeback,
    fsync_under_concurrent_writers,
    reclaim_rotation_on_write_completion,
    dontcache_reads_return_the_files_bytes,
    truncate_races_dontcache_reads,
);

/// A cache of `pages` pages on `engine`; None (skip) if io_uring is refused.
fn cache_on(engine: IoEngine, pages: u64, tunables: Tunables) -> Option<PageCache> {
    let tunables = Tunables { io_engine: engine, ..tunables };
    match PageCache::new(Config { memory_bytes: pages * PS, tunables, ..Config::default() }) {
        Ok(c) => Some(c),
        Err(e) if engine == IoEngine::Uring => {
            eprintln!("skipped: io_uring unavailable here ({e})");
            None
        }
        Err(e) => panic!("cache: {e}"),
    }
}

/// No kswapd wakeups from the flusher's period: writeback when asked.
fn quiet() -> Tunables {
    Tunables { dirty_expire_centisecs: 360_000, dirty_writeback_centisecs: 360_000, ..Tunables::default() }
}

/// An O_DIRECT device on `path`; None (skip) where O_DIRECT is refused.
fn direct_dev(path: &Path) -> Option<FileDev> {
    let dev = FileDev::open(path, true, false, true, PS as usize).unwrap();
    if !dev.is_direct() {
        eprintln!("skipped: {} refuses O_DIRECT, so io_uring has nothing to drive", path.display());
        return None;
    }
    Some(dev)
}

/// Open `path` through the cache; None (skip) where O_DIRECT is refused.
fn open_direct(cache: &PageCache, path: &Path) -> Option<File> {
    let f = cache.open(path, OpenOptions { create: true, ..OpenOptions::default() }).unwrap();
    direct_dev(path)?;
    Some(f)
}

/// Under io_uring, readahead or writeback did go through the ring.
fn check_ring_used(engine: IoEngine, cache: &PageCache, before: &VmStat, item: Item) {
    if engine == IoEngine::Uring {
        assert!(delta(cache, before, item) > 0, "io_uring: no {item:?} went through the ring");
    } else {
        assert_eq!(cache.vmstat().get(Item::uring_setup), 0, "threads: a ring was set up");
    }
}

/// Every frame is free or a file page once the cache is quiet (a frame
/// in flight settles; a leaked one never does).
fn check_no_frame_leaked(cache: &PageCache, nr_pages: u64) {
    let mut last = (0, 0);
    for _ in 0..400 {
        cache.lru_add_drain_all();
        let vm = cache.vmstat();
        let (free, file) = (vm.get(Item::nr_free_pages), vm.get(Item::nr_file_pages));
        if free + file == nr_pages {
            return;
        }
        last = (free, file);
        thread::sleep(Duration::from_millis(5));
    }
    panic!("frames leaked: nr_free_pages {} + nr_file_pages {} != nr_pages {nr_pages}", last.0, last.1);
}

// Goal: EIO on an asynchronous read reaches the reader, and every byte a
// read does return is the file's; once the device heals, the pages read
// correctly (the error was not cached). Method: a 512-page host file
// behind a FaultInjector failing reads that meet page 300; read
// sequentially through a 128-page cache in 64 KiB calls.
fn read_eio_reaches_the_reader(engine: IoEngine) {
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "eio-read", 3, 512);
    let Some(cache) = cache_on(engine, 128, quiet()) else { return };
    let Some(dev) = direct_dev(&path) else { return };
    let fi = Arc::new(FaultInjector::new(Arc::new(dev)));
    let f = cache.open_dev(fi.clone()).unwrap();
    fi.fail_page_range(FaultOp::Read, 300 * PS, 301 * PS, Fault::Eio);
    let before = cache.vmstat();
    let mut buf = vec![0u8; 16 * PS as usize];
    let mut failed = Vec::new();
    for call in 0..32u64 {
        match f.read_at(&mut buf, call * 16 * PS) {
            Ok(n) => {
                assert_eq!(n, buf.len());
                for k in 0..16 {
                    let i = call * 16 + k;
                    let page = &buf[(k * PS) as usize..((k + 1) * PS) as usize];
                    assert!(page == stamped_page(3, i), "page {i} wrong");
                }
            }
            Err(e) => {
                assert_eq!(e.errno(), libc::EIO, "{e:?}");
                failed.push(call);
            }
        }
    }
    assert!(failed.contains(&(300 / 16)), "the read of page 300 did not fail (failed calls {failed:?})");
    assert!(fi.faults_injected() > 0);
    check_ring_used(engine, &cache, &before, Item::ra_submit_uring);
    fi.clear();
    let mut one = vec![0u8; PS as usize];
    assert_eq!(f.read_at(&mut one, 300 * PS).unwrap(), PS as usize);
    assert!(one == stamped_page(3, 300), "page 300 after the device healed");
}

// Goal: EIO on asynchronous writeback reaches fsync once per handle: the
// handle that fsyncs first and one opened before the error each see it
// once; the pages stay dirty and a later fsync writes them. Method: a
// host file behind a FaultInjector; 256 pages written through two
// handles' cache; the next device write fails. The background threshold
// is raised above the 256 dirty pages, so no flusher writes them before
// the rule is set (it did once under Uring: fsync then had nothing to
// write and succeeded).
fn write_eio_reaches_fsync_once_per_handle(engine: IoEngine) {
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "eio-write", 0, 256);
    let t = Tunables { dirty_background_ratio: 80, dirty_ratio: 90, ..quiet() };
    let Some(cache) = cache_on(engine, 1024, t) else { return };
    let Some(dev) = direct_dev(&path) else { return };
    let fi = Arc::new(FaultInjector::new(Arc::new(dev)));
    let a = cache.open_dev(fi.clone()).unwrap();
    let b = a.reopen().unwrap();
    let before = cache.vmstat();
    // A first round through the ring (no rule yet), then the fault.
    for i in 0..128 {
        a.write_at(&stamped_page(4, i), i * PS).unwrap();
    }
    a.fsync().unwrap();
    b.fsync().unwrap();
    check_ring_used(engine, &cache, &before, Item::wb_submit_uring);
    if engine == IoEngine::Threads {
        // The fsync wrote its last run itself rather than wait for a worker.
        assert!(delta(&cache, &before, Item::wb_waiter_inline) > 0, "fsync handed its last run to a worker");
    }
    for i in 0..256 {
        a.write_at(&stamped_page(5, i), i * PS).unwrap();
    }
    fi.fail_next(FaultOp::Write, Fault::Eio, 1);
    let e = a.fsync().expect_err("fsync on A succeeded though a device write failed");
    assert_eq!(e.errno(), libc::EIO, "{e:?}");
    a.fsync().unwrap_or_else(|e| panic!("second fsync on A: {e:?} (error already seen)"));
    let e = b.fsync().expect_err("B never saw the writeback error");
    assert_eq!(e.errno(), libc::EIO);
    b.fsync().unwrap();
    drop((a, b));
    cache.shutdown().unwrap();
    let disk = std::fs::read(&path).unwrap();
    for i in 0..256u64 {
        assert!(disk[(i * PS) as usize..((i + 1) * PS) as usize] == stamped_page(5, i)[..], "page {i} on disk");
    }
}

/// How a race round cuts pages `[k, end)` out of the file.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    Truncate,
    Punch,
}

/// Readers read a host file sequentially (readahead in flight), a
/// syncer keeps writeback in flight, and the main thread cuts a random
/// range out, checks it reads as zeroes (no stale page comes back from
/// an in-flight read or write), and restores it. Readers accept only the
/// page's bytes or zeroes. At the end: the file's bytes, on disk too, no
/// page dirty or under writeback, no frame leaked, shutdown clean.
fn race_cut(engine: IoEngine, cut: Cut, tunables: Tunables) {
    const PAGES: u64 = 1024;
    const CACHE: u64 = 256;
    const ROUNDS: u64 = 60;
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "race", 7, PAGES);
    if tunables.dev_read_mode == DevReadMode::Dontcache && !dontcache_supported(&path) {
        return;
    }
    let Some(cache) = cache_on(engine, CACHE, tunables) else { return };
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    let stop = AtomicBool::new(false);
    let bad = AtomicU64::new(0);
    thread::scope(|s| {
        for r in 0..2 {
            let (g, stop, bad) = (f.reopen().unwrap(), &stop, &bad);
            s.spawn(move || {
                let mut buf = vec![0u8; 32 * PS as usize];
                while !stop.load(Ordering::Relaxed) {
                    let _ = g.fadvise(0, 0, Advice::DontNeed);
                    let mut pos = r * 64 * PS;
                    while pos < PAGES * PS && !stop.load(Ordering::Relaxed) {
                        let n = g.read_at(&mut buf, pos).unwrap();
                        for (k, page) in buf[..n].chunks(PS as usize).enumerate() {
                            let i = pos / PS + k as u64;
                            if page != stamped_page(7, i) && page.iter().any(|&b| b != 0) {
                                bad.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if n < buf.len() {
                            // Cut short by a truncation: start again.
                            break;
                        }
                        pos += n as u64;
                    }
                }
            });
        }
        {
            let (g, stop) = (f.reopen().unwrap(), &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    g.fdatasync().unwrap();
                    thread::sleep(Duration::from_millis(1));
                }
            });
        }
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut x = 0x9E37_79B9u64;
            for round in 0..ROUNDS {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = (x >> 33) % (PAGES - 64);
                let len = 1 + (x >> 20) % 64;
                match cut {
                    Cut::Truncate => {
                        f.set_len(k * PS).unwrap();
                        f.set_len(PAGES * PS).unwrap();
                    }
                    Cut::Punch => f.punch_hole(k * PS, len * PS).unwrap(),
                }
                let end = match cut {
                    Cut::Truncate => (k + 64).min(PAGES),
                    Cut::Punch => k + len,
                };
                let mut buf = vec![0u8; ((end - k) * PS) as usize];
                assert_eq!(f.read_at(&mut buf, k * PS).unwrap(), buf.len());
                let stale = buf.chunks(PS as usize).position(|p| p.iter().any(|&b| b != 0));
                assert!(
                    stale.is_none(),
                    "round {round}: page {} came back after the cut",
                    k + stale.unwrap_or(0) as u64
                );
                // Restore: dirty pages for the syncer's in-flight writeback.
                let rest = if cut == Cut::Truncate { PAGES } else { end };
                for i in k..rest {
                    f.write_at(&stamped_page(7, i), i * PS).unwrap();
                }
            }
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = res {
            std::panic::resume_unwind(e);
        }
    });
    assert_eq!(bad.load(Ordering::Relaxed), 0, "readers saw pages that were neither the file's nor zeroes");
    check_ring_used(engine, &cache, &before, Item::ra_submit_uring);
    f.fsync().unwrap();
    cache.drop_caches();
    let mut buf = vec![0u8; (PAGES * PS) as usize];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    for (i, page) in buf.chunks(PS as usize).enumerate() {
        assert!(page == stamped_page(7, i as u64), "page {i} after the races");
    }
    let vm = cache.vmstat();
    assert_eq!((vm.get(Item::nr_dirty), vm.get(Item::nr_writeback)), (0, 0));
    check_no_frame_leaked(&cache, CACHE);
    drop(f);
    cache.shutdown().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert!(disk == buf, "the host file differs from the cache's last view");
}

// Goal: truncation racing in-flight readahead and writeback loses nothing,
// resurrects no page and leaks no frame (race_cut).
fn truncate_races_in_flight_readahead_and_writeback(engine: IoEngine) {
    race_cut(engine, Cut::Truncate, Tunables::default());
}

// Goal: as above for punch_hole.
fn punch_races_in_flight_readahead_and_writeback(engine: IoEngine) {
    race_cut(engine, Cut::Punch, Tunables::default());
}

// Goal: as above with the device's reads buffered with RWF_DONTCACHE
// (`DevReadMode::Dontcache`) and its writes O_DIRECT: the host's cache
// between them keeps no stale page.
fn truncate_races_dontcache_reads(engine: IoEngine) {
    race_cut(engine, Cut::Truncate, Tunables { dev_read_mode: DevReadMode::Dontcache, ..Tunables::default() });
}

/// Whether the host reads `path` with RWF_DONTCACHE; says so if not.
fn dontcache_supported(path: &Path) -> bool {
    let Some(dev) = direct_dev(path) else { return false };
    let ok = dev.use_dontcache_reads();
    if !ok {
        eprintln!("skipped: the host refuses RWF_DONTCACHE reads on {}", path.display());
    }
    ok
}

/// Pages of `path` resident in the host's page cache (mincore).
fn host_resident_pages(path: &Path) -> usize {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: a fresh shared read-only mapping of the whole file, used
    // only by mincore below and unmapped before return; nothing reads it.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    assert_ne!(addr, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    let mut vec = vec![0u8; len.div_ceil(PS as usize)];
    // SAFETY: `addr..addr + len` is the mapping made above; `vec` has one
    // byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(addr, len) };
    assert_eq!(rc, 0, "mincore: {err}");
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

// Goal: with `DevReadMode::Dontcache` the cache reads the file's bytes
// (sequential reads with readahead through the engine, random single
// pages on the caller), leaves the host's cache without a copy of them,
// and writes still reach the file. Method: a 512-page stamped host file,
// dropped from the host's cache, read through a 128-page cache, then
// 64 pages rewritten and fsynced and the host file read directly.
fn dontcache_reads_return_the_files_bytes(engine: IoEngine) {
    const PAGES: u64 = 512;
    let dir = scratch();
    let path = write_stamped_file(dir.path(), "dontcache", 11, PAGES);
    if !dontcache_supported(&path) {
        return;
    }
    {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: advice on our own descriptor; no memory is passed.
        assert_eq!(unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
    }
    let t = Tunables { dev_read_mode: DevReadMode::Dontcache, ..quiet() };
    let Some(cache) = cache_on(engine, 128, t) else { return };
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    let mut buf = vec![0u8; 16 * PS as usize];
    for call in 0..PAGES / 16 {
        assert_eq!(f.read_at(&mut buf, call * 16 * PS).unwrap(), buf.len());
        for (k, page) in buf.chunks(PS as usize).enumerate() {
            let i = call * 16 + k as u64;
            assert!(page == stamped_page(11, i), "sequential read: page {i} wrong");
        }
    }
    check_ring_used(engine, &cache, &before, Item::ra_submit_uring);
    // Random single pages, most of them evicted by now (128-page cache).
    let mut one = vec![0u8; PS as usize];
    for k in 0..PAGES {
        let i = (k * 197) % PAGES;
        assert_eq!(f.read_at(&mut one, i * PS).unwrap(), one.len());
        assert!(one == stamped_page(11, i), "random read: page {i} wrong");
    }
    let resident = host_resident_pages(&path);
    assert!(
        resident < PAGES as usize / 2,
        "{resident} of {PAGES} pages left in the host's cache: the reads were not uncached"
    );
    for i in 0..64 {
        f.write_at(&stamped_page(12, i), i * PS).unwrap();
    }
    f.fsync().unwrap();
    drop(f);
    cache.shutdown().unwrap();
    let disk = std::fs::read(&path).unwrap();
    for i in 0..PAGES {
        let want = if i < 64 { stamped_page(12, i) } else { stamped_page(11, i) };
        assert!(disk[(i * PS) as usize..((i + 1) * PS) as usize] == want[..], "page {i} on disk");
    }
}

// Goal: fsync with writers running submits every page dirtied before it
// and waits for them, and returns though the writers never stop. Method:
// four writers cycle over their own 64-page regions of one host file,
// stamping each page with a sequence number and publishing the last one
// written; each fsync snapshots the numbers first, and afterwards the host
// file (read directly) holds, for every page, at least the last stamp the
// snapshot covers.
fn fsync_under_concurrent_writers(engine: IoEngine) {
    const WRITERS: u64 = 4;
    const REGION: u64 = 64;
    let dir = scratch();
    let path = dir.path().join("fsync-writers");
    std::fs::write(&path, vec![0u8; (WRITERS * REGION * PS) as usize]).unwrap();
    let Some(cache) = cache_on(engine, 512, quiet()) else { return };
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    let done: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for t in 0..WRITERS {
            let (g, done, stop) = (f.reopen().unwrap(), &done, &stop);
            s.spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let page = t * REGION + seq % REGION;
                    let mut buf = vec![0u8; PS as usize];
                    buf[..8].copy_from_slice(&seq.to_le_bytes());
                    g.write_at(&buf, page * PS).unwrap();
                    done[t as usize].store(seq, Ordering::Release);
                }
            });
        }
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for round in 0..20 {
                thread::sleep(Duration::from_millis(5));
                let snap: Vec<u64> = done.iter().map(|d| d.load(Ordering::Acquire)).collect();
                f.fsync().unwrap();
                let disk = std::fs::read(&path).unwrap();
                for t in 0..WRITERS {
                    for off in 0..REGION {
                        // The last stamp <= snap written to this page.
                        let s = snap[t as usize];
                        let want = if s < off { continue } else { s - (s - off) % REGION };
                        if want == 0 {
                            continue;
                        }
                        let p = ((t * REGION + off) * PS) as usize;
                        let got = u64::from_le_bytes(disk[p..p + 8].try_into().unwrap());
                        assert!(
                            got >= want,
                            "round {round}: writer {t} page {off}: {got} on disk, fsync covered {want}"
                        );
                    }
                }
            }
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = res {
            std::panic::resume_unwind(e);
        }
    });
    check_ring_used(engine, &cache, &before, Item::wb_submit_uring);
}

// Goal: reclaim's PG_reclaim rotation still happens when writeback
// completes asynchronously: dirty pages reclaim met at the inactive tail
// are marked, written by the flusher, and rotated on completion (vmstat
// pgrotated moves). Method: a host file 8x a 256-page cache written with
// the dirty limits high and no periodic writeback, so reclaim meets
// dirty pages, then fsync. Whether reclaim meets a page still dirty
// depends on how fast the flusher's writes complete, so the pass is
// repeated (with new data) until it does, a bounded number of times.
fn reclaim_rotation_on_write_completion(engine: IoEngine) {
    let dir = scratch();
    let path = dir.path().join("rotate");
    let tunables = Tunables { dirty_ratio: 90, dirty_background_ratio: 80, ..quiet() };
    let Some(cache) = cache_on(engine, 256, tunables) else { return };
    let Some(f) = open_direct(&cache, &path) else { return };
    let before = cache.vmstat();
    let mut seed = 9;
    for pass in 0..8u64 {
        seed = 9 + pass;
        for i in 0..2048 {
            f.write_at(&stamped_page(seed, i), i * PS).unwrap();
        }
        f.fsync().unwrap();
        if cache.vmstat().delta(&before).get(Item::nr_vmscan_immediate_reclaim) > 0 {
            break;
        }
    }
    let d = cache.vmstat().delta(&before);
    assert!(d.get(Item::nr_vmscan_immediate_reclaim) > 0, "reclaim never met a dirty page to mark in 8 passes");
    assert!(d.get(Item::pgrotated) > 0, "no PG_reclaim page was rotated when its writeback ended");
    check_ring_used(engine, &cache, &before, Item::wb_submit_uring);
    cache.drop_caches();
    let mut buf = vec![0u8; PS as usize];
    for i in (0..2048).step_by(97) {
        f.read_at(&mut buf, i * PS).unwrap();
        assert!(buf == stamped_page(seed, i), "page {i}");
    }
}

//! Bad input and I/O errors: refused calls change nothing, closed handles
//! refuse everything, bad configs are refused, and device errors are
//! reported (once per handle, as Linux's errseq does) without losing data.
//!
//! The device-error tests run under both I/O engines (`on_engines`): with
//! the I/O threads over a memory device, and with io_uring over a host
//! file opened O_DIRECT, whose untouched transfers the injector lends the
//! ring.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pcache::backing::{Fault, FaultInjector, FaultOp, FileDev, MemoryDev};
use pcache::{Advice, BackingDev, Config, Error, File, IoEngine, OpenOptions, PageCache, Tunables};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PS: usize = 4096;

thread_local! {
    /// The engine `cache` and `faulty` build for (set by `on_engines`).
    static ENGINE: std::cell::Cell<IoEngine> = const { std::cell::Cell::new(IoEngine::Threads) };
}

/// Run `body` under each I/O engine; io_uring is skipped, saying so,
/// where the kernel refuses it.
fn on_engines(body: fn()) {
    for engine in [IoEngine::Threads, IoEngine::Uring] {
        let tunables = Tunables { io_engine: engine, ..Tunables::default() };
        if let Err(e) = PageCache::new(Config { memory_bytes: 16 * PS as u64, tunables, ..Config::default() }) {
            eprintln!("skipped under {engine:?}: {e}");
            continue;
        }
        ENGINE.with(|c| c.set(engine));
        body();
    }
    ENGINE.with(|c| c.set(IoEngine::Threads));
}

fn cache(pages: u64) -> PageCache {
    let tunables = Tunables { io_engine: ENGINE.with(|c| c.get()), ..Tunables::default() };
    PageCache::new(Config { memory_bytes: pages * PS as u64, tunables, ..Config::default() }).unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 1).collect()
}

/// The whole file through the cache.
fn contents(f: &File) -> Vec<u8> {
    let len = f.len().unwrap() as usize;
    let mut buf = vec![0u8; len + PS];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// `[pos, pos + len)` straight from a device, bypassing the cache.
fn device_bytes(dev: &dyn BackingDev, pos: u64, len: usize) -> Vec<u8> {
    let pages = len.div_ceil(PS);
    let mut bufs: Vec<Vec<u8>> = (0..pages).map(|_| vec![0u8; PS]).collect();
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let n = dev.read_pages(pos, &mut refs).unwrap();
    let mut out: Vec<u8> = bufs.concat();
    out.truncate(n.min(len));
    out
}

/// A fault injector around a fresh device, and the device: a memory
/// device, or under io_uring a host file.
/// Under io_uring, the device is a new host file opened O_DIRECT (so the
/// ring has a descriptor to drive), already unlinked: held open for the
/// device's life, gone with it.
fn faulty(name: &str) -> (Arc<FaultInjector>, Arc<dyn BackingDev>) {
    let inner: Arc<dyn BackingDev> = if ENGINE.with(|c| c.get()) == IoEngine::Uring {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = dir.path().join(name);
        let dev = FileDev::open(&path, true, true, true, PS).unwrap();
        dev.hold_open().unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(dev)
    } else {
        Arc::new(MemoryDev::new(name, PS))
    };
    let fi = Arc::new(FaultInjector::new(inner.clone()));
    (fi, inner)
}

fn as_dev(fi: &Arc<FaultInjector>) -> Arc<dyn BackingDev> {
    fi.clone()
}

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

// Goal: ranges whose end overflows u64 or passes the largest file size are
// refused with Error::Overflow (errno EFBIG) by every call that takes a
// range, and the file (size and bytes) is unchanged; the largest legal
// offset is still accepted. Method: a memory file and a host file holding
// known data; each bad call is checked for the error, its fields, its errno,
// and the file is compared with its old contents after each.
#[test]
fn overflowing_ranges_are_refused_and_change_nothing() {
    let cache = cache(64);
    let dir = tempfile::tempdir().unwrap();
    let host_path = dir.path().join("overflow");
    let files = [cache.open_memory("overflow").unwrap(), cache.open(&host_path, OpenOptions::default()).unwrap()];
    let data = pattern(7, 3 * PS + 100);
    for f in &files {
        f.write_at(&data, 0).unwrap();
        f.fsync().unwrap();
    }
    // The largest file size: learn it from the first refusal, then check it
    // is a sane power of two (at least a TiB).
    let max = match files[0].write_at(b"x", u64::MAX) {
        Err(Error::Overflow { max, .. }) => max,
        other => panic!("write_at(1 byte at u64::MAX) = {other:?}, want Error::Overflow"),
    };
    assert!(max.is_power_of_two() && max >= 1 << 40, "Overflow reports max = {max}");

    for f in &files {
        let name = f.name().to_string();
        let mut buf = [0u8; 10];
        // (what, the call's result, offset and length it was given)
        type Case<'a> = (&'static str, Box<dyn Fn() -> pcache::Result<()> + 'a>, u64, u64);
        let cases: Vec<Case> = vec![
            (
                "write_at(10 bytes, u64::MAX - 5)",
                Box::new(|| f.write_at(&[1u8; 10], u64::MAX - 5).map(drop)),
                u64::MAX - 5,
                10,
            ),
            ("write_at(1 byte, u64::MAX)", Box::new(|| f.write_at(&[1u8], u64::MAX).map(drop)), u64::MAX, 1),
            ("write_at(2 bytes, max - 1)", Box::new(|| f.write_at(&[1u8; 2], max - 1).map(drop)), max - 1, 2),
            ("write_at(1 byte, max)", Box::new(|| f.write_at(&[1u8], max).map(drop)), max, 1),
            (
                "write_at(page, max - 100)",
                Box::new(|| f.write_at(&[1u8; PS], max - 100).map(drop)),
                max - 100,
                PS as u64,
            ),
            ("set_len(max + 1)", Box::new(|| f.set_len(max + 1)), max + 1, 0),
            ("set_len(u64::MAX)", Box::new(|| f.set_len(u64::MAX)), u64::MAX, 0),
            ("punch_hole(u64::MAX - 1, 2)", Box::new(|| f.punch_hole(u64::MAX - 1, 2)), u64::MAX - 1, 2),
            ("punch_hole(0, u64::MAX)", Box::new(|| f.punch_hole(0, u64::MAX)), 0, u64::MAX),
            ("fadvise(max, 1, WillNeed)", Box::new(|| f.fadvise(max, 1, Advice::WillNeed)), max, 1),
            ("fadvise(u64::MAX, 10, DontNeed)", Box::new(|| f.fadvise(u64::MAX, 10, Advice::DontNeed)), u64::MAX, 10),
        ];
        for (what, call, offset, len) in cases {
            match call() {
                Err(Error::Overflow { offset: o, len: l, max: m }) => {
                    assert_eq!((o, l, m), (offset, len, max), "{name}: {what}: Overflow fields");
                    assert_eq!(Error::Overflow { offset, len, max }.errno(), libc::EFBIG, "{name}: errno of Overflow");
                }
                other => panic!("{name}: {what} = {other:?}, want Error::Overflow"),
            }
            assert_eq!(f.len().unwrap(), data.len() as u64, "{name}: size changed by the refused {what}");
            assert!(contents(f) == data, "{name}: contents changed by the refused {what}");
        }
        // Reads: refused the same way, the buffer untouched.
        for (offset, len) in [(u64::MAX - 5, 10usize), (max, 1), (max - 5, 10)] {
            let mut buf = vec![0xEEu8; len];
            match f.read_at(&mut buf, offset) {
                Err(Error::Overflow { offset: o, len: l, .. }) if o == offset && l == len as u64 => {}
                other => panic!("{name}: read_at({len} bytes, {offset}) = {other:?}, want Error::Overflow"),
            }
            assert!(buf.iter().all(|&b| b == 0xEE), "{name}: a refused read_at wrote into the buffer");
        }
        // Just inside the limit: a read far past EOF is fine and reads 0.
        assert_eq!(f.read_at(&mut buf[..1], max - 1).unwrap(), 0, "{name}");
        assert!(contents(f) == data, "{name}: contents changed");
    }
    // The largest legal byte can be written (a sparse memory file), and the
    // file truncated back.
    let f = &files[0];
    assert_eq!(f.write_at(&[9u8], max - 1).unwrap(), 1);
    assert_eq!(f.len().unwrap(), max);
    let mut one = [0u8];
    assert_eq!(f.read_at(&mut one, max - 1).unwrap(), 1);
    assert_eq!(one[0], 9);
    f.set_len(data.len() as u64).unwrap();
    assert!(contents(f) == data);

    // The host file on disk is as written.
    drop(files);
    drop(cache);
    assert!(std::fs::read(&host_path).unwrap() == data);
}

// Goal: after close(), every method of the handle fails with Error::Closed
// (errno EBADF), closing again fails, and nothing else is affected: other
// handles still work and dirty data written before the close is kept.
// Method: write through A, open B, close A, call everything on A.
#[test]
fn closed_handle_refuses_every_call() {
    let cache = cache(64);
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("closed");
    for a in [cache.open_memory("closed").unwrap(), cache.open(&host, OpenOptions::default()).unwrap()] {
        let name = a.name().to_string();
        let data = pattern(3, 2 * PS + 7);
        a.write_at(&data, 0).unwrap();
        let b = a.reopen().unwrap();
        a.close().unwrap();

        let mut buf = [0u8; 16];
        let results: Vec<(&str, pcache::Result<()>)> = vec![
            ("read_at", a.read_at(&mut buf, 0).map(drop)),
            ("write_at", a.write_at(b"zz", 0).map(drop)),
            ("write_at(empty)", a.write_at(b"", 0).map(drop)),
            ("fsync", a.fsync()),
            ("fdatasync", a.fdatasync()),
            ("len", a.len().map(drop)),
            ("is_empty", a.is_empty().map(drop)),
            ("set_len", a.set_len(1)),
            ("punch_hole", a.punch_hole(0, 10)),
            ("fadvise(DontNeed)", a.fadvise(0, 0, Advice::DontNeed)),
            ("fadvise(WillNeed)", a.fadvise(0, 0, Advice::WillNeed)),
            ("fadvise(Random)", a.fadvise(0, 0, Advice::Random)),
            ("get_page", a.get_page(0).map(drop)),
            ("find_page", a.find_page(0).map(drop)),
            ("reopen", a.reopen().map(drop)),
            ("close again", a.close()),
        ];
        for (what, r) in results {
            match r {
                Err(e @ Error::Closed) => assert_eq!(e.errno(), libc::EBADF),
                other => panic!("{name}: {what} on a closed handle = {other:?}, want Closed"),
            }
        }
        // Nothing changed: B sees the data, unchanged by the refused calls.
        assert!(contents(&b) == data, "{name}: data changed");
        b.fsync().unwrap();
        // Dropping a closed handle is fine, and closing B works once.
        drop(a);
        b.close().unwrap();
        assert!(matches!(b.close(), Err(Error::Closed)));
    }
    drop(cache);
    assert!(std::fs::read(&host).unwrap() == pattern(3, 2 * PS + 7));
}

// Goal: get_page refuses pages at or past EOF with Error::PastEof (errno
// EINVAL) and serves the last partial page; also on an empty file, after a
// shrink, and for an index whose byte offset overflows. Method: direct
// calls on a memory file.
#[test]
fn get_page_past_eof() {
    let cache = cache(64);
    let f = cache.open_memory("eof").unwrap();
    let check_past = |index: u64, size: u64| match f.get_page(index) {
        Err(e @ Error::PastEof { .. }) => {
            assert_eq!(e.errno(), libc::EINVAL);
            if let Error::PastEof { offset, size: s } = e {
                assert_eq!(s, size, "PastEof size for index {index}");
                assert_eq!(offset, index.saturating_mul(PS as u64), "PastEof offset for index {index}");
            }
        }
        Ok(_) => panic!("get_page({index}) succeeded with size {size}"),
        Err(e) => panic!("get_page({index}) with size {size} = {e:?}, want PastEof"),
    };
    check_past(0, 0);
    f.write_at(&pattern(1, PS + 904), 0).unwrap();
    {
        let p = f.get_page(1).unwrap().to_vec();
        assert_eq!(&p[..904], &pattern(1, PS + 904)[PS..]);
        assert!(p[904..].iter().all(|&b| b == 0));
    }
    check_past(2, (PS + 904) as u64);
    check_past(1 << 40, (PS + 904) as u64);
    check_past(u64::MAX, (PS + 904) as u64);
    f.set_len(PS as u64).unwrap();
    check_past(1, PS as u64);
    f.get_page(0).unwrap();
    f.set_len(0).unwrap();
    check_past(0, 0);
}

// Goal: invalid configurations are refused by PageCache::new with
// Error::InvalidConfig (errno EINVAL), never a panic, and the boundary
// values are accepted. Method: one bad field at a time.
#[test]
fn invalid_configs_are_refused() {
    let ok = Config { memory_bytes: 64 * PS as u64, ..Config::default() };
    let bad: Vec<(&str, Config)> = vec![
        ("page_size 1000", Config { page_size: 1000, ..ok }),
        ("page_size 3 KiB", Config { page_size: 3072, ..ok }),
        ("page_size 2 KiB", Config { page_size: 2048, ..ok }),
        ("page_size 0", Config { page_size: 0, ..ok }),
        ("page_size 128 KiB", Config { page_size: 128 << 10, memory_bytes: 64 << 17, ..ok }),
        ("memory 0", Config { memory_bytes: 0, ..ok }),
        ("memory one page", Config { memory_bytes: PS as u64, ..ok }),
        ("memory 15 pages", Config { memory_bytes: 16 * PS as u64 - 1, ..ok }),
        ("memory 15 pages of 64 KiB", Config { page_size: 65536, memory_bytes: 15 * 65536, ..ok }),
        ("dirty_ratio 0", Config { tunables: Tunables { dirty_ratio: 0, ..Tunables::default() }, ..ok }),
        ("dirty_ratio 101", Config { tunables: Tunables { dirty_ratio: 101, ..Tunables::default() }, ..ok }),
        ("nr_cpus 5000", Config { nr_cpus: 5000, ..ok }),
    ];
    for (what, config) in bad {
        match std::panic::catch_unwind(|| PageCache::new(config)) {
            Ok(Err(e @ Error::InvalidConfig(_))) => assert_eq!(e.errno(), libc::EINVAL),
            Ok(Err(e)) => panic!("{what}: PageCache::new = {e:?}, want InvalidConfig"),
            Ok(Ok(_)) => panic!("{what}: PageCache::new accepted an invalid config"),
            Err(_) => panic!("{what}: PageCache::new panicked"),
        }
        assert!(matches!(config.validate(), Err(Error::InvalidConfig(_))), "{what}: Config::validate accepted it");
    }
    // The edges that are valid.
    for (what, config) in [
        ("16 pages of 4 KiB", Config { memory_bytes: 16 * PS as u64, ..ok }),
        ("16 pages of 64 KiB", Config { page_size: 65536, memory_bytes: 16 * 65536, ..ok }),
        ("8 KiB pages, memory not a page multiple", Config { page_size: 8192, memory_bytes: 32 * 8192 + 5, ..ok }),
    ] {
        let c = PageCache::new(config).unwrap_or_else(|e| panic!("{what}: refused: {e}"));
        let f = c.open_memory("x").unwrap();
        f.write_at(b"hello", 0).unwrap();
        let mut b = [0u8; 5];
        assert_eq!(f.read_at(&mut b, 0).unwrap(), 5);
        assert_eq!(&b, b"hello", "{what}");
    }
}

// ---------------------------------------------------------------------------
// Write errors
// ---------------------------------------------------------------------------

/// The write-error scenario for one fault (EIO or ENOSPC).
fn write_error_reported_once_per_handle(fault: Fault, errno: i32) {
    let cache = cache(256);
    let (fi, mem) = faulty(&format!("wb-{fault:?}"));
    let a = cache.open_dev(as_dev(&fi)).unwrap();
    let b = a.reopen().unwrap();
    let data = pattern(5, 3 * PS + 123);
    a.write_at(&data, 0).unwrap();
    let npages = data.len().div_ceil(PS) as u64;

    let faults_before = fi.faults_injected();
    fi.fail_next(FaultOp::Write, fault, 1);
    // A: the error, with the errno of the fault.
    match a.fsync() {
        Err(e) => {
            assert_eq!(e.errno(), errno, "first fsync on A: {e:?}");
            if errno == libc::ENOSPC {
                assert!(matches!(e, Error::NoSpace { .. }), "want NoSpace: {e:?}");
            } else {
                assert!(matches!(e, Error::Io { .. }), "want Io: {e:?}");
            }
        }
        Ok(()) => panic!(
            "fsync on A succeeded though the device write failed ({} faults injected)",
            fi.faults_injected() - faults_before
        ),
    }
    assert_eq!(fi.faults_injected() - faults_before, 1);
    // The data is not lost: still cached, still dirty, not on the device.
    for i in 0..npages {
        let st = a.page_state(i).unwrap_or_else(|| panic!("page {i} left the cache after a failed write"));
        assert!(st.dirty && !st.writeback, "page {i} after the failed write: {st:?}, want dirty");
    }
    assert!(device_bytes(&*mem, 0, data.len()).iter().all(|&b| b == 0), "the failed write reached the device");
    assert!(contents(&a) == data, "cache contents changed");

    // A again: the error was seen by A; this fsync writes the pages.
    a.fsync().unwrap_or_else(|e| panic!("second fsync on A: {e:?}, want Ok (error already seen)"));
    for i in 0..npages {
        let st = a.page_state(i).unwrap();
        assert!(!st.dirty, "page {i} still dirty after a good fsync: {st:?}");
    }
    assert!(
        device_bytes(&**fi.inner(), 0, data.len()) == data,
        "the device (the injector's inner device) does not hold the data after the \
         successful fsync"
    );
    // B opened before the error: sees it once.
    match b.fsync() {
        Err(e) => assert_eq!(e.errno(), errno, "first fsync on B: {e:?}"),
        Ok(()) => panic!("fsync on B succeeded: B never saw the writeback error"),
    }
    b.fsync().unwrap_or_else(|e| panic!("second fsync on B: {e:?}, want Ok"));
    // C opened after the error was seen: nothing to report.
    let c = a.reopen().unwrap();
    c.fsync().unwrap_or_else(|e| panic!("fsync on a handle opened after the error: {e:?}"));
    a.fsync().unwrap();

    // And after dropping the cached pages the data comes from the device.
    cache.drop_caches();
    assert!(contents(&c) == data);
    assert!(device_bytes(&**fi.inner(), 0, data.len()) == data);
}

// Goal: a device write failing with EIO is reported by the next fsync of
// every handle that was open, once each (errseq); a handle opened after
// the error was seen reports nothing; the failed pages stay dirty and the
// next fsync writes them. Method: a FaultInjector around a MemoryDev;
// fail_next(Write, Eio, 1); the inner device is read directly.
#[test]
fn write_eio_is_reported_once_per_handle_and_data_kept() {
    on_engines(write_eio_once_per_handle);
}

fn write_eio_once_per_handle() {
    write_error_reported_once_per_handle(Fault::Eio, libc::EIO);
}

// Goal: as the EIO case, with ENOSPC reported as Error::NoSpace.
// Method: the same scenario with Fault::Enospc.
#[test]
fn write_enospc_is_reported_once_per_handle_and_data_kept() {
    on_engines(write_enospc_once_per_handle);
}

fn write_enospc_once_per_handle() {
    write_error_reported_once_per_handle(Fault::Enospc, libc::ENOSPC);
}

// Goal: a writeback error met by sync_all (not by an fsync) is still
// reported by every handle's next fsync, once, and the data is written by
// a later sync. Method: fail_page_range on the second page; sync_all
// fails; clear; both handles' fsyncs report EIO once, then succeed.
#[test]
fn background_write_error_reaches_fsync() {
    on_engines(background_write_error);
}

fn background_write_error() {
    let cache = cache(256);
    let (fi, mem) = faulty("bg");
    let a = cache.open_dev(as_dev(&fi)).unwrap();
    let b = a.reopen().unwrap();
    let data = pattern(9, 8 * PS);
    // Two separate runs of pages, so one can fail alone.
    a.write_at(&data[..2 * PS], 0).unwrap();
    a.write_at(&data[4 * PS..], 4 * PS as u64).unwrap();
    fi.fail_page_range(FaultOp::Write, 0, PS as u64, Fault::Eio);
    assert!(cache.sync_all().is_err(), "sync_all succeeded though a page write failed");
    assert!(a.page_state(0).unwrap().dirty, "failed page not dirty");
    assert!(!a.page_state(5).unwrap().dirty, "page 5 (its own run) was not written");
    fi.clear();
    for (h, name) in [(&a, "A"), (&b, "B")] {
        match h.fsync() {
            Err(e) => assert_eq!(e.errno(), libc::EIO, "{name}: {e:?}"),
            Ok(()) => panic!("{name}: fsync did not report the writeback error"),
        }
        h.fsync().unwrap();
    }
    let mut want = data.clone();
    want[2 * PS..4 * PS].fill(0);
    assert!(device_bytes(&*mem, 0, want.len()) == want);
}

// Goal: a failing device sync is reported by fsync and only by the fsync
// that met it; the data itself is written. Method: fail_next(Sync, Eio, 1).
#[test]
fn sync_error_is_reported_by_fsync() {
    on_engines(sync_error);
}

fn sync_error() {
    let cache = cache(64);
    let (fi, mem) = faulty("sync");
    let a = cache.open_dev(as_dev(&fi)).unwrap();
    let data = pattern(2, PS + 10);
    a.write_at(&data, 0).unwrap();
    fi.fail_next(FaultOp::Sync, Fault::Eio, 1);
    match a.fsync() {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e:?}"),
        Ok(()) => panic!("fsync succeeded though the device sync failed"),
    }
    a.fdatasync().unwrap();
    assert!(device_bytes(&*mem, 0, data.len()) == data);
}

// ---------------------------------------------------------------------------
// Read errors
// ---------------------------------------------------------------------------

/// A faulty device preloaded with `data` (written to the inner device, so
/// nothing is cached).
fn preloaded(name: &str, data: &[u8]) -> (Arc<FaultInjector>, Arc<dyn BackingDev>) {
    let (fi, mem) = faulty(name);
    let pages: Vec<Vec<u8>> = data
        .chunks(PS)
        .map(|c| {
            let mut p = c.to_vec();
            p.resize(PS, 0);
            p
        })
        .collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    mem.write_pages(0, &refs, data.len() as u64).unwrap();
    assert_eq!(mem.len().unwrap(), data.len() as u64);
    (fi, mem)
}

// Goal: device read errors surface as Error::Io (errno EIO) from read_at
// and get_page; the page that failed is not left cached as if good, and
// once the device recovers the same calls return the right data. Method:
// a preloaded device; fail_next(Read, Eio, n) with n more than the reads
// made; read_at, get_page, find_page; clear(); read again.
#[test]
fn read_eio_is_reported_and_not_cached() {
    on_engines(read_eio);
}

fn read_eio() {
    let cache = cache(64);
    let data = pattern(4, 6 * PS + 300);
    let (fi, _mem) = preloaded("rd", &data);
    let f = cache.open_dev(as_dev(&fi)).unwrap();
    assert_eq!(f.len().unwrap(), data.len() as u64);

    fi.fail_next(FaultOp::Read, Fault::Eio, 1000);
    let mut buf = vec![0u8; 2 * PS];
    match f.read_at(&mut buf, PS as u64 + 10) {
        Err(e @ Error::Io { .. }) => assert_eq!(e.errno(), libc::EIO, "{e:?}"),
        other => panic!("read_at on a failing device = {other:?}, want Error::Io"),
    }
    match f.get_page(3) {
        Err(e @ Error::Io { .. }) => assert_eq!(e.errno(), libc::EIO),
        Err(e) => panic!("get_page on a failing device = {e:?}, want Error::Io"),
        Ok(_) => panic!("get_page on a failing device succeeded"),
    }
    assert!(fi.faults_injected() >= 2, "the faults were not met");
    for i in 0..7 {
        if let Some(st) = f.page_state(i) {
            assert!(!st.uptodate, "page {i} is cached as uptodate though its read failed: {st:?}");
        }
        assert!(f.find_page(i).unwrap().is_none(), "find_page({i}) returned a page whose read failed");
    }

    fi.clear();
    let mut buf = vec![0u8; 2 * PS];
    assert_eq!(f.read_at(&mut buf, PS as u64 + 10).unwrap(), 2 * PS);
    assert!(buf[..] == data[PS + 10..3 * PS + 10], "read after the device recovered returned wrong data");
    {
        let p = f.get_page(3).unwrap().to_vec();
        assert!(p[..] == data[3 * PS..4 * PS]);
    }
    assert!(contents(&f) == data);
}

// Goal: a partial-page write that needs to read the page first, failing on
// that read, is refused with EIO and leaves the file as it was (the page is
// not left half-written and uptodate). Method: preloaded device; fail
// reads; write 10 bytes into the middle of an uncached page; clear; read.
#[test]
fn partial_write_over_failed_read_changes_nothing() {
    on_engines(partial_write_over_failed_read);
}

fn partial_write_over_failed_read() {
    let cache = cache(64);
    let data = pattern(6, 4 * PS);
    let (fi, mem) = preloaded("pw", &data);
    let f = cache.open_dev(as_dev(&fi)).unwrap();
    fi.fail_next(FaultOp::Read, Fault::Eio, 1000);
    match f.write_at(&[0xEE; 10], 2 * PS as u64 + 100) {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e:?}"),
        Ok(n) => panic!("write_at over a page that cannot be read returned Ok({n})"),
    }
    fi.clear();
    assert!(contents(&f) == data, "the file changed after a refused partial write");
    cache.sync_all().unwrap();
    assert!(device_bytes(&*mem, 0, data.len()) == data);
}

// ---------------------------------------------------------------------------
// A slow device
// ---------------------------------------------------------------------------

// Goal: with a slow device (every write sleeps 2 ms) and eight writers
// dirtying far more than a 64-page cache holds, every writer finishes (no
// deadlock between dirty throttling, reclaim and writeback) and the data
// verifies, in the cache and on the devices. Run with the default dirty
// ratios and with dirty_ratio = dirty_background_ratio = 100, where every
// frame may be dirty at once. Method: each thread owns a file on its own
// delayed FaultInjector and writes 64 pages twice (random chunk sizes,
// each chunk read back); the test ends when the work is done (no timer).
#[test]
fn slow_device_many_writers_complete() {
    for (dirty_ratio, dirty_background_ratio) in [(20, 10), (100, 100)] {
        slow_device_run(dirty_ratio, dirty_background_ratio);
    }
}

fn slow_device_run(dirty_ratio: u32, dirty_background_ratio: u32) {
    const THREADS: usize = 8;
    const FILE: usize = 64 * PS;
    let what = format!("dirty_ratio {dirty_ratio}, dirty_background_ratio {dirty_background_ratio}");
    let cache = PageCache::new(Config {
        memory_bytes: 64 * PS as u64,
        tunables: Tunables { dirty_ratio, dirty_background_ratio, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let devs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fi, mem) = faulty(&format!("slow{t}-{dirty_ratio}"));
            fi.set_delay(FaultOp::Write, Duration::from_millis(2));
            (fi, mem)
        })
        .collect();
    let datas: Vec<Vec<u8>> = thread::scope(|s| {
        let hs: Vec<_> = devs
            .iter()
            .enumerate()
            .map(|(t, (fi, _))| {
                let (cache, what) = (&cache, &what);
                s.spawn(move || {
                    let f = cache.open_dev(as_dev(fi)).unwrap();
                    let mut rng = StdRng::seed_from_u64(t as u64 + 100);
                    let mut data = vec![0u8; FILE];
                    for pass in 0..2 {
                        rng.fill(&mut data[..]);
                        let mut off = 0;
                        while off < FILE {
                            let n = rng.gen_range(1..=3 * PS).min(FILE - off);
                            let w = f.write_at(&data[off..off + n], off as u64);
                            assert!(
                                matches!(w, Ok(k) if k == n),
                                "{what}: thread {t} pass {pass}: write_at({n} bytes at {off}) = {w:?}"
                            );
                            let mut back = vec![0u8; n];
                            let r = f.read_at(&mut back, off as u64);
                            assert!(
                                matches!(r, Ok(k) if k == n),
                                "{what}: thread {t} pass {pass}: read_at({n} bytes at {off}) = {r:?}"
                            );
                            assert!(back == data[off..off + n], "{what}: thread {t}: read-back at {off} differs");
                            off += n;
                        }
                    }
                    f.fsync().unwrap();
                    assert!(contents(&f) == data, "{what}: thread {t}: file differs");
                    data
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    cache.sync_all().unwrap();
    // The premise: writers really ran into memory and dirty limits.
    let vm = cache.vmstat();
    let pressure = vm.by_name("allocstall").unwrap()
        + vm.by_name("balance_dirty_pages_pauses").unwrap()
        + vm.by_name("pgsteal_direct").unwrap()
        + vm.by_name("pgsteal_kswapd").unwrap();
    assert!(pressure > 0, "{what}: no reclaim or dirty throttling happened; the test tests nothing");
    for (t, ((_, mem), data)) in devs.iter().zip(&datas).enumerate() {
        assert!(device_bytes(&**mem, 0, FILE) == *data, "{what}: device {t} does not hold its file's data");
    }
}

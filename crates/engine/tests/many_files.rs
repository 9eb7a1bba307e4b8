//! Many files through the library: host descriptors stay within the
//! cache's bound (`Tunables::max_open_fds`, counted as `nr_open_fds`) under
//! a small RLIMIT_NOFILE, unused inodes are freed, and names past NAME_MAX
//! or PATH_MAX are refused with ENAMETOOLONG.
//!
//! The fd-limit tests run their body in a child: the test binary re-execs
//! itself for that one test with `PCACHE_MANY_FILES_CHILD` set, and the
//! child lowers its own RLIMIT_NOFILE (soft and hard) before building the
//! cache, so the limit cannot leak into other tests.

use std::path::Path;
use std::process::Command;

use pcache::{Config, Error, Item, OpenOptions, PageCache, Tunables};

const PS: usize = 4096;
const CHILD_ENV: &str = "PCACHE_MANY_FILES_CHILD";
/// Descriptors a test process holds besides the cache's: stdio, the test
/// harness, the reads of /proc/self/fd, descriptors out of the cache but
/// still used by a transfer in flight (flusher, kswapd).
const SLACK: usize = 32;

/// Run `body` in a child process whose RLIMIT_NOFILE is `limit`.
fn in_child_with_nofile(test: &str, limit: u64, body: impl FnOnce()) {
    if std::env::var_os(CHILD_ENV).is_some() {
        let lim = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: setrlimit reads one `rlimit` we own.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
        body();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child for {test} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory for many files: on tmpfs (/dev/shm) where there is one, as
/// creating 100,000 files on a disk file system costs the host far more
/// than the cache (ext4's inode allocator took 1 ms a file here).
fn many_files_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new().prefix("pcache-many-files").tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Descriptors this process has open now.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn vm(cache: &PageCache, item: Item) -> u64 {
    cache.vmstat().get(item)
}

fn small_cache(max_open_fds: usize) -> PageCache {
    // 16 MiB: 100,000 dirty files do not fit, so writeback and reclaim
    // reopen files throughout.
    PageCache::new(Config {
        memory_bytes: 16 << 20,
        tunables: Tunables { max_open_fds, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap()
}

/// Create, write a little and close `n` files in `dir`, one after another,
/// checking the descriptor bound as it goes; then stat-only opens of each.
fn many_files(cache: &PageCache, dir: &Path, n: usize) {
    let bound = cache.fd_cache().max_open_fds();
    let mut peak = 0;
    let started = std::time::Instant::now();
    let mut check = |i: usize| {
        let fds = open_fds();
        peak = peak.max(fds);
        assert!(fds <= bound + SLACK, "file {i}: {fds} descriptors open, bound {bound}");
        assert!(vm(cache, Item::nr_open_fds) as usize <= bound + SLACK / 2);
    };
    for i in 0..n {
        let f = cache.open(dir.join(format!("f{i}")), OpenOptions::default()).unwrap();
        f.write_at(format!("file {i}\n").as_bytes(), 0).unwrap();
        f.close().unwrap();
        if i % 500 == 0 {
            check(i);
        }
    }
    let t_create = started.elapsed();
    // Stat-only: open without creating, read the size, close.
    let opts = OpenOptions { create: false, ..OpenOptions::default() };
    for i in 0..n {
        let f = cache.open(dir.join(format!("f{i}")), opts).unwrap();
        assert_eq!(f.len().unwrap(), format!("file {i}\n").len() as u64);
        drop(f);
        if i % 500 == 0 {
            check(i);
        }
    }
    cache.sync_all().unwrap();
    check(n);
    // Every byte reached its file.
    for i in (0..n).step_by(997) {
        assert_eq!(std::fs::read_to_string(dir.join(format!("f{i}"))).unwrap(), format!("file {i}\n"));
    }
    eprintln!(
        "{n} files: peak {peak} descriptors open, bound {bound}; created in {t_create:?}, all in {:?}",
        started.elapsed()
    );
}

// Goal: 100,000 files created, written and closed one after another, then
// 100,000 stat-only opens, all succeed under RLIMIT_NOFILE 1024, with the
// default bound (half the limit) never passed.
// Method: a child with the limit; /proc/self/fd counted every 500 files.
// Expect: no EMFILE; descriptors <= bound + slack; data on the host files.
#[test]
fn hundred_thousand_files_under_nofile_1024() {
    in_child_with_nofile("hundred_thousand_files_under_nofile_1024", 1024, || {
        let dir = many_files_dir();
        let cache = small_cache(0);
        assert_eq!(cache.fd_cache().max_open_fds(), 512, "default: half the soft limit");
        many_files(&cache, dir.path(), 100_000);
    });
}

// Goal: the bound is a tunable and holds for a bound far below the limit.
#[test]
fn max_open_fds_tunable_is_the_bound() {
    in_child_with_nofile("max_open_fds_tunable_is_the_bound", 1024, || {
        let dir = many_files_dir();
        let cache = small_cache(16);
        assert_eq!(cache.fd_cache().max_open_fds(), 16);
        many_files(&cache, dir.path(), 5_000);
        assert!(vm(&cache, Item::nr_open_fds) <= 16);
    });
}

// Goal: an unused inode (no handle, no page, nothing dirty) is freed, so
// the cache's inodes do not grow with the number of files ever opened;
// closed files with pages stay cached until their pages go.
// Method: open and close empty files; write, close, sync and drop caches.
// Expect: nr_inodes back to 0 each time; data readable after reopening.
#[test]
fn unused_inodes_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = small_cache(0);
    for i in 0..2_000 {
        drop(cache.open(dir.path().join(format!("e{i}")), OpenOptions::default()).unwrap());
    }
    assert_eq!(vm(&cache, Item::nr_inodes), 0, "empty files closed: nothing cached");

    for i in 0..500 {
        let f = cache.open(dir.path().join(format!("d{i}")), OpenOptions::default()).unwrap();
        f.write_at(&[i as u8; 100], 0).unwrap();
    }
    // Closed with dirty pages: cached, as the kernel keeps such inodes.
    assert_eq!(vm(&cache, Item::nr_inodes), 500);
    cache.sync_all().unwrap();
    cache.drop_caches();
    assert_eq!(vm(&cache, Item::nr_inodes), 0, "no page left: freed");
    assert_eq!(vm(&cache, Item::nr_file_pages), 0);
    let f = cache.open(dir.path().join("d7"), OpenOptions::default()).unwrap();
    let mut buf = [0u8; 100];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 100);
    assert_eq!(buf, [7u8; 100]);
    assert_eq!(vm(&cache, Item::nr_inodes), 1);
}

// Goal: reclaim taking the last page of a closed file frees its inode
// (through the inode shrinker), shadow entries and all once the unused
// list is long.
// Method: more closed one-page files than one per 8 frames, read through a
// cache of 64 frames.
// Expect: nr_inodes stays within the shrinker's limits, far below the
// number of files.
#[test]
fn reclaim_frees_closed_inodes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = PageCache::new(Config { memory_bytes: 64 * PS as u64, ..Config::default() }).unwrap();
    let n = 3_000;
    for i in 0..n {
        std::fs::write(dir.path().join(format!("r{i}")), [1u8; 10]).unwrap();
    }
    for i in 0..n {
        let f = cache.open(dir.path().join(format!("r{i}")), OpenOptions::default()).unwrap();
        let mut b = [0u8; 10];
        assert_eq!(f.read_at(&mut b, 0).unwrap(), 10);
    }
    let inodes = vm(&cache, Item::nr_inodes);
    // At most: files with a page (64 frames), plus shadow-only ones the
    // shrinker keeps (64, its floor), plus one batch not yet pruned.
    assert!(inodes <= 64 + 64 + 128 + 16, "{inodes} inodes cached after {n} closed files");
}

// Goal: names past NAME_MAX and paths past PATH_MAX are refused with
// ENAMETOOLONG before anything happens, as the kernel refuses them.
#[test]
fn names_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let cache = small_cache(0);
    let long_name = dir.path().join("n".repeat(256));
    let e = cache.open(&long_name, OpenOptions::default()).err().expect("256-byte name refused");
    assert!(matches!(e, Error::NameTooLong { .. }), "{e:?}");
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
    // 255 is allowed.
    cache.open(dir.path().join("n".repeat(255)), OpenOptions::default()).unwrap();

    let mut deep = dir.path().to_path_buf();
    while deep.as_os_str().len() < libc::PATH_MAX as usize {
        deep.push("d".repeat(200));
    }
    let e = cache.open(&deep, OpenOptions::default()).err().expect("path past PATH_MAX refused");
    assert!(matches!(e, Error::NameTooLong { .. }), "{e:?}");
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
    let e = cache.unlink(&long_name).expect_err("unlink of a too-long name refused");
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
    std::fs::write(dir.path().join("x"), b"x").unwrap();
    let e = cache.rename(dir.path().join("x"), &long_name).expect_err("rename to a too-long name refused");
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
}

/// Live heap bytes of this test binary (a counting global allocator), for
/// the per-inode memory figure: RSS does not fall when memory is freed.
struct Counting;

static LIVE_BYTES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

// SAFETY: every call is passed through to the system allocator unchanged;
// the counter has no effect on the memory handed out.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::alloc::System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new as i64 - l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live_bytes() -> i64 {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

// Figure for BENCHMARKS.md (prints; asserts only the inode counts): heap
// bytes per inode kept after its file is closed, and after it is freed.
// `cargo test -p pcache --release --test many_files idle_inode_memory -- --ignored --nocapture`
#[test]
#[ignore]
fn idle_inode_memory() {
    let n = 20_000i64;
    let dir = many_files_dir();
    let cache = PageCache::new(Config { memory_bytes: 256 << 20, ..Config::default() }).unwrap();
    // Warm the icache's tables and the fd cache.
    for i in 0..n {
        drop(cache.open(dir.path().join(format!("w{i}")), OpenOptions::default()).unwrap());
    }
    let base = live_bytes();
    for i in 0..n {
        let f = cache.open(dir.path().join(format!("f{i}")), OpenOptions::default()).unwrap();
        f.write_at(b"x", 0).unwrap();
    }
    cache.sync_all().unwrap();
    let cached = live_bytes();
    assert_eq!(vm(&cache, Item::nr_inodes), n as u64);
    cache.drop_caches();
    let freed = live_bytes();
    assert_eq!(vm(&cache, Item::nr_inodes), 0);
    for i in 0..n {
        drop(cache.open(dir.path().join(format!("e{i}")), OpenOptions::default()).unwrap());
    }
    let empty = live_bytes();
    let held: Vec<_> =
        (0..n).map(|i| cache.open(dir.path().join(format!("e{i}")), OpenOptions::default()).unwrap()).collect();
    let open = live_bytes();
    drop(held);
    println!(
        "{n} empty files held open: {} heap bytes per inode and handle (what a closed file kept before inodes \
         were freed, plus its handle)",
        (open - empty) / n
    );
    println!(
        "{n} closed files with one cached page each: {} heap bytes per inode; after drop_caches (freed): {} B; \
         {n} empty files opened and closed: {} B per file",
        (cached - base) / n,
        (freed - base) / n,
        (empty - freed) / n,
    );
}

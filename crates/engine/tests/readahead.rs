//! Readahead and fadvise as mm/readahead.c and mm/fadvise.c define them
//! (the Harji/Piggin thread, Linux 2.6.20): the on-demand window (sync window on a miss, the
//! PG_readahead marker, the async ramp-up), per-handle state, FMODE_RANDOM,
//! FMODE_NOREUSE, POSIX_FADV_{NORMAL,SEQUENTIAL,RANDOM,WILLNEED,DONTNEED,
//! NOREUSE}, and EOF.

mod common;

use common::delta;
use common::pin_to_cpu0;
use pcache::{Advice, Config, File, Item, LruList, PageCache, Tunables};

const PS: u64 = 4096;
/// The default window (Tunables::default().ra_pages).
const RA: u64 = 32;

/// No kswapd, and a flusher that never finds anything old enough to write:
/// nothing changes the cache behind the test's back. Single pages: the
/// windows, markers and per-page states here are 2.6.20's
/// (large_folios.rs reads them in folios).
fn quiet() -> Tunables {
    Tunables {
        folio_order_max: 0,
        kswapd: false,
        dirty_expire_centisecs: 360_000,
        dirty_writeback_centisecs: 360_000,
        ..Tunables::default()
    }
}

fn cache_with(t: Tunables, pages: u64) -> PageCache {
    PageCache::new(Config { memory_bytes: pages * PS, tunables: t, ..Config::default() }).unwrap()
}

/// The bytes of page `i`: its index, then a pattern.
fn page_bytes(i: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..PS).map(|b| (b.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8).collect();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// A memory file of `pages` pages with known contents, written back and
/// dropped from the cache: every read of it starts cold.
fn cold_file(cache: &PageCache, name: &str, pages: u64) -> File {
    make_cold(cache, cache.open_memory(name).unwrap(), name, pages)
}

/// Fill `f` with `pages` known pages, write them back and drop them from
/// the cache.
fn make_cold(cache: &PageCache, f: File, name: &str, pages: u64) -> File {
    for i in 0..pages {
        assert_eq!(f.write_at(&page_bytes(i), i * PS).unwrap(), PS as usize);
    }
    cache.sync_all().unwrap();
    // A flusher woken by the writes above may still hold a transient page
    // reference, which makes drop_caches skip that page: try again.
    for _ in 0..1000 {
        cache.drop_caches();
        if f.cached_pages() == 0 {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(f.cached_pages(), 0, "{name}: setup left pages cached");
    f
}

/// Read page `i` whole through `f` and check its bytes.
fn read_page(f: &File, i: u64) {
    let mut buf = vec![0u8; PS as usize];
    assert_eq!(f.read_at(&mut buf, i * PS).unwrap(), PS as usize, "read of page {i}");
    assert!(buf == page_bytes(i), "page {i} read back wrong bytes (first 8: {:?})", &buf[..8]);
}

fn cached(f: &File, i: u64) -> bool {
    f.page_state(i).is_some()
}

/// Indices of `[0, n)` that are cached.
fn cached_set(f: &File, n: u64) -> Vec<u64> {
    (0..n).filter(|&i| cached(f, i)).collect()
}

/// Indices of `[0, n)` carrying PG_readahead.
fn markers(f: &File, n: u64) -> Vec<u64> {
    (0..n).filter(|&i| f.page_state(i).is_some_and(|s| s.readahead)).collect()
}

/// The highest cached index of `[0, n)`.
fn highest_cached(f: &File, n: u64) -> Option<u64> {
    (0..n).rev().find(|&i| cached(f, i))
}

// Goal : a cold file read sequentially in 4 KiB reads arrives almost
// entirely by readahead: one sync miss at page 0, every later page a hit;
// the window opens small (get_init_ra_size(1, 32) = 4 pages, marker on the
// first async page) and ramps x2 to ra_pages (4, 8, 16, 32, 32, ...); the
// PG_readahead marker always sits inside the cached window ahead of the
// reader and is cleared once the reader hits it; the reader is never more
// than two windows behind the readahead front.
// Method: a 512-page cold memory file, page-by-page reads; after each read,
// scan every page's state (cached?, PG_readahead?) and record how far the
// cached front moved.
#[test]
fn sequential_read_ramps_window_and_hits() {
    let cache = cache_with(quiet(), 4096);
    let n = 512;
    let f = cold_file(&cache, "seq", n);
    let before = cache.vmstat();
    let mut front: i64 = -1;
    let mut growths = vec![];
    for i in 0..n {
        read_page(&f, i);
        let set = cached_set(&f, n);
        let hi = *set.last().expect("something cached after a read");
        assert_eq!(set.len() as u64, hi + 1, "after reading page {i}: cached pages are not contiguous from 0: {set:?}");
        assert!(hi >= i, "after reading page {i}: it is not cached");
        if hi as i64 > front {
            growths.push(hi as i64 - front);
            front = hi as i64;
        }
        if i == 0 {
            assert!(hi > 0, "the first read of a cold file opened no window (only page 0 cached)");
            assert!(hi < RA, "the first window is ramp-sized, not ra_pages or more: pages 0..={hi} cached");
        }
        if i == 4 {
            assert!(hi >= i + 16, "after reading pages 0..=4 the window has not ramped: front at page {hi}");
        }
        assert!(hi - i <= 2 * RA, "after reading page {i}: readahead front at {hi}, more than 2 * ra_pages ahead");
        let m = markers(&f, n);
        assert!(m.len() <= 1, "after reading page {i}: one stream, yet PG_readahead on {m:?}");
        for &p in &m {
            assert!(
                p > i && p <= hi,
                "after reading page {i}: PG_readahead on page {p}, not inside the window ({i}, {hi}] \
                 (a marker the reader has passed must have been cleared)"
            );
        }
        if hi < n - 1 {
            assert_eq!(m.len(), 1, "after reading page {i}: window ends at {hi} before EOF but no PG_readahead marker");
        }
    }
    // The window sizes: 4 (initial), 8, 16, 32, then 32 until EOF clips it.
    assert_eq!(&growths[..4], &[4, 8, 16, 32], "window ramp (pages added per readahead): {growths:?}");
    let (last, mid) = growths[4..].split_last().unwrap();
    assert!(mid.iter().all(|&g| g == RA as i64) && *last <= RA as i64, "window not capped at ra_pages: {growths:?}");

    let d = cache.vmstat().delta(&before);
    let (miss, hit, ra) = (d.get(Item::pgcache_miss), d.get(Item::pgcache_hit), d.get(Item::pgreadahead));
    assert_eq!(miss + hit, n, "one lookup per page: miss {miss} + hit {hit}");
    assert!(miss <= 2, "sequential read of {n} pages: {miss} misses (expected 1 sync miss)");
    assert!(ra >= n - 2 && ra <= n, "pgreadahead {ra}: expected ~{n} (all but the sync misses, none twice)");
    assert_eq!(d.get(Item::pgpgin), n * PS / 1024, "every page read from the device exactly once");
    assert_eq!(f.cached_pages(), n);
}

// Goal: ra_pages 0 disables readahead: every page of a sequential read is
// a miss that reads only itself, and POSIX_FADV_SEQUENTIAL (2 * 0) does not
// turn it back on.
// Method: a cold 64-page file read page by page; after each read the next
// page is still not cached; counters.
#[test]
fn ra_pages_zero_disables_readahead() {
    let cache = cache_with(Tunables { ra_pages: 0, ..quiet() }, 1024);
    let n = 64;
    let f = cold_file(&cache, "nora", n);
    let before = cache.vmstat();
    for i in 0..n / 2 {
        read_page(&f, i);
        assert!(!cached(&f, i + 1), "ra_pages 0: page {} cached after reading page {i}", i + 1);
    }
    f.fadvise(0, 0, Advice::Sequential).unwrap();
    for i in n / 2..n {
        read_page(&f, i);
        if i + 1 < n {
            assert!(!cached(&f, i + 1), "ra_pages 0 + FADV_SEQUENTIAL: page {} cached after reading {i}", i + 1);
        }
    }
    let d = cache.vmstat().delta(&before);
    assert_eq!(d.get(Item::pgcache_miss), n, "every page a miss");
    assert_eq!(d.get(Item::pgcache_hit), 0);
    assert_eq!(d.get(Item::pgreadahead), 0, "no page read ahead");
    assert_eq!(f.cached_pages(), n);
}

// Goal: POSIX_FADV_RANDOM (FMODE_RANDOM) makes a handle read only what it
// asks: a page-by-page sequential scan caches exactly the pages read, a
// 4-page read exactly those 4 pages; POSIX_FADV_NORMAL brings the window
// back.
// Method: a cold 256-page file; check which pages are cached after each
// phase.
#[test]
fn fadvise_random_reads_only_what_is_asked() {
    let cache = cache_with(quiet(), 2048);
    let n = 256;
    let f = cold_file(&cache, "rnd", n);
    f.fadvise(0, 0, Advice::Random).unwrap();
    let before = cache.vmstat();
    for i in 0..=20 {
        read_page(&f, i);
    }
    assert_eq!(cached_set(&f, n), (0..=20).collect::<Vec<_>>(), "FADV_RANDOM: sequential reads cached a window");
    assert_eq!(delta(&cache, &before, Item::pgcache_miss), 21, "FADV_RANDOM: every page of the scan is a miss");

    // A multi-page request is read whole, and nothing more.
    let mut buf = vec![0u8; 4 * PS as usize];
    assert_eq!(f.read_at(&mut buf, 100 * PS).unwrap(), buf.len());
    for (k, chunk) in buf.chunks(PS as usize).enumerate() {
        assert!(chunk == page_bytes(100 + k as u64), "page {} wrong", 100 + k);
    }
    assert_eq!(
        cached_set(&f, n),
        (0..=20).chain(100..=103).collect::<Vec<_>>(),
        "FADV_RANDOM: a 4-page read at page 100 cached other pages"
    );
    assert!(markers(&f, n).is_empty(), "FADV_RANDOM: a PG_readahead marker was set");

    // POSIX_FADV_NORMAL: the scan continued at page 21 opens a window again.
    f.fadvise(0, 0, Advice::Normal).unwrap();
    for i in 21..=30 {
        read_page(&f, i);
    }
    let hi = highest_cached(&f, 100).unwrap();
    assert!(hi > 31, "after FADV_NORMAL, reading pages 21..=30 read nothing ahead (front at {hi})");
}

// Goal: POSIX_FADV_SEQUENTIAL doubles the handle's window (ra_pages * 2):
// after the same reads, the sequential handle has more pages cached ahead,
// and its front runs further than 2 * ra_pages ahead of the reader (which a
// normal handle never does); POSIX_FADV_NORMAL restores ra_pages, so the
// front falls back within 2 * ra_pages.
// Method: two cold 1024-page files read page by page to page 200, one
// through a normal handle, one through a FADV_SEQUENTIAL one; compare how
// far ahead each front is; then advise NORMAL and read on to page 400.
#[test]
fn fadvise_sequential_doubles_window_and_normal_restores() {
    let cache = cache_with(quiet(), 8192);
    let n = 1024;
    let normal = cold_file(&cache, "normal", n);
    let seq = cold_file(&cache, "seq", n);
    seq.fadvise(0, 0, Advice::Sequential).unwrap();
    for i in 0..=200 {
        read_page(&normal, i);
        read_page(&seq, i);
    }
    let hi_normal = highest_cached(&normal, n).unwrap();
    let hi_seq = highest_cached(&seq, n).unwrap();
    assert!(hi_normal - 200 <= 2 * RA, "normal handle: front at {hi_normal}, reader at 200");
    assert!(
        hi_seq - 200 > 2 * RA && hi_seq - 200 <= 4 * RA,
        "FADV_SEQUENTIAL handle: front at {hi_seq} with the reader at 200; expected a 2 * ra_pages window \
         (front more than {} and at most {} ahead); normal handle's front at {hi_normal}",
        2 * RA,
        4 * RA
    );
    assert!(seq.cached_pages() > normal.cached_pages(), "{} vs {}", seq.cached_pages(), normal.cached_pages());

    seq.fadvise(0, 0, Advice::Normal).unwrap();
    let mut max_ahead = 0;
    for i in 201..=400 {
        read_page(&seq, i);
        let hi = highest_cached(&seq, n).unwrap();
        if i >= 320 {
            // Past the windows opened before the advice.
            max_ahead = max_ahead.max(hi - i);
        }
    }
    assert!(max_ahead <= 2 * RA, "after FADV_NORMAL the window stays doubled: front up to {max_ahead} pages ahead");
}

// Goal: POSIX_FADV_WILLNEED on an uncached range reads exactly that range
// (first and last partial page included, clipped at EOF), with no
// PG_readahead marker and without marking the pages accessed (not
// referenced, not active); reading the range afterwards is all hits.
// Method: a cold 100-page file; advise ranges (aligned, unaligned, crossing
// EOF, len 0 = to EOF), check which pages are cached and their flags; then
// read one range through a fresh handle and count hits and misses.
#[test]
fn fadvise_willneed_caches_exactly_the_range() {
    let cache = cache_with(quiet(), 2048);
    let n = 100;
    let f = cold_file(&cache, "wn", n);
    let before = cache.vmstat();
    f.fadvise(10 * PS, 5 * PS, Advice::WillNeed).unwrap();
    assert_eq!(cached_set(&f, n + 40), (10..=14).collect::<Vec<_>>(), "WILLNEED [10, 15)");
    assert_eq!(delta(&cache, &before, Item::pgreadahead), 5);
    cache.lru_add_drain_all();
    for i in 10..=14 {
        let s = f.page_state(i).unwrap();
        assert!(s.uptodate, "page {i}: WILLNEED page not uptodate: {s:?}");
        assert!(!s.referenced && !s.active, "page {i}: WILLNEED marked the page accessed: {s:?}");
        assert_eq!(s.lru, Some(LruList::InactiveFile), "page {i}: {s:?}");
        assert!(!s.readahead, "page {i}: WILLNEED set PG_readahead: {s:?}");
    }

    // Unaligned: bytes [20 * PS + 100, 21 * PS + 100) touch pages 20 and 21.
    f.fadvise(20 * PS + 100, PS, Advice::WillNeed).unwrap();
    assert!(cached(&f, 20) && cached(&f, 21), "WILLNEED of an unaligned range missed a partial page");
    assert!(!cached(&f, 19) && !cached(&f, 22), "WILLNEED of an unaligned range read outside it");

    // Across EOF: [90, 110) caches [90, 100) and nothing past EOF.
    f.fadvise(90 * PS, 20 * PS, Advice::WillNeed).unwrap();
    assert!((90..100).all(|i| cached(&f, i)), "WILLNEED across EOF: {:?}", cached_set(&f, n));
    assert!((100..140).all(|i| !cached(&f, i)), "WILLNEED cached pages past EOF");
    // len 0: to EOF.
    f.fadvise(75 * PS, 0, Advice::WillNeed).unwrap();
    assert!((75..100).all(|i| cached(&f, i)), "WILLNEED with len 0 (to EOF): {:?}", cached_set(&f, n));
    assert!(!cached(&f, 74));
    assert_eq!(f.cached_pages(), 5 + 2 + 25);

    // Reading the advised range is all hits.
    let g = f.reopen().unwrap();
    let before = cache.vmstat();
    let mut buf = vec![0u8; 5 * PS as usize];
    assert_eq!(g.read_at(&mut buf, 10 * PS).unwrap(), buf.len());
    for (k, chunk) in buf.chunks(PS as usize).enumerate() {
        assert!(chunk == page_bytes(10 + k as u64), "page {} wrong", 10 + k);
    }
    let d = cache.vmstat().delta(&before);
    assert_eq!((d.get(Item::pgcache_hit), d.get(Item::pgcache_miss)), (5, 0), "reading a WILLNEED range: (hit, miss)");
}

// Goal: POSIX_FADV_DONTNEED drops the clean pages wholly inside the range
// (invalidate_mapping_pages: a partial first or last page stays) and
// leaves every page outside it alone.
// Method: a cold 64-page file read whole, per-CPU batches drained; advise
// an aligned and an unaligned range; check which pages remain.
#[test]
fn fadvise_dontneed_drops_clean_pages_in_range() {
    let cache = cache_with(quiet(), 1024);
    let n = 64;
    let f = cold_file(&cache, "dn", n);
    for i in 0..n {
        read_page(&f, i);
    }
    cache.lru_add_drain_all();
    assert_eq!(f.cached_pages(), n);
    f.fadvise(16 * PS, 16 * PS, Advice::DontNeed).unwrap();
    let expect: Vec<u64> = (0..16).chain(32..n).collect();
    assert_eq!(cached_set(&f, n), expect, "DONTNEED [16, 32)");
    assert_eq!(f.cached_pages(), n - 16);

    // Bytes [40 * PS + 100, 43 * PS + 100): whole pages 41 and 42 only.
    f.fadvise(40 * PS + 100, 3 * PS, Advice::DontNeed).unwrap();
    assert!(!cached(&f, 41) && !cached(&f, 42), "DONTNEED left whole pages of an unaligned range");
    assert!(cached(&f, 40) && cached(&f, 43), "DONTNEED dropped a partial page at the edge of the range");
    assert_eq!(f.cached_pages(), n - 18);
    // Dropped pages read back correctly.
    read_page(&f, 20);
    read_page(&f, 41);
}

// Goal: POSIX_FADV_DONTNEED right after the read that brought the pages in
// drops them: mm/fadvise.c runs lru_add_drain() first ("It's common to
// FADV_DONTNEED right after the read or write that instantiates the pages,
// in which case there will be some sitting on the local LRU cache"), then
// lru_add_drain_all() and a second pass if pages were left, so the
// references held by per-CPU lru_add batches do not keep pages cached.
// Method: a cold 8-page file read whole (the new pages sit in this CPU's
// lru_add batch, fewer than PAGEVEC_SIZE), then DONTNEED with no explicit
// drain.
#[test]
fn fadvise_dontneed_right_after_read_drains_batches() {
    pin_to_cpu0();
    let cache = cache_with(quiet(), 1024);
    let n = 8;
    let f = cold_file(&cache, "dn-fresh", n);
    for i in 0..n {
        read_page(&f, i);
    }
    assert_eq!(f.cached_pages(), n);
    let in_batch: Vec<u64> = (0..n).filter(|&i| f.page_state(i).unwrap().lru.is_none()).collect();
    f.fadvise(0, n * PS, Advice::DontNeed).unwrap();
    assert_eq!(
        cached_set(&f, n),
        Vec::<u64>::new(),
        "DONTNEED right after reading left clean, unpinned pages cached (before the call, pages {in_batch:?} \
         were still in a per-CPU lru_add batch; mm/fadvise.c drains the batches before invalidating)"
    );
}

// Goal: POSIX_FADV_DONTNEED starts writeback of the dirty pages of the
// range (WB_SYNC_NONE, as mm/fadvise.c's __filemap_fdatawrite_range: they
// end clean, their data on the device once it completes), and leaves dirty
// pages outside the range dirty.
// Method: dirty 16 pages of a fresh memory file; DONTNEED the first 8;
// check dirty flags; wait for the range's writeback and check pgwriteback;
// then drop everything and read back.
#[test]
fn fadvise_dontneed_writes_dirty_pages_back() {
    let cache = cache_with(quiet(), 1024);
    let f = cache.open_memory("dn-dirty").unwrap();
    for i in 0..16 {
        f.write_at(&page_bytes(i), i * PS).unwrap();
    }
    assert!((0..16).all(|i| f.page_state(i).unwrap().dirty), "setup: pages not dirty");
    let before = cache.vmstat();
    f.fadvise(0, 8 * PS, Advice::DontNeed).unwrap();
    for i in 0..8 {
        if let Some(s) = f.page_state(i) {
            assert!(!s.dirty, "page {i} still dirty after DONTNEED of its range: {s:?}");
        }
    }
    for i in 8..16 {
        let s = f.page_state(i).expect("page outside the DONTNEED range dropped");
        assert!(s.dirty, "page {i} outside the DONTNEED range was written back: {s:?}");
    }
    // Its writeback ends (nothing is left dirty in the range to write).
    f.sync_range(0, 8 * PS).unwrap();
    assert!(
        delta(&cache, &before, Item::pgwriteback) >= 8,
        "DONTNEED did not write back the dirty pages of its range (pgwriteback {})",
        delta(&cache, &before, Item::pgwriteback)
    );
    // What DONTNEED wrote is on the device.
    cache.sync_all().unwrap();
    cache.drop_caches();
    assert_eq!(f.cached_pages(), 0);
    for i in 0..16 {
        read_page(&f, i);
    }
}

// Goal: POSIX_FADV_DONTNEED's writeback covers every page the byte range
// touches, partial first and last pages included: mm/fadvise.c calls
// __filemap_fdatawrite_range(mapping, offset, endbyte) with the inclusive
// endbyte = offset + len - 1, while only whole pages are then invalidated.
// Method: dirty pages 0..4 of a fresh memory file; DONTNEED bytes
// [PS + 100, 2 * PS + 100), which touch pages 1 and 2 and contain no whole
// page; pages 1 and 2 must be written back (and stay cached), 0 and 3 stay
// dirty.
#[test]
fn fadvise_dontneed_writes_back_partial_pages_of_range() {
    let cache = cache_with(quiet(), 1024);
    let f = cache.open_memory("dn-partial").unwrap();
    for i in 0..4 {
        f.write_at(&page_bytes(i), i * PS).unwrap();
    }
    f.fadvise(PS + 100, PS, Advice::DontNeed).unwrap();
    let st: Vec<_> = (0..4).map(|i| f.page_state(i).expect("no whole page in the range: nothing dropped")).collect();
    assert!(st[0].dirty && st[3].dirty, "DONTNEED wrote back pages outside [PS + 100, 2 * PS + 100)");
    assert!(!st[1].dirty, "DONTNEED of [PS + 100, 2 * PS + 100) left its first (partial) page 1 dirty");
    assert!(
        !st[2].dirty,
        "DONTNEED of [PS + 100, 2 * PS + 100) left its last (partial) page 2 dirty: the writeback range must \
         end at the inclusive endbyte (offset + len - 1) >> PAGE_SHIFT, not at (offset + len) >> PAGE_SHIFT exclusive"
    );
}

/// Which pin `dontneed_with_pin` takes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PinBy {
    GetPage,
    FindPage,
}

/// Read a cold 16-page file whole, pin page 5 (`how`), drain every batch so
/// only the pin holds the page, DONTNEED the whole file; then drop the pin
/// and DONTNEED again.
fn dontneed_with_pin(how: PinBy) {
    let cache = cache_with(quiet(), 1024);
    let n = 16;
    let f = cold_file(&cache, "dn-pin", n);
    for i in 0..n {
        read_page(&f, i);
    }
    cache.lru_add_drain_all();
    {
        let pin = match how {
            PinBy::GetPage => f.get_page(5).unwrap(),
            PinBy::FindPage => f.find_page(5).unwrap().expect("page 5 cached"),
        };
        // Taking the pin may queue an activation, whose batch entry holds a
        // reference of its own: apply it, so only the pin holds the page.
        cache.lru_add_drain_all();
        let held = f.page_state(5).unwrap();
        f.fadvise(0, 0, Advice::DontNeed).unwrap();
        let others: Vec<u64> = cached_set(&f, n).into_iter().filter(|&i| i != 5).collect();
        assert!(others.is_empty(), "{how:?}: DONTNEED left unpinned pages {others:?}");
        assert!(
            cached(&f, 5),
            "DONTNEED dropped page 5 while a PageRef from {how:?} held it (page state while held, \
             refcount excluding page_state's own: {held:?}). In the kernel the pin is a page reference, \
             and invalidate_mapping_pages -> remove_mapping's page_ref_freeze(page, 2) fails on it"
        );
        let mut head = [0u8; 8];
        pin.read_into(0, &mut head).unwrap();
        assert!(head == 5u64.to_le_bytes(), "{how:?}: the pinned page's bytes changed");
    }
    cache.lru_add_drain_all();
    f.fadvise(0, 0, Advice::DontNeed).unwrap();
    assert_eq!(cached_set(&f, n), Vec::<u64>::new(), "{how:?}: DONTNEED after the pin was dropped");
}

// Goal: POSIX_FADV_DONTNEED does not drop a page held by get_page (the
// kernel's invalidate_inode_page -> remove_mapping freezes the count at 2
// and fails on any extra reference); the rest of the range goes, and the
// page goes once the pin is dropped.
// Method: see dontneed_with_pin.
#[test]
fn fadvise_dontneed_keeps_page_held_by_get_page() {
    dontneed_with_pin(PinBy::GetPage);
}

// Goal: as above for a page held by find_page (the hit path's PageRef, in
// the kernel a find_get_page reference).
// Method: see dontneed_with_pin.
#[test]
fn fadvise_dontneed_keeps_page_held_by_find_page() {
    dontneed_with_pin(PinBy::FindPage);
}

// Goal: POSIX_FADV_NOREUSE (FMODE_NOREUSE): reads through that handle do not
// mark pages accessed, so pages it reads twice stay inactive and
// unreferenced, while another handle's reads of the same pages activate
// them; POSIX_FADV_NORMAL clears NOREUSE.
// Method: a cold 8-page file read whole twice through a NOREUSE handle,
// then twice through a second handle; batches drained between; page flags
// and mark_page_accessed_calls.
#[test]
fn fadvise_noreuse_reads_do_not_mark_accessed() {
    pin_to_cpu0();
    let cache = cache_with(quiet(), 1024);
    let n = 8;
    let f = cold_file(&cache, "nr", n);
    let nr = f.reopen().unwrap();
    nr.fadvise(0, 0, Advice::NoReuse).unwrap();
    let before = cache.vmstat();
    for _ in 0..2 {
        for i in 0..n {
            read_page(&nr, i);
        }
    }
    cache.lru_add_drain_all();
    assert_eq!(delta(&cache, &before, Item::mark_page_accessed_calls), 0, "NOREUSE reads called mark_page_accessed");
    for i in 0..n {
        let s = nr.page_state(i).unwrap();
        assert_eq!(
            (s.lru, s.referenced, s.active),
            (Some(LruList::InactiveFile), false, false),
            "page {i} read twice through a NOREUSE handle"
        );
    }

    // Another handle's reads mark them: referenced, then active.
    let other = f.reopen().unwrap();
    for _ in 0..2 {
        for i in 0..n {
            read_page(&other, i);
        }
    }
    cache.lru_add_drain_all();
    for i in 0..n {
        let s = other.page_state(i).unwrap();
        assert_eq!((s.lru, s.active), (Some(LruList::ActiveFile), true), "page {i} read twice, other handle: {s:?}");
    }

    // FADV_NORMAL clears NOREUSE: the handle marks again.
    let before = cache.vmstat();
    nr.fadvise(0, 0, Advice::Normal).unwrap();
    read_page(&nr, 0);
    assert!(delta(&cache, &before, Item::mark_page_accessed_calls) >= 1, "FADV_NORMAL did not clear NOREUSE");
}

// Goal: 4 KiB reads at scattered, non-adjacent offsets of a cold file open
// no readahead window: each miss reads just its own page (ondemand_readahead's
// "standalone, small random read"), so no page beyond those read is cached
// and pgreadahead counts at most the pages asked for.
// Method: 200 reads at pages (k * 389) % 1021 + 1 of a 1024-page cold file
// (consecutive reads are never adjacent, page 0 is never read); counters and
// the cached set.
#[test]
fn random_reads_open_no_window() {
    let cache = cache_with(quiet(), 4096);
    let n = 1024;
    let f = cold_file(&cache, "random", n);
    let reads: Vec<u64> = (0..200u64).map(|k| (k * 389) % 1021 + 1).collect();
    let before = cache.vmstat();
    for &i in &reads {
        read_page(&f, i);
    }
    let d = cache.vmstat().delta(&before);
    let mut want = reads.clone();
    want.sort_unstable();
    let got = cached_set(&f, n);
    let extra: Vec<u64> = got.iter().copied().filter(|i| want.binary_search(i).is_err()).collect();
    assert!(extra.is_empty(), "random reads cached {} pages never asked for: {extra:?}", extra.len());
    assert_eq!(got, want);
    assert_eq!(d.get(Item::pgcache_miss), 200, "each random read of a cold page is a miss");
    assert!(
        d.get(Item::pgreadahead) <= 200,
        "pgreadahead {} for 200 one-page random reads: pages read beyond the requests",
        d.get(Item::pgreadahead)
    );
    assert!(markers(&f, n).is_empty(), "random reads left PG_readahead markers");
}

// Goal: each handle has its own file_ra_state, so two sequential readers on
// two handles of one file, interleaved page by page, each keep their own
// window: both streams mostly hit. (Shared state would see every read as
// random: the previous read was the other stream's.)
// Method: a cold 1024-page file; handle A reads pages 0..512, handle B pages
// 512..1024, alternating one page each; count misses.
#[test]
fn interleaved_readers_keep_their_own_windows() {
    let cache = cache_with(quiet(), 4096);
    let n = 1024;
    let f = cold_file(&cache, "two", n);
    let a = f.reopen().unwrap();
    let b = f.reopen().unwrap();
    let before = cache.vmstat();
    for k in 0..n / 2 {
        read_page(&a, k);
        read_page(&b, n / 2 + k);
    }
    let d = cache.vmstat().delta(&before);
    let (miss, hit) = (d.get(Item::pgcache_miss), d.get(Item::pgcache_hit));
    assert_eq!(miss + hit, n);
    // A: the sync miss at 0; B: a random miss at 512, a sequential one at 513.
    assert!(miss <= 6, "two interleaved sequential streams: {miss} misses, {hit} hits (expected ~3 misses)");
    assert!(d.get(Item::pgreadahead) >= n - 6, "pgreadahead {}", d.get(Item::pgreadahead));
    assert_eq!(f.cached_pages(), n);
}

// Goal: reads crossing EOF return only the bytes below EOF (the rest of the
// buffer untouched), reads at or past EOF return 0, and neither they nor the
// readahead window cache any page past EOF, for a file ending mid-page and
// one ending on a page boundary.
// Method: cold memory files of 10 pages + 100 bytes and of 8 pages; read
// sequentially in 64 KiB reads (window larger than the file), then across
// and past EOF; check returned counts, bytes and cached pages.
#[test]
fn reads_across_eof_stop_at_eof() {
    let cache = cache_with(quiet(), 1024);
    // 10 whole pages + 100 bytes: the last page is 10.
    let f = cache.open_memory("eof").unwrap();
    let len = 10 * PS + 100;
    for i in 0..11 {
        f.write_at(&page_bytes(i), i * PS).unwrap();
    }
    f.set_len(len).unwrap();
    cache.sync_all().unwrap();
    cache.drop_caches();
    assert_eq!(f.cached_pages(), 0);

    let mut buf = vec![0xAAu8; 16 * PS as usize];
    let got = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(got as u64, len, "a 64 KiB read of a {len}-byte file");
    assert!(buf[(10 * PS) as usize..len as usize] == page_bytes(10)[..100]);
    assert!(buf[len as usize..].iter().all(|&b| b == 0xAA), "bytes past EOF written into the buffer");
    assert_eq!(f.cached_pages(), 11, "cached: {:?}", cached_set(&f, 64));
    assert!((11..64).all(|i| !cached(&f, i)), "pages past EOF cached: {:?}", cached_set(&f, 64));

    // Across EOF from page 9, at EOF, past EOF.
    let mut buf = vec![0xAAu8; 3 * PS as usize];
    assert_eq!(f.read_at(&mut buf, 9 * PS).unwrap() as u64, PS + 100);
    assert!(buf[..PS as usize] == page_bytes(9)[..]);
    assert!(buf[(PS + 100) as usize..].iter().all(|&b| b == 0xAA));
    assert_eq!(f.read_at(&mut buf, len).unwrap(), 0, "read at EOF");
    assert_eq!(f.read_at(&mut buf, len + 5 * PS).unwrap(), 0, "read past EOF");
    assert!((11..64).all(|i| !cached(&f, i)), "pages past EOF cached: {:?}", cached_set(&f, 64));

    // Page-aligned EOF, read cold from the middle, crossing EOF.
    let g = cold_file(&cache, "eof-aligned", 8);
    let before = cache.vmstat();
    let mut buf = vec![0xAAu8; 4 * PS as usize];
    assert_eq!(g.read_at(&mut buf, 6 * PS).unwrap() as u64, 2 * PS);
    assert!(buf[..PS as usize] == page_bytes(6)[..] && buf[PS as usize..2 * PS as usize] == page_bytes(7)[..]);
    assert!(buf[2 * PS as usize..].iter().all(|&b| b == 0xAA));
    assert!((8..64).all(|i| !cached(&g, i)), "pages past an aligned EOF cached: {:?}", cached_set(&g, 64));
    // Sequential page reads to EOF: the window stops at EOF too.
    for i in 0..8 {
        read_page(&g, i);
    }
    assert_eq!(g.cached_pages(), 8, "cached: {:?}", cached_set(&g, 64));
    assert!(delta(&cache, &before, Item::pgreadahead) <= 8, "pages read ahead past EOF");
}

/// A cold file of `pages` pages on a fault injector (which counts and
/// slows the device's calls) over a memory device, reporting `limits` as
/// its queue's if given.
fn cold_device_file(
    cache: &PageCache,
    name: &str,
    pages: u64,
    limits: Option<pcache::backing::QueueLimits>,
) -> (File, std::sync::Arc<pcache::backing::FaultInjector>) {
    use pcache::backing::{FaultInjector, MemoryDev};
    let mut mem = MemoryDev::new(name, PS as usize);
    if let Some(l) = limits {
        mem = mem.with_queue_limits(l);
    }
    let fi = std::sync::Arc::new(FaultInjector::new(std::sync::Arc::new(mem)));
    (make_cold(cache, cache.open_dev(fi.clone()).unwrap(), name, pages), fi)
}

fn cold_faulty_file(
    cache: &PageCache,
    name: &str,
    pages: u64,
) -> (File, std::sync::Arc<pcache::backing::FaultInjector>) {
    cold_device_file(cache, name, pages, None)
}

// Goal: readahead is asynchronous as the kernel's is. The part
// of a window the reader needs now is read before read_at returns; the part
// from the PG_readahead marker on is queued to the I/O workers, so the
// reader goes on while the device reads it, and a reader of a page still in
// flight waits for it (on the page lock) and gets the right bytes. With
// io_threads = 0 the reader reads the whole window itself, as before.
// Method: the device's reads of pages 1 and up sleep 3 s. A read of page 0
// opens the window [0, 4): page 0 synchronous, 1..4 asynchronous (marker on
// page 1). Timed with lower bounds only, which load cannot break, except
// the one upper bound the behaviour is about, with 2.5 s of margin.
#[test]
fn async_window_is_in_flight_while_the_reader_goes_on() {
    use pcache::backing::{Fault, FaultOp};
    use std::time::{Duration, Instant};
    const SLOW: Duration = Duration::from_secs(3);

    for io_threads in [4, 0] {
        let cache = cache_with(Tunables { io_threads, ..quiet() }, 1024);
        let (f, fi) = cold_faulty_file(&cache, "async", 64);
        fi.fail_page_range(FaultOp::Read, PS, u64::MAX, Fault::Delay(SLOW));
        let before = cache.vmstat();
        let t = Instant::now();
        read_page(&f, 0);
        let first = t.elapsed();
        assert_eq!(cached_set(&f, 8), vec![0, 1, 2, 3], "the window [0, 4) is in the cache (or in flight)");
        if io_threads > 0 {
            assert!(first < SLOW - Duration::from_millis(500), "page 0 waited for the async part: {first:?}");
            assert_eq!(delta(&cache, &before, Item::ra_submit_async), 1);
            // Page 2 is in flight: its reader waits for the device, then
            // gets its bytes.
            let locked = f.page_state(2).is_some_and(|s| s.locked && !s.uptodate);
            assert!(locked || t.elapsed() >= SLOW, "page 2 is locked while its read is in flight");
            read_page(&f, 2);
            assert!(t.elapsed() >= SLOW, "page 2 came back before its read could have ended");
        } else {
            assert!(first >= SLOW, "without workers the reader reads the whole window: {first:?}");
            assert_eq!(delta(&cache, &before, Item::ra_submit_async), 0);
            assert_eq!(delta(&cache, &before, Item::ra_submit_inline), 1);
            read_page(&f, 2);
        }
        fi.clear();
        for i in 3..64 {
            read_page(&f, i);
        }
    }
}

// Goal: a failed asynchronous read loses nothing and hangs nobody: its
// pages end unlocked, not uptodate, with PG_error; the reader that needs
// one waits for the failed read, reads the page again itself and gets the
// error while the device fails, and the bytes once it recovers.
// Method: reads of pages 1..4 (the async part of the first window) fail
// with EIO until cleared.
#[test]
fn failed_async_read_is_retried_by_its_reader() {
    use pcache::backing::{Fault, FaultOp};
    let cache = cache_with(quiet(), 1024);
    let (f, fi) = cold_faulty_file(&cache, "asyncerr", 16);
    fi.fail_page_range(FaultOp::Read, PS, 4 * PS, Fault::Eio);
    read_page(&f, 0);
    let mut buf = vec![0u8; PS as usize];
    assert!(f.read_at(&mut buf, PS).is_err(), "page 1: the async read failed and so does the retry");
    let s = f.page_state(2).expect("page 2 stays cached");
    assert!(s.error && !s.uptodate && !s.locked, "page 2 after the failed async read: {s:?}");
    fi.clear();
    for i in 1..16 {
        read_page(&f, i);
    }
}

// Goal: readahead is sized from the device, as the kernel's bdi
// is: a device reporting read_ahead_kb 1024 gets a 256-page window (the
// sequential reader's lead grows past two default windows), and a read
// larger than the window takes up to the device's max_sectors_kb in one
// request (io_pages), where the default window splits it into many. With
// ra_from_device off, both fall back to the cache-wide 32-page window.
// Method: page-by-page sequential reads, tracking how far the cached front
// runs ahead of the reader; one 1 MiB read, counting device read calls.
#[test]
fn window_and_large_reads_sized_from_the_device() {
    use pcache::backing::{FaultOp, QueueLimits};
    for from_device in [true, false] {
        let cache = cache_with(Tunables { ra_from_device: from_device, io_threads: 0, ..quiet() }, 4096);
        let big = QueueLimits { read_ahead_kb: 1024, max_sectors_kb: 1024 };
        let (f, _fi) = cold_device_file(&cache, "devra", 1024, Some(big));
        let mut lead = 0;
        for i in 0..768 {
            read_page(&f, i);
            lead = lead.max(highest_cached(&f, 1024).unwrap_or(0) - i);
        }
        if from_device {
            assert!(lead > 2 * RA, "the device's 256-page window: lead {lead}");
        } else {
            assert!(lead <= 2 * RA, "the default 32-page window: lead {lead}");
        }

        let small = QueueLimits { read_ahead_kb: 128, max_sectors_kb: 1024 };
        let (g, fi) = cold_device_file(&cache, "devio", 512, Some(small));
        let calls = fi.calls(FaultOp::Read);
        let mut buf = vec![0u8; 256 * PS as usize];
        assert_eq!(g.read_at(&mut buf, 0).unwrap(), buf.len());
        for (i, page) in buf.chunks(PS as usize).enumerate() {
            assert!(page == page_bytes(i as u64).as_slice(), "page {i} of the 1 MiB read");
        }
        let n = fi.calls(FaultOp::Read) - calls;
        if from_device {
            assert!(n <= 2, "one request for the read (and one for its async part), not {n}");
        } else {
            assert!(n >= 4, "32-page windows split the 1 MiB read: {n} requests");
        }
    }
}

// Goal: a device's window covers at least
// `ra_device_requests` of its largest requests, so that many are at the
// device while the reader copies the window before; with 0 it is the
// device's read_ahead_kb alone, as the kernel's. Method: a device
// reporting read_ahead_kb 128 (32 pages) and max_sectors_kb 256 (64
// pages); page-by-page reads with the reader doing all I/O itself
// (io_threads 0: no timing), tracking how far the cached front runs ahead
// of the reader. Four requests make a 256-page window: the front leads by
// more than one such window; with 0 it never leads by more than two
// 32-page windows.
#[test]
fn window_covers_several_device_requests() {
    use pcache::backing::QueueLimits;
    for requests in [4, 0] {
        let t = Tunables { ra_device_requests: requests, io_threads: 0, ..quiet() };
        let cache = cache_with(t, 4096);
        let limits = QueueLimits { read_ahead_kb: 128, max_sectors_kb: 256 };
        let (f, _fi) = cold_device_file(&cache, "deep", 1024, Some(limits));
        let mut lead = 0;
        for i in 0..768 {
            read_page(&f, i);
            lead = lead.max(highest_cached(&f, 1024).unwrap_or(0) - i);
        }
        if requests > 0 {
            assert!(lead >= 256, "a window of 4 requests of 64 pages: lead {lead}");
        } else {
            assert!(lead <= 2 * RA, "the device's 32-page window: lead {lead}");
        }
    }
}

// Goal: concurrent misses from different threads go to the
// device in parallel, not one after another behind a lock: 8 threads each
// missing a different page of one file are all inside the device at once.
// Method: POSIX_FADV_RANDOM handles (no readahead), one page each, on a
// device whose every read takes 5 s (the injector counts a call before it
// sleeps). When the eighth read has reached the device, no reader (or, if
// the machine is slow to start threads, hardly any) has finished; behind a
// lock, seven would have. No wall-clock bound: only the order of events.
#[test]
fn concurrent_misses_reach_the_device_in_parallel() {
    use pcache::backing::FaultOp;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let cache = cache_with(quiet(), 1024);
    let (f, fi) = cold_faulty_file(&cache, "parallel", 64);
    fi.set_delay(FaultOp::Read, Duration::from_secs(5));
    let finished = AtomicU64::new(0);
    let finished_when_all_in = std::thread::scope(|s| {
        for k in 0..8u64 {
            let h = f.reopen().unwrap();
            let finished = &finished;
            s.spawn(move || {
                h.fadvise(0, 0, Advice::Random).unwrap();
                read_page(&h, k * 8);
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Serialised, the eighth call comes after 35 s; the bound only
        // keeps a broken build from waiting forever.
        let give_up = Instant::now() + Duration::from_secs(300);
        while fi.calls(FaultOp::Read) < 8 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        finished.load(Ordering::SeqCst)
    });
    assert_eq!(fi.calls(FaultOp::Read), 8);
    assert!(
        finished_when_all_in <= 2,
        "{finished_when_all_in} of 8 misses had finished when the last reached the device: serialised"
    );
}

// Goal: a window larger than the gap between the free-frame
// watermarks is read whole when the cache is full of a stream's used-once
// pages. Readahead takes frames only above the min watermark; without
// reclaim for the window first, each window of a stream longer than the
// cache was cut to the few frames above it, and the reader missed on the
// rest and restarted from a small synchronous window, about once per
// window.
// Method: a 4096-page cache (watermarks min 128, high 192), a 512-page
// window, a file of four times the cache read in 1 MiB calls, with the
// reader reading every window itself (io_threads 0) and with the I/O
// threads; count the reader's misses (one is the first read's).
#[test]
fn stream_larger_than_the_cache_reads_whole_windows() {
    for io_threads in [0, 4] {
        let cache = cache_with(Tunables { ra_pages: 512, io_threads, ..quiet() }, 4096);
        let pages = 4 * 4096;
        let f = cold_file(&cache, "stream", pages);
        let before = cache.vmstat();
        let mut buf = vec![0u8; 256 * PS as usize];
        for call in 0..pages / 256 {
            assert_eq!(f.read_at(&mut buf, call * 256 * PS).unwrap(), buf.len());
            for (k, page) in buf.chunks(PS as usize).enumerate() {
                let i = call * 256 + k as u64;
                assert!(page == page_bytes(i).as_slice(), "io_threads {io_threads}: page {i} read back wrong");
            }
        }
        let misses = delta(&cache, &before, Item::pgcache_miss);
        assert!(misses <= 4, "io_threads {io_threads}: {misses} misses in 64 windows: windows were cut short");
    }
}

// Goal: a reader about to wait on a page whose read is still
// queued (every I/O thread busy) reads it itself instead of sleeping until
// a thread is free.
// Method: one I/O thread, held for 5 s (the test waits until it is) by
// the async part of file A's first window (its device reads of page 1
// sleep). File B's first window then queues its async part behind it; the
// reader of B's page 2 finds it locked and queued, runs it
// (`ra_reader_completed`) and gets its bytes.
// No time bound: the counter says who read it, and the queue is FIFO, so
// the thread cannot take B's request before A's 5 s read ends.
#[test]
fn reader_runs_its_queued_read_when_the_threads_are_busy() {
    use pcache::backing::{Fault, FaultOp};
    use std::time::Duration;
    let cache = cache_with(Tunables { io_threads: 1, io_engine: pcache::IoEngine::Threads, ..quiet() }, 1024);
    let (a, fa) = cold_faulty_file(&cache, "busy", 16);
    let (b, _fb) = cold_faulty_file(&cache, "queued", 16);
    fa.fail_page_range(FaultOp::Read, PS, 2 * PS, Fault::Delay(Duration::from_secs(5)));
    let before = cache.vmstat();
    read_page(&a, 0);
    // The thread is in A's slow read (bounded wait: it takes it at once
    // unless the machine is starved).
    for _ in 0..3000 {
        if fa.faults_injected() > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fa.faults_injected(), 1, "the I/O thread took A's async read");
    read_page(&b, 0);
    assert_eq!(delta(&cache, &before, Item::ra_submit_async), 2, "both async parts were queued");
    read_page(&b, 2);
    assert_eq!(delta(&cache, &before, Item::ra_reader_completed), 1, "B's reader read its own queued run");
    read_page(&b, 3);
    fa.clear();
    read_page(&a, 1);
}

/// A memory device that records, for each read, how many of its pages
/// continue the previous page's buffer in memory (adjacent frames) and
/// how many pairs there were.
struct SegmentCounter {
    inner: pcache::backing::MemoryDev,
    adjacent: std::sync::atomic::AtomicU64,
    pairs: std::sync::atomic::AtomicU64,
}

impl pcache::backing::BackingDev for SegmentCounter {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering::Relaxed;
        for w in bufs.windows(2) {
            self.pairs.fetch_add(1, Relaxed);
            if w[0].as_ptr().wrapping_add(w[0].len()) == w[1].as_ptr() {
                self.adjacent.fetch_add(1, Relaxed);
            }
        }
        self.inner.read_pages(pos, bufs)
    }
    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> std::io::Result<()> {
        self.inner.write_pages(pos, bufs, file_size)
    }
    fn sync(&self, data_only: bool) -> std::io::Result<()> {
        self.inner.sync(data_only)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.punch_hole(offset, len)
    }
}

// Goal: a readahead request covers its window's
// pages in a few long runs of memory, not one 4 KiB piece per page, also
// once the cache is full and every window's frames come back from reclaim
// (the free list is a stack, which handed them out in reverse). A virtio
// disk's request costs per memory segment.
// Method: a file of four times the cache read in 1 MiB calls through a
// device that checks, for each read, whether each page's buffer follows
// the previous page's in memory; with the reader reading its windows
// (io_threads 0) and with the I/O threads. With the frames unsorted (the
// fix taken out) 1,913 of 4,080 pairs were adjacent and this failed; now
// at least 90% must be. No timing, no LRU counts.
#[test]
fn window_requests_are_long_runs_of_memory() {
    use std::sync::atomic::Ordering::Relaxed;
    for io_threads in [0, 4] {
        let cache = cache_with(Tunables { ra_pages: 256, io_threads, ..quiet() }, 1024);
        let dev = std::sync::Arc::new(SegmentCounter {
            inner: pcache::backing::MemoryDev::new("segments", PS as usize),
            adjacent: Default::default(),
            pairs: Default::default(),
        });
        let pages = 4 * 1024;
        let f = make_cold(&cache, cache.open_dev(dev.clone()).unwrap(), "segments", pages);
        dev.adjacent.store(0, Relaxed);
        dev.pairs.store(0, Relaxed);
        let mut buf = vec![0u8; 256 * PS as usize];
        for call in 0..pages / 256 {
            assert_eq!(f.read_at(&mut buf, call * 256 * PS).unwrap(), buf.len());
            assert!(buf[..PS as usize] == page_bytes(call * 256)[..], "io_threads {io_threads}: call {call}");
        }
        let (adjacent, pairs) = (dev.adjacent.load(Relaxed), dev.pairs.load(Relaxed));
        assert!(pairs >= pages / 2, "io_threads {io_threads}: only {pairs} page pairs read in multi-page requests");
        assert!(
            adjacent * 10 >= pairs * 9,
            "io_threads {io_threads}: {adjacent} of {pairs} page pairs in a request adjacent in memory"
        );
    }
}

// Goal: a readahead window asks kswapd to free the
// next windows' room ahead of the reader (vmscan.rs `wakeup_kswapd_ra`),
// so kswapd frees well past the high watermark, where before it stopped
// at `high` and the reader reclaimed each window itself. Method: a
// 1,024-page cache filled with clean pages by writes (kswapd on, keeping
// free between its watermarks: low 80, high 96), then one 64-page read
// of a cold file, which opens a 128-page window: it asks kswapd for
// min(2 x 128, 1024 / 4) = 256 pages above high. Wait (bounded, no
// timing assumed: kswapd runs when the scheduler lets it) until 200
// frames are free: kswapd's boosted pass leaves at least 96 + 256 - 128
// = 224 free whether it ran before or after the window's frames were
// taken. Without the boost free ends near high
// (about 80-130) and this times out and fails.
#[test]
fn readahead_asks_kswapd_for_the_next_windows() {
    const N: u64 = 1024;
    let t = Tunables { kswapd: true, ra_pages: 64, io_threads: 0, ..quiet() };
    let cache = cache_with(t, N);
    let wm = cache.watermarks();
    assert_eq!((wm.low, wm.high), (80, 96), "the watermarks this test's arithmetic assumes");
    // Made cold first: its drop_caches would empty the filler's pages.
    let b = cold_file(&cache, "stream", 4 * RA);
    let a = cache.open_memory("filler").unwrap();
    for i in 0..N {
        assert_eq!(a.write_at(&page_bytes(i), i * PS).unwrap(), PS as usize);
    }
    cache.sync_all().unwrap();
    let before = cache.vmstat();
    let mut buf = vec![0u8; (64 * PS) as usize];
    assert_eq!(b.read_at(&mut buf, 0).unwrap(), buf.len());
    for i in 0..64 {
        assert!(buf[(i * PS) as usize..((i + 1) * PS) as usize] == page_bytes(i)[..], "page {i}");
    }
    assert!(delta(&cache, &before, Item::kswapd_ra_boost) >= 1, "the window did not ask kswapd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while cache.nr_free_pages() < 200 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let free = cache.nr_free_pages();
    assert!(free >= 200, "kswapd left {free} frames free (high {}): no room made ahead of the stream", wm.high);
    assert!(delta(&cache, &before, Item::pgsteal_kswapd) > 0);
}

// Goal: on a device that reports queue limits, an
// asynchronous window the reader's `read_at` hits the marker of is
// inserted and submitted by the readahead thread (or, if the reader gets
// there first, by the reader from the queue), never twice and never lost:
// every page is read from the device exactly once, the reader misses only
// its first page, and every byte is right. With `ra_async_thread` off the
// reader inserts every window itself, as before.
// Method: a device reporting read_ahead_kb 128 and max_sectors_kb 128 (a
// 128-page window: four 32-page requests), a 2048-page file read in
// 64 KiB calls through a 4096-page cache (no reclaim), I/O threads on.
// No timing: whichever of the thread and the reader inserts a window, the
// pages read are the same, the counters say the windows went through the
// queue, and each window the reader met before it was inserted explains
// at most one miss. A window is queued only after the one before was
// inserted (its marker is in it), so the queue never fills.
#[test]
fn async_windows_are_inserted_off_the_reader() {
    use pcache::backing::{FaultOp, QueueLimits};
    for thread in [true, false] {
        let cache = cache_with(Tunables { ra_async_thread: thread, ..quiet() }, 4096);
        let limits = QueueLimits { read_ahead_kb: 128, max_sectors_kb: 128 };
        let pages = 2048;
        let (f, fi) = cold_device_file(&cache, "offload", pages, Some(limits));
        let before = cache.vmstat();
        let calls = fi.calls(FaultOp::Read);
        let mut buf = vec![0u8; 16 * PS as usize];
        for call in 0..pages / 16 {
            assert_eq!(f.read_at(&mut buf, call * 16 * PS).unwrap(), buf.len());
            for (k, page) in buf.chunks(PS as usize).enumerate() {
                let i = call * 16 + k as u64;
                assert!(page == page_bytes(i).as_slice(), "ra_async_thread {thread}: page {i} read back wrong");
            }
        }
        let d = cache.vmstat().delta(&before);
        let queued = d.get(Item::ra_async_thread) + d.get(Item::ra_async_reader);
        // A reader that finds a queued window not yet inserted misses on
        // it once (and runs it, or waits for it): a late window, not a
        // new stream. Whether that happens is up to the scheduler.
        let late = d.get(Item::ra_async_reader) + d.get(Item::ra_async_waited);
        assert_eq!(d.get(Item::pgpgin), pages * PS / 1024, "ra_async_thread {thread}: every page read exactly once");
        let misses = d.get(Item::pgcache_miss);
        assert!(misses <= 2 + late, "ra_async_thread {thread}: {misses} misses, {late} windows met late");
        assert!(fi.calls(FaultOp::Read) - calls >= pages / 32, "requests of at most 32 pages");
        if thread {
            // 2048 pages in 128-page windows: all but the first one or two
            // (the sync miss's) were asynchronous.
            assert!(queued >= pages / 128 - 2, "ra_async_thread on: only {queued} windows went through the queue");
        } else {
            assert_eq!(queued, 0, "ra_async_thread off: {queued} windows went through the queue");
        }
        assert_eq!(f.cached_pages(), pages);
    }
}

// Goal: a handle closed while its asynchronous windows are
// queued to the readahead thread, or being inserted by it, leaks nothing:
// the close drops the windows not started and waits for the running one,
// so an unlinked file's pages all go with its last close, at once, and
// not later on the thread. Which of queued, running or done a window is at
// the close is up to the scheduler; every round must hold, so the rounds
// (each a fresh file read a few windows deep, then unlinked and closed
// at once) cover the interleavings.
#[test]
fn closing_with_windows_queued_frees_every_page_at_the_last_close() {
    use pcache::backing::QueueLimits;
    let cache = cache_with(Tunables { ra_async_thread: true, ..quiet() }, 4096);
    let limits = QueueLimits { read_ahead_kb: 128, max_sectors_kb: 128 };
    let free = cache.nr_free_pages();
    let mut buf = vec![0u8; 16 * PS as usize];
    let mut queued = 0;
    for round in 0..40u64 {
        let name = format!("closing-{round}");
        let (f, fi) = cold_device_file(&cache, &name, 512, Some(limits));
        let name = pcache::backing::BackingDev::name(fi.as_ref()).to_string();
        let before = cache.vmstat();
        // A few windows deep: the last one's marker queues the next, and
        // the close comes before the thread is done with it (sometimes).
        let calls = 4 + round % 13;
        for call in 0..calls {
            assert_eq!(f.read_at(&mut buf, call * 16 * PS).unwrap(), buf.len());
            for (k, page) in buf.chunks(PS as usize).enumerate() {
                assert!(page == page_bytes(call * 16 + k as u64).as_slice(), "round {round}: page read back wrong");
            }
        }
        queued += cache.vmstat().delta(&before).get(Item::ra_async_thread);
        assert!(cache.unlink_dev(&name).unwrap());
        drop(f);
        // Its last handle is gone (the close waited for a window the
        // thread was inserting): no page of it may remain.
        cache.lru_add_drain_all();
        assert_eq!(cache.nr_free_pages(), free, "round {round}: frames still held after the last close");
        assert!(!cache.is_cached(&name), "round {round}: the unlinked file is still cached");
    }
    assert!(queued > 0, "no window went through the readahead thread: the test exercised nothing");
}

// Goal: read_at_nowait (RWF_NOWAIT) returns the cached leading pages and
// stops, saying so, at the first page a read would have to read in; it
// does no I/O and starts no readahead; read_at goes on from where it
// stopped and the whole reads back right; at end of file it is not "short".
#[test]
fn read_at_nowait_stops_at_the_first_miss() {
    let cache = cache_with(Tunables { ra_pages: 0, ..quiet() }, 256);
    let f = cold_file(&cache, "nowait", 8);
    for i in 0..3 {
        read_page(&f, i);
    }
    let before = cache.vmstat();
    let mut buf = vec![0u8; 8 * PS as usize];
    let (n, short) = f.read_at_nowait(&mut buf, 0).unwrap();
    assert_eq!((n, short), (3 * PS as usize, true));
    assert_eq!(delta(&cache, &before, Item::pgpgin), 0, "a nowait read did I/O");
    assert!(!cached(&f, 3), "a nowait read brought a page in");
    // Nothing cached at the start: nothing read, still short.
    assert_eq!(f.read_at_nowait(&mut buf[..PS as usize], 5 * PS).unwrap(), (0, true));
    // read_at goes on from there.
    assert_eq!(f.read_at(&mut buf[n..], n as u64).unwrap(), 5 * PS as usize);
    for i in 0..8u64 {
        assert!(buf[(i * PS) as usize..((i + 1) * PS) as usize] == page_bytes(i), "page {i}");
    }
    // All cached now: the whole file, and at end of file it is not short.
    let mut again = vec![0u8; 10 * PS as usize];
    assert_eq!(f.read_at_nowait(&mut again, 0).unwrap(), (8 * PS as usize, false));
    assert_eq!(again[..8 * PS as usize], buf[..]);
    assert_eq!(f.read_at_nowait(&mut again, 100 * PS).unwrap(), (0, false));
}

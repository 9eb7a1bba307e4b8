//! Large page-cache folios (`Tunables::folio_order_max`): readahead reads
//! a stream into folios of growing order, and every path that reads,
//! writes, maps, truncates, punches or reclaims pages keeps each byte
//! right through them. Each test checks every byte it reads against the
//! file's model, and the frame accounting at the end.

mod common;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use common::{delta, scratch, stamped_page, write_stamped_file};
use pcache::{
    Config, File, FolioRamp, Item, MapFlags, OpenOptions, PageCache, ReclaimWriteback, Tunables, FOLIO_ORDER_MAX_5_18,
    FOLIO_ORDER_MAX_6,
};

const PS: u64 = 4096;

/// A cache of `mb` MiB whose readahead allocates folios up to `order`.
fn cache(mb: u64, order: u32) -> PageCache {
    cache_ramp(mb, order, FolioRamp::default())
}

fn cache_ramp(mb: u64, order: u32, folio_ramp: FolioRamp) -> PageCache {
    cache_with(mb, Tunables { folio_order_max: order, folio_ramp, ..Tunables::default() })
}

/// A cache of `mb` MiB with `tunables`.
fn cache_with(mb: u64, tunables: Tunables) -> PageCache {
    PageCache::new(Config { memory_bytes: mb << 20, tunables, ..Config::default() }).unwrap()
}

/// The model of a stamped file of `pages` pages.
fn model(seed: u64, pages: u64) -> Vec<u8> {
    (0..pages).flat_map(|i| stamped_page(seed, i)).collect()
}

/// Read `f` from start to end in `chunk`-byte reads, checking each
/// against `want`.
fn read_checked(f: &File, want: &[u8], chunk: usize, what: &str) {
    let mut buf = vec![0u8; chunk];
    let mut pos = 0usize;
    loop {
        let n = f.read_at(&mut buf, pos as u64).unwrap();
        if n == 0 {
            break;
        }
        if buf[..n] != want[pos..pos + n] {
            let at = buf[..n].iter().zip(&want[pos..]).position(|(a, b)| a != b).unwrap_or(0);
            panic!("{what}: byte {} differs (page {})", pos + at, (pos + at) as u64 / PS);
        }
        pos += n;
    }
    assert_eq!(pos, want.len(), "{what}: read {pos} bytes of {}", want.len());
}

/// Every frame is free or caches a file page, once nothing is pinned.
fn check_frames(cache: &PageCache, what: &str) {
    let nr = cache.config().nr_pages();
    let mut last = (0, 0);
    for _ in 0..400 {
        cache.lru_add_drain_all();
        let vm = cache.vmstat();
        last = (vm.get(Item::nr_free_pages), vm.get(Item::nr_file_pages));
        if last.0 + last.1 == nr {
            return;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("{what}: free {} + file {} != {nr} frames", last.0, last.1);
}

// Goal: a sequential read of a host file fills the cache with large
// folios whose order grows with the window (page_cache_ra_order), and
// with `folio_order_max = 0` with single pages only, as before; the bytes
// are the file's either way. Method: a 32 MiB stamped file read in 64 KiB
// reads through a 64 MiB cache at order 9 and at order 0; thp_file_alloc
// counts the large folios, pgreadahead the pages read ahead.
#[test]
fn a_sequential_read_caches_large_folios() {
    let dir = scratch();
    let pages = 8192;
    let path = write_stamped_file(dir.path(), "seq", 7, pages);
    let want = model(7, pages);
    for order in [FOLIO_ORDER_MAX_6, 0] {
        let c = cache(64, order);
        let f = c.open(&path, OpenOptions::default()).unwrap();
        let before = c.vmstat();
        read_checked(&f, &want, 64 << 10, &format!("order {order}"));
        let folios = delta(&c, &before, Item::thp_file_alloc);
        let ra = delta(&c, &before, Item::pgreadahead);
        assert_eq!(f.cached_pages(), pages, "order {order}: the whole file is cached");
        if order == 0 {
            assert_eq!(folios, 0, "order 0 allocates no large folio");
        } else {
            // Most of the file is in folios of hundreds of pages.
            assert!(folios > 0 && ra / folios >= 64, "order {order}: {folios} large folios for {ra} pages");
        }
        // Read again from the cache (the hit path through the folios).
        read_checked(&f, &want, 12345, &format!("order {order}, cached"));
        drop(f);
        c.drop_caches();
        check_frames(&c, &format!("order {order}"));
    }
}

// Goal: the two kernels' ramps differ as they did: 6.16 grows the order
// from the last window's, so a stream's folios reach order 9; 5.18 grows
// it from the marker folio's, which is the small first folio of a window
// that starts unaligned, so a stream's folios stay small. Method: a 16 MiB
// memory file read in 4 KiB reads with 2 MiB windows under each ramp;
// pages per large folio, and the bytes, checked.
#[test]
fn the_order_ramps_as_each_kernel_ramped_it() {
    let mut per_folio = Vec::new();
    for (order, ramp) in [(FOLIO_ORDER_MAX_6, FolioRamp::Linux6), (FOLIO_ORDER_MAX_5_18, FolioRamp::Linux5_18)] {
        let tunables = Tunables { folio_order_max: order, folio_ramp: ramp, ra_pages: 512, ..Tunables::default() };
        let c = cache_with(64, tunables);
        let f = c.open_memory("ramp").unwrap();
        let want = model(19, 4096);
        f.write_at(&want, 0).unwrap();
        f.fsync().unwrap();
        c.drop_caches();
        let before = c.vmstat();
        read_checked(&f, &want, 4096, &format!("{ramp:?}"));
        let folios = delta(&c, &before, Item::thp_file_alloc).max(1);
        per_folio.push(delta(&c, &before, Item::pgreadahead) / folios);
    }
    // Windows start unaligned under both, so their first folios are small
    // (6.16: orders 2, 3, 5, then 9s; 5.18: 2, 3, 4, 4, ...).
    assert!(
        per_folio[0] >= 3 * per_folio[1],
        "pages per large folio: 6.16's ramp {}, 5.18's {}",
        per_folio[0],
        per_folio[1]
    );
}

// Goal: truncation and hole punching through large folios keep every
// byte: whole folios go at once, a folio a hole's edge cuts through is
// split, and what stays reads as before. Method: a 16 MiB file cached in
// large folios; punch holes at unaligned offsets inside folios, truncate
// to an offset inside a folio, grow it back; after each step the whole
// file is read against the model; splits are counted.
#[test]
fn truncate_and_punch_cut_through_large_folios() {
    let c = cache(64, FOLIO_ORDER_MAX_6);
    let (_dir, path, mut want, f) = cached_file(&c, "cut", 11, 4096);
    let before = c.vmstat();
    // DONTNEED of pages inside the last 2 MiB (an order-9 folio by then):
    // only the whole pages of the range go, none before or after it.
    f.fadvise(3684 * PS + 100, 10 * PS, pcache::Advice::DontNeed).unwrap();
    let gone: Vec<u64> = (3584..4096).filter(|&i| f.page_state(i).is_none()).collect();
    assert_eq!(gone, (3685..3694).collect::<Vec<u64>>(), "DONTNEED inside a large folio");
    for (off, len) in [(1_000_000u64, 300_000u64), (5 << 20, 2 << 20), ((8 << 20) + 4096, 4096), (123, 1)] {
        f.punch_hole(off, len).unwrap();
        want[off as usize..(off + len) as usize].fill(0);
        read_checked(&f, &want, 100_000, &format!("after punch_hole({off}, {len})"));
    }
    let cut = (12 << 20) + 12345;
    f.set_len(cut).unwrap();
    want.truncate(cut as usize);
    read_checked(&f, &want, 1 << 20, "after truncate");
    f.set_len(14 << 20).unwrap();
    want.resize(14 << 20, 0);
    read_checked(&f, &want, 1 << 20, "after growing again");
    assert!(delta(&c, &before, Item::thp_split_page) > 0, "no folio was split");
    check_on_disk(&c, f, &path, &want, "truncate and punch");
}

/// A stamped file of `pages` pages, `name` in a scratch directory, open
/// in `c` and read once whole (so cached, in large folios where the
/// cache makes them): the directory (kept for the test's length), the
/// path, the model and the handle.
fn cached_file(c: &PageCache, name: &str, seed: u64, pages: u64) -> (TempDir, PathBuf, Vec<u8>, File) {
    let dir = scratch();
    let path = write_stamped_file(dir.path(), name, seed, pages);
    let want = model(seed, pages);
    let f = c.open(&path, OpenOptions::default()).unwrap();
    read_checked(&f, &want, 1 << 20, "first read");
    (dir, path, want, f)
}

/// The end of a test: `f` synced and closed, the cache dropped, every
/// frame accounted for, and the file read back from the disk.
fn check_on_disk(c: &PageCache, f: File, path: &Path, want: &[u8], what: &str) {
    f.fsync().unwrap();
    drop(f);
    c.drop_caches();
    check_frames(c, what);
    let f = c.open(path, OpenOptions::default()).unwrap();
    read_checked(&f, want, 1 << 20, &format!("{what}: from the disk"));
}

/// 2000 random 20 KiB reads of `f` (a stream from `seed`), each checked.
fn random_reads(f: &File, want: &[u8], seed: u64) {
    let mut x = seed;
    let mut buf = vec![0u8; 20 << 10];
    for _ in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pos = (x >> 20) % (want.len() as u64 - buf.len() as u64);
        f.read_at(&mut buf, pos).unwrap();
        assert!(buf[..] == want[pos as usize..pos as usize + buf.len()], "random read at {pos}");
    }
}

/// The folio holding page `index` of `f`: its order, and whether it is
/// dirty.
fn folio(f: &File, index: u64) -> (u32, bool) {
    let st = f.page_state(index).expect("cached");
    (st.folio_order, st.dirty)
}

/// Pages dirty and under writeback in the whole cache.
fn dirty_and_writeback(c: &PageCache) -> (u64, u64) {
    let vm = c.vmstat();
    (vm.get(Item::nr_dirty), vm.get(Item::nr_writeback))
}

// Goal: buffered writes dirty large folios whole, as 6.x's do: no split,
// the folio's every page dirty, the dirty count in pages; writeback then
// writes each folio whole, once, and leaves it whole and clean; the bytes
// are right in the cache and on the disk. Method: a file cached in large
// folios; a small write inside one folio, then a 3 MiB write across
// several; counts checked after each; fsync; then the file read from the
// disk after drop_caches.
#[test]
fn writes_dirty_large_folios_whole() {
    let c = cache(64, FOLIO_ORDER_MAX_6);
    let (_dir, path, mut want, f) = cached_file(&c, "dirty", 11, 4096);
    let before = c.vmstat();
    let at = (3 << 20) + 777;
    let (order, _) = folio(&f, at / PS);
    assert!(order >= 4, "a stream read 3 MiB in reads folios of order >= 4, not {order}");
    let nr = 1u64 << order;
    f.write_at(b"large folios", at).unwrap();
    want[at as usize..at as usize + 12].copy_from_slice(b"large folios");
    let first = (at / PS) & !(nr - 1);
    for i in first..first + nr {
        assert_eq!(folio(&f, i), (order, true), "page {i}: the folio is dirty whole");
    }
    assert_eq!(dirty_and_writeback(&c), (nr, 0), "the dirty count is the folio's pages");
    read_checked(&f, &want, 1 << 20, "after the small write");
    // A write across folios: the last bytes of one, the middle ones whole,
    // the first bytes of another.
    let (at, len) = ((5 << 20) + 1000, 3 << 20);
    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
    assert_eq!(f.write_at(&data, at).unwrap(), len);
    want[at as usize..at as usize + len].copy_from_slice(&data);
    read_checked(&f, &want, 1 << 20, "after the large write");
    assert_eq!(delta(&c, &before, Item::thp_split_page), 0, "a buffered write splits no folio");
    let mut dirty_pages = 0;
    let mut i = 0;
    while i < want.len() as u64 / PS {
        let (o, d) = folio(&f, i);
        let (lo, hi) = (i * PS, (i + (1 << o)) * PS);
        let written = (lo < (3 << 20) + 789 && hi > (3 << 20) + 777) || (lo < at + len as u64 && hi > at);
        assert_eq!(d, written, "the folio of order {o} at page {i}: dirty exactly when written");
        dirty_pages += if d { 1 << o } else { 0 };
        i += 1 << o;
    }
    assert_eq!(dirty_and_writeback(&c), (dirty_pages, 0));
    f.fsync().unwrap();
    assert_eq!(dirty_and_writeback(&c), (0, 0));
    assert_eq!(delta(&c, &before, Item::pgwriteback), dirty_pages, "each dirty folio written once, whole");
    assert_eq!(delta(&c, &before, Item::thp_split_page), 0, "writeback splits no folio");
    assert_eq!(folio(&f, first), (order, false), "written back, the folio is clean and whole");
    check_on_disk(&c, f, &path, &want, "dirty folios");
}

// Goal: a write pin splits a large folio (pinned pages are single pages
// here), a dirty one into dirty pages, so no written byte is lost to the
// split; a punched hole splits a dirty folio too. The bytes are right in
// the cache and on the disk. Method: a file cached in large folios; a
// write dirties a folio and get_page_mut then pins a page of it; a
// folio written whole is punched in its middle; the whole file is read
// against the model after each, and from the disk after fsync and
// drop_caches.
#[test]
fn pins_and_holes_split_dirty_folios() {
    let c = cache(64, FOLIO_ORDER_MAX_6);
    let (_dir, path, mut want, f) = cached_file(&c, "wr", 13, 4096);
    let before = c.vmstat();
    let at = (3 << 20) + 777;
    let (order, _) = folio(&f, at / PS);
    assert!(order >= 4, "order {order}");
    let nr = 1u64 << order;
    let first = (at / PS) & !(nr - 1);
    f.write_at(b"large folios", at).unwrap();
    want[at as usize..at as usize + 12].copy_from_slice(b"large folios");
    let pinned = first + nr - 1;
    {
        let mut p = f.get_page_mut(pinned).unwrap();
        p.write(100, b"pinned").unwrap();
    }
    want[(pinned * PS) as usize + 100..][..6].copy_from_slice(b"pinned");
    assert_eq!(delta(&c, &before, Item::thp_split_page), 1, "the pin split the dirty folio");
    for i in first..first + nr {
        assert_eq!(folio(&f, i), (0, true), "page {i} of the split dirty folio: a dirty page");
    }
    assert_eq!(dirty_and_writeback(&c), (nr, 0), "the split keeps the dirty count");
    read_checked(&f, &want, 1 << 20, "after get_page_mut");
    // A folio written whole, then punched in its middle.
    let (o, _) = folio(&f, 12 << 8);
    assert!(o >= 2, "order {o} at 12 MiB");
    let span = (PS << o) as usize;
    let data = vec![0x5au8; span];
    f.write_at(&data, 12 << 20).unwrap();
    want[12 << 20..(12 << 20) + span].copy_from_slice(&data);
    let (hole, hole_len) = ((12 << 20) + PS + 10, PS);
    f.punch_hole(hole, hole_len).unwrap();
    want[hole as usize..(hole + hole_len) as usize].fill(0);
    assert_eq!(delta(&c, &before, Item::thp_split_page), 2, "the hole split the dirty folio");
    assert!(folio(&f, (12 << 8) + 3).1, "a page past the hole stays dirty");
    read_checked(&f, &want, 1 << 20, "after the hole");
    f.fsync().unwrap();
    assert_eq!(dirty_and_writeback(&c), (0, 0));
    check_on_disk(&c, f, &path, &want, "pins and holes");
}

// Goal: a shared mapping maps large folios page by page without
// splitting them: the folio's mapcount counts its entries, nr_mapped its
// pages; a write through the mapping dirties the folio whole, writeback
// write-protects every entry of it (page_mkclean per folio) so the next
// write faults and dirties it again; a write pin on a mapped folio unmaps
// and splits it, and the mapping faults the pages back in. Bytes checked
// throughout and on the disk.
#[test]
fn mappings_map_large_folios_whole() {
    let c = cache(64, FOLIO_ORDER_MAX_6);
    let (_dir, path, mut want, f) = cached_file(&c, "map", 23, 4096);
    let before = c.vmstat();
    let (off, len) = (8u64 << 20, 4u64 << 20);
    let m = f.map(off, len, MapFlags::READ | MapFlags::WRITE).unwrap();
    let mut got = vec![0u8; len as usize];
    m.read(0, &mut got).unwrap();
    assert!(got[..] == want[off as usize..(off + len) as usize], "the mapping reads the file's bytes");
    assert_eq!(delta(&c, &before, Item::thp_split_page), 0, "mapping splits no folio");
    let base = off / PS;
    let (order, _) = folio(&f, base + 300);
    assert!(order >= 4, "order {order} at 8 MiB");
    let nr = 1u64 << order;
    let first = (base + 300) & !(nr - 1);
    let st = f.page_state(first + 1).unwrap();
    assert_eq!(st.mapcount as u64, nr, "every page of the folio mapped once: the folio's mapcount");
    assert_eq!(c.vmstat().get(Item::nr_mapped), len / PS, "nr_mapped counts pages");
    // A write through the mapping dirties the whole folio, once.
    let w = (first - base) * PS + 5000;
    m.write(w, b"mapped").unwrap();
    want[(off + w) as usize..][..6].copy_from_slice(b"mapped");
    for i in first..first + nr {
        assert!(folio(&f, i).1, "page {i}: the folio is dirty whole");
    }
    assert_eq!(dirty_and_writeback(&c), (nr, 0));
    f.fsync().unwrap();
    assert_eq!(dirty_and_writeback(&c), (0, 0), "written back whole");
    // Write-protected by writeback: the next write faults, dirtying again.
    let faults = c.vmstat().get(Item::pgmkwrite);
    m.write(w + 6, b"again").unwrap();
    want[(off + w + 6) as usize..][..5].copy_from_slice(b"again");
    assert_eq!(c.vmstat().get(Item::pgmkwrite), faults + 1, "the write after writeback faults");
    assert_eq!(dirty_and_writeback(&c), (nr, 0));
    assert_eq!(delta(&c, &before, Item::thp_split_page), 0);
    // A pin on a mapped folio: unmapped, split; the mapping faults back.
    let pinned = first + 2;
    {
        let mut p = f.get_page_mut(pinned).unwrap();
        p.write(8, b"pin").unwrap();
    }
    want[(pinned * PS + 8) as usize..][..3].copy_from_slice(b"pin");
    assert_eq!(delta(&c, &before, Item::thp_split_page), 1, "the pin split the mapped folio");
    assert_eq!(f.page_state(first + 1).unwrap().mapcount, 0, "unmapped by the split");
    m.read(0, &mut got).unwrap();
    assert!(got[..] == want[off as usize..(off + len) as usize], "the mapping after the split");
    drop(m);
    assert_eq!(c.vmstat().get(Item::nr_mapped), 0, "unmapped");
    check_on_disk(&c, f, &path, &want, "mappings");
}

// Goal: reclaim finds a mapped large folio referenced through any one of
// its entries (page_referenced walks every frame's entry) and keeps it,
// while the unmapped folios around it go. Method: kswapd off; a file read
// into large folios; a mapping of one folio touched through its last page
// only (fault-around maps the pages before it old); then reclaim of every
// page it can take.
#[test]
fn reclaim_sees_a_folio_referenced_through_any_entry() {
    let pages = 2048;
    let c = cache_with(32, Tunables { folio_order_max: FOLIO_ORDER_MAX_6, kswapd: false, ..Tunables::default() });
    let (_dir, _path, want, f) = cached_file(&c, "ref", 31, pages);
    let (order, _) = folio(&f, 1536);
    assert!(order >= 4, "order {order} at 6 MiB");
    let nr = 1u64 << order;
    let first = 1536 & !(nr - 1);
    let m = f.map(first * PS, nr * PS, MapFlags::READ).unwrap();
    let last = m.page(nr - 1).unwrap();
    assert_eq!(last.read_into(0, &mut [0u8; 8]).ok(), Some(()));
    drop(last);
    c.lru_add_drain_all();
    c.reclaim(pages);
    assert!(f.page_state(first / 2).is_none(), "an unmapped folio was reclaimed");
    let st = f.page_state(first).expect("the mapped folio stays");
    assert_eq!(st.folio_order, order, "whole");
    assert!(st.active, "referenced through its last entry: activated ({st:?})");
    let mut got = vec![0u8; (nr * PS) as usize];
    m.read(0, &mut got).unwrap();
    assert!(got[..] == want[(first * PS) as usize..((first + nr) * PS) as usize]);
}

// Goal: reclaim writes dirty large folios back whole and frees them, with
// no byte lost: a file four times the cache, read into folios and
// overwritten through them, twice; read back from the cache and, after
// drop_caches, from the disk. Method: 64 MiB through a 16 MiB cache at
// order 9, dirty limits at 90%: a sequential read, then 1 MiB writes over
// it (each dirtying cached folios, which reclaim must see cleaned to make
// room);
// every byte checked; pages written back and stolen counted. Twice:
// with the flushers writing (the default) and with reclaim writing each
// folio itself (`pageout`, Linux 3.1's writepage from reclaim).
#[test]
fn reclaim_writes_dirty_folios_back_whole() {
    for rw in [ReclaimWriteback::default(), ReclaimWriteback::Writepage31] {
        reclaim_dirty_folios(rw);
    }
}

fn reclaim_dirty_folios(reclaim_writeback: ReclaimWriteback) {
    let dir = scratch();
    let pages = 16384;
    let path = write_stamped_file(dir.path(), "dirtybig", 19, pages);
    let mut want = model(19, pages);
    let tunables = Tunables { folio_order_max: FOLIO_ORDER_MAX_6, reclaim_writeback, ..Tunables::default() };
    let c = cache_with(16, tunables);
    // Dirty limits high, so reclaim meets dirty folios, not only the
    // flushers.
    c.sysctl_write("dirty_ratio", "90").unwrap();
    c.sysctl_write("dirty_background_ratio", "80").unwrap();
    let f = c.open(&path, OpenOptions::default()).unwrap();
    let before = c.vmstat();
    let mut dirty_folios = 0;
    for pass in 0..2u8 {
        let mut pos = 0;
        let mut buf = vec![0u8; 1 << 20];
        while pos < want.len() {
            // Read the MiB into folios, then overwrite it through them.
            let n = f.read_at(&mut buf, pos as u64).unwrap();
            assert!(buf[..n] == want[pos..pos + n], "pass {pass}: the MiB at {pos}");
            for (k, b) in buf.iter_mut().enumerate() {
                *b = b.wrapping_add(pass + 1).wrapping_mul(((k % 7) + 1) as u8);
            }
            f.write_at(&buf, pos as u64).unwrap();
            want[pos..pos + n].copy_from_slice(&buf[..n]);
            // Reclaim may have taken it already; if not, it is dirty.
            if let Some(st) = f.page_state(pos as u64 / PS + 128) {
                dirty_folios += (st.folio_order > 0 && st.dirty) as u32;
            }
            pos += n;
        }
        read_checked(&f, &want, 256 << 10, &format!("pass {pass}"));
    }
    assert!(dirty_folios > 64, "{dirty_folios} of 128 MiB written were seen in dirty large folios");
    let stolen = delta(&c, &before, Item::pgsteal_kswapd) + delta(&c, &before, Item::pgsteal_direct);
    assert!(stolen > 2 * pages, "{stolen} pages stolen for two passes over a file 4x the cache");
    assert!(delta(&c, &before, Item::pgwriteback) >= 2 * pages - 4096, "the written pages were written back");
    assert!(delta(&c, &before, Item::thp_file_alloc) > 0);
    if reclaim_writeback == ReclaimWriteback::Writepage31 {
        assert!(delta(&c, &before, Item::nr_vmscan_write) > 0, "reclaim wrote folios itself");
    }
    check_on_disk(&c, f, &path, &want, "dirty reclaim");
}

// Goal: reclaim evicts large folios whole and the bytes survive: a file
// four times the cache read twice, every byte checked, with pages stolen
// and the frames all accounted for after. Method: a 64 MiB file through a
// 16 MiB cache at order 9, two sequential passes and one of random
// 20 KiB reads; pgsteal counts pages (a folio counts its size).
#[test]
fn reclaim_evicts_large_folios_whole() {
    let dir = scratch();
    let pages = 16384;
    let path = write_stamped_file(dir.path(), "big", 17, pages);
    let want = model(17, pages);
    let c = cache(16, FOLIO_ORDER_MAX_6);
    let f = c.open(&path, OpenOptions::default()).unwrap();
    let before = c.vmstat();
    for pass in 0..2 {
        read_checked(&f, &want, 256 << 10, &format!("pass {pass}"));
    }
    random_reads(&f, &want, 12345);
    let stolen = delta(&c, &before, Item::pgsteal_kswapd) + delta(&c, &before, Item::pgsteal_direct);
    assert!(stolen > 2 * pages, "{stolen} pages stolen for two passes over a file 4x the cache");
    assert!(delta(&c, &before, Item::thp_file_alloc) > 0);
    drop(f);
    c.drop_caches();
    check_frames(&c, "reclaim");
}

/// File pages on the multi-gen LRU's generations.
fn gen_file_pages(c: &PageCache) -> u64 {
    c.lru_gen_stats().generations.iter().map(|g| g.nr_pages[1]).sum()
}

// Goal: the multi-gen LRU ages, sorts and evicts large folios whole and
// counts them in pages: its generations hold exactly the file's cached
// pages through reads into folios, writes dirtying them, splits by holes
// (the tails join the head's generation), and reclaim of a file four
// times the cache; every byte is right, in the cache and on the disk.
// Method: a 16 MiB cache at order 9 with `LruPolicy::MultiGen`; the
// generations' page counts are compared with nr_file_pages after each
// step (nothing is pinned or queued, and with kswapd off no reclaimer
// holds pages isolated then).
#[test]
fn the_multigen_lru_keeps_large_folios() {
    let dir = scratch();
    let pages = 16384;
    let path = write_stamped_file(dir.path(), "mglru", 37, pages);
    let mut want = model(37, pages);
    let tunables = Tunables {
        folio_order_max: FOLIO_ORDER_MAX_6,
        lru: pcache::LruPolicy::MultiGen,
        kswapd: false,
        ..Tunables::default()
    };
    let c = cache_with(16, tunables);
    let on_gens = |what: &str| {
        c.lru_add_drain_all();
        let file = c.vmstat().get(Item::nr_file_pages);
        assert_eq!(gen_file_pages(&c), file, "{what}: the generations count the cached pages");
    };
    let f = c.open(&path, OpenOptions::default()).unwrap();
    let before = c.vmstat();
    read_checked(&f, &want, 1 << 20, "pass 0");
    on_gens("after a pass");
    // Folios read again into the cache (a stream from 8 MiB: the order
    // ramps), one in its last MiB then written and punched.
    let mut buf = vec![0u8; 1 << 20];
    for k in 0..4u64 {
        f.read_at(&mut buf, (8 << 20) + (k << 20)).unwrap();
    }
    let at = 11u64 << 20;
    let (o, _) = folio(&f, at / PS + 100);
    assert!(o >= 2, "order {o}");
    f.write_at(b"multi-gen", at + 4000).unwrap();
    want[at as usize + 4000..][..9].copy_from_slice(b"multi-gen");
    let splits = delta(&c, &before, Item::thp_split_page);
    f.punch_hole(at + 2 * PS, PS).unwrap();
    want[(at + 2 * PS) as usize..][..PS as usize].fill(0);
    assert!(delta(&c, &before, Item::thp_split_page) > splits, "the hole split a folio");
    on_gens("after the split");
    read_checked(&f, &want, 256 << 10, "pass 1");
    random_reads(&f, &want, 99);
    on_gens("after random reads");
    let stolen = delta(&c, &before, Item::pgsteal_kswapd) + delta(&c, &before, Item::pgsteal_direct);
    assert!(stolen > pages, "{stolen} pages stolen");
    assert!(delta(&c, &before, Item::thp_file_alloc) > 0);
    check_on_disk(&c, f, &path, &want, "multi-gen");
}

// Goal: MADV_COLD deactivates a large folio only this mapping maps (all
// of its entries are here) and leaves one another mapping shares, and
// clears the young bytes of every entry in the range either way.
// Method: a file cached in large folios, a folio activated by two reads
// (through two handles);
// one mapping touched whole, MADV_COLD over it; then the folio activated
// again, a second mapping touching one page of it, MADV_COLD over the
// first.
#[test]
fn madvise_cold_deactivates_an_exclusive_folio() {
    let c = cache(64, FOLIO_ORDER_MAX_6);
    let (_dir, path, want, f) = cached_file(&c, "cold", 41, 4096);
    let (off, len) = (8u64 << 20, 4u64 << 20);
    let base = off / PS;
    let (order, _) = folio(&f, base + 300);
    assert!(order >= 4, "order {order}");
    let first = (base + 300) & !((1 << order) - 1);
    let activate = || {
        // Two handles: one handle's second read inside the folio its last
        // read ended in does not mark it (6.x's rule).
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            let h = c.open(&path, OpenOptions::default()).unwrap();
            h.read_at(&mut buf, first * PS).unwrap();
        }
        c.lru_add_drain_all();
        assert!(f.page_state(first).unwrap().active, "activated by two reads");
    };
    activate();
    let m = f.map(off, len, MapFlags::READ).unwrap();
    let mut got = vec![0u8; len as usize];
    m.read(0, &mut got).unwrap();
    assert!(got[..] == want[off as usize..(off + len) as usize]);
    m.madvise(0, len, pcache::Madvise::Cold).unwrap();
    c.lru_add_drain_all();
    let st = f.page_state(first).unwrap();
    assert!(!st.active && !st.referenced, "this mapping's alone: deactivated ({st:?})");
    assert_eq!(st.folio_order, order, "whole");
    activate();
    let other = f.map(first * PS, PS, MapFlags::READ).unwrap();
    drop(other.page(0).unwrap());
    m.read(0, &mut got).unwrap();
    m.madvise(0, len, pcache::Madvise::Cold).unwrap();
    c.lru_add_drain_all();
    assert!(f.page_state(first).unwrap().active, "shared with another mapping: left active");
    drop(other);
    drop(m);
}

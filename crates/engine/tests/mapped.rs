//! Mapped pages (the Harji/Piggin thread and the Linux 3.2 series): faults, the young bits, reclaim's
//! page_check_references and try_to_unmap, write faults and writeback of
//! dirty mapped pages, unmapping racing access.

mod common;

use common::{delta, host_file};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use pcache::{
    Config, Error, File, Item, LruList, LruPolicy, Madvise, MapFlags, MappedActivation, Mapping, PageCache,
    ReclaimWriteback, Tunables, VmStat,
};

const PS: u64 = 4096;

/// kswapd off, no readahead: each fault maps exactly one page and reclaim
/// runs only when the test calls it.
fn quiet(mapped_activation: MappedActivation) -> Tunables {
    Tunables { mapped_activation, kswapd: false, ra_pages: 0, ..Tunables::default() }
}

fn cache_with(t: Tunables, pages: u64) -> PageCache {
    // One set of per-CPU batches, so list states do not depend on which CPU
    // the test thread ran on.
    PageCache::new(Config { memory_bytes: pages * PS, nr_cpus: 1, tunables: t, ..Config::default() }).unwrap()
}

/// A memory file of `pages` pages, page i filled with the byte i + 1.
fn filled(cache: &PageCache, name: &str, pages: u64) -> File {
    let f = cache.open_memory(name).unwrap();
    for i in 0..pages {
        f.write_at(&[(i + 1) as u8; PS as usize], i * PS).unwrap();
    }
    f.fsync().unwrap();
    f
}

/// Touch page `i` of `m` (an access: the young bit) and check its bytes.
fn touch(m: &Mapping, i: u64) {
    let p = m.page(i).unwrap();
    let mut b = [0u8; 1];
    p.read_into(0, &mut b).unwrap();
    assert_eq!(b[0], (i + 1) as u8, "page {i} holds its bytes");
}

fn flags(f: &File, i: u64) -> Option<(Option<LruList>, bool, bool)> {
    f.page_state(i).map(|s| (s.lru, s.active, s.referenced))
}

/// Drop the file's pages from the cache and start its one page of
/// interest afresh: `pages` pages are cached but only page 0 will be
/// mapped; the others are dropped so that reclaim scans page 0 alone.
fn only_page0(cache: &PageCache, f: &File) {
    cache.drop_caches();
    assert_eq!(f.cached_pages(), 0);
}

// Goal: page_check_references as 2.6.34+ does it, step by step, for one
// mapped page referenced through one mapping: the fault's reference earns
// PG_referenced and another trip round the inactive list (KEEP); a second
// page table reference then activates it; and a page whose only history is
// that first reference is reclaimed on the trip after (RECLAIM_CLEAN),
// unmapped first.
// Method: a cache holding only the page of interest, kswapd off; each
// `reclaim(1)` scans the inactive list once at priority 0.
#[test]
fn used_once_keep_then_activate_or_reclaim() {
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 256);
    let f = filled(&cache, "f", 4);
    only_page0(&cache, &f);
    let m = f.map(0, 4 * PS, MapFlags::READ).unwrap();

    // The fault: mapped, young, PG_referenced clear (mapped faults do not
    // mark_page_accessed), on the inactive list.
    let before = cache.vmstat();
    touch(&m, 0);
    assert_eq!(delta(&cache, &before, Item::pgfault), 1);
    assert_eq!(delta(&cache, &before, Item::pgmajfault), 1);
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 1);
    // A second access is a hit: no fault.
    touch(&m, 0);
    assert_eq!(delta(&cache, &before, Item::pgfault), 1, "a present entry does not fault");
    cache.lru_add_drain_all();
    assert_eq!(flags(&f, 0), Some((Some(LruList::InactiveFile), false, false)));

    // Scan 1: referenced_ptes = 1, PG_referenced clear -> KEEP.
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 0);
    assert_eq!(flags(&f, 0), Some((Some(LruList::InactiveFile), false, true)), "kept, PG_referenced set");
    assert_eq!(delta(&cache, &before, Item::mapped_referenced), 1);
    assert_eq!(delta(&cache, &before, Item::mapped_kept), 1);
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 1, "still mapped");

    // Scan 2 after another access: referenced again -> ACTIVATE.
    touch(&m, 0);
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 0);
    assert_eq!(flags(&f, 0), Some((Some(LruList::ActiveFile), true, true)), "activated, PG_referenced set");
    assert_eq!(delta(&cache, &before, Item::mapped_activated), 1);
    assert_eq!(delta(&cache, &before, Item::pgactivate), 1);

    // Page 1: one reference only, then no more: KEEP, then reclaimed.
    touch(&m, 1);
    cache.lru_add_drain_all();
    assert_eq!(cache.reclaim(1), 0, "kept on its first scan");
    assert_eq!(flags(&f, 1), Some((Some(LruList::InactiveFile), false, true)));
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 1, "unreferenced since: unmapped and reclaimed");
    assert_eq!(f.page_state(1), None);
    assert_eq!(delta(&cache, &before, Item::pgunmap), 1);
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 1, "page 0 alone is mapped");
    // The next access faults it back in, with the right bytes.
    let before = cache.vmstat();
    touch(&m, 1);
    assert_eq!(delta(&cache, &before, Item::pgmajfault), 1);
}

// Goal: a page referenced through two mappings at once is activated on
// its first scan (referenced_ptes > 1); an exec mapping's page on its
// first reference (VM_EXEC); an unreferenced mapped page is reclaimed
// outright.
// Method: as above; MADV_COLD clears the young bit for the last case.
#[test]
fn shared_and_exec_activate_unreferenced_reclaimed() {
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 256);
    let f = filled(&cache, "f", 4);
    only_page0(&cache, &f);
    let a = f.map(0, 4 * PS, MapFlags::READ).unwrap();
    let b = f.map(0, 4 * PS, MapFlags::READ).unwrap();
    touch(&a, 0);
    touch(&b, 0);
    cache.lru_add_drain_all();
    let st = f.page_state(0).unwrap();
    assert_eq!((st.mapcount, st.refcount), (2, 3), "two entries, each with a reference, and the cache's");
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 0);
    assert_eq!(flags(&f, 0), Some((Some(LruList::ActiveFile), true, true)), "two mappings: activated");
    assert_eq!(delta(&cache, &before, Item::mapped_activated), 1);
    drop((a, b));
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 0, "munmap drops the mapcount");
    let st = f.page_state(0).unwrap();
    assert_eq!((st.mapcount, st.refcount), (0, 1));

    let g = filled(&cache, "exec", 2);
    only_page0(&cache, &g);
    let x = g.map(0, 2 * PS, MapFlags::READ | MapFlags::EXEC).unwrap();
    touch(&x, 0);
    cache.lru_add_drain_all();
    assert_eq!(cache.reclaim(1), 0);
    assert_eq!(flags(&g, 0), Some((Some(LruList::ActiveFile), true, true)), "exec: activated on first use");

    // Unreferenced: the young bit cleared by MADV_COLD, PG_referenced clear.
    let h = filled(&cache, "cold", 2);
    cache.drop_caches();
    let c = h.map(0, 2 * PS, MapFlags::READ).unwrap();
    touch(&c, 0);
    c.madvise(0, PS, Madvise::Cold).unwrap();
    cache.lru_add_drain_all();
    // The exec page, referenced again, stays on the active list while
    // reclaim empties the inactive one.
    touch(&x, 0);
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 1);
    assert_eq!(h.page_state(0), None, "unreferenced: reclaimed at once");
    assert_eq!(delta(&cache, &before, Item::mapped_referenced), 0);
    assert_eq!(g.page_state(0).map(|s| s.active), Some(true), "the exec page stays");
}

// Goal: the 2.6.33 preset activates any referenced mapped page on its
// first scan (the instantiating fault's reference is enough), and even an
// unmapped page with PG_referenced of a file mapped elsewhere
// (page_mapping_inuse).
#[test]
fn linux_2_6_33_activates_on_first_reference() {
    let cache = cache_with(quiet(MappedActivation::Linux2_6_33), 256);
    let f = filled(&cache, "f", 4);
    only_page0(&cache, &f);
    let m = f.map(0, PS, MapFlags::READ).unwrap();
    touch(&m, 0);
    cache.lru_add_drain_all();
    let before = cache.vmstat();
    assert_eq!(cache.reclaim(1), 0);
    assert_eq!(flags(&f, 0).map(|s| (s.0, s.1)), Some((Some(LruList::ActiveFile), true)), "one fault: active");
    assert_eq!(delta(&cache, &before, Item::mapped_activated), 1);

    // Page 2 lies outside the mapping, but the file is mapped: a read
    // (PG_referenced) is enough to activate it.
    let mut buf = [0u8; 4096];
    f.read_at(&mut buf, 2 * PS).unwrap();
    cache.lru_add_drain_all();
    assert_eq!(flags(&f, 2), Some((Some(LruList::InactiveFile), false, true)));
    // Page 0 now sits on the active list alone: deactivating it first
    // would not change page 2's verdict.
    cache.reclaim(1);
    assert_eq!(f.page_state(2).map(|s| s.active), Some(true), "page_mapping_inuse: activated");
}

// Goal: shrink_active_list keeps a referenced exec-mapped page on the
// active list and deactivates a referenced page of an ordinary mapping.
// Method: both pages active, both referenced since, the inactive list
// empty so that reclaim scans the active list.
#[test]
fn active_list_rotates_referenced_exec_pages() {
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 256);
    let code = filled(&cache, "code", 1);
    let data = filled(&cache, "data", 1);
    cache.drop_caches();
    let x = code.map(0, PS, MapFlags::READ | MapFlags::EXEC).unwrap();
    let d = data.map(0, PS, MapFlags::READ).unwrap();
    touch(&x, 0);
    touch(&d, 0);
    cache.lru_add_drain_all();
    cache.reclaim(2); // exec: activated; data: kept
    touch(&d, 0);
    touch(&x, 0);
    cache.reclaim(2); // data: activated; exec: rotated on the active list
    assert_eq!(code.page_state(0).map(|s| s.active), Some(true));
    assert_eq!(data.page_state(0).map(|s| s.active), Some(true));
    touch(&x, 0);
    touch(&d, 0);
    let before = cache.vmstat();
    cache.reclaim(2);
    assert_eq!(delta(&cache, &before, Item::exec_rotated), 1);
    assert_eq!(code.page_state(0).map(|s| s.active), Some(true), "exec: another trip on the active list");
    assert_ne!(data.page_state(0).map(|s| s.active), Some(true), "data: deactivated");
}

fn on_disk(path: &std::path::Path, page: u64, offset: usize, len: usize) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let at = (page * PS) as usize + offset;
    bytes[at..at + len].to_vec()
}

// Goal: the first write to a clean page is a write fault (page_mkwrite:
// dirty, reserved, the entry writable); later writes are not; fsync writes
// the page and write-protects its entry (page_mkclean), so the next write
// faults again; the bytes reach the host file; a read-only mapping refuses
// writes; mapped writes never grow the file.
#[test]
fn write_faults_and_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 256);
    let (f, path) = host_file(&cache, &dir, 4);
    let m = f.map(0, 4 * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    let before = cache.vmstat();
    {
        let mut p = m.page(1).unwrap();
        p.write(8, b"mapped!!").unwrap();
        assert_eq!(p.load_u64(8).unwrap(), u64::from_ne_bytes(*b"mapped!!"));
        p.write(16, b"again").unwrap();
    }
    let d = cache.vmstat().delta(&before);
    assert_eq!(d.get(Item::pgmkwrite), 1, "one write fault for two writes");
    assert!(f.page_state(1).unwrap().dirty);
    assert_eq!(cache.vmstat().get(Item::nr_dirty), 1);
    // Coherent with read_at: the same page.
    let mut buf = [0u8; 13];
    f.read_at(&mut buf, PS + 8).unwrap();
    assert_eq!(&buf, b"mapped!!again");

    f.fsync().unwrap();
    assert!(!f.page_state(1).unwrap().dirty);
    assert_eq!(on_disk(&path, 1, 8, 13), b"mapped!!again");
    assert_eq!(on_disk(&path, 1, 0, 8), vec![2u8; 8], "the rest of the page is intact");

    // Write-protected by writeback: the next write faults again.
    let before = cache.vmstat();
    m.write(PS + 8, b"MAPPED").unwrap();
    assert_eq!(cache.vmstat().delta(&before).get(Item::pgmkwrite), 1);
    m.msync(0, 4 * PS).unwrap();
    assert_eq!(on_disk(&path, 1, 8, 6), b"MAPPED");

    // No growth through a mapping; no writes through a read-only one.
    f.set_len(3 * PS + 100).unwrap();
    assert!(matches!(m.write(3 * PS + 96, b"12345678"), Err(Error::PastEof { .. })));
    assert!(matches!(m.page(3).unwrap().write(0, b"x"), Ok(())));
    let ro = f.map(0, PS, MapFlags::READ).unwrap();
    assert!(matches!(ro.page(0).unwrap().write(0, b"x"), Err(Error::ReadOnlyMapping { .. })));
    assert!(matches!(ro.page(1), Err(Error::InvalidArgument(_))), "past the mapping");
    drop(m);
    f.fsync().unwrap();
    assert_eq!(on_disk(&path, 3, 0, 1), b"x");
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 1, "the read-only mapping's page");
}

// Goal: dirty mapped pages reach the disk through the flushers
// (dirty_expire_centisecs) with the mapping still in place, and through
// munmap + the flushers.
// Method: a 50 ms expiry and period; poll the host file (bounded wait).
#[test]
fn dirty_mapped_pages_reach_disk_by_the_flusher() {
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_with(
        Tunables { dirty_expire_centisecs: 5, dirty_writeback_centisecs: 5, ..quiet(MappedActivation::UsedOnce) },
        256,
    );
    let (f, path) = host_file(&cache, &dir, 8);
    let m = f.map(0, 8 * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    for i in 0..8 {
        m.write(i * PS, format!("page {i}").as_bytes()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while (0..8).any(|i| on_disk(&path, i, 0, 6) != format!("page {i}").as_bytes()[..6]) {
        assert!(Instant::now() < deadline, "the flusher never wrote the mapped pages");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!((0..8).all(|i| !f.page_state(i).unwrap().dirty));
    // Written again after writeback: the write faults and the flusher
    // writes it again after munmap.
    m.write(3 * PS, b"later").unwrap();
    drop(m);
    while on_disk(&path, 3, 0, 5) != b"later" {
        assert!(Instant::now() < deadline, "the flusher never wrote the unmapped page");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Goal: dirty mapped pages reach the disk through reclaim: under memory
// pressure, with the flushers asleep (an hour's expiry, dirty limits at
// 90%) and 3.1's reclaim writeback, kswapd (or a direct reclaimer, when
// kswapd falls behind) unmaps the pages, writes them itself (pageout) and
// frees them; every byte is on disk.
#[test]
fn dirty_mapped_pages_reach_disk_through_kswapd() {
    let dir = tempfile::tempdir().unwrap();
    let pages = 256;
    let cache = cache_with(
        Tunables {
            kswapd: true,
            reclaim_writeback: ReclaimWriteback::Writepage31,
            dirty_ratio: 90,
            dirty_background_ratio: 90,
            dirty_expire_centisecs: 360_000,
            dirty_writeback_centisecs: 360_000,
            ..quiet(MappedActivation::UsedOnce)
        },
        pages,
    );
    let (f, path) = host_file(&cache, &dir, 64);
    let m = f.map(0, 64 * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    for i in 0..64 {
        m.write(i * PS + 100, format!("dirty {i:02}").as_bytes()).unwrap();
    }
    // Pressure: stream a memory file four times the cache through read_at.
    let s = cache.open_memory("stream").unwrap();
    s.set_len(4 * pages * PS).unwrap();
    let mut buf = vec![0u8; PS as usize];
    let before = cache.vmstat();
    for round in 0..8 {
        for i in 0..4 * pages {
            s.read_at(&mut buf, i * PS).unwrap();
        }
        if (0..64).all(|i| f.page_state(i).is_none_or(|st| !st.dirty)) && round > 0 {
            break;
        }
    }
    let d = cache.vmstat().delta(&before);
    // kswapd, or under 3.1 a direct reclaimer when kswapd falls behind
    // (the machine's load decides which gets there first).
    let wrote = d.get(Item::nr_vmscan_write_kswapd) + d.get(Item::nr_vmscan_write_direct);
    assert!(wrote > 0, "reclaim wrote pages");
    assert!(d.get(Item::pgunmap) > 0, "kswapd unmapped mapped pages");
    for i in 0..64 {
        let st = f.page_state(i);
        if st.is_none_or(|st| !st.dirty) {
            assert_eq!(on_disk(&path, i, 100, 8), format!("dirty {i:02}").as_bytes(), "page {i}");
        }
    }
    // Whatever is still cached, the mapping reads back what was written.
    for i in 0..64 {
        let mut b = [0u8; 8];
        m.read(i * PS + 100, &mut b).unwrap();
        assert_eq!(&b, format!("dirty {i:02}").as_bytes());
    }
}

/// A working set read twice through read_at (active), then a use-once
/// stream through a mapping four times the cache, each page touched once.
/// Returns how many working-set pages are still cached, and the counters.
fn stream_through_mapping(mode: MappedActivation, write: bool) -> (u64, VmStat) {
    let pages = 1024;
    let cache = cache_with(quiet(mode), pages);
    let ws = filled(&cache, "ws", 0);
    ws.set_len(256 * PS).unwrap();
    let mut buf = vec![0u8; PS as usize];
    for _ in 0..2 {
        for i in 0..256 {
            ws.read_at(&mut buf, i * PS).unwrap();
        }
    }
    cache.lru_add_drain_all();
    let stream = cache.open_memory("stream").unwrap();
    stream.set_len(4 * pages * PS).unwrap();
    let m = stream.map(0, 4 * pages * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    let before = cache.vmstat();
    for i in 0..4 * pages {
        let mut p = m.page(i).unwrap();
        if write {
            p.write(0, &i.to_ne_bytes()).unwrap();
        } else {
            assert_eq!(p.load_u64(0).unwrap(), 0);
        }
    }
    let d = cache.vmstat().delta(&before);
    ((0..256).filter(|&i| ws.page_state(i).is_some()).count() as u64, d)
}

// Goal (the point of "vmscan: detect mapped file pages used only once"): a
// stream through a large mapping, each page used once, does not flush a
// re-used working set from the active list; under the 2.6.33 rule, which
// activates every page the instantiating fault referenced, it does.
// Method: 256 active working-set pages in a 1024-page cache, then 4096
// pages streamed through a mapping; count the working set left.
#[test]
fn use_once_stream_spares_the_working_set() {
    let (kept_new, d_new) = stream_through_mapping(MappedActivation::UsedOnce, false);
    let (kept_old, d_old) = stream_through_mapping(MappedActivation::Linux2_6_33, false);
    eprintln!(
        "working set kept: used-once {kept_new}/256 (activated {}, kept {}), 2.6.33 {kept_old}/256 (activated {})",
        d_new.get(Item::mapped_activated),
        d_new.get(Item::mapped_kept),
        d_old.get(Item::mapped_activated)
    );
    assert!(kept_new >= 250, "used-once: the working set stays ({kept_new}/256)");
    assert!(kept_old <= 128, "2.6.33: the stream flushes the working set ({kept_old}/256)");
    assert_eq!(d_new.get(Item::mapped_activated), 0, "no stream page is activated");
    assert!(d_new.get(Item::mapped_kept) > 0);
    assert!(d_old.get(Item::mapped_activated) > 1000);
}

// Goal: the same for a streaming write through a large mapping (the Linux 3.2 reclaim-writeback series'
// mmap-strm): every stream page is written once (a write fault, then the
// flushers and reclaim clean and free it). Used-once detection keeps the
// working set; 2.6.33 activates the written pages and flushes it.
#[test]
fn use_once_streaming_write_spares_the_working_set() {
    let (kept_new, d_new) = stream_through_mapping(MappedActivation::UsedOnce, true);
    let (kept_old, d_old) = stream_through_mapping(MappedActivation::Linux2_6_33, true);
    eprintln!(
        "streaming write, working set kept: used-once {kept_new}/256 (kept {}), 2.6.33 {kept_old}/256 (activated {})",
        d_new.get(Item::mapped_kept),
        d_old.get(Item::mapped_activated)
    );
    assert!(d_new.get(Item::pgmkwrite) >= 4096, "every stream page took a write fault");
    assert!(kept_new >= 250, "used-once: the working set stays ({kept_new}/256)");
    assert!(kept_old <= 128, "2.6.33: the stream flushes the working set ({kept_old}/256)");
}

// Goal: exec mappings are kept under pressure: code pages used once per
// round stay cached while a hot file keeps the active list under
// pressure (so shrink_active_list runs) and a stream passes through the
// inactive list; reclaim rotates referenced code pages on the active list
// (exec_rotated) rather than deactivating them. (Pages of an ordinary
// mapping used as often also survive here, through PG_referenced and a
// second reference on the inactive list: this checks the exec path, it
// does not show it is needed at this pressure.)
// Method: a 512-page cache; each round touches the 64 code pages through
// an exec mapping, reads a 320-page hot file and streams 64 new pages.
#[test]
fn exec_mappings_kept_under_pressure() {
    let pages = 512;
    let cache = cache_with(quiet(MappedActivation::UsedOnce), pages);
    let code = filled(&cache, "code", 64);
    let hot = filled(&cache, "hot", 320);
    cache.drop_caches();
    let x = code.map(0, 64 * PS, MapFlags::READ | MapFlags::EXEC).unwrap();
    let s = cache.open_memory("stream").unwrap();
    s.set_len(64 * 64 * PS).unwrap();
    let mut buf = vec![0u8; PS as usize];
    let mut faults_late = 0;
    for round in 0..64 {
        let before = cache.vmstat();
        for i in 0..64 {
            touch(&x, i);
        }
        if round >= 8 {
            faults_late += cache.vmstat().delta(&before).get(Item::pgmajfault);
        }
        for i in 0..320 {
            hot.read_at(&mut buf, i * PS).unwrap();
        }
        for i in 0..64 {
            s.read_at(&mut buf, (round * 64 + i) * PS).unwrap();
        }
    }
    let vm = cache.vmstat();
    let code_cached = (0..64).filter(|&i| code.page_state(i).is_some()).count();
    assert!(vm.get(Item::exec_rotated) > 0, "shrink_active_list met referenced code pages");
    assert_eq!(code_cached, 64, "every code page stays");
    assert_eq!(faults_late, 0, "code pages are not evicted once established");
}

// Goal: unmapping racing access never crashes and never shows wrong bytes:
// readers access pages of a shared mapping while kswapd and explicit
// reclaim unmap and evict them, a thread unmaps ranges with
// MADV_DONTNEED, another truncates the file's second half away and
// rewrites it, and another rewrites whole pages through a writable
// mapping. A reader sees each page as its bytes (i + 1) or, in the
// truncated half, zeroes (re-extended, not yet rewritten) or PastEof;
// never a mix, never another page's bytes; a third reader does the same
// through `Mapping::load_u64_many`, 16 words a call.
// Method: a 96-page cache under a 200-page file, two reader threads doing
// a fixed number of accesses each, the other threads running until then.
#[test]
fn unmap_racing_access() {
    unmap_racing(0, 96, 200, 4);
}

// Goal: the same with large folios mapped page by page, which reclaim
// unmaps and evicts whole, truncation removes or splits, and a thread of
// write pins (rewriting whole pages with their own bytes) unmaps and
// splits; a streaming reader brings the file back in as folios.
// Method: folios up to order 9 (capped at 1/32 of the cache), a 512-page
// cache under an 800-page file, readahead windows of 16 pages.
#[test]
fn unmap_racing_access_large_folios() {
    let vm = unmap_racing(9, 512, 800, 16);
    let (folios, splits) = (vm.get(Item::thp_file_alloc), vm.get(Item::thp_split_page));
    assert!(folios > 10 && splits > 0, "{folios} large folios read, {splits} split");
}

fn unmap_racing(folio_order_max: u32, cache_pages: u64, pages: u64, ra_pages: u32) -> VmStat {
    let (big, half) = (pages, pages / 2);
    let cache = PageCache::new(Config {
        memory_bytes: cache_pages * PS,
        tunables: Tunables { ra_pages, folio_order_max, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let f = Arc::new(filled(&cache, "race", big));
    let m = Arc::new(f.map(0, big * PS, MapFlags::READ).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let mut others = Vec::new();
    {
        let (cache, stop) = (cache.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                cache.reclaim(16);
            }
        }));
    }
    {
        let (m, stop) = (m.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(7);
            while !stop.load(Ordering::Relaxed) {
                let first = rng.gen_range(0..big - 8);
                m.madvise(first * PS, rng.gen_range(1..8) * PS, Madvise::DontNeed).unwrap();
            }
        }));
    }
    {
        let (f, stop) = (f.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                f.set_len(half * PS).unwrap();
                f.set_len(big * PS).unwrap();
                for i in half..big {
                    f.write_at(&[(i + 1) as u8; PS as usize], i * PS).unwrap();
                }
            }
        }));
    }
    {
        // A writer through a second, writable mapping: whole pages of
        // their own bytes (one write section each), through write faults
        // the flusher's writeback keeps re-arming.
        let (f, stop) = (f.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let w = f.map(0, big * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
            let mut rng = StdRng::seed_from_u64(9);
            while !stop.load(Ordering::Relaxed) {
                let i = rng.gen_range(0..big);
                match w.write(i * PS, &[(i + 1) as u8; PS as usize]) {
                    Ok(()) => {}
                    Err(Error::PastEof { .. }) => assert!(i >= half),
                    Err(e) => panic!("mapped write of page {i}: {e}"),
                }
            }
        }));
    }
    if folio_order_max > 0 {
        // A streaming reader (readahead reads folios) and write pins
        // rewriting pages with their own bytes (each splits a folio).
        let (f, stop) = (f.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(11);
            let mut buf = vec![0u8; 64 << 10];
            while !stop.load(Ordering::Relaxed) {
                let start = rng.gen_range(0..half / 2) * PS;
                for k in 0..8 {
                    let _ = f.read_at(&mut buf, start + k * (64 << 10));
                }
                let i = rng.gen_range(0..half);
                let mut p = f.get_page_mut(i).unwrap();
                p.write(0, &[(i + 1) as u8; PS as usize]).unwrap();
            }
        }));
    }
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut buf = [0u8; 256];
                let (mut seen, mut past_eof) = (0u64, 0u64);
                for _ in 0..20_000 {
                    let i = rng.gen_range(0..big);
                    let off = rng.gen_range(0..(PS as usize - buf.len()) / 8) * 8;
                    match m.page(i) {
                        Ok(p) => {
                            p.read_into(off, &mut buf).unwrap();
                            let v = buf[0];
                            assert!(buf.iter().all(|&b| b == v), "page {i}: a torn page");
                            let ok = v == (i + 1) as u8 || (i >= half && v == 0);
                            assert!(ok, "page {i} shows {v}");
                            seen += 1;
                        }
                        Err(Error::PastEof { .. }) => {
                            assert!(i >= half, "page {i} below the truncation point is past EOF");
                            past_eof += 1;
                        }
                        Err(e) => panic!("page {i}: {e}"),
                    }
                }
                (seen, past_eof)
            })
        })
        .collect();
    // A third reader loads words of 16 random pages per call with
    // `Mapping::load_u64_many` (the batched access): each word is its
    // page's bytes, or zeroes in the truncated half; a batch may stop at a
    // page past EOF.
    let batched = {
        let m = m.clone();
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(3);
            let mut out = [0u64; 16];
            let mut seen = 0u64;
            for _ in 0..1_500 {
                let pos: Vec<u64> =
                    (0..16).map(|_| rng.gen_range(0..big) * PS + rng.gen_range(0..PS / 8) * 8).collect();
                match m.load_u64_many(&pos, &mut out) {
                    Ok(()) => {
                        for (&p, &w) in pos.iter().zip(&out) {
                            let i = p / PS;
                            let ok = w == u64::from_ne_bytes([(i + 1) as u8; 8]) || (i >= half && w == 0);
                            assert!(ok, "page {i} shows {w:#x}");
                        }
                        seen += 16;
                    }
                    Err(Error::PastEof { .. }) => assert!(pos.iter().any(|&p| p / PS >= half)),
                    Err(e) => panic!("load_u64_many: {e}"),
                }
            }
            seen
        })
    };
    let mut seen = 0;
    for r in readers {
        seen += r.join().expect("a reader failed").0;
    }
    let batched = batched.join().expect("the batched reader failed");
    stop.store(true, Ordering::Relaxed);
    for t in others {
        t.join().expect("a racing thread failed");
    }
    assert!(seen > 20_000);
    assert!(batched > 0, "some batch loaded all its words");
    let vm = cache.vmstat();
    assert!(vm.get(Item::pgunmap) > 0, "reclaim or truncation unmapped pages");
    assert!(vm.get(Item::pgfault) > big, "accesses faulted pages back in");
    drop(m);
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 0, "munmap left no page mapped");
    vm
}

// Goal: `Mapping::load_u64` (on x86_64 an optimistic read: no pin, the
// unmap sequence re-checked after the word) returns only words that were
// stored in the page asked for, while reclaim, MADV_DONTNEED and faults
// keep unmapping pages and reusing their frames for other pages, and a
// writer rewrites pages through a second mapping. Every word of every
// page says which page, which word and which round wrote it, so a word of
// a reused frame (another page's) or a torn one fails.
// Method: a 48-page cache under a 160-page memory file; three readers
// doing a fixed number of single loads, the other threads running until
// then.
#[test]
fn load_u64_racing_reclaim_returns_stored_words() {
    const PAGES: u64 = 160;
    const WORDS: u64 = PS / 8;
    // Word `w` of page `i` in round `r`: page and word in the high half,
    // the round (below 2^20) twice in the low half.
    fn word(i: u64, w: u64, r: u64) -> u64 {
        (i << 49) | (w << 40) | (r << 20) | r
    }
    fn page_bytes(i: u64, r: u64) -> Vec<u8> {
        (0..WORDS).flat_map(|w| word(i, w, r).to_ne_bytes()).collect()
    }
    let cache = PageCache::new(Config {
        memory_bytes: 48 * PS,
        tunables: Tunables { ra_pages: 4, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let f = Arc::new(cache.open_memory("words").unwrap());
    for i in 0..PAGES {
        f.write_at(&page_bytes(i, 0), i * PS).unwrap();
    }
    f.fsync().unwrap();
    let m = Arc::new(f.map(0, PAGES * PS, MapFlags::READ).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let mut others = Vec::new();
    {
        let (cache, stop) = (cache.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                cache.reclaim(16);
            }
        }));
    }
    {
        let (m, stop) = (m.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(11);
            while !stop.load(Ordering::Relaxed) {
                let first = rng.gen_range(0..PAGES - 8);
                m.madvise(first * PS, rng.gen_range(1..8) * PS, Madvise::DontNeed).unwrap();
            }
        }));
    }
    {
        // Whole pages of a new round through a writable mapping (one write
        // section each), so frames change under the readers in place too.
        let (f, stop) = (f.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let w = f.map(0, PAGES * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
            let mut rng = StdRng::seed_from_u64(12);
            let mut round = 1;
            while !stop.load(Ordering::Relaxed) {
                let i = rng.gen_range(0..PAGES);
                w.write(i * PS, &page_bytes(i, round)).unwrap();
                round = (round + 1) % (1 << 20);
            }
        }));
    }
    let readers: Vec<_> = (0..3u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                for _ in 0..60_000 {
                    let (i, w) = (rng.gen_range(0..PAGES), rng.gen_range(0..WORDS));
                    let got = m.load_u64(i, (w * 8) as usize).unwrap();
                    let round = got & ((1 << 20) - 1);
                    assert_eq!(got, word(i, w, round), "page {i} word {w}: {got:#018x} was never stored there");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().expect("a reader failed");
    }
    stop.store(true, Ordering::Relaxed);
    for t in others {
        t.join().expect("a racing thread failed");
    }
    let vm = cache.vmstat();
    assert!(vm.get(Item::pgunmap) > 0, "reclaim unmapped pages");
    assert!(vm.get(Item::pgfault) > PAGES, "accesses faulted pages back in");
}

// Goal: mapped reads and writes under memory pressure agree with a model
// of the file, mixed with read_at, write_at, msync and MADV_DONTNEED, and
// the host file holds the model's bytes after munmap and fsync.
// Method: a 64-page cache (kswapd on) under a 160-page host file mapped
// whole and writable; 4000 random operations from a fixed seed.
#[test]
fn mapped_reads_and_writes_match_a_model_under_pressure() {
    mapped_model(0, LruPolicy::Classic, 64, 160, 4000);
}

// Goal: the same with large folios mapped page by page: streaming reads
// bring the file in as folios, mapped writes dirty them whole, write pins
// and holes unmap and split them, and reclaim unmaps and evicts them
// whole, on the classic lists and on the multi-gen LRU (whose page-table
// walks find young entries in folios). Method: folios up to order 9
// (capped at 1/32 of the cache), a 1,024-page cache under a 2,560-page
// file, 6000 operations.
#[test]
fn mapped_large_folios_match_a_model_under_pressure() {
    for lru in [LruPolicy::Classic, LruPolicy::MultiGen] {
        mapped_large_folios(lru);
    }
}

fn mapped_large_folios(lru: LruPolicy) {
    let vm = mapped_model(9, lru, 1024, 2560, 6000);
    assert!(vm.get(Item::thp_file_alloc) > 100, "large folios were read");
    assert!(vm.get(Item::thp_split_page) > 10, "mapped folios were split");
}

fn mapped_model(folio_order_max: u32, lru: LruPolicy, cache_pages: u64, pages: u64, steps: u64) -> VmStat {
    let dir = tempfile::tempdir().unwrap();
    let cache = PageCache::new(Config {
        memory_bytes: cache_pages * PS,
        tunables: Tunables { dirty_ratio: 40, dirty_background_ratio: 20, folio_order_max, lru, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let (f, path) = host_file(&cache, &dir, pages);
    let mut model: Vec<u8> = (0..pages).flat_map(|i| vec![(i + 1) as u8; PS as usize]).collect();
    let m = f.map(0, pages * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    let mut rng = StdRng::seed_from_u64(15);
    let size = model.len() as u64;
    let folios = folio_order_max > 0;
    for step in 0..steps {
        let len = match rng.gen_range(0..3) {
            0 => rng.gen_range(1..64),
            1 => rng.gen_range(1..=PS as usize),
            _ => rng.gen_range(1..3 * PS as usize),
        };
        let pos = rng.gen_range(0..size - len as u64);
        let at = pos as usize..pos as usize + len;
        match rng.gen_range(0..if folios { 13 } else { 10 }) {
            0..=2 => {
                let data: Vec<u8> = (0..len).map(|i| (step as usize * 7 + i) as u8).collect();
                m.write(pos, &data).unwrap();
                model[at].copy_from_slice(&data);
            }
            3..=5 => {
                let mut buf = vec![0u8; len];
                m.read(pos, &mut buf).unwrap();
                assert!(buf == model[at], "mapped read at {pos}+{len}, step {step}");
            }
            6 => {
                let data: Vec<u8> = (0..len).map(|i| (step as usize * 13 + i) as u8).collect();
                f.write_at(&data, pos).unwrap();
                model[at].copy_from_slice(&data);
            }
            7 => {
                let mut buf = vec![0u8; len];
                f.read_at(&mut buf, pos).unwrap();
                assert!(buf == model[at], "read_at at {pos}+{len}, step {step}");
            }
            8 => m.msync(0, pages * PS).unwrap(),
            9 => {
                let first = rng.gen_range(0..pages - 16);
                m.madvise(first * PS, 16 * PS, Madvise::DontNeed).unwrap();
            }
            10 => {
                // A stream of 256 KiB reads: readahead brings folios in.
                let start = rng.gen_range(0..pages - 256) * PS;
                let mut buf = vec![0u8; 256 << 10];
                for k in 0..4 {
                    let p = start + k * (256 << 10);
                    let n = f.read_at(&mut buf, p).unwrap();
                    assert!(buf[..n] == model[p as usize..p as usize + n], "stream at {p}, step {step}");
                }
            }
            11 => {
                // A write pin: a mapped folio is unmapped and split.
                let idx = pos / PS;
                let data = [(step % 251) as u8; 16];
                f.get_page_mut(idx).unwrap().write(32, &data).unwrap();
                model[(idx * PS + 32) as usize..][..16].copy_from_slice(&data);
            }
            _ => {
                f.punch_hole(pos, len as u64).unwrap();
                model[at].fill(0);
            }
        }
    }
    let vm = cache.vmstat();
    let stolen = vm.get(Item::pgsteal_kswapd) + vm.get(Item::pgsteal_direct);
    assert!(
        vm.get(Item::pgunmap) > 0 && stolen > pages && vm.get(Item::pgmajfault) > pages / 2,
        "pages were unmapped, evicted and refaulted"
    );
    drop(m);
    f.fsync().unwrap();
    assert!(std::fs::read(&path).unwrap() == model, "the host file holds the model");
    vm
}

// Goal: the README's embedding example runs as written (on a memory file).
#[test]
fn readme_mapping_example() {
    let cache = PageCache::new(Config::with_memory(16 << 20)).unwrap();
    let f = cache.open_memory("readme").unwrap();
    f.write_at(b"hello", 0).unwrap();
    let map = f.map(0, 8 << 20, MapFlags::READ | MapFlags::WRITE).unwrap();
    {
        let mut page = map.page(0).unwrap();
        assert_eq!(&page.load_u64(0).unwrap().to_ne_bytes()[..5], b"hello");
        page.write(0, b"HELLO").unwrap();
    }
    let mut words = [0u64; 2];
    map.load_u64_many(&[0, 8], &mut words).unwrap();
    assert_eq!(&words[0].to_ne_bytes()[..5], b"HELLO");
    assert_eq!(words[1], 0);
    assert!(matches!(map.load_u64_many(&[0, 4096], &mut words), Err(Error::PastEof { .. })), "page 1 is past EOF");
    map.madvise(0, 8 << 20, Madvise::Sequential).unwrap();
    map.msync(0, 4096).unwrap();
    drop(map);
    let mut buf = [0u8; 5];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"HELLO");
    f.fsync().unwrap();
    cache.shutdown().unwrap();
}

// Goal: mmap readahead as filemap_fault does it: a miss reads around the
// fault (ra_pages centred on it, the marker ra_pages / 4 from its end); a
// fault on the marked page, found cached, reads the next window
// asynchronously (a minor fault); MADV_RANDOM reads only the faulting
// page; MADV_SEQUENTIAL reads the sequential window ahead of it.
#[test]
fn fault_readahead_around_async_random_sequential() {
    let cache = cache_with(Tunables { ra_pages: 32, ..quiet(MappedActivation::UsedOnce) }, 1024);
    let f = filled(&cache, "ra", 0);
    f.set_len(512 * PS).unwrap();
    cache.drop_caches();
    let m = f.map(0, 512 * PS, MapFlags::READ).unwrap();
    let cached = |range: std::ops::Range<u64>| range.filter(|&i| f.page_state(i).is_some()).count() as u64;

    let before = cache.vmstat();
    m.page(100).unwrap();
    assert_eq!(delta(&cache, &before, Item::pgmajfault), 1);
    assert_eq!(cached(84..116), 32, "read-around: [index - ra_pages / 2, + ra_pages)");
    assert_eq!(f.cached_pages(), 32);
    assert!(f.page_state(108).unwrap().readahead, "the marker: ra_pages / 4 before the window's end");

    let before = cache.vmstat();
    m.page(108).unwrap();
    assert_eq!(delta(&cache, &before, Item::pgmajfault), 0, "found cached: a minor fault");
    assert_eq!(delta(&cache, &before, Item::pgfault), 1);
    assert_eq!(cached(116..148), 32, "the marker read the next window");

    let r = f.map(0, 512 * PS, MapFlags::READ).unwrap();
    r.madvise(0, 512 * PS, Madvise::Random).unwrap();
    let n = f.cached_pages();
    r.page(300).unwrap();
    assert_eq!(f.cached_pages(), n + 1, "MADV_RANDOM: no readahead");

    let s = f.map(0, 512 * PS, MapFlags::READ).unwrap();
    s.madvise(0, 512 * PS, Madvise::Sequential).unwrap();
    let n = f.cached_pages();
    s.page(400).unwrap();
    assert!(cached(400..432) == 32 && f.cached_pages() >= n + 32, "MADV_SEQUENTIAL: the window ahead");
    assert_eq!(cached(380..400), 0, "nothing behind the fault");
}

// Goal: a page held through a guard is never freed: reclaim unmaps it but
// keeps it cached (the hazard scan at removal sees the pin), and
// truncation removes it from the file but its frame is not reused while
// the guard lives, however much memory is needed meanwhile.
#[test]
fn a_guard_keeps_its_frame() {
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 128);
    let f = filled(&cache, "g", 4);
    cache.drop_caches();
    let m = f.map(0, 4 * PS, MapFlags::READ).unwrap();
    touch(&m, 0); // faulted in: the next access is the pinned fast path
    let g = m.page(0).unwrap();
    m.madvise(0, PS, Madvise::Cold).unwrap();
    cache.lru_add_drain_all();
    let before = cache.vmstat();
    cache.reclaim(8);
    assert_eq!(delta(&cache, &before, Item::pgunmap), 1, "reclaim unmapped it");
    assert!(f.page_state(0).is_some(), "but the pinned page stayed cached");
    let mut b = [0u8; 16];
    g.read_into(0, &mut b).unwrap();
    assert_eq!(b, [1u8; 16]);
    drop(g);

    touch(&m, 1);
    let g = m.page(1).unwrap();
    f.set_len(0).unwrap();
    assert_eq!(f.page_state(1), None, "truncated away");
    // Fill every frame with other bytes, twice over.
    let other = cache.open_memory("other").unwrap();
    for i in 0..256 {
        other.write_at(&[0xee; PS as usize], i * PS).unwrap();
    }
    g.read_into(0, &mut b).unwrap();
    assert_eq!(b, [2u8; 16], "the frame was not reused under the guard");
    assert_eq!(g.load_u64(8).unwrap(), u64::from_ne_bytes([2; 8]));
    drop(g);
    assert!(matches!(m.page(1), Err(Error::PastEof { .. })), "past EOF now: SIGBUS");
}

// Goal: a read fault also maps the cached, uptodate, unlocked pages of its
// `fault_around_bytes` window (do_fault_around, 64 KiB = 16 pages by
// default): accesses to them take no fault; they are mapped old, so reclaim
// counts only the pages actually touched as referenced; a locked page and
// the pages past EOF are left to their own faults; one page turns it off.
// Method: 40 cached pages, a 48-page mapping, kswapd off, no readahead.
#[test]
fn fault_around_maps_cached_neighbours_old() {
    let cache = cache_with(quiet(MappedActivation::UsedOnce), 256);
    let f = filled(&cache, "fa", 40);
    let m = f.map(0, 48 * PS, MapFlags::READ).unwrap();

    let before = cache.vmstat();
    touch(&m, 5);
    assert_eq!(delta(&cache, &before, Item::pgfault), 1);
    assert_eq!(delta(&cache, &before, Item::pgfault_around), 15, "the rest of the aligned 16-page window");
    assert_eq!(cache.vmstat().get(Item::nr_mapped), 16);
    for i in 0..16 {
        touch(&m, i);
    }
    assert_eq!(delta(&cache, &before, Item::pgfault), 1, "mapped around: no more faults in the window");

    // The last window [32, 48) is clipped at EOF (page 40); page 35 is
    // locked by a write pin and skipped.
    let pin = f.get_page_mut(35).unwrap();
    let before = cache.vmstat();
    touch(&m, 33);
    assert_eq!(delta(&cache, &before, Item::pgfault_around), 6, "32, 34 and 36..40");
    drop(pin);
    touch(&m, 35);
    assert_eq!(delta(&cache, &before, Item::pgfault), 2, "the locked page faults on its own");
    assert!(matches!(m.page(40), Err(Error::PastEof { .. })), "past EOF is still SIGBUS");

    // Old entries: of the window [16, 32) only page 16 is touched. One
    // reclaim pass finds 16 referenced (KEEP) and reclaims the untouched
    // pages 17..31 though they are mapped.
    touch(&m, 16);
    cache.lru_add_drain_all();
    let before = cache.vmstat();
    cache.reclaim(1024);
    assert!(f.page_state(16).is_some(), "the touched page is kept");
    assert!((17..32).all(|i| f.page_state(i).is_none()), "untouched, mapped old: reclaimed");
    assert!(delta(&cache, &before, Item::pgunmap) >= 15);
    for i in 17..32 {
        touch(&m, i); // faulted back in with the right bytes
    }

    // fault_around_bytes = one page: every page faults.
    let cache = cache_with(Tunables { fault_around_bytes: PS, ..quiet(MappedActivation::UsedOnce) }, 256);
    let f = filled(&cache, "one", 8);
    let m = f.map(0, 8 * PS, MapFlags::READ).unwrap();
    let before = cache.vmstat();
    for i in 0..8 {
        touch(&m, i);
    }
    assert_eq!(delta(&cache, &before, Item::pgfault), 8);
    assert_eq!(delta(&cache, &before, Item::pgfault_around), 0);
}

/// `load_u64_many` agrees with `load_u64` at every chunk boundary (8 keys
/// a chunk, entries prefetched 3 chunks ahead) on a mapping whose page
/// table has huge pages of its own (256 MiB: 256 KiB of entries, aligned
/// and rounded up to a huge page) with 4 KiB pages (the page shift a
/// constant), and on one with 16 KiB pages (the shift a variable).
#[test]
fn load_u64_many_large_table_and_page_sizes() {
    for (ps, bytes) in [(4096u64, 256u64 << 20), (16384, 64 << 20)] {
        let t = quiet(MappedActivation::UsedOnce);
        let cfg = Config { memory_bytes: 256 * ps, page_size: ps as usize, nr_cpus: 1, tunables: t };
        let cache = PageCache::new(cfg).unwrap();
        let f = cache.open_memory("big").unwrap();
        f.set_len(bytes).unwrap();
        let nr = bytes / ps;
        // 64 pages spread over the file, each stamped at both ends.
        let pages: Vec<u64> = (0..64).map(|i| i * (nr / 64) + i % 7).collect();
        let want = |pos: u64| if pos.is_multiple_of(ps) { pos / ps * 3 + 1 } else { pos / ps * 5 + 2 };
        for &p in &pages {
            for pos in [p * ps, p * ps + ps - 8] {
                f.write_at(&want(pos).to_ne_bytes(), pos).unwrap();
            }
        }
        let m = f.map(0, bytes, MapFlags::READ).unwrap();
        let mut rng = StdRng::seed_from_u64(ps);
        for n in [0, 1, 7, 8, 9, 23, 24, 25, 31, 32, 33, 40, 64, 100] {
            let pos: Vec<u64> = (0..n)
                .map(|_| {
                    let p = pages[rng.gen_range(0..pages.len())];
                    if rng.gen_bool(0.5) {
                        p * ps
                    } else {
                        p * ps + ps - 8
                    }
                })
                .collect();
            let mut out = vec![0u64; n];
            m.load_u64_many(&pos, &mut out).unwrap();
            for (j, &q) in pos.iter().enumerate() {
                assert_eq!(out[j], want(q), "page size {ps}, {n} keys: word {j} at {q}");
                assert_eq!(m.load_u64(q / ps, (q % ps) as usize).unwrap(), want(q));
            }
        }
        // A key past the mapping in the last, partial chunk: the error,
        // with the words before it loaded.
        let mut pos: Vec<u64> = pages.iter().take(11).map(|&p| p * ps).collect();
        pos[10] = bytes;
        let mut out = vec![0u64; 11];
        assert!(matches!(m.load_u64_many(&pos, &mut out), Err(Error::InvalidArgument(_))));
        assert_eq!(out[9], want(pos[9]));
    }
}

//! Private (copy-on-write) file mappings, MAP_PRIVATE: reads see the
//! file's pages, the first write to a page copies it into an anonymous
//! page of the mapping, which the file and other mappings never see and
//! which goes to swap under pressure.

mod common;

use common::host_file;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use pcache::{Config, Error, Item, Madvise, MapFlags, Mapping, PageCache, Tunables};

const PS: u64 = 4096;

const PRIVATE_RW: MapFlags = MapFlags::PRIVATE.union(MapFlags::WRITE);

/// kswapd off (reclaim runs in the allocating thread), no readahead, so a
/// fault maps one page and the counters are the test's own.
fn quiet() -> Tunables {
    Tunables { kswapd: false, ra_pages: 0, fault_around_bytes: 0, ..Tunables::default() }
}

fn cache(pages: u64, swap_pages: u64, t: Tunables) -> PageCache {
    let t = Tunables { swap_bytes: swap_pages * PS, ..t };
    PageCache::new(Config { memory_bytes: pages * PS, tunables: t, ..Config::default() }).unwrap()
}

fn original(page: u64) -> u8 {
    (page + 1) as u8
}

/// The word a test writes at both ends of a page: who, which page, which
/// version, so a page read from the wrong frame or slot shows.
fn stamp(who: u64, page: u64, version: u64) -> u64 {
    (who << 56) | (page << 24) | version
}

fn write_stamp(m: &Mapping, who: u64, page: u64, version: u64) -> pcache::Result<()> {
    let w = stamp(who, page, version).to_ne_bytes();
    let mut p = m.page(page)?;
    p.write(0, &w)?;
    p.write(PS as usize - 8, &w)
}

/// Both end words of page `page` of `m`.
fn ends(m: &Mapping, page: u64) -> (u64, u64) {
    let p = m.page(page).unwrap();
    (p.load_u64(0).unwrap(), p.load_u64(PS as usize - 8).unwrap())
}

fn word_of(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; 8])
}

// Goal: a write through a private mapping is seen by that mapping only:
// not by read_at, not by a shared mapping of the same file, not on disk
// after fsync and msync; the first write to a page is one copy (an
// anonymous page), later writes go to it without another fault; the guard
// that wrote reads its own write; a read-only private mapping refuses
// writes; writes to the file after the copy do not reach it.
#[test]
fn private_writes_are_invisible_to_the_file_and_to_shared_mappings() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    let (f, path) = host_file(&pc, &dir, 8);
    let shared = f.map(0, 8 * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    let private = f.map(0, 8 * PS, PRIVATE_RW).unwrap();
    assert_eq!(ends(&private, 1), (word_of(2), word_of(2)), "a read fault shows the file");
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0, "reading copies nothing");

    let before = pc.vmstat();
    {
        let mut p = private.page(1).unwrap();
        p.write(8, b"private!").unwrap();
        assert_eq!(p.load_u64(8).unwrap(), u64::from_ne_bytes(*b"private!"), "the guard reads its copy");
        assert_eq!(p.load_u64(0).unwrap(), word_of(2), "the copy holds the file's other bytes");
        p.write(16, b"again").unwrap();
    }
    let d = pc.vmstat().delta(&before);
    assert_eq!(d.get(Item::pgfault), 1, "one write fault (the copy) for two writes");
    assert_eq!(d.get(Item::pgmkwrite), 0, "a private write is no page_mkwrite");
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 1);
    assert_eq!(pc.vmstat().get(Item::nr_dirty), 0, "the file has nothing to write");

    // A write fault on a page never mapped (do_cow_fault).
    private.write(5 * PS, b"cow").unwrap();
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 2);

    let mut buf = [0u8; 13];
    f.read_at(&mut buf, PS + 8).unwrap();
    assert_eq!(buf, [2u8; 13], "read_at sees the file");
    shared.read(PS + 8, &mut buf).unwrap();
    assert_eq!(buf, [2u8; 13], "a shared mapping sees the file");
    private.read(PS + 8, &mut buf).unwrap();
    assert_eq!(&buf, b"private!again");

    // The file changes under the copy: the copy does not.
    shared.write(PS + 8, b"SHARED").unwrap();
    f.write_at(b"W", 5 * PS).unwrap();
    private.read(PS + 8, &mut buf).unwrap();
    assert_eq!(&buf, b"private!again");
    let mut three = [0u8; 3];
    private.read(5 * PS, &mut three).unwrap();
    assert_eq!(&three, b"cow");

    private.msync(0, 8 * PS).unwrap();
    f.fsync().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(&disk[(PS + 8) as usize..(PS + 14) as usize], b"SHARED", "the shared write reached the disk");
    assert_eq!(&disk[(PS + 14) as usize..(PS + 21) as usize], &[2u8; 7], "no private byte did");
    assert_eq!(&disk[(5 * PS) as usize..(5 * PS + 3) as usize], &[b'W', 6, 6]);

    let ro = f.map(0, PS, MapFlags::PRIVATE).unwrap();
    assert!(matches!(ro.page(0).unwrap().write(0, b"x"), Err(Error::ReadOnlyMapping { .. })));
    assert!(matches!(private.page(8), Err(Error::InvalidArgument(_))), "past the mapping");
    drop(ro);
    drop(private);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0, "munmap freed the copies");
    assert_eq!(ends(&shared, 1).0, word_of(2));
}

// Goal: a page not yet written through a private mapping shows the
// file's current data (Linux's behaviour): writes by read_at's sibling
// write_at and by a shared mapping appear in it, before and after the
// page is first mapped; MADV_DONTNEED drops the mapping's copies, so the
// range reads the file again; a private mapping of part of a file
// faults the right pages.
#[test]
fn unwritten_pages_track_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    let (f, _path) = host_file(&pc, &dir, 8);
    let shared = f.map(0, 8 * PS, MapFlags::READ | MapFlags::WRITE).unwrap();
    let private = f.map(2 * PS, 4 * PS, PRIVATE_RW).unwrap();
    assert_eq!(ends(&private, 0).0, word_of(3), "mapping page 0 is file page 2");

    f.write_at(&[0xaa; 8], 2 * PS).unwrap();
    assert_eq!(ends(&private, 0).0, word_of(0xaa), "a mapped, unwritten page shows write_at");
    shared.write(3 * PS, &[0xbb; 8]).unwrap();
    assert_eq!(ends(&private, 1).0, word_of(0xbb), "and writes through a shared mapping");

    write_stamp(&private, 1, 2, 1).unwrap();
    f.write_at(&[0xcc; 8], 4 * PS).unwrap();
    assert_eq!(ends(&private, 2), (stamp(1, 2, 1), stamp(1, 2, 1)), "a written page keeps its copy");

    // Written before this mapping first touches it: the fault maps the
    // file's current page.
    f.write_at(&[0xdd; 8], 5 * PS).unwrap();
    assert_eq!(ends(&private, 3).0, word_of(0xdd));

    private.madvise(0, 4 * PS, Madvise::DontNeed).unwrap();
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0, "DONTNEED freed the copy");
    assert_eq!(ends(&private, 2).0, word_of(0xcc), "the range reads the file again");
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0);
}

// Goal: private copies survive memory pressure: with a mapping four times
// the cache written whole, copies go to swap and come back with the right
// bytes; the file stays as it was; dropping the mapping frees the copies'
// frames and swap slots. Method: a 256-page cache with in-memory swap, a
// 1024-page host file mapped privately; every page written once, then all
// read back twice in shuffled order.
#[test]
fn private_pages_survive_pressure_through_swap_and_are_freed_at_munmap() {
    const PAGES: u64 = 1024;
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 2048, quiet());
    let (f, path) = host_file(&pc, &dir, PAGES);
    let m = f.map(0, PAGES * PS, PRIVATE_RW).unwrap();
    for i in 0..PAGES {
        write_stamp(&m, 1, i, 1).unwrap();
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpout) > 600, "copies went to swap: {}", vm.get(Item::pswpout));
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..2 {
        let mut order: Vec<u64> = (0..PAGES).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        for &i in &order {
            assert_eq!(ends(&m, i), (stamp(1, i, 1), stamp(1, i, 1)), "page {i}");
            let mut mid = [0u8; 8];
            m.read(i * PS + 2048, &mut mid).unwrap();
            assert_eq!(mid, [original(i); 8], "page {i}: the copied bytes of the file");
        }
    }
    // Writes after a swap-in reuse the page (no new copy).
    for i in 0..64 {
        write_stamp(&m, 1, i, 2).unwrap();
        assert_eq!(ends(&m, i).0, stamp(1, i, 2));
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpin) > 600, "copies came back: {}", vm.get(Item::pswpin));
    assert!(vm.get(Item::swap_used_pages) > 0);

    let free = pc.nr_free_pages();
    let anon = vm.get(Item::nr_anon_pages);
    drop(m);
    pc.lru_add_drain_all();
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_anon_pages), 0, "no copy left mapped");
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no swap slot leaked");
    assert_eq!(vm.get(Item::nr_swapcached), 0);
    assert_eq!(vm.get(Item::nr_active_anon) + vm.get(Item::nr_inactive_anon), 0, "no copy left on an LRU");
    assert!(pc.nr_free_pages() >= free + anon, "frames freed: {} -> {} with {anon} copies", free, pc.nr_free_pages());
    f.fsync().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert!(
        disk.chunks(PS as usize).enumerate().all(|(i, p)| p.iter().all(|&b| b == original(i as u64))),
        "the file never saw a private write"
    );
}

// Goal: without swap, copies are not reclaimable; once they fill memory a
// write that needs a new copy fails with a typed ENOMEM in bounded time,
// and every copy already made keeps its bytes. Dropping the mapping makes
// room again.
#[test]
fn no_swap_gives_enomem_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    let (f, _path) = host_file(&pc, &dir, 512);
    let m = f.map(0, 512 * PS, PRIVATE_RW).unwrap();
    let started = Instant::now();
    let mut written = 0;
    let err = loop {
        match write_stamp(&m, 2, written, 1) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 512, "512 copies cannot fit in 256 frames");
    };
    assert!(matches!(err, Error::NoMemory { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "gave up in bounded time");
    assert!(written > 100, "most of memory was usable: {written}");
    for i in 0..written {
        assert_eq!(ends(&m, i), (stamp(2, i, 1), stamp(2, i, 1)), "page {i}");
    }
    drop(m);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0);
    let m = f.map(0, 512 * PS, PRIVATE_RW).unwrap();
    write_stamp(&m, 2, 0, 2).unwrap();
}

// Goal: many threads under memory pressure agree with a model. Four
// threads own the pages i % 4 == t of the first half of a private
// mapping and write them (copies, swapped out and in), checking each
// against their own model and checking read_at still shows the file
// there; a fifth thread writes versioned stamps to the second half of the
// file through write_at and a shared mapping, which the private mapping
// (never written there) must show: each read a stamp of that page, both
// ends the same version, never older than one read before. Reclaim runs
// with kswapd on. At the end the file holds only the shared writes and
// munmap frees every copy and slot.
#[test]
fn many_threads_under_pressure_match_a_model() {
    const PAGES: u64 = 384;
    const HALF: u64 = PAGES / 2;
    let dir = tempfile::tempdir().unwrap();
    let pc = Arc::new(cache(128, 4096, Tunables { ra_pages: 0, ..Tunables::default() }));
    let (f, path) = host_file(&pc, &dir, PAGES);
    let f = Arc::new(f);
    let private = Arc::new(f.map(0, PAGES * PS, PRIVATE_RW).unwrap());
    let shared = Arc::new(f.map(0, PAGES * PS, MapFlags::READ | MapFlags::WRITE).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // The newest version written to each page of the second half.
    let versions: Arc<Vec<AtomicU64>> = Arc::new((0..HALF).map(|_| AtomicU64::new(0)).collect());

    let writer = {
        let (f, shared, stop, versions) = (f.clone(), shared.clone(), stop.clone(), versions.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(99);
            let mut v = 0;
            while !stop.load(Ordering::Relaxed) && v < 20_000 {
                v += 1;
                let k = rng.gen_range(0..HALF);
                let page = HALF + k;
                let w = stamp(9, page, v).to_ne_bytes();
                // One write section each end; the readers accept a page
                // whose ends differ only while a write is in flight, so
                // write the last word first and record the version after.
                if rng.gen_bool(0.5) {
                    f.write_at(&w, page * PS + PS - 8).unwrap();
                    f.write_at(&w, page * PS).unwrap();
                } else {
                    shared.write(page * PS + PS - 8, &w).unwrap();
                    shared.write(page * PS, &w).unwrap();
                }
                versions[k as usize].store(v, Ordering::Release);
            }
        })
    };

    let owners: Vec<_> = (0..4u64)
        .map(|t| {
            let (f, private, versions) = (f.clone(), private.clone(), versions.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mine: Vec<u64> = (0..HALF).filter(|i| i % 4 == t).collect();
                let mut model = vec![0u64; mine.len()];
                for step in 1..=1500u64 {
                    let j = rng.gen_range(0..mine.len());
                    let page = mine[j];
                    match rng.gen_range(0..4) {
                        0 | 1 => {
                            write_stamp(&private, t, page, step).unwrap();
                            model[j] = step;
                        }
                        2 => {
                            let want = if model[j] == 0 { word_of(original(page)) } else { stamp(t, page, model[j]) };
                            assert_eq!(ends(&private, page), (want, want), "thread {t} page {page} step {step}");
                            let mut b = [0u8; 8];
                            f.read_at(&mut b, page * PS).unwrap();
                            assert_eq!(b, [original(page); 8], "the file never sees page {page}'s copy");
                        }
                        _ => {
                            // The second half: the file's current data.
                            let k = rng.gen_range(0..HALF);
                            let page = HALF + k;
                            let floor = versions[k as usize].load(Ordering::Acquire);
                            let (first, last) = ends(&private, page);
                            if floor == 0 && last == word_of(original(page)) {
                                continue;
                            }
                            let version = |w: u64| {
                                assert_eq!(w >> 24, stamp(9, page, 0) >> 24, "page {page}: not its stamp: {w:#x}");
                                w & 0xff_ffff
                            };
                            // The last word is written first: it is never older.
                            let (vf, vl) =
                                (if first == word_of(original(page)) { 0 } else { version(first) }, version(last));
                            assert!(vl >= floor, "page {page}: version {vl} older than {floor}");
                            assert!(vf <= vl, "page {page}: ends {vf} and {vl}");
                        }
                    }
                }
                (mine, model)
            })
        })
        .collect();
    let mut models = Vec::new();
    for t in owners {
        models.push(t.join().expect("an owner thread failed"));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer failed");
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpout) > 0 && vm.get(Item::pswpin) > 0, "copies went through swap");
    for (t, (mine, model)) in models.iter().enumerate() {
        for (&page, &v) in mine.iter().zip(model) {
            let want = if v == 0 { word_of(original(page)) } else { stamp(t as u64, page, v) };
            assert_eq!(ends(&private, page), (want, want), "thread {t} page {page} at the end");
        }
    }
    drop(shared);
    let private = Arc::try_unwrap(private).ok().expect("the threads are done");
    drop(private);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_anon_pages), 0);
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no swap slot leaked");
    f.fsync().unwrap();
    let disk = std::fs::read(&path).unwrap();
    for (i, p) in disk.chunks(PS as usize).enumerate().take(HALF as usize) {
        assert!(p.iter().all(|&b| b == original(i as u64)), "page {i} of the file saw a private write");
    }
}

// Goal: `Mapping::load_u64` (the guard-free access) agrees with a guard's
// `load_u64` on every kind of entry: missing (it faults), the file's page,
// a private copy, a copy brought back from swap; and refuses what the
// guard refuses (an unaligned or out-of-page offset, a page past the
// mapping).
#[test]
fn mapping_load_u64_agrees_with_the_guard() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(64, 512, quiet());
    let (f, _path) = host_file(&pc, &dir, 128);
    let m = f.map(0, 128 * PS, PRIVATE_RW).unwrap();
    let before = pc.vmstat();
    assert_eq!(m.load_u64(3, 0).unwrap(), word_of(4), "a missing entry faults");
    assert_eq!(pc.vmstat().delta(&before).get(Item::pgfault), 1);
    assert_eq!(m.load_u64(3, 8).unwrap(), word_of(4), "then hits");
    assert_eq!(pc.vmstat().delta(&before).get(Item::pgfault), 1, "a hit does not fault");
    write_stamp(&m, 3, 3, 7).unwrap();
    assert_eq!(m.load_u64(3, 0).unwrap(), stamp(3, 3, 7), "the copy, not the file");
    assert_eq!(m.load_u64(3, PS as usize - 8).unwrap(), stamp(3, 3, 7));
    // Push the copies out to swap and read them back through both paths.
    for i in 0..128 {
        write_stamp(&m, 3, i, 8).unwrap();
    }
    assert!(pc.vmstat().get(Item::pswpout) > 0);
    for i in 0..128 {
        let direct = m.load_u64(i, 0).unwrap();
        assert_eq!(direct, stamp(3, i, 8), "page {i}");
        assert_eq!(m.page(i).unwrap().load_u64(0).unwrap(), direct);
    }
    assert!(matches!(m.load_u64(0, 4), Err(Error::InvalidArgument(_))), "unaligned");
    assert!(matches!(m.load_u64(0, PS as usize), Err(Error::InvalidArgument(_))), "past the page");
    assert!(matches!(m.load_u64(128, 0), Err(Error::InvalidArgument(_))), "past the mapping");
    let shared = f.map(0, 4 * PS, MapFlags::READ).unwrap();
    assert_eq!(shared.load_u64(3, 0).unwrap(), word_of(4), "the file never saw the copies");
}

// Goal: truncation takes a private mapping's copies past the new EOF
// with the file's pages (truncate_pagecache: unmap_mapping_range with
// even_cows), as Linux does: an access past EOF is PastEof (SIGBUS) even
// where the mapping had written a copy, the copies' frames go back, and a
// file extended again shows its new zeroes there, not the old copy. The
// copy of the page EOF now cuts through stays (holebegin rounds up).
#[test]
fn truncate_zaps_private_copies_past_eof() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    let (f, _path) = host_file(&pc, &dir, 8);
    let m = f.map(0, 8 * PS, PRIVATE_RW).unwrap();
    for page in [1, 2, 5, 6] {
        write_stamp(&m, 4, page, 1).unwrap();
    }
    assert_eq!(ends(&m, 7).0, word_of(8), "page 7 mapped read-only");
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 4);
    let free = pc.nr_free_pages();

    f.set_len(2 * PS + 100).unwrap();
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 2, "the copies of pages 5 and 6 went");
    assert!(pc.nr_free_pages() >= free + 2, "their frames were freed: {free} -> {}", pc.nr_free_pages());
    for page in [3, 5, 6, 7] {
        assert!(matches!(m.load_u64(page, 0), Err(Error::PastEof { .. })), "page {page} is past EOF");
        assert!(matches!(m.page(page), Err(Error::PastEof { .. })), "page {page}: a guard too");
    }
    assert!(matches!(m.write(5 * PS, b"x"), Err(Error::PastEof { .. })), "no new copy past EOF");
    assert_eq!(ends(&m, 1), (stamp(4, 1, 1), stamp(4, 1, 1)), "a copy below EOF stays");
    assert_eq!(ends(&m, 2), (stamp(4, 2, 1), stamp(4, 2, 1)), "so does the copy EOF cuts through");
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 2);

    f.set_len(8 * PS).unwrap();
    assert_eq!(m.load_u64(5, 0).unwrap(), 0, "the extended file's zeroes, not the old copy");
    assert_eq!(m.load_u64(6, PS as usize - 8).unwrap(), 0);
    drop(m);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0);
}

// Goal: the same with the copies on swap: truncation frees their swap
// slots (and swap-cache pages) past EOF; only the copies below EOF keep
// theirs; those still read back right. Method: a 64-page cache with swap
// and a private mapping of 128 pages written whole, so most copies are
// on swap when the file is cut to two and a half pages.
#[test]
fn truncate_frees_swapped_private_copies_past_eof() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(64, 512, quiet());
    let (f, _path) = host_file(&pc, &dir, 128);
    let m = f.map(0, 128 * PS, PRIVATE_RW).unwrap();
    for i in 0..128 {
        write_stamp(&m, 5, i, 1).unwrap();
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::swap_used_pages) > 32, "copies went to swap: {}", vm.get(Item::swap_used_pages));

    f.set_len(2 * PS + 100).unwrap();
    pc.lru_add_drain_all();
    let vm = pc.vmstat();
    assert!(vm.get(Item::swap_used_pages) <= 3, "slots past EOF freed: {}", vm.get(Item::swap_used_pages));
    assert!(vm.get(Item::nr_anon_pages) <= 3, "copies past EOF freed: {}", vm.get(Item::nr_anon_pages));
    assert!(vm.get(Item::nr_swapcached) <= 3, "{}", vm.get(Item::nr_swapcached));
    for page in [3, 64, 127] {
        assert!(matches!(m.load_u64(page, 8), Err(Error::PastEof { .. })), "page {page} is past EOF");
    }
    for page in 0..3 {
        assert_eq!(ends(&m, page), (stamp(5, page, 1), stamp(5, page, 1)), "page {page}");
    }
    drop(m);
    pc.lru_add_drain_all();
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_anon_pages), 0);
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no swap slot leaked");
}

// Goal: a hole punched in the file keeps a private mapping's copies
// (unmap_mapping_range with even_cows = 0, as Linux's punch does): a
// written page still reads its copy, an unwritten one reads the hole's
// zeroes, and a shared mapping sees zeroes everywhere in the hole.
#[test]
fn punch_hole_keeps_private_copies() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    let (f, _path) = host_file(&pc, &dir, 8);
    let shared = f.map(0, 8 * PS, MapFlags::READ).unwrap();
    let m = f.map(0, 8 * PS, PRIVATE_RW).unwrap();
    write_stamp(&m, 6, 2, 1).unwrap();
    write_stamp(&m, 6, 3, 1).unwrap();
    assert_eq!(ends(&m, 4).0, word_of(5), "page 4 mapped read-only");
    assert_eq!(ends(&shared, 3).0, word_of(4));

    f.punch_hole(2 * PS, 3 * PS).unwrap();
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 2, "the copies stay");
    assert_eq!(ends(&m, 2), (stamp(6, 2, 1), stamp(6, 2, 1)));
    assert_eq!(ends(&m, 3), (stamp(6, 3, 1), stamp(6, 3, 1)));
    assert_eq!(ends(&m, 4), (0, 0), "an unwritten page shows the hole");
    assert_eq!(ends(&m, 5).0, word_of(6), "past the hole: the file");
    for page in 2..5 {
        assert_eq!(ends(&shared, page), (0, 0), "shared page {page} shows the hole");
    }
}

// Goal: `Mapping::load_u64_many` (the batched access) loads what
// `load_u64` loads, key by key, on every kind of entry and in any order
// (missing pages fault, file pages, copies, copies on swap, one page
// several times in a batch), with batches of every length; and refuses
// what `load_u64` refuses, with the words before the bad position loaded.
#[test]
fn load_u64_many_agrees_with_load_u64() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(64, 512, quiet());
    let (f, _path) = host_file(&pc, &dir, 128);
    let m = f.map(0, 128 * PS, PRIVATE_RW).unwrap();
    // Copies of every third page (most go to swap), the rest untouched.
    for i in (0..128).step_by(3) {
        write_stamp(&m, 7, i, 1).unwrap();
    }
    assert!(pc.vmstat().get(Item::pswpout) > 0, "some copies are on swap");
    let expect = |pos: u64| -> u64 {
        let (page, off) = (pos / PS, pos % PS);
        if page % 3 == 0 && (off == 0 || off == PS - 8) {
            stamp(7, page, 1)
        } else {
            word_of(original(page))
        }
    };
    let mut rng = StdRng::seed_from_u64(12);
    for round in 0..200 {
        let n = rng.gen_range(0..40);
        let pos: Vec<u64> = (0..n)
            .map(|_| {
                let page = if rng.gen_bool(0.2) { 5 } else { rng.gen_range(0..128) };
                let off = match rng.gen_range(0..3) {
                    0 => 0,
                    1 => PS - 8,
                    _ => rng.gen_range(0..PS / 8) * 8,
                };
                page * PS + off
            })
            .collect();
        let mut out = vec![0u64; n];
        m.load_u64_many(&pos, &mut out).unwrap();
        for (j, &p) in pos.iter().enumerate() {
            assert_eq!(out[j], expect(p), "round {round}: word {j} at {p}");
            assert_eq!(m.load_u64(p / PS, (p % PS) as usize).unwrap(), out[j]);
        }
    }
    let mut out = [0u64; 12];
    let bad = |at: u64| {
        let mut pos: Vec<u64> = (0..12).map(|j| j * PS).collect();
        pos[9] = at;
        pos
    };
    assert!(matches!(m.load_u64_many(&bad(4), &mut out), Err(Error::InvalidArgument(_))), "unaligned");
    assert_eq!(out[8], expect(8 * PS), "the words before the bad one are loaded");
    assert!(matches!(m.load_u64_many(&bad(128 * PS), &mut out), Err(Error::InvalidArgument(_))), "past the map");
    assert!(matches!(m.load_u64_many(&[0, 8], &mut out), Err(Error::InvalidArgument(_))), "lengths differ");
    f.set_len(8 * PS).unwrap();
    assert!(matches!(m.load_u64_many(&bad(9 * PS), &mut out), Err(Error::PastEof { .. })), "past EOF");
    assert_eq!(out[3], expect(3 * PS));
}

/// Whether `w`, a word read at either end of page `page` of a private
/// mapping whose file is truncated and extended under it, is a value the
/// page may hold: the file's original bytes, the zeroes of an extension
/// (or of a copy made of them), or a stamp of that page by a writer.
fn plausible(page: u64, w: u64) -> bool {
    w == word_of(original(page)) || w == 0 || (w >> 56 < 3 && (w >> 24) & 0xffff_ffff == page)
}

// Goal: truncation racing copy-on-write faults leaves no copy past EOF.
// Three threads write-fault pages of a private mapping (through a guard
// and through `Mapping::write`, after read faults or not) and read them
// back while a fourth truncates the file to random lengths and extends it
// again, under memory pressure (a 96-page cache, 256 mapped pages all
// copied once before the race, so most copies start on swap; reclaim runs
// in the faulting threads: kswapd is off, so once the threads are joined
// nothing holds a page and the final counts are exact).
// The truncator waits (bounded) for the writers to make progress between
// rounds, so the two interleave however the threads are scheduled. Every
// access succeeds or is PastEof, every word read is one the page may
// hold, and both outcomes occur. After the last truncate, to 100 pages and a part
// (page 100 is cut through, so its copy may stay): every access past it is
// PastEof, at most 101 copies and swap slots remain, and extending the
// file again shows zeroes there, not an old copy. At munmap, truncation to
// 0 and close: no copy, swap slot or swap-cache page is left and every
// frame is free again.
#[test]
fn truncate_racing_cow_faults_leaves_no_copy_past_eof() {
    const PAGES: u64 = 256;
    const LAST_EOF: u64 = 100 * PS + 100;
    const KEPT: u64 = LAST_EOF.div_ceil(PS);
    let dir = tempfile::tempdir().unwrap();
    let pc = Arc::new(cache(96, 2048, quiet()));
    let total = pc.nr_free_pages();
    let (f, _path) = host_file(&pc, &dir, PAGES);
    let f = Arc::new(f);
    let m = Arc::new(f.map(0, PAGES * PS, PRIVATE_RW).unwrap());
    for page in 0..PAGES {
        write_stamp(&m, 0, page, 0).unwrap();
    }
    assert!(pc.vmstat().get(Item::pswpout) > 0, "copies went to swap");
    let done = Arc::new(AtomicBool::new(false));
    // Writer steps made, and writers finished.
    let progress = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));

    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (m, done, progress, finished) = (m.clone(), done.clone(), progress.clone(), finished.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                // Writes that succeeded, and writes past EOF.
                let mut outcomes = [0u64; 2];
                let mut ok_or_eof = |r: pcache::Result<()>, what: &str, page: u64| match r {
                    Ok(()) => outcomes[0] += 1,
                    Err(Error::PastEof { .. }) => outcomes[1] += 1,
                    Err(e) => panic!("writer {t}: {what} page {page}: {e:?}"),
                };
                // Until the last truncate, then as many steps again past
                // it (bounded both ways: a slow truncator only shortens
                // the race).
                let (mut step, mut after) = (0u64, 0u64);
                while after < 300 && step < 200_000 {
                    step += 1;
                    progress.fetch_add(1, Ordering::Relaxed);
                    if done.load(Ordering::Acquire) {
                        after += 1;
                    }
                    let page = rng.gen_range(0..PAGES);
                    match rng.gen_range(0..4) {
                        0 => ok_or_eof(write_stamp(&m, t, page, step), "write_stamp", page),
                        1 => {
                            let w = stamp(t, page, step).to_ne_bytes();
                            ok_or_eof(m.write(page * PS + PS - 8, &w), "Mapping::write", page);
                        }
                        _ => {
                            for off in [0, PS as usize - 8] {
                                match m.load_u64(page, off) {
                                    Ok(w) => assert!(plausible(page, w), "writer {t}: page {page}+{off}: {w:#x}"),
                                    Err(Error::PastEof { .. }) => {}
                                    Err(e) => panic!("writer {t}: load_u64 page {page}: {e:?}"),
                                }
                            }
                        }
                    }
                }
                finished.fetch_add(1, Ordering::Release);
                outcomes
            })
        })
        .collect();

    let truncator = {
        let (f, done) = (f.clone(), done.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(7);
            // Until the writers made `steps` more steps (or all stopped),
            // at most 30 s: an interleaving, never a hang.
            let writers_move = |steps: u64| {
                let (target, start) = (progress.load(Ordering::Relaxed) + steps, Instant::now());
                while progress.load(Ordering::Relaxed) < target
                    && finished.load(Ordering::Acquire) < 3
                    && start.elapsed() < Duration::from_secs(30)
                {
                    std::thread::yield_now();
                }
            };
            for _ in 0..150 {
                f.set_len(rng.gen_range(0..PAGES * PS)).unwrap();
                writers_move(10);
                f.set_len(PAGES * PS).unwrap();
                writers_move(10);
            }
            f.set_len(LAST_EOF).unwrap();
            done.store(true, Ordering::Release);
        })
    };
    truncator.join().expect("the truncator failed");
    let mut outcomes = [0u64; 2];
    for w in writers {
        let [ok, eof] = w.join().expect("a writer failed");
        outcomes = [outcomes[0] + ok, outcomes[1] + eof];
    }
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "writes succeeded and met EOF: {outcomes:?}");

    let vm = pc.vmstat();
    assert!(vm.get(Item::nr_anon_pages) <= KEPT, "copies past EOF are gone: {}", vm.get(Item::nr_anon_pages));
    assert!(vm.get(Item::swap_used_pages) <= KEPT, "their slots too: {}", vm.get(Item::swap_used_pages));
    for page in KEPT..PAGES {
        assert!(matches!(m.load_u64(page, 0), Err(Error::PastEof { .. })), "page {page} is past EOF");
        assert!(matches!(m.page(page), Err(Error::PastEof { .. })), "page {page}: a guard too");
        assert!(matches!(m.write(page * PS, b"x"), Err(Error::PastEof { .. })), "page {page}: no new copy");
    }
    for page in 0..KEPT {
        for off in [0, PS as usize - 8] {
            let w = m.load_u64(page, off).unwrap();
            assert!(plausible(page, w), "page {page}+{off} below EOF: {w:#x}");
        }
    }
    f.set_len(PAGES * PS).unwrap();
    for page in KEPT..PAGES {
        assert_eq!(ends(&m, page), (0, 0), "page {page}: the extension's zeroes, not an old copy");
    }

    let m = Arc::try_unwrap(m).ok().expect("the writers are done");
    drop(m);
    f.set_len(0).unwrap();
    drop(Arc::try_unwrap(f).ok().expect("the truncator is done"));
    pc.lru_add_drain_all();
    // Pages only the LRU still knew are reclaimed when met.
    pc.reclaim(1024);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_anon_pages), 0, "munmap freed every copy");
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no swap slot leaked");
    assert_eq!(vm.get(Item::nr_swapcached), 0);
    assert_eq!(pc.nr_free_pages(), total, "every frame is free again");
}

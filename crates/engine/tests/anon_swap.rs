//! Anonymous memory and swap (the Linux 3.2 reclaim-writeback series): regions from `map_anon`,
//! swap-out and swap-in under pressure, the swap cache and its slots,
//! get_scan_count's balance, reclaim writeback of anonymous pages under
//! 3.1 and 3.2, and errors (no swap, swap-device EIO).

mod common;

use common::delta;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use pcache::backing::{Fault, FaultInjector, FaultOp, MemoryDev};
use pcache::{
    AnonLru, Config, Error, Item, LruList, Madvise, Mapping, MthpSwapout, PageCache, PolicyKind, ReclaimWriteback,
    SwapBacking, SwapConfig, Tunables, VmStat, ANON_MTHP_64K, ANON_MTHP_ALL,
};

const PS: u64 = 4096;

/// kswapd off (reclaim runs in the allocating thread, so counters are
/// the test's own), no file readahead.
fn quiet() -> Tunables {
    Tunables { kswapd: false, ra_pages: 0, ..Tunables::default() }
}

fn cache(pages: u64, swap_pages: u64, t: Tunables) -> PageCache {
    let t = Tunables { swap_bytes: swap_pages * PS, ..t };
    PageCache::new(Config { memory_bytes: pages * PS, tunables: t, ..Config::default() }).unwrap()
}

/// The word every page of the model holds at offset 0 and at its end:
/// region, page and version, so a page swapped in from the wrong slot or
/// a lost write shows.
fn stamp(region: u64, page: u64, version: u64) -> u64 {
    (region << 48) | (page << 20) | version
}

/// How a test maps anonymous memory: in pages, or in mTHP folios of
/// every order that reclaim swaps out whole (6.10) or splits first (6.8).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mthp {
    Off,
    Whole,
    Split,
}

impl Mthp {
    fn tunables(self, t: Tunables) -> Tunables {
        let (anon_mthp_orders, mthp_swapout) = match self {
            Mthp::Off => (0, t.mthp_swapout),
            Mthp::Whole => (ANON_MTHP_ALL, MthpSwapout::Linux6_10),
            Mthp::Split => (ANON_MTHP_ALL, MthpSwapout::Linux6_8),
        };
        Tunables { anon_mthp_orders, mthp_swapout, ..t }
    }
}

/// The mTHP variants of a test that runs as `$with(mthp)`: anonymous
/// folios of every order, swapped out whole (6.10) and split first (6.8);
/// every byte still comes back, and the folios went as the variant says.
macro_rules! mthp_variants {
    ($with:ident, $whole:ident, $split:ident) => {
        #[test]
        fn $whole() {
            assert_folios_swapped(&$with(Mthp::Whole), Mthp::Whole);
        }

        #[test]
        fn $split() {
            assert_folios_swapped(&$with(Mthp::Split), Mthp::Split);
        }
    };
}

/// A run with anonymous mTHP made folios and swapped them out as its
/// variant says: whole (some at least), or every one split first.
fn assert_folios_swapped(vm: &VmStat, mthp: Mthp) {
    let made = vm.get(Item::mthp_anon_fault_alloc);
    let (whole, split) = (vm.get(Item::mthp_swpout), vm.get(Item::thp_split_page));
    match mthp {
        Mthp::Off => {}
        Mthp::Whole => assert!(made > 0 && whole > 0, "{made} anonymous folios made, {whole} swapped out whole"),
        Mthp::Split => assert!(
            made > 0 && split > 0 && whole == 0,
            "{made} anonymous folios made, {split} split, {whole} swapped out whole"
        ),
    }
}

fn write_stamp(m: &Mapping, region: u64, page: u64, version: u64) -> pcache::Result<()> {
    let w = stamp(region, page, version).to_ne_bytes();
    m.write(page * PS, &w)?;
    m.write(page * PS + PS - 8, &w)
}

fn check_stamp(m: &Mapping, region: u64, page: u64, version: u64) {
    let want = if version == 0 { 0 } else { stamp(region, page, version) };
    let p = m.page(page).unwrap();
    assert_eq!(p.load_u64(0).unwrap(), want, "region {region} page {page}: first word");
    assert_eq!(p.load_u64(PS as usize - 8).unwrap(), want, "region {region} page {page}: last word");
}

// Goal: the basics of a region. Untouched pages read as zero, each first
// touch is a fault that takes a frame, a new anonymous page starts on the
// active anon list (3.x), and the guard's reads and writes work as on a
// file mapping.
#[test]
fn first_touch_is_a_zeroed_frame_on_the_active_anon_list() {
    let pc = cache(256, 0, quiet());
    let m = pc.map_anon(16 * PS).unwrap();
    assert!(m.is_anon());
    assert_eq!(m.nr_pages(), 16);
    let before = pc.vmstat();
    for i in 0..16 {
        let p = m.page(i).unwrap();
        assert_eq!(p.load_u64(0).unwrap(), 0);
        let mut buf = vec![1u8; PS as usize];
        p.read_into(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "page {i} starts zero");
    }
    assert_eq!(delta(&pc, &before, Item::pgfault), 16);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 16);
    let mut p = m.page(3).unwrap();
    p.write(100, b"spill").unwrap();
    let mut b = [0u8; 5];
    p.read_into(100, &mut b).unwrap();
    assert_eq!(&b, b"spill");
    drop(p);
    pc.lru_add_drain_all();
    assert_eq!(pc.vmstat().get(Item::nr_active_anon), 16, "new anonymous pages start active");
    assert_eq!(pc.vmstat().get(Item::nr_inactive_anon), 0);
    assert!(matches!(m.page(16), Err(Error::InvalidArgument(_))));
    assert!(matches!(pc.map_anon(0), Err(Error::InvalidArgument(_))));
    let free = pc.nr_free_pages();
    drop(m);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0);
    pc.lru_add_drain_all();
    assert_eq!(pc.vmstat().get(Item::nr_active_anon), 0);
    assert_eq!(pc.nr_free_pages(), free + 16, "dropping the region frees its frames");
}

// Goal: anonymous mTHP as 6.8 maps it. A first touch maps a zeroed folio
// over the aligned range around it (one fault for its 16 pages at 64 KiB),
// counted in nr_anon_pages and the active anon list by pages; a folio
// partly zapped is split at once, its zapped frames freed; a range that is
// no longer empty falls back to single pages; at the end every frame is
// free.
#[test]
fn mthp_first_touch_maps_an_aligned_folio() {
    let pc = cache(1024, 0, Tunables { anon_mthp_orders: ANON_MTHP_64K, ..quiet() });
    let free = pc.nr_free_pages();
    let m = pc.map_anon(64 * PS).unwrap();
    let before = pc.vmstat();
    write_stamp(&m, 3, 21, 1).unwrap();
    assert_eq!(delta(&pc, &before, Item::mthp_anon_fault_alloc), 1);
    for i in 16..32 {
        check_stamp(&m, 3, i, if i == 21 { 1 } else { 0 });
    }
    assert_eq!(delta(&pc, &before, Item::pgfault), 1, "one fault mapped the folio's 16 pages");
    pc.lru_add_drain_all();
    let vm = pc.vmstat();
    assert_eq!((vm.get(Item::nr_anon_pages), vm.get(Item::nr_active_anon)), (16, 16));
    // Two pages zapped: the folio is split (the deferred split, at once),
    // their frames freed, 14 pages still mapped and on the list; touching
    // one again takes a page (its range is not empty).
    let (free0, split0) = (pc.nr_free_pages(), pc.vmstat().get(Item::thp_split_page));
    m.madvise(18 * PS, 2 * PS, Madvise::DontNeed).unwrap();
    pc.lru_add_drain_all();
    assert_eq!(pc.vmstat().get(Item::thp_split_page), split0 + 1, "split");
    let vm = pc.vmstat();
    assert_eq!((vm.get(Item::nr_anon_pages), vm.get(Item::nr_active_anon)), (14, 14));
    assert!(pc.nr_free_pages() >= free0 + 2, "the zapped frames are free");
    check_stamp(&m, 3, 21, 1);
    let before = pc.vmstat();
    write_stamp(&m, 3, 18, 2).unwrap();
    assert_eq!(delta(&pc, &before, Item::mthp_anon_fault_alloc), 0, "no folio over a mapped range");
    assert_eq!(delta(&pc, &before, Item::pgfault), 1);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 15);
    check_stamp(&m, 3, 18, 2);
    check_stamp(&m, 3, 19, 0);
    drop(m);
    assert_eq!(pc.vmstat().get(Item::nr_anon_pages), 0);
    pc.lru_add_drain_all();
    pc.reclaim(1024);
    assert_eq!(pc.nr_free_pages(), free, "every frame is free again");
}

// Goal: anonymous mTHP folios on the multi-gen LRU: aged, sorted, swapped
// out whole and brought back page by page, every byte kept. Method: a
// region 4x memory written and read back twice, as below.
#[test]
fn mthp_swap_round_trip_on_the_multigen_lru() {
    let pc = cache(256, 2048, Mthp::Whole.tunables(Tunables { lru: pcache::LruPolicy::MultiGen, ..quiet() }));
    let m = pc.map_anon(1024 * PS).unwrap();
    for i in 0..1024 {
        write_stamp(&m, 5, i, 1).unwrap();
    }
    for _ in 0..2 {
        for i in (0..1024).rev() {
            check_stamp(&m, 5, i, 1);
        }
    }
    let vm = pc.vmstat();
    assert_folios_swapped(&vm, Mthp::Whole);
    assert!(vm.get(Item::pswpout) > 500 && vm.get(Item::pswpin) > 500, "through swap and back");
}

// Goal: zaps across folios on the multi-gen LRU: each split in place
// keeps the generations' anon count equal to the pages mapped, the data
// of the pages left is intact, and every frame comes back at the end.
// Method: mTHP at 64 and 16 KiB, no swap; a 512-page region touched whole,
// then 40 MADV_DONTNEEDs of random unaligned ranges, each followed by a
// re-touch of a random page and a check against a model.
#[test]
fn mthp_zaps_split_folios_on_the_multigen_lru() {
    let orders = ANON_MTHP_64K | 1 << 2;
    let pc = cache(2048, 0, Tunables { anon_mthp_orders: orders, lru: pcache::LruPolicy::MultiGen, ..quiet() });
    let free = pc.nr_free_pages();
    let m = pc.map_anon(512 * PS).unwrap();
    let mut version = vec![1u64; 512];
    for i in 0..512 {
        write_stamp(&m, 9, i, 1).unwrap();
    }
    let mut rng = StdRng::seed_from_u64(13);
    for round in 0..40u64 {
        let first = rng.gen_range(0..500u64);
        let len = rng.gen_range(1..=12u64).min(512 - first);
        m.madvise(first * PS, len * PS, Madvise::DontNeed).unwrap();
        for i in first..first + len {
            version[i as usize] = 0;
        }
        let i = rng.gen_range(0..512u64);
        check_stamp(&m, 9, i, version[i as usize]);
        version[i as usize] = round + 2;
        write_stamp(&m, 9, i, round + 2).unwrap();
        pc.lru_add_drain_all();
        let mapped = pc.vmstat().get(Item::nr_anon_pages);
        let on_gens: u64 = pc.lru_gen_stats().generations.iter().map(|g| g.nr_pages[0]).sum();
        assert_eq!(on_gens, mapped, "round {round}: the generations hold the mapped pages");
    }
    for i in 0..512u64 {
        check_stamp(&m, 9, i, version[i as usize]);
    }
    assert!(pc.vmstat().get(Item::thp_split_page) > 10, "zaps split folios");
    drop(m);
    pc.lru_add_drain_all();
    pc.reclaim(4096);
    assert_eq!(pc.nr_free_pages(), free, "every frame is free again");
}

// Goal: a region larger than memory keeps every byte through swap-out
// and swap-in. Method: write a stamp to every page of a 4x-memory region,
// then read them all back in a shuffled order, twice; pswpout and pswpin
// show the pages did go to swap and come back.
#[test]
fn region_larger_than_memory_round_trips_through_swap() {
    region_larger_than_memory_round_trips_through_swap_with(Mthp::Off);
}

mthp_variants!(
    region_larger_than_memory_round_trips_through_swap_with,
    region_larger_than_memory_round_trips_through_swap_mthp_whole,
    region_larger_than_memory_round_trips_through_swap_mthp_split
);

fn region_larger_than_memory_round_trips_through_swap_with(mthp: Mthp) -> VmStat {
    let pc = cache(256, 2048, mthp.tunables(quiet()));
    let m = pc.map_anon(1024 * PS).unwrap();
    for i in 0..1024 {
        write_stamp(&m, 1, i, 1).unwrap();
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpout) > 700, "most of the region went to swap: {}", vm.get(Item::pswpout));
    assert!(vm.get(Item::pgscan_anon) > 0 && vm.get(Item::pgsteal_anon) > 0);
    let mut rng = StdRng::seed_from_u64(4);
    for _ in 0..2 {
        let mut order: Vec<u64> = (0..1024).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        for &i in &order {
            check_stamp(&m, 1, i, 1);
        }
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpin) > 700, "pages came back from swap: {}", vm.get(Item::pswpin));
    assert!(vm.get(Item::pgmajfault) > 0);
    assert!(vm.get(Item::swap_used_pages) > 0);
    pc.vmstat()
}

// Goal: anonymous data survives swap-out and swap-in under pressure with
// many threads and file I/O running, checked against a model. Method: 4
// threads each own every 4th page of one region twice the size of memory
// and write new versions of random pages, checking each page's last
// version before writing it; one more thread writes and reads back a file
// (its own model) all along, so file and anonymous pages compete for the
// frames. At the end every page is checked once more.
#[test]
fn anon_data_survives_pressure_from_many_threads_and_file_io() {
    let pc = cache(512, 4096, Tunables { kswapd: true, ra_pages: 8, ..Tunables::default() });
    const PAGES: u64 = 1024;
    const THREADS: u64 = 4;
    let m = Arc::new(pc.map_anon(PAGES * PS).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let file_io = {
        let (pc, stop) = (pc.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = pc.open_memory("beside").unwrap();
            let mut model = vec![0u8; 256];
            let mut rng = StdRng::seed_from_u64(99);
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) && rounds < 20_000 {
                let i = rng.gen_range(0..256u64);
                if rng.gen_bool(0.5) {
                    let v = rng.gen_range(1..=255u8);
                    f.write_at(&[v; PS as usize], i * PS).unwrap();
                    model[i as usize] = v;
                } else if model[i as usize] != 0 {
                    let mut b = vec![0u8; PS as usize];
                    f.read_at(&mut b, i * PS).unwrap();
                    assert!(b.iter().all(|&x| x == model[i as usize]), "file page {i}");
                }
                rounds += 1;
            }
            rounds
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut version = vec![0u64; PAGES as usize];
                for _ in 0..3000 {
                    let i = rng.gen_range(0..PAGES / THREADS) * THREADS + t;
                    check_stamp(&m, 7, i, version[i as usize]);
                    version[i as usize] += 1;
                    write_stamp(&m, 7, i, version[i as usize]).unwrap();
                }
                version
            })
        })
        .collect();
    let versions: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    assert!(file_io.join().unwrap() > 0);
    for (t, version) in versions.iter().enumerate() {
        for i in (t as u64..PAGES).step_by(THREADS as usize) {
            check_stamp(&m, 7, i, version[i as usize]);
        }
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::pswpout) > 0 && vm.get(Item::pswpin) > 0, "swap was used");
}

// Goal: no slot leaks. Swap slots are freed when a region is dropped,
// when MADV_DONTNEED drops a range, and when a swapped-in page is written
// (its copy on swap is stale): after all regions go, swap_used_pages and
// nr_swapcached are 0 and every frame is free again.
#[test]
fn dropping_regions_frees_every_swap_slot() {
    dropping_regions_frees_every_swap_slot_with(Mthp::Off);
}

mthp_variants!(
    dropping_regions_frees_every_swap_slot_with,
    dropping_regions_frees_every_swap_slot_mthp_whole,
    dropping_regions_frees_every_swap_slot_mthp_split
);

fn dropping_regions_frees_every_swap_slot_with(mthp: Mthp) -> VmStat {
    let pc = cache(256, 4096, mthp.tunables(quiet()));
    let total = pc.nr_free_pages();
    let a = pc.map_anon(600 * PS).unwrap();
    let b = pc.map_anon(600 * PS).unwrap();
    for i in 0..600 {
        write_stamp(&a, 1, i, 1).unwrap();
        write_stamp(&b, 2, i, 1).unwrap();
    }
    assert!(pc.vmstat().get(Item::swap_used_pages) > 500);
    // Read some back (they stay in the swap cache, holding their slots),
    // then write a few of those (their slots go).
    for i in 0..64 {
        check_stamp(&a, 1, i, 1);
    }
    let cached = pc.vmstat().get(Item::nr_swapcached);
    let used = pc.vmstat().get(Item::swap_used_pages);
    assert!(cached > 0, "pages read back stay in the swap cache");
    for i in 0..8 {
        write_stamp(&a, 1, i, 2).unwrap();
    }
    assert!(pc.vmstat().get(Item::swap_used_pages) < used, "a write frees the stale slot");
    // DONTNEED frees a range: it reads as zero after.
    b.madvise(0, 300 * PS, Madvise::DontNeed).unwrap();
    check_stamp(&b, 2, 5, 0);
    check_stamp(&b, 2, 305, 1);
    drop(a);
    drop(b);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no slot leaked");
    assert_eq!(vm.get(Item::nr_swapcached), 0);
    assert_eq!(vm.get(Item::nr_anon_pages), 0);
    pc.lru_add_drain_all();
    // Pages only the LRU still knew are reclaimed when met.
    pc.reclaim(1024);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_active_anon) + vm.get(Item::nr_inactive_anon), 0);
    assert_eq!(pc.nr_free_pages(), total, "every frame is free again");
    pc.vmstat()
}

/// One run of the swappiness workload: a region and a file, together
/// larger than memory, both used in turns (the region read through its
/// mapping, the file by read_at), so that reclaim must choose between
/// them and both kinds of page are found in use (rotated) alike. Returns
/// the anon share of pages scanned.
fn anon_scan_share(swappiness: u32, policy: PolicyKind) -> f64 {
    let pc = cache(1024, 4096, Tunables { swappiness, policy, ..quiet() });
    let m = pc.map_anon(600 * PS).unwrap();
    for i in 0..600 {
        write_stamp(&m, 1, i, 1).unwrap();
    }
    let f = pc.open_memory("turns").unwrap();
    f.write_at(&vec![3u8; 600 * PS as usize], 0).unwrap();
    f.fsync().unwrap();
    let before = pc.vmstat();
    let mut buf = vec![0u8; PS as usize];
    for _ in 0..4 {
        for i in 0..600 {
            check_stamp(&m, 1, i, 1);
            // Two reads: the second activates the page (a rotation).
            f.read_at(&mut buf, i * PS).unwrap();
            f.read_at(&mut buf[..8], i * PS + 8).unwrap();
            assert_eq!(buf[0], 3);
        }
    }
    let anon = delta(&pc, &before, Item::pgscan_anon) as f64;
    let file = delta(&pc, &before, Item::pgscan_file) as f64;
    assert!(file > 0.0, "reclaim ran");
    anon / (anon + file)
}

// Goal: swappiness moves reclaim between anon and file as get_scan_count
// says: anon_prio = swappiness against file_prio = 200 - swappiness, each
// weighted by scanned/rotated. With 0 anon weighs 1 against the file's
// 201 (times the rotation ratios), so almost nothing but file is scanned;
// with 100 the two weigh alike and anon takes a large share (measured:
// 0.000 against 0.35).
#[test]
fn swappiness_moves_the_scan_balance() {
    let low = anon_scan_share(0, PolicyKind::Kernel);
    let high = anon_scan_share(100, PolicyKind::Kernel);
    eprintln!("anon share of pgscan: swappiness 0 {low:.3}, 100 {high:.3}");
    assert!(low < 0.05, "swappiness 0: anon share {low:.3}");
    assert!(high > 0.2, "swappiness 100: anon share {high:.3}");
    assert!(high > 5.0 * low.max(0.001), "0: {low:.3}, 100: {high:.3}");
}

// Goal: with a plug-in holding the file pages, reclaim still balances them
// against the kernel's anon lists by get_scan_count: the policy's
// candidates count as file scans, its referenced putbacks and the refaults
// the kernel would have activated as file rotations. Method: the workload
// above under S3-FIFO; the file thrashes (it refaults within the cache's
// size), so at swappiness 100 anon takes a real share, and at 0 almost
// none.
#[test]
fn swappiness_balances_a_plug_ins_file_pages_against_anon() {
    let low = anon_scan_share(0, PolicyKind::S3fifo);
    let high = anon_scan_share(100, PolicyKind::S3fifo);
    eprintln!("S3-FIFO: anon share of pgscan: swappiness 0 {low:.3}, 100 {high:.3}");
    assert!(low < 0.05, "swappiness 0: anon share {low:.3}");
    // Measured 0.12-0.27 (the share follows when the file's refaults
    // come, which the flusher's timing moves).
    assert!(high > 0.05, "swappiness 100: anon share {high:.3}");
    assert!(high > 5.0 * low.max(0.001), "0: {low:.3}, 100: {high:.3}");
}

// Goal: without swap anonymous pages are not reclaimable: reclaim does
// not scan them, and once they fill memory an access that needs a frame
// fails with a typed ENOMEM, within bounded time, losing nothing already
// written.
#[test]
fn no_swap_means_no_anon_reclaim_and_enomem_at_exhaustion() {
    let pc = cache(256, 0, quiet());
    let m = pc.map_anon(512 * PS).unwrap();
    let started = Instant::now();
    let mut written = 0;
    let err = loop {
        match write_stamp(&m, 1, written, 1) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 512, "512 pages cannot fit in 256 frames");
    };
    assert!(matches!(err, Error::NoMemory { .. }), "{err:?}");
    assert_eq!(err.errno(), libc::ENOMEM);
    assert!(started.elapsed() < Duration::from_secs(30), "gave up in bounded time");
    assert!(written > 150, "most of memory was usable: {written}");
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::pgscan_anon), 0, "no swap: anon lists not scanned");
    assert_eq!(vm.get(Item::pswpout), 0);
    for i in 0..written {
        check_stamp(&m, 1, i, 1);
    }
    // Freeing the region makes room again.
    drop(m);
    let m = pc.map_anon(8 * PS).unwrap();
    write_stamp(&m, 2, 0, 1).unwrap();
}

/// Dirty file pages and anonymous pressure under `variant`, reclaim by
/// the allocating threads only. Returns (pswpout, nr_vmscan_write).
fn direct_reclaim_writes(variant: ReclaimWriteback) -> (u64, u64) {
    let t = Tunables { reclaim_writeback: variant, dirty_ratio: 90, dirty_background_ratio: 90, ..quiet() };
    let pc = cache(1024, 4096, t);
    let f = pc.open_memory("dirty").unwrap();
    f.write_at(&vec![9u8; 400 * PS as usize], 0).unwrap();
    let m = pc.map_anon(1200 * PS).unwrap();
    for i in 0..1200 {
        write_stamp(&m, 1, i, 1).unwrap();
    }
    for i in (0..1200).step_by(7) {
        check_stamp(&m, 1, i, 1);
    }
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::pgscan_kswapd), 0, "only direct reclaim ran");
    (vm.get(Item::pswpout), vm.get(Item::nr_vmscan_write))
}

// Goal: the Linux 3.2 reclaim-writeback series' "Anonymous pages are still written": under 3.2 direct
// reclaim writes anonymous pages to swap but never a file page; under 3.1
// it writes both.
#[test]
fn direct_reclaim_writes_anon_pages_but_not_file_pages_under_32() {
    let (swapped, file_written) = direct_reclaim_writes(ReclaimWriteback::Flusher32);
    assert!(swapped > 0, "3.2: direct reclaim swapped anonymous pages out");
    assert_eq!(file_written, 0, "3.2: direct reclaim wrote no file page");
    let (swapped, file_written) = direct_reclaim_writes(ReclaimWriteback::Writepage31);
    assert!(swapped > 0, "3.1: direct reclaim swapped anonymous pages out");
    assert!(file_written > 0, "3.1: direct reclaim wrote dirty file pages itself");
}

/// A cache whose swap is a fault-injecting memory device.
fn faulty_swap(pages: u64, swap_pages: u64, t: Tunables) -> (PageCache, Arc<FaultInjector>) {
    let pc = cache(pages, 0, t);
    let dev = Arc::new(FaultInjector::new(Arc::new(MemoryDev::new("swapdev", PS as usize))));
    pc.swapon(SwapConfig { size_bytes: swap_pages * PS, backing: SwapBacking::Dev(dev.clone()) }).unwrap();
    assert!(matches!(pc.swapon(SwapConfig::memory(PS * 16)), Err(Error::InvalidArgument(_))), "one swap device");
    (pc, dev)
}

// Goal: a swap read error reaches the accessor that faulted, as a typed
// EIO (the kernel's SIGBUS), and loses nothing: the page's data stays on
// swap and the next access reads it; every other page is intact.
#[test]
fn swap_read_eio_reaches_the_faulting_accessor_and_loses_nothing() {
    let (pc, dev) = faulty_swap(256, 2048, Tunables { page_cluster: 0, ..quiet() });
    let m = pc.map_anon(1024 * PS).unwrap();
    for i in 0..1024 {
        write_stamp(&m, 3, i, 1).unwrap();
    }
    assert!(pc.vmstat().get(Item::pswpout) > 700);
    // The next swap read fails. Most early pages went to swap long ago,
    // but which ones is not fixed: a page whose LRU batch sat on another
    // CPU (the test thread migrated) may still be resident, and touching
    // it reads nothing. So walk from page 0 to the first access that
    // reads swap; it must come early and be the one that fails.
    dev.fail_next(FaultOp::Read, Fault::Eio, 1);
    let pswpin = pc.vmstat().get(Item::pswpin);
    let (failed, err) =
        (0..512u64).find_map(|i| m.page(i).err().map(|e| (i, e))).expect("no access in the first 512 pages read swap");
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(dev.faults_injected(), 1);
    assert_eq!(pc.vmstat().get(Item::pswpin), pswpin, "pages before {failed} were resident: no swap read succeeded");
    // The data was not lost: the next access reads it.
    check_stamp(&m, 3, failed, 1);
    for i in 0..1024 {
        check_stamp(&m, 3, i, 1);
    }
}

// Goal: a swap write error loses nothing either: the page stays in
// memory, dirty, and reclaim goes on with other pages; with every write
// failing the region fills memory and an access gets ENOMEM, never a
// hang; once the device works again everything swaps and checks out.
#[test]
fn swap_write_eio_keeps_pages_in_memory() {
    let (pc, dev) = faulty_swap(256, 2048, quiet());
    let m = pc.map_anon(1024 * PS).unwrap();
    dev.fail_always(FaultOp::Write, Fault::Eio);
    let started = Instant::now();
    let mut written = 0;
    let err = loop {
        match write_stamp(&m, 4, written, 1) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 1024, "nothing could be swapped out");
    };
    assert!(matches!(err, Error::NoMemory { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let vm = pc.vmstat();
    assert!(vm.get(Item::swap_write_errors) > 0);
    assert_eq!(vm.get(Item::pswpout), 0);
    for i in 0..written {
        check_stamp(&m, 4, i, 1);
    }
    dev.clear();
    for i in written..1024 {
        write_stamp(&m, 4, i, 1).unwrap();
    }
    assert!(pc.vmstat().get(Item::pswpout) > 0);
    for i in 0..1024 {
        check_stamp(&m, 4, i, 1);
    }
}

// Goal: 6.10's whole-folio swap-out, and a folio's life in the swap cache.
// Reclaim swaps mTHP folios out whole, never splitting one, and they come
// back page by page. A folio whose write failed stays in the swap cache,
// unmapped: faults map its frames from there (minor, no read), and a write
// to one leaves it in the cache, dirty, while its other frames are on swap.
// When the device works again, reclaim writes it whole and every byte is
// right. At the end no slot, swap-cache page or frame is left.
#[test]
fn mthp_folios_swap_out_whole_and_fault_back_from_the_swap_cache() {
    let (pc, dev) = faulty_swap(256, 4096, Mthp::Whole.tunables(quiet()));
    let total = pc.nr_free_pages();
    let a = pc.map_anon(1024 * PS).unwrap();
    for i in 0..1024 {
        write_stamp(&a, 1, i, 1).unwrap();
    }
    let vm = pc.vmstat();
    let whole = vm.get(Item::mthp_swpout);
    assert!(whole > 0, "folios swapped out whole");
    assert_eq!(vm.get(Item::thp_split_page), 0, "no folio split");
    assert_eq!(vm.get(Item::mthp_swpout_fallback), 0, "a free aligned run for every folio");
    assert!(vm.get(Item::pswpout) >= 16 * whole, "each folio's pages written");
    for i in 0..1024 {
        check_stamp(&a, 1, i, 1);
    }
    // Writes fail: the second region's folios go into the swap cache and
    // are unmapped, but their writes fail and they stay, dirty.
    dev.fail_always(FaultOp::Write, Fault::Eio);
    let b = pc.map_anon(512 * PS).unwrap();
    let mut written = 0;
    while written < 512 && write_stamp(&b, 2, written, 1).is_ok() {
        written += 1;
    }
    assert!(pc.vmstat().get(Item::swap_write_errors) > 0);
    assert!(pc.vmstat().get(Item::nr_swapcached) >= 16, "failed folios stay in the swap cache");
    let before = pc.vmstat();
    for i in 0..written {
        check_stamp(&b, 2, i, 1);
    }
    assert!(delta(&pc, &before, Item::swap_ra_hit) > 0, "frames mapped from swap-cache folios");
    // A write to a frame of such a folio: the folio stays whole and dirty.
    for i in (0..written).step_by(7) {
        write_stamp(&b, 2, i, 2).unwrap();
    }
    dev.clear();
    for i in 0..1024 {
        write_stamp(&a, 1, i, 3).unwrap();
    }
    for i in 0..written {
        check_stamp(&b, 2, i, if i % 7 == 0 { 2 } else { 1 });
    }
    for i in 0..1024 {
        check_stamp(&a, 1, i, 3);
    }
    assert!(pc.vmstat().get(Item::mthp_swpout) > whole);
    drop(a);
    drop(b);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no slot leaked");
    assert_eq!(vm.get(Item::nr_swapcached), 0);
    assert_eq!(vm.get(Item::nr_anon_pages), 0);
    pc.lru_add_drain_all();
    pc.reclaim(1024);
    assert_eq!(pc.nr_free_pages(), total, "every frame is free again");
}

// Goal: with no free aligned run of slots, a folio is split and its pages
// swapped (mthp_swpout_fallback), losing nothing. Method: 40 slots, so
// each 64 KiB folio finds at most two free runs of 16 and later ones fall
// back.
#[test]
fn mthp_swap_out_falls_back_to_pages_without_a_free_run() {
    let pc = cache(64, 40, Tunables { anon_mthp_orders: ANON_MTHP_64K, ..quiet() });
    let m = pc.map_anon(96 * PS).unwrap();
    for i in 0..96 {
        write_stamp(&m, 6, i, 1).unwrap();
    }
    for _ in 0..2 {
        for i in 0..96 {
            check_stamp(&m, 6, i, 1);
        }
    }
    let vm = pc.vmstat();
    assert!(vm.get(Item::mthp_swpout_fallback) > 0, "no free run: split");
    assert!(vm.get(Item::thp_split_page) > 0);
    assert!(vm.get(Item::pswpout) > 0 && vm.get(Item::pswpin) > 0);
}

// Goal: swap readahead reads the aligned 2^page_cluster block around a
// fault, so neighbours swapped out together come back in one read and
// their faults find them in the swap cache (minor faults).
#[test]
fn swapin_readahead_reads_the_cluster_around_a_fault() {
    let pc = cache(256, 2048, quiet());
    let m = pc.map_anon(1024 * PS).unwrap();
    for i in 0..1024 {
        write_stamp(&m, 5, i, 1).unwrap();
    }
    let before = pc.vmstat();
    for i in 0..64 {
        check_stamp(&m, 5, i, 1);
    }
    let ra = delta(&pc, &before, Item::swap_ra);
    let hits = delta(&pc, &before, Item::swap_ra_hit);
    let major = delta(&pc, &before, Item::pgmajfault);
    assert!(ra > 0 && hits > 0, "readahead read neighbours ({ra}) that faults found ({hits})");
    assert!(major <= 64 / 4, "about one major fault per 8 pages: {major}");
    // page-cluster 0: one page per fault.
    pc.sysctl_write("page-cluster", "0").unwrap();
    let before = pc.vmstat();
    for i in 512..576 {
        check_stamp(&m, 5, i, 1);
    }
    assert_eq!(delta(&pc, &before, Item::swap_ra), 0);
}

// Goal: anon pages are on their own lists and age as 3.x ages them:
// with swap on, the inactive anon list is refilled from the active one
// (inactive_anon_is_low) and only inactive pages are swapped out.
#[test]
fn anon_lists_are_aged_only_with_swap() {
    let pc = cache(1024, 0, quiet());
    let m = pc.map_anon(600 * PS).unwrap();
    for i in 0..600 {
        write_stamp(&m, 6, i, 1).unwrap();
    }
    pc.lru_add_drain_all();
    pc.reclaim(64);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::nr_inactive_anon), 0, "no swap: anon pages are not aged");
    assert_eq!(vm.get(Item::nr_active_anon), 600);
    let snap = pc.lru_snapshot(LruList::ActiveAnon);
    assert_eq!(snap.len(), 600);

    let pc = cache(1024, 4096, quiet());
    let m = pc.map_anon(600 * PS).unwrap();
    for i in 0..600 {
        write_stamp(&m, 6, i, 1).unwrap();
    }
    pc.lru_add_drain_all();
    pc.reclaim(64);
    let vm = pc.vmstat();
    assert!(vm.get(Item::nr_inactive_anon) > 0, "with swap the inactive anon list is refilled");
    assert!(vm.get(Item::pgdeactivate) > 0);
}

/// ARCHITECTURE.md's spill-to-disk hash table, as written there.
struct SpillTable {
    region: Mapping,
    buckets: u64,
}

impl SpillTable {
    const SLOTS: usize = 4096 / 16;

    fn new(cache: &PageCache, buckets: u64) -> pcache::Result<SpillTable> {
        Ok(SpillTable { region: cache.map_anon(buckets * 4096)?, buckets })
    }

    fn insert(&self, key: u64, value: u64) -> pcache::Result<bool> {
        let mut page = self.region.page(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.buckets)?;
        for slot in 0..Self::SLOTS {
            let k = page.load_u64(slot * 16)?;
            if k == 0 || k == key {
                let mut pair = [0u8; 16];
                pair[..8].copy_from_slice(&key.to_ne_bytes());
                pair[8..].copy_from_slice(&value.to_ne_bytes());
                page.write(slot * 16, &pair)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn get(&self, key: u64) -> pcache::Result<Option<u64>> {
        let page = self.region.page(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.buckets)?;
        for slot in 0..Self::SLOTS {
            match page.load_u64(slot * 16)? {
                0 => return Ok(None),
                k if k == key => return Ok(Some(page.load_u64(slot * 16 + 8)?)),
                _ => {}
            }
        }
        Ok(None)
    }
}

// Goal: the embedder's use case works as documented: a hash table in a
// region four times the cache, on a swap file on the host, agrees with
// a std HashMap after inserts and updates that spill it to swap.
#[test]
fn spill_table_on_a_swap_file_agrees_with_a_hashmap() {
    let dir = tempfile::tempdir().unwrap();
    let pc = cache(256, 0, quiet());
    pc.swapon(SwapConfig::file(dir.path().join("engine.swap"), 2048 * PS)).unwrap();
    let table = SpillTable::new(&pc, 1024).unwrap();
    let mut model = std::collections::HashMap::new();
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..6000 {
        let key = rng.gen_range(1..3000u64);
        let value = rng.gen::<u64>();
        assert!(table.insert(key, value).unwrap());
        model.insert(key, value);
    }
    assert!(pc.vmstat().get(Item::pswpout) > 0, "the table spilled to the swap file");
    for key in 0..3000u64 {
        assert_eq!(table.get(key).unwrap(), model.get(&key).copied(), "key {key}");
    }
    drop(table);
    assert_eq!(pc.vmstat().get(Item::swap_used_pages), 0);
}

/// Write a region of `pages` in a cache of 256 frames under `anon_lru`,
/// then read it round three times. Returns the vmstat at the end and the
/// active/inactive split right after the first page was written.
fn anon_lru_run(anon_lru: AnonLru, pages: u64) -> (VmStat, (u64, u64)) {
    let pc = cache(256, 4096, Tunables { anon_lru, ..quiet() });
    let m = pc.map_anon(pages * PS).unwrap();
    for i in 0..16 {
        write_stamp(&m, 8, i, 1).unwrap();
    }
    pc.lru_add_drain_all();
    let vm = pc.vmstat();
    let split = (vm.get(Item::nr_active_anon), vm.get(Item::nr_inactive_anon));
    for i in 16..pages {
        write_stamp(&m, 8, i, 1).unwrap();
    }
    for _ in 0..3 {
        for i in 0..pages {
            check_stamp(&m, 8, i, 1);
        }
    }
    (pc.vmstat(), split)
}

// Goal: the selectable 5.9+ rules. Under `AnonLru::Linux3` new anonymous
// pages start active and swap-outs leave no shadow; under `Linux5_9` they
// start inactive, each swap-out leaves a shadow in the swap cache, and
// swap-ins within the workingset's reach are activated at once
// (workingset_activate_anon). Data is intact either way.
#[test]
fn anon_lru_rules_3x_against_59() {
    let (vm3, split3) = anon_lru_run(AnonLru::Linux3, 320);
    assert_eq!(split3, (16, 0), "3.x: new anonymous pages start active");
    assert_eq!(vm3.get(Item::workingset_refault_anon), 0);
    let (vm59, split59) = anon_lru_run(AnonLru::Linux5_9, 320);
    assert_eq!(split59, (0, 16), "5.9: new anonymous pages start inactive");
    assert!(vm59.get(Item::workingset_refault_anon) > 0, "swap-ins found shadows");
    assert!(vm59.get(Item::workingset_activate_anon) > 0, "some refaults were activated");
    eprintln!(
        "refaults {} activated {} (3.x pswpin {}, 5.9 pswpin {})",
        vm59.get(Item::workingset_refault_anon),
        vm59.get(Item::workingset_activate_anon),
        vm3.get(Item::pswpin),
        vm59.get(Item::pswpin)
    );
}

// Goal: threads that fault, write and swap the same pages at once never
// lose a write or see another page's bytes. Method: 4 threads share one
// region three times the cache; each owns one word in every page and
// writes new values to random pages, checking first that its word holds
// the last value it wrote, while kswapd and direct reclaim swap pages
// out under them (racing first-touch faults, swap-ins of one slot and
// write faults on one page).
#[test]
fn threads_sharing_pages_never_lose_a_write() {
    threads_sharing_pages_never_lose_a_write_with(Mthp::Off);
}

mthp_variants!(
    threads_sharing_pages_never_lose_a_write_with,
    threads_sharing_pages_never_lose_a_write_mthp_whole,
    threads_sharing_pages_never_lose_a_write_mthp_split
);

fn threads_sharing_pages_never_lose_a_write_with(mthp: Mthp) -> VmStat {
    let pc = cache(256, 4096, mthp.tunables(Tunables { kswapd: true, ..quiet() }));
    const PAGES: u64 = 768;
    let m = Arc::new(pc.map_anon(PAGES * PS).unwrap());
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(40 + t);
                let mut last = vec![0u64; PAGES as usize];
                let off = (t * 8 + 512) as usize;
                for n in 1..=15_000u64 {
                    let i = rng.gen_range(0..PAGES);
                    let mut p = m.page(i).unwrap();
                    assert_eq!(p.load_u64(off).unwrap(), last[i as usize], "thread {t} page {i}");
                    let v = (t << 56) | (i << 32) | n;
                    p.write(off, &v.to_ne_bytes()).unwrap();
                    last[i as usize] = v;
                }
                last
            })
        })
        .collect();
    let lasts: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for (t, last) in lasts.iter().enumerate() {
        for i in 0..PAGES {
            let p = m.page(i).unwrap();
            assert_eq!(p.load_u64(t * 8 + 512).unwrap(), last[i as usize], "thread {t} page {i} at the end");
        }
    }
    assert!(pc.vmstat().get(Item::pswpin) > 0);
    pc.vmstat()
}

// Goal: MADV_DONTNEED racing faults, writes and swap-out corrupts
// nothing and leaks nothing. Method: 3 threads write their own word of
// random pages (each word holds the last value written or, after a
// DONTNEED of its range, zero) while a fourth drops random ranges; at the
// end the region is dropped and no swap slot, swap-cache page or mapped
// page is left.
#[test]
fn dontneed_racing_access_and_swap_leaks_nothing() {
    dontneed_racing_access_and_swap_leaks_nothing_with(Mthp::Off);
}

mthp_variants!(
    dontneed_racing_access_and_swap_leaks_nothing_with,
    dontneed_racing_access_and_swap_leaks_nothing_mthp_whole,
    dontneed_racing_access_and_swap_leaks_nothing_mthp_split
);

fn dontneed_racing_access_and_swap_leaks_nothing_with(mthp: Mthp) -> VmStat {
    let pc = cache(256, 4096, mthp.tunables(Tunables { kswapd: true, ..quiet() }));
    const PAGES: u64 = 640;
    let m = Arc::new(pc.map_anon(PAGES * PS).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let dropper = {
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(77);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 100_000 {
                let first = rng.gen_range(0..PAGES - 16);
                m.madvise(first * PS, 16 * PS, Madvise::DontNeed).unwrap();
                n += 1;
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(60 + t);
                let mut last = vec![0u64; PAGES as usize];
                let off = (t * 8) as usize;
                for n in 1..=8000u64 {
                    let i = rng.gen_range(0..PAGES);
                    let mut p = m.page(i).unwrap();
                    let v = p.load_u64(off).unwrap();
                    assert!(v == last[i as usize] || v == 0, "thread {t} page {i}: {v:#x}");
                    let new = (t << 56) | (i << 32) | n;
                    p.write(off, &new.to_ne_bytes()).unwrap();
                    last[i as usize] = new;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    dropper.join().unwrap();
    assert!(pc.vmstat().get(Item::pswpout) > 0, "pages went to swap meanwhile");
    drop(m);
    let vm = pc.vmstat();
    assert_eq!(vm.get(Item::swap_used_pages), 0, "no slot leaked");
    assert_eq!(vm.get(Item::nr_swapcached), 0);
    assert_eq!(vm.get(Item::nr_anon_pages), 0);
    pc.vmstat()
}

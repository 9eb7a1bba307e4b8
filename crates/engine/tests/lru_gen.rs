//! The multi-gen LRU, validated against the kernel's algorithm
//! (the host runs with CONFIG_LRU_GEN off, so there is no kernel column).
//! Each expectation says where it comes from: Documentation/mm/
//! multigen_lru.rst ("doc"), or the function of mm/vmscan.c,
//! mm/workingset.c, mm/swap.c or include/linux/mm_inline.h (Linux 6.1.y)
//! that produces it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::pin_to_cpu0;
use pcache::{Config, Error, File, Item, LruPolicy, PageCache, Tunables};

const PS: u64 = 4096;

fn mglru(pages: u64, t: Tunables) -> PageCache {
    let tunables = Tunables { lru: LruPolicy::MultiGen, ..t };
    PageCache::new(Config { memory_bytes: pages * PS, tunables, ..Config::default() }).unwrap()
}

/// No readahead, no kswapd: each read touches one page and nothing ages
/// or evicts behind the test's back.
fn quiet() -> Tunables {
    Tunables { ra_pages: 0, kswapd: false, ..Tunables::default() }
}

fn read_page(f: &File, i: u64) {
    let mut buf = [0u8; PS as usize];
    assert_eq!(f.read_at(&mut buf, i * PS).unwrap(), PS as usize);
}

fn file(cache: &PageCache, name: &str, pages: u64) -> File {
    let f = cache.open_memory(name).unwrap();
    f.set_len(pages * PS).unwrap();
    f
}

fn cached(f: &File, range: std::ops::Range<u64>) -> usize {
    range.filter(|&i| f.page_state(i).is_some()).count()
}

// Goal: the state a cache starts in and where a page read through a file
// descriptor lands. lru_gen_init_lruvec: max_seq = MIN_NR_GENS + 1 = 3,
// min_seq = 0 for both types (four generations, 0..=3). lru_gen_add_folio:
// a clean, inactive file page goes to min_seq[file] = 0. The first access
// sets PG_referenced only (folio_inc_refs), so refs = 0, tier 0. The
// enabled bits are LRU_GEN_CORE | LRU_GEN_MM_WALK (0x0003).
#[test]
fn start_state_and_placement() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    assert_eq!(cache.lru_gen_enabled(), 0x3);
    let st = cache.lru_gen_stats();
    assert_eq!((st.max_seq, st.min_seq), (3, [0, 0]));
    let f = file(&cache, "a", 4);
    read_page(&f, 0);
    cache.lru_add_drain_all();
    let p = f.lru_gen_page(0).expect("on a generation");
    assert_eq!((p.seq, p.gen, p.refs, p.tier, p.referenced, p.workingset), (0, 0, 0, 0, true, false));
    assert_eq!(cache.lru_gen_snapshot(0, 1), vec![("memory:a".to_string(), 0)]);
    // Counted as the kernel does for compatibility: seq 0 is not one of
    // the two youngest (3 and 2), so the page is "inactive".
    let vm = cache.vmstat();
    assert_eq!((vm.get(Item::nr_inactive_file), vm.get(Item::nr_active_file)), (1, 0));
    // A Classic cache refuses the switches (no CONFIG_LRU_GEN).
    let classic = PageCache::new(Config { memory_bytes: 256 * PS, tunables: quiet(), ..Config::default() }).unwrap();
    assert_eq!(classic.lru_gen_enabled(), 0);
    assert!(matches!(classic.lru_gen_set_enabled(7), Err(Error::InvalidConfig(_))));
}

// Goal: tiers step by step. doc: "a page accessed N times through file
// descriptors is in tier order_base_2(N)". folio_inc_refs: access 1 sets
// PG_referenced, 2 sets PG_workingset, 3..5 count in the 2-bit field
// (refs = counter + PG_workingset = N - 1, folio_lru_refs); from the 6th
// on the field is full and nothing is written. Marking takes no lock:
// lru_lock is never acquired and, once full, no atomic RMW is made.
#[test]
fn tiers_step_by_step() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "t", 1);
    read_page(&f, 0);
    cache.lru_add_drain_all();
    // (N, refs, tier, referenced, workingset) after the Nth read.
    let expect = [
        (1, 0, 0, true, false),
        (2, 1, 1, true, true),
        (3, 2, 2, true, true),
        (4, 3, 2, true, true),
        (5, 4, 3, true, true),
        (6, 4, 3, true, true),
        (7, 4, 3, true, true),
    ];
    for &(n, refs, tier, referenced, workingset) in &expect {
        let before = cache.vmstat();
        if n > 1 {
            read_page(&f, 0);
        }
        let d = cache.vmstat().delta(&before);
        let p = f.lru_gen_page(0).unwrap();
        assert_eq!((p.refs, p.tier, p.referenced, p.workingset), (refs, tier, referenced, workingset), "read {n}");
        assert_eq!(p.seq, 0, "marking never moves a page between generations");
        if n > 1 {
            assert_eq!(d.get(Item::lru_lock_acquire), 0, "read {n} took lru_lock");
            let rmw = if n >= 6 { 0 } else { 1 };
            assert_eq!(d.get(Item::atomic_flag_rmw), rmw, "read {n}: flag RMWs");
        }
    }
}

// Goal: aging step by step. run_aging (debugfs `+`): seq below max_seq
// is a no-op; above it EINVAL; with MAX_NR_GENS generations already and
// no force_scan, ERANGE (min_seq + MAX_NR_GENS - 1 <= max_seq). With
// force_scan, inc_max_seq first folds the oldest generation of each type
// that has four (inc_min_seq: its pages go to min_seq + 1 by
// folio_inc_gen, their PG_referenced, PG_workingset and counter cleared),
// then max_seq becomes 4. A second aging (five would be too many again)
// folds seq 1 into 2.
#[test]
fn aging_step_by_step() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "g", 2);
    read_page(&f, 0);
    read_page(&f, 0);
    read_page(&f, 1);
    cache.lru_add_drain_all();
    assert_eq!(f.lru_gen_page(0).unwrap().refs, 1);
    cache.lru_gen_run_aging(2, false, false).unwrap();
    assert_eq!(cache.lru_gen_stats().max_seq, 3, "seq < max_seq: nothing");
    assert!(matches!(cache.lru_gen_run_aging(4, false, false), Err(Error::InvalidArgument(_))), "EINVAL");
    assert!(matches!(cache.lru_gen_run_aging(3, false, false), Err(Error::InvalidArgument(_))), "ERANGE");
    cache.lru_gen_write("+ 0 0 3 0 1").unwrap();
    let st = cache.lru_gen_stats();
    assert_eq!((st.max_seq, st.min_seq), (4, [1, 1]));
    for i in 0..2 {
        let p = f.lru_gen_page(i).unwrap();
        assert_eq!((p.seq, p.refs, p.referenced, p.workingset), (1, 0, false, false), "page {i}");
    }
    // A read now counts from scratch.
    read_page(&f, 0);
    assert_eq!(f.lru_gen_page(0).unwrap().tier, 0);
    cache.lru_gen_run_aging(4, false, true).unwrap();
    let st = cache.lru_gen_stats();
    assert_eq!((st.max_seq, st.min_seq), (5, [2, 2]));
    assert_eq!(f.lru_gen_page(1).unwrap().seq, 2);
    assert_eq!(cache.vmstat().get(Item::lru_gen_aging), 2);
    // The dump in the kernel's format: one line per generation from
    // min_seq[anon]: seq, age in ms, anon pages, file pages.
    let dump = cache.lru_gen_dump(false);
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines[0], "memcg     0 ");
    assert_eq!(lines[1], " node     0");
    let gens: Vec<Vec<u64>> =
        lines[2..].iter().map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect()).collect();
    let seqs: Vec<u64> = gens.iter().map(|g| g[0]).collect();
    assert_eq!(seqs, [2, 3, 4, 5]);
    assert_eq!((gens[0][2], gens[0][3]), (0, 2), "seq 2 holds the two file pages");
    // The full form adds four tier lines and an mm-walk line per
    // generation, for the four generations from max_seq - 3.
    assert_eq!(cache.lru_gen_dump(true).lines().count(), 2 + 4 * 6);
}

// Goal: eviction from the oldest generation, step by step. With no
// refaults yet, get_tier_idx finds every tier's refault rate no worse than
// tier 0's (fewer than MIN_LRU_BATCH refaults: positive_ctrl_err), so the
// tier index is 3 and no tier is protected by the controller; sort_folio
// still protects a page whose counter is full (refs == BIT(LRU_REFS_WIDTH),
// 6.1.y): it goes to min_seq + 1 with its count cleared and counts in
// protected[tier 3 - 1]. The others are evicted, each counted in
// evicted[tier] (lru_gen_eviction). run_eviction (debugfs `-`) refuses a
// seq that would leave fewer than MIN_NR_GENS generations (EINVAL).
#[test]
fn eviction_step_by_step() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "e", 5);
    // Page i is read i + 1 times: refs 0, 1, 2, 3, 4; tiers 0, 1, 2, 2, 3.
    for i in 0..5 {
        for _ in 0..=i {
            read_page(&f, i);
        }
    }
    assert!(matches!(cache.lru_gen_run_eviction(2, 0, 100), Err(Error::InvalidArgument(_))));
    let reclaimed = cache.lru_gen_run_eviction(0, 0, 100).unwrap();
    assert_eq!(reclaimed, 4);
    assert_eq!(cached(&f, 0..4), 0);
    let p = f.lru_gen_page(4).expect("protected");
    assert_eq!((p.seq, p.refs, p.referenced), (1, 0, false));
    let st = cache.lru_gen_stats();
    // evict_folios isolates, then calls try_to_inc_min_seq, which retires
    // the emptied generation 0 (reset_ctrl_pos carries half of its counts,
    // protected[2] = 1, into the averages: 1 / 2 = 0, NR_HIST_GENS = 1),
    // and only then reclaims the isolated pages: their evictions count in
    // the new oldest generation's counters, tiers 0, 1, 2, 2.
    assert_eq!(st.min_seq[1], 1);
    assert_eq!(st.avg_total[1], [0, 0, 0, 0]);
    assert_eq!(st.evicted[1], [1, 1, 2, 0]);
    assert_eq!(st.protected[1], [0, 0, 0, 0], "cleared with the carry-over");
    assert_eq!(cache.vmstat().get(Item::lru_gen_protected), 1);
    assert_eq!(cache.vmstat().get(Item::pgsteal_file), 4);
}

// Goal: the refault feedback decides protection (the PID controller).
// 300 pages in generation 0: even ones read once (tier 0), odd ones twice
// (tier 1). Evicting 256 of them (four batches of MIN_LRU_BATCH = 64 from
// the tail, i.e. pages 0..256) counts evicted[file] = [128, 128, 0, 0].
// Re-reading the 128 odd pages evicted while generation 0 is still the
// oldest counts 128 refaults of tier 1 (lru_gen_refault: the shadow's
// min_seq matches; refs = 0 + PG_workingset = 1). Then tier 1's rate
// 128/128 beats tier 0's 0/128 by far: positive_ctrl_err(sp = tier 0,
// pv = tier 1, gains 1:2) is false (128 * (128 + 64) * 1 > (0 + 1) * 128 *
// 2), so get_tier_idx returns 0 and sort_folio protects tier 1: the rest
// of generation 0's odd pages (257..299) move to seq 1, and the even ones
// are evicted.
#[test]
fn refault_feedback_protects_tier() {
    pin_to_cpu0();
    let cache = mglru(1024, quiet());
    let f = file(&cache, "r", 300);
    for i in 0..300 {
        read_page(&f, i);
        if i % 2 == 1 {
            read_page(&f, i);
        }
    }
    let reclaimed = cache.lru_gen_run_eviction(0, 0, 200).unwrap();
    assert_eq!(reclaimed, 256);
    assert_eq!(cached(&f, 0..256), 0);
    let st = cache.lru_gen_stats();
    assert_eq!(st.min_seq[1], 0, "generation 0 still holds pages 256..299");
    assert_eq!(st.evicted[1], [128, 128, 0, 0]);
    for i in (1..256).step_by(2) {
        read_page(&f, i);
    }
    let st = cache.lru_gen_stats();
    assert_eq!(st.refaulted[1], [0, 128, 0, 0]);
    assert_eq!(cache.vmstat().get(Item::lru_gen_refault_recent), 128);
    // Evict what is left of generation 0 (and the refaulted pages, which
    // came back to it at tier 0 and are evicted with the even ones).
    cache.lru_gen_run_eviction(0, 0, u64::MAX).unwrap();
    for i in 257..300 {
        let expect_cached = i % 2 == 1;
        assert_eq!(f.page_state(i).is_some(), expect_cached, "page {i}");
        if expect_cached {
            let p = f.lru_gen_page(i).unwrap();
            assert_eq!((p.seq, p.refs), (1, 0), "page {i} protected into seq 1, count cleared");
        }
    }
    assert_eq!(cache.vmstat().get(Item::lru_gen_protected), 22);
    // Without the refaults (same reads, no re-read), nothing is protected.
    let cache = mglru(1024, quiet());
    let f = file(&cache, "r", 300);
    for i in 0..300 {
        read_page(&f, i);
        if i % 2 == 1 {
            read_page(&f, i);
        }
    }
    cache.lru_gen_run_eviction(0, 0, u64::MAX).unwrap();
    assert_eq!(cached(&f, 0..300), 0);
    assert_eq!(cache.vmstat().get(Item::lru_gen_protected), 0);
}

// Goal: min_ttl_ms. lru_gen_age_node: while the oldest generation is
// younger than min_ttl, reclaim does not evict (the kernel OOM-kills;
// pcache's allocation fails with ENOMEM after its bounded retries). Once
// the generation is old enough, or min_ttl is 0, reclaim proceeds.
#[test]
fn min_ttl_protects_young_generations() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    cache.lru_gen_set_min_ttl_ms(60_000);
    assert_eq!(cache.lru_gen_min_ttl_ms(), 60_000);
    let ws = file(&cache, "ws", 150);
    for i in 0..150 {
        read_page(&ws, i);
    }
    let big = file(&cache, "big", 400);
    let mut buf = vec![0u8; PS as usize];
    let err = (0..400).map(|i| big.read_at(&mut buf, i * PS)).find_map(|r| r.err());
    assert!(matches!(err, Some(Error::NoMemory { .. })), "{err:?}");
    assert!(cache.vmstat().get(Item::lru_gen_min_ttl_oom) > 0);
    assert_eq!(cached(&ws, 0..150), 150, "the young working set stayed");
    assert_eq!(cache.reclaim(32), 0);
    // Old enough: 50 ms since the generations were made (cache start).
    cache.lru_gen_set_min_ttl_ms(50);
    std::thread::sleep(Duration::from_millis(60));
    assert!(cache.reclaim(32) > 0);
    cache.lru_gen_set_min_ttl_ms(0);
    for i in 0..400 {
        read_page(&big, i);
    }
}

/// Rounds of: read the working set once, then stream `stream` new pages
/// once. Returns the working set's cached fraction at the start of each
/// round.
fn working_set_rounds(cache: &PageCache, ws: &[File], ws_pages: u64, stream: u64, rounds: u64) -> Vec<f64> {
    let s = file(cache, "stream", stream * rounds);
    let total = ws.len() as u64 * ws_pages;
    let mut out = Vec::new();
    for r in 0..rounds {
        let c: usize = ws.iter().map(|f| cached(f, 0..ws_pages)).sum();
        out.push(c as f64 / total as f64);
        for f in ws {
            for i in 0..ws_pages {
                read_page(f, i);
            }
        }
        for i in r * stream..(r + 1) * stream {
            read_page(&s, i);
        }
    }
    out
}

// Goal: the seeds' guarantee, under MGLRU: a use-once stream does not
// flush the working set. A working set of 300 pages in a 1024-page cache
// is read once a round; between rounds 600 new pages stream through once.
// The stream's pages stay in tier 0 and never refault; the working set's
// are in tier 1 from their second read and refault when evicted, so the
// controller protects tier 1 (get_tier_idx = 0) and the stream is
// evicted instead. After the first rounds, at least 90% of the working set
// is cached at each round's start.
#[test]
fn use_once_stream_does_not_flush_working_set() {
    pin_to_cpu0();
    let cache = mglru(1024, quiet());
    let ws = [file(&cache, "ws", 300)];
    let frac = working_set_rounds(&cache, &ws, 300, 600, 10);
    eprintln!("working set cached per round: {frac:?}");
    for (r, &x) in frac.iter().enumerate().skip(5) {
        assert!(x >= 0.9, "round {r}: only {:.0}% of the working set cached ({frac:?})", x * 100.0);
    }
    assert!(cache.vmstat().get(Item::lru_gen_protected) > 0);
}

// Goal: the seeds' guarantee, under MGLRU: re-read small files stay
// cached (the Harji/Piggin thread, Linux 2.6.20's small-file server). 100 files of 2 pages, each read
// whole once a round, against a stream of 600 pages a round.
#[test]
fn reread_small_files_stay_cached() {
    pin_to_cpu0();
    let cache = mglru(1024, quiet());
    let files: Vec<File> = (0..100).map(|i| file(&cache, &format!("small{i}"), 2)).collect();
    let frac = working_set_rounds(&cache, &files, 2, 600, 10);
    eprintln!("small files cached per round: {frac:?}");
    for (r, &x) in frac.iter().enumerate().skip(5) {
        assert!(x >= 0.9, "round {r}: only {:.0}% of the small files cached ({frac:?})", x * 100.0);
    }
}

// Goal: switching the multi-gen LRU off and on at run time moves every
// page between the generations and the two lists (lru_gen_change_state):
// nothing is lost, the lengths add up, and pages read afterwards still
// land on the lists the policy in force names.
#[test]
fn change_state_moves_every_page() {
    pin_to_cpu0();
    let cache = mglru(512, quiet());
    let f = file(&cache, "s", 100);
    for i in 0..100 {
        read_page(&f, i);
    }
    cache.lru_add_drain_all();
    cache.lru_gen_set_enabled(0).unwrap();
    assert_eq!(cache.lru_gen_enabled(), 0);
    let vm = cache.vmstat();
    assert_eq!(vm.get(Item::nr_inactive_file) + vm.get(Item::nr_active_file), 100);
    assert!(f.lru_gen_page(0).is_none());
    assert_eq!(cache.lru_snapshot(pcache::LruList::InactiveFile).len(), 100);
    assert!(cache.lru_gen_write("+ 0 0 3").is_err(), "commands need the multi-gen LRU on");
    cache.lru_gen_set_enabled(3).unwrap();
    let st = cache.lru_gen_stats();
    let on_gens: u64 = st.generations.iter().map(|g| g.nr_pages[1]).sum();
    assert_eq!(on_gens, 100);
    assert!(cache.lru_snapshot(pcache::LruList::InactiveFile).is_empty());
    assert_eq!(cached(&f, 0..100), 100);
}

// Goal: bad debugfs commands are refused with EINVAL, not a panic.
#[test]
fn bad_commands_are_refused() {
    let cache = mglru(256, quiet());
    for cmd in ["x 0 0 3", "+ 0 0", "+ 1 0 3", "+ 0 1 3", "- 0 0 abc", "- 0 0 0 201", "+", "-0 0 1 2 3 4 5"] {
        assert!(matches!(cache.lru_gen_write(cmd), Err(Error::InvalidArgument(_))), "{cmd:?}");
    }
    cache.lru_gen_write("+ 0 0 3 0 1; + 0 0 4 0 1\n").unwrap();
    assert_eq!(cache.lru_gen_stats().max_seq, 5);
}

// Goal: data integrity under memory pressure with many threads under
// MultiGen: four writers and readers on their own files, in a cache much
// smaller than the files (kswapd and direct reclaim evict constantly),
// with a fifth thread aging and evicting through the debugfs commands;
// every read returns the last bytes written to it.
#[test]
fn integrity_under_pressure_many_threads() {
    let cache = Arc::new(mglru(384, Tunables { ra_pages: 8, ..Tunables::default() }));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ager = {
        let (cache, stop) = (cache.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let st = cache.lru_gen_stats();
                let _ = cache.lru_gen_write(&format!("+ 0 0 {} 0 1", st.max_seq));
                let _ = cache.lru_gen_run_eviction(st.min_seq[1], 0, 16);
                let _ = cache.lru_gen_dump(true);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                let pages = 200u64;
                let f = cache.open_memory(&format!("w{t}")).unwrap();
                f.set_len(pages * PS).unwrap();
                let mut version = vec![0u8; pages as usize];
                let mut x = t * 7919 + 1;
                for step in 0..4000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let i = (x >> 33) % pages;
                    let mut buf = vec![0u8; PS as usize];
                    if step % 3 == 0 {
                        version[i as usize] = version[i as usize].wrapping_add(1);
                        buf.fill(version[i as usize] ^ (t as u8) << 4 ^ i as u8);
                        f.write_at(&buf, i * PS).unwrap();
                    } else {
                        f.read_at(&mut buf, i * PS).unwrap();
                        let want =
                            if version[i as usize] == 0 { 0 } else { version[i as usize] ^ (t as u8) << 4 ^ i as u8 };
                        assert!(buf.iter().all(|&b| b == want), "thread {t} page {i} step {step}");
                    }
                }
                f.fsync().unwrap();
                for i in 0..pages {
                    let mut buf = vec![0u8; PS as usize];
                    f.read_at(&mut buf, i * PS).unwrap();
                    let want =
                        if version[i as usize] == 0 { 0 } else { version[i as usize] ^ (t as u8) << 4 ^ i as u8 };
                    assert!(buf.iter().all(|&b| b == want), "thread {t} page {i} at the end");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    ager.join().unwrap();
    let vm = cache.vmstat();
    assert!(vm.get(Item::pgsteal_file) > 0, "reclaim ran");
    assert!(vm.get(Item::lru_gen_aging) > 0);
    // The generations hold every page on an LRU: their sizes add up to
    // the compatibility counts.
    cache.lru_add_drain_all();
    let st = cache.lru_gen_stats();
    let on_gens: u64 = st.generations.iter().map(|g| g.nr_pages[1]).sum();
    let vm = cache.vmstat();
    assert_eq!(on_gens, vm.get(Item::nr_inactive_file) + vm.get(Item::nr_active_file));
}

// Goal: mapped pages age through their page-table entries. The aging walk
// (walk_mm, LRU_GEN_MM_WALK) clears the young entries and moves their
// pages to the youngest generation (folio_update_gen, before inc_max_seq
// makes a new one: seq 3, then one below max_seq 4); the pages nobody
// touched are folded from seq 0 into seq 1 (inc_min_seq). Without
// LRU_GEN_MM_WALK (enabled bits 0x0001) the walk does not run and every
// page is folded alike.
#[test]
fn walk_promotes_young_mapped_pages() {
    pin_to_cpu0();
    for (caps, young_seq) in [(0x3, 3), (0x1, 1)] {
        let cache = mglru(256, quiet());
        cache.lru_gen_set_enabled(caps).unwrap();
        assert_eq!(cache.lru_gen_enabled(), caps);
        let f = file(&cache, "m", 8);
        for i in 0..8 {
            read_page(&f, i);
        }
        let map = f.map(0, 8 * PS, pcache::MapFlags::READ).unwrap();
        for i in 0..4 {
            drop(map.page(i).unwrap());
        }
        cache.lru_gen_run_aging(3, false, true).unwrap();
        for i in 0..8 {
            let want = if i < 4 { young_seq } else { 1 };
            assert_eq!(f.lru_gen_page(i).unwrap().seq, want, "caps {caps:#x} page {i}");
        }
        let walked = cache.vmstat().get(Item::lru_gen_walk_young);
        assert_eq!(walked, if caps & 2 != 0 { 4 } else { 0 });
    }
}

// Goal: the rmap walk's look-around (lru_gen_look_around). Sixteen mapped
// pages, all touched through the mapping, all in the oldest generation:
// eviction isolates them in one batch; the first page's rmap walk finds
// its entry young and scans its neighbours, clearing their young entries
// and marking the isolated pages PG_referenced, which shrink_folio_list
// then keeps ("folio_update_gen() tried to promote this page?"). Every
// page stays cached and goes back to the youngest generation (evict_folios
// puts rejected mapped pages there).
#[test]
fn look_around_keeps_young_neighbours() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "n", 16);
    for i in 0..16 {
        read_page(&f, i);
    }
    let map = f.map(0, 16 * PS, pcache::MapFlags::READ).unwrap();
    for i in 0..16 {
        drop(map.page(i).unwrap());
    }
    assert_eq!(cache.lru_gen_run_eviction(0, 0, 100).unwrap(), 0);
    assert_eq!(cached(&f, 0..16), 16);
    assert_eq!(cache.vmstat().get(Item::lru_gen_look_around_young), 15);
    let max_seq = cache.lru_gen_stats().max_seq;
    for i in 0..16 {
        assert_eq!(f.lru_gen_page(i).unwrap().seq, max_seq, "page {i}");
    }
    drop(map);
}

// Goal: swappiness chooses between anon and file (isolate_folios,
// get_swappiness). With swap, 50 anonymous pages (new ones start active,
// 3.x: the youngest generation) and 50 file pages (the oldest): at
// swappiness 0 only file pages are scanned (the loop over types starts at
// file and stops there), so once they are gone reclaim frees nothing and
// swaps nothing; at swappiness 60 the anon type is scanned too and pages
// go to swap. Data survives the swap-out.
#[test]
fn swappiness_chooses_the_type() {
    pin_to_cpu0();
    let t = Tunables { swap_bytes: 256 * PS, ..quiet() };
    let cache = mglru(512, t);
    let anon = cache.map_anon(50 * PS).unwrap();
    for i in 0..50u64 {
        anon.write(i * PS, &(i + 1).to_ne_bytes()).unwrap();
    }
    let f = file(&cache, "f", 50);
    for i in 0..50 {
        read_page(&f, i);
    }
    cache.lru_add_drain_all();
    cache.sysctl_write("swappiness", "0").unwrap();
    let mut freed = 0;
    for _ in 0..10 {
        freed += cache.reclaim(64);
    }
    assert_eq!(cached(&f, 0..50), 0, "every file page evicted");
    assert!(freed >= 50, "{freed}");
    assert_eq!(cache.vmstat().get(Item::pswpout), 0, "swappiness 0 never swaps");
    cache.sysctl_write("swappiness", "60").unwrap();
    for _ in 0..10 {
        cache.reclaim(64);
    }
    assert!(cache.vmstat().get(Item::pswpout) > 0, "anon pages were scanned and swapped");
    for i in 0..50u64 {
        let mut w = [0u8; 8];
        anon.read(i * PS, &mut w).unwrap();
        assert_eq!(u64::from_ne_bytes(w), i + 1, "anon page {i}");
    }
}

// Goal: lru_gen_in_fault. folio_add_lru (mm/swap.c, 6.1) sets PG_active on
// a page added while the thread is in a fault (lru_gen_enter_fault:
// in_lru_fault = the mapping has no VM_SEQ_READ or VM_RAND_READ), so
// lru_gen_add_folio puts it in the youngest generation (max_seq = 3);
// a page read through a file descriptor goes to the oldest (min_seq = 0),
// and so does one faulted in through an MADV_RANDOM mapping. A refault
// through a fault (lru_gen_refault: "pages accessed through page tables,
// hotter pages pushed out hot pages which refaulted immediately") counts
// for its tier and gets PG_workingset back (WORKINGSET_RESTORE); one
// through read(2) with refs below the full count does not.
#[test]
fn fault_in_goes_to_youngest_generation() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "f", 100);
    read_page(&f, 0);
    let map = f.map(0, 100 * PS, pcache::MapFlags::READ).unwrap();
    for i in 1..4 {
        drop(map.page(i).unwrap());
    }
    let rand = f.map(0, 100 * PS, pcache::MapFlags::READ).unwrap();
    rand.madvise(0, 100 * PS, pcache::Madvise::Random).unwrap();
    drop(rand.page(4).unwrap());
    cache.lru_add_drain_all();
    assert_eq!(f.lru_gen_page(0).unwrap().seq, 0, "read(2): the oldest generation");
    for i in 1..4 {
        let p = f.lru_gen_page(i).unwrap();
        assert_eq!((p.seq, p.refs, p.workingset), (3, 0, false), "page {i} faulted in: the youngest");
    }
    assert_eq!(f.lru_gen_page(4).unwrap().seq, 0, "MADV_RANDOM: no recency, the oldest");
    drop(map);
    drop(rand);

    // Refaults: pages 10..99 read once (generation 0), the oldest 64 of
    // generation 0 evicted (pages 0, 4 and 10..72), generation 0 keeps the
    // rest, so min_seq is unchanged and every refault counts.
    for i in 10..100 {
        read_page(&f, i);
    }
    cache.lru_add_drain_all();
    assert_eq!(cache.lru_gen_run_eviction(0, 0, 64).unwrap(), 64);
    assert_eq!(cache.lru_gen_stats().min_seq[1], 0);
    assert_eq!(cached(&f, 10..72), 0);
    let before = cache.vmstat();
    let map = f.map(0, 100 * PS, pcache::MapFlags::READ).unwrap();
    for i in 10..14 {
        drop(map.page(i).unwrap());
    }
    read_page(&f, 20);
    cache.lru_add_drain_all();
    let d = cache.vmstat().delta(&before);
    assert_eq!(cache.lru_gen_stats().refaulted[1], [5, 0, 0, 0]);
    assert_eq!(d.get(Item::workingset_restore), 4, "only the faults restore PG_workingset");
    for i in 10..14 {
        let p = f.lru_gen_page(i).unwrap();
        assert_eq!((p.seq, p.workingset), (3, true), "page {i} refaulted through a fault");
    }
    let p = f.lru_gen_page(20).unwrap();
    assert_eq!((p.seq, p.workingset), (0, false), "page 20 refaulted through read(2)");
    drop(map);
}

// Goal: anonymous pages leave shadows under the multi-gen LRU whatever the
// anon preset (lru_gen_eviction is type-blind; pcache's default anon
// preset, Linux 3.x, leaves none on the two lists), and their refaults
// feed the controller's anon row (lru_gen_refault, type 0). 128 pages
// faulted in (the youngest generation, in fault); three forced agings
// (the walk clears their young bits on the first) bring them to min_seq
// = 3; one eviction batch (MIN_LRU_BATCH = 64, swappiness 200: anon only)
// swaps 64 out and leaves 64 in generation 3, so min_seq[anon] stays and
// each swap-in counts as a refault of tier 0 (never read through a file
// descriptor: refs 0), with PG_workingset back since it comes in a fault.
#[test]
fn anon_shadows_feed_the_controller() {
    pin_to_cpu0();
    let t = Tunables { swap_bytes: 512 * PS, ..quiet() };
    assert_eq!(t.anon_lru, pcache::AnonLru::Linux3);
    let cache = mglru(512, t);
    let anon = cache.map_anon(128 * PS).unwrap();
    for i in 0..128u64 {
        anon.write(i * PS, &(i + 1).to_ne_bytes()).unwrap();
    }
    cache.lru_add_drain_all();
    let st = cache.lru_gen_stats();
    assert_eq!(st.generations.iter().find(|g| g.seq == 3).unwrap().nr_pages[0], 128, "faulted in: youngest");
    for seq in 3..6 {
        cache.lru_gen_run_aging(seq, true, true).unwrap();
    }
    let st = cache.lru_gen_stats();
    assert_eq!((st.max_seq, st.min_seq[0]), (6, 3));
    assert_eq!(st.generations.iter().find(|g| g.seq == 3).unwrap().nr_pages[0], 128);
    let mut evicted = 0;
    for _ in 0..4 {
        cache.lru_gen_run_eviction(3, 200, 64).unwrap();
        evicted = cache.lru_gen_stats().evicted[0].iter().sum::<u64>();
        if evicted > 0 {
            break;
        }
    }
    let st = cache.lru_gen_stats();
    assert_eq!(st.min_seq[0], 3, "generation 3 still holds anon pages");
    assert_eq!(st.evicted[0], [evicted, 0, 0, 0]);
    assert!((1..=64).contains(&evicted), "{evicted}");
    assert!(cache.vmstat().get(Item::pswpout) >= evicted);
    let before = cache.vmstat();
    for i in 0..128u64 {
        let mut w = [0u8; 8];
        anon.read(i * PS, &mut w).unwrap();
        assert_eq!(u64::from_ne_bytes(w), i + 1, "anon page {i}");
    }
    let d = cache.vmstat().delta(&before);
    let st = cache.lru_gen_stats();
    assert_eq!(st.refaulted[0], [evicted, 0, 0, 0], "every swap-in of an evicted page counted");
    assert_eq!(d.get(Item::workingset_refault_anon), evicted);
    assert_eq!(d.get(Item::workingset_activate_anon), evicted, "in fault: PG_workingset restored");
}

// Goal: min_ttl_ms refuses rather than OOM-kills, on every allocating path,
// and nothing hangs (kswapd on, as lru_gen_age_node runs there in the
// kernel). A file read, a mapped file fault and an anonymous fault that
// need a frame all get Error::NoMemory while every generation is younger
// than min_ttl; each is run on a thread the test waits for with a
// generous bound, so a hang fails the test instead of stalling it.
#[test]
fn min_ttl_refuses_with_nomemory_never_hangs() {
    let t = Tunables { ra_pages: 0, ..Tunables::default() };
    assert!(t.kswapd);
    let cache = Arc::new(mglru(256, t));
    cache.lru_gen_set_min_ttl_ms(600_000);
    let ws = file(&cache, "ws", 400);
    let mut buf = vec![0u8; PS as usize];
    let err = (0..400).map(|i| ws.read_at(&mut buf, i * PS)).find_map(|r| r.err());
    assert!(matches!(err, Some(Error::NoMemory { .. })), "read: {err:?}");
    let cached_before = cached(&ws, 0..400);
    let (tx, rx) = std::sync::mpsc::channel();
    let c = Arc::clone(&cache);
    std::thread::spawn(move || {
        let big = file(&c, "big", 64);
        let map = big.map(0, 64 * PS, pcache::MapFlags::READ).unwrap();
        let mapped = (0..64).map(|i| map.page(i).map(drop)).find_map(|r| r.err());
        let anon = c.map_anon(64 * PS).unwrap();
        let anon_err = (0..64u64).map(|i| anon.write(i * PS, &[1])).find_map(|r| r.err());
        let _ = tx.send((mapped, anon_err));
    });
    let (mapped, anon_err) = rx.recv_timeout(Duration::from_secs(300)).expect("an allocation hung");
    assert!(matches!(mapped, Some(Error::NoMemory { .. })), "mapped fault: {mapped:?}");
    assert!(matches!(anon_err, Some(Error::NoMemory { .. })), "anonymous fault: {anon_err:?}");
    assert!(cache.vmstat().get(Item::lru_gen_min_ttl_oom) > 0);
    assert_eq!(cached(&ws, 0..400), cached_before, "the young working set stayed");
    // Once min_ttl is off, the same reads succeed.
    cache.lru_gen_set_min_ttl_ms(0);
    for i in 0..400 {
        read_page(&ws, i);
    }
}

// Goal: the count-full hint (lru_gen.rs set_count_full_hint) never stops
// a read from counting after the count was reset. A page read 7 times: the
// 5th read fills the count (refs 4, tier 3), the 6th finds it full and
// sets the hint, the 7th hits on the hint without reading the flags.
// folio_inc_gen (forced aging folds generation 0) resets the count and
// clears the hint: the next read counts again (PG_referenced). Filled
// again and hinted, then the multi-gen LRU turned off: the page goes to
// the inactive list (seq 1 is not one of the two youngest) with
// PG_referenced, the hint is cleared with the move, so the next read is a
// classic mark_page_accessed that activates it.
#[test]
fn count_full_hint_cleared_where_the_count_resets() {
    pin_to_cpu0();
    let cache = mglru(256, quiet());
    let f = file(&cache, "h", 2);
    read_page(&f, 1);
    for _ in 0..7 {
        read_page(&f, 0);
    }
    cache.lru_add_drain_all();
    let p = f.lru_gen_page(0).unwrap();
    assert_eq!((p.seq, p.refs, p.tier), (0, 4, 3));
    let before = cache.vmstat();
    cache.lru_gen_run_aging(3, false, true).unwrap();
    let d = cache.vmstat().delta(&before);
    assert_eq!(d.get(Item::lru_gen_hint_clear), 1, "only page 0's count was full");
    let p = f.lru_gen_page(0).unwrap();
    assert_eq!((p.seq, p.refs, p.referenced), (1, 0, false), "folded, count reset");
    read_page(&f, 0);
    let p = f.lru_gen_page(0).unwrap();
    assert_eq!((p.refs, p.referenced), (0, true), "the read after the reset counted");
    for _ in 0..6 {
        read_page(&f, 0);
    }
    assert_eq!(f.lru_gen_page(0).unwrap().refs, 4);
    let before = cache.vmstat();
    cache.lru_gen_set_enabled(0).unwrap();
    assert_eq!(cache.vmstat().delta(&before).get(Item::lru_gen_hint_clear), 1);
    let s = f.page_state(0).unwrap();
    assert_eq!((s.active, s.referenced), (false, true));
    read_page(&f, 0);
    cache.lru_add_drain_all();
    assert!(f.page_state(0).unwrap().active, "the classic mark activated it: no hint left");
}

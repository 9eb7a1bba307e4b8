//! pcache's adaptive W-TinyLFU admission (admission.rs): list transitions,
//! loop resistance, and the seeds' guarantees (a use-once stream does not
//! flush the working set; small files that are re-read stay cached).

use pcache::{Admission, Config, Item, LruList, PageCache, Tunables};

const FRAMES: u64 = 1024;

fn cache(admission: Admission) -> PageCache {
    PageCache::new(Config {
        memory_bytes: FRAMES * 4096,
        nr_cpus: 1,
        tunables: Tunables { admission, workingset: true, kswapd: false, ra_pages: 0, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap()
}

fn read(f: &pcache::File, i: u64) {
    let mut b = [0u8; 4096];
    assert_eq!(f.read_at(&mut b, i * 4096).unwrap(), 4096);
}

/// Misses while reading pages `range` of `f`, `rounds` times in order.
fn misses(c: &PageCache, f: &pcache::File, range: std::ops::Range<u64>, rounds: u32) -> u64 {
    let before = c.vmstat();
    for _ in 0..rounds {
        for i in range.clone() {
            read(f, i);
        }
    }
    c.vmstat().delta(&before).get(Item::pgcache_miss)
}

// Goal: a new page waits in the window list; a re-access there only sets
// PG_referenced (it is not activated); once the window is over its target
// (1% of memory, at least 4 pages), its oldest page is moved to the
// inactive list, at the head when it is used more often than the inactive
// tail, else at the tail with PG_probation; and a page on the inactive
// list read twice is activated as in the kernel. With the kernel's
// admission there is no window at all.
#[test]
fn window_transitions() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let f = c.open_memory("f").unwrap();
    f.set_len(100 * 4096).unwrap();
    let target = c.vmstat().get(Item::admission_window_target);
    assert_eq!(target, (FRAMES / 100).max(4));
    read(&f, 0);
    c.lru_add_drain_all();
    let s = f.page_state(0).unwrap();
    assert_eq!(s.lru, Some(LruList::Window));
    read(&f, 0);
    let s = f.page_state(0).unwrap();
    assert_eq!(s.lru, Some(LruList::Window), "a window hit does not activate");
    assert!(s.referenced);
    // Push page 0 out of the window: target more new pages behind it.
    for i in 1..=target {
        read(&f, i);
    }
    c.lru_add_drain_all();
    assert_eq!(c.vmstat().get(Item::nr_admission_window), target);
    let s = f.page_state(0).unwrap();
    assert_eq!(s.lru, Some(LruList::InactiveFile));
    let d = c.vmstat();
    assert_eq!(d.get(Item::admission_admit) + d.get(Item::admission_reject), 1);
    // Read twice on the inactive list: activated.
    read(&f, 0);
    read(&f, 0);
    c.lru_add_drain_all();
    assert_eq!(f.page_state(0).unwrap().lru, Some(LruList::ActiveFile));

    let k = cache(Admission::Kernel);
    let g = k.open_memory("g").unwrap();
    g.set_len(4096).unwrap();
    read(&g, 0);
    k.lru_add_drain_all();
    assert_eq!(g.page_state(0).unwrap().lru, Some(LruList::InactiveFile));
    assert_eq!(k.vmstat().get(Item::nr_admission_window), 0);
}

// Goal: a loop a quarter larger than memory, which the kernel's lists miss
// on every access (each page is evicted just before it comes round again,
// and workingset detection activates nothing because the active list is
// empty), keeps a fixed part cached with admission: candidates lose the
// contest against residents of equal count.
#[test]
fn loop_larger_than_memory_hits_with_admission() {
    let n = FRAMES * 5 / 4;
    let mut result = Vec::new();
    for adm in [Admission::Kernel, Admission::AdaptiveTinyLfu] {
        let c = cache(adm);
        let f = c.open_memory("loop").unwrap();
        f.set_len(n * 4096).unwrap();
        misses(&c, &f, 0..n, 3); // warm up
        let m = misses(&c, &f, 0..n, 10);
        result.push(m as f64 / (10 * n) as f64);
    }
    assert!(result[0] > 0.99, "kernel lists miss a loop larger than memory: {result:?}");
    assert!(result[1] < 0.6, "admission keeps part of the loop: {result:?}");
}

// Goal (seed guarantee): a use-once stream four times the size of memory
// does not flush a working set that was used more than once: the working
// set, read again after the stream, mostly hits.
#[test]
fn use_once_stream_keeps_the_working_set() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let ws = c.open_memory("ws").unwrap();
    let n = FRAMES / 3;
    ws.set_len(n * 4096).unwrap();
    misses(&c, &ws, 0..n, 4);
    let stream = c.open_memory("stream").unwrap();
    stream.set_len(4 * FRAMES * 4096).unwrap();
    for i in 0..4 * FRAMES {
        read(&stream, i);
    }
    let m = misses(&c, &ws, 0..n, 1);
    assert!(m * 10 < n, "the stream flushed the working set: {m} of {n} missed");
}

// Goal (seed guarantee): many small one-page files, each re-read now and
// then while a stream of new pages goes by, stay cached.
#[test]
fn small_files_reread_stay_cached() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let files: Vec<_> = (0..200)
        .map(|i| {
            let f = c.open_memory(&format!("small{i}")).unwrap();
            f.set_len(4096).unwrap();
            f
        })
        .collect();
    let stream = c.open_memory("stream").unwrap();
    stream.set_len(8 * FRAMES * 4096).unwrap();
    let mut s = 0;
    let before = c.vmstat();
    for _round in 0..8 {
        for f in &files {
            read(f, 0);
        }
        for _ in 0..FRAMES {
            read(&stream, s);
            s += 1;
        }
    }
    let mut misses = 0;
    for f in &files {
        if f.page_state(0).is_none() {
            misses += 1;
        }
    }
    assert!(misses * 20 < files.len(), "{misses} of {} small files were evicted", files.len());
    assert!(c.vmstat().delta(&before).get(Item::admission_reject) > 0, "the stream lost the contest");
}

// Goal: the window adapts: pages rejected by the contest that come back
// soon (within four window lengths) grow the window's target.
#[test]
fn window_grows_on_recent_window_side_refaults() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let hot = c.open_memory("hot").unwrap();
    let n = FRAMES / 2;
    hot.set_len(n * 4096).unwrap();
    // Residents with high counts, so new pages lose the contest.
    misses(&c, &hot, 0..n, 6);
    let f = c.open_memory("f").unwrap();
    f.set_len(4 * FRAMES * 4096).unwrap();
    let t0 = c.vmstat().get(Item::admission_window_target);
    // Read fresh pages and each one again shortly after it has left the
    // window (10 pages) and been reclaimed from the probation tail:
    // rejected pages refault at a short distance.
    const LAG: u64 = 20;
    for i in 0..2 * FRAMES {
        read(&f, i);
        if i >= LAG {
            read(&f, i - LAG);
        }
    }
    let t1 = c.vmstat().get(Item::admission_window_target);
    assert!(t1 > t0, "window target {t0} -> {t1}");
}

// Goal: the duel turns the contest off when recency wins. A hot set of
// 3/4 of memory read six times, then a new one of the same size read
// round after round (a working set that moves): under the contest the new
// pages lose against the old ones' higher counts and keep missing; the
// sampled LRU misses only the first round, so the duel switches to admit
// all: new pages then skip the window (they go to the inactive list as
// with the kernel's admission) and the new set ends up cached (the
// duel's kernel side is a miniature of the two lists, not a plain LRU,
// so the switch comes a round or two later).
#[test]
fn duel_admits_all_when_recency_wins() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let n = FRAMES * 3 / 4;
    let old = c.open_memory("old").unwrap();
    old.set_len(n * 4096).unwrap();
    misses(&c, &old, 0..n, 6);
    // Still contesting: a new page waits in the window.
    let probe = c.open_memory("probe").unwrap();
    probe.set_len(2 * 4096).unwrap();
    read(&probe, 0);
    c.lru_add_drain_all();
    assert_eq!(probe.page_state(0).unwrap().lru, Some(LruList::Window));
    let new = c.open_memory("new").unwrap();
    new.set_len(n * 4096).unwrap();
    // The duel switches within a few rounds; the kernel's lists then take
    // a few more (they protect the old active pages until refaults of the
    // new ones prove them the working set).
    misses(&c, &new, 0..n, 8);
    let last = misses(&c, &new, 0..n, 1);
    assert!(last * 10 < n, "the moved working set is cached: {last} of {n} missed");
    read(&probe, 1);
    c.lru_add_drain_all();
    assert_eq!(probe.page_state(1).unwrap().lru, Some(LruList::InactiveFile), "admit all: no window");
    assert_eq!(c.vmstat().get(Item::nr_admission_window), 0);
}

// Goal: the duel keeps the contest on a loop larger than memory while a
// use-once stream goes by: the loop's sampled LRU misses everything, so
// new pages keep waiting in the window and the stream is rejected.
#[test]
fn duel_keeps_the_contest_on_a_loop() {
    let c = cache(Admission::AdaptiveTinyLfu);
    let n = FRAMES * 3 / 2;
    let f = c.open_memory("loop").unwrap();
    f.set_len(n * 4096).unwrap();
    misses(&c, &f, 0..n, 6);
    let probe = c.open_memory("probe").unwrap();
    probe.set_len(4096).unwrap();
    read(&probe, 0);
    c.lru_add_drain_all();
    assert_eq!(probe.page_state(0).unwrap().lru, Some(LruList::Window));
    let m = misses(&c, &f, 0..n, 2);
    assert!((m as f64) < 0.8 * (2 * n) as f64, "part of the loop stays cached: {m} of {}", 2 * n);
}

// Goal: no page lost or leaked under pressure with the policy on. Three
// threads write and re-read pages of their own memory files (stamped
// with file, page and version) through a cache a quarter of their size,
// with a loop, a hot set and use-once pages mixed so that the duel has
// reasons to switch modes; every read must return the last write. At the
// end every frame is free or a file page, and every file page sits on
// exactly one of the window, inactive and active lists.
#[test]
fn no_page_lost_or_leaked_under_pressure() {
    const THREADS: u64 = 3;
    const PAGES: u64 = FRAMES * 4 / 3;
    let c = std::sync::Arc::new(cache(Admission::AdaptiveTinyLfu));
    let stamp = |t: u64, i: u64, v: u64| -> [u8; 4096] {
        let mut b = [0u8; 4096];
        for (j, chunk) in b.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(t << 48 ^ i << 24 ^ v << 12 ^ j as u64).to_le_bytes());
        }
        b
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let f = c.open_memory(&format!("f{t}")).unwrap();
                let mut version = vec![0u64; PAGES as usize];
                for i in 0..PAGES {
                    f.write_at(&stamp(t, i, 0), i * 4096).unwrap();
                }
                // A small deterministic generator per thread.
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut b = [0u8; 4096];
                for step in 0..30_000u64 {
                    let r = next();
                    let i = match step / 5_000 % 3 {
                        0 => step % PAGES,                      // loop
                        1 => (r % 64) * (r >> 32 & 1) + r % 16, // hot set
                        _ => r % PAGES,                         // random
                    };
                    if r >> 40 & 7 == 0 {
                        version[i as usize] += 1;
                        f.write_at(&stamp(t, i, version[i as usize]), i * 4096).unwrap();
                    } else {
                        assert_eq!(f.read_at(&mut b, i * 4096).unwrap(), 4096);
                        assert!(b == stamp(t, i, version[i as usize]), "thread {t}: page {i} lost its last write");
                    }
                }
                for i in 0..PAGES {
                    assert_eq!(f.read_at(&mut b, i * 4096).unwrap(), 4096);
                    assert!(b == stamp(t, i, version[i as usize]), "thread {t}: page {i} at the end");
                }
                f
            })
        })
        .collect();
    let files: Vec<_> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
    c.lru_add_drain_all();
    let vm = c.vmstat();
    let (free, file) = (vm.get(Item::nr_free_pages), vm.get(Item::nr_file_pages));
    assert_eq!(free + file, FRAMES, "free {free} + file {file}");
    let lists = vm.get(Item::nr_inactive_file) + vm.get(Item::nr_active_file) + vm.get(Item::nr_admission_window);
    assert_eq!(lists, file, "every file page on one list");
    drop(files);
}

//! Metadata bounded as the kernel bounds it: page-tree nodes
//! are freed when empty, shadow-only nodes are limited by the shadow-node
//! shrinker, and node memory follows the entries held, not the span of
//! the files ever touched.
//!
//! The figures asserted are the engine's own count of node memory
//! (`pagetree_node_bytes`: the node chunks of every tree). The same cases
//! at 256 MiB, with the process's resident set as a check, are in
//! `examples/metadata.rs` and BENCHMARKS.md.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use pcache::{Config, Item, PageCache, Tunables};

const PAGE: u64 = 4096;
/// mm/vmscan.c's batch of pages reclaimed at a time.
const SWAP_CLUSTER_MAX: u64 = 32;

fn cache(frames: u64, kswapd: bool) -> PageCache {
    PageCache::new(Config {
        memory_bytes: frames * PAGE,
        tunables: Tunables { kswapd, ra_pages: 0, ..Tunables::default() },
        ..Config::default()
    })
    .expect("cache")
}

/// xorshift64*: a fixed stream of page indices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn read(f: &pcache::File, index: u64) {
    let mut buf = [0u8; PAGE as usize];
    assert_eq!(f.read_at(&mut buf, index * PAGE).expect("read"), PAGE as usize);
}

fn node_bytes_per_frame(c: &PageCache, frames: u64) -> u64 {
    c.vmstat().get(Item::pagetree_node_bytes) / frames
}

/// The most shadow nodes the shrinker keeps (one per 8 frames), plus what
/// evictions add between two of its passes: a shrink_node pass evicts a
/// few SWAP_CLUSTER_MAX batches, each page at most one new shadow node.
fn shadow_node_bound(frames: u64) -> u64 {
    frames / 8 + 4 * SWAP_CLUSTER_MAX
}

// Goal: random 4 KiB reads over a sparse file (the case, scaled
// down at the same ratio: a 8 MiB cache over a 2 GiB file, as 256 MiB over
// 64 GiB) hold at most 1 KiB of node memory per frame, the same after 8x
// the cache as after 2x (it does not grow with the pages ever touched);
// shadow nodes stay within the shrinker's bound; truncating the file to 0
// returns every node.
// Method: reads at 2x and 8x of the cache's frames; vmstat after each.
#[test]
fn sparse_random_reads_stay_bounded_and_truncate_frees_all() {
    let frames = 2048;
    let c = cache(frames, false);
    let f = c.open_memory("sparse").expect("open");
    let pages = (2u64 << 30) / PAGE;
    f.set_len(pages * PAGE).expect("set_len");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut at = [0u64; 2];
    for (k, times) in [2u64, 8].into_iter().enumerate() {
        let done = if k == 0 { 0 } else { 2 * frames };
        for n in done..times * frames {
            read(&f, rng.next() % pages);
            if n.is_multiple_of(16) {
                assert!(c.vmstat().get(Item::workingset_nodes) <= shadow_node_bound(frames));
            }
        }
        at[k] = node_bytes_per_frame(&c, frames);
        assert!(at[k] <= 1024, "{times}x: {} node bytes per frame", at[k]);
    }
    assert!(at[1] <= at[0] + at[0] / 4, "grew from {} (2x) to {} (8x) bytes per frame", at[0], at[1]);
    let v = c.vmstat();
    assert!(v.get(Item::workingset_nodereclaim) > 0, "the shrinker ran");
    assert!(v.get(Item::nr_pagetree_nodes) > 0);

    f.set_len(0).expect("truncate");
    let v = c.vmstat();
    assert_eq!(v.get(Item::nr_file_pages), 0);
    assert_eq!(v.get(Item::nr_workingset_shadows), 0);
    assert_eq!(v.get(Item::workingset_nodes), 0);
    assert_eq!(v.get(Item::nr_pagetree_nodes), 0, "truncate to 0 frees every node");
    assert_eq!(v.get(Item::pagetree_node_bytes), 0, "and every chunk");
}

// Goal: a file's nodes go when it is closed and unlinked (evict_inode),
// and stay bounded while it is only closed (its pages stay cached, as an
// unused inode's do).
// Method: random sparse reads, close (bound holds), unlink (all gone).
#[test]
fn close_and_unlink_free_all_nodes() {
    let frames = 1024;
    let c = cache(frames, false);
    let f = c.open_memory("gone").expect("open");
    let pages = (1u64 << 30) / PAGE;
    f.set_len(pages * PAGE).expect("set_len");
    let mut rng = Rng(42);
    for _ in 0..4 * frames {
        read(&f, rng.next() % pages);
    }
    f.close().expect("close");
    drop(f);
    assert!(node_bytes_per_frame(&c, frames) <= 1024);
    assert!(c.vmstat().get(Item::nr_pagetree_nodes) > 0, "closed, still cached");
    c.unlink_memory("gone").expect("unlink");
    let v = c.vmstat();
    assert_eq!(v.get(Item::nr_pagetree_nodes), 0);
    assert_eq!(v.get(Item::pagetree_node_bytes), 0);
    assert_eq!(v.get(Item::workingset_nodes), 0);
}

// Goal: a dense file read through 4x the cache costs at most 64 bytes of
// node memory per frame (one 576-byte leaf per 64 pages, plus chunk slack
// and interior nodes), shadows included.
// Method: sequential reads of a file four times the cache.
#[test]
fn dense_file_under_64_bytes_per_frame() {
    let frames = 1024;
    let c = cache(frames, false);
    let f = c.open_memory("dense").expect("open");
    f.set_len(4 * frames * PAGE).expect("set_len");
    for i in 0..4 * frames {
        read(&f, i);
    }
    let v = c.vmstat();
    assert!(v.get(Item::nr_workingset_shadows) > frames, "evicted pages left shadows");
    let per_frame = node_bytes_per_frame(&c, frames);
    assert!(per_frame <= 64, "{per_frame} node bytes per frame");
}

// Goal: a small file costs only the nodes it uses: a file of one page
// holds one 576-byte leaf, not a chunk of them.
// Method: 100 files of one cached page each.
#[test]
fn one_page_files_cost_one_node_each() {
    let c = cache(1024, false);
    let files: Vec<_> = (0..100).map(|i| c.open_memory(&format!("small{i}")).expect("open")).collect();
    for f in &files {
        f.set_len(PAGE).expect("set_len");
        read(f, 0);
    }
    let v = c.vmstat();
    assert_eq!(v.get(Item::nr_pagetree_nodes), 100);
    assert_eq!(v.get(Item::pagetree_node_bytes), 100 * 576);
}

// Goal: a leaf is on the shadow-node list only while it holds shadows and
// nothing else: it joins when its last page is evicted, leaves when a
// page faults back in, and joins once again (not twice) when evicted again.
// Method: 64 pages of one leaf, evicted by reclaim, one read back.
#[test]
fn node_that_regains_a_page_leaves_the_shadow_list() {
    let c = cache(1024, false);
    let f = c.open_memory("leaf").expect("open");
    f.set_len(64 * PAGE).expect("set_len");
    for i in 0..64 {
        read(&f, i);
    }
    c.lru_add_drain_all();
    let evict_all = || {
        for _ in 0..1000 {
            if (0..64).all(|i| f.page_state(i).is_none()) {
                return;
            }
            c.reclaim(64);
        }
        panic!("reclaim did not evict the file");
    };
    evict_all();
    assert_eq!(c.vmstat().get(Item::workingset_nodes), 1);
    assert_eq!(c.vmstat().get(Item::nr_workingset_shadows), 64);
    read(&f, 5);
    assert_eq!(c.vmstat().get(Item::workingset_nodes), 0, "a page came back: off the list");
    c.lru_add_drain_all();
    evict_all();
    assert_eq!(c.vmstat().get(Item::workingset_nodes), 1, "on the list once");
}

/// A page of the race test: half the time in the first 16 leaves, so
/// lookups, writes and cuts meet on the same nodes; else anywhere.
fn pick(rng: &mut Rng, pages: u64) -> u64 {
    let r = rng.next();
    if r & 1 == 0 {
        (r >> 1) % 1024
    } else {
        (r >> 1) % pages
    }
}

/// The bytes of page `index` as the test writes them: every 8-byte word
/// names its page and position, never 0.
fn pattern_word(index: u64, word: usize) -> u64 {
    (index << 16 | word as u64) + 1
}

fn fill(index: u64, buf: &mut [u8]) {
    for (w, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&pattern_word(index, w).to_le_bytes());
    }
}

/// Each word is the pattern of this page or 0 (a hole, a truncated or a
/// not yet written page; a read racing a write may mix the two), never a
/// word of another page or of a reused frame.
fn check(index: u64, data: &[u8]) {
    for (w, chunk) in data.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        assert!(v == 0 || v == pattern_word(index, w), "page {index} word {w}: {v:#x}");
    }
}

// Goal: lock-free lookups stay correct while nodes are freed under them:
// readers (read_at and the find_page hit path) on several threads while
// others punch holes, write and truncate, in a cache much smaller than the
// file, see only each page's own bytes or zeroes, and nothing crashes.
// Method: a 64 MiB sparse span through a 2 MiB cache (kswapd and direct
// reclaim both evicting, the shadow shrinker freeing nodes), half the
// operations on its first 4 MiB so they meet on the same leaves; two read_at
// threads, one find_page thread, one writer, one puncher that also
// truncates the file to 0 and back; a fixed number of operations each.
#[test]
fn lookups_race_node_freeing() {
    let frames = 512;
    let c = Arc::new(cache(frames, true));
    let f = Arc::new(c.open_memory("race").expect("open"));
    let pages = (64u64 << 20) / PAGE;
    f.set_len(pages * PAGE).expect("set_len");
    let stop = Arc::new(AtomicBool::new(false));
    let reads_checked = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let (f, stop, n) = (f.clone(), stop.clone(), reads_checked.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(t + 1);
            let mut buf = vec![0u8; PAGE as usize];
            while !stop.load(Ordering::Relaxed) {
                let i = pick(&mut rng, pages);
                // Short or past EOF while the file is cut: fine, check what came.
                if let Ok(got) = f.read_at(&mut buf, i * PAGE) {
                    check(i, &buf[..got - got % 8]);
                    n.fetch_add((got > 0) as u64, Ordering::Relaxed);
                }
            }
        }));
    }
    {
        let (f, stop, n) = (f.clone(), stop.clone(), reads_checked.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(99);
            while !stop.load(Ordering::Relaxed) {
                let i = pick(&mut rng, pages);
                if let Ok(Some(page)) = f.find_page(i) {
                    assert_eq!(page.index(), i);
                    page.with_bytes(|bytes| check(i, bytes));
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    {
        let (f, stop) = (f.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(7);
            let mut buf = vec![0u8; PAGE as usize];
            while !stop.load(Ordering::Relaxed) {
                let i = pick(&mut rng, pages);
                fill(i, &mut buf);
                // ENOSPC-free memory device; a write past a cut EOF extends.
                f.write_at(&buf, i * PAGE).expect("write");
            }
        }));
    }
    // The puncher runs the clock: at least 20,000 cuts, and on until the
    // readers have checked 50,000 pages (bounded, whatever the scheduler).
    let mut rng = Rng(3);
    let mut round = 0u64;
    while round < 20_000 || (reads_checked.load(Ordering::Relaxed) < 50_000 && round < 5_000_000) {
        round += 1;
        let i = pick(&mut rng, pages);
        f.punch_hole(i * PAGE, (1 + rng.next() % 8) * PAGE).expect("punch");
        if round.is_multiple_of(5000) {
            f.set_len(0).expect("truncate");
            f.set_len(pages * PAGE).expect("extend");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("no thread panicked");
    }
    assert!(reads_checked.load(Ordering::Relaxed) >= 50_000);
    // Quiet now (written back, so the flusher walks no tree): everything
    // cut frees every node.
    f.fsync().expect("fsync");
    f.set_len(0).expect("truncate");
    let v = c.vmstat();
    assert_eq!(v.get(Item::nr_file_pages), 0);
    assert_eq!(v.get(Item::workingset_nodes), 0);
    // kswapd may be mid-walk (clearing a hot hint) as the truncation
    // reclaims: its nodes then wait, retired, for the next batch.
    assert_eq!(v.get(Item::nr_pagetree_nodes), v.get(Item::nr_pagetree_nodes_retired), "no node left in the tree");
}

//! LRU state transitions as the kernel defines them .

mod common;

use common::pin_to_cpu0;
use pcache::{Config, Item, LruBatching, LruList, PageCache, PageState, PagevecDrain, RemarkRule, Tunables};

fn cache_with(t: Tunables, pages: u64) -> PageCache {
    PageCache::new(Config { memory_bytes: pages * 4096, tunables: t, ..Config::default() }).unwrap()
}

fn quiet(lru_batching: LruBatching) -> Tunables {
    // No readahead, no kswapd: each read touches exactly one page.
    Tunables { lru_batching, ra_pages: 0, kswapd: false, ..Tunables::default() }
}

/// Wait until no page of `f` below `pages` is held by a writeback
/// completion: fsync returns once PG_writeback is clear, and the I/O
/// worker drops its reference just after, as folio_end_writeback does. The
/// workers inherit this thread's CPU affinity, so a test pinned to CPU 0
/// that goes straight on to reclaim may not let them run first.
fn settle_writeback(f: &pcache::File, pages: u64) {
    for _ in 0..5000 {
        if (0..pages).all(|i| f.page_state(i).is_none_or(|s| s.refcount == 1)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("a writeback completion kept its page reference for 5 s");
}

fn state(f: &pcache::File, i: u64) -> PageState {
    f.page_state(i).expect("page cached")
}

fn read_page(f: &pcache::File, i: u64) {
    let mut buf = [0u8; 4096];
    assert_eq!(f.read_at(&mut buf, i * 4096).unwrap(), 4096);
}

// Goal: the two-touch state machine of mark_page_accessed, step by step,
// with today's batching: inactive/unreferenced -> inactive/referenced ->
// active/unreferenced -> active/referenced -> unchanged, and the activation
// only lands on the active list when the CPU's batch is drained.
// Method: whole-page reads through one handle (each read re-marks under
// the prev_pos rule), inspecting page flags and lists after each step.
#[test]
fn mark_page_accessed_state_machine_batched() {
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Batched), 256);
    let f = cache.open_memory("sm").unwrap();
    f.set_len(4 * 4096).unwrap();

    // Touch 1: a miss; the new page waits in the per-CPU lru_add batch.
    read_page(&f, 0);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (None, true, false), "in the add batch, referenced");
    cache.lru_add_drain();
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::InactiveFile), true, false));

    // Touch 2: activation is queued; PG_referenced is cleared at once.
    let before = cache.vmstat();
    read_page(&f, 0);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::InactiveFile), false, false), "queued");
    cache.lru_add_drain();
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::ActiveFile), false, true));
    assert_eq!(cache.vmstat().delta(&before).get(Item::pgactivate), 1);

    // Touch 3: active, referenced.
    read_page(&f, 0);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::ActiveFile), true, true));

    // Touch 4: nothing changes, and no atomic flag operation is spent.
    let before = cache.vmstat();
    read_page(&f, 0);
    cache.lru_add_drain();
    let d = cache.vmstat().delta(&before);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::ActiveFile), true, true));
    assert_eq!(d.get(Item::pgactivate), 0);
    assert_eq!(d.get(Item::atomic_flag_rmw), 0, "a hot hit costs no flag RMW");
    assert_eq!(d.get(Item::mark_page_accessed_calls), 1);
}

// Goal: a page touched twice while still in this CPU's lru_add batch goes
// straight to the active list when the batch drains
// (__lru_cache_activate_page).
#[test]
fn activation_of_page_still_in_add_batch() {
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Batched), 256);
    let f = cache.open_memory("b").unwrap();
    f.set_len(4096).unwrap();
    read_page(&f, 0);
    read_page(&f, 0);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.active, s.referenced), (None, true, false));
    cache.lru_add_drain();
    assert_eq!(state(&f, 0).lru, Some(LruList::ActiveFile));
}

// Goal: 2.6.10 activates under lru_lock at once, and only pages already on
// the LRU; a page still in the add batch just stays referenced.
#[test]
fn mark_page_accessed_state_machine_immediate() {
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Immediate2610), 256);
    let f = cache.open_memory("imm").unwrap();
    f.set_len(4096).unwrap();
    read_page(&f, 0);
    read_page(&f, 0);
    let s = state(&f, 0);
    assert_eq!((s.lru, s.active, s.referenced), (None, false, true), "not on the LRU yet: no activation");
    cache.lru_add_drain();
    let before = cache.vmstat();
    read_page(&f, 0);
    // No drain needed: the page moved under lru_lock during the read.
    let s = state(&f, 0);
    assert_eq!((s.lru, s.active, s.referenced), (Some(LruList::ActiveFile), true, false));
    let d = cache.vmstat().delta(&before);
    assert_eq!(d.get(Item::pgactivate), 1);
    assert!(d.get(Item::lru_lock_acquire) >= 1);
}

// Goal: Danilov's batch defers the whole state machine: nothing changes
// until the per-CPU pagevec is drained, and each queued call holds a page
// reference (the extra atomic ops of Danilov's batching, Linux 2.6.10).
#[test]
fn mark_page_accessed_danilov_batch() {
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::DanilovBatch), 256);
    let f = cache.open_memory("dan").unwrap();
    f.set_len(4096).unwrap();
    read_page(&f, 0);
    let s = state(&f, 0);
    assert!(!s.referenced, "the mark waits in the batch");
    assert_eq!(s.refcount, 3, "cache + lru_add batch + accessed batch");
    cache.lru_add_drain();
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active, s.refcount), (Some(LruList::InactiveFile), true, false, 1));
    read_page(&f, 0);
    cache.lru_add_drain();
    let s = state(&f, 0);
    assert_eq!((s.lru, s.referenced, s.active), (Some(LruList::ActiveFile), false, true));
}

// Goal: a full batch of PAGEVEC_SIZE activations is applied with one
// lru_lock acquisition, where 2.6.10 takes the lock once per page.
#[test]
fn batching_saves_lru_lock_acquisitions() {
    pin_to_cpu0();
    let n = pcache::PAGEVEC_SIZE as u64;
    let mut locks = vec![];
    for batching in [LruBatching::Immediate2610, LruBatching::Batched] {
        let cache = cache_with(quiet(batching), 256);
        let f = cache.open_memory("l").unwrap();
        f.set_len(n * 4096).unwrap();
        for i in 0..n {
            read_page(&f, i);
        }
        cache.lru_add_drain();
        let before = cache.vmstat();
        for i in 0..n {
            read_page(&f, i); // second touch: activate
        }
        cache.lru_add_drain();
        let d = cache.vmstat().delta(&before);
        assert_eq!(d.get(Item::pgactivate), n);
        locks.push(d.get(Item::lru_lock_acquire));
    }
    assert_eq!(locks[0], pcache::PAGEVEC_SIZE as u64, "2.6.10: one acquisition per activation");
    assert_eq!(locks[1], 1, "batched: one acquisition per pagevec");
}

// Goal (onedrain, Linux 4.15): truncating a cached file walks it with one pagevec; its
// releases drain the per-CPU batches once per lifecycle (onedrain) or on
// every release (4.14-rc4 batchshadow).
#[test]
fn pagevec_release_drain_counts() {
    pin_to_cpu0();
    let pages = 150u64;
    for (mode, expect_drains) in
        [(PagevecDrain::EveryRelease, pages.div_ceil(pcache::PAGEVEC_SIZE as u64)), (PagevecDrain::Once, 1)]
    {
        let cache = cache_with(Tunables { pagevec_drain: mode, ..quiet(LruBatching::Batched) }, 1024);
        let f = cache.open_memory("t").unwrap();
        f.set_len(pages * 4096).unwrap();
        for i in 0..pages {
            read_page(&f, i);
        }
        let before = cache.vmstat();
        f.set_len(0).unwrap();
        let d = cache.vmstat().delta(&before);
        assert_eq!(d.get(Item::pagevec_release), pages.div_ceil(pcache::PAGEVEC_SIZE as u64), "{mode:?}");
        assert_eq!(d.get(Item::lru_drain), expect_drains, "{mode:?}");
        assert_eq!(f.cached_pages(), 0);
        // Every frame came back.
        cache.lru_add_drain_all();
        assert_eq!(cache.vmstat().get(Item::nr_free_pages), 1024);
    }
}

// Goal (the Harji/Piggin thread, Linux 2.6.20): a large file read sequentially in 512-byte chunks
// does not flush a working set that was touched twice; with Harji's
// unconditional re-mark the streamed pages get activated and push the
// working set out.
// Method: a 256-page cache; 64 working-set pages read twice (active), then
// a 2048-page file streamed in 512-byte reads; count the survivors.
#[test]
fn streaming_small_reads_do_not_flush_working_set() {
    // One CPU's batches: a thread that migrates between a page's two
    // marks leaves the second in another CPU's batch, which the reclaim
    // that follows (lru_add_drain, this CPU only) does not drain.
    pin_to_cpu0();
    let mut survivors = vec![];
    for rule in [RemarkRule::PrevPos, RemarkRule::Unconditional] {
        let cache = cache_with(Tunables { remark_rule: rule, ..quiet(LruBatching::Batched) }, 256);
        let ws = cache.open_memory("ws").unwrap();
        ws.set_len(64 * 4096).unwrap();
        for _ in 0..2 {
            for i in 0..64 {
                read_page(&ws, i);
            }
        }
        let stream = cache.open_memory("stream").unwrap();
        stream.set_len(2048 * 4096).unwrap();
        let mut buf = [0u8; 512];
        let mut pos = 0;
        while pos < 2048 * 4096 {
            assert_eq!(stream.read_at(&mut buf, pos).unwrap(), 512);
            pos += 512;
        }
        survivors.push((0..64).filter(|&i| ws.page_state(i).is_some()).count());
    }
    assert!(survivors[0] >= 60, "prev_pos keeps the working set: {survivors:?}");
    assert!(survivors[1] < survivors[0] / 2, "unconditional re-marking flushes it: {survivors:?}");
}

// Goal: reclaim takes the inactive tail first; an unmapped page with only
// PG_referenced set on the inactive list is still reclaimed (the Harji/Piggin thread, Linux 2.6.20:
// "vmscan throws away page cache pages with PageReferenced set, unless they
// are mapped"), while an active page survives.
#[test]
fn referenced_unmapped_inactive_pages_are_reclaimed() {
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Batched), 1024);
    let f = cache.open_memory("r").unwrap();
    f.set_len(600 * 4096).unwrap();
    for i in 0..600 {
        read_page(&f, i);
    }
    read_page(&f, 0);
    read_page(&f, 1); // page 0, 1: second touch -> active
    cache.lru_add_drain();
    assert!(state(&f, 0).active);
    assert!(state(&f, 5).referenced && !state(&f, 5).active);
    let freed = cache.reclaim(100);
    assert!(freed >= 100, "freed {freed}");
    assert!(f.page_state(2).is_none(), "oldest inactive, referenced page reclaimed");
    assert!(f.page_state(0).is_some() && f.page_state(1).is_some(), "active pages kept");
    assert!(f.page_state(599).is_some(), "newest inactive page kept");
}

// Goal: reclaim keeps the kernel's inactive:active balance. Below 1 GiB the
// inactive_ratio is 1, so once reclaim has run, the active list is not left
// larger than the inactive one by more than a scan batch; and pages moved
// down keep PG_referenced (another trip), counted in pgdeactivate/pgrefill.
// Method: activate a file as big as the cache, then stream another file
// through a cache with kswapd off (direct reclaim only).
#[test]
fn reclaim_keeps_inactive_active_balance() {
    // One CPU's batches: a thread that migrates between a page's two
    // marks leaves the second in another CPU's batch, which the reclaim
    // that follows (lru_add_drain, this CPU only) does not drain.
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Batched), 512);
    let hot = cache.open_memory("hot").unwrap();
    hot.set_len(400 * 4096).unwrap();
    for _ in 0..2 {
        for i in 0..400 {
            read_page(&hot, i);
        }
    }
    cache.lru_add_drain_all();
    let vm = cache.vmstat();
    assert!(vm.get(Item::nr_active_file) >= 390, "activated: {}", vm.get(Item::nr_active_file));
    let stream = cache.open_memory("stream").unwrap();
    stream.set_len(2048 * 4096).unwrap();
    for i in 0..2048 {
        read_page(&stream, i);
    }
    cache.lru_add_drain_all();
    let vm = cache.vmstat();
    let (active, inactive) = (vm.get(Item::nr_active_file), vm.get(Item::nr_inactive_file));
    assert!(active <= inactive + 32, "active {active} inactive {inactive}");
    assert!(vm.get(Item::pgdeactivate) > 0 && vm.get(Item::pgrefill) >= vm.get(Item::pgdeactivate));
    assert!(vm.get(Item::allocstall) > 0 && vm.get(Item::pgsteal_direct) > 0);
    assert_eq!(vm.get(Item::pgscan_kswapd), 0, "kswapd is off");
}

// Goal: with kswapd on, an allocation below the low watermark wakes it and
// it reclaims in the background (pgscan_kswapd, pageoutrun, pgsteal_kswapd)
// while a reader streams through a full cache.
#[test]
fn kswapd_reclaims_in_the_background() {
    let cache = cache_with(Tunables { ra_pages: 0, ..Tunables::default() }, 1024);
    let wm = cache.watermarks();
    assert!(wm.min < wm.low && wm.low < wm.high && wm.high < 1024, "{wm:?}");
    let f = cache.open_memory("s").unwrap();
    f.set_len(8192 * 4096).unwrap();
    for i in 0..8192 {
        read_page(&f, i);
        if i % 256 == 255 {
            // A reader this fast can outrun kswapd's wakeup on a loaded
            // machine; brief pauses give it the CPU, as real I/O would.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    let vm = cache.vmstat();
    assert!(vm.get(Item::pageoutrun) > 0, "kswapd never ran");
    // How the work splits between kswapd and direct reclaim depends on
    // scheduling; that kswapd took part does not.
    assert!(vm.get(Item::pgsteal_kswapd) > 0 && vm.get(Item::pgscan_kswapd) >= vm.get(Item::pgsteal_kswapd));
}

// Goal: a pinned page is never evicted, whichever way it was pinned: by
// the hit path's hazard pin (find_page on a cached page) or by reference
// (get_page), and its bytes stay readable; unpinned, it goes like the rest.
#[test]
fn pinned_pages_survive_reclaim() {
    // The pins' marks go to this CPU's activate batch, which holds a
    // reference until drained; a thread that migrates leaves them in the
    // batch of the CPU it left, which reclaim (lru_add_drain, this CPU
    // only, as in the kernel) does not drain.
    pin_to_cpu0();
    let cache = cache_with(quiet(LruBatching::Batched), 1024);
    let f = cache.open_memory("p").unwrap();
    let data: Vec<u8> = (0..600 * 4096).map(|i| (i % 241) as u8).collect();
    f.write_at(&data, 0).unwrap();
    f.fsync().unwrap();
    settle_writeback(&f, 600);
    cache.lru_add_drain_all();
    let hazard = f.find_page(3).unwrap().expect("cached");
    let by_ref = f.get_page(7).unwrap();
    let freed = cache.reclaim(2000);
    assert!(freed >= 590, "freed {freed}");
    assert!(f.page_state(3).is_some(), "hazard-pinned page evicted");
    assert!(f.page_state(7).is_some(), "reference-pinned page evicted");
    assert_eq!(hazard.to_vec(), &data[3 * 4096..4 * 4096]);
    assert_eq!(by_ref.to_vec(), &data[7 * 4096..8 * 4096]);
    drop((hazard, by_ref));
    // The two were activated by their pins' marks. One pass from priority
    // 12 to 0 may only deactivate them (the file lists are rebalanced
    // inside the scan, not after it, as in the kernel); a second, as the
    // allocator's retry would make, frees them.
    for _ in 0..2 {
        cache.reclaim(2000);
    }
    assert!(f.page_state(3).is_none() && f.page_state(7).is_none());
}

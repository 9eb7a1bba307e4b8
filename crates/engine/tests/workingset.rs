//! Workingset detection (onedrain, Linux 4.15; Linux 3.15 workingset.c).

use pcache::{Config, Item, LruList, PageCache, Tunables};

fn cache(workingset: bool) -> PageCache {
    PageCache::new(Config {
        memory_bytes: 1024 * 4096,
        // One set of per-CPU batches: a test thread that migrates would
        // otherwise leave pages in another CPU's lru_add batch, where
        // mark_page_accessed cannot activate them (as in the kernel).
        nr_cpus: 1,
        tunables: Tunables { workingset, kswapd: false, ra_pages: 0, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap()
}

fn read(f: &pcache::File, i: u64) {
    let mut b = [0u8; 4096];
    assert_eq!(f.read_at(&mut b, i * 4096).unwrap(), 4096);
}

// Goal: a page evicted from the inactive list and read again soon, within
// a refault distance no larger than the active list, goes straight to the
// active list (workingset_refault and workingset_activate count it), where
// without workingset detection it starts inactive again.
// Method: 600 active pages (read twice); 100 pages read once (inactive);
// reclaim evicts the inactive ones; read one back; inspect it.
#[test]
fn refault_within_active_size_activates() {
    for on in [true, false] {
        let c = cache(on);
        let hot = c.open_memory("hot").unwrap();
        hot.set_len(600 * 4096).unwrap();
        for _ in 0..2 {
            for i in 0..600 {
                read(&hot, i);
            }
        }
        let cold = c.open_memory("cold").unwrap();
        cold.set_len(100 * 4096).unwrap();
        for i in 0..100 {
            read(&cold, i);
        }
        c.lru_add_drain_all();
        assert_eq!(c.vmstat().get(Item::nr_active_file), 600);
        // Evict the cold pages: the inactive list's tail.
        while (0..100).any(|i| cold.page_state(i).is_some()) {
            assert!(c.reclaim(32) > 0);
        }
        // Reclaim deactivated some active pages to keep the lists balanced;
        // enough stay active for the refault distance to fit.
        assert!(c.vmstat().get(Item::nr_active_file) >= 200);
        let before = c.vmstat();
        read(&cold, 50);
        c.lru_add_drain_all();
        let d = c.vmstat().delta(&before);
        let s = cold.page_state(50).unwrap();
        if on {
            assert_eq!(d.get(Item::workingset_refault), 1);
            assert_eq!(d.get(Item::workingset_activate), 1);
            assert_eq!(s.lru, Some(LruList::ActiveFile), "refaulted page activated");
        } else {
            assert_eq!(d.get(Item::workingset_refault), 0);
            assert_eq!(s.lru, Some(LruList::InactiveFile));
        }
    }
}

// Goal: a refault whose distance exceeds the active list's size (the page
// was out for longer than the active list could have held it) does not
// activate; it is counted as a refault only.
#[test]
fn distant_refault_does_not_activate() {
    let c = cache(true);
    let f = c.open_memory("f").unwrap();
    f.set_len(3000 * 4096).unwrap();
    read(&f, 0);
    c.lru_add_drain_all();
    // Stream far more than the cache past it: many evictions since page 0's.
    for i in 1..3000 {
        read(&f, i);
    }
    assert!(f.page_state(0).is_none(), "page 0 was evicted");
    let before = c.vmstat();
    read(&f, 0);
    c.lru_add_drain_all();
    let d = c.vmstat().delta(&before);
    assert_eq!(d.get(Item::workingset_refault), 1);
    assert_eq!(d.get(Item::workingset_activate), 0);
    assert_eq!(f.page_state(0).unwrap().lru, Some(LruList::InactiveFile));
}

// Goal: every evicted page leaves one shadow entry (counted), truncation
// removes the shadow entries of its range, and pages of a truncated file
// that come back are not refaults.
#[test]
fn truncate_forgets_shadows() {
    let c = cache(true);
    let f = c.open_memory("t").unwrap();
    f.set_len(100 * 4096).unwrap();
    for i in 0..100 {
        read(&f, i);
    }
    c.lru_add_drain_all();
    while (0..100).any(|i| f.page_state(i).is_some()) {
        assert!(c.reclaim(32) > 0);
    }
    assert_eq!(c.vmstat().get(Item::nr_workingset_shadows), 100, "one shadow per evicted page");
    f.set_len(0).unwrap();
    assert_eq!(c.vmstat().get(Item::nr_workingset_shadows), 0, "truncate removed them");
    f.set_len(100 * 4096).unwrap();
    let before = c.vmstat();
    for i in 0..100 {
        read(&f, i);
    }
    assert_eq!(c.vmstat().delta(&before).get(Item::workingset_refault), 0);
}

// Goal: shadow entries stay bounded. A stream many times the size of
// memory leaves a shadow for every evicted page; the shadow-node shrinker
// keeps the leaves holding only shadows (workingset_nodes) at about one per
// 8 frames (the kernel's limit), so shadows stay within 64 per such leaf,
// and counts the leaves it emptied (workingset_nodereclaim). Truncation
// then removes every shadow of the file.
#[test]
fn shadow_nodes_are_bounded_and_truncate_removes_shadows() {
    let c = cache(true);
    let frames = 1024u64;
    let max_nodes = frames >> 3;
    let f = c.open_memory("stream").unwrap();
    let n = 40 * frames;
    f.set_len(n * 4096).unwrap();
    let mut peak_nodes = 0;
    for i in 0..n {
        read(&f, i);
        if i % 256 == 0 {
            peak_nodes = peak_nodes.max(c.vmstat().get(Item::workingset_nodes));
        }
    }
    let v = c.vmstat();
    // Slack: one reclaim pass evicts at most a few batches of 32 pages
    // before its shrinker call.
    assert!(peak_nodes <= max_nodes + 8, "{peak_nodes} shadow nodes, limit {max_nodes}");
    assert!(v.get(Item::workingset_nodereclaim) > 0);
    let shadows = v.get(Item::nr_workingset_shadows);
    assert!(shadows <= (max_nodes + 8) * 64 + frames, "{shadows} shadows");
    assert!(shadows >= max_nodes * 32, "shadows are kept up to the limit: {shadows}");
    f.set_len(0).unwrap();
    let v = c.vmstat();
    assert_eq!(v.get(Item::nr_workingset_shadows), 0);
    assert_eq!(v.get(Item::workingset_nodes), 0);
}

//! Linux 5.9-6.18 workingset balancing (`WorkingsetVersion::Linux6`)
//! against 3.15's: the refault-gated deactivation of the active file list
//! (prepare_scan_count's `may_deactivate`, snapshot_refaults) and the
//! eviction timestamp taken before the clock ages.

mod common;

use common::pin_to_cpu0;
use pcache::{Config, Item, LruList, PageCache, Tunables, WorkingsetVersion};

fn cache(version: WorkingsetVersion) -> PageCache {
    PageCache::new(Config {
        memory_bytes: 1024 * 4096,
        tunables: Tunables {
            workingset: true,
            workingset_version: version,
            kswapd: false,
            ra_pages: 0,
            ..Tunables::default()
        },
        ..Config::default()
    })
    .unwrap()
}

fn read(f: &pcache::File, i: u64) {
    let mut b = [0u8; 4096];
    assert_eq!(f.read_at(&mut b, i * 4096).unwrap(), 4096);
}

// Goal: with the inactive list not low, 3.15 never deactivates active file
// pages; Linux6 does so in the first reclaim after a refault was activated
// ("when refaults are being observed ... deactivate to get rid of any stale
// active pages quickly"), and stops again once snapshot_refaults has
// recorded it.
// Method: 300 active pages, 600 inactive; reclaim (no refault yet); read
// an evicted page back (an activated refault); reclaim twice more; count
// pgdeactivate in each reclaim.
#[test]
fn refault_activation_lets_the_next_reclaim_deactivate() {
    pin_to_cpu0();
    for version in [WorkingsetVersion::Linux315, WorkingsetVersion::Linux6] {
        let c = cache(version);
        let hot = c.open_memory("hot").unwrap();
        hot.set_len(300 * 4096).unwrap();
        for _ in 0..2 {
            for i in 0..300 {
                read(&hot, i);
            }
        }
        let cold = c.open_memory("cold").unwrap();
        cold.set_len(600 * 4096).unwrap();
        for i in 0..600 {
            read(&cold, i);
        }
        c.lru_add_drain_all();
        assert_eq!(c.vmstat().get(Item::nr_active_file), 300);
        assert_eq!(c.vmstat().get(Item::nr_inactive_file), 600);

        // No refault yet, inactive not low: nobody deactivates.
        let before = c.vmstat();
        assert!(c.reclaim(32) >= 32);
        assert_eq!(c.vmstat().delta(&before).get(Item::pgdeactivate), 0, "{version:?}: no refaults");
        assert!(cold.page_state(0).is_none(), "the inactive tail was evicted");

        // An activated refault: distance ~32, within the active list.
        let before = c.vmstat();
        read(&cold, 0);
        c.lru_add_drain_all();
        assert_eq!(c.vmstat().delta(&before).get(Item::workingset_activate), 1);
        assert_eq!(cold.page_state(0).unwrap().lru, Some(LruList::ActiveFile));

        let before = c.vmstat();
        assert!(c.reclaim(32) >= 32);
        let deactivated = c.vmstat().delta(&before).get(Item::pgdeactivate);
        match version {
            WorkingsetVersion::Linux315 => assert_eq!(deactivated, 0, "3.15: inactive is not low"),
            // Each priority p from 12 down scans size >> p of each list:
            // inactive 1 + 2 + 4 + 8 + 17 reach 32 at priority 5, active
            // (301 pages, shrinking as it goes) gives 0 + 1 + 2 + 4 + 9.
            WorkingsetVersion::Linux6 => assert_eq!(deactivated, 16, "Linux6: refaults seen"),
        }

        // The snapshot now matches: no new refault, no deactivation.
        let before = c.vmstat();
        assert!(c.reclaim(32) >= 32);
        assert_eq!(c.vmstat().delta(&before).get(Item::pgdeactivate), 0, "{version:?}: after the snapshot");
    }
}

// Goal: a page read back right after its own eviction, with an empty
// active list, is activated by 3.15 (the shadow holds the clock after the
// eviction advanced it: distance 0) but not by Linux6 (the shadow holds
// nonresident_age before it aged: distance 1 > 0 active pages).
#[test]
fn eviction_timestamp_precedes_aging_in_linux6() {
    pin_to_cpu0();
    for version in [WorkingsetVersion::Linux315, WorkingsetVersion::Linux6] {
        let c = cache(version);
        let f = c.open_memory("f").unwrap();
        f.set_len(800 * 4096).unwrap();
        for i in 0..800 {
            read(&f, i);
        }
        c.lru_add_drain_all();
        assert_eq!(c.vmstat().get(Item::nr_active_file), 0);
        // 800 >> 9 = 1: exactly the inactive tail, page 0, goes.
        assert_eq!(c.reclaim(1), 1);
        assert!(f.page_state(0).is_none());
        let before = c.vmstat();
        read(&f, 0);
        c.lru_add_drain_all();
        let d = c.vmstat().delta(&before);
        assert_eq!(d.get(Item::workingset_refault), 1);
        let lru = f.page_state(0).unwrap().lru;
        match version {
            WorkingsetVersion::Linux315 => {
                assert_eq!(d.get(Item::workingset_activate), 1);
                assert_eq!(lru, Some(LruList::ActiveFile));
            }
            WorkingsetVersion::Linux6 => {
                assert_eq!(d.get(Item::workingset_activate), 0);
                assert_eq!(lru, Some(LruList::InactiveFile));
            }
        }
    }
}

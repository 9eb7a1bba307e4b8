//! Runs `lru-contention` at a tiny size and checks what it measures: every
//! metric of every thread count, one page access per timed read, the batch
//! references that follow from the variants' definitions, the sampled LRU
//! list sizes and the plots. The report's and the JSON's completeness is
//! the registry's contract test (contract.rs). Asserts nothing about
//! timings or about which variant is faster.

mod common;

use common::Tiny;
use pcache_workloads::lru_contention::LruContention;

const VARIANTS: [&str; 4] = ["2.6.10", "danilov", "batched", "mglru"];

#[test]
fn lru_contention_tiny_measures_what_it_claims() {
    let t = common::run::<LruContention>(|_| {});
    let opts = &t.json["params"]["opts"];
    let (ops_per_thread, cache_pages) =
        (opts["ops_per_thread"].as_u64().unwrap(), opts["mem_bytes"].as_u64().unwrap() / 4096);
    let workloads = ["zipf-1t", "zipf-2t"];
    let measures = [
        "ops/s",
        "lru_lock/access",
        "atomic_ops/access",
        "atomic_flag_rmw/access",
        "mark_batch_refs/access",
        "pgactivate/access",
        "hit_ratio_%",
        "kswapd_efficiency_%",
        "elapsed_s",
    ];
    assert_eq!(t.variant_names(), VARIANTS);
    // One run, one sample; kswapd may scan nothing in a tiny run, and its
    // ratio is then null.
    t.assert_metrics(&common::metric_names(&workloads, &measures), |_| 1, |n| n.ends_with("kswapd_efficiency_%"));
    let keys = [
        "pgcache_hit",
        "pgcache_miss",
        "pgactivate",
        "lru_lock_acquire",
        "atomic_flag_rmw",
        "lru_drain",
        "pgscan_kswapd",
        "pgsteal_kswapd",
        "mark_page_accessed_calls",
    ];
    for v in t.variants() {
        for w in workloads {
            assert!(Tiny::first(v, &format!("{w} ops/s")) > 0.0);
            let hit = Tiny::first(v, &format!("{w} hit_ratio_%"));
            assert!(hit > 0.0 && hit < 100.0, "{w}: the working set does not fit, so some reads miss: {hit}");
            // Every timed read is one page access.
            let vm = Tiny::vmstat(v, w, &keys);
            let threads: u64 = w.trim_start_matches("zipf-").trim_end_matches('t').parse().unwrap();
            let (hits, misses) = (vm["pgcache_hit"].as_u64().unwrap(), vm["pgcache_miss"].as_u64().unwrap());
            assert_eq!(hits + misses, threads * ops_per_thread, "{w}");
            assert!(misses > 0, "{w}: reclaim had nothing to do");
        }
    }
    // What follows from the variants' definitions: 2.6.10 takes no batch
    // references; Danilov's batch takes one per mark_page_accessed call.
    for w in workloads {
        assert_eq!(Tiny::first(&t.variants()[0], &format!("{w} mark_batch_refs/access")), 0.0);
        assert_eq!(Tiny::first(&t.variants()[1], &format!("{w} mark_batch_refs/access")), 1.0);
    }
    for part in ["fewer lru_lock", "more atomic ops", "hit ratio"] {
        assert!(t.has_check(part), "no check on {part}");
    }

    // The LRU list sizes, sampled at the most threads, per variant: the
    // series are as long as each other, at most 200 points, the lists
    // never hold more pages than the cache, the fraction is in [0, 1].
    let lru = &t.json["extra"]["lru_sizes"];
    assert_eq!(lru["workload"], "zipf-2t", "{lru}");
    let series = lru["variants"].as_object().expect("extra.lru_sizes.variants");
    assert_eq!(series.len(), VARIANTS.len());
    for name in VARIANTS {
        let v = &series.get(name).unwrap_or_else(|| panic!("extra.lru_sizes lacks {name}"));
        let col = |k: &str| v[k].as_array().unwrap_or_else(|| panic!("{name} lacks {k}")).clone();
        let t = col("t_ms");
        assert!(!t.is_empty() && t.len() <= 200, "{name}: {} points", t.len());
        assert!(v["samples"].as_u64().unwrap() >= t.len() as u64);
        let ts: Vec<f64> = t.iter().map(|x| x.as_f64().unwrap()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{name}: time goes forward: {ts:?}");
        for k in ["nr_active_file", "nr_inactive_file", "nr_free_pages", "active_fraction"] {
            assert_eq!(col(k).len(), t.len(), "{name} {k}");
        }
        for (a, i) in col("nr_active_file").iter().zip(col("nr_inactive_file")) {
            let (a, i) = (a.as_u64().unwrap(), i.as_u64().unwrap());
            assert!(a + i <= cache_pages && a + i > 0, "{name}: {a} + {i} pages on the lists");
        }
        assert!(col("active_fraction").iter().all(|f| f.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f))));
    }

    // The plots: throughput, hit ratio, one of the list sizes per variant,
    // one of the active fractions naming every variant.
    t.svg("lru-contention-throughput.svg");
    t.svg("lru-contention-hit-ratio.svg");
    let fraction = t.svg("lru-active-fraction.svg");
    for name in VARIANTS {
        let sizes = t.svg(&format!("lru-sizes-{name}.svg"));
        assert!(sizes.contains(name) && sizes.contains("nr_active_file") && sizes.contains("nr_inactive_file"));
        assert!(fraction.contains(name), "lru-active-fraction.svg lacks {name}");
    }
    assert!(t.json["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("lru-active-fraction.svg")));
    t.assert_report_has(["Hmean", "lru_lock_acquire", "pgsteal_kswapd"]);
    t.assert_report_has(common::metric_names(&workloads, &measures));
}

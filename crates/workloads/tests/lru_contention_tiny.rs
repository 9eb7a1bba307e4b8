//! Runs `lru-contention` at a tiny size and checks that the report and the
//! JSON are complete: every variant, every metric of every thread count,
//! the vmstat deltas, the checks, the sampled LRU list sizes, the plots.
//! Asserts nothing about timings or about which variant is faster; only
//! about counts that follow from the variants' definitions.

use pcache_workloads::lru_contention::{self, LruContention, LruContentionOpts};
use pcache_workloads::report::ExperimentResult;
use pcache_workloads::runner;

#[test]
fn lru_contention_tiny_report_and_json_are_complete() {
    let plots = tempfile::tempdir().unwrap();
    let opts = LruContentionOpts { plot_dir: Some(plots.path().to_path_buf()), ..LruContentionOpts::tiny() };
    let (result, params) = lru_contention::run_opts(&opts).expect("lru-contention runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

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
    let names: Vec<String> = workloads.iter().flat_map(|w| measures.iter().map(move |m| format!("{w} {m}"))).collect();

    let variants = json["variants"].as_array().expect("variants");
    let vnames: Vec<&str> = variants.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vnames, ["2.6.10", "danilov", "batched"], "no kernel column with kernel: false");
    for v in variants {
        let metrics = v["metrics"].as_object().expect("metrics");
        assert_eq!(metrics.len(), names.len(), "{:?}", metrics.keys().collect::<Vec<_>>());
        for n in &names {
            let samples =
                metrics.get(n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{} lacks {n}", v["name"]));
            assert_eq!(samples.len(), 1, "{n}: one run, one sample");
            // kswapd may scan nothing in a tiny run: its ratio is then null.
            if !n.ends_with("kswapd_efficiency_%") {
                let x = samples[0].as_f64().unwrap_or_else(|| panic!("{n} = {}", samples[0]));
                assert!(x.is_finite() && x >= 0.0, "{n} = {x}");
            }
        }
        for w in workloads {
            assert!(v["metrics"][format!("{w} ops/s")][0].as_f64().unwrap() > 0.0);
            let hit = v["metrics"][format!("{w} hit_ratio_%")][0].as_f64().unwrap();
            assert!(hit > 0.0 && hit < 100.0, "{w}: the working set does not fit, so some reads miss: {hit}");
            let vm = v["vmstat"][w].as_object().unwrap_or_else(|| panic!("{} vmstat {w}", v["name"]));
            for key in [
                "pgcache_hit",
                "pgcache_miss",
                "pgactivate",
                "lru_lock_acquire",
                "atomic_flag_rmw",
                "lru_drain",
                "pgscan_kswapd",
                "pgsteal_kswapd",
                "mark_page_accessed_calls",
            ] {
                assert!(vm.get(key).and_then(|x| x.as_u64()).is_some(), "{w} vmstat {key}");
            }
            // Every timed read is one page access.
            let threads: u64 = w.trim_start_matches("zipf-").trim_end_matches('t').parse().unwrap();
            let reads = threads * opts.ops_per_thread;
            assert_eq!(vm["pgcache_hit"].as_u64().unwrap() + vm["pgcache_miss"].as_u64().unwrap(), reads, "{w}");
            assert!(vm["pgcache_miss"].as_u64().unwrap() > 0, "{w}: reclaim had nothing to do");
        }
    }
    // What follows from the variants' definitions: 2.6.10 takes no batch
    // references; Danilov's batch takes one per mark_page_accessed call.
    for w in workloads {
        assert_eq!(variants[0]["metrics"][format!("{w} mark_batch_refs/access")][0].as_f64(), Some(0.0));
        assert_eq!(variants[1]["metrics"][format!("{w} mark_batch_refs/access")][0].as_f64(), Some(1.0));
    }

    let checks = json["checks"].as_array().expect("checks");
    assert!(checks.iter().any(|c| c["name"].as_str().is_some_and(|n| n.contains("fewer lru_lock"))));
    assert!(checks.iter().any(|c| c["name"].as_str().is_some_and(|n| n.contains("more atomic ops"))));
    assert!(checks.iter().any(|c| c["name"].as_str().is_some_and(|n| n.contains("hit ratio"))));
    assert_eq!(json["metric_specs"].as_array().map(Vec::len), Some(names.len()));

    // The LRU list sizes, sampled at the most threads, per variant: the
    // series are as long as each other, at most 200 points, the lists
    // never hold more pages than the cache, the fraction is in [0, 1].
    let lru = &json["extra"]["lru_sizes"];
    assert_eq!(lru["workload"], "zipf-2t", "{lru}");
    let cache_pages = opts.mem_bytes / 4096;
    let series = lru["variants"].as_object().expect("extra.lru_sizes.variants");
    let mut keys: Vec<&str> = series.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["2.6.10", "batched", "danilov"]);
    for name in ["2.6.10", "danilov", "batched"] {
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
        for f in col("active_fraction") {
            let f = f.as_f64().unwrap();
            assert!((0.0..=1.0).contains(&f), "{name}: active fraction {f}");
        }
    }

    // The plots: throughput, hit ratio, one of the list sizes per variant,
    // one of the active fractions naming every variant.
    let svg = |f: &str| std::fs::read_to_string(plots.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    for f in ["lru-contention-throughput.svg", "lru-contention-hit-ratio.svg"] {
        assert!(svg(f).starts_with("<svg"), "{f}");
    }
    for name in ["2.6.10", "danilov", "batched"] {
        let sizes = svg(&format!("lru-sizes-{name}.svg"));
        assert!(sizes.starts_with("<svg") && sizes.contains(name), "lru-sizes-{name}.svg");
        assert!(sizes.contains("nr_active_file") && sizes.contains("nr_inactive_file"));
    }
    let fraction = svg("lru-active-fraction.svg");
    for name in ["2.6.10", "danilov", "batched"] {
        assert!(fraction.contains(name), "lru-active-fraction.svg lacks {name}");
    }
    assert!(json["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("lru-active-fraction.svg")));

    // The JSON reads back.
    let back: ExperimentResult = serde_json::from_str(&text).expect("deserialises");
    assert_eq!(back.variants.len(), 3);
    assert_eq!(back.variants[0].metrics.len(), names.len());

    // The report names every variant, workload and table metric, and says
    // what the seed claimed and whether this run agrees.
    let report = runner::report::<LruContention>(&result, &params);
    for needle in [
        "2.6.10",
        "danilov",
        "batched",
        "Hmean",
        "Amean",
        "Stddev",
        "CoeffVar",
        "BAmean-95",
        "lru_lock_acquire",
        "pgsteal_kswapd",
        "seed 002 reported",
        "same direction as the seed",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    for w in workloads {
        for m in measures {
            assert!(report.contains(&format!("{w} {m}")), "report lacks {w} {m}");
        }
    }
}

// Goal: the common options reach the experiment (quick sizes, memory,
// variants, runs) and bad ones are refused before anything runs.
#[test]
fn lru_contention_takes_the_common_options() {
    let exp = pcache_workloads::experiment::ExpOpts {
        mem_bytes: Some(8 << 20),
        variants: Some(vec!["batched".into(), "2.6.10".into()]),
        runs: Some(2),
        quick: true,
        ..Default::default()
    };
    let o = LruContentionOpts::from_exp(&exp).unwrap();
    assert_eq!(o.mem_bytes, 8 << 20);
    assert_eq!(o.variants, ["batched", "2.6.10"]);
    assert_eq!(o.runs, 2);
    assert!(o.quick && !o.kernel);
    assert!(o.validate().is_ok());
    let bad = pcache_workloads::experiment::ExpOpts { variants: Some(vec!["2.4".into()]), ..exp };
    assert!(runner::run::<LruContention>(&bad).is_err());
}

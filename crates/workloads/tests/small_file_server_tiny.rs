//! Runs `small-file-server` at a tiny size and checks what it measures:
//! every rule's column with every metric of the three workloads, hit
//! ratios in range, the vmstat deltas of each workload, the hit-ratio
//! series per rule and the workloads described in the report. The
//! report's and the JSON's completeness is the registry's contract test
//! (contract.rs). Asserts nothing about timings or about which rule wins.

mod common;

use common::Tiny;
use pcache_workloads::small_file_server::{SmallFileServer, PRESETS, WORKLOADS};

#[test]
fn small_file_server_tiny_measures_what_it_claims() {
    let t = common::run::<SmallFileServer>(|o| o.seed = 7);
    let names: Vec<String> =
        t.json["metric_specs"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).collect();
    for needed in [
        "server requests/s",
        "server hit_ratio",
        "server files_hit_ratio",
        "server small_hit_ratio",
        "scan ws_cached_%",
        "scan pgactivate",
        "random elapsed_s",
        "random hit_ratio",
    ] {
        assert!(names.iter().any(|n| n == needed), "no metric {needed}");
    }
    // Every default preset, in table order, 2.6.20's rule the baseline.
    let presets: Vec<&str> = PRESETS.iter().filter(|p| p.default).map(|p| p.name).collect();
    assert_eq!(t.variant_names(), presets);
    assert_eq!(presets[0], "2.6.20-prev-index");
    // A variant that keeps every one-page file cached has no one-page miss
    // to time (prev-pos and mglru often do at this size): that mean is over
    // nothing, null.
    t.assert_metrics(&names, |_| 1, |n| n.ends_with("small_miss_us"));
    let keys = ["pgcache_hit", "pgcache_miss", "mark_page_accessed_calls", "pgactivate", "pgpgin"];
    for v in t.variants() {
        for n in names.iter().filter(|n| n.ends_with("ratio")) {
            assert!(Tiny::first(v, n) <= 1.0, "{} {n}", v["name"]);
        }
        assert!(Tiny::first(v, "server requests/s") > 0.0);
        for w in WORKLOADS {
            let vm = Tiny::vmstat(v, w, &keys);
            assert!(vm["pgcache_hit"].as_u64().unwrap() + vm["pgcache_miss"].as_u64().unwrap() > 0, "{w}");
        }
    }
    assert!(t.checks().len() >= 6);
    assert!(t.json["extra"]["server_hit_ratio_series"].as_object().is_some_and(|m| m.len() == presets.len()));
    t.assert_report_has(["SPECweb99", "512-byte", "128 bytes", "vmstat deltas", "mark_page_accessed_calls"]);
    t.assert_report_has(&names);
}

//! Runs `small-file-server` at a tiny size and checks that the report and
//! the JSON are complete: every variant, every metric, the vmstat deltas.
//! Asserts nothing about timings or about which variant wins.

use pcache_workloads::experiment::ExpOpts;
use pcache_workloads::report::ExperimentResult;
use pcache_workloads::runner;
use pcache_workloads::small_file_server::{SmallFileServer, PRESETS, WORKLOADS};

// Goal: one run of every variant at a 4 MiB cache produces a result whose
// JSON and report hold everything the experiment promises. Method: run it,
// walk the JSON, read it back, and look for each piece in the report.
#[test]
fn small_file_server_tiny_report_and_json_are_complete() {
    let opts = ExpOpts {
        mem_bytes: Some(4 << 20),
        runs: Some(1),
        quick: true,
        progress: false,
        seed: 7,
        kernel: false,
        ..ExpOpts::default()
    };
    let (result, params) = runner::run::<SmallFileServer>(&opts).expect("small-file-server runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let specs = json["metric_specs"].as_array().expect("metric specs");
    let names: Vec<&str> = specs.iter().map(|m| m["name"].as_str().unwrap()).collect();
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
        assert!(names.contains(&needed), "no metric {needed}");
    }

    // Every preset, in table order, the kernel column absent.
    let variants = json["variants"].as_array().expect("variants");
    let vnames: Vec<&str> = variants.iter().map(|v| v["name"].as_str().unwrap()).collect();
    let presets: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    assert_eq!(vnames, presets);
    assert_eq!(vnames[0], "2.6.20-prev-index");
    for v in variants {
        let vn = v["name"].as_str().unwrap();
        let metrics = v["metrics"].as_object().expect("metrics");
        assert_eq!(metrics.len(), names.len(), "{vn}: {:?}", metrics.keys().collect::<Vec<_>>());
        for n in &names {
            let samples = metrics.get(*n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{vn} lacks {n}"));
            assert_eq!(samples.len(), 1, "{vn} {n}: one run, one sample");
            let x = samples[0].as_f64().unwrap_or_else(|| panic!("{vn} {n} = {}", samples[0]));
            assert!(x.is_finite() && x >= 0.0, "{vn} {n} = {x}");
            if n.ends_with("ratio") {
                assert!(x <= 1.0, "{vn} {n} = {x}");
            }
        }
        assert!(v["metrics"]["server requests/s"][0].as_f64().unwrap() > 0.0);
        for w in WORKLOADS {
            let vm = v["vmstat"][w].as_object().unwrap_or_else(|| panic!("{vn} vmstat {w}"));
            for key in ["pgcache_hit", "pgcache_miss", "mark_page_accessed_calls", "pgactivate", "pgpgin"] {
                assert!(vm.get(key).and_then(|x| x.as_u64()).is_some(), "{vn} {w} vmstat {key}");
            }
            assert!(vm["pgcache_hit"].as_u64().unwrap() + vm["pgcache_miss"].as_u64().unwrap() > 0, "{vn} {w}");
        }
    }
    let checks = json["checks"].as_array().expect("checks");
    assert!(checks.len() >= 6);
    assert!(json["extra"]["server_hit_ratio_series"].as_object().is_some_and(|m| m.len() == presets.len()));
    assert!(json["notes"].as_array().is_some_and(|n| n.iter().any(|s| s.as_str().unwrap().contains("kernel"))));

    // The JSON reads back.
    let back: ExperimentResult = serde_json::from_str(&text).expect("deserialises");
    assert_eq!(back.variants.len(), presets.len());
    assert_eq!(back.variants[0].metrics.len(), names.len());

    // The report names every variant, workload and table metric, and says
    // what the seed claimed and whether this run agrees.
    let report = runner::report::<SmallFileServer>(&result, &params);
    for needle in [
        "Hmean",
        "Amean",
        "Stddev",
        "CoeffVar",
        "BAmean-95",
        "SPECweb99",
        "512-byte",
        "128 bytes",
        "vmstat deltas",
        "mark_page_accessed_calls",
        "seed 003 reported",
        "same direction as the seed",
        "kernel column not run",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    for p in &presets {
        assert!(report.contains(p), "report lacks {p}");
    }
    for n in &names {
        assert!(report.contains(n), "report lacks {n}");
    }
}

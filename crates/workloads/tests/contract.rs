//! The registry's contract, over every experiment it lists.
//!
//! Goal: whatever an experiment measures, a run of it gives a complete
//! report and JSON in the documented schema, so the CLI, the main job and
//! BENCHMARKS.md can rely on them without knowing the experiment.
//!
//! Method: run each experiment at its smoke sizes (`Experiment::smoke`,
//! no kernel column) through `experiment::run`, as the CLI does, and
//! check the JSON and the report. For the seed experiments (those with
//! presets) the JSON is an `ExperimentResult`: every variant has every
//! metric's samples, every pcache column has vmstat deltas per workload,
//! the checks are there and `same_direction` is the verdict of those
//! checks. Nothing here asserts a timing or which variant wins.

use pcache_workloads::experiment::{self, Experiment};
use pcache_workloads::registry;
use pcache_workloads::report::{same_direction, ExperimentResult};

fn check_seed_experiment(e: &dyn Experiment, json: &str, report: &str) {
    let name = e.name();
    let r: ExperimentResult = serde_json::from_str(json).unwrap_or_else(|err| panic!("{name}: schema: {err}"));
    assert_eq!(r.experiment, name);
    assert!(!r.origin.is_empty() && !r.claim.is_empty(), "{name}: origin and claim");
    // The variants run are the experiment's defaults, in order, and the
    // smoke run has no kernel column.
    let names: Vec<&str> = r.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, pcache_workloads::variants::defaults(e.presets()), "{name}: variants");
    assert!(!r.metric_specs.is_empty(), "{name}: metric specs");
    let workloads = r.workloads();
    for v in &r.variants {
        assert!(!v.stands_for.is_empty(), "{name} {}: stands_for", v.name);
        for s in &r.metric_specs {
            assert_eq!(s.name, format!("{} {}", s.workload, s.measure), "{name}: metric name");
            assert!(!v.samples(&s.name).is_empty(), "{name} {}: no samples of {}", v.name, s.name);
        }
        for w in &workloads {
            let vm = v.vmstat.get(w).unwrap_or_else(|| panic!("{name} {}: no vmstat of {w}", v.name));
            assert!(vm.get("pgalloc").and_then(|x| x.as_u64()).is_some(), "{name} {} {w}: vmstat counters", v.name);
        }
    }
    assert!(!r.checks.is_empty(), "{name}: checks");
    assert!(r.checks.iter().any(|c| c.counts), "{name}: no counted check");
    assert_eq!(r.same_direction, same_direction(&r.checks), "{name}: the verdict is the checks'");
    assert!(r.params["workloads"].as_array().is_some_and(|w| !w.is_empty()), "{name}: params.workloads");
    assert!(r.notes.iter().any(|n| n.contains("kernel column")), "{name}: a note on the kernel column");

    // The report: set-up, compare-kernels, checks and verdict.
    for v in &r.variants {
        assert!(report.contains(&v.name), "{name}: report lacks variant {}", v.name);
    }
    for s in r.metric_specs.iter().filter(|s| s.table) {
        assert!(report.contains(&s.name), "{name}: report lacks metric {}", s.name);
    }
    for needle in ["compare-kernels", "BAmean-95", "checks in the original's direction", "time:"] {
        assert!(report.contains(needle), "{name}: report lacks {needle:?}");
    }
    assert!(report.contains(&format!("the original measurement ({})", r.origin)), "{name}: report lacks the claim");
}

/// Replay keeps the schema `pcache replay --json` always had (the Python
/// package and the sweep read it): one trace's record, a run per default
/// variant and cache size, and a miss-ratio column per variant.
fn check_replay(e: &dyn Experiment, json: &serde_json::Value, report: &str) {
    let variants = pcache_workloads::variants::defaults(e.presets());
    assert_eq!(json["variants"], serde_json::json!(variants), "replay: variants");
    let sizes = json["sizes"].as_array().map_or(0, Vec::len);
    assert_eq!(sizes, 2, "replay: the smoke run's two sizes");
    assert_eq!(json["results"].as_array().map_or(0, Vec::len), sizes * variants.len(), "replay: runs");
    for v in &variants {
        assert!(report.contains(&format!("{v} miss%")), "replay: report lacks {v}");
    }
}

/// getscan is not a seed experiment: one side per default variant, each
/// with its GET and scan figures and a hit ratio, and no kernel side.
fn check_getscan(e: &dyn Experiment, json: &serde_json::Value, report: &str) {
    let variants = pcache_workloads::variants::defaults(e.presets());
    let sides = json["pcache"].as_array().expect("getscan: pcache sides");
    let names: Vec<&str> = sides.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, variants, "getscan: a side per default variant");
    for s in sides {
        for k in ["get_ops_per_s", "get_p99_us", "scan_mib_per_s"] {
            assert!(s[k].as_f64().is_some_and(|v| v > 0.0), "getscan {}: {k}", s["name"]);
        }
        assert!(s["get_hit_ratio"].as_f64().is_some_and(|h| (0.0..=1.0).contains(&h)), "getscan: hit ratio");
        assert!(report.contains(s["name"].as_str().unwrap_or("?")), "getscan: report lacks {}", s["name"]);
    }
    assert!(json["kernel"].is_null(), "getscan: no kernel column in a smoke run");
}

#[test]
fn every_experiment_gives_a_complete_report_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    for e in registry::EXPERIMENTS {
        let opts =
            experiment::ExpOpts { dir: Some(tmp.path().to_path_buf()), progress: false, kernel: false, ..e.smoke() };
        let out = experiment::run(*e, &opts).unwrap_or_else(|err| panic!("{}: {err}", e.name()));
        let json: serde_json::Value = serde_json::from_str(&out.json).expect("valid JSON");
        assert!(!out.report.trim().is_empty(), "{}: empty report", e.name());
        if e.name() == "replay" {
            check_replay(*e, &json, &out.report);
            continue;
        }
        if e.name() == "getscan" {
            check_getscan(*e, &json, &out.report);
            continue;
        }
        assert_eq!(json["experiment"], e.name(), "every result names its experiment");
        if !e.presets().is_empty() {
            check_seed_experiment(*e, &out.json, &out.report);
        }
    }
}

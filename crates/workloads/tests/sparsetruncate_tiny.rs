//! Runs `sparsetruncate` at a tiny size and checks what it measures: one
//! sample per truncate, the mechanism the variants differ in by
//! construction (drains per truncate), the seed's rows, the CDF plots. The
//! report's and the JSON's completeness is the registry's contract test
//! (contract.rs). Asserts nothing about timings.

use pcache_workloads::experiment::ExpOpts;
use pcache_workloads::runner;
use pcache_workloads::sparsetruncate::{self, Sparsetruncate, SEED_ROWS};

#[test]
fn sparsetruncate_tiny_report_and_json_are_complete() {
    let plots = tempfile::tempdir().unwrap();
    let opts = ExpOpts {
        mem_bytes: Some(8 << 20),
        runs: Some(1),
        quick: true,
        progress: false,
        kernel: false,
        plot_dir: Some(plots.path().to_path_buf()),
        ..ExpOpts::default()
    };
    let (result, params) = runner::run::<Sparsetruncate>(&opts).expect("sparsetruncate runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let p = &json["params"]["sparsetruncate"];
    let truncates = (p["files"].as_u64().unwrap() * p["rounds"].as_u64().unwrap()) as usize;
    assert!(truncates >= 16, "{p}");
    let pages = p["file_bytes"].as_u64().unwrap() / p["page_size"].as_u64().unwrap();

    let backends = ["tmpfs", "file"];
    let measures =
        ["truncate_us", "truncate_cpu_us", "lru_drain/truncate", "pagevec_release/truncate", "lru_lock/truncate"];
    let names: Vec<String> = backends.iter().flat_map(|b| measures.iter().map(move |m| format!("{b} {m}"))).collect();

    let variants = json["variants"].as_array().expect("variants");
    let vnames: Vec<&str> = variants.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vnames, [sparsetruncate::BEFORE, sparsetruncate::AFTER], "no kernel column with kernel: false");
    for v in variants {
        let metrics = v["metrics"].as_object().expect("metrics");
        assert_eq!(metrics.len(), names.len(), "{:?}", metrics.keys().collect::<Vec<_>>());
        for n in &names {
            let samples =
                metrics.get(n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{} lacks {n}", v["name"]));
            let want = if n.ends_with("_us") { truncates } else { 1 };
            assert_eq!(samples.len(), want, "{n}");
            for x in samples {
                let x = x.as_f64().unwrap_or_else(|| panic!("{n} = {x}"));
                assert!(x.is_finite() && x >= 0.0, "{n} = {x}");
            }
        }
        for b in backends {
            let vm = v["vmstat"][b].as_object().unwrap_or_else(|| panic!("{} vmstat {b}", v["name"]));
            for key in ["lru_drain", "pagevec_release", "lru_lock_acquire", "pgfree"] {
                assert!(vm.get(key).and_then(|x| x.as_u64()).is_some(), "{b} vmstat {key}");
            }
            // Every hole page read was cached, and freed by the unlinks.
            assert_eq!(vm["pgfree"].as_u64().unwrap(), pages * truncates as u64, "{b}");
            let drains = v["metrics"][format!("{b} lru_drain/truncate")][0].as_f64().unwrap();
            let releases = v["metrics"][format!("{b} pagevec_release/truncate")][0].as_f64().unwrap();
            assert!(releases > 1.0, "{b}: {releases} releases per truncate");
            // The mechanism: a drain per release, or one per truncate.
            if v["name"] == sparsetruncate::BEFORE {
                assert_eq!(drains, releases, "{b}");
            } else {
                assert_eq!(drains, 1.0, "{b}");
            }
        }
    }
    assert_eq!(json["metric_specs"].as_array().map(Vec::len), Some(names.len()));
    let checks = json["checks"].as_array().unwrap();
    assert!(checks.len() >= 6, "{checks:?}");
    // The must-hold check holds on both backends.
    for b in backends {
        let c = checks
            .iter()
            .find(|c| c["name"].as_str().unwrap().starts_with(&format!("{b}: onedrain drains fewer")))
            .unwrap_or_else(|| panic!("{b} drain check"));
        assert_eq!(c["agrees"], true, "{c}");
    }

    for b in backends {
        for suffix in ["cdf", "cdf-body"] {
            let svg =
                std::fs::read_to_string(plots.path().join(format!("sparsetruncate-{b}-{suffix}.svg"))).expect("plot");
            assert!(svg.starts_with("<svg") && svg.contains(sparsetruncate::AFTER));
        }
    }

    let report = runner::report::<Sparsetruncate>(&result, &params);
    for row in SEED_ROWS {
        assert!(report.contains(&format!("{row} Time")), "report lacks row {row}:\n{report}");
    }
    for needle in
        ["sparsetruncate (tmpfs)", "sparsetruncate (file)", "tmpfs lru_drain/truncate", "file pagevec_release/truncate"]
    {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
}

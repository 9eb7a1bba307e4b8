//! Runs `dd` at a tiny size and checks what it measures: one sample per
//! timed iteration, who marks the page accessed (the counters the variants
//! differ in by construction), the plots. The report's and the JSON's
//! completeness is the registry's contract test (contract.rs). Asserts
//! nothing about timings or about which variant wins.

use pcache_workloads::dd::{self, Dd};
use pcache_workloads::experiment::ExpOpts;
use pcache_workloads::runner;

#[test]
fn dd_tiny_report_and_json_are_complete() {
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
    let (result, params) = runner::run::<Dd>(&opts).expect("dd runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let workloads = ["tmpfs-async", "tmpfs-fdatasync", "file-async", "file-fdatasync"];
    let measures =
        ["elapsed_s", "MB/s", "cpu_s", "atomic_flag_rmw/page", "mark_page_accessed/page", "init_page_accessed/page"];
    let names: Vec<String> = workloads.iter().flat_map(|w| measures.iter().map(move |m| format!("{w} {m}"))).collect();
    let iterations = json["params"]["dd"]["iterations"].as_u64().unwrap() as usize;
    assert_eq!(iterations, dd::QUICK_ITERATIONS);

    let variants = json["variants"].as_array().expect("variants");
    let vnames: Vec<&str> = variants.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vnames, [dd::BEFORE, dd::AFTER], "no kernel column with kernel: false");
    for v in variants {
        let metrics = v["metrics"].as_object().expect("metrics");
        assert_eq!(metrics.len(), names.len(), "{:?}", metrics.keys().collect::<Vec<_>>());
        for n in &names {
            let samples =
                metrics.get(n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{} lacks {n}", v["name"]));
            // Times: one per iteration; counters: one per run.
            let want = if n.ends_with("/page") { 1 } else { iterations };
            assert_eq!(samples.len(), want, "{n}");
            for x in samples {
                let x = x.as_f64().unwrap_or_else(|| panic!("{n} = {x}"));
                assert!(x.is_finite() && x >= 0.0, "{n} = {x}");
                if !n.ends_with("/page") {
                    assert!(x > 0.0, "{n} = {x}");
                }
            }
        }
        for w in workloads {
            let vm = v["vmstat"][w].as_object().unwrap_or_else(|| panic!("{} vmstat {w}", v["name"]));
            for key in ["atomic_flag_rmw", "mark_page_accessed_calls", "init_page_accessed_calls", "pgpgout", "pgalloc"]
            {
                assert!(vm.get(key).and_then(|x| x.as_u64()).is_some(), "{w} vmstat {key}");
            }
            assert!(vm["pgalloc"].as_u64().unwrap() > 0, "{w} allocated nothing");
            // Every page written is marked once: by mark_page_accessed in
            // vanilla, by init_page_accessed with accessed-v2.
            let (mark, init) = (
                v["metrics"][format!("{w} mark_page_accessed/page")][0].as_f64().unwrap(),
                v["metrics"][format!("{w} init_page_accessed/page")][0].as_f64().unwrap(),
            );
            if v["name"] == dd::BEFORE {
                assert!(mark >= 1.0 && init == 0.0, "{w}: {mark} {init}");
            } else {
                assert!(mark == 0.0 && init >= 1.0, "{w}: {mark} {init}");
            }
        }
        // fdatasync wrote the data out; the per-page counters are there.
        assert!(v["vmstat"]["file-fdatasync"]["pgpgout"].as_u64().unwrap() > 0);
    }
    let checks = json["checks"].as_array().unwrap();
    assert!(checks.len() >= 8, "{checks:?}");

    // One plot per workload.
    for w in workloads {
        let svg = std::fs::read_to_string(plots.path().join(format!("dd-{w}-elapsed.svg"))).expect("plot");
        assert!(svg.starts_with("<svg") && svg.contains(dd::AFTER));
    }

    // The seed's own tables, which the contract does not know.
    let report = runner::report::<Dd>(&result, &params);
    for needle in [
        "async dd tmpfs Max   elapsed",
        "async dd tmpfs Amean cpu",
        "fdatasync dd file  Amean elapsed",
        "tmpfs-async atomic_flag_rmw/page",
        "file-fdatasync mark_page_accessed/page",
        "init_page_accessed_calls",
        "59562",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
}

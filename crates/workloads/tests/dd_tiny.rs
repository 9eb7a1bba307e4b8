//! Runs `dd` at a tiny size and checks that the report and the JSON are
//! complete: every variant, every metric, the vmstat deltas. Asserts
//! nothing about timings or about which variant wins; only the counters the
//! variants differ in by construction (who marks the page accessed).

use pcache_workloads::dd;
use pcache_workloads::experiment::ExpOpts;
use pcache_workloads::report::ExperimentResult;

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
    let result = dd::run(&opts).expect("dd runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    assert_eq!(json["experiment"], "dd");
    assert_eq!(json["seed"], "000");
    assert!(json["seed_claim"].as_str().is_some_and(|s| s.contains("mark_page_accessed")));
    assert!(json["same_direction"].is_boolean());

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
        assert!(v["stands_for"].as_str().is_some_and(|s| !s.is_empty()));
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
    let specs = json["metric_specs"].as_array().unwrap();
    assert_eq!(specs.len(), names.len());
    let checks = json["checks"].as_array().unwrap();
    assert!(checks.len() >= 8, "{checks:?}");
    assert!(json["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("kernel column not run")));

    // The JSON reads back.
    let back: ExperimentResult = serde_json::from_str(&text).expect("deserialises");
    assert_eq!(back.variants.len(), 2);
    assert_eq!(back.variants[0].metrics.len(), names.len());

    // One plot per workload.
    for w in workloads {
        let svg = std::fs::read_to_string(plots.path().join(format!("dd-{w}-elapsed.svg"))).expect("plot");
        assert!(svg.starts_with("<svg") && svg.contains(dd::AFTER));
    }

    let report = dd::report(&result);
    for needle in [
        dd::BEFORE,
        dd::AFTER,
        "Hmean",
        "Amean",
        "Stddev",
        "CoeffVar",
        "BAmean-95",
        "async dd tmpfs Max   elapsed",
        "async dd tmpfs Amean cpu",
        "fdatasync dd file  Amean elapsed",
        "tmpfs-async atomic_flag_rmw/page",
        "file-fdatasync mark_page_accessed/page",
        "init_page_accessed_calls",
        "seed 000 reported",
        "59562",
        "same direction as the seed",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    for w in workloads {
        assert!(report.contains(&format!("{w} elapsed_s")), "{w}");
        assert!(report.contains(&format!("{w} MB/s")), "{w}");
    }
}

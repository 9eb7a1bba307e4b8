//! Runs `reclaim-writeback` at a tiny size and checks that the report and
//! the JSON are complete: every variant, every metric, the vmstat deltas.
//! Asserts nothing about timings or about which variant wins.

use pcache_workloads::reclaim_writeback::{self, ReclaimWritebackExp, ReclaimWritebackOpts};
use pcache_workloads::report::ExperimentResult;
use pcache_workloads::runner;

#[test]
fn reclaim_writeback_tiny_report_and_json_are_complete() {
    let plots = tempfile::tempdir().expect("a plot directory");
    let opts = ReclaimWritebackOpts {
        wb_threads: 2,
        kernel: false,
        plot_dir: Some(plots.path().to_path_buf()),
        set: vec![("dirty_background_ratio".into(), "10".into())],
        ..ReclaimWritebackOpts::tiny()
    };
    let (result, params) = reclaim_writeback::run(&opts).expect("reclaim-writeback runs");
    let text = result.to_json_pretty().expect("serialises");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let workloads = ["fsmark-1t", "fsmark-4t", "fsmark-16t", "simple-wb", "mmap-strm"];
    let mut names: Vec<String> = Vec::new();
    for w in workloads {
        if w.starts_with("fsmark") {
            names.push(format!("{w} files/s"));
        }
        for m in [
            "elapsed_s",
            "sync_s",
            "kswapd_efficiency_%",
            "nr_vmscan_write_direct",
            "nr_vmscan_write_kswapd",
            "nr_vmscan_immediate_reclaim",
            "pgrotated",
            "allocstall",
            "pgscan_direct",
            "throttled_ms",
            "congestion_waits",
        ] {
            names.push(format!("{w} {m}"));
        }
    }

    let variants = json["variants"].as_array().expect("variants");
    let vnames: Vec<&str> = variants.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(vnames, ["3.1", "3.2"]);
    for v in variants {
        let metrics = v["metrics"].as_object().expect("metrics");
        assert_eq!(metrics.len(), names.len(), "{:?}", metrics.keys().collect::<Vec<_>>());
        for n in &names {
            let samples =
                metrics.get(n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{} lacks {n}", v["name"]));
            assert_eq!(samples.len(), 1, "{n}: one run, one sample");
            // A ratio over nothing is null; everything else is a number.
            if !n.ends_with("kswapd_efficiency_%") {
                let x = samples[0].as_f64().unwrap_or_else(|| panic!("{n} = {}", samples[0]));
                assert!(x.is_finite() && x >= 0.0, "{n} = {x}");
            }
        }
        for w in workloads {
            let e = v["metrics"][format!("{w} elapsed_s")][0].as_f64().unwrap();
            assert!(e > 0.0, "{w} elapsed {e}");
            let vm = v["vmstat"][w].as_object().unwrap_or_else(|| panic!("{} vmstat {w}", v["name"]));
            for key in ["pgscan_kswapd", "pgsteal_kswapd", "nr_vmscan_write_direct", "pgpgout", "allocstall"] {
                assert!(vm.get(key).and_then(|x| x.as_u64()).is_some(), "{w} vmstat {key}");
            }
            // Everything written reached the device.
            assert!(vm["pgpgout"].as_u64().unwrap() > 0, "{w} wrote nothing");
        }
        let files = v["metrics"]["fsmark-4t files/s"][0].as_f64().unwrap();
        assert!(files > 0.0);
    }
    // 3.2 never writes from direct reclaim (seed 004, patch 1).
    for w in workloads {
        assert_eq!(variants[1]["vmstat"][w]["nr_vmscan_write_direct"], 0, "{w}");
    }
    assert!(json["checks"].as_array().is_some_and(|c| !c.is_empty()));
    assert_eq!(json["metric_specs"].as_array().map(Vec::len), Some(names.len()));
    assert!(json["extra"]["exercised"].is_object());

    // The JSON reads back.
    let back: ExperimentResult = serde_json::from_str(&text).expect("deserialises");
    assert_eq!(back.variants.len(), 2);
    assert_eq!(back.variants[0].metrics.len(), names.len());

    // The report names every variant, workload and table metric, and says
    // what the seed claimed and whether this run agrees.
    let report = runner::report::<ReclaimWritebackExp>(&result, &params);
    for needle in [
        "3.1",
        "3.2",
        "Hmean",
        "Amean",
        "Stddev",
        "CoeffVar",
        "BAmean-95",
        "Files/s mean fsmark-1t",
        "Elapsed Time simple-wb",
        "Kswapd efficiency mmap-strm",
        "nr_vmscan_write direct",
        "nr_vmscan_write kswapd",
        "Throttled ms",
        "anonymous mappings are not modelled",
        "seed 004 reported",
        "same direction as the seed",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    for w in workloads {
        assert!(report.contains(&format!("{w} elapsed_s")), "{w}");
    }
    assert!(report.contains("kernel column not run (--no-kernel)"), "{report}");
    assert!(report.contains("tunables set for every variant"), "{report}");

    // Two charts per workload, a line per variant.
    for w in workloads {
        for what in ["dirty", "free"] {
            let path = plots.path().join(format!("reclaim-writeback-{w}-{what}.svg"));
            let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(svg.starts_with("<svg") && svg.contains("3.1") && svg.contains("3.2"), "{}", path.display());
        }
    }

    // A tunable that does not exist is refused before anything runs.
    let bad = ReclaimWritebackOpts { set: vec![("nosuch".into(), "1".into())], ..opts };
    assert!(reclaim_writeback::run(&bad).is_err());
}

// The seed's USB-stick set-up at a tiny size: fsmark and simple-wb on a
// rate-limited device beside a resident set, so that reclaim meets dirty
// pages. Asserts that the device's measures are there and that the
// mechanism was exercised, nothing about which variant wins.
#[test]
fn reclaim_writeback_tiny_on_a_slow_device_is_exercised() {
    let opts = ReclaimWritebackOpts {
        wb_threads: 2,
        kernel: false,
        fsmark_threads: vec![4],
        device: reclaim_writeback::DeviceOpts {
            rate: Some(64 << 20),
            latency: std::time::Duration::from_micros(200),
            resident: 0.65,
        },
        ..ReclaimWritebackOpts::tiny()
    };
    let (result, params) = reclaim_writeback::run(&opts).expect("reclaim-writeback runs on the device");
    let json: serde_json::Value = serde_json::from_str(&result.to_json_pretty().unwrap()).unwrap();
    for v in json["variants"].as_array().unwrap() {
        for w in ["fsmark-4t", "simple-wb"] {
            for m in ["avg_wait_ms", "device_writes", "avgrq_kib"] {
                let x = v["metrics"][format!("{w} {m}")][0].as_f64().unwrap_or_else(|| panic!("{w} {m}"));
                assert!(x > 0.0, "{w} {m} = {x}");
            }
        }
        assert!(v["metrics"]["mmap-strm avg_wait_ms"].is_null(), "mmap-strm stays on the host files");
    }
    assert_eq!(json["extra"]["exercised"]["fsmark-4t"], true, "{}", json["extra"]);
    let report = runner::report::<ReclaimWritebackExp>(&result, &params);
    for needle in ["Avg wait ms fsmark-4t", "Device writes simple-wb", "simulated device of 64 MiB/s", "resident=0.65"]
    {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    assert!(report.contains("fsmark-4t avg wait down"), "{report}");
}

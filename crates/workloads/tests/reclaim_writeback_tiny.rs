//! Runs `reclaim-writeback` at a tiny size and checks what it measures:
//! every metric of every workload, data reaching the device, no writes from
//! direct reclaim in 3.2, `--set` reaching every variant, the original's
//! rows and the plots; that the quick set-up makes reclaim meet dirty
//! pages, and that the headlines' verdicts agree with their numbers. The
//! report's and the JSON's completeness is the registry's contract test
//! (contract.rs). Asserts nothing about timings or about which variant
//! wins.

mod common;

use common::Tiny;
use pcache_workloads::reclaim_writeback::ReclaimWritebackExp;
use pcache_workloads::stats::Better;
use pcache_workloads::verdict::{Effect, Headline};
use serde_json::Value;

#[test]
fn reclaim_writeback_tiny_measures_what_it_claims() {
    // Every workload, on the host files (quick's default device off).
    let t = common::run::<ReclaimWritebackExp>(|o| {
        for (k, v) in
            [("wb_threads", "2"), ("fsmark_threads", "1,4,16"), ("simple_wb", "true"), ("device_rate", "none")]
        {
            o.params.push((k.into(), v.into()));
        }
        o.set = vec![("dirty_background_ratio".into(), "10".into())];
    });
    let workloads = ["fsmark-1t", "fsmark-4t", "fsmark-16t", "simple-wb", "mmap-strm"];
    let measures = [
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
    ];
    let swap_measures = ["pswpout", "pswpin", "pgscan_anon", "pgsteal_anon"];
    let mut names = common::metric_names(&workloads[..3], &["files/s"]);
    names.extend(common::metric_names(&workloads, &measures));
    names.extend(common::metric_names(&["mmap-strm"], &swap_measures));
    assert_eq!(t.variant_names(), ["3.1", "3.2"]);
    // One run, one sample; a ratio over nothing is null.
    t.assert_metrics(&names, |_| 1, |n| n.ends_with("kswapd_efficiency_%"));
    let keys = ["pgscan_kswapd", "pgsteal_kswapd", "nr_vmscan_write_direct", "pgpgout", "allocstall"];
    for v in t.variants() {
        for w in workloads {
            assert!(Tiny::first(v, &format!("{w} elapsed_s")) > 0.0, "{w}");
            // Everything written reached the device.
            assert!(Tiny::vmstat(v, w, &keys)["pgpgout"].as_u64() > Some(0), "{w} wrote nothing");
        }
        assert!(Tiny::first(v, "fsmark-4t files/s") > 0.0);
        // mmap-strm overcommits memory with anonymous pages: they went to
        // swap, and the second pass brought some back.
        assert!(Tiny::first(v, "mmap-strm pswpout") > 0.0, "{}", v["name"]);
        assert!(Tiny::first(v, "mmap-strm pswpin") > 0.0, "{}", v["name"]);
        assert!(Tiny::first(v, "mmap-strm pgsteal_anon") > 0.0, "{}", v["name"]);
        assert!(Tiny::vmstat(v, "mmap-strm", &["pswpout", "pswpin"])["pswpout"].as_u64() > Some(0));
    }
    // Swapping is reclaim at work: mmap-strm is exercised, and the
    // original's observation about it is a check (either way).
    assert_eq!(t.json["extra"]["exercised"]["mmap-strm"], true, "{}", t.json["extra"]);
    let checks = t.json["checks"].as_array().expect("checks");
    let swap_check = checks
        .iter()
        .find(|c| c["name"] == "mmap-strm 3.2 swaps more where slower")
        .unwrap_or_else(|| panic!("no swap check in {checks:?}"));
    assert_eq!(swap_check["counts"], true, "{swap_check}");
    // 3.2 never writes from direct reclaim (the series' first patch).
    for w in workloads {
        assert_eq!(t.variants()[1]["vmstat"][w]["nr_vmscan_write_direct"], 0, "{w}");
    }
    t.assert_report_has([
        "Hmean",
        "Files/s mean fsmark-1t",
        "Elapsed Time simple-wb",
        "Kswapd efficiency mmap-strm",
        "nr_vmscan_write direct",
        "nr_vmscan_write kswapd",
        "Throttled ms",
        "Pages swapped out mmap-strm",
        "Pages swapped in mmap-strm",
        "mmap-strm swaps to a swap file",
        "shared writable file mapping",
        "tunables set for every variant",
    ]);
    t.assert_report_has(workloads.iter().map(|w| format!("{w} elapsed_s")));

    // Two charts per workload, a line per variant.
    for w in workloads {
        for what in ["dirty", "free"] {
            let svg = t.svg(&format!("reclaim-writeback-{w}-{what}.svg"));
            assert!(svg.contains("3.1") && svg.contains("3.2"), "{w} {what}");
        }
    }
}

// The original's USB-stick set-up at a tiny size: fsmark and simple-wb on
// a rate-limited device beside a resident set, so that reclaim meets dirty
// pages. Asserts that the device's measures are there and that the
// mechanism was exercised, nothing about which variant wins.
#[test]
fn reclaim_writeback_tiny_on_a_slow_device_is_exercised() {
    let t = common::run::<ReclaimWritebackExp>(|o| {
        for (k, v) in [
            ("simple_wb", "true"),
            ("wb_threads", "2"),
            ("fsmark_threads", "4"),
            ("device_rate", "64M"),
            ("device_latency", "200us"),
            ("resident", "0.65"),
        ] {
            o.params.push((k.into(), v.into()));
        }
    });
    for v in t.variants() {
        for w in ["fsmark-4t", "simple-wb"] {
            for m in ["avg_wait_ms", "device_writes", "avgrq_kib"] {
                let x = Tiny::first(v, &format!("{w} {m}"));
                assert!(x > 0.0, "{w} {m} = {x}");
            }
        }
        assert!(v["metrics"]["mmap-strm avg_wait_ms"].is_null(), "mmap-strm stays on the host files");
    }
    assert_eq!(t.json["extra"]["exercised"]["fsmark-4t"], true, "{}", t.json["extra"]);
    t.assert_report_has([
        "Avg wait ms fsmark-4t",
        "Device writes simple-wb",
        "simulated device of 64 MiB/s",
        "resident=0.65",
        "fsmark-4t avg wait down",
    ]);
}

fn samples(v: &Value, metric: &str) -> Vec<f64> {
    v["metrics"][metric].as_array().unwrap_or_else(|| panic!("{metric}")).iter().filter_map(Value::as_f64).collect()
}

/// A vmstat counter of a column, summed over its workloads.
fn counter(v: &Value, item: &str) -> u64 {
    v["vmstat"].as_object().expect("vmstat").values().filter_map(|w| w[item].as_u64()).sum()
}

// The quick set-up as the main job runs it (its device, desktop and
// fs_mark), at a tiny size with 3 runs: reclaim meets dirty pages at the
// inactive tail, 3.1 writes them from direct reclaim and 3.2 tags them for
// the flushers; the headlines' verdicts follow from their numbers.
#[test]
fn reclaim_writeback_tiny_quick_meets_dirty_pages() {
    let t = common::run::<ReclaimWritebackExp>(|o| o.runs = Some(3));
    assert_eq!(t.json["params"]["opts"]["fsmark_threads"], serde_json::json!([4]));
    assert!(t.json["params"]["device"].is_string(), "the quick run has a device: {}", t.json["params"]);
    assert_eq!(t.json["extra"]["exercised"]["fsmark-4t"], true, "{}", t.json["extra"]);
    let (before, after) = (&t.variants()[0], &t.variants()[1]);
    let fsmark = |v: &Value, item: &str| v["vmstat"]["fsmark-4t"][item].as_u64().unwrap_or(0);
    assert!(fsmark(before, "nr_vmscan_write_direct") > 0, "{}", before["vmstat"]["fsmark-4t"]);
    assert_eq!(fsmark(after, "nr_vmscan_write_direct"), 0);
    assert!(fsmark(after, "nr_vmscan_immediate_reclaim") > 0, "{}", after["vmstat"]["fsmark-4t"]);
    assert!(fsmark(before, "pgscan_direct") > 0 && fsmark(after, "pgscan_direct") > 0);

    let headlines: Vec<Headline> = serde_json::from_value(t.json["headlines"].clone()).expect("headlines");
    assert_eq!(headlines.len(), 2, "{headlines:?}");
    let screen = pcache_workloads::verdict::render_screen(&headlines);
    assert!(screen.lines().all(|l| l.chars().count() <= 120 && !l.ends_with("...")), "{screen}");
    // files/s: the effect against its noise decides.
    let e = Effect::of(&samples(before, "fsmark-4t files/s"), &samples(after, "fsmark-4t files/s"), Better::Higher);
    assert_eq!(headlines[0].verdict, e.verdict(), "{:?} {e:?}", headlines[0]);
    assert!(headlines[0].reproduced.contains(&e.describe("higher", "lower")), "{:?}", headlines[0]);
    assert!(headlines[0].experiment.contains("fs_mark, 4 threads"));
    // No writes from direct reclaim: 3.1 wrote some, 3.2 none.
    let (db, da) = (counter(before, "nr_vmscan_write_direct"), counter(after, "nr_vmscan_write_direct"));
    let want = if db > 0 && da == 0 { "Reproduced" } else { "NotReproduced" };
    assert_eq!(format!("{:?}", headlines[1].verdict), want, "{:?}", headlines[1]);
    assert_eq!(want, "Reproduced");
    assert!(headlines[1].reproduced.contains(" -> 0 pages a run"), "{:?}", headlines[1]);
    for h in &headlines {
        for field in [&h.experiment, &h.claimed, &h.reproduced, &h.kernel, &h.note] {
            assert!(field.chars().count() <= 116, "{field}");
            assert!(!field.to_lowercase().contains("seed"), "{field}");
        }
    }
}

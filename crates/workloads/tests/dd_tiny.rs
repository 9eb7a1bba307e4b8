//! Runs `dd` at a tiny size and checks what it measures: one sample per
//! timed iteration, who marks the page accessed (the counters the variants
//! differ in by construction), the plots, the seed's own tables. The
//! report's and the JSON's completeness is the registry's contract test
//! (contract.rs). Asserts nothing about timings or about which variant wins.

mod common;

use common::Tiny;
use pcache_workloads::dd::{self, Dd};

#[test]
fn dd_tiny_measures_what_it_claims() {
    let t = common::run::<Dd>(|_| {});
    let workloads = ["tmpfs-async", "tmpfs-fdatasync", "file-async", "file-fdatasync"];
    let measures =
        ["elapsed_s", "MB/s", "cpu_s", "atomic_flag_rmw/page", "mark_page_accessed/page", "init_page_accessed/page"];
    assert_eq!(t.json["params"]["dd"]["iterations"].as_u64(), Some(dd::QUICK_ITERATIONS as u64));
    assert_eq!(t.variant_names(), [dd::BEFORE, dd::AFTER]);
    // Times: one per iteration; counters: one per run.
    let per = |n: &str| if n.ends_with("/page") { 1 } else { dd::QUICK_ITERATIONS };
    t.assert_metrics(&common::metric_names(&workloads, &measures), per, |_| false);

    let keys = ["atomic_flag_rmw", "mark_page_accessed_calls", "init_page_accessed_calls", "pgpgout", "pgalloc"];
    for v in t.variants() {
        for w in workloads {
            for m in ["elapsed_s", "MB/s", "cpu_s"] {
                let samples = v["metrics"][format!("{w} {m}")].as_array().expect("samples");
                assert!(samples.iter().all(|x| x.as_f64() > Some(0.0)), "{w} {m}: {samples:?}");
            }
            assert!(Tiny::vmstat(v, w, &keys)["pgalloc"].as_u64() > Some(0), "{w} allocated nothing");
            // Every page written is marked once: by mark_page_accessed in
            // vanilla, by init_page_accessed with accessed-v2.
            let mark = Tiny::first(v, &format!("{w} mark_page_accessed/page"));
            let init = Tiny::first(v, &format!("{w} init_page_accessed/page"));
            if v["name"] == dd::BEFORE {
                assert!(mark >= 1.0 && init == 0.0, "{w}: {mark} {init}");
            } else {
                assert!(mark == 0.0 && init >= 1.0, "{w}: {mark} {init}");
            }
        }
        // fdatasync wrote the data out.
        assert!(v["vmstat"]["file-fdatasync"]["pgpgout"].as_u64() > Some(0));
    }
    assert!(t.checks().len() >= 8);

    // One plot per workload.
    for w in workloads {
        assert!(t.svg(&format!("dd-{w}-elapsed.svg")).contains(dd::AFTER));
    }
    // The seed's own tables, which the contract does not know.
    t.assert_report_has([
        "async dd tmpfs Max   elapsed",
        "async dd tmpfs Amean cpu",
        "fdatasync dd file  Amean elapsed",
        "tmpfs-async atomic_flag_rmw/page",
        "file-fdatasync mark_page_accessed/page",
        "init_page_accessed_calls",
        "59562",
    ]);
}

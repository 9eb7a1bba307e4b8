//! Runs `sparsetruncate` at a tiny size and checks what it measures: one
//! sample per truncate, the mechanism the variants differ in by
//! construction (drains per truncate), the original's rows, the CDF plots,
//! and the large-folio variant beside the seed's pair (its pages in large
//! folios, the others' not). The report's and the JSON's completeness is
//! the registry's contract test (contract.rs). Asserts nothing about
//! timings.

mod common;

use common::Tiny;
use pcache_workloads::sparsetruncate::{self, Sparsetruncate, ORIGINAL_ROWS};
use pcache_workloads::stats::Better;
use pcache_workloads::verdict::{Effect, Headline};

#[test]
fn sparsetruncate_tiny_measures_what_it_claims() {
    let t = common::run::<Sparsetruncate>(|_| {});
    let p = &t.json["params"]["sparsetruncate"];
    let truncates = (p["files"].as_u64().unwrap() * p["rounds"].as_u64().unwrap()) as usize;
    assert!(truncates >= 16, "{p}");
    let pages = p["file_bytes"].as_u64().unwrap() / p["page_size"].as_u64().unwrap();

    let backends = ["tmpfs", "file"];
    let measures = [
        "truncate_us",
        "truncate_cpu_us",
        "lru_drain/truncate",
        "pagevec_release/truncate",
        "lru_lock/truncate",
        "large_folios/truncate",
    ];
    assert_eq!(t.variant_names(), [sparsetruncate::BEFORE, sparsetruncate::AFTER, sparsetruncate::LARGE_FOLIOS]);
    // Times: one per truncate; counters: one per run.
    let per = |n: &str| if n.ends_with("_us") { truncates } else { 1 };
    t.assert_metrics(&common::metric_names(&backends, &measures), per, |_| false);
    for v in t.variants() {
        for b in backends {
            let vm = Tiny::vmstat(v, b, &["lru_drain", "pagevec_release", "lru_lock_acquire", "pgfree"]);
            // Every hole page read was cached, and freed by the unlinks.
            assert_eq!(vm["pgfree"].as_u64().unwrap(), pages * truncates as u64, "{b}");
            // The fills read large folios (thp_file_alloc) for the third
            // variant only.
            let large = Tiny::first(v, &format!("{b} large_folios/truncate"));
            assert_eq!(large > 0.0, v["name"] == sparsetruncate::LARGE_FOLIOS, "{} {b}: {large}", v["name"]);
            let drains = Tiny::first(v, &format!("{b} lru_drain/truncate"));
            let releases = Tiny::first(v, &format!("{b} pagevec_release/truncate"));
            if v["name"] == sparsetruncate::LARGE_FOLIOS {
                // A pagevec entry per folio: as few releases as onedrain's
                // pages need, or fewer (one, at this size).
                let single = Tiny::first(&t.variants()[1], &format!("{b} pagevec_release/truncate"));
                assert!((1.0..=single).contains(&releases), "{b}: {releases} releases per truncate, {single}");
            } else {
                assert!(releases > 1.0, "{b}: {releases} releases per truncate");
            }
            // The mechanism: a drain per release, or one per truncate.
            if v["name"] == sparsetruncate::BEFORE {
                assert_eq!(drains, releases, "{b}");
            } else {
                assert_eq!(drains, 1.0, "{b}");
            }
        }
    }
    assert!(t.checks().len() >= 6);
    // The must-hold check holds on both backends.
    for b in backends {
        let name = format!("{b}: onedrain drains fewer");
        let c = t.checks().iter().find(|c| c["name"].as_str().unwrap().starts_with(&name));
        assert_eq!(c.map(|c| &c["agrees"]), Some(&serde_json::Value::Bool(true)), "{name}");
        for suffix in ["cdf", "cdf-body"] {
            let svg = t.svg(&format!("sparsetruncate-{b}-{suffix}.svg"));
            assert!(svg.contains(sparsetruncate::AFTER) && svg.contains(sparsetruncate::LARGE_FOLIOS), "{b} {suffix}");
        }
    }
    // The headline: the Max of each round's truncate CPU time (memory
    // files) against its noise decides, and says so in its numbers.
    let headlines: Vec<Headline> = serde_json::from_value(t.json["headlines"].clone()).expect("headlines");
    assert_eq!(headlines.len(), 1, "{headlines:?}");
    let per_round = p["files"].as_u64().unwrap() as usize;
    let maxima = |v: &serde_json::Value| -> Vec<f64> {
        let s: Vec<f64> =
            v["metrics"]["tmpfs truncate_cpu_us"].as_array().unwrap().iter().filter_map(|x| x.as_f64()).collect();
        s.chunks(per_round).map(|c| c.iter().copied().fold(f64::NAN, f64::max)).collect()
    };
    let e = Effect::of(&maxima(&t.variants()[0]), &maxima(&t.variants()[1]), Better::Lower);
    assert_eq!(headlines[0].verdict, e.verdict(), "{:?} {e:?}", headlines[0]);
    assert!(headlines[0].reproduced.contains(&e.describe("lower", "higher")), "{:?}", headlines[0]);
    t.assert_report_has(ORIGINAL_ROWS.iter().map(|row| format!("{row} Time")));
    t.assert_report_has([
        "sparsetruncate (tmpfs)",
        "sparsetruncate (file)",
        "tmpfs lru_drain/truncate",
        "file pagevec_release/truncate",
        "largefolios (not part of the seed's comparison), median truncate time",
        "file large_folios/truncate",
    ]);
}

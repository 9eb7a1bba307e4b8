//! What the `*_tiny` tests share: one tiny run of a seed experiment (its
//! smoke sizes, no kernel column, no progress bars, plots into a temporary
//! directory) and the walk over its columns that every such test makes.
//! The completeness of the report and the JSON schema is the registry's
//! contract test (contract.rs); a tiny test keeps only what its experiment
//! adds.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use pcache_workloads::experiment::ExpOpts;
use pcache_workloads::runner::{self, Seeded};
use serde_json::{Map, Value};

/// A finished tiny run.
pub struct Tiny {
    pub json: Value,
    pub report: String,
    /// Where the plots went.
    pub plots: tempfile::TempDir,
}

/// Run `E` at its smoke sizes, changed by `edit`, with plots.
pub fn run<E: Seeded>(edit: impl FnOnce(&mut ExpOpts)) -> Tiny {
    let plots = tempfile::tempdir().expect("a plot directory");
    let mut opts = ExpOpts {
        progress: false,
        kernel: false,
        plot_dir: Some(plots.path().to_path_buf()),
        ..<E as runner::SeedExperiment>::smoke()
    };
    edit(&mut opts);
    let (result, params) = runner::run::<E>(&opts).unwrap_or_else(|e| panic!("{}: {e}", E::NAME));
    let text = result.to_json_pretty().expect("serialises");
    let json = serde_json::from_str(&text).expect("valid JSON");
    Tiny { json, report: runner::report::<E>(&result, &params), plots }
}

/// `"{workload} {measure}"` for every pair, workloads outermost: the
/// metric names of an experiment whose workloads all have these measures.
pub fn metric_names(workloads: &[&str], measures: &[&str]) -> Vec<String> {
    workloads.iter().flat_map(|w| measures.iter().map(move |m| format!("{w} {m}"))).collect()
}

impl Tiny {
    /// The columns (pcache's only: a tiny run has no kernel column).
    pub fn variants(&self) -> &[Value] {
        self.json["variants"].as_array().expect("variants")
    }

    pub fn variant_names(&self) -> Vec<&str> {
        self.variants().iter().map(|v| v["name"].as_str().expect("a name")).collect()
    }

    pub fn checks(&self) -> &[Value] {
        self.json["checks"].as_array().expect("checks")
    }

    /// Whether a check's name contains `part`.
    pub fn has_check(&self, part: &str) -> bool {
        self.checks().iter().any(|c| c["name"].as_str().is_some_and(|n| n.contains(part)))
    }

    /// Every column has exactly the metrics `names`, `samples(name)`
    /// samples of each, every one a finite number >= 0; a metric for which
    /// `nullable` holds may be null (a ratio over nothing). The metric
    /// specs name the same metrics.
    pub fn assert_metrics(&self, names: &[String], samples: impl Fn(&str) -> usize, nullable: impl Fn(&str) -> bool) {
        assert_eq!(self.json["metric_specs"].as_array().map(Vec::len), Some(names.len()), "metric specs");
        for v in self.variants() {
            let metrics = v["metrics"].as_object().expect("metrics");
            assert_eq!(metrics.len(), names.len(), "{:?}", metrics.keys().collect::<Vec<_>>());
            for n in names {
                let s = metrics.get(n).and_then(|s| s.as_array()).unwrap_or_else(|| panic!("{} lacks {n}", v["name"]));
                assert_eq!(s.len(), samples(n), "{} {n}: samples", v["name"]);
                for x in s.iter().filter(|x| !(x.is_null() && nullable(n))) {
                    let x = x.as_f64().unwrap_or_else(|| panic!("{} {n} = {x}", v["name"]));
                    assert!(x.is_finite() && x >= 0.0, "{} {n} = {x}", v["name"]);
                }
            }
        }
    }

    /// The first sample of metric `name` in column `v`.
    pub fn first(v: &Value, name: &str) -> f64 {
        v["metrics"][name][0].as_f64().unwrap_or_else(|| panic!("{} {name} = {}", v["name"], v["metrics"][name]))
    }

    /// Column `v`'s vmstat deltas of workload `w`, which hold every
    /// counter of `keys`.
    pub fn vmstat<'a>(v: &'a Value, w: &str, keys: &[&str]) -> &'a Map<String, Value> {
        let vm = v["vmstat"][w].as_object().unwrap_or_else(|| panic!("{} vmstat {w}", v["name"]));
        for key in keys {
            assert!(vm.get(*key).and_then(|x| x.as_u64()).is_some(), "{} {w} vmstat {key}", v["name"]);
        }
        vm
    }

    pub fn svg(&self, file: &str) -> String {
        let path = self.plots.path().join(file);
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(svg.starts_with("<svg"), "{file} is not an SVG");
        svg
    }

    /// The report holds every one of `needles`.
    pub fn assert_report_has<S: AsRef<str>>(&self, needles: impl IntoIterator<Item = S>) {
        for n in needles {
            assert!(self.report.contains(n.as_ref()), "report lacks {:?}:\n{}", n.as_ref(), self.report);
        }
    }
}

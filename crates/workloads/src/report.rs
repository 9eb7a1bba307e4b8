//! The result of a seed experiment ([`ExperimentResult`], its JSON): per
//! variant one sample per run and metric (NaN, written as `null`, where a
//! run had nothing to measure) and vmstat deltas per workload, maps in the
//! order the experiment built them. How it is shown is in [`crate::render`].

use pcache::{Item, VmStat};
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::stats::{ratio, Better, Comparison};
use crate::verdict::Headline;

/// A map that keeps insertion order, serialised as a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub struct Named<V>(pub Vec<(String, V)>);

impl<V> Default for Named<V> {
    fn default() -> Self {
        Named(Vec::new())
    }
}

impl<V> Named<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Insert or replace, keeping the first insertion's position.
    pub fn insert(&mut self, key: impl Into<String>, value: V) {
        let key = key.into();
        match self.get_mut(&key) {
            Some(v) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for Named<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Named<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = Named<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named<V>, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(Named(out))
            }
        }
        d.deserialize_map(V2(std::marker::PhantomData))
    }
}

/// One sample per run; NaN is written as `null` (as serde_json writes any
/// non-finite number) and read back as NaN.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Samples(pub Vec<f64>);

impl<'de> Deserialize<'de> for Samples {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<Option<f64>>::deserialize(d)?;
        Ok(Samples(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect()))
    }
}

/// Harmonic for rates, as mmtests does for operations per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mean {
    Arithmetic,
    Harmonic,
}

impl Mean {
    pub fn label(self) -> &'static str {
        match self {
            Mean::Arithmetic => "Amean",
            Mean::Harmonic => "Hmean",
        }
    }

    pub fn of(self, samples: &[f64]) -> f64 {
        match self {
            Mean::Arithmetic => amean(samples),
            Mean::Harmonic => hmean(samples),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSpec {
    /// `"WORKLOAD MEASURE"`, e.g. `"fsmark-1t files/s"`.
    pub name: String,
    pub workload: String,
    pub measure: String,
    pub unit: String,
    pub better: Better,
    pub mean: Mean,
    /// In the compare-kernels table.
    pub table: bool,
}

impl MetricSpec {
    pub fn new(workload: &str, measure: &str, unit: &str, better: Better, mean: Mean, table: bool) -> MetricSpec {
        MetricSpec {
            name: format!("{workload} {measure}"),
            workload: workload.into(),
            measure: measure.into(),
            unit: unit.into(),
            better,
            mean,
            table,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    pub name: String,
    /// Which kernel or patch it stands for.
    pub stands_for: String,
    pub metrics: Named<Samples>,
    /// By workload (see [`sum_vmstat`]).
    pub vmstat: Named<serde_json::Value>,
}

impl VariantResult {
    pub fn samples(&self, metric: &str) -> &[f64] {
        self.metrics.get(metric).map(|s| s.0.as_slice()).unwrap_or(&[])
    }

    pub fn vm(&self, workload: &str, item: Item) -> Option<u64> {
        self.vmstat.get(workload)?.get(item.name())?.as_u64()
    }

    /// Pages stolen over pages scanned by kswapd, in percent.
    pub fn kswapd_efficiency(&self, workload: &str) -> f64 {
        let count = |i: Item| self.vm(workload, i).unwrap_or(0) as f64;
        100.0 * ratio(count(Item::pgsteal_kswapd), count(Item::pgscan_kswapd))
    }
}

/// One comparison of the seed's claim with this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub seed: String,
    pub measured: String,
    /// None when it could not be told (a variant missing, nothing measured).
    pub agrees: Option<bool>,
    /// Towards `same_direction`.
    pub counts: bool,
}

/// A seed experiment's result, the JSON `--json` writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub experiment: String,
    /// Who made the change, when, in which kernel: "Mel Gorman, Linux 3.2, commit ee72886d8ed5".
    pub origin: String,
    /// What the original measurement reported.
    pub claim: String,
    pub same_direction: bool,
    pub variants: Vec<VariantResult>,
    pub metric_specs: Vec<MetricSpec>,
    pub checks: Vec<Check>,
    pub params: serde_json::Value,
    /// Findings beyond the metrics.
    pub extra: serde_json::Value,
    pub runs: usize,
    pub quick: bool,
    pub optimized: bool,
    pub total_s: f64,
    pub notes: Vec<String>,
    /// The main job's verdict screen's lines for this experiment.
    #[serde(default)]
    pub headlines: Vec<Headline>,
}

/// Every counted check that could be told agrees, and at least one could.
pub fn same_direction(checks: &[Check]) -> bool {
    let told: Vec<bool> = checks.iter().filter(|c| c.counts).filter_map(|c| c.agrees).collect();
    !told.is_empty() && told.iter().all(|&a| a)
}

impl ExperimentResult {
    pub fn variant(&self, name: &str) -> Option<&VariantResult> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The variants `a` and `b`, or the check saying one did not run.
    pub fn pair(&self, a: &str, b: &str) -> Result<(&VariantResult, &VariantResult), Check> {
        match (self.variant(a), self.variant(b)) {
            (Some(x), Some(y)) => Ok((x, y)),
            _ => Err(Check {
                name: format!("variants {a} and {b} both run"),
                seed: "both".into(),
                measured: self.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(","),
                agrees: None,
                counts: true,
            }),
        }
    }

    pub fn workloads(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.metric_specs {
            if !out.contains(&s.workload.as_str()) {
                out.push(&s.workload);
            }
        }
        out
    }

    pub fn spec(&self, metric: &str) -> Option<&MetricSpec> {
        self.metric_specs.iter().find(|m| m.name == metric)
    }

    pub fn mean(&self, variant: &str, metric: &str) -> f64 {
        let mean = self.spec(metric).map(|s| s.mean).unwrap_or(Mean::Arithmetic);
        self.variant(variant).map(|v| mean.of(v.samples(metric))).unwrap_or(f64::NAN)
    }

    /// The compare-kernels table of the metrics marked `table`.
    pub fn comparison(&self) -> (Comparison, Vec<Mean>) {
        let mut cmp = Comparison::new(self.variants.iter().map(|v| v.name.clone()));
        let mut means = Vec::new();
        for m in self.metric_specs.iter().filter(|m| m.table) {
            cmp.metric(m.name.clone(), m.better, self.variants.iter().map(|v| v.samples(&m.name).to_vec()).collect());
            means.push(m.mean);
        }
        (cmp, means)
    }

    pub fn to_json_pretty(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// Counter deltas of several runs as one JSON object: event counters
/// summed, state counters (levels) as in the last run.
pub fn sum_vmstat(deltas: &[VmStat]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for &i in Item::ALL {
        let v = if i.is_state() {
            deltas.last().map(|d| d.get(i)).unwrap_or(0)
        } else {
            deltas.iter().map(|d| d.get(i)).fold(0u64, u64::wrapping_add)
        };
        m.insert(i.name().to_string(), serde_json::Value::from(v));
    }
    serde_json::Value::Object(m)
}

fn clean(samples: &[f64]) -> Vec<f64> {
    samples.iter().copied().filter(|x| !x.is_nan()).collect()
}

/// NaNs dropped; NaN when none are left.
pub fn amean(samples: &[f64]) -> f64 {
    let v = clean(samples);
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// NaNs dropped; NaN when none are left or any is not positive.
pub fn hmean(samples: &[f64]) -> f64 {
    let v = clean(samples);
    if v.is_empty() || v.iter().any(|&x| x <= 0.0) {
        return f64::NAN;
    }
    v.len() as f64 / v.iter().map(|x| 1.0 / x).sum::<f64>()
}

/// The 97.5% quantile of Student's t (`dof` rounded down, the safe side).
pub fn t_critical_95(dof: f64) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    let d = if dof.is_finite() { dof.floor().max(1.0) } else { f64::INFINITY };
    match d {
        d if d <= 30.0 => T[d as usize - 1],
        d if d < 40.0 => 2.042,
        d if d < 60.0 => 2.021,
        d if d < 120.0 => 2.000,
        d if d < f64::INFINITY => 1.980,
        _ => 1.960,
    }
}

/// Welch's t-test, two-sided at 95%, at the Welch-Satterthwaite degrees of
/// freedom; false with fewer than two samples each; with no spread at all,
/// any difference counts.
pub fn significant(a: &[f64], b: &[f64]) -> bool {
    let (a, b) = (clean(a), clean(b));
    if a.len() < 2 || b.len() < 2 {
        return false;
    }
    let var = |v: &[f64]| {
        let m = amean(v);
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64
    };
    let (qa, qb) = (var(&a) / a.len() as f64, var(&b) / b.len() as f64);
    let diff = (amean(&a) - amean(&b)).abs();
    let se2 = qa + qb;
    if se2 == 0.0 {
        return diff > 0.0;
    }
    let dof = se2 * se2 / (qa * qa / (a.len() - 1) as f64 + qb * qb / (b.len() - 1) as f64);
    diff > t_critical_95(dof) * se2.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_and_significance() {
        assert!((hmean(&[1.0, 2.0, 4.0]) - 3.0 / 1.75).abs() < 1e-12);
        assert!(hmean(&[1.0, 0.0]).is_nan());
        assert!(hmean(&[]).is_nan());
        assert!((amean(&[1.0, f64::NAN, 3.0]) - 2.0).abs() < 1e-12);
        assert!(significant(&[10.0, 10.1, 9.9], &[12.0, 12.1, 11.9]));
        assert!(!significant(&[10.0, 12.0, 8.0], &[11.0, 9.0, 13.0]));
        assert!(!significant(&[10.0], &[20.0]), "one sample tells nothing");
        // Two samples each: 3 degrees of freedom at most, t = 3.18 or more,
        // so two standard errors are not enough.
        assert!(!significant(&[10.0, 11.0], &[12.5, 13.5]));
        assert!(significant(&[10.0, 10.0], &[11.0, 11.0]), "no spread: any difference");
        assert_eq!(t_critical_95(1.0), 12.706);
        assert_eq!(t_critical_95(2.9), 4.303);
        assert_eq!(t_critical_95(1000.0), 1.980);
        assert_eq!(t_critical_95(f64::INFINITY), 1.960);
    }

    #[test]
    fn named_keeps_order_and_nan() {
        let mut n: Named<Samples> = Named::new();
        n.insert("z", Samples(vec![1.0, f64::NAN]));
        n.insert("a", Samples(vec![2.0]));
        n.insert("z", Samples(vec![3.0]));
        let text = serde_json::to_string(&n).unwrap();
        assert_eq!(text, r#"{"z":[3.0],"a":[2.0]}"#);
        let mut m: Named<Samples> = Named::new();
        m.insert("x", Samples(vec![1.0, f64::NAN]));
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#"{"x":[1.0,null]}"#);
        let back: Named<Samples> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get("x").unwrap().0[0], 1.0);
        assert!(back.get("x").unwrap().0[1].is_nan());
    }

    #[test]
    fn verdict() {
        let c = |agrees, counts| Check { name: "x".into(), seed: "".into(), measured: "".into(), agrees, counts };
        assert!(same_direction(&[c(Some(true), true), c(Some(false), false), c(None, true)]));
        assert!(!same_direction(&[c(Some(true), true), c(Some(false), true)]));
        assert!(!same_direction(&[c(None, true)]));
        assert!(!same_direction(&[]));
    }
}

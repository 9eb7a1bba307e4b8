//! Summary statistics for mmtests-style comparisons (rendered by
//! [`crate::render::render_compare_rows`]).
//!
//! A report has one column per variant (the first is the baseline) and, for
//! each metric, the rows Min, 1st-qrtle, 2nd-qrtle, 3rd-qrtle, Max-90%,
//! Max-95%, Max-99%, Max, Amean, Stddev, CoeffVar and BAmean-95. Every value
//! is followed by `( x.xx%)`, its difference against the baseline column in
//! percent, where a positive number always means *better*:
//!
//! * for a lower-is-better metric (latency): `(base - value) / base * 100`;
//! * for a higher-is-better metric (throughput): `(value - base) / base * 100`;
//! * Stddev and CoeffVar are lower-is-better whatever the metric, as less
//!   variation is better.
//!
//! Quantiles interpolate linearly between the two nearest order statistics
//! (numpy's default, Hyndman and Fan type 7): the q-quantile of `n` sorted
//! samples `x[0..n]` is `x[h] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)])`
//! with `h = q * (n - 1)`. Min, Max and the quartiles do not depend on the
//! direction of the metric; BAmean-95, the mean of the best 95% of the
//! samples, does: the lowest 95% for a lower-is-better metric, the highest
//! for a higher-is-better one. "95%" is `floor(0.95 * n)` samples, at least
//! one.

use serde::{Deserialize, Serialize};

/// Which direction of a metric is an improvement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Better {
    /// Smaller values are better (times, latencies).
    Lower,
    /// Larger values are better (throughput, operations per second).
    Higher,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Min,
    Q1,
    Q2,
    Q3,
    Max90,
    Max95,
    Max99,
    Max,
    Amean,
    Stddev,
    CoeffVar,
    BAmean95,
}

impl Row {
    pub const ALL: [Row; 12] = [
        Row::Min,
        Row::Q1,
        Row::Q2,
        Row::Q3,
        Row::Max90,
        Row::Max95,
        Row::Max99,
        Row::Max,
        Row::Amean,
        Row::Stddev,
        Row::CoeffVar,
        Row::BAmean95,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Row::Min => "Min",
            Row::Q1 => "1st-qrtle",
            Row::Q2 => "2nd-qrtle",
            Row::Q3 => "3rd-qrtle",
            Row::Max90 => "Max-90%",
            Row::Max95 => "Max-95%",
            Row::Max99 => "Max-99%",
            Row::Max => "Max",
            Row::Amean => "Amean",
            Row::Stddev => "Stddev",
            Row::CoeffVar => "CoeffVar",
            Row::BAmean95 => "BAmean-95",
        }
    }

    /// The direction in which this row's value improves, for a metric whose
    /// own direction is `metric`.
    pub fn better(self, metric: Better) -> Better {
        match self {
            Row::Stddev | Row::CoeffVar => Better::Lower,
            _ => metric,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub q1: f64,
    pub q2: f64,
    pub q3: f64,
    pub max90: f64,
    pub max95: f64,
    pub max99: f64,
    pub max: f64,
    pub amean: f64,
    /// Sample standard deviation (divides by `n - 1`; 0 for one sample).
    pub stddev: f64,
    /// Stddev as a percentage of the mean.
    pub coeffvar: f64,
    /// Mean of the best 95% of the samples.
    pub bamean95: f64,
}

impl Summary {
    /// Summarise `samples`; `None` when there are none. NaNs are dropped.
    pub fn of(samples: &[f64], better: Better) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let amean = mean(&v);
        let stddev = if n > 1 {
            (v.iter().map(|x| (x - amean) * (x - amean)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let coeffvar = if amean != 0.0 { stddev / amean.abs() * 100.0 } else { 0.0 };
        Some(Summary {
            n,
            min: v[0],
            q1: quantile_sorted(&v, 0.25),
            q2: quantile_sorted(&v, 0.50),
            q3: quantile_sorted(&v, 0.75),
            max90: quantile_sorted(&v, 0.90),
            max95: quantile_sorted(&v, 0.95),
            max99: quantile_sorted(&v, 0.99),
            max: v[n - 1],
            amean,
            stddev,
            coeffvar,
            bamean95: best_mean_sorted(&v, 0.95, better),
        })
    }

    pub fn get(&self, row: Row) -> f64 {
        match row {
            Row::Min => self.min,
            Row::Q1 => self.q1,
            Row::Q2 => self.q2,
            Row::Q3 => self.q3,
            Row::Max90 => self.max90,
            Row::Max95 => self.max95,
            Row::Max99 => self.max99,
            Row::Max => self.max,
            Row::Amean => self.amean,
            Row::Stddev => self.stddev,
            Row::CoeffVar => self.coeffvar,
            Row::BAmean95 => self.bamean95,
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The `q`-quantile (0..=1) of samples already sorted ascending, by linear
/// interpolation. NaN for no samples.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, q)
}

/// The median: the middle sample, or the mean of the two middle ones. NaN
/// for no samples.
pub fn median(samples: &[f64]) -> f64 {
    quantile(samples, 0.5)
}

/// The mean of the best `frac` of the sorted samples (`floor(frac * n)`
/// of them, at least one).
pub(crate) fn best_mean_sorted(sorted: &[f64], frac: f64, better: Better) -> f64 {
    let n = sorted.len();
    let k = ((frac * n as f64).floor() as usize).clamp(1, n);
    match better {
        Better::Lower => mean(&sorted[..k]),
        Better::Higher => mean(&sorted[n - k..]),
    }
}

/// The mean of the best 95% of `samples` (see the module docs).
pub fn bamean95(samples: &[f64], better: Better) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    best_mean_sorted(&v, 0.95, better)
}

/// `num / den`, or NaN when the denominator is zero or either is not finite.
pub fn ratio(num: f64, den: f64) -> f64 {
    if den == 0.0 || !num.is_finite() || !den.is_finite() {
        f64::NAN
    } else {
        num / den
    }
}

/// How much better `value` is than `base`, in percent; positive is better.
/// 0 when both are zero, NaN when only the base is.
pub fn pct_better(base: f64, value: f64, better: Better) -> f64 {
    if base == 0.0 {
        return if value == 0.0 { 0.0 } else { f64::NAN };
    }
    let d = match better {
        Better::Lower => base - value,
        Better::Higher => value - base,
    };
    d / base.abs() * 100.0
}

/// One metric of a comparison: its name, direction and one sample vector
/// per column.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: String,
    pub better: Better,
    pub columns: Vec<Vec<f64>>,
}

/// A comparison table: named columns (variants, the first being the
/// baseline) and metrics sampled in each.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    pub columns: Vec<String>,
    pub metrics: Vec<Metric>,
}

impl Comparison {
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = S>) -> Comparison {
        Comparison { columns: columns.into_iter().map(Into::into).collect(), metrics: Vec::new() }
    }

    pub fn metric(&mut self, name: impl Into<String>, better: Better, columns: Vec<Vec<f64>>) -> &mut Self {
        self.metrics.push(Metric { name: name.into(), better, columns });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn quantiles_interpolate() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(quantile(&v, 0.0), 1.0));
        assert!(close(quantile(&v, 1.0), 10.0));
        assert!(close(quantile(&v, 0.5), 5.5));
        assert!(close(quantile(&v, 0.25), 3.25));
        assert!(close(quantile(&v, 0.75), 7.75));
        assert!(close(quantile(&v, 0.9), 9.1));
        // Order does not matter.
        let shuffled = [7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0];
        assert!(close(quantile(&shuffled, 0.25), 3.25));
        // Odd count: the median is the middle sample.
        assert!(close(median(&[3.0, 1.0, 2.0]), 2.0));
        assert!(close(median(&[4.0, 1.0, 3.0, 2.0]), 2.5));
        assert!(close(median(&[42.0]), 42.0));
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn summary_rows() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&v, Better::Lower).unwrap();
        assert_eq!(s.n, 100);
        assert!(close(s.min, 1.0));
        assert!(close(s.max, 100.0));
        assert!(close(s.q2, 50.5));
        assert!(close(s.max90, 90.1));
        assert!(close(s.max99, 99.01));
        assert!(close(s.amean, 50.5));
        // Sample stddev of 1..=100 is sqrt(100*101/12) = 29.0114...
        assert!((s.stddev - 29.011_491_975_882_016).abs() < 1e-9);
        assert!(close(s.coeffvar, s.stddev / 50.5 * 100.0));
        // One sample: no spread.
        let one = Summary::of(&[5.0], Better::Higher).unwrap();
        assert_eq!((one.min, one.q1, one.max99, one.stddev, one.bamean95), (5.0, 5.0, 5.0, 0.0, 5.0));
        assert!(Summary::of(&[], Better::Lower).is_none());
        assert!(Summary::of(&[f64::NAN], Better::Lower).is_none());
    }

    #[test]
    fn bamean95_drops_the_worst() {
        // 1..=100: the best 95 of a lower-is-better metric are 1..=95.
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(bamean95(&v, Better::Lower), 48.0));
        // Higher is better: 6..=100.
        assert!(close(bamean95(&v, Better::Higher), 53.0));
        // 20 samples: 19 kept; one outlier is dropped.
        let mut w = vec![10.0; 19];
        w.push(1000.0);
        assert!(close(bamean95(&w, Better::Lower), 10.0));
        assert!(close(bamean95(&w, Better::Higher), (18.0 * 10.0 + 1000.0) / 19.0));
        // Fewer than 20 samples: floor(0.95 n) of them, at least one.
        assert!(close(bamean95(&[3.0, 1.0, 2.0], Better::Lower), 1.5));
        assert!(close(bamean95(&[7.0], Better::Lower), 7.0));
    }

    #[test]
    fn sign_convention() {
        // Lower is better: a smaller value is a positive difference.
        assert!(close(pct_better(100.0, 80.0, Better::Lower), 20.0));
        assert!(close(pct_better(100.0, 125.0, Better::Lower), -25.0));
        // Higher is better: a larger value is a positive difference.
        assert!(close(pct_better(100.0, 125.0, Better::Higher), 25.0));
        assert!(close(pct_better(100.0, 80.0, Better::Higher), -20.0));
        assert!(close(pct_better(0.0, 0.0, Better::Higher), 0.0));
        assert!(pct_better(0.0, 1.0, Better::Higher).is_nan());
        // Spread rows are lower-is-better whatever the metric.
        assert_eq!(Row::Stddev.better(Better::Higher), Better::Lower);
        assert_eq!(Row::CoeffVar.better(Better::Higher), Better::Lower);
        assert_eq!(Row::Amean.better(Better::Higher), Better::Higher);
    }

    #[test]
    fn ratio_guards() {
        assert!(close(ratio(3.0, 2.0), 1.5));
        assert!(ratio(1.0, 0.0).is_nan());
        assert!(ratio(f64::INFINITY, 1.0).is_nan());
    }
}

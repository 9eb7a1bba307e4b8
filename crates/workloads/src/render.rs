//! How results are shown, one copy of each piece (tables, values, the
//! sections every seed report shares), so that every report reads alike.

use std::fmt::Write as _;

use pcache::Item;

use crate::report::{amean, significant, Check, ExperimentResult, Mean, MetricSpec, VariantResult};
use crate::stats::{pct_better, Better, Comparison, Row, Summary};

/// Counter groups the seed reports' vmstat sections share: page lookups and
/// LRU marking; reclaim's scanning and the allocations that stalled for it.
pub const VM_MARKING: &[Item] =
    &[Item::pgcache_hit, Item::pgcache_miss, Item::mark_page_accessed_calls, Item::pgactivate, Item::pgdeactivate];

pub const VM_RECLAIM: &[Item] =
    &[Item::pgscan_kswapd, Item::pgsteal_kswapd, Item::pgscan_direct, Item::pgsteal_direct, Item::allocstall];

impl ExperimentResult {
    /// After the title: the variants and the workloads, described.
    pub fn render_setup(&self) -> String {
        let mut s = String::new();
        if !self.optimized {
            let _ = writeln!(s, "WARNING: built without optimisations; these timings mean little");
        }
        let vw = self.variants.iter().map(|v| v.name.len()).max().unwrap_or(0);
        for v in &self.variants {
            let _ = writeln!(s, "  {:<vw$} {}", v.name, v.stands_for);
        }
        if let Some(ws) = self.params["workloads"].as_array() {
            let ww = ws.iter().map(|w| w["name"].as_str().unwrap_or("").len()).max().unwrap_or(0);
            for w in ws {
                let _ = writeln!(
                    s,
                    "  {:<ww$} {}",
                    w["name"].as_str().unwrap_or(""),
                    w["description"].as_str().unwrap_or("")
                );
            }
        }
        s
    }

    pub fn render_compare_section(&self) -> String {
        let mut s = String::from("\n");
        let _ = writeln!(
            s,
            "compare-kernels: percentages against the first column, positive = better; `*  x%*` marks a significant \
             difference of means (Welch's t-test, 95%)"
        );
        let (cmp, means) = self.comparison();
        s.push_str(&render_compare(&cmp, &means));
        s
    }

    pub fn render_tail(&self) -> String {
        let mut s = String::from("\n");
        s.push_str(&self.render_checks());
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s, "time: {:.1}s", self.total_s);
        s
    }

    pub fn render_checks(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "the original measurement ({}): {}", self.origin, self.claim);
        let mut rows =
            vec![vec!["check".to_string(), "original".to_string(), "this run".to_string(), "same way".to_string()]];
        for c in &self.checks {
            let a = match c.agrees {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "n/a",
            };
            let a = if c.counts { a.to_string() } else { format!("{a} (not counted)") };
            rows.push(vec![c.name.clone(), c.seed.clone(), c.measured.clone(), a]);
        }
        s.push_str(&render_table(&rows, &[false, false, false, false]));
        let counted: Vec<&Check> = self.checks.iter().filter(|c| c.counts && c.agrees.is_some()).collect();
        let agree = counted.iter().filter(|c| c.agrees == Some(true)).count();
        let uncounted = self.checks.len() - counted.len();
        let _ = writeln!(
            s,
            "checks in the original's direction: {agree} of {} counted{}",
            counted.len(),
            if uncounted > 0 { format!("; {uncounted} not counted or not told") } else { String::new() }
        );
        for h in &self.headlines {
            let _ = writeln!(s, "verdict: {} ({}): {}", h.verdict.label(), h.experiment, h.reproduced);
        }
        s
    }
}

/// A number for a table: four decimals below 10, two up to a million,
/// none above.
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.abs() >= 1e6 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 || v == 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// A compare-kernels cell: `value (  pct%)`, or mmtests' `value *  pct%*`
/// when the difference is significant.
pub fn fmt_cell(value: f64, pct: f64, significant: bool) -> String {
    if significant {
        format!("{:>12} *{:>7.2}%*", fmt_value(value), pct)
    } else {
        format!("{:>12} ({:>7.2}%)", fmt_value(value), pct)
    }
}

/// The rows of the seeds' compare-kernels tables (mmtests' short form).
pub const SEED_ROWS: [Row; 6] = [Row::Min, Row::Amean, Row::Stddev, Row::CoeffVar, Row::Max, Row::BAmean95];

pub fn render_compare(cmp: &Comparison, means: &[Mean]) -> String {
    render_compare_rows(cmp, means, &SEED_ROWS)
}

/// mmtests' compare-kernels: per metric the `rows`, a column per variant,
/// each value with its difference against the first column (positive =
/// better). The Amean row is the Hmean where `means` (parallel to
/// `cmp.metrics`) says [`Mean::Harmonic`], and marks a significant
/// difference of means (Welch) `value *  pct%*`.
pub fn render_compare_rows(cmp: &Comparison, means: &[Mean], rows: &[Row]) -> String {
    const CELL_W: usize = 12 + 11;
    let label_w = rows.iter().map(|r| r.label().len()).max().unwrap_or(0);
    let name_w = cmp.metrics.iter().map(|m| m.name.len()).max().unwrap_or(0).max(6);
    let mut out = String::new();
    let _ = write!(out, "{:w$}", "", w = label_w + 1 + name_w);
    for c in &cmp.columns {
        let _ = write!(out, " {:>w$}", c, w = CELL_W);
    }
    out.push('\n');
    for (mi, m) in cmp.metrics.iter().enumerate() {
        let mean = means.get(mi).copied().unwrap_or(Mean::Arithmetic);
        let sums: Vec<Option<Summary>> = m.columns.iter().map(|s| Summary::of(s, m.better)).collect();
        let value = |ci: usize, row: Row| -> Option<f64> {
            let s = sums.get(ci).copied().flatten()?;
            Some(if row == Row::Amean { mean.of(&m.columns[ci]) } else { s.get(row) })
        };
        for &row in rows {
            let label = if row == Row::Amean { mean.label() } else { row.label() };
            let _ = write!(out, "{:<lw$} {:<nw$}", label, m.name, lw = label_w, nw = name_w);
            let base = value(0, row);
            for ci in 0..m.columns.len() {
                match value(ci, row) {
                    Some(v) => {
                        let pct = base.map(|b| pct_better(b, v, row.better(m.better))).unwrap_or(f64::NAN);
                        let sig = row == Row::Amean && ci > 0 && significant(&m.columns[0], &m.columns[ci]);
                        let _ = write!(out, " {}", fmt_cell(v, pct, sig));
                    }
                    None => {
                        let _ = write!(out, " {:>w$}", "-", w = CELL_W);
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}

/// An aligned plain-text table; the first row is the header. `right[i]`
/// right-aligns column `i`.
pub fn render_table(rows: &[Vec<String>], right: &[bool]) -> String {
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if right.get(c).copied().unwrap_or(false) {
                let _ = write!(line, "{:>w$}", cell, w = widths[c]);
            } else {
                let _ = write!(line, "{:<w$}", cell, w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A Markdown table (as in BENCHMARKS.md); the first row is the header.
pub fn markdown_table(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let _ = writeln!(out, "| {} |", r.join(" | "));
        if i == 0 {
            let _ = writeln!(out, "|{}", "---|".repeat(r.len()));
        }
    }
    out
}

/// A fraction in percent with two decimals (`0.1234` is `12.34`), `-`
/// where there is none: the miss-ratio cells of replay's tables.
pub fn fmt_ratio_pct(fraction: Option<f64>) -> String {
    fraction.map(|x| format!("{:.2}", 100.0 * x)).unwrap_or_else(|| "-".into())
}

/// Parse a size: bytes, or a number with K, M, G or T (binary units,
/// optionally followed by `iB` or `B`), e.g. `128M`, `1.5GiB`, `65536`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        Some('t') => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let bad = || format!("{s:?} is not a size (e.g. 128M, 1G, 65536)");
    let num = num.trim();
    if num.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(bad);
    }
    let f: f64 = num.parse().map_err(|_| bad())?;
    if !(f.is_finite() && f >= 0.0) || f * mult as f64 >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok((f * mult as f64).round() as u64)
}

/// A size for people: `128 MiB`, `1.5 GiB`, `64 KiB`, `100 B`.
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, u) in UNITS {
        if bytes >= u {
            let v = bytes as f64 / u as f64;
            return if bytes & (u - 1) == 0 { format!("{} {name}", bytes / u) } else { format!("{v:.1} {name}") };
        }
    }
    format!("{bytes} B")
}

/// A count for a table: whole numbers plain, small fractions with two
/// decimals, `-` for nothing measured.
pub fn fmt_count(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if (v - v.round()).abs() < 1e-9 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One workload's vmstat rows, each delta divided by `per(variant)`.
pub fn vmstat_rows(
    workload: &str,
    variants: &[&VariantResult],
    items: &[Item],
    per: &dyn Fn(&VariantResult) -> f64,
) -> Vec<Vec<String>> {
    let mut rows = vec![std::iter::once(workload.to_string()).chain(variants.iter().map(|v| v.name.clone())).collect()];
    for &item in items {
        let mut row = vec![format!("  {}", item.name())];
        row.extend(
            variants.iter().map(|v| fmt_count(v.vm(workload, item).map(|x| x as f64 / per(v)).unwrap_or(f64::NAN))),
        );
        rows.push(row);
    }
    rows
}

/// A table with a column per name over `rows`, the labels left-aligned.
pub fn render_columns<S: ToString>(names: impl IntoIterator<Item = S>, rows: Vec<Vec<String>>) -> String {
    let mut all = vec![std::iter::once(String::new()).chain(names.into_iter().map(|n| n.to_string())).collect()];
    all.extend(rows);
    let right: Vec<bool> = (0..all.iter().map(Vec::len).max().unwrap_or(0)).map(|c| c > 0).collect();
    render_table(&all, &right)
}

/// The columns that have pcache's counters (the kernel's has none).
pub fn pcache_columns(r: &ExperimentResult) -> Vec<&VariantResult> {
    r.variants.iter().filter(|v| !v.vmstat.is_empty()).collect()
}

/// `label`, then each variant's mean of `metric` with its difference
/// against the first column (`*`: significant).
pub fn mean_row(r: &ExperimentResult, label: String, metric: &str, better: Better) -> Vec<String> {
    let Some(first) = r.variants.first() else { return vec![label] };
    let base = r.mean(&first.name, metric);
    let cell = |v: &VariantResult| {
        let m = r.mean(&v.name, metric);
        if m.is_nan() {
            return "-".to_string();
        }
        let sig = v.name != first.name && significant(first.samples(metric), v.samples(metric));
        fmt_cell(m, pct_better(base, m, better), sig).trim_start().to_string()
    };
    std::iter::once(label).chain(r.variants.iter().map(cell)).collect()
}

pub fn means_table(r: &ExperimentResult, specs: &[&MetricSpec]) -> String {
    let mut s = String::from("\nsummary (means over runs; percentages against the first column, positive = better)\n");
    if r.variants.is_empty() {
        return s;
    }
    let rows = specs.iter().map(|spec| mean_row(r, format!("{} ({})", spec.name, spec.unit), &spec.name, spec.better));
    s.push_str(&render_columns(r.variants.iter().map(|v| &v.name), rows.collect()));
    s
}

pub fn pcache_means(r: &ExperimentResult, metrics: &[String], fmt: fn(f64) -> String) -> String {
    let pc = pcache_columns(r);
    let row = |m: &String| std::iter::once(m.clone()).chain(pc.iter().map(|v| fmt(amean(v.samples(m))))).collect();
    render_columns(pc.iter().map(|v| &v.name), metrics.iter().map(row).collect())
}

/// Per workload one row per counter in `items`, each delta divided by
/// `per(workload, variant)`; the kernel's column has no vmstat.
pub fn vmstat_section(
    r: &ExperimentResult,
    heading: &str,
    items: &[Item],
    per: &dyn Fn(&str, &VariantResult) -> f64,
) -> String {
    let pcache = pcache_columns(r);
    let right: Vec<bool> = (0..=pcache.len()).map(|c| c > 0).collect();
    let workloads: Vec<&str> = pcache.first().map(|v| v.vmstat.keys().collect()).unwrap_or_default();
    let mut s = format!("\n{heading}\n");
    for w in workloads {
        s.push_str(&render_table(&vmstat_rows(w, &pcache, items, &|v| per(w, v)), &right));
    }
    s
}

/// A difference in percent for a check's "this run" cell, e.g. `+3.92% *`
/// (`*`: significant), or `n/a` when it could not be computed.
pub fn fmt_pct(pct: f64, sig: bool) -> String {
    if pct.is_nan() {
        "n/a".into()
    } else {
        format!("{pct:+.2}%{}", if sig { " *" } else { "" })
    }
}

/// `v` with `places` decimals and `unit` after it, `-` when unknown (NaN).
pub fn fmt_fixed(v: f64, places: usize, unit: &str) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.places$}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Better;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("128M"), Ok(128 << 20));
        assert_eq!(parse_size("128MiB"), Ok(128 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("10B"), Ok(10));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(fmt_size(128 << 20), "128 MiB");
        assert_eq!(fmt_size(3 << 29), "1.5 GiB");
        assert_eq!(fmt_size(100), "100 B");
    }

    #[test]
    fn compare_rows_and_marks() {
        let mut c = Comparison::new(["old", "new"]);
        c.metric("t", Better::Lower, vec![vec![10.0, 10.1, 9.9], vec![8.0, 8.1, 7.9]]);
        c.metric("r", Better::Higher, vec![vec![1.0, 2.0], vec![2.0, 4.0]]);
        let text = render_compare(&c, &[Mean::Arithmetic, Mean::Harmonic]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 2 * 6);
        let am = lines.iter().find(|l| l.starts_with("Amean") && l.contains(" t ")).unwrap();
        assert!(am.contains("8.0000 *  20.00%*"), "{am}");
        let hm = lines.iter().find(|l| l.starts_with("Hmean")).unwrap();
        assert!(hm.contains("1.3333 (   0.00%)") && hm.contains("2.6667 ( 100.00%)"), "{hm}");
        assert!(lines.iter().any(|l| l.starts_with("BAmean-95")));
        let t = render_table(&[vec!["a".into(), "1".into()], vec!["bbb".into(), "22".into()]], &[false, true]);
        assert_eq!(t, "a     1\nbbb  22\n");
    }

    #[test]
    fn full_rows_format() {
        let mut c = Comparison::new(["base", "new"]);
        c.metric("ns", Better::Lower, vec![vec![100.0, 100.0], vec![80.0, 80.0]]);
        c.metric("ops", Better::Higher, vec![vec![10.0], vec![12.0]]);
        let text = render_compare_rows(&c, &[], &Row::ALL);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 2 * Row::ALL.len());
        assert!(lines[0].contains("base") && lines[0].contains("new"));
        let min_ns = lines[1];
        assert!(min_ns.starts_with("Min"), "{min_ns}");
        assert!(min_ns.contains("100.00 (   0.00%)"), "{min_ns}");
        assert!(min_ns.contains("80.00 (  20.00%)"), "{min_ns}");
        let amean_ops = lines.iter().find(|l| l.starts_with("Amean") && l.contains("ops")).unwrap();
        assert!(amean_ops.contains("12.00 (  20.00%)"), "{amean_ops}");
        let bamean = lines.iter().find(|l| l.starts_with("BAmean-95") && l.contains(" ns")).unwrap();
        assert!(bamean.contains("80.00 (  20.00%)"), "{bamean}");
        // A column without samples prints a dash.
        let mut d = Comparison::new(["a", "b"]);
        d.metric("x", Better::Lower, vec![vec![1.0], vec![]]);
        assert!(render_compare_rows(&d, &[], &Row::ALL).lines().nth(1).unwrap().trim_end().ends_with('-'));
    }
}

/// `prefix` then `text` as lines of at most `width` columns, words kept
/// whole (a word too long for a line gets a line of its own), every line
/// after the first indented to the end of `prefix`.
pub fn wrap(prefix: &str, text: &str, width: usize) -> String {
    let indent = prefix.chars().count();
    let mut out = prefix.to_string();
    let mut col = indent;
    let mut first = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !first && col + 1 + len > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if !first {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += len;
        first = false;
    }
    out
}

#[cfg(test)]
mod wrap_tests {
    use super::wrap;

    #[test]
    fn wrap_keeps_width_and_words() {
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let w = wrap("  name  ", text, 20);
        assert!(w.lines().all(|l| l.chars().count() <= 20), "{w}");
        assert!(w.starts_with("  name  one"));
        assert!(w.lines().skip(1).all(|l| l.starts_with("        ") && !l.starts_with("         ")));
        assert_eq!(w.split_whitespace().skip(1).collect::<Vec<_>>().join(" "), text);
        assert_eq!(wrap("", "averyveryverylongword x", 8), "averyveryverylongword\nx");
    }
}

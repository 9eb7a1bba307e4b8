use super::workload::{LARGE_FOLIOS_PER_TRUNCATE, PER_TRUNCATE};
use super::*;
use crate::runner::KERNEL_COLUMN;

pub(super) const VM_ITEMS: &[Item] = &[
    Item::lru_drain,
    Item::lru_drain_all,
    Item::pagevec_release,
    Item::lru_lock_acquire,
    Item::pgfree,
    Item::atomic_flag_rmw,
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::allocstall,
];

/// The original's table for one backend: every row, one column per variant,
/// percentages against the first (positive = better).
pub(super) fn render_original_table(r: &ExperimentResult, metric: &str) -> String {
    let cols: Vec<(&str, [f64; 17])> =
        r.variants.iter().filter_map(|v| Some((v.name.as_str(), original_rows(v.samples(metric))?))).collect();
    let mut rows = Vec::new();
    for (i, label) in ORIGINAL_ROWS.iter().enumerate() {
        let mut row = vec![format!("{label} Time")];
        let base = cols.first().map(|c| c.1[i]).unwrap_or(f64::NAN);
        for (_, v) in &cols {
            row.push(format!("{} ({:>7.2}%)", render::fmt_fixed(v[i], 2, ""), pct_better(base, v[i], Better::Lower)));
        }
        rows.push(row);
    }
    render::render_columns(cols.iter().map(|(n, _)| n), rows)
}

/// The large-folio variant's median truncate time per backend, beside
/// onedrain's (the same tunables with single pages) and, on host files, the
/// kernel's of the same run; empty when it did not run.
fn large_folios(r: &ExperimentResult) -> String {
    if r.variant(LARGE_FOLIOS).is_none() {
        return String::new();
    }
    let i = row_index("2nd-qrtle");
    let median = |v: &str, metric: &str| {
        r.variant(v).and_then(|c| original_rows(c.samples(metric))).map_or(f64::NAN, |rows| rows[i])
    };
    let mut s = format!("\n{LARGE_FOLIOS} (not part of the seed's comparison), median truncate time (wall clock)\n");
    for b in BACKENDS {
        let metric = format!("{} truncate_us", b.name());
        let large = median(LARGE_FOLIOS, &metric);
        let _ = write!(s, "  {:<5} {LARGE_FOLIOS} {}", b.name(), render::fmt_fixed(large, 2, " us"));
        let mut others = vec![AFTER];
        // The kernel's column has host files only.
        if b == Backend::File && r.variant(KERNEL_COLUMN).is_some() {
            others.push(KERNEL_COLUMN);
        }
        for v in others {
            let m = median(v, &metric);
            let pct = pct_better(m, large, Better::Lower);
            if !pct.is_nan() {
                let way = if pct >= 0.0 { "lower" } else { "higher" };
                let _ = write!(s, "; {v} {} ({LARGE_FOLIOS} {:.2}% {way})", render::fmt_fixed(m, 2, " us"), pct.abs());
            }
        }
        s.push('\n');
    }
    s
}

impl SeedReport for Sparsetruncate {
    fn sizes(r: &ExperimentResult, p: &SparseParams) -> String {
        format!("{} runs x {} rounds x {} files of {}", r.runs, p.rounds, p.files, fmt_size(p.file_bytes))
    }

    fn report_body(r: &ExperimentResult, _: &SparseParams) -> String {
        let mut s = String::new();
        for (measure, what) in [
            (
                "truncate_us",
                "time per truncate in us (wall clock, as the original), lower is better; percentages against the first \
                 column, positive = better",
            ),
            (
                "truncate_cpu_us",
                "thread CPU time per truncate in us (excludes time preempted by other load on the machine; not in \
                 the original)",
            ),
        ] {
            for b in BACKENDS {
                let _ = writeln!(s, "\nsparsetruncate ({}), {what}", b.name());
                s.push_str(&render_original_table(r, &format!("{} {measure}", b.name())));
            }
        }
        let _ = writeln!(s, "\nthe mechanism, per truncate (mean over runs)");
        let metrics: Vec<String> = BACKENDS
            .iter()
            .flat_map(|b| {
                let measures = PER_TRUNCATE.map(|(m, _)| m).into_iter().chain([LARGE_FOLIOS_PER_TRUNCATE]);
                measures.map(move |measure| format!("{} {measure}", b.name()))
            })
            .collect();
        s.push_str(&render::pcache_means(r, &metrics, fmt_count));
        // What one extra drain costs, from robust statistics of the CPU time.
        if let (Some(b), Some(a)) = (r.variant(BEFORE), r.variant(AFTER)) {
            for be in BACKENDS {
                let w = be.name();
                let m = format!("{w} lru_drain/truncate");
                let extra = amean(b.samples(&m)) - amean(a.samples(&m));
                let cpu = format!("{w} truncate_cpu_us");
                let i = row_index("Best50%Amean");
                if let (Some(rb), Some(ra)) = (original_rows(b.samples(&cpu)), original_rows(a.samples(&cpu))) {
                    if extra > 0.0 {
                        let _ = writeln!(
                            s,
                            "{w}: {extra:.0} extra drains per truncate in {BEFORE}; the difference of the CPU-time \
                             Best50%Amean, {:.2} us, puts one extra drain at {:.0} ns ({:.2}% of a truncate)",
                            rb[i] - ra[i],
                            (rb[i] - ra[i]) * 1e3 / extra,
                            pct_better(rb[i], ra[i], Better::Lower)
                        );
                    }
                }
            }
        }

        s.push_str(&large_folios(r));

        // Per truncate: the counters over the truncates measured.
        let n = |w: &str, v: &VariantResult| v.samples(&format!("{w} truncate_us")).len().max(1) as f64;
        s.push_str(&vmstat_section(r, "vmstat deltas of the truncation phases, per truncate", VM_ITEMS, &n));
        s
    }

    /// A CDF of truncate times per column, per backend: the whole range, and
    /// the body up to the largest 99th percentile.
    fn plot(dir: &Path, r: &ExperimentResult, _: &(), p: &SparseParams) -> Result<Vec<String>> {
        let mut files = Vec::new();
        for b in BACKENDS {
            let metric = format!("{} truncate_us", b.name());
            let with: Vec<&VariantResult> = r.variants.iter().filter(|c| !c.samples(&metric).is_empty()).collect();
            let p99 = with
                .iter()
                .filter_map(|c| original_rows(c.samples(&metric)).map(|r| r[row_index("Max-99%")]))
                .fold(0.0f64, f64::max);
            for (suffix, clip) in [("cdf", f64::INFINITY), ("cdf-body", p99)] {
                let series: Vec<plot::Series> = with
                    .iter()
                    .map(|c| plot::Series {
                        name: c.name.clone(),
                        points: plot::cdf(c.samples(&metric)).into_iter().filter(|&(x, _)| x <= clip).collect(),
                    })
                    .collect();
                let file = format!("sparsetruncate-{}-{suffix}.svg", b.name());
                let title = format!(
                    "sparsetruncate {}: unlink of {} sparse files{}",
                    b.name(),
                    fmt_size(p.file_bytes),
                    if clip.is_finite() {
                        format!(" (up to the 99th percentile, {clip:.0} us)")
                    } else {
                        String::new()
                    }
                );
                files.push(plot::line_chart(
                    dir,
                    &file,
                    &title,
                    "truncate time (us)",
                    "fraction of truncates",
                    &series,
                )?);
            }
        }
        Ok(files)
    }
}

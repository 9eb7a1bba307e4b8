use super::*;

pub(super) const VM_ITEMS: &[Item] = &[
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::pgscan_direct,
    Item::pgsteal_direct,
    Item::allocstall,
    Item::pageoutrun,
    Item::nr_vmscan_write,
    Item::nr_vmscan_write_direct,
    Item::nr_vmscan_write_kswapd,
    Item::nr_vmscan_immediate_reclaim,
    Item::pgrotated,
    Item::pgpgout,
    Item::pgwriteback,
    Item::flusher_wakeups,
    Item::balance_dirty_pages_pauses,
    Item::balance_dirty_pages_pause_ns,
    Item::congestion_waits,
    Item::pgscan_anon,
    Item::pgsteal_anon,
    Item::pswpout,
    Item::pswpin,
    Item::pgmajfault,
];

impl SeedReport for ReclaimWritebackExp {
    /// Dirty + writeback and free pages over the first run of each
    /// workload, one line per pcache variant (the kernel column has no
    /// timeline): two charts per workload.
    fn plot(
        dir: &Path,
        r: &ExperimentResult,
        outs: &Matrix<RunOut>,
        opts: &ReclaimWritebackOpts,
    ) -> Result<Vec<String>> {
        let columns = &r.variants;
        let workloads = opts.workloads();
        let mut files = Vec::new();
        for (wi, &w) in workloads.iter().enumerate() {
            let n = w.name();
            for (what, label, f) in [
                ("dirty", "nr_dirty + nr_writeback (pages)", (|s: &Sample| s.dirty_wb) as fn(&Sample) -> u64),
                ("free", "nr_free_pages (pages)", |s: &Sample| s.nr_free),
            ] {
                let series: Vec<plot::Series> = columns
                    .iter()
                    .take(outs.variants())
                    .enumerate()
                    .filter_map(|(vi, col)| {
                        let tl = &outs.runs(vi, wi).first()?.timeline;
                        (!tl.is_empty()).then(|| plot::Series {
                            name: col.name.clone(),
                            points: tl.iter().map(|s| (s.ms, f(s) as f64)).collect(),
                        })
                    })
                    .collect();
                if series.is_empty() {
                    continue;
                }
                files.push(plot::line_chart(
                    dir,
                    &format!("{EXPERIMENT}-{n}-{what}.svg"),
                    &format!(
                        "{EXPERIMENT} {n}: {what} pages, run 1, {} cache (the sync included)",
                        fmt_size(opts.mem_bytes)
                    ),
                    "time since the first write (ms)",
                    label,
                    &series,
                )?);
            }
        }
        Ok(files)
    }

    fn report_body(r: &ExperimentResult, opts: &ReclaimWritebackOpts) -> String {
        let mut s = String::from(
            "\nelapsed: first write to the return of the last, files closed, no sync (as fs_mark -S0); the dirty data \
             left is synced after, outside the timing (sync_s)\n",
        );
        s.push_str(&summary(r, opts));
        let runs = r.runs.max(1) as f64;
        s.push_str(&vmstat_section(r, "vmstat deltas, mean per run", VM_ITEMS, &|_, _| runs));
        s.push_str(&exercised_line(r));
        s
    }
}

/// The original's summary table, a column per variant.
fn summary(r: &ExperimentResult, opts: &ReclaimWritebackOpts) -> String {
    let mut s = String::from("\nsummary (means over runs; percentages against the first column, positive = better)\n");
    let mem_label = format!("{}M", opts.mem_bytes / MIB);
    let workloads: Vec<&str> = r.variants.first().map(|v| v.vmstat.keys().collect()).unwrap_or_default();
    let mut rows = Vec::new();
    // The original's rows, then its USB-stick rows: iostat's await on the
    // simulated device (only workloads that ran on one have the metric).
    for (label, measure) in [
        ("Files/s mean", "files/s"),
        ("Elapsed Time", "elapsed_s"),
        ("Sync Time", "sync_s"),
        ("Avg wait ms", "avg_wait_ms"),
        ("Device writes", "device_writes"),
    ] {
        for w in &workloads {
            let metric = format!("{w} {measure}");
            if let Some(spec) = r.spec(&metric) {
                rows.push(render::mean_row(r, format!("{mem_label} {label} {w}"), &metric, spec.better));
            }
        }
    }
    let mut per_var = |label: String, f: &dyn Fn(&VariantResult) -> String| {
        rows.push(std::iter::once(label).chain(r.variants.iter().map(f)).collect());
    };
    let runs = r.runs.max(1) as f64;
    for w in &workloads {
        per_var(format!("{mem_label} Kswapd efficiency {w}"), &|v| render::fmt_fixed(v.kswapd_efficiency(w), 0, "%"));
    }
    for (label, item, scale) in [
        ("nr_vmscan_write direct", Item::nr_vmscan_write_direct, 1.0),
        ("nr_vmscan_write kswapd", Item::nr_vmscan_write_kswapd, 1.0),
        ("Throttled ms", Item::balance_dirty_pages_pause_ns, 1e-6),
    ] {
        for w in &workloads {
            per_var(format!("{mem_label} {label} {w}"), &|v| {
                fmt_count(v.vm(w, item).map(|x| x as f64 * scale / runs).unwrap_or(f64::NAN))
            });
        }
    }
    // The original's mmap-strm story: pages swapped where reclaim skipped
    // dirty file pages (only workloads with anonymous memory). The kernel
    // column has no vmstat deltas but measures these two (host-wide
    // /proc/vmstat): its mean.
    for (label, item, measure) in
        [("Pages swapped out", Item::pswpout, "pswpout"), ("Pages swapped in", Item::pswpin, "pswpin")]
    {
        for w in workloads.iter().filter(|w| r.spec(&format!("{w} pswpout")).is_some()) {
            per_var(format!("{mem_label} {label} {w}"), &|v| {
                fmt_count(v.vm(w, item).map_or_else(|| r.mean(&v.name, &format!("{w} {measure}")), |x| x as f64 / runs))
            });
        }
    }
    s.push_str(&render::render_columns(r.variants.iter().map(|v| &v.name), rows));
    s
}

/// Which workloads reclaim met dirty pages in, and so whether the original's
/// headline was tested.
fn exercised_line(r: &ExperimentResult) -> String {
    let Some(ex) = r.extra["exercised"].as_object() else { return String::new() };
    let order: Vec<&str> = r.variants.first().map(|v| v.vmstat.keys().collect()).unwrap_or_default();
    let pick = |want: bool| {
        let v: Vec<&str> =
            order.iter().copied().filter(|w| ex.get(*w).and_then(|e| e.as_bool()) == Some(want)).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let fsmark_tested = ex.iter().any(|(w, e)| w.starts_with("fsmark") && e.as_bool() == Some(true));
    format!(
        "exercised (reclaim met dirty pages or swapped): {}; not exercised: {}. The original's headline, fs_mark files/s, {}\n",
        pick(true),
        pick(false),
        if fsmark_tested { "was tested" } else { "was not tested by this run" }
    )
}

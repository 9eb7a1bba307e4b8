use super::workload::*;
use super::*;

/// A variant's name as part of a file name.
pub(super) fn file_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect()
}

/// Throughput against threads per variant; hit ratio against threads,
/// with the kernel where it ran; the LRU list sizes over time per variant
/// and the variants' active fractions over time.
pub(super) fn plots(
    r: &ExperimentResult,
    opts: &LruContentionOpts,
    dir: &Path,
    lru_threads: usize,
    lru: &[(String, Vec<LruSample>)],
) -> Result<Vec<String>> {
    let series = |measure: &str, with_kernel: bool| -> Vec<plot::Series> {
        r.variants
            .iter()
            .filter(|v| with_kernel || v.name != KERNEL_COLUMN)
            .map(|v| plot::Series {
                name: v.name.clone(),
                points: opts
                    .threads
                    .iter()
                    .map(|&t| (t as f64, r.mean(&v.name, &format!("{} {measure}", workload_name(t)))))
                    .collect(),
            })
            .collect()
    };
    let tp = plot::line_chart(
        dir,
        "lru-contention-throughput.svg",
        &format!("lru-contention: 4 KiB Zipf reads, {} cache, {} CPUs", fmt_size(opts.mem_bytes), cpus()),
        "threads",
        "reads/s (Hmean over runs)",
        &series("ops/s", false),
    )?;
    let hp = plot::line_chart(
        dir,
        "lru-contention-hit-ratio.svg",
        &format!("lru-contention: hit ratio, working set {:.2}x the cache", opts.working_set_ratio),
        "threads",
        "hit ratio % (mean over runs)",
        &series("hit_ratio_%", true),
    )?;
    let mut out = vec![tp, hp];
    let ms = |x: &LruSample| x.t_s * 1e3;
    for (name, samples) in lru.iter().filter(|(_, s)| !s.is_empty()) {
        let p = plot::line_chart(
            dir,
            &format!("lru-sizes-{}.svg", file_part(name)),
            &format!("lru-contention: LRU lists, {name}, {lru_threads} threads, {} cache", fmt_size(opts.mem_bytes)),
            "ms into the timed reads",
            "pages",
            &[
                plot::Series {
                    name: format!("{name} nr_active_file"),
                    points: samples.iter().map(|x| (ms(x), x.active as f64)).collect(),
                },
                plot::Series {
                    name: format!("{name} nr_inactive_file"),
                    points: samples.iter().map(|x| (ms(x), x.inactive as f64)).collect(),
                },
            ],
        )?;
        out.push(p);
    }
    let fractions: Vec<plot::Series> = lru
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(name, samples)| plot::Series {
            name: name.clone(),
            points: samples.iter().map(|x| (ms(x), x.active_fraction())).collect(),
        })
        .collect();
    if !fractions.is_empty() {
        let p = plot::line_chart(
            dir,
            "lru-active-fraction.svg",
            &format!("lru-contention: active / (active + inactive), {lru_threads} threads"),
            "ms into the timed reads",
            "active fraction of the file LRU",
            &fractions,
        )?;
        out.push(p);
    }
    Ok(out)
}

fn vm_items() -> Vec<Item> {
    let lru = [Item::pgrefill, Item::lru_lock_acquire, Item::atomic_flag_rmw, Item::lru_drain];
    let wakeups_and_refaults = [Item::pageoutrun, Item::workingset_refault, Item::workingset_activate];
    [render::VM_MARKING, &lru, render::VM_RECLAIM, &wakeups_and_refaults].concat()
}

impl SeedReport for LruContention {
    fn plot(dir: &Path, r: &ExperimentResult, raw: &LruSeries, p: &LruContentionOpts) -> Result<Vec<String>> {
        plots(r, p, dir, sampled_threads(p), &raw.0)
    }

    fn sizes(r: &ExperimentResult, _: &LruContentionOpts) -> String {
        let cpus = r.params["machine_cpus"].as_u64().unwrap_or(0);
        format!("{} run{}, {cpus} CPUs", r.runs, if r.runs == 1 { "" } else { "s" })
    }

    fn report_body(r: &ExperimentResult, _: &LruContentionOpts) -> String {
        let mut s = String::from("\n");
        if let Some(w) = r.params["workload"].as_str() {
            let _ = writeln!(s, "workload: {w}");
        }
        if let Some(t) = r.params["timing"].as_str() {
            let _ = writeln!(s, "timing: {t}");
        }

        // Means of every measure, grouped by measure.
        let specs: Vec<&MetricSpec> =
            MEASURES.iter().flat_map(|&(m, ..)| r.metric_specs.iter().filter(move |s| s.measure == m)).collect();
        s.push_str(&render::means_table(r, &specs));

        let runs = r.runs.max(1) as f64;
        s.push_str(&vmstat_section(r, "vmstat deltas over the timed reads, mean per run", &vm_items(), &|_, _| runs));
        s
    }
}

use super::checks::max_of;
use super::workload::PER_PAGE;
use super::*;

pub(super) const VM_ITEMS: &[Item] = &[
    Item::atomic_flag_rmw,
    Item::mark_page_accessed_calls,
    Item::init_page_accessed_calls,
    Item::pgactivate,
    Item::lru_lock_acquire,
    Item::lru_drain,
    Item::pagevec_release,
    Item::pgalloc,
    Item::pgfree,
    Item::pgpgout,
    Item::pgwriteback,
    Item::flusher_wakeups,
    Item::pgscan_kswapd,
    Item::pgsteal_kswapd,
    Item::allocstall,
    Item::balance_dirty_pages_pauses,
];

impl SeedReport for Dd {
    fn sizes(r: &ExperimentResult, p: &DdParams) -> String {
        let (file, block) = (fmt_size(p.file_bytes), fmt_size(p.block_bytes));
        let runs = format!("{} run{}", r.runs, if r.runs == 1 { "" } else { "s" });
        format!("files of {file} in {block} blocks, {runs} x {} iterations", p.iterations)
    }

    fn report_body(r: &ExperimentResult, _: &DdParams) -> String {
        // How times are taken, then the seed's table: Max elapsed (async),
        // plus the means.
        let mut s = String::from(
            "\nelapsed: open to the return of close (fdatasync included), unlink not timed; cpu: the writer thread's \
             CPU time over the same span (not the flusher's; stops while the thread is preempted)\n\nas the original \
             (elapsed in seconds; percentages against the first column, positive = better)\n",
        );
        let mut rows = Vec::new();
        for m in [Mode::Async, Mode::Fdatasync] {
            for be in [Backend::Tmpfs, Backend::File] {
                let w = workload_name(be, m);
                for (label, measure, f) in [
                    ("Max", "elapsed", max_of as fn(&[f64]) -> f64),
                    ("Amean", "elapsed", amean as fn(&[f64]) -> f64),
                    ("Amean", "cpu", amean as fn(&[f64]) -> f64),
                ] {
                    let metric = format!("{w} {}", if measure == "cpu" { "cpu_s" } else { "elapsed_s" });
                    let base = r.variants.first().map(|v| f(v.samples(&metric))).unwrap_or(f64::NAN);
                    let mut row = vec![format!("{} dd {:<5} {label:<5} {measure}", m.name(), be.name())];
                    for v in &r.variants {
                        let x = f(v.samples(&metric));
                        let sig = label == "Amean"
                            && v.name != r.variants[0].name
                            && significant(r.variants[0].samples(&metric), v.samples(&metric));
                        row.push(if x.is_nan() {
                            "-".into()
                        } else {
                            fmt_cell(x, pct_better(base, x, Better::Lower), sig).trim_start().to_string()
                        });
                    }
                    rows.push(row);
                }
            }
        }
        s.push_str(&render::render_columns(r.variants.iter().map(|v| &v.name), rows));

        // Cost per page written (the seed's profile), pcache columns only.
        let _ = writeln!(
            s,
            "\ncost per page written, mean over runs (the original's profile: mark_page_accessed samples, vanilla against \
             accessed-v2)"
        );
        let metrics: Vec<String> = WORKLOADS
            .iter()
            .flat_map(|&(be, m)| PER_PAGE.iter().map(move |(measure, _)| format!("{} {measure}", workload_name(be, m))))
            .collect();
        s.push_str(&render::pcache_means(r, &metrics, |v| render::fmt_fixed(v, 3, "")));

        let runs = r.runs.max(1) as f64;
        s.push_str(&vmstat_section(r, "vmstat deltas of the timed iterations, mean per run", VM_ITEMS, &|_, _| runs));
        s
    }

    /// Elapsed per iteration, one line per variant, one chart per workload.
    fn plot(dir: &Path, r: &ExperimentResult, _: &(), p: &DdParams) -> Result<Vec<String>> {
        let mut files = Vec::new();
        for &(b, m) in &WORKLOADS {
            let w = workload_name(b, m);
            let series: Vec<plot::Series> = r
                .variants
                .iter()
                .filter(|c| !c.samples(&format!("{w} elapsed_s")).is_empty())
                .map(|c| plot::Series {
                    name: c.name.clone(),
                    points: c
                        .samples(&format!("{w} elapsed_s"))
                        .iter()
                        .enumerate()
                        .map(|(i, &s)| ((i + 1) as f64, s * 1e3))
                        .collect(),
                })
                .collect();
            files.push(plot::line_chart(
                dir,
                &format!("dd-{w}-elapsed.svg"),
                &format!("dd {w}: {} per iteration ({} runs x {})", fmt_size(p.file_bytes), p.runs, p.iterations),
                "iteration",
                "elapsed (ms)",
                &series,
            )?);
        }
        Ok(files)
    }
}

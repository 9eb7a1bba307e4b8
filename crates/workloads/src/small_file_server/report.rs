use super::workload::*;
use super::*;

impl SeedReport for SmallFileServer {
    fn report_body(r: &ExperimentResult, _: &Params) -> String {
        let mut s = String::new();

        s.push_str(&render::means_table(r, &r.metric_specs.iter().collect::<Vec<_>>()));
        let runs = r.runs.max(1) as f64;
        s.push_str(&vmstat_section(r, "vmstat deltas, mean per run", &vm_items(), &|_, _| runs));
        s
    }

    /// The hit ratios over the server run (already averaged over windows of
    /// rounds), one line per variant.
    fn plot(dir: &Path, r: &ExperimentResult, _: &(), _: &Params) -> Result<Vec<String>> {
        let series: Vec<NamedSeries> = r.extra["server_hit_ratio_series"]
            .as_object()
            .map(|m| m.iter().map(|(n, v)| (n.clone(), series_from_json(v))).collect())
            .unwrap_or_default();
        let pick_line = |pts: &[RoundPoint], pick: fn(&RoundPoint) -> f64| -> Vec<(f64, f64)> {
            pts.iter().map(|x| (x.0, pick(x))).collect()
        };
        let mut files = Vec::new();
        for (file, title, pick) in [
            (
                "small-file-server-hit-ratio.svg",
                "server: hit ratio of the served files' pages over the run",
                (|x: &RoundPoint| x.1) as fn(&RoundPoint) -> f64,
            ),
            ("small-file-server-small-hit-ratio.svg", "server: hit ratio of the one-page files over the run", |x| x.2),
        ] {
            let s: Vec<Series> =
                series.iter().map(|(n, pts)| Series { name: n.clone(), points: pick_line(pts, pick) }).collect();
            files.push(plot::line_chart(dir, file, title, "requests served", "hit ratio", &s)?);
        }
        Ok(files)
    }
}

fn vm_items() -> Vec<Item> {
    [render::VM_MARKING, &[Item::pgpgin, Item::pgpgout], render::VM_RECLAIM].concat()
}

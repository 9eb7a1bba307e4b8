use super::*;

impl SeedChecks for Sparsetruncate {
    fn checks(r: &ExperimentResult) -> Vec<Check> {
        let (b, a) = match r.pair(BEFORE, AFTER) {
            Ok(pair) => pair,
            Err(missing) => return vec![missing],
        };
        let mut out = Vec::new();
        for be in BACKENDS {
            let w = be.name();
            let m = format!("{w} lru_drain/truncate");
            let (db, da) = (amean(b.samples(&m)), amean(a.samples(&m)));
            let pv = amean(b.samples(&format!("{w} pagevec_release/truncate")));
            out.push(Check {
                name: format!("{w}: onedrain drains fewer times per truncate"),
                seed: "lru_add_drain on every pagevec_release -> once per pagevec lifecycle".into(),
                measured: format!("lru_drain/truncate {db:.2} -> {da:.2} ({pv:.2} pagevec releases per truncate)"),
                agrees: if db.is_nan() || da.is_nan() { None } else { Some(da < db) },
                counts: true,
            });
            let metric = format!("{w} truncate_us");
            let (Some(rb), Some(ra)) = (seed_rows(b.samples(&metric)), seed_rows(a.samples(&metric))) else {
                out.push(Check {
                    name: format!("{w}: truncate times measured"),
                    seed: "-".into(),
                    measured: "no samples".into(),
                    agrees: None,
                    counts: true,
                });
                continue;
            };
            let cpu = format!("{w} truncate_cpu_us");
            let (cb, ca) = (seed_rows(b.samples(&cpu)), seed_rows(a.samples(&cpu)));
            for (label, seed, counts, cpu_time) in [
                ("Max", "254.00 -> 208.00 us (+18.11%)", true, false),
                ("Stddev", "12.74 -> 9.62 (+24.49%)", true, false),
                ("Amean", "145.12 -> 144.30 us (+0.56%; within the noise, not counted)", false, false),
                ("Max", "254.00 -> 208.00 us (+18.11%; wall time, idle machine)", false, true),
                ("Stddev", "12.74 -> 9.62 (+24.49%; wall time, idle machine)", false, true),
            ] {
                let (xb, xa) = if cpu_time {
                    match (cb, ca) {
                        (Some(cb), Some(ca)) => (cb, ca),
                        _ => continue,
                    }
                } else {
                    (rb, ra)
                };
                let i = row_index(label);
                let pct = pct_better(xb[i], xa[i], Better::Lower);
                out.push(Check {
                    name: format!(
                        "{w}: {label} truncate {} lower with onedrain",
                        if cpu_time { "CPU time (not preempted)" } else { "time" }
                    ),
                    seed: seed.into(),
                    measured: format!(
                        "{} -> {} ({pct:+.2}%)",
                        render::fmt_fixed(xb[i], 2, ""),
                        render::fmt_fixed(xa[i], 2, "")
                    ),
                    agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                    counts,
                });
            }
        }
        out
    }
}

use super::*;
use crate::runner::KERNEL_COLUMN;
use crate::verdict::{fmt_figure, Effect, Headline, Verdict};

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
            let (Some(rb), Some(ra)) = (original_rows(b.samples(&metric)), original_rows(a.samples(&metric))) else {
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
            let (cb, ca) = (original_rows(b.samples(&cpu)), original_rows(a.samples(&cpu)));
            for (label, original, counts, cpu_time) in [
                ("Max", "254.00 -> 208.00 us (18.11% lower)", true, false),
                ("Stddev", "12.74 -> 9.62 (24.49% lower)", true, false),
                ("Amean", "145.12 -> 144.30 us (0.56% lower; within the noise, not counted)", false, false),
                ("Max", "254.00 -> 208.00 us (18.11% lower; wall time, idle machine)", false, true),
                ("Stddev", "12.74 -> 9.62 (24.49% lower; wall time, idle machine)", false, true),
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
                    seed: original.into(),
                    measured: format!(
                        "{} -> {} ({})",
                        render::fmt_fixed(xb[i], 2, ""),
                        render::fmt_fixed(xa[i], 2, ""),
                        if pct.is_nan() {
                            "n/a".to_string()
                        } else {
                            format!("{:.2}% {}", pct.abs(), if pct >= 0.0 { "lower" } else { "higher" })
                        }
                    ),
                    agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                    counts,
                });
            }
        }
        out
    }

    /// The memory files' truncate CPU time, Max per round and Amean, each
    /// against its noise; the verdict is the Max's, the original's
    /// headline, once the mechanism (fewer drains) is there.
    fn headlines(r: &ExperimentResult) -> Vec<Headline> {
        vec![headline(r)]
    }
}

/// The truncations of one round: a file each.
fn files_per_round(r: &ExperimentResult) -> usize {
    r.params.pointer(&format!("/{}/files", Sparsetruncate::PARAMS_KEY)).and_then(Value::as_u64).unwrap_or(1).max(1)
        as usize
}

/// The largest sample of each round (samples are in run, round, file
/// order): the original's Max, with one value per round for its noise.
fn round_maxima(samples: &[f64], per_round: usize) -> Vec<f64> {
    samples.chunks(per_round).map(|c| c.iter().copied().fold(f64::NAN, f64::max)).collect()
}

fn headline(r: &ExperimentResult) -> Headline {
    let w = Backend::Tmpfs.name();
    let cpu = format!("{w} truncate_cpu_us");
    let samples = |v: &str| r.variant(v).map(|c| c.samples(&cpu).to_vec()).unwrap_or_default();
    let (sb, sa) = (samples(BEFORE), samples(AFTER));
    let per_round = files_per_round(r);
    let (mb, ma) = (round_maxima(&sb, per_round), round_maxima(&sa, per_round));
    let max = Effect::of(&mb, &ma, Better::Lower);
    let mean = Effect::of(&sb, &sa, Better::Lower);
    let drains = format!("{w} lru_drain/truncate");
    let (db, da) = (r.mean(BEFORE, &drains), r.mean(AFTER, &drains));
    let mechanism = db.is_finite() && da.is_finite() && da < db;
    let (verdict, note) = if !mechanism {
        (Verdict::NotReproduced, format!("drains per truncate did not drop ({db:.2} -> {da:.2})"))
    } else {
        let note = "judged on CPU time (the wall-time Max is preemption here)";
        (max.verdict(), note.to_string())
    };
    let kernel_metric = format!("{} truncate_us", Backend::File.name());
    // Host files only: the kernel's tmpfs caches no hole pages on read.
    let kernel = match r.variant(KERNEL_COLUMN) {
        Some(_) => {
            let k = r.mean(KERNEL_COLUMN, &kernel_metric);
            format!(
                "host files only: {} us a truncate, pcache {} us",
                fmt_figure(k),
                fmt_figure(r.mean(AFTER, &kernel_metric))
            )
        }
        None => crate::verdict::kernel_figure(r, &kernel_metric, "us"),
    };
    let avg = |v: &[f64]| fmt_figure(crate::report::amean(v));
    Headline {
        experiment: "Pagevecs drained once per truncate (Mel Gorman, Linux 4.15): sparsetruncate".into(),
        claimed: "truncate time Max 18% lower (254 -> 208 us), Amean 0.6% lower".into(),
        reproduced: format!(
            "CPU time, round Max {} -> {} us, {}; Amean {}",
            avg(&mb),
            avg(&ma),
            max.describe("lower", "higher"),
            mean.describe("lower", "higher")
        ),
        kernel,
        verdict,
        note,
    }
}

//! The seed's claims against this run.

use super::*;

/// Which workloads reclaim met dirty pages in (`extra.exercised`), and a
/// note on those it did not.
pub(super) fn finish(result: &mut ExperimentResult) {
    let exercised = exercised_workloads(result);
    let idle: Vec<&str> = exercised.iter().filter(|(_, e)| !e).map(|(w, _)| w.as_str()).collect();
    if !idle.is_empty() {
        result.notes.push(format!(
            "not exercised: {}: reclaim met no dirty page there under any variant (no reclaim writes, no \
             PG_reclaim tagging), so the variants ran the same code and their differences are noise; their \
             checks are not counted. The flushers kept the inactive tail clean: written-once pages are dirty \
             only while young, and this model has one zone (the seed's machines had several); \
             --param device_rate=30M --param resident=0.65 runs fsmark and simple-wb where they meet some \
             (BENCHMARKS.md)",
            idle.join(", ")
        ));
    }
    let ex_map: serde_json::Map<String, Value> = exercised.iter().map(|(w, e)| (w.clone(), Value::from(*e))).collect();
    if let Some(extra) = result.extra.as_object_mut() {
        extra.insert("exercised".into(), Value::Object(ex_map));
        extra.insert(
            "exercised_means".into(),
            Value::from(
                "reclaim met dirty pages at the inactive tail in some variant: nr_vmscan_write + \
                 nr_vmscan_immediate_reclaim > 0",
            ),
        );
    }
}

/// The workloads in order, with whether reclaim met dirty pages in them.
pub(super) fn exercised_workloads(r: &ExperimentResult) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for s in &r.metric_specs {
        if !out.iter().any(|(w, _)| *w == s.workload) {
            out.push((s.workload.clone(), exercised(r, &s.workload)));
        }
    }
    out
}

/// Whether reclaim met dirty pages in workload `w` under some variant:
/// wrote them (3.1) or tagged them for the flushers (3.2).
pub(super) fn exercised(r: &ExperimentResult, w: &str) -> bool {
    r.variants.iter().any(|v| {
        v.vm(w, Item::nr_vmscan_write).unwrap_or(0) + v.vm(w, Item::nr_vmscan_immediate_reclaim).unwrap_or(0) > 0
    })
}

pub(super) const NOT_EXERCISED: &str = " [not exercised]";

/// The seed's claims against this run, 3.1 against 3.2. Checks of
/// workloads that did not exercise the mechanism do not count.
pub(super) fn checks(r: &ExperimentResult) -> Vec<Check> {
    let workloads = &exercised_workloads(r)[..];
    let (b, a) = match r.pair(BEFORE, AFTER) {
        Ok(pair) => pair,
        Err(missing) => return vec![missing],
    };
    let tag = |ex: bool| if ex { "" } else { NOT_EXERCISED };
    let mut out = Vec::new();
    // Files/s and elapsed, by the direction of the means.
    for (w, ex) in workloads {
        for (measure, seed) in [
            ("files/s", "up in all 13 configs (+0.7% to +14.4%)"),
            (
                "elapsed_s",
                if w == "mmap-strm" {
                    "down in 9 of 13; the slower 4 swapped more (no swap here)"
                } else {
                    "down in all 13 configs"
                },
            ),
        ] {
            let m = format!("{w} {measure}");
            let Some(spec) = r.spec(&m) else { continue };
            let (mb, ma) = (r.mean(BEFORE, &m), r.mean(AFTER, &m));
            let pct = pct_better(mb, ma, spec.better);
            let sig = significant(b.samples(&m), a.samples(&m));
            let (label, verb) = if measure == "files/s" { ("files/s", "up") } else { ("elapsed", "down") };
            out.push(Check {
                name: format!("{w} {label} {verb}"),
                seed: seed.into(),
                measured: format!(
                    "{} -> {} ({} better){}",
                    render::fmt_value(mb),
                    render::fmt_value(ma),
                    fmt_pct(pct, sig),
                    tag(*ex)
                ),
                agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
                counts: *ex,
            });
        }
    }
    // The seed's USB-stick run: "the 'Avg wait' time as measured by iostat
    // was far lower" (fsmark 5404 -> 4474 ms, simple-wb 2541 -> 1454 ms).
    for (w, ex) in workloads {
        let m = format!("{w} avg_wait_ms");
        let Some(spec) = r.spec(&m) else { continue };
        let (mb, ma) = (r.mean(BEFORE, &m), r.mean(AFTER, &m));
        let pct = pct_better(mb, ma, spec.better);
        let sig = significant(b.samples(&m), a.samples(&m));
        out.push(Check {
            name: format!("{w} avg wait down"),
            seed: "down on the USB stick: fsmark -17%, simple-wb -43% (iostat await)".into(),
            measured: format!(
                "{} -> {} ms ({} better){}",
                render::fmt_value(mb),
                render::fmt_value(ma),
                fmt_pct(pct, sig),
                tag(*ex)
            ),
            agrees: if pct.is_nan() { None } else { Some(pct > 0.0) },
            counts: *ex,
        });
    }
    // No direct-reclaim writes with the series; told only when the
    // baseline wrote some.
    let sum = |v: &VariantResult, i: Item| workloads.iter().filter_map(|(w, _)| v.vm(w, i)).sum::<u64>();
    let (db, da) = (sum(b, Item::nr_vmscan_write_direct), sum(a, Item::nr_vmscan_write_direct));
    out.push(Check {
        name: format!("no direct-reclaim writes in {AFTER}"),
        seed: "none (patch 1)".into(),
        measured: format!(
            "nr_vmscan_write_direct per run {} -> {}{}",
            fmt_count(db as f64 / r.runs.max(1) as f64),
            fmt_count(da as f64 / r.runs.max(1) as f64),
            if db == 0 { format!(" ({BEFORE} wrote none either)") } else { String::new() }
        ),
        agrees: if db == 0 && da == 0 { None } else { Some(da == 0) },
        counts: true,
    });
    // Kswapd efficiency unchanged, per workload.
    for (w, ex) in workloads {
        let eff = |v: &VariantResult| {
            let scan = v.vm(w, Item::pgscan_kswapd).unwrap_or(0);
            let steal = v.vm(w, Item::pgsteal_kswapd).unwrap_or(0);
            if scan == 0 {
                f64::NAN
            } else {
                steal as f64 / scan as f64 * 100.0
            }
        };
        let (eb, ea) = (eff(b), eff(a));
        let d = ea - eb;
        out.push(Check {
            name: format!("{w} kswapd efficiency unchanged"),
            seed: format!("within a few points (+-{EFFICIENCY_TOLERANCE_POINTS:.0} allowed)"),
            measured: if d.is_nan() {
                format!("{} -> {} (kswapd scanned nothing){}", fmt_eff(eb), fmt_eff(ea), tag(*ex))
            } else {
                format!("{} -> {} ({d:+.1} points){}", fmt_eff(eb), fmt_eff(ea), tag(*ex))
            },
            agrees: if d.is_nan() { None } else { Some(d.abs() <= EFFICIENCY_TOLERANCE_POINTS) },
            counts: *ex,
        });
    }
    out
}

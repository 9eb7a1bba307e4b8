//! The main job's last screen: one [`Headline`] per experiment (or per
//! target), each saying what the original measurement claimed, what this
//! run reproduced with the kernel's column beside it, and a [`Verdict`]
//! that agrees with those numbers. Experiments build their headlines from
//! their own results; [`render_screen`] lays them out in at most 40 lines
//! of at most 120 columns.

use serde::{Deserialize, Serialize};

use crate::report::{amean, t_critical_95, ExperimentResult};
use crate::stats::{pct_better, Better};

/// How a headline's claim fared in this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The effect the original measurement reported is there, larger than
    /// this run's noise, in the same direction.
    Reproduced,
    /// The effect is there in the opposite direction, or absent where the
    /// run could have shown it.
    NotReproduced,
    /// The measured difference is smaller than this machine's measured
    /// noise: the run can neither confirm nor refute the claim.
    WithinNoise,
    /// A performance target of pcache's own, met in this run.
    Met,
    /// A performance target of pcache's own, missed in this run.
    Missed,
    /// This machine cannot judge it (no kernel column, a debug build, the
    /// seed's conditions absent); the headline's `note` says why.
    CannotJudge,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Reproduced => "REPRODUCED",
            Verdict::NotReproduced => "NOT REPRODUCED",
            Verdict::WithinNoise => "WITHIN NOISE",
            Verdict::Met => "MET",
            Verdict::Missed => "MISSED",
            Verdict::CannotJudge => "CANNOT JUDGE",
        }
    }
}

/// One entry of the verdict screen. Every field is one short line of
/// plain words (no seed numbers, no file names): the screen wraps nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// The experiment or target in words, e.g. "No file writeback from
    /// direct reclaim (Mel Gorman, Linux 3.2): fs_mark".
    pub experiment: String,
    /// What the original measurement claimed, e.g. "files/s 4-14% higher".
    pub claimed: String,
    /// What this run measured, with the key ratio, e.g. "files/s 6.7%
    /// higher (2,254 -> 2,404)".
    pub reproduced: String,
    /// The kernel's column beside it, e.g. "kernel 1,795 files/s", or why
    /// there is none.
    pub kernel: String,
    pub verdict: Verdict,
    /// Why the verdict is what it is when the numbers alone do not say
    /// (the noise measured, what this machine lacks); empty otherwise.
    pub note: String,
}

/// A difference between two columns' samples, in percent of the first's
/// mean (positive = better), and this run's noise: the half-width of the
/// 95% confidence interval of the difference of means (Welch), in the same
/// percent. An effect larger than its noise is what Welch's test calls
/// significant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effect {
    pub pct: f64,
    pub noise_pct: f64,
}

impl Effect {
    pub fn of(base: &[f64], new: &[f64], better: Better) -> Effect {
        let clean = |v: &[f64]| v.iter().copied().filter(|x| x.is_finite()).collect::<Vec<f64>>();
        let (a, b) = (clean(base), clean(new));
        let (ma, mb) = (amean(&a), amean(&b));
        let pct = pct_better(ma, mb, better);
        if a.len() < 2 || b.len() < 2 || ma == 0.0 {
            return Effect { pct, noise_pct: f64::NAN };
        }
        let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64;
        let (qa, qb) = (var(&a, ma) / a.len() as f64, var(&b, mb) / b.len() as f64);
        let se2 = qa + qb;
        let dof = if qa + qb == 0.0 {
            f64::INFINITY
        } else {
            se2 * se2 / (qa * qa / (a.len() - 1) as f64 + qb * qb / (b.len() - 1) as f64)
        };
        Effect { pct, noise_pct: t_critical_95(dof) * se2.sqrt() / ma.abs() * 100.0 }
    }

    /// The metric `metric` of variant `new` against variant `base`.
    pub fn between(r: &ExperimentResult, base: &str, new: &str, metric: &str) -> Effect {
        let better = r.spec(metric).map_or(Better::Higher, |s| s.better);
        let samples = |v: &str| r.variant(v).map(|v| v.samples(metric).to_vec()).unwrap_or_default();
        Effect::of(&samples(base), &samples(new), better)
    }

    /// Reproduced when the effect is in the claimed direction (`better`
    /// for an improvement) and larger than the noise; not reproduced when
    /// opposite and larger; within noise otherwise.
    pub fn verdict(&self) -> Verdict {
        if !self.pct.is_finite() || !self.noise_pct.is_finite() {
            Verdict::CannotJudge
        } else if self.pct.abs() <= self.noise_pct {
            Verdict::WithinNoise
        } else if self.pct > 0.0 {
            Verdict::Reproduced
        } else {
            Verdict::NotReproduced
        }
    }

    /// "6.7% more files/s (noise +-4.0%)": `gain` and `loss` are the words
    /// for either sign ("faster"/"slower", "more files/s"/"fewer files/s").
    pub fn describe(&self, gain: &str, loss: &str) -> String {
        if !self.pct.is_finite() {
            return "not measured".into();
        }
        let word = if self.pct >= 0.0 { gain } else { loss };
        let noise =
            if self.noise_pct.is_finite() { format!(" (noise +-{:.1}%)", self.noise_pct) } else { String::new() };
        format!("{:.1}% {word}{noise}", self.pct.abs())
    }
}

/// A figure for a headline: three significant digits, thousands grouped.
pub fn fmt_figure(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        let n = v.round() as i64;
        let digits = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            out.insert(0, '-');
        }
        out
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The kernel column's mean of `metric` with `unit`, or why there is none.
pub fn kernel_figure(r: &ExperimentResult, metric: &str, unit: &str) -> String {
    match r.variant(crate::runner::KERNEL_COLUMN) {
        None => r
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("kernel column not available: "))
            .map_or("not run".into(), |why| format!("not run ({why})")),
        Some(_) => {
            let m = r.mean(crate::runner::KERNEL_COLUMN, metric);
            if m.is_finite() {
                format!("{} {unit}", fmt_figure(m))
            } else {
                "no such figure".into()
            }
        }
    }
}

/// At most this many lines, and this many columns each.
pub const SCREEN_LINES: usize = 40;
pub const SCREEN_COLS: usize = 120;

/// `s` cut to `n` characters, "..." marking the cut.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// The main job's first lines: what it runs and where the full report goes.
pub fn main_job_header(experiments: usize, report: &str) -> String {
    format!(
        "pcache bench: the main job, {experiments} experiments, each against the host kernel's page cache where \
         this machine allows.\nEvery table, check and note goes to the full report: {report}\n\n"
    )
}

/// The tally of `headlines`' verdicts, e.g. "2 met, 1 missed".
pub fn tally(headlines: &[Headline]) -> String {
    let count = |v: Verdict| headlines.iter().filter(|h| h.verdict == v).count();
    let parts: Vec<String> = ALL
        .into_iter()
        .filter(|&v| count(v) > 0)
        .map(|v| format!("{} {}", count(v), v.label().to_lowercase()))
        .collect();
    if parts.is_empty() {
        "no verdict".into()
    } else {
        parts.join(", ")
    }
}

const ALL: [Verdict; 6] = [
    Verdict::Reproduced,
    Verdict::NotReproduced,
    Verdict::WithinNoise,
    Verdict::Met,
    Verdict::Missed,
    Verdict::CannotJudge,
];

/// One line per finished experiment while the main job runs.
pub fn progress_line(name: &str, secs: f64, headlines: &[Headline]) -> String {
    format!("{name:<18} {secs:>6.1} s  {}\n", tally(headlines))
}

/// The verdict screen: a title with the tally, then per headline its
/// verdict and experiment, and below it what was claimed, what this run
/// measured, the kernel's figure and any note, packed into as few lines of
/// [`SCREEN_COLS`] as they fit, joined by "; ". A part too wide for a line
/// is wrapped while the screen has lines to spare within [`SCREEN_LINES`],
/// cut with "..." once it has not; once even cut parts leave no lines, the
/// last headlines' parts share one cut line each.
pub fn render_screen(headlines: &[Headline]) -> String {
    const IND: &str = "    ";
    let w = SCREEN_COLS;
    let parts = |h: &Headline| {
        let mut p = vec![format!("claimed: {}", h.claimed), format!("this run: {}", h.reproduced)];
        p.push(format!("kernel: {}", h.kernel));
        if !h.note.is_empty() {
            p.push(h.note.clone());
        }
        p
    };
    // The lines of one headline's parts: packed, each part wrapped when
    // `wrap`, cut otherwise.
    let pack = |parts: &[String], wrap: bool| {
        let mut lines: Vec<String> = Vec::new();
        let mut cur = String::new();
        for p in parts {
            let joined = if cur.is_empty() { format!("{IND}{p}") } else { format!("{cur}; {p}") };
            if joined.chars().count() <= w {
                cur = joined;
                continue;
            }
            if !cur.is_empty() {
                lines.push(std::mem::take(&mut cur));
            }
            let alone = format!("{IND}{p}");
            if alone.chars().count() <= w {
                cur = alone;
            } else if wrap {
                let wrapped = crate::render::wrap(IND, p, w);
                let mut ls: Vec<String> = wrapped.lines().map(|l| l.to_string()).collect();
                cur = ls.pop().unwrap_or_default();
                lines.extend(ls);
            } else {
                cur = clip(&alone, w);
            }
        }
        if !cur.is_empty() {
            lines.push(cur);
        }
        lines
    };
    let title = clip(&format!("Verdicts: {} ({} headlines)", tally(headlines), headlines.len()), w);
    let heads: Vec<String> =
        headlines.iter().map(|h| clip(&format!("{:<15}{}", h.verdict.label(), h.experiment), w)).collect();
    let all: Vec<Vec<String>> = headlines.iter().map(parts).collect();
    // Each headline's parts in one of three forms: all on one line, cut
    // ("tight"); each part cut to a line ("cut"); wrapped ("long"). All
    // start tight; then, in order while lines are left, each is cut, and
    // then wrapped: where every headline fits cut, the first ones wrap.
    let mut forms: Vec<Vec<String>> = all.iter().map(|p| vec![clip(&format!("{IND}{}", p.join("; ")), w)]).collect();
    let mut used = 1 + heads.len() + forms.iter().map(Vec::len).sum::<usize>();
    for wrap in [false, true] {
        for (form, p) in forms.iter_mut().zip(&all) {
            let better = pack(p, wrap);
            if better.len() >= form.len() && used + better.len() - form.len() <= SCREEN_LINES {
                used += better.len() - form.len();
                *form = better;
            }
        }
    }
    let mut lines = vec![title];
    for (head, form) in heads.into_iter().zip(forms) {
        lines.push(head);
        lines.extend(form);
    }
    if lines.len() > SCREEN_LINES {
        let dropped = lines.len() + 1 - SCREEN_LINES;
        lines.truncate(SCREEN_LINES - 1);
        lines.push(format!("({dropped} lines more in the full report)"));
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: Verdict, long: bool) -> Headline {
        let x = if long { "x".repeat(300) } else { "x".into() };
        Headline {
            experiment: x.clone(),
            claimed: x.clone(),
            reproduced: x.clone(),
            kernel: x.clone(),
            verdict: v,
            note: x,
        }
    }

    // Goal: the screen stays within 40 lines of 120 columns whatever the
    // headlines hold, and its tally counts each verdict.
    #[test]
    fn screen_fits_and_tallies() {
        let hs: Vec<Headline> =
            (0..30).map(|i| h(if i % 2 == 0 { Verdict::Met } else { Verdict::Missed }, true)).collect();
        let s = render_screen(&hs);
        assert!(s.lines().count() <= SCREEN_LINES, "{}", s.lines().count());
        assert!(s.lines().all(|l| l.chars().count() <= SCREEN_COLS));
        assert!(s.starts_with("Verdicts: 15 met, 15 missed (30 headlines)\n"), "{s}");
        assert!(s.trim_end().ends_with("lines more in the full report)"), "{s}");
        // Short parts share one line.
        let s = render_screen(&[h(Verdict::WithinNoise, false)]);
        assert_eq!(s.lines().count(), 3, "{s}");
        assert!(s.lines().nth(2).is_some_and(|l| l.contains("claimed: x; this run: x; kernel: x; x")), "{s}");
        assert!(s.contains("WITHIN NOISE"));
        assert!(s.starts_with("Verdicts: 1 within noise (1 headlines)\n"));
        // Wide parts wrap, words whole, while lines are spare: nothing cut.
        let words = |n: usize| vec!["word"; n].join(" ");
        let wide = Headline { claimed: words(40), reproduced: words(40), ..h(Verdict::Met, false) };
        let s = render_screen(&[wide]);
        assert!(s.lines().count() > 4 && !s.contains("..."), "{s}");
        assert!(s.lines().all(|l| l.chars().count() <= SCREEN_COLS));
        assert_eq!(s.matches("word").count(), 80);
    }

    // Goal: headlines too many for their parts on lines of their own each
    // keep one line of parts, so that none is lost off the screen: the
    // first keep more while lines are left.
    #[test]
    fn many_headlines_all_shown() {
        let part = |c: char| std::iter::repeat_n(c, 100).collect::<String>();
        let hs: Vec<Headline> = (0..14)
            .map(|i| Headline {
                experiment: format!("headline {i}"),
                claimed: part('c'),
                reproduced: part('r'),
                kernel: part('k'),
                note: String::new(),
                verdict: Verdict::Met,
            })
            .collect();
        let s = render_screen(&hs);
        assert!(s.lines().count() <= SCREEN_LINES, "{s}");
        assert!(s.lines().all(|l| l.chars().count() <= SCREEN_COLS));
        assert!((0..14).all(|i| s.contains(&format!("headline {i}\n"))), "{s}");
        assert!(!s.contains("lines more"), "{s}");
        // 1 + 14 heads + 14 tight lines = 29: 11 lines to spare, 2 a
        // headline to cut: the first five are cut (the title, the first
        // head and its 3 lines come before the second), the rest share a
        // line.
        let first = s.split("MET            headline 1\n").next().unwrap_or("");
        assert_eq!(first.lines().count(), 5, "{s}");
        assert!(s.trim_end().ends_with("..."), "{s}");
    }

    // Goal: an effect counts only beyond its noise, in either direction,
    // and its words follow its sign.
    #[test]
    fn effect_against_noise() {
        let base = [100.0, 101.0, 99.0, 100.0];
        let up = Effect::of(&base, &[110.0, 111.0, 109.0, 110.0], Better::Higher);
        assert!((up.pct - 10.0).abs() < 1e-9 && up.noise_pct < 3.0, "{up:?}");
        assert_eq!(up.verdict(), Verdict::Reproduced);
        assert_eq!(up.describe("more", "fewer"), format!("10.0% more (noise +-{:.1}%)", up.noise_pct));
        let down = Effect::of(&base, &[110.0, 111.0, 109.0, 110.0], Better::Lower);
        assert_eq!(down.verdict(), Verdict::NotReproduced);
        assert!(down.describe("faster", "slower").starts_with("10.0% slower"));
        let noisy = Effect::of(&[90.0, 110.0, 95.0, 105.0], &[95.0, 115.0, 100.0, 108.0], Better::Higher);
        assert_eq!(noisy.verdict(), Verdict::WithinNoise, "{noisy:?}");
        assert_eq!(Effect::of(&[1.0], &[2.0], Better::Higher).verdict(), Verdict::CannotJudge);
        assert_eq!(fmt_figure(1794.59), "1,795");
        assert_eq!(fmt_figure(12.63), "12.6");
        assert_eq!(fmt_figure(-2_345_678.0), "-2,345,678");
    }
}

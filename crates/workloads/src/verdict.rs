//! The main job's last screen: one [`Headline`] per experiment (or per
//! target), each saying what the original measurement claimed, what this
//! run reproduced with the kernel's column beside it, and a [`Verdict`]
//! that agrees with those numbers. Experiments build their headlines from
//! their own results; [`render_screen`] lays them out in at most 40 lines
//! of at most 120 columns.

use serde::{Deserialize, Serialize};

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

/// At most this many lines, and this many columns each.
pub const SCREEN_LINES: usize = 40;
pub const SCREEN_COLS: usize = 120;

/// `s` cut to `n` characters, an ellipsis marking the cut.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The verdict screen: a title, then per headline its verdict and
/// experiment on one line and claim, result and kernel below, then a
/// tally. Lines past [`SCREEN_LINES`] are dropped with a count.
pub fn render_screen(headlines: &[Headline]) -> String {
    const IND: &str = "    ";
    let w = SCREEN_COLS;
    let mut lines = vec![clip(
        "Verdicts (claimed by the original measurement / measured in this run / the kernel's page cache)",
        w,
    )];
    for h in headlines {
        lines.push(clip(&format!("{:<15}{}", h.verdict.label(), h.experiment), w));
        lines.push(clip(&format!("{IND}claimed: {}; this run: {}", h.claimed, h.reproduced), w));
        let mut third = format!("{IND}kernel: {}", h.kernel);
        if !h.note.is_empty() {
            third.push_str(&format!("; {}", h.note));
        }
        lines.push(clip(&third, w));
    }
    let count = |v: Verdict| headlines.iter().filter(|h| h.verdict == v).count();
    let tally: Vec<String> = [
        Verdict::Reproduced,
        Verdict::NotReproduced,
        Verdict::WithinNoise,
        Verdict::Met,
        Verdict::Missed,
        Verdict::CannotJudge,
    ]
    .into_iter()
    .filter(|&v| count(v) > 0)
    .map(|v| format!("{} {}", count(v), v.label().to_lowercase()))
    .collect();
    let tally = clip(&format!("{} headlines: {}", headlines.len(), tally.join(", ")), w);
    if lines.len() + 1 > SCREEN_LINES {
        let dropped = lines.len() + 2 - SCREEN_LINES;
        lines.truncate(SCREEN_LINES - 2);
        lines.push(format!("({dropped} lines more in the full report)"));
    }
    lines.push(tally);
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
        assert!(s.ends_with("30 headlines: 15 met, 15 missed\n"), "{s}");
        let s = render_screen(&[h(Verdict::WithinNoise, false)]);
        assert_eq!(s.lines().count(), 5);
        assert!(s.contains("WITHIN NOISE"));
        assert!(s.ends_with("1 headlines: 1 within noise\n"));
    }
}

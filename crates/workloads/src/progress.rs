//! Progress bars for the long phases, on stderr. indicatif draws nothing
//! when stderr is not a terminal; `enabled: false` hides them everywhere.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) struct Progress {
    enabled: bool,
}

pub(crate) struct Phase {
    bar: ProgressBar,
    start: Instant,
}

impl Progress {
    pub(crate) fn new(enabled: bool) -> Progress {
        Progress { enabled }
    }

    pub(crate) fn phase(&self, name: &str, len: u64) -> Phase {
        let bar = if self.enabled { ProgressBar::new(len) } else { ProgressBar::hidden() };
        let style = ProgressStyle::with_template("{prefix:>20} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(name.to_string());
        Phase { bar, start: Instant::now() }
    }
}

impl Phase {
    pub(crate) fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    pub(crate) fn set_message(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// Finish the bar, leaving it on screen; returns the phase's seconds.
    pub(crate) fn finish(self) -> f64 {
        let secs = self.start.elapsed().as_secs_f64();
        self.bar.finish_with_message(format!("done in {secs:.1}s"));
        secs
    }
}

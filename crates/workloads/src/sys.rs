//! Facts about the machine a run happened on, shared by the experiments.

use std::path::Path;

use crate::{Error, Result};

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The 1-minute load average, from /proc/loadavg (NaN if unreadable).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A note on the other load on the machine during a run.
pub fn load_note(before: f64, after: f64) -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    format!(
        "1-minute load average {before:.2} at the start, {after:.2} at the end, on {cpus} CPUs{}",
        if before.max(after) > cpus as f64 * 0.75 {
            ": other work shared the CPUs, so wall times carry its preemptions"
        } else {
            ""
        }
    )
}

/// A temporary directory in `dir` (the system's if None).
pub fn tempdir_in(dir: Option<&Path>, prefix: &str) -> Result<tempfile::TempDir> {
    match dir {
        Some(d) => tempfile::Builder::new().prefix(prefix).tempdir_in(d),
        None => tempfile::Builder::new().prefix(prefix).tempdir(),
    }
    .map_err(|e| Error::io("creating a temporary directory", e))
}

//! `pcache bench sparsetruncate` (seed 001). Not implemented yet.

use crate::experiment::ExpOpts;
use crate::report::ExperimentResult;
use crate::variants::Preset;
use crate::{Error, Result};

pub const EXPERIMENT: &str = "sparsetruncate";

/// This experiment's variants.
pub const PRESETS: &[Preset] = &[];

/// Run the experiment.
pub fn run(_opts: &ExpOpts) -> Result<ExperimentResult> {
    Err(Error::Invalid(format!("{EXPERIMENT}: not implemented yet")))
}

/// The human-readable report.
pub fn report(_r: &ExperimentResult) -> String {
    String::new()
}

/// The same workload through the kernel's page cache, run by
/// `kernel::run` in a child process inside a memory cgroup: parameters in,
/// measurements out (JSON).
pub fn kernel_workload(_params: &serde_json::Value) -> std::result::Result<serde_json::Value, String> {
    Err(format!("{EXPERIMENT}: no kernel workload yet"))
}

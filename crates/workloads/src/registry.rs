//! The registry: the one place that names every experiment. The CLI
//! (`pcache bench NAME`, `--list`, `--help`), the main job, the kernel
//! worker and the presets all read it, so adding an experiment is its
//! folder (or module) and one line in [`EXPERIMENTS`].
//!
//! Architecture invariant: no module of this crate imports this one; the
//! experiments import the framework (`experiment`, `runner`, `kernel`,
//! `variants`, `report`, `render`), never the other way round, so that the
//! crate has no import cycle through the experiments.

use std::path::Path;

use serde_json::Value;

use crate::experiment::{self, ExpOpts, Experiment, MainJob, Outcome};
use crate::kernel;
use crate::runner::Seed;
use crate::variants::Preset;
use crate::{dd, fuse_dd, getscan, hitpath, lru_contention, reclaim_writeback, replay};
use crate::{mount, seqread, small_file_server, sparsetruncate, sqlite_ycsb};
use crate::{Error, Result};

/// Every experiment, in `--list` and main-job order.
pub static EXPERIMENTS: &[&dyn Experiment] = &[
    &hitpath::Hitpath,
    &Seed::<reclaim_writeback::ReclaimWritebackExp>::ENTRY,
    &Seed::<dd::Dd>::ENTRY,
    &Seed::<sparsetruncate::Sparsetruncate>::ENTRY,
    &Seed::<lru_contention::LruContention>::ENTRY,
    &Seed::<small_file_server::SmallFileServer>::ENTRY,
    &fuse_dd::FuseDd,
    &seqread::Seqread,
    &mount::MountBench,
    &replay::Replay,
    &sqlite_ycsb::SqliteYcsb,
    &getscan::Getscan,
];

pub fn find(name: &str) -> Option<&'static dyn Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.name() == name)
}

/// The experiments `pcache bench` alone runs, in order.
pub fn main_job() -> impl Iterator<Item = &'static dyn Experiment> {
    EXPERIMENTS.iter().copied().filter(|e| e.main_job() != MainJob::No)
}

/// The options `exp` runs with in the main job: its quick sizes where it
/// asks for them, or where the host has less memory available than its
/// default size needs.
pub fn main_job_opts(exp: &dyn Experiment, opts: &ExpOpts) -> ExpOpts {
    let quick = match exp.main_job() {
        MainJob::No => false,
        MainJob::Quick => true,
        MainJob::DefaultSize { needs } => pcache::host_mem_available().is_some_and(|have| have < needs),
    };
    ExpOpts { quick: opts.quick || quick, ..opts.clone() }
}

pub fn run(name: &str, opts: &ExpOpts) -> Result<Outcome> {
    let exp = find(name).ok_or_else(|| Error::Invalid(format!("no experiment {name:?}; see --list")))?;
    experiment::run(exp, opts)
}

pub fn presets(name: &str) -> &'static [Preset] {
    find(name).map(|e| e.presets()).unwrap_or(&[])
}

/// The kernel worker's side (`pcache __kernel-worker EXPERIMENT CGROUP
/// PARAMS`): look up the experiment's kernel workload and run it in the
/// memory cgroup.
pub fn kernel_worker(experiment: &str, cgroup: &Path, params: &str) -> std::result::Result<Value, String> {
    let workload = find(experiment)
        .and_then(|e| e.kernel_workload())
        .ok_or_else(|| format!("no kernel workload for {experiment}"))?;
    kernel::worker_main(workload, cgroup, params)
}

/// The `--list` text: every experiment, its about line, and whether the
/// main job runs it.
pub fn list() -> String {
    let mut out = String::from("experiments (pcache bench NAME --help for options):\n");
    for e in EXPERIMENTS {
        let tag = if e.main_job() != MainJob::No { " [main job]" } else { "" };
        let about = format!("{}{tag}", e.about());
        out.push_str(&crate::render::wrap(&format!("  {:<18} ", e.name()), &about, 120));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the registry is consistent: names are unique, every preset
    // table belongs to its experiment and has defaults, and every
    // experiment's parameters are snake_case and unique.
    #[test]
    fn registry_is_consistent() {
        let mut names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate experiment names");
        for e in EXPERIMENTS {
            for p in e.presets() {
                assert_eq!(p.experiment, e.name(), "preset {} in {}'s table", p.name, e.name());
            }
            if !e.presets().is_empty() {
                assert!(!crate::variants::defaults(e.presets()).is_empty(), "{} has no default variants", e.name());
            }
            let mut ps: Vec<&str> = e.params().iter().map(|p| p.name).collect();
            assert!(ps.iter().all(|p| p.chars().all(|c| c.is_ascii_lowercase() || c == '_')), "{ps:?}");
            ps.sort();
            let k = ps.len();
            ps.dedup();
            assert_eq!(ps.len(), k, "{}: duplicate parameters", e.name());
        }
        assert!(main_job().count() >= 6);
        assert_eq!(presets("replay").len(), replay::PRESETS.len());
        assert!(kernel_worker("nosuch", Path::new("/nonexistent"), "{}").is_err());
    }

    // Goal: an unknown parameter or tunable, or variants where an
    // experiment has none, is refused before anything runs.
    #[test]
    fn refuses_what_an_experiment_does_not_take() {
        let bad = ExpOpts { params: vec![("nosuch".into(), "1".into())], ..ExpOpts::default() };
        assert!(matches!(run("dd", &bad), Err(Error::Invalid(m)) if m.contains("nosuch")));
        let bad = ExpOpts { set: vec![("nosuch".into(), "1".into())], ..ExpOpts::default() };
        assert!(matches!(run("reclaim-writeback", &bad), Err(Error::Invalid(m)) if m.contains("nosuch")));
        let bad = ExpOpts { variants: Some(vec!["x".into()]), ..ExpOpts::default() };
        assert!(matches!(run("hitpath", &bad), Err(Error::Invalid(_))));
        assert!(run("nosuch", &ExpOpts::default()).is_err());
    }
}

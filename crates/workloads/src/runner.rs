//! The generic runner of the seed experiments: the skeleton they share,
//! written once (ARCHITECTURE.md, "Adding an experiment"). [`run`] resolves
//! and checks every parameter, preset and `--set` before anything runs,
//! measures ([`SeedMeasure`] through [`Ctx`]), adds the kernel column,
//! builds the [`ExperimentResult`] with its checks and verdict, and plots;
//! [`report`] renders it; [`Seed`] makes it a registry entry.

use std::marker::PhantomData;
use std::path::Path;
use std::time::Instant;

use pcache::{Tunables, VmStat};
use serde::Serialize;
use serde_json::Value;

use crate::experiment::{variant_tunables, ExpOpts, Experiment, MainJob, Outcome, ParamDoc};
use crate::kernel;
use crate::progress::Progress;
use crate::render::fmt_size;
use crate::report::{same_direction, sum_vmstat, Check, ExperimentResult, MetricSpec, Named, Samples, VariantResult};
use crate::sys::{load_note, loadavg, tempdir_in};
use crate::variants::{self, Preset};
use crate::verdict::{Headline, Verdict};
use crate::Result;

/// A preset and its tunables (the preset's, then `--set`).
#[derive(Clone, Debug)]
pub struct Variant {
    pub preset: &'static Preset,
    pub tunables: Tunables,
}

impl Variant {
    pub fn column(&self, metrics: Named<Samples>, vmstat: Named<Value>) -> VariantResult {
        VariantResult { name: self.preset.name.into(), stands_for: self.preset.stands_for.into(), metrics, vmstat }
    }
}

pub const KERNEL_COLUMN: &str = "kernel";

/// The samples of a run, `outs[variant][workload][run]`.
#[derive(Debug)]
pub struct Matrix<T>(Vec<Vec<Vec<T>>>);

impl<T> Matrix<T> {
    pub fn variants(&self) -> usize {
        self.0.len()
    }

    pub fn workloads(&self) -> usize {
        self.0.first().map_or(0, Vec::len)
    }

    pub fn runs(&self, variant: usize, workload: usize) -> &[T] {
        &self.0[variant][workload]
    }

    pub fn runs_mut(&mut self, variant: usize, workload: usize) -> &mut [T] {
        &mut self.0[variant][workload]
    }

    pub fn workload(&self, workload: usize) -> impl Iterator<Item = &T> {
        self.0.iter().flat_map(move |v| v[workload].iter())
    }
}

/// What an experiment's measurement hands the runner.
#[derive(Debug, Default)]
pub struct Measured {
    /// The pcache columns, in variant order.
    pub variants: Vec<VariantResult>,
    pub specs: Vec<MetricSpec>,
    /// `params` beside the typed parameters: `workloads` (each `name` and
    /// `description`, shown in the set-up), how times are taken.
    pub params: serde_json::Map<String, Value>,
    /// Findings beyond the metrics (the runner adds `kernel`).
    pub extra: serde_json::Map<String, Value>,
    pub notes: Vec<String>,
}

/// A JSON object's map (empty for anything else).
pub fn into_map(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

#[derive(Debug)]
pub struct KernelColumn {
    pub column: VariantResult,
    pub raw: Value,
    pub notes: Vec<String>,
}

impl KernelColumn {
    /// No vmstat: the kernel's counters are the whole machine's.
    pub fn new(stands_for: String, metrics: Named<Samples>, raw: Value, notes: Vec<String>) -> KernelColumn {
        KernelColumn {
            column: VariantResult { name: KERNEL_COLUMN.into(), stands_for, metrics, vmstat: Named::new() },
            raw,
            notes,
        }
    }

    pub fn stands_for(what: &str, mem_bytes: u64) -> String {
        let release = crate::sys::kernel_release();
        format!("the host kernel's page cache (Linux {release}), {what} in a memory cgroup of {}", fmt_size(mem_bytes))
    }
}

pub struct Ctx<'a> {
    pub opts: &'a ExpOpts,
    pub variants: Vec<Variant>,
    /// The run's temporary directory (removed after the kernel column).
    pub tmp: tempfile::TempDir,
    progress: Progress,
    name: &'static str,
}

impl Ctx<'_> {
    /// Every workload `runs` times with the variants side by side:
    /// `f(run, workload)` returns one result per variant, in variant order.
    pub fn side_by_side<T>(
        &self,
        runs: usize,
        workloads: &[String],
        mut f: impl FnMut(usize, usize) -> Result<Vec<T>>,
    ) -> Result<Matrix<T>> {
        let nv = self.variants.len();
        let phase = self.progress.phase(self.name, (runs * workloads.len()) as u64);
        let mut outs: Vec<Vec<Vec<T>>> =
            (0..nv).map(|_| (0..workloads.len()).map(|_| Vec::with_capacity(runs)).collect()).collect();
        for r in 0..runs {
            for (wi, w) in workloads.iter().enumerate() {
                phase.set_message(format!("run {}/{runs} {w}", r + 1));
                let per_variant = f(r, wi)?;
                // A cell that forgot a variant would shift every column.
                assert_eq!(per_variant.len(), nv, "{}: one result per variant", self.name);
                for (vi, out) in per_variant.into_iter().enumerate() {
                    outs[vi][wi].push(out);
                }
                phase.inc(1);
            }
        }
        phase.finish();
        Ok(Matrix(outs))
    }

    /// The pcache columns of `outs`: `fill(variant, workload, runs,
    /// metrics)` adds a workload's metrics and returns its vmstat deltas.
    pub fn columns<T>(
        &self,
        outs: &Matrix<T>,
        workloads: &[String],
        mut fill: impl FnMut(&Variant, &str, &[T], &mut Named<Samples>) -> Vec<VmStat>,
    ) -> Vec<VariantResult> {
        let columns = self.variants.iter().enumerate().map(|(vi, v)| {
            let (mut metrics, mut vmstat) = (Named::new(), Named::new());
            for (wi, w) in workloads.iter().enumerate() {
                let deltas = fill(v, w, outs.runs(vi, wi), &mut metrics);
                vmstat.insert(w.as_str(), sum_vmstat(&deltas));
            }
            v.column(metrics, vmstat)
        });
        columns.collect()
    }

    /// Every workload `runs` times, one variant at a time: `f(run,
    /// workload, variant)`. The order alternates from run to run, so that
    /// drifts of the machine fall on all alike.
    pub fn each_variant<T>(
        &self,
        runs: usize,
        workloads: &[String],
        mut f: impl FnMut(usize, usize, usize) -> Result<T>,
    ) -> Result<Matrix<T>> {
        let nv = self.variants.len();
        let phase = self.progress.phase(self.name, (runs * workloads.len() * nv) as u64);
        let mut outs: Vec<Vec<Vec<T>>> =
            (0..nv).map(|_| (0..workloads.len()).map(|_| Vec::with_capacity(runs)).collect()).collect();
        for r in 0..runs {
            for (wi, w) in workloads.iter().enumerate() {
                let order: Vec<usize> = if r.is_multiple_of(2) { (0..nv).collect() } else { (0..nv).rev().collect() };
                for vi in order {
                    phase.set_message(format!("run {}/{runs} {w} {}", r + 1, self.variants[vi].preset.name));
                    outs[vi][wi].push(f(r, wi, vi)?);
                    phase.inc(1);
                }
            }
        }
        phase.finish();
        Ok(Matrix(outs))
    }
}

/// What the runner needs to know of a run's parameters (the first variant
/// is the baseline).
pub struct Shape<'a> {
    pub variants: &'a [String],
    pub runs: usize,
    pub quick: bool,
    pub mem_bytes: u64,
}

/// A seed experiment: what differs from one seed to the next, in its
/// folder's `mod.rs`; the four job traits are each implemented in the
/// folder's file of that name, so nothing forwards (ARCHITECTURE.md).
pub trait SeedExperiment: Sync + 'static {
    /// Serialised into the JSON's `params[PARAMS_KEY]`.
    type Params: Serialize;
    /// What the plots need beyond the columns.
    type Raw;

    const NAME: &'static str;
    /// Who made the change, when, in which kernel, e.g. `"Mel Gorman,
    /// Linux 3.2, commit ee72886d8ed5"`.
    const ORIGIN: &'static str;
    const CLAIM: &'static str;
    /// The original patch or question in a few words, for the title.
    const SUBJECT: &'static str;
    const ABOUT: &'static str;
    const PRESETS: &'static [Preset];
    const PARAMS_KEY: &'static str;
    /// `--param NAME=VALUE`.
    const PARAMS: &'static [ParamDoc] = &[];

    fn smoke() -> ExpOpts {
        ExpOpts::smoke(&[])
    }
    fn params(opts: &ExpOpts) -> Result<Self::Params>;
    fn shape(p: &Self::Params) -> Shape<'_>;
}

/// [`SeedExperiment::params`] by `Self::Params::$new(opts)`, and
/// [`SeedExperiment::shape`] from the fields every seed's parameters have.
macro_rules! params_from {
    ($new:ident) => {
        fn params(opts: &$crate::experiment::ExpOpts) -> $crate::Result<Self::Params> {
            <Self::Params>::$new(opts)
        }
        fn shape(p: &Self::Params) -> $crate::runner::Shape<'_> {
            $crate::runner::Shape { variants: &p.variants, runs: p.runs, quick: p.quick, mem_bytes: p.mem_bytes }
        }
    };
}
pub(crate) use params_from;

pub trait SeedMeasure: SeedExperiment {
    fn measure(ctx: &Ctx<'_>, p: &Self::Params) -> Result<(Measured, Self::Raw)>;
}

pub trait SeedKernel: SeedExperiment {
    /// What the kernel column runs in the worker process.
    fn kernel_workload() -> Option<kernel::Workload>;
    /// The temporary directory still exists; Err says why there is none.
    fn kernel_column(ctx: &Ctx<'_>, p: &Self::Params) -> std::result::Result<KernelColumn, String>;
}

pub trait SeedChecks: SeedExperiment {
    fn checks(r: &ExperimentResult) -> Vec<Check>;
    /// Findings after the checks and the verdict.
    fn finish(_r: &mut ExperimentResult) {}
    /// The verdict screen's lines (after `checks` and `finish`). The
    /// default is one line from the counted checks; an experiment states
    /// its headline effect and the kernel's figure beside it instead.
    fn headlines(r: &ExperimentResult) -> Vec<Headline> {
        vec![checks_headline(Self::SUBJECT, Self::CLAIM, r)]
    }
}

/// One headline from the counted checks: reproduced when every counted
/// check that could be told agrees.
pub fn checks_headline(subject: &str, claim: &str, r: &ExperimentResult) -> Headline {
    let told: Vec<bool> = r.checks.iter().filter(|c| c.counts).filter_map(|c| c.agrees).collect();
    let agree = told.iter().filter(|&&a| a).count();
    let verdict = if told.is_empty() {
        Verdict::CannotJudge
    } else if agree == told.len() {
        Verdict::Reproduced
    } else {
        Verdict::NotReproduced
    };
    Headline {
        experiment: subject.to_string(),
        claimed: claim.to_string(),
        reproduced: format!("{agree} of {} counted checks agree", told.len()),
        kernel: "see the full report".into(),
        verdict,
        note: String::new(),
    }
}

pub trait SeedReport: SeedExperiment {
    fn title(r: &ExperimentResult, p: &Self::Params) -> String {
        let (mem, sizes) = (fmt_size(Self::shape(p).mem_bytes), Self::sizes(r, p));
        let quick = if r.quick { " (quick)" } else { "" };
        format!("{}: {} ({}): {mem} of cache, {sizes}{quick}", Self::NAME, Self::SUBJECT, r.origin)
    }
    /// The sizes in the title, after the cache.
    fn sizes(r: &ExperimentResult, _: &Self::Params) -> String {
        format!("{} run{}", r.runs, if r.runs == 1 { "" } else { "s" })
    }
    /// Between the compare-kernels table and the checks.
    fn report_body(r: &ExperimentResult, p: &Self::Params) -> String;
    /// The files written.
    fn plot(dir: &Path, r: &ExperimentResult, raw: &Self::Raw, p: &Self::Params) -> Result<Vec<String>>;
}

pub trait Seeded: SeedMeasure + SeedKernel + SeedChecks + SeedReport {}

impl<E: SeedMeasure + SeedKernel + SeedChecks + SeedReport> Seeded for E {}

pub fn run<E: Seeded>(opts: &ExpOpts) -> Result<(ExperimentResult, E::Params)> {
    let p = E::params(opts)?;
    run_with::<E>(opts, p)
}

/// Run `E` with parameters already resolved.
/// The variants `names` picks from `E`'s presets, each with its tunables
/// after the --set values: unknown names and bad values are errors.
fn resolve_variants<E: Seeded>(names: &[String], opts: &ExpOpts) -> Result<Vec<Variant>> {
    variants::resolve(E::PRESETS, names)?
        .into_iter()
        .map(|preset| Ok(Variant { preset, tunables: variant_tunables(preset, opts)? }))
        .collect()
}

pub fn run_with<E: Seeded>(opts: &ExpOpts, p: E::Params) -> Result<(ExperimentResult, E::Params)> {
    let Shape { variants: names, runs, quick, .. } = E::shape(&p);
    // Refuse unknown variants and bad --set values before anything runs.
    let variants = resolve_variants::<E>(names, opts)?;
    let start = Instant::now();
    let load_before = loadavg();
    let tmp = tempdir_in(opts.dir.as_deref(), &format!("pcache-{}-", E::NAME))?;
    let ctx = Ctx { opts, variants, tmp, progress: Progress::new(opts.progress), name: E::NAME };
    let (mut m, raw) = E::measure(&ctx, &p)?;
    let load_after = loadavg();

    let mut notes = std::mem::take(&mut m.notes);
    notes.push(load_note(load_before, load_after));
    if cfg!(debug_assertions) {
        notes.push("debug build: run with --release for meaningful timings".into());
    }
    let mut columns = std::mem::take(&mut m.variants);
    let mut kernel_raw = Value::Null;
    if opts.kernel {
        match E::kernel_column(&ctx, &p) {
            Ok(k) => {
                columns.push(k.column);
                kernel_raw = k.raw;
                notes.extend(k.notes);
            }
            Err(why) => notes.push(format!("kernel column not available: {why}")),
        }
    } else {
        notes.push("kernel column not run (--no-kernel)".into());
    }
    drop(ctx);

    let mut params = serde_json::Map::new();
    params.insert(E::PARAMS_KEY.into(), serde_json::to_value(&p).unwrap_or(Value::Null));
    params.append(&mut m.params);
    params.insert("kernel_column".into(), Value::from(opts.kernel));
    if !opts.set.is_empty() {
        params.insert("set".into(), serde_json::json!(opts.set));
    }
    let mut extra = std::mem::take(&mut m.extra);
    extra.insert("kernel".into(), kernel_raw);
    let mut result = ExperimentResult {
        experiment: E::NAME.into(),
        origin: E::ORIGIN.into(),
        claim: E::CLAIM.into(),
        same_direction: false,
        variants: columns,
        metric_specs: m.specs,
        checks: Vec::new(),
        params: Value::Object(params),
        extra: Value::Object(extra),
        runs,
        quick,
        optimized: !cfg!(debug_assertions),
        total_s: 0.0,
        notes,
        headlines: Vec::new(),
    };
    result.checks = E::checks(&result);
    result.same_direction = same_direction(&result.checks);
    E::finish(&mut result);
    result.headlines = E::headlines(&result);
    if let Some(dir) = &opts.plot_dir {
        match E::plot(dir, &result, &raw, &p) {
            Ok(files) => result.notes.push(format!("plots: {}", files.join(", "))),
            Err(e) => result.notes.push(format!("plots not written: {e}")),
        }
    }
    result.total_s = start.elapsed().as_secs_f64();
    Ok((result, p))
}

pub fn report<E: Seeded>(r: &ExperimentResult, p: &E::Params) -> String {
    let mut s = E::title(r, p);
    s.push('\n');
    s.push_str(&r.render_setup());
    s.push_str(&r.render_compare_section());
    s.push_str(&E::report_body(r, p));
    s.push_str(&r.render_tail());
    s
}

/// A [`SeedExperiment`] as a registry entry.
pub struct Seed<E>(PhantomData<E>);

impl<E> Seed<E> {
    pub const ENTRY: Seed<E> = Seed(PhantomData);
}

impl<E: Seeded> Experiment for Seed<E> {
    fn name(&self) -> &'static str {
        E::NAME
    }
    fn about(&self) -> &'static str {
        E::ABOUT
    }
    fn main_job(&self) -> MainJob {
        MainJob::Quick
    }
    fn presets(&self) -> &'static [Preset] {
        E::PRESETS
    }
    fn params(&self) -> &'static [ParamDoc] {
        E::PARAMS
    }
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        E::kernel_workload()
    }
    fn smoke(&self) -> ExpOpts {
        E::smoke()
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        let p = E::params(opts)?;
        resolve_variants::<E>(E::shape(&p).variants, opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let (result, p) = run::<E>(opts)?;
        Ok(Outcome::new(report::<E>(&result, &p), &result)?.with_headlines(result.headlines.clone()))
    }
}

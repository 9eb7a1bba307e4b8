//! The experiment framework's contract: the [`Experiment`] trait every
//! `pcache bench NAME` implements, the one set of options every experiment
//! takes ([`ExpOpts`], with its own parameters as `--param NAME=VALUE`),
//! tunables set by name (`--set NAME=VALUE`), and what a run gives back
//! ([`Outcome`]: the report and the JSON).
//!
//! The registry ([`crate::registry`]) lists the experiments; the seed
//! experiments implement [`crate::runner::SeedExperiment`] instead, and the
//! runner turns that into an [`Experiment`].

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

use pcache::Tunables;

use crate::kernel;
use crate::variants::Preset;
use crate::{Error, Result};

/// One parameter of an experiment's own (`--param NAME=VALUE`).
#[derive(Clone, Copy, Debug)]
pub struct ParamDoc {
    /// The name `--param` takes (snake_case); `--NAME` in kebab-case is
    /// accepted too, as the older per-experiment flags were spelled.
    pub name: &'static str,
    /// What it sets, with its defaults.
    pub help: &'static str,
}

/// Declares an experiment's parameters once, one line each: the struct
/// (serialised as the run's parameters, so the field names are JSON keys),
/// its full default and, after `quick`, its quick one; after `param`, how
/// `--param NAME=VALUE` parses it (`param_as`, `param_list`, `param_size`,
/// `param_sizes`; NAME is the field's unless given in parentheses) and its
/// help line, which is its doc too (a `///` only to say more); after
/// `range`, the values it accepts (`each` for a list: non-empty, every
/// element in range); after `opt`, the [`ExpOpts`] field it copies; after
/// the struct, `also [ParamDoc, ..]` lists parameters parsed elsewhere.
/// Generates `PARAMS` (the help), `defaults(quick)` (`Default` is the full
/// one), `set_params(&ExpOpts)` and `check_ranges()`; checks across fields
/// stay in the experiment's own `validate`.
macro_rules! params {
    (
        $(#[$sm:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fm:meta])*
                $fvis:vis $f:ident : $t:ty = $full:expr
                    $(, quick $quick:expr)?
                    $(, param $parse:ident $(($pname:literal))? $help:literal
                        $(, range $range:expr)? $(, each $each:expr)?)?
                    $(, opt $opt:ident)?
                ;
            )*
        }
        $(also [$($also:expr),* $(,)?])?
    ) => {
        $(#[$sm])*
        $vis struct $name {
            $( $(#[$fm])* $fvis $f: $t, )*
        }

        impl Default for $name {
            /// The full sizes.
            fn default() -> Self {
                Self::defaults(false)
            }
        }

        impl $name {
            /// Its own parameters (`--param NAME=VALUE`), with their help.
            pub const PARAMS: &'static [$crate::experiment::ParamDoc] = &[
                $($( $crate::experiment::ParamDoc {
                    name: $crate::experiment::params!(@name $f $($pname)?),
                    help: $help,
                }, )?)*
                $($($also,)*)?
            ];

            /// The defaults, at the quick sizes or the full ones.
            pub fn defaults(quick: bool) -> Self {
                let _ = quick;
                $name { $( $f: $crate::experiment::params!(@pick quick, $full $(, $quick)?), )* }
            }

            /// Take what `opts` gives: its `--param`s, then the shared
            /// options the fields copy.
            pub fn set_params(&mut self, opts: &$crate::experiment::ExpOpts) -> $crate::Result<()> {
                $($( if let Some(v) = opts.$parse($crate::experiment::params!(@name $f $($pname)?))? {
                    self.$f = v;
                } )?)*
                $($( self.$f = ::std::clone::Clone::clone(&opts.$opt); )?)*
                Ok(())
            }

            /// Refuse parameters outside their declared ranges.
            pub fn check_ranges(&self) -> $crate::Result<()> {
                $($(
                    #[allow(unused_variables)]
                    let name = $crate::experiment::params!(@name $f $($pname)?);
                    $(
                        let r = $range;
                        if !r.contains(&self.$f) {
                            return Err($crate::Error::Invalid(format!("{name} {:?} must be in {r:?}", self.$f)));
                        }
                    )?
                    $(
                        let r = $each;
                        if self.$f.is_empty() || !self.$f.iter().all(|x| r.contains(x)) {
                            let m = format!("{name} {:?} must be a non-empty list, each in {r:?}", self.$f);
                            return Err($crate::Error::Invalid(m));
                        }
                    )?
                )?)*
                Ok(())
            }
        }
    };
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident $p:literal) => { $p };
    (@pick $q:ident, $full:expr) => { $full };
    (@pick $q:ident, $full:expr, $quick:expr) => { if $q { $quick } else { $full } };
}
pub(crate) use params;

/// Which sizes an experiment runs at in the main job (`pcache bench`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MainJob {
    /// Not in the main job.
    No,
    /// At its default size (unless `--quick`).
    DefaultSize,
    /// Always at its quick size.
    Quick,
}

/// An experiment `pcache bench NAME` runs. Object safe: the registry holds
/// `&'static dyn Experiment`.
pub trait Experiment: Sync {
    /// `pcache bench NAME`.
    fn name(&self) -> &'static str;
    /// One paragraph for `--list` and `--help`.
    fn about(&self) -> &'static str;
    /// Whether and how the main job runs it.
    fn main_job(&self) -> MainJob {
        MainJob::No
    }
    /// Its named variants (`--variants`); empty if it compares none.
    fn presets(&self) -> &'static [Preset] {
        &[]
    }

    /// Whether `--set NAME=VALUE` means something to it: to every
    /// experiment that compares presets, and to those that build their
    /// caches from tunables themselves.
    fn takes_set(&self) -> bool {
        !self.presets().is_empty()
    }
    /// Its own parameters (`--param NAME=VALUE`).
    fn params(&self) -> &'static [ParamDoc] {
        &[]
    }
    /// The workload its kernel column runs in the worker process.
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        None
    }
    /// The smallest run that still takes every path (every workload,
    /// variant, check and report section), without the kernel column: what
    /// the registry's contract test runs.
    fn smoke(&self) -> ExpOpts {
        ExpOpts::smoke(&[])
    }
    /// Run with `opts` (checked against [`Experiment::params`] and
    /// [`Experiment::presets`] by [`run`]).
    fn run(&self, opts: &ExpOpts) -> Result<Outcome>;
}

/// What one experiment gives back.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The readable report.
    pub report: String,
    /// Pretty JSON, fields in the order the result struct declares them.
    pub json: String,
}

impl Outcome {
    /// The report and the pretty JSON of `result`.
    pub fn new(report: String, result: &impl serde::Serialize) -> Result<Outcome> {
        let json = serde_json::to_string_pretty(result).map_err(|e| Error::Invalid(format!("serialising: {e}")))?;
        Ok(Outcome { report, json })
    }
}

/// Run `exp` with `opts`, first refusing what it does not take: a
/// parameter it does not have, variants or tunables where it compares no
/// presets.
pub fn run(exp: &dyn Experiment, opts: &ExpOpts) -> Result<Outcome> {
    for (name, _) in &opts.params {
        if !exp.params().iter().any(|p| p.name == name.replace('-', "_")) {
            let known: Vec<&str> = exp.params().iter().map(|p| p.name).collect();
            return Err(Error::Invalid(format!(
                "{} has no parameter {name:?}; known: {}",
                exp.name(),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
        }
    }
    if exp.presets().is_empty() && opts.variants.is_some() {
        return Err(Error::Invalid(format!("{} compares no variants: --variants does not apply", exp.name())));
    }
    if !exp.takes_set() && !opts.set.is_empty() {
        return Err(Error::Invalid(format!("{} sets no tunables: --set does not apply", exp.name())));
    }
    exp.run(opts)
}

/// `{"name": {...}, ...}` from pretty-printed JSON texts, keeping each
/// text's field order: the main job's JSON, one object per experiment.
pub fn keyed_json(parts: &[(&str, String)]) -> String {
    let mut s = String::from("{\n");
    for (i, (name, text)) in parts.iter().enumerate() {
        let sep = if i + 1 < parts.len() { "," } else { "" };
        // Pretty JSON has newlines only between tokens, so indenting
        // after each one is safe.
        s.push_str(&format!("  \"{name}\": {}{sep}\n", text.replace('\n', "\n  ")));
    }
    s.push_str("}\n");
    s
}

/// Options of `pcache bench EXPERIMENT`.
#[derive(Clone, Debug, Default)]
pub struct ExpOpts {
    /// Bytes of page cache; None means the experiment's default (quick or
    /// full).
    pub mem_bytes: Option<u64>,
    /// Variant names, the first the baseline; None means the defaults.
    pub variants: Option<Vec<String>>,
    /// Runs of every measurement; None means the experiment's default.
    pub runs: Option<usize>,
    /// Reduced sizes for tests and CI.
    pub quick: bool,
    /// Where to make the temporary directory.
    pub dir: Option<PathBuf>,
    /// Draw progress bars (when stderr is a terminal).
    pub progress: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// Write SVG plots here.
    pub plot_dir: Option<PathBuf>,
    /// Tunables set by name for every variant, applied after the preset.
    pub set: Vec<(String, String)>,
    /// Try the kernel column (a memory cgroup running the same workload
    /// through the kernel's page cache).
    pub kernel: bool,
    /// The experiment's own parameters, `NAME=VALUE` (see
    /// [`Experiment::params`]); the last of a name wins.
    pub params: Vec<(String, String)>,
}

/// The memory, runs and variant names every seed experiment resolves the
/// same way: `opts`' values or the experiment's quick/full defaults,
/// checked, with the variants looked up.
pub struct Common {
    pub mem_bytes: u64,
    pub runs: usize,
    pub variants: Vec<String>,
}

impl ExpOpts {
    /// The smoke sizes (8 MiB of cache, one run, quick, seed 1) with the
    /// experiment's own `params`: what [`Experiment::smoke`] starts from.
    pub fn smoke(params: &[(&str, &str)]) -> ExpOpts {
        let params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ExpOpts { mem_bytes: Some(8 << 20), runs: Some(1), quick: true, seed: 1, params, ..ExpOpts::default() }
    }

    /// Resolve [`Common`] for the experiment whose variants are `presets`:
    /// `mem` and `runs` are its (quick, full) defaults, `max_mem` the
    /// largest cache it accepts.
    pub fn common(
        &self,
        presets: &'static [Preset],
        mem: (u64, u64),
        runs: (usize, usize),
        max_mem: u64,
    ) -> Result<Common> {
        const MIB: u64 = 1 << 20;
        let mem_bytes = self.mem_bytes.unwrap_or(if self.quick { mem.0 } else { mem.1 });
        if !(4 * MIB..=max_mem).contains(&mem_bytes) {
            return Err(Error::Invalid(format!(
                "memory {} must be from 4 MiB to {}",
                crate::render::fmt_size(mem_bytes),
                crate::render::fmt_size(max_mem)
            )));
        }
        let runs = self.runs.unwrap_or(if self.quick { runs.0 } else { runs.1 });
        if runs == 0 || runs > 1000 {
            return Err(Error::Invalid(format!("runs {runs} must be from 1 to 1000")));
        }
        let names = self.variants.clone().unwrap_or_else(|| crate::variants::defaults(presets));
        let variants: Vec<String> = names.iter().map(|s| s.trim().to_string()).collect();
        crate::variants::resolve(presets, &variants)?;
        Ok(Common { mem_bytes, runs, variants })
    }

    /// The value of parameter `name` (`-` and `_` alike), the last given.
    pub fn param(&self, name: &str) -> Option<&str> {
        let want = name.replace('-', "_");
        self.params.iter().rev().find(|(k, _)| k.replace('-', "_") == want).map(|(_, v)| v.as_str())
    }

    /// Parameter `name` parsed as `T`; None when not given.
    pub fn param_as<T: FromStr>(&self, name: &str) -> Result<Option<T>>
    where
        T::Err: Display,
    {
        self.param(name)
            .map(|v| v.parse::<T>().map_err(|e| Error::Invalid(format!("--param {name}={v}: {e}"))))
            .transpose()
    }

    /// Parameter `name` as a size (`128M`, `1G`, bytes); None when not
    /// given.
    pub fn param_size(&self, name: &str) -> Result<Option<u64>> {
        self.param(name)
            .map(|v| crate::render::parse_size(v).map_err(|e| Error::Invalid(format!("--param {name}: {e}"))))
            .transpose()
    }

    /// Parameter `name` as a comma-separated list of sizes (`4K,1M`);
    /// None when not given.
    pub fn param_sizes(&self, name: &str) -> Result<Option<Vec<usize>>> {
        self.param(name)
            .map(|v| {
                v.split(',')
                    .map(|x| crate::render::parse_size(x.trim()).map(|b| b as usize))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| Error::Invalid(format!("--param {name}={v}: {e}")))
            })
            .transpose()
    }

    /// Parameter `name` as a comma-separated list of `T`; None when not
    /// given.
    pub fn param_list<T: FromStr>(&self, name: &str) -> Result<Option<Vec<T>>>
    where
        T::Err: Display,
    {
        self.param(name)
            .map(|v| {
                v.split(',')
                    .map(|x| x.trim().parse::<T>().map_err(|e| Error::Invalid(format!("--param {name}={v}: {e}"))))
                    .collect()
            })
            .transpose()
    }
}

/// For the options' unit tests: every one of `ok` passes `check`, every
/// one of `bad` is refused as invalid (`Error::Invalid`, the error that
/// names the option), not by some other failure.
#[cfg(test)]
pub(crate) fn assert_checked<T: std::fmt::Debug>(ok: &[T], bad: &[T], check: impl Fn(&T) -> Result<()>) {
    for o in ok {
        if let Err(e) = check(o) {
            panic!("{o:?} refused: {e}");
        }
    }
    for o in bad {
        assert!(matches!(check(o), Err(Error::Invalid(_))), "{o:?} not refused as invalid");
    }
}

/// Parse `NAME=VALUE`.
pub fn parse_set(s: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// Set tunables by their field names (`dirty_ratio=40`,
/// `remark_rule=PrevIndex`), refusing unknown names and bad values.
pub fn apply_sets(t: Tunables, sets: &[(String, String)]) -> Result<Tunables> {
    t.with_sets(sets.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| Error::Invalid(e.to_string()))
}

/// A variant's tunables: its preset, then the `--set` overrides.
pub fn variant_tunables(p: &Preset, opts: &ExpOpts) -> Result<Tunables> {
    apply_sets((p.tunables)(), &opts.set)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: tunables are set by name, with typed values, and bad names or
    // values are refused.
    #[test]
    fn sets_by_name() {
        let t = apply_sets(
            Tunables::default(),
            &[("dirty_ratio".into(), "40".into()), ("remark_rule".into(), "PrevIndex".into())],
        )
        .unwrap();
        assert_eq!(t.dirty_ratio, 40);
        assert_eq!(t.remark_rule, pcache::RemarkRule::PrevIndex);
        assert!(apply_sets(Tunables::default(), &[("nosuch".into(), "1".into())]).is_err());
        assert!(apply_sets(Tunables::default(), &[("dirty_ratio".into(), "lots".into())]).is_err());
        assert_eq!(parse_set("a=b").unwrap(), ("a".to_string(), "b".to_string()));
        assert!(parse_set("ab").is_err());
    }

    // Goal: parameters are found by either spelling, the last wins, and
    // bad values are refused with the parameter's name.
    #[test]
    fn params_by_name() {
        let o = ExpOpts {
            params: vec![
                ("file-mib".into(), "8".into()),
                ("file_mib".into(), "16".into()),
                ("threads".into(), "1, 2".into()),
                ("size".into(), "1M".into()),
                ("bad".into(), "x".into()),
            ],
            ..ExpOpts::default()
        };
        assert_eq!(o.param_as::<u64>("file_mib").unwrap(), Some(16));
        assert_eq!(o.param_list::<usize>("threads").unwrap(), Some(vec![1, 2]));
        assert_eq!(o.param_size("size").unwrap(), Some(1 << 20));
        assert_eq!(o.param_as::<u64>("absent").unwrap(), None);
        assert!(matches!(o.param_as::<u64>("bad"), Err(Error::Invalid(m)) if m.contains("bad")));
    }

    params! {
        #[derive(Debug)]
        struct Toy {
            size: u64 = 10, quick 2, param param_size("size_bytes") "bytes", range 1..=1 << 20;
            threads: Vec<usize> = vec![1], param param_list "thread counts", each 1..=4;
            seed: u64 = 0, opt seed;
        }
    }

    // Goal: params! gives each field its quick or full default, takes
    // `--param`s under their names and the shared options it copies, and
    // refuses values out of range naming the parameter.
    #[test]
    fn params_declared_once() {
        assert_eq!(Toy::PARAMS.iter().map(|p| p.name).collect::<Vec<_>>(), ["size_bytes", "threads"]);
        assert_eq!((Toy::defaults(true).size, Toy::default().size), (2, 10));
        let with = |params: &[(&str, &str)]| {
            let mut t = Toy::default();
            t.set_params(&ExpOpts { seed: 7, ..ExpOpts::smoke(params) }).map(|()| t)
        };
        let t = with(&[("size_bytes", "1K"), ("threads", "2,4")]).unwrap();
        assert_eq!((t.size, t.threads.as_slice(), t.seed), (1024, &[2, 4][..], 7));
        assert!(t.check_ranges().is_ok());
        assert!(with(&[("threads", "x")]).is_err());
        for bad in [&[("size_bytes", "0")][..], &[("size_bytes", "2M")], &[("threads", "1,5")]] {
            let refused = with(bad).and_then(|t| t.check_ranges());
            assert!(matches!(&refused, Err(Error::Invalid(m)) if m.contains(bad[0].0)), "{bad:?}: {refused:?}");
        }
    }

    // Goal: the main job's JSON is one object keyed by experiment, each
    // part's field order kept.
    #[test]
    fn keyed_json_is_json() {
        let a = "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    2\n  ],\n  \"s\": \"x\\ny\"\n}".to_string();
        let text = keyed_json(&[("one", a.clone()), ("two", a)]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["two"]["s"], "x\ny");
        assert_eq!(v["one"]["a"][1], 2);
        assert!(text.find("\"z\"").unwrap() < text.find("\"a\"").unwrap());
    }
}

//! The [`Experiment`] trait every `pcache bench NAME` implements, the
//! options every experiment takes ([`ExpOpts`]; `--param`, `--set`) and
//! what a run gives back ([`Outcome`]). Seed experiments implement
//! [`crate::runner::SeedExperiment`] instead.

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

use pcache::Tunables;

use crate::kernel;
use crate::variants::Preset;
use crate::verdict::Headline;
use crate::{Error, Result};

/// `--param NAME=VALUE` (snake_case; kebab-case is accepted too, as the
/// older per-experiment flags were spelled).
#[derive(Clone, Copy, Debug)]
pub struct ParamDoc {
    pub name: &'static str,
    pub help: &'static str,
}

/// Declares an experiment's parameters once, one line each: field, full
/// default, `quick` default; `param` and its parser (`param_as`,
/// `param_list`, `param_size`, `param_sizes`; NAME in parentheses if not
/// the field's) and help line; `range` (`each` for a non-empty list); `opt`,
/// the [`ExpOpts`] field it copies; `also [ParamDoc, ..]` for parameters
/// parsed elsewhere. Generates `PARAMS`, `defaults(quick)`, `Default` (the
/// full sizes), `set_params(&ExpOpts)` and `check_ranges()`.
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
            fn default() -> Self {
                Self::defaults(false)
            }
        }

        impl $name {
            pub const PARAMS: &'static [$crate::experiment::ParamDoc] = &[
                $($( $crate::experiment::ParamDoc {
                    name: $crate::experiment::params!(@name $f $($pname)?),
                    help: $help,
                }, )?)*
                $($($also,)*)?
            ];

            pub fn defaults(quick: bool) -> Self {
                let _ = quick;
                $name { $( $f: $crate::experiment::params!(@pick quick, $full $(, $quick)?), )* }
            }

            pub fn set_params(&mut self, opts: &$crate::experiment::ExpOpts) -> $crate::Result<()> {
                $($( if let Some(v) = opts.$parse($crate::experiment::params!(@name $f $($pname)?))? {
                    self.$f = v;
                } )?)*
                $($( self.$f = ::std::clone::Clone::clone(&opts.$opt); )?)*
                Ok(())
            }

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

/// How the main job (`pcache bench`) runs an experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MainJob {
    No,
    /// At its default size (unless `--quick`) on a host with at least
    /// `needs` bytes of MemAvailable; at its quick size on a smaller one,
    /// rather than pushing the host into its OOM killer.
    DefaultSize {
        needs: u64,
    },
    Quick,
}

/// An experiment `pcache bench NAME` runs (object safe: the registry holds
/// `&'static dyn Experiment`).
pub trait Experiment: Sync {
    fn name(&self) -> &'static str;
    /// One paragraph for `--list` and `--help`.
    fn about(&self) -> &'static str;
    fn main_job(&self) -> MainJob {
        MainJob::No
    }
    fn presets(&self) -> &'static [Preset] {
        &[]
    }
    /// To those that compare presets, and those that build their caches
    /// from tunables themselves.
    fn takes_set(&self) -> bool {
        !self.presets().is_empty()
    }
    fn params(&self) -> &'static [ParamDoc] {
        &[]
    }
    /// What its kernel column runs in the worker process.
    fn kernel_workload(&self) -> Option<kernel::Workload> {
        None
    }
    /// The smallest run that still takes every path, without the kernel
    /// column: what the contract test runs.
    fn smoke(&self) -> ExpOpts {
        ExpOpts::smoke(&[])
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome>;
}

/// The report, pretty JSON in the result struct's field order, and the
/// lines the main job's verdict screen shows for it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub report: String,
    pub json: String,
    pub headlines: Vec<Headline>,
}

impl Outcome {
    pub fn new(report: String, result: &impl serde::Serialize) -> Result<Outcome> {
        let json = serde_json::to_string_pretty(result).map_err(|e| Error::Invalid(format!("serialising: {e}")))?;
        Ok(Outcome { report, json, headlines: Vec::new() })
    }

    pub fn with_headlines(mut self, headlines: Vec<Headline>) -> Outcome {
        self.headlines = headlines;
        self
    }
}

/// Run `exp`, first refusing parameters, variants or tunables it does not
/// take.
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

/// The main job's JSON, `{"name": {...}, ...}`, each text's field order kept.
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

/// Options of `pcache bench EXPERIMENT` (None: the experiment's default).
#[derive(Clone, Debug, Default)]
pub struct ExpOpts {
    pub mem_bytes: Option<u64>,
    /// The first is the baseline.
    pub variants: Option<Vec<String>>,
    pub runs: Option<usize>,
    pub quick: bool,
    pub dir: Option<PathBuf>,
    pub progress: bool,
    pub seed: u64,
    pub plot_dir: Option<PathBuf>,
    /// `--set`, applied after each preset.
    pub set: Vec<(String, String)>,
    pub kernel: bool,
    /// `--param`; the last of a name wins.
    pub params: Vec<(String, String)>,
}

/// What every seed experiment resolves alike (see [`ExpOpts::common`]).
pub struct Common {
    pub mem_bytes: u64,
    pub runs: usize,
    pub variants: Vec<String>,
}

impl ExpOpts {
    /// 8 MiB of cache, one run, quick, seed 1, and `params`.
    pub fn smoke(params: &[(&str, &str)]) -> ExpOpts {
        let params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ExpOpts { mem_bytes: Some(8 << 20), runs: Some(1), quick: true, seed: 1, params, ..ExpOpts::default() }
    }

    /// `mem` and `runs` are the (quick, full) defaults.
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

    /// `-` and `_` alike, the last given.
    pub fn param(&self, name: &str) -> Option<&str> {
        let want = name.replace('-', "_");
        self.params.iter().rev().find(|(k, _)| k.replace('-', "_") == want).map(|(_, v)| v.as_str())
    }

    pub fn param_as<T: FromStr>(&self, name: &str) -> Result<Option<T>>
    where
        T::Err: Display,
    {
        self.param(name)
            .map(|v| v.parse::<T>().map_err(|e| Error::Invalid(format!("--param {name}={v}: {e}"))))
            .transpose()
    }

    /// `128M`, `1G`, bytes.
    pub fn param_size(&self, name: &str) -> Result<Option<u64>> {
        self.param(name)
            .map(|v| crate::render::parse_size(v).map_err(|e| Error::Invalid(format!("--param {name}: {e}"))))
            .transpose()
    }

    /// `4K,1M`.
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

/// Every one of `ok` passes `check`, every one of `bad` is refused as
/// `Error::Invalid` (the error that names the option), not otherwise.
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

pub fn parse_set(s: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

pub fn apply_sets(t: Tunables, sets: &[(String, String)]) -> Result<Tunables> {
    t.with_sets(sets.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| Error::Invalid(e.to_string()))
}

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

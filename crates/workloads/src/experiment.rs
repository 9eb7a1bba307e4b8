//! What every seed experiment takes and shares: [`ExpOpts`] (the command
//! line's common options), tunables set by name (`--set NAME=VALUE`), and
//! the variants' tunables.

use std::path::PathBuf;

use pcache::Tunables;

use crate::variants::Preset;
use crate::{Error, Result};

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
    /// Resolve [`Common`] for `experiment`: `mem` and `runs` are its
    /// (quick, full) defaults, `max_mem` the largest cache it accepts.
    pub fn common(&self, experiment: &str, mem: (u64, u64), runs: (usize, usize), max_mem: u64) -> Result<Common> {
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
        let names = self.variants.clone().unwrap_or_else(|| crate::variants::defaults(experiment));
        let variants: Vec<String> = names.iter().map(|s| s.trim().to_string()).collect();
        crate::variants::resolve(experiment, &variants)?;
        Ok(Common { mem_bytes, runs, variants })
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
    let mut v = serde_json::to_value(t).map_err(|e| Error::Invalid(format!("tunables: {e}")))?;
    let obj = v.as_object_mut().ok_or_else(|| Error::Invalid("tunables are not an object".into()))?;
    for (k, val) in sets {
        let Some(slot) = obj.get_mut(k) else {
            let known: Vec<&String> = obj.keys().collect();
            return Err(Error::Invalid(format!("unknown tunable {k:?}; known: {known:?}")));
        };
        // Numbers and booleans as JSON, enum variants as strings.
        *slot = serde_json::from_str(val).unwrap_or_else(|_| serde_json::Value::String(val.clone()));
    }
    serde_json::from_value(v).map_err(|e| Error::Invalid(format!("bad tunable value: {e}")))
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
}

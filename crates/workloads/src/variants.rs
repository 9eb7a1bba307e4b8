//! Named variants: the kernels (or patch sets) the seeds compare, as
//! presets of [`Tunables`].
//!
//! Each [`Preset`] belongs to one experiment and has a short name (what
//! `--variants` takes and what report columns are called), a line saying
//! which kernel or patch it stands for, and a function producing its
//! tunables. To give another experiment its variants, add rows to
//! [`PRESETS`] with that experiment's name; [`resolve`] and [`defaults`]
//! then serve them.

use pcache::{ReclaimWriteback, Tunables};

use crate::{Error, Result};

/// One named variant of an experiment.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// The experiment it belongs to (`pcache bench NAME`).
    pub experiment: &'static str,
    /// Short name: the `--variants` value and the report column.
    pub name: &'static str,
    /// Which kernel or patch set it stands for.
    pub stands_for: &'static str,
    /// Whether the experiment runs it when no `--variants` are given.
    pub default: bool,
    /// Its tunables.
    pub tunables: fn() -> Tunables,
}

/// Seed 004 ran with dirty_ratio 40 (instead of 20) and the default
/// dirty_background_ratio of 10.
fn seed004(mode: ReclaimWriteback) -> Tunables {
    Tunables { reclaim_writeback: mode, dirty_ratio: 40, dirty_background_ratio: 10, ..Tunables::default() }
}

fn linux_3_1() -> Tunables {
    seed004(ReclaimWriteback::Writepage31)
}

fn linux_3_2() -> Tunables {
    seed004(ReclaimWriteback::Flusher32)
}

/// Every preset of every experiment.
pub const PRESETS: &[Preset] = &[
    Preset {
        experiment: "reclaim-writeback",
        name: "3.1",
        stands_for: "Linux 3.1: direct reclaim and kswapd call ->writepage on dirty file pages at the inactive \
                     tail (ReclaimWriteback::Writepage31), dirty_ratio 40, dirty_background_ratio 10",
        default: true,
        tunables: linux_3_1,
    },
    Preset {
        experiment: "reclaim-writeback",
        name: "3.2",
        stands_for: "Linux 3.2 with Mel Gorman's series (ee72886d8ed5 and followers): no file writeback from \
                     direct reclaim, kswapd only below DEF_PRIORITY-2, dirty pages tagged PG_reclaim for the \
                     flushers, throttling on congestion (ReclaimWriteback::Flusher32), dirty_ratio 40, \
                     dirty_background_ratio 10",
        default: true,
        tunables: linux_3_2,
    },
];

/// Every experiment's preset table.
static TABLES: &[&[Preset]] = &[
    PRESETS,
    crate::dd::PRESETS,
    crate::sparsetruncate::PRESETS,
    crate::lru_contention::PRESETS,
    crate::small_file_server::PRESETS,
];

/// The presets of `experiment`, in table order.
pub fn presets(experiment: &str) -> impl Iterator<Item = &'static Preset> + '_ {
    TABLES.iter().flat_map(|t| t.iter()).filter(move |p| p.experiment == experiment)
}

/// The preset `name` of `experiment`.
pub fn find(experiment: &str, name: &str) -> Option<&'static Preset> {
    presets(experiment).find(|p| p.name == name)
}

/// The default variant names of `experiment`, in table order.
pub fn defaults(experiment: &str) -> Vec<String> {
    presets(experiment).filter(|p| p.default).map(|p| p.name.to_string()).collect()
}

/// Look up every name, refusing unknown names, duplicates and an empty
/// list.
pub fn resolve(experiment: &str, names: &[String]) -> Result<Vec<&'static Preset>> {
    if names.is_empty() {
        return Err(Error::Invalid(format!("{experiment}: no variants given")));
    }
    let mut out: Vec<&'static Preset> = Vec::with_capacity(names.len());
    for n in names {
        let Some(p) = find(experiment, n.trim()) else {
            let known: Vec<&str> = presets(experiment).map(|p| p.name).collect();
            return Err(Error::Invalid(format!(
                "{experiment}: unknown variant {n:?}; known: {}",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
        };
        if out.iter().any(|q| q.name == p.name) {
            return Err(Error::Invalid(format!("{experiment}: variant {n:?} given twice")));
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed004_presets() {
        let v = resolve("reclaim-writeback", &defaults("reclaim-writeback")).unwrap();
        let names: Vec<&str> = v.iter().map(|p| p.name).collect();
        assert_eq!(names, ["3.1", "3.2"]);
        let t31 = (v[0].tunables)();
        let t32 = (v[1].tunables)();
        assert_eq!(t31.reclaim_writeback, ReclaimWriteback::Writepage31);
        assert_eq!(t32.reclaim_writeback, ReclaimWriteback::Flusher32);
        for t in [t31, t32] {
            assert_eq!((t.dirty_ratio, t.dirty_background_ratio), (40, 10));
        }
        assert!(resolve("reclaim-writeback", &["3.3".into()]).is_err());
        assert!(resolve("reclaim-writeback", &["3.1".into(), "3.1".into()]).is_err());
        assert!(resolve("reclaim-writeback", &[]).is_err());
        assert!(resolve("nosuch", &["3.1".into()]).is_err());
    }
}

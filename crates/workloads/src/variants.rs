//! Named variants: the kernels (or patch sets) the seeds compare, as
//! presets of [`Tunables`]. Each experiment keeps its own table;
//! [`resolve`] and [`defaults`] serve any, so this module names none.

use pcache::Tunables;

use crate::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub experiment: &'static str,
    /// The `--variants` value and the report column.
    pub name: &'static str,
    pub stands_for: &'static str,
    /// Run when no `--variants` are given.
    pub default: bool,
    pub tunables: fn() -> Tunables,
}

impl Preset {
    pub const fn new(
        experiment: &'static str,
        name: &'static str,
        stands_for: &'static str,
        tunables: fn() -> Tunables,
    ) -> Preset {
        Preset { experiment, name, stands_for, default: true, tunables }
    }

    /// The same, run only when `--variants` names it.
    pub const fn optional(self) -> Preset {
        Preset { default: false, ..self }
    }
}

/// The tunables a seed experiment's presets start from: the defaults, but
/// single pages (`folio_order_max` 0), as every seed's kernel cached them
/// (large page-cache folios came with 5.16 to 5.18), so that its variants
/// run as its kernels did. Replay and getscan start here too: a plug-in
/// holds single pages, and the kernel's lists compete with it on equal
/// terms (and replay stays page for page what it was).
pub fn seed_tunables() -> Tunables {
    Tunables { folio_order_max: 0, ..Tunables::default() }
}

/// The default variant names of a table, in table order.
pub fn defaults(table: &[Preset]) -> Vec<String> {
    table.iter().filter(|p| p.default).map(|p| p.name.to_string()).collect()
}

/// Look up every name in `table`, refusing unknown names, duplicates and
/// an empty list.
pub fn resolve(table: &'static [Preset], names: &[String]) -> Result<Vec<&'static Preset>> {
    let experiment = table.first().map(|p| p.experiment).unwrap_or("this experiment");
    if names.is_empty() {
        return Err(Error::Invalid(format!("{experiment}: no variants given")));
    }
    let mut out: Vec<&'static Preset> = Vec::with_capacity(names.len());
    for n in names {
        let Some(p) = table.iter().find(|p| p.name == n.trim()) else {
            let known: Vec<&str> = table.iter().map(|p| p.name).collect();
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

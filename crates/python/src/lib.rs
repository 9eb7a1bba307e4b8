//! `pcache` for Python (PyO3; built by maturin from pyproject.toml).
//!
//! The extension module `pcache._pcache` wraps three things of the
//! workspace and adds no logic of its own: the workloads crate's trace
//! replay (`replay`, `read_trace`, `presets`, the tables and plots), and the
//! engine embedded (`PageCache`, `File`). One adapter is its own: eviction
//! policies written in Python (policy.rs). The pure-Python part
//! (`python/pcache`) re-exports it and holds the sweep driver.
//!
//! Errors cross as Python exceptions (errors.rs); the GIL is released
//! around every replay and every call that can do I/O.

use pyo3::prelude::*;

mod cache;
mod errors;
mod policy;
mod replay;

#[pymodule]
fn _pcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PAGE_SIZE", pcache_workloads::replay::PAGE)?;
    m.add_class::<replay::PyTrace>()?;
    m.add_class::<replay::TraceIter>()?;
    m.add_class::<cache::PyPageCache>()?;
    m.add_class::<cache::PyFile>()?;
    m.add_class::<cache::Sysctl>()?;
    m.add_class::<policy::Folio>()?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add_function(wrap_pyfunction!(replay::read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(replay::parse_trace, m)?)?;
    m.add_function(wrap_pyfunction!(replay::presets, m)?)?;
    m.add_function(wrap_pyfunction!(replay::guess_format, m)?)?;
    m.add_function(wrap_pyfunction!(replay::default_variants, m)?)?;
    m.add_function(wrap_pyfunction!(replay::render, m)?)?;
    m.add_function(wrap_pyfunction!(replay::markdown_table, m)?)?;
    m.add_function(wrap_pyfunction!(replay::plot, m)?)?;
    let names = wrap_pyfunction!(cache::tunable_names_py, m)?;
    m.add("tunable_names", names)?;
    // Engine threads stop calling Python hooks before the interpreter
    // finalizes (they could not take the GIL then).
    let atexit = wrap_pyfunction!(policy::_policy_atexit, m)?;
    m.py().import("atexit")?.call_method1("register", (atexit,))?;
    Ok(())
}

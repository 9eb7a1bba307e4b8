//! The engine's typed errors as Python exceptions.
//!
//! Everything with an errno becomes `OSError(errno, message)`, which Python
//! turns into its subclass for that errno (ENOENT: `FileNotFoundError`,
//! EINTR: `InterruptedError`, ...), as `os.pread` would raise. Mistakes in
//! arguments that are Python's own business are `ValueError`, and a name
//! that is not a tunable is `KeyError`, as a missing dict key.

use pyo3::exceptions::{PyKeyError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// An `OSError` with `errno` (Python picks the subclass).
pub fn os_error(errno: i32, msg: impl Into<String>) -> PyErr {
    PyOSError::new_err((errno, msg.into()))
}

/// The engine's error as the exception a Python user expects.
pub fn engine(e: pcache::Error) -> PyErr {
    use pcache::Error as E;
    match &e {
        E::InvalidConfig(_) => PyValueError::new_err(e.to_string()),
        E::UnknownSysctl { name } => PyKeyError::new_err(name.clone()),
        E::InvalidSysctl { .. } => PyValueError::new_err(e.to_string()),
        _ => os_error(e.errno(), e.to_string()),
    }
}

/// The workloads crate's error (replay, trace reading).
pub fn workloads(e: pcache_workloads::Error) -> PyErr {
    use pcache_workloads::Error as W;
    match e {
        W::Pcache(e) => engine(e),
        W::Io { context, source } => {
            os_error(source.raw_os_error().unwrap_or(libc::EIO), format!("{context}: {source}"))
        }
        W::Invalid(m) => PyValueError::new_err(m),
        W::Check(m) => PyRuntimeError::new_err(m),
    }
}

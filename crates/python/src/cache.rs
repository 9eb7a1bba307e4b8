//! `pcache.PageCache` and `pcache.File`: the engine embedded in Python.
//!
//! Every call that can do I/O or wait (open, read, write, fsync, fadvise,
//! truncate, close, reclaim, shutdown) releases the GIL, so Python threads
//! use the cache in parallel as threads of a Rust program do, and a Python
//! eviction policy's hooks (policy.rs) can take it from any engine thread.
//! For the same reason the engine's handles are dropped with the GIL
//! released: the last one shuts the cache down, which waits for threads
//! that may be running a hook.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pcache::{Advice, Config, OpenOptions, PageCache, Tunables};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::errors::{self, engine, os_error};
use crate::policy::{in_hook, not_in_hook, PyPolicy, Shared};
use crate::replay::json_to_py;

/// An engine handle that is dropped with the GIL released (see the
/// module's doc). Only its `Drop` takes the value out.
pub(crate) struct NoGil<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> NoGil<T> {
    fn new(t: T) -> NoGil<T> {
        NoGil(Some(t))
    }
}

impl<T: Send + 'static> Deref for NoGil<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("taken only by drop")
    }
}

impl<T: Send + 'static> Drop for NoGil<T> {
    fn drop(&mut self) {
        let Some(t) = self.0.take() else { return };
        if in_hook() {
            // The garbage collector ran inside a hook: the engine's locks
            // are held by this thread, so the handle goes later.
            defer_drop(Box::new(t));
            return;
        }
        Python::with_gil(|py| {
            py.allow_threads(move || {
                drop(t);
                drop_deferred();
            })
        });
    }
}

/// Engine handles whose drop came inside a hook (see `NoGil`).
static DEFERRED: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

fn defer_drop(t: Box<dyn Send>) {
    DEFERRED.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    ANY_DEFERRED.store(true, Ordering::Release);
}

/// Drop the deferred handles; called outside hooks, without the GIL.
fn drop_deferred() {
    if ANY_DEFERRED.swap(false, Ordering::AcqRel) {
        let v = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|e| e.into_inner()));
        drop(v);
    }
}

/// Run `f` (the engine) with the GIL released, refused inside a policy
/// hook; then raise what a Python policy's hook raised meanwhile, if any
/// (before `f`'s own error: a failing policy is the likelier cause).
fn run<T: Send>(py: Python<'_>, policy: &Option<Arc<Shared>>, f: impl Send + FnOnce() -> T) -> PyResult<T> {
    not_in_hook()?;
    let r = py.allow_threads(|| {
        drop_deferred();
        f()
    });
    if let Some(p) = policy {
        p.take_error()?;
    }
    Ok(r)
}

/// An offset or length from Python: negative is EINVAL, as pread(2) says.
fn nonneg(what: &str, x: i64) -> PyResult<u64> {
    u64::try_from(x).map_err(|_| os_error(libc::EINVAL, format!("negative {what}: {x}")))
}

/// A tunable's value as the text `Tunables::with_sets` parses (JSON for
/// numbers and booleans, enum variants by name).
fn tunable_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.to_string());
    }
    if let Ok(i) = v.extract::<i128>() {
        return Ok(i.to_string());
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(s);
    }
    Err(PyTypeError::new_err(format!("a tunable's value is an int, a bool or a str, not {}", v.get_type())))
}

fn tunable_names() -> Vec<String> {
    match serde_json::to_value(Tunables::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// An embedded page cache: an arena of page frames with the kernel's LRU,
/// reclaim, readahead and writeback.
///
/// `PageCache(config=None, **kwargs)`: `config` (a dict) and the keyword
/// arguments name `memory_bytes` (or `memory`, e.g. `"64M"`), `page_size`,
/// `nr_cpus`, and any of the tunables (`pcache.tunable_names()`), e.g.
/// `PageCache(memory="16M", workingset=False, ra_pages=0)`. An unknown name
/// raises KeyError, a bad value ValueError. `policy` is a built-in
/// plug-in's name (`"fifo"`, ...) or a Python policy object (policy.rs),
/// whose hooks' errors are raised by the calls during which they happen.
#[pyclass(frozen, name = "PageCache", module = "pcache")]
pub struct PyPageCache {
    cache: NoGil<PageCache>,
    policy: Option<Arc<Shared>>,
}

#[pymethods]
impl PyPageCache {
    #[new]
    #[pyo3(signature = (config = None, **kwargs))]
    fn new(py: Python<'_>, config: Option<&Bound<'_, PyDict>>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut cfg = Config::default();
        let mut sets: Vec<(String, String)> = Vec::new();
        let known = tunable_names();
        let mut py_policy = None;
        for d in [config, kwargs].into_iter().flatten() {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                match k.as_str() {
                    "policy" if !v.is_instance_of::<PyString>() => py_policy = Some(v),
                    "memory_bytes" | "memory" => {
                        cfg.memory_bytes = match v.extract::<u64>() {
                            Ok(n) => n,
                            Err(_) => {
                                let s: String = v.extract().map_err(|_| {
                                    PyValueError::new_err(format!("{k}: bytes as an int or a size such as \"64M\""))
                                })?;
                                pcache_workloads::render::parse_size(&s)
                                    .map_err(|e| PyValueError::new_err(format!("{k}={s:?}: {e}")))?
                            }
                        }
                    }
                    "page_size" => cfg.page_size = v.extract()?,
                    "nr_cpus" => cfg.nr_cpus = v.extract()?,
                    _ if known.contains(&k) => sets.push((k, tunable_text(&v)?)),
                    _ => {
                        return Err(PyKeyError::new_err(format!(
                            "{k:?} is not memory_bytes, page_size, nr_cpus or a tunable ({})",
                            known.join(", ")
                        )))
                    }
                }
            }
        }
        cfg.tunables =
            cfg.tunables.with_sets(sets.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(errors::engine)?;
        not_in_hook()?;
        let (cache, policy) = match py_policy {
            Some(obj) => {
                let adapter = PyPolicy::new(&obj, cfg.nr_pages())?;
                let shared = adapter.shared();
                (py.allow_threads(|| PageCache::with_policy(cfg, Box::new(adapter))), Some(shared))
            }
            None => (py.allow_threads(|| PageCache::new(cfg)), None),
        };
        Ok(PyPageCache { cache: NoGil::new(cache.map_err(engine)?), policy })
    }

    /// open(path, create=True, truncate=False, direct=True) -> File
    ///
    /// Open a host file through the cache.
    #[pyo3(signature = (path, create = true, truncate = false, direct = true))]
    fn open(&self, py: Python<'_>, path: PathBuf, create: bool, truncate: bool, direct: bool) -> PyResult<PyFile> {
        let opts = OpenOptions { create, truncate, direct };
        let c = &*self.cache;
        let f = run(py, &self.policy, || c.open(&path, opts))?.map_err(engine)?;
        Ok(PyFile { f: NoGil::new(f), policy: self.policy.clone() })
    }

    /// open_memory(name) -> File
    ///
    /// Open (creating) a memory-backed file (tmpfs's case).
    fn open_memory(&self, py: Python<'_>, name: &str) -> PyResult<PyFile> {
        let c = &*self.cache;
        let f = run(py, &self.policy, || c.open_memory(name))?.map_err(engine)?;
        Ok(PyFile { f: NoGil::new(f), policy: self.policy.clone() })
    }

    /// Every counter, by its /proc/vmstat name.
    fn vmstat<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.cache.vmstat().iter() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The arena's watermarks in pages: `{"min", "low", "high"}`.
    fn watermarks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let w = self.cache.watermarks();
        let d = PyDict::new(py);
        d.set_item("min", w.min)?;
        d.set_item("low", w.low)?;
        d.set_item("high", w.high)?;
        Ok(d)
    }

    /// Free page frames now.
    fn nr_free_pages(&self) -> u64 {
        self.cache.nr_free_pages()
    }

    /// The configuration it was built with: memory_bytes, page_size,
    /// nr_cpus and the tunables (start values).
    #[getter]
    fn config(&self, py: Python<'_>) -> PyResult<PyObject> {
        let c = self.cache.config();
        let v = serde_json::json!({
            "memory_bytes": c.memory_bytes,
            "page_size": c.page_size,
            "nr_cpus": c.nr_cpus,
            "tunables": c.tunables,
        });
        json_to_py(py, &v)
    }

    /// The run-time tunables (/proc/sys/vm): a mapping from name to its text
    /// value; assign to change one (KeyError: no such tunable; ValueError:
    /// a bad value, which changes nothing).
    #[getter]
    fn sysctl(&self) -> Sysctl {
        Sysctl { cache: NoGil::new((*self.cache).clone()) }
    }

    /// reclaim(nr) -> int: reclaim up to `nr` pages now; returns those freed.
    fn reclaim(&self, py: Python<'_>, nr: u64) -> PyResult<u64> {
        let c = &*self.cache;
        run(py, &self.policy, || c.reclaim(nr))
    }

    /// Write back every dirty page and wait.
    fn sync_all(&self, py: Python<'_>) -> PyResult<()> {
        let c = &*self.cache;
        run(py, &self.policy, || c.sync_all())?.map_err(engine)
    }

    /// Drop clean, unmapped pages (echo 1 > drop_caches).
    fn drop_caches(&self, py: Python<'_>) -> PyResult<()> {
        let c = &*self.cache;
        run(py, &self.policy, || c.drop_caches())
    }

    /// Write back and stop the background threads; later writes fail
    /// (ESHUTDOWN). Raises if dirty data could not be written.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let c = &*self.cache;
        run(py, &self.policy, || c.shutdown())?.map_err(engine)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let c = self.cache.config();
        format!("PageCache(memory_bytes={}, page_size={})", c.memory_bytes, c.page_size)
    }
}

/// The run-time tunables of one cache, as a mapping (see PageCache.sysctl).
#[pyclass(frozen, module = "pcache")]
pub struct Sysctl {
    cache: NoGil<PageCache>,
}

#[pymethods]
impl Sysctl {
    fn __getitem__(&self, name: &str) -> PyResult<String> {
        self.cache.sysctl_read(name).ok_or_else(|| PyKeyError::new_err(name.to_string()))
    }

    fn __setitem__(&self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.cache.sysctl_write(name, &tunable_text(value)?).map_err(engine)
    }

    fn __contains__(&self, name: &str) -> bool {
        self.cache.sysctl_read(name).is_some()
    }

    fn __len__(&self) -> usize {
        self.cache.sysctl_names().len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyList::new(py, self.cache.sysctl_names())?.try_iter()?.into_any())
    }

    /// The names.
    fn keys(&self) -> Vec<&'static str> {
        self.cache.sysctl_names().to_vec()
    }

    /// (name, value) pairs.
    fn items(&self) -> Vec<(&'static str, String)> {
        self.cache.sysctl_names().iter().map(|n| (*n, self.cache.sysctl_read(n).unwrap_or_default())).collect()
    }

    fn __repr__(&self) -> String {
        format!("Sysctl({:?})", self.items())
    }
}

fn parse_advice(a: &Bound<'_, PyAny>) -> PyResult<Advice> {
    if let Ok(n) = a.extract::<i64>() {
        // Linux's POSIX_FADV_* numbers (os.POSIX_FADV_*).
        return match n {
            0 => Ok(Advice::Normal),
            1 => Ok(Advice::Random),
            2 => Ok(Advice::Sequential),
            3 => Ok(Advice::WillNeed),
            4 => Ok(Advice::DontNeed),
            5 => Ok(Advice::NoReuse),
            _ => Err(os_error(libc::EINVAL, format!("unknown fadvise advice {n}"))),
        };
    }
    let s: String = a.extract().map_err(|_| PyTypeError::new_err("advice is an os.POSIX_FADV_* int or a name"))?;
    match s.to_ascii_lowercase().trim_start_matches("posix_fadv_") {
        "normal" => Ok(Advice::Normal),
        "random" => Ok(Advice::Random),
        "sequential" => Ok(Advice::Sequential),
        "willneed" => Ok(Advice::WillNeed),
        "dontneed" => Ok(Advice::DontNeed),
        "noreuse" => Ok(Advice::NoReuse),
        _ => Err(os_error(libc::EINVAL, format!("unknown fadvise advice {s:?}"))),
    }
}

/// A file open through a PageCache: its own readahead state and writeback
/// error cursor, as a file descriptor has. After close() every call raises
/// OSError(EBADF).
#[pyclass(frozen, name = "File", module = "pcache")]
pub struct PyFile {
    f: NoGil<pcache::File>,
    policy: Option<Arc<Shared>>,
}

#[pymethods]
impl PyFile {
    /// read(size, offset) -> bytes
    ///
    /// Up to `size` bytes at `offset` (fewer at end of file), through the
    /// cache.
    fn read<'py>(&self, py: Python<'py>, size: i64, offset: i64) -> PyResult<Bound<'py, PyBytes>> {
        let (size, offset) = (nonneg("size", size)?, nonneg("offset", offset)?);
        let f = &*self.f;
        // Never a buffer larger than what is there to read.
        let len = f.len().map_err(engine)?;
        let n = size.min(len.saturating_sub(offset)) as usize;
        let mut out: Result<usize, pcache::Error> = Ok(0);
        let bytes = PyBytes::new_with(py, n, |buf| {
            out = run(py, &self.policy, || f.read_at(buf, offset))?;
            Ok(())
        })?;
        let got = out.map_err(engine)?;
        if got < n {
            // The file shrank between the size check and the read.
            return Ok(PyBytes::new(py, &bytes.as_bytes()[..got]));
        }
        Ok(bytes)
    }

    /// write(data, offset) -> int
    ///
    /// Write `data` (bytes-like) at `offset`, extending the file; returns
    /// the bytes written.
    fn write(&self, py: Python<'_>, data: PyBackedBytes, offset: i64) -> PyResult<usize> {
        let offset = nonneg("offset", offset)?;
        let f = &*self.f;
        run(py, &self.policy, || f.write_at(&data, offset))?.map_err(engine)
    }

    /// Write back the file's dirty pages, wait, flush the device; raises
    /// a writeback error not yet reported to this handle.
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        let f = &*self.f;
        run(py, &self.policy, || f.fsync())?.map_err(engine)
    }

    /// As fsync, flushing only data.
    fn fdatasync(&self, py: Python<'_>) -> PyResult<()> {
        let f = &*self.f;
        run(py, &self.policy, || f.fdatasync())?.map_err(engine)
    }

    /// fadvise(offset, length, advice): posix_fadvise(2); `advice` is an
    /// os.POSIX_FADV_* number or a name ("dontneed", "willneed", ...);
    /// `length` 0 means to the end of the file.
    fn fadvise(&self, py: Python<'_>, offset: i64, length: i64, advice: &Bound<'_, PyAny>) -> PyResult<()> {
        let (offset, length) = (nonneg("offset", offset)?, nonneg("length", length)?);
        let advice = parse_advice(advice)?;
        let f = &*self.f;
        run(py, &self.policy, || f.fadvise(offset, length, advice))?.map_err(engine)
    }

    /// The file's size in bytes.
    fn size(&self) -> PyResult<u64> {
        self.f.len().map_err(engine)
    }

    /// Truncate or extend to `length` bytes.
    fn truncate(&self, py: Python<'_>, length: i64) -> PyResult<()> {
        let length = nonneg("length", length)?;
        let f = &*self.f;
        run(py, &self.policy, || f.set_len(length))?.map_err(engine)
    }

    /// Deallocate `[offset, offset + length)`: it reads back as zeroes.
    fn punch_hole(&self, py: Python<'_>, offset: i64, length: i64) -> PyResult<()> {
        let (offset, length) = (nonneg("offset", offset)?, nonneg("length", length)?);
        let f = &*self.f;
        run(py, &self.policy, || f.punch_hole(offset, length))?.map_err(engine)
    }

    /// _time_read_at(offset, iterations) -> float
    ///
    /// Benchmark helper: the mean nanoseconds of one Rust `read_at` of a
    /// page at `offset`, looped `iterations` times in Rust (the GIL
    /// released), to compare with `read` called from Python.
    fn _time_read_at(&self, py: Python<'_>, offset: i64, iterations: u64) -> PyResult<f64> {
        let offset = nonneg("offset", offset)?;
        let f = &self.f;
        py.allow_threads(|| {
            let mut buf = vec![0u8; pcache_workloads::replay::PAGE as usize];
            let t = std::time::Instant::now();
            for _ in 0..iterations {
                f.read_at(std::hint::black_box(&mut buf), offset)?;
            }
            Ok(t.elapsed().as_nanos() as f64 / iterations.max(1) as f64)
        })
        .map_err(engine)
    }

    /// Pages of the file in the cache now.
    fn cached_pages(&self) -> u64 {
        self.f.cached_pages()
    }

    /// The file's name (its path, or `memory:NAME`).
    #[getter]
    fn name(&self) -> &str {
        self.f.name()
    }

    /// Close the handle; later calls raise OSError(EBADF). Closing twice
    /// is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let f = &*self.f;
        match run(py, &self.policy, || f.close())? {
            Ok(()) | Err(pcache::Error::Closed) => Ok(()),
            Err(e) => Err(engine(e)),
        }
    }

    /// Whether close() was called.
    #[getter]
    fn closed(&self) -> bool {
        matches!(self.f.len(), Err(pcache::Error::Closed))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("File({:?})", self.f.name())
    }
}

/// The names PageCache(...) takes as tunables (the start values; see
/// PageCache.sysctl for the run-time ones).
#[pyfunction]
pub fn tunable_names_py() -> Vec<String> {
    tunable_names()
}

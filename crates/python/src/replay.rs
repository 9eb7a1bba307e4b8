//! `pcache.replay` and the trace readers: thin wrappers over the workloads
//! crate's replay (crates/workloads/src/replay.rs), which does all the work;
//! records come back as the same JSON `pcache replay --json` writes.

use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pcache::policy::EvictionPolicy;
use pcache_workloads::replay::{self as rp, BaselineRun, Format, ReplayOpts, ReplayResult, RunResult, Sizes};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyType};

use crate::errors;
use crate::policy::{PyPolicy, Shared};

/// Page indices a trace built in Python may use: far beyond any real trace,
/// and small enough that the replay's file size cannot overflow.
const MAX_PAGE_INDEX: u64 = (1 << 40) - 1;

fn parse_format(fmt: Option<&str>) -> PyResult<Option<Format>> {
    fmt.map(|s| s.parse::<Format>().map_err(PyValueError::new_err)).transpose()
}

/// A trace as the page accesses replay makes of it.
///
/// Iterating yields page indices (ints) in order; `pages()` returns them as
/// a list. Build one from any iterable of page indices to replay a filtered
/// or sampled trace.
#[pyclass(frozen, name = "Trace", module = "pcache")]
pub struct PyTrace {
    pub(crate) inner: Arc<rp::Trace>,
    pub(crate) format: Format,
}

#[pymethods]
impl PyTrace {
    #[new]
    #[pyo3(signature = (pages, name = "trace"))]
    fn new(pages: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        let pages = collect_pages(pages)?;
        Ok(PyTrace { inner: Arc::new(rp::Trace::from_pages(name, pages)), format: Format::Lirs })
    }

    /// The trace's name (its file name without `.gz` and `.trace`).
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The format it was read in (`lirs`, `csv`, `oracleGeneral`).
    #[getter]
    fn format(&self) -> &'static str {
        self.format.name()
    }

    /// Records read from the file (a csv or oracleGeneral record of more
    /// than one page is several accesses).
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }

    /// Whether sparse ids were renumbered densely in order of first touch.
    #[getter]
    fn renumbered(&self) -> bool {
        self.inner.renumbered
    }

    /// Distinct pages touched.
    fn distinct_pages(&self, py: Python<'_>) -> u64 {
        let t = &self.inner;
        py.allow_threads(|| t.distinct_pages())
    }

    /// Every access's page index, as a list.
    fn pages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.inner.accesses)
    }

    fn __len__(&self) -> usize {
        self.inner.accesses.len()
    }

    fn __iter__(&self) -> TraceIter {
        TraceIter { trace: self.inner.clone(), pos: 0 }
    }

    fn __repr__(&self) -> String {
        format!(
            "Trace(name={:?}, format={:?}, accesses={}, records={})",
            self.inner.name,
            self.format.name(),
            self.inner.accesses.len(),
            self.inner.records
        )
    }
}

/// Iterator over a trace's page accesses.
#[pyclass(module = "pcache")]
pub struct TraceIter {
    trace: Arc<rp::Trace>,
    pos: usize,
}

#[pymethods]
impl TraceIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> Option<u64> {
        let p = self.trace.accesses.get(self.pos).copied()?;
        self.pos += 1;
        Some(p)
    }

    fn __length_hint__(&self) -> usize {
        self.trace.accesses.len() - self.pos
    }
}

fn collect_pages(pages: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Ok(t) = pages.downcast::<PyTrace>() {
        return Ok(t.get().inner.accesses.clone());
    }
    let mut v = Vec::with_capacity(pages.len().unwrap_or(0));
    for p in pages.try_iter()? {
        let p = p?;
        let x: i128 = p.extract().map_err(|_| PyTypeError::new_err("a page index must be an int"))?;
        if !(0..=MAX_PAGE_INDEX as i128).contains(&x) {
            return Err(PyValueError::new_err(format!(
                "page index {x} out of range (0 to 2^40 - 1; renumber sparse ids densely)"
            )));
        }
        v.push(x as u64);
    }
    Ok(v)
}

/// read_trace(path, fmt=None) -> Trace
///
/// Read a trace file in one of the formats replay knows (`lirs`, `csv`,
/// `oracleGeneral`; gzip is detected; `fmt` guessed from the name when
/// None), as the page accesses replay makes of it. The GIL is released
/// while it reads.
#[pyfunction]
#[pyo3(signature = (path, fmt = None))]
pub fn read_trace(py: Python<'_>, path: PathBuf, fmt: Option<&str>) -> PyResult<PyTrace> {
    let fmt = parse_format(fmt)?.unwrap_or_else(|| Format::guess(&path));
    let t = py.allow_threads(|| rp::read_trace(&path, Some(fmt))).map_err(errors::workloads)?;
    Ok(PyTrace { inner: Arc::new(t), format: fmt })
}

/// parse_trace(data, fmt, name) -> Trace
///
/// Parse a trace from bytes (as shipped through Ray's object store; gzip is
/// detected by its magic). `name` names the trace in the records.
#[pyfunction]
#[pyo3(signature = (data, fmt, name))]
pub fn parse_trace(py: Python<'_>, data: pyo3::pybacked::PyBackedBytes, fmt: &str, name: &str) -> PyResult<PyTrace> {
    let fmt = parse_format(Some(fmt))?.unwrap_or(Format::Lirs);
    let t = py
        .allow_threads(|| {
            let bytes: &[u8] = &data;
            let r: Box<dyn Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
                Box::new(flate2::read::MultiGzDecoder::new(bytes))
            } else {
                Box::new(bytes)
            };
            rp::parse(r, fmt, name)
        })
        .map_err(errors::workloads)?;
    Ok(PyTrace { inner: Arc::new(t), format: fmt })
}

/// guess_format(path) -> str
///
/// The format replay assumes for a file name: `.csv` is csv, a name
/// containing oracleGeneral is oracleGeneral, anything else lirs.
#[pyfunction]
pub fn guess_format(path: PathBuf) -> &'static str {
    Format::guess(&path).name()
}

/// The variants (presets) replay compares.
#[pyfunction]
pub fn presets<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for p in rp::PRESETS {
        let d = PyDict::new(py);
        d.set_item("name", p.name)?;
        d.set_item("stands_for", p.stands_for)?;
        d.set_item("default", p.default)?;
        out.append(d)?;
    }
    Ok(out)
}

/// The names of the variants replayed when none are given.
#[pyfunction]
pub fn default_variants() -> Vec<String> {
    rp::default_variants()
}

pub(crate) fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<PyObject> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

fn py_to_json(obj: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = obj.py().import("json")?.call_method1("dumps", (obj,))?.extract()?;
    serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// What a Python caller passed as the trace to replay.
enum Source {
    Path(PathBuf),
    Trace(Arc<rp::Trace>, Format),
}

fn source(trace: &Bound<'_, PyAny>, name: Option<&str>) -> PyResult<Source> {
    if let Ok(t) = trace.downcast::<PyTrace>() {
        let t = t.get();
        return Ok(Source::Trace(t.inner.clone(), t.format));
    }
    if trace.is_instance_of::<PyString>() || trace.hasattr("__fspath__")? {
        return Ok(Source::Path(trace.extract()?));
    }
    let pages = collect_pages(trace)?;
    Ok(Source::Trace(Arc::new(rp::Trace::from_pages(name.unwrap_or("trace"), pages)), Format::Lirs))
}

/// The factory `replay(policy=...)` takes: a class or a zero-argument
/// callable, not an instance, since each cache size starts from a fresh
/// policy (as the built-in plug-ins do) and an instance's state cannot be
/// reset from here. One instance is built at once, to check its hooks and
/// take its name.
fn policy_factory(f: &Bound<'_, PyAny>) -> PyResult<String> {
    if !f.is_callable() || (!f.is_instance_of::<PyType>() && f.hasattr("evict_candidates")?) {
        return Err(PyTypeError::new_err(
            "replay(policy=...) takes the policy's class (or a zero-argument factory), not an instance: \
             each cache size needs a fresh policy",
        ));
    }
    let probe = f.call0()?;
    crate::policy::PyPolicy::new(&probe, 1)?;
    crate::policy::policy_name(&probe)
}

/// replay(trace, sizes=None, variants=None, fmt=None, pages=None, threads=1,
///        usable_equals_nominal=False, name=None, policy=None) -> dict
///
/// Replay a trace through pcache at each cache size for each variant and
/// return the record `pcache replay --json` writes for it. `trace` is a
/// path, a `Trace`, or an iterable of page indices (named `name`). `sizes`
/// are percentages of the distinct pages (default 10, 20, 40, 80), `pages`
/// exact cache sizes in pages instead. `policy`, a Python eviction policy's
/// class (policy.rs), adds a column named by its `name` attribute (else the
/// class's name), run as the plug-in variants are; with it, `variants`
/// defaults to none. The GIL is released during the replay (a Python
/// policy's hooks take it); an exception in a hook is raised at the end.
#[pyfunction]
#[pyo3(signature = (trace, sizes = None, variants = None, fmt = None, pages = None, threads = 1,
                    usable_equals_nominal = false, name = None, policy = None))]
#[allow(clippy::too_many_arguments)]
pub fn replay(
    py: Python<'_>,
    trace: &Bound<'_, PyAny>,
    sizes: Option<Vec<f64>>,
    variants: Option<Vec<String>>,
    fmt: Option<&str>,
    pages: Option<Vec<u64>>,
    threads: usize,
    usable_equals_nominal: bool,
    name: Option<&str>,
    policy: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyObject> {
    crate::policy::not_in_hook()?;
    let sizes = match (sizes, pages) {
        (Some(_), Some(_)) => return Err(PyValueError::new_err("give sizes (percent) or pages, not both")),
        (None, Some(p)) => Sizes::Pages(p),
        (Some(s), None) => {
            if s.iter().any(|p| !(p.is_finite() && *p > 0.0)) {
                return Err(PyValueError::new_err(format!("sizes {s:?}: percentages must be above 0")));
            }
            Sizes::Percent(s)
        }
        (None, None) => Sizes::default(),
    };
    if threads == 0 || threads > 1024 {
        return Err(PyValueError::new_err(format!("threads={threads}: 1 to 1024")));
    }
    let opts = ReplayOpts {
        sizes,
        variants: variants.unwrap_or_else(|| if policy.is_some() { Vec::new() } else { rp::default_variants() }),
        threads,
        usable_equals_nominal,
        ..ReplayOpts::default()
    };
    if !(opts.variants.is_empty() && policy.is_some()) {
        rp::resolve(&opts.variants).map_err(errors::workloads)?;
    }
    let fmt = parse_format(fmt)?;
    let src = source(trace, name)?;
    let factory = policy.map(|f| Ok::<_, PyErr>((policy_factory(f)?, f.clone().unbind()))).transpose()?;
    // Each cell's adapter state, and an error building one, to raise after.
    let built: Mutex<(Vec<Arc<Shared>>, Option<PyErr>)> = Mutex::new((Vec::new(), None));
    let build = |frames: u64| -> pcache_workloads::Result<Box<dyn EvictionPolicy>> {
        let hook_failed = || pcache_workloads::Error::Check("a Python policy hook raised".into());
        let mut b = built.lock().unwrap_or_else(|e| e.into_inner());
        if b.0.iter().any(|s| s.failed()) {
            // No more cells: the error is raised now.
            return Err(hook_failed());
        }
        let Some((_, f)) = &factory else { return Err(hook_failed()) };
        match Python::with_gil(|py| PyPolicy::new(&f.bind(py).call0()?, frames)) {
            Ok(p) => {
                b.0.push(p.shared());
                Ok(Box::new(p))
            }
            Err(e) => {
                b.1 = Some(e);
                Err(pcache_workloads::Error::Check("building the Python policy failed".into()))
            }
        }
    };
    let custom = factory.as_ref().map(|(name, _)| rp::CustomPolicy { name: name.clone(), build: &build });
    let res = py.allow_threads(|| {
        let custom = custom.as_ref();
        match &src {
            Source::Path(p) => rp::read_trace(p, fmt)
                .and_then(|t| rp::run_with_policy(&t, fmt.unwrap_or_else(|| Format::guess(p)), &opts, custom))
                .map_err(|e| (Some(p.display().to_string()), e)),
            Source::Trace(t, f) => rp::run_with_policy(t, fmt.unwrap_or(*f), &opts, custom).map_err(|e| (None, e)),
        }
    });
    let (shareds, build_err) = built.into_inner().unwrap_or_else(|e| e.into_inner());
    for s in &shareds {
        s.take_error()?;
    }
    if let Some(e) = build_err {
        return Err(e);
    }
    let res = res.map_err(|(path, e)| match (path, e) {
        // As the CLI says it: the path first.
        (Some(p), pcache_workloads::Error::Invalid(m)) => PyValueError::new_err(format!("{p}: {m}")),
        (_, e) => errors::workloads(e),
    })?;
    json_to_py(py, &res.to_json())
}

fn field<'a>(v: &'a serde_json::Value, k: &str) -> PyResult<&'a serde_json::Value> {
    v.get(k).ok_or_else(|| PyValueError::new_err(format!("replay record without {k:?}")))
}

fn u(v: &serde_json::Value, k: &str) -> PyResult<u64> {
    field(v, k)?.as_u64().ok_or_else(|| PyValueError::new_err(format!("{k:?} is not a count")))
}

fn f(v: &serde_json::Value, k: &str) -> PyResult<f64> {
    field(v, k)?.as_f64().ok_or_else(|| PyValueError::new_err(format!("{k:?} is not a number")))
}

fn s(v: &serde_json::Value, k: &str) -> PyResult<String> {
    field(v, k)?.as_str().map(str::to_string).ok_or_else(|| PyValueError::new_err(format!("{k:?} is not a string")))
}

/// A replay record (the JSON `pcache replay --json` writes, possibly merged
/// by a sweep) back as the workloads crate's result, to render and plot it
/// with the same code as the CLI. The kernel column's details are not
/// kept (its runs stay in `results`).
fn result_from_json(v: &serde_json::Value) -> PyResult<ReplayResult> {
    let runs = field(v, "results")?
        .as_array()
        .ok_or_else(|| PyValueError::new_err("\"results\" is not a list"))?
        .iter()
        .map(|r| {
            Ok(RunResult {
                variant: s(r, "variant")?,
                cache_pages: u(r, "cache_pages")?,
                frames: u(r, "frames")?,
                usable_pages: u(r, "usable_pages")?,
                watermark_min: u(r, "watermark_min")?,
                watermark_low: u(r, "watermark_low")?,
                watermark_high: u(r, "watermark_high")?,
                requests: u(r, "requests")?,
                misses: u(r, "misses")?,
                hits: u(r, "hits")?,
                miss_ratio: f(r, "miss_ratio")?,
                compulsory_misses: u(r, "compulsory_misses")?,
                compulsory_miss_ratio: f(r, "compulsory_miss_ratio")?,
                workingset_refault: u(r, "workingset_refault")?,
                workingset_activate: u(r, "workingset_activate")?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let strings = |k: &str| -> PyResult<Vec<String>> {
        serde_json::from_value(field(v, k)?.clone()).map_err(|e| PyValueError::new_err(format!("{k:?}: {e}")))
    };
    let baselines: Vec<BaselineRun> = match v.get("baselines") {
        Some(b) if !b.is_null() => {
            serde_json::from_value(b.clone()).map_err(|e| PyValueError::new_err(format!("\"baselines\": {e}")))?
        }
        _ => Vec::new(),
    };
    Ok(ReplayResult {
        trace: s(v, "trace")?,
        format: s(v, "format")?.parse().map_err(PyValueError::new_err)?,
        records: u(v, "records")?,
        requests: u(v, "requests")?,
        pages: u(v, "pages")?,
        renumbered: field(v, "renumbered")?.as_bool().unwrap_or(false),
        compulsory_misses: u(v, "compulsory_misses")?,
        compulsory_miss_ratio: f(v, "compulsory_miss_ratio")?,
        variants: strings("variants")?,
        sizes: serde_json::from_value(field(v, "sizes")?.clone())
            .map_err(|e| PyValueError::new_err(format!("\"sizes\": {e}")))?,
        results: runs,
        threads: v.get("threads").and_then(|t| t.as_u64()).unwrap_or(1) as usize,
        kernel: None,
        kernel_skipped: v.get("kernel_skipped").and_then(|k| k.as_str()).map(str::to_string),
        baselines,
    })
}

/// render(record) -> str
///
/// The table `pcache replay` prints for a replay record.
#[pyfunction]
pub fn render(record: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(result_from_json(&py_to_json(record)?)?.render())
}

/// markdown_table(records) -> str
///
/// One Markdown table of every trace, size and column (as
/// `pcache replay --markdown` writes).
#[pyfunction]
pub fn markdown_table(records: &Bound<'_, PyAny>) -> PyResult<String> {
    let v = py_to_json(records)?;
    let all = match &v {
        serde_json::Value::Array(a) => a.iter().map(result_from_json).collect::<PyResult<Vec<_>>>()?,
        one => vec![result_from_json(one)?],
    };
    Ok(rp::markdown_table(&all))
}

/// plot(record, dir) -> str
///
/// Draw the record's miss-ratio curve as `DIR/replay-TRACE.svg` (as
/// `pcache replay --plot DIR`); returns the file's path.
#[pyfunction]
pub fn plot(py: Python<'_>, record: &Bound<'_, PyAny>, dir: PathBuf) -> PyResult<String> {
    let res = result_from_json(&py_to_json(record)?)?;
    let path = py.allow_threads(|| rp::plot_result(&res, &dir)).map_err(errors::workloads)?;
    Ok(path.display().to_string())
}

//! Eviction policies written in Python: [`PyPolicy`] implements the
//! engine's `EvictionPolicy` (crates/engine/src/policy.rs) by calling a
//! Python object's methods, for `pcache.replay(trace, policy=Class)` and
//! `pcache.PageCache(..., policy=obj)`.
//!
//! The hooks, looked up once when the adapter is built (a missing optional
//! one is skipped, never looked up again):
//! `folio_added(folio)`, `folio_accessed(folio)`, `folio_removed(folio,
//! why)` (`"evicted"`, `"truncated"`, `"invalidated"`) and
//! `evict_candidates(nr) -> iterable of folios` are required;
//! `folio_refault(folio, distance, workingset)`, `folio_putback(folio, why)`
//! (`"dirty"`, `"writeback"`, `"referenced"`, `"busy"`; without it a
//! putback is handed over as `folio_added`) and `folio_reclaimable(folio)`
//! (also told of a page `fadvise(DONTNEED)` or `MADV_COLD` deactivated) are
//! optional. A truthy `sync_access` attribute asks for each access at
//! once instead of in per-CPU batches; a `name` attribute (else the class
//! name) labels it.
//!
//! A folio is a [`Folio`]: immutable, equal and hashed by value, so a
//! policy keys dicts and sets by it (or by `folio.pfn`, or by `folio.key`
//! for ghosts of evicted data) without a conversion; one small object per
//! call costs less than the call itself, and plain ints could not carry
//! (mapping, index). `evict_candidates` may return folios or pfns (ints).
//!
//! The adapter keeps, in Rust, which frames the policy holds and which are
//! candidates (the engine's until put back or removed). A returned
//! candidate the policy does not hold (an unknown pfn, a duplicate, a
//! candidate already out), a non-folio, or more than `nr` of them is
//! refused: it never reaches the engine. Accesses and refaults of frames
//! the policy does not hold (an access racing with a removal, or of a
//! candidate out with the engine, which the built-in plug-ins ignore too)
//! are dropped here, so a Python policy sees only the folios it holds.
//!
//! A Python exception in a hook (or a refused candidate) never unwinds
//! into the engine: the adapter records the first one and switches the
//! Python object off; from then on it evicts what it holds oldest first
//! (FIFO), so the cache goes on and the data stays right. The error is
//! raised to the caller when the call that ran the engine returns (for
//! `replay`, at its end; for `PageCache`, from the call during which, or
//! the first after which, it happened; that call's effect stands).
//!
//! The GIL: the engine calls hooks from any thread (the caller's, kswapd,
//! the I/O workers), holding its own locks; every Python API call that runs
//! the engine releases the GIL first, and each hook takes it
//! (`Python::with_gil`). A hook must not call into a cache (which would
//! wait for locks its own thread holds): such calls raise RuntimeError
//! (a thread-local flag marks hook code), and a hook must not wait for
//! another Python thread that uses the cache. The adapter's own lock is a
//! leaf, never held while the GIL is taken. At interpreter exit (`atexit`)
//! hooks stop calling Python. A cache handle the garbage collector frees
//! inside a hook is dropped after it (cache.rs, `NoGil`). An instance
//! serves one cache; one that refers to its cache makes a cycle through
//! the engine that the garbage collector cannot see (the cache stays):
//! keep a `weakref` to it. The cache's wrappers do not report the hooks
//! to the collector, because they do not own them (the engine does, and
//! any number of `PageCache` and `File` wrappers share it): reporting one
//! reference from several owners would let the collector free live ones.
//!
//! Cost: a hook is one GIL retake, a `Folio` and a Python call. Replaying
//! LIRS traces (cpp, ps, multi2, sprite at 10% and 40%) with a Python FIFO
//! against the built-in `fifo`, same misses, costs 0.26-0.68 us more per
//! hook call (up to 1.9 us on a busier machine) and 0.3-1.4 us more per
//! access (1.2-2.2 hook calls), on a 2-core VM at load 2-3:
//! `python crates/python/benches/policy_cost.py`. A thread Python did not
//! start keeps a Python thread state for its hooks (`keep_thread_state`):
//! creating one per call cost about 25 us. Python policies are for trying
//! ideas on traces; the built-in plug-ins are for speed.

use std::cell::{Cell, OnceCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pcache::policy::list::FolioLists;
use pcache::policy::{AccessMode, EvictionPolicy, FolioRef, Putback, Refault, Removal};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};

/// The lists of the adapter's bookkeeping: frames the policy holds, and
/// candidates it handed to the engine.
const HELD: usize = 0;
const CANDIDATE: usize = 1;

/// A page the engine names to a Python policy: its frame (`pfn`), its
/// order (0: one page), and what it caches (`mapping`, `index`). Equal and
/// hashed by value; `key` names the data across evictions (for ghosts).
#[pyclass(frozen, eq, hash, name = "Folio", module = "pcache")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Folio {
    #[pyo3(get)]
    pfn: u32,
    #[pyo3(get)]
    order: u8,
    #[pyo3(get)]
    mapping: u32,
    #[pyo3(get)]
    index: u64,
}

#[pymethods]
impl Folio {
    /// (mapping, index) as one int: the data's identity, stable across
    /// evictions and refaults.
    #[getter]
    fn key(&self) -> u64 {
        self.as_ref().key()
    }

    fn __repr__(&self) -> String {
        format!("Folio(pfn={}, order={}, mapping={}, index={})", self.pfn, self.order, self.mapping, self.index)
    }
}

impl Folio {
    fn as_ref(&self) -> FolioRef {
        FolioRef { pfn: self.pfn, order: self.order, mapping: self.mapping, index: self.index }
    }
}

impl From<FolioRef> for Folio {
    fn from(f: FolioRef) -> Folio {
        Folio { pfn: f.pfn, order: f.order, mapping: f.mapping, index: f.index }
    }
}

thread_local! {
    /// This thread runs a hook's Python code.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// A Python thread state kept for a thread Python did not start (kswapd,
/// the I/O workers, replay's threads). Without it every `with_gil` there
/// creates and destroys one, which cost about 25 us per hook; with it a
/// hook retakes the GIL with the thread's own state. Released (the state
/// deleted) when the thread ends, unless the interpreter is exiting.
struct KeptThreadState {
    gstate: ffi::PyGILState_STATE,
    saved: *mut ffi::PyThreadState,
}

impl Drop for KeptThreadState {
    fn drop(&mut self) {
        // SAFETY: Py_IsInitialized may be called at any time.
        if EXITING.load(Ordering::Acquire) || unsafe { ffi::Py_IsInitialized() } == 0 {
            return;
        }
        // SAFETY: `saved` is this thread's state, released by
        // PyEval_SaveThread in `keep_thread_state` and not current since
        // (every with_gil on this thread restored and saved it again);
        // restoring it takes the GIL, and PyGILState_Release with the
        // state its Ensure returned (UNLOCKED) deletes it and drops the GIL.
        unsafe {
            ffi::PyEval_RestoreThread(self.saved);
            ffi::PyGILState_Release(self.gstate);
        }
    }
}

thread_local! {
    /// Set on a thread's first hook: Some if it needed a kept state.
    static KEPT: OnceCell<Option<KeptThreadState>> = const { OnceCell::new() };
}

/// Give this thread a lasting Python thread state if it has none. Called
/// without the GIL (a thread with no state cannot hold it).
fn keep_thread_state() {
    KEPT.with(|k| {
        k.get_or_init(|| {
            // SAFETY: it only reads this thread's GIL-state slot.
            if !unsafe { ffi::PyGILState_GetThisThreadState() }.is_null() {
                return None;
            }
            // SAFETY: the interpreter is initialized (a policy object
            // exists) and not exiting (`live`); this thread holds no GIL.
            // Ensure creates its state and takes the GIL; SaveThread
            // releases the GIL and keeps the state (its gilstate counter
            // stays 1, so later Ensure/Release pairs reuse it).
            unsafe {
                let gstate = ffi::PyGILState_Ensure();
                let saved = ffi::PyEval_SaveThread();
                Some(KeptThreadState { gstate, saved })
            }
        });
    });
}

/// Set at interpreter exit: hooks no longer call Python.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Registered with `atexit`: background threads must not take the GIL
/// while the interpreter finalizes.
#[pyfunction]
pub fn _policy_atexit() {
    EXITING.store(true, Ordering::Release);
}

/// Whether this thread runs a hook's Python code.
pub fn in_hook() -> bool {
    IN_HOOK.with(Cell::get)
}

/// RuntimeError when called from a hook: the engine's locks are held by
/// this thread, so running the engine here would wait for itself.
pub fn not_in_hook() -> PyResult<()> {
    if in_hook() {
        return Err(PyRuntimeError::new_err(
            "a policy hook must not call into a page cache (the engine holds its locks while it runs hooks)",
        ));
    }
    Ok(())
}

/// Marks hook code on this thread while alive.
struct HookScope(bool);

impl HookScope {
    fn enter() -> HookScope {
        HookScope(IN_HOOK.with(|f| f.replace(true)))
    }
}

impl Drop for HookScope {
    fn drop(&mut self) {
        IN_HOOK.with(|f| f.set(self.0));
    }
}

struct Book {
    lists: FolioLists<2>,
    error: Option<PyErr>,
}

/// What the adapter and the Python API share: the bookkeeping and the
/// first error.
pub struct Shared {
    book: Mutex<Book>,
    failed: AtomicBool,
}

impl Shared {
    fn book(&self) -> MutexGuard<'_, Book> {
        // Nothing panics while it is held; a poisoned lock's data is whole.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, e: PyErr) {
        let mut b = self.book();
        if b.error.is_none() {
            b.error = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Whether a hook raised (the Python object is off).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The first error, once.
    pub fn take_error(&self) -> PyResult<()> {
        if !self.failed() {
            return Ok(());
        }
        match self.book().error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The Python object's hooks, as bound methods looked up once.
struct Hooks {
    added: PyObject,
    accessed: PyObject,
    removed: PyObject,
    candidates: PyObject,
    refault: Option<PyObject>,
    putback: Option<PyObject>,
    reclaimable: Option<PyObject>,
    /// The `why` strings, made once.
    removal: [Py<PyString>; 3],
    putback_why: [Py<PyString>; 4],
}

/// An `EvictionPolicy` over a Python object (see the module's doc).
pub struct PyPolicy {
    name: &'static str,
    sync: bool,
    hooks: Hooks,
    shared: Arc<Shared>,
}

/// A policy's name as the engine keeps it (`&'static str`): each distinct
/// name is leaked once.
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

/// The name a policy object goes by: its `name` attribute, else its class's.
pub fn policy_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(n) = obj.getattr("name") {
        if let Ok(s) = n.extract::<String>() {
            return Ok(s);
        }
    }
    Ok(obj.get_type().name()?.to_string())
}

impl PyPolicy {
    /// The adapter for `obj`, for a cache of `nr_frames` frames. TypeError
    /// if a required hook is missing or not callable.
    pub fn new(obj: &Bound<'_, PyAny>, nr_frames: u64) -> PyResult<PyPolicy> {
        let py = obj.py();
        let hook = |name: &str, required: bool| -> PyResult<Option<PyObject>> {
            match obj.getattr(name) {
                Ok(m) if m.is_callable() => Ok(Some(m.unbind())),
                Ok(_) => Err(PyTypeError::new_err(format!("policy.{name} is not callable"))),
                Err(_) if !required => Ok(None),
                Err(_) => Err(PyTypeError::new_err(format!("a policy needs a method {name}"))),
            }
        };
        let need = |name: &str| -> PyResult<PyObject> {
            hook(name, true)?.ok_or_else(|| PyTypeError::new_err(format!("a policy needs a method {name}")))
        };
        let s = |t: &str| PyString::intern(py, t).unbind();
        let hooks = Hooks {
            added: need("folio_added")?,
            accessed: need("folio_accessed")?,
            removed: need("folio_removed")?,
            candidates: need("evict_candidates")?,
            refault: hook("folio_refault", false)?,
            putback: hook("folio_putback", false)?,
            reclaimable: hook("folio_reclaimable", false)?,
            removal: [s("evicted"), s("truncated"), s("invalidated")],
            putback_why: [s("dirty"), s("writeback"), s("referenced"), s("busy")],
        };
        let sync = match obj.getattr("sync_access") {
            Ok(v) => v.is_truthy()?,
            Err(_) => false,
        };
        let frames = usize::try_from(nr_frames).map_err(|_| PyValueError::new_err("too many frames"))?;
        Ok(PyPolicy {
            name: intern(&policy_name(obj)?),
            sync,
            hooks,
            shared: Arc::new(Shared {
                book: Mutex::new(Book { lists: FolioLists::new(frames), error: None }),
                failed: AtomicBool::new(false),
            }),
        })
    }

    /// The state the Python API checks for errors.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Whether hooks call Python now.
    fn live(&self) -> bool {
        !self.shared.failed() && !EXITING.load(Ordering::Acquire)
    }

    /// A hook: `book` updates the bookkeeping and says whether Python is
    /// told, then `f` tells it. While Python is on, both run holding the
    /// GIL, so that hooks reach Python in the order the bookkeeping changed
    /// (an access checked as held is not overtaken by the candidate choice
    /// of another thread). An exception is recorded.
    fn hook(&self, book: impl FnOnce(&mut Book) -> bool, f: impl FnOnce(Python<'_>) -> PyResult<()>) {
        if !self.live() {
            book(&mut self.shared.book());
            return;
        }
        keep_thread_state();
        Python::with_gil(|py| {
            // The GIL, then the adapter's lock: never the other way round.
            if !book(&mut self.shared.book()) || !self.live() {
                return;
            }
            let _scope = HookScope::enter();
            if let Err(e) = f(py) {
                self.shared.fail(e);
            }
        });
    }

    /// A hook of one folio argument, told when `book` says so.
    fn hook1(&self, hook: &PyObject, folio: FolioRef, book: impl FnOnce(&mut Book) -> bool) {
        self.hook(book, |py| {
            hook.call1(py, (Folio::from(folio),))?;
            Ok(())
        });
    }

    /// What Python returned from evict_candidates, checked: only frames
    /// it holds, at most `nr`, each once. The first bad entry is an error.
    fn take_candidates(&self, ret: &Bound<'_, PyAny>, nr: usize, out: &mut Vec<FolioRef>) -> PyResult<()> {
        if ret.is_none() {
            return Ok(());
        }
        for item in ret.try_iter()? {
            let item = item?;
            let pfn = if let Ok(f) = item.downcast::<Folio>() {
                f.get().pfn
            } else if !item.is_instance_of::<PyBool>() && item.extract::<i128>().is_ok() {
                let n: i128 = item.extract()?;
                u32::try_from(n).map_err(|_| PyValueError::new_err(format!("evict_candidates: no frame {n}")))?
            } else {
                return Err(PyTypeError::new_err(format!(
                    "evict_candidates returned {}, not a Folio or a pfn",
                    item.repr()?
                )));
            };
            if out.len() >= nr {
                return Err(PyValueError::new_err(format!("evict_candidates({nr}) returned more than {nr}")));
            }
            let mut b = self.shared.book();
            if b.lists.list_of(pfn) != Some(HELD) {
                return Err(PyValueError::new_err(format!(
                    "evict_candidates returned pfn {pfn}, which the policy does not hold \
                     (unknown, returned twice, or a candidate already)"
                )));
            }
            b.lists.remove(pfn);
            b.lists.push_head(CANDIDATE, pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
        Ok(())
    }
}

impl EvictionPolicy for PyPolicy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn access_mode(&self) -> AccessMode {
        if self.sync {
            AccessMode::Sync
        } else {
            AccessMode::Batched
        }
    }

    fn folio_added(&self, folio: FolioRef) {
        // False when out of range or already held (the engine's contract
        // broken): Python is not told of a frame the adapter cannot track.
        self.hook1(&self.hooks.added, folio, |b| b.lists.push_head(HELD, folio.pfn));
    }

    fn folio_accessed(&self, folio: FolioRef) {
        self.hook1(&self.hooks.accessed, folio, |b| b.lists.list_of(folio.pfn) == Some(HELD));
    }

    fn folio_removed(&self, folio: FolioRef, why: Removal) {
        let why = match why {
            Removal::Evicted => 0,
            Removal::Truncated => 1,
            Removal::Invalidated => 2,
        };
        self.hook(
            |b| b.lists.remove(folio.pfn).is_some(),
            |py| {
                self.hooks.removed.call1(py, (Folio::from(folio), self.hooks.removal[why].clone_ref(py)))?;
                Ok(())
            },
        );
    }

    fn folio_refault(&self, folio: FolioRef, refault: Refault) {
        let Some(hook) = &self.hooks.refault else { return };
        self.hook(
            |b| b.lists.list_of(folio.pfn) == Some(HELD),
            |py| {
                hook.call1(py, (Folio::from(folio), refault.distance, refault.workingset))?;
                Ok(())
            },
        );
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        self.hook(
            |_| true,
            |py| {
                let ret = self.hooks.candidates.call1(py, (nr,))?;
                self.take_candidates(ret.bind(py), nr, out)
            },
        );
        if self.live() {
            return;
        }
        // Python is off (it raised, now or before): the oldest held first.
        let mut b = self.shared.book();
        while out.len() < nr {
            let Some(pfn) = b.lists.pop_tail(HELD) else { break };
            b.lists.push_head(CANDIDATE, pfn);
            out.push(FolioRef { pfn, order: 0, mapping: 0, index: 0 });
        }
    }

    fn folio_putback(&self, folio: FolioRef, why: Putback) {
        let back = |b: &mut Book| {
            if b.lists.list_of(folio.pfn) != Some(CANDIDATE) {
                return false;
            }
            b.lists.remove(folio.pfn);
            b.lists.push_head(HELD, folio.pfn)
        };
        let why = match why {
            Putback::Dirty => 0,
            Putback::Writeback => 1,
            Putback::Referenced => 2,
            Putback::Busy => 3,
        };
        match &self.hooks.putback {
            Some(hook) => self.hook(back, |py| {
                hook.call1(py, (Folio::from(folio), self.hooks.putback_why[why].clone_ref(py)))?;
                Ok(())
            }),
            None => self.hook1(&self.hooks.added, folio, back),
        }
    }

    fn folio_reclaimable(&self, folio: FolioRef) {
        // The fallback's order too: freed next, as rotate_reclaimable_page.
        let rotate = |b: &mut Book| {
            if b.lists.list_of(folio.pfn) != Some(HELD) {
                return false;
            }
            b.lists.remove(folio.pfn);
            b.lists.push_tail(HELD, folio.pfn)
        };
        match &self.hooks.reclaimable {
            Some(hook) => self.hook1(hook, folio, rotate),
            None => {
                rotate(&mut self.shared.book());
            }
        }
    }
}

//! The atomics the engine uses: std's, or loom's under `cfg(loom)` so the
//! same code is model-checked (tokio's pattern). The page tree's nodes are
//! built from zeroed memory and the per-thread slot registry lives in
//! statics, so those two keep std's atomics (they are not modelled).

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::atomic;

/// A mutex: parking_lot's, or under `cfg(loom)` loom's behind the same
/// `lock()` (one that blocks a loom thread the model can schedule around).
#[cfg(not(loom))]
pub use parking_lot::Mutex;

#[cfg(loom)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(v: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(v))
    }

    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        // Nothing panics while holding it in a model.
        self.0.lock().unwrap()
    }
}

//! The atomics and the arena's mutex: std's atomics and parking_lot's
//! mutex, or loom's under `cfg(loom)` so the same code is model-checked
//! (tokio's pattern). The page tree's nodes are
//! built from zeroed memory and the per-thread slot registry lives in
//! statics, so those two keep std's atomics (they are not modelled).

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::atomic;

#[cfg(not(loom))]
pub use parking_lot::Mutex;

/// loom's mutex with parking_lot's signature (no poisoning).
#[cfg(loom)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(value: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("a loom mutex is poisoned only by a panic")
    }
}

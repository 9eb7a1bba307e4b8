//! The atomics the engine uses: std's, or loom's under `cfg(loom)` so the
//! same code is model-checked (tokio's pattern). The page tree's nodes are
//! built from zeroed memory and the per-thread slot registry lives in
//! statics, so those two keep std's atomics (they are not modelled).

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::atomic;

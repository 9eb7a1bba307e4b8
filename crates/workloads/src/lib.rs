//! Experiments and benchmarks for pcache.
//!
//! The framework:
//! * [`registry`]: the one list of experiments (`pcache bench NAME`), read
//!   by the CLI, the main job and the kernel worker.
//! * [`experiment`]: the `Experiment` trait and the options every
//!   experiment takes (`ExpOpts`, `--param NAME=VALUE`, `--set`).
//! * [`runner`]: the seed experiments' skeleton, written once
//!   (`SeedExperiment`, `runner::run`).
//! * [`report`]: the result and its JSON schema; [`render`]: how results
//!   are shown; [`stats`]: summary statistics; [`variants`]: named
//!   presets of `Tunables`; [`kernel`]: the kernel column's memory cgroup
//!   and worker; [`sys`], [`plot`], [`zipf`].
//!
//! The experiments, each a folder split by job (workload, kernel side,
//! checks, report): [`dd`] (seed 000), [`sparsetruncate`] (001),
//! [`lru_contention`] (002), [`small_file_server`] (003),
//! [`reclaim_writeback`] (004); and [`hitpath`], [`fuse_dd`], [`replay`]
//! ([`replay_kernel`]).

pub mod dd;
pub mod experiment;
pub mod fuse_dd;
pub mod hitpath;
pub mod kernel;
pub mod lru_contention;
pub mod plot;
mod progress;
pub mod reclaim_writeback;
pub mod registry;
pub mod render;
pub mod replay;
pub mod replay_kernel;
pub mod report;
pub mod runner;
pub mod seqread;
pub mod small_file_server;
pub mod sparsetruncate;
pub mod stats;
pub mod sys;
pub mod variants;
pub mod zipf;

use std::io;

/// What a workload can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An error from the page cache under test.
    #[error("pcache: {0}")]
    Pcache(#[from] pcache::Error),
    /// An I/O error outside pcache (the temporary directory, the kernel
    /// baseline).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Options out of range.
    #[error("invalid options: {0}")]
    Invalid(String),
    /// The workload saw something wrong: wrong data, a miss where every
    /// lookup must hit.
    #[error("check failed: {0}")]
    Check(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

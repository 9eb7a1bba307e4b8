//! Experiments and benchmarks for pcache: the framework ([`registry`], the
//! one list of experiments; [`experiment`], the contract and options;
//! [`runner`], the seed experiments' skeleton; [`report`], [`render`],
//! [`stats`]) and the experiments, each seed a folder split by job
//! (ARCHITECTURE.md, "Adding an experiment").

pub mod dd;
pub mod experiment;
pub mod fuse_dd;
pub mod fuse_mount;
pub mod getscan;
pub mod hitpath;
pub mod kernel;
pub mod lru_contention;
pub mod mount;
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
pub mod sqlite_ycsb;
pub mod stats;
pub mod sys;
pub mod variants;
pub mod verdict;
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

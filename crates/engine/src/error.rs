//! Typed errors. Every fallible public call returns [`Error`]; bad input is
//! refused before any state changes, so a refused call loses no data.

use std::io;

/// What went wrong. The variants map onto the errno a kernel would return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `offset + len` does not fit in a `u64`, or passes the largest file size.
    #[error("offset {offset} + length {len} overflows the largest file size ({max} bytes)")]
    Overflow { offset: u64, len: u64, max: u64 },
    /// A page index past the end of the file was asked for where that is not allowed.
    #[error("offset {offset} is past the end of the file ({size} bytes)")]
    PastEof { offset: u64, size: u64 },
    /// The handle was closed with [`crate::File::close`].
    #[error("file handle is closed")]
    Closed,
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An argument is out of range (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No frame could be freed: every page is pinned, locked or under writeback
    /// and stayed so through every reclaim priority (ENOMEM).
    #[error("out of page frames: all {frames} frames are pinned or busy")]
    NoMemory { frames: usize },
    /// The backing device has no space left (ENOSPC). The data stays dirty in
    /// the cache and is retried by later writeback.
    #[error("no space left on the backing device of {name}")]
    NoSpace { name: String },
    /// No run-time tunable has this name (ENOENT, as for a missing
    /// `/proc/sys/vm` file).
    #[error("no tunable named {name:?}")]
    UnknownSysctl { name: String },
    /// A value written to a run-time tunable is malformed or out of range
    /// (EINVAL); the tunable keeps its value.
    #[error("tunable {name}: invalid value {value:?}: {reason}")]
    InvalidSysctl { name: String, value: String, reason: String },
    /// A write or truncate would pass the largest file the backing file
    /// system allows (its `s_maxbytes`; EFBIG), refused at the call.
    #[error("{name}: offset {offset} passes the backing file system's largest file size")]
    FileTooBig { name: String, offset: u64 },
    /// A path component is longer than NAME_MAX (255 bytes) or the path
    /// longer than PATH_MAX (ENAMETOOLONG).
    #[error("name too long: {name:?}")]
    NameTooLong { name: String },
    /// The calling thread's [`crate::Interrupt`] was raised while it waited
    /// (EINTR); nothing more was done.
    #[error("interrupted")]
    Interrupted,
    /// The cache is shutting down or shut down (ESHUTDOWN): waiters are
    /// woken with this error and later writes refused.
    #[error("the page cache is shut down")]
    ShutDown,
    /// Dirty data that could not be written back when the cache was shut
    /// down: each file, its dirty pages and the last writeback error.
    #[error("dirty data of {} file(s) could not be written back: {}", files.len(), UnwrittenFile::list(files))]
    Unwritten { files: Vec<UnwrittenFile> },
    /// A write through a [`crate::Mapping`] made without
    /// [`crate::MapFlags::WRITE`] (EACCES; the kernel raises SIGSEGV).
    #[error("write through a read-only mapping of {name}")]
    ReadOnlyMapping { name: String },
    /// An I/O error from the backing device (EIO and others). A writeback error
    /// is reported once per handle by the next fsync, as Linux's errseq does.
    #[error("I/O error on {name}: {source}")]
    Io {
        name: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Wrap an I/O error from the device called `name`, turning ENOSPC into
    /// [`Error::NoSpace`].
    pub fn io(name: &str, source: io::Error) -> Error {
        match source.raw_os_error() {
            Some(libc::ENOSPC) => Error::NoSpace { name: name.to_string() },
            Some(libc::ENAMETOOLONG) => Error::NameTooLong { name: name.to_string() },
            _ => Error::Io { name: name.to_string(), source },
        }
    }

    /// Wrap an I/O error of a write or size change at `offset` of `name`:
    /// EFBIG (past the file system's largest file) becomes
    /// [`Error::FileTooBig`], the rest as [`Error::io`].
    pub fn io_at(name: &str, offset: u64, source: io::Error) -> Error {
        if source.raw_os_error() == Some(libc::EFBIG) {
            Error::FileTooBig { name: name.to_string(), offset }
        } else {
            Error::io(name, source)
        }
    }

    /// The errno this error stands for, as a kernel would return it.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Overflow { .. } => libc::EFBIG,
            Error::PastEof { .. } => libc::EINVAL,
            Error::Closed => libc::EBADF,
            Error::InvalidConfig(_) | Error::InvalidArgument(_) => libc::EINVAL,
            Error::NoMemory { .. } => libc::ENOMEM,
            Error::NoSpace { .. } => libc::ENOSPC,
            Error::UnknownSysctl { .. } => libc::ENOENT,
            Error::InvalidSysctl { .. } => libc::EINVAL,
            Error::FileTooBig { .. } => libc::EFBIG,
            Error::NameTooLong { .. } => libc::ENAMETOOLONG,
            Error::Interrupted => libc::EINTR,
            Error::ShutDown => libc::ESHUTDOWN,
            Error::ReadOnlyMapping { .. } => libc::EACCES,
            Error::Unwritten { files } => files.first().map_or(libc::EIO, |f| f.errno),
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// A file whose dirty data could not be written back (see
/// [`Error::Unwritten`] and `PageCache::unwritten_files`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct UnwrittenFile {
    /// The file's name in the cache (its path, `memory:NAME`, or its
    /// device's name).
    pub name: String,
    /// Dirty pages still held.
    pub pages: u64,
    /// The last writeback error's errno (0 if none was recorded: the data
    /// was simply never written, as after an interrupted shutdown).
    pub errno: i32,
}

impl UnwrittenFile {
    fn list(files: &[UnwrittenFile]) -> String {
        let mut s = String::new();
        for (i, f) in files.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let err =
                if f.errno != 0 { io::Error::from_raw_os_error(f.errno).to_string() } else { "not written".into() };
            s.push_str(&format!("{} ({} pages: {})", f.name, f.pages, err));
        }
        s
    }
}

/// Shorthand used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

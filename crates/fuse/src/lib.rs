//! `pcache mount`: a directory served through pcache with FUSE, so that
//! unmodified programs use the cache.
//!
//! ```text
//!   program ── read(2)/write(2) ──> kernel VFS ──> FUSE (FOPEN_DIRECT_IO, no kernel page cache)
//!                                                    │ /dev/fuse
//!   pcache mount: fuser session thread ── metadata ──┤──> BACKING_DIR (the *at calls on O_PATH fds)
//!                 worker pool ── read/write/fsync ───┘──> pcache::File ──> FileDev (O_DIRECT) ──> BACKING_DIR
//! ```
//!
//! Names, directories and metadata pass through to the backing directory
//! (fs.rs). File data goes through the engine: one cached file per backing
//! inode (dev.rs), read and written by the worker pool (workers.rs), with
//! reclaim, readahead and writeback running as in the library. The
//! `.pcache` directory at the root shows `vmstat` and the run-time tunables
//! (control.rs).
//!
//! # No double caching, and what it means for mmap
//!
//! Every file is opened with `FOPEN_DIRECT_IO`: the kernel keeps no page
//! cache of its own for it and sends each read and write, at the program's
//! offsets and sizes, to the daemon. The data is then cached once, by
//! pcache, and the backing files are opened with O_DIRECT, so the host page
//! cache does not hold a third copy. The price is mmap: a direct-I/O file
//! has no kernel pages to map. Linux refuses a shared mapping of such a
//! file (`mmap(MAP_SHARED)` fails with ENODEV), so a program that writes
//! through a shared mapping cannot use the mount (SQLite's WAL mode, whose
//! `-shm` file is mapped shared, is one; its default rollback journal works).
//! A private mapping (`MAP_PRIVATE`, as the loader maps executables) still
//! works: the kernel reads it in through ordinary reads, and those pages
//! are the kernel's, not pcache's. (Linux 6.6 added FUSE_DIRECT_IO_ALLOW_MMAP
//! to allow shared maps of direct-I/O files through the kernel's page cache;
//! the mount does not ask for it, since that brings the double caching back.)
//!
//! # Durability
//!
//! fsync(2) and fdatasync(2) on the mount write back the file's dirty pages,
//! wait for them and fsync the backing file, so acknowledged data is on
//! the backing disk; a crash of the daemon loses only what was not yet
//! fsynced. Unmounting (`fusermount3 -u`, `umount`), SIGINT and SIGTERM
//! write back every dirty page that can be written before the daemon
//! exits; a file whose data cannot be written (a failing or read-only
//! backing store) is named by its backing path and the daemon exits
//! non-zero (`MountError::Unwritten`): it never claims all was written
//! when it was not. close(2) does not write back, as with the kernel's
//! page cache, but reports a writeback error the handle has not seen yet.
//!
//! # Descriptors
//!
//! The daemon raises its soft RLIMIT_NOFILE to the hard limit at start.
//! Backing files are opened on demand through the engine's bounded fd
//! cache (`--max-open-fds`, default half the soft limit) and FUSE nodes
//! hold no descriptor (fs.rs), so the number of files the kernel keeps
//! looked up is not limited by RLIMIT_NOFILE.
//!
//! # Threads
//!
//! fuser 0.16 reads requests on one thread. Metadata requests are answered
//! there; data requests (read, write, fsync, fallocate, setattr) run on a
//! pool of workers (`--threads`), so requests from several programs, and
//! the kernel's parallel reads of one program, proceed in parallel.
//!
//! # Limits
//!
//! The backing directory must not be changed behind the mount's back while
//! it is mounted: the cache would not see the change. `st_ino` on the mount
//! is the backing `st_ino` plus 64 (a number from a table, kept for the
//! life of the mount, for inodes on another device mounted inside the
//! backing directory). Names longer than NAME_MAX (255) and symlink targets
//! of PATH_MAX or more get ENAMETOOLONG (full paths past PATH_MAX are
//! refused by the kernel before they reach the daemon, which resolves
//! deeper trees in chunks). FUSE_INTERRUPT cannot reach the daemon
//! (fuser 0.16 answers it with ENOSYS), so the workers emulate it by
//! watching the requester's pending signals (workers.rs). Extended attributes and `lseek(SEEK_DATA)` are not
//! passed through; file locks are local to the mount (the kernel's).

mod control;
mod dev;
mod fs;
mod sys;
mod workers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::MountOption;
use pcache::{Config, PageCache, Tunables};

pub use crate::fs::PcacheFs;

/// Options of `pcache mount`.
#[derive(clap::Args, Debug, Clone)]
pub struct MountArgs {
    /// The directory whose files are served.
    #[arg(value_name = "BACKING_DIR")]
    pub backing: PathBuf,

    /// Where to mount it (an existing directory).
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,

    /// Memory of the cache, e.g. 256M.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub mem: u64,

    /// Page size in bytes (4096 to 65536, a power of two).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub page_size: usize,

    /// Set a run-time tunable at start, NAME=VALUE, as in `.pcache/NAME`
    /// (dirty_ratio, dirty_background_ratio, dirty_bytes,
    /// dirty_background_bytes, dirty_expire_centisecs,
    /// dirty_writeback_centisecs, read_ahead_kb). Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// Worker threads for data requests [default: 2 per CPU, at least 4].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Most backing files kept open at once (the engine's fd cache; files
    /// past it are reopened when next used) [default: half the soft
    /// RLIMIT_NOFILE after raising it to the hard limit, at most 4096].
    #[arg(long, value_name = "N")]
    pub max_open_fds: Option<usize>,
}

/// Why a mount failed to start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{0}")]
    Cache(#[from] pcache::Error),
    #[error("--set {0:?}: expected NAME=VALUE")]
    BadSet(String),
    #[error("backing directory {path}: {source}")]
    Backing { path: PathBuf, source: std::io::Error },
    #[error("mounting on {path}: {source}")]
    Mount { path: PathBuf, source: std::io::Error },
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("unmounted, but the dirty data of {0} file(s) could not be written back (listed above)")]
    Unwritten(usize),
}

/// A size with an optional binary suffix (K, M, G, T; "MiB" and "MB" mean
/// the same), e.g. `16M`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (e.g. 16M)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        other => return Err(format!("{s:?}: unknown suffix {other:?}")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

/// Build the cache `args` asks for, with its tunables set.
/// `--set` takes the run-time sysctls (also writable later under
/// `.pcache/`) and, for the other names, any `Tunables` field (fixed for
/// the mount's life, e.g. `reserve_space=false`).
pub fn build_cache(args: &MountArgs) -> Result<PageCache, MountError> {
    let mut sysctls = Vec::new();
    let mut fields = Vec::new();
    for kv in &args.set {
        let (name, value) = kv.split_once('=').ok_or_else(|| MountError::BadSet(kv.clone()))?;
        let (name, value) = (name.trim(), value.trim());
        if pcache::SYSCTL_NAMES.contains(&name) {
            sysctls.push((name, value));
        } else {
            fields.push((name, value));
        }
    }
    let tunables = Tunables { max_open_fds: args.max_open_fds.unwrap_or(0), ..Tunables::default() };
    let cache = PageCache::new(Config {
        memory_bytes: args.mem,
        page_size: args.page_size,
        nr_cpus: 0,
        tunables: tunables.with_sets(fields)?,
    })?;
    for (name, value) in sysctls {
        cache.sysctl_write(name, value)?;
    }
    Ok(cache)
}

/// Mount and serve until unmounted or signalled (SIGINT, SIGTERM, SIGHUP),
/// then write back every dirty page that can be written and return;
/// `MountError::Unwritten` when some could not be (each such file is
/// printed by its backing path first).
///
/// On a signal the daemon first writes back what it can (so nothing is
/// lost even if the unmount must wait), then unmounts; if the mount is busy
/// it is detached and the daemon serves the files still open until they
/// close. A second signal exits at once (status 128 + signal) after
/// writing back again and naming the files still dirty.
pub fn run(args: &MountArgs) -> Result<(), MountError> {
    // Before the cache is built: its fd cache's default bound is half the
    // soft limit.
    raise_nofile_limit();
    let cache = build_cache(args)?;
    let backing =
        args.backing.canonicalize().map_err(|e| MountError::Backing { path: args.backing.clone(), source: e })?;
    if !backing.is_dir() {
        return Err(MountError::Backing { path: backing, source: std::io::Error::from_raw_os_error(libc::ENOTDIR) });
    }
    let mountpoint =
        args.mountpoint.canonicalize().map_err(|e| MountError::Mount { path: args.mountpoint.clone(), source: e })?;
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get() * 2).unwrap_or(4).max(4));
    let fs = PcacheFs::new(cache.clone(), &backing, threads)
        .map_err(|e| MountError::Backing { path: backing.clone(), source: std::io::Error::from_raw_os_error(e) })?;
    let shared = fs.shared();

    // The daemon creates files with the modes the callers ask for (the
    // kernel has applied their umask already).
    // SAFETY: umask only sets the process's file creation mask.
    unsafe { libc::umask(0) };

    let mut options = vec![
        MountOption::FSName(format!("pcache:{}", backing.display())),
        MountOption::Subtype("pcache".into()),
        MountOption::DefaultPermissions,
    ];
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        options.push(MountOption::AllowOther);
    }
    let mut session = fuser::Session::new(fs, &mountpoint, &options)
        .map_err(|e| MountError::Mount { path: mountpoint.clone(), source: e })?;
    eprintln!(
        "pcache mount: {} on {} ({} MiB of cache, {} workers)",
        backing.display(),
        mountpoint.display(),
        args.mem >> 20,
        threads
    );

    let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
        .map_err(MountError::Signals)?;
    let signal_handle = signals.handle();
    let stopping = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (cache, mountpoint, stopping) = (cache.clone(), mountpoint.clone(), stopping.clone());
        let shared_sig = shared.clone();
        std::thread::Builder::new()
            .name("pcache-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if stopping.swap(true, Ordering::AcqRel) {
                        eprintln!("pcache mount: signal {sig} again: writing back and exiting now");
                        let _ = cache.sync_all();
                        for f in shared_sig.unwritten() {
                            eprintln!("pcache mount: NOT written back: {f}");
                        }
                        std::process::exit(128 + sig);
                    }
                    eprintln!("pcache mount: signal {sig}: writing back and unmounting");
                    if let Err(e) = cache.sync_all() {
                        // Not final: the unmount's shutdown retries and
                        // names each file it cannot write.
                        eprintln!("pcache mount: writeback before unmounting: {e}");
                    }
                    if let Err(e) = sys::unmount(&mountpoint) {
                        eprintln!(
                            "pcache mount: unmounting {}: {}",
                            mountpoint.display(),
                            std::io::Error::from_raw_os_error(e)
                        );
                    }
                }
            })
            .map_err(MountError::Signals)?
    };

    let res = session.run();
    // Dropping the session calls destroy(): the workers finish, every
    // node's file is written back and dropped, and the cache shuts down.
    // (If destroy was not called, shutdown runs here; it runs once.)
    drop(session);
    let unwritten = shared.shutdown();
    signal_handle.close();
    let _ = watcher.join();
    res.map_err(|e| MountError::Mount { path: mountpoint, source: e })?;
    if !unwritten.is_empty() {
        for f in &unwritten {
            eprintln!("pcache mount: NOT written back: {f}");
        }
        return Err(MountError::Unwritten(unwritten.len()));
    }
    eprintln!("pcache mount: unmounted, all dirty pages written back");
    Ok(())
}

/// Raise the soft limit on open files to the hard one: the engine's fd
/// cache is bounded to half the soft limit (`Tunables::max_open_fds`), the
/// rest is headroom for the mount's own transient descriptors.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `rlimit` we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one `rlimit` we own; failure is harmless.
        let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// Whether FUSE can be used here: /dev/fuse opens and fusermount3 runs.
/// The reason when not, for tests and benchmarks that skip.
pub fn fuse_unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    match std::process::Command::new("fusermount3").arg("-V").output() {
        Ok(_) => None,
        Err(e) => Some(format!("fusermount3 cannot be run: {e} (apt-get install fuse3)")),
    }
}

/// Whether `path` is the root of a FUSE mount (statfs magic).
pub fn is_fuse_mount(path: &Path) -> bool {
    const FUSE_SUPER_MAGIC: libc::c_long = 0x6573_5546;
    let Ok(p) = sys::cstr(path.as_os_str()) else { return false };
    // SAFETY: `struct statfs` is plain old data; all zeroes is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `p` is NUL-terminated; `st` is valid and writable.
    unsafe { libc::statfs(p.as_ptr(), &mut st) == 0 && st.f_type as libc::c_long == FUSE_SUPER_MAGIC }
}

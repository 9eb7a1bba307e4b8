//! `pcache mount`: a directory served through pcache with FUSE, so that
//! unmodified programs use the cache.
//!
//! ```text
//!   program ── read(2)/write(2) ──> kernel VFS ──> FUSE (FOPEN_DIRECT_IO: no kernel page cache)
//!                                                    │ /dev/fuse
//!   pcache mount: N session threads, ── metadata ──────┤──> BACKING_DIR (the *at calls on O_PATH fds)
//!                 each on its own    ── read/write ────┘──> pcache::File ──> FileDev (O_DIRECT)
//!                 /dev/fuse clone                                           ──> BACKING_DIR
//! ```
//!
//! Names, directories and metadata pass through to the backing directory
//! (fs.rs). File data goes through the engine: one cached file per backing
//! inode (dev.rs), read and written by the session threads, with
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
//! cache does not hold a third copy. A direct-I/O file has no kernel pages
//! to map, so before Linux 6.6 the kernel refused shared mappings of it
//! (ENODEV). The mount asks for FUSE_DIRECT_IO_ALLOW_MMAP (6.6, protocol
//! 7.39): a file mapped shared then gets kernel pages for its mapped
//! range; the kernel writes their dirty pages back to the daemon (msync,
//! fsync, writeback) and, before a direct read of a range, writes back
//! what is mapped there; after a direct write it drops the mapped pages of
//! the range, so read(2), write(2) and the mapping see one file
//! (tests/mount.rs, `shared_mappings_are_coherent`; SQLite's WAL mode, whose
//! `-shm` index is mapped shared, runs). Only mapped files are cached
//! twice. Private mappings (`MAP_PRIVATE`, as the loader maps
//! executables) work on every kernel.
//!
//! Files chosen by name (`--kernel-cache GLOB`) are opened without
//! FOPEN_DIRECT_IO: the kernel's page cache sits in front of pcache for
//! them (pcache sees the kernel's misses, readahead and writeback), so they
//! map shared on any kernel and their hits cost no round trip. An inode
//! once reached by such a name stays so for the mount's life, so that its
//! hard links share the kernel's one copy; a direct write through a handle
//! opened before makes the kernel drop its pages of the range. On a kernel
//! without FUSE_DIRECT_IO_ALLOW_MMAP this is the fallback: the daemon says
//! so at start and serves `*-shm` (SQLite's WAL index) that way unless
//! told otherwise; other files' shared mappings fail with ENODEV, because
//! FUSE gives no sign at open that a file will be mapped.
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
//! `--threads` session threads (fuser 0.18's `n_threads`) each read
//! requests from their own clone of the /dev/fuse descriptor
//! (FUSE_DEV_IOC_CLONE, as libfuse's clone_fd) and serve what they read,
//! metadata and data alike: no hand-off, so a request costs one wake-up,
//! and metadata never waits behind a read. A read copies the cached pages
//! it finds without waiting (`File::read_at_nowait`) and goes on to read
//! the rest in only when it meets a page that is not (inflight.rs). Up to
//! 1 MiB per request (max_pages 256, the kernel's default limit).
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
//! (fuser 0.18 answers it with ENOSYS), so the daemon emulates it by
//! watching the pending signals of requesters that wait (inflight.rs).
//! `lseek(SEEK_DATA)` is not passed through; file locks are local to the
//! mount (the kernel's).
//!
//! # Extended attributes
//!
//! get/set/list/removexattr pass through to the backing inode (fs.rs), so
//! user attributes, POSIX ACLs' `system.posix_acl_*`, security labels and
//! `cp --preserve=xattr` work wherever the backing filesystem keeps them;
//! the kernel's VFS checks the caller's right to each namespace before
//! the request reaches the daemon. Symlinks and the `.pcache` files have
//! none (EPERM to set, as Linux answers user attributes on a symlink).
//! The mount asks for FUSE_POSIX_ACL, so the kernel enforces the ACLs it
//! reads through getxattr (tests/mount.rs, `acls_are_enforced`).

mod control;
mod dev;
mod fs;
mod inflight;
mod sys;

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::{MountOption, SessionACL};
use pcache::{Config, PageCache, Tunables};

pub use crate::fs::{FsOptions, PcacheFs, FALLBACK_KERNEL_CACHE};

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

    /// Set a tunable at start, NAME=VALUE (repeatable): a run-time one as
    /// in `.pcache/NAME` (dirty_ratio, dirty_background_ratio, dirty_bytes,
    /// dirty_background_bytes, dirty_expire_centisecs,
    /// dirty_writeback_centisecs, read_ahead_kb), or any other, fixed for
    /// the mount's life. `pcache tunables` lists them.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// Session threads, each reading requests from its own clone of the
    /// /dev/fuse descriptor and serving them [default: 2 per CPU, at
    /// least 4].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub threads: Option<usize>,

    /// Most backing files kept open at once (the engine's fd cache; files
    /// past it are reopened when next used) [default: half the soft
    /// RLIMIT_NOFILE after raising it to the hard limit, at most 4096].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub max_open_fds: Option<usize>,

    /// Serve files whose name matches GLOB (repeatable, e.g. '*-shm',
    /// '*.db') through the kernel's page cache in front of pcache: they can
    /// be mapped shared on any kernel, and their cached reads cost no round
    /// trip, but the kernel caches them too [default: none; where the
    /// kernel cannot map direct-I/O files (before Linux 6.6), '*-shm'].
    #[arg(long = "kernel-cache", value_name = "GLOB")]
    pub kernel_cache: Vec<String>,

    /// Behave as on a kernel without FUSE_DIRECT_IO_ALLOW_MMAP (before
    /// Linux 6.6): shared mappings only of `--kernel-cache` files.
    #[arg(long, hide = true)]
    pub no_direct_io_mmap: bool,
}

/// Why a mount failed to start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{0}")]
    Cache(#[from] pcache::Error),
    #[error("--set {0:?}: expected NAME=VALUE")]
    BadSet(String),
    #[error("--set {0}: no such tunable (`pcache tunables` lists them)")]
    UnknownTunable(String),
    #[error("{0}")]
    Args(String),
    #[error("backing directory {path}: {source}")]
    Backing { path: PathBuf, source: std::io::Error },
    #[error("mounting on {path}: {source}")]
    Mount { path: PathBuf, source: std::io::Error },
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("unmounted, but the dirty data of {0} file(s) could not be written back (listed above)")]
    Unwritten(usize),
}

/// A count of at least 1 (0 would otherwise mean "the default" to the
/// engine, silently).
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
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
    check_sizes(args)?;
    let mut sysctls = Vec::new();
    let mut fields = Vec::new();
    let known = tunable_names();
    for kv in &args.set {
        let (name, value) = kv.split_once('=').ok_or_else(|| MountError::BadSet(kv.clone()))?;
        let (name, value) = (name.trim(), value.trim());
        if pcache::SYSCTL_NAMES.contains(&name) {
            sysctls.push((name, value));
        } else if known.iter().any(|k| k == name) {
            // Alone first, so that a bad value is named.
            Tunables::default()
                .with_sets([(name, value)])
                .map_err(|e| MountError::Args(format!("--set {name}={value}: {e}")))?;
            fields.push((name, value));
        } else {
            return Err(MountError::UnknownTunable(name.to_string()));
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
        cache.sysctl_write(name, value).map_err(|e| MountError::Args(format!("--set {name}={value}: {e}")))?;
    }
    Ok(cache)
}

/// The names of `Tunables`' fields, which `--set` takes besides the
/// sysctls (the engine's own error lists them all on one long line).
pub fn tunable_names() -> Vec<String> {
    match serde_json::to_value(Tunables::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `--mem` and `--page-size` in the words of the flags, not of the
/// engine's `Config`.
fn check_sizes(args: &MountArgs) -> Result<(), MountError> {
    let ps = args.page_size;
    if !ps.is_power_of_two() || !(pcache::MIN_PAGE_SIZE..=pcache::MAX_PAGE_SIZE).contains(&ps) {
        return Err(MountError::Args(format!(
            "--page-size {ps}: must be a power of two from {} to {}",
            pcache::MIN_PAGE_SIZE,
            pcache::MAX_PAGE_SIZE
        )));
    }
    let min = pcache::MIN_PAGES * ps as u64;
    if args.mem < min {
        return Err(MountError::Args(format!(
            "--mem {}: too small, the cache needs at least {} pages ({} KiB with {ps}-byte pages)",
            args.mem,
            pcache::MIN_PAGES,
            min >> 10
        )));
    }
    Ok(())
}

/// The backing directory and the mountpoint, canonical, once checked: both
/// existing directories, and neither the other nor inside it. A mountpoint
/// inside the backing directory would make the daemon look up names
/// through its own mount (and hang); a backing directory inside the
/// mountpoint would be hidden by the mount it serves.
pub fn check_paths(backing: &Path, mountpoint: &Path) -> Result<(PathBuf, PathBuf), MountError> {
    let arg = |m: String| Err(MountError::Args(m));
    let dir = |what: &str, p: &Path| -> Result<PathBuf, MountError> {
        match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(MountError::Args(format!("{what} {} does not exist", p.display())))
            }
            Err(e) => Err(MountError::Args(format!("{what} {}: {e}", p.display()))),
            Ok(m) if !m.is_dir() => Err(MountError::Args(format!("{what} {} is not a directory", p.display()))),
            Ok(_) => p.canonicalize().map_err(|e| MountError::Args(format!("{what} {}: {e}", p.display()))),
        }
    };
    let b = dir("backing directory", backing)?;
    let m = dir("mountpoint", mountpoint)?;
    // By (st_dev, st_ino) as well as by name: a bind mount or a second
    // name of the same directory is the same directory.
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let same = |x: &Path, y: &Path| x == y || matches!((id(x), id(y)), (Some(a), Some(b)) if a == b);
    let within = |inner: &Path, outer: &Path| inner.ancestors().any(|a| same(a, outer));
    if same(&m, &b) {
        return arg(format!("the mountpoint {} is the backing directory: mount it on another directory", m.display()));
    }
    if within(&m, &b) {
        return arg(format!("the mountpoint {} is inside the backing directory {}", m.display(), b.display()));
    }
    if within(&b, &m) {
        return arg(format!("the backing directory {} is inside the mountpoint {}", b.display(), m.display()));
    }
    Ok((b, m))
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
    // The paths first: a wrong one is refused before the cache's memory is
    // taken.
    let (backing, mountpoint) = check_paths(&args.backing, &args.mountpoint)?;
    let mut kernel_cache = Vec::new();
    for g in &args.kernel_cache {
        kernel_cache.push(glob::Pattern::new(g).map_err(|e| MountError::Args(format!("--kernel-cache {g:?}: {e}")))?);
    }
    let cache = build_cache(args)?;
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get() * 2).unwrap_or(4).max(4));
    let options = FsOptions { kernel_cache, direct_io_mmap: !args.no_direct_io_mmap };
    let fs = PcacheFs::new(cache.clone(), &backing, options)
        .map_err(|e| MountError::Backing { path: backing.clone(), source: std::io::Error::from_raw_os_error(e) })?;
    let shared = fs.shared();

    // The daemon creates files with the modes the callers ask for (the
    // kernel has applied their umask already).
    // SAFETY: umask only sets the process's file creation mask.
    unsafe { libc::umask(0) };

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(format!("pcache:{}", backing.display())),
        MountOption::Subtype("pcache".into()),
        MountOption::DefaultPermissions,
    ];
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        config.acl = SessionACL::All;
    }
    // Each session thread reads its own clone of the /dev/fuse descriptor
    // (FUSE_DEV_IOC_CLONE) and serves what it reads.
    config.n_threads = Some(threads);
    config.clone_fd = true;
    let session = fuser::Session::new(fs, &mountpoint, &config)
        .map_err(|e| MountError::Mount { path: mountpoint.clone(), source: e })?;
    eprintln!(
        "pcache mount: {} on {} ({} MiB of cache, {} session threads)",
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

    // Returns once every session thread has, after calling destroy():
    // every node's file is written back and dropped, and the cache shuts
    // down. (If destroy was not called, shutdown runs here; it runs once.)
    let res = session.run();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mem: u64, page_size: usize, set: &[&str]) -> MountArgs {
        MountArgs {
            backing: "/nonexistent-backing".into(),
            mountpoint: "/nonexistent-mnt".into(),
            mem,
            page_size,
            set: set.iter().map(|s| s.to_string()).collect(),
            threads: None,
            max_open_fds: None,
            kernel_cache: Vec::new(),
            no_direct_io_mmap: false,
        }
    }

    // Goal: --mem and --page-size are refused in the flags' words, at the
    // engine's own floor.
    #[test]
    fn sizes_are_checked_at_the_engines_floor() {
        assert!(check_sizes(&args(pcache::MIN_PAGES * 4096, 4096, &[])).is_ok());
        assert!(matches!(check_sizes(&args(pcache::MIN_PAGES * 4096 - 1, 4096, &[])), Err(MountError::Args(_))));
        assert!(matches!(check_sizes(&args(1 << 20, 1000, &[])), Err(MountError::Args(_))));
    }

    // Goal: a name that is neither a sysctl nor a tunable is refused in one
    // short line; the others are known.
    #[test]
    fn unknown_tunables_are_refused_briefly() {
        let e = build_cache(&args(1 << 20, 4096, &["nosuch=1"])).err().unwrap();
        assert!(matches!(e, MountError::UnknownTunable(ref n) if n == "nosuch"), "{e}");
        assert!(e.to_string().len() < 100, "{e}");
        let names = tunable_names();
        assert!(names.iter().any(|n| n == "reserve_space") && names.iter().any(|n| n == "dirty_ratio"), "{names:?}");
        assert!(build_cache(&args(1 << 20, 4096, &["dirty_ratio=30", "reserve_space=false"])).is_ok());
    }

    // Goal: counts of 0 are refused, not taken as "the default".
    #[test]
    fn counts_start_at_one() {
        assert!(parse_count("0").is_err());
        assert_eq!(parse_count("3"), Ok(3));
        assert!(parse_count("x").is_err());
    }
}

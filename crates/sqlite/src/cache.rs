//! The process's one page cache, and the files open in it.
//!
//! Every file the VFS puts through pcache (main databases, rollback
//! journals, WAL files) has one [`Shared`] per process, keyed by the full
//! path SQLite opens it by, counted by the connections that have it open.
//! It holds the engine's handle and what the VFS last knew of the file's
//! state on disk (the coherence rules are in lib.rs).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};

use engine::{Config, PageCache, PolicyKind};
use parking_lot::Mutex;

use crate::dev::SqliteDev;

/// The cache size when neither `pcache_mem` nor `PCACHE_MEM` gives one.
pub const DEFAULT_MEM: u64 = 64 << 20;

/// What can go wrong choosing or building the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{what}={value:?}: not a size (want BYTES or N followed by K, M or G, as 64M)")]
    BadSize { what: &'static str, value: String },
    #[error("{what}={value:?}: no such eviction policy (known: {known})")]
    BadPolicy { what: &'static str, value: String, known: String },
    #[error("cannot build the page cache of {bytes} bytes: {source}")]
    Engine { bytes: u64, source: engine::Error },
    #[error("{path}: {source}")]
    Open { path: String, source: engine::Error },
}

/// Parse a size: bytes, or a number with K, M, G or T (powers of 1024),
/// optionally followed by "B" or "iB", in any case.
pub fn parse_size(what: &'static str, s: &str) -> Result<u64, CacheError> {
    let bad = || CacheError::BadSize { what, value: s.to_string() };
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).filter(|&b| b > 0).ok_or_else(bad)
}

static CACHE: OnceLock<PageCache> = OnceLock::new();

/// The cache, if it was built.
pub fn built() -> Option<&'static PageCache> {
    CACHE.get()
}
static CACHE_INIT: Mutex<()> = Mutex::new(());

/// An eviction policy by the name `Tunables::policy` takes (`kernel`,
/// the default, `s3fifo`, `pcache`, ...).
pub fn parse_policy(what: &'static str, s: &str) -> Result<PolicyKind, CacheError> {
    PolicyKind::from_name(s.trim()).ok_or_else(|| CacheError::BadPolicy {
        what,
        value: s.to_string(),
        known: PolicyKind::ALL.map(|k| k.name()).join(", "),
    })
}

/// The process's cache, built on first use with `uri_mem` (the first
/// opener's `pcache_mem`), else `PCACHE_MEM`, else [`DEFAULT_MEM`], and the
/// eviction policy `uri_policy` (`pcache_policy`), else `PCACHE_POLICY`,
/// else the kernel's lists. Later sizes and policies are ignored: the
/// first one wins. A bad value is an error even then, so that a typo is
/// not silently accepted.
pub fn cache(uri_mem: Option<&str>, uri_policy: Option<&str>) -> Result<&'static PageCache, CacheError> {
    let uri = uri_mem.map(|s| parse_size("pcache_mem", s)).transpose()?;
    let uri_policy = uri_policy.map(|s| parse_policy("pcache_policy", s)).transpose()?;
    if let Some(c) = CACHE.get() {
        return Ok(c);
    }
    let env = match std::env::var("PCACHE_MEM") {
        Ok(s) => Some(parse_size("PCACHE_MEM", &s)?),
        Err(_) => None,
    };
    let env_policy = match std::env::var("PCACHE_POLICY") {
        Ok(s) => Some(parse_policy("PCACHE_POLICY", &s)?),
        Err(_) => None,
    };
    let bytes = uri.or(env).unwrap_or(DEFAULT_MEM);
    let mut config = Config::with_memory(bytes);
    config.tunables.policy = uri_policy.or(env_policy).unwrap_or_default();
    let _g = CACHE_INIT.lock();
    if let Some(c) = CACHE.get() {
        return Ok(c);
    }
    let c = PageCache::new(config).map_err(|source| CacheError::Engine { bytes, source })?;
    Ok(CACHE.get_or_init(|| c))
}

/// What the VFS last knew of a file on disk: what its own connections
/// wrote, or what it read when it last resynchronised.
#[derive(Default)]
pub struct Known {
    /// Rollback mode: the change counter (bytes 24..28 of the database).
    pub counter: Option<[u8; 4]>,
    /// Rollback mode: the database's length.
    pub len: Option<u64>,
    /// WAL mode: the wal-index header (its first 48 bytes).
    pub wal_hdr: Option<[u8; 48]>,
    /// WAL mode: nBackfill, the frames a checkpoint copied into the database.
    pub backfill: Option<u32>,
    /// WAL mode: the WAL salts when the database was last known, so that
    /// a restart, which resets nBackfill, is not taken for no change.
    pub db_salt: Option<[u8; 8]>,
    /// A writer of this process is restarting the WAL: nBackfill going to
    /// 0 with new salts is its doing (vfs.rs `restart_begins`).
    pub restart_expected: bool,
    /// Connections of this process holding the WAL write, checkpoint and
    /// recovery locks exclusively.
    pub excl: [u32; 3],
}

/// One file put through pcache, shared by this process's connections.
pub struct Shared {
    pub key: String,
    pub path: String,
    pub file: engine::File,
    pub dev: Arc<SqliteDev>,
    pub known: Mutex<Known>,
}

type Registry = HashMap<String, (Arc<Shared>, usize)>;

static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
/// Devices by engine key, for an inode the engine still holds when no
/// connection has it open (eviction refused because of a writeback error).
static DEVS: OnceLock<Mutex<HashMap<String, Weak<SqliteDev>>>> = OnceLock::new();

fn registry() -> &'static Mutex<Registry> {
    REGISTRY.get_or_init(Default::default)
}

fn devs() -> &'static Mutex<HashMap<String, Weak<SqliteDev>>> {
    DEVS.get_or_init(Default::default)
}

/// The engine key of a path.
fn key_of(path: &str) -> String {
    format!("sqlite:{path}")
}

/// The open [`Shared`] of `path`, if a connection of this process has it.
pub fn lookup(path: &str) -> Option<Arc<Shared>> {
    registry().lock().get(path).map(|(s, _)| s.clone())
}

/// Open `path` (which exists: SQLite's own VFS opened it first) through
/// `cache`, or count one more connection on it.
pub fn open(cache: &PageCache, path: &str) -> Result<Arc<Shared>, CacheError> {
    let mut reg = registry().lock();
    if let Some((s, n)) = reg.get_mut(path) {
        *n += 1;
        return Ok(s.clone());
    }
    let key = key_of(path);
    let mut made: Option<Arc<SqliteDev>> = None;
    let file = cache
        .open_dev_with(&key, || {
            let dev = Arc::new(
                SqliteDev::open(Path::new(path))
                    .map_err(|e| engine::Error::InvalidArgument(format!("{path}: open: {e}")))?,
            );
            made = Some(dev.clone());
            Ok(dev as Arc<dyn engine::BackingDev>)
        })
        .map_err(|source| CacheError::Open { path: path.to_string(), source })?;
    let fresh = made.is_some();
    let dev = match made {
        Some(d) => d,
        None => devs().lock().get(&key).and_then(Weak::upgrade).ok_or_else(|| CacheError::Open {
            path: path.to_string(),
            source: engine::Error::InvalidArgument("cached by another opener".into()),
        })?,
    };
    devs().lock().insert(key.clone(), Arc::downgrade(&dev));
    let shared = Arc::new(Shared { key, path: path.to_string(), file, dev, known: Mutex::new(Known::default()) });
    if !fresh {
        // Cached from an earlier open in this process: another process
        // may have changed the file since.
        shared.resync().map_err(|source| CacheError::Open { path: path.to_string(), source })?;
    }
    reg.insert(path.to_string(), (shared.clone(), 1));
    Ok(shared)
}

/// One connection closed `path`: at the last, write back and drop the
/// file from the cache (what stays cached could go stale unseen).
pub fn close(cache: &PageCache, shared: Arc<Shared>) -> Result<(), engine::Error> {
    let mut reg = registry().lock();
    let last = match reg.get_mut(&shared.path) {
        Some((_, n)) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            reg.remove(&shared.path);
            true
        }
        None => false,
    };
    if !last {
        return Ok(());
    }
    let key = shared.key.clone();
    let Ok(shared) = Arc::try_unwrap(shared) else {
        return Ok(());
    };
    let res = shared.file.sync_range(0, 0);
    drop(shared);
    cache.evict(&key)?;
    devs().lock().retain(|_, w| w.strong_count() > 0);
    res
}

/// Drop `path`'s pages after SQLite deleted it, if the engine still has
/// it (no connection open).
pub fn forget(cache: &PageCache, path: &str) {
    if registry().lock().contains_key(path) {
        return;
    }
    let _ = cache.unlink_dev(&key_of(path));
}

impl Shared {
    /// Write back dirty pages (no device flush): another process reads
    /// the file from disk.
    pub fn flush(&self) -> Result<(), engine::Error> {
        self.file.sync_range(0, 0)
    }

    /// Make the cache hold nothing older than the host file: write back
    /// what is dirty (this process's own, newer than the disk), drop every
    /// cached page and take the file's length from the host.
    pub fn resync(&self) -> Result<(), engine::Error> {
        self.flush()?;
        let io = |e| engine::Error::InvalidArgument(format!("{}: fstat: {e}", self.path));
        let host_len = engine::BackingDev::len(&*self.dev).map_err(io)?;
        let _shadow = self.dev.shadow();
        let len = self.file.len()?;
        let ps = 4096u64.max(engine_page_size());
        if len > 0 {
            // Hole punching drops pages whatever pins them (readers copy
            // the old bytes out or miss and read the new ones); the device
            // is shadowed, so nothing is deallocated on disk.
            self.file.punch_hole(0, len.div_ceil(ps) * ps)?;
        }
        if host_len != len {
            self.file.set_len(host_len)?;
        }
        Ok(())
    }
}

fn engine_page_size() -> u64 {
    CACHE.get().map_or(4096, |c| c.page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("x", "4096").unwrap(), 4096);
        assert_eq!(parse_size("x", "64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("x", "64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("x", "2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("x", "16kb").unwrap(), 16 << 10);
        for bad in ["", "M", "12X", "-1", "0", "1.5M", "99999999999999999999"] {
            assert!(parse_size("x", bad).is_err(), "{bad}");
        }
    }
}

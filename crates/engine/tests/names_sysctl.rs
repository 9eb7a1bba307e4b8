//! Names and run-time knobs: `PageCache::rename`, `evict`, `unlink_dev`
//! and the sysctls, as `pcache mount` uses them.

use std::sync::Arc;

use pcache::backing::MemoryDev;
use pcache::{Config, Error, Item, OpenOptions, PageCache};

fn cache(mem: u64) -> PageCache {
    PageCache::new(Config::with_memory(mem)).unwrap()
}

// Goal: a rename moves a cached file, dirty pages and open handles
// included, to its new name; a later unlink of the new name removes the
// renamed host file, not whatever now sits at the old name.
#[test]
fn rename_moves_a_cached_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let pc = cache(4 << 20);
    let f = pc.open(&a, OpenOptions::default()).unwrap();
    f.write_at(&[7u8; 10_000], 0).unwrap();
    pc.rename(&a, &b).unwrap();
    assert!(!a.exists() && b.exists());
    // The open handle writes on; fsync reaches the renamed file.
    f.write_at(&[9u8; 100], 10_000).unwrap();
    f.fsync().unwrap();
    let disk = std::fs::read(&b).unwrap();
    assert_eq!(disk.len(), 10_100);
    assert!(disk[..10_000].iter().all(|&x| x == 7) && disk[10_000..].iter().all(|&x| x == 9));
    // Opening the new name shares the cached pages.
    let g = pc.open(&b, OpenOptions::default()).unwrap();
    assert!(g.cached_pages() > 0);
    // A new file at the old name is a different file.
    std::fs::write(&a, b"other").unwrap();
    drop((f, g));
    pc.unlink(&b).unwrap();
    assert!(!b.exists());
    assert_eq!(std::fs::read(&a).unwrap(), b"other");
}

// Goal: renaming onto a cached file drops that file from the cache (its
// open handle still reads its own data) and the moved file answers to
// the name.
#[test]
fn rename_over_a_cached_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let pc = cache(4 << 20);
    let fa = pc.open(&a, OpenOptions::default()).unwrap();
    fa.write_at(b"from a", 0).unwrap();
    let fb = pc.open(&b, OpenOptions::default()).unwrap();
    fb.write_at(b"old b!", 0).unwrap();
    pc.rename(&a, &b).unwrap();
    let mut buf = [0u8; 6];
    fb.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"old b!");
    let again = pc.open(&b, OpenOptions::default()).unwrap();
    again.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"from a");
    drop((fa, fb, again));
    pc.sync_all().unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), b"from a");
    // A missing source is ENOENT and changes nothing.
    let e = pc.rename(dir.path().join("nope"), &b).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(b.exists());
}

// Goal: evict writes a closed file's dirty pages back before dropping it,
// and leaves a file with an open handle alone.
#[test]
fn evict_writes_back_then_drops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e");
    let name = path.to_string_lossy().into_owned();
    let pc = cache(4 << 20);
    let f = pc.open(&path, OpenOptions::default()).unwrap();
    f.write_at(&[3u8; 50_000], 0).unwrap();
    assert!(!pc.evict(&name).unwrap(), "evicted a file with an open handle");
    drop(f);
    let before = pc.vmstat().get(Item::nr_file_pages);
    assert!(before > 0);
    assert!(pc.evict(&name).unwrap());
    assert!(!pc.is_cached(&name));
    assert_eq!(pc.vmstat().get(Item::nr_dirty), 0);
    assert_eq!(std::fs::read(&path).unwrap(), vec![3u8; 50_000]);
    assert!(!pc.evict(&name).unwrap());
}

// Goal: unlink_dev drops a device-keyed file's pages (dirty ones too)
// after its last handle closes, and open handles keep working meanwhile.
#[test]
fn unlink_dev_discards_after_last_close() {
    let pc = cache(4 << 20);
    let f = pc.open_dev(Arc::new(MemoryDev::new("ud", 4096))).unwrap();
    f.write_at(&[1u8; 20_000], 0).unwrap();
    assert!(pc.unlink_dev("memory:ud").unwrap());
    assert!(!pc.is_cached("memory:ud"));
    let mut buf = [0u8; 4];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [1; 4]);
    drop(f);
    assert_eq!(pc.vmstat().get(Item::nr_dirty), 0);
    assert!(!pc.unlink_dev("memory:ud").unwrap());
}

// Goal: a sysctl write takes effect at once (the dirty threshold in
// vmstat follows it) and a bad value is refused with a typed error.
#[test]
fn sysctl_changes_thresholds_at_run_time() {
    let pc = cache(16 << 20); // 4096 pages
    assert!(pc.sysctl_names().contains(&"dirty_ratio"));
    pc.sysctl_write("dirty_ratio", "50\n").unwrap();
    assert_eq!(pc.sysctl_read("dirty_ratio").as_deref(), Some("50"));
    assert_eq!(pc.vmstat().get(Item::nr_dirty_threshold), 2048);
    pc.sysctl_write("dirty_bytes", &(1u64 << 20).to_string()).unwrap();
    assert_eq!(pc.sysctl_read("dirty_ratio").as_deref(), Some("0"));
    assert_eq!(pc.vmstat().get(Item::nr_dirty_threshold), 256);
    assert!(matches!(pc.sysctl_write("dirty_ratio", "200"), Err(Error::InvalidSysctl { .. })));
    assert!(matches!(pc.sysctl_write("overcommit_memory", "1"), Err(Error::UnknownSysctl { .. })));
    pc.sysctl_write("swappiness", "10").unwrap();
    assert_eq!(pc.sysctl_read("swappiness").as_deref(), Some("10"));
    assert!(matches!(pc.sysctl_write("swappiness", "101"), Err(Error::InvalidSysctl { .. })));
    assert_eq!(pc.sysctl_read("dirty_bytes").as_deref(), Some("1048576"));
    // read_ahead_kb seeds new handles' windows: with it at 0 a sequential
    // read does no readahead.
    pc.sysctl_write("read_ahead_kb", "0").unwrap();
    let f = pc.open_dev(Arc::new(MemoryDev::new("ra", 4096))).unwrap();
    f.write_at(&vec![5u8; 1 << 20], 0).unwrap();
    pc.sync_all().unwrap();
    pc.drop_caches();
    let g = pc.open_dev(Arc::new(MemoryDev::new("ra", 4096))).unwrap();
    let ra_before = pc.vmstat().get(Item::pgreadahead);
    let mut buf = vec![0u8; 4096];
    for i in 0..64u64 {
        g.read_at(&mut buf, i * 4096).unwrap();
    }
    assert_eq!(pc.vmstat().get(Item::pgreadahead), ra_before);
}

//! Files are cached by identity: every spelling of a path, every hard link
//! and every symlink to one host file share one cached copy and one
//! writeback, and unlink and rename by path keep working.

use std::os::unix::fs::MetadataExt;

use pcache::{Config, Item, OpenOptions, PageCache};

const PS: usize = 4096;

fn cache() -> PageCache {
    PageCache::new(Config::with_memory(8 << 20)).unwrap()
}

fn page(fill: u8) -> Vec<u8> {
    vec![fill; PS]
}

// Goal: a write through one name is seen by a read through every other
// name at once (one cache), and the file is written back once: the device
// receives each dirty page one time, and the disk holds every write.
// Fails when files are keyed by path text: four caches of one file, stale
// reads, and the last writeback of a stale copy wins.
#[test]
fn spellings_links_and_symlinks_share_one_cache() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    let dotted = dir.path().join(".").join("f");
    let link = dir.path().join("hard");
    let sym = dir.path().join("sym");
    let pc = cache();
    let a = pc.open(&f, OpenOptions::default()).unwrap();
    a.write_at(&page(1), 0).unwrap();
    std::fs::hard_link(&f, &link).unwrap();
    std::os::unix::fs::symlink(&f, &sym).unwrap();
    let names = [&dotted, &link, &sym];
    let handles: Vec<_> = names.iter().map(|p| pc.open(p, OpenOptions::default()).unwrap()).collect();
    for (i, h) in handles.iter().enumerate() {
        let mut buf = vec![0u8; PS];
        h.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, page(1), "{} does not see the write through f", names[i].display());
        // Each name writes its own page.
        h.write_at(&page(2 + i as u8), ((i + 1) * PS) as u64).unwrap();
        assert_eq!(h.cached_pages(), a.cached_pages());
    }
    let mut buf = vec![0u8; PS];
    a.read_at(&mut buf, (3 * PS) as u64).unwrap();
    assert_eq!(buf, page(4), "f sees the write through the symlink");
    assert_eq!(a.len().unwrap(), 4 * PS as u64);

    let before = pc.vmstat().get(Item::pgwriteback);
    pc.sync_all().unwrap();
    assert_eq!(pc.vmstat().get(Item::pgwriteback) - before, 4, "each dirty page written once");
    let disk = std::fs::read(&f).unwrap();
    let want: Vec<u8> = [page(1), page(2), page(3), page(4)].concat();
    assert_eq!(disk, want);
    assert!(pc.is_cached(&link.to_string_lossy()));
}

// Goal: unlinking one hard link keeps the file and its cache (the other
// name still reads it, dirty data included, and it reaches the disk);
// unlinking the last name drops it once the last handle closes.
#[test]
fn unlink_of_one_link_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (f, link) = (dir.path().join("f"), dir.path().join("link"));
    let pc = cache();
    let a = pc.open(&f, OpenOptions::default()).unwrap();
    a.write_at(&page(7), 0).unwrap();
    std::fs::hard_link(&f, &link).unwrap();
    // The device was opened by `f`: unlinking that name must not strand it.
    pc.unlink(&f).unwrap();
    assert!(!f.exists());
    let b = pc.open(&link, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; PS];
    b.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, page(7));
    a.write_at(&page(8), PS as u64).unwrap();
    pc.drop_caches();
    b.fsync().unwrap();
    assert_eq!(std::fs::read(&link).unwrap(), [page(7), page(8)].concat());
    // The last name goes: the file leaves the cache with its last handle.
    pc.unlink(&link).unwrap();
    assert!(!pc.is_cached(&link.to_string_lossy()));
    a.write_at(&page(9), 0).unwrap(); // still works on the unlinked file
    drop((a, b));
    assert_eq!(pc.vmstat().get(Item::nr_file_pages), 0);
}

// Goal: renaming any name of a cached file (even one it was not opened
// by) keeps its cache and lets its writeback find it; the handle keeps
// working after the name it was opened by is renamed away and the
// descriptor cache has closed its descriptor.
#[test]
fn rename_of_any_name_keeps_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (f, g) = (dir.path().join("f"), dir.path().join("g"));
    let pc = PageCache::new(Config {
        memory_bytes: 8 << 20,
        tunables: pcache::Tunables { max_open_fds: 4, ..Default::default() },
        ..Config::default()
    })
    .unwrap();
    let a = pc.open(dir.path().join(".").join("f"), OpenOptions::default()).unwrap();
    a.write_at(&page(3), 0).unwrap();
    pc.rename(&f, &g).unwrap();
    // Push the file's descriptor out of the bounded descriptor cache.
    let others: Vec<_> =
        (0..8).map(|i| pc.open(dir.path().join(format!("o{i}")), OpenOptions::default()).unwrap()).collect();
    for o in &others {
        o.write_at(b"x", 0).unwrap();
        o.fsync().unwrap();
    }
    a.write_at(&page(4), PS as u64).unwrap();
    a.fsync().unwrap();
    assert_eq!(std::fs::read(&g).unwrap(), [page(3), page(4)].concat());
    let ino = std::fs::metadata(&g).unwrap().ino();
    let b = pc.open(&g, OpenOptions::default()).unwrap();
    assert_eq!(b.cached_pages(), a.cached_pages());
    assert_eq!(std::fs::metadata(&g).unwrap().ino(), ino);
}

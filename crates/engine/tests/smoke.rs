//! Basic behaviour: data written is read back, through eviction and
//! writeback, on memory and real files.

use pcache::{Config, OpenOptions, PageCache, Tunables};

fn small_cache(pages: u64) -> PageCache {
    PageCache::new(Config { memory_bytes: pages * 4096, ..Config::default() }).unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8).collect()
}

// Goal: a round trip through the cache with no memory pressure.
#[test]
fn memory_roundtrip() {
    let cache = small_cache(256);
    let f = cache.open_memory("a").unwrap();
    let data = pattern(1, 10_000);
    assert_eq!(f.write_at(&data, 100).unwrap(), data.len());
    assert_eq!(f.len().unwrap(), 10_100);
    let mut buf = vec![0u8; 10_100];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 10_100);
    assert!(buf[..100].iter().all(|&b| b == 0));
    assert_eq!(&buf[100..], &data[..]);
    // Past EOF reads nothing.
    assert_eq!(f.read_at(&mut buf, 20_000).unwrap(), 0);
}

// Goal: a file 8x the cache is written and read back: pages are evicted,
// written back and re-read constantly.
#[test]
fn roundtrip_under_pressure() {
    for kswapd in [true, false] {
        let cache = PageCache::new(Config {
            memory_bytes: 64 * 4096,
            tunables: Tunables { kswapd, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let f = cache.open(dir.path().join("big"), OpenOptions::default()).unwrap();
        let data = pattern(2, 512 * 4096);
        for (i, chunk) in data.chunks(10_000).enumerate() {
            f.write_at(chunk, (i * 10_000) as u64).unwrap();
        }
        let mut buf = vec![0u8; data.len()];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), data.len());
        if let Some(at) = (0..data.len()).find(|&i| buf[i] != data[i]) {
            let bad = (at..data.len()).take_while(|&i| buf[i] != data[i]).count();
            panic!(
                "data mismatch (kswapd={kswapd}) at {at} (page {}), {bad} bytes; got {:?}",
                at / 4096,
                &buf[at..at + 8]
            );
        }
        f.fsync().unwrap();
        let vm = cache.vmstat();
        assert!(vm.by_name("pgsteal_direct").unwrap() + vm.by_name("pgsteal_kswapd").unwrap() > 0);
        assert!(vm.by_name("nr_free_pages").unwrap() <= 64);
        drop(f);
        // The bytes are on the host file.
        let on_disk = std::fs::read(dir.path().join("big")).unwrap();
        assert!(on_disk == data);
    }
}

//! What the criterion benches share: a cache holding one memory file of
//! `PAGES` pages, every page read twice (active and hot).

use pcache::{Config, PageCache, Tunables};

/// Pages of the file, all cached: 16 MiB, so lookups stay in L2/L3.
pub const PAGES: u64 = 4096;

pub fn cache(tunables: Tunables) -> (PageCache, pcache::File) {
    let cache = PageCache::new(Config {
        memory_bytes: 64 << 20,
        nr_cpus: 1,
        // No readahead (every page read on its own), but for large
        // folios, which readahead makes: 2 MiB windows, so they reach
        // order 9.
        tunables: Tunables {
            kswapd: false,
            ra_pages: if tunables.page_cache_order_max() > 0 { 512 } else { 0 },
            ..tunables
        },
        ..Config::default()
    })
    .expect("cache");
    let f = cache.open_memory("f").expect("file");
    f.set_len(PAGES * 4096).expect("set_len");
    let mut buf = [0u8; 4096];
    // Twice: every page active and hot.
    for _ in 0..2 {
        for i in 0..PAGES {
            f.read_at(&mut buf, i * 4096).expect("read");
        }
    }
    (cache, f)
}

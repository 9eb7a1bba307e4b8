use pcache::{Config, MapFlags, PageCache};
use pcache_workloads::zipf::ZipfKeys;
use std::hint::black_box;
use std::time::Instant;
fn main() {
    let pages: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1 << 20);
    let cache = PageCache::new(Config::with_memory(pages * 4096 + (64 << 20))).unwrap();
    let file = cache.open_memory("h").unwrap();
    file.set_len(pages * 4096).unwrap();
    for i in 0..pages {
        drop(file.get_page(i).unwrap());
    }
    cache.lru_add_drain_all();
    let map = file.map(0, pages * 4096, MapFlags::READ).unwrap();
    for i in 0..pages {
        drop(map.page(i).unwrap());
    }
    let keys = ZipfKeys::new(pages, 0.99, 7).unwrap().generate(2_000_000, 9);
    for _ in 0..10 {
        let t = Instant::now();
        for &k in &keys {
            let p = map.page(k).unwrap();
            black_box(p.load_u64(0).unwrap());
        }
        let e = t.elapsed();
        println!("{:.1} ns", e.as_nanos() as f64 / keys.len() as f64);
    }
    println!(
        "{}",
        std::fs::read_to_string("/proc/self/smaps_rollup")
            .unwrap()
            .lines()
            .filter(|l| l.contains("Huge"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

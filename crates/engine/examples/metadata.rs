//! Metadata per frame: what the engine holds besides its frame arena
//! after reading a dense file through 4x a cache of 256 MiB and of 1 GiB
//! (in single pages, and in large folios: `folio_order_max` 9 with 2 MiB
//! readahead windows, so a stream reaches order 9), and after random
//! 4 KiB reads over a sparse 64 GiB file of 2x and 8x the cache.
//!
//! ```sh
//! cargo run --release -p pcache --example metadata              # every case
//! cargo run --release -p pcache --example metadata -- sparse 8   # one case
//! cargo run --release -p pcache --example metadata -- dense 4 9  # at order 9
//! cargo run --release -p pcache --example metadata -- dense 4 9 1024  # 1 GiB
//! ```
//!
//! Each case runs in its own process (the example spawns itself), so the
//! resident set of one does not carry into the next. Two figures per case:
//! the engine's own count of page-tree node bytes (vmstat
//! `pagetree_node_bytes`, when the engine has it), and the process's
//! resident set beyond the arena (VmRSS after the reads, less VmRSS before
//! the cache was built, less the arena), which also holds the 32-byte page
//! descriptors and everything else the engine allocates.

use pcache::{Config, PageCache, Tunables};

const PAGE: u64 = 4096;

fn vm_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// xorshift64*: a fixed, dependency-free stream of page indices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn run_case(kind: &str, times: u64, order: u32, mib: u64) {
    let cache_bytes = mib << 20;
    let rss_before = vm_rss_bytes();
    let tunables = if order > 0 {
        Tunables { folio_order_max: order, ra_pages: 512, ..Tunables::default() }
    } else {
        Tunables::default()
    };
    let cache = PageCache::new(Config { memory_bytes: cache_bytes, tunables, ..Config::default() }).expect("cache");
    let frames = cache_bytes / PAGE;
    let f = cache.open_memory("f").expect("file");
    let mut buf = vec![0u8; PAGE as usize];
    let reads = frames * times;
    match kind {
        "dense" => {
            f.set_len(reads * PAGE).expect("set_len");
            for i in 0..reads {
                f.read_at(&mut buf, i * PAGE).expect("read");
            }
        }
        "sparse" => {
            let pages = (64u64 << 30) / PAGE;
            f.set_len(pages * PAGE).expect("set_len");
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            for _ in 0..reads {
                f.read_at(&mut buf, (rng.next() % pages) * PAGE).expect("read");
            }
        }
        _ => {
            eprintln!("unknown case {kind}: dense or sparse");
            std::process::exit(2);
        }
    }
    let vm = cache.vmstat();
    let rss_beyond = vm_rss_bytes().saturating_sub(rss_before).saturating_sub(cache_bytes);
    let node_bytes = vm.by_name("pagetree_node_bytes");
    let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    println!(
        "{kind:>6} {times}x order {order} {mib} MiB  frames {frames}  nodes {:>7}  node B/frame {:>6}  workingset_nodes {:>6}  shadows {:>7}  RSS beyond arena B/frame {:>6}",
        show(vm.by_name("nr_pagetree_nodes")),
        show(node_bytes.map(|b| b / frames)),
        show(vm.by_name("workingset_nodes")),
        show(vm.by_name("nr_workingset_shadows")),
        rss_beyond / frames,
    );
    if order > 0 {
        println!(
            "{kind:>6} {times}x order {order}  large folios {} (fallbacks {}) for {} pages read ahead",
            show(vm.by_name("thp_file_alloc")),
            show(vm.by_name("thp_file_fallback")),
            show(vm.by_name("pgreadahead")),
        );
    }
    // Cut to nothing: the tree's nodes and their chunks all go back.
    f.set_len(0).expect("truncate");
    let vm = cache.vmstat();
    println!(
        "{kind:>6} {times}x order {order}  after set_len(0): nodes {}  node bytes {}",
        show(vm.by_name("nr_pagetree_nodes")),
        show(vm.by_name("pagetree_node_bytes"))
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let (Some(kind), Some(times)) = (args.get(1), args.get(2).and_then(|t| t.parse::<u64>().ok())) {
        let order = args.get(3).and_then(|o| o.parse::<u32>().ok()).unwrap_or(0);
        let mib = args.get(4).and_then(|m| m.parse::<u64>().ok()).unwrap_or(256);
        run_case(kind, times, order, mib);
        return;
    }
    let me = std::env::current_exe().expect("own path");
    let cases = [
        ("dense", 4, 0, 256),
        ("dense", 4, 9, 256),
        ("dense", 4, 0, 1024),
        ("dense", 4, 9, 1024),
        ("sparse", 2, 0, 256),
    ];
    for (kind, times, order, mib) in cases.into_iter().chain([("sparse", 8, 0, 256)]) {
        let status = std::process::Command::new(&me)
            .args([kind.to_string(), times.to_string(), order.to_string(), mib.to_string()])
            .status()
            .expect("spawn");
        if !status.success() {
            eprintln!("{kind} {times}x failed: {status}");
            std::process::exit(1);
        }
    }
}

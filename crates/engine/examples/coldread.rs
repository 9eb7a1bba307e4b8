//! Profiling aid: one cold sequential read of a host file
//! through a fresh cache, in `read_at` calls of a given size, with the
//! readahead and I/O counters it moved.
//!
//! `cargo run --release -p pcache --example coldread -- FILE [CALL_KIB] [MEM_MIB] [TUNABLE=VALUE]...`

mod util;

use std::time::Instant;

use util::cpu_secs;

use pcache::{Config, OpenOptions, PageCache, Tunables};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: coldread FILE [CALL_KIB] [MEM_MIB] [TUNABLE=VALUE]...")?;
    let call: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1024) << 10;
    let mem: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(128) << 20;
    let sets: Vec<(&str, &str)> = args.iter().skip(4).filter_map(|kv| kv.split_once('=')).collect();
    let t = Tunables::default().with_sets(sets)?;
    let cache = PageCache::new(Config { tunables: t, ..Config::with_memory(mem) })?;
    // As seqread does: time the read on a resident arena, not its first touch.
    cache.wait_arena_populated(std::time::Duration::from_secs(30));
    let f = cache.open(std::path::Path::new(path), OpenOptions { create: false, truncate: false, direct: true })?;
    let before = cache.vmstat();
    let (thread0, proc0) = (cpu_secs(libc::RUSAGE_THREAD), cpu_secs(libc::RUSAGE_SELF));
    let mut buf = vec![0u8; call];
    let (mut pos, start) = (0u64, Instant::now());
    loop {
        let n = f.read_at(&mut buf, pos)?;
        if n == 0 {
            break;
        }
        pos += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let (thread, all) = (cpu_secs(libc::RUSAGE_THREAD) - thread0, cpu_secs(libc::RUSAGE_SELF) - proc0);
    println!("{} MiB in {:.3} s: {:.0} MB/s", pos >> 20, secs, pos as f64 / secs / 1e6);
    // CPU per MiB read: the reader's own, and every other thread's
    // (kswapd, the I/O threads or the ring's reaper, the pre-fault).
    let mib = (pos >> 20).max(1) as f64;
    println!("  cpu us/MiB: reader {:.0}, other threads {:.0}", thread / mib * 1e6, (all - thread) / mib * 1e6);
    for (k, v) in cache.vmstat().delta(&before).iter() {
        if v != 0
            && (k.starts_with("ra_")
                || k.starts_with("uring")
                || k.starts_with("pg")
                || k.contains("kswapd")
                || k.contains("direct")
                || k.contains("steal")
                || k.contains("scan"))
        {
            println!("  {k} {v}");
        }
    }
    f.close()?;
    Ok(())
}

//! Profiling aid for large folios: what writing into them and faulting
//! them in costs, against single pages, with the counters it moved.
//!
//! `cargo run --release -p pcache --example folios -- write FILE [MEM_MIB] [TUNABLE=VALUE]...`:
//! read FILE into a fresh cache (it must fit), overwrite it in 1 MiB
//! `write_at` calls, then `fsync`: the writer's CPU per MiB, and the
//! writeback's (the fsync's wall time and every other thread's CPU).
//!
//! `cargo run --release -p pcache --example folios -- anon MIB [TUNABLE=VALUE]...`:
//! first-touch an anonymous region of MIB MiB, one 8-byte write per page:
//! faults and CPU per MiB.
//!
//! `cargo run --release -p pcache --example folios -- swap MIB SWAPFILE [TUNABLE=VALUE]...`:
//! write one word to each page of an anonymous region of MIB MiB through
//! a 256 MiB cache swapping to SWAPFILE (O_DIRECT, 2 x MIB), then read
//! them all back: each phase's wall time and CPU per MiB (the thread's,
//! which reclaims directly, and kswapd's), and the swap counters.
//!
//! `cargo run --release -p pcache --example folios -- frag OPS [TUNABLE=VALUE]...`:
//! fragmentation under a long mixed workload (streams, random reads,
//! writes, truncations over files twice a 256 MiB cache, at order 9): how
//! often readahead got the order it wanted, and the buddy lists after.

mod util;

use std::time::Instant;

use util::cpu_secs;

use pcache::{Config, Item, OpenOptions, PageCache, Tunables};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: folios write FILE [MEM_MIB] [T=V]... | folios anon MIB [T=V]... \
                 | folios swap MIB SWAPFILE [T=V]... | folios frag OPS [T=V]...";
    match args.get(1).map(String::as_str) {
        Some("write") => {
            let path = args.get(2).ok_or(usage)?;
            let mem: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(512) << 20;
            write(path, mem, tunables(&args[4.min(args.len())..])?)
        }
        Some("anon") => {
            let mib: u64 = args.get(2).ok_or(usage)?.parse()?;
            anon(mib, tunables(&args[3.min(args.len())..])?)
        }
        Some("swap") => {
            let mib: u64 = args.get(2).ok_or(usage)?.parse()?;
            let path = args.get(3).ok_or(usage)?;
            swap(mib, path, tunables(&args[4.min(args.len())..])?)
        }
        Some("frag") => {
            let ops: u64 = args.get(2).ok_or(usage)?.parse()?;
            frag(ops, tunables(&args[3.min(args.len())..])?)
        }
        _ => Err(usage.into()),
    }
}

fn tunables(sets: &[String]) -> Result<Tunables, pcache::Error> {
    Tunables::default().with_sets(sets.iter().filter_map(|kv| kv.split_once('=')))
}

fn write(path: &str, mem: u64, t: Tunables) -> Result<(), Box<dyn std::error::Error>> {
    let cache = PageCache::new(Config { tunables: t, ..Config::with_memory(mem) })?;
    cache.wait_arena_populated(std::time::Duration::from_secs(30));
    let f = cache.open(std::path::Path::new(path), OpenOptions { create: false, truncate: false, direct: true })?;
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read_at(&mut buf, size)?;
        if n == 0 {
            break;
        }
        size += n as u64;
    }
    let mib = (size >> 20).max(1) as f64;
    let before = cache.vmstat();
    let (thread0, proc0) = (cpu_secs(libc::RUSAGE_THREAD), cpu_secs(libc::RUSAGE_SELF));
    let start = Instant::now();
    let mut pos = 0u64;
    while pos < size {
        buf.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        pos += f.write_at(&buf[..(size - pos).min(buf.len() as u64) as usize], pos)? as u64;
    }
    let written = start.elapsed().as_secs_f64();
    let thread1 = cpu_secs(libc::RUSAGE_THREAD);
    f.fsync()?;
    let synced = start.elapsed().as_secs_f64() - written;
    let (thread, all) = (cpu_secs(libc::RUSAGE_THREAD) - thread0, cpu_secs(libc::RUSAGE_SELF) - proc0);
    println!(
        "{} MiB overwritten in {written:.3} s ({:.0} MB/s), fsync {synced:.3} s",
        size >> 20,
        size as f64 / written / 1e6
    );
    println!(
        "  cpu us/MiB: writer {:.0} (fsync's share {:.0}), other threads {:.0}",
        thread / mib * 1e6,
        (thread - (thread1 - thread0)) / mib * 1e6,
        (all - thread) / mib * 1e6
    );
    print_counters(&cache, &before, &["pgwriteback", "pgpgout", "thp_", "wb_", "nr_vmscan_write"]);
    f.close()?;
    Ok(())
}

fn anon(mib: u64, t: Tunables) -> Result<(), Box<dyn std::error::Error>> {
    let cache = PageCache::new(Config { tunables: t, ..Config::with_memory((mib + 64) << 20) })?;
    cache.wait_arena_populated(std::time::Duration::from_secs(30));
    let m = cache.map_anon(mib << 20)?;
    let before = cache.vmstat();
    let cpu0 = cpu_secs(libc::RUSAGE_THREAD);
    let start = Instant::now();
    for page in 0..m.nr_pages() {
        m.write(page * 4096, &page.to_ne_bytes())?;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs(libc::RUSAGE_THREAD) - cpu0;
    let faults = cache.vmstat().get(Item::pgfault) - before.get(Item::pgfault);
    println!("{mib} MiB first-touched in {secs:.3} s: {faults} faults, cpu {:.0} us/MiB", cpu / mib as f64 * 1e6);
    print_counters(&cache, &before, &["mthp_", "pgalloc"]);
    Ok(())
}

fn swap(mib: u64, path: &str, t: Tunables) -> Result<(), Box<dyn std::error::Error>> {
    let cache = PageCache::new(Config { tunables: t, ..Config::with_memory(256 << 20) })?;
    cache.wait_arena_populated(std::time::Duration::from_secs(30));
    cache.swapon(pcache::SwapConfig::file(path, 2 * (mib << 20)))?;
    let m = cache.map_anon(mib << 20)?;
    let before = cache.vmstat();
    let phase = |name: &str, touch: &dyn Fn(u64) -> pcache::Result<()>| -> pcache::Result<()> {
        let (thread0, proc0) = (cpu_secs(libc::RUSAGE_THREAD), cpu_secs(libc::RUSAGE_SELF));
        let start = Instant::now();
        for page in 0..m.nr_pages() {
            touch(page)?;
        }
        let secs = start.elapsed().as_secs_f64();
        let (thread, all) = (cpu_secs(libc::RUSAGE_THREAD) - thread0, cpu_secs(libc::RUSAGE_SELF) - proc0);
        println!(
            "{name}: {mib} MiB in {secs:.3} s, cpu us/MiB: this thread {:.0}, others {:.0}",
            thread / mib as f64 * 1e6,
            (all - thread) / mib as f64 * 1e6
        );
        Ok(())
    };
    phase("swap-out", &|page| m.write(page * 4096, &page.to_ne_bytes()))?;
    phase("swap-in", &|page| {
        let mut w = [0u8; 8];
        m.read(page * 4096, &mut w)?;
        assert_eq!(u64::from_ne_bytes(w), page, "page {page}");
        Ok(())
    })?;
    print_counters(&cache, &before, &["mthp_", "pswp", "thp_split", "swap_ra", "pgmajfault"]);
    Ok(())
}

fn frag(ops: u64, t: Tunables) -> Result<(), Box<dyn std::error::Error>> {
    let t = Tunables { folio_order_max: pcache::FOLIO_ORDER_MAX_6, ra_pages: 512, ..t };
    let cache = PageCache::new(Config { tunables: t, ..Config::with_memory(256 << 20) })?;
    // Eight 64 MiB files and 64 of 1 MiB: twice the cache.
    let big: Vec<_> = (0..8).map(|i| cache.open_memory(&format!("big{i}"))).collect::<Result<_, _>>()?;
    let small: Vec<_> = (0..64).map(|i| cache.open_memory(&format!("small{i}"))).collect::<Result<_, _>>()?;
    for f in &big {
        f.set_len(64 << 20)?;
    }
    for f in &small {
        f.set_len(1 << 20)?;
    }
    let before = cache.vmstat();
    let (mut x, mut buf) = (0x9e37_79b9_7f4a_7c15u64, vec![0u8; 1 << 20]);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..ops {
        let r = next();
        let f = &big[(r % 8) as usize];
        let at = (next() % (64 << 20)) & !4095;
        match r % 10 {
            // A stream of 4 MiB: readahead ramps up to order 9.
            0..=2 => {
                let start = at.min((60 << 20) as u64);
                for k in 0..4 {
                    f.read_at(&mut buf, start + (k << 20))?;
                }
            }
            3..=6 => {
                f.read_at(&mut buf[..4096], at)?;
            }
            7 | 8 => {
                f.write_at(&buf[..64 << 10], at.min((64 << 20) - (64 << 10)))?;
            }
            _ => {
                let s = &small[(next() % 64) as usize];
                s.set_len(0)?;
                s.write_at(&buf[..(next() % (1 << 20)) as usize + 1], 0)?;
            }
        }
    }
    let vm = cache.vmstat().delta(&before);
    let (alloc, fallback) = (vm.get(Item::thp_file_alloc), vm.get(Item::thp_file_fallback));
    println!(
        "{ops} ops: {alloc} large folios, {fallback} orders refused ({:.1}% of tries), {} split",
        fallback as f64 * 100.0 / (alloc + fallback).max(1) as f64,
        vm.get(Item::thp_split_page)
    );
    let b = cache.buddyinfo();
    println!("  free blocks by order: {:?} (+{} on per-CPU lists)", b.free_blocks, b.pcp_frames);
    println!("  unusable (per mille) at orders 4 / 9: {} / {}", b.unusable[4], b.unusable[9]);
    println!("  fragmentation index at orders 4 / 9: {} / {}", b.fragmentation[4], b.fragmentation[9]);
    Ok(())
}

fn print_counters(cache: &PageCache, before: &pcache::VmStat, prefixes: &[&str]) {
    for (k, v) in cache.vmstat().delta(before).iter() {
        if v != 0 && prefixes.iter().any(|p| k.starts_with(p)) {
            println!("  {k} {v}");
        }
    }
}

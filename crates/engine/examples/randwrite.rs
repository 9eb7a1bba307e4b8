//! Profiling aid: the random-read and dd-write forms
//! of `pcache bench seqread` alone, for `perf record`, with the counters
//! they moved.
//!
//! `cargo run --release -p pcache --example randwrite -- rand FILE THREADS OPS [MEM_MIB] [TUNABLE=VALUE]...`
//! reads OPS random 4 KiB pages per thread (each page at most once) of an
//! existing FILE; `... -- dd FILE MIB [MEM_MIB] [TUNABLE=VALUE]...` writes
//! MIB MiB to a new FILE in 1 MiB calls, then fdatasync (the write
//! calls' and the fdatasync's times apart). With `RW_ALL` set in the
//! environment every non-zero counter is printed, not only the I/O ones.

mod util;

use util::cpu_secs;

use std::time::Instant;

use pcache::{Config, OpenOptions, PageCache, Tunables};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: randwrite rand FILE THREADS OPS [MEM_MIB] [K=V]... | dd FILE MIB [MEM_MIB] [K=V]...";
    let mode = args.get(1).ok_or(usage)?.as_str();
    let path = std::path::Path::new(args.get(2).ok_or(usage)?);
    let nums: Vec<u64> = args.iter().skip(3).map_while(|s| s.parse().ok()).collect();
    let sets: Vec<(&str, &str)> = args.iter().skip(3).filter_map(|kv| kv.split_once('=')).collect();
    let t = Tunables::default().with_sets(sets)?;
    let (mem, bytes, start);
    let cache;
    match mode {
        "rand" => {
            let (threads, ops) = (*nums.first().ok_or(usage)? as usize, *nums.get(1).ok_or(usage)?);
            mem = nums.get(2).copied().unwrap_or(128) << 20;
            cache = PageCache::new(Config { tunables: t, ..Config::with_memory(mem) })?;
            // As seqread does: time the reads on a resident arena, not its
            // first touches (the host zeroing huge pages).
            cache.wait_arena_populated(std::time::Duration::from_secs(30));
            // Cold in the host's cache too: a device reading through it
            // (dev_read_mode=Dontcache) must not find pages cached there.
            drop_host_cache(path)?;
            let f = cache.open(path, OpenOptions { create: false, truncate: false, direct: true })?;
            let pages = std::fs::metadata(path)?.len() / 4096;
            // A multiplicative permutation of the pages: no page twice.
            let step = (0..).map(|k| 0x9e37_79b9u64 + 2 * k).find(|s| gcd(*s, pages) == 1).unwrap_or(1);
            let handles = (0..threads).map(|_| f.reopen()).collect::<pcache::Result<Vec<_>>>()?;
            let ops = ops.min(pages / threads as u64);
            let cpu0 = cpu_secs(libc::RUSAGE_SELF);
            start = Instant::now();
            std::thread::scope(|s| -> Res<()> {
                let joins: Vec<_> = handles
                    .iter()
                    .enumerate()
                    .map(|(k, h)| {
                        s.spawn(move || -> Res<()> {
                            let mut buf = vec![0u8; 4096];
                            for i in 0..ops {
                                let page = ((k as u64 * ops + i) * step) % pages;
                                h.read_at(&mut buf, page * 4096)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for j in joins {
                    j.join().map_err(|_| "reader panicked")??;
                }
                Ok(())
            })?;
            bytes = ops * threads as u64 * 4096;
            let secs = start.elapsed().as_secs_f64();
            let reads = bytes / 4096;
            let cpu_us = (cpu_secs(libc::RUSAGE_SELF) - cpu0) * 1e6 / reads as f64;
            println!(
                "{reads} reads in {secs:.3} s: {:.1} k reads/s, {cpu_us:.1} us CPU per read",
                reads as f64 / secs / 1e3
            );
        }
        "dd" => {
            let mib = *nums.first().ok_or(usage)?;
            mem = nums.get(1).copied().unwrap_or(128) << 20;
            cache = PageCache::new(Config { tunables: t, ..Config::with_memory(mem) })?;
            let f = cache.open(path, OpenOptions { create: true, truncate: true, direct: true })?;
            let chunk = vec![0x5au8; 1 << 20];
            start = Instant::now();
            for m in 0..mib {
                f.write_at(&chunk, m << 20)?;
            }
            let writes = start.elapsed().as_secs_f64();
            f.fdatasync()?;
            bytes = mib << 20;
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{mib} MiB in {secs:.3} s: {:.0} MB/s (writes {writes:.3} s, fdatasync {:.3} s)",
                bytes as f64 / secs / 1e6,
                secs - writes
            );
            f.close()?;
            std::fs::remove_file(path)?;
        }
        _ => return Err(usage.into()),
    }
    let all = std::env::var_os("RW_ALL").is_some();
    for (k, v) in cache.vmstat().iter() {
        if v != 0
            && (all
                || k.starts_with("ra_")
                || k.starts_with("wb_")
                || k.starts_with("uring")
                || k.starts_with("pg")
                || k.contains("balance")
                || k.contains("flusher")
                || k.contains("direct")
                || k.contains("steal")
                || k.contains("scan"))
        {
            println!("  {k} {v}");
        }
    }
    Ok(())
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Drop `path`'s pages from the host's page cache.
fn drop_host_cache(path: &std::path::Path) -> Res<()> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::File::open(path)?;
    // SAFETY: advice on our own descriptor; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc).into());
    }
    Ok(())
}

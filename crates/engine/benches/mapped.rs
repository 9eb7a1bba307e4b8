//! Micro-benchmark of a mapped access with the page present:
//! `Mapping::page` (load the entry, hazard pin, re-check, young
//! byte), one 8-byte load through the guard (`MappedPage::load_u64`), and
//! the guard's drop (unpin), on Zipf(0.99) keys scrambled over 16 Ki
//! mapped pages (64 MiB), as benches/hit.rs and `pcache bench hitpath`
//! draw them, each key reading the word at a hashed offset of its page
//! (`Mapping::bench_word_offset`, as hitpath). From 1 thread and from 2 threads at once: each "iteration"
//! of the 2-thread row is one access on each thread, so the throughput
//! ratio of 2 threads to 1 is `2 * t(1 thread) / t(2 threads)`. Then the
//! same with a validated 4 KiB copy (`read_into`), for comparison with
//! `hit/pageref_read_into_4k`. Last, the best of 15 rounds of each
//! `load_u64` row, printed, beside the kernel's own mapped page cache on
//! the same keys (an 8-byte load from a populated shared mapping of a
//! memfd of the same size), so the two figures come from the same run,
//! and `Mapping::load_u64_many` on the same keys, 64 per call. Beside it,
//! the batched access's floor (`Mapping::load_u64_many_steps` with no
//! step of the pin protocol: the entry and the word alone, on the same
//! prefetch schedule, which any software page table must do) and the
//! access with one step left out at a time (young byte, re-check,
//! announcement), so each step's cost shows against the kernel's.
//!
//! `MAPPED_BENCH_MIB` sets the mapping's size (a power of two, default
//! 64); `hitpath`'s rows use 4 GiB, where the page table and the frames
//! no longer fit in the CPU's caches:
//!
//! ```sh
//! cargo bench -p pcache --bench mapped
//! MAPPED_BENCH_MIB=4096 cargo bench -p pcache --bench mapped -- best_of   # only the printed rows
//! MAPPED_BENCH_ONLY=many MAPPED_BENCH_MIB=4096 cargo bench -p pcache --bench mapped -- best_of
//! # (the last: the kernel and batched rows only)
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pcache::{Config, LoadSteps, MapFlags, Mapping, PageCache, Tunables};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Mapped pages, all present: 64 MiB unless `MAPPED_BENCH_MIB` says
/// otherwise (a power of two, for the scramble).
fn pages() -> u64 {
    let mib: u64 = std::env::var("MAPPED_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    assert!(mib.is_power_of_two(), "MAPPED_BENCH_MIB must be a power of two");
    mib * 256
}
/// Keys drawn per thread, cycled (a power of two).
const KEYS: usize = 1 << 20;

/// Each key's byte position in the mapping: its page's start plus
/// `Mapping::bench_word_offset` (a hashed word of the page, as hitpath
/// reads: keys spread over their pages, not all in one L1 set). Every row reads these (the single accesses split them
/// into page and offset), so none pays for the hash in its loop.
fn positions(keys: &[u64]) -> Vec<u64> {
    keys.iter().map(|&p| p * 4096 + Mapping::bench_word_offset(p)).collect()
}

/// Zipf(s) ranks over `n` keys by inverse CDF, scrambled by an odd
/// multiplier modulo the power of two `n` (a permutation), so hot keys are
/// spread over the mapping rather than clustered at its start.
fn zipf_keys(n: u64, s: f64, count: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut sum = 0.0;
    for k in 1..=n {
        sum += 1.0 / (k as f64).powf(s);
        cdf.push(sum);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let u = rng.gen::<f64>() * sum;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            rank.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) & (n - 1)
        })
        .collect()
}

fn mapped_cache(pages: u64) -> (PageCache, pcache::File, Mapping) {
    let cache = PageCache::new(Config {
        memory_bytes: (pages + 4096) * 4096,
        tunables: Tunables { kswapd: false, ra_pages: 0, ..Tunables::default() },
        ..Config::default()
    })
    .expect("cache");
    let f = cache.open_memory("m").expect("file");
    f.set_len(pages * 4096).expect("set_len");
    let m = f.map(0, pages * 4096, MapFlags::READ).expect("map");
    // Fault every page in: every entry present.
    for i in 0..pages {
        m.page(i).expect("fault");
    }
    (cache, f, m)
}

/// The kernel's mapped page cache: a memfd of `pages` pages, mapped
/// shared and populated, each page's first word written once (the pages
/// `MAP_POPULATE` mapped; the words read are zero or that one).
struct KernelMap {
    ptr: *mut u64,
    len: usize,
}

// SAFETY: only read after `new` (plain loads of words nobody writes), and
// unmapped by Drop: as shareable as the `&[u64]` it stands for.
unsafe impl Sync for KernelMap {}

impl KernelMap {
    fn new(pages: u64) -> KernelMap {
        let len = pages as usize * 4096;
        // SAFETY: a valid NUL-terminated name; the fd is closed below.
        let fd = unsafe { libc::memfd_create(c"pcache-bench".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: our fd; a length that fits off_t.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0, "ftruncate");
        // SAFETY: a fresh shared mapping of our memfd; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        // SAFETY: our fd, closed once; the mapping keeps the memory.
        unsafe { libc::close(fd) };
        let ptr = ptr.cast::<u64>();
        for page in 0..pages as usize {
            // SAFETY: inside the mapping, page aligned; not shared yet.
            unsafe { ptr.add(page * 512).write(page as u64 + 1) };
        }
        KernelMap { ptr, len }
    }

    /// The aligned word at byte `pos` (a `positions` entry).
    #[inline]
    fn load(&self, pos: u64) -> u64 {
        let word = pos as usize / 8;
        assert!(word * 8 < self.len, "in the mapping");
        // SAFETY: in bounds (checked), aligned (a word index), never
        // written after `new`.
        unsafe { self.ptr.add(word).read() }
    }
}

impl Drop for KernelMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `iters` accesses on each of `threads` threads, each on its own key
/// stream; the wall time of the slowest.
fn run<M: Sync>(m: &M, keys: &[Vec<u64>], threads: usize, iters: u64, body: fn(&M, u64) -> u64) -> Duration {
    std::thread::scope(|s| {
        let start = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let keys = &keys[t];
                s.spawn(move || {
                    let mut acc = 0u64;
                    for n in 0..iters as usize {
                        acc = acc.wrapping_add(body(m, keys[n & (KEYS - 1)]));
                    }
                    black_box(acc);
                })
            })
            .collect();
        for h in hs {
            h.join().expect("bench thread");
        }
        start.elapsed()
    })
}

/// The word at byte position `pos` through a guard.
#[inline(always)]
fn load_word(m: &Mapping, pos: u64) -> u64 {
    let p = m.page(pos >> 12).expect("mapped");
    p.load_u64(pos as usize & 4095).expect("word")
}

/// The same access without a guard: `Mapping::load_u64`.
#[inline(always)]
fn load_word_direct(m: &Mapping, pos: u64) -> u64 {
    m.load_u64(pos >> 12, pos as usize & 4095).expect("mapped")
}

fn copy_page(m: &Mapping, pos: u64) -> u64 {
    let mut buf = [0u8; 4096];
    let p = m.page(pos >> 12).expect("mapped");
    p.read_into(0, &mut buf).expect("in the page");
    buf[pos as usize & 4095] as u64
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// As `run`, but the CPU time each thread spent, summed: on a machine
/// shared with other work, the time a thread waits for a CPU is not the
/// access's cost, and wall time counts it.
fn run_cpu<M: Sync, F: Fn(&M, u64) -> u64 + Sync>(
    m: &M,
    keys: &[Vec<u64>],
    threads: usize,
    iters: u64,
    body: F,
) -> Duration {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (keys, body) = (&keys[t], &body);
                s.spawn(move || {
                    let start = thread_cpu();
                    let mut acc = 0u64;
                    for n in 0..iters as usize {
                        acc = acc.wrapping_add(body(m, keys[n & (KEYS - 1)]));
                    }
                    black_box(acc);
                    thread_cpu() - start
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).sum()
    })
}

/// Keys per `Mapping::load_u64_many` call in the batched rows: a caller
/// with a batch of lookups in hand (an index probe, a join) passes them
/// all; the mapping takes them 8 at a time.
const MANY: usize = 64;

/// As `run_cpu` for `Mapping::load_u64_many`: each thread loads its keys
/// (as byte positions) `MANY` per call; CPU time summed.
fn run_cpu_many(m: &Mapping, pos: &[Vec<u64>], threads: usize, iters: u64) -> Duration {
    run_cpu_steps::<{ LoadSteps::ALL }>(m, pos, threads, iters)
}

/// As `run_cpu_many`, with only the protocol's steps in `STEPS`
/// (`Mapping::load_u64_many_steps`): `STEPS` = 0 is the floor, what any
/// software page table must do on the same prefetch schedule (the entry
/// and the word); the others leave out one step each.
fn run_cpu_steps<const STEPS: u8>(m: &Mapping, pos: &[Vec<u64>], threads: usize, iters: u64) -> Duration {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let pos = &pos[t];
                s.spawn(move || {
                    let start = thread_cpu();
                    let mut acc = 0u64;
                    let mut out = [0u64; MANY];
                    for n in (0..iters as usize).step_by(MANY) {
                        let at = n & (KEYS - 1);
                        // SAFETY: nothing unmaps, reclaims or truncates
                        // (kswapd off, every page fits the cache, the file
                        // and mapping held until the end).
                        unsafe { m.load_u64_many_steps::<STEPS>(&pos[at..at + MANY], &mut out) }.expect("mapped");
                        acc = out.iter().fold(acc, |a, &w| a.wrapping_add(w));
                    }
                    black_box(acc);
                    thread_cpu() - start
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).sum()
    })
}

#[inline(always)]
fn kernel_load(k: &KernelMap, key: u64) -> u64 {
    k.load(key)
}

fn mapped(c: &mut Criterion) {
    let pages = pages();
    let (_cache, _f, m) = mapped_cache(pages);
    let keys: Vec<Vec<u64>> = (0..2).map(|t| positions(&zipf_keys(pages, 0.99, KEYS, 11 + t))).collect();
    let mut g = c.benchmark_group("mapped_hit");
    let rows = [
        ("load_u64", load_word as fn(&Mapping, u64) -> u64),
        ("mapping_load_u64", load_word_direct),
        ("read_into_4k", copy_page),
    ];
    for (name, body) in rows {
        for threads in [1, 2] {
            g.bench_function(format!("{name}/{threads}thread"), |b| {
                b.iter_custom(|iters| run(&m, &keys, threads, iters, body))
            });
        }
    }
    g.finish();
}

/// Best and median of 15 rounds of `KEYS` accesses, in CPU time per
/// access (`run_cpu`), for the guarded access (`page` + `load_u64`) and
/// `Mapping::load_u64` from 1 and from 2 threads at once, and the
/// kernel's mapping from 1, printed: on a shared machine the best round
/// is the closest to the path's own cost, where criterion's median
/// carries the other load. The rows alternate round by round, so all see
/// the same load. With 2 threads, a CPU time per access no higher than
/// with 1 means the throughput doubles given two CPUs.
fn best_of_rounds(_c: &mut Criterion) {
    let pages = pages();
    let (_cache, _f, m) = mapped_cache(pages);
    let k = KernelMap::new(pages);
    // Byte positions (`positions`), for every row.
    let keys: Vec<Vec<u64>> = (0..2).map(|t| positions(&zipf_keys(pages, 0.99, KEYS, 11 + t))).collect();
    let ns = |d: Duration, threads: usize| d.as_nanos() as f64 / (threads * KEYS) as f64;
    let pos = &keys;
    let (mut one, mut two, mut direct, mut direct2, mut kernel) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut many, mut many2) = (vec![], vec![]);
    // The floor and one step left out at a time (`run_cpu_steps`).
    let (mut floor, mut no_young, mut no_recheck, mut no_announce) = (vec![], vec![], vec![], vec![]);
    // MAPPED_BENCH_ONLY=many: only the kernel's and the batched rows (the
    // others print 0), for quick comparisons of two builds on a loaded
    // machine.
    let only_many = std::env::var("MAPPED_BENCH_ONLY").is_ok_and(|v| v == "many");
    for _ in 0..15 {
        // Function items (each its own type), so each access is inlined
        // into its loop as a caller's would be (the criterion rows call
        // through a function pointer).
        kernel.push(ns(run_cpu(&k, &keys, 1, KEYS as u64, kernel_load), 1));
        many.push(ns(run_cpu_many(&m, pos, 1, KEYS as u64), 1));
        many2.push(ns(run_cpu_many(&m, pos, 2, KEYS as u64), 2));
        floor.push(ns(run_cpu_steps::<0>(&m, pos, 1, KEYS as u64), 1));
        no_young.push(ns(run_cpu_steps::<{ LoadSteps::ALL & !LoadSteps::YOUNG }>(&m, pos, 1, KEYS as u64), 1));
        no_recheck.push(ns(run_cpu_steps::<{ LoadSteps::ALL & !LoadSteps::RECHECK }>(&m, pos, 1, KEYS as u64), 1));
        no_announce.push(ns(run_cpu_steps::<{ LoadSteps::ALL & !LoadSteps::ANNOUNCE }>(&m, pos, 1, KEYS as u64), 1));
        if only_many {
            continue;
        }
        one.push(ns(run_cpu(&m, &keys, 1, KEYS as u64, load_word), 1));
        direct.push(ns(run_cpu(&m, &keys, 1, KEYS as u64, load_word_direct), 1));
        two.push(ns(run_cpu(&m, &keys, 2, KEYS as u64, load_word), 2));
        direct2.push(ns(run_cpu(&m, &keys, 2, KEYS as u64, load_word_direct), 2));
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v.first().copied().unwrap_or(0.0), v.get(v.len() / 2).copied().unwrap_or(0.0))
    };
    let ((t1, m1), (t2, m2), (tk, mk)) = (stats(&mut one), stats(&mut two), stats(&mut kernel));
    let ((d1, dm1), (d2, dm2)) = (stats(&mut direct), stats(&mut direct2));
    let ((b1, bm1), (b2, bm2)) = (stats(&mut many), stats(&mut many2));
    let ((f1, fm1), (y1, ym1)) = (stats(&mut floor), stats(&mut no_young));
    let ((r1, rm1), (a1, am1)) = (stats(&mut no_recheck), stats(&mut no_announce));
    eprintln!(
        "mapped_hit over {} MiB, CPU ns per access, best / median of 15 rounds:\n  \
         kernel mmap, 1 thread:             {tk:.1} / {mk:.1}\n  \
         page() + load_u64, 1 thread:       {t1:.1} / {m1:.1}\n  \
         Mapping::load_u64, 1 thread:       {d1:.1} / {dm1:.1}\n  \
         page() + load_u64, 2 threads:      {t2:.1} / {m2:.1}\n  \
         Mapping::load_u64, 2 threads:      {d2:.1} / {dm2:.1}\n  \
         Mapping::load_u64_many, 1 thread:  {b1:.1} / {bm1:.1}\n  \
         Mapping::load_u64_many, 2 threads: {b2:.1} / {bm2:.1}\n  \
         floor (entry + word), 1 thread:    {f1:.1} / {fm1:.1}\n  \
         many without young, 1 thread:      {y1:.1} / {ym1:.1}\n  \
         many without re-check, 1 thread:   {r1:.1} / {rm1:.1}\n  \
         many without announce, 1 thread:   {a1:.1} / {am1:.1}",
        pages / 256,
    );
}

criterion_group!(benches, mapped, best_of_rounds);
criterion_main!(benches);

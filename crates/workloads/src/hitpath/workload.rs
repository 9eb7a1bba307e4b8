//! hitpath's timed phases: the reads (pcache, the kernel's pread, the bare
//! copy; random and hot) and the hit path's rows (find_page, the mapped
//! access, the PageRef read, the PageMut write, the multi-gen LRU's
//! find_page), each a number of rounds; and the result's assembly.

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pcache::{Config, File, LruPolicy, Mapping, OpenOptions, PageCache, PolicyKind, Tunables, VmStat};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::kernel_side::KernelMapping;
use super::report::{notes, targets};
use super::{Aligned, HitRun, Hitpath, HitpathOpts, HitpathResult, PhaseSecs, ReadSamples, MIB, PAGE, SLACK_BYTES};
use crate::experiment::{ExpOpts, Experiment, MainJob, Outcome, ParamDoc};
use crate::progress::{Phase, Progress};
use crate::stats;
use crate::sys::thread_cpu_s;
use crate::zipf::{uniform_page_offsets, ZipfKeys};
use crate::{Error, Result};

fn fill_nonzero(buf: &mut [u8], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for chunk in buf.chunks_mut(8) {
        let w = (rng.next_u64() | 0x0101_0101_0101_0101).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn ns_per_op(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops.max(1) as f64
}

/// ns per whole read of `buf.len()` bytes at each of `offsets`.
fn time_reads(
    what: &str,
    offsets: &[u64],
    buf: &mut [u8],
    read: impl Fn(&mut [u8], u64) -> Result<usize>,
) -> Result<f64> {
    let t = Instant::now();
    for &off in offsets {
        let n = read(buf, off)?;
        if n != buf.len() {
            return Err(Error::Check(format!("{what} at {off} returned {n} bytes, not {}", buf.len())));
        }
        black_box(&mut *buf);
    }
    Ok(ns_per_op(t.elapsed(), offsets.len()))
}

type Reader<'a> = &'a dyn Fn(&mut [u8], u64) -> Result<usize>;

/// The read phases' measuring loop: the readers take turns within each
/// round, so that drift on the machine falls on all alike.
fn read_rounds<const N: usize>(
    phase: Phase,
    rounds: usize,
    offsets: &[u64],
    buf: &mut [u8],
    readers: [(&str, Reader<'_>); N],
) -> Result<([Vec<f64>; N], f64)> {
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(rounds));
    for r in 0..rounds {
        phase.set_message(format!("round {}", r + 1));
        for ((what, read), out) in readers.iter().zip(&mut samples) {
            out.push(time_reads(what, offsets, buf, read)?);
            phase.inc(1);
        }
    }
    Ok((samples, phase.finish()))
}

/// Read the whole file through `read` (warming its cache), every byte
/// checked against `mem`.
fn read_whole(what: &str, mem: &[u8], read: impl Fn(&mut [u8], u64) -> Result<usize>) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let mut chunk = Aligned::new(CHUNK);
    for (i, want) in mem.chunks(CHUNK).enumerate() {
        let off = (i * CHUNK) as u64;
        let got = &mut chunk.as_mut_slice()[..want.len()];
        let n = read(got, off)?;
        if n != want.len() || got != want {
            return Err(Error::Check(format!(
                "{what} read {n} bytes at {off}, wanted {} bytes of the file's data",
                want.len()
            )));
        }
    }
    Ok(())
}

fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::Invalid(format!("{what} {v} does not fit in memory")))
}

fn vm_delta(now: &VmStat, earlier: &VmStat) -> serde_json::Value {
    now.delta(earlier).to_json()
}

struct ReadPhase {
    samples: ReadSamples,
    vm_setup: serde_json::Value,
    vm_read: serde_json::Value,
    misses: Option<u64>,
    setup: f64,
    random_read: f64,
    hot_read: f64,
}

fn read_phases(opts: &HitpathOpts, progress: &Progress) -> Result<ReadPhase> {
    let file_bytes = opts.file_mib * MIB;
    let len = to_usize(file_bytes, "file size")?;
    let pages = file_bytes / PAGE as u64;
    let ops = to_usize(opts.ops, "ops")?;

    // a. The file, in memory and on disk, and both caches warm.
    let phase = progress.phase("setup: create file", 4);
    let mut mem = Aligned::new(len);
    fill_nonzero(mem.as_mut_slice(), opts.seed ^ 0x5eed_f11e);
    phase.inc(1);
    let tmp = crate::sys::tempdir_in(opts.dir.as_deref(), "pcache-hitpath-")?;
    let path = tmp.path().join("data");
    let io_err = |what: &str| {
        let ctx = format!("{what} {}", path.display());
        move |e| Error::io(ctx, e)
    };
    {
        let f = std::fs::File::create(&path).map_err(io_err("creating"))?;
        for (i, chunk) in mem.as_slice().chunks(8 << 20).enumerate() {
            f.write_all_at(chunk, (i * (8 << 20)) as u64).map_err(io_err("writing"))?;
        }
        f.sync_all().map_err(io_err("syncing"))?;
    }
    phase.inc(1);

    let cache = PageCache::new(Config::with_memory(file_bytes + SLACK_BYTES))?;
    let vm0 = cache.vmstat();
    let pf = cache.open(&path, OpenOptions { create: false, truncate: false, direct: true })?;
    let pcache_read = |b: &mut [u8], off| Ok(pf.read_at(b, off)?);
    read_whole("pcache", mem.as_slice(), pcache_read)?;
    phase.inc(1);
    // The kernel's copy: a plain buffered file.
    let kf = std::fs::File::open(&path).map_err(io_err("opening"))?;
    let kernel_read =
        |b: &mut [u8], off| kf.read_at(b, off).map_err(|e| Error::io(format!("kernel pread at {off}"), e));
    read_whole("kernel", mem.as_slice(), kernel_read)?;
    phase.inc(1);
    let setup = phase.finish();
    let vm1 = cache.vmstat();

    // b. Random 4 KiB reads, interleaved pcache / kernel / memcpy.
    // The physical limit: a bare copy of the same page from the same memory
    // (pcache's own frames, pinned here), with no lookup at all. Since frames
    // are read only through the seqcount-validated atomic copy (the engine's
    // highmem.rs; a plain memcpy racing a writer is undefined behaviour), the
    // bare copy is that copy: `PageRef::read_into`.
    let pinned = (0..pages).map(|i| pf.get_page(i)).collect::<std::result::Result<Vec<_>, _>>()?;
    let memcpy = |b: &mut [u8], off: u64| {
        pinned[(off / PAGE as u64) as usize]
            .read_into(0, b)
            .map_err(|e| Error::Check(format!("copying a pinned page: {e}")))?;
        Ok(b.len())
    };
    let offsets = uniform_page_offsets(pages, PAGE as u64, ops, opts.seed);
    let mut buf = Aligned::new(PAGE);
    let ([pcache_read_ns, kernel_pread_ns, memcpy_ns], random_read) = read_rounds(
        progress.phase("random 4 KiB reads", 3 * opts.rounds as u64),
        opts.rounds,
        &offsets,
        buf.as_mut_slice(),
        [("pcache read_at", &pcache_read), ("kernel pread", &kernel_read), ("memcpy", &memcpy)],
    )?;
    drop(offsets);
    drop(pinned);

    // c. One page, again and again.
    let hot = vec![(pages / 2) * PAGE as u64; ops];
    let ([pcache_hot_read_ns, kernel_hot_pread_ns], hot_read) = read_rounds(
        progress.phase("hot 4 KiB reads", 2 * opts.rounds as u64),
        opts.rounds,
        &hot,
        buf.as_mut_slice(),
        [("pcache read_at", &pcache_read), ("kernel pread", &kernel_read)],
    )?;
    let samples = ReadSamples { pcache_read_ns, kernel_pread_ns, memcpy_ns, pcache_hot_read_ns, kernel_hot_pread_ns };
    if buf.as_slice() != &mem.as_slice()[(pages / 2) as usize * PAGE..(pages / 2 + 1) as usize * PAGE] {
        return Err(Error::Check("the hot page read back wrong data".into()));
    }
    let vm2 = cache.vmstat();
    let misses = vm2.by_name("pgcache_miss").zip(vm1.by_name("pgcache_miss")).map(|(a, b)| a.saturating_sub(b));
    pf.close()?;
    drop(pf);
    drop(cache);
    drop(tmp);

    Ok(ReadPhase {
        samples,
        vm_setup: vm_delta(&vm1, &vm0),
        vm_read: vm_delta(&vm2, &vm1),
        misses,
        setup,
        random_read,
        hot_read,
    })
}

struct HitPhase {
    runs: Vec<HitRun>,
    vm_setup: serde_json::Value,
    vm_hit: serde_json::Value,
    vm_mglru: serde_json::Value,
    vm_policy: serde_json::Value,
    setup: f64,
    hit: f64,
}

/// A row's body: thread `t` runs `access(t, keys)` over its whole key
/// stream and returns how many keys missed. One dynamic call per thread
/// and round; the per-key loop is [`each`]'s, compiled into every row's
/// closure, so no row pays an indirect call per key.
type Access<'a> = &'a (dyn Fn(usize, &[u64]) -> Result<u64> + Sync);

/// A row's body from its per-key access (`access(t, key)` says whether it
/// hit): the loop over the keys, monomorphised for `access`.
fn each<F>(access: F) -> impl Fn(usize, &[u64]) -> Result<u64> + Sync
where
    F: Fn(usize, u64) -> Result<bool> + Sync,
{
    move |t, keys| {
        let mut misses = 0u64;
        for &k in keys {
            if !access(t, k)? {
                misses += 1;
            }
        }
        Ok(misses)
    }
}

/// One timed run of `keys.len()` threads, each with its own key stream,
/// each timed by its own CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared
/// machine the time a thread waits for a CPU is not the access's cost,
/// and wall time counts it. Returns (mean ns/op per thread, total Mops/s
/// were each thread on a CPU of its own).
fn hit_round(keys: &[Vec<u64>], access: Access<'_>) -> Result<(f64, f64)> {
    let barrier = Barrier::new(keys.len());
    let results: Vec<Result<(Duration, u64)>> = std::thread::scope(|s| {
        let joins: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(t, keys)| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(Duration, u64)> {
                    barrier.wait();
                    let t0 = thread_cpu_s();
                    let misses = access(t, keys)?;
                    let cpu = Duration::try_from_secs_f64(thread_cpu_s() - t0)
                        .map_err(|_| Error::Check("hit path: this thread's CPU time is not known".into()))?;
                    Ok((cpu, misses))
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut ns = 0.0;
    let mut mops = 0.0;
    for (r, keys) in results.into_iter().zip(keys) {
        let (elapsed, misses) = r?;
        if misses > 0 {
            return Err(Error::Check(format!(
                "hit path: {misses} of {} lookups found no page, but every page was cached \
                 (was something reclaimed?)",
                keys.len()
            )));
        }
        ns += ns_per_op(elapsed, keys.len());
        mops += keys.len() as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6;
    }
    Ok((ns / keys.len() as f64, mops))
}

/// One row of the hit path: `access` on `keys.len()` threads, each call
/// `per_call` ops (the row's figures are per op).
struct Row<'a> {
    name: &'a str,
    keys: &'a [Vec<u64>],
    per_call: usize,
    access: Access<'a>,
}

/// The hit path's rows as they are timed, each `rounds` timed runs.
struct Rows<'a> {
    rounds: usize,
    phase: &'a crate::progress::Phase,
    runs: Vec<HitRun>,
}

impl Rows<'_> {
    /// Time `set`'s rows, alternated round by round (every row's first
    /// round, then every row's second, ...), so that load which comes and
    /// goes on the machine falls on all rows alike rather than on whichever
    /// row was running; each row's figures the median (and best) of its
    /// rounds.
    fn alternate(&mut self, set: &[Row<'_>]) -> Result<()> {
        let mut ns = vec![Vec::with_capacity(self.rounds); set.len()];
        let mut mops = ns.clone();
        for r in 0..self.rounds {
            for (i, row) in set.iter().enumerate() {
                let threads = row.keys.len();
                self.phase.set_message(format!("round {}: {}, {threads} thr", r + 1, row.name));
                let (n, m) = hit_round(row.keys, row.access)?;
                ns[i].push(n / row.per_call as f64);
                mops[i].push(m * row.per_call as f64);
                self.phase.inc(1);
            }
        }
        for ((row, ns), mops) in set.iter().zip(ns).zip(mops) {
            self.runs.push(HitRun {
                access: row.name.into(),
                threads: row.keys.len(),
                ns_per_op: stats::median(&ns),
                best_ns_per_op: ns.iter().copied().fold(f64::INFINITY, f64::min),
                mops: stats::median(&mops),
                rounds_ns_per_op: ns,
                rounds_mops: mops,
            });
        }
        Ok(())
    }
}

/// Keys per `load_u64_many` call in the `mapped_batch` row.
pub const BATCH_KEYS: usize = 64;

/// Each key's byte position: its page's start plus a hashed aligned word
/// of it, as benches/mapped.rs reads (`Mapping::bench_word_offset`: keys
/// spread over their pages, not all in one L1 set), computed before the
/// timing so no row pays for the hash in its loop.
fn positions(keys: &[u64]) -> Vec<u64> {
    keys.iter().map(|&k| k * PAGE as u64 + Mapping::bench_word_offset(k)).collect()
}

/// A cache holding every page of the memory-backed file `name`, the
/// per-CPU batches drained; and its vmstat before.
fn populated(tunables: Tunables, name: &str, pages: u64, tick: impl Fn(u64)) -> Result<(PageCache, File, VmStat)> {
    let cache = PageCache::new(Config { tunables, ..Config::with_memory(pages * PAGE as u64 + SLACK_BYTES) })?;
    let vm0 = cache.vmstat();
    let file = cache.open_memory(name)?;
    file.set_len(pages * PAGE as u64)?;
    for i in 0..pages {
        drop(file.get_page(i)?);
        tick(i);
    }
    cache.lru_add_drain_all();
    Ok((cache, file, vm0))
}

/// `k` handles of `file`, one per thread, given to `rows` and closed after.
fn with_handles<T>(file: &File, k: usize, rows: impl FnOnce(&[File]) -> Result<T>) -> Result<T> {
    let handles = (0..k).map(|_| file.reopen()).collect::<pcache::Result<Vec<File>>>()?;
    let out = rows(&handles)?;
    for h in &handles {
        h.close()?;
    }
    Ok(out)
}

/// find_page of a cached page and the drop of its pin: whether it hit.
fn find_hit(file: &File, key: u64) -> Result<bool> {
    Ok(file.find_page(key)?.map(black_box).is_some())
}

fn hit_phase(opts: &HitpathOpts, progress: &Progress) -> Result<HitPhase> {
    let ops = to_usize(opts.ops, "ops")?;
    let pages = opts.hit_pages;
    let max_threads = opts.threads.iter().copied().max().unwrap_or(1);

    // d. A cache holding every page of a memory-backed file.
    let phase = progress.phase("hit path: populate", pages + max_threads as u64);
    let step = 1 << 14;
    let tick = |i: u64| {
        if i % step == step - 1 {
            phase.inc(step);
        }
    };
    let (cache, file, vm0) = populated(Tunables::default(), "hitpath", pages, tick)?;
    phase.inc(pages % step);
    let zipf = ZipfKeys::new(pages, opts.zipf_s, opts.seed ^ 0x21bf_0000).map_err(Error::Invalid)?;
    let mut streams = Vec::with_capacity(max_threads);
    for t in 0..max_threads {
        streams.push(zipf.generate(ops, opts.seed.wrapping_add(0x1000 + t as u64)));
        phase.inc(1);
    }
    drop(zipf);
    let setup = phase.finish();
    let vm1 = cache.vmstat();

    // Rows: find_page for every thread count; the mapped access for 1 and
    // 2 threads; the kernel's mapping, the PageRef read and the PageMut
    // write for 1 thread. The mapped rows, the kernel's and the PageRef
    // read each key's word at its position (`positions`).
    let mapped_threads: Vec<usize> = opts.threads.iter().copied().filter(|&k| k <= 2).collect();
    let one = opts.threads.contains(&1);
    let nrows = 2 * opts.threads.len() + 3 * mapped_threads.len() + 3 * one as usize;
    let phase = progress.phase("hit path: lookups", (nrows * opts.rounds) as u64);
    let mut rows = Rows { rounds: opts.rounds, phase: &phase, runs: Vec::new() };
    let map = file.map(0, pages * PAGE as u64, pcache::MapFlags::READ)?;
    if !mapped_threads.is_empty() {
        // Faulted in here, so every entry is present when timed.
        for i in 0..pages {
            drop(map.page(i)?);
        }
    }
    let kmap = if one { Some(KernelMapping::new(pages as usize * PAGE)?) } else { None };
    let pos: Vec<Vec<u64>> = streams[..max_threads.min(2)].iter().map(|ks| positions(ks)).collect();
    // The batched row's calls: each thread's positions BATCH_KEYS at a
    // time (a trailing partial batch left out), timed per call.
    let calls: Vec<Vec<u64>> = pos.iter().map(|p| (0..(p.len() / BATCH_KEYS) as u64).collect()).collect();
    // Writes dirty pages, so fewer of them: the throttle and the flusher's
    // writeback to memory are part of what a write costs.
    let few: Vec<Vec<u64>> = pos.iter().take(1).map(|p| p[..p.len().div_ceil(8)].to_vec()).collect();
    with_handles(&file, max_threads, |handles| {
        let find = each(|t: usize, key: u64| find_hit(&handles[t], key));
        let mapped = each(|_t: usize, pos: u64| -> Result<bool> {
            black_box(map.page(pos / PAGE as u64)?.load_u64(pos as usize % PAGE)?);
            Ok(true)
        });
        let mapped_load = each(|_t: usize, pos: u64| -> Result<bool> {
            black_box(map.load_u64(pos / PAGE as u64, pos as usize % PAGE)?);
            Ok(true)
        });
        let batch = each(|t: usize, c: u64| -> Result<bool> {
            let at = c as usize * BATCH_KEYS;
            let mut words = [0u64; BATCH_KEYS];
            map.load_u64_many(&pos[t][at..at + BATCH_KEYS], &mut words)?;
            black_box(&words);
            Ok(true)
        });
        let kernel = each(|_t: usize, pos: u64| -> Result<bool> {
            Ok(kmap.as_ref().and_then(|k| k.load(pos)).map(black_box).is_some())
        });
        let pageref = each(|t: usize, pos: u64| -> Result<bool> {
            let Some(p) = handles[t].find_page(pos / PAGE as u64)? else { return Ok(false) };
            let mut word = [0u8; 8];
            p.read_into(pos as usize % PAGE, &mut word)?;
            black_box(word);
            Ok(true)
        });
        let pagemut = each(|t: usize, pos: u64| -> Result<bool> {
            handles[t].get_page_mut(pos / PAGE as u64)?.write(pos as usize % PAGE, &pos.to_le_bytes())?;
            Ok(true)
        });
        let row = |name, keys, per_call, access| Row { name, keys, per_call, access };
        let mut set = Vec::with_capacity(nrows);
        for &k in &opts.threads {
            set.push(row("find_page", &streams[..k], 1, &find));
            if k <= 2 {
                set.push(row("mapped", &pos[..k], 1, &mapped));
                set.push(row("mapped_load", &pos[..k], 1, &mapped_load));
                set.push(row("mapped_batch", &calls[..k], BATCH_KEYS, &batch));
            }
            if k == 1 {
                set.push(row("kernel_mapped", &pos[..1], 1, &kernel));
                set.push(row("pageref", &pos[..1], 1, &pageref));
            }
        }
        if one {
            // Last in each round: the flusher's writeback of the pages it
            // dirtied runs on into the next round's first row, and into no
            // other row.
            set.push(row("pagemut", &few, 1, &pagemut));
        }
        rows.alternate(&set)
    })?;
    drop(kmap);
    drop(map);
    let vm2 = cache.vmstat();
    file.close()?;
    drop(file);
    cache.unlink_memory("hitpath")?;
    drop(cache);
    // What MGLRU's marking (folio_inc_refs in the page's flags until its
    // count is full, then the PAGE_HOT hint in the tree slot) costs.
    let mglru = Tunables { lru: LruPolicy::MultiGen, ..Tunables::default() };
    let vm_mglru = variant_rows(opts, pages, &streams, &mut rows, &[(mglru, MGLRU_ACCESS)])?;
    // What a plug-in policy costs: S3-FIFO's per-frame count, raised until
    // its ceiling, then the same hint (policy.rs, `AccessCounts`); against
    // the kernel's lists again, round by round in the same loop, so the
    // ratio does not span two phases of a busy machine.
    let plug_in = Tunables { policy: PolicyKind::S3fifo, ..Tunables::default() };
    let pair = [(plug_in, POLICY_ACCESS), (Tunables::default(), POLICY_BASE)];
    let vm_policy = variant_rows(opts, pages, &streams, &mut rows, &pair)?;
    let runs = rows.runs;
    let hit = phase.finish();
    let (vm_setup, vm_hit) = (vm_delta(&vm1, &vm0), vm_delta(&vm2, &vm1));
    Ok(HitPhase { runs, vm_setup, vm_hit, vm_mglru, vm_policy, setup, hit })
}

/// The find_page rows again on caches of the same pages and keys, one per
/// (tunables, rows' name), their rows alternated round by round: what
/// another way of marking accesses costs the hit path. Returns the vmstat
/// delta of the first cache's timed lookups.
fn variant_rows(
    opts: &HitpathOpts,
    pages: u64,
    streams: &[Vec<u64>],
    rows: &mut Rows<'_>,
    variants: &[(Tunables, &'static str)],
) -> Result<serde_json::Value> {
    let mut caches = Vec::with_capacity(variants.len());
    for &(tunables, access) in variants {
        let name = format!("hitpath-{access}");
        let (cache, file, _) = populated(tunables, &name, pages, |_| {})?;
        caches.push((cache, file, name, access));
    }
    let max_threads = opts.threads.iter().copied().max().unwrap_or(1);
    let mut handles = Vec::with_capacity(caches.len());
    for (_, file, _, _) in &caches {
        handles.push((0..max_threads).map(|_| file.reopen()).collect::<pcache::Result<Vec<File>>>()?);
    }
    let vm0 = caches[0].0.vmstat();
    {
        let finds: Vec<_> = handles.iter().map(|h| each(move |t: usize, key: u64| find_hit(&h[t], key))).collect();
        let mut set = Vec::new();
        for &k in &opts.threads {
            for ((_, _, _, access), find) in caches.iter().zip(&finds) {
                set.push(Row { name: access, keys: &streams[..k], per_call: 1, access: find });
            }
        }
        rows.alternate(&set)?;
    }
    let vm1 = caches[0].0.vmstat();
    for f in handles.iter().flatten() {
        f.close()?;
    }
    drop(handles);
    for (cache, file, name, _) in caches {
        file.close()?;
        drop(file);
        cache.unlink_memory(&name)?;
    }
    Ok(vm_delta(&vm1, &vm0))
}

const MGLRU_ACCESS: &str = "find_page_mglru";
const POLICY_ACCESS: &str = "find_page_s3fifo";
/// The kernel's lists again, alternated with the plug-in's rows.
const POLICY_BASE: &str = "find_page_lists";

pub fn run(opts: &HitpathOpts) -> Result<HitpathResult> {
    opts.validate()?;
    let start = Instant::now();
    let progress = Progress::new(opts.progress);
    let read = read_phases(opts, &progress)?;
    let hit = hit_phase(opts, &progress)?;

    let s = &read.samples;
    let (pcache_read_ns, kernel_pread_ns) = (stats::median(&s.pcache_read_ns), stats::median(&s.kernel_pread_ns));
    let (memcpy_ns, pcache_hot_read_ns) = (stats::median(&s.memcpy_ns), stats::median(&s.pcache_hot_read_ns));
    let kernel_hot_pread_ns = stats::median(&s.kernel_hot_pread_ns);
    let row = |access: &str, k: usize| hit.runs.iter().find(|r| r.access == access && r.threads == k);
    let ns = |access: &str, k: usize| row(access, k).map(|r| r.ns_per_op);
    let minus = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
    let scaling = |access: &str| row(access, 2).zip(row(access, 1)).map(|(two, one)| stats::ratio(two.mops, one.mops));
    let mut result = HitpathResult {
        experiment: "hitpath".into(),
        opts: opts.clone(),
        page_size: PAGE,
        optimized: !cfg!(debug_assertions),
        pcache_read_ns,
        kernel_pread_ns,
        memcpy_ns,
        pcache_hot_read_ns,
        kernel_hot_pread_ns,
        hit_ns_1thread: ns("find_page", 1),
        hit_ns_2threads: ns("find_page", 2),
        pageref_hit_ns_1thread: ns("pageref", 1),
        mapped_hit_ns_1thread: ns("mapped", 1),
        mapped_hit_ns_2threads: ns("mapped", 2),
        kernel_mapped_ns_1thread: ns("kernel_mapped", 1),
        mapped_over_kernel_ns: minus(ns("mapped", 1), ns("kernel_mapped", 1)),
        mapped_load_ns_1thread: ns("mapped_load", 1),
        mapped_load_ns_2threads: ns("mapped_load", 2),
        mapped_load_over_kernel_ns: minus(ns("mapped_load", 1), ns("kernel_mapped", 1)),
        mapped_batch_ns_1thread: ns("mapped_batch", 1),
        mapped_batch_ns_2threads: ns("mapped_batch", 2),
        pagemut_write_ns_1thread: ns("pagemut", 1),
        mglru_hit_ns_1thread: ns(MGLRU_ACCESS, 1),
        mglru_hit_ns_2threads: ns(MGLRU_ACCESS, 2),
        mglru_marking_ns: minus(ns(MGLRU_ACCESS, 1), ns("find_page", 1)),
        policy_hit_ns_1thread: ns(POLICY_ACCESS, 1),
        policy_hit_ns_2threads: ns(POLICY_ACCESS, 2),
        policy_over_builtin: ns(POLICY_ACCESS, 1).zip(ns(POLICY_BASE, 1)).map(|(p, b)| stats::ratio(p, b)),
        policy_scaling_2threads: scaling(POLICY_ACCESS),
        kernel_over_pcache: stats::ratio(kernel_pread_ns, pcache_read_ns),
        pcache_over_memcpy: stats::ratio(pcache_read_ns, memcpy_ns),
        hot_kernel_over_pcache: stats::ratio(kernel_hot_pread_ns, pcache_hot_read_ns),
        scaling_2threads: scaling("find_page"),
        mapped_scaling_2threads: scaling("mapped"),
        hit: hit.runs,
        samples: read.samples,
        targets: Vec::new(),
        phase_secs: PhaseSecs {
            setup: read.setup,
            random_read: read.random_read,
            hot_read: read.hot_read,
            hit_setup: hit.setup,
            hit: hit.hit,
            total: start.elapsed().as_secs_f64(),
        },
        vmstat: serde_json::json!({
            "read_setup": read.vm_setup,
            "read": read.vm_read,
            "hit_setup": hit.vm_setup,
            "hit": hit.vm_hit,
            "hit_mglru": hit.vm_mglru,
            "hit_policy": hit.vm_policy,
        }),
        notes: notes(opts, read.misses),
    };
    result.targets = targets(&result);
    Ok(result)
}

impl Experiment for Hitpath {
    fn name(&self) -> &'static str {
        "hitpath"
    }
    fn about(&self) -> &'static str {
        "The cache-hit path: pcache read_at against kernel pread and memcpy, hot reads, and find_page with 1 \
         and 2 threads."
    }
    fn main_job(&self) -> MainJob {
        // 4 GiB of pages behind the hit path plus the kernel's 4 GiB
        // mapping of the same keys, and the read file: 8.4 GiB at peak.
        MainJob::DefaultSize { needs: 10 << 30 }
    }
    fn params(&self) -> &'static [ParamDoc] {
        HitpathOpts::PARAMS
    }
    fn smoke(&self) -> ExpOpts {
        let params = [("file_mib", "8"), ("hit_pages", "4096"), ("ops", "20000")];
        ExpOpts { runs: Some(2), mem_bytes: None, quick: false, ..ExpOpts::smoke(&params) }
    }
    fn check(&self, opts: &ExpOpts) -> Result<()> {
        HitpathOpts::from_exp(opts).map(drop)
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let o = HitpathOpts::from_exp(opts)?;
        let result = run(&o)?;
        Ok(Outcome::new(result.report(), &result)?.with_headlines(result.headlines()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_offsets_spread_over_the_page() {
        let offsets: Vec<u64> = (0..4096).map(Mapping::bench_word_offset).collect();
        assert!(offsets.iter().all(|&o| o % 8 == 0 && o + 8 <= PAGE as u64));
        // The words' lines fall in every one of the L1's 64 sets, about
        // evenly (4096 keys, 64 a set on average), not all in one.
        let mut sets = [0u32; 64];
        for &o in &offsets {
            sets[(o / 64) as usize] += 1;
        }
        assert!(sets.iter().all(|&n| (32..=96).contains(&n)), "{sets:?}");
        assert_eq!(
            positions(&[0, 3]),
            vec![Mapping::bench_word_offset(0), 3 * PAGE as u64 + Mapping::bench_word_offset(3)]
        );
    }

    #[test]
    fn aligned_and_nonzero() {
        let mut a = Aligned::new(3 * PAGE);
        assert_eq!(a.as_slice().as_ptr() as usize % PAGE, 0);
        assert_eq!(a.as_slice().len(), 3 * PAGE);
        fill_nonzero(&mut a.as_mut_slice()[..PAGE + 3], 9);
        assert!(a.as_slice()[..PAGE + 3].iter().all(|&b| b != 0));
        assert!(a.as_slice()[PAGE + 3..].iter().all(|&b| b == 0));
    }
}

use super::*;
use crate::runner::Matrix;
use crate::sys::FileIo;

pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(super) fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ splitmix64(b))
}

/// The rank-to-key permutation's seed: the same hot pages in every run.
pub(super) fn perm_seed(seed: u64) -> u64 {
    mix(seed, 0x5eed_0002)
}

/// Which stream: warm-up or timed.
pub(super) const WARM: u64 = 1;
pub(super) const TIMED: u64 = 2;

/// The seed of thread `thread`'s key stream in run `run` with `threads`
/// threads; the kernel column draws the same streams.
pub(super) fn stream_seed(seed: u64, run: usize, threads: usize, thread: usize, phase: u64) -> u64 {
    mix(mix(mix(mix(seed, run as u64), threads as u64), thread as u64), phase)
}

/// `count` keys of a stream, as u32 (the key space is at most 2^32).
pub(super) fn keys(z: &ZipfKeys, count: u64, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| z.sample(&mut rng) as u32).collect()
}

/// What page `index` of file `file` holds: its first 8 bytes.
pub(super) fn stamp(file: usize, index: u64) -> u64 {
    ((file as u64) << 40) | index
}

pub(super) fn fill_page(buf: &mut [u8], file: usize, index: u64) {
    buf.fill((index % 251 + 1) as u8);
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&stamp(file, index).to_le_bytes()[..n]);
}

pub(super) fn check_page(buf: &[u8], file: usize, index: u64, what: &str) -> std::result::Result<(), String> {
    let want = stamp(file, index).to_le_bytes();
    if buf.len() < 8 || buf[..8] != want {
        return Err(format!("{what}: file {file} page {index} holds the wrong data"));
    }
    Ok(())
}

/// A read-only device whose pages are made on demand: a miss costs a page
/// fill in memory, no I/O wait.
pub(super) struct SynthDev {
    pub(super) name: String,
    pub(super) file: usize,
    pub(super) len: u64,
    pub(super) page_size: u64,
}

impl BackingDev for SynthDev {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let mut done = 0usize;
        for (i, b) in bufs.iter_mut().enumerate() {
            let off = pos + i as u64 * self.page_size;
            if off >= self.len {
                break;
            }
            fill_page(b, self.file, off / self.page_size);
            done += (self.len - off).min(b.len() as u64) as usize;
        }
        Ok(done)
    }

    fn write_pages(&self, _pos: u64, _bufs: &[&[u8]], _file_size: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn sync(&self, _data_only: bool) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "read-only synthetic device"))
    }

    fn is_direct(&self) -> bool {
        true
    }

    fn bdi_name(&self) -> String {
        "lru-contention-synthetic".into()
    }
}

/// One timed cell: (run, thread count, variant).
pub(super) struct CellOut {
    pub(super) elapsed_s: f64,
    pub(super) ops: u64,
    pub(super) vm: VmStat,
    /// If this cell was sampled.
    pub(super) lru: Vec<LruSample>,
}

/// How often the LRU sampler looks with plots, and without (the series
/// then only go to the JSON).
pub(super) const SAMPLE_MS_PLOT: u64 = 2;
pub(super) const SAMPLE_MS: u64 = 5;
pub(super) const MAX_JSON_POINTS: usize = 200;

/// The LRU sampler: passes both start barriers with the workers, then
/// takes a [`LruSample`] every `interval` until `stop` is set. A look is
/// one `cache.vmstat()`, which takes no lock and touches no page (relaxed
/// loads, some microseconds): well under 1% of one CPU, and no worker ever
/// waits for it.
pub(super) fn sampler(cache: &PageCache, barrier: &Barrier, stop: &AtomicBool, interval: Duration) -> Vec<LruSample> {
    barrier.wait();
    barrier.wait();
    let start = Instant::now();
    let mut out = Vec::with_capacity(1024);
    while !stop.load(Ordering::Relaxed) {
        out.push(LruSample::take(cache, start));
        std::thread::sleep(interval);
    }
    out
}

/// At most `max` of `v`, evenly spread, the first and the last included.
pub(super) fn downsample<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    if v.len() <= max {
        return v.to_vec();
    }
    if max < 2 {
        return v[..max].to_vec();
    }
    let last = v.len() - 1;
    (0..max).map(|i| v[(i * last + (max - 1) / 2) / (max - 1)]).collect()
}

/// Read the page `key` names and check what it holds (the page size is
/// `buf`'s length).
pub(super) fn read_key(
    handles: &[impl FileIo],
    pages_per_file: u64,
    key: u64,
    buf: &mut [u8],
    what: &str,
) -> Result<()> {
    let (file, index) = ((key / pages_per_file) as usize, key % pages_per_file);
    let n = handles[file].read_at(buf, index * buf.len() as u64)?;
    if n != buf.len() {
        return Err(Error::Check(format!("{what}: file {file} page {index}: read {n} of {} bytes", buf.len())));
    }
    check_page(buf, file, index, what).map_err(Error::Check)
}

/// Every page once, in file order: the cache ends full of inactive pages.
pub(super) fn populate(files: &[impl FileIo], pages_per_file: u64, buf: &mut [u8]) -> Result<()> {
    (0..files.len() as u64 * pages_per_file).try_for_each(|key| read_key(files, pages_per_file, key, buf, "populate"))
}

/// One worker: its handles, its warm-up reads, the two barriers, its timed
/// reads. Always reaches both barriers, so an error cannot hang the others.
pub(super) fn worker(
    files: &[File],
    pages_per_file: u64,
    warm: &[u32],
    timed: &[u32],
    barrier: &Barrier,
) -> Result<()> {
    let mut buf = vec![0u8; PAGE as usize];
    let setup = (|| -> Result<Vec<File>> {
        let handles = files
            .iter()
            .map(|f| {
                let h = f.reopen()?;
                h.fadvise(0, 0, Advice::Random)?;
                Ok(h)
            })
            .collect::<Result<Vec<File>>>()?;
        for &k in warm {
            read_key(&handles, pages_per_file, k as u64, &mut buf, "pcache")?;
        }
        Ok(handles)
    })();
    barrier.wait();
    barrier.wait();
    let handles = setup?;
    for &k in timed {
        read_key(&handles, pages_per_file, k as u64, &mut buf, "pcache")?;
    }
    Ok(())
}

/// One cell; with `sample_ms`, the LRU list sizes during the timed reads.
pub(super) fn run_cell(
    tunables: Tunables,
    opts: &LruContentionOpts,
    zipf: &ZipfKeys,
    run: usize,
    threads: usize,
    sample_ms: Option<u64>,
) -> Result<CellOut> {
    let cache = PageCache::new(Config {
        memory_bytes: opts.mem_bytes,
        page_size: PAGE as usize,
        nr_cpus: opts.nr_cpus(),
        tunables,
    })?;
    let ppf = opts.pages_per_file();
    let files = (0..opts.files)
        .map(|f| {
            let dev =
                SynthDev { name: format!("synthetic:lru-contention-{f}"), file: f, len: ppf * PAGE, page_size: PAGE };
            cache.open_dev(Arc::new(dev))
        })
        .collect::<pcache::Result<Vec<File>>>()?;
    populate(&files, ppf, &mut vec![0u8; PAGE as usize])?;
    let warm_n = opts.warm_ops_per_thread(threads);
    let barrier = Barrier::new(threads + 1 + sample_ms.is_some() as usize);
    let stop = AtomicBool::new(false);
    let interval = Duration::from_millis(sample_ms.unwrap_or(0));
    let (elapsed_s, before, results, mut lru) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|i| {
                let (files, barrier) = (&files, &barrier);
                s.spawn(move || {
                    let warm = keys(zipf, warm_n, stream_seed(opts.seed, run, threads, i, WARM));
                    let timed = keys(zipf, opts.ops_per_thread, stream_seed(opts.seed, run, threads, i, TIMED));
                    worker(files, ppf, &warm, &timed, barrier)
                })
            })
            .collect();
        let sampler = sample_ms.is_some().then(|| {
            let (cache, barrier, stop) = (&cache, &barrier, &stop);
            s.spawn(move || sampler(cache, barrier, stop, interval))
        });
        barrier.wait();
        let before = cache.vmstat();
        let start = Instant::now();
        barrier.wait();
        let joined: Vec<std::thread::Result<Result<()>>> = joins.into_iter().map(|j| j.join()).collect();
        let elapsed_s = start.elapsed().as_secs_f64();
        // Stop the sampler before a worker's panic goes on, or the scope
        // would wait for it forever.
        stop.store(true, Ordering::Relaxed);
        let mut lru = sampler.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or_default();
        let results: Vec<Result<()>> =
            joined.into_iter().map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        if sample_ms.is_some() {
            // The lists as the last reader left them.
            lru.push(LruSample { t_s: elapsed_s, ..LruSample::take(&cache, start) });
        }
        (elapsed_s, before, results, lru)
    });
    let vm = cache.vmstat().delta(&before);
    for r in results {
        r?;
    }
    // The sampler's clock starts a moment after the main thread's.
    lru.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    drop(files);
    drop(cache);
    Ok(CellOut { elapsed_s, ops: opts.ops_per_thread * threads as u64, vm, lru })
}

/// The measures of every workload: (measure, unit, better, mean, in the
/// compare-kernels table).
pub(super) const MEASURES: &[(&str, &str, Better, Mean, bool)] = &[
    ("ops/s", "reads/s", Better::Higher, Mean::Harmonic, true),
    ("lru_lock/access", "acquisitions", Better::Lower, Mean::Arithmetic, true),
    ("atomic_ops/access", "atomic RMWs", Better::Lower, Mean::Arithmetic, true),
    ("atomic_flag_rmw/access", "atomic RMWs", Better::Lower, Mean::Arithmetic, false),
    ("mark_batch_refs/access", "page references", Better::Lower, Mean::Arithmetic, false),
    ("pgactivate/access", "pages", Better::Lower, Mean::Arithmetic, true),
    ("hit_ratio_%", "%", Better::Higher, Mean::Arithmetic, true),
    ("kswapd_efficiency_%", "%", Better::Higher, Mean::Arithmetic, true),
    ("elapsed_s", "s", Better::Lower, Mean::Arithmetic, false),
];

/// Page references taken by mark_page_accessed's per-CPU batches (each one
/// a get_page and a put_page, two atomic RMWs the flag counter does not
/// see): Danilov's batch takes one per call, today's only per activation
/// queued (about pgactivate), 2.6.10 none.
pub(super) fn mark_batch_refs(mode: LruBatching, vm: &VmStat) -> u64 {
    match mode {
        LruBatching::Immediate2610 => 0,
        LruBatching::DanilovBatch => vm.get(Item::mark_page_accessed_calls),
        LruBatching::Batched => vm.get(Item::pgactivate),
    }
}

pub(super) fn pct(num: u64, den: u64) -> f64 {
    100.0 * ratio(num as f64, den as f64)
}

pub(super) fn measure_values(o: &CellOut, mode: LruBatching) -> Vec<f64> {
    let vm = &o.vm;
    let per = |x: u64| x as f64 / o.ops.max(1) as f64;
    let refs = mark_batch_refs(mode, vm);
    let (hit, miss) = (vm.get(Item::pgcache_hit), vm.get(Item::pgcache_miss));
    vec![
        o.ops as f64 / o.elapsed_s.max(1e-9),
        per(vm.get(Item::lru_lock_acquire)),
        per(vm.get(Item::atomic_flag_rmw) + 2 * refs),
        per(vm.get(Item::atomic_flag_rmw)),
        per(refs),
        per(vm.get(Item::pgactivate)),
        pct(hit, hit + miss),
        pct(vm.get(Item::pgsteal_kswapd), vm.get(Item::pgscan_kswapd)),
        o.elapsed_s,
    ]
}

pub(super) fn sampled_threads(opts: &LruContentionOpts) -> usize {
    opts.threads.iter().copied().max().unwrap_or(1)
}

impl SeedMeasure for LruContention {
    fn measure(ctx: &Ctx<'_>, opts: &LruContentionOpts) -> Result<(Measured, LruSeries)> {
        let zipf =
            ZipfKeys::new(opts.working_set_pages(), opts.zipf_s, perm_seed(opts.seed)).map_err(Error::Invalid)?;
        let sampled = sampled_threads(opts);
        let interval_ms = if ctx.opts.plot_dir.is_some() { SAMPLE_MS_PLOT } else { SAMPLE_MS };
        let workloads: Vec<String> = opts.threads.iter().map(|&t| workload_name(t)).collect();
        let mut outs = ctx.each_variant(opts.runs, &workloads, |r, ti, vi| {
            let t = opts.threads[ti];
            run_cell(ctx.variants[vi].tunables, opts, &zipf, r, t, (r == 0 && t == sampled).then_some(interval_ms))
        })?;
        let lru_series = take_lru_series(ctx, &mut outs);
        let mut specs = Vec::new();
        for w in &workloads {
            for &(measure, unit, better, mean, table) in MEASURES {
                specs.push(MetricSpec::new(w, measure, unit, better, mean, table));
            }
        }
        let columns = ctx.columns(&outs, &workloads, |v, w, cells, metrics| {
            let values: Vec<Vec<f64>> = cells.iter().map(|c| measure_values(c, v.tunables.lru_batching)).collect();
            for (k, &(measure, ..)) in MEASURES.iter().enumerate() {
                metrics.insert(format!("{w} {measure}"), Samples(values.iter().map(|v| v[k]).collect()));
            }
            cells.iter().map(|c| c.vm.clone()).collect()
        });
        let mut notes = notes(opts, interval_ms);
        // Throughput is timing; with other work on the machine it spreads.
        let spread = columns
            .iter()
            .flat_map(|v| {
                workloads.iter().filter_map(move |w| Summary::of(v.samples(&format!("{w} ops/s")), Better::Higher))
            })
            .map(|s| s.coeffvar)
            .filter(|c| c.is_finite())
            .fold(0.0f64, f64::max);
        if spread > 10.0 {
            notes.push(format!(
                "throughput spread widely across runs (CoeffVar up to {spread:.0}%; see the load average): other \
                 work on the machine; read the ops/s rows with that in mind. The per-access counts and the hit \
                 ratio hardly depend on timing"
            ));
        }
        let extra = serde_json::json!({ "lru_sizes": lru_sizes_json(opts, sampled, interval_ms, &lru_series) });
        let params = into_map(params_json(ctx, opts));
        let m = Measured { variants: columns, specs, params, extra: into_map(extra), notes };
        Ok((m, LruSeries(lru_series)))
    }
}

/// The sampled cells' LRU list sizes, taken out of `outs`, per variant.
fn take_lru_series(ctx: &Ctx<'_>, outs: &mut Matrix<CellOut>) -> Vec<(String, Vec<LruSample>)> {
    let nw = outs.workloads();
    ctx.variants
        .iter()
        .enumerate()
        .map(|(vi, v)| {
            let mut lru = Vec::new();
            for ti in 0..nw {
                if let Some(c) = outs.runs_mut(vi, ti).iter_mut().find(|c| !c.lru.is_empty()) {
                    lru = std::mem::take(&mut c.lru);
                    break;
                }
            }
            (v.preset.name.to_string(), lru)
        })
        .collect()
}

/// What every run's numbers need said: the synthetic device, what the
/// counters count, oversubscription, the sampler.
fn notes(opts: &LruContentionOpts, interval_ms: u64) -> Vec<String> {
    let mut notes = vec![
        "misses are served by a synthetic device that fills the frame in memory (no I/O wait): throughput is \
         the CPU cost of hits, marking, list moves and reclaim, where the variants differ; a miss on a disk \
         would cost far more, so the hit ratio is reported on its own"
            .to_string(),
        "atomic_ops/access = atomic_flag_rmw/access + 2 x mark_batch_refs/access: each page reference a \
         mark_page_accessed batch takes is a get_page and a put_page (Andrew Morton's extra atomic ops), which \
         the flag counter does not see; the references are counted from vmstat: danilov = every \
         mark_page_accessed call, batched ~ pgactivate (one per activation queued), 2.6.10 = none"
            .to_string(),
        "the danilov variant marks every hit through its pagevec; the other two skip the mark when the page's \
         tree entry carries the PAGE_HOT hint (already active and referenced, where mark_page_accessed would \
         change nothing)"
            .to_string(),
        "a page waiting in a per-CPU batch (today's activations, every page Danilov marks) holds a reference, so \
         reclaim meeting it at the inactive tail cannot free it and puts it back: one way batching moves kswapd \
         efficiency (Morton: \"the page is only in the pagevec at that time\")"
            .to_string(),
    ];
    let ncpu = cpus();
    if let Some(&t) = opts.threads.iter().filter(|&&t| t > ncpu).max() {
        notes.push(format!(
            "up to {t} threads on {ncpu} CPUs: oversubscribed on purpose, as reaim and kernbench -j32 were; \
             per-CPU batches are keyed by the CPU a thread runs on ({} batch sets)",
            opts.nr_cpus()
        ));
    }
    notes.push(format!(
        "LRU list sizes (nr_active_file, nr_inactive_file, nr_free_pages) sampled every {} ms during the timed \
         reads of run 1 at {} threads, for every variant: extra.lru_sizes (at most {} points per series)",
        interval_ms,
        sampled_threads(opts),
        MAX_JSON_POINTS
    ));
    if opts.runs < 2 {
        notes.push("one run: no spread, so no difference can be marked significant".into());
    }
    notes
}

/// `params` beside the options.
fn params_json(ctx: &Ctx<'_>, opts: &LruContentionOpts) -> Value {
    let lru_modes: serde_json::Map<String, Value> = ctx
        .variants
        .iter()
        .map(|v| (v.preset.name.to_string(), serde_json::to_value(v.tunables.lru_batching).unwrap_or(Value::Null)))
        .collect();
    serde_json::json!({
        "page_size": PAGE,
        "read_bytes": PAGE,
        "nr_cpus": opts.nr_cpus(),
        "machine_cpus": cpus(),
        "cache_pages": opts.cache_pages(),
        "working_set_pages": opts.working_set_pages(),
        "pages_per_file": opts.pages_per_file(),
        "warm_ops_per_thread": opts.threads.iter()
            .map(|&t| (workload_name(t), Value::from(opts.warm_ops_per_thread(t))))
            .collect::<serde_json::Map<String, Value>>(),
        "lru_batching": lru_modes,
        "workload": opts.describe(),
        "workloads": opts.threads.iter().map(|&t| serde_json::json!({
            "name": workload_name(t),
            "description": format!("{t} thread{} reading the working set (see workload)", if t == 1 { "" } else { "s" }),
        })).collect::<Vec<_>>(),
        "timing": "ops/s: reads of all threads over the wall time from the barrier that starts them to the \
                   return of the last",
        "vmstat": "deltas over the timed reads (kswapd included), event counters summed over the runs",
    })
}

/// Per variant, downsampled to at most [`MAX_JSON_POINTS`] points (NaN
/// written as null, as serde_json does).
pub(super) fn lru_sizes_json(
    opts: &LruContentionOpts,
    threads: usize,
    interval_ms: u64,
    series: &[(String, Vec<LruSample>)],
) -> Value {
    let variants: serde_json::Map<String, Value> = series
        .iter()
        .map(|(name, samples)| {
            let d = downsample(samples, MAX_JSON_POINTS);
            let v = serde_json::json!({
                "samples": samples.len(),
                "t_ms": d.iter().map(|x| (x.t_s * 1e6).round() / 1e3).collect::<Vec<_>>(),
                "nr_active_file": d.iter().map(|x| x.active).collect::<Vec<_>>(),
                "nr_inactive_file": d.iter().map(|x| x.inactive).collect::<Vec<_>>(),
                "nr_free_pages": d.iter().map(|x| x.free).collect::<Vec<_>>(),
                "active_fraction": d.iter().map(LruSample::active_fraction).collect::<Vec<_>>(),
            });
            (name.clone(), v)
        })
        .collect();
    serde_json::json!({
        "workload": workload_name(threads),
        "run": 1,
        "interval_ms": interval_ms,
        "cache_pages": opts.cache_pages(),
        "max_points": MAX_JSON_POINTS,
        "about": "pages on each list, sampled during the timed reads; t_ms from the start of the timed reads, \
                  the last point as the last reader finished; active_fraction = active / (active + inactive); \
                  evenly downsampled when more were taken (samples = how many)",
        "variants": variants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_streams() {
        let o = LruContentionOpts::default();
        // 128 MiB = 32768 pages; 1.25x = 40960 over 4 files.
        assert_eq!(o.pages_per_file(), 10240);
        assert_eq!(o.working_set_pages(), 40960);
        assert_eq!(o.warm_ops_per_thread(4), 40960);
        let z = ZipfKeys::new(1000, 0.9, perm_seed(1)).unwrap();
        let a = keys(&z, 100, stream_seed(1, 0, 2, 1, TIMED));
        let b = keys(&z, 100, stream_seed(1, 0, 2, 1, TIMED));
        let c = keys(&z, 100, stream_seed(1, 0, 2, 0, TIMED));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut page = vec![0u8; 4096];
        fill_page(&mut page, 3, 77);
        assert!(check_page(&page, 3, 77, "t").is_ok());
        assert!(check_page(&page, 3, 78, "t").is_err());
    }

    // Goal: downsampling keeps at most the asked-for points, evenly
    // spread, the first and the last among them, in order.
    #[test]
    fn downsampling() {
        let v: Vec<u32> = (0..1000).collect();
        let d = downsample(&v, 200);
        assert_eq!(d.len(), 200);
        assert_eq!((d[0], d[199]), (0, 999));
        assert!(d.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= 6));
        assert_eq!(downsample(&v[..150], 200), v[..150]);
        assert_eq!(downsample(&v[..3], 2), [0, 2]);
        assert_eq!(downsample(&v[..3], 1), [0]);
        assert!(downsample(&v, 0).is_empty());
        let s = LruSample { t_s: 0.0, active: 1, inactive: 3, free: 0 };
        assert_eq!(s.active_fraction(), 0.25);
        assert!(LruSample { active: 0, inactive: 0, ..s }.active_fraction().is_nan());
    }
}

//! The workload through pcache and the measurement of every run.

use super::*;

/// One run of one workload under one variant.
pub struct RunOut {
    pub(super) elapsed_s: f64,
    pub(super) sync_s: f64,
    pub(super) files: u64,
    pub(super) vm: VmStat,
    /// The sampler's readings, when asked for.
    pub(super) timeline: Vec<Sample>,
}

/// One reading of the plots' sampler.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    /// Milliseconds since the workload started.
    pub(super) ms: f64,
    /// nr_dirty + nr_writeback.
    pub(super) dirty_wb: u64,
    pub(super) nr_free: u64,
}

pub(super) fn sample_now(cache: &PageCache, t0: Instant) -> Sample {
    let vm = cache.vmstat();
    Sample {
        ms: t0.elapsed().as_secs_f64() * 1e3,
        dirty_wb: vm.get(Item::nr_dirty) + vm.get(Item::nr_writeback),
        nr_free: vm.get(Item::nr_free_pages),
    }
}

/// Read the counters every [`SAMPLE_INTERVAL_MS`] until `stop`, then once
/// more.
pub(super) fn sampler(cache: &PageCache, stop: &AtomicBool, t0: Instant) -> Vec<Sample> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Acquire) {
        out.push(sample_now(cache, t0));
        std::thread::sleep(Duration::from_millis(SAMPLE_INTERVAL_MS));
    }
    out.push(sample_now(cache, t0));
    out
}

pub(super) const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// Write `len` bytes at offset 0 in `chunk`-sized writes.
pub(super) fn write_seq(f: &File, len: u64, chunk: u64, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off) as usize;
        write_block(f, off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

pub(super) fn write_block(f: &File, off: u64, data: &[u8]) -> Result<()> {
    let done = f.write_at(data, off)?;
    if done != data.len() {
        return Err(Error::Check(format!("{}: wrote {done} of {} bytes at {off}", f.name(), data.len())));
    }
    Ok(())
}

/// Run `work(t)` on `threads` threads started together; returns the
/// seconds from the start until the last returned, and every path they
/// created.
pub(super) fn parallel<F>(threads: usize, work: F) -> Result<(f64, Vec<PathBuf>)>
where
    F: Fn(usize, &mut Vec<PathBuf>) -> Result<()> + Sync,
{
    let barrier = Barrier::new(threads + 1);
    let (secs, results) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let mut paths = Vec::new();
                    let r = work(t, &mut paths);
                    (paths, r)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> =
            joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        (start.elapsed().as_secs_f64(), results)
    });
    let mut all = Vec::new();
    let mut first_err = None;
    for (paths, r) in results {
        all.extend(paths);
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((secs, all)),
    }
}

/// The timed part of a workload: (seconds, files created, their paths).
pub(super) fn run_workload(
    cache: &PageCache,
    w: Workload,
    opts: &ReclaimWritebackOpts,
    dir: &Path,
    buf: &[u8],
) -> Result<(f64, u64, Vec<PathBuf>)> {
    match w {
        Workload::Fsmark { threads, per_thread } => {
            let (secs, paths) = parallel(threads, |t, paths| {
                for i in 0..per_thread {
                    let path = dir.join(format!("fsmark-{t:03}-{i:05}"));
                    let f = cache.open(&path, CREATE)?;
                    paths.push(path);
                    write_seq(&f, opts.fsmark_file_bytes, FSMARK_CHUNK, buf)?;
                    f.close()?;
                }
                Ok(())
            })?;
            let n = paths.len() as u64;
            Ok((secs, n, paths))
        }
        Workload::SimpleWb { threads, blocks } => {
            let (secs, paths) = parallel(threads, |t, paths| {
                let path = dir.join(format!("dd-{t:03}"));
                let f = cache.open(&path, CREATE)?;
                paths.push(path);
                write_seq(&f, blocks as u64 * BLOCK, BLOCK, buf)?;
                f.close()?;
                Ok(())
            })?;
            let n = paths.len() as u64;
            Ok((secs, n, paths))
        }
        Workload::MmapStrm { blocks, mix_blocks } => {
            let (a_path, b_path) = (dir.join("strm-large"), dir.join("strm-mix"));
            let start = Instant::now();
            let a = cache.open(&a_path, CREATE)?;
            let mut paths = vec![a_path];
            let b = cache.open(&b_path, CREATE)?;
            paths.push(b_path);
            let block = &buf[..BLOCK as usize];
            // The streaming write.
            for i in 0..blocks {
                write_block(&a, i as u64 * BLOCK, block)?;
            }
            // The rewrite of the large file interleaved, in proportion,
            // with the second file.
            let mut j = 0usize;
            for i in 0..blocks {
                write_block(&a, i as u64 * BLOCK, block)?;
                while j < mix_blocks && j * blocks < (i + 1) * mix_blocks {
                    write_block(&b, j as u64 * BLOCK, block)?;
                    j += 1;
                }
            }
            a.close()?;
            b.close()?;
            Ok((start.elapsed().as_secs_f64(), 2, paths))
        }
    }
}

/// One run of `w` in a fresh cache; with `sample`, a sampler thread reads
/// the dirty, writeback and free pages from the start of the workload to
/// the end of its sync.
pub(super) fn run_one(
    variant: &Variant,
    w: Workload,
    opts: &ReclaimWritebackOpts,
    dir: &Path,
    buf: &[u8],
    sample: bool,
) -> Result<RunOut> {
    let cache =
        PageCache::new(Config { memory_bytes: opts.mem_bytes, tunables: variant.tunables, ..Config::default() })?;
    let before = cache.vmstat();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (res, timeline) = std::thread::scope(|s| {
        let sampler = sample.then(|| s.spawn(|| sampler(&cache, &stop, t0)));
        let res = run_workload(&cache, w, opts, dir, buf).and_then(|(elapsed_s, files, paths)| {
            let t = Instant::now();
            cache.sync_all()?;
            Ok((elapsed_s, t.elapsed().as_secs_f64(), files, paths))
        });
        stop.store(true, Ordering::Release);
        let timeline = sampler.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or_default();
        (res, timeline)
    });
    let (elapsed_s, sync_s, files, paths) = res?;
    let vm = cache.vmstat().delta(&before);
    for p in &paths {
        cache.unlink(p)?;
    }
    drop(cache);
    Ok(RunOut { elapsed_s, sync_s, files, vm, timeline })
}

pub(super) fn kswapd_efficiency(vm: &VmStat) -> f64 {
    let scan = vm.get(Item::pgscan_kswapd);
    if scan == 0 {
        f64::NAN
    } else {
        vm.get(Item::pgsteal_kswapd) as f64 / scan as f64 * 100.0
    }
}

/// The counters reported per run beyond the times: (measure, unit).
pub(super) const COUNTER_MEASURES: [(&str, &str); 9] = [
    ("kswapd_efficiency_%", "%"),
    ("nr_vmscan_write_direct", "pages"),
    ("nr_vmscan_write_kswapd", "pages"),
    ("nr_vmscan_immediate_reclaim", "pages"),
    ("pgrotated", "pages"),
    ("allocstall", "events"),
    ("pgscan_direct", "pages"),
    ("throttled_ms", "ms"),
    ("congestion_waits", "events"),
];

/// The values of [`COUNTER_MEASURES`] in one run.
pub(super) fn counter_values(vm: &VmStat) -> [f64; 9] {
    let g = |i: Item| vm.get(i) as f64;
    [
        kswapd_efficiency(vm),
        g(Item::nr_vmscan_write_direct),
        g(Item::nr_vmscan_write_kswapd),
        g(Item::nr_vmscan_immediate_reclaim),
        g(Item::pgrotated),
        g(Item::allocstall),
        g(Item::pgscan_direct),
        g(Item::balance_dirty_pages_pause_ns) / 1e6,
        g(Item::congestion_waits),
    ]
}

/// Measure every workload, one variant at a time: the pcache columns, and
/// the runs (their timelines) for the plots.
pub(super) fn measure(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> Result<(Measured, Matrix<RunOut>)> {
    let workloads = opts.workloads();
    let names: Vec<String> = workloads.iter().map(|w| w.name()).collect();
    let buf = pattern(BLOCK as usize);
    let outs = ctx.each_variant(opts.runs, &names, |r, wi, vi| {
        let sample = r == 0 && opts.plot_dir.is_some();
        run_one(&ctx.variants[vi], workloads[wi], opts, ctx.tmp.path(), &buf, sample)
    })?;

    // Metrics, in workload order.
    let mut specs = Vec::new();
    for &w in &workloads {
        let n = w.name();
        if matches!(w, Workload::Fsmark { .. }) {
            specs.push(MetricSpec::new(&n, "files/s", "files/s", Better::Higher, Mean::Harmonic, true));
        }
        specs.push(MetricSpec::new(&n, "elapsed_s", "s", Better::Lower, Mean::Arithmetic, true));
        specs.push(MetricSpec::new(&n, "sync_s", "s", Better::Lower, Mean::Arithmetic, false));
        for (measure, unit) in COUNTER_MEASURES {
            let better = if measure.starts_with("kswapd_eff") { Better::Higher } else { Better::Lower };
            specs.push(MetricSpec::new(&n, measure, unit, better, Mean::Arithmetic, false));
        }
    }
    let mut columns = Vec::new();
    for (vi, v) in ctx.variants.iter().enumerate() {
        let mut metrics: Named<Samples> = Named::new();
        let mut vmstat = Named::new();
        for (wi, &w) in workloads.iter().enumerate() {
            let n = w.name();
            let runs = outs.runs(vi, wi);
            let mut put = |measure: &str, v: Vec<f64>| metrics.insert(format!("{n} {measure}"), Samples(v));
            if matches!(w, Workload::Fsmark { .. }) {
                put("files/s", runs.iter().map(|o| o.files as f64 / o.elapsed_s.max(1e-9)).collect());
            }
            put("elapsed_s", runs.iter().map(|o| o.elapsed_s).collect());
            put("sync_s", runs.iter().map(|o| o.sync_s).collect());
            for (k, (measure, _)) in COUNTER_MEASURES.iter().enumerate() {
                put(measure, runs.iter().map(|o| counter_values(&o.vm)[k]).collect());
            }
            let deltas: Vec<VmStat> = runs.iter().map(|o| o.vm.clone()).collect();
            vmstat.insert(n, sum_vmstat(&deltas));
        }
        columns.push(v.column(metrics, vmstat));
    }

    let mut notes = vec![
        "anonymous mappings are not modelled yet: mmap-strm writes two files through write_at, so nothing is \
         swapped (the seed's mmap-strm slowdowns came from extra swapping)"
            .to_string(),
        "host files with O_DIRECT on the device holding the temporary directory; the seed used XFS on a \
         4-disk RAID-0"
            .to_string(),
    ];
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if let Some(&t) = opts.fsmark_threads.iter().filter(|&&t| t > cpus).max() {
        notes.push(format!("up to {t} fs_mark threads on {cpus} CPUs: the threads share CPUs"));
    }
    if opts.runs < 2 {
        notes.push("one run: no spread, so no difference can be marked significant".into());
    }
    if !opts.set.is_empty() {
        let sets: Vec<String> = opts.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        notes.push(format!("tunables set for every variant, after its preset: {}", sets.join(", ")));
    }
    if opts.plot_dir.is_some() {
        notes.push(format!(
            "plots: the first run of each workload, sampled every {SAMPLE_INTERVAL_MS} ms by a thread of its own, \
             which that run's timings carry"
        ));
    }
    let params = serde_json::json!({
        "page_size": Config::default().page_size,
        "workloads": workloads.iter().map(|w| serde_json::json!({
            "name": w.name(),
            "description": w.describe(opts),
        })).collect::<Vec<_>>(),
        "timing": "elapsed_s: first write to the return of the last (files closed), no sync; \
                   sync_s: the sync_all after, untimed in elapsed",
        "vmstat": "deltas per workload, event counters summed over the runs",
    });
    let m = Measured { variants: columns, specs, params: into_map(params), extra: Default::default(), notes };
    Ok((m, outs))
}

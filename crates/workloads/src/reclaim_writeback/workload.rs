use std::sync::Arc;

use pcache::backing::{FileDev, MemoryDev, RateLimitedDev};
use pcache::{BackingDev, MapFlags, Mapping};

use super::*;

pub const RESIDENT_TOUCH_MS: u64 = 20;

/// The desktop beside the workload in the original's USB-stick run ("firefox
/// and gnome terminal were launching and exiting"): program text in use.
/// A memory file of `resident` x memory, mapped executable and touched
/// page by page every [`RESIDENT_TOUCH_MS`] by a thread of its own, so
/// that reclaim finds it young and keeps it on the active list (VM_EXEC
/// pages get another trip there).
///
/// Why: pcache has one zone and one LRU, and its flushers write the
/// oldest-dirtied file first, so dirty pages are the youngest pages on the
/// LRU; reclaim meets one only when dirty + writeback pages are most of
/// what it can reclaim. The dirty limit is a fraction of all memory
/// (dirty_ratio 40, as the original ran); a resident set above 60% leaves the
/// writers' pages fewer than that, as a small zone full of dirty pages
/// did on the original's machines, and reclaim has to deal with dirty pages.
pub(super) struct Resident {
    map: Mapping,
}

impl Resident {
    /// Untimed.
    pub(super) fn start(cache: &PageCache, fraction: f64) -> Result<Option<Resident>> {
        let ps = cache.page_size() as u64;
        let bytes = (cache.config().memory_bytes as f64 * fraction) as u64 / ps * ps;
        if bytes == 0 {
            return Ok(None);
        }
        let f = cache.open_memory("resident")?;
        write_seq(&f, bytes, BLOCK, &pattern(BLOCK as usize))?;
        // Clean before the workload: the desktop's text is not dirty.
        f.fsync()?;
        let map = f.map(0, bytes, MapFlags::READ | MapFlags::EXEC)?;
        let r = Resident { map };
        r.touch()?;
        Ok(Some(r))
    }

    fn touch(&self) -> Result<()> {
        let mut sum = 0u64;
        for i in 0..self.map.nr_pages() {
            sum = sum.wrapping_add(self.map.page(i)?.load_u64(0)?);
        }
        std::hint::black_box(sum);
        Ok(())
    }

    /// Touch every page every [`RESIDENT_TOUCH_MS`] until `stop`.
    pub(super) fn run(&self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Acquire) {
            self.touch()?;
            std::thread::sleep(Duration::from_millis(RESIDENT_TOUCH_MS));
        }
        Ok(())
    }
}

/// Create a workload's file, behind the run's device when there is one.
/// With `in_memory`, the device's data is in memory, not in a host file.
pub(super) fn create_file(
    cache: &PageCache,
    path: &Path,
    dev: Option<&Arc<RateLimit>>,
    in_memory: bool,
) -> Result<File> {
    let Some(limit) = dev else {
        return Ok(cache.open(path, CREATE)?);
    };
    let name = path.to_string_lossy();
    let ps = cache.page_size();
    Ok(cache.open_dev_with(&name, || {
        let inner: Arc<dyn BackingDev> = if in_memory {
            Arc::new(MemoryDev::new(&name, ps))
        } else {
            Arc::new(
                FileDev::open_in(cache.fd_cache(), path, true, true, CREATE.direct, ps)
                    .map_err(|e| pcache::Error::io(&name, e))?,
            )
        };
        Ok(Arc::new(RateLimitedDev::new(inner, limit.clone())) as Arc<dyn BackingDev>)
    })?)
}

pub(super) fn remove_file(cache: &PageCache, path: &Path, dev: Option<&Arc<RateLimit>>) -> Result<()> {
    match dev {
        None => Ok(cache.unlink(path)?),
        Some(_) => {
            cache.unlink_dev(&path.to_string_lossy())?;
            Ok(())
        }
    }
}

pub(super) fn sample_now(cache: &PageCache, t0: Instant) -> Sample {
    let vm = cache.vmstat();
    Sample {
        ms: t0.elapsed().as_secs_f64() * 1e3,
        dirty_wb: vm.get(Item::nr_dirty) + vm.get(Item::nr_writeback),
        nr_free: vm.get(Item::nr_free_pages),
    }
}

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

/// `work(t)` on `threads` threads started together: the seconds until the
/// last returned, and every path they created.
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

/// fsmark's or simple-wb's writers (`w` is one of them), on pcache's files
/// or the kernel's: `create` makes a file, `close` closes it (a kernel
/// file is closed when dropped). The time of
/// the writes, and the files made.
pub(super) fn write_files<F: FileIo>(
    w: Workload,
    fsmark_file_bytes: u64,
    dir: &Path,
    buf: &[u8],
    create: impl Fn(&Path) -> Result<F> + Sync,
    close: impl Fn(&F) -> Result<()> + Sync,
) -> Result<(f64, Vec<PathBuf>)> {
    let (threads, files, name, file_bytes, chunk) = match w {
        Workload::Fsmark { threads, per_thread } => (threads, per_thread, "fsmark", fsmark_file_bytes, FSMARK_CHUNK),
        Workload::SimpleWb { threads, blocks } => (threads, 1, "dd", blocks as u64 * BLOCK, BLOCK),
        Workload::MmapStrm { .. } => return Err(Error::Invalid("mmap-strm writes no files".into())),
    };
    parallel(threads, |t, paths| {
        for i in 0..files {
            let path = match w {
                Workload::SimpleWb { .. } => dir.join(format!("{name}-{t:03}")),
                _ => dir.join(format!("{name}-{t:03}-{i:05}")),
            };
            let f = create(&path)?;
            paths.push(path);
            write_seq(&f, file_bytes, chunk, buf)?;
            close(&f)?;
        }
        Ok(())
    })
}

pub(super) fn run_workload(
    cache: &PageCache,
    w: Workload,
    opts: &ReclaimWritebackOpts,
    dir: &Path,
    buf: &[u8],
    dev: Option<&Arc<RateLimit>>,
) -> Result<(f64, u64, Vec<PathBuf>, Option<mmap_strm::Strm>)> {
    match w {
        Workload::Fsmark { .. } | Workload::SimpleWb { .. } => {
            let create = |path: &Path| create_file(cache, path, dev, opts.device.in_memory);
            let (secs, paths) = write_files(w, opts.fsmark_file_bytes, dir, buf, create, |f: &File| Ok(f.close()?))?;
            let n = paths.len() as u64;
            Ok((secs, n, paths, None))
        }
        Workload::MmapStrm { blocks, mix_blocks, anon_blocks } => {
            let (secs, paths, strm) = mmap_strm::run(cache, dir, blocks, mix_blocks, anon_blocks, buf)?;
            Ok((secs, 2, paths, Some(strm)))
        }
    }
}

/// One run of `w` in a fresh cache, sampled to the end of its sync.
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
    // mmap-strm stays on the host files, with no desktop beside it: it
    // overcommits memory by itself, and a slow device would multiply its
    // time (its swap file is on the host's disk in any case).
    let strm = matches!(w, Workload::MmapStrm { .. });
    let dev = if strm { None } else { opts.device.start()? };
    let dev = dev.as_ref();
    let resident = if strm { 0.0 } else { opts.device.resident };
    let resident = Resident::start(&cache, resident)?;
    let swap_file = match w {
        Workload::MmapStrm { anon_blocks, .. } => Some(mmap_strm::swapon(&cache, dir, anon_blocks)?),
        _ => None,
    };
    let before = cache.vmstat();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (res, timeline) = std::thread::scope(|s| {
        let sampler = sample.then(|| s.spawn(|| sampler(&cache, &stop, t0)));
        let desktop = resident.as_ref().map(|r| s.spawn(|| r.run(&stop)));
        let res = run_workload(&cache, w, opts, dir, buf, dev).and_then(|(elapsed_s, files, paths, strm)| {
            let t = Instant::now();
            cache.sync_all()?;
            Ok((elapsed_s, t.elapsed().as_secs_f64(), files, paths, strm))
        });
        stop.store(true, Ordering::Release);
        let timeline = sampler.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or_default();
        let desktop = desktop.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).unwrap_or(Ok(()));
        (res.and_then(|r| desktop.map(|()| r)), timeline)
    });
    let (elapsed_s, sync_s, files, paths, strm) = match res {
        Ok(r) => r,
        Err(e) => {
            // The cache writes what is dirty when dropped: not at the
            // simulated device's pace after a failure.
            if let Some(d) = dev {
                d.shutdown();
            }
            return Err(e);
        }
    };
    let vm = cache.vmstat().delta(&before);
    let io = dev.map(|d| d.stat());
    // After the counters: the read-back swaps pages in too.
    if let Some(strm) = strm {
        strm.verify(buf)?;
        strm.close()?;
    }
    for p in &paths {
        remove_file(&cache, p, dev)?;
    }
    drop(resident);
    drop(cache);
    if let Some(p) = swap_file {
        std::fs::remove_file(&p).map_err(|e| Error::io(format!("removing {}", p.display()), e))?;
    }
    Ok(RunOut { elapsed_s, sync_s, files, vm, timeline, io })
}

/// (measure, unit, counter, divisor).
pub(super) const COUNTER_MEASURES: [(&str, &str, Item, f64); 8] = [
    ("nr_vmscan_write_direct", "pages", Item::nr_vmscan_write_direct, 1.0),
    ("nr_vmscan_write_kswapd", "pages", Item::nr_vmscan_write_kswapd, 1.0),
    ("nr_vmscan_immediate_reclaim", "pages", Item::nr_vmscan_immediate_reclaim, 1.0),
    ("pgrotated", "pages", Item::pgrotated, 1.0),
    ("allocstall", "events", Item::allocstall, 1.0),
    ("pgscan_direct", "pages", Item::pgscan_direct, 1.0),
    ("throttled_ms", "ms", Item::balance_dirty_pages_pause_ns, 1e6),
    ("congestion_waits", "events", Item::congestion_waits, 1.0),
];

pub(super) const DEVICE_MEASURES: [(&str, &str, Better); 3] = [
    ("avg_wait_ms", "ms", Better::Lower),
    ("device_writes", "requests", Better::Lower),
    ("avgrq_kib", "KiB", Better::Higher),
];

/// iostat's await (queueing included), write requests, avgrq-sz.
pub(super) fn device_values(io: &IoStat) -> [f64; 3] {
    let ios = io.rd_ios + io.wr_ios;
    let avgrq = if ios == 0 { f64::NAN } else { (io.rd_bytes + io.wr_bytes) as f64 / ios as f64 / 1024.0 };
    [io.await_ms(), io.wr_ios as f64, avgrq]
}

/// mmap-strm's swap measures (the original: "anonymous pages are
/// still written").
pub(super) const SWAP_MEASURES: [(&str, &str, Item); 4] = [
    ("pswpout", "pages", Item::pswpout),
    ("pswpin", "pages", Item::pswpin),
    ("pgscan_anon", "pages", Item::pgscan_anon),
    ("pgsteal_anon", "pages", Item::pgsteal_anon),
];

pub(super) fn swaps(w: Workload) -> bool {
    matches!(w, Workload::MmapStrm { .. })
}

pub(super) fn on_device(opts: &ReclaimWritebackOpts, w: Workload) -> bool {
    opts.device.rate.is_some() && !matches!(w, Workload::MmapStrm { .. })
}

impl SeedMeasure for ReclaimWritebackExp {
    fn measure(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> Result<(Measured, Matrix<RunOut>)> {
        let workloads = opts.workloads();
        let names: Vec<String> = workloads.iter().map(|w| w.name()).collect();
        let buf = pattern(BLOCK as usize);
        let outs = ctx.each_variant(opts.runs, &names, |r, wi, vi| {
            let sample = r == 0 && opts.plot_dir.is_some();
            run_one(&ctx.variants[vi], workloads[wi], opts, ctx.tmp.path(), &buf, sample)
        })?;

        let per_workload: Vec<Vec<Measure>> = workloads.iter().map(|&w| measures(opts, w)).collect();
        let specs = per_workload.iter().flatten().map(|m| m.spec.clone()).collect();
        let columns = ctx.columns(&outs, &names, |_, w, runs, metrics| {
            for m in per_workload.iter().flatten().filter(|m| m.spec.workload == w) {
                metrics.insert(m.spec.name.clone(), Samples(runs.iter().map(&m.value).collect()));
            }
            runs.iter().map(|o| o.vm.clone()).collect()
        });
        let notes = notes(opts)?;
        let params = serde_json::json!({
            "page_size": Config::default().page_size,
            "workloads": workloads.iter().map(|w| serde_json::json!({
                "name": w.name(),
                "description": w.describe(opts),
            })).collect::<Vec<_>>(),
            "timing": "elapsed_s: first write to the return of the last (files closed), no sync; \
                       sync_s: the sync_all after, untimed in elapsed",
            "vmstat": "deltas per workload, event counters summed over the runs",
            "device": opts.device.spec()?.map(|s| s.to_string()),
        });
        let m = Measured { variants: columns, specs, params: into_map(params), extra: Default::default(), notes };
        Ok((m, outs))
    }
}

struct Measure {
    spec: MetricSpec,
    value: Box<dyn Fn(&RunOut) -> f64>,
}

fn measures(opts: &ReclaimWritebackOpts, w: Workload) -> Vec<Measure> {
    let n = w.name();
    let mut out = Vec::new();
    let mut add = |measure: &str, unit: &str, better, mean, table, value: Box<dyn Fn(&RunOut) -> f64>| {
        out.push(Measure { spec: MetricSpec::new(&n, measure, unit, better, mean, table), value });
    };
    if matches!(w, Workload::Fsmark { .. }) {
        add(
            "files/s",
            "files/s",
            Better::Higher,
            Mean::Harmonic,
            true,
            Box::new(|o| o.files as f64 / o.elapsed_s.max(1e-9)),
        );
    }
    add("elapsed_s", "s", Better::Lower, Mean::Arithmetic, true, Box::new(|o| o.elapsed_s));
    add("sync_s", "s", Better::Lower, Mean::Arithmetic, false, Box::new(|o| o.sync_s));
    let efficiency =
        |o: &RunOut| 100.0 * ratio(o.vm.get(Item::pgsteal_kswapd) as f64, o.vm.get(Item::pgscan_kswapd) as f64);
    add("kswapd_efficiency_%", "%", Better::Higher, Mean::Arithmetic, false, Box::new(efficiency));
    for (measure, unit, item, divisor) in COUNTER_MEASURES {
        add(measure, unit, Better::Lower, Mean::Arithmetic, false, Box::new(move |o| o.vm.get(item) as f64 / divisor));
    }
    if on_device(opts, w) {
        for (k, (measure, unit, better)) in DEVICE_MEASURES.into_iter().enumerate() {
            let value = move |o: &RunOut| o.io.as_ref().map_or(f64::NAN, |io| device_values(io)[k]);
            add(measure, unit, better, Mean::Arithmetic, false, Box::new(value));
        }
    }
    if swaps(w) {
        for (measure, unit, item) in SWAP_MEASURES {
            add(measure, unit, Better::Lower, Mean::Arithmetic, false, Box::new(move |o| o.vm.get(item) as f64));
        }
    }
    out
}

fn notes(opts: &ReclaimWritebackOpts) -> Result<Vec<String>> {
    let mut notes = vec![
        format!(
            "mmap-strm swaps to a swap file in the temporary directory (SwapConfig::file, O_DIRECT, allocated at \
             swapon outside the timing), as the original had swap on a disk of its own; swap in memory would make \
             a swap-out a copy and hide the original's observation that swapping costs more than writing file pages. \
             After each run a sample of {} pages of every region is read back and checked (outside the timing \
             and the counters)",
            mmap_strm::VERIFY_SAMPLES
        ),
        format!(
            "{} host files with O_DIRECT on the device holding the temporary directory; the original used XFS on \
             a 4-disk RAID-0",
            if opts.device.in_memory { "mmap-strm's files are" } else { "files are" }
        ),
    ];
    let writers = if opts.simple_wb { "fsmark and simple-wb" } else { "fsmark" };
    if !opts.simple_wb {
        notes.push(
            "simple-wb (parallel dd) not run: the quick run gives its time to more fs_mark runs (--param \
             simple_wb=true runs it)"
                .into(),
        );
    }
    if let Some(spec) = opts.device.spec()? {
        notes.push(format!(
            "{writers} ran on a simulated device of {spec} (--param device_rate, device_latency): a token bucket \
             in front of {}, one queue for reads and writes, one per run; avg_wait_ms is its iostat await \
             (arrival to completion, queueing included), the original's USB-stick \"Avg wait\"; mmap-strm ran \
             on the host files",
            if opts.device.in_memory {
                "data kept in memory (the quick run: no host disk's noise or slow unlinks behind the bucket)"
            } else {
                "the host files"
            }
        ));
    }
    if opts.device.resident > 0.0 {
        notes.push(format!(
            "{writers} ran beside a desktop (--param resident={}): a memory file of {} ({:.0}% of memory) mapped \
             executable and touched page by page every {RESIDENT_TOUCH_MS} ms, set up and written back before \
             the timing; it leaves the writers less memory than the dirty limit, as a small zone full of dirty \
             pages did on the original's machines, so reclaim meets dirty pages",
            opts.device.resident,
            fmt_size((opts.mem_bytes as f64 * opts.device.resident) as u64),
            opts.device.resident * 100.0
        ));
    }
    let cpus = crate::sys::cpus();
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
    Ok(notes)
}

impl Workload {
    fn describe(self, opts: &ReclaimWritebackOpts) -> String {
        let mem = opts.mem_bytes as f64;
        match self {
            Workload::Fsmark { threads, per_thread } => {
                let total = (threads * per_thread) as u64 * opts.fsmark_file_bytes;
                format!(
                    "fs_mark -S0 -s {} -n {per_thread} -t {threads}: {threads} x {per_thread} files of {} \
                     ({}, {:.1}x memory) in 64 KiB writes, no fsync",
                    opts.fsmark_file_bytes,
                    fmt_size(opts.fsmark_file_bytes),
                    fmt_size(total),
                    total as f64 / mem
                )
            }
            Workload::SimpleWb { threads, blocks } => {
                let total = (threads * blocks) as u64 * BLOCK;
                format!(
                    "{threads} dd writers, each one file of {} in 1 MiB blocks ({}, {:.1}x memory)",
                    fmt_size(blocks as u64 * BLOCK),
                    fmt_size(total),
                    total as f64 / mem
                )
            }
            Workload::MmapStrm { blocks, mix_blocks, anon_blocks } => format!(
                "stream {} ({:.1}x memory) through a shared writable file mapping in 1 MiB writes, then \
                 {MIX_PASSES} passes of writes to an anonymous region of {} ({:.1}x) and a second file mapping \
                 of {} ({:.1}x) together; swap: a file of {} in the temporary directory (O_DIRECT)",
                fmt_size(blocks * BLOCK),
                (blocks * BLOCK) as f64 / mem,
                fmt_size(anon_blocks * BLOCK),
                (anon_blocks * BLOCK) as f64 / mem,
                fmt_size(mix_blocks * BLOCK),
                (mix_blocks * BLOCK) as f64 / mem,
                fmt_size(swap_bytes(anon_blocks * BLOCK))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(params: &[(&str, &str)]) -> ExpOpts {
        ExpOpts {
            quick: true,
            params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..ExpOpts::default()
        }
    }

    #[test]
    fn device_params() {
        let o = ReclaimWritebackOpts::from_exp(&exp(&[
            ("device_rate", "30MiB/s"),
            ("device_latency", "5ms"),
            ("resident", "0.65"),
        ]))
        .unwrap();
        let want =
            DeviceOpts { rate: Some(30 << 20), latency: Duration::from_millis(5), resident: 0.65, in_memory: true };
        assert_eq!(o.device, want);
        assert_eq!(o.device.spec().unwrap().unwrap().to_string(), "30 MiB/s, 5 ms per request");
        // Quick runs on the quick device unless told otherwise; full size
        // on the host files.
        assert_eq!(ReclaimWritebackOpts::from_exp(&exp(&[])).unwrap().device, DeviceOpts::QUICK);
        let none = ReclaimWritebackOpts::from_exp(&exp(&[("device_rate", "none")])).unwrap();
        assert_eq!(none.device, DeviceOpts::default());
        assert_eq!(none.device.spec().unwrap(), None);
        let full = ReclaimWritebackOpts::from_exp(&ExpOpts::default()).unwrap();
        assert_eq!(full.device, DeviceOpts::default());
        // Bad values are option errors that say what is wrong.
        for (params, needle) in [
            (&[("device_rate", "30Q")][..], "unknown unit"),
            (&[("device_rate", "0")][..], "out of range"),
            (&[("device_rate", "30M"), ("device_latency", "5")][..], "needs a unit"),
            (&[("device_rate", "none"), ("device_latency", "5ms")][..], "needs a device_rate"),
            (&[("resident", "0.9")][..], "resident"),
            (&[("resident", "lots")][..], "resident"),
        ] {
            match ReclaimWritebackOpts::from_exp(&exp(params)) {
                Err(Error::Invalid(m)) => assert!(m.contains(needle), "{params:?}: {m}"),
                other => panic!("{params:?}: {other:?}"),
            }
        }
        let bad = ReclaimWritebackOpts {
            device: DeviceOpts { rate: Some(1), ..DeviceOpts::default() },
            ..ReclaimWritebackOpts::defaults(true)
        };
        assert!(matches!(bad.validate(), Err(Error::Invalid(_))));
    }

    // Goal: with the device, the workloads' files sit behind it (their
    // transfers are counted there) and are gone after the run.
    #[test]
    fn files_go_through_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PageCache::new(Config::with_memory(8 << 20)).unwrap();
        let limit = RateLimit::new("t", RateSpec::parse("1G", "0").unwrap());
        let path = dir.path().join("f");
        let f = create_file(&cache, &path, Some(&limit), false).unwrap();
        write_seq(&f, 1 << 20, FSMARK_CHUNK, &pattern(FSMARK_CHUNK as usize)).unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
        let st = limit.stat();
        assert_eq!(st.wr_bytes, 1 << 20);
        assert!(st.w_await_ms() >= 0.0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        remove_file(&cache, &path, Some(&limit)).unwrap();
        assert!(!path.exists());
        // Without a device: a plain host file.
        let f = create_file(&cache, &path, None, false).unwrap();
        f.close().unwrap();
        remove_file(&cache, &path, None).unwrap();
        assert!(!path.exists());
    }

    // Goal: the desktop's set is faulted in and clean before the workload.
    #[test]
    fn resident_set_is_clean_and_mapped() {
        let cache = PageCache::new(Config::with_memory(8 << 20)).unwrap();
        assert!(Resident::start(&cache, 0.0).unwrap().is_none());
        let r = Resident::start(&cache, 0.5).unwrap().unwrap();
        assert_eq!(r.map.nr_pages(), (4 << 20) / cache.page_size() as u64);
        assert_eq!(cache.vmstat().get(Item::nr_dirty), 0);
        let stop = AtomicBool::new(true);
        r.run(&stop).unwrap();
    }
}

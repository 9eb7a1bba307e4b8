use super::*;

pub(super) struct RunOut {
    elapsed: Vec<f64>,
    cpu: Vec<f64>,
    vm: VmStat,
}

pub(super) const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// One dd, timed from the open to the close: (wall, this thread's CPU
/// seconds). The unlink is untimed.
pub(super) fn dd_once(
    cache: &PageCache,
    b: Backend,
    m: Mode,
    dir: &Path,
    p: &DdParams,
    buf: &[u8],
) -> Result<(f64, f64)> {
    let name = format!("dd-{}", workload_name(b, m));
    let path = dir.join(&name);
    let cpu0 = thread_cpu_s();
    let start = Instant::now();
    let f = match b {
        Backend::Tmpfs => cache.open_memory(&name)?,
        Backend::File => cache.open(&path, CREATE)?,
    };
    crate::sys::write_seq(&f, p.file_bytes, p.block_bytes, buf)?;
    if m == Mode::Fdatasync {
        f.fdatasync()?;
    }
    f.close()?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    match b {
        Backend::Tmpfs => cache.unlink_memory(&name)?,
        Backend::File => cache.unlink(&path)?,
    }
    Ok((secs, cpu))
}

/// One workload in one run: a fresh, warmed-up cache per variant, then
/// `iterations` rounds of one dd per variant, in alternating order.
pub(super) fn run_workload(
    variants: &[Variant],
    run: usize,
    (b, m): (Backend, Mode),
    dir: &Path,
    p: &DdParams,
    buf: &[u8],
) -> Result<Vec<RunOut>> {
    let nv = variants.len();
    let mut caches = Vec::with_capacity(nv);
    for (vi, v) in variants.iter().enumerate() {
        let cache = PageCache::new(Config { memory_bytes: p.mem_bytes, tunables: v.tunables, ..Config::default() })?;
        // A directory per variant, so that the variants' host files do not clash.
        let vdir = dir.join(format!("v{vi}"));
        std::fs::create_dir_all(&vdir).map_err(|e| Error::io(format!("creating {}", vdir.display()), e))?;
        // Warm-up: fault the frames in, start the flusher.
        dd_once(&cache, b, m, &vdir, p, buf)?;
        caches.push((cache, vdir));
    }
    let befores: Vec<VmStat> = caches.iter().map(|(c, _)| c.vmstat()).collect();
    let mut elapsed = vec![Vec::with_capacity(p.iterations); nv];
    let mut cpu = vec![Vec::with_capacity(p.iterations); nv];
    for i in 0..p.iterations {
        let order: Vec<usize> = if (run + i).is_multiple_of(2) { (0..nv).collect() } else { (0..nv).rev().collect() };
        for vi in order {
            let (cache, vdir) = &caches[vi];
            let (wall, c) = dd_once(cache, b, m, vdir, p, buf)?;
            elapsed[vi].push(wall);
            cpu[vi].push(c);
        }
    }
    Ok(caches
        .into_iter()
        .zip(befores)
        .zip(elapsed.into_iter().zip(cpu))
        .map(|(((cache, _), before), (elapsed, cpu))| RunOut { elapsed, cpu, vm: cache.vmstat().delta(&before) })
        .collect())
}

pub(super) const PER_PAGE: [(&str, Item); 3] = [
    ("atomic_flag_rmw/page", Item::atomic_flag_rmw),
    ("mark_page_accessed/page", Item::mark_page_accessed_calls),
    ("init_page_accessed/page", Item::init_page_accessed_calls),
];

pub(super) fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        f64::NAN
    }
}

impl SeedMeasure for Dd {
    fn measure(ctx: &Ctx<'_>, p: &DdParams) -> Result<(Measured, ())> {
        let buf = pattern(p.block_bytes as usize);
        let names: Vec<String> = WORKLOADS.iter().map(|&(b, m)| workload_name(b, m)).collect();
        let outs = ctx.side_by_side(p.runs, &names, |r, wi| {
            run_workload(&ctx.variants, r, WORKLOADS[wi], ctx.tmp.path(), p, &buf)
        })?;

        let mut specs = Vec::new();
        for w in &names {
            specs.push(MetricSpec::new(w, "elapsed_s", "s", Better::Lower, Mean::Arithmetic, true));
            specs.push(MetricSpec::new(w, "MB/s", "MB/s", Better::Higher, Mean::Harmonic, true));
            specs.push(MetricSpec::new(w, "cpu_s", "s", Better::Lower, Mean::Arithmetic, true));
            for (measure, _) in PER_PAGE {
                specs.push(MetricSpec::new(w, measure, "per page", Better::Lower, Mean::Arithmetic, false));
            }
        }
        let pages = (p.pages() * p.iterations as u64) as f64;
        let columns = ctx.columns(&outs, &names, |_, w, runs, metrics| {
            let el: Vec<f64> = runs.iter().flat_map(|o| o.elapsed.iter().copied()).collect();
            metrics.insert(format!("{w} elapsed_s"), Samples(el.clone()));
            metrics.insert(format!("{w} MB/s"), Samples(el.iter().map(|&s| mbps(p.file_bytes, s)).collect()));
            metrics.insert(format!("{w} cpu_s"), Samples(runs.iter().flat_map(|o| o.cpu.iter().copied()).collect()));
            for (measure, item) in PER_PAGE {
                let v = runs.iter().map(|o| o.vm.get(item) as f64 / pages).collect();
                metrics.insert(format!("{w} {measure}"), Samples(v));
            }
            runs.iter().map(|o| o.vm.clone()).collect()
        });

        let mut notes = vec![
            "tmpfs is modelled by a memory-only file: unlike tmpfs its pages are written back to a memory device \
             (a copy) by the flusher and by fdatasync, so tmpfs-fdatasync does work the kernel's tmpfs does not"
                .to_string(),
            "file: a host file in the temporary directory, written back with O_DIRECT; the original used ext3, ext4, \
             xfs and btrfs on a disk"
                .to_string(),
            format!(
                "samples: elapsed_s, MB/s and cpu_s one per timed iteration ({} runs x {} iterations, each after an untimed \
                 warm-up in a fresh cache); the per-page counters one per run",
                p.runs, p.iterations
            ),
        ];
        if p.runs * p.iterations < 2 {
            notes.push("one sample: no spread, so no difference can be marked significant".into());
        }
        let params = serde_json::json!({
            "workloads": WORKLOADS.iter().map(|&(b, m)| serde_json::json!({
                "name": workload_name(b, m),
                "description": describe(b, m, p),
            })).collect::<Vec<_>>(),
            "timing": "elapsed_s: open to the return of close, fdatasync included in the fdatasync mode; the \
                       unlink after is not timed; MB/s = file bytes / 10^6 / elapsed_s; cpu_s: the writer \
                       thread's CPU time over the same span (CLOCK_THREAD_CPUTIME_ID: not the flusher's, and \
                       not the time it was preempted)",
            "samples": "elapsed_s, MB/s, cpu_s: one per timed iteration; */page counters: one per run (vmstat deltas \
                        of the timed iterations over the pages written)",
            "vmstat": "deltas of the timed iterations (their unlinks included) per workload, event counters \
                       summed over the runs",
        });
        Ok((Measured { variants: columns, specs, params: into_map(params), extra: Default::default(), notes }, ()))
    }
}

pub(super) fn describe(b: Backend, m: Mode, p: &DdParams) -> String {
    format!(
        "dd of {} in {} blocks to a {}{}, {} timed iterations (+1 warm-up), unlinked after each",
        fmt_size(p.file_bytes),
        fmt_size(p.block_bytes),
        match b {
            Backend::Tmpfs => "memory-only file (tmpfs)",
            Backend::File => "host file (O_DIRECT writeback)",
        },
        match m {
            Mode::Async => ", no sync",
            Mode::Fdatasync => ", fdatasync before close",
        },
        p.iterations
    )
}

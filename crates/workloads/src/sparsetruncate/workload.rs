use super::*;

#[derive(Default)]
pub(super) struct RunOut {
    /// µs per truncate, wall clock.
    times: Vec<f64>,
    /// µs per truncate, this thread's CPU time.
    cpu: Vec<f64>,
    vm: Vec<VmStat>,
    /// Large folios the fills read (thp_file_alloc), all rounds.
    large_folios: u64,
}

impl RunOut {
    fn per_truncate(&self, item: Item) -> f64 {
        let n = self.times.len();
        if n == 0 {
            return f64::NAN;
        }
        self.vm.iter().map(|d| d.get(item)).sum::<u64>() as f64 / n as f64
    }

    fn large_folios_per_truncate(&self) -> f64 {
        match self.times.len() {
            0 => f64::NAN,
            n => self.large_folios as f64 / n as f64,
        }
    }
}

pub(super) const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

pub(super) struct Subject {
    cache: PageCache,
    dir: PathBuf,
}

impl Subject {
    fn name(&self, j: usize) -> (String, PathBuf) {
        let n = format!("sparse-{j:05}");
        let p = self.dir.join(&n);
        (n, p)
    }

    /// Create the sparse files and read every page of each; handles closed.
    fn fill(&self, b: Backend, p: &SparseParams) -> Result<()> {
        let mut buf = [0u8; READ_BYTES];
        let ps = p.page_size as u64;
        for j in 0..p.files {
            let (name, path) = self.name(j);
            let f = match b {
                Backend::Tmpfs => self.cache.open_memory(&name)?,
                Backend::File => self.cache.open(&path, CREATE)?,
            };
            f.set_len(p.file_bytes)?;
            for i in 0..p.pages_per_file() {
                let n = f.read_at(&mut buf[..p.read_bytes], i * ps)?;
                if n != p.read_bytes || buf[..n].iter().any(|&x| x != 0) {
                    return Err(Error::Check(format!("{}: a hole read {n} bytes or not zeroes", f.name())));
                }
            }
            if f.cached_pages() != p.pages_per_file() {
                return Err(Error::Check(format!(
                    "{}: {} of {} pages cached after the read",
                    f.name(),
                    f.cached_pages(),
                    p.pages_per_file()
                )));
            }
            f.close()?;
        }
        // Pages still in another CPU's lru_add batch when this thread has
        // migrated would outlive their unlink (a local drain cannot reach
        // them) and blur the truncation phase's counts: start it with
        // every page on the lists.
        self.cache.lru_add_drain_all();
        Ok(())
    }

    fn truncate(&self, b: Backend, j: usize) -> Result<(f64, f64)> {
        let (name, path) = self.name(j);
        let cpu0 = crate::sys::thread_cpu_s();
        let start = Instant::now();
        match b {
            Backend::Tmpfs => self.cache.unlink_memory(&name)?,
            Backend::File => self.cache.unlink(&path)?,
        }
        let wall = start.elapsed().as_secs_f64() * 1e6;
        let cpu = (crate::sys::thread_cpu_s() - cpu0) * 1e6;
        Ok((wall, cpu))
    }
}

/// One backend in one run: `rounds` of fill then truncate, the variants
/// taking turns file by file.
pub(super) fn run_backend(
    variants: &[Variant],
    run: usize,
    b: Backend,
    dir: &Path,
    p: &SparseParams,
) -> Result<Vec<RunOut>> {
    let nv = variants.len();
    let mut subjects = Vec::with_capacity(nv);
    for (vi, v) in variants.iter().enumerate() {
        let cache = PageCache::new(Config { memory_bytes: p.mem_bytes, tunables: v.tunables, ..Config::default() })?;
        let vdir = dir.join(format!("v{vi}"));
        std::fs::create_dir_all(&vdir).map_err(|e| Error::io(format!("creating {}", vdir.display()), e))?;
        subjects.push(Subject { cache, dir: vdir });
    }
    let mut outs: Vec<RunOut> = (0..nv).map(|_| RunOut::default()).collect();
    for round in 0..p.rounds {
        let fills: Vec<VmStat> = subjects.iter().map(|s| s.cache.vmstat()).collect();
        for s in &subjects {
            s.fill(b, p)?;
        }
        let befores: Vec<VmStat> = subjects.iter().map(|s| s.cache.vmstat()).collect();
        for (vi, out) in outs.iter_mut().enumerate() {
            out.large_folios += befores[vi].delta(&fills[vi]).get(Item::thp_file_alloc);
        }
        for j in 0..p.files {
            // Who goes first rotates, so that every variant takes every
            // place equally often (with two, they alternate).
            let first = (run + round + j) % nv;
            for vi in (0..nv).map(|k| (first + k) % nv) {
                let (wall, cpu) = subjects[vi].truncate(b, j)?;
                outs[vi].times.push(wall);
                outs[vi].cpu.push(cpu);
            }
        }
        for (vi, s) in subjects.iter().enumerate() {
            outs[vi].vm.push(s.cache.vmstat().delta(&befores[vi]));
        }
    }
    Ok(outs)
}

pub(super) const PER_TRUNCATE: [(&str, Item); 3] = [
    ("lru_drain/truncate", Item::lru_drain),
    ("pagevec_release/truncate", Item::pagevec_release),
    ("lru_lock/truncate", Item::lru_lock_acquire),
];

/// The large folios read into each file truncated, so freed by its
/// truncate: counted in the fill, as truncation has no counter of its own.
pub(super) const LARGE_FOLIOS_PER_TRUNCATE: &str = "large_folios/truncate";

impl SeedMeasure for Sparsetruncate {
    fn measure(ctx: &Ctx<'_>, p: &SparseParams) -> Result<(Measured, ())> {
        let names: Vec<String> = BACKENDS.iter().map(|b| b.name().to_string()).collect();
        let outs =
            ctx.side_by_side(p.runs, &names, |r, bi| run_backend(&ctx.variants, r, BACKENDS[bi], ctx.tmp.path(), p))?;

        let mut specs = Vec::new();
        for b in BACKENDS {
            specs.push(MetricSpec::new(b.name(), "truncate_us", "us", Better::Lower, Mean::Arithmetic, true));
            specs.push(MetricSpec::new(b.name(), "truncate_cpu_us", "us", Better::Lower, Mean::Arithmetic, true));
            for measure in PER_TRUNCATE.map(|(m, _)| m).into_iter().chain([LARGE_FOLIOS_PER_TRUNCATE]) {
                specs.push(MetricSpec::new(b.name(), measure, "per truncate", Better::Lower, Mean::Arithmetic, false));
            }
        }
        let columns = ctx.columns(&outs, &names, |_, w, runs, metrics| {
            let times = runs.iter().flat_map(|o| o.times.iter().copied()).collect();
            metrics.insert(format!("{w} truncate_us"), Samples(times));
            let cpu = runs.iter().flat_map(|o| o.cpu.iter().copied()).collect();
            metrics.insert(format!("{w} truncate_cpu_us"), Samples(cpu));
            for (measure, item) in PER_TRUNCATE {
                metrics.insert(format!("{w} {measure}"), Samples(runs.iter().map(|o| o.per_truncate(item)).collect()));
            }
            let large = runs.iter().map(RunOut::large_folios_per_truncate).collect();
            metrics.insert(format!("{w} {LARGE_FOLIOS_PER_TRUNCATE}"), Samples(large));
            runs.iter().flat_map(|o| o.vm.iter().cloned()).collect()
        });

        let mut notes = vec![
            format!(
                "samples: truncate_us one per truncate ({} runs x {} rounds x {} files per variant and backend); the \
                 */truncate counters one per run",
                p.runs, p.rounds, p.files
            ),
            "file: host files in the temporary directory; the host's unlink (a sparse file, no blocks) is inside the \
             timing, as the original's unlink included the filesystem's"
                .to_string(),
            "tmpfs: memory-only files; the kernel's tmpfs would not cache hole pages on read (shmem maps the zero \
             page), pcache's memory files do, so tmpfs here is the page cache's truncation alone"
                .to_string(),
            "the variants run side by side (a cache each, files unlinked in turn), so drifts of the machine fall on \
             every one"
                .to_string(),
        ];
        // Where the wall-time tail is time off the CPU, say so.
        for (bi, b) in BACKENDS.iter().enumerate() {
            let mut wall: Vec<f64> = outs.workload(bi).flat_map(|o| o.times.iter().copied()).collect();
            let mut cpu: Vec<f64> = outs.workload(bi).flat_map(|o| o.cpu.iter().copied()).collect();
            wall.sort_by(f64::total_cmp);
            cpu.sort_by(f64::total_cmp);
            let (w99, c99) = (quantile_sorted(&wall, 0.99), quantile_sorted(&cpu, 0.99));
            if w99 > 1.5 * c99 {
                notes.push(format!(
                    "{}: the wall-time tail is time off the CPU: Max-99% {w99:.0} us of wall time against {c99:.0} us of \
                     CPU time (all variants), so Max and Stddev of the wall time measure preemption by other load more \
                     than truncation; the CPU-time rows show the truncation work",
                    b.name()
                ));
            }
        }
        let params = serde_json::json!({
            "workloads": BACKENDS.iter().map(|&b| serde_json::json!({
                "name": b.name(),
                "description": describe(b, p),
            })).collect::<Vec<_>>(),
            "timing": "truncate_us: wall time of one unlink of a closed file whose every page is cached, in \
                       microseconds; truncate_cpu_us: the same unlink's thread CPU time (CLOCK_THREAD_CPUTIME_ID)",
            "samples": "truncate_us, truncate_cpu_us: one per truncate, pooled over rounds and runs; */truncate: one \
                        per run",
            "vmstat": "deltas of the truncation phases per backend, summed over rounds and runs",
            "large_folios": "large_folios/truncate: the large folios the fills read (thp_file_alloc) per file, so \
                             those its truncate freed; 0 with single pages",
        });
        Ok((Measured { variants: columns, specs, params: into_map(params), extra: Default::default(), notes }, ()))
    }
}

pub(super) fn describe(b: Backend, p: &SparseParams) -> String {
    format!(
        "{} sparse {} of {} ({} pages; {:.0}% of {}), {} bytes read at every page, then each unlinked, timed; \
         {} rounds",
        p.files,
        match b {
            Backend::Tmpfs => "memory-only files",
            Backend::File => "host files",
        },
        fmt_size(p.file_bytes),
        p.pages_per_file(),
        (p.files as u64 * p.file_bytes) as f64 / p.mem_bytes as f64 * 100.0,
        fmt_size(p.mem_bytes),
        p.read_bytes,
        p.rounds
    )
}

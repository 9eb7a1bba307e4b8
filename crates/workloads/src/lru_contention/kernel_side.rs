use super::workload::*;
use super::*;

pub(super) const KERNEL_MEASURES: [&str; 2] = ["ops/s", "hit_ratio_%"];

/// The kernel workload's parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct KernelParams {
    pub(super) files: Vec<PathBuf>,
    pub(super) pages_per_file: u64,
    pub(super) page_size: u64,
    pub(super) zipf_s: f64,
    pub(super) perm_seed: u64,
    pub(super) seed: u64,
    pub(super) threads: Vec<usize>,
    pub(super) runs: usize,
    pub(super) ops_per_thread: u64,
    pub(super) warm_ops_per_thread: Vec<u64>,
}

impl SeedKernel for LruContention {
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }

    fn kernel_column(ctx: &Ctx<'_>, opts: &LruContentionOpts) -> std::result::Result<KernelColumn, String> {
        let workloads: Vec<String> = opts.threads.iter().map(|&t| workload_name(t)).collect();
        let tmp = &ctx.tmp;
        let ppf = opts.pages_per_file();
        let mut paths = Vec::new();
        let chunk_pages = (MIB / PAGE).min(ppf).max(1);
        let mut buf = vec![0u8; (chunk_pages * PAGE) as usize];
        for f in 0..opts.files {
            let path = tmp.path().join(format!("file-{f}"));
            let file = std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            let mut index = 0;
            while index < ppf {
                let n = chunk_pages.min(ppf - index);
                for (i, page) in buf.chunks_mut(PAGE as usize).take(n as usize).enumerate() {
                    fill_page(page, f, index + i as u64);
                }
                file.write_all_at(&buf[..(n * PAGE) as usize], index * PAGE)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
                index += n;
            }
            file.sync_all().map_err(|e| format!("syncing {}: {e}", path.display()))?;
            kernel::drop_cached(&file);
            paths.push(path);
        }
        let params = KernelParams {
            files: paths,
            pages_per_file: ppf,
            page_size: PAGE,
            zipf_s: opts.zipf_s,
            perm_seed: perm_seed(opts.seed),
            seed: opts.seed,
            threads: opts.threads.clone(),
            runs: opts.runs,
            ops_per_thread: opts.kernel_ops_per_thread,
            warm_ops_per_thread: opts.threads.iter().map(|&t| opts.warm_ops_per_thread(t)).collect(),
        };
        let v = kernel::run(EXPERIMENT, opts.mem_bytes, &params)?;
        let cells = v.get("cells").and_then(|c| c.as_array()).ok_or("the kernel worker returned no cells")?;
        let mut metrics: Named<Samples> = Named::new();
        for (w, &t) in workloads.iter().zip(&opts.threads) {
            let cell = cells
                .iter()
                .find(|c| c["threads"].as_u64() == Some(t as u64))
                .ok_or_else(|| format!("the kernel worker measured nothing for {t} threads"))?;
            for (measure, key) in KERNEL_MEASURES.iter().zip(["ops_s", "hit_ratio_%"]) {
                metrics.insert(format!("{w} {measure}"), Samples(kernel::samples(&cell[key])));
            }
        }
        let mut notes = vec![format!(
            "kernel column: the host kernel (Linux {}) reading the same key streams with pread(2) from {} real files \
             on the temporary directory's filesystem, in a memory cgroup of {} (the worker process's own memory \
             is charged to it too), {} timed reads per thread (pcache: {}); hits told by cachestat(2) before each \
             read; ops/s = the sum over threads of reads / time inside pread, so the cachestat calls are not counted; \
             its misses wait for the disk",
            kernel_release(),
            opts.files,
            fmt_size(opts.mem_bytes),
            opts.kernel_ops_per_thread,
            opts.ops_per_thread
        )];
        if v["cachestat"].as_bool() == Some(false) {
            notes.push("kernel column: cachestat(2) is not available, so the kernel's hit ratio is unknown".into());
        }
        let stands_for = KernelColumn::stands_for("pread(2) of the same keys", opts.mem_bytes);
        Ok(KernelColumn::new(stands_for, metrics, v, notes))
    }
}

/// The same workload through the kernel's page cache, in the memory
/// cgroup: the same key streams pcache reads, each thread with its own
/// POSIX_FADV_RANDOM descriptors, asking cachestat(2) before each timed
/// read whether the page is cached.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let p: KernelParams = serde_json::from_value(params.clone()).map_err(|e| format!("bad parameters: {e}"))?;
    if p.page_size == 0 || p.pages_per_file == 0 || p.files.is_empty() || p.warm_ops_per_thread.len() != p.threads.len()
    {
        return Err("bad parameters: empty files, pages or thread counts".into());
    }
    let n = p.pages_per_file * p.files.len() as u64;
    let zipf = ZipfKeys::new(n, p.zipf_s, p.perm_seed)?;
    let open = |path: &PathBuf| std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()));
    let mut cachestat = true;
    // results[thread count] = (ops_s, ops_s_wall, hit_ratio) per run
    let mut results: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); p.threads.len()];
    let mut buf = vec![0u8; p.page_size as usize];
    for run in 0..p.runs {
        for (ti, &threads) in p.threads.iter().enumerate() {
            // Cold, then every page once in file order.
            let fds = p.files.iter().map(open).collect::<std::result::Result<Vec<_>, String>>()?;
            fds.iter().for_each(kernel::drop_cached);
            populate(&fds, p.pages_per_file, &mut buf).map_err(|e| e.to_string())?;
            drop(fds);
            let barrier = Barrier::new(threads + 1);
            let warm_n = p.warm_ops_per_thread[ti];
            let (wall_s, outs) = std::thread::scope(|s| {
                let joins: Vec<_> = (0..threads)
                    .map(|i| {
                        let (p, zipf, barrier, open) = (&p, &zipf, &barrier, &open);
                        s.spawn(move || kernel_thread(p, zipf, barrier, open, run, threads, i, warm_n))
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                barrier.wait();
                let outs: Vec<_> =
                    joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
                (start.elapsed().as_secs_f64(), outs)
            });
            let (mut rate, mut hits, mut told, mut ops) = (0.0, 0u64, 0u64, 0u64);
            for o in outs {
                let o = o?;
                rate += o.ops as f64 / o.pread_s.max(1e-9);
                hits += o.hits;
                told += o.told;
                ops += o.ops;
                cachestat &= o.told == o.ops;
            }
            let r = &mut results[ti];
            r.0.push(rate);
            r.1.push(ops as f64 / wall_s.max(1e-9));
            r.2.push(if told == 0 { f64::NAN } else { hits as f64 / told as f64 * 100.0 });
        }
    }
    // serde_json writes NaN (no hit told) as null.
    let cells: Vec<Value> = p
        .threads
        .iter()
        .zip(&results)
        .map(|(&t, (rate, wall, hit))| serde_json::json!({ "threads": t, "ops_s": rate, "ops_s_wall": wall, "hit_ratio_%": hit }))
        .collect();
    Ok(serde_json::json!({
        "kernel": kernel_release(),
        "cachestat": cachestat,
        "ops_per_thread": p.ops_per_thread,
        "ops_s_means": "reads / seconds inside pread, summed over threads (cachestat excluded); ops_s_wall: \
                        reads / wall time, cachestat included",
        "cells": cells,
    }))
}

/// One kernel-column thread's counts.
pub(super) struct KernelThreadOut {
    pub(super) ops: u64,
    pub(super) pread_s: f64,
    pub(super) hits: u64,
    /// Reads whose cached state cachestat could tell.
    pub(super) told: u64,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn kernel_thread(
    p: &KernelParams,
    zipf: &ZipfKeys,
    barrier: &Barrier,
    open: &dyn Fn(&PathBuf) -> std::result::Result<std::fs::File, String>,
    run: usize,
    threads: usize,
    i: usize,
    warm_n: u64,
) -> std::result::Result<KernelThreadOut, String> {
    let ps = p.page_size;
    let mut buf = vec![0u8; ps as usize];
    let read = |fds: &[std::fs::File], key: u64, buf: &mut [u8]| {
        read_key(fds, p.pages_per_file, key, buf, "kernel").map_err(|e| e.to_string())
    };
    let locate = |key: u64| ((key / p.pages_per_file) as usize, (key % p.pages_per_file) * ps);
    let setup = (|| -> std::result::Result<Vec<std::fs::File>, String> {
        let fds = p
            .files
            .iter()
            .map(|path| {
                let f = open(path)?;
                // SAFETY: a valid descriptor; fadvise only gives advice.
                unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_RANDOM) };
                Ok(f)
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let mut rng = StdRng::seed_from_u64(stream_seed(p.seed, run, threads, i, WARM));
        for _ in 0..warm_n {
            read(&fds, zipf.sample(&mut rng), &mut buf)?;
        }
        Ok(fds)
    })();
    barrier.wait();
    barrier.wait();
    let fds = setup?;
    let mut rng = StdRng::seed_from_u64(stream_seed(p.seed, run, threads, i, TIMED));
    let mut out = KernelThreadOut { ops: 0, pread_s: 0.0, hits: 0, told: 0 };
    let mut pread_ns = 0u128;
    for _ in 0..p.ops_per_thread {
        let key = zipf.sample(&mut rng);
        let (file, off) = locate(key);
        if let Some(c) = kernel::page_cached(&fds[file], off, ps) {
            out.told += 1;
            out.hits += c as u64;
        }
        let t0 = Instant::now();
        read(&fds, key, &mut buf)?;
        pread_ns += t0.elapsed().as_nanos();
        out.ops += 1;
    }
    out.pread_s = pread_ns as f64 / 1e9;
    Ok(out)
}

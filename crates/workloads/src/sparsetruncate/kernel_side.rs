//! The kernel column: the same sparse files through `std::fs` in a memory
//! cgroup (file backend only).

use super::*;

impl SeedKernel for Sparsetruncate {
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }

    fn kernel_column(ctx: &Ctx<'_>, p: &SparseParams) -> std::result::Result<KernelColumn, String> {
        let dir = ctx.tmp.path().join("kernel");
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let v =
            kernel::run(EXPERIMENT, p.mem_bytes, &serde_json::json!({ "dir": dir.to_string_lossy(), "params": p }))?;
        let times = kernel::samples(&v["workloads"][Backend::File.name()]["truncate_us"]);
        if times.is_empty() {
            return Err("the kernel worker measured nothing".into());
        }
        let cached = v.get("cached_fraction").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
        let mut metrics: Named<Samples> = Named::new();
        metrics.insert(format!("{} truncate_us", Backend::File.name()), Samples(times));
        let note = format!(
            "kernel column: the host kernel ({}) through std::fs on host files in a memory cgroup of {} (file \
             backend only: Linux's tmpfs does not cache hole pages on read); {} of the hole pages were in its \
             cache before the unlinks (cachestat)",
            kernel_release(),
            fmt_size(p.mem_bytes),
            if cached.is_nan() { "an unknown part".to_string() } else { format!("{:.0}%", cached * 100.0) }
        );
        let stands_for = KernelColumn::stands_for("the same sparse files through std::fs", p.mem_bytes);
        Ok(KernelColumn::new(stands_for, metrics, v, vec![note]))
    }
}

/// The same workload through the kernel's page cache, in the memory cgroup.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let dir = PathBuf::from(params.get("dir").and_then(|d| d.as_str()).ok_or("parameter dir missing")?);
    let p: SparseParams = serde_json::from_value(params["params"].clone()).map_err(|e| format!("bad params: {e}"))?;
    let (file_bytes, files, rounds, runs) = (p.file_bytes, p.files, p.rounds.max(1), p.runs.max(1));
    let (read_bytes, ps) = (p.read_bytes.clamp(1, 4096), (p.page_size as u64).max(512));
    let mut buf = vec![0u8; read_bytes];
    let mut times = Vec::new();
    let (mut cached, mut probed) = (0u64, 0u64);
    for _ in 0..runs * rounds {
        let paths: Vec<PathBuf> = (0..files).map(|j| dir.join(format!("sparse-{j:05}"))).collect();
        for path in &paths {
            let err = |e: std::io::Error| format!("{}: {e}", path.display());
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
                .map_err(err)?;
            f.set_len(file_bytes).map_err(err)?;
            let mut off = 0;
            while off < file_bytes {
                f.read_at(&mut buf, off).map_err(err)?;
                off += ps;
            }
            // Probe the last page: cached if hole pages are.
            if let Some(c) = kernel::page_cached(&f, file_bytes.saturating_sub(1), ps) {
                probed += 1;
                cached += c as u64;
            }
        }
        for path in &paths {
            let start = Instant::now();
            std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let cached_fraction = if probed == 0 { Value::Null } else { Value::from(cached as f64 / probed as f64) };
    Ok(serde_json::json!({
        "workloads": { Backend::File.name(): { "truncate_us": times } },
        "cached_fraction": cached_fraction,
    }))
}

//! The kernel column: the same dd through `std::fs` in a memory cgroup.

use super::workload::mbps;
use super::*;

impl SeedKernel for Dd {
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }

    fn kernel_column(ctx: &Ctx<'_>, p: &DdParams) -> std::result::Result<KernelColumn, String> {
        let mut notes = Vec::new();
        let file_dir = ctx.tmp.path().join("kernel");
        std::fs::create_dir(&file_dir).map_err(|e| format!("cannot create {}: {e}", file_dir.display()))?;
        let mut dirs = serde_json::Map::new();
        // Holds the tmpfs directory until the worker is done.
        let shm = is_tmpfs(Path::new("/dev/shm"))
            .then(|| tempfile::Builder::new().prefix("pcache-dd-").tempdir_in("/dev/shm").ok())
            .flatten();
        match &shm {
            Some(d) => {
                dirs.insert("tmpfs".into(), Value::from(d.path().to_string_lossy().into_owned()));
            }
            None => notes.push("kernel column: no writable tmpfs at /dev/shm, so no kernel tmpfs workloads".into()),
        }
        dirs.insert("file".into(), Value::from(file_dir.to_string_lossy().into_owned()));
        let v = kernel::run(EXPERIMENT, p.mem_bytes, &serde_json::json!({ "dirs": dirs, "params": p }))?;
        drop(shm);
        let ws = v.get("workloads").and_then(|w| w.as_object()).ok_or("the kernel worker returned no workloads")?;
        let mut metrics: Named<Samples> = Named::new();
        for &(b, m) in &WORKLOADS {
            let w = workload_name(b, m);
            let el = ws.get(&w).map_or(Vec::new(), |x| kernel::samples(&x["elapsed_s"]));
            if el.is_empty() {
                continue;
            }
            metrics.insert(format!("{w} elapsed_s"), Samples(el.clone()));
            metrics.insert(format!("{w} MB/s"), Samples(el.iter().map(|&s| mbps(p.file_bytes, s)).collect()));
        }
        if metrics.is_empty() {
            return Err("the kernel worker measured nothing".into());
        }
        let fs = v.get("file_fs").and_then(|x| x.as_str()).unwrap_or("?");
        notes.push(format!(
            "kernel column: the host kernel ({}) through std::fs, buffered, in a memory cgroup of {}; file on {fs} in \
             {}; no cost counters (no vmstat)",
            kernel_release(),
            fmt_size(p.mem_bytes),
            ctx.opts.dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "the system temp dir".into())
        ));
        let stands_for = KernelColumn::stands_for("the same dd through std::fs", p.mem_bytes);
        Ok(KernelColumn::new(stands_for, metrics, v, notes))
    }
}

/// The same dd through the kernel's page cache, in the memory cgroup.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let p: DdParams = serde_json::from_value(params["params"].clone()).map_err(|e| format!("bad params: {e}"))?;
    let (file_bytes, block, iterations, runs) = (p.file_bytes, p.block_bytes.max(1), p.iterations, p.runs.max(1));
    let dirs = params.get("dirs").and_then(|d| d.as_object()).ok_or("parameter dirs missing")?;
    let buf = pattern(block as usize);
    let mut out = serde_json::Map::new();
    let mut file_fs = String::new();
    for &(b, m) in &WORKLOADS {
        let Some(dir) = dirs.get(b.name()).and_then(|d| d.as_str()) else { continue };
        let dir = PathBuf::from(dir);
        if b == Backend::File {
            file_fs = if is_tmpfs(&dir) { "tmpfs".into() } else { "a disk filesystem".into() };
        }
        let path = dir.join(format!("dd-{}", workload_name(b, m)));
        let once = || -> std::result::Result<f64, String> {
            let err = |e: std::io::Error| format!("{}: {e}", path.display());
            let start = Instant::now();
            let f = std::fs::File::create(&path).map_err(err)?;
            crate::sys::write_seq(&f, file_bytes, block, &buf).map_err(|e| format!("{}: {e}", path.display()))?;
            if m == Mode::Fdatasync {
                f.sync_data().map_err(err)?;
            }
            drop(f);
            let secs = start.elapsed().as_secs_f64();
            std::fs::remove_file(&path).map_err(err)?;
            Ok(secs)
        };
        let mut el = Vec::new();
        for _ in 0..runs {
            once()?;
            for _ in 0..iterations {
                el.push(once()?);
            }
        }
        out.insert(workload_name(b, m), serde_json::json!({ "elapsed_s": el }));
    }
    Ok(serde_json::json!({ "workloads": out, "file_fs": file_fs }))
}

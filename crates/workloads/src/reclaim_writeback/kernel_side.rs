//! The kernel column: the same workload through the kernel's page cache in a memory
//! cgroup, and the worker's side.

use super::*;

/// Run the kernel column (fsmark and simple-wb): the column, the worker's
/// JSON and notes, or why not.
pub(super) fn kernel_column(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> std::result::Result<KernelColumn, String> {
    let (workloads, tmp) = (&opts.workloads()[..], ctx.tmp.path());
    let dir = tmp.join("kernel");
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ws: Vec<Value> = workloads
        .iter()
        .filter_map(|&w| match w {
            Workload::Fsmark { threads, per_thread } => Some(serde_json::json!({
                "name": w.name(), "kind": "fsmark", "threads": threads, "files": per_thread,
                "file_bytes": opts.fsmark_file_bytes, "chunk_bytes": FSMARK_CHUNK,
            })),
            Workload::SimpleWb { threads, blocks } => Some(serde_json::json!({
                "name": w.name(), "kind": "simple-wb", "threads": threads, "files": 1,
                "file_bytes": blocks as u64 * BLOCK, "chunk_bytes": BLOCK,
            })),
            Workload::MmapStrm { .. } => None,
        })
        .collect();
    let params = serde_json::json!({
        "dir": dir.to_string_lossy(),
        "runs": opts.runs,
        "workloads": ws,
    });
    let v = kernel::run(EXPERIMENT, opts.mem_bytes, &params)?;
    let out = v.get("workloads").and_then(|w| w.as_object()).ok_or("the kernel worker returned no workloads")?;
    let mut metrics: Named<Samples> = Named::new();
    for &w in workloads {
        let n = w.name();
        let Some(x) = out.get(&n) else { continue };
        let list = |k: &str| -> Vec<f64> {
            x.get(k)
                .and_then(|a| a.as_array())
                .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
                .unwrap_or_default()
        };
        let el = list("elapsed_s");
        if el.is_empty() {
            continue;
        }
        if matches!(w, Workload::Fsmark { .. }) {
            let files = x.get("files").and_then(|f| f.as_u64()).unwrap_or(0) as f64;
            metrics.insert(format!("{n} files/s"), Samples(el.iter().map(|&s| files / s.max(1e-9)).collect()));
        }
        metrics.insert(format!("{n} elapsed_s"), Samples(el));
        metrics.insert(format!("{n} sync_s"), Samples(list("sync_s")));
    }
    if metrics.is_empty() {
        return Err("the kernel worker measured nothing".into());
    }
    let fs = v.get("file_fs").and_then(|x| x.as_str()).unwrap_or("?");
    let mut notes = vec![format!(
        "kernel column: the host kernel ({}) through std::fs, buffered, in a memory cgroup of {}: fsmark and \
         simple-wb only (no mmap-strm), files on {fs} in {}, closed without fsync, then syncfs outside the \
         timing; no vmstat, so no counters, and the kernel's own dirty limits (not dirty_ratio 40)",
        kernel_release(),
        fmt_size(opts.mem_bytes),
        opts.dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "the system temp dir".into())
    )];
    if opts.device.rate.is_some() || opts.device.resident > 0.0 {
        notes.push(
            "kernel column: on the host's own disk, without the simulated device or the desktop beside it \
             (--param device_rate, resident), so it is no baseline for those columns"
                .into(),
        );
    }
    let stands_for = format!(
        "the host kernel's page cache (Linux {}), the same fsmark and simple-wb through std::fs in a memory \
             cgroup of {}",
        kernel_release(),
        fmt_size(opts.mem_bytes)
    );
    Ok(KernelColumn::new(stands_for, metrics, v, notes))
}

/// The fsmark and simple-wb workloads through the kernel's page cache (run
/// in the memory cgroup by [`kernel::run`]), as fs_mark -S0 runs them:
/// every thread creates its files with `std::fs`, writes them in chunks and
/// closes them without fsync, timed; then a syncfs of the directory,
/// timed apart, and the files are removed. Parameters: `dir`, `runs`,
/// `workloads` (each `name`, `threads`, `files` per thread, `file_bytes`,
/// `chunk_bytes`). Returns `{"workloads": {"fsmark-1t": {"files": n,
/// "elapsed_s": [...], "sync_s": [...]}, ...}, "file_fs": "..."}`.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let dir = PathBuf::from(params.get("dir").and_then(|d| d.as_str()).ok_or("parameter dir missing")?);
    let runs = params.get("runs").and_then(|r| r.as_u64()).ok_or("parameter runs missing")?.max(1);
    let ws = params.get("workloads").and_then(|w| w.as_array()).ok_or("parameter workloads missing")?;
    let dir_file = std::fs::File::open(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let syncfs = || -> std::result::Result<(), String> {
        // SAFETY: a valid fd of an open directory.
        if unsafe { libc::syncfs(dir_file.as_raw_fd()) } != 0 {
            return Err(format!("syncfs {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        Ok(())
    };
    // Start from a clean filesystem.
    syncfs()?;
    let mut out = serde_json::Map::new();
    for w in ws {
        let num = |k: &str| w.get(k).and_then(|x| x.as_u64()).ok_or_else(|| format!("workload parameter {k} missing"));
        let name = w.get("name").and_then(|x| x.as_str()).ok_or("workload parameter name missing")?;
        let threads = num("threads")?.clamp(1, 256) as usize;
        let files = num("files")? as usize;
        let file_bytes = num("file_bytes")?;
        let chunk = num("chunk_bytes")?.clamp(1, 64 * MIB);
        let buf = pattern(chunk as usize);
        let (mut elapsed, mut sync) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let timed = parallel(threads, |t, paths| {
                for i in 0..files {
                    let path = dir.join(format!("{name}-{t:03}-{i:05}"));
                    let err = |e: std::io::Error| Error::io(format!("writing {}", path.display()), e);
                    let mut f = std::fs::File::create(&path).map_err(err)?;
                    paths.push(path.clone());
                    let mut off = 0;
                    while off < file_bytes {
                        let n = chunk.min(file_bytes - off) as usize;
                        f.write_all(&buf[..n]).map_err(err)?;
                        off += n as u64;
                    }
                    drop(f);
                }
                Ok(())
            });
            let (secs, paths) = timed.map_err(|e| e.to_string())?;
            let t = Instant::now();
            syncfs()?;
            sync.push(t.elapsed().as_secs_f64());
            elapsed.push(secs);
            for p in &paths {
                std::fs::remove_file(p).map_err(|e| format!("removing {}: {e}", p.display()))?;
            }
        }
        out.insert(
            name.to_string(),
            serde_json::json!({ "files": threads * files, "elapsed_s": elapsed, "sync_s": sync }),
        );
    }
    let file_fs = if is_tmpfs(&dir) { "tmpfs" } else { "a disk filesystem" };
    Ok(serde_json::json!({ "workloads": out, "file_fs": file_fs }))
}

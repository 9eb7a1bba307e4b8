use super::workload::write_files;
use super::*;
use crate::sys::Mmap;

impl SeedKernel for ReclaimWritebackExp {
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }

    fn kernel_column(ctx: &Ctx<'_>, opts: &ReclaimWritebackOpts) -> std::result::Result<KernelColumn, String> {
        let (workloads, tmp) = (&opts.workloads()[..], ctx.tmp.path());
        let dir = tmp.join("kernel");
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // mmap-strm needs swap, which the host may not have: a swap file of
        // the pcache side's size, on only for this column's run.
        let strm_swap = workloads.iter().find_map(|&w| match w {
            Workload::MmapStrm { anon_blocks, .. } => Some(swap_bytes(anon_blocks * BLOCK)),
            _ => None,
        });
        // A run killed while its swap file was on left it on; turn such files
        // off first, so this run neither mistakes them for the host's own swap
        // nor leaves them on for good.
        let mut reaped = HostSwap::reap_stale();
        let (swap, swap_note) = match strm_swap.filter(|_| host_swap_total() == 0) {
            Some(bytes) => match HostSwap::on(&tmp.join(HostSwap::file_name()), bytes) {
                Ok(s) => (Some(s), None),
                Err(why) => (
                    None,
                    Some(format!("kernel column: no mmap-strm, the host has no swap and cannot get it here: {why}")),
                ),
            },
            None => (None, None),
        };
        let strm_ok = strm_swap.is_some() && (swap.is_some() || host_swap_total() > 0);
        let params = WorkerParams {
            dir: dir.clone(),
            runs: opts.runs,
            fsmark_file_bytes: opts.fsmark_file_bytes,
            workloads: workloads
                .iter()
                .copied()
                .filter(|w| strm_ok || !matches!(w, Workload::MmapStrm { .. }))
                .collect(),
        };
        let v = kernel::run(EXPERIMENT, opts.mem_bytes, &params);
        // Off before anything else can fail: the host is left without swap.
        if let Some(s) = swap {
            s.off()?;
        }
        let v = v?;
        let metrics = kernel_metrics(workloads, &v)?;
        let fs = v.get("file_fs").and_then(|x| x.as_str()).unwrap_or("?");
        let mut notes = vec![format!(
            "kernel column: the host kernel ({}) in a memory cgroup of {}: fsmark and simple-wb through std::fs, \
             buffered, files on {fs} in {}, closed without fsync, then syncfs outside the timing; no vmstat, so \
             no counters, and the kernel's own dirty limits (not dirty_ratio 40)",
            kernel_release(),
            fmt_size(opts.mem_bytes),
            opts.dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "the system temp dir".into())
        )];
        if strm_ok {
            notes.push(format!(
                "kernel column: mmap-strm through mmap(2) (a shared file mapping, then MAP_ANONYMOUS and a second \
                 shared file mapping), the same sizes, stamps and read-back; swap: {}; its pswpout/pswpin are \
                 /proc/vmstat's, host-wide (the only swapping on the host while it ran, it had no swap before)",
                if swap_note.is_none() && host_swap_total() == 0 {
                    format!(
                        "a swap file of {} in the temporary directory, swapon for this run and swapoff after",
                        fmt_size(strm_swap.unwrap_or(0))
                    )
                } else {
                    "the host's own".to_string()
                }
            ));
        }
        notes.extend(swap_note);
        notes.append(&mut reaped);
        if opts.device.rate.is_some() || opts.device.resident > 0.0 {
            notes.push(
                "kernel column: on the host's own disk, without the simulated device or the desktop beside it \
                 (--param device_rate, resident), so it is no baseline for those columns"
                    .into(),
            );
        }
        let stands_for = format!(
            "the host kernel's page cache (Linux {}), the same fsmark and simple-wb through std::fs{} in a memory \
                 cgroup of {}",
            kernel_release(),
            if strm_ok { ", mmap-strm through mmap(2) with swap," } else { "" },
            fmt_size(opts.mem_bytes)
        );
        Ok(KernelColumn::new(stands_for, metrics, v, notes))
    }
}

/// The kernel worker's parameters (mmap-strm only where there is swap).
#[derive(Serialize, Deserialize)]
pub(super) struct WorkerParams {
    dir: PathBuf,
    runs: usize,
    fsmark_file_bytes: u64,
    workloads: Vec<Workload>,
}

fn kernel_metrics(workloads: &[Workload], v: &Value) -> std::result::Result<Named<Samples>, String> {
    let out = v.get("workloads").and_then(|w| w.as_object()).ok_or("the kernel worker returned no workloads")?;
    let mut metrics: Named<Samples> = Named::new();
    for &w in workloads {
        let n = w.name();
        let Some(x) = out.get(&n) else { continue };
        let list = |k: &str| x.get(k).map(kernel::samples).unwrap_or_default();
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
        if matches!(w, Workload::MmapStrm { .. }) {
            for k in ["pswpout", "pswpin"] {
                metrics.insert(format!("{n} {k}"), Samples(list(k)));
            }
        }
    }
    if metrics.is_empty() {
        return Err("the kernel worker measured nothing".into());
    }
    Ok(metrics)
}

/// The workloads through `std::fs` in the memory cgroup, as fs_mark -S0
/// runs them: closed without fsync, timed; then a syncfs, timed apart.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let p: WorkerParams = serde_json::from_value(params.clone()).map_err(|e| format!("bad parameters: {e}"))?;
    let (dir, runs) = (&p.dir, p.runs.max(1));
    let syncfs = || crate::sys::syncfs(dir).map_err(|e| e.to_string());
    // Start from a clean filesystem.
    syncfs()?;
    let mut out = serde_json::Map::new();
    for &w in &p.workloads {
        if let Workload::MmapStrm { blocks, mix_blocks, anon_blocks } = w {
            let mut cols: [Vec<f64>; 4] = Default::default();
            for _ in 0..runs {
                let r = kernel_mmap_strm(dir, blocks, mix_blocks, anon_blocks, &syncfs)?;
                for (c, x) in cols.iter_mut().zip(r) {
                    c.push(x);
                }
            }
            let [elapsed, sync, pswpout, pswpin] = cols;
            let v = serde_json::json!({ "elapsed_s": elapsed, "sync_s": sync, "pswpout": pswpout, "pswpin": pswpin });
            out.insert(w.name(), v);
            continue;
        }
        let buf = pattern(MIB as usize);
        let (mut elapsed, mut sync, mut files) = (Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let create =
                |path: &Path| std::fs::File::create(path).map_err(|e| Error::io(path.display().to_string(), e));
            let (secs, paths) =
                write_files(w, p.fsmark_file_bytes, dir, &buf, create, |_| Ok(())).map_err(|e| e.to_string())?;
            let t = Instant::now();
            syncfs()?;
            sync.push(t.elapsed().as_secs_f64());
            elapsed.push(secs);
            files = paths.len();
            for p in &paths {
                std::fs::remove_file(p).map_err(|e| format!("removing {}: {e}", p.display()))?;
            }
        }
        out.insert(w.name(), serde_json::json!({ "files": files, "elapsed_s": elapsed, "sync_s": sync }));
    }
    let file_fs = if is_tmpfs(dir) { "tmpfs" } else { "a disk filesystem" };
    Ok(serde_json::json!({ "workloads": out, "file_fs": file_fs }))
}

/// Swap for the kernel column's mmap-strm: a swap file in the experiment's
/// temporary directory, turned on for the kernel column's run only. The
/// host had none; [`HostSwap::off`] (or drop, on any error path) turns it
/// off and removes the file, so the host is left as it was.
pub(super) struct HostSwap {
    path: PathBuf,
    on: bool,
}

impl HostSwap {
    /// With the pid of its run, so that a later run can tell a file left on
    /// by a killed run from one another run is using.
    const PREFIX: &'static str = "pcache-kernel-swap-";

    fn file_name() -> String {
        format!("{}{}", Self::PREFIX, std::process::id())
    }

    /// swapoff and remove the swap files of pcache runs that were killed;
    /// a note per file.
    pub(super) fn reap_stale() -> Vec<String> {
        let Ok(swaps) = std::fs::read_to_string("/proc/swaps") else { return Vec::new() };
        let mut notes = Vec::new();
        for line in swaps.lines().skip(1) {
            // The first field is the path, its blanks escaped as \040 (a
            // deleted file ends in "\040(deleted)" and cannot be named).
            let Some(path) = line.split_whitespace().next().map(Path::new) else { continue };
            let Some(pid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(Self::PREFIX))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let mut stale = HostSwap { path: path.to_path_buf(), on: true };
            notes.push(match stale.off_inner() {
                Ok(()) => format!("kernel column: turned off and removed {}, left on by a killed run", path.display()),
                Err(e) => {
                    // Still on, or not removable: leave the file be rather
                    // than unlink a swap file in use.
                    std::mem::forget(stale);
                    format!("kernel column: a swap file left on by a killed run: {e}")
                }
            });
        }
        notes
    }

    /// Needs root, `mkswap`, and a file system that can hold swap.
    pub(super) fn on(path: &Path, bytes: u64) -> std::result::Result<HostSwap, String> {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("swapon needs root".into());
        }
        let mut swap = HostSwap { path: path.to_path_buf(), on: false };
        let f = std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        // swapon refuses a file with holes: allocate it whole.
        // SAFETY: a valid fd; fallocate only allocates its blocks.
        if unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, bytes as libc::off_t) } != 0 {
            return Err(format!("fallocate {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        drop(f);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        let out =
            std::process::Command::new("mkswap").arg(path).output().map_err(|e| format!("cannot run mkswap: {e}"))?;
        if !out.status.success() {
            return Err(format!("mkswap {}: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim()));
        }
        let c = cpath(path)?;
        // SAFETY: a NUL-terminated path; swapon reads it only.
        if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
            return Err(format!("swapon {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        swap.on = true;
        Ok(swap)
    }

    /// The error says if swap stayed on.
    pub(super) fn off(mut self) -> std::result::Result<(), String> {
        self.off_inner()
    }

    fn off_inner(&mut self) -> std::result::Result<(), String> {
        if std::mem::take(&mut self.on) {
            let c = cpath(&self.path)?;
            // SAFETY: a NUL-terminated path; swapoff reads it only.
            if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
                return Err(format!(
                    "swapoff {}: {} (swap is still on: run swapoff by hand)",
                    self.path.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
        std::fs::remove_file(&self.path).map_err(|e| format!("removing {}: {e}", self.path.display()))
    }
}

impl Drop for HostSwap {
    fn drop(&mut self) {
        if self.path.exists() || self.on {
            if let Err(e) = self.off_inner() {
                eprintln!("warning: {e}");
            }
        }
    }
}

fn cpath(p: &Path) -> std::result::Result<std::ffi::CString, String> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: a NUL in the path", p.display()))
}

/// mmap(2), read and write: `fd` `Some` for a shared mapping of that file,
/// `None` for private anonymous memory.
fn map(fd: Option<i32>, len: usize) -> std::result::Result<Mmap, String> {
    let (flags, fd) = fd.map_or((libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1), |fd| (libc::MAP_SHARED, fd));
    Mmap::new(len, libc::PROT_READ | libc::PROT_WRITE, flags, fd).map_err(|e| format!("mmap of {len} bytes: {e}"))
}

fn proc_vmstat(key: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok()))
        .unwrap_or(0)
}

/// mmap-strm through mmap(2), as [`mmap_strm::run`]: (elapsed, sync,
/// pswpout, pswpin) of one run.
pub(super) fn kernel_mmap_strm(
    dir: &Path,
    blocks: u64,
    mix_blocks: u64,
    anon_blocks: u64,
    sync: &dyn Fn() -> std::result::Result<(), String>,
) -> std::result::Result<[f64; 4], String> {
    use std::os::fd::AsRawFd;
    let pat = pattern(BLOCK as usize);
    let ps = 4096u64;
    let file = |name: &str, blocks: u64| -> std::result::Result<(std::fs::File, Mmap), String> {
        let path = dir.join(name);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.set_len(blocks * BLOCK).map_err(|e| format!("{}: {e}", path.display()))?;
        let m = map(Some(f.as_raw_fd()), (blocks * BLOCK) as usize)?;
        Ok((f, m))
    };
    let mut buf = pat.clone();
    let put = |m: &Mmap, region: u64, block: u64, pass: u64| {
        mmap_strm::stamp_block(&mut buf, ps, region, block, pass);
        m.write((block * BLOCK) as usize, &buf);
        Ok(())
    };
    let (out0, in0) = (proc_vmstat("pswpout"), proc_vmstat("pswpin"));
    let (large, large_map) = file("strm-large", blocks)?;
    let start = Instant::now();
    let mix = || -> std::result::Result<_, String> {
        let (mix, mix_map) = file("strm-mix", mix_blocks)?;
        Ok((mix_map, map(None, (anon_blocks * BLOCK) as usize)?, mix))
    };
    let (mix_map, anon, mix) = mmap_strm::write_regions((blocks, mix_blocks, anon_blocks), large_map, mix, put)?;
    let elapsed = start.elapsed().as_secs_f64();
    drop(mix_map);
    let t = Instant::now();
    sync()?;
    let sync_s = t.elapsed().as_secs_f64();
    let (swpout, swpin) = (proc_vmstat("pswpout") - out0, proc_vmstat("pswpin") - in0);
    // The read-back, as the pcache side's.
    let word = |page: u64, off: u64| Ok(anon.load_u64((page * ps + off) as usize));
    let pages = |blocks: u64| blocks * BLOCK / ps;
    let files: [(u64, &dyn FileIo, u64, u64); 2] =
        [(mmap_strm::LARGE, &large, pages(blocks), 1), (mmap_strm::MIX_FILE, &mix, pages(mix_blocks), MIX_PASSES)];
    mmap_strm::verify_regions(&pat, ps, (pages(anon_blocks), &word), &files).map_err(|e| format!("kernel {e}"))?;
    drop(anon);
    for name in ["strm-large", "strm-mix"] {
        std::fs::remove_file(dir.join(name)).map_err(|e| format!("removing {name}: {e}"))?;
    }
    Ok([elapsed, sync_s, swpout as f64, swpin as f64])
}

/// The host's swap, in kB (`SwapTotal` of /proc/meminfo; 0 if unknown).
fn host_swap_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("SwapTotal:")?.trim().strip_suffix("kB")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the kernel workload (run here in-process, no cgroup) writes and
    // times every workload it is given, every run, and leaves no file.
    #[test]
    fn kernel_workload_times_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let params =
            |workloads| WorkerParams { dir: dir.path().into(), runs: 2, fsmark_file_bytes: 100_000, workloads };
        let ws = vec![Workload::Fsmark { threads: 2, per_thread: 3 }, Workload::SimpleWb { threads: 2, blocks: 2 }];
        let v = kernel_workload(&serde_json::to_value(params(ws)).unwrap()).unwrap();
        for (w, files) in [("fsmark-2t", 6), ("simple-wb", 2)] {
            assert_eq!(v["workloads"][w]["files"], files, "{v}");
            for k in ["elapsed_s", "sync_s"] {
                let el = v["workloads"][w][k].as_array().unwrap();
                assert_eq!(el.len(), 2, "{w} {k}");
                assert!(el.iter().all(|x| x.as_f64().is_some_and(|x| x >= 0.0)), "{w} {k}");
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(kernel_workload(&serde_json::json!({})).is_err());
    }

    // Goal: the kernel's mmap-strm (in-process here: no cgroup, no swap
    // needed at this size) writes, times and reads back its regions every
    // run, reports the swap counters, and leaves no file.
    #[test]
    fn kernel_mmap_strm_times_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let strm = Workload::MmapStrm { blocks: 3, mix_blocks: 1, anon_blocks: 2 };
        let params = WorkerParams { dir: dir.path().into(), runs: 2, fsmark_file_bytes: 0, workloads: vec![strm] };
        let v = kernel_workload(&serde_json::to_value(&params).unwrap()).unwrap();
        for k in ["elapsed_s", "sync_s", "pswpout", "pswpin"] {
            let x = v["workloads"]["mmap-strm"][k].as_array().unwrap();
            assert_eq!(x.len(), 2, "{k}: {v}");
            assert!(x.iter().all(|x| x.as_f64().is_some_and(|x| x >= 0.0)), "{k}: {v}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut bad = serde_json::to_value(&params).unwrap();
        bad["workloads"][0]["MmapStrm"].as_object_mut().unwrap().remove("mix_blocks");
        assert!(kernel_workload(&bad).is_err());
    }

    fn swapped_on(path: &Path) -> bool {
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        swaps.lines().skip(1).any(|l| l.split_whitespace().next() == Some(path.to_str().unwrap_or("?")))
    }

    // Goal: a swap file left on by a killed run is turned off and removed by
    // the next run, and a live run's file is left alone. Method: swapon two
    // files named for a dead pid and for this process, forget both (as a
    // kill would), reap. Needs root, mkswap and a file system that holds
    // swap; says so and returns otherwise.
    #[test]
    fn reap_stale_turns_off_only_a_dead_runs_swap() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => return eprintln!("skipped: no temporary directory: {e}"),
        };
        let dead = (1u32 << 22..).find(|p| !Path::new(&format!("/proc/{p}")).exists()).unwrap_or(u32::MAX);
        let dead_path = dir.path().join(format!("{}{dead}", HostSwap::PREFIX));
        let live_path = dir.path().join(HostSwap::file_name());
        let dead_swap = match HostSwap::on(&dead_path, 1 << 20) {
            Ok(s) => s,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        std::mem::forget(dead_swap);
        let live = HostSwap::on(&live_path, 1 << 20).expect("a second swap file where the first worked");
        assert!(swapped_on(&dead_path) && swapped_on(&live_path));
        let notes = HostSwap::reap_stale();
        let (dead_on, live_on) = (swapped_on(&dead_path), swapped_on(&live_path));
        live.off().expect("swapoff of the live file");
        assert!(!dead_on && !dead_path.exists(), "the dead run's swap file stayed: {notes:?}");
        assert!(live_on, "the live run's swap file was turned off: {notes:?}");
        assert_eq!(notes.len(), 1, "{notes:?}");
    }
}

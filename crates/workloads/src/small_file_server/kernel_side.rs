use super::workload::*;
use super::*;

pub(super) struct KernelServer {
    pub(super) files: Vec<std::fs::File>,
    /// Each file's length rounded up to whole pages.
    pub(super) lens: Vec<u64>,
    pub(super) stream: std::fs::File,
}

impl ServerBackend for KernelServer {
    fn cached_pages(&self, id: usize) -> Option<u64> {
        kernel::cached_pages(&self.files[id], 0, self.lens[id])
    }
    fn serve(&self, id: usize, buf: &mut [u8]) -> Result<usize> {
        self.files[id].read_at(buf, 0).map_err(|e| Error::io(format!("pread file {id}"), e))
    }
    fn stream_read(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        self.stream.read_at(buf, off).map_err(|e| Error::io("pread stream", e))
    }
}

/// A measure's name and how to read it off a run.
type Measure = (&'static str, fn(&ServerOut) -> f64);

/// The kernel's server measures that match pcache's.
pub(super) const KERNEL_MEASURES: [Measure; 5] = [
    ("requests/s", ServerOut::requests_per_s),
    ("files_hit_ratio", ServerOut::files_hit_ratio),
    ("small_hit_ratio", ServerOut::small_hit_ratio),
    ("hit_request_us", ServerOut::hit_request_us),
    ("small_miss_us", ServerOut::small_miss_us),
];

/// The server workload through the kernel's page cache (buffered `pread`),
/// in the memory cgroup.
pub fn kernel_workload(params: &Value) -> std::result::Result<Value, String> {
    let p: Params = serde_json::from_value(params["params"].clone()).map_err(|e| format!("bad params: {e}"))?;
    let root = PathBuf::from(params["root"].as_str().ok_or("no root")?);
    let fs = Fileset::new(&p);
    let open = |path: PathBuf| std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()));
    let files = server_paths(&root, &p).map(open).collect::<std::result::Result<Vec<_>, String>>()?;
    let lens = fs.pages.iter().map(|n| n * p.page_size).collect();
    let backend = KernelServer { files, lens, stream: open(stream_path(&root))? };
    let mut runs = Vec::new();
    for run in 0..p.runs {
        for f in backend.files.iter().chain([&backend.stream]) {
            kernel::drop_cached(f);
        }
        let plan = request_plan(&p, run).map_err(|e| e.to_string())?;
        let out = run_server(&backend, &p, &fs, &plan, p.stream_bytes, &|| {}).map_err(|e| e.to_string())?;
        let mut measures: serde_json::Map<String, Value> =
            KERNEL_MEASURES.iter().map(|(m, f)| (m.to_string(), Value::from(f(&out)))).collect();
        measures.insert("series".into(), serde_json::json!(out.series));
        runs.push(Value::Object(measures));
    }
    Ok(serde_json::json!({
        "runs": runs,
        "cachestat": kernel::cached_pages(&backend.stream, 0, p.page_size).is_some(),
    }))
}

impl SeedKernel for SmallFileServer {
    fn kernel_workload() -> Option<kernel::Workload> {
        Some(kernel_workload)
    }

    fn kernel_column(ctx: &Ctx<'_>, p: &Params) -> std::result::Result<KernelColumn, String> {
        let root = ctx.tmp.path();
        let v = kernel::run(EXPERIMENT, p.mem_bytes, &serde_json::json!({"params": p, "root": root}))?;
        let runs = v["runs"].as_array().ok_or("the kernel worker returned no runs")?;
        let mut metrics = Named::new();
        for (m, _) in KERNEL_MEASURES {
            let samples = runs.iter().map(|r| r[m].as_f64().unwrap_or(f64::NAN)).collect();
            metrics.insert(format!("server {m}"), Samples(samples));
        }
        let series = runs.first().map(|r| series_from_json(&r["series"])).unwrap_or_default();
        let mut stands_for = format!(
            "this machine's kernel {}: buffered pread in a memory cgroup of {} (the worker's own buffers, about 2 \
             MiB, count against it); server workload only, hit ratios by cachestat(2). Its one rule is \
             filemap_read's: mark unless the read starts in the folio where the last one ended \
             (!pos_same_folio(ki_pos, prev_pos - 1)), which for a one-page file re-read from offset 0 is 2.6.20's \
             prev_index rule, not the prev_pos fix of 2.6.23",
            kernel_release(),
            fmt_size(p.mem_bytes)
        );
        if v["cachestat"].as_bool() != Some(true) {
            stands_for.push_str(" (cachestat unavailable: no hit ratios)");
        }
        let window = (p.rounds() / SERIES_POINTS).max(1);
        let raw = serde_json::json!({ "series": series_json(&downsample(&series, window)) });
        Ok(KernelColumn::new(stands_for, metrics, raw, Vec::new()))
    }
}

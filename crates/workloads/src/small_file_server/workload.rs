use super::*;

pub(super) fn server_path(root: &Path, d: usize, k: usize) -> PathBuf {
    root.join("fileset").join(format!("dir{d:05}")).join(format!("class{}_{}", k / 9, k % 9 + 1))
}

pub(super) fn stream_path(root: &Path) -> PathBuf {
    root.join("stream")
}

pub(super) fn ws_path(root: &Path) -> PathBuf {
    root.join("working-set")
}

pub(super) fn rr_path(root: &Path) -> PathBuf {
    root.join("rr-testfile")
}

/// The byte every file's data starts with, to check what was read.
pub(super) fn tag(id: usize) -> u8 {
    (id % 251) as u8 + 1
}

pub(super) fn write_file(path: &Path, len: u64, first: u8, buf: &mut [u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let mut done = 0;
    while done < len {
        let n = (buf.len() as u64).min(len - done) as usize;
        buf[0] = if done == 0 { first } else { 1 };
        f.write_all(&buf[..n]).map_err(|e| Error::io(path.display().to_string(), e))?;
        done += n as u64;
    }
    Ok(())
}

/// Every file the workloads read, synced and dropped from the host's page
/// cache (pcache reads them with O_DIRECT).
pub(super) fn create_files(root: &Path, p: &Params) -> Result<()> {
    let mut buf = crate::sys::pattern(MIB as usize);
    for d in 0..p.dirs {
        let dir = server_path(root, d, 0).parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        for k in 0..FILES_PER_DIR {
            write_file(&server_path(root, d, k), file_size(k), tag(d * FILES_PER_DIR + k), &mut buf)?;
        }
    }
    write_file(&stream_path(root), p.stream_bytes, 1, &mut buf)?;
    write_file(&ws_path(root), p.ws_bytes, 1, &mut buf)?;
    write_file(&rr_path(root), p.rr_file_bytes, 1, &mut buf)?;
    crate::sys::syncfs(root)?;
    for path in all_paths(root, p) {
        if let Ok(f) = std::fs::File::open(&path) {
            kernel::drop_cached(&f);
        }
    }
    Ok(())
}

/// The server's files, by id.
pub(super) fn server_paths<'a>(root: &'a Path, p: &Params) -> impl Iterator<Item = PathBuf> + 'a {
    (0..p.dirs).flat_map(move |d| (0..FILES_PER_DIR).map(move |k| server_path(root, d, k)))
}

pub(super) fn all_paths(root: &Path, p: &Params) -> Vec<PathBuf> {
    server_paths(root, p).chain([stream_path(root), ws_path(root), rr_path(root)]).collect()
}

/// One handle per file: raise the open-file limit to `need`.
pub(super) fn ensure_fd_limit(need: u64) -> Result<()> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: rl is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur >= need {
        return Ok(());
    }
    if rl.rlim_max < need {
        return Err(Error::Invalid(format!(
            "the fileset needs {need} open files; the hard limit is {} (use a smaller --mem)",
            rl.rlim_max
        )));
    }
    rl.rlim_cur = need;
    // SAFETY: rl is a valid rlimit within the hard limit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) };
    Ok(())
}

/// What the server loop reads through.
pub(super) trait ServerBackend: Sync {
    /// Asked without touching them; None if it cannot be told.
    fn cached_pages(&self, id: usize) -> Option<u64>;
    /// File `id` whole (its size is `buf.len()`).
    fn serve(&self, id: usize, buf: &mut [u8]) -> Result<usize>;
    fn stream_read(&self, buf: &mut [u8], off: u64) -> Result<usize>;
}

pub(super) struct PcacheServer {
    pub(super) files: Vec<File>,
    pub(super) stream: File,
}

impl ServerBackend for PcacheServer {
    fn cached_pages(&self, id: usize) -> Option<u64> {
        Some(self.files[id].cached_pages())
    }
    fn serve(&self, id: usize, buf: &mut [u8]) -> Result<usize> {
        Ok(self.files[id].read_at(buf, 0)?)
    }
    fn stream_read(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        Ok(self.stream.read_at(buf, off)?)
    }
}

pub(super) struct Fileset {
    pub(super) sizes: Vec<u64>,
    pub(super) pages: Vec<u64>,
    pub(super) small: Vec<bool>,
}

impl Fileset {
    pub(super) fn new(p: &Params) -> Fileset {
        let sizes: Vec<u64> = (0..p.files()).map(|id| file_size(id % FILES_PER_DIR)).collect();
        let pages = sizes.iter().map(|s| s.div_ceil(p.page_size)).collect();
        let small = sizes.iter().map(|&s| s <= p.page_size).collect();
        Fileset { sizes, pages, small }
    }
}

pub(super) fn pick(weights: &[f64], total: f64, rng: &mut StdRng) -> usize {
    let mut x = rng.gen::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

/// Every thread's file ids in run `run`, alike for every variant and the
/// kernel.
pub(super) fn request_plan(p: &Params, run: usize) -> Result<Vec<Vec<u32>>> {
    let seed = p.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (run as u64).wrapping_add(0x5eed);
    let dirs = ZipfKeys::new(p.dirs as u64, p.dir_zipf_s, seed).map_err(Error::Invalid)?;
    let in_total: f64 = IN_CLASS.iter().sum();
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1));
    let per_thread = p.requests / p.server_threads;
    Ok((0..p.server_threads)
        .map(|_| {
            (0..per_thread)
                .map(|_| {
                    let d = dirs.sample(&mut rng) as usize;
                    let c = pick(&CLASS_MIX, 1.0, &mut rng);
                    let i = pick(&IN_CLASS, in_total, &mut rng);
                    (d * FILES_PER_DIR + c * 9 + i) as u32
                })
                .collect()
        })
        .collect())
}

/// (requests so far, files hit ratio, small-file hit ratio).
pub(super) type RoundPoint = (f64, f64, f64);
pub(super) type NamedSeries = (String, Vec<RoundPoint>);

/// One server thread's counts in one round, or their sum.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RoundStat {
    pub(super) busy_s: f64,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) small_hits: u64,
    pub(super) small_misses: u64,
    /// Requests that found every page cached, and their seconds.
    pub(super) hit_reqs: u64,
    pub(super) hit_req_s: f64,
    /// Requests for one-page files that missed, and their seconds.
    pub(super) miss_reqs: u64,
    pub(super) miss_req_s: f64,
    pub(super) told: bool,
}

impl RoundStat {
    /// Busy time adds up too (a round's is its slowest thread's).
    fn add(&mut self, o: &RoundStat) {
        self.busy_s += o.busy_s;
        self.hits += o.hits;
        self.misses += o.misses;
        self.small_hits += o.small_hits;
        self.small_misses += o.small_misses;
        self.hit_reqs += o.hit_reqs;
        self.hit_req_s += o.hit_req_s;
        self.miss_reqs += o.miss_reqs;
        self.miss_req_s += o.miss_req_s;
        self.told &= o.told;
    }
}

/// What the server workload measured after the warm-up; the series has
/// every round.
#[derive(Clone, Debug, Default)]
pub(super) struct ServerOut {
    pub(super) requests: u64,
    pub(super) sum: RoundStat,
    pub(super) series: Vec<RoundPoint>,
}

/// `x` when the hits could be told, NaN otherwise.
fn told(s: &RoundStat, x: f64) -> f64 {
    if s.told {
        x
    } else {
        f64::NAN
    }
}

/// `secs` per request in microseconds, NaN without requests.
fn mean_us(secs: f64, reqs: u64) -> f64 {
    if reqs == 0 {
        f64::NAN
    } else {
        secs * 1e6 / reqs as f64
    }
}

impl ServerOut {
    pub(super) fn files_hit_ratio(&self) -> f64 {
        told(&self.sum, ratio(self.sum.hits, self.sum.hits + self.sum.misses))
    }
    pub(super) fn small_hit_ratio(&self) -> f64 {
        told(&self.sum, ratio(self.sum.small_hits, self.sum.small_hits + self.sum.small_misses))
    }
    pub(super) fn hit_request_us(&self) -> f64 {
        mean_us(self.sum.hit_req_s, self.sum.hit_reqs)
    }
    pub(super) fn small_miss_us(&self) -> f64 {
        mean_us(self.sum.miss_req_s, self.sum.miss_reqs)
    }
    pub(super) fn requests_per_s(&self) -> f64 {
        if self.sum.busy_s > 0.0 {
            self.requests as f64 / self.sum.busy_s
        } else {
            f64::NAN
        }
    }
}

pub(super) fn ratio(a: u64, b: u64) -> f64 {
    crate::stats::ratio(a as f64, b as f64)
}

/// What the server's threads share: the barrier that starts each round,
/// the flag that stops all after an error.
struct Rounds<'a> {
    rounds: usize,
    /// The first measured round.
    warm: usize,
    barrier: Barrier,
    failed: AtomicBool,
    at_measure: &'a (dyn Fn() + Sync),
}

impl Rounds<'_> {
    /// At the end of the warm-up the leader calls `at_measure` while
    /// everyone waits at a second barrier. False once a thread failed.
    fn start(&self, r: usize) -> bool {
        let lead = self.barrier.wait().is_leader();
        if r == self.warm {
            if lead {
                (self.at_measure)();
            }
            self.barrier.wait();
        }
        !self.failed.load(Ordering::Relaxed)
    }

    fn fail<T>(&self, e: Error) -> Result<T> {
        self.failed.store(true, Ordering::Relaxed);
        Err(e)
    }
}

/// The server threads and the streamer advance in rounds; `at_measure` is
/// called with every thread idle when the warm-up ends.
pub(super) fn run_server<B: ServerBackend>(
    b: &B,
    p: &Params,
    fs: &Fileset,
    plan: &[Vec<u32>],
    stream_len: u64,
    at_measure: &(dyn Fn() + Sync),
) -> Result<ServerOut> {
    let threads = plan.len();
    let per = p.round_requests / threads;
    let rounds = plan.iter().map(|v| v.len() / per).min().unwrap_or(0);
    let warm = p.warm_rounds().min(rounds);
    let shared =
        Rounds { rounds, warm, barrier: Barrier::new(threads + 1), failed: AtomicBool::new(false), at_measure };
    let (stats, stream_res) = std::thread::scope(|s| {
        let servers: Vec<_> = plan
            .iter()
            .map(|reqs| {
                let shared = &shared;
                s.spawn(move || server_thread(b, fs, reqs, per, shared))
            })
            .collect();
        // The streamer, on this thread.
        let res = stream(b, p.stream_round_bytes(), stream_len, &shared);
        let stats: Vec<Result<Vec<RoundStat>>> =
            servers.into_iter().map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect();
        (stats, res)
    });
    stream_res?;
    let per_thread = stats.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(summarize(&per_thread, (per * threads) as u64, warm))
}

fn server_thread<B: ServerBackend>(
    b: &B,
    fs: &Fileset,
    reqs: &[u32],
    per: usize,
    shared: &Rounds<'_>,
) -> Result<Vec<RoundStat>> {
    let mut buf = vec![0u8; fs.sizes.iter().copied().max().unwrap_or(0) as usize];
    let (mut out, mut res) = (Vec::with_capacity(shared.rounds), Ok(()));
    // After a failure every round still starts (and serves nothing), so
    // that no thread waits for this one at a barrier.
    for r in 0..shared.rounds {
        let mut st = RoundStat { told: true, ..RoundStat::default() };
        if shared.start(r) {
            let t = Instant::now();
            for &id in &reqs[r * per..(r + 1) * per] {
                if let Err(e) = serve_one(b, fs, id as usize, &mut buf, &mut st) {
                    res = shared.fail(e);
                    break;
                }
            }
            st.busy_s = t.elapsed().as_secs_f64();
        }
        out.push(st);
    }
    res.map(|()| out)
}

/// Serve file `id` whole, counting whether its pages were cached before.
fn serve_one<B: ServerBackend>(b: &B, fs: &Fileset, id: usize, buf: &mut [u8], st: &mut RoundStat) -> Result<()> {
    let pages = fs.pages[id];
    let tr = Instant::now();
    let (mut missed, mut miss_small) = (false, false);
    match b.cached_pages(id) {
        Some(c) => {
            let c = c.min(pages);
            missed = c < pages;
            miss_small = missed && fs.small[id];
            st.hits += c;
            st.misses += pages - c;
            if fs.small[id] {
                st.small_hits += c;
                st.small_misses += pages - c;
            }
        }
        None => st.told = false,
    }
    let size = fs.sizes[id] as usize;
    let n = b.serve(id, &mut buf[..size])?;
    if n != size || buf[0] != tag(id) {
        return Err(Error::Check(format!("file {id}: read {n} of {size} bytes, first {}", buf[0])));
    }
    let secs = tr.elapsed().as_secs_f64();
    if miss_small {
        st.miss_reqs += 1;
        st.miss_req_s += secs;
    } else if !missed {
        st.hit_reqs += 1;
        st.hit_req_s += secs;
    }
    Ok(())
}

fn stream<B: ServerBackend>(b: &B, round_bytes: u64, stream_len: u64, shared: &Rounds<'_>) -> Result<()> {
    let mut buf = vec![0u8; STREAM_CHUNK as usize];
    let (mut pos, mut res) = (0u64, Ok(()));
    for r in 0..shared.rounds {
        if !shared.start(r) {
            continue;
        }
        let mut left = round_bytes;
        while left > 0 {
            let n = left.min(STREAM_CHUNK) as usize;
            match b.stream_read(&mut buf[..n], pos) {
                Ok(got) => {
                    pos += got as u64;
                    left -= (got as u64).min(left);
                    if got < n || pos >= stream_len {
                        pos = 0;
                    }
                }
                Err(e) => {
                    res = shared.fail(e);
                    break;
                }
            }
        }
    }
    res
}

fn summarize(per_thread: &[Vec<RoundStat>], round_requests: u64, warm: usize) -> ServerOut {
    let rounds = per_thread.iter().map(Vec::len).min().unwrap_or(0);
    let mut out = ServerOut { sum: RoundStat { told: true, ..RoundStat::default() }, ..ServerOut::default() };
    for r in 0..rounds {
        let mut round = RoundStat { told: true, ..RoundStat::default() };
        let mut busy = 0f64;
        for t in per_thread {
            round.add(&t[r]);
            busy = busy.max(t[r].busy_s);
        }
        round.busy_s = busy;
        // Told-ness is the whole run's, warm-up included.
        out.sum.told &= round.told;
        let done = (r + 1) as f64 * round_requests as f64;
        let (h, m, sh, sm) = (round.hits, round.misses, round.small_hits, round.small_misses);
        out.series.push((done, ratio(h, h + m), ratio(sh, sh + sm)));
        if r >= warm {
            out.requests += round_requests;
            out.sum.add(&round);
        }
    }
    out
}

pub(super) const READ_ONLY: OpenOptions = OpenOptions { create: false, truncate: false, direct: true };

pub(super) const CREATE: OpenOptions = OpenOptions { create: true, truncate: true, direct: true };

/// One run of one workload under one variant: its measures and counters.
pub(super) struct RunOut {
    pub(super) measures: Vec<(&'static str, f64)>,
    pub(super) vm: VmStat,
    pub(super) series: Vec<RoundPoint>,
}

pub(super) fn pcache_server(cache: &PageCache, p: &Params, root: &Path, fs: &Fileset, run: usize) -> Result<RunOut> {
    let files = server_paths(root, p).map(|path| cache.open(path, READ_ONLY)).collect::<pcache::Result<Vec<File>>>()?;
    let backend = PcacheServer { files, stream: cache.open(stream_path(root), READ_ONLY)? };
    let plan = request_plan(p, run)?;
    let before = Mutex::new(cache.vmstat());
    let out = run_server(&backend, p, fs, &plan, p.stream_bytes, &|| {
        *before.lock().unwrap_or_else(|e| e.into_inner()) = cache.vmstat();
    })?;
    let vm = cache.vmstat().delta(&before.into_inner().unwrap_or_else(|e| e.into_inner()));
    let hit = vm.get(Item::pgcache_hit);
    let miss = vm.get(Item::pgcache_miss);
    let reqs = out.requests.max(1) as f64;
    Ok(RunOut {
        measures: vec![
            ("requests/s", out.requests_per_s()),
            ("hit_ratio", ratio(hit, hit + miss)),
            ("files_hit_ratio", out.files_hit_ratio()),
            ("small_hit_ratio", out.small_hit_ratio()),
            ("marks/request", vm.get(Item::mark_page_accessed_calls) as f64 / reqs),
            ("pgactivate", vm.get(Item::pgactivate) as f64),
            ("misses/request", told(&out.sum, out.sum.misses as f64 / reqs)),
            ("hit_request_us", out.hit_request_us()),
            ("small_miss_us", out.small_miss_us()),
        ],
        vm,
        series: out.series,
    })
}

pub(super) fn pcache_scan(cache: &PageCache, p: &Params, root: &Path) -> Result<RunOut> {
    let mut buf = vec![0u8; STREAM_CHUNK as usize];
    let ws = cache.open(ws_path(root), READ_ONLY)?;
    read_seq(&ws, p.ws_bytes, WS_CHUNK, &mut buf)?;
    read_seq(&ws, p.ws_bytes, WS_CHUNK, &mut buf)?;
    let ws_pages = p.ws_bytes.div_ceil(p.page_size);
    let before = cache.vmstat();
    let ws_before = ws.cached_pages();
    let t = Instant::now();
    let scan = cache.open(stream_path(root), READ_ONLY)?;
    read_seq(&scan, p.stream_bytes, SCAN_CHUNK, &mut buf)?;
    let elapsed = t.elapsed().as_secs_f64();
    let vm = cache.vmstat().delta(&before);
    let ws_after = ws.cached_pages();
    Ok(RunOut {
        measures: vec![
            ("ws_cached_%", ws_after as f64 / ws_pages as f64 * 100.0),
            ("ws_cached_before_%", ws_before as f64 / ws_pages as f64 * 100.0),
            ("pgactivate", vm.get(Item::pgactivate) as f64),
            ("pgdeactivate", vm.get(Item::pgdeactivate) as f64),
            ("marks/page", vm.get(Item::mark_page_accessed_calls) as f64 / p.stream_bytes.div_ceil(p.page_size) as f64),
            ("elapsed_s", elapsed),
        ],
        vm,
        series: Vec::new(),
    })
}

/// Reader and writer progress of the random workload.
#[derive(Default)]
pub(super) struct Lockstep {
    pub(super) reader_done: usize,
    pub(super) writer_done: usize,
    pub(super) failed: bool,
}

pub(super) fn wait_until(m: &Mutex<Lockstep>, cv: &Condvar, ok: impl Fn(&Lockstep) -> bool) -> bool {
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    while !ok(&g) && !g.failed {
        g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    !g.failed
}

pub(super) fn advance(m: &Mutex<Lockstep>, cv: &Condvar, f: impl FnOnce(&mut Lockstep)) {
    f(&mut m.lock().unwrap_or_else(|e| e.into_inner()));
    cv.notify_all();
}

/// One streaming write: dd of=junk bs=1M; sync; cat junk.
pub(super) fn write_junk(cache: &PageCache, path: &Path, len: u64, block: &[u8], buf: &mut [u8]) -> Result<()> {
    let f = cache.open(path, CREATE)?;
    write_seq(&f, len, WRITE_BLOCK, block)?;
    f.fsync()?;
    let cat = f.reopen()?;
    read_seq(&cat, len, STREAM_CHUNK, buf)?;
    cat.close()?;
    f.close()?;
    Ok(())
}

pub(super) fn pcache_random(cache: &PageCache, p: &Params, root: &Path, run: usize) -> Result<RunOut> {
    let rr = cache.open(rr_path(root), READ_ONLY)?;
    let mut rng = StdRng::seed_from_u64(p.seed ^ 0x0128_0128 ^ (run as u64) << 32);
    let span = p.rr_file_bytes - RR_READ;
    let offsets: Vec<u64> = (0..p.rr_reads).map(|_| rng.gen_range(0..=span)).collect();
    let slices = p.junk_files;
    let state = Mutex::new(Lockstep::default());
    let cv = Condvar::new();
    let before = cache.vmstat();
    let junk_paths: Vec<PathBuf> = (0..slices).map(|j| root.join(format!("junkfile.{run}.{j}"))).collect();
    let (reader, writer) = std::thread::scope(|s| {
        let writer = s.spawn(|| -> Result<()> {
            let block: Vec<u8> = (0..WRITE_BLOCK as usize).map(|i| (i % 253) as u8 + 1).collect();
            let mut buf = vec![0u8; STREAM_CHUNK as usize];
            for (j, path) in junk_paths.iter().enumerate() {
                if !wait_until(&state, &cv, |g| g.reader_done >= j) {
                    return Ok(());
                }
                if let Err(e) = write_junk(cache, path, p.junk_bytes, &block, &mut buf) {
                    advance(&state, &cv, |g| g.failed = true);
                    return Err(e);
                }
                advance(&state, &cv, |g| g.writer_done = j + 1);
            }
            Ok(())
        });
        let reader = (|| -> Result<(f64, u64)> {
            let mut buf = [0u8; RR_READ as usize];
            let (mut busy, mut hits) = (0f64, 0u64);
            for c in 0..slices {
                if !wait_until(&state, &cv, |g| g.writer_done >= c) {
                    break;
                }
                let t = Instant::now();
                for &off in &offsets[c * offsets.len() / slices..(c + 1) * offsets.len() / slices] {
                    hits += rr.page_state(off / p.page_size).is_some_and(|s| s.uptodate) as u64;
                    let n = rr.read_at(&mut buf, off)?;
                    if n != buf.len() {
                        return Err(Error::Check(format!("{}: read {n} of 128 bytes at {off}", rr.name())));
                    }
                }
                busy += t.elapsed().as_secs_f64();
                advance(&state, &cv, |g| g.reader_done = c + 1);
            }
            Ok((busy, hits))
        })();
        if reader.is_err() {
            advance(&state, &cv, |g| g.failed = true);
        }
        (reader, writer.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    let vm = cache.vmstat().delta(&before);
    for path in &junk_paths {
        if path.exists() {
            cache.unlink(path)?;
        }
    }
    writer?;
    let (elapsed, hits) = reader?;
    Ok(RunOut {
        measures: vec![
            ("elapsed_s", elapsed),
            ("hit_ratio", ratio(hits, p.rr_reads as u64)),
            ("pgpgin_KiB", vm.get(Item::pgpgin) as f64),
        ],
        vm,
        series: Vec::new(),
    })
}

pub(super) fn run_one(t: Tunables, w: &str, p: &Params, root: &Path, fs: &Fileset, run: usize) -> Result<RunOut> {
    let cache = PageCache::new(Config { memory_bytes: p.mem_bytes, tunables: t, ..Config::default() })?;
    match w {
        "server" => pcache_server(&cache, p, root, fs, run),
        "scan" => pcache_scan(&cache, p, root),
        _ => pcache_random(&cache, p, root, run),
    }
}

/// (workload, measure, unit, better, mean, in the compare table).
pub(super) type MetricDef = (&'static str, &'static str, &'static str, Better, Mean, bool);

pub(super) const METRICS: &[MetricDef] = &[
    ("server", "requests/s", "requests/s", Better::Higher, Mean::Harmonic, true),
    ("server", "hit_ratio", "fraction", Better::Higher, Mean::Arithmetic, true),
    ("server", "files_hit_ratio", "fraction", Better::Higher, Mean::Arithmetic, true),
    ("server", "small_hit_ratio", "fraction", Better::Higher, Mean::Arithmetic, true),
    ("server", "marks/request", "calls", Better::Lower, Mean::Arithmetic, false),
    ("server", "pgactivate", "pages", Better::Lower, Mean::Arithmetic, false),
    ("server", "misses/request", "pages", Better::Lower, Mean::Arithmetic, false),
    ("server", "hit_request_us", "us", Better::Lower, Mean::Arithmetic, false),
    ("server", "small_miss_us", "us", Better::Lower, Mean::Arithmetic, false),
    ("scan", "ws_cached_%", "%", Better::Higher, Mean::Arithmetic, true),
    ("scan", "ws_cached_before_%", "%", Better::Higher, Mean::Arithmetic, false),
    ("scan", "pgactivate", "pages", Better::Lower, Mean::Arithmetic, true),
    ("scan", "pgdeactivate", "pages", Better::Lower, Mean::Arithmetic, false),
    ("scan", "marks/page", "calls", Better::Lower, Mean::Arithmetic, false),
    ("scan", "elapsed_s", "s", Better::Lower, Mean::Arithmetic, false),
    ("random", "elapsed_s", "s", Better::Lower, Mean::Arithmetic, true),
    ("random", "hit_ratio", "fraction", Better::Higher, Mean::Arithmetic, true),
    ("random", "pgpgin_KiB", "KiB", Better::Lower, Mean::Arithmetic, false),
];

pub(super) fn specs() -> Vec<MetricSpec> {
    METRICS.iter().map(|&(w, m, unit, better, mean, table)| MetricSpec::new(w, m, unit, better, mean, table)).collect()
}

impl SeedMeasure for SmallFileServer {
    /// Make the file set, then run every workload one variant at a time: the
    /// pcache columns and the server's hit ratios over time.
    fn measure(ctx: &Ctx<'_>, p: &Params) -> Result<(Measured, ())> {
        ensure_fd_limit(p.files() as u64 + 256)?;
        let root = ctx.tmp.path();
        create_files(root, p)?;
        let fs = Fileset::new(p);
        let names: Vec<String> = WORKLOADS.iter().map(|w| w.to_string()).collect();
        let outs = ctx.each_variant(p.runs, &names, |r, wi, vi| {
            run_one(ctx.variants[vi].tunables, WORKLOADS[wi], p, root, &fs, r)
        })?;

        let mut columns = ctx.columns(&outs, &names, |_, w, runs, metrics| {
            for &(mw, m, ..) in METRICS.iter().filter(|d| d.0 == w) {
                let of = |o: &RunOut| o.measures.iter().find(|(k, _)| *k == m).map_or(f64::NAN, |x| x.1);
                metrics.insert(format!("{mw} {m}"), Samples(runs.iter().map(of).collect()));
            }
            runs.iter().map(|o| o.vm.clone()).collect()
        });
        if !ctx.opts.set.is_empty() {
            let sets: Vec<String> = ctx.opts.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
            for c in &mut columns {
                c.stands_for.push_str(&format!("; with --set {}", sets.join(" ")));
            }
        }

        // Hit ratio over time, first run: the plot and the JSON.
        let window = (p.rounds() / SERIES_POINTS).max(1);
        let series: serde_json::Map<String, Value> = ctx
            .variants
            .iter()
            .enumerate()
            .map(|(vi, v)| (v.preset.name.to_string(), series_json(&downsample(&outs.runs(vi, 0)[0].series, window))))
            .collect();
        let mut notes = Vec::new();
        if p.runs < 2 {
            notes.push("one run: no spread, so no difference can be marked significant".into());
        }
        let params = serde_json::json!({
            "workloads": p.describe().iter().map(|(n, d)| serde_json::json!({"name": n, "description": d}))
                .collect::<Vec<_>>(),
            "vmstat": "deltas of the measured part of each run (server: after the warm-up; scan: the scan; \
                       random: the reads and writes), event counters summed over the runs",
        });
        let extra = serde_json::json!({
            "server_hit_ratio_series": series,
            "series_means": "first run, per round of the server workload (warm-up included): \
                             [requests so far, files hit ratio, small-file hit ratio]",
        });
        Ok((
            Measured { variants: columns, specs: specs(), params: into_map(params), extra: into_map(extra), notes },
            (),
        ))
    }
}

/// A series as JSON: `[[requests, files hit ratio, small-file hit ratio],
/// ...]`, `null` for what was not measured (serde_json writes NaN so).
pub(super) fn series_json(pts: &[RoundPoint]) -> Value {
    Value::from(pts.iter().map(|&(x, a, b)| serde_json::json!([x, a, b])).collect::<Vec<_>>())
}

/// A series back from [`series_json`].
pub(super) fn series_from_json(v: &Value) -> Vec<RoundPoint> {
    let num = |x: &Value| x.as_f64().unwrap_or(f64::NAN);
    v.as_array().map(|a| a.iter().map(|p| (num(&p[0]), num(&p[1]), num(&p[2]))).collect()).unwrap_or_default()
}

/// About this many points of the server's hit ratios over time are kept.
pub(super) const SERIES_POINTS: usize = 100;

/// Rounds averaged over windows of `window` (NaNs left out), each point at
/// the window's last round.
pub(super) fn downsample(pts: &[RoundPoint], window: usize) -> Vec<RoundPoint> {
    let mean = |v: &mut dyn Iterator<Item = f64>| {
        let (n, sum) = v.filter(|x| x.is_finite()).fold((0usize, 0f64), |(n, s), x| (n + 1, s + x));
        if n == 0 {
            f64::NAN
        } else {
            sum / n as f64
        }
    };
    pts.chunks(window.max(1))
        .map(|c| (c[c.len() - 1].0, mean(&mut c.iter().map(|x| x.1)), mean(&mut c.iter().map(|x| x.2))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the request plan is the same for the same run and seed, differs
    // between runs, stays in range, and follows the class mix.
    #[test]
    fn request_plan_is_reproducible() {
        let opts = ExpOpts { mem_bytes: Some(8 * MIB), quick: true, seed: 3, ..ExpOpts::default() };
        let p = Params::new(&opts).unwrap();
        let a = request_plan(&p, 0).unwrap();
        assert_eq!(a, request_plan(&p, 0).unwrap());
        assert_ne!(a, request_plan(&p, 1).unwrap());
        assert_eq!(a.len(), 2);
        let all: Vec<u32> = a.concat();
        assert!(all.iter().all(|&id| (id as usize) < p.files()));
        let class0 = all.iter().filter(|&&id| (id as usize % FILES_PER_DIR) / 9 == 0).count() as f64;
        let share = class0 / all.len() as f64;
        assert!((0.3..0.4).contains(&share), "{share}");
    }
}

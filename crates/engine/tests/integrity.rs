//! Data integrity against an in-memory model.
//!
//! Each test runs a random workload (seeded, so a failure can be replayed)
//! on a cache that holds only a small fraction of the data, so pages are
//! evicted, written back and read in again all the time. Every file has a
//! model (`Vec<u8>`, its exact expected contents and length); every read is
//! checked against it, the whole of every file is checked at the end, and
//! host files are checked on disk after the cache is gone (durability).
//! A sampler thread checks the frame accounting while the workload runs,
//! and at the end no frame may be unaccounted for.
//!
//! The workloads and the readahead races run under both I/O engines
//! (`Tunables::io_engine`): the I/O threads, and io_uring, which
//! carries the host files' readahead and writeback (they are opened
//! O_DIRECT); under io_uring a test says so and skips that engine where
//! the kernel refuses it.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use pcache::{Advice, Config, Error, File, IoEngine, Item, OpenOptions, PageCache, PolicyKind, Tunables};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The I/O engines every test here runs under.
const ENGINES: [IoEngine; 2] = [IoEngine::Threads, IoEngine::Uring];

/// A cache of `pages` pages of `page_size` with its asynchronous I/O on
/// `engine`; None (that engine is skipped, saying so) where the kernel
/// refuses io_uring.
fn cache_on(engine: IoEngine, pages: u64, page_size: usize, tunables: Tunables) -> Option<PageCache> {
    let config = Config {
        memory_bytes: pages * page_size as u64,
        page_size,
        tunables: Tunables { io_engine: engine, ..tunables },
        ..Config::default()
    };
    match PageCache::new(config) {
        Ok(c) => Some(c),
        Err(e) if engine == IoEngine::Uring => {
            eprintln!("skipped under io_uring: unavailable here ({e})");
            None
        }
        Err(e) => panic!("cache: {e}"),
    }
}

/// Where two byte strings first differ, for failure messages.
fn describe_mismatch(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let first = got.iter().zip(want.iter()).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    let last = got.iter().zip(want.iter()).rposition(|(a, b)| a != b).unwrap_or(first);
    let ndiff = got.iter().zip(want.iter()).filter(|(a, b)| a != b).count();
    Some(format!(
        "got {} bytes, want {}; {} differing bytes, first at +{} (got {:#04x}, want {:#04x}), \
         last at +{}",
        got.len(),
        want.len(),
        ndiff,
        first,
        got.get(first).copied().unwrap_or(0),
        want.get(first).copied().unwrap_or(0),
        last
    ))
}

/// A file under test and its model.
struct Tracked {
    file: File,
    /// The exact expected contents; its length is the expected file size.
    model: Vec<u8>,
    /// Host path, for the on-disk check (None for memory files).
    host: Option<PathBuf>,
    /// The last operations, for failure messages.
    log: VecDeque<String>,
}

impl Tracked {
    fn new(file: File, host: Option<PathBuf>) -> Tracked {
        Tracked { file, model: Vec::new(), host, log: VecDeque::new() }
    }

    fn note(&mut self, op: String) {
        if self.log.len() == 24 {
            self.log.pop_front();
        }
        self.log.push_back(op);
    }

    fn history(&self) -> String {
        let mut s = String::new();
        for (i, op) in self.log.iter().enumerate() {
            s.push_str(&format!("\n    [{i:2}] {op}"));
        }
        s
    }

    /// Where the byte at `pos` came from, for a failure message: the
    /// state of the cached page holding it, a second read through the
    /// cache, and the host file's byte on disk.
    fn where_is(&self, pos: u64) -> String {
        let ps = self.file.page_size() as u64;
        let state = self.file.page_state(pos / ps);
        let mut again = [0u8; 1];
        let again = self.file.read_at(&mut again, pos).map(|_| again[0]);
        let disk = self.host.as_ref().map(|h| {
            use std::os::unix::fs::FileExt;
            let mut b = [0u8; 1];
            std::fs::File::open(h).and_then(|f| f.read_at(&mut b, pos)).map(|n| (n, b[0]))
        });
        format!("\n  byte {pos}: page state {state:?}; read again {again:?}; on disk {disk:?}")
    }

    fn fail(&self, ctx: &str, msg: String) -> ! {
        panic!(
            "{ctx}: file {}: {msg}\n  model size {}; last ops (oldest first):{}",
            self.file.name(),
            self.model.len(),
            self.history()
        );
    }
}

/// The workload seed: `default`, or `PCACHE_SEED` (decimal or 0x-hex) to
/// replay or explore other runs.
fn seed(default: u64) -> u64 {
    match std::env::var("PCACHE_SEED") {
        Ok(s) => {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            }
            .expect("PCACHE_SEED must be a number")
        }
        Err(_) => default,
    }
}

/// Lengths for reads and writes: tiny, sub-page and multi-page.
fn pick_len(rng: &mut StdRng, ps: usize) -> usize {
    match rng.gen_range(0..4) {
        0 => rng.gen_range(1..64),
        1 => rng.gen_range(1..=ps),
        2 => ps,
        _ => rng.gen_range(1..=3 * ps),
    }
}

/// An offset in `[lo, hi)`, page aligned half of the time.
fn pick_off(rng: &mut StdRng, lo: u64, hi: u64, ps: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    let o = rng.gen_range(lo..hi);
    if rng.gen_bool(0.5) {
        (o / ps * ps).max(lo)
    } else {
        o
    }
}

fn random_advice(rng: &mut StdRng) -> Advice {
    match rng.gen_range(0..5) {
        0 => Advice::DontNeed,
        1 => Advice::WillNeed,
        2 => Advice::Random,
        3 => Advice::Sequential,
        _ => Advice::Normal,
    }
}

/// write_at, mirrored in the model.
fn op_write(t: &mut Tracked, rng: &mut StdRng, ctx: &str, lo: u64, hi: u64, ps: u64) -> u64 {
    // An offset up to a few pages past EOF (making a hole), kept in [lo, hi).
    let size = t.model.len() as u64;
    let reach = (size.max(lo) + 4 * ps).min(hi);
    let off = pick_off(rng, lo, reach, ps);
    let len = (pick_len(rng, ps as usize) as u64).min(hi - off) as usize;
    if len == 0 {
        return 0;
    }
    let mut data = vec![0u8; len];
    rng.fill(&mut data[..]);
    t.note(format!("write_at(off={off}, len={len})"));
    match t.file.write_at(&data, off) {
        Ok(n) if n == len => {}
        other => t.fail(ctx, format!("write_at(off={off}, len={len}) = {other:?}")),
    }
    let end = off as usize + len;
    if t.model.len() < end {
        t.model.resize(end, 0);
    }
    t.model[off as usize..end].copy_from_slice(&data);
    len as u64
}

/// A write pin (get_page_mut) on a page up to two past EOF, below `max`:
/// its bytes are checked against the model first (zero past EOF), then a
/// random range is written and, most times, the file grown to the write's
/// end; bytes written past the final size are not part of the file.
fn op_page_mut(t: &mut Tracked, rng: &mut StdRng, ctx: &str, max: u64, ps: u64) -> u64 {
    let size = t.model.len() as u64;
    let idx = rng.gen_range(0..(size.div_ceil(ps) + 2).min(max / ps));
    let start = idx * ps;
    let off = rng.gen_range(0..ps) as usize;
    let len = rng.gen_range(1..=ps as usize - off);
    let mut data = vec![0u8; len];
    rng.fill(&mut data[..]);
    let grow = rng.gen_bool(0.7).then_some(start + (off + len) as u64);
    t.note(format!("get_page_mut({idx}).write(off={off}, len={len}), extend_to {grow:?}"));
    let mut pin = match t.file.get_page_mut(idx) {
        Ok(p) => p,
        Err(e) => t.fail(ctx, format!("get_page_mut({idx}) failed: {e}")),
    };
    let mut page = vec![0u8; ps as usize];
    pin.read_into(0, &mut page).unwrap();
    let valid = size.saturating_sub(start).min(ps) as usize;
    let model_from = (start as usize).min(t.model.len());
    if let Some(m) = describe_mismatch(&page[..valid], &t.model[model_from..model_from + valid]) {
        t.fail(ctx, format!("get_page_mut({idx}) contents differ from the model: {m}"));
    }
    if let Some(p) = page[valid..].iter().position(|&b| b != 0) {
        t.fail(ctx, format!("get_page_mut({idx}): byte {} past EOF (size {size}) is not 0", valid + p));
    }
    pin.write(off, &data).unwrap();
    if let Some(end) = grow {
        pin.extend_to(end).unwrap();
    }
    drop(pin);
    let new_size = grow.map_or(size, |end| end.max(size)) as usize;
    t.model.resize(new_size, 0);
    let from = start as usize + off;
    let to = (from + len).min(new_size);
    if from < to {
        t.model[from..to].copy_from_slice(&data[..to - from]);
    }
    check_read(t, ctx, start, ps as usize);
    len as u64
}

/// read_at of `[off, off + len)` checked against the model.
fn check_read(t: &Tracked, ctx: &str, off: u64, len: usize) {
    let mut buf = vec![0xA5u8; len];
    let n = match t.file.read_at(&mut buf, off) {
        Ok(n) => n,
        Err(e) => t.fail(ctx, format!("read_at(off={off}, len={len}) failed: {e}")),
    };
    let size = t.model.len() as u64;
    let want_n = if off >= size { 0 } else { (size - off).min(len as u64) as usize };
    if n != want_n {
        t.fail(ctx, format!("read_at(off={off}, len={len}) returned {n} bytes, want {want_n}"));
    }
    let want: &[u8] = if want_n == 0 { &[] } else { &t.model[off as usize..off as usize + want_n] };
    if let Some(m) = describe_mismatch(&buf[..n], want) {
        let first = buf[..n].iter().zip(want).position(|(a, b)| a != b).unwrap_or(0) as u64 + off;
        t.fail(ctx, format!("read_at(off={off}, len={len}) data differs from the model: {m}{}", t.where_is(first)));
    }
}

/// A random read, including ones that start or run past EOF.
fn op_read(t: &mut Tracked, rng: &mut StdRng, ctx: &str, lo: u64, hi: u64, ps: u64) {
    let size = t.model.len() as u64;
    let reach = if hi == u64::MAX { size + 2 * ps } else { hi };
    let off = pick_off(rng, lo, reach.max(lo + 1), ps);
    let mut len = pick_len(rng, ps as usize);
    if hi != u64::MAX {
        len = len.min((hi - off) as usize).max(1);
    }
    t.note(format!("read_at(off={off}, len={len})"));
    check_read(t, ctx, off, len);
}

/// The whole file, read in one call and compared.
fn check_whole(t: &Tracked, ctx: &str, ps: usize) {
    match t.file.len() {
        Ok(l) if l == t.model.len() as u64 => {}
        other => t.fail(ctx, format!("len() = {other:?}, model has {}", t.model.len())),
    }
    check_read(t, ctx, 0, t.model.len() + ps);
}

/// get_page(i): the page's bytes against the model; bytes of the last page
/// past EOF must be zero; a page past EOF is refused with PastEof.
fn check_page(t: &Tracked, ctx: &str, index: u64, ps: usize) {
    let size = t.model.len();
    let npages = size.div_ceil(ps) as u64;
    match t.file.get_page(index) {
        Ok(pinned) => {
            let page = pinned.to_vec();
            if index >= npages {
                t.fail(ctx, format!("get_page({index}) succeeded past EOF (size {size})"));
            }
            if pinned.index() != index || page.len() != ps {
                t.fail(ctx, format!("get_page({index}) gave index {} and {} bytes", pinned.index(), page.len()));
            }
            let start = index as usize * ps;
            let valid = (size - start).min(ps);
            if let Some(m) = describe_mismatch(&page[..valid], &t.model[start..start + valid]) {
                t.fail(ctx, format!("get_page({index}) contents differ from the model: {m}"));
            }
            if let Some(p) = page[valid..].iter().position(|&b| b != 0) {
                t.fail(
                    ctx,
                    format!(
                        "get_page({index}): byte {} past EOF (size {size}) is {:#04x}, not 0",
                        valid + p,
                        page[valid + p]
                    ),
                );
            }
        }
        Err(Error::PastEof { .. }) if index >= npages => {}
        Err(e) => t.fail(ctx, format!("get_page({index}) (size {size}) failed: {e}")),
    }
}

/// find_page(i): if cached, the bytes must match too.
fn check_find_page(t: &Tracked, ctx: &str, index: u64, ps: usize) {
    let size = t.model.len();
    match t.file.find_page(index) {
        Ok(None) => {}
        Ok(Some(pinned)) => {
            let page = pinned.to_vec();
            let start = index as usize * ps;
            if start >= size {
                // A page past EOF may linger only if truncation raced us,
                // which cannot happen here: we own the file.
                t.fail(ctx, format!("find_page({index}) found a page past EOF"));
            }
            let valid = (size - start).min(ps);
            if let Some(m) = describe_mismatch(&page[..valid], &t.model[start..start + valid]) {
                t.fail(ctx, format!("find_page({index}) contents differ from the model: {m}"));
            }
        }
        Err(e) => t.fail(ctx, format!("find_page({index}) failed: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Memory accounting
// ---------------------------------------------------------------------------

/// Samples vmstat until `stop`, `pause` apart: file pages and free pages
/// never exceed the arena. Returns the violations seen.
fn sampler(cache: &PageCache, nr_pages: u64, stop: &AtomicBool, pause: Duration) -> Vec<String> {
    let mut bad = Vec::new();
    let mut samples = 0u64;
    while !stop.load(Ordering::Acquire) {
        let vm = match panic::catch_unwind(AssertUnwindSafe(|| cache.vmstat())) {
            Ok(vm) => vm,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                bad.push(format!("sample {samples}: PageCache::vmstat() panicked while the workload ran: {msg}"));
                return bad;
            }
        };
        let file = vm.get(Item::nr_file_pages);
        let free = vm.get(Item::nr_free_pages);
        if file > nr_pages && bad.len() < 10 {
            bad.push(format!("sample {samples}: nr_file_pages {file} > nr_pages {nr_pages}"));
        }
        if free > nr_pages && bad.len() < 10 {
            bad.push(format!("sample {samples}: nr_free_pages {free} > nr_pages {nr_pages}"));
        }
        samples += 1;
        if pause.is_zero() {
            thread::yield_now();
        } else {
            thread::sleep(pause);
        }
    }
    bad
}

/// After the workload: every frame is either free or a file page. Frames in
/// flight (kswapd freeing a page it just removed) settle, so the check is
/// repeated a bounded number of times; a leaked frame never settles.
fn check_no_frame_leaked(cache: &PageCache, nr_pages: u64, what: &str) {
    let mut last = (0, 0);
    for _ in 0..400 {
        cache.lru_add_drain_all();
        let vm = cache.vmstat();
        let free = vm.get(Item::nr_free_pages);
        let file = vm.get(Item::nr_file_pages);
        if free + file == nr_pages {
            return;
        }
        last = (free, file);
        thread::sleep(Duration::from_millis(5));
    }
    panic!(
        "{what}: frame accounting does not add up after sync_all + lru_add_drain_all with \
         no page pinned: nr_free_pages {} + nr_file_pages {} = {} != nr_pages {nr_pages} \
         ({} frames unaccounted for)",
        last.0,
        last.1,
        last.0 + last.1,
        nr_pages as i64 - (last.0 + last.1) as i64
    );
}

/// After sync_all with nothing running: nothing is dirty or under writeback.
fn check_clean(cache: &PageCache, what: &str) {
    let vm = cache.vmstat();
    assert_eq!(
        (vm.get(Item::nr_dirty), vm.get(Item::nr_writeback)),
        (0, 0),
        "{what}: (nr_dirty, nr_writeback) after sync_all with no writer running"
    );
}

/// Host files on disk equal their models, after the cache is gone.
fn check_on_disk(tracked: &[(String, Vec<u8>, PathBuf)]) {
    for (what, model, path) in tracked {
        let disk = std::fs::read(path).unwrap();
        if let Some(m) = describe_mismatch(&disk, model) {
            panic!(
                "{what}: host file {} on disk differs from the model after sync_all and \
                 dropping the cache: {m}",
                path.display()
            );
        }
    }
}

/// Join scoped threads; re-raise the first panic after all are joined.
fn join_all<T>(handles: Vec<thread::ScopedJoinHandle<'_, T>>) -> Vec<T> {
    let mut out = Vec::new();
    let mut first_panic = None;
    for h in handles {
        match h.join() {
            Ok(v) => out.push(v),
            Err(p) => {
                first_panic.get_or_insert(p);
            }
        }
    }
    if let Some(p) = first_panic {
        panic::resume_unwind(p);
    }
    out
}

// ---------------------------------------------------------------------------
// Private files: each thread owns its files
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Params {
    name: &'static str,
    /// Set by `run_private`, which runs every workload under each engine.
    engine: IoEngine,
    threads: usize,
    cache_pages: u64,
    page_size: usize,
    kswapd: bool,
    /// Largest size of each file, in pages.
    file_pages: u64,
    host_files: usize,
    memory_files: usize,
    ops: usize,
    seed: u64,
    /// The eviction policy plug-in (`Kernel`: the kernel's lists).
    policy: PolicyKind,
    /// The largest page-cache folio (`Tunables::folio_order_max`).
    folio_order_max: u32,
    /// The kernel's lists: classic or multi-gen.
    lru: pcache::LruPolicy,
}

/// One thread's random workload on its own files.
fn private_worker(cache: &PageCache, p: Params, tid: usize, dir: &std::path::Path) -> (Vec<Tracked>, u64) {
    let ps = p.page_size as u64;
    let max = p.file_pages * ps;
    let seed = p.seed ^ (tid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut files = Vec::new();
    for i in 0..p.host_files {
        let path = dir.join(format!("t{tid}-f{i}"));
        let f = cache.open(&path, OpenOptions::default()).unwrap();
        files.push(Tracked::new(f, Some(path)));
    }
    for i in 0..p.memory_files {
        let f = cache.open_memory(&format!("{}-t{tid}-m{i}", p.name)).unwrap();
        files.push(Tracked::new(f, None));
    }
    let mut written = 0u64;
    for op in 0..p.ops {
        let fi = rng.gen_range(0..files.len());
        let t = &mut files[fi];
        let ctx = format!("[{} seed={:#x} thread={tid} op={op}]", p.name, p.seed);
        let size = t.model.len() as u64;
        match rng.gen_range(0..1000) {
            0..=309 => written += op_write(t, &mut rng, &ctx, 0, max, ps),
            310..=349 => written += op_page_mut(t, &mut rng, &ctx, max, ps),
            350..=649 => op_read(t, &mut rng, &ctx, 0, u64::MAX, ps),
            650..=689 => {
                // set_len: shrink or grow; the grown part reads as zeroes.
                let new =
                    if rng.gen_bool(0.5) { rng.gen_range(0..=size) } else { pick_off(&mut rng, size, max + 1, ps) };
                t.note(format!("set_len({new}) from {size}"));
                if let Err(e) = t.file.set_len(new) {
                    t.fail(&ctx, format!("set_len({new}) failed: {e}"));
                }
                t.model.resize(new as usize, 0);
                // The edge of the change, right away.
                let around = new.saturating_sub(ps / 2);
                check_read(t, &ctx, around, ps as usize * 2);
            }
            690..=729 => {
                // punch_hole: zeroes, size unchanged (may run past EOF).
                let off = pick_off(&mut rng, 0, size + ps, ps);
                let len = match rng.gen_range(0..3) {
                    0 => rng.gen_range(1..ps),
                    1 => rng.gen_range(1..=4) * ps,
                    _ => rng.gen_range(1..=6 * ps),
                };
                t.note(format!("punch_hole(off={off}, len={len}) size {size}"));
                if let Err(e) = t.file.punch_hole(off, len) {
                    t.fail(&ctx, format!("punch_hole(off={off}, len={len}) failed: {e}"));
                }
                let a = (off as usize).min(t.model.len());
                let b = ((off + len) as usize).min(t.model.len());
                t.model[a..b].fill(0);
                check_read(t, &ctx, off.saturating_sub(64), len as usize + 128);
                match t.file.len() {
                    Ok(l) if l == size => {}
                    other => t.fail(&ctx, format!("len() after punch_hole = {other:?}, want {size} (unchanged)")),
                }
            }
            730..=739 => {
                t.note("fsync()".into());
                if let Err(e) = t.file.fsync() {
                    t.fail(&ctx, format!("fsync failed: {e}"));
                }
            }
            740..=799 => {
                let advice = random_advice(&mut rng);
                let off = pick_off(&mut rng, 0, size + ps, ps);
                let len = if rng.gen_bool(0.3) { 0 } else { rng.gen_range(1..=8 * ps) };
                t.note(format!("fadvise(off={off}, len={len}, {advice:?})"));
                if let Err(e) = t.file.fadvise(off, len, advice) {
                    t.fail(&ctx, format!("fadvise({off}, {len}, {advice:?}) failed: {e}"));
                }
            }
            800..=929 => {
                let idx = rng.gen_range(0..size.div_ceil(ps) + 2);
                t.note(format!("get_page({idx})"));
                check_page(t, &ctx, idx, ps as usize);
            }
            930..=979 => {
                let idx = rng.gen_range(0..size.div_ceil(ps) + 1);
                t.note(format!("find_page({idx})"));
                check_find_page(t, &ctx, idx, ps as usize);
            }
            980..=983 => {
                t.note("drop_caches()".into());
                cache.drop_caches();
            }
            _ => {
                t.note("whole-file read".into());
                check_whole(t, &ctx, ps as usize);
            }
        }
    }
    (files, written)
}

fn run_private(p: Params) {
    for engine in ENGINES {
        run_private_on(Params { engine, ..p });
    }
}

/// Returns the counters as the workload left them.
fn run_private_on(p: Params) -> Option<pcache::VmStat> {
    let tunables = Tunables {
        kswapd: p.kswapd,
        policy: p.policy,
        folio_order_max: p.folio_order_max,
        lru: p.lru,
        // Windows of up to 2 MiB on the memory files too, so readahead
        // reaches every order.
        ra_pages: if p.name == "large-folios" { 512 } else { Tunables::default().ra_pages },
        ..Tunables::default()
    };
    let cache = cache_on(p.engine, p.cache_pages, p.page_size, tunables)?;
    eprintln!("{}: io_engine {:?}, policy {}", p.name, p.engine, p.policy.name());
    let nr_pages = p.cache_pages;
    let dir = tempfile::tempdir().unwrap();
    let stop = AtomicBool::new(false);

    let (results, violations) = thread::scope(|s| {
        let sampler_h = s.spawn(|| sampler(&cache, nr_pages, &stop, Duration::from_micros(500)));
        let handles: Vec<_> = (0..p.threads)
            .map(|tid| {
                let (cache, dir) = (&cache, dir.path());
                s.spawn(move || private_worker(cache, p, tid, dir))
            })
            .collect();
        let res = panic::catch_unwind(AssertUnwindSafe(|| join_all(handles)));
        stop.store(true, Ordering::Release);
        let violations = sampler_h.join().unwrap();
        match res {
            Ok(r) => (r, violations),
            Err(e) => panic::resume_unwind(e),
        }
    });
    assert!(
        violations.is_empty(),
        "{}: vmstat out of range while the workload ran:\n{}",
        p.name,
        violations.join("\n")
    );

    let ps = p.page_size;
    let cache_bytes = nr_pages * ps as u64;
    // The workload really was several times the cache, per thread.
    for (tid, (_, written)) in results.iter().enumerate() {
        assert!(
            *written > 3 * cache_bytes,
            "{}: thread {tid} wrote only {written} bytes, not several times the cache \
             ({cache_bytes} bytes)",
            p.name
        );
    }
    let files: Vec<Tracked> = results.into_iter().flat_map(|(f, _)| f).collect();
    let vm = cache.vmstat();
    assert!(
        vm.get(Item::pgsteal_direct) + vm.get(Item::pgsteal_kswapd) > 0,
        "{}: no page was ever reclaimed; the test does not test eviction",
        p.name
    );

    let ctx = format!("[{} seed={:#x} final]", p.name, p.seed);
    for t in &files {
        check_whole(t, &ctx, ps);
    }
    cache.sync_all().unwrap();
    check_clean(&cache, p.name);
    // From the devices alone: drop every clean page and read again.
    cache.drop_caches();
    let ctx = format!("[{} seed={:#x} after drop_caches]", p.name, p.seed);
    for t in &files {
        check_whole(t, &ctx, ps);
        for i in 0..(t.model.len().div_ceil(ps) as u64).min(4) {
            check_page(t, &ctx, i, ps);
        }
    }
    cache.sync_all().unwrap();
    check_no_frame_leaked(&cache, nr_pages, p.name);

    // Durability: the host files hold the data once the cache is gone.
    let on_disk: Vec<_> = files
        .iter()
        .filter_map(|t| t.host.clone().map(|h| (format!("{} {}", p.name, t.file.name()), t.model.clone(), h)))
        .collect();
    drop(files);
    drop(cache);
    check_on_disk(&on_disk);
    Some(vm)
}

// Goal: many threads, each with its own host (O_DIRECT) and memory files, on
// one small cache (192 pages of 4 KiB; ~6 MiB of files) never see data
// differ from the model. Method: a seeded random mix of unaligned writes,
// writes past EOF, write pins (get_page_mut), reads (also past EOF), set_len, punch_hole, fsync,
// fadvise, get_page/find_page and drop_caches, each checked against the
// model; at the end full reads, a re-read from the devices after
// drop_caches, the frame accounting, and the host files on disk.
#[test]
fn private_files_under_pressure() {
    run_private(Params {
        name: "private",
        threads: 6,
        cache_pages: 192,
        page_size: 4096,
        kswapd: true,
        file_pages: 128,
        host_files: 1,
        memory_files: 1,
        ops: 25000,
        seed: seed(0x5eed_0001),
        engine: IoEngine::Threads,
        policy: PolicyKind::Kernel,
        folio_order_max: 0,
        lru: pcache::LruPolicy::Classic,
    });
}

// Goal: the same guarantees with large folios of every order mixed with
// single pages: readahead reads streams into folios up to order 9 while
// writes dirty them whole, writeback and reclaim write them whole, write
// pins, mappings' neighbours (find_page, get_page), punches, truncations
// and fadvise split them (dirty or clean) or drop them whole, and reclaim
// evicts them, all under memory pressure. Method: the private-files
// workload at `folio_order_max = 9` on a 1,024-page cache (4 MiB), with
// files of up to 1,024 pages and 2 MiB readahead windows, so whole-file
// reads ramp through the orders while the arena is fragmented; many
// large folios must have been read and split.
#[test]
fn private_files_large_folios() {
    private_large_folios(pcache::LruPolicy::Classic);
}

// Goal: the same on the multi-gen LRU, which ages, sorts and evicts the
// folios whole and puts a split folio's pages on its generation.
#[test]
fn private_files_large_folios_multigen() {
    private_large_folios(pcache::LruPolicy::MultiGen);
}

fn private_large_folios(lru: pcache::LruPolicy) {
    for engine in ENGINES {
        let p = Params {
            name: "large-folios",
            threads: 4,
            cache_pages: 1024,
            page_size: 4096,
            kswapd: true,
            file_pages: 1024,
            host_files: 1,
            memory_files: 1,
            ops: 15000,
            seed: seed(0x5eed_0020),
            engine,
            policy: PolicyKind::Kernel,
            folio_order_max: 9,
            lru,
        };
        let Some(vm) = run_private_on(p) else { continue };
        let (folios, splits) = (vm.get(Item::thp_file_alloc), vm.get(Item::thp_split_page));
        assert!(folios > 100 && splits > 10, "{engine:?}: {folios} large folios read, {splits} split");
    }
}

// Goal: the same guarantees with kswapd off, so every free frame comes from
// direct reclaim by the writing and reading threads themselves.
// Method: the private-files workload with `Tunables { kswapd: false }`.
#[test]
fn private_files_direct_reclaim_only() {
    run_private(Params {
        name: "direct-reclaim",
        threads: 6,
        cache_pages: 128,
        page_size: 4096,
        kswapd: false,
        file_pages: 96,
        host_files: 1,
        memory_files: 1,
        ops: 20000,
        seed: seed(0x5eed_0002),
        engine: IoEngine::Threads,
        policy: PolicyKind::Kernel,
        folio_order_max: 0,
        lru: pcache::LruPolicy::Classic,
    });
}

// Goal: the same guarantees with 64 KiB pages (offsets and partial pages
// relative to a large page; O_DIRECT tail writes of a 64 KiB page).
// Method: the private-files workload on a 48-page (3 MiB) cache of 64 KiB
// pages with ~12 MiB of files.
#[test]
fn private_files_64k_pages() {
    run_private(Params {
        name: "64k-pages",
        threads: 4,
        cache_pages: 48,
        page_size: 65536,
        kswapd: true,
        file_pages: 24,
        host_files: 1,
        memory_files: 1,
        ops: 8000,
        seed: seed(0x5eed_0003),
        engine: IoEngine::Threads,
        policy: PolicyKind::Kernel,
        folio_order_max: 0,
        lru: pcache::LruPolicy::Classic,
    });
}

// Goal: every eviction-policy plug-in keeps the data guarantees: the
// policy chooses what reclaim evicts, the engine's mechanics (writeback of
// dirty candidates, truncation and invalidation of pages the policy holds
// or has handed out, hazard checks) keep every read equal to the model.
// Method: the private-files workload (writes, write pins, reads, set_len,
// punch_hole, fadvise, drop_caches; several times the cache) once per
// plug-in, kswapd on and off, with the frame accounting and the host files
// checked at the end.
#[test]
fn private_files_every_policy() {
    for policy in PolicyKind::ALL.into_iter().filter(|&k| k != PolicyKind::Kernel) {
        for kswapd in [true, false] {
            run_private(Params {
                name: "policy",
                threads: 4,
                cache_pages: 128,
                page_size: 4096,
                kswapd,
                file_pages: 96,
                host_files: 1,
                memory_files: 1,
                ops: 6000,
                seed: seed(0x5eed_0010),
                engine: IoEngine::Threads,
                policy,
                folio_order_max: 0,
                lru: pcache::LruPolicy::Classic,
            });
        }
    }
}

// ---------------------------------------------------------------------------
// One shared file, disjoint regions
// ---------------------------------------------------------------------------

// Goal: threads writing disjoint page-aligned regions of the SAME files (one
// host file, one memory file) through their own handles never disturb each
// other's data, and after a barrier every thread reads every region
// correctly. Method: both files are sized up front; in phase 1 each thread
// runs random writes, reads, punch_hole, get_page, fadvise (over any range:
// advice does not change data), fsync and drop_caches on its own region,
// checked against its own model; it then publishes its model and waits at a
// barrier; in phase 2 every thread reads random ranges and pages anywhere in
// the files against the assembled model. Then full reads, re-reads after
// drop_caches, frame accounting and the host file on disk are checked.
#[test]
fn shared_file_disjoint_regions() {
    const THREADS: usize = 6;
    const REGION_PAGES: u64 = 48;
    const PS: u64 = 4096;
    const CACHE_PAGES: u64 = 128;
    const OPS: usize = 15000;
    let seed0 = seed(0x5eed_0004);
    let region = REGION_PAGES * PS;
    let total = region * THREADS as u64;

    let cache = PageCache::new(Config { memory_bytes: CACHE_PAGES * PS, ..Config::default() }).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let host_path = dir.path().join("shared");
    let host = cache.open(&host_path, OpenOptions::default()).unwrap();
    let mem = cache.open_memory("shared").unwrap();
    host.set_len(total).unwrap();
    mem.set_len(total).unwrap();

    // Models per thread per file: [host, memory].
    let published: Mutex<Vec<Option<[Vec<u8>; 2]>>> = Mutex::new(vec![None; THREADS]);
    let barrier = Barrier::new(THREADS);
    let stop = AtomicBool::new(false);

    let violations = thread::scope(|s| {
        let sampler_h = s.spawn(|| sampler(&cache, CACHE_PAGES, &stop, Duration::from_micros(500)));
        let handles: Vec<_> = (0..THREADS)
            .map(|tid| {
                let (cache, host, mem, published, barrier) = (&cache, &host, &mem, &published, &barrier);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed0 ^ (tid as u64 + 1).wrapping_mul(0x51_7cc1));
                    let lo = tid as u64 * region;
                    let hi = lo + region;
                    // Our own handles, with their own readahead state. The
                    // model covers the whole file but only our region is
                    // ours; the rest stays zero in it and is never checked.
                    let mut files =
                        [Tracked::new(host.reopen().unwrap(), None), Tracked::new(mem.reopen().unwrap(), None)];
                    for t in files.iter_mut() {
                        t.model = vec![0u8; total as usize];
                    }
                    let phase1 = panic::catch_unwind(AssertUnwindSafe(|| {
                        for op in 0..OPS {
                            let t = &mut files[rng.gen_range(0..2)];
                            let ctx = format!("[shared seed={seed0:#x} thread={tid} op={op}]");
                            match rng.gen_range(0..100) {
                                0..=39 => {
                                    op_write(t, &mut rng, &ctx, lo, hi, PS);
                                }
                                40..=69 => op_read(t, &mut rng, &ctx, lo, hi, PS),
                                70..=74 => {
                                    let off = pick_off(&mut rng, lo, hi, PS);
                                    let len = rng.gen_range(1..=(hi - off).min(5 * PS));
                                    t.note(format!("punch_hole(off={off}, len={len})"));
                                    if let Err(e) = t.file.punch_hole(off, len) {
                                        t.fail(&ctx, format!("punch_hole failed: {e}"));
                                    }
                                    t.model[off as usize..(off + len) as usize].fill(0);
                                    check_read(t, &ctx, off, len as usize);
                                }
                                75..=86 => {
                                    let idx = rng.gen_range(lo / PS..hi / PS);
                                    t.note(format!("get_page({idx})"));
                                    check_page(t, &ctx, idx, PS as usize);
                                }
                                87..=93 => {
                                    let advice = random_advice(&mut rng);
                                    let off = rng.gen_range(0..total);
                                    let len = rng.gen_range(0..=16 * PS);
                                    t.note(format!("fadvise({off}, {len}, {advice:?})"));
                                    if let Err(e) = t.file.fadvise(off, len, advice) {
                                        t.fail(&ctx, format!("fadvise failed: {e}"));
                                    }
                                }
                                94..=96 => {
                                    t.note("fsync()".into());
                                    if let Err(e) = t.file.fsync() {
                                        t.fail(&ctx, format!("fsync failed: {e}"));
                                    }
                                }
                                97 => {
                                    t.note("drop_caches()".into());
                                    cache.drop_caches();
                                }
                                _ => {
                                    t.note("whole-region read".into());
                                    check_read(t, &ctx, lo, region as usize);
                                }
                            }
                        }
                    }));
                    // Publish our regions even on failure, so nobody waits
                    // at the barrier forever.
                    {
                        let mut p = published.lock().unwrap();
                        p[tid] = Some([
                            files[0].model[lo as usize..hi as usize].to_vec(),
                            files[1].model[lo as usize..hi as usize].to_vec(),
                        ]);
                    }
                    barrier.wait();
                    if let Err(e) = phase1 {
                        panic::resume_unwind(e);
                    }
                    // Phase 2: everybody's data, anywhere.
                    let full: [Vec<u8>; 2] = {
                        let p = published.lock().unwrap();
                        [0, 1].map(|k| p.iter().flat_map(|m| m.as_ref().unwrap()[k].iter().copied()).collect())
                    };
                    for (t, m) in files.iter_mut().zip(full) {
                        t.model = m;
                        t.note("phase 2: model now holds every region".into());
                    }
                    for op in 0..OPS / 4 {
                        let t = &mut files[rng.gen_range(0..2)];
                        let ctx = format!("[shared seed={seed0:#x} thread={tid} phase2 op={op}]");
                        match rng.gen_range(0..10) {
                            0..=5 => op_read(t, &mut rng, &ctx, 0, total, PS),
                            6..=8 => {
                                let idx = rng.gen_range(0..total / PS);
                                t.note(format!("get_page({idx})"));
                                check_page(t, &ctx, idx, PS as usize);
                            }
                            _ => {
                                let r = rng.gen_range(0..THREADS as u64);
                                t.note(format!("region {r} read"));
                                check_read(t, &ctx, r * region, region as usize);
                            }
                        }
                    }
                })
            })
            .collect();
        let res = panic::catch_unwind(AssertUnwindSafe(|| join_all(handles)));
        stop.store(true, Ordering::Release);
        let violations = sampler_h.join().unwrap();
        if let Err(e) = res {
            panic::resume_unwind(e);
        }
        violations
    });
    assert!(violations.is_empty(), "shared: vmstat out of range while the workload ran:\n{}", violations.join("\n"));

    let models: [Vec<u8>; 2] = {
        let p = published.lock().unwrap();
        [0, 1].map(|k| p.iter().flat_map(|m| m.as_ref().unwrap()[k].iter().copied()).collect())
    };
    let vm = cache.vmstat();
    assert!(
        vm.get(Item::pgsteal_direct) + vm.get(Item::pgsteal_kswapd) > 0,
        "shared: no page was ever reclaimed; the test does not test eviction"
    );
    let mut files = [Tracked::new(host, Some(host_path.clone())), Tracked::new(mem, None)];
    for (t, m) in files.iter_mut().zip(models.iter()) {
        t.model = m.clone();
        check_whole(t, "[shared final]", PS as usize);
    }
    cache.sync_all().unwrap();
    check_clean(&cache, "shared");
    cache.drop_caches();
    for t in &files {
        check_whole(t, "[shared after drop_caches]", PS as usize);
    }
    cache.sync_all().unwrap();
    check_no_frame_leaked(&cache, CACHE_PAGES, "shared");
    drop(files);
    drop(cache);
    check_on_disk(&[("shared".into(), models[0].clone(), host_path)]);
}

// ---------------------------------------------------------------------------
// Focused reproductions of what the random workloads found
// ---------------------------------------------------------------------------

/// One memory file and one host file on a roomy cache.
fn two_files(cache: &PageCache, dir: &std::path::Path, name: &str) -> Vec<File> {
    vec![cache.open_memory(name).unwrap(), cache.open(dir.join(name), OpenOptions::default()).unwrap()]
}

// Goal: punch_hole zeroes exactly its range when the range starts on a page
// boundary and ends inside the same page, both in the cache and (after
// sync_all and drop_caches) on the device. Cases: a hole running past EOF
// (clamped to EOF, so it ends mid-page) and a short hole inside a page, with
// an unaligned hole as a control. Method: fill, punch, compare reads with
// the expected bytes right away and again from the device.
#[test]
fn punch_hole_from_page_start_within_one_page() {
    let cache = PageCache::new(Config { memory_bytes: 256 * 4096, ..Config::default() }).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // (file size, hole offset, hole length)
    let cases: [(u64, u64, u64); 4] = [
        (836, 0, 16384),          // whole of a short file, hole past EOF
        (3 * 4096, 4096, 100),    // aligned start, ends inside the page
        (4096 + 500, 4096, 4096), // clamped at EOF, mid-page
        (3 * 4096, 4106, 100),    // control: unaligned start
    ];
    let mut failures = Vec::new();
    for (n, &(size, off, len)) in cases.iter().enumerate() {
        for f in two_files(&cache, dir.path(), &format!("punch{n}")) {
            let mut model = vec![0xABu8; size as usize];
            assert_eq!(f.write_at(&model, 0).unwrap(), size as usize);
            let end = (off + len).min(size) as usize;
            model[off as usize..end].fill(0);
            f.punch_hole(off, len).unwrap();
            assert_eq!(f.len().unwrap(), size, "punch_hole changed the size");
            for when in ["right after punch_hole", "after sync_all + drop_caches"] {
                if when != "right after punch_hole" {
                    cache.sync_all().unwrap();
                    cache.drop_caches();
                }
                let mut buf = vec![0u8; size as usize];
                assert_eq!(f.read_at(&mut buf, 0).unwrap(), size as usize);
                if let Some(m) = describe_mismatch(&buf, &model) {
                    failures.push(format!("{}: size {size}, punch_hole(off={off}, len={len}), {when}: {m}", f.name()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "punch_hole left data in place:\n{}", failures.join("\n"));
}

// Goal: after punch_hole returns, the range reads as zeroes even while
// another handle reads the file concurrently (readahead must not re-cache
// the pre-punch bytes from the device between the cache being emptied and
// the device being punched). Method: one thread loops fadvise(WillNeed)
// over the whole host file through a second handle; the main thread
// repeatedly writes a page, writes it back to the device with
// fadvise(DontNeed), punches it and reads it back,
// counting the rounds that see anything but zeroes. Bounded by rounds.
#[test]
fn punch_hole_vs_concurrent_readahead() {
    const ROUNDS: u64 = 2000;
    for engine in ENGINES {
        race_punch_hole_vs_concurrent_readahead(engine, ROUNDS);
    }
}

fn race_punch_hole_vs_concurrent_readahead(engine: IoEngine, rounds: u64) {
    let Some(cache) = cache_on(engine, 256, 4096, Tunables::default()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = cache.open(dir.path().join("punch-race"), OpenOptions::default()).unwrap();
    f.set_len(16 * 4096).unwrap();
    let stop = AtomicBool::new(false);
    let mut stale = Vec::new();
    thread::scope(|s| {
        let g = f.reopen().unwrap();
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                g.fadvise(0, 0, Advice::WillNeed).unwrap();
            }
        });
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            for round in 0..rounds {
                let page = 4 + round % 8;
                f.write_at(&[0xAB; 4096], page * 4096).unwrap();
                f.fadvise(0, 0, Advice::DontNeed).unwrap();
                f.punch_hole(page * 4096, 4096).unwrap();
                let mut buf = [0u8; 4096];
                assert_eq!(f.read_at(&mut buf, page * 4096).unwrap(), 4096);
                let nonzero = buf.iter().filter(|&&b| b != 0).count();
                if nonzero > 0 {
                    stale.push((round, page, nonzero));
                }
            }
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = res {
            panic::resume_unwind(e);
        }
    });
    assert!(
        stale.is_empty(),
        "{} of {rounds} rounds read pre-punch data back from a punched page while another \
         handle ran readahead; first (round, page, nonzero bytes): {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
}

// Goal: the same guarantee for truncation: after set_len shrinks a file and
// grows it again, the cut-off range reads as zeroes while another handle
// runs readahead. Method: as punch_hole_vs_concurrent_readahead, with
// pages 4..12 written back and then set_len(4 pages), set_len(16 pages) in
// place of the punch; pages 4..12 must read as zeroes.
#[test]
fn truncate_vs_concurrent_readahead() {
    const ROUNDS: u64 = 8000;
    for engine in ENGINES {
        race_truncate_vs_concurrent_readahead(engine, ROUNDS);
    }
}

fn race_truncate_vs_concurrent_readahead(engine: IoEngine, rounds: u64) {
    let Some(cache) = cache_on(engine, 256, 4096, Tunables::default()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = cache.open(dir.path().join("trunc-race"), OpenOptions::default()).unwrap();
    f.set_len(16 * 4096).unwrap();
    let stop = AtomicBool::new(false);
    let mut stale = Vec::new();
    thread::scope(|s| {
        let g = f.reopen().unwrap();
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                g.fadvise(0, 0, Advice::WillNeed).unwrap();
            }
        });
        let res = panic::catch_unwind(AssertUnwindSafe(|| {
            for round in 0..rounds {
                f.write_at(&[0xAB; 8 * 4096], 4 * 4096).unwrap();
                f.fadvise(0, 0, Advice::DontNeed).unwrap();
                f.set_len(4 * 4096).unwrap();
                f.set_len(16 * 4096).unwrap();
                let mut buf = [0u8; 8 * 4096];
                assert_eq!(f.read_at(&mut buf, 4 * 4096).unwrap(), 8 * 4096);
                for (i, page) in buf.chunks(4096).enumerate() {
                    let nonzero = page.iter().filter(|&&b| b != 0).count();
                    if nonzero > 0 {
                        stale.push((round, 4 + i as u64, nonzero));
                    }
                }
            }
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(e) = res {
            panic::resume_unwind(e);
        }
    });
    assert!(
        stale.is_empty(),
        "{} of {rounds} rounds read pre-truncate data back after shrinking and regrowing \
         while another handle ran readahead; first (round, page, nonzero bytes): {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
}

// Goal: the frame counters stay in range while frames are freed and
// allocated from several threads at once: nr_free_pages and nr_file_pages
// never exceed nr_pages, and vmstat() never panics. Method: three threads
// churn frames (read 64 pages of their own memory file through a 32-page
// cache, then fadvise(DontNeed) them) while the main thread samples
// vmstat; bounded by rounds.
#[test]
fn frame_counters_in_range_under_churn() {
    const ROUNDS: usize = 3000;
    let cache = PageCache::new(Config { memory_bytes: 32 * 4096, ..Config::default() }).unwrap();
    let stop = AtomicBool::new(false);
    let violations = thread::scope(|s| {
        let sampler_h = s.spawn(|| sampler(&cache, 32, &stop, Duration::ZERO));
        let handles: Vec<_> = (0..3)
            .map(|t| {
                let cache = &cache;
                s.spawn(move || {
                    let f = cache.open_memory(&format!("churn{t}")).unwrap();
                    f.write_at(&vec![t as u8 + 1; 64 * 4096], 0).unwrap();
                    f.fsync().unwrap();
                    let mut buf = vec![0u8; 64 * 4096];
                    for _ in 0..ROUNDS {
                        assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
                        assert!(buf.iter().all(|&b| b == t as u8 + 1), "churn{t}: wrong data");
                        f.fadvise(0, 0, Advice::DontNeed).unwrap();
                    }
                })
            })
            .collect();
        let res = panic::catch_unwind(AssertUnwindSafe(|| join_all(handles)));
        stop.store(true, Ordering::Release);
        let v = sampler_h.join().unwrap();
        if let Err(e) = res {
            panic::resume_unwind(e);
        }
        v
    });
    assert!(violations.is_empty(), "frame counters out of range under churn:\n{}", violations.join("\n"));
    check_no_frame_leaked(&cache, 32, "churn");
}

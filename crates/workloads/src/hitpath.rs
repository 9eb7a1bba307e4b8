//! `hitpath`: how fast is a page cache hit?
//!
//! Measured in one run, every figure the median of several rounds:
//!
//! 1. Random 4 KiB reads of a fully cached host file at seeded page-aligned
//!    offsets: pcache's [`File::read_at`] against the kernel's `pread(2)` on
//!    the same file (also fully cached, by the kernel) against a bare
//!    `copy_from_slice` of 4 KiB out of an in-memory copy of the file, the
//!    physical limit. The three are interleaved round by round.
//! 2. Hot reads: the same 4 KiB page again and again, pcache against pread.
//! 3. The hit path alone: [`File::find_page`] and drop of the [`PageRef`]
//!    (look up, pin, mark accessed, unpin) on a memory-backed file whose
//!    every page is cached, keys Zipf(0.99) scrambled over the file, with
//!    one thread and with several (each with its own key stream and its own
//!    handle), all started together on a barrier.
//!
//! 4. Mapped access: [`pcache::Mapping::page`] of a present entry and an
//!    8-byte load, on the same keys, against the kernel's own mapped page
//!    cache: a memfd of the same size, mapped shared and populated, read
//!    with the same 8-byte loads. The kernel row is the hardware's cost of
//!    touching those pages (cache and TLB misses); the difference is what
//!    pcache's software page table adds. `mapped_load` is the same access
//!    without a guard ([`pcache::Mapping::load_u64`]).
//!
//! [`PageRef`]: pcache::PageRef

use std::fmt::Write as _;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pcache::{Config, File, LruPolicy, OpenOptions, PageCache, Tunables, VmStat};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::experiment::{ExpOpts, Experiment, MainJob, Outcome, ParamDoc};
use crate::progress::Progress;
use crate::render;
use crate::stats::{self, Better, Comparison, Row};
use crate::zipf::{uniform_page_offsets, ZipfKeys};
use crate::{Error, Result};

/// The page size of every cache in this benchmark, and the read size.
pub const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;
/// Frames beyond the data, so that neither cache needs to reclaim.
const SLACK_BYTES: u64 = 64 * MIB;

/// The targets, as `(ratio or ns, comparison)`.
pub const TARGET_KERNEL_OVER_PCACHE: f64 = 1.5;
pub const TARGET_PCACHE_OVER_MEMCPY: f64 = 1.25;
pub const TARGET_HOT_KERNEL_OVER_PCACHE: f64 = 4.0;
pub const TARGET_HIT_NS_1THREAD: f64 = 25.0;
pub const TARGET_SCALING_2THREADS: f64 = 1.8;

/// A memfd of `len` bytes mapped shared and populated, every page
/// written once: the kernel's page cache for the mapped-access row.
struct KernelMapping {
    ptr: *mut u8,
    len: usize,
    fd: libc::c_int,
}

// SAFETY: the mapping is only read (with plain loads of whole words that
// nobody writes after `new`) and unmapped by Drop; a raw pointer to shared
// memory is as sendable and shareable as the `&[u64]` it stands for.
unsafe impl Sync for KernelMapping {}

impl KernelMapping {
    fn new(len: usize) -> Result<KernelMapping> {
        let name = c"pcache-hitpath";
        // SAFETY: a valid NUL-terminated name; the fd is owned by the result.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io { context: "memfd_create".into(), source: std::io::Error::last_os_error() });
        }
        let fail = |fd, what: &str| {
            let source = std::io::Error::last_os_error();
            // SAFETY: our fd, closed once.
            unsafe { libc::close(fd) };
            Err(Error::Io { context: format!("{what} of a {len}-byte memfd"), source })
        };
        // SAFETY: an fd we own; a length that fits off_t on 64-bit Linux.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return fail(fd, "ftruncate");
        }
        // SAFETY: a fresh shared mapping of our memfd, length `len`; no
        // Rust object aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return fail(fd, "mmap");
        }
        let ptr = ptr.cast::<u8>();
        for page in 0..len / PAGE {
            // SAFETY: inside the mapping, 8-aligned (page aligned); nothing
            // else accesses it yet.
            unsafe { ptr.add(page * PAGE).cast::<u64>().write(page as u64 + 1) };
        }
        Ok(KernelMapping { ptr, len, fd })
    }

    /// The first word of page `page`: a load through the MMU.
    #[inline]
    fn load(&self, page: u64) -> Option<u64> {
        let off = (page as usize).checked_mul(PAGE).filter(|&o| o + 8 <= self.len)?;
        // SAFETY: in bounds (checked), page aligned, initialised by `new`,
        // and never written after it: no data race.
        Some(unsafe { self.ptr.add(off).cast::<u64>().read() })
    }
}

impl Drop for KernelMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping and fd `new` made, released once; no borrow
        // of the memory outlives `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitpathOpts {
    /// Size of the host file for the read measurements, MiB.
    pub file_mib: u64,
    /// Pages of the memory-backed file for the hit path (4 KiB each).
    pub hit_pages: u64,
    /// Operations per measurement (per thread for the hit path).
    pub ops: u64,
    /// Thread counts for the hit path; 1 and 2 fill `hit_ns_1thread`,
    /// `hit_ns_2threads` and `scaling_2threads`.
    pub threads: Vec<usize>,
    /// Seed of the offsets and keys.
    pub seed: u64,
    /// Repetitions of each measurement; the median is reported.
    pub rounds: usize,
    /// The Zipf exponent of the hit-path keys.
    pub zipf_s: f64,
    /// Where to make the temporary directory (the system's temp dir if
    /// `None`). Not in the result's JSON, like `progress`.
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Draw progress bars on stderr (only when it is a terminal).
    #[serde(skip)]
    pub progress: bool,
    /// A label: whether these are the reduced `quick` sizes.
    pub quick: bool,
}

impl Default for HitpathOpts {
    fn default() -> Self {
        HitpathOpts {
            file_mib: 256,
            hit_pages: 1 << 20,
            ops: 2_000_000,
            threads: vec![1, 2],
            seed: 1,
            rounds: 5,
            zipf_s: 0.99,
            dir: None,
            progress: true,
            quick: false,
        }
    }
}

impl HitpathOpts {
    /// Reduced sizes for tests and CI: a 64 MiB file, 64 Ki hit pages,
    /// 200 000 ops, 3 rounds.
    pub fn quick() -> HitpathOpts {
        HitpathOpts { file_mib: 64, hit_pages: 64 << 10, ops: 200_000, rounds: 3, quick: true, ..Self::default() }
    }

    /// Refuse values the benchmark cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if self.file_mib == 0 || self.file_mib > 1 << 20 {
            return bad(format!("file size {} MiB must be from 1 MiB to 1 TiB", self.file_mib));
        }
        if self.hit_pages == 0 || self.hit_pages > 1 << 30 {
            return bad(format!("hit pages {} must be from 1 to 2^30", self.hit_pages));
        }
        if self.ops == 0 || self.ops > 1 << 32 {
            return bad(format!("ops {} must be from 1 to 2^32", self.ops));
        }
        if self.rounds == 0 || self.rounds > 1000 {
            return bad(format!("rounds {} must be from 1 to 1000", self.rounds));
        }
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 256) {
            return bad(format!("thread counts {:?} must be a non-empty list of 1 to 256", self.threads));
        }
        if !(self.zipf_s >= 0.0 && self.zipf_s.is_finite()) {
            return bad(format!("zipf exponent {} must be finite and at least 0", self.zipf_s));
        }
        Ok(())
    }
}

/// The hit path at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitRun {
    /// What each op is: `find_page` (look up, pin, drop), `pageref` (the
    /// same, reading 8 bytes through the pin), `mapped` (`Mapping::page` of
    /// a present entry and an 8-byte `load_u64`), `pagemut` (a write pin,
    /// 8 bytes written, dropped: the page dirtied and throttled),
    /// `kernel_mapped` (an 8-byte load from the kernel's mapping of a
    /// memfd as large as the file), `mapped_batch` (`load_u64_many`; its
    /// figures are per key).
    #[serde(default = "find_page_access")]
    pub access: String,
    pub threads: usize,
    /// Median over rounds of the ns per op each thread saw (its elapsed
    /// time over its ops, averaged over the threads).
    pub ns_per_op: f64,
    /// Median over rounds of the total throughput, million ops per second.
    pub mops: f64,
    pub rounds_ns_per_op: Vec<f64>,
    pub rounds_mops: Vec<f64>,
}

/// Per-round samples of the read measurements, ns per op.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadSamples {
    pub pcache_read_ns: Vec<f64>,
    pub kernel_pread_ns: Vec<f64>,
    pub memcpy_ns: Vec<f64>,
    pub pcache_hot_read_ns: Vec<f64>,
    pub kernel_hot_pread_ns: Vec<f64>,
}

/// One target and whether it was met.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    /// The key of the measured value in this result.
    pub key: String,
    pub value: Option<f64>,
    /// The goal, e.g. `>= 1.5`.
    pub goal: String,
    /// `PASS`, `MISS`, or `NOT RUN` when the value was not measured.
    pub status: String,
}

/// Wall time of each phase, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSecs {
    pub setup: f64,
    pub random_read: f64,
    pub hot_read: f64,
    pub hit_setup: f64,
    pub hit: f64,
    pub total: f64,
}

/// The result; serialises to the JSON that `pcache bench hitpath --json`
/// writes. Reads back results of older versions, which lacked some rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HitpathResult {
    pub experiment: String,
    /// The parameters, as keys of the result.
    #[serde(flatten)]
    pub opts: HitpathOpts,
    pub page_size: usize,
    /// Whether this was an optimised build (timings of a debug build mean
    /// little).
    pub optimized: bool,
    // Medians, ns per op.
    pub pcache_read_ns: f64,
    pub kernel_pread_ns: f64,
    pub memcpy_ns: f64,
    pub pcache_hot_read_ns: f64,
    pub kernel_hot_pread_ns: f64,
    pub hit_ns_1thread: Option<f64>,
    pub hit_ns_2threads: Option<f64>,
    /// find_page plus an 8-byte read through the PageRef (the validated
    /// copy of issue 11's sound frame access), 1 thread.
    pub pageref_hit_ns_1thread: Option<f64>,
    /// A mapped access with the page present (M15): entry load, pin,
    /// re-check, young byte, an 8-byte load, unpin.
    pub mapped_hit_ns_1thread: Option<f64>,
    pub mapped_hit_ns_2threads: Option<f64>,
    /// The kernel's mapped page cache on the same keys: an 8-byte load
    /// from a populated shared mapping of a memfd as large as the file.
    pub kernel_mapped_ns_1thread: Option<f64>,
    /// `mapped_hit_ns_1thread - kernel_mapped_ns_1thread`: what pcache's
    /// software page table, pin and guard add to the hardware's access.
    pub mapped_over_kernel_ns: Option<f64>,
    /// The same access without a guard (`Mapping::load_u64`: entry load,
    /// transient pin, re-check, young byte, the 8-byte load, unpin).
    pub mapped_load_ns_1thread: Option<f64>,
    pub mapped_load_ns_2threads: Option<f64>,
    /// `mapped_load_ns_1thread - kernel_mapped_ns_1thread`.
    pub mapped_load_over_kernel_ns: Option<f64>,
    /// The batched access (`Mapping::load_u64_many`, keys handed over
    /// [`BATCH_KEYS`] at a time), ns per key.
    pub mapped_batch_ns_1thread: Option<f64>,
    pub mapped_batch_ns_2threads: Option<f64>,
    /// A write pin of a cached page, 8 bytes written, dropped, 1 thread.
    pub pagemut_write_ns_1thread: Option<f64>,
    /// find_page on a cache built with the multi-gen LRU (issue 15), 1
    /// and 2 threads, and what it adds to the classic find_page at 1
    /// thread: the cost of MGLRU's marking (folio_inc_refs) against the
    /// two lists' PAGE_HOT hint.
    pub mglru_hit_ns_1thread: Option<f64>,
    pub mglru_hit_ns_2threads: Option<f64>,
    pub mglru_marking_ns: Option<f64>,
    // Ratios.
    pub kernel_over_pcache: f64,
    pub pcache_over_memcpy: f64,
    pub hot_kernel_over_pcache: f64,
    /// throughput(2 threads) / throughput(1 thread).
    pub scaling_2threads: Option<f64>,
    /// The same for the mapped access.
    pub mapped_scaling_2threads: Option<f64>,
    // Details.
    pub hit: Vec<HitRun>,
    pub samples: ReadSamples,
    pub targets: Vec<Target>,
    pub phase_secs: PhaseSecs,
    /// pcache vmstat deltas: `read_setup` (creating the read cache and
    /// warming it), `read` (the timed reads), `hit_setup` (populating the
    /// hit-path cache), `hit` (the timed lookups), `hit_mglru` (the timed
    /// lookups of the multi-gen LRU's rows).
    pub vmstat: serde_json::Value,
    /// Anything the run noticed that bears on the numbers.
    pub notes: Vec<String>,
}

impl HitpathResult {
    /// The targets met, of those measured.
    pub fn passed(&self) -> usize {
        self.targets.iter().filter(|t| t.status == "PASS").count()
    }

    /// A readable report: parameters, the targets table, and the per-round
    /// samples as an mmtests-style comparison.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "hitpath: {} MiB file, {} hit pages ({} MiB), {} ops x {} rounds, zipf {}, seed {}{}",
            self.opts.file_mib,
            self.opts.hit_pages,
            self.opts.hit_pages * self.page_size as u64 / MIB,
            self.opts.ops,
            self.opts.rounds,
            self.opts.zipf_s,
            self.opts.seed,
            if self.opts.quick { " (quick)" } else { "" }
        );
        if !self.optimized {
            let _ = writeln!(s, "WARNING: built without optimisations; these timings mean little");
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "median ns/op                 pcache     kernel     memcpy");
        let _ = writeln!(
            s,
            "random 4 KiB read        {:>10.1} {:>10.1} {:>10.1}",
            self.pcache_read_ns, self.kernel_pread_ns, self.memcpy_ns
        );
        let _ = writeln!(
            s,
            "hot 4 KiB read           {:>10.1} {:>10.1}",
            self.pcache_hot_read_ns, self.kernel_hot_pread_ns
        );
        for h in &self.hit {
            let _ = writeln!(
                s,
                "{:<13}, {:>2} thread{} {:>10.1}   ({:.1} Mops/s total)",
                h.access,
                h.threads,
                if h.threads == 1 { " " } else { "s" },
                h.ns_per_op,
                h.mops
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "{:<36} {:>10}  {:>10}  result", "target", "measured", "goal");
        for t in &self.targets {
            let v = match t.value {
                Some(v) if t.key.ends_with("_ns") || t.key.contains("_ns_") => format!("{v:.1} ns"),
                Some(v) => format!("{v:.2}x"),
                None => "-".to_string(),
            };
            let _ = writeln!(s, "{:<36} {:>10}  {:>10}  {}", t.name, v, t.goal, t.status);
        }
        let measured = self.targets.iter().filter(|t| t.value.is_some()).count();
        let _ = writeln!(s, "{} of {} targets met", self.passed(), measured);

        let _ = writeln!(s);
        let _ = writeln!(s, "per-round samples, ns/op (percentages against the first column; positive is better)");
        let mut cmp = Comparison::new(["kernel", "pcache", "memcpy"]);
        cmp.metric(
            "rand-4k",
            Better::Lower,
            vec![
                self.samples.kernel_pread_ns.clone(),
                self.samples.pcache_read_ns.clone(),
                self.samples.memcpy_ns.clone(),
            ],
        );
        cmp.metric(
            "hot-4k",
            Better::Lower,
            vec![self.samples.kernel_hot_pread_ns.clone(), self.samples.pcache_hot_read_ns.clone(), Vec::new()],
        );
        s.push_str(&render::render_compare_rows(&cmp, &[], &Row::ALL));
        if !self.hit.is_empty() {
            let _ = writeln!(s);
            let mut cmp = Comparison::new(self.hit.iter().map(|h| format!("{} {} thr", h.access, h.threads)));
            cmp.metric("hit-ns", Better::Lower, self.hit.iter().map(|h| h.rounds_ns_per_op.clone()).collect());
            cmp.metric("hit-mops", Better::Higher, self.hit.iter().map(|h| h.rounds_mops.clone()).collect());
            s.push_str(&render::render_compare_rows(&cmp, &[], &Row::ALL));
        }
        let _ = writeln!(s);
        let p = &self.phase_secs;
        let _ = writeln!(
            s,
            "time: setup {:.1}s, random reads {:.1}s, hot reads {:.1}s, hit setup {:.1}s, hit path {:.1}s, total {:.1}s",
            p.setup, p.random_read, p.hot_read, p.hit_setup, p.hit, p.total
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// A page-aligned byte buffer.
pub(crate) struct Aligned {
    v: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + PAGE];
        let start = v.as_ptr().align_offset(PAGE);
        Aligned { v, start, len }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.v[self.start..self.start + self.len]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.start..self.start + self.len]
    }
}

/// Non-zero pseudo-random bytes.
fn fill_nonzero(buf: &mut [u8], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for chunk in buf.chunks_mut(8) {
        let w = (rng.next_u64() | 0x0101_0101_0101_0101).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn ns_per_op(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops.max(1) as f64
}

/// Time `read` of `buf.len()` bytes at each of `offsets`, each read checked
/// to be whole; ns per read. `what` names the read in errors.
fn time_reads(
    what: &str,
    offsets: &[u64],
    buf: &mut [u8],
    read: impl Fn(&mut [u8], u64) -> Result<usize>,
) -> Result<f64> {
    let t = Instant::now();
    for &off in offsets {
        let n = read(buf, off)?;
        if n != buf.len() {
            return Err(Error::Check(format!("{what} at {off} returned {n} bytes, not {}", buf.len())));
        }
        black_box(&mut *buf);
    }
    Ok(ns_per_op(t.elapsed(), offsets.len()))
}

/// Read the whole file through `read` in 1 MiB chunks (warming its cache),
/// checking every byte against `mem`, the file's data.
fn read_whole(what: &str, mem: &[u8], read: impl Fn(&mut [u8], u64) -> Result<usize>) -> Result<()> {
    let mut chunk = Aligned::new(1 << 20);
    for (i, want) in mem.chunks(chunk.len).enumerate() {
        let off = (i * chunk.len) as u64;
        let got = &mut chunk.as_mut_slice()[..want.len()];
        let n = read(got, off)?;
        if n != want.len() || got != want {
            return Err(Error::Check(format!(
                "{what} read {n} bytes at {off}, wanted {} bytes of the file's data",
                want.len()
            )));
        }
    }
    Ok(())
}

fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::Invalid(format!("{what} {v} does not fit in memory")))
}

fn vm_delta(now: &VmStat, earlier: &VmStat) -> serde_json::Value {
    now.delta(earlier).to_json()
}

/// Results of the read phases.
struct ReadPhase {
    samples: ReadSamples,
    vm_setup: serde_json::Value,
    vm_read: serde_json::Value,
    misses: Option<u64>,
    setup: f64,
    random_read: f64,
    hot_read: f64,
}

fn read_phases(opts: &HitpathOpts, progress: &Progress) -> Result<ReadPhase> {
    let file_bytes = opts.file_mib * MIB;
    let len = to_usize(file_bytes, "file size")?;
    let pages = file_bytes / PAGE as u64;
    let ops = to_usize(opts.ops, "ops")?;

    // a. The file, in memory and on disk, and both caches warm.
    let phase = progress.phase("setup: create file", 4);
    let mut mem = Aligned::new(len);
    fill_nonzero(mem.as_mut_slice(), opts.seed ^ 0x5eed_f11e);
    phase.inc(1);
    let tmp = crate::sys::tempdir_in(opts.dir.as_deref(), "pcache-hitpath-")?;
    let path = tmp.path().join("data");
    let io_err = |what: &str| {
        let ctx = format!("{what} {}", path.display());
        move |e| Error::io(ctx, e)
    };
    {
        let f = std::fs::File::create(&path).map_err(io_err("creating"))?;
        for (i, chunk) in mem.as_slice().chunks(8 << 20).enumerate() {
            f.write_all_at(chunk, (i * (8 << 20)) as u64).map_err(io_err("writing"))?;
        }
        f.sync_all().map_err(io_err("syncing"))?;
    }
    phase.inc(1);

    let cache = PageCache::new(Config::with_memory(file_bytes + SLACK_BYTES))?;
    let vm0 = cache.vmstat();
    let pf = cache.open(&path, OpenOptions { create: false, truncate: false, direct: true })?;
    let pcache_read = |b: &mut [u8], off| Ok(pf.read_at(b, off)?);
    read_whole("pcache", mem.as_slice(), pcache_read)?;
    phase.inc(1);
    // The kernel's copy: a plain buffered file.
    let kf = std::fs::File::open(&path).map_err(io_err("opening"))?;
    let kernel_read =
        |b: &mut [u8], off| kf.read_at(b, off).map_err(|e| Error::io(format!("kernel pread at {off}"), e));
    read_whole("kernel", mem.as_slice(), kernel_read)?;
    phase.inc(1);
    let setup = phase.finish();
    let vm1 = cache.vmstat();

    // b. Random 4 KiB reads, interleaved pcache / kernel / memcpy.
    // The physical limit: a bare copy of the same page from the same memory
    // (pcache's own frames, pinned here), with no lookup at all. Since frames
    // are read only through the seqcount-validated atomic copy (the engine's
    // highmem.rs; a plain memcpy racing a writer is undefined behaviour), the
    // bare copy is that copy: `PageRef::read_into`.
    let pinned = (0..pages).map(|i| pf.get_page(i)).collect::<std::result::Result<Vec<_>, _>>()?;
    let memcpy = |b: &mut [u8], off: u64| {
        pinned[(off / PAGE as u64) as usize]
            .read_into(0, b)
            .map_err(|e| Error::Check(format!("copying a pinned page: {e}")))?;
        Ok(b.len())
    };
    let offsets = uniform_page_offsets(pages, PAGE as u64, ops, opts.seed);
    let mut buf = Aligned::new(PAGE);
    let mut samples = ReadSamples::default();
    let phase = progress.phase("random 4 KiB reads", 3 * opts.rounds as u64);
    for r in 0..opts.rounds {
        phase.set_message(format!("round {}", r + 1));
        samples.pcache_read_ns.push(time_reads("pcache read_at", &offsets, buf.as_mut_slice(), pcache_read)?);
        phase.inc(1);
        samples.kernel_pread_ns.push(time_reads("kernel pread", &offsets, buf.as_mut_slice(), kernel_read)?);
        phase.inc(1);
        samples.memcpy_ns.push(time_reads("memcpy", &offsets, buf.as_mut_slice(), memcpy)?);
        phase.inc(1);
    }
    let random_read = phase.finish();
    drop(offsets);
    drop(pinned);

    // c. One page, again and again.
    let hot = vec![(pages / 2) * PAGE as u64; ops];
    let phase = progress.phase("hot 4 KiB reads", 2 * opts.rounds as u64);
    for r in 0..opts.rounds {
        phase.set_message(format!("round {}", r + 1));
        samples.pcache_hot_read_ns.push(time_reads("pcache read_at", &hot, buf.as_mut_slice(), pcache_read)?);
        phase.inc(1);
        samples.kernel_hot_pread_ns.push(time_reads("kernel pread", &hot, buf.as_mut_slice(), kernel_read)?);
        phase.inc(1);
    }
    let hot_read = phase.finish();
    if buf.as_slice() != &mem.as_slice()[(pages / 2) as usize * PAGE..(pages / 2 + 1) as usize * PAGE] {
        return Err(Error::Check("the hot page read back wrong data".into()));
    }
    let vm2 = cache.vmstat();
    let misses = vm2.by_name("pgcache_miss").zip(vm1.by_name("pgcache_miss")).map(|(a, b)| a.saturating_sub(b));
    pf.close()?;
    drop(pf);
    drop(cache);
    drop(tmp);

    Ok(ReadPhase {
        samples,
        vm_setup: vm_delta(&vm1, &vm0),
        vm_read: vm_delta(&vm2, &vm1),
        misses,
        setup,
        random_read,
        hot_read,
    })
}

struct HitPhase {
    runs: Vec<HitRun>,
    vm_setup: serde_json::Value,
    vm_hit: serde_json::Value,
    vm_mglru: serde_json::Value,
    setup: f64,
    hit: f64,
}

fn find_page_access() -> String {
    "find_page".into()
}

/// One timed run of `keys.len()` threads, each with its own key stream;
/// thread `t` does `access(t, key)` per key, which says whether it hit.
/// Returns (mean ns/op per thread, total Mops/s).
fn hit_round<F>(keys: &[Vec<u64>], access: &F) -> Result<(f64, f64)>
where
    F: Fn(usize, u64) -> Result<bool> + Sync,
{
    let barrier = Barrier::new(keys.len());
    let results: Vec<Result<(Duration, u64)>> = std::thread::scope(|s| {
        let joins: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(t, keys)| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(Duration, u64)> {
                    barrier.wait();
                    let t0 = Instant::now();
                    let mut misses = 0u64;
                    for &k in keys {
                        if !access(t, k)? {
                            misses += 1;
                        }
                    }
                    Ok((t0.elapsed(), misses))
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut ns = 0.0;
    let mut mops = 0.0;
    for (r, keys) in results.into_iter().zip(keys) {
        let (elapsed, misses) = r?;
        if misses > 0 {
            return Err(Error::Check(format!(
                "hit path: {misses} of {} lookups found no page, but every page was cached \
                 (was something reclaimed?)",
                keys.len()
            )));
        }
        ns += ns_per_op(elapsed, keys.len());
        mops += keys.len() as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6;
    }
    Ok((ns / keys.len() as f64, mops))
}

/// The hit path's rows as they are timed, each `rounds` timed runs.
struct Rows<'a> {
    rounds: usize,
    phase: &'a crate::progress::Phase,
    runs: Vec<HitRun>,
}

impl Rows<'_> {
    /// Time `access` on `keys.len()` threads as the row `name`; each call
    /// does `per_call` ops, and the row's figures are per op.
    fn time<F>(&mut self, name: &str, keys: &[Vec<u64>], per_call: usize, access: &F) -> Result<()>
    where
        F: Fn(usize, u64) -> Result<bool> + Sync,
    {
        let (mut ns, mut mops) = (Vec::new(), Vec::new());
        for r in 0..self.rounds {
            self.phase.set_message(format!("{name}, {} thr, round {}", keys.len(), r + 1));
            let (n, m) = hit_round(keys, access)?;
            ns.push(n / per_call as f64);
            mops.push(m * per_call as f64);
            self.phase.inc(1);
        }
        self.runs.push(HitRun {
            access: name.into(),
            threads: keys.len(),
            ns_per_op: stats::median(&ns),
            mops: stats::median(&mops),
            rounds_ns_per_op: ns,
            rounds_mops: mops,
        });
        Ok(())
    }

    /// The `mapped_batch` row: each thread's keys handed to
    /// `Mapping::load_u64_many` [`BATCH_KEYS`] at a time (a trailing
    /// partial batch left out), timed per call and reported per key.
    fn batch(&mut self, map: &pcache::Mapping, keys: &[Vec<u64>]) -> Result<()> {
        let pos: Vec<Vec<u64>> = keys.iter().map(|ks| ks.iter().map(|&k| k * PAGE as u64).collect()).collect();
        let calls: Vec<Vec<u64>> = pos.iter().map(|p| (0..(p.len() / BATCH_KEYS) as u64).collect()).collect();
        let batch = |t: usize, c: u64| -> Result<bool> {
            let at = c as usize * BATCH_KEYS;
            let mut words = [0u64; BATCH_KEYS];
            map.load_u64_many(&pos[t][at..at + BATCH_KEYS], &mut words)?;
            black_box(&words);
            Ok(true)
        };
        self.time("mapped_batch", &calls, BATCH_KEYS, &batch)
    }
}

/// Keys per `load_u64_many` call in the `mapped_batch` row.
pub const BATCH_KEYS: usize = 64;

/// A cache of `pages` frames (and slack) built with `tunables`, holding
/// every page of the memory-backed file `name`, each added through
/// `get_page` (`tick` after each) and the per-CPU batches drained; and its
/// vmstat before.
fn populated(tunables: Tunables, name: &str, pages: u64, tick: impl Fn(u64)) -> Result<(PageCache, File, VmStat)> {
    let cache = PageCache::new(Config { tunables, ..Config::with_memory(pages * PAGE as u64 + SLACK_BYTES) })?;
    let vm0 = cache.vmstat();
    let file = cache.open_memory(name)?;
    file.set_len(pages * PAGE as u64)?;
    for i in 0..pages {
        drop(file.get_page(i)?);
        tick(i);
    }
    cache.lru_add_drain_all();
    Ok((cache, file, vm0))
}

/// `k` handles of `file`, one per thread, given to `rows` and closed after.
fn with_handles<T>(file: &File, k: usize, rows: impl FnOnce(&[File]) -> Result<T>) -> Result<T> {
    let handles = (0..k).map(|_| file.reopen()).collect::<pcache::Result<Vec<File>>>()?;
    let out = rows(&handles)?;
    for h in &handles {
        h.close()?;
    }
    Ok(out)
}

/// find_page of a cached page and the drop of its pin: whether it hit.
fn find_hit(file: &File, key: u64) -> Result<bool> {
    Ok(file.find_page(key)?.map(black_box).is_some())
}

fn hit_phase(opts: &HitpathOpts, progress: &Progress) -> Result<HitPhase> {
    let ops = to_usize(opts.ops, "ops")?;
    let pages = opts.hit_pages;
    let max_threads = opts.threads.iter().copied().max().unwrap_or(1);

    // d. A cache holding every page of a memory-backed file.
    let phase = progress.phase("hit path: populate", pages + max_threads as u64);
    let step = 1 << 14;
    let tick = |i: u64| {
        if i % step == step - 1 {
            phase.inc(step);
        }
    };
    let (cache, file, vm0) = populated(Tunables::default(), "hitpath", pages, tick)?;
    phase.inc(pages % step);
    let zipf = ZipfKeys::new(pages, opts.zipf_s, opts.seed ^ 0x21bf_0000).map_err(Error::Invalid)?;
    let mut streams = Vec::with_capacity(max_threads);
    for t in 0..max_threads {
        streams.push(zipf.generate(ops, opts.seed.wrapping_add(0x1000 + t as u64)));
        phase.inc(1);
    }
    drop(zipf);
    let setup = phase.finish();
    let vm1 = cache.vmstat();

    // Rows: find_page for every thread count; the mapped access for 1 and
    // 2 threads; the PageRef read and the PageMut write for 1 thread.
    let mapped_threads: Vec<usize> = opts.threads.iter().copied().filter(|&k| k <= 2).collect();
    let nrows = 2 * opts.threads.len() + 3 * mapped_threads.len() + 3 * opts.threads.contains(&1) as usize;
    let phase = progress.phase("hit path: lookups", (nrows * opts.rounds) as u64);
    let mut rows = Rows { rounds: opts.rounds, phase: &phase, runs: Vec::new() };
    let map = file.map(0, pages * PAGE as u64, pcache::MapFlags::READ)?;
    for &k in &opts.threads {
        let keys = &streams[..k];
        with_handles(&file, k, |handles| {
            rows.time("find_page", keys, 1, &|t, key| find_hit(&handles[t], key))?;
            if k <= 2 {
                // Faulted in here, so every entry is present when timed.
                if k == 1 {
                    for i in 0..pages {
                        drop(map.page(i)?);
                    }
                }
                let mapped = |_t: usize, key: u64| -> Result<bool> {
                    black_box(map.page(key)?.load_u64(0)?);
                    Ok(true)
                };
                rows.time("mapped", keys, 1, &mapped)?;
                let mapped_load = |_t: usize, key: u64| -> Result<bool> {
                    black_box(map.load_u64(key, 0)?);
                    Ok(true)
                };
                rows.time("mapped_load", keys, 1, &mapped_load)?;
                rows.batch(&map, keys)?;
                if k == 1 {
                    let kmap = KernelMapping::new(pages as usize * PAGE)?;
                    let kernel = |_t: usize, key: u64| -> Result<bool> {
                        black_box(kmap.load(key));
                        Ok(true)
                    };
                    rows.time("kernel_mapped", keys, 1, &kernel)?;
                }
            }
            if k == 1 {
                let pageref = |t: usize, key: u64| -> Result<bool> {
                    let Some(p) = handles[t].find_page(key)? else { return Ok(false) };
                    let mut word = [0u8; 8];
                    p.read_into(0, &mut word)?;
                    black_box(word);
                    Ok(true)
                };
                rows.time("pageref", keys, 1, &pageref)?;
                // Writes dirty pages, so fewer of them: the throttle and the
                // flusher's writeback to memory are part of what a write costs.
                let few: Vec<Vec<u64>> = vec![streams[0][..streams[0].len().div_ceil(8)].to_vec()];
                let pagemut = |t: usize, key: u64| -> Result<bool> {
                    handles[t].get_page_mut(key)?.write(8, &key.to_le_bytes())?;
                    Ok(true)
                };
                rows.time("pagemut", &few, 1, &pagemut)?;
            }
            Ok(())
        })?;
    }
    drop(map);
    let vm2 = cache.vmstat();
    file.close()?;
    drop(file);
    cache.unlink_memory("hitpath")?;
    drop(cache);
    let vm_mglru = mglru_rows(opts, pages, &streams, &mut rows)?;
    let runs = rows.runs;
    let hit = phase.finish();
    Ok(HitPhase { runs, vm_setup: vm_delta(&vm1, &vm0), vm_hit: vm_delta(&vm2, &vm1), vm_mglru, setup, hit })
}

/// The find_page rows again on a cache built with the multi-gen LRU
/// (issue 15), same pages and keys: what MGLRU's marking (folio_inc_refs in
/// the page's flags until its count is full, then the PAGE_HOT hint in the tree
/// slot) costs on the hit path. Returns the vmstat delta of the timed lookups.
fn mglru_rows(opts: &HitpathOpts, pages: u64, streams: &[Vec<u64>], rows: &mut Rows<'_>) -> Result<serde_json::Value> {
    let tunables = Tunables { lru: LruPolicy::MultiGen, ..Tunables::default() };
    let (cache, file, _) = populated(tunables, "hitpath-mglru", pages, |_| {})?;
    let vm0 = cache.vmstat();
    for &k in &opts.threads {
        with_handles(&file, k, |handles| {
            rows.time(MGLRU_ACCESS, &streams[..k], 1, &|t, key| find_hit(&handles[t], key))
        })?;
    }
    let vm1 = cache.vmstat();
    file.close()?;
    drop(file);
    cache.unlink_memory("hitpath-mglru")?;
    Ok(vm_delta(&vm1, &vm0))
}

/// The access name of the multi-gen LRU's find_page rows.
const MGLRU_ACCESS: &str = "find_page_mglru";

fn target(name: &str, key: &str, value: Option<f64>, goal: &str, pass: impl Fn(f64) -> bool) -> Target {
    let status = match value {
        Some(v) if v.is_finite() && pass(v) => "PASS",
        Some(_) => "MISS",
        None => "NOT RUN",
    };
    Target { name: name.into(), key: key.into(), value, goal: goal.into(), status: status.into() }
}

/// Run the benchmark.
pub fn run(opts: &HitpathOpts) -> Result<HitpathResult> {
    opts.validate()?;
    let start = Instant::now();
    let progress = Progress::new(opts.progress);
    let read = read_phases(opts, &progress)?;
    let hit = hit_phase(opts, &progress)?;

    let s = &read.samples;
    let (pcache_read_ns, kernel_pread_ns) = (stats::median(&s.pcache_read_ns), stats::median(&s.kernel_pread_ns));
    let (memcpy_ns, pcache_hot_read_ns) = (stats::median(&s.memcpy_ns), stats::median(&s.pcache_hot_read_ns));
    let kernel_hot_pread_ns = stats::median(&s.kernel_hot_pread_ns);
    let row = |access: &str, k: usize| hit.runs.iter().find(|r| r.access == access && r.threads == k);
    let ns = |access: &str, k: usize| row(access, k).map(|r| r.ns_per_op);
    let minus = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
    let scaling = |access: &str| row(access, 2).zip(row(access, 1)).map(|(two, one)| stats::ratio(two.mops, one.mops));
    let mut result = HitpathResult {
        experiment: "hitpath".into(),
        opts: opts.clone(),
        page_size: PAGE,
        optimized: !cfg!(debug_assertions),
        pcache_read_ns,
        kernel_pread_ns,
        memcpy_ns,
        pcache_hot_read_ns,
        kernel_hot_pread_ns,
        hit_ns_1thread: ns("find_page", 1),
        hit_ns_2threads: ns("find_page", 2),
        pageref_hit_ns_1thread: ns("pageref", 1),
        mapped_hit_ns_1thread: ns("mapped", 1),
        mapped_hit_ns_2threads: ns("mapped", 2),
        kernel_mapped_ns_1thread: ns("kernel_mapped", 1),
        mapped_over_kernel_ns: minus(ns("mapped", 1), ns("kernel_mapped", 1)),
        mapped_load_ns_1thread: ns("mapped_load", 1),
        mapped_load_ns_2threads: ns("mapped_load", 2),
        mapped_load_over_kernel_ns: minus(ns("mapped_load", 1), ns("kernel_mapped", 1)),
        mapped_batch_ns_1thread: ns("mapped_batch", 1),
        mapped_batch_ns_2threads: ns("mapped_batch", 2),
        pagemut_write_ns_1thread: ns("pagemut", 1),
        mglru_hit_ns_1thread: ns(MGLRU_ACCESS, 1),
        mglru_hit_ns_2threads: ns(MGLRU_ACCESS, 2),
        mglru_marking_ns: minus(ns(MGLRU_ACCESS, 1), ns("find_page", 1)),
        kernel_over_pcache: stats::ratio(kernel_pread_ns, pcache_read_ns),
        pcache_over_memcpy: stats::ratio(pcache_read_ns, memcpy_ns),
        hot_kernel_over_pcache: stats::ratio(kernel_hot_pread_ns, pcache_hot_read_ns),
        scaling_2threads: scaling("find_page"),
        mapped_scaling_2threads: scaling("mapped"),
        hit: hit.runs,
        samples: read.samples,
        targets: Vec::new(),
        phase_secs: PhaseSecs {
            setup: read.setup,
            random_read: read.random_read,
            hot_read: read.hot_read,
            hit_setup: hit.setup,
            hit: hit.hit,
            total: start.elapsed().as_secs_f64(),
        },
        vmstat: serde_json::json!({
            "read_setup": read.vm_setup,
            "read": read.vm_read,
            "hit_setup": hit.vm_setup,
            "hit": hit.vm_hit,
            "hit_mglru": hit.vm_mglru,
        }),
        notes: notes(opts, read.misses),
    };
    result.targets = targets(&result);
    Ok(result)
}

/// The targets, judged on the finished result.
fn targets(r: &HitpathResult) -> Vec<Target> {
    let at_least = |name: &str, key: &str, value: Option<f64>, goal: f64| {
        target(name, key, value, &format!(">= {goal:.2}x"), |v| v >= goal)
    };
    let below_hit_ns = |name: &str, key: &str, value: Option<f64>| {
        target(name, key, value, &format!("< {TARGET_HIT_NS_1THREAD} ns"), |v| v < TARGET_HIT_NS_1THREAD)
    };
    vec![
        at_least(
            "random read: kernel pread / pcache",
            "kernel_over_pcache",
            Some(r.kernel_over_pcache),
            TARGET_KERNEL_OVER_PCACHE,
        ),
        target(
            "random read: pcache / memcpy",
            "pcache_over_memcpy",
            Some(r.pcache_over_memcpy),
            &format!("<= {TARGET_PCACHE_OVER_MEMCPY:.2}x"),
            |v| v <= TARGET_PCACHE_OVER_MEMCPY,
        ),
        at_least(
            "hot read: kernel pread / pcache",
            "hot_kernel_over_pcache",
            Some(r.hot_kernel_over_pcache),
            TARGET_HOT_KERNEL_OVER_PCACHE,
        ),
        below_hit_ns("hit path, 1 thread", "hit_ns_1thread", r.hit_ns_1thread),
        at_least("hit path: 2 threads / 1 throughput", "scaling_2threads", r.scaling_2threads, TARGET_SCALING_2THREADS),
        below_hit_ns("mapped access, 1 thread", "mapped_hit_ns_1thread", r.mapped_hit_ns_1thread),
        below_hit_ns("mapped: pcache - kernel mmap, 1 thr", "mapped_over_kernel_ns", r.mapped_over_kernel_ns),
        below_hit_ns("Mapping::load_u64, 1 thread", "mapped_load_ns_1thread", r.mapped_load_ns_1thread),
        below_hit_ns("Mapping::load_u64_many, per key, 1 thr", "mapped_batch_ns_1thread", r.mapped_batch_ns_1thread),
        at_least(
            "mapped access: 2 threads / 1 throughput",
            "mapped_scaling_2threads",
            r.mapped_scaling_2threads,
            TARGET_SCALING_2THREADS,
        ),
    ]
}

/// What the reader should know about how the figures were taken.
fn notes(opts: &HitpathOpts, misses: Option<u64>) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(m) = misses.filter(|&m| m > 0) {
        notes.push(format!("{m} pcache misses during the timed reads: the read cache was not fully warm"));
    }
    let cpus = crate::sys::cpus();
    if let Some(&k) = opts.threads.iter().find(|&&k| k > cpus) {
        notes.push(format!("{k} hit-path threads on {cpus} CPUs: the threads share CPUs"));
    }
    if cfg!(debug_assertions) {
        notes.push("debug build: run with --release for meaningful timings".into());
    }
    notes
}

/// `pcache bench hitpath`.
pub struct Hitpath;

impl Experiment for Hitpath {
    fn name(&self) -> &'static str {
        "hitpath"
    }
    fn about(&self) -> &'static str {
        "The cache-hit path: pcache read_at against kernel pread and memcpy, hot reads, and find_page with 1 \
         and 2 threads."
    }
    fn main_job(&self) -> MainJob {
        MainJob::DefaultSize
    }
    fn params(&self) -> &'static [ParamDoc] {
        &[
            ParamDoc {
                name: "file_mib",
                help: "size of the host file for the read measurements, MiB [default: 256; quick: 64]",
            },
            ParamDoc {
                name: "hit_pages",
                help: "pages (4 KiB) of the memory-backed file for the hit path [default: 1048576; quick: 65536]",
            },
            ParamDoc {
                name: "ops",
                help: "operations per measurement, per thread on the hit path [default: 2000000; quick: 200000]",
            },
            ParamDoc { name: "threads", help: "hit-path thread counts, comma-separated [default: 1,2]" },
        ]
    }
    fn smoke(&self) -> ExpOpts {
        let params = [("file_mib", "8"), ("hit_pages", "4096"), ("ops", "20000")];
        ExpOpts {
            runs: Some(2),
            seed: 1,
            params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..ExpOpts::default()
        }
    }
    fn run(&self, opts: &ExpOpts) -> Result<Outcome> {
        let o = HitpathOpts::from_exp(opts)?;
        let result = run(&o)?;
        Outcome::new(result.report(), &result)
    }
}

impl HitpathOpts {
    /// The options `pcache bench hitpath` asks for, checked (`--runs` is
    /// its rounds).
    pub fn from_exp(opts: &ExpOpts) -> Result<HitpathOpts> {
        let d = if opts.quick { Self::quick() } else { Self::default() };
        let o = HitpathOpts {
            file_mib: opts.param_as("file_mib")?.unwrap_or(d.file_mib),
            hit_pages: opts.param_as("hit_pages")?.unwrap_or(d.hit_pages),
            ops: opts.param_as("ops")?.unwrap_or(d.ops),
            threads: opts.param_list("threads")?.unwrap_or(d.threads),
            rounds: opts.runs.unwrap_or(d.rounds),
            seed: opts.seed,
            dir: opts.dir.clone(),
            progress: opts.progress,
            ..d
        };
        o.validate().map(|()| o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let bad = [
            HitpathOpts { file_mib: 0, ..HitpathOpts::quick() },
            HitpathOpts { hit_pages: 0, ..HitpathOpts::quick() },
            HitpathOpts { ops: 0, ..HitpathOpts::quick() },
            HitpathOpts { rounds: 0, ..HitpathOpts::quick() },
            HitpathOpts { threads: vec![], ..HitpathOpts::quick() },
            HitpathOpts { threads: vec![1, 0], ..HitpathOpts::quick() },
            HitpathOpts { zipf_s: f64::NAN, ..HitpathOpts::quick() },
        ];
        crate::experiment::assert_checked(&[HitpathOpts::default(), HitpathOpts::quick()], &bad, HitpathOpts::validate);
    }

    #[test]
    fn aligned_and_nonzero() {
        let mut a = Aligned::new(3 * PAGE);
        assert_eq!(a.as_slice().as_ptr() as usize % PAGE, 0);
        assert_eq!(a.as_slice().len(), 3 * PAGE);
        fill_nonzero(&mut a.as_mut_slice()[..PAGE + 3], 9);
        assert!(a.as_slice()[..PAGE + 3].iter().all(|&b| b != 0));
        assert!(a.as_slice()[PAGE + 3..].iter().all(|&b| b == 0));
    }
}

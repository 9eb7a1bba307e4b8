//! A rate-limited device: a slow disk or a USB stick in front of any other
//! device, for experiments where reclaim must meet dirty pages.
//!
//! One [`RateLimit`] stands for one physical device: a bandwidth (bytes per
//! second) and a per-request latency. Any number of [`RateLimitedDev`]s
//! (one per file) share it, as the files of one file system share its disk.
//! Reads and writes draw on the same budget: a USB stick (and most disks)
//! has one channel, so a reader waits behind the flusher's writes, which is
//! the seed's point about a desktop stalling while it copies to a stick.
//!
//! ## The model: one queue, served in arrival order
//!
//! The device is a server with queue depth 1 (USB mass storage's bulk-only
//! transport is): a request of `n` bytes occupies it for
//! `latency + n / rate`, and requests are served in the order they asked.
//! The clock is a virtual "device busy until" instant, the generic cell
//! rate algorithm's theoretical arrival time (`tat`): a request books
//! `[max(tat, now), +service)` under a short lock and then sleeps until its
//! booking ends. No thread holds the lock while it sleeps, so arrival order
//! is the only order, and a waiter never waits for more than the bookings
//! made before its own: bounded by the I/O in flight, not by luck.
//!
//! - **Bursts.** A booking may end up to [`BURST`] in the past when the
//!   device was idle (a token bucket of that depth): it absorbs the
//!   scheduler's lateness in waking sleepers, so a sequential writer gets
//!   the configured rate rather than rate minus wake-up jitter. A request
//!   still never completes sooner than `latency` after it was made.
//! - **Big requests** are booked in slices of at most [`BURST`]'s worth of
//!   bytes, one booking per slice, so a small read arriving during a huge
//!   write waits behind one slice, not behind the whole write (the two
//!   interleave, as a block layer splits large bios). The latency is paid
//!   once per request.
//! - **Shutdown.** [`RateLimit::shutdown`] wakes every waiter and lets all
//!   later requests through at once: a cache being torn down, or a test
//!   giving up, never waits for a simulated device. Waits are not
//!   interruptible otherwise, as `wait_on_page_writeback` is not (see
//!   `signal.rs`): each lasts as long as the device transfers ahead of it.
//!
//! The data itself is moved by the inner device after the wait, so what
//! the inner device holds is exactly what was written, only later.
//!
//! ## Counters
//!
//! Per direction, as `/proc/diskstats` has them: requests (`rd_ios`,
//! `wr_ios`), bytes, and the time requests spent from arrival to
//! completion (`rd_ticks`, `wr_ticks`, queueing included). iostat's
//! "await" ("Avg wait" in the seed's USB-stick table) is ticks over ios:
//! [`IoStat::r_await_ms`], [`IoStat::w_await_ms`], [`IoStat::await_ms`].

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::BackingDev;
use crate::error::{Error, Result};

/// How far ahead of the device's clock an idle device lets requests run,
/// and the longest slice one booking takes (see the module comment).
pub const BURST: Duration = Duration::from_millis(10);
/// Rates below this are refused: a page per second.
pub const MIN_RATE: u64 = 4096;
/// Rates above this are refused (1 TiB/s): nothing to simulate there.
pub const MAX_RATE: u64 = 1 << 40;
/// Latencies above this are refused: a device that slow is a hang.
pub const MAX_LATENCY: Duration = Duration::from_secs(10);

/// A device's speed: bandwidth and per-request latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSpec {
    /// Bytes per second, reads and writes together.
    pub bytes_per_sec: u64,
    /// Time each request occupies the device besides its transfer (a
    /// command's round trip, a seek).
    pub latency: Duration,
}

impl RateSpec {
    /// A checked spec: `bytes_per_sec` from [`MIN_RATE`] to [`MAX_RATE`],
    /// `latency` at most [`MAX_LATENCY`].
    pub fn new(bytes_per_sec: u64, latency: Duration) -> Result<RateSpec> {
        if !(MIN_RATE..=MAX_RATE).contains(&bytes_per_sec) {
            return Err(Error::InvalidArgument(format!(
                "device rate {bytes_per_sec} B/s must be from {MIN_RATE} B/s (a page a second) to 1 TiB/s"
            )));
        }
        if latency > MAX_LATENCY {
            return Err(Error::InvalidArgument(format!("device latency {latency:?} must be at most {MAX_LATENCY:?}")));
        }
        Ok(RateSpec { bytes_per_sec, latency })
    }

    /// Parse a rate (`30M`, `30MiB/s`, see [`parse_rate`]) and a latency
    /// (`5ms`, see [`parse_latency`]).
    pub fn parse(rate: &str, latency: &str) -> Result<RateSpec> {
        RateSpec::new(parse_rate(rate)?, parse_latency(latency)?)
    }

    /// How long the device takes to move `bytes` (without the latency).
    pub fn transfer_time(&self, bytes: u64) -> Duration {
        // u128: bytes * 1e9 overflows u64 above 18 GB.
        let ns = (bytes as u128 * 1_000_000_000).div_ceil(self.bytes_per_sec as u128);
        Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }
}

impl fmt::Display for RateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.bytes_per_sec as f64;
        let (v, unit) = if r >= (1u64 << 30) as f64 {
            (r / (1u64 << 30) as f64, "GiB/s")
        } else if r >= (1u64 << 20) as f64 {
            (r / (1u64 << 20) as f64, "MiB/s")
        } else {
            (r / 1024.0, "KiB/s")
        };
        write!(f, "{} {unit}", trim_float(v))?;
        if !self.latency.is_zero() {
            write!(f, ", {} ms per request", trim_float(self.latency.as_secs_f64() * 1e3))?;
        }
        Ok(())
    }
}

/// `30`, `1.5`, `0.25`: at most three decimals, no trailing zeroes.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Parse a bandwidth: a number (decimals allowed) and an optional unit,
/// `B`, `K`, `M`, `G` or `T`, each optionally followed by `B` or `iB` and
/// by `/s`, case-insensitive: `30M`, `30MiB/s`, `1.5G`, `512k`, `4096`.
/// Units are binary (`30M` is 30 x 2^20 bytes a second), as sizes are
/// everywhere in pcache. The result is checked against [`MIN_RATE`] and
/// [`MAX_RATE`].
pub fn parse_rate(s: &str) -> Result<u64> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!(
            "device rate {s:?}: {why} (expected bytes per second such as 30M, 30MiB/s, 512K, 1.5G)"
        ))
    };
    let lower = s.trim().to_ascii_lowercase();
    let body = lower.strip_suffix("/s").unwrap_or(&lower).trim_end();
    let body = body.strip_suffix("ib").or_else(|| body.strip_suffix('b')).unwrap_or(body);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        Some('t') => (&body[..body.len() - 1], 1 << 40),
        Some(c) if c.is_ascii_digit() || c == '.' => (body, 1),
        Some(_) => return Err(bad("unknown unit")),
        None => return Err(bad("empty")),
    };
    let num = num.trim();
    // A plain decimal only: f64's parser would take "inf", "nan", "1e3".
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad("not a number"));
    }
    let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let bytes = v * mult as f64;
    if !(bytes >= MIN_RATE as f64 && bytes <= MAX_RATE as f64) {
        return Err(bad("out of range: from 4K (a page a second) to 1T"));
    }
    Ok(bytes.round() as u64)
}

/// Parse a latency: a number (decimals allowed) and a unit, `ns`, `us`
/// (or `µs`), `ms` or `s`: `5ms`, `250us`, `1.5ms`. `0` alone is zero; any
/// other number needs its unit. At most [`MAX_LATENCY`].
pub fn parse_latency(s: &str) -> Result<Duration> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!("device latency {s:?}: {why} (expected a time such as 5ms, 250us, 0)"))
    };
    let t = s.trim().to_ascii_lowercase();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split =
        t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| bad("needs a unit: ns, us, ms, s"))?;
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(bad("unknown unit; use ns, us, ms or s")),
    };
    if num.is_empty() {
        return Err(bad("not a number"));
    }
    let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let secs = v * scale;
    if !(secs.is_finite() && secs >= 0.0 && secs <= MAX_LATENCY.as_secs_f64()) {
        return Err(bad("out of range: at most 10s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The device's clock: when its bookings end.
#[derive(Debug, Default)]
struct Clock {
    /// The end of the last booking (GCRA's theoretical arrival time);
    /// `None` before the first.
    tat: Option<Instant>,
}

impl Clock {
    /// Book `service` of device time for a request made at `now`; returns
    /// when the booking may be taken as done: its end, less the [`BURST`]
    /// an idle device allows ahead.
    fn book(&mut self, now: Instant, service: Duration) -> Instant {
        let start = self.tat.map_or(now, |t| t.max(now));
        let end = start + service;
        self.tat = Some(end);
        end.checked_sub(BURST).map_or(now, |due| due.max(now))
    }
}

/// Per-direction counters, as `/proc/diskstats` keeps them.
#[derive(Default)]
struct DirStat {
    ios: AtomicU64,
    bytes: AtomicU64,
    ticks_ns: AtomicU64,
}

impl DirStat {
    fn account(&self, bytes: u64, took: Duration) {
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ticks_ns.fetch_add(took.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
}

/// A snapshot of a [`RateLimit`]'s counters (`/proc/diskstats` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoStat {
    /// Read requests completed.
    pub rd_ios: u64,
    pub rd_bytes: u64,
    /// Nanoseconds read requests spent from arrival to completion.
    pub rd_ticks_ns: u64,
    /// Write requests completed.
    pub wr_ios: u64,
    pub wr_bytes: u64,
    /// Nanoseconds write requests spent from arrival to completion.
    pub wr_ticks_ns: u64,
}

impl IoStat {
    fn avg_ms(ticks_ns: u64, ios: u64) -> f64 {
        if ios == 0 {
            f64::NAN
        } else {
            ticks_ns as f64 / ios as f64 / 1e6
        }
    }

    /// iostat's r_await: mean milliseconds per read request, queueing
    /// included (NaN with no reads).
    pub fn r_await_ms(&self) -> f64 {
        Self::avg_ms(self.rd_ticks_ns, self.rd_ios)
    }

    /// iostat's w_await.
    pub fn w_await_ms(&self) -> f64 {
        Self::avg_ms(self.wr_ticks_ns, self.wr_ios)
    }

    /// iostat's await, both directions.
    pub fn await_ms(&self) -> f64 {
        Self::avg_ms(self.rd_ticks_ns + self.wr_ticks_ns, self.rd_ios + self.wr_ios)
    }
}

/// One simulated device's bandwidth and latency, shared by the
/// [`RateLimitedDev`]s on it. See the module comment for the model.
pub struct RateLimit {
    name: String,
    spec: RateSpec,
    /// Bytes booked at a time: [`BURST`]'s worth, at least a page.
    slice: u64,
    clock: Mutex<Clock>,
    /// Woken only by `shutdown`: waiters otherwise sleep to their booking.
    wake: Condvar,
    shut: AtomicBool,
    rd: DirStat,
    wr: DirStat,
}

impl RateLimit {
    /// A device called `name` (its files share the bdi `rate:NAME`, so one
    /// flusher) running at `spec`.
    pub fn new(name: &str, spec: RateSpec) -> Arc<RateLimit> {
        let slice = (spec.bytes_per_sec as u128 * BURST.as_nanos() / 1_000_000_000).max(4096) as u64;
        Arc::new(RateLimit {
            name: name.to_string(),
            spec,
            slice,
            clock: Mutex::new(Clock::default()),
            wake: Condvar::new(),
            shut: AtomicBool::new(false),
            rd: DirStat::default(),
            wr: DirStat::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> RateSpec {
        self.spec
    }

    /// Stop limiting: every waiter returns now and later requests pass at
    /// once. Counters keep counting.
    pub fn shutdown(&self) {
        self.shut.store(true, Ordering::Release);
        // Under the lock, so no waiter is between its check and its sleep.
        let _g = self.clock.lock();
        self.wake.notify_all();
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut.load(Ordering::Acquire)
    }

    /// The counters now.
    pub fn stat(&self) -> IoStat {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStat {
            rd_ios: g(&self.rd.ios),
            rd_bytes: g(&self.rd.bytes),
            rd_ticks_ns: g(&self.rd.ticks_ns),
            wr_ios: g(&self.wr.ios),
            wr_bytes: g(&self.wr.bytes),
            wr_ticks_ns: g(&self.wr.ticks_ns),
        }
    }

    /// Wait until the device has served a request of `bytes` made at
    /// `arrived`: book it slice by slice, sleeping to each booking's end.
    fn throttle(&self, arrived: Instant, bytes: u64) {
        let mut left = bytes;
        let mut service = self.spec.latency;
        let mut clock = self.clock.lock();
        loop {
            let n = left.min(self.slice);
            left -= n;
            service += self.spec.transfer_time(n);
            let mut due = clock.book(Instant::now(), service);
            if left == 0 {
                // The latency is a floor too: no burst credit skips it.
                due = due.max(arrived + self.spec.latency);
            }
            while !self.is_shut_down() && Instant::now() < due {
                // The lock is released while asleep: others book meanwhile.
                self.wake.wait_until(&mut clock, due);
            }
            if left == 0 || self.is_shut_down() {
                return;
            }
            service = Duration::ZERO;
        }
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("name", &self.name)
            .field("spec", &self.spec.to_string())
            .field("stat", &self.stat())
            .finish()
    }
}

/// A [`BackingDev`] whose reads and writes go through a [`RateLimit`] first.
///
/// Only transfers (`read_pages`, `write_pages`) are limited and counted:
/// `sync` has nothing left to move once every write has waited its turn,
/// and the metadata calls (`set_len`, `punch_hole`, `remove`, ...) pass
/// straight through.
pub struct RateLimitedDev {
    inner: Arc<dyn BackingDev>,
    limit: Arc<RateLimit>,
}

impl RateLimitedDev {
    /// `inner` behind the device `limit`.
    pub fn new(inner: Arc<dyn BackingDev>, limit: Arc<RateLimit>) -> RateLimitedDev {
        RateLimitedDev { inner, limit }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BackingDev> {
        &self.inner
    }

    /// The device's limit, shared with its other files.
    pub fn limit(&self) -> &Arc<RateLimit> {
        &self.limit
    }
}

impl fmt::Debug for RateLimitedDev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitedDev").field("inner", &self.inner.name()).field("limit", &self.limit).finish()
    }
}

impl BackingDev for RateLimitedDev {
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// One bdi (so one flusher, one congestion state) per simulated device,
    /// whatever its files' inner devices are.
    fn bdi_name(&self) -> String {
        format!("rate:{}", self.limit.name)
    }

    fn read_pages(&self, pos: u64, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let arrived = Instant::now();
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.limit.throttle(arrived, total);
        let res = self.inner.read_pages(pos, bufs);
        self.limit.rd.account(total, arrived.elapsed());
        res
    }

    fn write_pages(&self, pos: u64, bufs: &[&[u8]], file_size: u64) -> io::Result<()> {
        let arrived = Instant::now();
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.limit.throttle(arrived, total);
        let res = self.inner.write_pages(pos, bufs, file_size);
        self.limit.wr.account(total, arrived.elapsed());
        res
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        self.inner.sync(data_only)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }

    fn reserve(&self, pos: u64, len: u64) -> io::Result<()> {
        self.inner.reserve(pos, len)
    }

    fn remove(&self) -> io::Result<()> {
        self.inner.remove()
    }

    fn rename(&self, to: &std::path::Path) -> io::Result<()> {
        self.inner.rename(to)
    }

    fn hold_open(&self) -> io::Result<()> {
        self.inner.hold_open()
    }

    fn renamed(&self, from: &std::path::Path, to: &std::path::Path) {
        self.inner.renamed(from, to)
    }

    fn identity(&self) -> Option<(u64, u64)> {
        self.inner.identity()
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    /// The inner device's: the simulation changes how fast requests are
    /// served, not how large they may be.
    fn queue_limits(&self) -> Option<super::QueueLimits> {
        self.inner.queue_limits()
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemoryDev;
    use super::*;

    const PS: usize = 4096;
    const MIB: u64 = 1 << 20;

    fn spec(rate: &str, lat: &str) -> RateSpec {
        RateSpec::parse(rate, lat).unwrap()
    }

    fn dev(limit: &Arc<RateLimit>, name: &str) -> RateLimitedDev {
        RateLimitedDev::new(Arc::new(MemoryDev::new(name, PS)), limit.clone())
    }

    /// Write `bytes` at offset 0 in requests of `chunk` bytes.
    fn write_all(d: &dyn BackingDev, bytes: u64, chunk: usize) {
        let buf = vec![7u8; chunk];
        let mut off = 0;
        while off < bytes {
            d.write_pages(off, &[&buf[..]], bytes).unwrap();
            off += chunk as u64;
        }
    }

    #[test]
    fn parses_rates() {
        for (s, want) in [
            ("30M", 30 * MIB),
            ("30MiB/s", 30 * MIB),
            ("30 MB/s", 30 * MIB),
            ("30m", 30 * MIB),
            ("1.5G", 3 << 29),
            ("512K", 512 << 10),
            ("512kib/s", 512 << 10),
            ("4096", 4096),
            ("8192B/s", 8192),
            ("1T", 1 << 40),
        ] {
            assert_eq!(parse_rate(s).unwrap(), want, "{s}");
        }
        for s in ["30Q", "", "M", "-1M", "0", "1K", "nan", "inf", "1e3M", "2T", "30M/h", "3.0.0M"] {
            let e = parse_rate(s).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{s}: {e}");
            assert!(e.to_string().contains("device rate"), "{s}: {e}");
        }
        assert!(parse_rate("30Q").unwrap_err().to_string().contains("unknown unit"));
    }

    #[test]
    fn parses_latencies() {
        for (s, want) in [
            ("5ms", Duration::from_millis(5)),
            ("0", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("1.5ms", Duration::from_micros(1500)),
            ("2s", Duration::from_secs(2)),
            ("100ns", Duration::from_nanos(100)),
            (" 5 ms ", Duration::from_millis(5)),
        ] {
            assert_eq!(parse_latency(s).unwrap(), want, "{s}");
        }
        for s in ["5", "", "ms", "5 parsecs", "-1ms", "11s", "1..2ms"] {
            let e = parse_latency(s).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{s}: {e}");
            assert!(e.to_string().contains("device latency"), "{s}: {e}");
        }
        assert!(RateSpec::new(30 * MIB, Duration::from_secs(11)).is_err());
        assert!(RateSpec::new(100, Duration::ZERO).is_err());
    }

    #[test]
    fn displays() {
        assert_eq!(spec("30M", "5ms").to_string(), "30 MiB/s, 5 ms per request");
        assert_eq!(spec("1.5G", "0").to_string(), "1.5 GiB/s");
        assert_eq!(spec("512K", "250us").to_string(), "512 KiB/s, 0.25 ms per request");
        assert_eq!(spec("30M", "0").transfer_time(30 * MIB), Duration::from_secs(1));
    }

    // Goal: the measured rate does not beat the configured one. Only a
    // lower bound on the time is asserted: load can slow the test, never
    // speed it up.
    #[test]
    fn write_throughput_is_limited() {
        let limit = RateLimit::new("t", spec("8M", "0"));
        let d = dev(&limit, "a");
        let bytes = 4 * MIB;
        let t = Instant::now();
        write_all(&d, bytes, 64 << 10);
        let el = t.elapsed().as_secs_f64();
        let floor = 0.8 * bytes as f64 / (8 * MIB) as f64;
        assert!(el >= floor, "{bytes} bytes in {el:.3}s at 8 MiB/s: faster than {floor:.3}s");
        let st = limit.stat();
        assert_eq!((st.wr_ios, st.wr_bytes, st.rd_ios), (64, bytes, 0));
        assert!(st.w_await_ms() > 0.0 && st.r_await_ms().is_nan());
        // The data got there.
        let mut buf = vec![0u8; PS];
        assert_eq!(d.inner().read_pages(bytes - PS as u64, &mut [&mut buf[..]]).unwrap(), PS);
        assert!(buf.iter().all(|&b| b == 7));
    }

    // Goal: files on one device share its bandwidth, reads and writes alike
    // (one bucket, as on a USB stick).
    #[test]
    fn files_and_directions_share_one_bucket() {
        let limit = RateLimit::new("t", spec("16M", "0"));
        let (a, b) = (dev(&limit, "a"), dev(&limit, "b"));
        write_all(b.inner().as_ref(), 2 * MIB, 1 << 20); // unlimited setup
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| write_all(&a, 2 * MIB, 128 << 10));
            s.spawn(|| {
                let mut buf = vec![0u8; 128 << 10];
                for i in 0..16u64 {
                    assert_eq!(b.read_pages(i * (128 << 10), &mut [&mut buf[..]]).unwrap(), buf.len());
                }
            });
        });
        let el = t.elapsed().as_secs_f64();
        // 4 MiB in all at 16 MiB/s: 0.25 s.
        assert!(el >= 0.8 * 0.25, "4 MiB over one 16 MiB/s device in {el:.3}s");
        let st = limit.stat();
        assert_eq!((st.rd_ios, st.rd_bytes, st.wr_ios, st.wr_bytes), (16, 2 * MIB, 16, 2 * MIB));
        assert_eq!(a.bdi_name(), "rate:t");
        assert_eq!(b.bdi_name(), a.bdi_name());
    }

    // Goal: the latency is paid by every request and requests are served
    // one at a time (queue depth 1), even from several threads.
    #[test]
    fn latency_is_per_request_and_serialised() {
        let limit = RateLimit::new("t", spec("1G", "10ms"));
        let d = dev(&limit, "a");
        let buf = vec![1u8; PS];
        let t = Instant::now();
        d.write_pages(0, &[&buf[..]], PS as u64).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(10), "one request on an idle device");
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..10 {
                        d.write_pages(0, &[&buf[..]], PS as u64).unwrap();
                    }
                });
            }
        });
        // 20 requests of 10 ms, one at a time; the burst credit may save
        // one of them.
        let el = t.elapsed();
        assert!(el >= Duration::from_millis(190) - BURST, "20 serialised requests in {el:?}");
        assert!(limit.stat().w_await_ms() >= 10.0);
    }

    // Goal: a small request that arrives during a huge one is booked after
    // the huge one's current slice, not after all of it (fairness); and
    // the huge one still books its full length. Checked on the booking
    // clock with made-up instants, so load cannot disturb it.
    #[test]
    fn huge_requests_are_sliced_and_small_ones_slip_in() {
        let limit = RateLimit::new("t", spec("100M", "0"));
        let slice = limit.slice;
        assert_eq!(slice, (100 * MIB) / 100, "10 ms of transfer");
        let s = limit.spec;
        let t0 = Instant::now();
        let mut c = Clock::default();
        // The huge request's first slice, then a page from elsewhere, then
        // the huge request's second slice.
        let d1 = c.book(t0, s.transfer_time(slice));
        let d2 = c.book(t0 + Duration::from_millis(1), s.transfer_time(PS as u64));
        let d3 = c.book(d1, s.transfer_time(slice));
        assert!(d2 < t0 + 2 * s.transfer_time(slice), "the page waits one slice at most");
        assert!(d3 > d2, "then the huge request goes on");
        // A busy device gives no credit: bookings end back to back.
        let end = c.tat.unwrap();
        assert_eq!(end, t0 + 2 * s.transfer_time(slice) + s.transfer_time(PS as u64));
        // An idle device gives BURST at most.
        let later = end + Duration::from_secs(1);
        assert_eq!(c.book(later, Duration::from_millis(3)), later);
        let d = c.book(later, Duration::from_millis(30));
        assert_eq!(d, later + Duration::from_millis(33) - BURST);
    }

    // Goal: a huge request through the device still takes its time and is
    // counted once.
    #[test]
    fn huge_request_through_the_device() {
        let limit = RateLimit::new("t", spec("32M", "0"));
        let d = dev(&limit, "a");
        let t = Instant::now();
        write_all(&d, 8 * MIB, 8 << 20);
        let el = t.elapsed().as_secs_f64();
        assert!(el >= 0.8 * 0.25, "8 MiB at 32 MiB/s in {el:.3}s");
        assert_eq!(limit.stat().wr_ios, 1);
    }

    // Goal: shutdown releases a waiter that would otherwise wait for
    // hours, and later requests pass at once.
    #[test]
    fn shutdown_releases_waiters() {
        let limit = RateLimit::new("t", spec("4K", "0"));
        let d = Arc::new(dev(&limit, "a"));
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = d.clone();
        let waiter = std::thread::spawn(move || {
            write_all(d2.as_ref(), 8 * MIB, 8 << 20); // over half an hour at 4 KiB/s
            tx.send(()).unwrap();
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "still waiting");
        limit.shutdown();
        rx.recv_timeout(Duration::from_secs(60)).expect("released by shutdown");
        waiter.join().unwrap();
        assert!(limit.is_shut_down());
        let t = Instant::now();
        write_all(d.as_ref(), MIB, 1 << 20);
        assert!(t.elapsed() < Duration::from_secs(60));
        assert_eq!(limit.stat().wr_ios, 2);
    }

    #[test]
    fn passes_the_rest_through() {
        let limit = RateLimit::new("t", spec("1G", "0"));
        let mem = Arc::new(MemoryDev::new("m", PS));
        let d = RateLimitedDev::new(mem.clone(), limit.clone());
        assert_eq!(d.name(), "memory:m");
        d.set_len(3 * PS as u64).unwrap();
        assert_eq!(mem.len().unwrap(), 3 * PS as u64);
        assert_eq!(d.len().unwrap(), 3 * PS as u64);
        d.punch_hole(0, PS as u64).unwrap();
        d.sync(true).unwrap();
        d.reserve(0, PS as u64).unwrap();
        assert!(!d.is_direct());
        assert_eq!(d.identity(), None);
        assert_eq!(d.queue_limits(), mem.queue_limits());
        d.remove().unwrap();
        assert_eq!(limit.stat(), IoStat::default(), "no transfer, nothing counted");
        assert!(format!("{d:?}").contains("memory:m"));
    }
}

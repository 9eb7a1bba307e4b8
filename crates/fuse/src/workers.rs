//! The worker pool that runs data requests (read, write, fsync,
//! fallocate) off the FUSE session thread.
//!
//! fuser reads and dispatches requests on one thread; a reply may be sent
//! from any thread. So the session thread does the quick metadata work
//! itself and hands the data requests, which may block in reclaim, in
//! `balance_dirty_pages` or on the backing disk, to these threads. The
//! kernel sends several requests at once (FUSE_ASYNC_READ, several
//! processes), and they then run in parallel through the cache, as reads
//! and writes do through the kernel's.
//!
//! The queue is bounded: when every worker is busy and `QUEUE_DEPTH` jobs
//! wait, the session thread blocks, which stops it taking more requests
//! from the kernel: back-pressure instead of unbounded memory.
//!
//! Interrupts. A program signalled while its request waits in the daemon
//! (in the dirty throttle, say) should get its system call back at once,
//! as the kernel's own sleeps are interruptible. The kernel tells a FUSE
//! daemon with FUSE_INTERRUPT, but fuser 0.16 answers INTERRUPT itself
//! with ENOSYS (request.rs: "TODO: handle FUSE_INTERRUPT"), after which the
//! kernel sends no more. So the pool watches for the same event itself:
//! every `WATCH_PERIOD`, for each request running longer than that, it
//! reads the requester's /proc/PID/status, and if a signal the requester
//! does not block is pending (SigPnd or ShdPnd, less SigBlk: exactly when
//! the kernel would send INTERRUPT), or the requester is gone (a fatal
//! signal: the kernel abandoned the request), it raises the worker's
//! `pcache::Interrupt`. The engine's interruptible waits (the dirty
//! throttle, the allocator) then return EINTR, which the request answers.
//! Other waits are bounded in the engine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pcache::Interrupt;

type Job = Box<dyn FnOnce() + Send>;

/// How often requests in flight are checked for a signalled requester, and
/// how long a request runs before it is.
const WATCH_PERIOD: Duration = Duration::from_millis(20);

/// A request a worker is running: who asked, since when, and the worker's
/// interrupt token.
struct InFlight {
    pid: u32,
    since: Instant,
    intr: Interrupt,
}

/// Requests in flight, by worker index.
type InFlightTable = Arc<Mutex<HashMap<usize, InFlight>>>;

/// Whether process `pid` has a signal pending that it does not block
/// (when the kernel would send FUSE_INTERRUPT for its request), or is gone
/// (killed: the kernel abandoned its request, so no one waits for it).
pub fn signal_pending(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return true };
    if status.lines().any(|l| l.starts_with("State:") && l.contains("zombie")) {
        return true;
    }
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") != 0
}

/// Jobs that may wait for a worker.
const QUEUE_DEPTH: usize = 256;

pub struct Workers {
    tx: Option<SyncSender<(u32, Job)>>,
    threads: Vec<JoinHandle<()>>,
    watcher: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Workers {
    pub fn new(n: usize) -> std::io::Result<Workers> {
        let (tx, rx) = sync_channel::<(u32, Job)>(QUEUE_DEPTH);
        let rx = Arc::new(Mutex::new(rx));
        let inflight: InFlightTable = Arc::default();
        let mut threads = Vec::with_capacity(n);
        for i in 0..n.max(1) {
            let rx: Arc<Mutex<Receiver<(u32, Job)>>> = rx.clone();
            let inflight = inflight.clone();
            threads.push(std::thread::Builder::new().name(format!("fuse-worker{i}")).spawn(move || loop {
                // The lock is held only to take one job, not to run it.
                let job = rx.lock().recv();
                match job {
                    Ok((pid, job)) => {
                        let intr = Interrupt::current();
                        intr.clear();
                        inflight.lock().insert(i, InFlight { pid, since: Instant::now(), intr: intr.clone() });
                        job();
                        inflight.lock().remove(&i);
                        intr.clear();
                    }
                    Err(_) => return, // the pool is shutting down
                }
            })?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            std::thread::Builder::new().name("fuse-intr".into()).spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(WATCH_PERIOD);
                    let waiting: Vec<(u32, Interrupt)> = inflight
                        .lock()
                        .values()
                        .filter(|r| r.since.elapsed() >= WATCH_PERIOD && !r.intr.is_raised())
                        .map(|r| (r.pid, r.intr.clone()))
                        .collect();
                    for (pid, intr) in waiting {
                        if pid != 0 && signal_pending(pid) {
                            intr.interrupt();
                        }
                    }
                }
            })?
        };
        Ok(Workers { tx: Some(tx), threads, watcher: Some(watcher), stop })
    }

    /// Run `job`, a request of process `pid`, on a worker. After
    /// `shutdown` the job runs here instead, so no request is ever left
    /// without a reply.
    pub fn spawn(&self, pid: u32, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send((pid, job)) {
                    (e.0 .1)();
                }
            }
            None => job(),
        }
    }

    /// Stop taking jobs, finish the queued ones and join the threads.
    pub fn shutdown(&mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stop.store(true, Ordering::Release);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_unblocked_signal_is_seen() {
        // A child that blocks nothing and sleeps; SIGSTOP'd, a SIGUSR1
        // sent to it stays pending (a stopped process does not handle it).
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(!signal_pending(pid));
        // SAFETY: kill(2) on our own child; no memory involved.
        unsafe {
            libc::kill(pid as i32, libc::SIGSTOP);
        }
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: as above.
        unsafe {
            libc::kill(pid as i32, libc::SIGUSR1);
        }
        assert!(signal_pending(pid));
        let _ = child.kill();
        let _ = child.wait();
        // Gone: its request has no one waiting.
        assert!(signal_pending(pid));
        assert!(!signal_pending(std::process::id()));
    }
}

//! Requests in flight on the session threads, and the emulation of
//! FUSE_INTERRUPT for those that wait.
//!
//! Several session threads read /dev/fuse (each its own cloned descriptor,
//! FUSE_DEV_IOC_CLONE) and each serves the request it read, reads and
//! writes included: no hand-off to another thread, so no extra wake-up per
//! request, and a request that waits (in reclaim, in
//! `balance_dirty_pages`, on the backing disk) holds up only its own
//! thread. The kernel keeps what no thread has taken yet in its own queue,
//! which is the back-pressure.
//!
//! Interrupts. A program signalled while its request waits in the daemon
//! (in the dirty throttle, say) should get its system call back at once,
//! as the kernel's own sleeps are interruptible. The kernel tells a FUSE
//! daemon with FUSE_INTERRUPT, but fuser (0.18) answers INTERRUPT itself
//! with ENOSYS, after which the kernel sends no more. So a request that
//! may wait runs through [`Watch::run`], which records who asked in the
//! thread's own slot; every `WATCH_PERIOD` a watcher thread looks at the
//! requests running longer than that and, if the requester has a signal
//! pending that it does not block (SigPnd or ShdPnd less SigBlk in
//! /proc/PID/status: exactly when the kernel would send INTERRUPT) or is
//! gone (a fatal signal: the kernel abandoned the request), raises that
//! thread's `pcache::Interrupt`. The engine's interruptible waits (the
//! dirty throttle, the allocator) then return EINTR, which the request
//! answers. Other waits are bounded in the engine.
//!
//! A cached read does not go through `run`: it cannot wait, and the hit
//! path takes no lock shared between threads. Each slot's mutex is taken
//! by its own thread and by the watcher only.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pcache::Interrupt;

/// How often requests in flight are checked for a signalled requester, and
/// how long a request runs before it is.
const WATCH_PERIOD: Duration = Duration::from_millis(20);

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

/// One session thread's request in flight: who asked and since when.
struct Slot {
    running: Mutex<Option<(u32, Instant)>>,
    /// The thread's engine interrupt token.
    intr: Interrupt,
}

/// Distinguishes the watches of several mounts in one process (tests), so
/// that a thread's slot is registered with the watch it serves.
static NEXT_WATCH: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's slot, and the watch it is registered with.
    static SLOT: RefCell<Option<(usize, Arc<Slot>)>> = const { RefCell::new(None) };
}

pub struct Watch {
    id: usize,
    /// One per session thread that has run a request; bounded by their
    /// number, which is fixed for the mount's life.
    slots: Arc<Mutex<Vec<Arc<Slot>>>>,
    watcher: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    pub fn new() -> std::io::Result<Watch> {
        let slots: Arc<Mutex<Vec<Arc<Slot>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (slots, stop) = (slots.clone(), stop.clone());
            std::thread::Builder::new().name("fuse-intr".into()).spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(WATCH_PERIOD);
                    let waiting: Vec<(u32, Interrupt)> = slots
                        .lock()
                        .iter()
                        .filter_map(|s| {
                            let (pid, since) = (*s.running.lock())?;
                            (since.elapsed() >= WATCH_PERIOD && !s.intr.is_raised()).then(|| (pid, s.intr.clone()))
                        })
                        .collect();
                    for (pid, intr) in waiting {
                        if pid != 0 && signal_pending(pid) {
                            intr.interrupt();
                        }
                    }
                }
            })?
        };
        let id = NEXT_WATCH.fetch_add(1, Ordering::Relaxed);
        Ok(Watch { id, slots, watcher: Some(watcher), stop })
    }

    /// Run `f`, a request of process `pid` that may wait, on this thread,
    /// where the watcher can interrupt it.
    pub fn run<R>(&self, pid: u32, f: impl FnOnce() -> R) -> R {
        let slot = self.slot();
        slot.intr.clear();
        *slot.running.lock() = Some((pid, Instant::now()));
        let r = f();
        *slot.running.lock() = None;
        slot.intr.clear();
        r
    }

    /// This thread's slot, registered on first use.
    fn slot(&self) -> Arc<Slot> {
        SLOT.with(|cell| {
            let mut cell = cell.borrow_mut();
            match &*cell {
                Some((id, slot)) if *id == self.id => slot.clone(),
                _ => {
                    let slot = Arc::new(Slot { running: Mutex::new(None), intr: Interrupt::current() });
                    self.slots.lock().push(slot.clone());
                    *cell = Some((self.id, slot.clone()));
                    slot
                }
            }
        })
    }

    /// Stop the watcher (no request runs any more).
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Watch {
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

//! A sleeping thread's doorbell (kernel/sched/wait.c's wait queues, in
//! the one form the engine needs: one event, many sleepers, a timeout).
//!
//! `wake` sets a pending flag and wakes every sleeper; `wait` sleeps until
//! the flag is set or the timeout passes and consumes the flag, so a wake
//! that comes before the wait is not lost. `wake_if_waiting` skips the
//! lock when no one sleeps, for per-page paths (a freed frame, an ended
//! writeback).

use crate::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A sleeping thread's doorbell (kswapd_wait, the flusher's wait queue).
#[derive(Default)]
pub struct Wakeup {
    pending: Mutex<bool>,
    cv: Condvar,
    waiters: AtomicUsize,
}

impl Wakeup {
    pub fn wake(&self) {
        let mut p = self.pending.lock();
        *p = true;
        self.cv.notify_all();
    }

    /// Wake only if someone sleeps here: cheap enough for per-page paths.
    #[inline]
    pub fn wake_if_waiting(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.wake();
        }
    }

    /// Sleep until woken or `timeout`; returns whether woken.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut p = self.pending.lock();
        if !*p {
            self.waiters.fetch_add(1, Ordering::AcqRel);
            self.cv.wait_for(&mut p, timeout);
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
        std::mem::replace(&mut *p, false)
    }
}

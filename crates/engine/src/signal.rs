//! Interrupting a thread's waits (kernel/signal.c's `signal_pending`, and
//! the TASK_KILLABLE sleeps of the dirty throttle and the page allocator).
//!
//! In the kernel a writer sleeping in `balance_dirty_pages` or in the
//! allocator's slow path is woken by a fatal signal and returns. A thread
//! of a userspace program has no such signal: pcache gives each thread an
//! [`Interrupt`] token instead. Anyone holding a clone of it (a FUSE
//! daemon's session thread on FUSE_INTERRUPT, say) raises it, and the
//! engine's bounded waits, which all poll at least every 10 ms, see
//! `signal_pending` and return [`crate::Error::Interrupted`] (EINTR).
//!
//! Only waits that can last as long as someone else's progress check it:
//! the dirty throttle, the allocator waiting for reclaim and writeback,
//! and a writer's stable-page wait for writeback of the page it is about
//! to change (`wait_on_writeback_killable`, as the kernel's
//! folio_wait_writeback_killable), which lasts as long as a transfer that
//! a frozen store never ends. The page lock and other PG_writeback waits
//! last as long as one device transfer and are not interruptible, as
//! `lock_page` and `wait_on_page_writeback` are not in the kernel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A thread's interrupt flag. Cheap to clone; every clone raises the same
/// thread's flag.
#[derive(Clone, Debug)]
pub struct Interrupt(Arc<AtomicBool>);

thread_local! {
    static CURRENT: Interrupt = Interrupt(Arc::new(AtomicBool::new(false)));
}

impl Interrupt {
    /// The calling thread's token.
    pub fn current() -> Interrupt {
        CURRENT.with(|c| c.clone())
    }

    /// Raise the flag: the thread's current or next interruptible wait in
    /// the engine returns [`crate::Error::Interrupted`]. It stays raised
    /// until [`clear`](Self::clear).
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Lower the flag (before the thread starts a new request).
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether the flag is raised.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// signal_pending(current): whether the calling thread was interrupted.
#[inline]
pub fn signal_pending() -> bool {
    CURRENT.with(|c| c.0.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_from_another_thread_seen_by_its_owner_only() {
        let mine = Interrupt::current();
        let other = std::thread::spawn(|| {
            let t = Interrupt::current();
            t.interrupt();
            signal_pending()
        })
        .join()
        .unwrap();
        assert!(other);
        assert!(!signal_pending());
        let handle = std::thread::spawn(move || mine.interrupt());
        handle.join().unwrap();
        assert!(signal_pending());
        Interrupt::current().clear();
        assert!(!signal_pending());
    }
}

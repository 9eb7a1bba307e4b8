//! The atomics and the arena's mutex: std's atomics and parking_lot's
//! mutex, or loom's under `cfg(loom)` so the same code is model-checked
//! (tokio's pattern). The page tree's nodes are
//! built from zeroed memory and the per-thread slot registry lives in
//! statics, so those two keep std's atomics (they are not modelled).

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::atomic;

#[cfg(not(loom))]
pub use parking_lot::Mutex;

/// loom's mutex with parking_lot's signature (no poisoning).
#[cfg(loom)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub fn new(value: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("a loom mutex is poisoned only by a panic")
    }
}

/// A spin lock for data a thread holds for a few instructions, almost
/// always the thread running on the CPU the data belongs to (the arena's
/// per-CPU lists): taking it is one atomic swap and releasing it a plain
/// release store, where a parking mutex spends a second atomic
/// read-modify-write on the release, to look for sleepers. A waiter spins
/// briefly, then yields the CPU, since a holder can be preempted. Under
/// loom it is loom's mutex: loom cannot follow a spinning waiter (it
/// exceeds its branch limit), so the models check the code that takes
/// the lock, and `spin_lock_excludes` checks the lock on real threads.
#[cfg(not(loom))]
pub struct SpinLock<T> {
    locked: atomic::AtomicBool,
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: the lock hands the value to one thread at a time (the swap's
// acquire pairs with the previous holder's release store).
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: as above; the value moves with the lock.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for SpinLock<T> {}

#[cfg(not(loom))]
impl<T> SpinLock<T> {
    pub fn new(value: T) -> SpinLock<T> {
        SpinLock { locked: atomic::AtomicBool::new(false), value: std::cell::UnsafeCell::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        if self.locked.swap(true, atomic::Ordering::Acquire) {
            self.lock_contended();
        }
        SpinLockGuard { lock: self }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            // Test before the swap, so waiters share the line until it is
            // released rather than bouncing it between them.
            while self.locked.load(atomic::Ordering::Relaxed) {
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if !self.locked.swap(true, atomic::Ordering::Acquire) {
                return;
            }
        }
    }
}

#[cfg(not(loom))]
pub struct SpinLockGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

#[cfg(not(loom))]
impl<T> std::ops::Deref for SpinLockGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other reference exists.
        unsafe { &*self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> std::ops::DerefMut for SpinLockGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, so no other reference exists.
        unsafe { &mut *self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> Drop for SpinLockGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, atomic::Ordering::Release);
    }
}

#[cfg(loom)]
pub type SpinLock<T> = Mutex<T>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SpinLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    // Goal: the spin lock excludes: increments made under it as a plain
    // load and store (a race would lose some) from threads contending for
    // it, past the spinning into the yielding, all land.
    #[test]
    fn spin_lock_excludes() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 200_000;
        let lock = SpinLock::new(0u64);
        let shadow = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        let mut g = lock.lock();
                        *g += 1;
                        // A second copy, in relaxed atomics, that only
                        // mutual exclusion keeps in step with the first.
                        shadow.store(shadow.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), THREADS * ROUNDS);
        assert_eq!(shadow.load(Ordering::Relaxed), THREADS * ROUNDS);
    }
}

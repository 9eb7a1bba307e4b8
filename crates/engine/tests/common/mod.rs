//! What several engine test binaries share.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

/// Keep this thread on CPU 0, so "this CPU's batch" stays the same one and
/// pages reach the LRU in the order the thread added them (a thread that
/// migrates leaves a partial lru_add batch behind on the CPU it left,
/// which `lru_add_drain_all` drains later, out of order).
pub fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; the
    // call only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

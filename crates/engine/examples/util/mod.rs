//! What the profiling examples share.

/// User plus system CPU seconds of `who` (RUSAGE_THREAD or RUSAGE_SELF).
pub fn cpu_secs(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes one struct rusage into the zeroed value
    // it is given and keeps no pointer to it.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

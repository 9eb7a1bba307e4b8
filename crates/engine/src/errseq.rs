//! errseq_t (lib/errseq.c): writeback errors reported once per handle.
//!
//! A 32-bit word: the low 12 bits hold an errno, bit 12 is SEEN, and the
//! bits above count errors. A handle samples the word when opened; fsync
//! reports an error when the word moved since the handle's sample, and
//! marks it seen, so each handle sees each error once.

use crate::sync::atomic::{AtomicU32, Ordering};

pub(crate) const ERRSEQ_ERRNO_MASK: u32 = 0xfff;
const ERRSEQ_SEEN: u32 = 1 << 12;
const ERRSEQ_CTR_INC: u32 = 1 << 13;

pub fn errseq_set(word: &AtomicU32, errno: i32) {
    let errno = (errno as u32) & ERRSEQ_ERRNO_MASK;
    let mut old = word.load(Ordering::Acquire);
    loop {
        let mut new = (old & !(ERRSEQ_ERRNO_MASK | ERRSEQ_SEEN)) | errno;
        if old & ERRSEQ_SEEN != 0 || old == 0 {
            new = new.wrapping_add(ERRSEQ_CTR_INC);
        }
        if new == old {
            return;
        }
        match word.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(cur) => old = cur,
        }
    }
}

/// errseq_sample: what a newly opened handle starts from. An error nobody
/// has seen yet is reported to the new handle too.
pub fn errseq_sample(word: &AtomicU32) -> u32 {
    let old = word.load(Ordering::Acquire);
    if old & ERRSEQ_SEEN != 0 {
        old
    } else {
        0
    }
}

/// errseq_check_and_advance: the errno to report to a handle whose sample
/// is `since`, or 0.
pub fn errseq_check_and_advance(word: &AtomicU32, since: &AtomicU32) -> i32 {
    let old = word.load(Ordering::Acquire);
    if old == since.load(Ordering::Acquire) {
        return 0;
    }
    let new = old | ERRSEQ_SEEN;
    if new != old {
        let _ = word.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire);
    }
    since.store(new, Ordering::Release);
    (new & ERRSEQ_ERRNO_MASK) as i32
}

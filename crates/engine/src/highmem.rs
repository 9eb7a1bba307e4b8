//! Frame access (include/linux/highmem.h: `memcpy_from_page`,
//! `memcpy_to_page`, `memzero_page`): the only way Rust code reads or
//! writes the bytes of a page frame.
//!
//! Readers of a page take no lock and no atomic read-modify-write (a
//! `PageRef` on the hit path is a hazard pin, a plain store), so a writer
//! (`write_at`, a `PageMut`, truncation zeroing a partial page) can change
//! the frame while a reader copies it. The kernel tolerates the torn copy
//! in C. In Rust a plain read racing a plain write is a data race and
//! undefined behaviour, so frame bytes are touched only as atomics, and a
//! per-frame sequence count (the kernel's `seqcount_t`; LeanStore's
//! optimistic latch) tells a reader whether its copy crossed a write:
//!
//! ```text
//!   writer (holds PG_locked)            reader (holds a pin, no lock)
//!   seq += 1        (odd)               s1 = seq            (Acquire)
//!   fence(Release)  (smp_wmb)           s1 odd? wait, retry
//!   relaxed word stores                 relaxed word loads into buf
//!   seq += 1        (even, Release)     fence(Acquire)      (smp_rmb)
//!                                       s2 = seq            (Relaxed)
//!                                       s1 != s2? retry
//! ```
//!
//! If the reader loaded any word the writer stored, its acquire fence
//! synchronises with the writer's release fence, so `s2` sees the odd
//! count or a later one and the copy is thrown away. If `s1` is the
//! writer's final (even) count, every store of that section happened
//! before the loads. A copy accepted is therefore a state of the page
//! between two write sections: **the write unit is the write section**, one
//! per `write_at` page, `PageMut::write` or `fill` call, zeroing of a
//! partial page, and a reader never sees a mix of two sections.
//!
//! Readers are bounded: after `OPTIMISTIC_TRIES` failed copies (a writer
//! busy on the page, or preempted inside a section) the reader takes the
//! page lock, which every writer holds, and copies under it. The wait is
//! then that of `lock_page`: one write section or one device transfer.
//!
//! # The copy
//!
//! A relaxed atomic load is one `mov` of 8 bytes: the compiler may not
//! merge or widen atomics, so a copy of 4 KiB word by word is 512 loads
//! and 512 stores, about twice a `memcpy` (and ~28% of the FUSE daemon's
//! CPU on warm reads). A plain copy (`ptr::copy_nonoverlapping`) would be
//! a data race with a writer's stores, undefined behaviour even if the
//! copy is thrown away afterwards. Rust's intended answer is a byte-wise
//! atomic memcpy (RFC 3301, `atomic_load_per_byte_memcpy`, after C++'s
//! P1478), not yet in std. The `atomic-memcpy` crate, an implementation
//! of that interface today, reads with relaxed atomic loads of pointer
//! width where the alignment allows: the loop we have, which does not
//! vectorise.
//!
//! On x86_64 the copy out of a frame (`Word::copy_out`, used by every
//! optimistic copy and by the copy under the page lock) is one `rep movsb`
//! in an `asm!` block (`frame_copy`), the stop-gap the RFC 3301 discussion
//! and the `atomic-memcpy` crate's notes point to until the language has
//! the byte-wise copy. Why it is sound:
//!
//! - An asm block is, to the compiler and to the Rust abstract machine,
//!   an opaque call: the compiler assumes nothing about the memory it
//!   reads (it is not `pure`, `nomem` or `readonly`, so no access around
//!   it moves across it), and its effect must be one some Rust code could
//!   have had. The Rust code it stands for here: a relaxed 8-byte atomic
//!   load of each aligned word the range covers (`copy_from_words`'s
//!   loads, the size of every other frame access, so no mixed-size race),
//!   then stores into `buf`. Atomic loads racing atomic stores are no
//!   data race: in the abstract machine the asm makes no non-atomic read
//!   of shared memory.
//! - What the CPU does differs in one way: `rep movsb` may move a word's
//!   bytes in more than one access, so a copy racing a write section may
//!   hold part of a word as stored. The abstract machine does not
//!   constrain what the opaque call writes into `buf`, so that is no UB;
//!   it is a wrong copy, and such a copy overlapped a section, so the
//!   sequence count check that follows (`read_seqcount_retry`: an acquire
//!   fence after the asm, then the count) throws it away. x86 keeps loads
//!   in program order (TSO): the asm's loads sit between the two loads of
//!   the count, and a section's store they saw makes its odd count
//!   visible to the second. A copy accepted is one state of the page, as
//!   with `copy_from_words`. That last step rests on the CPU's ordering,
//!   not on the Rust model: the one thing the asm buys.
//! - The destination is the caller's `&mut [u8]`, never shared: plain
//!   stores there race with nothing, torn or not (a rejected copy is
//!   overwritten by the next try).
//! - Only pinned frames are copied (a pin, a reference or the page lock):
//!   the frame is uptodate and not reused, so the only stores that can
//!   race are write sections, which store whole words atomically (device
//!   reads fill only locked, not-uptodate pages).
//!
//! Elsewhere (other targets, Miri, loom, which cannot run asm) the copy
//! is `copy_from_words`, word by word; loom_tests.rs checks the protocol
//! on that form.
//!
//! The copy into a frame (`Word::copy_in`, `memcpy_to_page`) has a stricter
//! rule: a single `load_u64` of a word is not validated, so every aligned
//! word must reach memory in one store, old or new to any reader, which
//! `rep movsb` does not promise. On x86_64 processors with AVX, Intel and
//! AMD guarantee that aligned 16-byte SSE stores (`movdqa`) are single-copy
//! atomic; there the 16-byte aligned middle of the range goes by `movdqu`
//! loads from the caller's buffer and `movdqa` stores, four to a round, in
//! asm (`frame_copy::copy_in`), standing in the abstract machine for the
//! relaxed `u64` stores of `copy_to_words` (the writer is alone: it holds
//! the page lock). The edges, and every store elsewhere, are those word
//! stores; `memset_page` keeps them too.
//!
//! Frame words are `std` atomics even under loom: the frames are raw
//! memory from mmap, as the page tree's nodes are (sync.rs). The protocol
//! itself is generic over the word type so that loom_tests.rs checks this
//! very code on loom's atomics.
//!
//! # The rule
//!
//! Rust code reads and writes frame bytes only through these accessors
//! (`u64` atomics at 8-byte aligned addresses, or asm that stands for
//! them; frames are page aligned, so word `i` of a frame is bytes
//! `8i..8i+8` and no two accesses ever overlap partially, as Rust's rules
//! for mixed-size atomics require). The backing devices see frames as
//! plain slices only while no Rust code can touch them
//! (`Arena::frame_for_io*`). One reader is outside this rule on purpose:
//! `Mapping::load_u64` on x86_64 loads a word with no pin, from a frame
//! that may meanwhile be reused and filled by a device, by a `mov` in asm
//! that the abstract machine does not see as a read, and keeps the value
//! only if validation says the frame still held its page (memory.rs,
//! `follow_pte_load_u64_optimistic`). Otherwise:
//!
//! - a device read fills a page that is locked and not uptodate: readers
//!   copy only uptodate pages (PG_uptodate is never cleared while a page is
//!   cached, and a pinned frame is never reused), writers need the lock;
//! - writeback reads a page under PG_writeback: writers take the page
//!   lock, then wait for PG_writeback to clear before their section, and
//!   writeback starts only under the page lock. Readers only load, and
//!   loads never race with loads.

use std::hint::spin_loop;
use std::sync::atomic::AtomicU64 as FrameWord;

use crate::mm::Cache;
use crate::mmdebug::{vm_bug_on, vm_bug_on_page};
use crate::page::{Pfn, PG_LOCKED};
use crate::sync::atomic::{fence, AtomicU32, Ordering};

/// Optimistic copies a reader tries before it takes the page lock.
const OPTIMISTIC_TRIES: u32 = 4;

/// One 8-byte word of a frame, as the protocol loads and stores it.
pub(crate) trait Word: Sized {
    fn get(&self) -> u64;
    fn set(&self, v: u64);

    /// The copy a reader validates (`seqcount_read`): `buf.len()` bytes at
    /// byte `offset` of `words` into `buf`. By default word by word with
    /// relaxed loads (`copy_from_words`); a frame's words on x86_64 copy
    /// with one `rep movsb` (`frame_copy`).
    #[inline(always)]
    fn copy_out(words: &[Self], offset: usize, buf: &mut [u8]) {
        copy_from_words(words, offset, buf)
    }

    /// The copy a writer makes inside its write section: `data` to byte
    /// `offset` of `words`, every aligned word stored whole (a single
    /// `load_u64` is not validated). By default `copy_to_words`; a
    /// frame's words on x86_64 with AVX store 16 aligned bytes at a time
    /// (`frame_copy::copy_in`).
    #[inline(always)]
    fn copy_in(words: &[Self], offset: usize, data: &[u8]) {
        copy_to_words(words, offset, data)
    }
}

impl Word for FrameWord {
    #[inline(always)]
    fn get(&self) -> u64 {
        // Relaxed: ordering comes from the sequence count's fences.
        self.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn set(&self, v: u64) {
        self.store(v, Ordering::Relaxed)
    }
    #[inline(always)]
    fn copy_out(words: &[Self], offset: usize, buf: &mut [u8]) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        frame_copy::copy_out(words, offset, buf);
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        copy_from_words(words, offset, buf);
    }
    #[inline(always)]
    fn copy_in(words: &[Self], offset: usize, data: &[u8]) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        if frame_copy::atomic_16() {
            frame_copy::copy_in(words, offset, data);
            return;
        }
        copy_to_words(words, offset, data);
    }
}

/// The copy out of a frame in one instruction the compiler cannot see
/// into (see the module comment, "The copy").
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
mod frame_copy {
    use super::FrameWord;

    /// `buf.len()` bytes at byte `offset` of `words` into `buf`, by
    /// `rep movsb`: the CPU's own copy (ERMS/FSRM: whole cache lines at a
    /// time, as fast as `memcpy` at 4 KiB), at any alignment and length,
    /// with no head or tail to handle.
    #[inline(always)]
    pub(super) fn copy_out(words: &[FrameWord], offset: usize, buf: &mut [u8]) {
        // A range check, as a slice index would make (the asm itself
        // checks nothing).
        let end = offset.checked_add(buf.len()).expect("copy past the frame");
        assert!(end <= std::mem::size_of_val(words), "copy past the frame");
        // SAFETY: the source `[offset, end)` lies inside `words` (checked
        // just above), memory that stays mapped while the shared borrow
        // lives; the destination is `buf`, exclusively ours, of exactly
        // `buf.len()` bytes; the two do not overlap (`buf` is a `&mut`,
        // `words` a shared borrow). `rep movsb` copies rcx bytes from
        // [rsi] to [rdi] upwards (the ABI guarantees DF clear on entry),
        // clobbers rcx, rsi and rdi (declared) and no flags; it uses no
        // stack. It is not `readonly` or `nomem`: to the compiler it is an
        // opaque call that may read and write memory, so no load or store
        // around it moves across it. What it reads racing a writer is the
        // subject of the module comment: it is modelled as the relaxed
        // 8-byte loads of the words the range covers, and a copy that
        // overlapped a write section is thrown away by the caller.
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") buf.len() => _,
                inout("rsi") words.as_ptr().cast::<u8>().add(offset) => _,
                inout("rdi") buf.as_mut_ptr() => _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Whether aligned 16-byte SSE stores are single-copy atomic: Intel
    /// (SDM vol. 3A, 9.1.1) and AMD (APM vol. 2, 7.3.2) guarantee it for
    /// `movdqa` and its kin on every processor that enumerates AVX.
    #[inline(always)]
    pub(super) fn atomic_16() -> bool {
        std::arch::is_x86_feature_detected!("avx")
    }

    /// `data` to byte `offset` of `words`: the edges up to 16-byte
    /// alignment by `copy_to_words` (whole words, merged at the ends), the
    /// 16-byte aligned middle by `movdqu` loads from `data` and `movdqa`
    /// stores into the frame, four to a round. The caller is the frame's
    /// only writer (the page lock) and `atomic_16()` holds.
    #[inline(always)]
    pub(super) fn copy_in(words: &[FrameWord], offset: usize, data: &[u8]) {
        let end = offset.checked_add(data.len()).expect("store past the frame");
        assert!(end <= std::mem::size_of_val(words), "store past the frame");
        // The bytes before the first 16-byte boundary and after the last
        // go word by word (frames are page aligned; a test's words are
        // only 8-byte aligned, hence the address, not the offset).
        let at = words.as_ptr() as usize + offset;
        let head = ((16 - at % 16) % 16).min(data.len());
        let body = (data.len() - head) / 16 * 16;
        super::copy_to_words(words, offset, &data[..head]);
        if body != 0 {
            debug_assert!((at + head).is_multiple_of(16));
            // SAFETY: the destination `[offset + head, offset + head +
            // body)` lies inside `words` (checked above), is 16-byte
            // aligned (its address rounded up to 16) and `body`
            // is a non-zero multiple of 16; the source is the same number
            // of bytes of `data`. `movdqu` may load unaligned; `movdqa`
            // needs the alignment it has. The loop clobbers the declared
            // registers and the flags (no `preserves_flags`), uses no
            // stack. Each `movdqa` is a single-copy atomic 16-byte store
            // (`atomic_16()`, the caller's check), so each aligned word is
            // stored whole, as the relaxed `u64` stores it stands for in
            // the abstract machine (`copy_to_words`); the caller is the
            // only writer, so no store races another store, and readers
            // see every word old or new.
            unsafe {
                std::arch::asm!(
                    "test {n}, -64",
                    "jz 3f",
                    "2:",
                    "movdqu xmm0, xmmword ptr [{src}]",
                    "movdqu xmm1, xmmword ptr [{src} + 16]",
                    "movdqu xmm2, xmmword ptr [{src} + 32]",
                    "movdqu xmm3, xmmword ptr [{src} + 48]",
                    "movdqa xmmword ptr [{dst}], xmm0",
                    "movdqa xmmword ptr [{dst} + 16], xmm1",
                    "movdqa xmmword ptr [{dst} + 32], xmm2",
                    "movdqa xmmword ptr [{dst} + 48], xmm3",
                    "add {src}, 64",
                    "add {dst}, 64",
                    "sub {n}, 64",
                    "test {n}, -64",
                    "jnz 2b",
                    "3:",
                    "test {n}, {n}",
                    "jz 5f",
                    "4:",
                    "movdqu xmm0, xmmword ptr [{src}]",
                    "movdqa xmmword ptr [{dst}], xmm0",
                    "add {src}, 16",
                    "add {dst}, 16",
                    "sub {n}, 16",
                    "jnz 4b",
                    "5:",
                    src = inout(reg) data.as_ptr().add(head) => _,
                    dst = inout(reg) words.as_ptr().cast::<u8>().add(offset + head) => _,
                    n = inout(reg) body => _,
                    out("xmm0") _,
                    out("xmm1") _,
                    out("xmm2") _,
                    out("xmm3") _,
                    options(nostack),
                );
            }
        }
        super::copy_to_words(words, offset + head + body, &data[head + body..]);
    }
}

#[cfg(loom)]
impl Word for loom::sync::atomic::AtomicU64 {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
    fn set(&self, v: u64) {
        self.store(v, Ordering::Relaxed)
    }
}

/// read_seqcount_begin without the wait: the count, or None while a
/// writer is inside a section (odd).
#[inline(always)]
pub(crate) fn read_seqcount_begin(seq: &AtomicU32) -> Option<u32> {
    // Acquire: pairs with write_seqcount_end's Release, so a copy started
    // at this even count sees every store of the section that ended it.
    let s = seq.load(Ordering::Acquire);
    (s & 1 == 0).then_some(s)
}

/// read_seqcount_retry: whether a write section may have overlapped the
/// loads since `start` (the copy must then be thrown away).
#[inline(always)]
pub(crate) fn read_seqcount_retry(seq: &AtomicU32, start: u32) -> bool {
    // smp_rmb: pairs with write_seqcount_begin's Release fence. A word
    // loaded above that a writer stored makes its odd count visible here.
    fence(Ordering::Acquire);
    seq.load(Ordering::Relaxed) != start
}

/// write_seqcount_begin. The caller excludes other writers (PG_locked).
#[inline(always)]
pub(crate) fn write_seqcount_begin(seq: &AtomicU32) {
    let old = seq.fetch_add(1, Ordering::Relaxed);
    vm_bug_on!(old & 1 != 0, "nested write section");
    // smp_wmb: the odd count is ordered before the section's stores (pairs
    // with read_seqcount_retry's Acquire fence).
    fence(Ordering::Release);
}

/// write_seqcount_end.
#[inline(always)]
pub(crate) fn write_seqcount_end(seq: &AtomicU32) {
    // Release: pairs with read_seqcount_begin's Acquire load.
    let old = seq.fetch_add(1, Ordering::Release);
    vm_bug_on!(old & 1 != 1, "write section not begun");
}

/// Copy `buf.len()` bytes at byte `offset` of `words` into `buf`, word by
/// word with relaxed loads. Not validated: see `seqcount_read`.
#[inline]
pub(crate) fn copy_from_words<W: Word>(words: &[W], offset: usize, buf: &mut [u8]) {
    let end = offset + buf.len();
    assert!(end <= words.len() * 8, "copy past the frame");
    let (mut pos, mut done) = (offset, 0);
    let lead = pos % 8;
    if lead != 0 && !buf.is_empty() {
        let n = (8 - lead).min(buf.len());
        buf[..n].copy_from_slice(&words[pos / 8].get().to_ne_bytes()[lead..lead + n]);
        pos += n;
        done += n;
    }
    let nwords = (end - pos) / 8;
    let mid = &words[pos / 8..pos / 8 + nwords];
    for (w, out) in mid.iter().zip(buf[done..done + nwords * 8].chunks_exact_mut(8)) {
        out.copy_from_slice(&w.get().to_ne_bytes());
    }
    pos += nwords * 8;
    done += nwords * 8;
    if done < buf.len() {
        let n = buf.len() - done;
        buf[done..].copy_from_slice(&words[pos / 8].get().to_ne_bytes()[..n]);
    }
}

/// Store `len` bytes at byte `offset` of `words`, byte `i` taken from
/// `byte(i)`. The caller is the only writer (it holds the page lock), so a
/// partial word at an edge is loaded, merged and stored whole: readers see
/// it old or new, never half.
#[inline]
fn store_words<W: Word>(words: &[W], offset: usize, len: usize, byte: impl Fn(usize) -> u8) {
    let end = offset + len;
    assert!(end <= words.len() * 8, "store past the frame");
    let (mut pos, mut done) = (offset, 0);
    let merge = |w: &W, from: usize, n: usize, done: usize| {
        let mut b = w.get().to_ne_bytes();
        for (i, slot) in b[from..from + n].iter_mut().enumerate() {
            *slot = byte(done + i);
        }
        w.set(u64::from_ne_bytes(b));
    };
    let lead = pos % 8;
    if lead != 0 && len > 0 {
        let n = (8 - lead).min(len);
        merge(&words[pos / 8], lead, n, 0);
        pos += n;
        done += n;
    }
    let nwords = (end - pos) / 8;
    for (k, w) in words[pos / 8..pos / 8 + nwords].iter().enumerate() {
        let base = done + k * 8;
        w.set(u64::from_ne_bytes(std::array::from_fn(|i| byte(base + i))));
    }
    pos += nwords * 8;
    done += nwords * 8;
    if done < len {
        merge(&words[pos / 8], 0, len - done, done);
    }
}

/// Copy `data` to byte `offset` of `words` (no sequence count: see
/// `write_section`).
#[inline]
pub(crate) fn copy_to_words<W: Word>(words: &[W], offset: usize, data: &[u8]) {
    assert!(offset + data.len() <= words.len() * 8, "store past the frame");
    // The partial words at the edges are merged by `store_words`; the whole
    // words between go straight from 8-byte chunks, one load and one store
    // each (through `store_words`' byte closure they were eight byte loads
    // with bounds checks: most of a buffered write's CPU time).
    let lead = ((8 - offset % 8) % 8).min(data.len());
    store_words(words, offset, lead, |i| data[i]);
    let first = (offset + lead) / 8;
    let mid = &data[lead..];
    let nwords = mid.len() / 8;
    for (w, chunk) in words[first..first + nwords].iter().zip(mid.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        w.set(u64::from_ne_bytes(b));
    }
    let done = lead + nwords * 8;
    store_words(words, offset + done, data.len() - done, |i| data[done + i]);
}

/// Set `len` bytes at byte `offset` of `words` to `value`.
#[inline]
pub(crate) fn fill_words<W: Word>(words: &[W], offset: usize, len: usize, value: u8) {
    store_words(words, offset, len, |_| value);
}

/// One optimistic copy attempt loop: up to `tries` copies, each accepted
/// only if no write section overlapped it. False if every try failed.
#[inline]
pub(crate) fn seqcount_read<W: Word>(seq: &AtomicU32, words: &[W], offset: usize, buf: &mut [u8], tries: u32) -> bool {
    for attempt in 0..tries {
        let Some(start) = read_seqcount_begin(seq) else {
            // A writer is inside: give it a moment (exponential, bounded).
            for _ in 0..(16u32 << attempt) {
                spin_loop();
            }
            continue;
        };
        W::copy_out(words, offset, buf);
        if !read_seqcount_retry(seq, start) {
            return true;
        }
    }
    false
}

/// Run `f` on `words` inside one write section of `seq`.
#[inline]
pub(crate) fn write_section<W: Word>(seq: &AtomicU32, words: &[W], f: impl FnOnce(&[W])) {
    write_seqcount_begin(seq);
    f(words);
    write_seqcount_end(seq);
}

impl Cache {
    /// memcpy_from_page: copy `buf.len()` bytes at `offset` of the frame
    /// into `buf`, as one consistent state of the page (between two write
    /// sections). The caller holds the page (a pin or a reference), which
    /// is uptodate, or holds its lock. No lock and no atomic RMW unless
    /// writers keep the page busy for `OPTIMISTIC_TRIES` attempts, after
    /// which the copy is made under the page lock.
    #[inline]
    pub fn memcpy_from_page(&self, pfn: Pfn, offset: usize, buf: &mut [u8]) {
        let (seq, words) = (self.arena.frame_seq(pfn), self.arena.frame_words(pfn));
        if seqcount_read(seq, words, offset, buf, OPTIMISTIC_TRIES) {
            return;
        }
        self.memcpy_from_page_slow(pfn, offset, buf);
    }

    /// The slow half of `memcpy_from_page`: writers hold the page lock
    /// across their sections, so under it the count is even and still. A
    /// caller holding the lock itself never gets here: with no other writer
    /// possible, its first optimistic copy succeeds.
    #[cold]
    fn memcpy_from_page_slow(&self, pfn: Pfn, offset: usize, buf: &mut [u8]) {
        // A large folio's lock is its head's.
        let page = self.lock_page(self.arena.compound_head(pfn));
        self.__memcpy_from_page(pfn, offset, buf);
        page.unlock();
    }

    /// memcpy_from_page for a caller holding the page lock: no writer can
    /// be inside a section, so the copy needs no validation.
    #[inline]
    pub fn __memcpy_from_page(&self, pfn: Pfn, offset: usize, buf: &mut [u8]) {
        vm_bug_on_page!(!self.folio_locked(pfn), self.page(pfn), "__memcpy_from_page without the page lock");
        FrameWord::copy_out(self.arena.frame_words(pfn), offset, buf);
    }

    /// load_u64: the aligned word at byte `offset` (a multiple of 8). One
    /// word is one atomic load, so it needs no sequence count: it is the
    /// value before or after any write section that stored it.
    // Used by mapped access, built on this module.
    #[allow(dead_code)]
    #[inline]
    pub fn load_u64(&self, pfn: Pfn, offset: usize) -> u64 {
        assert!(offset.is_multiple_of(8), "unaligned frame word");
        self.arena.frame_words(pfn)[offset / 8].get()
    }

    /// memcpy_to_page: copy `data` to byte `offset` of the frame, in one
    /// write section. The caller holds the page lock (which makes writers
    /// exclusive) and has waited for PG_writeback (stable pages).
    #[inline]
    pub fn memcpy_to_page(&self, pfn: Pfn, offset: usize, data: &[u8]) {
        vm_bug_on_page!(!self.folio_locked(pfn), self.page(pfn), "memcpy_to_page without the page lock");
        let (seq, words) = (self.arena.frame_seq(pfn), self.arena.frame_words(pfn));
        write_section(seq, words, |w| FrameWord::copy_in(w, offset, data));
    }

    /// Whether the folio holding `pfn` is locked (a large folio's lock is
    /// its head's): the debug checks of the write sections.
    fn folio_locked(&self, pfn: Pfn) -> bool {
        self.page(self.arena.compound_head(pfn)).test(PG_LOCKED)
    }

    /// memset_page: set `len` bytes at `offset` to `value`, in one write
    /// section, under the page lock as `memcpy_to_page`.
    #[inline]
    pub fn memset_page(&self, pfn: Pfn, offset: usize, len: usize, value: u8) {
        vm_bug_on_page!(!self.folio_locked(pfn), self.page(pfn), "memset_page without the page lock");
        let (seq, words) = (self.arena.frame_seq(pfn), self.arena.frame_words(pfn));
        write_section(seq, words, |w| fill_words(w, offset, len, value));
    }

    /// memzero_page: zero `len` bytes at `offset`, under the page lock.
    #[inline]
    pub fn memzero_page(&self, pfn: Pfn, offset: usize, len: usize) {
        self.memset_page(pfn, offset, len, 0);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<FrameWord> {
        (0..n).map(|_| FrameWord::new(0)).collect()
    }

    // Goal: the word-wise copies move exactly the bytes asked for, at every
    // alignment and length an edge can take. Method: write a pattern at
    // each (offset, len) of a 4-word frame, read it back at the same and at
    // a wider range, and check the bytes around it are untouched.
    #[test]
    fn copies_at_every_alignment() {
        for offset in 0..32 {
            for len in 0..=(32 - offset) {
                let w = words(4);
                fill_words(&w, 0, 32, 0xee);
                let data: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
                copy_to_words(&w, offset, &data);
                let mut back = vec![0u8; len];
                copy_from_words(&w, offset, &mut back);
                assert_eq!(back, data, "offset {offset} len {len}");
                // The frame's own store (16 aligned bytes at a time on
                // x86_64 with AVX): the same bytes as the word stores.
                let w2 = words(4);
                fill_words(&w2, 0, 32, 0xee);
                FrameWord::copy_in(&w2, offset, &data);
                let mut all2 = [0u8; 32];
                copy_from_words(&w2, 0, &mut all2);
                let mut want = [0xeeu8; 32];
                want[offset..offset + len].copy_from_slice(&data);
                assert_eq!(all2, want, "copy_in at offset {offset} len {len}");
                // The frame copy (`rep movsb` on x86_64), into a buffer
                // at an odd address and with a guard byte after it.
                let mut odd = vec![0x55u8; len + 2];
                FrameWord::copy_out(&w, offset, &mut odd[1..=len]);
                assert_eq!(&odd[1..=len], &data[..], "copy_out at offset {offset} len {len}");
                assert_eq!((odd[0], odd[len + 1]), (0x55, 0x55), "copy_out wrote outside its buffer");
                let mut all = [0u8; 32];
                copy_from_words(&w, 0, &mut all);
                for (i, &b) in all.iter().enumerate() {
                    let want = if (offset..offset + len).contains(&i) { (i - offset) as u8 + 1 } else { 0xee };
                    assert_eq!(b, want, "byte {i} after offset {offset} len {len}");
                }
            }
        }
    }

    // Goal: the frame's own store (`Word::copy_in`) writes exactly what
    // the word stores write across a whole page, at offsets and lengths
    // around every 16- and 64-byte boundary the asm loop has.
    #[test]
    fn copy_in_matches_word_stores_over_a_page() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for offset in [0, 1, 7, 8, 9, 15, 16, 17, 24, 48, 63, 64, 65, 100, 4000] {
            for len in [0, 1, 8, 15, 16, 17, 31, 32, 48, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096] {
                if offset + len > 4096 {
                    continue;
                }
                let (a, b) = (words(512), words(512));
                fill_words(&a, 0, 4096, 0xee);
                fill_words(&b, 0, 4096, 0xee);
                copy_to_words(&a, offset, &data[..len]);
                FrameWord::copy_in(&b, offset, &data[..len]);
                let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
                copy_from_words(&a, 0, &mut x);
                copy_from_words(&b, 0, &mut y);
                assert!(x == y, "copy_in at offset {offset} len {len}");
            }
        }
    }

    // Goal: a reader that cannot validate a copy (a writer sits inside a
    // section, as a preempted writer would) falls back to the page lock
    // and returns the page as the writer leaves it, never the half-written
    // state. Method: the main thread locks the page, opens a section and
    // writes half the new bytes; it finishes the section and unlocks only
    // once the reader waits on the page lock (PG_waiters set), so the
    // reader can return only after the unlock.
    #[test]
    fn reader_falls_back_to_the_page_lock() {
        use crate::{Config, Tunables};
        let cache = Cache::new(Config {
            memory_bytes: 64 * 4096,
            tunables: Tunables { kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap();
        let pfn = cache.arena.alloc().unwrap();
        let page = cache.lock_page(pfn);
        let (seq, words) = (cache.arena.frame_seq(pfn), cache.arena.frame_words(pfn));
        write_seqcount_begin(seq);
        fill_words(words, 0, 2048, 7);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut buf = vec![0u8; 4096];
                cache.memcpy_from_page(pfn, 0, &mut buf);
                buf
            });
            while !page.test(crate::page::PG_WAITERS) {
                std::thread::yield_now();
            }
            fill_words(words, 2048, 2048, 7);
            write_seqcount_end(seq);
            page.unlock();
            assert!(reader.join().unwrap().iter().all(|&b| b == 7), "the reader returned a half-written page");
        });
    }

    // Goal: the frame copy (`rep movsb` on x86_64) under the protocol:
    // readers racing writers of the same frame accept only whole states,
    // at offsets and lengths that are not multiples of 8 or 32. Method: a
    // writer stores whole pages of one tag each (every byte the tag's, one
    // write section per page) under a lock standing for PG_locked; two
    // readers copy random ranges through `seqcount_read` with
    // `FrameWord`'s words and check every accepted copy holds one tag.
    // (With the re-check after the copy left out, it fails: torn copies.)
    #[test]
    fn frame_copies_racing_writers_are_whole() {
        const BYTES: usize = 4096;
        let w = words(BYTES / 8);
        let seq = AtomicU32::new(0);
        let lock = std::sync::Mutex::new(());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let accepted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            {
                let (w, seq, lock, stop) = (&w, &seq, &lock, &stop);
                s.spawn(move || {
                    let mut tag = 0u8;
                    while !stop.load(Ordering::Relaxed) {
                        tag = tag.wrapping_add(1);
                        {
                            let _g = lock.lock().unwrap();
                            // Backwards, 64 bytes at a time: a reader's
                            // forward copy, faster than the stores, then
                            // meets the section from the other end.
                            write_section(seq, w, |w| {
                                for at in (0..BYTES).step_by(64).rev() {
                                    fill_words(w, at, 64, tag);
                                }
                            });
                        }
                        // Short gaps between sections, of varying
                        // length, so readers both finish copies and race
                        // sections (`pause` is long on some CPUs).
                        for _ in 0..tag % 8 {
                            spin_loop();
                        }
                    }
                });
            }
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (w, seq, accepted) = (&w, &seq, &accepted);
                    s.spawn(move || {
                        let mut x = r.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                        let mut buf = vec![0u8; BYTES];
                        for _ in 0..100_000 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let offset = (x % BYTES as u64) as usize;
                            let len = ((x >> 20) % (BYTES - offset) as u64) as usize + 1;
                            let buf = &mut buf[..len];
                            if seqcount_read(seq, &w[..], offset, buf, 4) {
                                let first = buf[0];
                                assert!(buf.iter().all(|&b| b == first), "a torn copy at {offset}+{len}");
                                accepted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            let results: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
            // Stop the writer before a reader's panic propagates, or the
            // scope would wait for it forever.
            stop.store(true, Ordering::Relaxed);
            for r in results {
                if let Err(panic) = r {
                    std::panic::resume_unwind(panic);
                }
            }
        });
        assert!(accepted.load(Ordering::Relaxed) > 0, "no copy was ever accepted");
    }

    // Goal: an uncontended optimistic read succeeds at once, and a read
    // while a section is open (odd count) is refused, not accepted torn.
    #[test]
    fn seqcount_read_refuses_an_open_section() {
        let w = words(2);
        let seq = AtomicU32::new(0);
        let mut buf = [0u8; 16];
        assert!(seqcount_read(&seq, &w, 0, &mut buf, 1));
        write_seqcount_begin(&seq);
        assert!(!seqcount_read(&seq, &w, 0, &mut buf, 3));
        write_seqcount_end(&seq);
        assert!(seqcount_read(&seq, &w, 0, &mut buf, 1));
    }
}

//! Model checks with loom (`RUSTFLAGS="--cfg loom" cargo test -p pcache
//! --lib --release loom`), on reduced sizes: two-frame arenas, two threads.
//! Each test states the property it checks against every interleaving.

use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::arena::Arena;
use crate::errseq::{errseq_check_and_advance, errseq_sample, errseq_set};
use crate::hazard::HazardTable;
use crate::highmem::{copy_to_words, fill_words, seqcount_read, write_section};
use crate::memory::{
    pte_access_transient, pte_load_many, pte_pin, pte_read_optimistic, ptep_get_and_clear, LoadSteps, PteView,
};
use crate::mmap::{mk_pte, pte_pfn, pte_swap_slot, swp_pte, AtomicPte, PageTable, PTE_DIRTY};

// Goal: the arena's lists (one CPU's list in front of the buddy lists,
// shared by both threads) never hand one frame to two allocators and lose
// none, whatever the interleaving of alloc and free: a frame freed and
// taken again meanwhile included.
#[test]
fn free_lists_never_double_allocate() {
    for (batch, high) in [(1, 1), (0, 0)] {
        loom::model(move || {
            let arena = Arc::new(Arena::with_pcp(2, 4096, 1, batch, high).expect("arena"));
            let a2 = arena.clone();
            let t = thread::spawn(move || {
                let p = a2.alloc().expect("a frame");
                a2.page(p).refcount.store(0, Ordering::Relaxed);
                a2.free(p);
                a2.alloc()
            });
            let mine = arena.alloc();
            let theirs = t.join().unwrap();
            if let (Some(a), Some(b)) = (mine, theirs) {
                assert_ne!(a, b, "one frame handed out twice");
            }
            let held = mine.is_some() as u64 + theirs.is_some() as u64;
            assert_eq!(arena.nr_free_exact(), 2 - held);
        });
    }
}

/// Give back a frame `alloc` returned.
fn put(arena: &Arena, pfn: u32) {
    arena.page(pfn).refcount.store(0, Ordering::Relaxed);
    arena.free(pfn);
}

// Goal: on two CPUs, a thread that freed a frame and then allocates always
// gets one (two frames, each thread holding one and trading it back): the
// other CPU's list never makes an allocation fail while a frame is free,
// and the per-CPU debts leave the count exact.
#[test]
fn free_then_alloc_never_fails_across_cpus() {
    loom::model(|| {
        let arena = Arc::new(Arena::with_pcp(2, 4096, 2, 2, 2).expect("arena"));
        let p = arena.alloc().expect("a frame");
        let q = arena.alloc().expect("a frame");
        let a2 = arena.clone();
        let t = thread::spawn(move || {
            crate::arena::LOOM_CPU.with(|c| c.set(1));
            put(&a2, q);
            a2.alloc()
        });
        put(&arena, p);
        let mine = arena.alloc().expect("a thread that freed a frame gets one");
        let theirs = t.join().unwrap().expect("a thread that freed a frame gets one");
        assert_ne!(mine, theirs, "one frame handed out twice");
        assert_eq!(arena.nr_free_exact(), 0);
        put(&arena, mine);
        put(&arena, theirs);
        arena.drain_all_pages();
        assert_eq!(arena.nr_free(), 2);
        assert_eq!(arena.buddyinfo()[1], 1, "the two frames merged back");
    });
}

// Goal: frames freed onto another CPU's list while this one allocates are
// never handed out twice, and once that thread is done they are all found
// (drain_all_pages) by allocations here: none is lost on a list.
#[test]
fn frames_on_another_cpus_list_are_found() {
    loom::model(|| {
        let arena = Arc::new(Arena::with_pcp(2, 4096, 2, 1, 2).expect("arena"));
        let p = arena.alloc().expect("a frame");
        let q = arena.alloc().expect("a frame");
        let a2 = arena.clone();
        let t = thread::spawn(move || {
            crate::arena::LOOM_CPU.with(|c| c.set(1));
            put(&a2, q);
            put(&a2, p);
        });
        let early = arena.alloc();
        t.join().unwrap();
        let mut got: Vec<u32> = early.into_iter().collect();
        while got.len() < 2 {
            got.push(arena.alloc().expect("a frame freed on the other CPU"));
        }
        assert_ne!(got[0], got[1], "one frame handed out twice");
        assert_eq!(arena.alloc(), None);
        assert_eq!(arena.nr_free_exact(), 0);
    });
}

// Goal: the hazard-pin protocol (with the reader-side fence loom can model
// in place of membarrier): a reader that announced a frame and then found
// it still mapped never sees that frame reused, while a remover that
// unmaps the frame, scans the hazards and finds no pin reuses it.
#[test]
fn hazard_pin_keeps_frame_from_reuse() {
    loom::model(|| {
        let hz = Arc::new(HazardTable::new());
        const PFN: u32 = 7;
        // The tree slot (the frame's page entry) and the frame's identity.
        let slot = Arc::new(AtomicUsize::new(crate::pagetree::page_entry(PFN)));
        let generation = Arc::new(AtomicU32::new(0));
        let (hz2, slot2, gen2) = (hz.clone(), slot.clone(), generation.clone());
        let reader = thread::spawn(move || {
            let entry = slot2.load(Ordering::Acquire);
            if entry == 0 {
                return;
            }
            let h = hz2.pin_in_row(1, PFN).expect("a free hazard slot");
            if slot2.load(Ordering::Acquire) == entry {
                let g = gen2.load(Ordering::Acquire);
                // Still the same frame while pinned.
                assert_eq!(gen2.load(Ordering::Acquire), g);
                assert_eq!(g, 0, "a reader validated a reused frame");
            }
            hz2.unpin(h);
        });
        // The remover: unmap, then reuse only if nobody announced the frame.
        slot.store(0, Ordering::Release);
        let mut pinned = Vec::new();
        hz.scan(&mut pinned);
        if pinned.binary_search(&PFN).is_err() {
            generation.store(1, Ordering::Release);
        }
        reader.join().unwrap();
    });
}

/// The page-tree node retire protocol (hazard.rs's walk announcements,
/// pagetree.rs's retire and reclaim) at its smallest: a parent slot linking
/// one node, a reader walking through it, a writer unlinking and retiring
/// it. `announce` false drops the reader's announcement, which must break
/// it.
fn node_retire_model(announce: bool) {
    loom::model(move || {
        let hz = Arc::new(HazardTable::new());
        // The parent's slot (linking node 1) and the node's identity: a
        // reclaimed node is reused, and its generation changes.
        let link = Arc::new(AtomicUsize::new(1));
        let generation = Arc::new(AtomicU32::new(0));
        let (hz2, link2, gen2) = (hz.clone(), link.clone(), generation.clone());
        let reader = thread::spawn(move || {
            let walk = announce.then(|| hz2.walk_begin_in_row(1));
            if link2.load(Ordering::Acquire) != 0 {
                // Inside the node (a slot re-check, say).
                assert_eq!(gen2.load(Ordering::Acquire), 0, "a walker reached a reused node");
            }
            drop(walk);
        });
        // The writer (tree lock held): unlink, retire with an epoch, and
        // reuse only when no walk at or before that epoch is announced.
        link.store(0, Ordering::Release);
        let tag = hz.retire_epoch();
        if tag < hz.walk_sync() {
            generation.store(1, Ordering::Release);
        }
        reader.join().unwrap();
    });
}

// Goal: a reader that announced its walk and reached a node through its
// parent's link never sees that node reused, whatever the interleaving
// with a writer that unlinks, retires and reclaims it.
#[test]
fn node_retire_waits_for_walkers() {
    node_retire_model(true);
}

// Goal: the model has teeth: without the reader's announcement, some
// interleaving reuses the node under the reader.
#[test]
#[should_panic(expected = "a walker reached a reused node")]
fn node_retire_without_announcement_fails() {
    node_retire_model(false);
}

/// The split protocol (pagetree.rs `split_at`, `lookup_inner`) at its
/// smallest, both ways a split goes. In a node: an order-2 folio of frames
/// 8..12 in slots 0..4 (its head and three siblings) becomes four order-0
/// entries, the head's slot written last; the reader resolves a sibling
/// to its head and takes the head only if its span reaches the slot
/// (`spans`). Into a new node: a parent slot holding an order-6 folio of
/// frames 64.. is replaced by a node whose slots (two, here) hold the
/// order-0 entries, filled before the link is published with `publish`.
/// `check_span` false drops the reader's span check.
fn split_model(check_span: bool, publish: Ordering) {
    use crate::pagetree::{entry_page_pfn, folio_entry, is_node, is_sibling, sibling, sibling_head, spans};
    loom::model(move || {
        let slots: Arc<[AtomicUsize; 4]> =
            Arc::new(std::array::from_fn(|s| AtomicUsize::new(if s == 0 { folio_entry(8, 2) } else { sibling(0, s) })));
        // The parent slot, and the new node it comes to link (a
        // node-tagged word standing for the node's address).
        const CHILD: usize = 64 | 3;
        let parent = Arc::new(AtomicUsize::new(folio_entry(64, 6)));
        let child: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let (slots2, parent2, child2) = (slots.clone(), parent.clone(), child.clone());
        let reader = thread::spawn(move || {
            for index in [2u64, 3] {
                // Bounded retries: a lookup that finds nothing here is the
                // hit path's miss, which is allowed; a wrong frame is not.
                for _ in 0..2 {
                    let v = slots2[index as usize].load(Ordering::Acquire);
                    let e = if is_sibling(v) {
                        let head = sibling_head(v);
                        let e = slots2[head].load(Ordering::Acquire);
                        if check_span && !spans(e, 0, index as usize - head) {
                            continue;
                        }
                        e
                    } else {
                        v
                    };
                    assert_eq!(entry_page_pfn(e, index), Some(8 + index as u32), "a reader took the wrong frame");
                    break;
                }
            }
            let v = parent2.load(Ordering::Acquire);
            let e = if is_node(v) { child2[1].load(Ordering::Relaxed) } else { v };
            assert_eq!(entry_page_pfn(e, 65), Some(65), "a reader found a gap in a split");
        });
        for g in (1..4).rev() {
            slots[g].store(folio_entry(8 + g as u32, 0), Ordering::Release);
        }
        slots[0].store(folio_entry(8, 0), Ordering::Release);
        child[0].store(folio_entry(64, 0), Ordering::Relaxed);
        child[1].store(folio_entry(65, 0), Ordering::Relaxed);
        parent.store(CHILD, publish);
        reader.join().unwrap();
    });
}

// Goal: a reader racing a split of a large folio's entry (within a node,
// or into a new node) always takes the frame of its own index, or finds
// nothing and takes the slow path; never another page's frame, never an
// empty slot in a node being linked.
#[test]
fn split_racing_a_reader_takes_the_right_frame() {
    split_model(true, Ordering::Release);
}

// Goal: the model has teeth: without the span check, a reader that read a
// sibling before the split takes the head's new order-0 entry for its own.
#[test]
#[should_panic(expected = "a reader took the wrong frame")]
fn split_without_span_check_takes_a_wrong_frame() {
    split_model(false, Ordering::Release);
}

// Goal: the model has teeth: a node linked with a relaxed store can be
// seen before its slots are.
#[test]
#[should_panic(expected = "a reader found a gap in a split")]
fn split_linked_without_release_shows_a_gap() {
    split_model(true, Ordering::Relaxed);
}

/// find_get_page against split_folio at their smallest: an order-1 folio
/// of frames 8 and 9 (the cache's reference on 8, 9 a tail naming it), a
/// reader looking up index 1 (frame 9) by reference on the head, and a
/// splitter that freezes the head at the cache's reference, makes 9 a page
/// with the cache's reference, publishes 9's own entry and thaws the head.
/// The reader re-checks the entry after its get and drops the page through
/// `put_page`'s compound_head. `check_head` false drops the re-check's
/// test that the entry still names the head it took the reference on.
fn split_get_model(check_head: bool) {
    use crate::pagetree::{entry_page_pfn, entry_pfn, folio_entry};
    loom::model(move || {
        let slot = Arc::new(AtomicUsize::new(folio_entry(8, 1)));
        let refs = Arc::new([AtomicU32::new(1), AtomicU32::new(0)]);
        let tail = Arc::new(AtomicU32::new(1));
        let (slot2, refs2, tail2) = (slot.clone(), refs.clone(), tail.clone());
        let reader = thread::spawn(move || {
            let r = |pfn: u32| &refs2[(pfn - 8) as usize];
            for _ in 0..2 {
                let e = slot2.load(Ordering::Acquire);
                let (Some(head), Some(pfn)) = (entry_pfn(e), entry_page_pfn(e, 1)) else { return };
                // get_page_unless_zero on the head.
                let mut v = r(head).load(Ordering::Relaxed);
                loop {
                    if v == 0 {
                        break;
                    }
                    match r(head).compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed) {
                        Ok(_) => break,
                        Err(cur) => v = cur,
                    }
                }
                if v == 0 {
                    continue;
                }
                let now = slot2.load(Ordering::Acquire);
                if (check_head && entry_pfn(now) != Some(head)) || entry_page_pfn(now, 1) != Some(pfn) {
                    r(head).fetch_sub(1, Ordering::Release);
                    continue;
                }
                // put_page(pfn): the reference goes to compound_head(pfn).
                let h = if pfn == 9 && tail2.load(Ordering::Relaxed) != 0 { 8 } else { pfn };
                r(h).fetch_sub(1, Ordering::Release);
                return;
            }
        });
        // split_folio: freeze at the cache's reference, or give up.
        let split = refs[0].compare_exchange(1, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok();
        if split {
            tail.store(0, Ordering::Relaxed);
            refs[1].store(1, Ordering::Release);
            slot.store(folio_entry(9, 0), Ordering::Release);
            refs[0].store(1, Ordering::Release);
        }
        reader.join().unwrap();
        let counts = (refs[0].load(Ordering::Acquire), refs[1].load(Ordering::Acquire));
        assert_eq!(counts, (1, split as u32), "a reference was dropped on another page than it was taken on");
    });
}

// Goal: a lookup racing a split never drops its reference on another
// descriptor than it took it on: each page ends with the cache's
// reference alone, whatever the interleaving.
#[test]
fn split_racing_a_lookup_keeps_references() {
    split_get_model(true);
}

// Goal: the model has teeth: without the head test, a lookup that took
// the head's reference just after the split drops it on the new page.
#[test]
#[should_panic(expected = "a reference was dropped on another page")]
fn split_lookup_without_head_check_drops_a_wrong_reference() {
    split_get_model(false);
}

// Goal (errseq): an error recorded while two handles fsync is reported to
// each handle exactly once, and a handle opened after it was seen starts
// clean.
/// split_folio against a hit-path reader at their smallest: an order-1
/// folio of frames 8 and 9 at index 0, a reader that pins frame 9 (index
/// 1) and re-checks the head's slot, then takes the head from 9's tail
/// link and reads the folio's frames; a splitter that freezes the slot,
/// scans the pins and, finding none on either frame, makes 9 a page (its
/// link rewritten) and stores the parts' entries. `check_pins` false
/// drops the scan.
fn split_hazard_model(check_pins: bool) {
    use crate::pagetree::{folio_entry, SLOT_FROZEN};
    loom::model(move || {
        let hz = Arc::new(HazardTable::new());
        let slot = Arc::new(AtomicUsize::new(folio_entry(8, 1)));
        // Frame 9's tail link (compound_head), and whether it is split.
        let link = Arc::new(AtomicU32::new(8));
        let split = Arc::new(AtomicU32::new(0));
        let (hz2, slot2, link2, split2) = (hz.clone(), slot.clone(), link.clone(), split.clone());
        let reader = thread::spawn(move || {
            let entry = slot2.load(Ordering::Acquire);
            if entry & SLOT_FROZEN != 0 || entry != folio_entry(8, 1) {
                return;
            }
            let h = hz2.pin_in_row(1, 9).expect("a free hazard slot");
            if slot2.load(Ordering::Acquire) == entry {
                // The folio must stay whole while the pin is held.
                assert_eq!(link2.load(Ordering::Relaxed), 8, "a pinned tail lost its head");
                assert_eq!(split2.load(Ordering::Acquire), 0, "a pinned folio was split");
            }
            hz2.unpin(h);
        });
        let entry = slot.load(Ordering::Acquire);
        slot.store(entry | SLOT_FROZEN, Ordering::Release);
        let mut pinned = Vec::new();
        hz.scan(&mut pinned);
        if check_pins && pinned.iter().any(|&p| p == 8 || p == 9) {
            slot.store(entry, Ordering::Release);
        } else {
            link.store(crate::page::NO_PFN, Ordering::Relaxed);
            split.store(1, Ordering::Release);
            slot.store(folio_entry(8, 0), Ordering::Release);
        }
        reader.join().unwrap();
    });
}

// Goal: a split never happens under a hit-path reader's pin on any frame
// of the folio (it freezes the head's slot and scans the pins, as removal
// does), so the reader's head (from the tail's link) and every frame it
// copies stay the folio's.
#[test]
fn split_waits_for_hazard_pinned_readers() {
    split_hazard_model(true);
}

// The model has teeth: without the scan a pinned tail loses its head.
#[test]
#[should_panic(expected = "a pinned")]
fn split_without_pin_scan_breaks_a_pinned_reader() {
    split_hazard_model(false);
}

#[test]
fn errseq_reports_once_per_handle() {
    loom::model(|| {
        let word = Arc::new(AtomicU32::new(0));
        let a = Arc::new(AtomicU32::new(errseq_sample(&word)));
        let b = Arc::new(AtomicU32::new(errseq_sample(&word)));
        let (w2, a2) = (word.clone(), a.clone());
        let t = thread::spawn(move || {
            let first = errseq_check_and_advance(&w2, &a2);
            let second = errseq_check_and_advance(&w2, &a2);
            (first, second)
        });
        errseq_set(&word, libc::EIO);
        let (a1, a2r) = t.join().unwrap();
        let a3 = errseq_check_and_advance(&word, &a);
        // Handle A saw EIO exactly once over its three checks.
        let seen_a = [a1, a2r, a3].iter().filter(|&&e| e == libc::EIO).count();
        assert_eq!(seen_a, 1);
        assert!([a1, a2r, a3].iter().all(|&e| e == 0 || e == libc::EIO));
        // Handle B sees it once, then never again.
        assert_eq!(errseq_check_and_advance(&word, &b), libc::EIO);
        assert_eq!(errseq_check_and_advance(&word, &b), 0);
        // A handle opened now starts clean.
        let c = AtomicU32::new(errseq_sample(&word));
        assert_eq!(errseq_check_and_advance(&word, &c), 0);
    });
}

// Goal (highmem.rs): the frame sequence count never lets a reader accept a
// torn copy. A two-word frame is written in two sections by a writer (the
// page lock's holder): all of it to 1, then bytes 4..12, which straddle
// both words, to 2 (the load-merge-store edge path). A reader without any
// lock copies all 16 bytes, twice if it must; whatever it accepts is one of
// the three states between sections. Without the re-check after the copy
// (read_seqcount_retry) the model finds a copy with one word old and the
// other new.
// The words are loom atomics, so `seqcount_read` copies with the
// atomic-word fallback (`copy_from_words`): loom cannot run the real
// frames' `rep movsb`, which stands for exactly these loads (highmem.rs,
// "The copy").
#[test]
fn seqcount_reader_never_accepts_a_torn_copy() {
    loom::model(|| {
        let seq = Arc::new(AtomicU32::new(0));
        let words: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let (seq2, words2) = (seq.clone(), words.clone());
        let writer = thread::spawn(move || {
            write_section(&*seq2, &words2[..], |w| fill_words(w, 0, 16, 1));
            write_section(&*seq2, &words2[..], |w| copy_to_words(w, 4, &[2; 8]));
        });
        let mut buf = [0xeeu8; 16];
        if seqcount_read(&seq, &words[..], 0, &mut buf, 2) {
            let mut last = [1u8; 16];
            last[4..12].fill(2);
            assert!(buf == [0; 16] || buf == [1; 16] || buf == last, "accepted a torn copy: {buf:?}");
        }
        writer.join().unwrap();
    });
}

/// The remover's side of the mapped-access models (try_to_unmap, then the
/// free): clear the entry, harvest its young byte where the model has one
/// (page_referenced), and reuse the frame (`generation` = 1) only if the
/// hazard scan finds no pin on it.
fn unmap_and_free(hz: &HazardTable, pte: &AtomicPte, young: Option<&AtomicU8>, pfn: u32, generation: &AtomicU32) {
    let old = ptep_get_and_clear(pte);
    assert_eq!(pte_pfn(old), Some(pfn));
    if let Some(young) = young {
        let _referenced = young.load(Ordering::Relaxed) != 0 && young.swap(0, Ordering::Relaxed) != 0;
    }
    let mut pinned = Vec::new();
    hz.scan(&mut pinned);
    if pinned.binary_search(&pfn).is_err() {
        generation.store(1, Ordering::Release);
    }
}

// Goal (memory.rs, mapped access): the page-table entry protocol. A
// reader accesses a present entry (pte_pin: load, hazard pin, re-load,
// young store) while a remover clears the entry (ptep_get_and_clear, as
// try_to_unmap, truncation and zap do), tests and clears the young byte
// (page_referenced), scans the hazards and reuses the frame only if no pin
// shows. Whatever the interleaving: a reader that got the frame never sees
// it reused while it holds the pin, and the reader's young store never
// brings a cleared entry back (the young bit is a byte of its own; were it
// a bit of the entry, a plain store of the whole word would resurrect it).
// Without the re-check after the pin the model finds a reader on a reused
// frame.
#[test]
fn pte_clear_vs_access_never_uses_a_reused_frame() {
    loom::model(|| {
        let hz = Arc::new(HazardTable::new());
        const PFN: u32 = 5;
        // The entry and its young byte in one line of a page table, as
        // mappings have them.
        let table = Arc::new(PageTable::zeroed(1).expect("table"));
        table.pte(0).store(mk_pte(PFN), Ordering::Relaxed);
        let generation = Arc::new(AtomicU32::new(0));
        let (hz2, table2, gen2) = (hz.clone(), table.clone(), generation.clone());
        let reader = thread::spawn(move || {
            let (pte, young) = table2.entry(0);
            if let Some((pfn, h)) = pte_pin(&hz2, 1, pte, young) {
                assert_eq!(pfn, PFN);
                assert_eq!(gen2.load(Ordering::Acquire), 0, "an access used a reused frame");
                hz2.unpin(h);
            }
        });
        let (pte, young) = table.entry(0);
        unmap_and_free(&hz, pte, Some(young), PFN, &generation);
        reader.join().unwrap();
        assert_eq!(pte.load(Ordering::Relaxed), 0, "a cleared entry came back");
    });
}

// Goal (memory.rs, `Mapping::load_u64`): the same protocol through the
// transient hazard slot (pin, re-check, read, unpin with nothing between,
// no free mask): the read never runs on a reused frame, and the cleared
// entry never comes back.
#[test]
fn pte_clear_vs_transient_access_never_uses_a_reused_frame() {
    loom::model(|| {
        let hz = Arc::new(HazardTable::new());
        const PFN: u32 = 5;
        let table = Arc::new(PageTable::zeroed(1).expect("table"));
        table.pte(0).store(mk_pte(PFN), Ordering::Relaxed);
        let generation = Arc::new(AtomicU32::new(0));
        let (hz2, table2, gen2) = (hz.clone(), table.clone(), generation.clone());
        let reader = thread::spawn(move || {
            let (pte, young) = table2.entry(0);
            pte_access_transient(&hz2, 1, pte, young, |pfn| {
                assert_eq!(pfn, PFN);
                assert_eq!(gen2.load(Ordering::Acquire), 0, "an access used a reused frame");
            });
        });
        let (pte, young) = table.entry(0);
        unmap_and_free(&hz, pte, Some(young), PFN, &generation);
        reader.join().unwrap();
        assert_eq!(pte.load(Ordering::Relaxed), 0, "a cleared entry came back");
    });
}

/// The optimistic-read model (memory.rs, `pte_read_optimistic`, which
/// `Mapping::load_u64` runs on x86_64): slot 0 maps frame 5, whose word
/// holds the page's value 1. A remover unmaps it (clear, then bump the
/// unmap sequence unless `bump` is false), reuses the frame for another
/// page (a write section storing 2), then, ABA, gives the frame back to
/// the page (a write section storing 1) and maps it again at the same
/// slot with the same entry. A reader reads the word optimistically,
/// with no pin. The frame's word is a loom atomic, loaded relaxed: loom
/// cannot run the `mov` in asm that the real read is, and this is the
/// Rust code the asm stands for. Property: an accepted word is the page's
/// (1), never the other page's (2).
fn optimistic_read_model(bump: bool) {
    loom::model(move || {
        const PFN: u32 = 5;
        let table = Arc::new(PageTable::zeroed(1).expect("table"));
        table.pte(0).store(mk_pte(PFN), Ordering::Relaxed);
        let unmap_seq = Arc::new(AtomicU64::new(0));
        let frame_seq = Arc::new(AtomicU32::new(0));
        let frame: Arc<[AtomicU64; 1]> = Arc::new([AtomicU64::new(1)]);
        let (table2, unmap2, frame2) = (table.clone(), unmap_seq.clone(), frame.clone());
        let reader = thread::spawn(move || {
            let (pte, young) = table2.entry(0);
            if let Some(w) = pte_read_optimistic(&unmap2, pte, young, |pfn| {
                assert_eq!(pfn, PFN);
                frame2[0].load(Ordering::Relaxed)
            }) {
                assert_eq!(w, 1, "an optimistic read returned a reused frame's word");
            }
        });
        let pte = table.pte(0);
        // try_to_unmap (ptl held): clear, then bump (`Vma::pte_removed`).
        assert_eq!(pte_pfn(ptep_get_and_clear(pte)), Some(PFN));
        if bump {
            unmap_seq.fetch_add(1, Ordering::Release);
        }
        // Freed and reused: its new owner writes it in a write section
        // (whose release fence stands for the free list's hand-over too).
        write_section(&*frame_seq, &frame[..], |w| copy_to_words(w, 0, &2u64.to_ne_bytes()));
        // ABA: freed again, read back in for the page, mapped again.
        write_section(&*frame_seq, &frame[..], |w| copy_to_words(w, 0, &1u64.to_ne_bytes()));
        pte.store(mk_pte(PFN), Ordering::Release);
        reader.join().unwrap();
    });
}

// Goal (memory.rs, `Mapping::load_u64`'s optimistic read): a reader that
// takes no pin never returns a word of a frame that was reused under it,
// even when the frame comes back to the same slot (the entry's value the
// same before and after the read).
#[test]
fn optimistic_read_never_returns_a_reused_frames_word() {
    optimistic_read_model(true);
}

// Goal: the model has teeth: without the unmap sequence's bump, some
// interleaving accepts the reused frame's word (the entry alone cannot
// tell: it is the same value again).
#[test]
#[should_panic(expected = "an optimistic read returned a reused frame's word")]
fn optimistic_read_without_the_bump_fails() {
    optimistic_read_model(false);
}

// A two-slot page table (mmap.rs `PageTable`, its lines of entries and
// young bytes) over frames 5 and 6 for `pte_load_many`, whose "frames"
// are checked rather than read: a load from frame 5 + i asserts it was
// not reused (bit i of `generation` clear) and returns its pfn.
struct LoomView {
    table: PageTable,
    generation: AtomicU32,
}

impl PteView for LoomView {
    fn page_shift(&self) -> u32 {
        12
    }
    fn nr_pages(&self) -> u64 {
        2
    }
    unsafe fn entry(&self, slot: usize) -> (&AtomicPte, &AtomicU8) {
        self.table.entry(slot)
    }
    unsafe fn load_word(&self, pfn: u32, _offset: usize) -> u64 {
        let reused = self.generation.load(Ordering::Acquire) & (1 << (pfn - 5));
        assert_eq!(reused, 0, "a batched access used a reused frame");
        pfn as u64
    }
    fn prefetch_pte(&self, _page: u64) {}
    fn prefetch_young(&self, _page: u64) {}
    fn prefetch_word(&self, _pfn: u32, _offset: u64) {}
}

// Goal (memory.rs, `pte_load_many`, which `Mapping::load_u64_many` runs):
// the pipelined batch protocol (entries loaded `WORD_AHEAD` chunks ahead,
// further than this call's keys reach, so all of them
// before the first announcement; a chunk's
// frames announced over the last chunk's announcements behind one
// barrier, each re-checked and read, the slots cleared only at the end or
// before the slow path) never reads a reused frame while a remover clears
// one entry and frees its frame if no slot announces it. The keys read
// slot 0 (frame 5), then slot 1 twice, so the second chunk's
// announcement of frame 6 replaces the one of frame 5 in batch slot 0;
// and `clear_second` has the remover clear slot 1 instead, whose entry
// was loaded before the first chunk's announcements (a chunk ahead of
// its own or more; the second chunk is partial, so both of `pte_load_many`'s
// loops over a chunk's words run). Every word read is the
// frame its slot maps or went to the slow path, and the cleared entry
// never comes back.
fn batched_access_model(cleared: usize) {
    loom::model(move || {
        let hz = Arc::new(HazardTable::new());
        const PFNS: [u32; 2] = [5, 6];
        let view = Arc::new(LoomView { table: PageTable::zeroed(2).expect("table"), generation: AtomicU32::new(0) });
        for (slot, pfn) in PFNS.into_iter().enumerate() {
            view.table.pte(slot).store(mk_pte(pfn), Ordering::Relaxed);
        }
        let (hz2, view2) = (hz.clone(), view.clone());
        let reader = thread::spawn(move || {
            let pos = [0, 1 << 12, 1 << 12];
            let mut out = [0u64; 3];
            let slow = |p: u64| Ok(100 + (p >> 12));
            // SAFETY: every step of the protocol.
            unsafe { pte_load_many::<_, { LoadSteps::ALL }>(&*view2, &hz2, 1, &pos, &mut out, slow) }
                .expect("no error");
            for (&p, &w) in pos.iter().zip(&out) {
                let slot = (p >> 12) as usize;
                assert!(w == PFNS[slot] as u64 || w == 100 + slot as u64, "word {w} for slot {slot}");
            }
        });
        // The remover: as unmap_and_free, with its generation in the view.
        let old = ptep_get_and_clear(view.table.pte(cleared));
        assert_eq!(pte_pfn(old), Some(PFNS[cleared]));
        let mut pinned = Vec::new();
        hz.scan(&mut pinned);
        if pinned.binary_search(&PFNS[cleared]).is_err() {
            view.generation.store(1 << cleared, Ordering::Release);
        }
        reader.join().unwrap();
        assert_eq!(view.table.pte(cleared).load(Ordering::Relaxed), 0, "a cleared entry came back");
    });
}

#[test]
fn pte_clear_vs_batched_access_never_uses_a_reused_frame() {
    batched_access_model(0);
}

#[test]
fn pte_clear_vs_batched_access_entry_loaded_ahead() {
    batched_access_model(1);
}

// Goal (rmap.rs, try_to_unmap_anon against an access): swap-out replaces
// the present entry by a swap entry with one swap (AcqRel) instead of a
// clear; an access racing it either pinned the frame before (the remover's
// hazard scan then sees the pin and the frame is not reused) or fails its
// re-check (a swap entry maps no frame) and faults. The swap entry is
// never overwritten by the reader's young store.
#[test]
fn swap_entry_vs_access_never_uses_a_reused_frame() {
    loom::model(|| {
        let hz = Arc::new(HazardTable::new());
        const PFN: u32 = 6;
        const SLOT: u32 = 9;
        let pte = Arc::new(AtomicPte::new(mk_pte(PFN) | PTE_DIRTY));
        let young = Arc::new(AtomicU8::new(0));
        let generation = Arc::new(AtomicU32::new(0));
        let (hz2, pte2, young2, gen2) = (hz.clone(), pte.clone(), young.clone(), generation.clone());
        let reader = thread::spawn(move || {
            if let Some((pfn, h)) = pte_pin(&hz2, 1, &pte2, &young2) {
                assert_eq!(pfn, PFN);
                assert_eq!(gen2.load(Ordering::Acquire), 0, "an access used a reused frame");
                hz2.unpin(h);
            }
        });
        let old = pte.swap(swp_pte(SLOT), Ordering::AcqRel);
        assert_eq!(pte_pfn(old), Some(PFN));
        let mut pinned = Vec::new();
        hz.scan(&mut pinned);
        if pinned.binary_search(&PFN).is_err() {
            generation.store(1, Ordering::Release);
        }
        reader.join().unwrap();
        assert_eq!(pte_swap_slot(pte.load(Ordering::Relaxed)), Some(SLOT), "the swap entry was lost");
    });
}

// Goal (memory.rs, finish_fault against an access): an entry is published
// with a Release store after the page was made uptodate and referenced
// (the entry's reference); an access that finds the entry (Acquire) sees
// both, whatever the interleaving, so it never copies a page whose read
// has not completed nor pins a frame the entry does not hold.
#[test]
fn pte_install_publishes_the_page() {
    loom::model(|| {
        let hz = Arc::new(HazardTable::new());
        const PFN: u32 = 3;
        let pte = Arc::new(AtomicPte::new(0));
        let young = Arc::new(AtomicU8::new(0));
        // PG_uptodate and the refcount, as the fault leaves them.
        let uptodate = Arc::new(AtomicU32::new(0));
        let refcount = Arc::new(AtomicU32::new(1));
        let (hz2, pte2, young2, up2, rc2) =
            (hz.clone(), pte.clone(), young.clone(), uptodate.clone(), refcount.clone());
        let reader = thread::spawn(move || {
            if let Some((pfn, h)) = pte_pin(&hz2, 1, &pte2, &young2) {
                assert_eq!(pfn, PFN);
                assert_eq!(up2.load(Ordering::Relaxed), 1, "an access saw an entry before its page was uptodate");
                assert_eq!(rc2.load(Ordering::Relaxed), 2, "an access saw an entry before its reference");
                hz2.unpin(h);
            }
        });
        uptodate.store(1, Ordering::Release);
        refcount.fetch_add(1, Ordering::Relaxed);
        pte.store(mk_pte(PFN), Ordering::Release);
        reader.join().unwrap();
    });
}

/// The page lock's sleep and wake (page.rs: wait_while, unlock) at its
/// smallest: a waiter that found the page under a hazard pin (no
/// reference) decides to sleep on PG_locked while reclaim, holding the
/// lock, clears PG_swapcache and then drops the lock of the page it is
/// freeing. The waiter announces PG_waiters and re-checks PG_locked under
/// the wait table's bucket lock, and sleeps if it is still set; the
/// unlocker wakes the bucket if its clear of PG_locked saw PG_waiters.
/// The property: a waiter that went to sleep is woken. `atomic` false uses
/// the kernel's non-atomic __ClearPage stores, which are sound there only
/// because no waiter can be without a reference.
fn page_lock_wake_model(atomic: bool) {
    use crate::page::{PG_LOCKED, PG_SWAPCACHE, PG_WAITERS};
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Mutex;
    loom::model(move || {
        let flags = Arc::new(AtomicU32::new(PG_LOCKED | PG_SWAPCACHE));
        let bucket = Arc::new(Mutex::new(()));
        let slept = Arc::new(AtomicBool::new(false));
        let (f2, b2, s2) = (flags.clone(), bucket.clone(), slept.clone());
        let waiter = thread::spawn(move || {
            let _g = b2.lock().unwrap();
            if f2.fetch_or(PG_WAITERS, Ordering::AcqRel) & PG_LOCKED != 0 {
                s2.store(true, Ordering::Relaxed);
            }
        });
        let clear = |flag: u32| {
            if atomic {
                flags.fetch_and(!flag, Ordering::AcqRel)
            } else {
                let f = flags.load(Ordering::Relaxed);
                flags.store(f & !flag, Ordering::Relaxed);
                f
            }
        };
        clear(PG_SWAPCACHE);
        let woke = clear(PG_LOCKED) & PG_WAITERS != 0;
        if woke {
            // unpark_all takes the bucket lock: it wakes whoever slept.
            drop(bucket.lock().unwrap());
        }
        waiter.join().unwrap();
        assert!(!slept.load(Ordering::Relaxed) || woke, "a waiter slept and was never woken");
    });
}

// Goal: a waiter that sleeps on the lock of a page reclaim is freeing is
// always woken, whatever the interleaving.
#[test]
fn page_lock_wakes_a_hazard_pinned_waiter() {
    page_lock_wake_model(true);
}

// Goal: the model has teeth: with the kernel's non-atomic clears, some
// interleaving loses PG_waiters or the wake and the waiter sleeps for
// ever (the hang seen in anon_swap's threads_sharing_pages_never_lose_a_write).
#[test]
#[should_panic(expected = "a waiter slept and was never woken")]
fn page_lock_nonatomic_clear_loses_the_waiter() {
    page_lock_wake_model(false);
}

/// A page whose count just reached 0 has PG_lru cleared by its freer
/// (page.rs `clear_frozen`) while a thread holding only a hazard pin
/// takes and drops its lock (it will find the page gone). The property:
/// the locker's lock survives the clear, so its unlock finds PG_locked
/// set and the page ends with neither flag. `atomic` false uses the
/// kernel's __ClearPageLRU (a plain load and store).
fn clear_frozen_model(atomic: bool) {
    use crate::page::{Page, PG_LOCKED, PG_LRU};
    loom::model(move || {
        let page = Arc::new(Page::new());
        page.flags.store(PG_LRU, Ordering::Relaxed);
        let p2 = page.clone();
        let locker = thread::spawn(move || {
            // trylock_page, then unlock_page.
            if p2.flags.fetch_or(PG_LOCKED, Ordering::Acquire) & PG_LOCKED == 0 {
                let old = p2.flags.fetch_and(!PG_LOCKED, Ordering::Release);
                assert!(old & PG_LOCKED != 0, "unlock_page of an unlocked page");
            }
        });
        if atomic {
            page.clear_frozen(PG_LRU);
        } else {
            let f = page.flags.load(Ordering::Relaxed);
            page.flags.store(f & !PG_LRU, Ordering::Relaxed);
        }
        locker.join().unwrap();
        assert_eq!(page.flags.load(Ordering::Relaxed) & (PG_LOCKED | PG_LRU), 0);
    });
}

// Goal: the free path's clear of PG_lru never erases a hazard-pinned
// thread's page lock, whatever the interleaving.
#[test]
fn clear_frozen_keeps_a_pinned_lock() {
    clear_frozen_model(true);
}

// Goal: the model has teeth: the plain load and store loses the lock in
// some interleaving (anon_swap's dontneed_racing test, before the fix).
#[test]
#[should_panic]
fn clear_frozen_nonatomic_loses_the_lock() {
    clear_frozen_model(false);
}

// Goal: the multi-gen LRU's lockless marking (lru_gen.rs `inc_refs`, the
// kernel's folio_inc_refs) against a generation change under lru_lock
// (folio_inc_gen's set_mask_bits) and another flag set meanwhile: no
// other bit is ever lost or overwritten, the 2-bit count never overflows
// into other bits, and after the reset it counts at most the marks made
// after it.
#[test]
fn mglru_inc_refs_vs_inc_gen() {
    use crate::page::{LRU_GEN_MASK, LRU_GEN_PGOFF, LRU_REFS_FLAGS, LRU_REFS_MASK, LRU_REFS_PGOFF};
    use crate::page::{PG_DIRTY, PG_LRU, PG_REFERENCED, PG_WORKINGSET};
    loom::model(|| {
        let gen = |g: u32| (g + 1) << LRU_GEN_PGOFF;
        // In generation 1, accessed four times (refs field 2).
        let start = PG_LRU | gen(1) | PG_REFERENCED | PG_WORKINGSET | (2 << LRU_REFS_PGOFF);
        let flags = Arc::new(AtomicU32::new(start));
        let f2 = flags.clone();
        let marker = thread::spawn(move || {
            crate::lru_gen::inc_refs(&f2);
            crate::lru_gen::inc_refs(&f2);
        });
        // folio_inc_gen: to generation 2, the count reset.
        let _ = flags.fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
            Some((f & !(LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS)) | gen(2))
        });
        flags.fetch_or(PG_DIRTY, Ordering::AcqRel);
        marker.join().unwrap();
        let f = flags.load(Ordering::Acquire);
        assert_eq!(f & !(LRU_REFS_MASK | LRU_REFS_FLAGS), PG_LRU | gen(2) | PG_DIRTY, "a bit lost: {f:#x}");
        // A mark whose compare-and-swap lost to the reset retries on the
        // reset word and counts there, PG_referenced clear (the kernel's
        // do-while does the same): at most one count per mark.
        let refs = (f & LRU_REFS_MASK) >> LRU_REFS_PGOFF;
        assert!(refs <= 2, "flags {f:#x}");
    });
}

// Goal: the multi-gen LRU's count-full hint (lru_gen.rs
// `set_count_full_hint` / `clear_count_full_hint`): a hit that found the
// count full sets PAGE_HOT in the slot while reclaim resets the count
// (folio_inc_gen's flag RMW) and then clears the hint. Whatever the
// interleaving, no hint is left in the slot once both are done (a hint
// outliving the reset would make every later hit skip its mark), and the
// slot's entry is never changed otherwise.
#[test]
fn mglru_count_full_hint_never_outlives_reset() {
    use crate::lru_gen::{clear_count_full_hint, count_full, set_count_full_hint};
    use crate::page::{LRU_GEN_MASK, LRU_GEN_PGOFF, LRU_REFS_FLAGS, LRU_REFS_MASK};
    use crate::page::{PG_LRU, PG_REFERENCED, PG_WORKINGSET};
    use crate::pagetree::PAGE_HOT;
    loom::model(|| {
        let gen = |g: u32| (g + 1) << LRU_GEN_PGOFF;
        let full = PG_LRU | gen(1) | PG_REFERENCED | PG_WORKINGSET | LRU_REFS_MASK;
        assert!(count_full(full));
        let entry: usize = 0x2a;
        let flags = Arc::new(AtomicU32::new(full));
        let slot = Arc::new(AtomicUsize::new(entry));
        let (f2, s2) = (flags.clone(), slot.clone());
        let hit = thread::spawn(move || {
            // find_page_fast: the slot without the hint, the flags full.
            let e = s2.load(Ordering::Acquire);
            if e & PAGE_HOT == 0 && count_full(f2.load(Ordering::Acquire)) {
                set_count_full_hint(&*s2, e, &f2);
            }
        });
        // folio_inc_gen: to generation 2, the count reset; then the hint.
        let _ = flags.fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
            Some((f & !(LRU_GEN_MASK | LRU_REFS_MASK | LRU_REFS_FLAGS)) | gen(2))
        });
        clear_count_full_hint(&*slot);
        hit.join().unwrap();
        let e = slot.load(Ordering::Acquire);
        assert_eq!(e, entry, "a hint outlived the reset (or the entry changed): {e:#x}");
    });
}

// Goal: the duel's lossy sample ring (admission.rs) never hands the
// consumer a key twice nor one that was never pushed, whatever the
// interleaving of two producers and a consumer draining meanwhile; keys
// whose store lands after the drain passed their slot may be lost (it is a
// sample), the rest arrive.
#[test]
fn sample_ring_never_duplicates_or_invents() {
    loom::model(|| {
        let ring = Arc::new(crate::admission::SampleRing::new(4));
        let r2 = ring.clone();
        let p = thread::spawn(move || r2.push(11));
        ring.push(22);
        let mut got = Vec::new();
        ring.drain(|k| got.push(k));
        p.join().unwrap();
        ring.drain(|k| got.push(k));
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "a key drained twice: {got:?}");
        assert!(got.iter().all(|k| *k == 11 || *k == 22), "an invented key: {got:?}");
        assert!(got.contains(&22), "the consumer's own push was lost: {got:?}");
    });
}

// Goal: a counted plug-in's ceiling hint (policy.rs `AccessCounts`): a hit
// that found the count at its ceiling sets PAGE_HOT while the policy lowers
// the count and the engine then clears the hints of the frames it queued.
// Whatever the interleaving, no hint is left once both are done (a hint
// outliving the lowering would make every later hit skip the count), and
// the entry is never changed otherwise.
#[test]
fn policy_ceiling_hint_never_outlives_lowering() {
    use crate::lru_gen::SlotWord;
    use crate::pagetree::PAGE_HOT;
    use crate::policy::AccessCounts;
    loom::model(|| {
        let entry: usize = 0x2a;
        let counts = Arc::new(AccessCounts::new(1, 1));
        counts.set(0, 1);
        let slot = Arc::new(AtomicUsize::new(entry));
        let (c2, s2) = (counts.clone(), slot.clone());
        let hit = thread::spawn(move || {
            // find_page_fast: the slot without the hint.
            let e = s2.load(Ordering::Acquire);
            if e & PAGE_HOT == 0 {
                c2.set_ceiling_hint(0, &*s2, e);
            }
        });
        // The policy spares the page (CLOCK: its bit taken), then the
        // engine clears the hints of the frames the lowering queued.
        assert_eq!(counts.take(0), 1);
        for pfn in counts.take_cooled() {
            assert_eq!(pfn, 0);
            slot.cas(entry | PAGE_HOT, entry);
        }
        hit.join().unwrap();
        let e = slot.load(Ordering::Acquire);
        assert_eq!(e, entry, "a hint outlived the lowering (or the entry changed): {e:#x}");
        assert_eq!(counts.get(0), 0);
    });
}

// Goal: a plug-in's per-thread access ring (policy/access.rs) hands each
// entry over exactly once and intact, whatever the interleaving of its
// producer (which takes the ring itself when it fills) and a consumer
// taking it meanwhile (reclaim's drain): nothing lost, duplicated or torn.
// (Loom does not let a load see a later store, so the producer's acquire of
// `tail` is argued in the module's doc rather than checked here; `head`'s
// release is.)
#[test]
fn policy_access_ring_delivers_each_entry_once() {
    use crate::policy::access::{AccessRing, RING};
    use crate::policy::FolioRef;
    loom::model(|| {
        let ring = Arc::new(AccessRing::default());
        let r2 = ring.clone();
        let f = |i: u64| FolioRef { pfn: i as u32, order: 0, mapping: 7, index: 1000 + i };
        // One more than the ring holds: the producer takes it once.
        let n = RING as u64 + 1;
        let producer = thread::spawn(move || {
            let mut got = Vec::new();
            for i in 0..n {
                if let Some(t) = r2.push_owned(f(i)) {
                    got.extend_from_slice(t.folios());
                }
            }
            got
        });
        let mut got = Vec::new();
        if let Some(t) = ring.take() {
            got.extend_from_slice(t.folios());
        }
        got.extend(producer.join().unwrap());
        if let Some(t) = ring.take() {
            got.extend_from_slice(t.folios());
        }
        got.sort_by_key(|f| f.pfn);
        assert_eq!(got, (0..n).map(f).collect::<Vec<_>>());
    });
}

//! Splitting large page-cache folios (mm/huge_memory.c's
//! split_huge_page_to_list_to_order, for file folios, to order 0).
//!
//! A large folio is one head page descriptor standing for `2^order`
//! frames: its flags, lock, references, LRU place and tree entry are the
//! folio's; its tails carry only PG_tail and the head's pfn. Splitting
//! makes each frame a page of its own again, for a path that works on
//! single pages. As the kernel does, the split needs the folio to itself:
//! the caller holds the folio locked and one reference, and the refcount
//! is frozen at exactly the cache's and the caller's, so no one can take
//! a reference to the folio while its tails become pages; and no hit-path
//! reader may hold a hazard pin on any of its frames (checked as removal
//! checks: the head's slot frozen, then one scan), since such a reader
//! copies every frame of the folio under one pin. Under the
//! tree lock and lru_lock: each tail gets the head's state (uptodate,
//! referenced, active, workingset), its mapping and index, the cache's
//! reference and, if the head is on a list, a place on the same list (at
//! its head: the kernel puts tails right after the folio); the
//! tree's entry is split into order-0 entries, which readers see either
//! whole or in parts, never a gap (pagetree.rs). Then the head's count
//! is thawed. A dirty folio splits into dirty pages: its dirty accounting
//! already counts pages, and every part keeps the entry's dirty mark. Not
//! under writeback (as the kernel's, which returns -EBUSY): a request
//! never ends inside a folio. Deviation: not under a plug-in policy,
//! which holds folios of its own.

use crate::sync::atomic::Ordering;

use crate::filemap::Inode;
use crate::mm::Cache;
use crate::page::*;
use crate::pagetree::SLOT_FROZEN;
use crate::vmstat::Item;

/// The flags a split folio's tails take from its head `flags`: its state,
/// and, when the tails stay on its list (`on_list`) and that is a
/// generation of the multi-gen LRU, the generation and access count.
fn split_flags(flags: u32, on_list: bool) -> u32 {
    let gen_bits = if on_list && folio_lru_gen(flags).is_some() { LRU_GEN_MASK | LRU_REFS_MASK } else { 0 };
    flags
        & (PG_UPTODATE
            | PG_DIRTY
            | PG_SWAPBACKED
            | PG_REFERENCED
            | PG_ACTIVE
            | PG_WORKINGSET
            | PG_UNEVICTABLE
            | PG_WINDOW
            | gen_bits)
}

impl Cache {
    /// split_folio: split the large folio headed by `head`, locked by the
    /// caller, who holds one reference to it, into single pages. False
    /// when it cannot now (others hold references: one queued for the LRU
    /// is drained by `lru_add_drain`; under writeback; under a plug-in
    /// policy); a single page is already split.
    pub fn split_folio(&self, inode: &Inode, head: Pfn) -> bool {
        let page = self.page(head);
        let order = page.folio_order();
        if order == 0 {
            return true;
        }
        if page.test(PG_WRITEBACK) || self.policy.active() || page.mapping() != inode.id {
            return false;
        }
        let g = inode.tree_lock.lock();
        // The cache's reference and the caller's.
        if !page.freeze(2) {
            return false;
        }
        let index = page.index();
        // No hit-path reader may hold a frame of it either: a hazard pin on
        // any frame keeps the folio whole (a reader copies all of its
        // frames under one pin, and takes the head from the tail's link).
        // As removal does: the head's slot frozen first, so a reader that
        // pins from now on fails its re-check, then one scan of the pins.
        let Some(slot) = inode.tree.slot_locked(index, &g) else {
            page.unfreeze(2);
            return false;
        };
        let entry = slot.load(Ordering::Acquire);
        slot.store(entry | SLOT_FROZEN, Ordering::Release);
        let mut pinned = Vec::new();
        self.hazards.scan(&mut pinned);
        let at = pinned.partition_point(|&p| p < head);
        if pinned.get(at).is_some_and(|&p| p - head < 1 << order) {
            slot.store(entry, Ordering::Release);
            page.unfreeze(2);
            return false;
        }
        // The flags under lru_lock: the list (or generation) a listed
        // folio is on changes only under it, frozen or not (the multi-gen
        // LRU sorts and ages folios without a reference).
        let mut lru = self.lruvec.lock(&self.arena, &self.vm);
        let flags = page.flags();
        let kept = split_flags(flags, true);
        for i in 1..1u32 << order {
            let t = self.page(head + i);
            // The tails are the folio's, frozen with it: plain stores.
            t.lru_prev.store(NO_PFN, Ordering::Relaxed);
            t.lru_next.store(NO_PFN, Ordering::Relaxed);
            t.mapping.store(inode.id, Ordering::Relaxed);
            t.index.store(index + i as u64, Ordering::Relaxed);
            t.flags.store(kept, Ordering::Relaxed);
            // Release: the fields above are visible to whoever takes a
            // reference once the tree names the page.
            t.refcount.store(1, Ordering::Release);
        }
        page.flags.fetch_and(!FOLIO_ORDER_MASK, Ordering::Relaxed);
        if flags & PG_LRU != 0 {
            self.split_lru(&mut lru, flags, 1 << order, head + 1..head + (1 << order));
        }
        drop(lru);
        // The parts' entries are new words: the frozen head's slot thaws
        // as it is rewritten, last.
        inode.tree.split(index, 0, &g);
        drop(g);
        page.unfreeze(2);
        self.vm.inc(Item::thp_split_page);
        true
    }
}

impl Cache {
    /// The LRU side of a split, lru_lock held: the head, listed on the
    /// list (or generation) its `flags` (taken under lru_lock) name with
    /// `nr` pages, now counts one; each of `tails`, its flags already the
    /// folio's, joins that list (or generation).
    fn split_lru(&self, lru: &mut crate::lruvec::LruGuard<'_>, flags: u32, nr: u64, tails: impl Iterator<Item = Pfn>) {
        let gen = folio_lru_gen(flags);
        let typ = crate::lru_gen::folio_type(flags);
        match gen {
            Some(gen) => lru.gen_shrink_folio_len(gen, typ, nr - 1),
            None => lru.shrink_folio_len(crate::LruList::of_flags(flags), nr - 1),
        }
        for t in tails {
            self.page(t).set(PG_LRU, &self.vm);
            match gen {
                Some(gen) => lru.gen_add(t, gen, typ, false),
                None => self.lruvec_add_folio(lru, t),
            }
        }
    }

    /// split_folio for an anonymous folio, locked, the caller holding one
    /// reference: before swap-out (6.8's shrink_folio_list splits an mTHP
    /// folio it is about to swap; 6.10 swaps it whole), the folio isolated
    /// and `keep` given; or in place, on its LRU list, `keep` None (the
    /// deferred split of a folio a zap left partly mapped). The split is
    /// made under the region's ptl, where every reader of an entry's head
    /// looks (`get_mapped_folio`), with the count frozen at the caller's
    /// reference plus one per entry. Each frame still mapped becomes a
    /// page of its own with the folio's state, its entry's reference and
    /// mapcount; isolated, it also gets an isolation reference and goes to
    /// `keep`, which the caller puts back on the LRU; in place, it joins
    /// the folio's list (or generation). A frame no longer mapped is
    /// freed. False (nothing changed) while another reference is held, or
    /// in place when another thread has the folio off its list.
    pub(crate) fn split_anon_folio(
        &self,
        vma: &crate::mmap::Vma,
        page: &LockedPage<'_>,
        mut keep: Option<&mut Vec<Pfn>>,
    ) -> bool {
        let head = page.pfn();
        let nr = page.folio_nr_pages() as usize;
        let first = page.anon_slot();
        let mut unmapped = Vec::new();
        {
            let _ptl = vma.ptl.lock();
            let maps = |i: usize| {
                first + i < vma.nr_pages as usize
                    && crate::mmap::pte_pfn(vma.table.pte(first + i).load(Ordering::Relaxed)) == Some(head + i as Pfn)
            };
            let mapped: Vec<bool> = (0..nr).map(maps).collect();
            let entries = mapped.iter().filter(|&&m| m).count() as u32;
            if !page.freeze(1 + entries) {
                return false;
            }
            crate::mmdebug::vm_bug_on_page!(
                page.mapcount.load(Ordering::Relaxed) != entries,
                page,
                "an anonymous folio's mapcount is not its entries ({entries})"
            );
            // In place, the list (or generation) is read and changed under
            // lru_lock (ptl -> lru_lock).
            let mut lru = match keep {
                Some(_) => None,
                None => {
                    let lru = self.lruvec.lock(&self.arena, &self.vm);
                    if !page.test(PG_LRU) {
                        drop(lru);
                        page.unfreeze(1 + entries);
                        return false;
                    }
                    Some(lru)
                }
            };
            let flags = page.flags();
            let kept = split_flags(flags, lru.is_some());
            let mapping = page.mapping();
            let mut tails = Vec::new();
            for (i, &on) in mapped.iter().enumerate().skip(1) {
                let t = self.page(head + i as Pfn);
                // The tails are the folio's, frozen with it: plain stores.
                t.lru_prev.store(NO_PFN, Ordering::Relaxed);
                t.lru_next.store(NO_PFN, Ordering::Relaxed);
                if on {
                    t.mapping.store(mapping, Ordering::Relaxed);
                    t.index.store(crate::page::anon_index(first + i, None), Ordering::Relaxed);
                    t.flags.store(kept, Ordering::Relaxed);
                    t.mapcount.store(1, Ordering::Relaxed);
                    // The entry's reference, and an isolation one if the
                    // folio was isolated; Release: the fields above are
                    // visible to whoever takes one.
                    t.refcount.store(1 + keep.is_some() as u32, Ordering::Release);
                    tails.push(head + i as Pfn);
                } else {
                    t.flags.store(0, Ordering::Relaxed);
                    unmapped.push(head + i as Pfn);
                }
            }
            page.flags.fetch_and(!FOLIO_ORDER_MASK, Ordering::Relaxed);
            page.mapcount.store(mapped[0] as u32, Ordering::Relaxed);
            if !mapped[0] {
                page.set_anon(NO_MAPPING, page.index());
            }
            match (&mut keep, &mut lru) {
                (Some(keep), _) => keep.extend(tails),
                (None, Some(lru)) => self.split_lru(lru, flags, nr as u64, tails.into_iter()),
                (None, None) => {}
            }
            drop(lru);
            page.unfreeze(1 + mapped[0] as u32);
        }
        // Frames pinned by a reader of their old entry wait in the
        // pending frees (mm.rs).
        self.free_pages(&unmapped);
        self.vm.inc(Item::thp_split_page);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::{BackingDev, MemoryDev};
    use crate::{Config, LruList, Tunables};
    use std::sync::Arc;

    /// A cache of 512 frames (per-CPU lists drained) and a 64-page file
    /// of known bytes on a memory device.
    fn file() -> (Arc<Cache>, Arc<MemoryDev>, Arc<Inode>, Vec<u8>) {
        let c = Cache::new(Config {
            memory_bytes: 512 * 4096,
            tunables: Tunables { kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .unwrap();
        let dev = Arc::new(MemoryDev::new("t", 4096));
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
        let chunks: Vec<&[u8]> = data.chunks(4096).collect();
        dev.write_pages(0, &chunks, data.len() as u64).unwrap();
        let inode = c.iget("t", "t", || Ok(dev.clone() as Arc<dyn BackingDev>)).unwrap();
        inode.size.store(64 * 4096, Ordering::Release);
        c.arena.drain_all_pages();
        (c, dev, inode, data)
    }

    /// An order-`order` folio added at `index`, read in from the device in
    /// one run, uptodate, on the LRU; locked, with the allocation's
    /// reference. Its frames.
    fn read_folio<'c>(
        c: &'c Cache,
        dev: &MemoryDev,
        inode: &Inode,
        order: u32,
        index: u64,
    ) -> (Vec<Pfn>, LockedPage<'c>) {
        let (head, got) = c.arena.alloc_folio(order as usize).expect("a folio");
        assert_eq!(got as u32, order);
        let locked = c.filemap_add_folio(head, order, inode, index).expect("the range is free");
        let frames: Vec<Pfn> = (head..head + (1 << order)).collect();
        // SAFETY: the folio is locked, not uptodate, and held by us.
        let mut bufs: Vec<&mut [u8]> = frames.iter().map(|&p| unsafe { c.arena.frame_for_io_mut(p) }).collect();
        dev.read_pages(index * 4096, &mut bufs).unwrap();
        drop(bufs);
        c.page(head).set(PG_UPTODATE, &c.vm);
        c.lru_add_drain();
        (frames, locked)
    }

    // Goal: a large folio inserted at an aligned index holds its range in
    // the tree and counts its pages; split, every frame is a page of the
    // file with its own entry, the folio's state, a place on the folio's
    // LRU list and the right bytes; truncation then frees every frame.
    #[test]
    fn a_split_folio_is_its_pages() {
        let (c, dev, inode, data) = file();
        let free = c.nr_free_pages();
        let (frames, locked) = read_folio(&c, &dev, &inode, 4, 16);
        let head = frames[0];
        assert_eq!(inode.nrpages.load(Ordering::Relaxed), 16);
        let single = c.arena.alloc_folio(0).expect("a page").0;
        assert!(c.filemap_add_folio(single, 0, &inode, 20).is_none(), "inside the folio");
        c.put_page(single);
        for i in 16..32 {
            assert_eq!(crate::pagetree::entry_page_pfn(inode.tree.load(i), i), Some(head + (i - 16) as Pfn));
        }
        assert!(c.page(head).test(PG_LRU));
        assert!(c.split_folio(&inode, head), "the folio to itself");
        drop(locked);
        // The allocation's reference (the cache holds its own).
        c.put_page(head);
        for (k, &p) in frames.iter().enumerate() {
            let pg = c.page(p);
            assert!(!pg.is_tail() && pg.folio_order() == 0, "frame {k}");
            assert_eq!((pg.mapping(), pg.index()), (inode.id, 16 + k as u64), "frame {k}");
            assert!(pg.test(PG_UPTODATE) && pg.test(PG_LRU), "frame {k}: {}", pg.dump());
            assert_eq!(inode.tree.load(16 + k as u64), crate::pagetree::page_entry(p));
        }
        assert_eq!(c.lruvec.len(LruList::InactiveFile), 16);
        let mut buf = vec![0u8; 4096];
        for i in 16..32u64 {
            let pfn = c.find_get_page(&inode, i).expect("cached");
            c.memcpy_from_page(pfn, 0, &mut buf);
            assert_eq!(&buf[..], &data[i as usize * 4096..(i as usize + 1) * 4096], "page {i}");
            c.put_page(pfn);
        }
        c.truncate_inode_pages_range(&inode, 0, u64::MAX);
        c.flush_pending_frees();
        assert_eq!(inode.nrpages.load(Ordering::Relaxed), 0);
        assert_eq!(c.nr_free_pages(), free, "every frame back");
    }

    // Goal: readers taking references to the folio's pages through the
    // tree while it is split (the split retrying until their references
    // are gone) read the right bytes, and every page ends with the cache's
    // reference alone: none leaks, none is dropped twice; truncation then
    // frees every frame. The narrow interleaving where a lookup takes the
    // head's reference just after a split is loom's
    // (`split_racing_a_lookup_keeps_references`).
    #[test]
    fn readers_racing_a_split_keep_counts_and_bytes() {
        let (c, dev, inode, data) = file();
        let free = c.nr_free_pages();
        for round in 0..50 {
            let (frames, locked) = read_folio(&c, &dev, &inode, 5, 32);
            let head = frames[0];
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                for r in 0..2u64 {
                    let (c, inode, data, stop) = (&c, &inode, &data, &stop);
                    s.spawn(move || {
                        let mut buf = vec![0u8; 4096];
                        let mut i = 32 + (round + r * 7) % 32;
                        while !stop.load(Ordering::Relaxed) {
                            if let Some(pfn) = c.find_get_page(inode, i) {
                                c.memcpy_from_page(pfn, 0, &mut buf);
                                assert_eq!(&buf[..], &data[i as usize * 4096..][..4096], "page {i}");
                                c.put_page(pfn);
                            }
                            i = 32 + (i + 5) % 32;
                            std::thread::yield_now();
                        }
                    });
                }
                while !c.split_folio(&inode, head) {
                    std::thread::yield_now();
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
                stop.store(true, Ordering::Relaxed);
            });
            drop(locked);
            c.put_page(head);
            for &p in &frames {
                assert_eq!(c.page(p).refcount(), 1, "round {round}: frame {p} holds only the cache's reference");
            }
            c.truncate_inode_pages_range(&inode, 0, u64::MAX);
            c.flush_pending_frees();
            assert_eq!(c.nr_free_pages(), free, "round {round}: every frame back");
        }
    }
}

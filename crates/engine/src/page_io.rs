//! Swap I/O (mm/page_io.c): a run of swap-cache pages with consecutive
//! slots goes to the swap device in one transfer, as the block layer
//! merges the adjacent bios reclaim submits under its plug.

use crate::error::{Error, Result};
use crate::mm::Cache;
use crate::page::*;
use crate::vmstat::Item;

impl Cache {
    /// swap_writepage (mm/page_io.c) for a run of locked, dirty
    /// swap-cache folios whose slots are consecutive from `first` (a large
    /// folio's frames take consecutive slots of their own): one device
    /// write, as the block layer merges the adjacent bios reclaim submits
    /// under its plug (scan_swap_map gives pages reclaimed together
    /// adjacent slots). Synchronous: the folios stay locked across the
    /// write (so no writer can start, stable pages), under PG_writeback.
    /// On error each folio is dirty again with PG_error, as
    /// end_swap_bio_write leaves it: nothing is lost, reclaim tries again
    /// later. Returns whether the run was written.
    pub(crate) fn swap_writepages(&self, first: u32, folios: &[Pfn]) -> bool {
        let Some(si) = self.swap() else { return false };
        let mut frames: Vec<Pfn> = Vec::with_capacity(folios.len());
        for &pfn in folios {
            let page = self.page(pfn);
            debug_assert!(page.test(PG_LOCKED) && page.swap_slot() == Some(first + frames.len() as u32));
            page.clear(PG_DIRTY, &self.vm);
            page.set(PG_WRITEBACK, &self.vm);
            frames.extend(pfn..pfn + page.folio_nr_pages() as Pfn);
        }
        let ps = self.page_size() as u64;
        let bufs: Vec<&[u8]> = frames
            .iter()
            // SAFETY: each frame's folio is held (isolated by reclaim) and
            // under PG_writeback, set while we hold its lock, which we
            // keep until the write is done: no writer can store to it.
            .map(|&pfn| unsafe { self.arena.frame_for_io(pfn) })
            .collect();
        let res = si.dev.write_pages(first as u64 * ps, &bufs, si.pages as u64 * ps);
        drop(bufs);
        for &pfn in folios {
            let page = self.page(pfn);
            page.clear_and_wake(PG_WRITEBACK, &self.vm);
            if res.is_ok() {
                page.clear(PG_ERROR, &self.vm);
            } else {
                page.set(PG_DIRTY | PG_ERROR, &self.vm);
            }
        }
        match res {
            Ok(()) => {
                self.vm.add(Item::pswpout, frames.len() as u64);
                self.vm.add(Item::pgpgout, frames.len() as u64 * ps / 1024);
                let large = folios.iter().filter(|&&p| self.page(p).folio_order() > 0).count();
                self.vm.add(Item::mthp_swpout, large as u64);
                true
            }
            Err(_) => {
                self.vm.inc(Item::swap_write_errors);
                false
            }
        }
    }

    /// swap_readpage for a run of locked, not uptodate swap-cache pages of
    /// consecutive slots from `first`: one device read. Each page read is
    /// marked uptodate; on error none is.
    pub(crate) fn swap_read_pages(&self, first: u32, pages: &[Pfn]) -> Result<()> {
        let si = self.swap().ok_or_else(|| Error::InvalidArgument("swap is off".into()))?;
        let ps = self.page_size();
        let mut bufs: Vec<&mut [u8]> = pages
            .iter()
            // SAFETY: each page is locked, not uptodate and held by the
            // caller, which made it and inserted it in the swap cache
            // locked: nobody reads or writes it until it is unlocked,
            // after the slices are gone.
            .map(|&p| unsafe { self.arena.frame_for_io_mut(p) })
            .collect();
        let res = si.dev.read_pages(first as u64 * ps as u64, &mut bufs);
        drop(bufs);
        match res {
            Ok(n) => {
                self.zero_past(pages, n);
                for &pfn in pages {
                    self.page(pfn).set(PG_UPTODATE, &self.vm);
                }
                self.vm.add(Item::pswpin, pages.len() as u64);
                self.vm.add(Item::pgpgin, (pages.len() * ps / 1024) as u64);
                Ok(())
            }
            Err(e) => {
                for &pfn in pages {
                    self.page(pfn).set(PG_ERROR, &self.vm);
                }
                Err(Error::io(si.dev.name(), e))
            }
        }
    }
}

//! Page descriptors and their flags (include/linux/page-flags.h, mm_types.h).
//!
//! Every frame of the arena has one [`Page`] of 32 bytes (half a cache line;
//! the kernel's struct page is 64). All fields are atomics so that lock-free
//! readers may look at a page they do not own; who may *write* each field is
//! an invariant:
//!
//! - `flags`: atomic read-modify-writes by anyone holding a reference
//!   (SetPageX/ClearPageX), counted in `atomic_flag_rmw`; plain stores
//!   (`__SetPageX`) only while the page is invisible (just allocated, or
//!   frozen at refcount 0 by its remover).
//! - `refcount`: the page cache holds one reference while the page is in a
//!   mapping; pins, per-CPU batch entries and reclaim isolation hold one each.
//!   A page whose count is 0 is free or being freed; `get_page_unless_zero`
//!   never resurrects it.
//! - `mapping`, `index`: set before the page is inserted in a mapping's tree,
//!   cleared by the remover under the page lock, read by lock-free lookups
//!   only after they hold a reference and have re-checked the tree slot.
//! - `lru_prev`, `lru_next`: under `lru_lock` while PG_lru is set; the
//!   buddy free lists link free blocks through them (arena.rs), and `index`
//!   holds a free block's order.
//! - `mapcount`: page table entries mapping the page (the kernel's
//!   `_mapcount + 1`), changed under the page lock by rmap.rs's
//!   `page_add_file_rmap`/`page_remove_rmap` as entries are installed and
//!   cleared; read without it as a hint (`page_mapped`).
//!
//! Flag paragraphs (who sets, who clears):
//! - PG_locked: `lock_page` / `unlock_page`; held across I/O that fills a
//!   page, across truncation and reclaim of it, and by a write pin
//!   (`PageMut`) for its life. Every write of a frame's bytes is made under
//!   it (highmem.rs), which makes writers of a frame exclusive. Waiters sleep in a hashed
//!   wait table (parking_lot_core) and announce themselves with PG_waiters.
//! - PG_referenced: `mark_page_accessed` (first touch) and
//!   `init_page_accessed`; cleared on activation and by reclaim's
//!   `page_check_references`.
//! - PG_active: set on activation, cleared by `shrink_active_list`.
//! - PG_lru: set when the page is put on an LRU list, cleared when it is
//!   isolated or released. Off the LRU, the page is in a per-CPU add batch or
//!   isolated by reclaim.
//! - PG_uptodate: set when the page's bytes are valid (read in, or fully
//!   written); never cleared while the page is cached.
//! - PG_dirty: `set_page_dirty`; cleared by `clear_page_dirty_for_io` when
//!   writeback starts, and by truncation.
//! - PG_writeback: set for the duration of a page's write I/O; writers wait
//!   on it (stable pages).
//! - PG_reclaim: reclaim wants the page freed as soon as its writeback ends
//!   (`rotate_reclaimable_page`).
//! - PG_readahead: the asynchronous readahead marker.
//! - PG_error: the last I/O on the page failed.
//! - PG_workingset: the page was active once (workingset detection).
//! - PG_window, PG_probation: pcache's admission window (admission.rs).
//! - PG_swapbacked: an anonymous page (memory.rs `do_anonymous_page`,
//!   swap_state.rs for pages read from swap); set while the page is
//!   invisible and never cleared until it is freed. It puts the page on the
//!   anon lists.
//! - PG_swapcache: the page is in the swap cache (swap_state.rs
//!   `add_to_swap`, `read_swap_cache_async`), which holds one reference;
//!   its swap slot is the top half of `index`. Set and cleared under the
//!   page lock and the swap lock together.
//!
//! - PG_free, PG_buddy: the arena's (arena.rs), written only while the
//!   frame is free, under the lock of the list holding it; see there.
//!
//! - The multi-gen LRU's fields (lru_gen.rs; page-flags-layout.h's
//!   LRU_GEN_MASK and LRU_REFS_MASK): the page's generation + 1 (0: on no
//!   generation list), written only under `lru_lock` as the page moves
//!   between lists; and the access count beyond PG_referenced and
//!   PG_workingset, raised locklessly by `folio_inc_refs` (a
//!   compare-and-swap) and cleared when the page changes generation or is
//!   isolated unreferenced. Both change with atomic RMWs, since other
//!   flags change concurrently.
//!
//! Anonymous pages (PG_swapbacked) use `mapping` and `index` as the
//! kernel's use `page->mapping` (the anon_vma, tagged PAGE_MAPPING_ANON)
//! and `page->index`/`page->private`: `mapping` is
//! `PAGE_MAPPING_ANON | id` of the region mapping it (`NO_MAPPING` for a
//! page only in the swap cache), `index` holds the page's slot in the
//! region in its low 32 bits and, while PG_swapcache, its swap slot + 1
//! in its high 32 bits. Both change only under the page lock.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::vmstat::{Item, VmCounters};

/// A page frame number: the index of a frame in the arena.
pub type Pfn = u32;
/// "No page" in links and slots.
pub const NO_PFN: Pfn = u32::MAX;
/// "No mapping" in `Page::mapping`.
pub const NO_MAPPING: u32 = u32::MAX;

pub const PG_LOCKED: u32 = 1 << 0;
pub const PG_REFERENCED: u32 = 1 << 1;
pub const PG_UPTODATE: u32 = 1 << 2;
pub const PG_DIRTY: u32 = 1 << 3;
pub const PG_LRU: u32 = 1 << 4;
pub const PG_ACTIVE: u32 = 1 << 5;
pub const PG_WAITERS: u32 = 1 << 6;
pub const PG_WRITEBACK: u32 = 1 << 7;
pub const PG_RECLAIM: u32 = 1 << 8;
pub const PG_ERROR: u32 = 1 << 9;
pub const PG_READAHEAD: u32 = 1 << 10;
pub const PG_WORKINGSET: u32 = 1 << 11;
pub const PG_SWAPBACKED: u32 = 1 << 12;
pub const PG_UNEVICTABLE: u32 = 1 << 13;
/// On the admission window list (admission.rs).
pub const PG_WINDOW: u32 = 1 << 14;
/// Lost the admission contest: at the inactive tail, next to be reclaimed;
/// its shadow entry will say so (admission.rs).
pub const PG_PROBATION: u32 = 1 << 15;
/// In the swap cache (swap_state.rs).
pub const PG_SWAPCACHE: u32 = 1 << 16;
/// Free in the arena: on a per-CPU list or inside a free block of the
/// buddy lists (arena.rs). Every frame of a free block has it, so a second
/// free of any of them is caught without searching the lists.
pub const PG_FREE: u32 = 1 << 17;
/// The first frame of a free block on the buddy lists, whose order is in
/// `index` (the kernel's PageBuddy and buddy_order).
pub const PG_BUDDY: u32 = 1 << 18;
/// A tail page of a large folio (PageTail): every frame of the folio but
/// the first, whose `lru_prev` names the head (the kernel's
/// compound_head). Set while the folio is invisible, cleared when it is
/// freed or split.
pub const PG_TAIL: u32 = 1 << 19;
/// A large folio's order, on its head page (the kernel keeps it in the
/// first tail's `_flags_1`; here the head's flags have the room): 0 for a
/// single page.
pub const FOLIO_ORDER_PGOFF: u32 = 20;
pub const FOLIO_ORDER_WIDTH: u32 = 4;
pub const FOLIO_ORDER_MASK: u32 = ((1 << FOLIO_ORDER_WIDTH) - 1) << FOLIO_ORDER_PGOFF;

const _: () = assert!(FOLIO_ORDER_MASK & (PG_TAIL | PG_BUDDY | LRU_GEN_MASK | LRU_REFS_MASK) == 0);

/// The multi-gen LRU's generation field: gen + 1, 0 when the page is on no
/// generation list (LRU_GEN_PGOFF, LRU_GEN_WIDTH = order_base_2(MAX_NR_GENS
/// + 1) = 3 bits).
pub const LRU_GEN_PGOFF: u32 = 24;
pub const LRU_GEN_WIDTH: u32 = 3;
pub const LRU_GEN_MASK: u32 = ((1 << LRU_GEN_WIDTH) - 1) << LRU_GEN_PGOFF;
/// Accesses through file descriptors beyond PG_referenced and
/// PG_workingset (LRU_REFS_WIDTH = MAX_NR_TIERS - 2 = 2 bits).
pub const LRU_REFS_PGOFF: u32 = LRU_GEN_PGOFF + LRU_GEN_WIDTH;
pub const LRU_REFS_WIDTH: u32 = 2;
pub const LRU_REFS_MASK: u32 = ((1 << LRU_REFS_WIDTH) - 1) << LRU_REFS_PGOFF;
/// LRU_REFS_FLAGS: the two flags that count the first accesses.
pub const LRU_REFS_FLAGS: u32 = PG_REFERENCED | PG_WORKINGSET;

/// folio_lru_gen: the generation a page's flags name, if any.
#[inline]
pub fn folio_lru_gen(flags: u32) -> Option<usize> {
    match (flags & LRU_GEN_MASK) >> LRU_GEN_PGOFF {
        0 => None,
        g => Some(g as usize - 1),
    }
}

/// folio_lru_refs: accesses beyond the first, N - 1 for N > 1 accesses
/// ("N=0,1 both map to the first tier"): the counter plus PG_workingset.
#[inline]
pub fn folio_lru_refs(flags: u32) -> usize {
    ((flags & LRU_REFS_MASK) >> LRU_REFS_PGOFF) as usize + (flags & PG_WORKINGSET != 0) as usize
}

/// `Page::mapping` of an anonymous page: this bit and the region's id
/// (PAGE_MAPPING_ANON; inode ids stay below it).
pub const PAGE_MAPPING_ANON: u32 = 1 << 31;

/// An anonymous page's `index`: its slot in the region, and its swap slot
/// while it is in the swap cache.
#[inline]
pub fn anon_index(slot: usize, swap: Option<u32>) -> u64 {
    ((swap.map_or(0, |s| s as u64 + 1)) << 32) | slot as u64
}

/// One frame's descriptor.
#[repr(C, align(32))]
pub struct Page {
    pub(crate) flags: AtomicU32,
    pub(crate) refcount: AtomicU32,
    pub(crate) mapping: AtomicU32,
    pub(crate) lru_prev: AtomicU32,
    pub(crate) lru_next: AtomicU32,
    pub(crate) mapcount: AtomicU32,
    pub(crate) index: AtomicU64,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Page>() <= 64);

impl Page {
    pub(crate) fn new() -> Page {
        Page {
            flags: AtomicU32::new(0),
            refcount: AtomicU32::new(0),
            mapping: AtomicU32::new(NO_MAPPING),
            lru_prev: AtomicU32::new(NO_PFN),
            lru_next: AtomicU32::new(NO_PFN),
            mapcount: AtomicU32::new(0),
            index: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Acquire)
    }

    #[inline]
    pub fn test(&self, flag: u32) -> bool {
        self.flags() & flag != 0
    }

    /// SetPageX: an atomic read-modify-write.
    #[inline]
    pub fn set(&self, flag: u32, vm: &VmCounters) {
        vm.inc(Item::atomic_flag_rmw);
        self.flags.fetch_or(flag, Ordering::AcqRel);
    }

    /// ClearPageX: an atomic read-modify-write.
    #[inline]
    pub fn clear(&self, flag: u32, vm: &VmCounters) {
        vm.inc(Item::atomic_flag_rmw);
        self.flags.fetch_and(!flag, Ordering::AcqRel);
    }

    /// TestSetPageX: returns whether the flag was already set.
    #[inline]
    pub fn test_set(&self, flag: u32, vm: &VmCounters) -> bool {
        vm.inc(Item::atomic_flag_rmw);
        self.flags.fetch_or(flag, Ordering::AcqRel) & flag != 0
    }

    /// TestClearPageX: returns whether the flag was set.
    #[inline]
    pub fn test_clear(&self, flag: u32, vm: &VmCounters) -> bool {
        vm.inc(Item::atomic_flag_rmw);
        self.flags.fetch_and(!flag, Ordering::AcqRel) & flag != 0
    }

    /// set_mask_bits: clear `mask` and set `bits` in one atomic RMW;
    /// returns the old flags.
    #[inline]
    pub fn set_mask_bits(&self, mask: u32, bits: u32, vm: &VmCounters) -> u32 {
        vm.inc(Item::atomic_flag_rmw);
        let r = self.flags.fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| Some((f & !mask) | bits));
        // The closure always returns Some.
        r.unwrap_or_else(|f| f)
    }

    /// __SetPageX: a plain load and store, for a page nobody else can see.
    #[inline]
    pub fn set_nonatomic(&self, flag: u32) {
        let f = self.flags.load(Ordering::Relaxed);
        self.flags.store(f | flag, Ordering::Relaxed);
    }

    /// __ClearPageX, for a page nobody else can see.
    #[inline]
    pub fn clear_nonatomic(&self, flag: u32) {
        let f = self.flags.load(Ordering::Relaxed);
        self.flags.store(f & !flag, Ordering::Relaxed);
    }

    /// __ClearPageX on a page whose count just reached 0 (the free path's
    /// PG_lru). Unlike the kernel, a thread holding only a hazard pin may
    /// still take and drop the page's lock meanwhile (it then finds the
    /// page gone), so a plain load and store could erase its PG_locked:
    /// one atomic AND keeps it. Not counted as `atomic_flag_rmw`, which
    /// counts the kernel's atomic flag operations.
    #[inline]
    pub fn clear_frozen(&self, flag: u32) {
        crate::mmdebug::vm_bug_on_page!(self.refcount() != 0, self, "clear_frozen on a page in use");
        self.flags.fetch_and(!flag, Ordering::Relaxed);
    }

    /// folio_order: the order of the folio this page heads (0 for a
    /// single page or a tail).
    #[inline]
    pub fn folio_order(&self) -> u32 {
        (self.flags.load(Ordering::Relaxed) & FOLIO_ORDER_MASK) >> FOLIO_ORDER_PGOFF
    }

    /// folio_nr_pages: the pages of the folio this page heads (1 for a
    /// single page or a tail).
    #[inline]
    pub fn folio_nr_pages(&self) -> u64 {
        1 << self.folio_order()
    }

    /// PageTail.
    #[inline]
    pub fn is_tail(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & PG_TAIL != 0
    }

    #[inline]
    pub fn refcount(&self) -> u32 {
        self.refcount.load(Ordering::Acquire)
    }

    /// get_page: the caller already holds a reference.
    #[inline]
    pub fn get(&self) {
        let old = self.refcount.fetch_add(1, Ordering::Relaxed);
        crate::mmdebug::vm_bug_on_page!(old == 0, self, "get_page on a free page");
    }

    /// get_page_unless_zero: take a reference unless the page is free or
    /// frozen. Pairs with `freeze`: a frozen page is never resurrected.
    #[inline]
    pub fn get_unless_zero(&self) -> bool {
        let mut v = self.refcount.load(Ordering::Relaxed);
        loop {
            if v == 0 {
                return false;
            }
            match self.refcount.compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(cur) => v = cur,
            }
        }
    }

    /// put_page_testzero: drop a reference; true if it was the last.
    #[inline]
    pub fn put_testzero(&self) -> bool {
        let old = self.refcount.fetch_sub(1, Ordering::Release);
        crate::mmdebug::vm_bug_on_page!(old == 0, self, "put_page on a free page");
        if old == 1 {
            crate::sync::atomic::fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// folio_ref_add: `nr` more references, the caller holding one (the
    /// swap cache holds one per slot of a folio).
    #[inline]
    pub fn folio_ref_add(&self, nr: u32) {
        let old = self.refcount.fetch_add(nr, Ordering::Relaxed);
        crate::mmdebug::vm_bug_on_page!(old == 0, self, "folio_ref_add on a free page");
    }

    /// folio_ref_sub_and_test: drop `nr` references; true if they were
    /// the last.
    #[inline]
    pub fn folio_ref_sub_and_test(&self, nr: u32) -> bool {
        let old = self.refcount.fetch_sub(nr, Ordering::Release);
        crate::mmdebug::vm_bug_on_page!(old < nr, self, "folio_ref_sub below zero");
        if old == nr {
            crate::sync::atomic::fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// page_ref_freeze: drop the count from exactly `expected` to 0, so no
    /// lookup can take a new reference.
    #[inline]
    pub fn freeze(&self, expected: u32) -> bool {
        self.refcount.compare_exchange(expected, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// page_ref_unfreeze.
    #[inline]
    pub fn unfreeze(&self, count: u32) {
        self.refcount.store(count, Ordering::Release);
    }

    /// page_mapped: whether some mapping's page table maps the page. A
    /// hint without the page lock.
    #[inline]
    pub fn mapped(&self) -> bool {
        self.mapcount.load(Ordering::Relaxed) != 0
    }

    #[inline]
    pub fn mapping(&self) -> u32 {
        self.mapping.load(Ordering::Acquire)
    }

    #[inline]
    pub fn index(&self) -> u64 {
        self.index.load(Ordering::Acquire)
    }

    /// PageAnon: mapped by an anonymous region (not a swap-cache-only page).
    #[inline]
    pub fn anon(&self) -> bool {
        let m = self.mapping();
        m != NO_MAPPING && m & PAGE_MAPPING_ANON != 0
    }

    /// An anonymous page's slot in its region.
    #[inline]
    pub fn anon_slot(&self) -> usize {
        (self.index() & 0xffff_ffff) as usize
    }

    /// page_private of a swap-cache page: its swap slot.
    #[inline]
    pub fn swap_slot(&self) -> Option<u32> {
        match self.index() >> 32 {
            0 => None,
            s => Some((s - 1) as u32),
        }
    }

    /// Set `mapping` and `index` of a page the caller holds locked.
    #[inline]
    pub(crate) fn set_anon(&self, mapping: u32, index: u64) {
        self.mapping.store(mapping, Ordering::Release);
        self.index.store(index, Ordering::Release);
    }

    // ---- the page lock and waits ----

    /// The key of this page in the hashed wait table.
    fn wait_key(&self) -> usize {
        self as *const Page as usize
    }

    /// trylock_page.
    #[inline]
    fn trylock(&self, vm: &VmCounters) -> bool {
        !self.test_set(PG_LOCKED, vm)
    }

    /// lock_page: sleep until the lock is ours.
    fn lock(&self, vm: &VmCounters) {
        while !self.trylock(vm) {
            self.wait_while(PG_LOCKED);
        }
    }

    /// unlock_page: release and wake anyone waiting on this page.
    fn unlock(&self, vm: &VmCounters) {
        vm.inc(Item::atomic_flag_rmw);
        let old = self.flags.fetch_and(!PG_LOCKED, Ordering::Release);
        crate::mmdebug::vm_bug_on_page!(old & PG_LOCKED == 0, self, "unlock_page of an unlocked page");
        if old & PG_WAITERS != 0 {
            self.wake_waiters();
        }
    }

    /// folio_end_read: the end of a read of this locked page, in one atomic
    /// step: PG_uptodate set and PG_error cleared (`ok`), or PG_error set,
    /// and PG_locked cleared; then the waiters woken.
    pub fn end_read(&self, ok: bool, vm: &VmCounters) {
        vm.inc(Item::atomic_flag_rmw);
        let (set, clear) = if ok { (PG_UPTODATE, PG_ERROR | PG_LOCKED) } else { (PG_ERROR, PG_LOCKED) };
        let old = self.flags.fetch_update(Ordering::Release, Ordering::Relaxed, |f| Some((f | set) & !clear));
        // The closure always returns Some.
        let old = old.unwrap_or_else(|f| f);
        crate::mmdebug::vm_bug_on_page!(old & PG_LOCKED == 0, self, "end_read of an unlocked page");
        if old & PG_WAITERS != 0 {
            self.wake_waiters();
        }
    }

    /// Clear `flag` (PG_writeback) and wake waiters: end of a waited-on state.
    pub fn clear_and_wake(&self, flag: u32, vm: &VmCounters) -> u32 {
        vm.inc(Item::atomic_flag_rmw);
        let old = self.flags.fetch_and(!flag, Ordering::AcqRel);
        if old & PG_WAITERS != 0 {
            self.wake_waiters();
        }
        old
    }

    fn wake_waiters(&self) {
        // Every waiter re-checks its condition and re-announces itself, so
        // clearing PG_waiters before waking all is safe.
        self.flags.fetch_and(!PG_WAITERS, Ordering::AcqRel);
        // SAFETY: unpark_all only reads the key; any usize is a valid key.
        unsafe {
            parking_lot_core::unpark_all(self.wait_key(), parking_lot_core::DEFAULT_UNPARK_TOKEN);
        }
    }

    /// Sleep while any bit of `mask` is set. Returns at once if none is.
    pub fn wait_while(&self, mask: u32) {
        while self.flags() & mask != 0 {
            self.park_while(mask, None);
        }
    }

    /// One sleep while a bit of `mask` is set: until woken, or until
    /// `timeout` has passed (None: no limit).
    fn park_while(&self, mask: u32, timeout: Option<std::time::Duration>) {
        let validate = || {
            // Announce ourselves, then re-check under the bucket lock; a
            // waker clears the bit before it looks at PG_waiters.
            let f = self.flags.fetch_or(PG_WAITERS, Ordering::AcqRel);
            f & mask != 0
        };
        // SAFETY: the key is this page's address, stable for the arena's
        // life; the closures do not panic and do not call into
        // parking_lot_core.
        unsafe {
            parking_lot_core::park(
                self.wait_key(),
                validate,
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                timeout.map(|t| std::time::Instant::now() + t),
            );
        }
    }

    /// wait_on_page_writeback.
    #[inline]
    pub fn wait_on_writeback(&self) {
        if self.test(PG_WRITEBACK) {
            self.wait_while(PG_WRITEBACK);
        }
    }

    /// folio_wait_writeback_killable: as `wait_on_writeback`, but the
    /// wait ends when the thread is interrupted (signal.rs), which returns
    /// false. For a writer's stable-page wait: the transfer it waits for
    /// may never end (a frozen or hung store), and a signalled writer must
    /// get its call back, as it does from the dirty throttle.
    pub fn wait_on_writeback_killable(&self) -> bool {
        while self.test(PG_WRITEBACK) {
            if crate::signal::signal_pending() {
                return false;
            }
            // The flag is polled at the engine's interruptible period: an
            // interrupt does not wake the page's waiters.
            self.park_while(PG_WRITEBACK, Some(std::time::Duration::from_millis(10)));
        }
        true
    }

    /// Reset a page that is being freed (refcount 0, off every list).
    pub(crate) fn reset_for_free(&self) {
        crate::mmdebug::vm_bug_on_page!(self.mapcount.load(Ordering::Relaxed) != 0, self, "freeing a mapped page");
        self.flags.store(0, Ordering::Relaxed);
        self.mapping.store(NO_MAPPING, Ordering::Relaxed);
        self.lru_prev.store(NO_PFN, Ordering::Relaxed);
        self.index.store(0, Ordering::Relaxed);
    }
}

// ---- consistency checks and dump_page (mm/debug.c) ----

/// Flag combinations no page may have, whatever else it is doing (the
/// kernel's PageFlags rules, checked where it checks them: list add and
/// delete, free): PG_active with PG_unevictable (an unevictable page is on
/// neither the active nor the inactive list), PG_swapcache without
/// PG_swapbacked (only anonymous pages enter the swap cache, as
/// `PageSwapCache` tests both). PG_writeback without PG_locked is fine:
/// the lock is dropped once writeback has started.
impl Page {
    #[inline]
    #[track_caller]
    pub fn check_flags(&self, what: &str) {
        if !crate::mmdebug::DEBUG_VM {
            return;
        }
        let f = self.flags();
        crate::mmdebug::vm_bug_on_page!(
            f & PG_ACTIVE != 0 && f & PG_UNEVICTABLE != 0,
            self,
            "{what}: active and unevictable"
        );
        crate::mmdebug::vm_bug_on_page!(
            f & PG_SWAPCACHE != 0 && f & PG_SWAPBACKED == 0,
            self,
            "{what}: swap cache but not anonymous"
        );
    }

    /// The page's state as `dump_page` prints it (mmdebug.rs's
    /// `vm_bug_on_page!` shows it).
    pub fn dump(&self) -> DumpPage<'_> {
        DumpPage(self)
    }
}

const FLAG_NAMES: [(u32, &str); 20] = [
    (PG_LOCKED, "locked"),
    (PG_REFERENCED, "referenced"),
    (PG_UPTODATE, "uptodate"),
    (PG_DIRTY, "dirty"),
    (PG_LRU, "lru"),
    (PG_ACTIVE, "active"),
    (PG_WAITERS, "waiters"),
    (PG_WRITEBACK, "writeback"),
    (PG_RECLAIM, "reclaim"),
    (PG_ERROR, "error"),
    (PG_READAHEAD, "readahead"),
    (PG_WORKINGSET, "workingset"),
    (PG_SWAPBACKED, "swapbacked"),
    (PG_UNEVICTABLE, "unevictable"),
    (PG_WINDOW, "window"),
    (PG_PROBATION, "probation"),
    (PG_SWAPCACHE, "swapcache"),
    (PG_FREE, "free"),
    (PG_BUDDY, "buddy"),
    (PG_TAIL, "tail"),
];

/// A page's state as `dump_page` shows it.
pub struct DumpPage<'a>(pub &'a Page);

impl std::fmt::Display for DumpPage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.0;
        let flags = p.flags();
        let names: Vec<&str> = FLAG_NAMES.iter().filter(|(b, _)| flags & b != 0).map(|&(_, n)| n).collect();
        write!(
            f,
            "page refcount:{} mapcount:{} mapping:{:#x} index:{:#x} flags: {:#x}({})",
            p.refcount(),
            p.mapcount.load(crate::sync::atomic::Ordering::Relaxed),
            p.mapping(),
            p.index(),
            flags,
            names.join("|")
        )
    }
}

/// A page whose lock this holder took: "the caller holds the page lock"
/// as a type. Functions that need PG_locked take `&LockedPage`; dropping
/// it is unlock_page. Where the lock's release passes to someone else (a
/// read's completion unlocks the page, as the kernel's end_page_read; a
/// batch frozen for removal is unlocked after the hazard check),
/// `into_raw` gives the lock up without unlocking and the new owner
/// unlocks with `Page::unlock` or `Page::end_read`. No atomic beyond the
/// lock's own: the guard is the page, its pfn and the counters.
#[must_use = "dropping a LockedPage unlocks the page"]
pub struct LockedPage<'a> {
    page: &'a Page,
    pfn: Pfn,
    vm: &'a VmCounters,
}

impl<'a> LockedPage<'a> {
    /// lock_page: sleep until the lock is ours.
    pub fn lock(page: &'a Page, pfn: Pfn, vm: &'a VmCounters) -> LockedPage<'a> {
        page.lock(vm);
        LockedPage { page, pfn, vm }
    }

    /// trylock_page.
    #[inline]
    pub fn trylock(page: &'a Page, pfn: Pfn, vm: &'a VmCounters) -> Option<LockedPage<'a>> {
        // Built only on success: a guard made for a failed trylock would
        // unlock someone else's lock when dropped (so not `then_some`).
        if page.trylock(vm) {
            Some(LockedPage { page, pfn, vm })
        } else {
            None
        }
    }

    /// Adopt a lock set another way: a new page made locked before anyone
    /// can see it (`__SetPageLocked` in add_to_page_cache), or a lock a
    /// callee handed over as a bare pfn (`into_raw`, `FGP_LOCK`).
    pub(crate) fn adopt(page: &'a Page, pfn: Pfn, vm: &'a VmCounters) -> LockedPage<'a> {
        crate::mmdebug::vm_bug_on_page!(!page.test(PG_LOCKED), page, "adopting an unlocked page");
        LockedPage { page, pfn, vm }
    }

    #[inline]
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }

    #[inline]
    pub fn page(&self) -> &'a Page {
        self.page
    }

    /// Keep the page locked and hand the unlock to whoever takes the pfn.
    pub fn into_raw(self) -> Pfn {
        let pfn = self.pfn;
        std::mem::forget(self);
        pfn
    }

    /// unlock_page, where the point of release should be visible.
    pub fn unlock(self) {}
}

impl std::ops::Deref for LockedPage<'_> {
    type Target = Page;

    fn deref(&self) -> &Page {
        self.page
    }
}

impl Drop for LockedPage<'_> {
    fn drop(&mut self) {
        self.page.unlock(self.vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a flag combination the kernel forbids is caught, with the
    // page's state, and a legal one passes.
    #[test]
    fn legal_flags_pass() {
        let page = Page::new();
        page.set_nonatomic(PG_ACTIVE | PG_REFERENCED | PG_LRU);
        page.check_flags("a legal page");
    }

    #[test]
    #[should_panic(expected = "active and unevictable")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn active_and_unevictable_is_caught() {
        let page = Page::new();
        page.set_nonatomic(PG_ACTIVE | PG_UNEVICTABLE);
        page.check_flags("lru add");
    }

    #[test]
    #[should_panic(expected = "swap cache but not anonymous")]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn swapcache_on_a_file_page_is_caught() {
        let page = Page::new();
        page.set_nonatomic(PG_SWAPCACHE);
        page.check_flags("free");
    }

    // Goal: the guard holds PG_locked for its life (a trylock fails
    // meanwhile), dropping it unlocks, and `into_raw` keeps the lock for
    // whoever unlocks next.
    #[test]
    fn locked_page_unlocks_on_drop_unless_handed_on() {
        let vm = VmCounters::new();
        let page = Page::new();
        let guard = LockedPage::lock(&page, 7, &vm);
        assert_eq!(guard.pfn(), 7);
        assert!(page.test(PG_LOCKED));
        assert!(LockedPage::trylock(&page, 7, &vm).is_none(), "a second lock while the guard lives");
        drop(guard);
        assert!(!page.test(PG_LOCKED), "dropping the guard unlocks");
        let guard = LockedPage::trylock(&page, 7, &vm).expect("free again");
        assert_eq!(guard.into_raw(), 7);
        assert!(page.test(PG_LOCKED), "into_raw keeps the lock");
        page.unlock(&vm);
        assert!(!page.test(PG_LOCKED));
    }
}

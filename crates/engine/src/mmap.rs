//! Mappings of files (mm/mmap.c, mm/madvise.c, mm/msync.c): the VMA, its
//! page table, madvise and msync.
//!
//! A [`Mapping`] is a VMA: a page range of one file, read-only or
//! writable, maybe VM_EXEC. It has its own page table, a flat array of
//! entries indexed by the page's offset in the mapping (no levels: a
//! mapping of N pages costs 5N bytes up front), a `PageTable`:
//!
//! ```text
//!   ptes[i]:  | SWAP | DIRTY | WRITE | PRESENT | pfn or swap slot (28) |   (AtomicU32)
//!   young[i]: 0 or 1                                             (AtomicU8)
//! ```
//!
//! The accessed ("young") bit lives apart from the entry. An access sets it
//! with a plain store, as the MMU sets the PTE accessed bit; were it a bit
//! of the entry, that store would write the whole word back and could
//! resurrect an entry `try_to_unmap` cleared meanwhile. As a byte of its
//! own, a racing store can at worst leave a stale young byte behind a
//! cleared entry: a lost or extra reference, never a corrupt mapping.
//! (Entries and young bytes never overlap: Rust forbids racing atomics of
//! different sizes on the same bytes.) The young bytes are an array of
//! their own rather than beside their entries in each cache line: that
//! layout was tried and measured slower on the batched
//! access, whose pipeline prefetches both lines anyway (docs/history/decisions.md).
//!
//! Who touches what (the invariants of ARCHITECTURE.md, "Mapped pages"):
//!
//! - An entry that maps a page is installed, changed and cleared only by a
//!   thread holding that page's lock (PG_locked) and the mapping's `ptl`
//!   (the page table lock). Lock order: page lock → `inode.i_mmap` →
//!   `ptl`. A present entry holds one page reference and one mapcount.
//! - An access (memory.rs `follow_pte`) takes no lock: it loads the entry,
//!   pins the frame in its hazard slot, re-loads the entry and sets the
//!   young byte only if it is 0 (so a hot page's cache line is not dirtied
//!   on every access).
//! - Reclaim test-and-clears young bytes (`page_referenced`, rmap.rs) with a
//!   swap, without the ptl.
//! - An entry with WRITE was granted by a write fault (page_mkwrite), which
//!   set PG_dirty; writeback write-protects the entries first
//!   (`page_mkclean`), so WRITE implies PG_dirty and no writeback in flight.
//!
//! Anonymous regions (`PageCache::map_anon`) are the same `Mapping` and
//! `Vma` with an `anon_id` and no file: an entry is empty (never touched:
//! the fault takes a zeroed frame), present, or a swap entry
//! (`PTE_SWAP | slot`, the page is on swap; the fault is `do_swap_page`).
//! The rules above hold for them too; a writable anonymous entry maps a
//! page that is not in the swap cache (the write fault took it out).
//!
//! Private file mappings (`MapFlags::PRIVATE`, MAP_PRIVATE) are both: a
//! file mapping in the file's `i_mmap` (an entry may map a file page,
//! read-only and never dirty) and an anonymous region with an `anon_id`
//! (an entry may map one of the mapping's copies, made by the first write
//! to the page, or be a copy's swap entry). memory.rs has the faults.
//!
//! Both arrays are `Table`s: zeroed memory straight from mmap, advised
//! onto huge pages. Every path reads and writes them through `PageTable`'s
//! methods (`pte`, `young`, `get`), the access paths through a
//! `FastPath`, raw views copied at map time, so an access loads as little
//! as it can.

use crate::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::marker::PhantomData;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::filemap::{Inode, Pin};
use crate::memory::WriteFault;
use crate::mm::Cache;
use crate::page::{Pfn, NO_MAPPING, PAGE_MAPPING_ANON};
use crate::readahead::FileRaState;

/// A page-table entry: 4 bytes, so the table of a 256 MiB mapping (64 Ki
/// entries, 256 KiB) fits a CPU's L2 beside its hot frames.
pub(crate) type Pte = u32;
/// A table's entry.
pub(crate) type AtomicPte = AtomicU32;
/// The frame number of a present entry, or the slot of a swap entry:
/// 28 bits, so a mapping needs a cache of at most 2^28 frames (1 TiB of
/// 4 KiB pages; `Mapping::new` checks) and swap has at most 2^28 - 1
/// slots (swapfile.rs `MAX_SWAP_PAGES`).
pub(crate) const PTE_PFN_MASK: Pte = (1 << 28) - 1;
/// The entry maps a page.
pub(crate) const PTE_PRESENT: Pte = 1 << 28;
/// Writes need no fault (granted by page_mkwrite).
pub(crate) const PTE_WRITE: Pte = 1 << 29;
/// Written through this entry since it was made writable.
pub(crate) const PTE_DIRTY: Pte = 1 << 30;
/// A swap entry (anonymous regions): not present, the page is on swap at
/// the slot in the low 28 bits (the kernel's swp_entry_t in a pte).
pub(crate) const PTE_SWAP: Pte = 1 << 31;

/// The swap slot a swap entry names.
#[inline]
pub(crate) fn pte_swap_slot(pte: Pte) -> Option<u32> {
    (pte & (PTE_SWAP | PTE_PRESENT) == PTE_SWAP).then_some(pte & PTE_PFN_MASK)
}

/// swp_entry_to_pte.
#[inline]
pub(crate) fn swp_pte(slot: u32) -> Pte {
    debug_assert!(slot <= PTE_PFN_MASK);
    (slot & PTE_PFN_MASK) | PTE_SWAP
}

/// mk_pte: a present entry for frame `pfn` (below 2^28, as every frame of
/// a cache that has mappings is), without WRITE or DIRTY.
#[inline(always)]
pub(crate) fn mk_pte(pfn: Pfn) -> Pte {
    debug_assert!(pfn <= PTE_PFN_MASK);
    (pfn & PTE_PFN_MASK) | PTE_PRESENT
}

/// The frame a present entry maps.
#[inline(always)]
pub(crate) fn pte_pfn(pte: Pte) -> Option<Pfn> {
    (pte & PTE_PRESENT != 0).then_some(pte & PTE_PFN_MASK)
}

/// The largest mapping, in pages (a 4 TiB mapping of 4 KiB pages has a
/// 9 GiB flat table; refuse rather than try).
const MAX_MAP_PAGES: u64 = 1 << 28;

/// Whether every frame of the cache fits an entry's 28-bit frame number:
/// a cache of more than 2^28 frames (1 TiB of 4 KiB pages) has no mappings.
fn check_pte_reach(cache: &Cache) -> Result<()> {
    if cache.arena.nr_pages > PTE_PFN_MASK as u64 + 1 {
        return Err(Error::InvalidArgument(format!(
            "map: a cache of {} frames is more than a page-table entry can name ({})",
            cache.arena.nr_pages,
            PTE_PFN_MASK as u64 + 1
        )));
    }
    Ok(())
}

/// How a file is mapped (PROT_READ, PROT_WRITE, PROT_EXEC): a set of
/// flags, combined with `|`. Every mapping can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MapFlags(u8);

impl MapFlags {
    /// Read-only (every mapping reads).
    pub const READ: MapFlags = MapFlags(1);
    /// Writable and shared: writes reach the file (MAP_SHARED|PROT_WRITE).
    pub const WRITE: MapFlags = MapFlags(2);
    /// Code (VM_EXEC): reclaim activates such pages on their first
    /// reference and keeps referenced ones on the active list.
    pub const EXEC: MapFlags = MapFlags(4);
    /// Private (MAP_PRIVATE): copy-on-write. Reads see the file's page
    /// (and so its later changes, until the page is written here); the
    /// first write to a page copies it into an anonymous page of this
    /// mapping, which the file and other mappings never see, which
    /// msync and fsync do not write, and which goes to swap under
    /// pressure. With [`MapFlags::WRITE`] for a writable private mapping.
    pub const PRIVATE: MapFlags = MapFlags(8);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: MapFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of flags (`|` in a const context).
    pub const fn union(self, other: MapFlags) -> MapFlags {
        MapFlags(self.0 | other.0)
    }
}

impl std::ops::BitOr for MapFlags {
    type Output = MapFlags;
    fn bitor(self, rhs: MapFlags) -> MapFlags {
        MapFlags(self.0 | rhs.0)
    }
}

/// madvise(2) advice for a [`Mapping`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Madvise {
    /// MADV_NORMAL: read-around on faults.
    Normal,
    /// MADV_SEQUENTIAL (VM_SEQ_READ): faults read ahead as a sequential
    /// reader does, and references through this mapping do not count for
    /// reclaim (page_referenced_one ignores them).
    Sequential,
    /// MADV_RANDOM (VM_RAND_READ): no readahead on faults.
    Random,
    /// MADV_WILLNEED: read the range in now.
    WillNeed,
    /// MADV_DONTNEED: unmap the range (the pages stay cached; dirty bits
    /// go to the pages, young ones become a mark_page_accessed).
    DontNeed,
    /// MADV_COLD: clear the range's young bits and deactivate the pages
    /// mapped only here.
    Cold,
}

/// A page table's array (the entries, or the young bytes): zeroed memory
/// straight from mmap, from 128 KiB up aligned to and rounded up to whole
/// transparent huge pages (`map_table`), so an access to a mapping of
/// gigabytes does not pay a TLB miss (and a walk of the process's own
/// page tables) for the entry before the one for the frame.
/// Derefs to a slice. Under loom, a boxed slice of loom's atomics.
pub(crate) struct Table<T: ZeroInit> {
    #[cfg(not(loom))]
    ptr: std::ptr::NonNull<T>,
    #[cfg(not(loom))]
    len: usize,
    /// The bytes mapped (`map_table`), at least `len` items.
    #[cfg(not(loom))]
    bytes: usize,
    #[cfg(loom)]
    items: Box<[T]>,
}

/// A type whose value with every byte zero is valid and means "empty".
///
/// # Safety
/// An all-zero bit pattern must be a valid value of the type.
pub(crate) unsafe trait ZeroInit: Sized {
    #[cfg(loom)]
    fn zero() -> Self;
}

// SAFETY: AtomicU32 and AtomicU8 have the layout of u32 and u8, for which
// zero is valid.
#[cfg(not(loom))]
unsafe impl ZeroInit for AtomicU32 {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl ZeroInit for AtomicU8 {}
// SAFETY: loom's atomics are built by `zero`, never from raw memory.
#[cfg(loom)]
unsafe impl ZeroInit for AtomicU32 {
    fn zero() -> Self {
        AtomicU32::new(0)
    }
}
// SAFETY: as above.
#[cfg(loom)]
unsafe impl ZeroInit for AtomicU8 {
    fn zero() -> Self {
        AtomicU8::new(0)
    }
}

/// A mapping's page table: `len` slots, each an entry and its young byte.
/// Every reader and writer of entries and young bytes goes through its
/// methods (the access paths through `FastPath`, a raw view of its
/// arrays), so the layout is this type's business alone. Two arrays: a
/// session-10 layout with each line's entries followed by their young
/// bytes measured slower (measured; docs/history/decisions.md).
pub(crate) struct PageTable {
    ptes: Table<AtomicPte>,
    young: Table<AtomicU8>,
}

impl PageTable {
    /// `len` empty, old slots.
    pub(crate) fn zeroed(len: usize) -> Result<PageTable> {
        Ok(PageTable { ptes: Table::zeroed(len)?, young: Table::zeroed(len)? })
    }

    /// The entry and young byte of `slot`, if it is a slot of the table.
    #[inline]
    pub(crate) fn get(&self, slot: usize) -> Option<(&AtomicPte, &AtomicU8)> {
        Some((self.ptes.get(slot)?, self.young.get(slot)?))
    }

    /// The entry and young byte of `slot`. Panics past the table, as a
    /// slice index does (slots come from `Vma::slot_of` or checks against
    /// `nr_pages`).
    #[cfg(any(test, loom))]
    pub(crate) fn entry(&self, slot: usize) -> (&AtomicPte, &AtomicU8) {
        (&self.ptes[slot], &self.young[slot])
    }

    /// The entry of `slot`. Panics past the table.
    #[inline]
    pub(crate) fn pte(&self, slot: usize) -> &AtomicPte {
        &self.ptes[slot]
    }

    /// The young byte of `slot`. Panics past the table.
    #[inline]
    pub(crate) fn young(&self, slot: usize) -> &AtomicU8 {
        &self.young[slot]
    }

    /// The entry and young byte of `slot`, unchecked.
    ///
    /// # Safety
    /// `slot` is below the table's length (the mapping's `nr_pages`).
    #[inline(always)]
    pub(crate) unsafe fn get_unchecked(&self, slot: usize) -> (&AtomicPte, &AtomicU8) {
        debug_assert!(slot < self.ptes.len() && slot < self.young.len());
        // SAFETY: both arrays have the table's length, above `slot` (the
        // caller's promise).
        unsafe { (self.ptes.get_unchecked(slot), self.young.get_unchecked(slot)) }
    }

    /// The arrays, for `FastPath`'s raw view.
    #[inline]
    pub(crate) fn ptes_ptr(&self) -> *const AtomicPte {
        self.ptes.as_ptr()
    }

    #[inline]
    pub(crate) fn young_ptr(&self) -> *const AtomicU8 {
        self.young.as_ptr()
    }
}

/// A transparent huge page.
#[cfg(not(loom))]
const HUGE: usize = 2 << 20;

/// Tables of at least this many bytes (the entries of a 128 MiB mapping,
/// the young bytes of a 512 MiB one) get whole huge pages of their own.
/// THP backs only the 2 MiB-aligned blocks that lie wholly inside a
/// mapping, so a table of 1 MiB (the young bytes of a 4 GiB mapping) from
/// a plain mmap sits on 256 small pages, 256 TLB entries where one would
/// do; rounding it up to a huge page wastes at most 2 MiB per mapping,
/// under 2% of what the mapping maps. Smaller tables stay on small pages:
/// a huge page for a few KiB of entries would be mostly waste.
#[cfg(not(loom))]
const HUGE_TABLE_MIN: usize = HUGE / 16;

/// Zeroed memory for a table of `bytes`: the mapping and its length (what
/// Drop unmaps). From `HUGE_TABLE_MIN` up, 2 MiB-aligned and a whole
/// number of huge pages, advised onto them (over-map by one huge page,
/// then unmap the unaligned head and tail). None if the kernel refuses.
#[cfg(not(loom))]
fn map_table(bytes: usize) -> Option<(std::ptr::NonNull<u8>, usize)> {
    if bytes < HUGE_TABLE_MIN {
        return crate::arena::map_zeroed(bytes).map(|p| (p, bytes));
    }
    let len = bytes.checked_next_multiple_of(HUGE)?;
    let over = len.checked_add(HUGE)?;
    // One piece of code makes anonymous memory (map_zeroed, which also
    // advises its aligned part onto huge pages: here all of [start,
    // start + len)); the unaligned head and tail are given back.
    let raw = crate::arena::map_zeroed(over)?.as_ptr() as usize;
    let start = raw.next_multiple_of(HUGE);
    let (head, tail) = (start - raw, raw + over - (start + len));
    // SAFETY: both ranges lie inside the mapping just made, outside
    // [start, start + len), and nothing refers to them.
    unsafe {
        if head != 0 {
            libc::munmap(raw as *mut libc::c_void, head);
        }
        if tail != 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    Some((std::ptr::NonNull::new(start as *mut u8)?, len))
}

impl<T: ZeroInit> Table<T> {
    /// `len` zeroed items (at least one page of memory is mapped).
    #[cfg(not(loom))]
    pub(crate) fn zeroed(len: usize) -> Result<Table<T>> {
        let bytes = len.max(1).checked_mul(std::mem::size_of::<T>()).filter(|&b| b <= isize::MAX as usize);
        let bytes = bytes.ok_or_else(|| Error::InvalidArgument(format!("a page table of {len} entries")))?;
        let (ptr, bytes) = map_table(bytes).ok_or(Error::NoMemory { frames: 0 })?;
        Ok(Table { ptr: ptr.cast::<T>(), len, bytes })
    }

    #[cfg(loom)]
    pub(crate) fn zeroed(len: usize) -> Result<Table<T>> {
        Ok(Table { items: (0..len).map(|_| T::zero()).collect() })
    }
}

impl<T: ZeroInit> std::ops::Deref for Table<T> {
    type Target = [T];

    #[cfg(not(loom))]
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is the start of a live mapping of `len` items (page
        // aligned, so aligned for T), zero-filled by mmap, which is a valid
        // T (ZeroInit); it is only accessed through shared references (T
        // is an atomic) and unmapped only by Drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    #[cfg(loom)]
    fn deref(&self) -> &[T] {
        &self.items
    }
}

#[cfg(not(loom))]
impl<T: ZeroInit> Drop for Table<T> {
    fn drop(&mut self) {
        // SAFETY: mapped in `zeroed` with this length; `&mut self` means no
        // reference into it is alive.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

// SAFETY: the table owns its items as a Box<[T]> would; T is an atomic,
// shared between threads by design.
#[cfg(not(loom))]
unsafe impl<T: ZeroInit + Sync> Send for Table<T> {}
// SAFETY: as above: &Table gives only &[T].
#[cfg(not(loom))]
unsafe impl<T: ZeroInit + Sync> Sync for Table<T> {}

/// VM_SEQ_READ / VM_RAND_READ in `Vma::hint`.
pub(crate) const VM_SEQ_READ: u32 = 1;
pub(crate) const VM_RAND_READ: u32 = 2;

/// A VMA: one mapping's range, flags, readahead state and page table.
pub struct Vma {
    /// The file page the mapping starts at (vm_pgoff).
    pub pgoff: u64,
    pub nr_pages: u64,
    pub flags: MapFlags,
    /// VM_SEQ_READ / VM_RAND_READ (madvise), relaxed: a hint.
    pub hint: AtomicU32,
    /// The readahead state faults use (the kernel uses the file's f_ra;
    /// here each mapping has its own) and mmap_miss.
    pub ra: FileRaState,
    pub mmap_miss: AtomicU32,
    /// The page table lock: held to change an entry (with the page lock).
    pub ptl: Mutex<()>,
    /// The page table: an entry and a young byte per page.
    pub(crate) table: PageTable,
    /// An anonymous region's id (its pages' `mapping` is
    /// `PAGE_MAPPING_ANON | anon_id`); `NO_MAPPING` for a file mapping.
    pub(crate) anon_id: u32,
    /// Bumped after every removal of a present entry (`pte_removed`).
    pub(crate) unmap_seq: UnmapSeq,
}

/// A mapping's unmap sequence: a count bumped (release) after every
/// change that takes a frame out of one of its entries (cleared, made a
/// swap entry, replaced by a copy), with the ptl held, before the frame
/// can be freed. `Mapping::load_u64`'s optimistic read (memory.rs,
/// `pte_read_optimistic`) loads it before the entry and again after the
/// word: an unchanged count means no frame left the table in between, so
/// the word was read while the frame held the entry's page. A line of
/// its own: readers only load it, and faults write the VMA's other fields.
#[repr(align(64))]
pub(crate) struct UnmapSeq(pub(crate) AtomicU64);

impl UnmapSeq {
    pub(crate) fn new() -> UnmapSeq {
        UnmapSeq(AtomicU64::new(0))
    }
}

impl Vma {
    /// An entry of this mapping that held a present frame was just
    /// cleared, made a swap entry or pointed at another frame (the caller
    /// holds the ptl): bump the unmap sequence, after the change and
    /// before the frame can be freed. Release: an optimistic reader whose
    /// first (acquire) load of the count sees the bump sees the change
    /// too, so it cannot have loaded the old entry (`UnmapSeq`).
    #[inline]
    pub(crate) fn pte_removed(&self) {
        self.unmap_seq.0.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn is_exec(&self) -> bool {
        self.flags.contains(MapFlags::EXEC)
    }

    pub(crate) fn seq_read(&self) -> bool {
        self.hint.load(Ordering::Relaxed) & VM_SEQ_READ != 0
    }

    /// vma_is_anonymous: a region with no file.
    #[inline]
    pub(crate) fn is_anon(&self) -> bool {
        self.anon_id != NO_MAPPING && !self.is_cow_mapping()
    }

    /// is_cow_mapping: a private file mapping, whose written pages are
    /// anonymous copies (it has an `anon_id` for them).
    #[inline]
    pub(crate) fn is_cow_mapping(&self) -> bool {
        self.flags.contains(MapFlags::PRIVATE)
    }

    /// The `mapping` of this region's anonymous pages.
    #[inline]
    pub(crate) fn anon_mapping(&self) -> u32 {
        PAGE_MAPPING_ANON | self.anon_id
    }
}

/// A file mapped into the cache's "address space" (mmap(2) of a file,
/// shared, or private with [`MapFlags::PRIVATE`]), from
/// [`crate::File::map`]. Accesses go through
/// [`Mapping::page`], which returns a [`MappedPage`]: a present page costs
/// a load, a hazard pin (a plain store), a re-check and a young-bit store;
/// a missing one is a fault that reads the page in with mmap readahead.
/// Writes ([`MappedPage::write`], [`Mapping::write`]) fault on a clean page
/// (page_mkwrite: stable pages, dirty accounting, space reservation,
/// throttling) and then only lock the page for their write section.
///
/// Dropping the mapping unmaps it: dirty entries mark their pages dirty
/// (they are written back as usual, or by [`Mapping::msync`] first).
/// A `Mapping` may be shared between threads; its `MappedPage`s may not.
/// A write takes the page's lock for its write section: a thread holding
/// a [`crate::PageMut`] of a page must not write that page through a
/// mapping.
pub struct Mapping {
    /// First, and the mapping has no interior mutability of its own (the
    /// errseq cursor is boxed), so a caller's loop over `load_u64` keeps
    /// these in registers rather than loading them on every access.
    fast: FastPath,
    cache: Arc<Cache>,
    _owner: Arc<crate::Owner>,
    inode: Arc<Inode>,
    vma: Arc<Vma>,
    /// The file offset the mapping starts at and its length, in bytes.
    start: u64,
    len: u64,
    wb_err_since: Box<AtomicU32>,
}

/// What `Mapping::load_u64` reads besides the entry, the young byte, the
/// hazard row and the frame, copied out of the `Arc`s at map time: every
/// load an access needs is a slot of the CPU's load queue, and the number
/// of accesses whose cache misses overlap is bounded by it
/// (BENCHMARKS.md, "Mapped access").
///
/// The page shift is an `S`: a `u32` in the mapping's copy, or, for the
/// batched access's loop over 4 KiB pages, `memory::ConstShift<12>`, a
/// constant, so splitting a key into page and offset is a shift and a
/// mask by immediates (`FastPath::const_shift`).
#[derive(Clone, Copy)]
pub(crate) struct FastPath<S = u32> {
    pub(crate) ptes: *const AtomicPte,
    pub(crate) young: *const AtomicU8,
    pub(crate) nr_pages: u64,
    pub(crate) frames: *const u8,
    pub(crate) page_shift: S,
    pub(crate) hazards: *const crate::hazard::HazardTable,
    /// The VMA's unmap sequence (`UnmapSeq`), for the optimistic load.
    pub(crate) unmap_seq: *const AtomicU64,
}

// SAFETY: the pointers are views of data the same `Mapping` keeps alive
// through its `Arc`s (the VMA's tables and unmap sequence, the cache's
// arena and hazard table), all of which are themselves Send and Sync
// (atomics, or frames accessed only through atomics and the asm that
// stands for them, highmem.rs); the view adds no access of its own.
unsafe impl<S: Send> Send for FastPath<S> {}
// SAFETY: as above.
unsafe impl<S: Sync> Sync for FastPath<S> {}

impl FastPath {
    fn new(cache: &Cache, vma: &Vma) -> FastPath {
        FastPath {
            ptes: vma.table.ptes_ptr(),
            young: vma.table.young_ptr(),
            nr_pages: vma.nr_pages,
            frames: cache.arena.frame_ptr(0),
            page_shift: cache.page_shift(),
            hazards: &*cache.hazards,
            unmap_seq: &vma.unmap_seq.0,
        }
    }

    /// A copy whose page shift is the constant `SHIFT`, if the pages are
    /// `1 << SHIFT` bytes. A copy, not a reference: the batched loop's
    /// stores (young bytes, hazard slots) cannot then make the compiler
    /// reload its fields.
    #[inline(always)]
    pub(crate) fn const_shift<const SHIFT: u32>(&self) -> Option<FastPath<crate::memory::ConstShift<SHIFT>>> {
        (self.page_shift == SHIFT).then_some(FastPath {
            ptes: self.ptes,
            young: self.young,
            nr_pages: self.nr_pages,
            frames: self.frames,
            page_shift: crate::memory::ConstShift,
            hazards: self.hazards,
            unmap_seq: self.unmap_seq,
        })
    }
}

/// A hint to start loading the cache line at `p`: it never faults and
/// reads nothing the program sees, so any address will do.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: prefetch is a hint: no access, no fault, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

impl Mapping {
    pub(crate) fn new(
        cache: Arc<Cache>,
        owner: Arc<crate::Owner>,
        inode: Arc<Inode>,
        offset: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<Mapping> {
        let ps = cache.page_size() as u64;
        if !offset.is_multiple_of(ps) || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "map({offset}, {len}): the offset must be page aligned and the length above 0"
            )));
        }
        let nr_pages = len.div_ceil(ps);
        if nr_pages > MAX_MAP_PAGES {
            return Err(Error::InvalidArgument(format!("map: {nr_pages} pages is more than {MAX_MAP_PAGES}")));
        }
        check_pte_reach(&cache)?;
        let table = PageTable::zeroed(nr_pages as usize)?;
        let ra = FileRaState::new(cache.default_ra_pages(&inode));
        let make = |anon_id| Vma {
            pgoff: offset / ps,
            nr_pages,
            flags: flags | MapFlags::READ,
            hint: AtomicU32::new(0),
            ra,
            mmap_miss: AtomicU32::new(0),
            ptl: Mutex::new(()),
            table,
            anon_id,
            unmap_seq: UnmapSeq::new(),
        };
        // A private mapping's copies are anonymous pages: it registers as
        // an anonymous region too (anon_vma_prepare), so reclaim finds
        // their entries and swaps them out.
        let vma =
            if flags.contains(MapFlags::PRIVATE) { cache.anon_vma_register(make)? } else { Arc::new(make(NO_MAPPING)) };
        // The mapping holds the file open, as a VMA holds its struct file.
        inode.handles.fetch_add(1, Ordering::AcqRel);
        inode.i_mmap.write().push(vma.clone());
        let wb_err_since = Box::new(AtomicU32::new(crate::errseq::errseq_sample(&inode.wb_err)));
        let fast = FastPath::new(&cache, &vma);
        Ok(Mapping { fast, cache, _owner: owner, inode, vma, start: offset, len, wb_err_since })
    }

    /// An anonymous region of `len` bytes (mmap(2) with MAP_PRIVATE |
    /// MAP_ANONYMOUS), from `PageCache::map_anon`: readable and writable,
    /// zero-filled on first touch. Its pages compete with file pages for
    /// the cache's frames; they are reclaimed to swap when swap is on.
    pub(crate) fn new_anon(cache: Arc<Cache>, owner: Arc<crate::Owner>, len: u64) -> Result<Mapping> {
        let ps = cache.page_size() as u64;
        if len == 0 {
            return Err(Error::InvalidArgument("map_anon(0): the length must be above 0".into()));
        }
        let nr_pages = len.div_ceil(ps);
        if nr_pages > MAX_MAP_PAGES {
            return Err(Error::InvalidArgument(format!("map_anon: {nr_pages} pages is more than {MAX_MAP_PAGES}")));
        }
        check_pte_reach(&cache)?;
        let inode = cache.anon_inode();
        let table = PageTable::zeroed(nr_pages as usize)?;
        let vma = cache.anon_vma_register(|anon_id| Vma {
            pgoff: 0,
            nr_pages,
            flags: MapFlags::READ | MapFlags::WRITE,
            hint: AtomicU32::new(0),
            ra: FileRaState::new(0),
            mmap_miss: AtomicU32::new(0),
            ptl: Mutex::new(()),
            table,
            anon_id,
            unmap_seq: UnmapSeq::new(),
        })?;
        let fast = FastPath::new(&cache, &vma);
        Ok(Mapping { fast, cache, _owner: owner, inode, vma, start: 0, len, wb_err_since: Box::new(AtomicU32::new(0)) })
    }

    /// Whether this is an anonymous region (`PageCache::map_anon`).
    pub fn is_anon(&self) -> bool {
        self.vma.is_anon()
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The file offset the mapping starts at.
    pub fn offset(&self) -> u64 {
        self.start
    }

    /// Pages the mapping spans.
    pub fn nr_pages(&self) -> u64 {
        self.vma.nr_pages
    }

    /// The page at `page` (counted from the mapping's start): an access,
    /// which faults the page in if the page table has no entry for it.
    /// [`Error::PastEof`] if the page lies past the end of the file (the
    /// kernel's SIGBUS), [`Error::InvalidArgument`] past the mapping.
    #[inline(always)]
    pub fn page(&self, page: u64) -> Result<MappedPage<'_>> {
        let i = self.check_page(page)?;
        // SAFETY: check_page returned a slot below the mapping's nr_pages.
        if let Some((pfn, h)) = unsafe { self.cache.follow_pte(&self.vma, i) } {
            return Ok(MappedPage::new(self, pfn, i, Pin::Hazard(h)));
        }
        let pfn = self.cache.handle_mm_fault(&self.inode, &self.vma, i, false)?;
        Ok(MappedPage::new(self, pfn, i, Pin::Ref))
    }

    /// The aligned 8-byte word at byte `offset` (a multiple of 8) of page
    /// `page`, in native byte order: one access, as [`Mapping::page`]
    /// followed by [`MappedPage::load_u64`], without a guard. On x86_64 a
    /// present page is read optimistically, with no pin and no store (but
    /// the young byte's, when clear): the unmap sequence, the entry, the
    /// word, the unmap sequence again, which must be unchanged (memory.rs,
    /// `pte_read_optimistic`). Elsewhere: the entry load, the hazard pin,
    /// the re-check, the young byte, the word's load and the unpin. A
    /// missing page, or a read an unmap overlapped, takes the guarded path
    /// (a fault if need be), as `page` does.
    #[inline(always)]
    pub fn load_u64(&self, page: u64, offset: usize) -> Result<u64> {
        let f = &self.fast;
        if page < f.nr_pages && offset.is_multiple_of(8) && offset >> f.page_shift == 0 {
            // SAFETY: `f` describes this mapping's live tables and the
            // cache's arena (FastPath::new); the slot is below nr_pages and
            // the offset an aligned word of a page (checked just above).
            #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
            if let Some(word) = unsafe { crate::memory::follow_pte_load_u64_optimistic(f, page as usize, offset) } {
                return Ok(word);
            }
            // SAFETY: as above.
            #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
            if let Some(word) = unsafe { crate::memory::follow_pte_load_u64(f, page as usize, offset) } {
                return Ok(word);
            }
        }
        self.load_u64_slow(page, offset)
    }

    /// Many accesses at once: the aligned 8-byte word at byte `pos[j]` of
    /// the mapping (a multiple of 8) into `out[j]`, as
    /// [`Mapping::load_u64`] of its page and offset would load it. Present
    /// pages are taken `LOAD_BATCH` at a time, software-pipelined: entries
    /// prefetched twelve chunks ahead, loaded (and their words prefetched)
    /// eight chunks (64 keys) ahead, then a chunk's frames announced behind one barrier,
    /// each re-checked and read (memory.rs, `pte_load_many`), so the cache
    /// misses of many accesses overlap where separate accesses would wait
    /// for each in turn (on a mapping larger than the CPU's caches,
    /// several times faster per word). Missing pages fault one by one.
    /// Stops at the first error (a position past the mapping, unaligned,
    /// or past EOF), with the words before it loaded (and maybe some
    /// after); [`Error::InvalidArgument`] if the slices' lengths differ.
    pub fn load_u64_many(&self, pos: &[u64], out: &mut [u64]) -> Result<()> {
        // SAFETY: every step of the protocol.
        unsafe { self.load_u64_many_steps::<{ crate::memory::LoadSteps::ALL }>(pos, out) }
    }

    /// `load_u64_many` with only the protocol's steps in `STEPS` (bits of
    /// `LoadSteps`): for benches/mapped.rs, which measures what each step
    /// costs against the floor (`STEPS` = 0: the entries and the words
    /// alone, on the same prefetch schedule).
    ///
    /// # Safety
    /// Unless `STEPS` is `LoadSteps::ALL`, nothing may unmap, reclaim or
    /// truncate a page of the mapping during the call (a frame could be
    /// read after its reuse).
    #[doc(hidden)]
    #[inline]
    pub unsafe fn load_u64_many_steps<const STEPS: u8>(&self, pos: &[u64], out: &mut [u64]) -> Result<()> {
        if pos.len() != out.len() {
            return Err(Error::InvalidArgument(format!("{} positions for {} words", pos.len(), out.len())));
        }
        let f = &self.fast;
        // SAFETY: the cache's hazard table, alive as long as the mapping.
        let hazards = unsafe { &*f.hazards };
        let mask = (1u64 << f.page_shift) - 1;
        let slow = |p: u64| self.load_u64_slow(p >> f.page_shift, (p & mask) as usize);
        let row = crate::percpu::thread_slot();
        // 4 KiB pages, the default: the page shift a constant.
        // SAFETY: the caller's promise, passed on.
        if let Some(view) = f.const_shift::<12>() {
            return unsafe { crate::memory::pte_load_many::<_, STEPS>(&view, hazards, row, pos, out, slow) };
        }
        // SAFETY: as above.
        unsafe { crate::memory::pte_load_many::<_, STEPS>(f, hazards, row, pos, out, slow) }
    }

    /// For benchmarks (benches/mapped.rs, `pcache bench hitpath`): the
    /// byte offset in its page that key `page` reads, an aligned word of a
    /// 4 KiB page picked by a hash of the key (splitmix64's finaliser), the
    /// same in both benchmarks and for every row, the kernel's included.
    /// Real keys spread over their pages; had every key read offset 0 (as
    /// an earlier version did), every word's line would fall in one L1 set (8
    /// ways), and a schedule that prefetches more than 8 words ahead would
    /// lose its lines before their loads (measured; docs/history/decisions.md).
    #[doc(hidden)]
    pub fn bench_word_offset(page: u64) -> u64 {
        let mut z = page;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 55) * 8
    }

    /// `load_u64` through a guard: a fault, or an offset to refuse.
    #[cold]
    #[inline(never)]
    fn load_u64_slow(&self, page: u64, offset: usize) -> Result<u64> {
        self.page(page)?.load_u64(offset)
    }

    #[inline(always)]
    fn check_page(&self, page: u64) -> Result<usize> {
        if page >= self.vma.nr_pages {
            return Err(self.past_mapping(page));
        }
        Ok(page as usize)
    }

    /// Out of line, so the access path stays small (its instruction count
    /// bounds how many accesses the CPU overlaps, hitpath's mapped row).
    #[cold]
    #[inline(never)]
    fn past_mapping(&self, page: u64) -> Error {
        Error::InvalidArgument(format!("page {page} is past the mapping's {}", self.vma.nr_pages))
    }

    /// Copy `buf.len()` bytes at byte `pos` of the mapping into `buf`,
    /// page by page (each page one consistent state of it).
    pub fn read(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.for_each_page(pos, buf.len(), |p, off, range| p.read_into(off, &mut buf[range]))
    }

    /// Write `data` at byte `pos` of the mapping, page by page, as
    /// [`MappedPage::write`]. Writes never grow the file.
    pub fn write(&self, pos: u64, data: &[u8]) -> Result<()> {
        self.for_each_page(pos, data.len(), |mut p, off, range| p.write(off, &data[range]))
    }

    fn for_each_page(
        &self,
        pos: u64,
        len: usize,
        mut f: impl FnMut(MappedPage<'_>, usize, std::ops::Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let ps = self.cache.page_size() as u64;
        match pos.checked_add(len as u64) {
            Some(end) if end <= self.vma.nr_pages * ps => {}
            _ => return Err(Error::InvalidArgument(format!("bytes {pos}+{len} pass the mapping"))),
        }
        let mut done = 0usize;
        while done < len {
            let cur = pos + done as u64;
            let off = (cur % ps) as usize;
            let n = (ps as usize - off).min(len - done);
            f(self.page(cur / ps)?, off, done..done + n)?;
            done += n;
        }
        Ok(())
    }

    /// The page range `[first, end)` of the mapping a byte range covers.
    fn page_range(&self, offset: u64, len: u64) -> Result<(usize, usize)> {
        let ps = self.cache.page_size() as u64;
        if !offset.is_multiple_of(ps) {
            return Err(Error::InvalidArgument(format!("offset {offset} is not page aligned")));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.vma.nr_pages * ps)
            .ok_or_else(|| Error::InvalidArgument(format!("bytes {offset}+{len} pass the mapping")))?;
        Ok(((offset / ps) as usize, end.div_ceil(ps) as usize))
    }

    /// madvise(2) on bytes `[offset, offset + len)` of the mapping
    /// (`offset` page aligned; `len` rounded up to pages).
    pub fn madvise(&self, offset: u64, len: u64, advice: Madvise) -> Result<()> {
        let (first, end) = self.page_range(offset, len)?;
        let vma = &self.vma;
        if vma.is_anon() {
            // An anonymous region has no file to read ahead from; DONTNEED
            // frees the range (its frames and swap slots: it reads as
            // zeroes again), as on a private anonymous mapping.
            match advice {
                Madvise::WillNeed => return Ok(()),
                Madvise::DontNeed => {
                    self.cache.zap_anon_range(vma, first, end);
                    return Ok(());
                }
                _ => {}
            }
        }
        match advice {
            Madvise::Normal => vma.hint.store(0, Ordering::Relaxed),
            Madvise::Sequential => vma.hint.store(VM_SEQ_READ, Ordering::Relaxed),
            Madvise::Random => vma.hint.store(VM_RAND_READ, Ordering::Relaxed),
            Madvise::WillNeed => {
                // madvise_willneed on a file: vfs_fadvise(WILLNEED).
                if end > first {
                    let index = vma.pgoff + first as u64;
                    self.cache.force_page_cache_readahead(&self.inode, index, (end - first) as u64);
                }
            }
            // On a private mapping the written copies go too: the range
            // reads the file's data again.
            Madvise::DontNeed if vma.is_cow_mapping() => self.cache.zap_cow_range(&self.inode, vma, first, end),
            Madvise::DontNeed => self.cache.zap_page_range(&self.inode, vma, first, end),
            Madvise::Cold => self.cache.madvise_cold(&self.inode, vma, first, end),
        }
        Ok(())
    }

    /// msync(2) with MS_SYNC on bytes `[offset, offset + len)`: write the
    /// dirty pages of the range back and wait, then flush the device
    /// (vfs_fsync_range). Writeback write-protects the pages' entries
    /// (page_mkclean), so the next write to each faults again. A writeback
    /// error this mapping has not reported yet is returned, once.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        let (first, end) = self.page_range(offset, len)?;
        if self.vma.is_anon() || self.vma.is_cow_mapping() {
            // Nothing to write back: an anonymous region has no file, and
            // a private mapping's writes are not the file's (msync flushes
            // only VM_SHARED mappings).
            return Ok(());
        }
        let pgoff = self.vma.pgoff;
        let _ = self.cache.write_and_wait_range(&self.inode, pgoff + first as u64, pgoff + end as u64);
        let dev = self.inode.dev.sync(true).map_err(|e| Error::io(&self.inode.name, e));
        match crate::errseq::errseq_check_and_advance(&self.inode.wb_err, &self.wb_err_since) {
            0 => dev,
            errno => Err(Error::io(&self.inode.name, std::io::Error::from_raw_os_error(errno))),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.vma.is_anon() {
            // munmap of an anonymous region: its frames and swap slots go.
            self.cache.exit_anon_vma(&self.vma);
            return;
        }
        // munmap: zap every entry (dirty bits to the pages), then leave the
        // file's i_mmap, then drop the file reference. A private mapping's
        // copies are freed with their swap slots, then its id retired.
        let nr = self.vma.nr_pages as usize;
        if self.vma.is_cow_mapping() {
            self.cache.zap_cow_range(&self.inode, &self.vma, 0, nr);
        } else {
            self.cache.zap_page_range(&self.inode, &self.vma, 0, nr);
        }
        self.inode.i_mmap.write().retain(|v| !Arc::ptr_eq(v, &self.vma));
        if self.vma.is_cow_mapping() {
            self.cache.anon_vma_unregister(&self.vma);
        }
        if self.inode.handles.fetch_sub(1, Ordering::AcqRel) == 1 && self.inode.unlinked.load(Ordering::Acquire) {
            self.cache.evict_inode(&self.inode);
        }
    }
}

/// One page of a [`Mapping`], pinned: its frame stays this page's until
/// the guard is dropped, even if reclaim or truncation unmaps it
/// meanwhile (the guard then reads the bytes the page had; a new access
/// faults the page back in). Bytes are read by validated copies, as
/// [`crate::PageRef`] reads, and written in write sections under the page
/// lock. Not `Send`: the pin is a per-thread hazard slot.
pub struct MappedPage<'a> {
    map: &'a Mapping,
    pfn: Pfn,
    /// The page's slot in the mapping.
    slot: usize,
    pin: Pin,
    _not_send: PhantomData<*const ()>,
}

impl<'a> MappedPage<'a> {
    #[inline]
    fn new(map: &'a Mapping, pfn: Pfn, slot: usize, pin: Pin) -> MappedPage<'a> {
        MappedPage { map, pfn, slot, pin, _not_send: PhantomData }
    }

    /// The page's index in the mapping.
    pub fn index(&self) -> u64 {
        self.slot as u64
    }

    /// The page's size in bytes.
    pub fn len(&self) -> usize {
        self.map.cache.page_size()
    }

    /// Always false: a page has `page_size` bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copy `buf.len()` bytes at `offset` in the page into `buf`, as one
    /// state of the page between two write sections.
    #[inline]
    pub fn read_into(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        crate::check_page_range(self.len(), offset, buf.len())?;
        self.map.cache.memcpy_from_page(self.pfn, offset, buf);
        Ok(())
    }

    /// The aligned 8-byte word at `offset` (a multiple of 8), in native
    /// byte order: one atomic load, no sequence count needed.
    #[inline]
    pub fn load_u64(&self, offset: usize) -> Result<u64> {
        if !offset.is_multiple_of(8) || offset + 8 > self.len() {
            return Err(Error::InvalidArgument(format!("load_u64 at {offset}: not an aligned word of the page")));
        }
        Ok(self.map.cache.load_u64(self.pfn, offset))
    }

    /// Write `data` at `offset` in the page, as one write section. The
    /// first write to a clean or write-protected page is a write fault
    /// (page_mkwrite): the page's space is reserved, it waits for
    /// writeback (stable pages), is marked dirty and the dirty throttle
    /// runs; later writes only take the page lock around their section.
    /// [`Error::ReadOnlyMapping`] without [`MapFlags::WRITE`];
    /// [`Error::PastEof`] for bytes past the end of the file (mapped
    /// writes never grow it).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        crate::check_page_range(self.len(), offset, data.len())?;
        let (cache, inode, vma) = (&self.map.cache, &self.map.inode, &self.map.vma);
        if !vma.flags.contains(MapFlags::WRITE) {
            return Err(Error::ReadOnlyMapping { name: inode.name.clone() });
        }
        // Bounded: each round either writes or faults a fresh page in; a
        // page truncated away under us every time gives up with the error
        // the last fault met (PastEof) or, at worst, this one.
        for _ in 0..8 {
            let pfn = match cache.mapped_write(inode, vma, self.slot, self.pfn, offset, data)? {
                WriteFault::Written => return Ok(()),
                // A private mapping copied the file's page (wp_page_copy):
                // this guard now holds the copy, and writes to it.
                WriteFault::Copied(pfn) => pfn,
                // The pinned page left the page cache (reclaimed after we
                // pinned it, or truncated) or this slot (a private copy
                // swapped out): fault the current one in.
                WriteFault::Stale => cache.handle_mm_fault(inode, vma, self.slot, true)?,
            };
            cache.unpin(self.pfn, self.pin);
            self.pfn = pfn;
            self.pin = Pin::Ref;
        }
        Err(Error::InvalidArgument(format!("page {} of {} kept leaving the cache", self.slot, inode.name)))
    }
}

impl Drop for MappedPage<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.map.cache.unpin_mapped(self.pfn, self.pin);
    }
}

impl Cache {
    /// The inode every anonymous region points at (fs/anon_inodes.c's
    /// anon_inode_inode): it has no pages and does no I/O; it lets a
    /// `Mapping` be one type for files and anonymous memory. Made on first
    /// use, outside the icache, with a bdi of its own that has no flusher.
    pub(crate) fn anon_inode(&self) -> Arc<Inode> {
        self.anon
            .inode
            .get_or_init(|| {
                // Below PAGE_MAPPING_ANON and never handed out by iget.
                let id = PAGE_MAPPING_ANON - 1;
                let bdi = Arc::new(crate::backing_dev::Bdi::new(u32::MAX, "anon"));
                let dev = Arc::new(crate::backing::MemoryDev::new("[anon]", self.page_size()));
                let inode = Inode::new(id, "anon_inode:[anon]", "[anon]", dev, bdi, &self.node_cache, 0, (0, 0));
                // Never on the icache's unused list: prune_icache leaves it be.
                inode.on_unused.store(true, Ordering::Relaxed);
                Arc::new(inode)
            })
            .clone()
    }
}

/// The anonymous regions' registry, the kernel's anon_vma lookup from a
/// page's `mapping`: a slot per id, ids reused, and the inode every
/// anonymous `Mapping` points at. Its users are rmap.rs (register, look
/// up, retire), lru_gen.rs's walk (every region) and `anon_inode`; the
/// mapped access never reads it (a `Mapping` holds its `Vma`).
#[derive(Default)]
pub struct AnonVmas {
    table: parking_lot::RwLock<AnonTable>,
    /// Made on first use (`Cache::anon_inode`); never in the icache.
    inode: std::sync::OnceLock<Arc<Inode>>,
}

#[derive(Default)]
struct AnonTable {
    vmas: Vec<Option<Arc<Vma>>>,
    free_ids: Vec<u32>,
}

impl AnonVmas {
    /// Give a new region an id below `limit` and register it.
    pub(crate) fn register(&self, limit: usize, make: impl FnOnce(u32) -> Vma) -> Result<Arc<Vma>> {
        let mut t = self.table.write();
        let id = match t.free_ids.pop() {
            Some(id) => id,
            None => {
                let id = t.vmas.len();
                if id >= limit {
                    return Err(Error::InvalidArgument("too many anonymous regions".into()));
                }
                t.vmas.push(None);
                id as u32
            }
        };
        let vma = Arc::new(make(id));
        t.vmas[id as usize] = Some(vma.clone());
        Ok(vma)
    }

    /// The region with anonymous id `id`, if registered.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<Vma>> {
        self.table.read().vmas.get(id as usize).cloned().flatten()
    }

    /// Retire `vma`'s id, if it is still the region registered there.
    pub(crate) fn unregister(&self, vma: &Arc<Vma>) {
        let mut t = self.table.write();
        let id = vma.anon_id as usize;
        if t.vmas.get(id).is_some_and(|v| v.as_ref().is_some_and(|v| Arc::ptr_eq(v, vma))) {
            t.vmas[id] = None;
            t.free_ids.push(vma.anon_id);
        }
    }

    /// Every registered region, appended to `out`.
    pub(crate) fn collect(&self, out: &mut Vec<Arc<Vma>>) {
        out.extend(self.table.read().vmas.iter().flatten().cloned());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Config, PageCache, Tunables};

    /// A table of pages neither a power of two nor a multiple of a cache
    /// line's worth of entries (16) or young bytes (64).
    const LEN: usize = 3 * 64 + 5;
    /// The first and last slots, both sides of a cache line's worth of
    /// entries and of young bytes, the last slot.
    const EDGES: [usize; 9] = [0, 1, 15, 16, 17, 63, 64, 65, LEN - 1];

    // Goal: `PageTable`'s accessors. Every slot has its own entry and
    // young byte (no two slots share one), `get`, `entry`, `pte`, `young`
    // and the raw view `FastPath` uses (`get_unchecked`, the arrays'
    // pointers) agree on each, and the table ends at its length.
    #[test]
    fn page_table_slots_are_distinct_and_agree() {
        let t = PageTable::zeroed(LEN).expect("table");
        for slot in 0..LEN {
            t.pte(slot).store(slot as u32 + 1, Ordering::Relaxed);
            t.young(slot).store(slot as u8 + 1, Ordering::Relaxed);
        }
        for slot in 0..LEN {
            assert_eq!(t.pte(slot).load(Ordering::Relaxed), slot as u32 + 1, "entry {slot}");
            assert_eq!(t.young(slot).load(Ordering::Relaxed), slot as u8 + 1, "young {slot}");
        }
        for slot in EDGES {
            let (pte, young) = t.get(slot).expect("a slot");
            assert!(std::ptr::eq(pte, t.pte(slot)) && std::ptr::eq(young, t.young(slot)), "get({slot})");
            let (e_pte, e_young) = t.entry(slot);
            assert!(std::ptr::eq(pte, e_pte) && std::ptr::eq(young, e_young), "entry({slot})");
            // SAFETY: slot < LEN.
            let (u_pte, u_young) = unsafe { t.get_unchecked(slot) };
            assert!(std::ptr::eq(pte, u_pte) && std::ptr::eq(young, u_young), "get_unchecked({slot})");
            // SAFETY: slot < LEN, the arrays' length.
            let (r_pte, r_young) = unsafe { (&*t.ptes_ptr().add(slot), &*t.young_ptr().add(slot)) };
            assert!(std::ptr::eq(pte, r_pte) && std::ptr::eq(young, r_young), "raw view of {slot}");
        }
        assert!(t.get(LEN).is_none(), "past the last slot");
    }

    // Goal: every path that takes a frame out of an entry bumps the VMA's
    // unmap sequence, so an optimistic read (memory.rs,
    // `pte_read_optimistic`) that an unmap overlaps is refused, even when
    // the page comes straight back to the same slot. Method: the read's
    // closure itself unmaps the page it was handed (MADV_DONTNEED on a
    // shared file mapping, truncation, a copy-on-write of a private
    // mapping's file page, MADV_DONTNEED on an anonymous region), faults
    // the slot back in, and only then loads the word; the read must return
    // None. Without the unmap the same read succeeds.
    #[test]
    fn optimistic_read_refused_across_every_unmap() {
        let pc = PageCache::new(Config {
            memory_bytes: 256 * 4096,
            tunables: Tunables { kswapd: false, ..Tunables::default() },
            ..Config::default()
        })
        .expect("cache");
        let f = pc.open_memory("seq").expect("file");
        f.write_at(&[7u8; 4 * 4096], 0).expect("write");
        let read = |m: &Mapping, unmap: &dyn Fn(&Mapping)| {
            drop(m.page(1).expect("fault in"));
            let (pte, young) = m.vma.table.entry(1);
            crate::memory::pte_read_optimistic(&m.vma.unmap_seq.0, pte, young, |pfn| {
                unmap(m);
                drop(m.page(1).expect("fault back"));
                m.cache.load_u64(pfn, 0)
            })
        };
        let shared = f.map(0, 4 * 4096, MapFlags::READ | MapFlags::WRITE).expect("map");
        assert_eq!(read(&shared, &|_| {}), Some(u64::from_ne_bytes([7; 8])), "no unmap: accepted");
        let dontneed = |m: &Mapping| m.madvise(4096, 4096, Madvise::DontNeed).expect("madvise");
        assert_eq!(read(&shared, &dontneed), None, "MADV_DONTNEED (zap_page_range)");
        let truncate = |_: &Mapping| {
            f.set_len(4096).expect("truncate");
            f.set_len(4 * 4096).expect("extend");
        };
        assert_eq!(read(&shared, &truncate), None, "truncation (try_to_unmap)");
        let private = f.map(0, 4 * 4096, MapFlags::READ | MapFlags::WRITE | MapFlags::PRIVATE).expect("map");
        let cow = |m: &Mapping| m.write(4096, &[1]).expect("write");
        assert_eq!(read(&private, &cow), None, "copy-on-write (wp_page_copy)");
        assert_eq!(read(&private, &dontneed), None, "MADV_DONTNEED of a private copy (zap_anon_pte)");
        let anon = pc.map_anon(4 * 4096).expect("anon");
        assert_eq!(read(&anon, &|_| {}), Some(0), "anonymous, no unmap: accepted");
        assert_eq!(read(&anon, &dontneed), None, "MADV_DONTNEED of anonymous memory (zap_anon_pte)");
    }

    // Goal: page_referenced test-and-clears exactly the young byte of the
    // slot that maps the page it was asked about (first slot, both sides
    // of a line's worth of entries and young bytes, last slot); every
    // other slot keeps its young byte; a second call finds the page
    // unreferenced.
    #[test]
    fn page_referenced_clears_only_its_slot() {
        // Single pages: each slot maps a page of its own (a folio's
        // page_referenced visits all of its entries).
        let pc = PageCache::new(Config {
            memory_bytes: 512 * 4096,
            tunables: Tunables { kswapd: false, folio_order_max: 0, ..Tunables::default() },
            ..Config::default()
        })
        .expect("cache");
        let f = pc.open_memory("young").expect("file");
        let bytes = LEN as u64 * 4096;
        f.set_len(bytes).expect("set_len");
        let m = f.map(0, bytes, MapFlags::READ).expect("map");
        let table = &m.vma.table;
        for page in 0..LEN as u64 {
            // Faulted in, or mapped old by fault-around and then accessed:
            // present and young either way.
            drop(m.page(page).expect("access"));
        }
        let young = |slot: usize| table.young(slot).load(Ordering::Relaxed) != 0;
        assert!((0..LEN).all(young), "every accessed slot is young");
        for slot in EDGES {
            let pfn = pte_pfn(table.pte(slot).load(Ordering::Relaxed)).expect("present");
            assert_eq!(m.cache.page_referenced(&m.inode, pfn), (1, false), "slot {slot}");
            for other in 0..LEN {
                assert_eq!(young(other), other != slot, "slot {other} after page_referenced of slot {slot}");
            }
            assert_eq!(m.cache.page_referenced(&m.inode, pfn), (0, false), "slot {slot} again");
            // Young again for the next round.
            drop(m.page(slot as u64).expect("access"));
            assert!(young(slot));
        }
    }
}

//! The per-file page tree (the address_space's i_pages, lib/xarray.c in
//! spirit): a 64-way radix tree from page index to entry.
//!
//! Readers walk it with acquire loads and no lock. Writers (insertion,
//! deletion, marks) hold the owning mapping's tree lock. Nodes are never
//! freed while the tree lives, so a lock-free reader can never touch freed
//! memory; a reader that finds a page entry must still take a reference and
//! re-check the slot, because the page may be removed and its frame reused
//! at any moment (see `filemap::find_get_entry`).
//!
//! Entries are `usize`: 0 is empty; a page is `pfn + 1`, possibly with the
//! PAGE_HOT hint bit; a value with the top bit set is a shadow entry (an
//! evicted page's workingset record, the kernel's "exceptional" entries).
//!
//! The root word packs the top node's address with the tree's height (nodes
//! are 512-byte aligned, leaving the low bits free), so a reader always sees
//! a consistent pair. Height 0 means the root is a leaf covering 0..64.
//! Each node carries a bitmap per mark (dirty): bit i is set when
//! slot i holds, or leads to, a marked entry, so writeback can walk dirty
//! pages in file order without visiting clean ones.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::page::Pfn;

const SHIFT: u32 = 6;
const FANOUT: usize = 1 << SHIFT;
const MASK: u64 = FANOUT as u64 - 1;
const HEIGHT_MASK: usize = 0xf;
pub const NR_MARKS: usize = 1;
/// Pages with PG_dirty (PAGECACHE_TAG_DIRTY).
pub const MARK_DIRTY: usize = 0;

pub const SHADOW_BIT: usize = 1 << (usize::BITS - 1);
/// On a page entry: a hint that the page is uptodate, active and
/// referenced, so a hit needs neither to check nor to mark it and the
/// lookup never touches the page descriptor (filemap::find_page_fast).
pub const PAGE_HOT: usize = 1 << (usize::BITS - 2);
/// On a page entry: the page is frozen for removal and waits for the hazard
/// check; hit-path readers must not take it (filemap::freeze_for_removal).
pub const SLOT_FROZEN: usize = 1 << (usize::BITS - 3);
const ENTRY_FLAGS: usize = PAGE_HOT | SLOT_FROZEN;

#[inline]
pub fn page_entry(pfn: Pfn) -> usize {
    pfn as usize + 1
}

/// The pfn of a page entry, or None for empty and shadow entries.
#[inline]
pub fn entry_pfn(entry: usize) -> Option<Pfn> {
    if entry == 0 || entry & SHADOW_BIT != 0 {
        None
    } else {
        Some(((entry & !ENTRY_FLAGS) - 1) as Pfn)
    }
}

#[repr(C, align(512))]
struct Node {
    slots: [AtomicUsize; FANOUT],
    marks: [AtomicU64; NR_MARKS],
    /// In a leaf: non-empty slots, and how many of them are shadow entries
    /// (xa_node's count and nr_values). Written under the tree lock.
    count: AtomicU32,
    values: AtomicU32,
}

/// How a store changed its leaf, for the shadow-node shrinker
/// (workingset.rs): a leaf holding only shadow entries is a shadow node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowNode {
    Unchanged,
    /// The leaf now holds shadow entries and nothing else.
    Became,
    /// The leaf held only shadows and now holds a page or nothing.
    Ceased,
}

/// Nodes come from chunks that double from 8 nodes up to 4096 (2 MiB,
/// huge-page backed), so a big file's tree is dense in memory and TLB.
/// Chunks are freed only with the tree.
struct NodeSlab {
    chunks: Vec<(NonNull<Node>, Layout)>,
    used: usize,
}

const CHUNK_MAX: usize = 4096;

impl NodeSlab {
    fn alloc(&mut self) -> *mut Node {
        let cap = self.chunks.last().map_or(0, |(_, l)| l.size() / std::mem::size_of::<Node>());
        if self.used == cap {
            let count = (8usize << self.chunks.len().min(9)).min(CHUNK_MAX);
            let align = if count == CHUNK_MAX { 2 << 20 } else { std::mem::align_of::<Node>() };
            let layout = match Layout::from_size_align(count * std::mem::size_of::<Node>(), align) {
                Ok(l) => l,
                Err(_) => handle_alloc_error(Layout::new::<Node>()),
            };
            // SAFETY: non-zero size. All-zero bytes are a valid Node: empty
            // slots and clear marks (atomics of zero).
            let ptr = unsafe { alloc_zeroed(layout) };
            let Some(ptr) = NonNull::new(ptr.cast::<Node>()) else { handle_alloc_error(layout) };
            crate::arena::advise_huge(ptr.as_ptr().cast(), layout.size());
            self.chunks.push((ptr, layout));
            self.used = 0;
        }
        let (chunk, _) = self.chunks[self.chunks.len() - 1];
        // SAFETY: used < the chunk's node count.
        let node = unsafe { chunk.as_ptr().add(self.used) };
        self.used += 1;
        node
    }
}

impl Drop for NodeSlab {
    fn drop(&mut self) {
        for (ptr, layout) in self.chunks.drain(..) {
            // SAFETY: allocated in `alloc` with this layout, freed once.
            unsafe { dealloc(ptr.as_ptr().cast(), layout) };
        }
    }
}

pub struct PageTree {
    root: AtomicUsize,
    slab: Mutex<NodeSlab>,
}

// SAFETY: nodes are only reached through atomics; they are freed only when
// the tree is dropped, when no reader can hold it.
unsafe impl Send for PageTree {}
// SAFETY: as above.
unsafe impl Sync for PageTree {}

#[inline]
fn span_bits(height: usize) -> u32 {
    SHIFT * (height as u32 + 1)
}

#[inline]
fn fits(index: u64, height: usize) -> bool {
    let bits = span_bits(height);
    bits >= 64 || index >> bits == 0
}

impl PageTree {
    pub fn new() -> PageTree {
        PageTree { root: AtomicUsize::new(0), slab: Mutex::new(NodeSlab { chunks: Vec::new(), used: 0 }) }
    }

    fn alloc_node(&self) -> *mut Node {
        self.slab.lock().alloc()
    }

    #[inline]
    fn root(&self) -> (*const Node, usize) {
        let r = self.root.load(Ordering::Acquire);
        ((r & !HEIGHT_MASK) as *const Node, r & HEIGHT_MASK)
    }

    /// The slot holding `index`, if its leaf exists. Lock-free; the slot
    /// stays valid for the tree's life (nodes are never freed), so a reader
    /// can re-check it without walking again.
    #[inline]
    pub fn slot(&self, index: u64) -> Option<&AtomicUsize> {
        let (mut node, height) = self.root();
        if node.is_null() || !fits(index, height) {
            return None;
        }
        let mut level = height;
        loop {
            let slot = ((index >> (SHIFT * level as u32)) & MASK) as usize;
            // SAFETY: `node` came from the root or a parent slot; nodes are
            // never freed while the tree (which `&self` borrows) lives.
            let s = unsafe { &(*node).slots[slot] };
            if level == 0 {
                return Some(s);
            }
            let v = s.load(Ordering::Acquire);
            if v == 0 {
                return None;
            }
            node = v as *const Node;
            level -= 1;
        }
    }

    /// The entry at `index` (0 if none). Lock-free.
    #[inline]
    pub fn load(&self, index: u64) -> usize {
        let (mut node, height) = self.root();
        if node.is_null() || !fits(index, height) {
            return 0;
        }
        let mut level = height;
        loop {
            let slot = ((index >> (SHIFT * level as u32)) & MASK) as usize;
            // SAFETY: `node` came from the root or a parent slot; nodes are
            // never freed while the tree lives.
            let v = unsafe { (*node).slots[slot].load(Ordering::Acquire) };
            if level == 0 {
                return v;
            }
            if v == 0 {
                return 0;
            }
            node = v as *const Node;
            level -= 1;
        }
    }

    /// Store `entry` at `index`, growing the tree as needed; returns the old
    /// entry. Caller holds the tree lock.
    #[cfg(test)]
    pub fn store(&self, index: u64, entry: usize) -> usize {
        self.store_tracked(index, entry).0
    }

    /// `store`, also saying whether the leaf became or ceased to be a
    /// shadow node.
    pub fn store_tracked(&self, index: u64, entry: usize) -> (usize, ShadowNode) {
        let (old, leaf) = self.store_inner(index, entry);
        if leaf.is_null() || old == entry {
            return (old, ShadowNode::Unchanged);
        }
        // SAFETY: a live leaf; counters change only under the tree lock.
        let (count, values) = unsafe { (&(*leaf).count, &(*leaf).values) };
        let (c0, v0) = (count.load(Ordering::Relaxed), values.load(Ordering::Relaxed));
        let is_value = |e: usize| e & SHADOW_BIT != 0;
        let (mut c1, mut v1) = (c0, v0);
        if old != 0 {
            c1 -= 1;
            v1 -= is_value(old) as u32;
        }
        if entry != 0 {
            c1 += 1;
            v1 += is_value(entry) as u32;
        }
        count.store(c1, Ordering::Relaxed);
        values.store(v1, Ordering::Relaxed);
        let was = v0 > 0 && v0 == c0;
        let now = v1 > 0 && v1 == c1;
        let change = match (was, now) {
            (false, true) => ShadowNode::Became,
            (true, false) => ShadowNode::Ceased,
            _ => ShadowNode::Unchanged,
        };
        (old, change)
    }

    /// Whether the leaf holding `index` holds only shadow entries.
    pub fn is_shadow_node(&self, index: u64) -> bool {
        match self.path(index) {
            Some((path, _)) => {
                // SAFETY: live node.
                let (c, v) =
                    unsafe { ((*path[0]).count.load(Ordering::Relaxed), (*path[0]).values.load(Ordering::Relaxed)) };
                v > 0 && v == c
            }
            None => false,
        }
    }

    /// The store itself; also returns the leaf written (null if none).
    fn store_inner(&self, index: u64, entry: usize) -> (usize, *const Node) {
        let (mut top, mut height) = self.root();
        if top.is_null() {
            if entry == 0 {
                return (0, std::ptr::null());
            }
            top = self.alloc_node();
            height = 0;
            while !fits(index, height) {
                height += 1;
            }
            // A fresh chain from a tall root: build it top-down below.
            self.root.store(top as usize | height, Ordering::Release);
        }
        while !fits(index, height) {
            if entry == 0 {
                return (0, std::ptr::null());
            }
            let new = self.alloc_node();
            // SAFETY: `new` is ours until published; `top` is a live node.
            unsafe {
                (*new).slots[0].store(top as usize, Ordering::Relaxed);
                for m in 0..NR_MARKS {
                    if (*top).marks[m].load(Ordering::Relaxed) != 0 {
                        (*new).marks[m].store(1, Ordering::Relaxed);
                    }
                }
            }
            height += 1;
            top = new;
            self.root.store(top as usize | height, Ordering::Release);
        }
        let mut node = top as *mut Node;
        let mut level = height;
        loop {
            let slot = ((index >> (SHIFT * level as u32)) & MASK) as usize;
            // SAFETY: live node, writers serialised by the tree lock.
            let s = unsafe { &(*node).slots[slot] };
            if level == 0 {
                return (s.swap(entry, Ordering::AcqRel), node);
            }
            let mut child = s.load(Ordering::Acquire) as *mut Node;
            if child.is_null() {
                if entry == 0 {
                    return (0, std::ptr::null());
                }
                child = self.alloc_node();
                s.store(child as usize, Ordering::Release);
            }
            node = child;
            level -= 1;
        }
    }

    /// The path of nodes from the top to the leaf holding `index`.
    fn path(&self, index: u64) -> Option<([*const Node; 12], usize)> {
        let (top, height) = self.root();
        if top.is_null() || !fits(index, height) {
            return None;
        }
        let mut path = [std::ptr::null::<Node>(); 12];
        let mut node = top;
        let mut level = height;
        loop {
            path[level] = node;
            if level == 0 {
                return Some((path, height));
            }
            let slot = ((index >> (SHIFT * level as u32)) & MASK) as usize;
            // SAFETY: live node.
            let v = unsafe { (*node).slots[slot].load(Ordering::Acquire) };
            if v == 0 {
                return None;
            }
            node = v as *const Node;
            level -= 1;
        }
    }

    /// Set mark `m` on `index` (which must hold an entry). Caller holds the
    /// tree lock.
    pub fn set_mark(&self, index: u64, m: usize) {
        if let Some((path, height)) = self.path(index) {
            for (level, &node) in path.iter().enumerate().take(height + 1) {
                let slot = (index >> (SHIFT * level as u32)) & MASK;
                // SAFETY: live node.
                unsafe { (*node).marks[m].fetch_or(1 << slot, Ordering::Relaxed) };
            }
        }
    }

    /// Clear mark `m` on `index`. Caller holds the tree lock.
    pub fn clear_mark(&self, index: u64, m: usize) {
        if let Some((path, height)) = self.path(index) {
            for (level, &node) in path.iter().enumerate().take(height + 1) {
                let slot = (index >> (SHIFT * level as u32)) & MASK;
                // SAFETY: live node.
                let left = unsafe { (*node).marks[m].fetch_and(!(1 << slot), Ordering::Relaxed) } & !(1 << slot);
                if left != 0 {
                    break;
                }
            }
        }
    }

    #[cfg(test)]
    pub fn get_mark(&self, index: u64, m: usize) -> bool {
        match self.path(index) {
            // SAFETY: live node.
            Some((path, _)) => unsafe { (*path[0]).marks[m].load(Ordering::Relaxed) & (1 << (index & MASK)) != 0 },
            None => false,
        }
    }

    /// Visit non-empty entries with index in `[start, end)` in order, or
    /// only those with mark `mark`. `f` returns false to stop. Lock-free;
    /// entries may change under a reader, as in any gang lookup.
    pub fn for_each(&self, start: u64, end: u64, mark: Option<usize>, f: &mut dyn FnMut(u64, usize) -> bool) {
        let (top, height) = self.root();
        if top.is_null() || start >= end {
            return;
        }
        Self::walk(top, height, 0, start, end, mark, f);
    }

    fn walk(
        node: *const Node,
        level: usize,
        base: u64,
        start: u64,
        end: u64,
        mark: Option<usize>,
        f: &mut dyn FnMut(u64, usize) -> bool,
    ) -> bool {
        let shift = SHIFT * level as u32;
        // SAFETY: live node.
        let marks = mark.map(|m| unsafe { (*node).marks[m].load(Ordering::Relaxed) });
        for slot in 0..FANOUT as u64 {
            if let Some(bits) = marks {
                if bits & (1 << slot) == 0 {
                    continue;
                }
            }
            let lo = base + (slot << shift);
            // Heights stay below 10 (indices are under 2^52), so no shift overflows.
            let hi = lo.saturating_add(1u64 << shift);
            if hi <= start {
                continue;
            }
            if lo >= end {
                return false;
            }
            // SAFETY: live node.
            let v = unsafe { (*node).slots[slot as usize].load(Ordering::Acquire) };
            if v == 0 {
                continue;
            }
            if level == 0 {
                if !f(lo, v) {
                    return false;
                }
            } else if !Self::walk(v as *const Node, level - 1, lo, start, end, mark, f) {
                return false;
            }
        }
        true
    }
}

impl Default for PageTree {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: entries stored at scattered indices (growing the tree several
    // times) read back, iterate in order, and marks select exactly the
    // marked ones.
    #[test]
    fn store_load_iterate_marks() {
        let t = PageTree::new();
        let idx = [0u64, 1, 63, 64, 4095, 4096, 1 << 20, (1 << 40) + 7, 5];
        for (n, &i) in idx.iter().enumerate() {
            assert_eq!(t.store(i, n + 1), 0);
        }
        for (n, &i) in idx.iter().enumerate() {
            assert_eq!(t.load(i), n + 1);
        }
        assert_eq!(t.load(2), 0);
        assert_eq!(t.load(1 << 50), 0);
        let mut seen = vec![];
        t.for_each(0, u64::MAX, None, &mut |i, _| {
            seen.push(i);
            true
        });
        let mut sorted = idx.to_vec();
        sorted.sort();
        assert_eq!(seen, sorted);
        t.set_mark(64, MARK_DIRTY);
        t.set_mark(1 << 20, MARK_DIRTY);
        assert!(t.get_mark(64, MARK_DIRTY));
        let mut marked = vec![];
        t.for_each(0, u64::MAX, Some(MARK_DIRTY), &mut |i, _| {
            marked.push(i);
            true
        });
        assert_eq!(marked, vec![64, 1 << 20]);
        t.clear_mark(64, MARK_DIRTY);
        marked.clear();
        t.for_each(0, u64::MAX, Some(MARK_DIRTY), &mut |i, _| {
            marked.push(i);
            true
        });
        assert_eq!(marked, vec![1 << 20]);
        // Range bounds are honoured.
        let mut ranged = vec![];
        t.for_each(63, 4096, None, &mut |i, _| {
            ranged.push(i);
            true
        });
        assert_eq!(ranged, vec![63, 64, 4095]);
        assert_eq!(t.store(64, 0), 4);
        assert_eq!(t.load(64), 0);
    }

    // Goal: a leaf is a shadow node exactly while it holds shadow entries
    // and nothing else, and stores report the transitions.
    #[test]
    fn shadow_node_transitions() {
        let t = PageTree::new();
        let sh = SHADOW_BIT | 7;
        assert_eq!(t.store_tracked(70, page_entry(1)).1, ShadowNode::Unchanged);
        assert_eq!(t.store_tracked(71, sh).1, ShadowNode::Unchanged, "a page is still there");
        assert_eq!(t.store_tracked(70, sh).1, ShadowNode::Became);
        assert!(t.is_shadow_node(64) && t.is_shadow_node(127));
        assert!(!t.is_shadow_node(0), "another leaf");
        assert_eq!(t.store_tracked(72, sh).1, ShadowNode::Unchanged);
        assert_eq!(t.store_tracked(72, page_entry(2)).1, ShadowNode::Ceased);
        assert_eq!(t.store_tracked(72, 0).1, ShadowNode::Became);
        assert_eq!(t.store_tracked(70, 0).1, ShadowNode::Unchanged);
        assert_eq!(t.store_tracked(71, 0).1, ShadowNode::Ceased, "empty now");
        assert!(!t.is_shadow_node(64));
    }
}

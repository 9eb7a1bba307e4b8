//! The per-file page tree (the address_space's i_pages, lib/xarray.c in
//! spirit): a 64-way radix tree from page index to entry.
//!
//! Readers walk it with acquire loads and no lock. Writers (insertion,
//! deletion, marks) hold the owning mapping's tree lock. A reader that
//! finds a page entry must still pin the page and re-check the slot,
//! because the page may be removed and its frame reused at any moment (see
//! `filemap::find_page_fast`).
//!
//! Entries are `usize`: 0 is empty; a value with the top bit set is a
//! shadow entry (an evicted folio's workingset record, the kernel's "value"
//! entries); otherwise the low two bits tell a folio entry (`01`: the first
//! frame and the order, possibly with the PAGE_HOT hint bit) from a sibling
//! (`10`) and, in an interior slot, a node (`00`).
//!
//! # Multi-index entries
//!
//! A folio of order k covers `2^k` indices aligned to its size, and sits
//! as lib/xarray.c keeps it: in the node at level `k / 6`, in one head
//! slot holding the entry and `2^(k % 6) - 1` sibling slots after it that
//! name the head, so an order-9 folio is eight slots of a level-1 node and
//! needs no leaf at all. A lookup that lands on a sibling goes to the head
//! and checks that the entry there still reaches it (a writer may have
//! split it meanwhile). Writers fill siblings before the head and clear
//! them before it; a split rewrites the parts group by group with the
//! head's group last, and parts that need nodes of their own are built
//! whole before they are linked (loom model
//! `split_racing_a_reader_takes_the_right_frame`). A shadow entry spans
//! what its folio spanned.
//!
//! The root word packs the top node's address with the tree's height (nodes
//! are 64-byte aligned, leaving the low bits free), so a reader always sees
//! a consistent pair. Height 0 means the root is a leaf covering 0..64.
//! Each node carries a bitmap per mark (dirty): bit i is set when
//! slot i holds, or leads to, a marked entry, so writeback can walk dirty
//! pages in file order without visiting clean ones.
//!
//! # Freeing nodes
//!
//! As in xarray, a node whose count of entries (pages and shadows, or
//! children) drops to 0 is deleted from its parent, parents that become
//! empty follow, and a top node whose only child is in slot 0 is replaced
//! by that child (`xas_shrink`). The kernel frees such nodes after an RCU
//! grace period; here they are *retired*: tagged with the node epoch of the
//! hazard table and kept until `HazardTable::walk_sync` shows that no
//! lock-free walk that could have reached them is still running (see
//! hazard.rs). Every lock-free walk (`load`, `for_each`, and the `slot`
//! that the hit path re-checks after pinning a page) runs under a
//! `WalkGuard`. A retired node is empty (all slots 0) unless it was a
//! shrunk top node, whose slot 0 still leads to the live tree, so a reader
//! holding a slot of a retired leaf re-checks and finds 0, never a stale
//! entry. Retired nodes are reclaimed in batches of `RETIRE_BATCH` (one
//! membarrier each) and after truncation; they go back to the free list of
//! their chunk, and a chunk with no node in use goes back to the allocator.
//! Node memory is thus bounded by the live nodes of each tree (plus one
//! batch), not by the span of the file ever touched.
//!
//! # Shadow nodes
//!
//! A node holding shadow entries and nothing else is a shadow node
//! (workingset.rs). Shadow nodes sit on one list shared by all trees
//! (`NodeCache`, the kernel's `shadow_nodes` list_lru), linked through the
//! node itself (xa_node's `private_list`): a leaf joins it when its last
//! page goes and shadows remain, and leaves it as soon as it gains a page
//! or becomes empty (`workingset_update_node`), so the list never holds a
//! stale node and its length is the kernel's `workingset_nodes`.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::hazard::{HazardTable, WalkGuard};

/// The guard of the tree lock (the owning inode's `tree_lock`,
/// filemap.rs): the tree's writers take it as proof that the caller holds
/// the lock, the one that serialises them (the kernel's xa_lock).
pub type TreeLocked<'a> = MutexGuard<'a, ()>;
use crate::page::Pfn;

const SHIFT: u32 = 6;
const FANOUT: usize = 1 << SHIFT;
const MASK: u64 = FANOUT as u64 - 1;
const HEIGHT_MASK: usize = 0xf;
/// Deeper than any tree: indices are u64, 6 bits a level.
const MAX_PATH: usize = 12;
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

/// The low two bits of a word that is not a shadow: `01` a folio entry,
/// `10` a sibling entry, `11` a node's address (in an interior slot; nodes
/// are 64-byte aligned), so that one test tells a link from anything else,
/// the empty slot included.
const TAG_MASK: usize = 3;
const TAG_FOLIO: usize = 1;
const TAG_SIBLING: usize = 2;
const TAG_NODE: usize = 3;
const ORDER_SHIFT: u32 = 2;
const ORDER_MASK: usize = 0x3f;
const PFN_SHIFT: u32 = 8;
/// Orders an entry can have: its span must fit the 64-bit index space.
pub const MAX_ENTRY_ORDER: u32 = 63;

/// Retired nodes a tree keeps before it reclaims them (one membarrier).
const RETIRE_BATCH: usize = 64;

/// The entry of a folio of `1 << order` pages whose first frame is `pfn`.
#[inline]
pub fn folio_entry(pfn: Pfn, order: u32) -> usize {
    debug_assert!(order <= MAX_ENTRY_ORDER);
    ((pfn as usize) << PFN_SHIFT) | ((order as usize) << ORDER_SHIFT) | TAG_FOLIO
}

/// The entry of a single page (a folio of order 0).
#[cfg_attr(not(test), allow(dead_code))]
#[inline]
pub fn page_entry(pfn: Pfn) -> usize {
    folio_entry(pfn, 0)
}

/// The first frame of a folio entry, or None for empty and shadow entries.
#[inline]
pub fn entry_pfn(entry: usize) -> Option<Pfn> {
    if entry & (SHADOW_BIT | TAG_MASK) == TAG_FOLIO {
        Some((entry >> PFN_SHIFT) as Pfn)
    } else {
        None
    }
}

/// The order of a folio entry (0 for anything else).
#[inline]
pub fn entry_order(entry: usize) -> u32 {
    if entry & (SHADOW_BIT | TAG_MASK) == TAG_FOLIO {
        ((entry >> ORDER_SHIFT) & ORDER_MASK) as u32
    } else {
        0
    }
}

/// The hit path's one test of an entry: `entry & SINGLE_PAGE_MASK ==
/// SINGLE_PAGE` holds exactly for a single page's entry that is not frozen
/// (empty, shadow, sibling and large-folio entries fail it).
pub const SINGLE_PAGE_MASK: usize = SHADOW_BIT | SLOT_FROZEN | (ORDER_MASK << ORDER_SHIFT) | TAG_MASK;
pub const SINGLE_PAGE: usize = TAG_FOLIO;

/// The frame of an entry that passed the test above.
#[inline(always)]
pub fn single_page_pfn(entry: usize) -> Pfn {
    debug_assert!(entry & SINGLE_PAGE_MASK == SINGLE_PAGE);
    (entry >> PFN_SHIFT) as Pfn
}

/// The frame holding page `index` in the folio of `entry`, which covers
/// it (folios are aligned to their size in the file, as in the kernel).
#[inline(always)]
pub fn entry_page_pfn(entry: usize, index: u64) -> Option<Pfn> {
    let head = entry_pfn(entry)?;
    if entry & (ORDER_MASK << ORDER_SHIFT) == 0 {
        // A single page: no offset to add (the common case, kept cheap).
        return Some(head);
    }
    Some(head + (index & ((1u64 << entry_order(entry)) - 1)) as Pfn)
}

#[inline]
fn is_value(entry: usize) -> bool {
    entry & SHADOW_BIT != 0
}

#[inline]
pub(crate) fn is_node(v: usize) -> bool {
    v & (SHADOW_BIT | TAG_MASK) == TAG_NODE
}

/// The slot word linking node `n`.
#[inline]
fn node_word(n: *const Node) -> usize {
    n as usize | TAG_NODE
}

/// The node a slot word that `is_node` links. A subtraction rather than a
/// mask, so the walk folds it into the next slot's address.
#[inline]
fn word_node(v: usize) -> *mut Node {
    v.wrapping_sub(TAG_NODE) as *mut Node
}

#[inline]
pub(crate) fn is_sibling(v: usize) -> bool {
    v & (SHADOW_BIT | TAG_MASK) == TAG_SIBLING
}

/// The word of slot `own` of a node, a sibling of the entry at slot
/// `head`: both offsets in the word, so a reader that reached the slot
/// finds the head slot in place, `own - head` slots before it.
#[inline]
pub(crate) fn sibling(head: usize, own: usize) -> usize {
    (own << 8) | (head << 2) | TAG_SIBLING
}

#[inline]
pub(crate) fn sibling_head(v: usize) -> usize {
    (v >> 2) & (FANOUT - 1)
}

/// The offset of the slot a sibling word sits in.
#[inline]
pub(crate) fn sibling_own(v: usize) -> usize {
    (v >> 8) & (FANOUT - 1)
}

/// Whether `e`, found at the head slot of a node at `level`, spans the
/// slot `delta` places after it: a shadow is trusted (its span is not in
/// the word; writers keep it right under the lock), a folio entry must
/// belong to this level and reach that far.
#[inline]
pub(crate) fn spans(e: usize, level: usize, delta: usize) -> bool {
    if is_value(e) {
        return true;
    }
    if entry_pfn(e).is_none() {
        return false;
    }
    let order = entry_order(e);
    let low = SHIFT * level as u32;
    order >= low && order < low + SHIFT && delta < 1 << (order - low)
}

/// The part of order `order` of entry `e` that starts `delta` pages after
/// it: the folio's frames from there, or the same shadow (a split shadow
/// stands for each part, as xas_split copies it).
#[inline]
fn sub_entry(e: usize, delta: u64, order: u32) -> usize {
    match entry_pfn(e) {
        Some(pfn) => folio_entry(pfn + delta as Pfn, order),
        None => e,
    }
}

/// An xa_node: 560 bytes, 576 with its cache-line alignment (the kernel's
/// xa_node is 576 bytes too).
#[repr(C, align(64))]
struct Node {
    slots: [AtomicUsize; FANOUT],
    marks: [AtomicU64; NR_MARKS],
    /// Non-empty slots (a leaf's entries, an interior node's children),
    /// and in a leaf how many of them are shadow entries (xa_node's count
    /// and nr_values). Written under the tree lock.
    count: AtomicU32,
    values: AtomicU32,
    /// The first index the node covers and the owning mapping, set at
    /// allocation: the shadow-node shrinker finds a leaf again by them.
    index: AtomicU64,
    mapping: AtomicU32,
    /// 1 while on the shadow-node list. Set and cleared under both the tree
    /// lock and the list lock (rotation leaves it alone), so either lock
    /// suffices to read it.
    on_list: AtomicU32,
    /// The node's height above the leaves (0: a leaf), set at allocation.
    level: AtomicU32,
    /// Shadow-node list links (xa_node's private_list), under the list
    /// lock. While the node is free, `slots[0]` links the chunk's free list.
    prev: AtomicUsize,
    next: AtomicUsize,
}

const NODE_SIZE: usize = std::mem::size_of::<Node>();
const _: () = assert!(NODE_SIZE == 576);

/// A node reference from a pointer the caller knows to be live.
///
/// # Safety
/// `p` is a node of a live tree, reachable by the caller under the tree
/// lock, or under a `WalkGuard` that began before the caller loaded `p`;
/// or a node its slab owns (free, or being handed out) under the slab
/// lock; or a node on the shadow-node list, under the list lock.
#[inline]
unsafe fn node<'a>(p: *const Node) -> &'a Node {
    // SAFETY: per the function's contract; nodes are never moved.
    unsafe { &*p }
}

/// State shared by every page tree of a cache: the hazard table whose walk
/// announcements keep retired nodes alive, node accounting for vmstat, and
/// the shadow-node list (the kernel's radix_tree_node_cachep and
/// `shadow_nodes` list_lru together).
pub struct NodeCache {
    pub hazards: Arc<HazardTable>,
    /// Nodes allocated (in trees, or retired and not yet reclaimed).
    nr_nodes: AtomicI64,
    /// Of those, retired and waiting for readers to move on.
    nr_retired: AtomicI64,
    /// Bytes of node chunks held by all trees, free nodes included.
    bytes: AtomicI64,
    shadow_nodes: Mutex<ShadowList>,
}

/// The shadow-node list, oldest first.
struct ShadowList {
    head: *mut Node,
    tail: *mut Node,
    len: u64,
}

// SAFETY: the list's nodes are live (a node leaves the list before it is
// retired or its tree is dropped) and are linked only under the list's
// mutex.
unsafe impl Send for ShadowList {}

impl NodeCache {
    pub fn new(hazards: Arc<HazardTable>) -> NodeCache {
        NodeCache {
            hazards,
            nr_nodes: AtomicI64::new(0),
            nr_retired: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            shadow_nodes: Mutex::new(ShadowList { head: std::ptr::null_mut(), tail: std::ptr::null_mut(), len: 0 }),
        }
    }

    /// Nodes in trees or retired (vmstat `nr_pagetree_nodes`).
    pub fn nr_nodes(&self) -> u64 {
        self.nr_nodes.load(Ordering::Relaxed).max(0) as u64
    }

    /// Retired nodes not yet reclaimed (`nr_pagetree_nodes_retired`).
    pub fn nr_retired(&self) -> u64 {
        self.nr_retired.load(Ordering::Relaxed).max(0) as u64
    }

    /// Bytes of node memory held (`pagetree_node_bytes`).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed).max(0) as u64
    }

    /// Shadow nodes on the list (`workingset_nodes`).
    pub fn nr_shadow_nodes(&self) -> u64 {
        self.shadow_nodes.lock().len
    }

    /// For the shadow-node shrinker: when more than `max` nodes are on the
    /// list, the (mapping, first index, level) of the oldest, which moves
    /// to the tail (so a node the shrinker cannot take is not looked at
    /// again first).
    pub fn oldest_shadow_node_over(&self, max: u64) -> Option<(u32, u64, usize)> {
        let mut list = self.shadow_nodes.lock();
        if list.len <= max || list.head.is_null() {
            return None;
        }
        let n = list.head;
        // SAFETY: on the list, so live; we hold the list lock.
        let (mapping, index, level) = unsafe {
            let n = node(n);
            (n.mapping.load(Ordering::Relaxed), n.index.load(Ordering::Relaxed), n.level.load(Ordering::Relaxed))
        };
        list.move_tail(n);
        Some((mapping, index, level as usize))
    }
}

impl ShadowList {
    /// list_lru_add: `n` (a leaf, under its tree's lock) joins the tail.
    fn add(&mut self, n: *mut Node) {
        self.link_tail(n);
        // SAFETY: `n` is live; both locks held.
        unsafe { node(n).on_list.store(1, Ordering::Relaxed) };
    }

    fn link_tail(&mut self, n: *mut Node) {
        // SAFETY: `n` and the list's nodes are live; list lock held.
        unsafe {
            node(n).prev.store(self.tail as usize, Ordering::Relaxed);
            node(n).next.store(0, Ordering::Relaxed);
            if self.tail.is_null() {
                self.head = n;
            } else {
                node(self.tail).next.store(n as usize, Ordering::Relaxed);
            }
        }
        self.tail = n;
        self.len += 1;
    }

    /// list_lru_del: `n` (under its tree's lock, or its tree being
    /// dropped) leaves the list.
    fn del(&mut self, n: *mut Node) {
        debug_assert!(self.len > 0);
        self.unlink(n);
        // SAFETY: as in `unlink`.
        unsafe { node(n).on_list.store(0, Ordering::Relaxed) };
        self.len -= 1;
    }

    /// Rotate `n` to the tail. `on_list` stays set throughout: the tree
    /// reads it under its own lock only, not the list's.
    fn move_tail(&mut self, n: *mut Node) {
        self.unlink(n);
        self.len -= 1;
        self.link_tail(n);
    }

    fn unlink(&mut self, n: *mut Node) {
        // SAFETY: `n` is on this list, as are its neighbours; lock held.
        unsafe {
            let prev = node(n).prev.load(Ordering::Relaxed) as *mut Node;
            let next = node(n).next.load(Ordering::Relaxed) as *mut Node;
            if prev.is_null() {
                self.head = next;
            } else {
                node(prev).next.store(next as usize, Ordering::Relaxed);
            }
            if next.is_null() {
                self.tail = prev;
            } else {
                node(next).prev.store(prev as usize, Ordering::Relaxed);
            }
        }
    }
}

/// A run of nodes from one allocation, with its own free list.
struct Chunk {
    base: NonNull<Node>,
    layout: Layout,
    /// Nodes the chunk holds, and how many were ever handed out.
    nr: usize,
    bumped: usize,
    /// Reclaimed nodes, linked through `slots[0]`.
    free: *mut Node,
    nr_free: usize,
}

impl Chunk {
    fn room(&self) -> usize {
        self.nr - self.bumped + self.nr_free
    }

    fn contains(&self, n: *mut Node) -> bool {
        let base = self.base.as_ptr() as usize;
        (base..base + self.nr * NODE_SIZE).contains(&(n as usize))
    }
}

/// Nodes come from chunks that grow by half from 1 node up to `CHUNK_MAX`
/// (2 MiB, huge-page backed), so a big file's tree is dense in memory and
/// TLB while a small file's costs only the nodes it uses (many files hold
/// a page or two). Reclaimed nodes return to their chunk's free list; a chunk none of
/// whose nodes is in use is released.
struct NodeSlab {
    chunks: Vec<Chunk>,
    /// Unlinked nodes and the epoch they were retired in.
    retired: Vec<(*mut Node, u64)>,
    /// Retired nodes at which `retire` next tries to reclaim: a batch
    /// beyond what the last attempt had to keep, so a walker that stalls
    /// (preempted mid-walk, say) costs one membarrier per batch, not one
    /// per retirement.
    reclaim_at: usize,
}

const CHUNK_MAX: usize = (2 << 20) / NODE_SIZE;

impl NodeSlab {
    /// A zeroed node.
    fn alloc(&mut self, stats: &NodeCache) -> *mut Node {
        // The fullest chunk with room, so emptier ones can drain and go.
        let pick = (0..self.chunks.len()).filter(|&i| self.chunks[i].room() > 0).min_by_key(|&i| self.chunks[i].room());
        let i = match pick {
            Some(i) => i,
            None => {
                // Growing by half the capacity keeps the unused tail of the
                // newest chunk under a third of the nodes in use.
                let capacity: usize = self.chunks.iter().map(|c| c.nr).sum();
                let count = (capacity / 2).clamp(1, CHUNK_MAX);
                let align = if count == CHUNK_MAX { 2 << 20 } else { std::mem::align_of::<Node>() };
                let layout = match Layout::from_size_align(count * NODE_SIZE, align) {
                    Ok(l) => l,
                    Err(_) => handle_alloc_error(Layout::new::<Node>()),
                };
                // SAFETY: non-zero size. All-zero bytes are a valid Node:
                // empty slots, clear marks, zero counts (atomics of zero).
                let ptr = unsafe { alloc_zeroed(layout) };
                let Some(base) = NonNull::new(ptr.cast::<Node>()) else { handle_alloc_error(layout) };
                crate::arena::advise_huge(base.as_ptr().cast(), layout.size());
                stats.bytes.fetch_add(layout.size() as i64, Ordering::Relaxed);
                self.chunks.push(Chunk { base, layout, nr: count, bumped: 0, free: std::ptr::null_mut(), nr_free: 0 });
                self.chunks.len() - 1
            }
        };
        let c = &mut self.chunks[i];
        stats.nr_nodes.fetch_add(1, Ordering::Relaxed);
        if !c.free.is_null() {
            let n = c.free;
            // SAFETY: a reclaimed node of this chunk: no reader can reach it
            // (reclaim waited for them) and no writer holds it. Zeroing its
            // atomics with plain writes races with nothing.
            unsafe {
                c.free = node(n).slots[0].load(Ordering::Relaxed) as *mut Node;
                std::ptr::write_bytes(n, 0, 1);
            }
            c.nr_free -= 1;
            return n;
        }
        // SAFETY: bumped < nr, inside the chunk; never handed out, so still
        // zero from alloc_zeroed.
        let n = unsafe { c.base.as_ptr().add(c.bumped) };
        c.bumped += 1;
        n
    }

    /// Return a node no reader or writer can reach to its chunk.
    fn free(&mut self, n: *mut Node, stats: &NodeCache) {
        stats.nr_nodes.fetch_sub(1, Ordering::Relaxed);
        let pos = self.chunks.iter().position(|c| c.contains(n));
        debug_assert!(pos.is_some(), "a node from no chunk of this tree");
        let Some(i) = pos else { return };
        let c = &mut self.chunks[i];
        // SAFETY: `n` is in this chunk and unreachable; the free list link
        // is its first slot.
        unsafe { node(n).slots[0].store(c.free as usize, Ordering::Relaxed) };
        c.free = n;
        c.nr_free += 1;
        if c.nr_free == c.bumped {
            let c = self.chunks.swap_remove(i);
            stats.bytes.fetch_sub(c.layout.size() as i64, Ordering::Relaxed);
            // SAFETY: allocated in `alloc` with this layout; no node of it
            // is in use, and the free list went with the chunk.
            unsafe { dealloc(c.base.as_ptr().cast(), c.layout) };
        }
    }

    /// Reclaim the retired nodes no walk can still be in.
    fn reclaim(&mut self, stats: &NodeCache) {
        if self.retired.is_empty() {
            return;
        }
        let oldest = stats.hazards.walk_sync();
        let mut i = 0;
        while i < self.retired.len() {
            let (n, tag) = self.retired[i];
            if tag < oldest {
                self.retired.swap_remove(i);
                stats.nr_retired.fetch_sub(1, Ordering::Relaxed);
                self.free(n, stats);
            } else {
                i += 1;
            }
        }
        self.reclaim_at = self.retired.len() + RETIRE_BATCH;
    }
}

pub struct PageTree {
    root: AtomicUsize,
    /// The owning inode's id, recorded in nodes for the shrinker.
    mapping: u32,
    slab: Mutex<NodeSlab>,
    cache: Arc<NodeCache>,
}

// SAFETY: nodes are reached only through atomics; they are reused only
// after the walk protocol above shows no reader can hold them, and freed
// with the tree, when no reader can hold it.
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

#[inline]
fn offset(index: u64, level: usize) -> usize {
    ((index >> (SHIFT * level as u32)) & MASK) as usize
}

/// Where the entry covering an index sits, for a writer (tree lock held):
/// the nodes from the top down to the one holding it (`path[level]`), the
/// offset of its head slot there and how many slots it spans.
struct Pos {
    path: [*const Node; MAX_PATH],
    height: usize,
    level: usize,
    head: usize,
    nr: usize,
}

impl Pos {
    fn node(&self) -> &Node {
        // SAFETY: found under the tree lock, which the holder of a Pos
        // keeps while it uses it.
        unsafe { node(self.path[self.level]) }
    }

    /// The entry's first index.
    fn index(&self) -> u64 {
        self.node().index.load(Ordering::Relaxed) + ((self.head as u64) << (SHIFT * self.level as u32))
    }

    /// log2 of the indices the entry covers.
    fn order(&self) -> u32 {
        SHIFT * self.level as u32 + self.nr.trailing_zeros()
    }

    fn entry(&self) -> usize {
        self.node().slots[self.head].load(Ordering::Relaxed)
    }
}

impl PageTree {
    /// An empty tree of mapping `mapping`, its nodes from `cache`.
    pub fn new(cache: Arc<NodeCache>, mapping: u32) -> PageTree {
        PageTree {
            root: AtomicUsize::new(0),
            mapping,
            slab: Mutex::new(NodeSlab { chunks: Vec::new(), retired: Vec::new(), reclaim_at: RETIRE_BATCH }),
            cache,
        }
    }

    /// A tree with a node cache of its own (tests).
    #[cfg(test)]
    pub fn detached() -> PageTree {
        PageTree::new(Arc::new(NodeCache::new(Arc::new(HazardTable::new()))), 0)
    }

    /// Announce a lock-free walk: slots found under the guard stay valid
    /// memory until it drops.
    #[inline]
    pub fn walk(&self) -> WalkGuard<'_> {
        self.cache.hazards.walk_begin()
    }

    /// A zeroed node covering `index` at `level`.
    fn alloc_node(&self, index: u64, level: usize) -> *mut Node {
        let n = self.slab.lock().alloc(&self.cache);
        let span = span_bits(level);
        let base = if span >= 64 { 0 } else { index & !((1u64 << span) - 1) };
        // SAFETY: fresh, ours until published.
        unsafe {
            node(n).index.store(base, Ordering::Relaxed);
            node(n).mapping.store(self.mapping, Ordering::Relaxed);
            node(n).level.store(level as u32, Ordering::Relaxed);
        }
        n
    }

    #[inline]
    fn root(&self) -> (*const Node, usize) {
        let r = self.root.load(Ordering::Acquire);
        ((r & !HEIGHT_MASK) as *const Node, r & HEIGHT_MASK)
    }

    /// The walk every lookup starts with: node links down to the first
    /// slot on the way to `index` that holds anything else (an entry above
    /// the leaves, a sibling, or 0), or the leaf slot, with the word it
    /// held. The caller either holds the tree lock or walks under a guard.
    #[inline(always)]
    fn walk_to_entry(&self, index: u64) -> Option<(&AtomicUsize, usize)> {
        let (mut n, mut level) = self.root();
        if n.is_null() || !fits(index, level) {
            return None;
        }
        while level > 0 {
            // SAFETY: `n` came from the root or a parent slot, loaded under
            // the caller's guard or tree lock, so it is not reused while
            // the returned reference (bound by the caller's guard) is used.
            let s = &unsafe { node(n) }.slots[offset(index, level)];
            let v = s.load(Ordering::Acquire);
            // `is_node` and `word_node` in one: a link less its tag is the
            // node's address, with the tag and shadow bits clear; any other
            // word less 3 has one of them set (0 and shadows included).
            let u = v.wrapping_sub(TAG_NODE);
            if u & (SHADOW_BIT | TAG_MASK) != 0 {
                return Some((s, v));
            }
            n = u as *const Node;
            level -= 1;
        }
        // SAFETY: as above.
        let s = &unsafe { node(n) }.slots[offset(index, 0)];
        Some((s, s.load(Ordering::Acquire)))
    }

    /// The head slot of the entry covering `index` and the entry it held
    /// (a folio entry that covers `index`, a shadow, or 0), walking from
    /// the top; a sibling sends it to `lookup_sibling`, out of line. The
    /// caller either holds the tree lock or walks under a guard.
    #[inline(always)]
    fn lookup_inner(&self, index: u64) -> Option<(&AtomicUsize, usize)> {
        let (s, v) = self.walk_to_entry(index)?;
        if is_sibling(v) {
            return self.resolve_sibling(index, s, v);
        }
        Some((s, v))
    }

    /// A sibling `v` that a walk to `index` found in slot `s`: the head's
    /// slot in the same node, `own - head` slots back, and its entry, if
    /// that still spans this slot; else the walk again (`lookup_sibling`).
    /// The span needs no level: an entry in a node of level L has an
    /// order from 6L to 6L + 5 (a split's smaller parts go to new nodes).
    /// Out of line, as `lookup_sibling`: lookups of single pages, which
    /// inline the walk, stay as small as they were.
    #[cold]
    #[inline(never)]
    fn resolve_sibling<'a>(&'a self, index: u64, s: &'a AtomicUsize, v: usize) -> Option<(&'a AtomicUsize, usize)> {
        let (own, head) = (sibling_own(v), sibling_head(v));
        if head < own {
            // SAFETY: a sibling word is stored only in the slot whose
            // offset it carries (`sibling(head, own)` into `slots[own]`),
            // so `s` is `slots[own]` of a node and `own - head` elements
            // back is `slots[head]` of the same array, borrowed under the
            // same guard or lock as `s` (the node is not reused meanwhile).
            let hs = unsafe { &*(s as *const AtomicUsize).sub(own - head) };
            let e = hs.load(Ordering::Acquire);
            let delta = own - head;
            if is_value(e) || (entry_pfn(e).is_some() && delta < 1 << (entry_order(e) % SHIFT)) {
                return Some((hs, e));
            }
            if e == 0 {
                return None;
            }
        }
        self.lookup_sibling(index)
    }

    /// `lookup_inner` for an index that a multi-index entry covers: a
    /// sibling slot sends the walk to its head slot in the same node. A writer may have
    /// changed the head meanwhile (a split, a removal): an empty head
    /// means the entry is gone, any other that does not reach this slot
    /// sends the walk round again (writers write siblings before heads and
    /// clear them before heads, so this ends when the writer's store does).
    #[cold]
    #[inline(never)]
    fn lookup_sibling(&self, index: u64) -> Option<(&AtomicUsize, usize)> {
        'walk: loop {
            let (mut n, height) = self.root();
            if n.is_null() || !fits(index, height) {
                return None;
            }
            let mut level = height;
            loop {
                // SAFETY: as in `lookup_inner`.
                let nd = unsafe { node(n) };
                let off = offset(index, level);
                let s = &nd.slots[off];
                let v = s.load(Ordering::Acquire);
                if is_node(v) {
                    if level == 0 {
                        return None;
                    }
                    n = word_node(v);
                    level -= 1;
                    continue;
                }
                if v == 0 {
                    return None;
                }
                if !is_sibling(v) {
                    return Some((s, v));
                }
                let head = sibling_head(v);
                let hs = &nd.slots[head];
                let e = hs.load(Ordering::Acquire);
                if head < off && spans(e, level, off - head) {
                    return Some((hs, e));
                }
                if e == 0 {
                    return None;
                }
                std::hint::spin_loop();
                continue 'walk;
            }
        }
    }

    /// The head slot of the entry covering `index` and the entry it held
    /// (0: no entry). Lock-free; the slot stays valid memory while
    /// `_walk` lives, so the hit path can pin the page and re-check the
    /// slot. If the node is deleted meanwhile, the slot reads 0. (The hit
    /// path takes it in two steps, `lookup_leaf` and `resolve_leaf`.)
    #[cfg_attr(not(test), allow(dead_code))]
    #[inline(always)]
    pub fn lookup<'g>(&'g self, index: u64, _walk: &'g WalkGuard<'_>) -> Option<(&'g AtomicUsize, usize)> {
        self.lookup_inner(index)
    }

    /// The hit path's walk (`walk_to_entry`): the slot it ends at and the
    /// word it held, unresolved. A word that is not a single page's
    /// (`SINGLE_PAGE_MASK`) may be a sibling or a large folio's: the caller
    /// then takes `resolve_leaf`. Lock-free, under `_walk` as `lookup`.
    #[inline(always)]
    pub fn lookup_leaf<'g>(&'g self, index: u64, _walk: &'g WalkGuard<'_>) -> Option<(&'g AtomicUsize, usize)> {
        self.walk_to_entry(index)
    }

    /// The entry a `lookup_leaf` word `v` in slot `s` stands for: a
    /// sibling's head slot and entry, found in the same node without a
    /// second walk (else as `lookup`), or the word itself. Under `_walk`.
    #[inline]
    pub fn resolve_leaf<'g>(
        &'g self,
        index: u64,
        s: &'g AtomicUsize,
        v: usize,
        _walk: &'g WalkGuard<'_>,
    ) -> Option<(&'g AtomicUsize, usize)> {
        if is_sibling(v) {
            return self.resolve_sibling(index, s, v);
        }
        Some((s, v))
    }

    /// The head slot of the entry covering `index` (see `lookup`).
    #[inline]
    pub fn slot<'g>(&'g self, index: u64, _walk: &'g WalkGuard<'_>) -> Option<&'g AtomicUsize> {
        self.lookup_inner(index).map(|(s, _)| s)
    }

    /// `slot` for a caller holding the tree lock (the guard of the owning
    /// inode's `tree_lock`): the slot stays valid while the lock is held.
    #[inline]
    pub fn slot_locked<'a>(&'a self, index: u64, _locked: &'a TreeLocked<'_>) -> Option<&'a AtomicUsize> {
        self.lookup_inner(index).map(|(s, _)| s)
    }

    /// The entry covering `index` (0 if none): a page's, or the folio's
    /// holding it, or a shadow. Lock-free.
    #[inline]
    pub fn load(&self, index: u64) -> usize {
        let _walk = self.walk();
        self.lookup_inner(index).map_or(0, |(_, e)| e)
    }

    /// The entry covering `index` with its first index and order, under
    /// the tree lock (`_locked`).
    pub fn load_order(&self, index: u64, _locked: &TreeLocked<'_>) -> Option<(usize, u64, u32)> {
        let pos = self.find(index)?;
        Some((pos.entry(), pos.index(), pos.order()))
    }

    /// Store `entry` at `index` (a single index: order 0), growing the
    /// tree as needed; an `entry` of 0 erases the entry covering `index`,
    /// whatever its span, deleting nodes left empty. Returns the entry that
    /// covered `index`. `_locked`: the caller holds the tree lock.
    pub fn store(&self, index: u64, entry: usize, locked: &TreeLocked<'_>) -> usize {
        if entry == 0 {
            return self.erase(index);
        }
        self.store_order(index, 0, entry, locked)
    }

    /// Store `entry` over the `1 << order` indices from `index` (aligned to
    /// them), as xas_store does with a multi-index entry: in the node at
    /// level `order / 6`, its head slot and `2^(order % 6) - 1` sibling
    /// slots that name the head. A larger entry covering the range is
    /// split first; smaller entries inside it are erased. Keeps nodes'
    /// places on the shadow-node list right. Returns the entry that covered
    /// `index` before. `_locked`: the caller holds the tree lock.
    pub fn store_order(&self, index: u64, order: u32, entry: usize, _locked: &TreeLocked<'_>) -> usize {
        debug_assert!(entry != 0 && !is_node(entry) && !is_sibling(entry), "not an entry: {entry:#x}");
        debug_assert!(order <= MAX_ENTRY_ORDER && (entry_pfn(entry).is_none() || entry_order(entry) == order));
        let span = 1u64 << order;
        let base = index & !(span - 1);
        let mut old = 0;
        if let Some(pos) = self.find(base) {
            old = pos.entry();
            if pos.order() > order {
                self.split_at(&pos, order);
            }
        }
        if order > 0 {
            let mut inside = Vec::new();
            self.for_each(base, base.saturating_add(span), None, &mut |i, _| {
                inside.push(i);
                true
            });
            for i in inside {
                let same = self.find(i).is_some_and(|p| p.index() == base && p.order() == order);
                if !same {
                    self.erase(i);
                }
            }
        }
        let level = order as usize / SHIFT as usize;
        let nr = 1usize << (order % SHIFT);
        let n = self.create_node(base, level);
        // SAFETY: a live node; we hold the tree lock.
        let nd = unsafe { node(n) };
        let head = offset(base, level);
        let was_value = is_value(nd.slots[head].load(Ordering::Relaxed));
        let mut filled = 0u32;
        // Siblings before the head: a reader that resolves one finds the
        // old head (0, or the same-span entry this replaces) or the new.
        for s in head + 1..head + nr {
            filled += (nd.slots[s].swap(sibling(head, s), Ordering::Release) != 0) as u32;
        }
        filled += (nd.slots[head].swap(entry, Ordering::AcqRel) != 0) as u32;
        let count = nd.count.load(Ordering::Relaxed) + nr as u32 - filled;
        let values = nd.values.load(Ordering::Relaxed) + if is_value(entry) { nr as u32 } else { 0 }
            - if was_value { filled } else { 0 };
        nd.count.store(count, Ordering::Relaxed);
        nd.values.store(values, Ordering::Relaxed);
        self.workingset_update_node(n);
        old
    }

    /// Split the entry covering `index` into entries of `order` (xas_split):
    /// a folio entry into entries of its frames from each part's first, a
    /// shadow into copies. Each part keeps the entry's marks. Nothing
    /// happens if the entry is already that small. Readers see either the
    /// whole entry or the part covering their index, never a gap: parts
    /// that need nodes of their own are built in full before they are
    /// linked, and the head slot changes last. `_locked`: tree lock held.
    pub fn split(&self, index: u64, order: u32, _locked: &TreeLocked<'_>) {
        if let Some(pos) = self.find(index) {
            if pos.order() > order {
                self.split_at(&pos, order);
            }
        }
    }

    fn split_at(&self, pos: &Pos, order: u32) {
        let level = pos.level;
        let nd = pos.node();
        let e = pos.entry();
        let first = pos.index();
        let marked: [bool; NR_MARKS] =
            std::array::from_fn(|m| nd.marks[m].load(Ordering::Relaxed) & (1 << pos.head) != 0);
        let low = SHIFT * level as u32;
        if order >= low {
            // The parts stay in this node: rewrite the slots group by
            // group, the head's own group last.
            let group = 1usize << (order - low);
            for g in (pos.head..pos.head + pos.nr).step_by(group).rev() {
                for s in g + 1..g + group {
                    nd.slots[s].store(sibling(g, s), Ordering::Release);
                }
                nd.slots[g].store(sub_entry(e, ((g - pos.head) as u64) << low, order), Ordering::Release);
                for (m, &on) in marked.iter().enumerate() {
                    if on {
                        nd.marks[m].fetch_or(1 << g, Ordering::Relaxed);
                    }
                }
            }
            // Every slot still holds a part of the entry: count and
            // values stand.
            return;
        }
        // Each slot becomes a node of its own, built before it is linked.
        for s in (pos.head..pos.head + pos.nr).rev() {
            let base = first + (((s - pos.head) as u64) << low);
            let child = self.build_split(e, first, base, level - 1, order, &marked);
            // Release: the child's slots are visible before the link.
            nd.slots[s].store(node_word(child), Ordering::Release);
            for (m, &on) in marked.iter().enumerate() {
                if on {
                    nd.marks[m].fetch_or(1 << s, Ordering::Relaxed);
                }
            }
        }
        if is_value(e) {
            nd.values.store(nd.values.load(Ordering::Relaxed) - pos.nr as u32, Ordering::Relaxed);
        }
        self.workingset_update_node(pos.path[level] as *mut Node);
    }

    /// A new node at `level` from index `base`, holding the parts of order
    /// `order` of `e` (whose first index is `first`), with `marked` marks.
    fn build_split(&self, e: usize, first: u64, base: u64, level: usize, order: u32, marked: &[bool]) -> *mut Node {
        let n = self.alloc_node(base, level);
        // SAFETY: fresh, ours until the caller links it.
        let nd = unsafe { node(n) };
        let low = SHIFT * level as u32;
        let mut bits = 0u64;
        if order >= low {
            let group = 1usize << (order - low);
            for g in (0..FANOUT).step_by(group) {
                let at = base + ((g as u64) << low);
                nd.slots[g].store(sub_entry(e, at - first, order), Ordering::Relaxed);
                for s in g + 1..g + group {
                    nd.slots[s].store(sibling(g, s), Ordering::Relaxed);
                }
                bits |= 1 << g;
            }
            if is_value(e) {
                nd.values.store(FANOUT as u32, Ordering::Relaxed);
            }
        } else {
            for s in 0..FANOUT {
                let child = self.build_split(e, first, base + ((s as u64) << low), level - 1, order, marked);
                nd.slots[s].store(node_word(child), Ordering::Relaxed);
            }
            bits = u64::MAX;
        }
        nd.count.store(FANOUT as u32, Ordering::Relaxed);
        for (m, &on) in marked.iter().enumerate() {
            if on {
                nd.marks[m].store(bits, Ordering::Relaxed);
            }
        }
        self.workingset_update_node(n);
        n
    }

    /// workingset_update_node: a node holding only shadows is on the
    /// shadow-node list, any other node is not. Tree lock held.
    fn workingset_update_node(&self, n: *mut Node) {
        // SAFETY: live node, tree lock held; `on_list` changes only under
        // the tree lock and the list lock together.
        let nd = unsafe { node(n) };
        let (count, values) = (nd.count.load(Ordering::Relaxed), nd.values.load(Ordering::Relaxed));
        let shadow = values > 0 && values == count;
        if shadow != (nd.on_list.load(Ordering::Relaxed) != 0) {
            let mut list = self.cache.shadow_nodes.lock();
            if shadow {
                list.add(n);
            } else {
                list.del(n);
            }
        }
    }

    /// The node at `level` on the way to `index`, growing the tree and
    /// creating the path. The caller has split any entry above `level`
    /// that covers `index`.
    fn create_node(&self, index: u64, level: usize) -> *mut Node {
        let (mut top, mut height) = self.root();
        if top.is_null() {
            height = level;
            while !fits(index, height) {
                height += 1;
            }
            top = self.alloc_node(index, height);
            // A fresh chain from a tall root: built top-down below.
            self.root.store(top as usize | height, Ordering::Release);
        }
        while !fits(index, height) || height < level {
            let new = self.alloc_node(0, height + 1);
            // SAFETY: `new` is ours until published; `top` is a live node.
            unsafe {
                node(new).slots[0].store(node_word(top), Ordering::Relaxed);
                node(new).count.store(1, Ordering::Relaxed);
                for m in 0..NR_MARKS {
                    if node(top).marks[m].load(Ordering::Relaxed) != 0 {
                        node(new).marks[m].store(1, Ordering::Relaxed);
                    }
                }
            }
            height += 1;
            top = new;
            self.root.store(top as usize | height, Ordering::Release);
        }
        let mut n = top as *mut Node;
        let mut lv = height;
        while lv > level {
            // SAFETY: live node, writers serialised by the tree lock.
            let parent = unsafe { node(n) };
            let s = &parent.slots[offset(index, lv)];
            let mut child = s.load(Ordering::Acquire);
            debug_assert!(child == 0 || is_node(child), "an entry above level {level} covers {index}");
            if child == 0 {
                child = node_word(self.alloc_node(index, lv - 1));
                // Release: the child's fields are visible before the link.
                s.store(child, Ordering::Release);
                parent.count.store(parent.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            n = word_node(child);
            lv -= 1;
        }
        n
    }

    /// Empty the slots of the entry covering `index`; delete the nodes this
    /// leaves empty. Returns the entry.
    fn erase(&self, index: u64) -> usize {
        let Some(pos) = self.find(index) else { return 0 };
        let n = pos.path[pos.level] as *mut Node;
        let nd = pos.node();
        let first = pos.index();
        for m in 0..NR_MARKS {
            self.clear_mark_at(&pos, first, m);
        }
        // Siblings before the head: a reader that resolves one finds the
        // entry, or an empty head.
        for s in (pos.head + 1..pos.head + pos.nr).rev() {
            nd.slots[s].store(0, Ordering::Release);
        }
        let old = nd.slots[pos.head].swap(0, Ordering::AcqRel);
        let nr = pos.nr as u32;
        debug_assert!(nd.count.load(Ordering::Relaxed) >= nr, "a node counts fewer slots than an entry spans");
        let count = nd.count.load(Ordering::Relaxed) - nr;
        nd.count.store(count, Ordering::Relaxed);
        if is_value(old) {
            nd.values.store(nd.values.load(Ordering::Relaxed) - nr, Ordering::Relaxed);
        }
        self.workingset_update_node(n);
        if count == 0 {
            self.delete_node(&pos.path, pos.height, pos.level, first);
        }
        old
    }

    /// xas_delete_node: the node at `level` on `path` is empty; unlink it
    /// and every ancestor it leaves empty, shrink the top, retire what came
    /// out.
    fn delete_node(&self, path: &[*const Node; MAX_PATH], height: usize, level: usize, index: u64) {
        let mut out = [std::ptr::null_mut::<Node>(); MAX_PATH];
        let mut nr_out = 0;
        let mut level = level;
        loop {
            let n = path[level] as *mut Node;
            // SAFETY: nodes of the path are live; tree lock held.
            if unsafe { node(n) }.count.load(Ordering::Relaxed) != 0 {
                break;
            }
            out[nr_out] = n;
            nr_out += 1;
            if level == height {
                self.root.store(0, Ordering::Release);
                break;
            }
            // SAFETY: as above.
            let parent = unsafe { node(path[level + 1]) };
            let slot = offset(index, level + 1);
            debug_assert!(
                (0..NR_MARKS).all(|m| parent.marks[m].load(Ordering::Relaxed) & (1 << slot) == 0),
                "an empty node has no marked entries"
            );
            // Release: pairs with readers' acquire loads of the link.
            parent.slots[slot].store(0, Ordering::Release);
            parent.count.store(parent.count.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
            level += 1;
        }
        nr_out += self.shrink(&mut out[nr_out..]);
        self.retire(&out[..nr_out]);
    }

    /// xas_shrink: while the top node's only child is a node in slot 0,
    /// that child becomes the top. Returns the old tops, written to `out`.
    fn shrink(&self, out: &mut [*mut Node]) -> usize {
        let mut nr = 0;
        loop {
            let (top, height) = self.root();
            if top.is_null() || height == 0 {
                return nr;
            }
            // SAFETY: the live top; tree lock held.
            let t = unsafe { node(top) };
            let child = t.slots[0].load(Ordering::Relaxed);
            if t.count.load(Ordering::Relaxed) != 1 || !is_node(child) {
                return nr;
            }
            // Readers still in the old top follow its slot 0 to the live
            // child, which keeps its marks.
            self.root.store(word_node(child) as usize | (height - 1), Ordering::Release);
            out[nr] = top as *mut Node;
            nr += 1;
        }
    }

    /// Retire unlinked nodes: reused once no walk can still be in them.
    fn retire(&self, nodes: &[*mut Node]) {
        if nodes.is_empty() {
            return;
        }
        let tag = self.cache.hazards.retire_epoch();
        self.cache.nr_retired.fetch_add(nodes.len() as i64, Ordering::Relaxed);
        let mut slab = self.slab.lock();
        slab.retired.extend(nodes.iter().map(|&n| (n, tag)));
        if slab.retired.len() >= slab.reclaim_at {
            slab.reclaim(&self.cache);
        }
    }

    /// Reclaim the retired nodes no reader can still see (after a
    /// truncation, say, so the memory of an emptied tree goes back now).
    pub fn reclaim_retired(&self) {
        self.slab.lock().reclaim(&self.cache);
    }

    /// The node at `level` on the way to `index`, if the tree has one.
    /// Caller holds the tree lock.
    fn node_at(&self, index: u64, level: usize) -> Option<*mut Node> {
        let (mut n, height) = self.root();
        if n.is_null() || !fits(index, height) || height < level {
            return None;
        }
        let mut lv = height;
        while lv > level {
            // SAFETY: live node.
            let v = unsafe { node(n) }.slots[offset(index, lv)].load(Ordering::Acquire);
            if !is_node(v) {
                return None;
            }
            n = word_node(v);
            lv -= 1;
        }
        Some(n as *mut Node)
    }

    /// Whether the node at `level` on the way to `index` holds only shadow
    /// entries. Caller holds the tree lock.
    pub fn is_shadow_node(&self, index: u64, level: usize) -> bool {
        self.node_at(index, level).is_some_and(|n| {
            // SAFETY: live node, tree lock held.
            let n = unsafe { node(n) };
            let (c, v) = (n.count.load(Ordering::Relaxed), n.values.load(Ordering::Relaxed));
            v > 0 && v == c
        })
    }

    /// shadow_lru_isolate's tree part: if the node at `level` on the way to
    /// `index` holds only shadow entries, drop them all and delete it.
    /// Returns the shadows dropped. `_locked`: the caller holds the tree
    /// lock.
    pub fn drop_shadow_node(&self, index: u64, level: usize, _locked: &TreeLocked<'_>) -> u32 {
        if !self.is_shadow_node(index, level) {
            return 0;
        }
        let Some(n) = self.node_at(index, level) else { return 0 };
        // SAFETY: live node, tree lock held.
        let nd = unsafe { node(n) };
        let base = nd.index.load(Ordering::Relaxed);
        let heads: Vec<u64> = (0..FANOUT)
            .filter(|&s| {
                let v = nd.slots[s].load(Ordering::Relaxed);
                v != 0 && !is_sibling(v)
            })
            .map(|s| base + ((s as u64) << (SHIFT * level as u32)))
            .collect();
        // The node goes with its last shadow; `erase` finds it by path.
        for &i in &heads {
            self.erase(i);
        }
        heads.len() as u32
    }

    /// Where the entry covering `index` sits. Caller holds the tree lock.
    fn find(&self, index: u64) -> Option<Pos> {
        let (top, height) = self.root();
        if top.is_null() || !fits(index, height) {
            return None;
        }
        let mut path = [std::ptr::null::<Node>(); MAX_PATH];
        let mut n = top;
        let mut level = height;
        loop {
            path[level] = n;
            // SAFETY: live node.
            let nd = unsafe { node(n) };
            let off = offset(index, level);
            let v = nd.slots[off].load(Ordering::Acquire);
            if v == 0 {
                return None;
            }
            if is_node(v) {
                if level == 0 {
                    return None;
                }
                n = word_node(v);
                level -= 1;
                continue;
            }
            let head = if is_sibling(v) { sibling_head(v) } else { off };
            let mut nr = 1;
            while head + nr < FANOUT && nd.slots[head + nr].load(Ordering::Relaxed) == sibling(head, head + nr) {
                nr += 1;
            }
            return Some(Pos { path, height, level, head, nr });
        }
    }

    /// Set mark `m` on the entry covering `index` (there must be one).
    /// `_locked`: the caller holds the tree lock.
    pub fn set_mark(&self, index: u64, m: usize, _locked: &TreeLocked<'_>) {
        if let Some(pos) = self.find(index) {
            for level in pos.level..=pos.height {
                let bit = if level == pos.level { pos.head } else { offset(index, level) };
                // SAFETY: live node.
                unsafe { node(pos.path[level]) }.marks[m].fetch_or(1 << bit, Ordering::Relaxed);
            }
        }
    }

    /// Clear mark `m` on the entry covering `index`. `_locked`: the caller
    /// holds the tree lock.
    pub fn clear_mark(&self, index: u64, m: usize, _locked: &TreeLocked<'_>) {
        if let Some(pos) = self.find(index) {
            self.clear_mark_at(&pos, index, m);
        }
    }

    fn clear_mark_at(&self, pos: &Pos, index: u64, m: usize) {
        for level in pos.level..=pos.height {
            let bit = 1 << if level == pos.level { pos.head } else { offset(index, level) };
            // SAFETY: live node.
            let marks = &unsafe { node(pos.path[level]) }.marks[m];
            // Not set here: nothing changes at this level, and a level
            // above holds its bit only while this one holds some (marks
            // change only under the tree lock, which we hold). Most
            // removals are of clean pages: no atomic write to the nodes
            // every CPU shares near the root.
            if marks.load(Ordering::Relaxed) & bit == 0 {
                break;
            }
            let left = marks.fetch_and(!bit, Ordering::Relaxed) & !bit;
            if left != 0 {
                break;
            }
        }
    }

    #[cfg(test)]
    pub fn get_mark(&self, index: u64, m: usize) -> bool {
        self.find(index).is_some_and(|pos| pos.node().marks[m].load(Ordering::Relaxed) & (1 << pos.head) != 0)
    }

    /// Visit the entries overlapping `[start, end)` in order, each once at
    /// its first index (which may lie before `start`), or only those with
    /// mark `mark`. `f` returns false to stop. Lock-free; entries may
    /// change under a reader, as in any gang lookup. `f` runs inside the
    /// walk, so it must not block for long: retired nodes wait for it.
    pub fn for_each(&self, start: u64, end: u64, mark: Option<usize>, f: &mut dyn FnMut(u64, usize) -> bool) {
        let _walk = self.walk();
        let (top, height) = self.root();
        if top.is_null() || start >= end {
            return;
        }
        Self::walk_node(top, height, 0, start, end, mark, f);
    }

    fn walk_node(
        n: *const Node,
        level: usize,
        base: u64,
        start: u64,
        end: u64,
        mark: Option<usize>,
        f: &mut dyn FnMut(u64, usize) -> bool,
    ) -> bool {
        let shift = SHIFT * level as u32;
        // SAFETY: reached under the caller's walk guard.
        let nd = unsafe { node(n) };
        let marks = mark.map(|m| nd.marks[m].load(Ordering::Relaxed));
        let mut slot = if start > base { ((start - base) >> shift).min(FANOUT as u64) as usize } else { 0 };
        if slot < FANOUT {
            // An entry that starts before `start` and reaches into it is
            // visited at its head.
            let v = nd.slots[slot].load(Ordering::Acquire);
            if is_sibling(v) {
                slot = sibling_head(v).min(slot);
            }
        }
        while slot < FANOUT {
            // Heights stay below 10 (indices are under 2^52), so no shift overflows.
            let lo = base + ((slot as u64) << shift);
            if lo >= end {
                return false;
            }
            let v = nd.slots[slot].load(Ordering::Acquire);
            let bit = 1u64 << slot;
            slot += 1;
            if v == 0 || is_sibling(v) || marks.is_some_and(|b| b & bit == 0) {
                continue;
            }
            if is_node(v) {
                if level > 0 && !Self::walk_node(word_node(v), level - 1, lo, start, end, mark, f) {
                    return false;
                }
                continue;
            }
            if !f(lo, v) {
                return false;
            }
        }
        true
    }

    /// Visit every node (tree lock held, or no reader at all): `f(node,
    /// level)`.
    fn for_each_node(&self, f: &mut dyn FnMut(*mut Node, usize)) {
        fn visit(n: *mut Node, level: usize, f: &mut dyn FnMut(*mut Node, usize)) {
            if level > 0 {
                for s in 0..FANOUT {
                    // SAFETY: live node of a tree no one else changes.
                    let v = unsafe { node(n) }.slots[s].load(Ordering::Acquire);
                    if is_node(v) {
                        visit(word_node(v), level - 1, f);
                    }
                }
            }
            f(n, level);
        }
        let (top, height) = self.root();
        if !top.is_null() {
            visit(top as *mut Node, height, f);
        }
    }
}

impl Drop for PageTree {
    fn drop(&mut self) {
        // No reader can hold the tree now; take its leaves off the shared
        // shadow-node list before their memory goes.
        let cache = self.cache.clone();
        let mut live = 0;
        self.for_each_node(&mut |n, _| {
            live += 1;
            // SAFETY: a live node; the list lock guards `on_list`.
            if unsafe { node(n) }.on_list.load(Ordering::Relaxed) != 0 {
                cache.shadow_nodes.lock().del(n);
            }
        });
        let slab = self.slab.get_mut();
        cache.nr_nodes.fetch_sub(live + slab.retired.len() as i64, Ordering::Relaxed);
        cache.nr_retired.fetch_sub(slab.retired.len() as i64, Ordering::Relaxed);
        slab.retired.clear();
        for c in slab.chunks.drain(..) {
            cache.bytes.fetch_sub(c.layout.size() as i64, Ordering::Relaxed);
            // SAFETY: allocated in `alloc` with this layout, freed once;
            // no reader can reach the tree's nodes any more.
            unsafe { dealloc(c.base.as_ptr().cast(), c.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tree writers take the tree lock's guard; these tests, which own
    /// their trees, take this one for each write.
    static TREE_LOCK: Mutex<()> = Mutex::new(());

    fn locked() -> TreeLocked<'static> {
        TREE_LOCK.lock()
    }

    fn nodes(t: &PageTree) -> u64 {
        t.cache.nr_nodes()
    }

    // Goal: entries stored at scattered indices (growing the tree several
    // times) read back, iterate in order, and marks select exactly the
    // marked ones.
    #[test]
    fn store_load_iterate_marks() {
        let t = PageTree::detached();
        let idx = [0u64, 1, 63, 64, 4095, 4096, 1 << 20, (1 << 40) + 7, 5];
        for (n, &i) in idx.iter().enumerate() {
            assert_eq!(t.store(i, page_entry(n as Pfn), &locked()), 0);
        }
        for (n, &i) in idx.iter().enumerate() {
            assert_eq!(t.load(i), page_entry(n as Pfn));
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
        t.set_mark(64, MARK_DIRTY, &locked());
        t.set_mark(1 << 20, MARK_DIRTY, &locked());
        assert!(t.get_mark(64, MARK_DIRTY));
        let mut marked = vec![];
        t.for_each(0, u64::MAX, Some(MARK_DIRTY), &mut |i, _| {
            marked.push(i);
            true
        });
        assert_eq!(marked, vec![64, 1 << 20]);
        t.clear_mark(64, MARK_DIRTY, &locked());
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
        assert_eq!(t.store(64, 0, &locked()), page_entry(3));
        assert_eq!(t.load(64), 0);
    }

    // Goal: clearing the mark of an entry that has none (the common
    // removal, of a clean page) changes nothing, at its leaf or above;
    // clearing a leaf's last mark clears it up to the root.
    #[test]
    fn clear_mark_of_an_unmarked_entry_keeps_the_marked() {
        let t = PageTree::detached();
        for i in [64u64, 65, 1 << 20] {
            t.store(i, page_entry(i as Pfn), &locked());
        }
        let marked = |t: &PageTree| {
            let mut v = vec![];
            t.for_each(0, u64::MAX, Some(MARK_DIRTY), &mut |i, _| {
                v.push(i);
                true
            });
            v
        };
        t.set_mark(65, MARK_DIRTY, &locked());
        t.clear_mark(64, MARK_DIRTY, &locked());
        t.clear_mark(1 << 20, MARK_DIRTY, &locked());
        assert_eq!(marked(&t), vec![65]);
        assert!(t.get_mark(65, MARK_DIRTY) && !t.get_mark(64, MARK_DIRTY));
        t.clear_mark(65, MARK_DIRTY, &locked());
        assert_eq!(marked(&t), Vec::<u64>::new());
        t.set_mark(1 << 20, MARK_DIRTY, &locked());
        t.clear_mark(65, MARK_DIRTY, &locked());
        assert_eq!(marked(&t), vec![1 << 20]);
    }

    // Goal: a leaf is on the shadow-node list exactly while it holds shadow
    // entries and nothing else: it joins when its last page goes, and
    // leaves when it gains a page or empties.
    #[test]
    fn shadow_node_list_membership() {
        let t = PageTree::detached();
        let on_list = || t.cache.nr_shadow_nodes();
        let sh = SHADOW_BIT | 7;
        t.store(70, page_entry(1), &locked());
        t.store(71, sh, &locked());
        assert_eq!(on_list(), 0, "a page is still there");
        t.store(70, sh, &locked());
        assert!(t.is_shadow_node(64, 0) && t.is_shadow_node(127, 0));
        assert_eq!(on_list(), 1);
        assert!(!t.is_shadow_node(0, 0), "another leaf");
        t.store(72, page_entry(2), &locked());
        assert_eq!(on_list(), 0, "gained a page: off the list");
        t.store(72, 0, &locked());
        assert_eq!(on_list(), 1);
        assert_eq!(t.cache.oldest_shadow_node_over(0), Some((0, 64, 0)));
        assert_eq!(t.cache.oldest_shadow_node_over(1), None, "within the limit");
        t.store(70, 0, &locked());
        t.store(71, 0, &locked());
        assert_eq!(on_list(), 0, "empty now");
        assert!(!t.is_shadow_node(64, 0));
    }

    // Goal: nodes emptied by erasure are deleted up to the top, the tree
    // shrinks its height as xarray does, and once reclaimed the memory of
    // an emptied tree is all returned (chunks released).
    #[test]
    fn empty_nodes_are_freed_and_height_shrinks() {
        let t = PageTree::detached();
        t.store(5, page_entry(1), &locked());
        assert_eq!(nodes(&t), 1);
        t.store(1 << 20, page_entry(2), &locked()); // height 3: top, two interior, a leaf each side
        assert_eq!(t.root().1, 3);
        let grown = nodes(&t);
        assert_eq!(grown, 1 + 3 + 3, "leaf 0 + three new tops + a path of three");
        t.store(1 << 20, 0, &locked());
        assert_eq!(t.root().1, 0, "shrunk back to the leaf holding index 5");
        assert_eq!(t.load(5), page_entry(1));
        t.reclaim_retired();
        assert_eq!(nodes(&t), 1);
        assert_eq!(t.cache.nr_retired(), 0);
        // Dense then sparse: many leaves, all freed when emptied.
        for i in 0..10_000u64 {
            t.store(i * 7, page_entry(i as Pfn + 10), &locked());
        }
        assert!(nodes(&t) > 1000 / 64);
        assert!(t.cache.bytes() > 0);
        for i in 0..10_000u64 {
            t.store(i * 7, 0, &locked());
        }
        t.reclaim_retired();
        assert_eq!(t.load(5), page_entry(1), "the untouched entry survives");
        t.store(5, 0, &locked());
        t.reclaim_retired();
        assert_eq!((nodes(&t), t.cache.nr_retired(), t.cache.bytes()), (0, 0, 0));
        assert_eq!(t.root().0, std::ptr::null());
    }

    // Goal: a node retired while a lock-free walk is announced is not
    // reused until the walk ends, and the slot the walk holds reads 0 (the
    // leaf was emptied), never another index's entry.
    #[test]
    fn retired_node_waits_for_walkers() {
        let t = PageTree::detached();
        t.store(64, page_entry(9), &locked());
        let walk = t.walk();
        let slot = t.slot(64, &walk).expect("leaf exists");
        t.store(64, 0, &locked());
        t.reclaim_retired();
        assert_eq!(t.cache.nr_retired(), 2, "our own walk holds the leaf and the top");
        // Reuse would need a free node: the retired one must not be it.
        t.store(64 * 5, page_entry(3), &locked());
        assert_eq!(slot.load(Ordering::Acquire), 0);
        drop(walk);
        t.reclaim_retired();
        assert_eq!(t.cache.nr_retired(), 0);
    }

    // Goal: a tree dropped while it holds shadow nodes takes them off the
    // list it shares with other trees, leaving the others' linked right.
    // Method: two trees on one node cache, a shadow node in each (one
    // before the other on the list), the first dropped.
    #[test]
    fn dropped_tree_leaves_the_shared_shadow_list() {
        let cache = Arc::new(NodeCache::new(Arc::new(HazardTable::new())));
        let a = PageTree::new(cache.clone(), 1);
        let b = PageTree::new(cache.clone(), 2);
        a.store(3, SHADOW_BIT | 1, &locked());
        b.store(700, SHADOW_BIT | 2, &locked());
        a.store(1 << 30, SHADOW_BIT | 3, &locked());
        assert_eq!(cache.nr_shadow_nodes(), 3);
        drop(a);
        assert_eq!(cache.nr_shadow_nodes(), 1);
        assert_eq!(cache.oldest_shadow_node_over(0), Some((2, 640, 0)));
        assert_eq!(cache.nr_nodes(), 2, "only b's top and leaf are left");
        b.store(700, 0, &locked());
        b.reclaim_retired();
        assert_eq!((cache.nr_shadow_nodes(), cache.nr_nodes(), cache.bytes()), (0, 0, 0));
    }

    // Goal: memory stays bounded by the live entries while a window of
    // live entries moves through a huge index space (the sparse-file case
    // the issue measured growing without bound).
    #[test]
    fn node_memory_follows_live_entries() {
        let t = PageTree::detached();
        let mut x = 1u64;
        let mut live = std::collections::VecDeque::new();
        let mut peak = 0;
        for round in 0..40_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (x >> 20) % (1 << 30);
            if t.store(i, page_entry(1), &locked()) == 0 {
                live.push_back(i);
            }
            if live.len() > 500 {
                let old = live.pop_front().unwrap();
                t.store(old, 0, &locked());
            }
            if round > 10_000 {
                peak = peak.max(t.cache.bytes());
            }
        }
        // Each live entry needs at most a leaf and a few interior nodes on
        // its own path: bound it by 4 nodes per entry (plus one retire batch).
        let bound = (500 * 4 + RETIRE_BATCH as u64) * NODE_SIZE as u64 * 2;
        assert!(peak <= bound, "peak {peak} over {bound}");
    }

    /// Every node's count and values agree with its slots, every sibling
    /// names a head before it in its node, every interior mark leads to a
    /// marked entry, and the shadow-node list holds exactly the nodes of
    /// shadows only.
    fn check(t: &PageTree) {
        t.for_each_node(&mut |n, level| {
            // SAFETY: the test owns the tree; no writer runs.
            let nd = unsafe { node(n) };
            let (mut count, mut values) = (0, 0);
            let mut head_value = false;
            for s in 0..FANOUT {
                let v = nd.slots[s].load(Ordering::Relaxed);
                if v == 0 {
                    continue;
                }
                count += 1;
                if is_sibling(v) {
                    let h = sibling_head(v);
                    assert!(h < s, "a sibling names a later slot");
                    assert!((h + 1..s).all(|i| nd.slots[i].load(Ordering::Relaxed) == sibling(h, i)), "gap in a span");
                    values += head_value as u32;
                } else {
                    assert!(level > 0 || !is_node(v), "a node pointer in a leaf");
                    head_value = is_value(v);
                    values += head_value as u32;
                    if entry_pfn(v).is_some() {
                        let low = SHIFT * level as u32;
                        let order = entry_order(v);
                        assert!(order >= low && order < low + SHIFT, "an order-{order} entry at level {level}");
                        assert_eq!(s % (1 << (order - low)), 0, "a misaligned entry");
                    }
                }
            }
            assert_eq!(nd.count.load(Ordering::Relaxed), count, "count at level {level}");
            assert_eq!(nd.values.load(Ordering::Relaxed), values, "values at level {level}");
            assert_eq!(nd.on_list.load(Ordering::Relaxed) != 0, values > 0 && values == count, "shadow list");
        });
    }

    /// Every entry the walk visits, as (first index, entry).
    fn entries(t: &PageTree, start: u64, end: u64, mark: Option<usize>) -> Vec<(u64, usize)> {
        let mut v = vec![];
        t.for_each(start, end, mark, &mut |i, e| {
            v.push((i, e));
            true
        });
        v
    }

    // Goal: a multi-index entry, in a leaf (order 3) or above it (orders 6,
    // 9, 12), is found from every index it covers, with the frame of that
    // index; the walk visits it once at its first index, also when the
    // range starts inside it; a mark set through any index marks it; and
    // erasing it through any index frees every node.
    #[test]
    fn multi_index_entries_load_walk_mark_erase() {
        let t = PageTree::detached();
        for (order, at) in [(3u32, 8u64), (6, 128), (9, 1024), (12, 8192)] {
            let e = folio_entry(100, order);
            t.store_order(at + 1, order, e, &locked());
            check(&t);
            for i in at..at + (1 << order) {
                assert_eq!(t.load(i), e, "order {order} index {i}");
                assert_eq!(entry_page_pfn(t.load(i), i), Some(100 + (i - at) as Pfn));
                assert_eq!(t.load_order(i, &locked()), Some((e, at, order)));
            }
            assert_eq!(t.load(at - 1), 0);
            assert_eq!(t.load(at + (1 << order)), 0);
            assert_eq!(entries(&t, at + 3, at + 4, None), vec![(at, e)], "a range inside the entry");
            t.set_mark(at + 5, MARK_DIRTY, &locked());
            assert!(t.get_mark(at, MARK_DIRTY));
            assert_eq!(entries(&t, 0, u64::MAX, Some(MARK_DIRTY)), vec![(at, e)]);
            t.clear_mark(at + (1 << order) - 1, MARK_DIRTY, &locked());
            assert!(entries(&t, 0, u64::MAX, Some(MARK_DIRTY)).is_empty());
            t.set_mark(at, MARK_DIRTY, &locked());
            assert_eq!(t.store(at + 2, 0, &locked()), e);
            check(&t);
            for i in at..at + (1 << order) {
                assert_eq!(t.load(i), 0);
            }
            t.reclaim_retired();
            assert_eq!((nodes(&t), t.cache.bytes()), (0, 0), "order {order}: all nodes freed");
        }
    }

    // Goal: splitting a folio entry gives every index the entry of its
    // own frame at the new order, keeps marks on every part, and leaves
    // the counts right; a split of a shadow copies it, and nodes of
    // shadows only go on the shadow-node list (at their level).
    #[test]
    fn split_keeps_frames_marks_and_counts() {
        let t = PageTree::detached();
        for (order, to) in [(9u32, 0u32), (9, 3), (9, 6), (12, 0), (5, 2), (6, 0)] {
            let at = 1u64 << 14;
            let e = folio_entry(1000, order);
            t.store_order(at, order, e, &locked());
            t.set_mark(at, MARK_DIRTY, &locked());
            t.split(at + 7, to, &locked());
            check(&t);
            for i in at..at + (1 << order) {
                let got = t.load(i);
                assert_eq!(entry_order(got), to, "{order}->{to} at {i}");
                assert_eq!(entry_page_pfn(got, i), Some(1000 + (i - at) as Pfn), "{order}->{to} at {i}");
            }
            let marked = entries(&t, 0, u64::MAX, Some(MARK_DIRTY));
            assert_eq!(marked.len(), 1 << (order - to), "{order}->{to}: every part marked");
            for (i, _) in marked {
                t.clear_mark(i, MARK_DIRTY, &locked());
                t.store(i, 0, &locked());
            }
            check(&t);
            t.reclaim_retired();
            assert_eq!(nodes(&t), 0, "{order}->{to}: all nodes freed");
        }
        // A shadow of order 9 sits in a level-1 node of shadows only.
        let sh = SHADOW_BIT | 0x1234;
        t.store_order(512, 9, sh, &locked());
        check(&t);
        assert_eq!(t.cache.nr_shadow_nodes(), 1);
        assert_eq!(t.cache.oldest_shadow_node_over(0), Some((0, 0, 1)));
        // A page stored inside it splits it: the rest keep the shadow.
        t.store(515, page_entry(7), &locked());
        check(&t);
        assert_eq!(t.load(515), page_entry(7));
        assert!((512..1024).filter(|&i| i != 515).all(|i| t.load(i) == sh));
        assert_eq!(entries(&t, 0, u64::MAX, None).len(), 512);
        assert!(t.is_shadow_node(600, 0), "a leaf of shadows only");
        assert!(!t.is_shadow_node(515, 0), "the leaf with the page");
        t.store(515, 0, &locked());
        let mut dropped = 0;
        while let Some((_, index, level)) = t.cache.oldest_shadow_node_over(0) {
            dropped += t.drop_shadow_node(index, level, &locked());
            check(&t);
        }
        assert_eq!(dropped, 511);
        t.reclaim_retired();
        assert_eq!((nodes(&t), t.cache.bytes()), (0, 0));
    }

    // Goal: a large entry stored over smaller ones replaces them all, and
    // a store into a larger entry splits it first, so the tree always
    // says what the stores, erasures and splits said. Method: random
    // operations of orders 0..=9 in a 4096-index window against a model
    // holding each index's frame (or shadow), first index and order, with
    // the structure checked after every step.
    #[test]
    fn random_multi_index_operations_match_a_model() {
        #[derive(Clone, Copy, PartialEq, Debug)]
        enum What {
            Frame(Pfn),
            Shadow(usize),
        }
        let t = PageTree::detached();
        const N: u64 = 4096;
        let mut model: Vec<Option<(What, u64, u32)>> = vec![None; N as usize];
        let mut x = 7u64;
        let mut rnd = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        // Split the model's entry covering `at` into parts of `order`.
        let split = |model: &mut Vec<Option<(What, u64, u32)>>, at: u64, order: u32| {
            if let Some((_, first, ord)) = model[at as usize] {
                if ord > order {
                    for i in first..first + (1 << ord) {
                        if let Some(m) = model[i as usize].as_mut() {
                            m.1 = i & !((1 << order) - 1);
                            m.2 = order;
                        }
                    }
                }
            }
        };
        for step in 0..3000 {
            let order = [0u32, 0, 0, 1, 2, 3, 5, 6, 7, 9][rnd(10) as usize];
            let at = rnd(N) & !((1 << order) - 1);
            match rnd(4) {
                0 | 1 => {
                    let shadow = rnd(3) == 0;
                    let pfn = rnd(1 << 20) as Pfn;
                    let e = if shadow { SHADOW_BIT | (step as usize) << 4 } else { folio_entry(pfn, order) };
                    t.store_order(at, order, e, &locked());
                    split(&mut model, at, order);
                    for i in at..at + (1 << order) {
                        // Smaller entries inside the range go whole.
                        if let Some((_, first, ord)) = model[i as usize] {
                            for j in first..first + (1 << ord) {
                                model[j as usize] = None;
                            }
                        }
                    }
                    for i in at..at + (1 << order) {
                        let what = if shadow { What::Shadow(e) } else { What::Frame(pfn + (i - at) as Pfn) };
                        model[i as usize] = Some((what, at, order));
                    }
                }
                2 => {
                    t.store(at, 0, &locked());
                    if let Some((_, first, ord)) = model[at as usize] {
                        for i in first..first + (1 << ord) {
                            model[i as usize] = None;
                        }
                    }
                }
                _ => {
                    t.split(at, order, &locked());
                    split(&mut model, at, order);
                }
            }
            check(&t);
            for i in (0..N).step_by(37).chain([at, at + 1, at.saturating_sub(1)]) {
                let i = i % N;
                let got = t.load_order(i, &locked()).map(|(e, first, ord)| {
                    let what = if is_value(e) { What::Shadow(e) } else { What::Frame(entry_page_pfn(e, i).unwrap()) };
                    (what, first, ord)
                });
                assert_eq!(got, model[i as usize], "step {step} index {i}");
                assert_eq!(t.load(i) != 0, got.is_some());
            }
        }
        for i in 0..N {
            t.store(i, 0, &locked());
        }
        check(&t);
        t.reclaim_retired();
        assert_eq!((nodes(&t), t.cache.bytes()), (0, 0));
    }

    // Goal: lock-free readers racing a writer that stores an order-9 folio,
    // splits it to random orders, erases it and stores it again never see
    // a frame other than their index's (frames 5000 + index throughout),
    // whatever they catch.
    #[test]
    fn readers_racing_splits_take_their_own_frames() {
        let t = Arc::new(PageTree::detached());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3u64)
            .map(|r| {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut x, mut found) = (r + 1, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let i = (x >> 33) % 1024;
                        let walk = t.walk();
                        if let Some((slot, e)) = t.lookup(i, &walk).filter(|&(_, e)| e != 0) {
                            assert_eq!(entry_page_pfn(e, i), Some(5000 + i as Pfn), "index {i}: {e:#x}");
                            // The hit path's re-check reads the same slot.
                            let _ = slot.load(Ordering::Acquire);
                            found += 1;
                        }
                    }
                    found
                })
            })
            .collect();
        let mut x = 99u64;
        for _ in 0..4000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let g = locked();
            t.store_order(512, 9, folio_entry(5512, 9), &g);
            t.split(512 + (x >> 40) % 512, ((x >> 20) % 9) as u32, &g);
            if x.is_multiple_of(3) {
                t.store(512 + (x >> 30) % 512, 0, &g);
            }
            t.store(7, page_entry(5007), &g);
        }
        stop.store(true, Ordering::Relaxed);
        let found: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(found > 0, "the readers found nothing to check");
        check(&t);
    }

    // Goal: multi-index entries are what cuts the tree's metadata: a dense
    // 256 MiB of pages and three times as much of shadows behind it (the
    // metadata example's dense case) takes a leaf per 64 indices at order 0
    // and no leaf at all at order 9, one level-1 node per 4,096 indices.
    #[test]
    fn dense_order_9_entries_need_no_leaves() {
        const PAGES: u64 = 65_536;
        for (order, want_nodes) in [(0u32, 4 * PAGES / 64 + 4 * PAGES / 4096 + 1), (9, 4 * PAGES / 4096 + 1)] {
            let t = PageTree::detached();
            let g = locked();
            for (n, i) in (0..4 * PAGES).step_by(1 << order).enumerate() {
                let e = if i < 3 * PAGES { SHADOW_BIT | n } else { folio_entry(i as Pfn, order) };
                t.store_order(i, order, e, &g);
            }
            drop(g);
            assert_eq!(nodes(&t), want_nodes, "order {order}");
            check(&t);
        }
    }
}

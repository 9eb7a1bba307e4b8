//! The inode cache (fs/inode.c: the inode hash, `s_inode_lru`, and the
//! table that turns a page's mapping id back into its inode).
//!
//! `Icache` owns three things, private to this module:
//! - the inodes by key (`host:DEV:INO`, a device's name, `memory:NAME`),
//!   the kernel's inode hash; handles are counted under its lock (`grab`,
//!   `get_or_insert`), so an inode found unused and freed there is never
//!   handed out meanwhile;
//! - the inodes by id, which reclaim and writeback read (a read lock) to
//!   go from `Page::mapping` to the file; ids are reused once freed;
//! - the list of inodes that may be unused (`s_inode_lru`), which
//!   filemap.rs's `prune_icache` pops; entries may be stale and are
//!   re-checked when popped.
//!
//! The policy (when an inode is unused, when it is freed, what is dropped
//! with it: `iget`, `iput`, `evict_inode`, `prune_icache`) stays in
//! filemap.rs beside the address space it empties; this module keeps the
//! tables consistent. Lock order: the name lock, then the id table's.
//!
//! The tables are generic over what they hold (`IcacheEntry`: a key, an
//! id, a handle count; filemap.rs's `Inode` is the one entry type), so
//! this module names nothing of the address space's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::page::NO_MAPPING;
use crate::sync::atomic::{AtomicU64, Ordering};

/// What the tables need of an inode.
pub trait IcacheEntry {
    /// The key it is hashed by (`host:DEV:INO`, ...).
    fn key(&self) -> &str;
    /// Its mapping id, given by `get_or_insert`.
    fn id(&self) -> u32;
    /// Open handles, counted under the name lock.
    fn handles(&self) -> &AtomicU64;
}

/// The inodes by key, the free ids and the unused list, under one lock.
struct Names<I> {
    by_name: HashMap<String, Arc<I>>,
    free_ids: Vec<u32>,
    next_id: u32,
    unused: VecDeque<Weak<I>>,
}

pub struct Icache<I> {
    names: Mutex<Names<I>>,
    by_id: RwLock<Vec<Option<Arc<I>>>>,
}

impl<I> Default for Icache<I> {
    fn default() -> Self {
        let names = Names { by_name: HashMap::new(), free_ids: Vec::new(), next_id: 0, unused: VecDeque::new() };
        Icache { names: Mutex::new(names), by_id: RwLock::new(Vec::new()) }
    }
}

impl<I: IcacheEntry> Icache<I> {
    /// The inode keyed `key`, if cached, without counting a handle.
    pub fn lookup(&self, key: &str) -> Option<Arc<I>> {
        self.names.lock().by_name.get(key).cloned()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.names.lock().by_name.contains_key(key)
    }

    /// igrab: the inode keyed `key` with a handle counted, if cached.
    pub fn grab(&self, key: &str) -> Option<Arc<I>> {
        let names = self.names.lock();
        let i = names.by_name.get(key)?;
        i.handles().fetch_add(1, Ordering::AcqRel);
        Some(i.clone())
    }

    /// iget's table half: the inode keyed `key` with a handle counted; if
    /// none is cached, `open` makes what the new inode needs (its device)
    /// and `build` the inode with the id given, which then enters both
    /// tables. Both run under the name lock, so two opens of one key get
    /// one inode. The new inode's handle is `build`'s to count.
    pub fn get_or_insert<D>(
        &self,
        key: &str,
        open: impl FnOnce() -> Result<D>,
        build: impl FnOnce(u32, D) -> Arc<I>,
    ) -> Result<Arc<I>> {
        let mut names = self.names.lock();
        if let Some(i) = names.by_name.get(key) {
            i.handles().fetch_add(1, Ordering::AcqRel);
            return Ok(i.clone());
        }
        let made = open()?;
        let id = match names.free_ids.pop() {
            Some(id) => id,
            None => {
                let id = names.next_id;
                if id == NO_MAPPING {
                    return Err(Error::InvalidArgument("too many open inodes".into()));
                }
                names.next_id += 1;
                id
            }
        };
        let inode = build(id, made);
        names.by_name.insert(key.to_string(), inode.clone());
        let mut by_id = self.by_id.write();
        if by_id.len() <= id as usize {
            by_id.resize(id as usize + 1, None);
        }
        by_id[id as usize] = Some(inode.clone());
        Ok(inode)
    }

    /// Take the name `key` out of the table, whichever inode holds it.
    pub fn remove_key(&self, key: &str) -> Option<Arc<I>> {
        self.names.lock().by_name.remove(key)
    }

    /// remove_inode_hash, if `still` holds under the name lock (where
    /// handles are counted): the inode's key leaves the table if it still
    /// names this inode. Returns whether `still` held.
    pub fn unhash_if(&self, inode: &I, still: impl FnOnce() -> bool) -> bool {
        let mut names = self.names.lock();
        if !still() {
            return false;
        }
        if names.by_name.get(inode.key()).is_some_and(|i| std::ptr::eq(Arc::as_ptr(i), inode)) {
            names.by_name.remove(inode.key());
        }
        true
    }

    /// The inode is gone for good (its pages too): its id is free again.
    pub fn release_id(&self, inode: &I) {
        let mut names = self.names.lock();
        let mut by_id = self.by_id.write();
        let slot = by_id.get_mut(inode.id() as usize);
        if let Some(slot) = slot.filter(|s| s.as_ref().is_some_and(|i| std::ptr::eq(Arc::as_ptr(i), inode))) {
            *slot = None;
            names.free_ids.push(inode.id());
        }
    }

    /// The inode whose mapping id is `id`.
    #[inline]
    pub fn by_id(&self, id: u32) -> Option<Arc<I>> {
        self.by_id.read().get(id as usize).and_then(|o| o.clone())
    }

    /// Every cached inode `keep` accepts, taken under the id table's read
    /// lock and returned without it.
    pub fn collect(&self, mut keep: impl FnMut(&I) -> bool) -> Vec<Arc<I>> {
        self.by_id.read().iter().flatten().filter(|i| keep(i)).cloned().collect()
    }

    /// inode_lru_list_add: `inode` may be unused.
    pub fn list_unused(&self, inode: &Arc<I>) {
        self.names.lock().unused.push_back(Arc::downgrade(inode));
    }

    /// The oldest listed inode, and whether the list held more than
    /// `limit` before it was taken.
    pub fn pop_unused(&self, limit: usize) -> Option<(Weak<I>, bool)> {
        let mut names = self.names.lock();
        let over = names.unused.len() > limit;
        names.unused.pop_front().map(|w| (w, over))
    }

    pub fn nr_unused(&self) -> usize {
        self.names.lock().unused.len()
    }

    /// Inodes held (vmstat `nr_inodes`): ids handed out and not freed.
    pub fn nr_inodes(&self) -> u64 {
        let names = self.names.lock();
        (names.next_id as usize - names.free_ids.len()) as u64
    }
}

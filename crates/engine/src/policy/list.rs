//! Intrusive doubly linked lists of frames for policies: links in arrays
//! indexed by pfn, so every operation is O(1) and nothing allocates after
//! `new`. A frame is on at most one of the lists at a time.

use crate::page::{Pfn, NO_PFN};

/// `N` lists over `nr_frames` frames. Head is the newest end (where
/// `push_head` adds), tail the oldest.
pub struct FolioLists<const N: usize> {
    prev: Vec<Pfn>,
    next: Vec<Pfn>,
    /// The list a frame is on, plus one; 0: none.
    on: Vec<u8>,
    head: [Pfn; N],
    tail: [Pfn; N],
    len: [usize; N],
}

impl<const N: usize> FolioLists<N> {
    pub fn new(nr_frames: usize) -> Self {
        assert!(N < u8::MAX as usize);
        FolioLists {
            prev: vec![NO_PFN; nr_frames],
            next: vec![NO_PFN; nr_frames],
            on: vec![0; nr_frames],
            head: [NO_PFN; N],
            tail: [NO_PFN; N],
            len: [0; N],
        }
    }

    /// The list `pfn` is on; None for none (or a frame out of range).
    #[inline]
    pub fn list_of(&self, pfn: Pfn) -> Option<usize> {
        match self.on.get(pfn as usize) {
            Some(&l) if l > 0 => Some(l as usize - 1),
            _ => None,
        }
    }

    #[inline]
    pub fn len(&self, list: usize) -> usize {
        self.len[list]
    }

    #[inline]
    pub fn is_empty(&self, list: usize) -> bool {
        self.len[list] == 0
    }

    /// The oldest frame of `list`.
    #[inline]
    pub fn tail(&self, list: usize) -> Option<Pfn> {
        (self.tail[list] != NO_PFN).then_some(self.tail[list])
    }

    /// The newest frame of `list`.
    #[inline]
    pub fn head(&self, list: usize) -> Option<Pfn> {
        (self.head[list] != NO_PFN).then_some(self.head[list])
    }

    /// The next newer frame on the same list.
    #[inline]
    pub fn newer(&self, pfn: Pfn) -> Option<Pfn> {
        let p = self.prev[pfn as usize];
        (p != NO_PFN).then_some(p)
    }

    /// Add `pfn`, on no list, at the head of `list`. False (nothing done)
    /// if it is already on one or out of range.
    pub fn push_head(&mut self, list: usize, pfn: Pfn) -> bool {
        if self.on.get(pfn as usize) != Some(&0) {
            return false;
        }
        let i = pfn as usize;
        self.prev[i] = NO_PFN;
        self.next[i] = self.head[list];
        if self.head[list] != NO_PFN {
            self.prev[self.head[list] as usize] = pfn;
        } else {
            self.tail[list] = pfn;
        }
        self.head[list] = pfn;
        self.on[i] = list as u8 + 1;
        self.len[list] += 1;
        true
    }

    /// Add `pfn`, on no list, at the tail of `list`.
    pub fn push_tail(&mut self, list: usize, pfn: Pfn) -> bool {
        if self.on.get(pfn as usize) != Some(&0) {
            return false;
        }
        let i = pfn as usize;
        self.next[i] = NO_PFN;
        self.prev[i] = self.tail[list];
        if self.tail[list] != NO_PFN {
            self.next[self.tail[list] as usize] = pfn;
        } else {
            self.head[list] = pfn;
        }
        self.tail[list] = pfn;
        self.on[i] = list as u8 + 1;
        self.len[list] += 1;
        true
    }

    /// Take `pfn` off its list; returns the list, None if on none.
    pub fn remove(&mut self, pfn: Pfn) -> Option<usize> {
        let list = self.list_of(pfn)?;
        let i = pfn as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NO_PFN {
            self.next[p as usize] = n;
        } else {
            self.head[list] = n;
        }
        if n != NO_PFN {
            self.prev[n as usize] = p;
        } else {
            self.tail[list] = p;
        }
        self.prev[i] = NO_PFN;
        self.next[i] = NO_PFN;
        self.on[i] = 0;
        self.len[list] -= 1;
        Some(list)
    }

    /// Take the oldest frame off `list`.
    pub fn pop_tail(&mut self, list: usize) -> Option<Pfn> {
        let t = self.tail(list)?;
        self.remove(t);
        Some(t)
    }

    /// Move `pfn` to the head of its list; false if on none.
    pub fn move_to_head(&mut self, pfn: Pfn) -> bool {
        match self.remove(pfn) {
            Some(list) => self.push_head(list, pfn),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(l: &FolioLists<2>, list: usize) -> Vec<Pfn> {
        let mut v = Vec::new();
        let mut cur = l.tail(list);
        while let Some(p) = cur {
            v.push(p);
            cur = l.newer(p);
        }
        v
    }

    #[test]
    fn lists_link_and_unlink() {
        let mut l = FolioLists::<2>::new(8);
        for p in [1, 2, 3] {
            assert!(l.push_head(0, p));
        }
        assert!(!l.push_head(1, 2), "already on a list");
        assert!(!l.push_head(0, 99), "out of range");
        assert!(l.push_tail(1, 7));
        assert_eq!(collect(&l, 0), vec![1, 2, 3]);
        assert!(l.move_to_head(1));
        assert_eq!(collect(&l, 0), vec![2, 3, 1]);
        assert_eq!(l.remove(3), Some(0));
        assert_eq!(l.remove(3), None);
        assert_eq!(collect(&l, 0), vec![2, 1]);
        assert_eq!(l.pop_tail(0), Some(2));
        assert_eq!(l.pop_tail(0), Some(1));
        assert_eq!(l.pop_tail(0), None);
        assert_eq!((l.len(0), l.len(1), l.list_of(7)), (0, 1, Some(1)));
    }
}

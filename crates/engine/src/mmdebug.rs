//! Consistency checks where the kernel has VM_BUG_ON (include/linux/
//! mmdebug.h, mm/debug.c's `dump_page`).
//!
//! `vm_bug_on!(cond, ...)` and `vm_bug_on_page!(cond, page, ...)` state an
//! invariant at a boundary where it must hold: a page added to an LRU list
//! whose flags name another list, a frame freed while still locked, dirty,
//! under writeback, on a list or mapped, a page unlocked twice. They are
//! hard assertions in debug builds (so every test checks them) and in
//! release builds with the `debug_vm` feature (the kernel's
//! CONFIG_DEBUG_VM); a release build without it compiles them away, as the
//! kernel's production builds do.
//!
//! A failed page check panics with the page's state (flags by name,
//! refcount, mapcount, mapping, index), what `dump_page` prints.

use std::fmt;

use crate::page::*;

/// Whether the checks run in this build.
pub const DEBUG_VM: bool = cfg!(any(debug_assertions, feature = "debug_vm"));

/// VM_BUG_ON: panic if `cond` holds (in checking builds).
macro_rules! vm_bug_on {
    ($cond:expr, $($arg:tt)+) => {
        if $crate::mmdebug::DEBUG_VM && $cond {
            panic!("VM_BUG_ON: {}", format_args!($($arg)+));
        }
    };
}

/// VM_BUG_ON_PAGE: panic with the page's state if `cond` holds (in
/// checking builds).
macro_rules! vm_bug_on_page {
    ($cond:expr, $page:expr, $($arg:tt)+) => {
        if $crate::mmdebug::DEBUG_VM && $cond {
            $crate::mmdebug::bad_page($page, format_args!($($arg)+));
        }
    };
}

pub(crate) use {vm_bug_on, vm_bug_on_page};

/// Flag combinations no page may have, whatever else it is doing (the
/// kernel's PageFlags rules, checked where it checks them: list add and
/// delete, free): PG_active with PG_unevictable (an unevictable page is on
/// neither the active nor the inactive list), PG_swapcache without
/// PG_swapbacked (only anonymous pages enter the swap cache, as
/// `PageSwapCache` tests both). PG_writeback without PG_locked is fine:
/// the lock is dropped once writeback has started.
#[inline]
#[track_caller]
pub fn check_page_flags(page: &Page, what: &str) {
    if !DEBUG_VM {
        return;
    }
    let f = page.flags();
    vm_bug_on_page!(f & PG_ACTIVE != 0 && f & PG_UNEVICTABLE != 0, page, "{what}: active and unevictable");
    vm_bug_on_page!(f & PG_SWAPCACHE != 0 && f & PG_SWAPBACKED == 0, page, "{what}: swap cache but not anonymous");
}

const FLAG_NAMES: [(u32, &str); 17] = [
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
];

/// A page's state as `dump_page` shows it.
pub struct DumpPage<'a>(pub &'a Page);

impl fmt::Display for DumpPage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// The failure of a page check: the page's state and why.
#[cold]
#[inline(never)]
#[track_caller]
pub fn bad_page(page: &Page, why: fmt::Arguments<'_>) -> ! {
    panic!("VM_BUG_ON_PAGE: {why}\n  {}", DumpPage(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every test build checks (so `cargo test --workspace`, whose
    // profile keeps debug assertions, runs the VM_BUG_ONs), and a flag
    // combination the kernel forbids is caught with the page's state.
    #[test]
    fn checks_are_on_in_tests() {
        const { assert!(DEBUG_VM, "tests must run with the consistency checks on") };
        let page = Page::new();
        page.set_nonatomic(PG_ACTIVE | PG_REFERENCED);
        check_page_flags(&page, "a legal page");
    }

    #[test]
    #[should_panic(expected = "active and unevictable")]
    fn active_and_unevictable_is_caught() {
        let page = Page::new();
        page.set_nonatomic(PG_ACTIVE | PG_UNEVICTABLE);
        check_page_flags(&page, "lru add");
    }

    #[test]
    #[should_panic(expected = "swap cache but not anonymous")]
    fn swapcache_on_a_file_page_is_caught() {
        let page = Page::new();
        page.set_nonatomic(PG_SWAPCACHE);
        check_page_flags(&page, "free");
    }
}

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
//! refcount, mapcount, mapping, index), what `dump_page` prints: the page
//! formats itself (`Page::dump`, page.rs), so this module names no page
//! type and page.rs can use its macros without an import cycle.

use std::fmt;

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
            $crate::mmdebug::bad_page(&$page.dump(), format_args!($($arg)+));
        }
    };
}

pub(crate) use {vm_bug_on, vm_bug_on_page};

/// The failure of a page check: the page's state and why.
#[cold]
#[inline(never)]
#[track_caller]
pub fn bad_page(page: &dyn fmt::Display, why: fmt::Arguments<'_>) -> ! {
    panic!("VM_BUG_ON_PAGE: {why}\n  {page}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: `cargo test --workspace` (whose profile keeps debug
    // assertions) runs the VM_BUG_ONs; this fails if a change to the test
    // profile or to DEBUG_VM turns them off. A release test build (loom's,
    // or `cargo test --release`) compiles them out unless built with
    // `--features debug_vm`, so there the test is skipped, not a compile
    // error. page.rs tests that the flag checks fire.
    #[test]
    #[cfg_attr(
        not(any(debug_assertions, feature = "debug_vm")),
        ignore = "a release build without --features debug_vm compiles the checks out"
    )]
    fn checks_are_on_in_tests() {
        assert!(std::hint::black_box(DEBUG_VM), "tests must run with the consistency checks on");
    }
}

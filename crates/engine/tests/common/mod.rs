//! What several engine test binaries share.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

/// Keep this thread on CPU 0, so "this CPU's batch" stays the same one and
/// pages reach the LRU in the order the thread added them (a thread that
/// migrates leaves a partial lru_add batch behind on the CPU it left,
/// which `lru_add_drain_all` drains later, out of order).
pub fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; the
    // call only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

use std::path::{Path, PathBuf};

use pcache::{File, Item, OpenOptions, PageCache, VmStat};

const PS: u64 = 4096;

/// How far `item` moved since `before`.
pub fn delta(cache: &PageCache, before: &VmStat, item: Item) -> u64 {
    cache.vmstat().delta(before).get(item)
}

/// A scratch directory on the file system the build runs on (a real
/// disk, usually, where /tmp may be tmpfs).
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// The bytes of 4 KiB page `i` of a file tagged `seed`: index and seed
/// stamped in its first 16 bytes, a pattern after.
pub fn stamped_page(seed: u64, i: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..PS).map(|b| (b.wrapping_mul(31).wrapping_add(i * 7 + seed) % 251) as u8).collect();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&seed.to_le_bytes());
    v
}

/// Write a host file of `pages` stamped pages directly (not through a cache).
pub fn write_stamped_file(dir: &Path, name: &str, seed: u64, pages: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, (0..pages).flat_map(|i| stamped_page(seed, i)).collect::<Vec<u8>>()).unwrap();
    path
}

/// A host file of `pages` 4 KiB pages in `dir`, page i filled with the
/// byte i + 1, opened through `cache`.
pub fn host_file(cache: &PageCache, dir: &tempfile::TempDir, pages: u64) -> (File, PathBuf) {
    let path = dir.path().join("data");
    let bytes: Vec<u8> = (0..pages).flat_map(|i| vec![(i + 1) as u8; PS as usize]).collect();
    std::fs::write(&path, &bytes).unwrap();
    let f = cache.open(&path, OpenOptions::default()).unwrap();
    (f, path)
}

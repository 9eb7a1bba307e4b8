//! Run-time tunables: the `vm` sysctls (kernel/sysctl.c's `vm_table`, with
//! the handlers of mm/page-writeback.c) and the bdi's `read_ahead_kb`.
//!
//! `Tunables` fixes every knob when the cache is built; the knobs below can
//! then be changed while it runs, as `/proc/sys/vm` allows. Each is one
//! atomic that the code using it loads where it decides (`dirty_thresholds`,
//! the flusher's period and expiry, a new handle's readahead window), so a
//! write takes effect at the next decision; nothing is cached elsewhere.
//!
//! As in the kernel, the ratio and bytes forms of a dirty limit are two
//! views of one setting: writing `dirty_bytes` zeroes `dirty_ratio` and the
//! reverse (dirty_bytes_handler / dirty_ratio_handler), and the one that is
//! non-zero is in force.
//!
//! `read_ahead_kb` is, in Linux, `/sys/class/bdi/*/read_ahead_kb`, one per
//! device; here one value serves every device. Like the kernel's, it seeds
//! the window of handles opened after the write (file_ra_state_init);
//! handles already open keep theirs.
//!
//! Accesses are relaxed: each knob is a lone value with no other memory
//! published through it, and a reader racing a writer may see either value,
//! as it may in the kernel.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::tunables::Tunables;

/// The kernel's lower bound for `dirty_bytes` (two pages, in bytes, at
/// 4 KiB pages; `dirty_bytes_min` in kernel/sysctl.c).
const DIRTY_BYTES_MIN_PAGES: u64 = 2;

/// The run-time knobs of one cache.
pub struct VmSysctl {
    page_size: u64,
    dirty_ratio: AtomicU32,
    dirty_background_ratio: AtomicU32,
    dirty_bytes: AtomicU64,
    dirty_background_bytes: AtomicU64,
    dirty_expire_centisecs: AtomicU32,
    dirty_writeback_centisecs: AtomicU32,
    /// Stored in pages (the bdi's `ra_pages`); shown in KiB.
    ra_pages: AtomicU32,
    /// vm_swappiness (get_scan_count's anon_prio).
    swappiness: AtomicU32,
    /// page_cluster (swapin_readahead's window is 2^page_cluster).
    page_cluster: AtomicU32,
}

/// The knobs, in the order `sysctl -a` would list them.
pub const SYSCTL_NAMES: &[&str] = &[
    "dirty_background_bytes",
    "dirty_background_ratio",
    "dirty_bytes",
    "dirty_expire_centisecs",
    "dirty_ratio",
    "dirty_writeback_centisecs",
    "page-cluster",
    "read_ahead_kb",
    "swappiness",
];

impl VmSysctl {
    /// The knobs' start values, from the cache's `Tunables`.
    pub fn new(t: &Tunables, page_size: usize) -> VmSysctl {
        VmSysctl {
            page_size: page_size as u64,
            dirty_ratio: AtomicU32::new(t.dirty_ratio),
            dirty_background_ratio: AtomicU32::new(t.dirty_background_ratio),
            dirty_bytes: AtomicU64::new(t.dirty_bytes),
            dirty_background_bytes: AtomicU64::new(t.dirty_background_bytes),
            dirty_expire_centisecs: AtomicU32::new(t.dirty_expire_centisecs),
            dirty_writeback_centisecs: AtomicU32::new(t.dirty_writeback_centisecs),
            ra_pages: AtomicU32::new(t.ra_pages),
            swappiness: AtomicU32::new(t.swappiness),
            page_cluster: AtomicU32::new(t.page_cluster),
        }
    }

    pub fn dirty_ratio(&self) -> u32 {
        self.dirty_ratio.load(Ordering::Relaxed)
    }

    pub fn dirty_background_ratio(&self) -> u32 {
        self.dirty_background_ratio.load(Ordering::Relaxed)
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes.load(Ordering::Relaxed)
    }

    pub fn dirty_background_bytes(&self) -> u64 {
        self.dirty_background_bytes.load(Ordering::Relaxed)
    }

    pub fn dirty_expire_centisecs(&self) -> u32 {
        self.dirty_expire_centisecs.load(Ordering::Relaxed)
    }

    pub fn dirty_writeback_centisecs(&self) -> u32 {
        self.dirty_writeback_centisecs.load(Ordering::Relaxed)
    }

    /// The default readahead window of new handles, in pages.
    pub fn ra_pages(&self) -> u32 {
        self.ra_pages.load(Ordering::Relaxed)
    }

    /// vm_swappiness, 0 to 100.
    pub fn swappiness(&self) -> u32 {
        self.swappiness.load(Ordering::Relaxed)
    }

    /// page_cluster: swap readahead reads 2^page_cluster slots.
    pub fn page_cluster(&self) -> u32 {
        self.page_cluster.load(Ordering::Relaxed)
    }

    /// The value of `name` as `/proc/sys/vm/NAME` shows it (no newline).
    pub fn read(&self, name: &str) -> Option<String> {
        let v = match name {
            "dirty_background_bytes" => self.dirty_background_bytes().to_string(),
            "dirty_background_ratio" => self.dirty_background_ratio().to_string(),
            "dirty_bytes" => self.dirty_bytes().to_string(),
            "dirty_expire_centisecs" => self.dirty_expire_centisecs().to_string(),
            "dirty_ratio" => self.dirty_ratio().to_string(),
            "dirty_writeback_centisecs" => self.dirty_writeback_centisecs().to_string(),
            "read_ahead_kb" => (self.ra_pages() as u64 * self.page_size / 1024).to_string(),
            "swappiness" => self.swappiness().to_string(),
            "page-cluster" => self.page_cluster().to_string(),
            _ => return None,
        };
        Some(v)
    }

    /// Set `name` from text as written to `/proc/sys/vm/NAME` (surrounding
    /// white space, such as echo's newline, is ignored). A bad value changes
    /// nothing.
    pub fn write(&self, name: &str, value: &str) -> Result<()> {
        let text = value.trim();
        let invalid = |reason: String| Error::InvalidSysctl { name: name.to_string(), value: text.to_string(), reason };
        if !SYSCTL_NAMES.contains(&name) {
            return Err(Error::UnknownSysctl { name: name.to_string() });
        }
        let v: u64 = text.parse().map_err(|_| invalid("not a non-negative integer".into()))?;
        let percent = |v: u64| {
            if v > 100 {
                Err(invalid("a ratio is a percentage, 0 to 100".into()))
            } else {
                Ok(v as u32)
            }
        };
        let u32_of = |v: u64| u32::try_from(v).map_err(|_| invalid(format!("above {}", u32::MAX)));
        match name {
            "dirty_ratio" => {
                self.dirty_ratio.store(percent(v)?, Ordering::Relaxed);
                self.dirty_bytes.store(0, Ordering::Relaxed);
            }
            "dirty_background_ratio" => {
                self.dirty_background_ratio.store(percent(v)?, Ordering::Relaxed);
                self.dirty_background_bytes.store(0, Ordering::Relaxed);
            }
            "dirty_bytes" => {
                let min = DIRTY_BYTES_MIN_PAGES * self.page_size;
                if v < min {
                    return Err(invalid(format!("below the minimum of {min} bytes (two pages)")));
                }
                self.dirty_bytes.store(v, Ordering::Relaxed);
                self.dirty_ratio.store(0, Ordering::Relaxed);
            }
            "dirty_background_bytes" => {
                if v == 0 {
                    // Writing 0 hands the setting back to the ratio, which
                    // the kernel leaves as it was; keep it likewise.
                    self.dirty_background_bytes.store(0, Ordering::Relaxed);
                } else {
                    self.dirty_background_bytes.store(v, Ordering::Relaxed);
                    self.dirty_background_ratio.store(0, Ordering::Relaxed);
                }
            }
            "dirty_expire_centisecs" => self.dirty_expire_centisecs.store(u32_of(v)?, Ordering::Relaxed),
            "dirty_writeback_centisecs" => self.dirty_writeback_centisecs.store(u32_of(v)?, Ordering::Relaxed),
            "read_ahead_kb" => {
                let pages = (v * 1024) / self.page_size;
                self.ra_pages.store(u32_of(pages)?, Ordering::Relaxed);
            }
            "swappiness" => self.swappiness.store(percent(v)?, Ordering::Relaxed),
            "page-cluster" => {
                let max = crate::tunables::MAX_PAGE_CLUSTER as u64;
                if v > max {
                    return Err(invalid(format!("above {max} (a readahead of 2^{max} pages)")));
                }
                self.page_cluster.store(v as u32, Ordering::Relaxed);
            }
            _ => unreachable!("checked against SYSCTL_NAMES"),
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn knobs() -> VmSysctl {
        VmSysctl::new(&Tunables::default(), 4096)
    }

    #[test]
    fn reads_show_start_values() {
        let s = knobs();
        let t = Tunables::default();
        assert_eq!(s.read("dirty_ratio").as_deref(), Some(t.dirty_ratio.to_string().as_str()));
        assert_eq!(s.read("read_ahead_kb").as_deref(), Some((t.ra_pages * 4).to_string().as_str()));
        for name in SYSCTL_NAMES {
            assert!(s.read(name).is_some(), "{name}");
        }
        assert_eq!(s.read("swappiness").as_deref(), Some("60"));
        assert_eq!(s.read("page-cluster").as_deref(), Some("3"));
        assert_eq!(s.read("overcommit_memory"), None);
    }

    #[test]
    fn ratio_and_bytes_exclude_each_other() {
        let s = knobs();
        s.write("dirty_bytes", "1048576\n").unwrap();
        assert_eq!(s.dirty_bytes(), 1 << 20);
        assert_eq!(s.dirty_ratio(), 0);
        s.write("dirty_ratio", "30").unwrap();
        assert_eq!((s.dirty_ratio(), s.dirty_bytes()), (30, 0));
        s.write("dirty_background_bytes", "65536").unwrap();
        assert_eq!(s.dirty_background_ratio(), 0);
        s.write("dirty_background_ratio", "5").unwrap();
        assert_eq!((s.dirty_background_ratio(), s.dirty_background_bytes()), (5, 0));
    }

    #[test]
    fn bad_values_are_refused_and_change_nothing() {
        let s = knobs();
        let before = s.dirty_ratio();
        for bad in ["101", "-1", "abc", "", "1.5"] {
            let e = s.write("dirty_ratio", bad).unwrap_err();
            assert!(matches!(e, Error::InvalidSysctl { .. }), "{bad}: {e:?}");
            assert_eq!(e.errno(), libc::EINVAL);
        }
        assert_eq!(s.dirty_ratio(), before);
        assert!(matches!(s.write("dirty_bytes", "4096"), Err(Error::InvalidSysctl { .. })));
        let e = s.write("nope", "1").unwrap_err();
        assert!(matches!(e, Error::UnknownSysctl { .. }));
        assert_eq!(e.errno(), libc::ENOENT);
    }

    #[test]
    fn read_ahead_kb_round_trips_in_pages() {
        let s = knobs();
        s.write("read_ahead_kb", "512").unwrap();
        assert_eq!(s.ra_pages(), 128);
        assert_eq!(s.read("read_ahead_kb").as_deref(), Some("512"));
        s.write("read_ahead_kb", "0").unwrap();
        assert_eq!(s.ra_pages(), 0);
    }
}

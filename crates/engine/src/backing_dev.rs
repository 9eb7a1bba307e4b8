//! Backing device info (mm/backing-dev.c, the bdi_writeback of
//! fs/fs-writeback.c).
//!
//! Files whose devices report the same `bdi_name` share one `Bdi`: its dirty
//! and writeback counts, its congestion state, and its flusher thread
//! ("flush-NAME"), which writes that device's dirty inodes oldest first, in
//! file-offset order, in large batches. A bdi is congested while more than
//! `BDI_CONGESTED_PAGES` of its pages are under writeback; reclaimers that
//! meet mostly writeback pages of a congested device wait briefly
//! (`wait_iff_congested`) instead of spinning.

use crate::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use crate::mm::Cache;
use crate::wait::Wakeup;

/// Pages under writeback above which a device counts as congested.
pub const BDI_CONGESTED_PAGES: i64 = 128;

pub struct Bdi {
    pub id: u32,
    pub name: String,
    pub nr_dirty: AtomicI64,
    pub nr_writeback: AtomicI64,
    /// Pages written back, in all.
    pub written: AtomicU64,
    /// The flusher's doorbell.
    pub wait: Wakeup,
    /// Reclaim met dirty pages of this device at the inactive tail and
    /// wants them cleaned whatever the thresholds say.
    pub reclaim_wanted: AtomicBool,
}

/// A bdi's counters, for tools.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BdiStat {
    pub name: String,
    pub nr_dirty: u64,
    pub nr_writeback: u64,
    pub written: u64,
    pub congested: bool,
}

impl Bdi {
    /// A bdi with nothing dirty and no flusher yet.
    pub fn new(id: u32, name: &str) -> Bdi {
        Bdi {
            id,
            name: name.to_string(),
            nr_dirty: AtomicI64::new(0),
            nr_writeback: AtomicI64::new(0),
            written: AtomicU64::new(0),
            wait: Wakeup::default(),
            reclaim_wanted: AtomicBool::new(false),
        }
    }

    pub fn congested(&self) -> bool {
        self.nr_writeback.load(Ordering::Relaxed) > BDI_CONGESTED_PAGES
    }

    pub fn stat(&self) -> BdiStat {
        BdiStat {
            name: self.name.clone(),
            nr_dirty: self.nr_dirty.load(Ordering::Relaxed).max(0) as u64,
            nr_writeback: self.nr_writeback.load(Ordering::Relaxed).max(0) as u64,
            written: self.written.load(Ordering::Relaxed),
            congested: self.congested(),
        }
    }
}

/// The registered bdis (the kernel's bdi_list), in registration order
/// (a bdi's id is its place). Private to this module: `bdi_get` adds,
/// nothing removes.
#[derive(Default)]
pub struct BdiList {
    list: Mutex<Vec<Arc<Bdi>>>,
}

impl Cache {
    /// The bdi called `name`, registered (and its flusher started) on first
    /// use.
    pub fn bdi_get(&self, name: &str) -> Arc<Bdi> {
        let mut bdis = self.bdis.list.lock();
        if let Some(b) = bdis.iter().find(|b| b.name == name) {
            return b.clone();
        }
        let bdi = Arc::new(Bdi::new(bdis.len() as u32, name));
        bdis.push(bdi.clone());
        if let Some(cache) = self.arc() {
            let b = bdi.clone();
            let spawned =
                std::thread::Builder::new().name(format!("flush-{name}")).spawn(move || flusher_thread(cache, b));
            // Without a flusher, writeback still happens in fsync, in
            // balance_dirty_pages' waits and (3.1 mode) in reclaim.
            if let Ok(t) = spawned {
                self.kthread_add(t);
            }
        }
        bdi
    }

    /// Wake every bdi's flusher (wakeup_flusher_threads).
    pub fn wakeup_flusher_threads(&self) {
        self.vm.inc(crate::vmstat::Item::flusher_wakeups);
        for b in self.bdis.list.lock().iter() {
            b.wait.wake();
        }
    }

    /// Per-device counters.
    pub fn bdi_stats(&self) -> Vec<BdiStat> {
        self.bdis.list.lock().iter().map(|b| b.stat()).collect()
    }

    /// wait_iff_congested: sleep up to `timeout` for writeback to make
    /// progress, if any device is congested. Returns whether it waited.
    pub fn wait_iff_congested(&self, timeout: Duration) -> bool {
        if !self.bdis.list.lock().iter().any(|b| b.congested()) {
            return false;
        }
        self.vm.inc(crate::vmstat::Item::congestion_waits);
        self.progress.wait(timeout);
        true
    }
}

/// While periodic writeback is off (dirty_writeback_centisecs = 0), how
/// often the flusher looks again at the knob.
const PERIODIC_OFF_RECHECK: Duration = Duration::from_secs(1);

/// A device's flusher thread: wakes every dirty_writeback_centisecs or
/// when rung. The period is read at every sleep, so a sysctl write takes
/// effect after the current one; 0 turns periodic writeback off (as in
/// Linux) and the flusher then works only when rung.
fn flusher_thread(cache: Arc<Cache>, bdi: Arc<Bdi>) {
    while !cache.shutting_down() {
        let centisecs = cache.sysctl.dirty_writeback_centisecs();
        let periodic = centisecs > 0;
        let period = if periodic { Duration::from_millis(centisecs as u64 * 10) } else { PERIODIC_OFF_RECHECK };
        let rung = bdi.wait.wait(period);
        if cache.shutting_down() {
            break;
        }
        if rung || periodic {
            cache.wb_do_writeback(&bdi);
        }
    }
}

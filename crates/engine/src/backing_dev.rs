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
use std::thread::JoinHandle;
use std::time::Duration;

use crate::wait::Wakeup;

/// Pages under writeback above which a device counts as congested.
pub const BDI_CONGESTED_PAGES: i64 = 128;

pub struct Bdi {
    pub id: u32,
    pub name: String,
    /// The device's dirty and writeback pages and pages written back in
    /// all: private, changed only through the `account_*` methods, which
    /// page_writeback.rs's accounting calls beside the node's counts.
    nr_dirty: AtomicI64,
    nr_writeback: AtomicI64,
    written: AtomicU64,
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

    /// `nr` pages (a folio) of this device became dirty (account_page_dirtied).
    #[inline]
    pub(crate) fn account_dirtied(&self, nr: i64) {
        self.nr_dirty.fetch_add(nr, Ordering::Relaxed);
    }

    /// A dirty page was cleaned or dropped (account_page_cleaned).
    #[inline]
    pub(crate) fn account_cleaned(&self, nr: i64) {
        self.nr_dirty.fetch_sub(nr, Ordering::Relaxed);
    }

    /// Writeback of a page began (account_page_writeback).
    #[inline]
    pub(crate) fn account_writeback_start(&self, nr: i64) {
        self.nr_writeback.fetch_add(nr, Ordering::Relaxed);
    }

    /// Writeback of a page ended (test_clear_page_writeback).
    #[inline]
    pub(crate) fn account_writeback_end(&self, nr: i64) {
        self.nr_writeback.fetch_sub(nr, Ordering::Relaxed);
    }

    /// A page's writeback succeeded.
    #[inline]
    pub(crate) fn account_written(&self, nr: u64) {
        self.written.fetch_add(nr, Ordering::Relaxed);
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

impl BdiList {
    /// The bdi called `name`, registered on first use; whether this call
    /// registered it (its caller then starts the flusher,
    /// `Cache::bdi_get`).
    pub fn register(&self, name: &str) -> (Arc<Bdi>, bool) {
        let mut bdis = self.list.lock();
        if let Some(b) = bdis.iter().find(|b| b.name == name) {
            return (b.clone(), false);
        }
        let bdi = Arc::new(Bdi::new(bdis.len() as u32, name));
        bdis.push(bdi.clone());
        (bdi, true)
    }

    /// Ring every bdi's flusher (the loop of wakeup_flusher_threads).
    pub fn wake_all(&self) {
        for b in self.list.lock().iter() {
            b.wait.wake();
        }
    }

    /// Per-device counters.
    pub fn stats(&self) -> Vec<BdiStat> {
        self.list.lock().iter().map(|b| b.stat()).collect()
    }

    /// Whether any device is congested (wait_iff_congested's test).
    pub fn any_congested(&self) -> bool {
        self.list.lock().iter().any(|b| b.congested())
    }
}

/// What a flusher thread runs and when it stops: the work function the
/// kernel registers for a bdi_writeback (`wb_workfn`) and the kthread's
/// should-stop test. The cache implements it (page_writeback.rs), so this
/// module needs nothing of the cache's.
pub trait WbWork: Send + Sync + 'static {
    fn should_stop(&self) -> bool;
    /// The period of the flusher's wakeups (vm.dirty_writeback_centisecs).
    fn dirty_writeback_centisecs(&self) -> u32;
    /// One pass over the device's dirty inodes.
    fn wb_do_writeback(&self, bdi: &Bdi);
}

/// Start `bdi`'s flusher thread ("flush-NAME").
pub fn spawn_flusher<W: WbWork>(work: Arc<W>, bdi: Arc<Bdi>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(format!("flush-{}", bdi.name)).spawn(move || flusher_thread(&*work, &bdi))
}

/// While periodic writeback is off (dirty_writeback_centisecs = 0), how
/// often the flusher looks again at the knob.
const PERIODIC_OFF_RECHECK: Duration = Duration::from_secs(1);

/// A device's flusher thread: wakes every dirty_writeback_centisecs or
/// when rung. The period is read at every sleep, so a sysctl write takes
/// effect after the current one; 0 turns periodic writeback off (as in
/// Linux) and the flusher then works only when rung.
fn flusher_thread<W: WbWork>(work: &W, bdi: &Bdi) {
    while !work.should_stop() {
        let centisecs = work.dirty_writeback_centisecs();
        let periodic = centisecs > 0;
        let period = if periodic { Duration::from_millis(centisecs as u64 * 10) } else { PERIODIC_OFF_RECHECK };
        let rung = bdi.wait.wait(period);
        if work.should_stop() {
            break;
        }
        if rung || periodic {
            work.wb_do_writeback(bdi);
        }
    }
}

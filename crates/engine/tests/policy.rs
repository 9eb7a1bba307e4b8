//! Eviction-policy plug-ins (`pcache::policy`): the engine keeps the
//! contract a policy is promised, under dirty pages, truncation,
//! invalidation and reclaim, with a policy of the test's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pcache::policy::clock::Clock;
use pcache::policy::lru::Lru;
use pcache::policy::{AccessMode, EvictionPolicy, FolioRef, Putback, Refault, Removal};
use pcache::{Advice, Config, Item, PageCache, PolicyKind, Tunables};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Held,
    Candidate,
}

#[derive(Default)]
struct Log {
    pages: HashMap<u32, State>,
    violations: Vec<String>,
    added: u64,
    accessed: u64,
    refaults: u64,
    removed: HashMap<String, u64>,
    putbacks: HashMap<String, u64>,
    /// The largest order a folio it was given had.
    max_order: u8,
}

/// LRU, checking every hook against the trait's guarantees.
struct Checked {
    inner: Lru,
    log: Arc<Mutex<Log>>,
}

impl EvictionPolicy for Checked {
    fn name(&self) -> &'static str {
        "checked-lru"
    }

    fn folio_added(&self, f: FolioRef) {
        let mut l = self.log.lock().unwrap();
        l.added += 1;
        l.max_order = l.max_order.max(f.order);
        if let Some(s) = l.pages.insert(f.pfn, State::Held) {
            l.violations.push(format!("added {f:?} while {s:?}"));
        }
        self.inner.folio_added(f);
    }

    fn folio_accessed(&self, f: FolioRef) {
        self.log.lock().unwrap().accessed += 1;
        self.inner.folio_accessed(f);
    }

    fn folio_removed(&self, f: FolioRef, why: Removal) {
        let mut l = self.log.lock().unwrap();
        *l.removed.entry(format!("{why:?}")).or_default() += 1;
        if l.pages.remove(&f.pfn).is_none() {
            l.violations.push(format!("removed {f:?} ({why:?}) never added"));
        }
        self.inner.folio_removed(f, why);
    }

    fn folio_refault(&self, f: FolioRef, r: Refault) {
        let mut l = self.log.lock().unwrap();
        l.refaults += 1;
        if l.pages.get(&f.pfn) != Some(&State::Held) {
            l.violations.push(format!("refault of {f:?} not held ({r:?})"));
        }
    }

    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        let start = out.len();
        self.inner.evict_candidates(nr, out);
        let mut l = self.log.lock().unwrap();
        for f in &out[start..] {
            match l.pages.insert(f.pfn, State::Candidate) {
                Some(State::Held) => {}
                s => l.violations.push(format!("candidate {f:?} was {s:?}")),
            }
        }
    }

    fn folio_putback(&self, f: FolioRef, why: Putback) {
        let mut l = self.log.lock().unwrap();
        *l.putbacks.entry(format!("{why:?}")).or_default() += 1;
        match l.pages.insert(f.pfn, State::Held) {
            Some(State::Candidate) => {}
            s => l.violations.push(format!("putback {f:?} ({why:?}) was {s:?}")),
        }
        self.inner.folio_putback(f, why);
    }

    fn folio_reclaimable(&self, f: FolioRef) {
        self.inner.folio_reclaimable(f);
    }
}

fn config(pages: u64) -> Config {
    Config {
        memory_bytes: pages * 4096,
        page_size: 4096,
        nr_cpus: 2,
        // Dirty pages may fill most of the cache, so reclaim meets them.
        tunables: Tunables {
            kswapd: false,
            ra_pages: 0,
            arena_prefault: false,
            dirty_ratio: 90,
            dirty_background_ratio: 80,
            ..Tunables::default()
        },
    }
}

// Goal: a plug-in holds single pages even where the defaults cache large
// folios (its lists count pages): readahead gives a policy of the
// caller's, and one `Tunables::policy` names, only order-0 pages, and
// what the caller's holds is what the cache holds. Method: the default
// tunables (folio_order_max 9, readahead on), a 1024-page file read
// sequentially in 64 KiB calls through a 256-page cache, bytes checked.
#[test]
fn plug_ins_hold_single_pages_under_large_folio_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seq");
    let want: Vec<u8> = (0..1024u64).flat_map(|i| pattern(i, 7)).collect();
    std::fs::write(&path, &want).unwrap();
    let t = Tunables { kswapd: false, arena_prefault: false, ..Tunables::default() };
    assert_eq!(t.folio_order_max, pcache::FOLIO_ORDER_MAX_6);
    let read_all = |cache: &PageCache| {
        let f = cache.open(&path, pcache::OpenOptions::default()).unwrap();
        const CALL: usize = 64 << 10;
        let mut buf = vec![0u8; CALL];
        for (k, chunk) in want.chunks(CALL).enumerate() {
            assert_eq!(f.read_at(&mut buf, (k * CALL) as u64).unwrap(), chunk.len());
            assert!(buf[..] == chunk[..], "chunk {k}");
        }
        assert_eq!(cache.vmstat().get(Item::thp_file_alloc), 0, "no large folio");
        f
    };
    let log = Arc::new(Mutex::new(Log::default()));
    let policy = Box::new(Checked { inner: Lru::new(256), log: log.clone() });
    let config = Config { memory_bytes: 256 * 4096, tunables: t, ..Config::default() };
    let cache = PageCache::with_policy(config, policy).unwrap();
    let f = read_all(&cache);
    cache.lru_add_drain_all();
    let l = log.lock().unwrap();
    assert!(l.violations.is_empty(), "{:?}", l.violations);
    assert_eq!(l.max_order, 0);
    assert!(l.added > 256, "reclaim ran");
    let held = l.pages.values().filter(|&&s| s == State::Held).count() as u64;
    assert_eq!(held, f.cached_pages(), "the policy holds what the cache holds");
    drop(l);
    let named = Config { tunables: Tunables { policy: PolicyKind::Lru, ..t }, ..config };
    read_all(&PageCache::new(named).unwrap());
}

fn pattern(index: u64, round: u8) -> Vec<u8> {
    (0..4096u64).map(|i| (i.wrapping_mul(31) ^ index ^ round as u64) as u8).collect()
}

// Goal: a policy of the caller's sees the contract the trait promises:
// every page added before anything else names it, removed once with the
// right reason (evicted, truncated, invalidated), every candidate back
// exactly once (dirty ones as `Putback::Dirty`), refaults reported; and the
// data stays right throughout. Method: a 64-page cache (kswapd off, direct
// reclaim only) and a 256-page file written twice (dirty pages reclaim must
// write back), read back, its last 16 pages read again (so they are cached
// however much reclaim freed), half invalidated, half truncated, read again.
#[test]
fn custom_policy_sees_the_contract() {
    let log = Arc::new(Mutex::new(Log::default()));
    let policy = Box::new(Checked { inner: Lru::new(64), log: log.clone() });
    let dir = tempfile::tempdir().unwrap();
    let cache = PageCache::with_policy(config(64), policy).unwrap();
    let f = cache.open(dir.path().join("f"), pcache::OpenOptions::default()).unwrap();
    const N: u64 = 256;
    for round in 0..2u8 {
        for i in 0..N {
            f.write_at(&pattern(i, round), i * 4096).unwrap();
        }
    }
    let check = |lo: u64, hi: u64| {
        let mut buf = vec![0u8; 4096];
        for i in lo..hi {
            assert_eq!(f.read_at(&mut buf, i * 4096).unwrap(), 4096);
            assert!(buf == pattern(i, 1), "page {i} differs");
        }
    };
    // The last pages written are cached: hits, reported as accesses.
    check(N - 16, N);
    check(0, N);
    check(0, N);
    // The tail, read again so it is cached whatever reclaim left: half
    // invalidated, half truncated.
    check(N - 16, N);
    f.fadvise((N - 16) * 4096, 8 * 4096, Advice::DontNeed).unwrap();
    f.set_len((N - 8) * 4096).unwrap();
    check(0, N - 8);
    let vm = cache.vmstat();
    assert!(vm.get(Item::pgsteal_direct) > 0, "nothing reclaimed");
    f.close().unwrap();
    drop(cache);
    let l = log.lock().unwrap();
    assert!(l.violations.is_empty(), "{}", l.violations.join("\n"));
    let removed = |k: &str| l.removed.get(k).copied().unwrap_or(0);
    assert!(removed("Evicted") > 0 && removed("Truncated") > 0 && removed("Invalidated") > 0, "{:?}", l.removed);
    assert!(l.putbacks.get("Dirty").copied().unwrap_or(0) > 0, "no dirty candidate: {:?}", l.putbacks);
    assert!(
        l.added >= N && l.accessed > 0 && l.refaults > 0,
        "added {} accessed {} refaults {}",
        l.added,
        l.accessed,
        l.refaults
    );
}

// Goal: `policy=NAME` is settable by name, as `--set` does, and an unknown
// name or a plug-in with the multi-gen LRU is refused at build.
#[test]
fn policy_by_name_and_refusals() {
    for kind in PolicyKind::ALL {
        let t = Tunables::default().with_sets([("policy", kind.name())]).unwrap();
        assert_eq!(t.policy, kind);
    }
    assert!(Tunables::default().with_sets([("policy", "belady")]).is_err());
    let mut c = config(64);
    c.tunables.policy = PolicyKind::Fifo;
    c.tunables.lru = pcache::LruPolicy::MultiGen;
    assert!(PageCache::new(c).is_err());
    c.tunables.lru = pcache::LruPolicy::Classic;
    c.tunables.reclaim_batch = 0;
    assert!(PageCache::new(c).is_err());
}

// Goal: the getscan plug-in keeps pages a GET read twice while a scan
// through a NOREUSE handle passes over five times the cache (twice over
// the same range, so a scan page is read again while cached), where an
// LRU loses them all. Method: a 64-page cache (readahead off, direct
// reclaim only) over a 512-page file written outside it; 16 pages read
// twice through one handle, 300 pages read twice through another advised
// NOREUSE; which of the 16 are still cached.
#[test]
fn getscan_keeps_reused_pages_under_a_noreuse_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data: Vec<u8> = (0..512u64).flat_map(|i| pattern(i, 0)).collect();
    std::fs::write(&path, &data).unwrap();
    let survivors = |policy: PolicyKind| {
        let mut c = config(64);
        c.tunables.policy = policy;
        let cache = PageCache::new(c).unwrap();
        let get = cache.open(&path, pcache::OpenOptions::default()).unwrap();
        let scan = cache.open(&path, pcache::OpenOptions::default()).unwrap();
        scan.fadvise(0, 0, Advice::NoReuse).unwrap();
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            for i in 0..16 {
                assert_eq!(get.read_at(&mut buf, i * 4096).unwrap(), 4096);
                assert!(buf == pattern(i, 0), "page {i} differs");
            }
        }
        for _ in 0..2 {
            for i in 100..400 {
                assert_eq!(scan.read_at(&mut buf, i * 4096).unwrap(), 4096);
                assert!(buf == pattern(i, 0), "page {i} differs");
            }
        }
        assert!(cache.vmstat().get(Item::pgsteal_direct) > 0, "{policy:?}: nothing reclaimed");
        (0..16).filter(|&i| get.page_state(i).is_some()).count()
    };
    assert_eq!(survivors(PolicyKind::Getscan), 16);
    assert_eq!(survivors(PolicyKind::Lru), 0);
}

/// CLOCK, recording which frame holds each page.
struct Framed {
    inner: Clock,
    frames: Arc<Mutex<HashMap<u64, u32>>>,
}

impl EvictionPolicy for Framed {
    fn name(&self) -> &'static str {
        "framed-clock"
    }
    fn access_mode(&self) -> AccessMode {
        self.inner.access_mode()
    }
    fn folio_added(&self, f: FolioRef) {
        self.frames.lock().unwrap().insert(f.index, f.pfn);
        self.inner.folio_added(f);
    }
    fn folio_removed(&self, f: FolioRef, why: Removal) {
        self.frames.lock().unwrap().remove(&f.index);
        self.inner.folio_removed(f, why);
    }
    fn evict_candidates(&self, nr: usize, out: &mut Vec<FolioRef>) {
        self.inner.evict_candidates(nr, out);
    }
    fn folio_putback(&self, f: FolioRef, why: Putback) {
        self.inner.folio_putback(f, why);
    }
}

// Goal: a counted plug-in's accesses (`AccessMode::Counted`): the first
// read of a page is its insertion, each later hit raises its count up to
// the ceiling, a hit that finds the ceiling sets the hit path's hint and
// later hits skip the count; once the policy lowers the count, the engine
// clears the hint at its next call into the policy (here: the next page's
// insertion), and hits count again.
// Method: CLOCK (ceiling 1) over a 64-page cache, readahead off; the test
// lowers the count itself, as the policy's sweep would.
#[test]
fn counted_accesses_and_the_ceiling_hint() {
    let frames = Arc::new(Mutex::new(HashMap::new()));
    let inner = Clock::new(64);
    let AccessMode::Counted(counts) = inner.access_mode() else { panic!("CLOCK counts its accesses") };
    let policy = Box::new(Framed { inner, frames: frames.clone() });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data: Vec<u8> = (0..4u64).flat_map(|i| pattern(i, 0)).collect();
    std::fs::write(&path, &data).unwrap();
    let cache = PageCache::with_policy(config(64), policy).unwrap();
    let f = cache.open(&path, pcache::OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut read = |i: u64| {
        assert_eq!(f.read_at(&mut buf, i * 4096).unwrap(), 4096);
        assert!(buf == pattern(i, 0), "page {i} differs");
    };
    read(0);
    let pfn = *frames.lock().unwrap().get(&0).expect("page 0 was added");
    assert_eq!(counts.get(pfn), 0, "the first read is the insertion's");
    read(0);
    assert_eq!(counts.get(pfn), 1, "a hit counts");
    read(0); // finds the ceiling: sets the hint
    assert_eq!(counts.take(pfn), 1);
    read(0);
    assert_eq!(counts.get(pfn), 0, "a hinted hit skips the count");
    read(1); // an insertion: the engine clears the hint first
    read(0);
    assert_eq!(counts.get(pfn), 1, "the hint outlived the lowering");
    assert_eq!(frames.lock().unwrap().get(&0), Some(&pfn));
}

// Goal: `fadvise(DONTNEED)` on a page invalidation cannot drop (a reader
// holds it) deactivates it as the kernel does: the plug-in is told
// (`folio_deactivated`), and FIFO, LRU and CLOCK free it next, before the
// older pages. Method: 16 clean pages read in order into a 64-page cache
// (one eviction per reclaim), page 8 pinned while it is advised away, then
// new pages read until the first eviction.
#[test]
fn dontneed_on_a_pinned_page_deactivates_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data: Vec<u8> = (0..256u64).flat_map(|i| pattern(i, 0)).collect();
    std::fs::write(&path, &data).unwrap();
    for kind in [PolicyKind::Fifo, PolicyKind::Lru, PolicyKind::Clock] {
        let mut c = config(64);
        c.tunables.policy = kind;
        c.tunables.reclaim_batch = 1;
        let cache = PageCache::new(c).unwrap();
        let f = cache.open(&path, pcache::OpenOptions::default()).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut read = |i: u64| {
            assert_eq!(f.read_at(&mut buf, i * 4096).unwrap(), 4096);
            assert!(buf == pattern(i, 0), "{kind:?}: page {i} differs");
        };
        for i in 0..16 {
            read(i);
        }
        {
            let pin = f.find_page(8).unwrap().expect("page 8 cached");
            f.fadvise(8 * 4096, 4096, Advice::DontNeed).unwrap();
            drop(pin);
        }
        assert!(f.page_state(8).is_some(), "{kind:?}: a pinned page was dropped");
        let mut next = 100;
        while (0..16).all(|i| f.page_state(i).is_some()) {
            assert!(next < 256, "{kind:?}: nothing evicted");
            read(next);
            next += 1;
        }
        let gone: Vec<u64> = (0..16).filter(|&i| f.page_state(i).is_none()).collect();
        assert_eq!(gone, vec![8], "{kind:?}: the deactivated page did not go first");
    }
}

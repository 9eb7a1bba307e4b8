//! Sound frame access: readers copy pages as one state between
//! two write sections while writers, hole punching and truncation change
//! them; write pins (`PageMut`) update pages in place, wait for writeback,
//! zero past EOF, grow i_size where asked, account dirty pages, and do not
//! serialise writers of different pages of one file.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use pcache::backing::{FaultInjector, FaultOp, MemoryDev};
use pcache::{BackingDev, Config, Error, File, PageCache, Tunables};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PS: usize = 4096;

/// A page whose every 8-byte word is `tag` in both halves: a read that
/// mixes two writes, or half of a word, shows two different tags.
fn tagged_page(tag: u32) -> Vec<u8> {
    let word = ((tag as u64) << 32 | tag as u64).to_ne_bytes();
    word.iter().copied().cycle().take(PS).collect()
}

/// Check a copy of (a prefix of) one page: every non-zero word carries
/// the same tag in both halves. Zero words are bytes punched or truncated
/// away, which is a state of the page between sections too.
fn check_one_state(buf: &[u8], what: &str) {
    let mut seen: Option<u32> = None;
    for (i, w) in buf.chunks_exact(8).enumerate() {
        let w = u64::from_ne_bytes(w.try_into().unwrap());
        if w == 0 {
            continue;
        }
        let (hi, lo) = ((w >> 32) as u32, w as u32);
        assert_eq!(hi, lo, "{what}: word {i} is torn: {w:#018x}");
        match seen {
            None => seen = Some(hi),
            Some(t) => assert_eq!(t, hi, "{what}: word {i} has tag {hi:#x} after tag {t:#x}: two writes mixed"),
        }
    }
}

fn memory_dev_bytes(dev: &MemoryDev, index: u64) -> Vec<u8> {
    let mut page = vec![0u8; PS];
    let n = dev.read_pages(index * PS as u64, &mut [&mut page[..]]).unwrap();
    page.truncate(n);
    page
}

// Goal: no reader ever accepts a torn page. Readers holding PageRefs
// (read_into, with_bytes, to_vec, from find_page and get_page) and read_at
// copy whole pages while writers replace them (write_at and PageMut, each
// a whole page of one tag), another thread punches halves and wholes of
// pages and truncates the file, and a streaming reader keeps the small
// cache under reclaim. The unit promised is the write section: every copy
// shows, per page, one write's tag (or zeroes), never two tags and never
// half a word. Method: fixed operation counts (no timer); each copy is
// checked; the premises (reclaim ran, writes really raced reads of the
// same page) are asserted at the end. On the code before frame access was made sound,
// PageRef lent `&[u8]` of the frame while write_at copied into it, and
// this test saw mixed tags.
#[test]
fn readers_never_see_a_torn_page() {
    const PAGES: u64 = 8;
    const WRITES: u32 = 1500;
    let cache = PageCache::new(Config {
        memory_bytes: 96 * PS as u64,
        tunables: Tunables { ra_pages: 4, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let f = cache.open_memory("hot").unwrap();
    let stream = cache.open_memory("stream").unwrap();
    for i in 0..PAGES {
        f.write_at(&tagged_page(1), i * PS as u64).unwrap();
    }
    stream.set_len(512 * PS as u64).unwrap();
    let writers_left = AtomicU64::new(3);
    let reads = AtomicU64::new(0);
    thread::scope(|s| {
        // Writers: write_at of whole pages, and PageMut of whole pages.
        for w in 0..2u32 {
            let (f, left) = (&f, &writers_left);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(w as u64);
                for n in 0..WRITES {
                    let tag = (w + 2) << 24 | n;
                    let i = rng.gen_range(0..PAGES);
                    if w == 0 {
                        f.write_at(&tagged_page(tag), i * PS as u64).unwrap();
                    } else {
                        let mut pin = f.get_page_mut(i).unwrap();
                        pin.write(0, &tagged_page(tag)).unwrap();
                        pin.extend_to((i + 1) * PS as u64).unwrap();
                    }
                }
                left.fetch_sub(1, Ordering::Release);
            });
        }
        // Punch halves and wholes of pages; truncate and grow back.
        {
            let (f, left) = (&f, &writers_left);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(7);
                for n in 0..WRITES / 4 {
                    let i = rng.gen_range(0..PAGES) * PS as u64;
                    match n % 8 {
                        7 => {
                            let len = rng.gen_range(PAGES / 2 * PS as u64 / 8..PAGES * PS as u64 / 8) * 8;
                            f.set_len(len).unwrap();
                            f.set_len(PAGES * PS as u64).unwrap();
                        }
                        0..=3 => f.punch_hole(i + PS as u64 / 2, PS as u64 / 2).unwrap(),
                        _ => f.punch_hole(i, PS as u64).unwrap(),
                    }
                }
                left.fetch_sub(1, Ordering::Release);
            });
        }
        // Memory pressure.
        {
            let (stream, left) = (&stream, &writers_left);
            s.spawn(move || {
                let mut buf = vec![0u8; 8 * PS];
                let mut pos = 0u64;
                while left.load(Ordering::Acquire) > 0 {
                    stream.read_at(&mut buf, pos).unwrap();
                    pos = (pos + buf.len() as u64) % (512 * PS as u64);
                }
            });
        }
        // Readers.
        for r in 0..3u64 {
            let (f, left, reads) = (&f, &writers_left, &reads);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + r);
                let mut buf = vec![0u8; PS];
                while left.load(Ordering::Acquire) > 0 {
                    let i = rng.gen_range(0..PAGES);
                    match rng.gen_range(0..4) {
                        0 => {
                            let n = f.read_at(&mut buf, i * PS as u64).unwrap();
                            check_one_state(&buf[..n], &format!("read_at page {i}"));
                        }
                        1 => {
                            // Held across several copies while writers go on.
                            if let Some(p) = f.find_page(i).unwrap() {
                                for k in 0..4 {
                                    p.read_into(0, &mut buf).unwrap();
                                    check_one_state(&buf, &format!("find_page({i}).read_into #{k}"));
                                }
                            }
                        }
                        2 => match f.get_page(i) {
                            Ok(p) => {
                                p.with_bytes(|b| check_one_state(b, &format!("get_page({i}).with_bytes")));
                                check_one_state(&p.to_vec(), &format!("get_page({i}).to_vec"));
                            }
                            // Truncated below it meanwhile.
                            Err(Error::PastEof { .. }) => {}
                            Err(e) => panic!("get_page({i}): {e}"),
                        },
                        _ => {
                            if let Some(p) = f.find_page(i).unwrap() {
                                // A copy not starting at 0: half a page.
                                p.read_into(PS / 4, &mut buf[..PS / 2]).unwrap();
                                check_one_state(&buf[..PS / 2], &format!("find_page({i}).read_into(1024..3072)"));
                            }
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let vm = cache.vmstat();
    let stolen = vm.by_name("pgsteal_kswapd").unwrap() + vm.by_name("pgsteal_direct").unwrap();
    assert!(stolen > 0, "no reclaim happened: the test ran without memory pressure");
    assert!(reads.load(Ordering::Relaxed) > 1000, "readers barely ran: {}", reads.load(Ordering::Relaxed));
}

// Goal: PageRef's copies refuse ranges past the page instead of panicking
// or reading another frame, and agree with read_at.
#[test]
fn pageref_copies_check_their_range() {
    let cache = PageCache::new(Config::with_memory(64 * PS as u64)).unwrap();
    let f = cache.open_memory("r").unwrap();
    f.write_at(&tagged_page(9), 0).unwrap();
    let p = f.find_page(0).unwrap().expect("cached");
    assert_eq!(p.len(), PS);
    let mut buf = [0u8; 16];
    assert!(matches!(p.read_into(PS - 8, &mut buf), Err(Error::InvalidArgument(_))));
    assert!(matches!(p.read_into(usize::MAX, &mut buf), Err(Error::InvalidArgument(_))));
    p.read_into(PS - 16, &mut buf).unwrap();
    assert_eq!(&buf[..], &tagged_page(9)[PS - 16..]);
    assert_eq!(p.to_vec(), tagged_page(9));
    // Nested with_bytes: the inner call gets a buffer of its own.
    p.with_bytes(|outer| p.with_bytes(|inner| assert_eq!(outer, inner)));
}

// Goal: a write pin past EOF starts zero-filled, a pin of the page holding
// EOF keeps the file's bytes and zeroes past EOF, extend_to grows i_size
// (only to the pin's page), bytes written past EOF without extend_to are
// not part of the file and read back as zero when it grows, and each
// written pin dirties its page once in the accounting and on the device.
#[test]
fn page_mut_past_eof_extension_and_dirty_accounting() {
    let cache = PageCache::new(Config {
        memory_bytes: 256 * PS as u64,
        tunables: Tunables { kswapd: false, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let mem = Arc::new(MemoryDev::new("pm", PS));
    let f = cache.open_dev(mem.clone()).unwrap();
    f.write_at(&[7u8; 100], 0).unwrap();
    f.fsync().unwrap();
    let dirty = || cache.vmstat().by_name("nr_dirty").unwrap();
    assert_eq!(dirty(), 0);
    {
        let mut pin = f.get_page_mut(0).unwrap();
        let mut page = vec![1u8; PS];
        pin.read_into(0, &mut page).unwrap();
        assert!(page[..100].iter().all(|&b| b == 7) && page[100..].iter().all(|&b| b == 0));
        pin.write(100, b"abc").unwrap();
        pin.extend_to(103).unwrap();
        assert!(matches!(pin.extend_to(PS as u64 + 1), Err(Error::InvalidArgument(_))));
        assert!(matches!(pin.write(PS - 2, b"abc"), Err(Error::InvalidArgument(_))));
    }
    assert_eq!(f.len().unwrap(), 103);
    assert!(f.page_state(0).unwrap().dirty);
    assert_eq!(dirty(), 1);
    // Wholly past EOF: zero-filled. Written at 10..20, extended to 15: the
    // bytes at 15..20 are past EOF and are zeroed at drop.
    {
        let mut pin = f.get_page_mut(3).unwrap();
        let mut page = vec![1u8; PS];
        pin.read_into(0, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0), "a page past EOF is not zero-filled");
        pin.fill(10, 10, 0xaa).unwrap();
        pin.extend_to(3 * PS as u64 + 15).unwrap();
    }
    assert_eq!(f.len().unwrap(), 3 * PS as u64 + 15);
    assert_eq!(dirty(), 2);
    // Written without extend_to past EOF: the file keeps its size.
    {
        let mut pin = f.get_page_mut(5).unwrap();
        pin.write(0, b"lost").unwrap();
    }
    assert_eq!(f.len().unwrap(), 3 * PS as u64 + 15);
    f.fsync().unwrap();
    assert_eq!(dirty(), 0);
    f.set_len(6 * PS as u64).unwrap();
    let mut all = vec![0u8; 6 * PS];
    assert_eq!(f.read_at(&mut all, 0).unwrap(), 6 * PS);
    let mut want = vec![0u8; 6 * PS];
    want[..100].fill(7);
    want[100..103].copy_from_slice(b"abc");
    want[3 * PS + 10..3 * PS + 15].fill(0xaa);
    assert!(all == want, "file contents after pins and growth differ");
    // The device got the pinned writes.
    assert_eq!(&memory_dev_bytes(&mem, 0)[..103], &want[..103]);
    assert_eq!(&memory_dev_bytes(&mem, 3)[..15], &want[3 * PS..3 * PS + 15]);
}

// Goal (stable pages): a write pin taken while its page is under
// writeback waits for the write to end, so the device gets the bytes of
// before the pin, whole, and the pin's bytes are not lost: the page is
// dirty again and the next fsync writes them. Method: a FaultInjector
// delays device writes by 1 s; fsync runs in a thread; once the page
// shows PG_writeback the main thread pins and writes it.
#[test]
fn page_mut_during_writeback_is_not_lost() {
    let cache = PageCache::new(Config::with_memory(64 * PS as u64)).unwrap();
    let mem = Arc::new(MemoryDev::new("wb", PS));
    let fi = Arc::new(FaultInjector::new(mem.clone()));
    let f = cache.open_dev(fi.clone()).unwrap();
    f.write_at(&tagged_page(1), 0).unwrap();
    fi.set_delay(FaultOp::Write, Duration::from_secs(1));
    thread::scope(|s| {
        let syncer = s.spawn(|| f.fsync());
        while !f.page_state(0).unwrap().writeback {
            assert!(!syncer.is_finished(), "fsync ended before the page was seen under writeback");
            thread::yield_now();
        }
        let mut pin = f.get_page_mut(0).unwrap();
        assert!(!f.page_state(0).unwrap().writeback, "get_page_mut returned with the page under writeback");
        pin.write(0, &tagged_page(2)).unwrap();
        drop(pin);
        syncer.join().unwrap().unwrap();
    });
    fi.set_delay(FaultOp::Write, Duration::ZERO);
    assert_eq!(memory_dev_bytes(&mem, 0), tagged_page(1), "writeback did not write the page as it was");
    assert!(f.page_state(0).unwrap().dirty, "the pin's write left the page clean");
    f.fsync().unwrap();
    assert_eq!(memory_dev_bytes(&mem, 0), tagged_page(2), "the pin's write was lost");
}

// Goal: write pins of different pages of one file do not serialise on the
// file: while thread 1 holds a pin on page 0, thread 2 takes, writes and
// drops a pin on page 1. Method: thread 1 keeps its pin until thread 2
// reports back (a channel); a whole-file lock would block thread 2 and the
// test would fail at the receive's generous deadline instead of hanging.
#[test]
fn page_mut_of_different_pages_do_not_serialise() {
    let cache = PageCache::new(Config::with_memory(64 * PS as u64)).unwrap();
    let f = &cache.open_memory("two").unwrap();
    f.set_len(2 * PS as u64).unwrap();
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(move || {
            let mut pin = f.get_page_mut(0).unwrap();
            pin.write(0, b"zero").unwrap();
            pinned_tx.send(()).unwrap();
            let got = done_rx.recv_timeout(Duration::from_secs(60));
            assert!(got.is_ok(), "a pin on page 1 waited for the pin on page 0");
        });
        s.spawn(move || {
            pinned_rx.recv().unwrap();
            let mut pin = f.get_page_mut(1).unwrap();
            pin.write(0, b"one").unwrap();
            drop(pin);
            done_tx.send(()).unwrap();
        });
    });
    let mut buf = [0u8; 4];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"zero");
    f.read_at(&mut buf[..3], PS as u64).unwrap();
    assert_eq!(&buf[..3], b"one");
}

// Goal: truncation and write pins are ordered, never interleaved: a
// set_len racing a pin either comes after it (the pin's page and its
// extension are cut away) or before it (the pin sees a page past EOF,
// zero-filled), and no byte of a truncated pin comes back when the file
// grows again. Method: thread 1 pins page 5, writes, extends to 6 pages,
// and holds the pin a while; thread 2 truncates to 0 once the pin is
// held; the truncation must end after the pin is dropped.
#[test]
fn truncation_waits_for_write_pins_and_nothing_resurrects() {
    let cache = PageCache::new(Config::with_memory(64 * PS as u64)).unwrap();
    let f: &File = &cache.open_memory("t").unwrap();
    f.set_len(8 * PS as u64).unwrap();
    let dropped = &AtomicBool::new(false);
    let (pinned_tx, pinned_rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(move || {
            let mut pin = f.get_page_mut(5).unwrap();
            pin.fill(0, PS, 0x55).unwrap();
            pin.extend_to(6 * PS as u64).unwrap();
            pinned_tx.send(()).unwrap();
            thread::sleep(Duration::from_millis(100));
            dropped.store(true, Ordering::Release);
        });
        s.spawn(move || {
            pinned_rx.recv().unwrap();
            f.set_len(0).unwrap();
            assert!(dropped.load(Ordering::Acquire), "set_len finished while a write pin of the file was held");
        });
    });
    assert_eq!(f.len().unwrap(), 0);
    assert!(f.find_page(5).unwrap().is_none());
    f.set_len(8 * PS as u64).unwrap();
    let mut buf = vec![1u8; PS];
    assert_eq!(f.read_at(&mut buf, 5 * PS as u64).unwrap(), PS);
    assert!(buf.iter().all(|&b| b == 0), "truncated bytes came back");
    // After a truncation, a pin past the new EOF starts from zeroes.
    f.set_len(0).unwrap();
    let pin = f.get_page_mut(5).unwrap();
    let mut page = vec![1u8; PS];
    pin.read_into(0, &mut page).unwrap();
    assert!(page.iter().all(|&b| b == 0));
}

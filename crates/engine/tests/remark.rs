//! the Harji/Piggin thread, Linux 2.6.20: when a read that touches a page again re-marks it
//! accessed, for every historical rule, on the seed's three cases.

use pcache::{Config, Item, PageCache, RemarkRule, Tunables};
use rand::{Rng, SeedableRng};

const PS: u64 = 4096;

fn cache(rule: RemarkRule) -> PageCache {
    PageCache::new(Config {
        memory_bytes: 4096 * PS,
        tunables: Tunables { remark_rule: rule, ra_pages: 0, kswapd: false, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap()
}

/// Run `reads` (offset, len) through one handle; count mark_page_accessed.
fn marks(rule: RemarkRule, file_len: u64, reads: &[(u64, usize)]) -> u64 {
    let c = cache(rule);
    let f = c.open_memory("m").unwrap();
    f.set_len(file_len).unwrap();
    let before = c.vmstat();
    let mut buf = vec![0u8; 1 << 16];
    for &(off, len) in reads {
        f.read_at(&mut buf[..len], off).unwrap();
    }
    c.vmstat().delta(&before).get(Item::mark_page_accessed_calls)
}

/// The rules restated as the seed's thread states them, for reads that do
/// not cross a page boundary: an independent model of the decisions.
fn model(rule: RemarkRule, reads: &[(u64, usize)]) -> u64 {
    let mut prev_end: Option<u64> = None;
    let mut hits = 0u32;
    let mut n = 0;
    for &(pos, len) in reads {
        let index = pos / PS;
        let offset = pos % PS;
        let prev_index = prev_end.map(|e| (e - 1) / PS);
        let same = prev_index == Some(index);
        let mark = match rule {
            RemarkRule::PageAligned => offset == 0,
            RemarkRule::PrevIndex => !same,
            RemarkRule::PrevIndexOrOffsetZero => !same || offset == 0,
            RemarkRule::Unconditional => true,
            RemarkRule::Every32nd => {
                if same {
                    hits += 1;
                    hits.is_multiple_of(32)
                } else {
                    hits = 0;
                    true
                }
            }
            RemarkRule::PrevPos => !(same && prev_end == Some(pos)),
        };
        n += mark as u64;
        prev_end = Some(pos + len as u64);
    }
    n
}

// Goal: Harji's case: a file of one page (or less) re-read whole through
// one long-lived handle. prev_index never moves, so 2.6.11-2.6.20 marks it
// only the first time and the page ages out however hot it is; the merged
// prev_pos rule re-marks every read.
#[test]
fn one_page_file_reread() {
    for size in [4096u64, 3000] {
        let reads: Vec<_> = (0..65).map(|_| (0u64, size as usize)).collect();
        let expect = [
            (RemarkRule::PageAligned, 65),
            (RemarkRule::PrevIndex, 1),
            (RemarkRule::PrevIndexOrOffsetZero, 65),
            (RemarkRule::Unconditional, 65),
            (RemarkRule::Every32nd, 3), // the first read, then hits 32 and 64
            (RemarkRule::PrevPos, 65),
        ];
        for (rule, n) in expect {
            assert_eq!(marks(rule, size, &reads), n, "{rule:?} size {size}");
            assert_eq!(model(rule, &reads), n, "model {rule:?}");
        }
    }
}

// Goal: a large file read sequentially in 512-byte chunks: every rule but
// the unconditional one marks each page once (use-once), so streaming does
// not activate; unconditional marks all 8 reads of each page.
#[test]
fn sequential_512_byte_reads() {
    let pages = 64u64;
    let reads: Vec<_> = (0..pages * 8).map(|i| (i * 512, 512usize)).collect();
    for rule in RemarkRule::ALL {
        let n = marks(rule, pages * PS, &reads);
        let expect = if rule == RemarkRule::Unconditional { pages * 8 } else { pages };
        assert_eq!(n, expect, "{rule:?}");
        assert_eq!(model(rule, &reads), expect, "model {rule:?}");
    }
}

// Goal: the 2.6.11 test's access pattern, 128-byte reads at random offsets
// of a file: page-aligned-only marking misses almost all of them (database
// style reads never get referenced); the other rules mark nearly every one.
// Also the same 128 bytes read twice in a row, and consecutive 128-byte
// reads inside one page, where the rules differ most.
#[test]
fn random_128_byte_reads() {
    let pages = 256u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut reads: Vec<(u64, usize)> = (0..2000)
        .map(|_| {
            let page = rng.gen_range(0..pages);
            // Page-aligned now and then; never crossing a page.
            let off = if rng.gen_ratio(1, 16) { 0 } else { rng.gen_range(0..PS - 128) };
            (page * PS + off, 128usize)
        })
        .collect();
    reads.extend([(5 * PS + 256, 128), (5 * PS + 256, 128), (5 * PS + 384, 128), (5 * PS + 512, 128)]);
    for rule in RemarkRule::ALL {
        let want = model(rule, &reads);
        assert_eq!(marks(rule, pages * PS, &reads), want, "{rule:?}");
    }
    let aligned = marks(RemarkRule::PageAligned, pages * PS, &reads);
    let prev_pos = marks(RemarkRule::PrevPos, pages * PS, &reads);
    assert!(aligned < reads.len() as u64 / 8, "page-aligned marks few: {aligned}");
    assert!(prev_pos > reads.len() as u64 * 9 / 10, "prev_pos marks nearly all: {prev_pos}");
    // The tail: re-reading the same 128 bytes marks under prev_pos (it does
    // not continue the last read), continuing reads do not.
    let tail = &reads[reads.len() - 4..];
    assert_eq!(model(RemarkRule::PrevPos, tail), 2);
    assert_eq!(model(RemarkRule::PrevIndex, tail), 1);
}

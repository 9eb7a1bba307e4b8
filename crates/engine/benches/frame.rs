//! Micro-benchmarks of frame access (criterion): a hit-path pin
//! plus a validated copy of the whole page (`find_page`,
//! `PageRef::read_into`), and a write pin that stores 8 bytes
//! (`get_page_mut`, `PageMut::write`, drop). Kept apart from hit.rs so that
//! hit.rs's rows stay comparable with their history: a second call site
//! of `find_page` in the same bench changes how LLVM inlines it there.
//!
//! ```sh
//! cargo bench -p pcache --bench frame
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use pcache::Tunables;

mod common;
use common::{cache, PAGES};

fn pageref(c: &mut Criterion) {
    // Single pages, as the rows' history (a folio's page costs the same
    // copy).
    let (_cache, f) = cache(Tunables { folio_order_max: 0, ..Tunables::default() });
    let mut buf = [0u8; 4096];
    let mut i = 0u64;
    c.bench_function("frame/pageref_read_into_4k", |b| {
        b.iter(|| {
            // A stride coprime with PAGES visits every page.
            i = (i + 2654435761) % PAGES;
            let p = f.find_page(i).expect("lookup").expect("cached");
            p.read_into(0, &mut buf).expect("in the page");
        })
    });
}

fn page_mut(c: &mut Criterion) {
    // Every page dirty after the first round: what remains is the pin
    // (lookup, page lock, writeback check, the reservation call), one
    // write section, and the drop (set_page_dirty finds the page dirty,
    // unlock, the throttle's per-thread count). Dirty limits at 100% and
    // expiry at an hour keep writeback out of it.
    let (_cache, f) = cache(Tunables {
        dirty_ratio: 100,
        dirty_background_ratio: 100,
        dirty_expire_centisecs: 360_000,
        folio_order_max: 0,
        ..Tunables::default()
    });
    let mut n = 0u64;
    c.bench_function("frame/page_mut_write_8", |b| {
        b.iter(|| {
            n += 1;
            let i = n.wrapping_mul(2654435761) % PAGES;
            let mut pin = f.get_page_mut(i).expect("pin");
            pin.write(((n % 512) * 8) as usize, &n.to_ne_bytes()).expect("in the page");
        })
    });
}

criterion_group!(benches, pageref, page_mut);
criterion_main!(benches);

//! Micro-benchmarks of the hit path (criterion): a 4 KiB `read_at` of a
//! cached page and a `find_page` pin, with the kernel's admission (on
//! single pages, and on a file cached in large folios, the default), with
//! pcache's adaptive W-TinyLFU admission, whose sketch counts every marked
//! access, and with the LRU, SIEVE and S3-FIFO plug-ins (pcache::policy):
//! LRU's hits are queued in per-CPU batches, SIEVE's and S3-FIFO's raise
//! a per-frame count (and skip it once at its ceiling). `pcache bench
//! hitpath` measures the same path against the kernel's page cache at
//! scale; this isolates the per-hit cost of a policy change.
//!
//! ```sh
//! cargo bench -p pcache --bench hit
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pcache::{Admission, PolicyKind, Tunables};

mod common;
use common::{cache, PAGES};

fn hits(c: &mut Criterion) {
    let mut g = c.benchmark_group("hit");
    let variants = [
        // Single pages, the rows' history; folios, the default.
        ("Kernel".to_string(), Tunables { folio_order_max: 0, ..Tunables::default() }),
        ("Kernel-folios".to_string(), Tunables { folio_order_max: pcache::FOLIO_ORDER_MAX_6, ..Tunables::default() }),
        ("AdaptiveTinyLfu".to_string(), Tunables { admission: Admission::AdaptiveTinyLfu, ..Tunables::default() }),
        ("policy-lru".to_string(), Tunables { policy: PolicyKind::Lru, ..Tunables::default() }),
        ("policy-sieve".to_string(), Tunables { policy: PolicyKind::Sieve, ..Tunables::default() }),
        ("policy-s3fifo".to_string(), Tunables { policy: PolicyKind::S3fifo, ..Tunables::default() }),
    ];
    for (adm, tunables) in variants {
        let (_cache, f) = cache(tunables);
        let mut buf = [0u8; 4096];
        let mut i = 0u64;
        g.bench_function(BenchmarkId::new("read_at_4k", &adm), |b| {
            b.iter(|| {
                // A stride coprime with PAGES visits every page.
                i = (i + 2654435761) % PAGES;
                f.read_at(&mut buf, i * 4096).expect("read")
            })
        });
        g.bench_function(BenchmarkId::new("find_page", &adm), |b| {
            b.iter(|| {
                i = (i + 2654435761) % PAGES;
                f.find_page(i).expect("lookup").is_some()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, hits);
criterion_main!(benches);

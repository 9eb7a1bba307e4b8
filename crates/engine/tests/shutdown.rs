//! An honest shutdown: `PageCache::shutdown` writes back what can be
//! written and names each file whose dirty data could not be, with the
//! pages left and the error, instead of dropping it silently.

use std::sync::Arc;

use pcache::backing::{Fault, FaultInjector, FaultOp, MemoryDev};
use pcache::{BackingDev, Config, Error, PageCache, Tunables};

const PS: usize = 4096;

// Goal: a shutdown with dirty data a device cannot take reports those
// files (and only those) and fails; the others are written.
// Method: three files on fault injectors, no background writeback; two
// fail every write (EIO, ENOSPC); 5 and 3 dirty pages; shutdown.
// Expect: Err(Unwritten) naming the two failing files with their pages
// and errnos; the healthy file's bytes are on its device.
#[test]
fn shutdown_names_unwritten_files() {
    let cache = PageCache::new(Config {
        memory_bytes: 256 * PS as u64,
        tunables: Tunables { dirty_writeback_centisecs: 0, dirty_background_ratio: 90, ..Tunables::default() },
        ..Config::default()
    })
    .unwrap();
    let dev = |name: &str| {
        let mem = Arc::new(MemoryDev::new(name, PS));
        (Arc::new(FaultInjector::new(mem.clone())), mem)
    };
    let (bad_eio, _) = dev("eio");
    let (bad_nospc, _) = dev("nospc");
    let (good, good_mem) = dev("good");
    bad_eio.fail_always(FaultOp::Write, Fault::Eio);
    bad_nospc.fail_always(FaultOp::Write, Fault::Enospc);
    let open = |fi: &Arc<FaultInjector>| cache.open_dev(fi.clone() as Arc<dyn BackingDev>).unwrap();
    let (f1, f2, f3) = (open(&bad_eio), open(&bad_nospc), open(&good));
    f1.write_at(&vec![1u8; 5 * PS], 0).unwrap();
    f2.write_at(&vec![2u8; 3 * PS], 0).unwrap();
    f3.write_at(&vec![3u8; 2 * PS], 0).unwrap();
    drop((f1, f2, f3));

    let err = cache.shutdown().expect_err("dirty data that cannot be written must fail the shutdown");
    let Error::Unwritten { mut files } = err else { panic!("expected Error::Unwritten, got {err:?}") };
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let got: Vec<(&str, u64, i32)> = files.iter().map(|f| (f.name.as_str(), f.pages, f.errno)).collect();
    assert_eq!(got, vec![("memory:eio", 5, libc::EIO), ("memory:nospc", 3, libc::ENOSPC)]);

    let mut page = vec![0u8; PS];
    assert_eq!(good_mem.read_pages(PS as u64, &mut [&mut page[..]]).unwrap(), PS);
    assert!(page.iter().all(|&b| b == 3), "the healthy file was written back");
}

//! hitpath's kernel side: the kernel's own mapped page cache (a populated
//! shared mapping of a memfd), which the mapped rows read beside pcache's
//! `Mapping` on the same keys.

use super::PAGE;
use crate::sys::Mmap;
use crate::{Error, Result};

/// A memfd of `len` bytes mapped shared and populated, every page
/// written once: the kernel's page cache for the mapped-access row.
pub(super) struct KernelMapping {
    ptr: *mut u8,
    len: usize,
    _map: Mmap,
    _memfd: std::fs::File,
}

// SAFETY: the mapping is only read (with plain loads of whole words that
// nobody writes after `new`) and unmapped on drop; a raw pointer to shared
// memory is as sendable and shareable as the `&[u64]` it stands for.
unsafe impl Sync for KernelMapping {}

impl KernelMapping {
    pub(super) fn new(len: usize) -> Result<KernelMapping> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let io = |what: &str| {
            let context = format!("{what} of a {len}-byte memfd");
            move |source| Error::Io { context, source }
        };
        // SAFETY: a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"pcache-hitpath".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io { context: "memfd_create".into(), source: std::io::Error::last_os_error() });
        }
        // SAFETY: a fresh descriptor, owned from here on.
        let memfd = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        memfd.set_len(len as u64).map_err(io("ftruncate"))?;
        let (prot, flags) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE);
        let map = Mmap::new(len, prot, flags, memfd.as_raw_fd()).map_err(io("mmap"))?;
        let ptr = map.as_ptr();
        for page in 0..len / PAGE {
            // SAFETY: inside the mapping, 8-aligned (page aligned); nothing
            // else accesses it yet.
            unsafe { ptr.add(page * PAGE).cast::<u64>().write(page as u64 + 1) };
        }
        Ok(KernelMapping { ptr, len, _map: map, _memfd: memfd })
    }

    /// The word at byte `pos` (a multiple of 8): a load through the MMU.
    #[inline]
    pub(super) fn load(&self, pos: u64) -> Option<u64> {
        let off = usize::try_from(pos).ok().filter(|&o| o % 8 == 0 && o < self.len)?;
        // SAFETY: in bounds (checked: `len` is a multiple of the page size,
        // so an aligned word that starts inside ends inside), aligned,
        // initialised by `new` (populated, zero but each page's first
        // word), and never written after it: no data race.
        Some(unsafe { self.ptr.add(off).cast::<u64>().read() })
    }
}

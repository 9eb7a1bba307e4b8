//! hitpath's kernel side: the kernel's own mapped page cache (a populated
//! shared mapping of a memfd), which the mapped rows read beside pcache's
//! `Mapping` on the same keys.

use super::PAGE;
use crate::{Error, Result};

/// A memfd of `len` bytes mapped shared and populated, every page
/// written once: the kernel's page cache for the mapped-access row.
pub(super) struct KernelMapping {
    ptr: *mut u8,
    len: usize,
    fd: libc::c_int,
}

// SAFETY: the mapping is only read (with plain loads of whole words that
// nobody writes after `new`) and unmapped by Drop; a raw pointer to shared
// memory is as sendable and shareable as the `&[u64]` it stands for.
unsafe impl Sync for KernelMapping {}

impl KernelMapping {
    pub(super) fn new(len: usize) -> Result<KernelMapping> {
        let name = c"pcache-hitpath";
        // SAFETY: a valid NUL-terminated name; the fd is owned by the result.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io { context: "memfd_create".into(), source: std::io::Error::last_os_error() });
        }
        let fail = |fd, what: &str| {
            let source = std::io::Error::last_os_error();
            // SAFETY: our fd, closed once.
            unsafe { libc::close(fd) };
            Err(Error::Io { context: format!("{what} of a {len}-byte memfd"), source })
        };
        // SAFETY: an fd we own; a length that fits off_t on 64-bit Linux.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return fail(fd, "ftruncate");
        }
        // SAFETY: a fresh shared mapping of our memfd, length `len`; no
        // Rust object aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return fail(fd, "mmap");
        }
        let ptr = ptr.cast::<u8>();
        for page in 0..len / PAGE {
            // SAFETY: inside the mapping, 8-aligned (page aligned); nothing
            // else accesses it yet.
            unsafe { ptr.add(page * PAGE).cast::<u64>().write(page as u64 + 1) };
        }
        Ok(KernelMapping { ptr, len, fd })
    }

    /// The first word of page `page`: a load through the MMU.
    #[inline]
    pub(super) fn load(&self, page: u64) -> Option<u64> {
        let off = (page as usize).checked_mul(PAGE).filter(|&o| o + 8 <= self.len)?;
        // SAFETY: in bounds (checked), page aligned, initialised by `new`,
        // and never written after it: no data race.
        Some(unsafe { self.ptr.add(off).cast::<u64>().read() })
    }
}

impl Drop for KernelMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping and fd `new` made, released once; no borrow
        // of the memory outlives `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

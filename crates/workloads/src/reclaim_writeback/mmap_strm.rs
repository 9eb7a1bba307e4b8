//! mmap-strm, as Mel Gorman's series ran it: "a streaming write to a large mapping
//! (exercises use-once LRU logic) followed by streaming writes to a mix of
//! anonymous and file-backed mappings", sized so that anonymous pages must
//! go to swap.
//!
//! A file mapping written once through (dirty pages the flushers or
//! reclaim must clean), then an anonymous region and a second file mapping
//! written together, in proportion, [`MIX_PASSES`] times: their sum is above
//! memory, so the first pass swaps out and the second back in. Every page
//! carries a stamp (region, page, pass), and a sample is read back after the
//! run, so that a page lost or swapped in from the wrong slot fails it.

use pcache::{MapFlags, Mapping, SwapConfig};

use super::workload::CREATE;
use super::*;

/// Pages read back per region after a run (evenly spread, the last
/// included).
pub(super) const VERIFY_SAMPLES: u64 = 64;
/// Marks a stamped word (a zero-filled or foreign page never matches).
const STAMP_TAG: u64 = 0x5a << 56;

pub(super) fn stamp(region: u64, page: u64, pass: u64) -> u64 {
    STAMP_TAG | (region << 52) | (pass << 44) | page
}

/// The run's regions, kept after the timing for [`Strm::verify`]: the
/// files (whose mappings are gone by then) and the anonymous region.
pub(super) struct Strm {
    /// (region, file, pass).
    files: Vec<(u64, File, u64)>,
    anon: Mapping,
}

pub(super) const LARGE: u64 = 1;
pub(super) const MIX_FILE: u64 = 2;
pub(super) const ANON: u64 = 3;

/// Write block `block` of `m` (region `region`, pass `pass`): the shared
/// pattern with every page's stamp in its first word, through
/// `Mapping::write` (a write fault per page not yet mapped writable).
fn write_block_stamped(m: &Mapping, ps: u64, region: u64, block: u64, pass: u64, buf: &mut [u8]) -> Result<()> {
    stamp_block(buf, ps, region, block, pass);
    Ok(m.write(block * BLOCK, buf)?)
}

/// Put every page's stamp in block `block` (the kernel column's worker
/// writes the same bytes).
pub(super) fn stamp_block(buf: &mut [u8], ps: u64, region: u64, block: u64, pass: u64) {
    let first = block * BLOCK / ps;
    for (i, page) in buf.chunks_mut(ps as usize).enumerate() {
        page[..8].copy_from_slice(&stamp(region, first + i as u64, pass).to_ne_bytes());
    }
}

pub(super) fn pattern_tail(pattern: &[u8], ps: u64, page: u64) -> u64 {
    let off = ((page * ps) % BLOCK + ps - 8) as usize;
    u64::from_ne_bytes(pattern[off..off + 8].try_into().unwrap_or_default())
}

fn file_mapping(cache: &PageCache, path: &Path, blocks: u64) -> Result<(File, Mapping)> {
    let f = cache.open(path, CREATE)?;
    let len = blocks * BLOCK;
    // Mapped writes never grow a file (as in the kernel, past EOF is
    // SIGBUS), so the file is sized first: a hole, no I/O.
    f.set_len(len)?;
    let m = f.map(0, len, MapFlags::READ | MapFlags::WRITE)?;
    Ok((f, m))
}

/// Turn on the run's swap: a host file of [`swap_bytes`] in `dir`
/// (O_DIRECT), as the original had swap on a disk of its own. Swap in
/// memory would make a swap-out a copy and hide what the original saw, that swapping
/// is slower than writing file pages. Untimed: swapon allocates the file
/// whole.
pub(super) fn swapon(cache: &PageCache, dir: &Path, anon_blocks: u64) -> Result<PathBuf> {
    let path = dir.join("strm-swap");
    cache.swapon(SwapConfig::file(&path, swap_bytes(anon_blocks * BLOCK)))?;
    Ok(path)
}

/// The timed part: seconds from the first write to the last, the paths,
/// and what to verify.
pub(super) fn run(
    cache: &PageCache,
    dir: &Path,
    blocks: u64,
    mix_blocks: u64,
    anon_blocks: u64,
    pattern: &[u8],
) -> Result<(f64, Vec<PathBuf>, Strm)> {
    let ps = cache.page_size() as u64;
    let mut buf = pattern[..BLOCK as usize].to_vec();
    let (large_path, mix_path) = (dir.join("strm-large"), dir.join("strm-mix"));
    // Set up outside the timing: opening, sizing and mapping cost no I/O
    // but are not the workload.
    let (large, large_map) = file_mapping(cache, &large_path, blocks)?;
    let paths = vec![large_path, mix_path.clone()];
    let start = Instant::now();
    let mix = || -> Result<_> {
        let (mix, mix_map) = file_mapping(cache, &mix_path, mix_blocks)?;
        Ok((mix_map, cache.map_anon(anon_blocks * BLOCK)?, mix))
    };
    let put = |m: &Mapping, region, block, pass| write_block_stamped(m, ps, region, block, pass, &mut buf);
    let (mix_map, anon, mix) = write_regions((blocks, mix_blocks, anon_blocks), large_map, mix, put)?;
    let secs = start.elapsed().as_secs_f64();
    drop(mix_map);
    let strm = Strm { files: vec![(LARGE, large, 1), (MIX_FILE, mix, MIX_PASSES)], anon };
    Ok((secs, paths, strm))
}

/// The timed writes, on either column's mappings: `large` once through,
/// then, on the mappings `mix` makes (the second file's and the anonymous
/// region, and the file), [`MIX_PASSES`] passes over the anonymous region
/// with the file's blocks in proportion. `put(mapping, region, block,
/// pass)` writes one block.
pub(super) fn write_regions<M, F, E>(
    (blocks, mix_blocks, anon_blocks): (u64, u64, u64),
    large: M,
    mix: impl FnOnce() -> std::result::Result<(M, M, F), E>,
    mut put: impl FnMut(&M, u64, u64, u64) -> std::result::Result<(), E>,
) -> std::result::Result<(M, M, F), E> {
    for b in 0..blocks {
        put(&large, LARGE, b, 1)?;
    }
    drop(large);
    let (mix_map, anon, mix_file) = mix()?;
    for pass in 1..=MIX_PASSES {
        let mut j = 0u64;
        for i in 0..anon_blocks {
            put(&anon, ANON, i, pass)?;
            while j < mix_blocks && j * anon_blocks < (i + 1) * mix_blocks {
                put(&mix_map, MIX_FILE, j, pass)?;
                j += 1;
            }
        }
    }
    Ok((mix_map, anon, mix_file))
}

/// Read back [`VERIFY_SAMPLES`] pages of every region, on either column:
/// the last pass's stamp in each page's first word, the pattern in its
/// last. `anon_word(page, offset)` reads the anonymous region of
/// `anon_pages`; `files` are (region, file, pages, pass).
pub(super) fn verify_regions(
    pattern: &[u8],
    ps: u64,
    (anon_pages, anon_word): (u64, &dyn Fn(u64, u64) -> Result<u64>),
    files: &[(u64, &dyn FileIo, u64, u64)],
) -> Result<()> {
    let tail = |page: u64| pattern_tail(pattern, ps, page);
    let check = |what: &str, page: u64, first: u64, last: u64, want: u64| {
        if first != want || last != tail(page) {
            return Err(Error::Check(format!(
                "mmap-strm {what} page {page}: read {first:#x}/{last:#x}, wrote {want:#x}/{:#x}",
                tail(page)
            )));
        }
        Ok(())
    };
    for page in samples(anon_pages) {
        check("anonymous", page, anon_word(page, 0)?, anon_word(page, ps - 8)?, stamp(ANON, page, MIX_PASSES))?;
    }
    for &(region, f, pages, pass) in files {
        let mut word = [0u8; 8];
        for page in samples(pages) {
            f.read_at(&mut word, page * ps)?;
            let first = u64::from_ne_bytes(word);
            f.read_at(&mut word, page * ps + ps - 8)?;
            let what = format!("file region {region}");
            check(&what, page, first, u64::from_ne_bytes(word), stamp(region, page, pass))?;
        }
    }
    Ok(())
}

pub(super) fn samples(pages: u64) -> impl Iterator<Item = u64> {
    let n = VERIFY_SAMPLES.min(pages);
    (0..n).map(move |k| if k + 1 == n { pages - 1 } else { k * pages / n })
}

impl Strm {
    /// Read back [`VERIFY_SAMPLES`] pages of every region: the stamp of
    /// the last pass in the first word and the pattern in the last.
    pub(super) fn verify(&self, pattern: &[u8]) -> Result<()> {
        let ps = self.anon.len() / self.anon.nr_pages().max(1);
        let word = |page, off: u64| Ok(self.anon.load_u64(page, off as usize)?);
        let files = self.files.iter().map(|(r, f, pass)| Ok((*r, f as &dyn FileIo, f.len()? / ps, *pass)));
        verify_regions(pattern, ps, (self.anon.nr_pages(), &word), &files.collect::<Result<Vec<_>>>()?)
    }

    /// Close the files (the anonymous region goes with `self`, its frames
    /// and swap slots freed).
    pub(super) fn close(self) -> Result<()> {
        for (_, f, _) in self.files {
            f.close()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_differ_and_samples_cover_the_region() {
        assert_ne!(stamp(ANON, 5, 1), stamp(ANON, 5, 2));
        assert_ne!(stamp(ANON, 5, 1), stamp(MIX_FILE, 5, 1));
        assert_ne!(stamp(ANON, 0, 1), 0);
        let s: Vec<u64> = samples(1000).collect();
        assert_eq!((s.len(), s[0], s[s.len() - 1]), (64, 0, 999));
        assert_eq!(samples(3).collect::<Vec<_>>(), [0, 1, 2]);
    }

    // Goal: the workload swaps at a tiny size, its data reads back right,
    // and a damaged page fails the check.
    #[test]
    fn swaps_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PageCache::new(Config::with_memory(8 * MIB)).unwrap();
        let pat = pattern(BLOCK as usize);
        let swap = swapon(&cache, dir.path(), 8).unwrap();
        let (_, paths, strm) = run(&cache, dir.path(), 12, 4, 8, &pat).unwrap();
        assert!(cache.vmstat().get(Item::pswpout) > 0);
        strm.verify(&pat).unwrap();
        // Page 32 is sampled (64 of 2048 pages: every 32nd).
        strm.anon.write(cache.page_size() as u64 * 32, &[0u8; 8]).unwrap();
        assert!(matches!(strm.verify(&pat), Err(Error::Check(_))));
        strm.close().unwrap();
        for p in &paths {
            cache.unlink(p).unwrap();
        }
        drop(cache);
        std::fs::remove_file(swap).unwrap();
    }
}

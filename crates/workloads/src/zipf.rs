//! Zipf-distributed keys, scrambled over the key space.
//!
//! [`rand_distr::Zipf`] gives ranks: rank 1 is the most popular, rank `n`
//! the least. Used as page indices directly, the hot pages would all sit at
//! the start of the file, next to each other. [`ZipfKeys`] maps rank to key
//! through a fixed random permutation of `[0, n)` (a seeded Fisher-Yates
//! shuffle), so the hot keys are spread over the whole file while the
//! distribution of popularity is unchanged. Everything is seeded: the same
//! `(n, s, seeds)` always gives the same keys with this crate's `rand`.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// A Zipf(s) distribution over `[0, n)` with ranks scrambled to keys.
#[derive(Clone, Debug)]
pub struct ZipfKeys {
    n: u64,
    s: f64,
    dist: Zipf<f64>,
    /// `perm[rank]` is the key of the `rank`-th most popular item (0-based).
    perm: Vec<u32>,
}

impl ZipfKeys {
    /// Keys over `[0, n)` with exponent `s` (0 is uniform; 0.99 is the YCSB
    /// default), the rank-to-key permutation drawn from `perm_seed`.
    /// `n` must be from 1 to 2^32.
    pub fn new(n: u64, s: f64, perm_seed: u64) -> Result<ZipfKeys, String> {
        if n == 0 || n > 1 << 32 {
            return Err(format!("zipf: the key space must have 1 to 2^32 keys, not {n}"));
        }
        let dist = Zipf::new(n, s).map_err(|e| format!("zipf(n={n}, s={s}): {e}"))?;
        let mut perm: Vec<u32> = (0..n).map(|k| k as u32).collect();
        perm.shuffle(&mut StdRng::seed_from_u64(perm_seed));
        Ok(ZipfKeys { n, s, dist, perm })
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    pub fn s(&self) -> f64 {
        self.s
    }

    /// The key of the item of popularity rank `rank` (0 is the hottest).
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        u64::from(self.perm[rank.min(self.n - 1) as usize])
    }

    pub fn sample_rank<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        // Zipf yields an integral float in [1, n].
        let r = self.dist.sample(rng) as u64;
        r.clamp(1, self.n) - 1
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.key_of_rank(self.sample_rank(rng))
    }

    pub fn generate(&self, count: usize, seed: u64) -> Vec<u64> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count).map(|_| self.sample(&mut rng)).collect()
    }
}

/// `count` Zipf(`s`) keys over `[0, n)`, scrambled; the permutation and the
/// draws are both derived from `seed`.
pub fn zipf_keys(n: u64, s: f64, count: usize, seed: u64) -> Result<Vec<u64>, String> {
    let keys = ZipfKeys::new(n, s, seed)?;
    Ok(keys.generate(count, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1)))
}

/// `count` page-aligned byte offsets drawn uniformly from a file of
/// `pages` pages of `page_size` bytes, seeded.
pub fn uniform_page_offsets(pages: u64, page_size: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| rng.gen_range(0..pages) * page_size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_in_range() {
        let a = zipf_keys(1000, 0.99, 10_000, 7).unwrap();
        let b = zipf_keys(1000, 0.99, 10_000, 7).unwrap();
        let c = zipf_keys(1000, 0.99, 10_000, 8).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|&k| k < 1000));
        let offs = uniform_page_offsets(16, 4096, 1000, 1);
        assert!(offs.iter().all(|&o| o % 4096 == 0 && o < 16 * 4096));
        assert_eq!(offs, uniform_page_offsets(16, 4096, 1000, 1));
    }

    #[test]
    fn permutation_is_a_bijection() {
        let z = ZipfKeys::new(10_000, 0.99, 3).unwrap();
        let mut seen = vec![false; 10_000];
        for r in 0..10_000 {
            let k = z.key_of_rank(r) as usize;
            assert!(!seen[k]);
            seen[k] = true;
        }
    }

    #[test]
    fn skewed_and_scrambled() {
        let n = 1 << 16;
        let z = ZipfKeys::new(n, 0.99, 11).unwrap();
        let draws = 200_000;
        let keys = z.generate(draws, 12);
        let mut counts = vec![0u32; n as usize];
        for &k in &keys {
            counts[k as usize] += 1;
        }
        // The hottest key gets about 1 / H(n, s) of the draws.
        let h: f64 = (1..=n).map(|k| (k as f64).powf(-0.99)).sum();
        let expect = draws as f64 / h;
        let hottest = counts[z.key_of_rank(0) as usize] as f64;
        assert!((hottest - expect).abs() < 0.1 * expect, "hottest {hottest}, expected {expect}");
        assert!(counts[z.key_of_rank(0) as usize] > counts[z.key_of_rank(100) as usize]);
        // Scrambled: the 100 hottest keys are not clustered at low indices.
        let hot: Vec<u64> = (0..100).map(|r| z.key_of_rank(r)).collect();
        let low = hot.iter().filter(|&&k| k < n / 4).count();
        assert!((10..=45).contains(&low), "{low} of the 100 hottest keys are in the first quarter");
        // Zero exponent is uniform; bad parameters are refused.
        assert!(ZipfKeys::new(10, 0.0, 1).is_ok());
        assert!(ZipfKeys::new(0, 0.99, 1).is_err());
        assert!(ZipfKeys::new(10, -1.0, 1).is_err());
    }
}

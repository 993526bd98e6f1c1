//! DistributedSampler semantics: every epoch is a permutation of the data set
//! seeded by `seed + epoch`, padded (by wrapping around) to a multiple of the
//! world size and dealt out round-robin, so every rank gets the same number of
//! samples and every sample is seen once per epoch (the few padding samples,
//! fewer than the world size, twice when the size does not divide evenly).
//! The permutation is ours, not torch's, so it is identical on every rank and
//! every platform.

/// SplitMix64: a small, well-mixed, portable generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (bound > 0), without modulo bias.
    fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let x = self.next();
            if x < zone {
                return x % bound;
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct DistributedSampler {
    pub num_samples: i64,
    pub world_size: i64,
    pub rank: i64,
    pub seed: u64,
    pub batch_size: i64,
}

impl DistributedSampler {
    /// Samples each rank sees per epoch.
    pub fn per_rank(&self) -> i64 {
        (self.num_samples + self.world_size - 1) / self.world_size
    }

    /// Optimizer steps per epoch (the last batch may be short; it is the same
    /// length on every rank).
    pub fn steps_per_epoch(&self) -> i64 {
        (self.per_rank() + self.batch_size - 1) / self.batch_size
    }

    /// This rank's indices for `epoch`, in order.
    pub fn epoch_indices(&self, epoch: i64) -> Vec<i64> {
        let n = self.num_samples as usize;
        let mut perm: Vec<i64> = (0..self.num_samples).collect();
        let mut rng = SplitMix64(self.seed.wrapping_add(epoch as u64));
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        let total = (self.per_rank() * self.world_size) as usize;
        let padded = (0..total).map(|i| perm[i % n]);
        padded
            .skip(self.rank as usize)
            .step_by(self.world_size as usize)
            .collect()
    }

    /// Where global step `step` (0-based) reads from: (epoch, batch within epoch).
    pub fn position(&self, step: i64) -> (i64, i64) {
        let spe = self.steps_per_epoch();
        (step / spe, step % spe)
    }

    /// The slice of `epoch_indices` that batch `batch` uses.
    pub fn batch_range(&self, batch: i64) -> std::ops::Range<usize> {
        let start = (batch * self.batch_size) as usize;
        let end = ((batch + 1) * self.batch_size).min(self.per_rank()) as usize;
        start..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(n: i64, world: i64, rank: i64, batch: i64) -> DistributedSampler {
        DistributedSampler {
            num_samples: n,
            world_size: world,
            rank,
            seed: 7,
            batch_size: batch,
        }
    }

    #[test]
    fn every_index_exactly_once_per_epoch_across_ranks() {
        for world in [1, 2, 3, 4] {
            let n = 120;
            let mut seen = vec![0; n as usize];
            let mut steps = vec![];
            for rank in 0..world {
                let s = sampler(n, world, rank, 16);
                steps.push(s.steps_per_epoch());
                let idx = s.epoch_indices(3);
                // walk the epoch batch by batch, as training does
                for b in 0..s.steps_per_epoch() {
                    for &i in &idx[s.batch_range(b)] {
                        seen[i as usize] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "world {world}: {seen:?}");
            assert!(
                steps.windows(2).all(|w| w[0] == w[1]),
                "equal steps per rank"
            );
        }
    }

    #[test]
    fn uneven_sizes_pad_with_fewer_than_world_size_repeats() {
        let (n, world) = (10, 4);
        let mut seen = vec![0; n as usize];
        for rank in 0..world {
            for i in sampler(n, world, rank, 2).epoch_indices(0) {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c >= 1));
        assert_eq!(seen.iter().sum::<i32>(), 12);
    }

    #[test]
    fn epochs_shuffle_differently_and_deterministically() {
        let s = sampler(1000, 2, 1, 10);
        assert_eq!(s.epoch_indices(1), s.epoch_indices(1));
        assert_ne!(s.epoch_indices(1), s.epoch_indices(2));
        assert_eq!(s.position(250), (5, 0));
    }

    #[test]
    fn one_rank_at_2b_covers_what_two_ranks_at_b_cover() {
        let one = sampler(64, 1, 0, 8);
        let (r0, r1) = (sampler(64, 2, 0, 4), sampler(64, 2, 1, 4));
        let mut a: Vec<i64> = one.epoch_indices(0)[one.batch_range(2)].to_vec();
        let mut b: Vec<i64> = r0.epoch_indices(0)[r0.batch_range(2)].to_vec();
        b.extend_from_slice(&r1.epoch_indices(0)[r1.batch_range(2)]);
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}

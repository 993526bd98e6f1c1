//! The deterministic synthetic source, generated as it is read: sample `i`
//! is a sparse combination of `num_features` random unit-norm ground-truth
//! directions (each active with probability `feature_probability`, with a
//! magnitude in [0.5, 2.5)) plus Gaussian noise, drawn from a generator
//! seeded by (seed, i) alone. Any `num_samples` works; only the feature
//! matrix (`num_features x d_in` f32) is held.

use crate::data::sampler::{mix, SplitMix64};
use cohort_spec::config::SyntheticData;

pub struct Synthetic {
    features: Vec<f32>,
    d_in: usize,
    num_features: u64,
    probability: f64,
    noise_std: f32,
    key: u64,
}

/// Two independent standard normals (Box-Muller).
fn normals(rng: &mut SplitMix64) -> (f64, f64) {
    let u = 1.0 - rng.unit();
    let v = rng.unit();
    let r = (-2.0 * u.ln()).sqrt();
    let t = std::f64::consts::TAU * v;
    (r * t.cos(), r * t.sin())
}

impl Synthetic {
    pub fn new(cfg: &SyntheticData, d_in: i64, seed: u64) -> Self {
        let d_in = d_in as usize;
        let key = mix(seed ^ 0x5EED_DA7A);
        let mut rng = SplitMix64(key);
        let mut features = vec![0f32; cfg.num_features as usize * d_in];
        for row in features.chunks_exact_mut(d_in) {
            for pair in row.chunks_mut(2) {
                let (a, b) = normals(&mut rng);
                pair[0] = a as f32;
                if let Some(x) = pair.get_mut(1) {
                    *x = b as f32;
                }
            }
            let norm = row
                .iter()
                .map(|v| v * v)
                .sum::<f32>()
                .sqrt()
                .max(f32::MIN_POSITIVE);
            row.iter_mut().for_each(|v| *v /= norm);
        }
        Self {
            features,
            d_in,
            num_features: cfg.num_features as u64,
            probability: cfg.feature_probability,
            noise_std: cfg.noise_std as f32,
            key,
        }
    }

    /// Write sample `id` into `out` (`d_in` values).
    pub fn sample(&self, id: u64, out: &mut [f32]) {
        let mut rng = SplitMix64(mix(self.key ^ mix(id ^ 0xA5A5_0000_0000_0001)));
        for pair in out.chunks_mut(2) {
            let (a, b) = normals(&mut rng);
            pair[0] = a as f32 * self.noise_std;
            if let Some(x) = pair.get_mut(1) {
                *x = b as f32 * self.noise_std;
            }
        }
        // Active features by geometric skips: O(active), not O(num_features).
        let log_q = (1.0 - self.probability).ln();
        let mut j = 0u64;
        loop {
            if self.probability < 1.0 {
                let skip = ((1.0 - rng.unit()).ln() / log_q).floor();
                if !skip.is_finite() || skip >= (self.num_features - j) as f64 {
                    break;
                }
                j += skip as u64;
            } else if j >= self.num_features {
                break;
            }
            let magnitude = (rng.unit() * 2.0 + 0.5) as f32;
            let f = &self.features[j as usize * self.d_in..(j as usize + 1) * self.d_in];
            for (o, v) in out.iter_mut().zip(f) {
                *o += magnitude * v;
            }
            j += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(p: f64) -> SyntheticData {
        SyntheticData {
            num_samples: 1 << 40,
            num_features: 64,
            feature_probability: p,
            noise_std: 0.0,
        }
    }

    #[test]
    fn samples_depend_on_seed_and_index_only() {
        let s = Synthetic::new(&cfg(0.1), 16, 3);
        let (mut a, mut b) = (vec![0f32; 16], vec![0f32; 16]);
        s.sample(1 << 39, &mut a);
        Synthetic::new(&cfg(0.1), 16, 3).sample(1 << 39, &mut b);
        assert_eq!(a, b);
        s.sample(5, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn feature_probability_sets_how_many_are_active() {
        // Without noise, a sample's squared norm grows with its active features;
        // compare the zero fraction at two probabilities.
        let zeros = |p: f64| {
            let s = Synthetic::new(&cfg(p), 8, 1);
            let mut out = vec![0f32; 8];
            (0..2000)
                .filter(|&i| {
                    s.sample(i, &mut out);
                    out.iter().all(|v| *v == 0.0)
                })
                .count()
        };
        // P(no feature active) = (1 - p)^64: 0.53 at p = 0.01, 0.001 at p = 0.1.
        let (rare, common) = (zeros(0.01), zeros(0.1));
        assert!((900..1200).contains(&rare), "{rare}");
        assert!(common < 20, "{common}");
        assert_eq!(zeros(1.0), 0);
    }
}

//! What a user judges an SAE by, summed over a batch (or the validation
//! set) and then over all ranks with one small all-reduce: squared error,
//! the data's spread around its mean, non-zero latents, |z|, which latents
//! fired. Sums in f64, so large sets add up exactly enough.

use crate::model::Forward;
use tch::{Kind, Tensor};

/// The scalars before the per-dimension sums.
const SCALARS: i64 = 7;

/// The sums, on the device until reduced.
pub struct Sums {
    /// [sse, sum x^2, samples, non-zero latents, sum |z|, the two digest
    /// parts of the sample ids] then sum x [d_in], then firings per latent
    /// [d_sae] (when kept).
    scalars: Tensor,
    sum_x: Tensor,
    fired: Option<Tensor>,
    d_in: i64,
    d_sae: i64,
}

/// The sums turned into metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    pub samples: i64,
    /// Mean over elements of (x_hat - x)^2.
    pub mse: f64,
    /// Mean over elements of |z|.
    pub l1: f64,
    /// Mean non-zero latents per sample.
    pub l0: f64,
    /// 1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2.
    pub explained_variance: f64,
    /// Latents that fired on no sample (when firings are kept).
    pub dead_fraction: f64,
    /// The digest parts of the samples' ids ([`crate::data::digest`]).
    pub ids: [f64; 2],
}

impl Sums {
    /// `fired`: also keep which latents fired.
    pub fn new(d_in: i64, d_sae: i64, device: tch::Device, fired: bool) -> Self {
        Self {
            scalars: Tensor::zeros([SCALARS], (Kind::Double, device)),
            sum_x: Tensor::zeros([d_in], (Kind::Double, device)),
            fired: fired.then(|| Tensor::zeros([d_sae], (Kind::Double, device))),
            d_in,
            d_sae,
        }
    }

    /// Add one batch `x`, its forward pass and, per latent, how many of its
    /// samples the latent fired on (`z.count_nonzero(0)`; z >= 0).
    pub fn add(&mut self, x: &Tensor, f: &Forward, fired_counts: &Tensor) {
        tch::no_grad(|| {
            let x = x.to_kind(Kind::Double);
            let rows = x.size()[0] as f64;
            let x_hat = f.x_hat.detach().to_kind(Kind::Double);
            // From the forward pass's own mean: no [B, d_sae] temporary.
            let abs_z = f.l1.detach().to_kind(Kind::Double) * (rows * self.d_sae as f64);
            let batch = Tensor::stack(
                &[
                    (x_hat - &x).square().sum(Kind::Double),
                    x.square().sum(Kind::Double),
                    Tensor::full([], rows, (Kind::Double, x.device())),
                    fired_counts.sum(Kind::Double),
                    abs_z,
                    Tensor::zeros([], (Kind::Double, x.device())),
                    Tensor::zeros([], (Kind::Double, x.device())),
                ],
                0,
            );
            self.scalars += batch;
            self.sum_x += x.sum_dim_intlist([0i64].as_slice(), false, Kind::Double);
            if let Some(fired) = &mut self.fired {
                *fired += fired_counts;
            }
        });
    }

    /// Adds a micro-batch's digest parts of its sample ids.
    pub fn add_ids(&mut self, [lo, hi]: [f64; 2]) {
        let parts = Tensor::from_slice(&[0.0, 0.0, 0.0, 0.0, 0.0, lo, hi]);
        self.scalars += parts.to_device(self.scalars.device());
    }

    /// One flat tensor to all-reduce, and back.
    pub fn flat(&self) -> Tensor {
        let mut parts = vec![self.scalars.shallow_clone(), self.sum_x.shallow_clone()];
        parts.extend(self.fired.iter().map(Tensor::shallow_clone));
        Tensor::cat(&parts, 0)
    }

    /// The metrics of (reduced) sums as [`Sums::flat`] laid them out.
    pub fn metrics(&self, flat: &Tensor) -> Metrics {
        let v = Vec::<f64>::try_from(flat.to_device(tch::Device::Cpu)).unwrap_or_default();
        let (d_in, d_sae) = (self.d_in as usize, self.d_sae as usize);
        let s = SCALARS as usize;
        let [sse, sumsq, n, nonzero, abs_z, ids_lo, ids_hi] = v[..s] else {
            return Metrics::default();
        };
        let sum_x = &v[s..s + d_in];
        let centred = sumsq - sum_x.iter().map(|s| s * s).sum::<f64>() / n.max(1.0);
        let dead_fraction = match v.get(s + d_in..s + d_in + d_sae) {
            Some(fired) if self.fired.is_some() => {
                fired.iter().filter(|c| **c <= 0.0).count() as f64 / d_sae as f64
            }
            _ => 0.0,
        };
        Metrics {
            samples: n as i64,
            mse: sse / (n * d_in as f64).max(1.0),
            l1: abs_z / (n * d_sae as f64).max(1.0),
            l0: nonzero / n.max(1.0),
            explained_variance: if centred > 0.0 {
                1.0 - sse / centred
            } else {
                f64::NAN
            },
            dead_fraction,
            ids: [ids_lo, ids_hi],
        }
    }
}

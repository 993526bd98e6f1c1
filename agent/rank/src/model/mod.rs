//! The sparse autoencoder (DESIGN §6): f32 master parameters in a fixed
//! order, so every rank has the same layout by construction; the forward
//! pass in the compute dtype (f32, bf16 or f16) through casts autograd sees,
//! so gradients arrive in f32.
//!
//! pre = x' W_enc^T + b_enc, with x' = x or x - b_dec (`apply_b_dec_to_input`);
//! z = ReLU(pre) (`relu`) or its k largest per sample (`topk`);
//! x_hat = z W_dec^T + b_dec.

mod adam;
mod schedule;

pub use adam::Adam;
pub use schedule::Schedule;

use cohort_spec::config::{DecoderNorm, Dtype};
use cohort_spec::TrainingConfig;
use tch::{Device, Kind, Tensor};

/// Parameter names, in the one order used for collectives and checkpoints.
pub const PARAM_NAMES: [&str; 4] = ["w_enc", "b_enc", "w_dec", "b_dec"];
/// Index of `w_dec` and `b_dec` in [`Sae::params`].
pub const W_DEC: usize = 2;
pub const B_DEC: usize = 3;

pub fn kind_of(dtype: Dtype) -> Kind {
    match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::Bf16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
    }
}

/// What the forward pass needs of the config.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub d_in: i64,
    pub d_sae: i64,
    pub topk: Option<i64>,
    pub aux_k: i64,
    pub apply_b_dec_to_input: bool,
    pub unit_decoder: bool,
}

impl Shape {
    pub fn of(cfg: &TrainingConfig) -> Self {
        Self {
            d_in: cfg.model.d_in,
            d_sae: cfg.d_sae(),
            topk: cfg.topk(),
            aux_k: cfg.aux_k(),
            apply_b_dec_to_input: cfg.model.apply_b_dec_to_input,
            unit_decoder: cfg.model.decoder_norm == DecoderNorm::Unit,
        }
    }
}

pub struct Sae {
    /// w_enc [d_sae, d_in], b_enc [d_sae], w_dec [d_in, d_sae], b_dec [d_in]; f32.
    pub params: Vec<Tensor>,
    pub shape: Shape,
}

/// One forward pass: the reconstruction, the codes and the loss terms
/// (f32 scalars, kept on the device until read).
pub struct Forward {
    pub x_hat: Tensor,
    /// The sparse codes [B, d_sae] in the compute dtype.
    pub z: Tensor,
    /// Mean over elements of (x_hat - x)^2.
    pub mse: Tensor,
    /// Mean over elements of |z|.
    pub l1: Tensor,
    /// The TopK auxiliary loss on dead latents (0 when off).
    pub aux: Tensor,
}

/// Dead latents, for the TopK auxiliary loss: a bool mask [d_sae] and how many.
pub struct DeadMask<'a> {
    pub mask: &'a Tensor,
    pub count: i64,
}

impl Sae {
    /// nn.Linear-style init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from `seed`;
    /// with a unit decoder its columns are normalised and the encoder starts
    /// as their transpose with a zero bias.
    pub fn new(shape: Shape, device: Device, seed: u64) -> Self {
        tch::manual_seed(seed as i64);
        let (d_in, d_sae) = (shape.d_in, shape.d_sae);
        let uniform = |dims: &[i64], fan_in: i64| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            Tensor::rand(dims, (Kind::Float, Device::Cpu)) * (2.0 * bound) - bound
        };
        let params = vec![
            uniform(&[d_sae, d_in], d_in),
            uniform(&[d_sae], d_in),
            uniform(&[d_in, d_sae], d_sae),
            uniform(&[d_in], d_sae),
        ];
        let mut sae = Self {
            params: params
                .into_iter()
                .map(|p| p.to_device(device).set_requires_grad(true))
                .collect(),
            shape,
        };
        if shape.unit_decoder {
            sae.normalise_decoder();
            // As SAELens and OpenAI start them: the encoder as the decoder's
            // transpose, no encoder bias.
            tch::no_grad(|| {
                let tied = sae.params[W_DEC].tr().contiguous();
                sae.params[0].copy_(&tied);
                let _ = sae.params[1].zero_();
            });
        }
        sae
    }

    /// A parameter in the compute dtype (a cast autograd follows back to f32).
    fn param(&self, i: usize, kind: Kind) -> Tensor {
        if kind == Kind::Float {
            self.params[i].shallow_clone()
        } else {
            self.params[i].to_kind(kind)
        }
    }

    /// The forward pass of `x` (already in the compute dtype `kind`).
    /// `aux_coefficient` > 0 with dead latents adds the TopK auxiliary loss.
    pub fn forward(&self, x: &Tensor, kind: Kind, dead: Option<DeadMask<'_>>) -> Forward {
        let (w_enc, b_enc) = (self.param(0, kind), self.param(1, kind));
        let (w_dec, b_dec) = (self.param(W_DEC, kind), self.param(B_DEC, kind));
        let input = if self.shape.apply_b_dec_to_input {
            x - &b_dec
        } else {
            x.shallow_clone()
        };
        let pre = input.linear(&w_enc, Some(&b_enc));
        let z = match self.shape.topk {
            Some(k) => keep_largest(&pre.relu(), k),
            None => pre.relu(),
        };
        let x_hat = z.linear(&w_dec, Some(&b_dec));
        let x32 = x.to_kind(Kind::Float);
        let residual = x_hat.to_kind(Kind::Float) - &x32;
        let mse = residual.square().mean(Kind::Float);
        let l1 = z.abs().mean(Kind::Float);
        let aux = match (self.shape.topk, dead) {
            (Some(_), Some(dead)) if dead.count > 0 => {
                self.aux_loss(&pre, &residual.detach(), &w_dec, dead)
            }
            _ => Tensor::zeros([], (Kind::Float, x.device())),
        };
        Forward {
            x_hat,
            z,
            mse,
            l1,
            aux,
        }
    }

    /// OpenAI's TopK auxiliary loss: the `aux_k` largest pre-activations of
    /// dead latents reconstruct the residual x - x_hat through the decoder
    /// (no bias); scaled by min(dead / aux_k, 1).
    fn aux_loss(
        &self,
        pre: &Tensor,
        residual: &Tensor,
        w_dec: &Tensor,
        dead: DeadMask<'_>,
    ) -> Tensor {
        let k = self.shape.aux_k.min(dead.count);
        let only_dead = pre.masked_fill(&dead.mask.logical_not(), f64::NEG_INFINITY);
        let z_aux = keep_largest(&only_dead, k).relu();
        let e_hat = z_aux.linear(w_dec, None::<&Tensor>).to_kind(Kind::Float);
        // the residual is x_hat - x: reconstruct its negation
        let scale = (dead.count as f64 / self.shape.aux_k as f64).min(1.0);
        (e_hat + residual).square().mean(Kind::Float) * scale
    }

    /// Remove from the decoder's gradient the component parallel to each
    /// (unit) column, so the update does not fight the renormalisation.
    /// In place: `grad` is a view of the reduce buffer.
    pub fn project_decoder_grad(&self, grad: &mut Tensor) {
        let w = self.params[W_DEC].detach();
        let against = (&*grad * &w)
            .sum_dim_intlist([0i64].as_slice(), true, Kind::Float)
            .neg();
        let _ = grad.addcmul_(&w, &against);
    }

    /// Scale every decoder column to unit L2 norm.
    pub fn normalise_decoder(&mut self) {
        tch::no_grad(|| {
            let w = &mut self.params[W_DEC];
            let norms = w
                .norm_scalaropt_dim(2, [0i64].as_slice(), true)
                .clamp_min(1e-12);
            let _ = w.g_div_(&norms);
        });
    }

    /// Exact fingerprint of the parameters: FNV-1a over their bytes as f32.
    pub fn checksum(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for p in &self.params {
            let flat = p
                .detach()
                .to_kind(Kind::Float)
                .to_device(Device::Cpu)
                .flatten(0, -1);
            let values = Vec::<f32>::try_from(&flat).expect("float tensor to vec");
            for v in values {
                for b in v.to_bits().to_le_bytes() {
                    hash ^= b as u64;
                    hash = hash.wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        format!("{hash:016x}")
    }
}

/// `t` [B, n] with all but the `k` largest entries of each row set to 0.
fn keep_largest(t: &Tensor, k: i64) -> Tensor {
    let (values, indices) = t.topk(k, -1, true, false);
    t.zeros_like().scatter(-1, &indices, &values)
}

#[cfg(test)]
mod tests;

//! The sparse autoencoder and its Adam optimizer, as plain tensors in a fixed
//! order so every rank has the same parameter layout by construction.

use cohort_spec::config::{Dtype, OptimConfig};
use tch::{Device, Kind, Tensor};

/// Parameter names, in the one order used for collectives and checkpoints.
pub const PARAM_NAMES: [&str; 4] = ["w_enc", "b_enc", "w_dec", "b_dec"];

pub fn kind_of(dtype: Dtype) -> Kind {
    match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::Bf16 => Kind::BFloat16,
    }
}

/// Encoder Linear(d_in, d_sae) + ReLU, decoder Linear(d_sae, d_in).
pub struct Sae {
    /// w_enc [d_sae, d_in], b_enc [d_sae], w_dec [d_in, d_sae], b_dec [d_in].
    pub params: Vec<Tensor>,
    pub l1_coefficient: f64,
}

/// One step's losses, kept on the device until read, and the sparse codes.
pub struct Losses {
    pub total: Tensor,
    pub mse: Tensor,
    pub l1: Tensor,
    pub z: Tensor,
}

impl Sae {
    /// nn.Linear-style init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from `seed`.
    pub fn new(d_in: i64, d_sae: i64, l1: f64, kind: Kind, device: Device, seed: u64) -> Self {
        tch::manual_seed(seed as i64);
        let uniform = |shape: &[i64], fan_in: i64| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            (Tensor::rand(shape, (Kind::Float, Device::Cpu)) * (2.0 * bound) - bound)
                .to_kind(kind)
                .to_device(device)
                .set_requires_grad(true)
        };
        let params = vec![
            uniform(&[d_sae, d_in], d_in),
            uniform(&[d_sae], d_in),
            uniform(&[d_in, d_sae], d_sae),
            uniform(&[d_in], d_sae),
        ];
        Self {
            params,
            l1_coefficient: l1,
        }
    }

    /// Sparse codes z = ReLU(x W_enc^T + b_enc).
    pub fn encode(&self, x: &Tensor) -> Tensor {
        x.linear(&self.params[0], Some(&self.params[1])).relu()
    }

    /// loss = MSE(x, x_hat) + l1_coefficient * mean |z|.
    pub fn losses(&self, x: &Tensor) -> Losses {
        let z = self.encode(x);
        let x_hat = z.linear(&self.params[2], Some(&self.params[3]));
        let mse = (x_hat - x).square().mean(Kind::Float);
        let l1 = z.abs().mean(Kind::Float);
        let total = &mse + &l1 * self.l1_coefficient;
        Losses { total, mse, l1, z }
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

/// Adam (Kingma & Ba) with bias correction, state kept as tensors so it can be
/// checkpointed and broadcast.
pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// Steps taken so far.
    pub step: i64,
}

impl Adam {
    pub fn new(cfg: &OptimConfig, params: &[Tensor]) -> Self {
        let zeros = || params.iter().map(|p| p.zeros_like().detach()).collect();
        Self {
            lr: cfg.learning_rate,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            m: zeros(),
            v: zeros(),
            step: 0,
        }
    }

    /// One update of every parameter from its (already averaged) gradient.
    pub fn step(&mut self, params: &mut [Tensor], grads: &[Tensor]) {
        self.step += 1;
        let t = self.step as f64;
        let bias1 = 1.0 - self.beta1.powf(t);
        let bias2_sqrt = (1.0 - self.beta2.powf(t)).sqrt();
        let step_size = self.lr / bias1;
        tch::no_grad(|| {
            for i in 0..params.len() {
                let g = grads[i].to_kind(params[i].kind());
                let _ = self.m[i].lerp_(&g, 1.0 - self.beta1);
                let _ = self.v[i].g_mul_scalar_(self.beta2);
                let _ = self.v[i].addcmul_(&(&g * (1.0 - self.beta2)), &g);
                let denom = (self.v[i].sqrt() / bias2_sqrt) + self.eps;
                let update = (&self.m[i] / denom) * step_size;
                let _ = params[i].g_sub_(&update);
            }
        });
    }
}

//! Adam (Kingma & Ba) with bias correction over f32 master parameters, its
//! state kept as f32 tensors so it can be checkpointed and broadcast. The
//! update is PyTorch's own fused kernel (`torch.optim.Adam(fused=True)`,
//! through `shim/optim_shim.cpp`): one pass over each parameter.

use crate::error::RankError;
use cohort_spec::config::OptimConfig;
use std::ffi::{c_char, c_void, CStr};
use tch::Tensor;

extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn cohort_fused_adam(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        n: usize,
        step: f64,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

pub struct Adam {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// Updates applied so far (skipped steps do not count).
    pub t: i64,
}

fn pointers(tensors: &mut [Tensor]) -> Vec<*mut c_void> {
    tensors.iter_mut().map(|t| t.as_mut_ptr().cast()).collect()
}

impl Adam {
    pub fn new(cfg: &OptimConfig, params: &[Tensor]) -> Self {
        let zeros = || params.iter().map(|p| p.zeros_like().detach()).collect();
        Self {
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            m: zeros(),
            v: zeros(),
            t: 0,
        }
    }

    /// One update of every parameter from its (averaged, f32) gradient at
    /// learning rate `lr`.
    pub fn step(
        &mut self,
        params: &mut [Tensor],
        grads: &mut [Tensor],
        lr: f64,
    ) -> Result<(), RankError> {
        self.t += 1;
        let (p, g) = (pointers(params), pointers(grads));
        let (m, v) = (pointers(&mut self.m), pointers(&mut self.v));
        let mut err = vec![0u8; 2048];
        let rc = unsafe {
            cohort_fused_adam(
                p.as_ptr(),
                g.as_ptr(),
                m.as_ptr(),
                v.as_ptr(),
                p.len(),
                self.t as f64,
                lr,
                self.beta1,
                self.beta2,
                self.eps,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let message = CStr::from_bytes_until_nul(&err)
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        Err(RankError::from_torch(format!("adam: {message}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn two_steps_follow_the_bias_corrected_update() {
        let cfg: OptimConfig = serde_json::from_str(r#"{"batch_size": 1, "steps": 1}"#).unwrap();
        let mut params = vec![Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true)];
        let mut adam = Adam::new(&cfg, &params);
        let (b1, b2, eps, lr) = (0.9f64, 0.999f64, 1e-8f64, 0.1f64);
        let grads = [[0.5f64, -1.0], [0.25, 4.0]];
        let (mut p, mut m, mut v) = ([1.0f64, -2.0], [0.0f64; 2], [0.0f64; 2]);
        for (t, g) in grads.iter().enumerate() {
            let mut g_t = vec![Tensor::from_slice(&g.map(|x| x as f32))];
            adam.step(&mut params, &mut g_t, lr).unwrap();
            let t = (t + 1) as f64;
            for i in 0..2 {
                m[i] = b1 * m[i] + (1.0 - b1) * g[i];
                v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
                let denom = (v[i].sqrt() / (1.0 - b2.powf(t)).sqrt()) + eps;
                p[i] -= lr / (1.0 - b1.powf(t)) * m[i] / denom;
            }
        }
        let got =
            Vec::<f64>::try_from(params[0].to_kind(Kind::Double).to_device(Device::Cpu)).unwrap();
        for i in 0..2 {
            assert!((got[i] - p[i]).abs() < 1e-6, "{got:?} vs {p:?}");
        }
        assert_eq!(adam.t, 2);
        assert_eq!(adam.m[0].kind(), Kind::Float);
    }
}

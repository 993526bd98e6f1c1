//! The device memory one rank of a training needs, itemised, from what
//! `cohort-rank` really allocates (agent/rank/src/{model,train,state}):
//!
//! - parameters: `w_enc [d_sae, d_in]`, `b_enc [d_sae]`, `w_dec [d_in, d_sae]`,
//!   `b_dec [d_in]`, always f32 (the master weights);
//! - optimizer: Adam's `m` and `v` in f32, one copy of the parameters each,
//!   and when each latent last fired (`[d_sae]` i64);
//! - data: the batch as it arrives on the device, in its stored dtype before
//!   the conversion to the compute dtype (counted as f32, the widest stored
//!   type but f64); data is streamed, so this is flat in the data set's size
//!   (the reader's prefetched batches wait in host memory, not on the device);
//! - activations (one micro-batch, forward and backward): the batch in the
//!   compute dtype (and its f32 copy for bf16/f16), the weights cast to the
//!   compute dtype (bf16/f16), four `[B, d_sae]` tensors in the compute dtype
//!   alive at the backward's peak (the pre-activation, the code `z` and the
//!   gradients flowing into them; TopK adds its scattered copy), and three
//!   `[B, d_in]` f32 ones (`x_hat` in f32, the residual, its gradient);
//! - gradients: autograd's f32 gradients (twice with gradient accumulation:
//!   the running sum and the new micro-batch's), and the all-reduce: flat f32
//!   buffers of every gradient, the step's three losses and the `[d_sae]`
//!   firing counts (one buffer with `flat`, two buckets with `overlap`),
//!   averaged in place and read as views (`per_param` reduces the gradients
//!   themselves, in place: only the extras);
//! - overhead: the CUDA context and cuBLAS workspaces, [`CUDA_CONTEXT_BYTES`],
//!   when the rank may run on a GPU (`runtime.device` auto or cuda).
//!
//! The activations and the all-reduce buffers are not all alive at once, so
//! the total adds only the peak of the two phases of a step to the resident
//! state (parameters, optimizer, data, overhead):
//! - `flat` / `per_param`: the backward pass makes autograd's f32 gradients
//!   while the graph's saved codes are alive; the graph is freed when it
//!   ends, before the gradients are flattened; only the code `z` outlives
//!   it: max(activations + P x 4, gradients + z).
//! - `overlap`: the graph is kept while the decoder's bucket is
//!   reduced and the encoder's gradients are computed (activations + half the
//!   gradients); at the end the buckets and their averaged copies are alive
//!   with `z` and its gradient `dz`: max(activations + gradients / 2,
//!   gradients + 2 z).
//!
//! Measured against real ranks in docs/operations.md ("Memory estimate").

use cohort_spec::config::{AllreduceMode, Device, Dtype};
use cohort_spec::TrainingConfig;

/// CUDA context, cuBLAS handles and workspaces of one process on one GPU.
/// About 500 MiB on recent drivers (H100, CUDA 12/13); counted only when the
/// rank may run on a GPU.
pub const CUDA_CONTEXT_BYTES: u64 = 500 * 1024 * 1024;

/// Losses appended to the flat all-reduce buffer (`[mse, l1, aux]`).
const REDUCED_LOSSES: u64 = 3;
const F32: u64 = 4;

/// One rank's memory, by component, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub parameter_count: u64,
    pub parameters: u64,
    /// Gradients plus the flat all-reduce buffer.
    pub gradients: u64,
    /// Adam's m and v, and the dead-latent record.
    pub optimizer: u64,
    /// Forward and backward tensors of one micro-batch at their peak.
    pub activations: u64,
    /// The data set held on the device.
    pub data: u64,
    pub overhead: u64,
    /// parameters + optimizer + data + overhead + the peak of a step's two
    /// phases (see the module documentation).
    pub total: u64,
}

/// What the estimate depends on, read from a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EstimateInput {
    pub d_in: u64,
    pub d_sae: u64,
    /// The compute dtype.
    pub dtype: Dtype,
    /// Samples per rank per micro-batch.
    pub batch_size: u64,
    /// Micro-batches per step (`optim.accumulation_steps`).
    pub accumulation_steps: u64,
    /// TopK keeps a scattered copy of the code.
    pub topk: bool,
    /// Bytes of the data on the device: one staged batch (f32).
    pub data_bytes: u64,
    /// Whether the rank may run on a GPU (adds [`CUDA_CONTEXT_BYTES`]).
    pub on_gpu: bool,
    pub allreduce: AllreduceMode,
}

impl EstimateInput {
    /// From a validated config; reads nothing but the config (the data is
    /// streamed, so its size does not matter).
    pub fn from_config(cfg: &TrainingConfig) -> Self {
        let d_in = cfg.model.d_in.max(0) as u64;
        let batch_size = cfg.optim.batch_size.max(0) as u64;
        let data_bytes = batch_size.saturating_mul(d_in).saturating_mul(F32);
        Self {
            d_in,
            d_sae: cfg.d_sae().max(0) as u64,
            dtype: cfg.model.dtype,
            batch_size,
            accumulation_steps: cfg.optim.accumulation_steps.max(1) as u64,
            topk: cfg.topk().is_some(),
            data_bytes,
            on_gpu: cfg.runtime.device != Device::Cpu,
            allreduce: cfg.runtime.allreduce,
        }
    }
}

/// The estimate for one rank. Saturates instead of overflowing.
pub fn estimate(input: &EstimateInput) -> MemoryEstimate {
    let EstimateInput {
        d_in,
        d_sae,
        batch_size: b,
        ..
    } = *input;
    let size = input.dtype.size_bytes();
    let low = input.dtype != Dtype::F32;
    let mul = |a: u64, c: u64| a.saturating_mul(c);

    let count = mul(mul(2, d_in), d_sae).saturating_add(d_in.saturating_add(d_sae));
    let parameters = mul(count, F32);
    // Adam's m and v, and when each latent last fired (i64).
    let optimizer = mul(2, parameters).saturating_add(mul(d_sae, 8));

    let extras = REDUCED_LOSSES.saturating_add(d_sae);
    let flat = mul(count.saturating_add(extras), F32);
    // The flat buffer (or the buckets), averaged in place; per-parameter
    // collectives reduce the gradients themselves in place.
    let reduce_buffers = match input.allreduce {
        AllreduceMode::Flat | AllreduceMode::Overlap => flat,
        AllreduceMode::PerParam => mul(extras, F32),
    };
    let accumulating = if input.accumulation_steps > 1 {
        parameters
    } else {
        0
    };
    let gradients = parameters
        .saturating_add(accumulating)
        .saturating_add(reduce_buffers);
    let overlap = input.allreduce == AllreduceMode::Overlap && input.accumulation_steps == 1;

    let batch = mul(b, d_in);
    let inputs = mul(batch, size).saturating_add(if low { mul(batch, F32) } else { 0 });
    let weight_casts = if low { mul(count, size) } else { 0 };
    let code = mul(mul(b, d_sae), size);
    let codes = mul(if input.topk { 5 } else { 4 }, code);
    let activations = inputs
        .saturating_add(weight_casts)
        .saturating_add(codes)
        .saturating_add(mul(mul(3, batch), F32));

    let overhead = if input.on_gpu { CUDA_CONTEXT_BYTES } else { 0 };
    let total = parameters
        .saturating_add(optimizer)
        .saturating_add(input.data_bytes)
        .saturating_add(overhead)
        .saturating_add(if overlap {
            activations
                .saturating_add(gradients / 2)
                .max(gradients.saturating_add(mul(2, code)))
        } else {
            activations
                .saturating_add(parameters)
                .max(gradients.saturating_add(code))
        });
    MemoryEstimate {
        parameter_count: count,
        parameters,
        gradients,
        optimizer,
        activations,
        data: input.data_bytes,
        overhead,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn input(d_in: u64, d_sae: u64, b: u64, n: u64) -> EstimateInput {
        EstimateInput {
            d_in,
            d_sae,
            dtype: Dtype::F32,
            batch_size: b,
            accumulation_steps: 1,
            topk: false,
            data_bytes: n * d_in * 4,
            on_gpu: false,
            allreduce: AllreduceMode::Flat,
        }
    }

    #[test]
    fn every_component_of_an_f32_rank() {
        // d_in 4, d_sae 8, batch 2, 10 samples: P = 2*4*8 + 4 + 8 = 76.
        let e = estimate(&input(4, 8, 2, 10));
        assert_eq!(e.parameter_count, 76);
        assert_eq!(e.parameters, 76 * 4);
        // Adam's m and v, and when each of the 8 latents last fired.
        assert_eq!(e.optimizer, 2 * 76 * 4 + 8 * 8);
        // grads + flat (P + 3 losses + 8 firing counts), all f32.
        assert_eq!(e.gradients, 76 * 4 + 87 * 4);
        // batch [2,4] f32 + 4 x [2,8] + 3 x [2,4].
        assert_eq!(e.activations, 8 * 4 + 4 * 16 * 4 + 3 * 8 * 4);
        assert_eq!(e.data, 10 * 4 * 4);
        assert_eq!(e.overhead, 0);
        // Flat: the all-reduce phase (grads + buffers + z) is the larger here.
        assert_eq!(
            e.total,
            e.parameters
                + e.optimizer
                + e.data
                + (e.gradients + 16 * 4).max(e.activations + e.parameters)
        );
    }

    #[test]
    fn overlap_keeps_the_graph_while_reducing() {
        let flat = estimate(&input(4, 8, 2, 10));
        let overlap = estimate(&EstimateInput {
            allreduce: AllreduceMode::Overlap,
            ..input(4, 8, 2, 10)
        });
        // The same tensors, in phases that overlap differently.
        assert_eq!(overlap.activations, flat.activations);
        assert_eq!(overlap.gradients, flat.gradients);
        let state = overlap.parameters + overlap.optimizer + overlap.data;
        let phase_a = overlap.activations + overlap.gradients / 2;
        let phase_b = overlap.gradients + 2 * 16 * 4;
        assert_eq!(overlap.total, state + phase_a.max(phase_b));
        // A big batch: the first phase (graph alive) is the peak.
        let big = estimate(&EstimateInput {
            allreduce: AllreduceMode::Overlap,
            ..input(256, 8192, 4096, 100)
        });
        assert_eq!(
            big.total,
            big.parameters + big.optimizer + big.data + big.activations + big.gradients / 2
        );
        let per_param = estimate(&EstimateInput {
            allreduce: AllreduceMode::PerParam,
            ..input(4, 8, 2, 10)
        });
        assert_eq!(per_param.gradients, 76 * 4 + 11 * 4);
        // Accumulation keeps a running sum of the gradients and never overlaps.
        let accumulating = estimate(&EstimateInput {
            allreduce: AllreduceMode::Overlap,
            accumulation_steps: 4,
            ..input(4, 8, 2, 10)
        });
        assert_eq!(accumulating.gradients, flat.gradients + 76 * 4);
        let state = accumulating.parameters + accumulating.optimizer + accumulating.data;
        assert_eq!(
            accumulating.total,
            state
                + (accumulating.activations + accumulating.parameters)
                    .max(accumulating.gradients + 16 * 4)
        );
    }

    #[test]
    fn low_precision_keeps_f32_state_and_halves_the_codes() {
        let f32 = estimate(&input(256, 2048, 64, 1000));
        for dtype in [Dtype::Bf16, Dtype::F16] {
            let low = estimate(&EstimateInput {
                dtype,
                ..input(256, 2048, 64, 1000)
            });
            // Master weights, Adam and gradients stay f32.
            assert_eq!(low.parameters, f32.parameters);
            assert_eq!(low.optimizer, f32.optimizer);
            assert_eq!(low.gradients, f32.gradients);
            assert_eq!(low.data, f32.data);
            let (p, batch, code) = (low.parameter_count, 64 * 256, 64 * 2048);
            // The batch in the compute dtype and f32, the cast weights,
            // four 2-byte codes, three f32 [B, d_in].
            assert_eq!(
                low.activations,
                batch * 2 + batch * 4 + p * 2 + 4 * code * 2 + 3 * batch * 4
            );
        }
        let topk = estimate(&EstimateInput {
            topk: true,
            ..input(256, 2048, 64, 1000)
        });
        assert_eq!(topk.activations, f32.activations + 64 * 2048 * 4);
    }

    #[test]
    fn the_larger_transient_counts_once() {
        // Huge batch: activations dominate; tiny batch: the all-reduce does.
        let acts = estimate(&input(256, 8192, 4096, 100));
        assert!(acts.activations > acts.gradients);
        // The backward pass: the graph and autograd's gradients.
        assert_eq!(
            acts.total,
            acts.parameters + acts.optimizer + acts.data + acts.activations + acts.parameters
        );
        let grads = estimate(&input(1024, 16384, 8, 100));
        assert!(grads.gradients > grads.activations);
        let z = 8 * 16384 * 4;
        assert_eq!(
            grads.total,
            grads.parameters + grads.optimizer + grads.data + grads.gradients + z
        );
    }

    #[test]
    fn a_gpu_rank_pays_for_its_context() {
        let cpu = estimate(&input(64, 512, 256, 1000));
        let gpu = estimate(&EstimateInput {
            on_gpu: true,
            ..input(64, 512, 256, 1000)
        });
        assert_eq!(gpu.overhead, CUDA_CONTEXT_BYTES);
        assert_eq!(gpu.total - cpu.total, 500 * MIB);
    }

    #[test]
    fn from_a_config() {
        let cfg: TrainingConfig = toml_config(
            r#"
            [model]
            d_in = 64
            expansion_factor = 8
            dtype = "bf16"
            [optim]
            batch_size = 256
            steps = 10
            [data.synthetic]
            num_samples = 1000
            [runtime]
            device = "cpu"
            "#,
        );
        let i = EstimateInput::from_config(&cfg);
        assert_eq!((i.d_in, i.d_sae, i.batch_size), (64, 512, 256));
        assert_eq!(i.dtype, Dtype::Bf16);
        assert_eq!(i.data_bytes, 256 * 64 * 4, "one staged batch");
        assert!(!i.on_gpu);
        assert_eq!(i.allreduce, AllreduceMode::Flat, "the default");
        assert_eq!(
            estimate(&i).parameter_count,
            cfg.parameter_count() as u64,
            "the same count cohort-rank reports"
        );
    }

    #[test]
    fn streamed_data_counts_one_batch_whatever_the_data_set() {
        let cfg = toml_config(
            r#"
            [model]
            d_in = 8
            [optim]
            batch_size = 4
            steps = 1
            [data.files]
            paths = ["s3://acts/huge/", "/nowhere/*.npy"]
            "#,
        );
        let i = EstimateInput::from_config(&cfg);
        assert_eq!(i.data_bytes, 4 * 8 * 4);
        assert!(i.on_gpu, "device auto may use a GPU");
    }

    #[test]
    fn absurd_sizes_saturate() {
        let e = estimate(&EstimateInput {
            data_bytes: u64::MAX,
            ..input(1 << 40, 1 << 40, 1 << 40, 0)
        });
        assert_eq!(e.total, u64::MAX);
    }

    fn toml_config(text: &str) -> TrainingConfig {
        TrainingConfig::from_toml(text).expect("valid config")
    }
}

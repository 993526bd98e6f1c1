//! The device memory one rank of a training needs, itemised, from what
//! `cohort-rank` really allocates (agent/rank/src/{model,train,data}.rs):
//!
//! - parameters: `w_enc [d_sae, d_in]`, `b_enc [d_sae]`, `w_dec [d_in, d_sae]`,
//!   `b_dec [d_in]` in the model dtype;
//! - optimizer: Adam's `m` and `v`, one copy of the parameters each;
//! - data: the batch as it arrives on the device, in its stored dtype before
//!   the conversion to the compute dtype (counted as f32, the widest stored
//!   type but f64); data is streamed, so this is flat in the data set's size
//!   (the reader's prefetched batches wait in host memory, not on the device);
//! - activations (one step, forward and backward): the gathered f32 batch
//!   `[B, d_in]` (plus its dtype copy for bf16), four `[B, d_sae]` tensors alive
//!   at the backward's peak (the saved code `z` and the gradients flowing into
//!   it: from the L1 term, from the decoder, their sum, the ReLU's) and three
//!   `[B, d_in]` ones (`x_hat`, `x_hat - x` saved for the square, its gradient);
//! - gradients: autograd's gradients in the model dtype (plus f32 copies for
//!   bf16), and the all-reduce: flat f32 buffers of every gradient and the
//!   step's two losses (one buffer with `flat`, two buckets with `overlap`)
//!   and their copies divided by the world size (`per_param`: only the
//!   divided copies);
//! - overhead: the CUDA context and cuBLAS workspaces, [`CUDA_CONTEXT_BYTES`],
//!   when the rank may run on a GPU (`runtime.device` auto or cuda).
//!
//! The activations and the all-reduce buffers are not all alive at once, so
//! the total adds only the peak of the two phases of a step to the resident
//! state (parameters, optimizer, data, overhead):
//! - `flat` / `per_param`: the graph is freed when the backward pass ends,
//!   before the gradients are flattened; only the code `z` (held by the
//!   step's losses) outlives it: max(activations, gradients + z).
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

/// Losses appended to the flat all-reduce buffer (`[mse, l1]`).
const REDUCED_LOSSES: u64 = 2;
const F32: u64 = 4;

/// One rank's memory, by component, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub parameter_count: u64,
    pub parameters: u64,
    /// Gradients plus the flat all-reduce buffer and its averaged copy.
    pub gradients: u64,
    /// Adam's m and v.
    pub optimizer: u64,
    /// Forward and backward tensors of one batch at their peak.
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
    pub dtype: Dtype,
    /// Samples per rank per step.
    pub batch_size: u64,
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
    let bf16 = input.dtype != Dtype::F32;
    let mul = |a: u64, c: u64| a.saturating_mul(c);

    let count = mul(mul(2, d_in), d_sae).saturating_add(d_in.saturating_add(d_sae));
    let parameters = mul(count, size);
    let optimizer = mul(2, parameters);

    let flat = mul(count.saturating_add(REDUCED_LOSSES), F32);
    let f32_copies = if bf16 { mul(count, F32) } else { 0 };
    // Flat buffers (or buckets) and their averaged copies; per-parameter
    // collectives reduce the gradients in place and average into copies.
    let reduce_buffers = match input.allreduce {
        AllreduceMode::Flat | AllreduceMode::Overlap => mul(2, flat),
        AllreduceMode::PerParam => flat,
    };
    let gradients = parameters
        .saturating_add(f32_copies)
        .saturating_add(reduce_buffers);
    let overlap = input.allreduce == AllreduceMode::Overlap;

    let batch = mul(b, d_in);
    let gathered = mul(batch, F32).saturating_add(if bf16 { mul(batch, size) } else { 0 });
    let code = mul(mul(b, d_sae), size);
    let activations = gathered
        .saturating_add(mul(4, code))
        .saturating_add(mul(mul(3, batch), size));

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
            activations.max(gradients.saturating_add(code))
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
        assert_eq!(e.optimizer, 2 * 76 * 4);
        // grads + flat (P + 2 losses) + its averaged copy, all f32.
        assert_eq!(e.gradients, 76 * 4 + 2 * 78 * 4);
        // batch [2,4] f32 + 4 x [2,8] + 3 x [2,4].
        assert_eq!(e.activations, 8 * 4 + 4 * 16 * 4 + 3 * 8 * 4);
        assert_eq!(e.data, 10 * 4 * 4);
        assert_eq!(e.overhead, 0);
        // Flat: the all-reduce phase (grads + buffers + z) is the larger here.
        assert_eq!(
            e.total,
            e.parameters + e.optimizer + e.data + (e.gradients + 16 * 4).max(e.activations)
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
        assert_eq!(per_param.gradients, 76 * 4 + 78 * 4);
    }

    #[test]
    fn bf16_halves_the_state_but_not_the_reduce_buffer() {
        let f32 = estimate(&input(256, 2048, 64, 1000));
        let bf16 = estimate(&EstimateInput {
            dtype: Dtype::Bf16,
            ..input(256, 2048, 64, 1000)
        });
        assert_eq!(bf16.parameters * 2, f32.parameters);
        assert_eq!(bf16.optimizer * 2, f32.optimizer);
        // bf16 grads + their f32 copies + the same f32 buffers.
        assert_eq!(
            bf16.gradients,
            f32.gradients - f32.parameters + bf16.parameters + f32.parameters
        );
        assert_eq!(bf16.data, f32.data);
    }

    #[test]
    fn the_larger_transient_counts_once() {
        // Huge batch: activations dominate; tiny batch: the all-reduce does.
        let acts = estimate(&input(256, 8192, 4096, 100));
        assert!(acts.activations > acts.gradients);
        assert_eq!(
            acts.total,
            acts.parameters + acts.optimizer + acts.data + acts.activations
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

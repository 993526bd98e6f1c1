//! The config's enumerated choices (dtype, architecture, decoder norm,
//! decoder bias init, learning-rate schedule, device, all-reduce mode), each
//! spelled in TOML and JSON as its lowercase name.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    /// bfloat16 compute over f32 master weights.
    Bf16,
    /// float16 compute over f32 master weights, with dynamic loss scaling.
    F16,
}

impl Dtype {
    pub fn size_bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 | Dtype::F16 => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// ReLU codes with an L1 penalty.
    #[default]
    Relu,
    /// The k largest ReLU pre-activations per sample (`model.k`).
    Topk,
}

impl Architecture {
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::Relu => "relu",
            Architecture::Topk => "topk",
        }
    }
}

/// What constrains the decoder's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecoderNorm {
    /// Unit L2 norm after every step; the gradient component parallel to
    /// each column is removed before the update.
    #[default]
    Unit,
    /// Unconstrained.
    None,
}

/// How the decoder bias starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BDecInit {
    #[default]
    Zeros,
    /// The mean of the first step's batches (all ranks), before step 1.
    Mean,
}

/// How the learning rate decays after the warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrSchedule {
    #[default]
    Constant,
    Cosine,
    Linear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// CUDA when the rank sees a GPU, else CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// How gradients are all-reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllreduceMode {
    /// One flat coalesced buffer, one collective per step, after the backward
    /// pass (the default: the fastest measured on CPU, docs/benchmarks.md).
    #[default]
    Flat,
    /// Two flat buckets: the decoder's gradients are all-reduced while the
    /// encoder's are computed, then the encoder's. Pays off when the
    /// collective has cores (or a GPU stream) of its own.
    Overlap,
    /// One collective per parameter tensor (kept for benchmarks).
    PerParam,
}

/// The dtype gradients travel in during the all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllreduceDtype {
    /// f32: exact sums.
    #[default]
    F32,
    /// bf16: half the bytes on the wire; each rank's gradients (accumulated
    /// over micro-batches in f32) are rounded to bf16 for the sum and the
    /// sum is taken back to f32 for the optimizer.
    Bf16,
}

/// Which c10d backend carries a training's collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveBackend {
    /// NCCL on CUDA, gloo on the CPU. A rank built without NCCL refuses
    /// CUDA work across several ranks instead of silently using gloo.
    #[default]
    Auto,
    /// NCCL (CUDA only; a rank without it refuses to start).
    Nccl,
    /// gloo, also for CUDA tensors (through host copies: slow, but it needs
    /// no NCCL).
    Gloo,
}

/// What a restart after an out-of-memory exit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomPolicy {
    /// Lower the micro-batch to the largest divisor of the per-rank batch at
    /// most 75 % of it and raise gradient accumulation to match: the
    /// optimisation is unchanged (below `min_micro_batch` the training fails).
    #[default]
    Adapt,
    /// The training fails at the out-of-memory exit.
    Fail,
}

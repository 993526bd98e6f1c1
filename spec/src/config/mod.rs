//! The training job config: the built-in sparse autoencoder, its optimizer, its
//! data, validation and checkpoints (DESIGN §6; every key in docs/rank.md).
//!
//! Parsing is strict: every table denies unknown keys, so a typo is an error and
//! not a silently ignored setting. [`TrainingConfig::validate`] checks the values
//! and names the offending field in every error, so the API can turn each into a
//! `google.rpc.BadRequest` field violation.

mod choices;
mod defaults;
pub mod nccl;
mod validate;

pub use choices::{
    AllreduceDtype, AllreduceMode, Architecture, BDecInit, CollectiveBackend, DecoderNorm, Device,
    Dtype, LrSchedule, OomPolicy,
};

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Largest ground-truth feature matrix of the synthetic source
/// (`num_features x d_in` f32 elements, 256 MiB): it is the one part a rank holds.
pub const MAX_SYNTHETIC_FEATURE_ELEMENTS: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    pub model: ModelConfig,
    pub optim: OptimConfig,
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    pub data: DataConfig,
    /// A held-out set evaluated during training; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ValidationConfig>,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// `[tracking]`: where its run goes in the team's tracker.
    #[serde(
        default,
        skip_serializing_if = "crate::tracking::TrackingConfig::is_empty"
    )]
    pub tracking: crate::tracking::TrackingConfig,
}

/// The sparse autoencoder: z = act(x' W_enc^T + b_enc) with x' = x (or
/// x - b_dec with `apply_b_dec_to_input`), x_hat = z W_dec^T + b_dec;
/// act is ReLU (`relu`) or the k largest of ReLU (`topk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub d_in: i64,
    /// Width of the sparse code; or give `expansion_factor` (d_sae = d_in x factor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_sae: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion_factor: Option<i64>,
    /// Weight of the L1 penalty on mean |z|.
    #[serde(default = "defaults::l1_coefficient")]
    pub l1_coefficient: f64,
    /// The compute dtype; parameters and Adam's state stay f32.
    #[serde(default)]
    pub dtype: Dtype,
    #[serde(default)]
    pub architecture: Architecture,
    /// `topk`: latents kept per sample (required for topk, refused otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<i64>,
    /// `topk`: dead latents the auxiliary loss may use per sample (default d_in / 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_k: Option<i64>,
    /// `topk`: weight of the auxiliary loss on dead latents (0: off).
    #[serde(default)]
    pub aux_coefficient: f64,
    #[serde(default)]
    pub decoder_norm: DecoderNorm,
    #[serde(default)]
    pub b_dec_init: BDecInit,
    /// Whether the encoder sees x - b_dec rather than x.
    #[serde(default)]
    pub apply_b_dec_to_input: bool,
    /// A latent that fired on no sample of the last this many training
    /// samples is dead (`dead_fraction`; the auxiliary loss's candidates).
    #[serde(default = "defaults::dead_window_samples")]
    pub dead_window_samples: i64,
}

/// Adam, its schedule and the step's numerics. `batch_size` is per rank and
/// per micro-batch: the global batch is `batch_size x world_size x
/// accumulation_steps`. With `global_batch` set the global batch is that at
/// every world size, and `batch_size` is the largest micro-batch: each size
/// derives its micro-batch and accumulation by [`crate::elastic::split`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    #[serde(default = "defaults::learning_rate")]
    pub learning_rate: f64,
    pub batch_size: i64,
    /// Train for this many optimizer steps; or give `epochs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<i64>,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "defaults::beta1")]
    pub beta1: f64,
    #[serde(default = "defaults::beta2")]
    pub beta2: f64,
    #[serde(default = "defaults::eps")]
    pub eps: f64,
    /// On an out-of-memory restart, halve the per-rank batch for the next
    /// attempt (superseded by `runtime.oom_policy = "adapt"`, which keeps the
    /// optimisation unchanged; kept for the configs that set it).
    #[serde(default)]
    pub allow_batch_shrink: bool,
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Steps of linear warmup from 0 to `learning_rate`.
    #[serde(default)]
    pub lr_warmup_steps: i64,
    /// The floor of the decay, as a fraction of `learning_rate`.
    #[serde(default)]
    pub lr_min_ratio: f64,
    /// Steps over which the L1 coefficient ramps from 0.
    #[serde(default)]
    pub l1_warmup_steps: i64,
    /// Clip the global gradient norm (after the all-reduce) to this; 0: off.
    #[serde(default)]
    pub max_grad_norm: f64,
    /// Micro-batches per optimizer step, one all-reduce per step.
    #[serde(default = "defaults::accumulation_steps")]
    pub accumulation_steps: i64,
    /// More non-finite steps than this in a row end the run as diverged.
    #[serde(default = "defaults::max_nonfinite_steps")]
    pub max_nonfinite_steps: i64,
    /// Samples per optimizer step over all ranks, held at every world size
    /// (an elastic training's sizes split it; docs/scheduling.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Write a checkpoint every N steps (0: only the final one).
    #[serde(default = "defaults::every_steps")]
    pub every_steps: i64,
    /// How many complete checkpoints to keep (the newest ones; `best/` apart).
    #[serde(default = "defaults::keep")]
    pub keep: i64,
    /// Where checkpoints go: a path or `file://` URI (a shared file system)
    /// or `s3://bucket/prefix`, each training under its id. Unset: rank 0's
    /// run directory on its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            every_steps: defaults::every_steps(),
            keep: defaults::keep(),
            storage: None,
        }
    }
}

/// Exactly one source, `[data.synthetic]` or `[data.files]`, and how it is
/// streamed: samples are read in chunks of `shuffle_chunk` consecutive rows,
/// the chunks of an epoch come in a seeded random order, and every
/// `shuffle_buffer` samples (whole chunks) are shuffled together (docs/data.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FileData>,
    /// Consecutive rows read together (the unit of the epoch's chunk order).
    #[serde(default = "defaults::shuffle_chunk")]
    pub shuffle_chunk: i64,
    /// Samples shuffled together within an epoch (rounded up to whole chunks).
    #[serde(default = "defaults::shuffle_buffer")]
    pub shuffle_buffer: i64,
    /// Batches a background reader prepares ahead of the training step.
    #[serde(default = "defaults::prefetch_batches")]
    pub prefetch_batches: i64,
}

/// Deterministic synthetic activations: sparse combinations of `num_features`
/// random unit-norm ground-truth directions plus a little dense noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticData {
    pub num_samples: i64,
    #[serde(default = "defaults::num_features")]
    pub num_features: i64,
    /// Probability that a ground-truth feature is active in a sample.
    #[serde(default = "defaults::feature_probability")]
    pub feature_probability: f64,
    #[serde(default = "defaults::noise_std")]
    pub noise_std: f64,
}

/// Activation shards: `.npy`, `.safetensors` or `.parquet` files, each
/// holding rows of `d_in` floats (f32, f16, bf16 or f64). Each entry of
/// `paths` is a file, a directory (every shard inside, sorted by name), a
/// glob pattern, or the same under `file://` or `s3://bucket/prefix`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileData {
    pub paths: Vec<String>,
    /// The tensor to read from a safetensors file (default: its only tensor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The parquet column holding each row as a list of floats (default: the
    /// file's only list column; with none, its d_in float columns in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

/// How the rank runs, as opposed to what it trains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    #[serde(default)]
    pub device: Device,
    /// Emit a progress line every N steps (and always at the first and last step).
    #[serde(default = "defaults::log_every_steps")]
    pub log_every_steps: i64,
    /// How long ranks wait for each other at start-up.
    #[serde(default = "defaults::rendezvous_timeout_s")]
    pub rendezvous_timeout_s: f64,
    /// How long one collective may take before the group is declared dead.
    #[serde(default = "defaults::collective_timeout_s")]
    pub collective_timeout_s: f64,
    #[serde(default)]
    pub allreduce: AllreduceMode,
    /// The collectives' backend (`auto`: NCCL on CUDA, gloo on the CPU).
    #[serde(default)]
    pub backend: CollectiveBackend,
    /// `allreduce = "overlap"`: the largest bucket, in MiB; each bucket is
    /// its own collective, started as soon as its gradients are ready.
    #[serde(default = "defaults::bucket_mb")]
    pub bucket_mb: f64,
    /// The dtype gradients are summed in across ranks.
    #[serde(default)]
    pub allreduce_dtype: AllreduceDtype,
    /// Host memory each rank may use (a memory cgroup on the agent); unset:
    /// twice the memory estimate plus 4 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory_gib_per_rank: Option<f64>,
    /// What a restart after an out-of-memory exit does (`optim.allow_batch_shrink`,
    /// when a config sets it, halves the batch instead, as before).
    #[serde(default)]
    pub oom_policy: OomPolicy,
    /// The smallest micro-batch `oom_policy = "adapt"` goes down to.
    #[serde(default = "defaults::min_micro_batch")]
    pub min_micro_batch: i64,
    /// NCCL's variables for this training's ranks (names from
    /// [`nccl::ALLOWED`], e.g. `NCCL_SOCKET_IFNAME`), over the agent's own.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub nccl_env: std::collections::BTreeMap<String, String>,
    /// Between a preemption notice and SIGKILL ("60s"; see [`crate::schedule`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_grace: Option<String>,
    /// How long the training expects to run ("6h"), for start-time
    /// estimates before its step rate is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration: Option<String>,
}

impl RuntimeConfig {
    /// The scheduling keys of the table.
    pub fn schedule(&self) -> crate::schedule::ScheduleHints {
        crate::schedule::ScheduleHints {
            preemption_grace: self.preemption_grace.clone(),
            expected_duration: self.expected_duration.clone(),
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            device: Device::default(),
            log_every_steps: defaults::log_every_steps(),
            rendezvous_timeout_s: defaults::rendezvous_timeout_s(),
            collective_timeout_s: defaults::collective_timeout_s(),
            allreduce: AllreduceMode::default(),
            backend: CollectiveBackend::default(),
            bucket_mb: defaults::bucket_mb(),
            allreduce_dtype: AllreduceDtype::default(),
            host_memory_gib_per_rank: None,
            oom_policy: OomPolicy::default(),
            min_micro_batch: defaults::min_micro_batch(),
            nccl_env: Default::default(),
            preemption_grace: None,
            expected_duration: None,
        }
    }
}

/// A held-out set: the same shard kinds and path forms as `data.files`,
/// evaluated whole (sharded across ranks) without updating the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationConfig {
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Evaluate every N steps (and at the final step); unset: at every
    /// checkpoint and at the final step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_steps: Option<i64>,
}

impl ValidationConfig {
    /// The shards as a `data.files` source.
    pub fn files(&self) -> FileData {
        FileData {
            paths: self.paths.clone(),
            tensor: self.tensor.clone(),
            column: self.column.clone(),
        }
    }
}

/// A config problem, naming the field (dotted path) it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config is not valid {format}: {reason}")]
    Parse {
        format: &'static str,
        reason: String,
    },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl ConfigError {
    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// The dotted field path for `Invalid`, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}
/// A config file's text, and whether it is JSON (a `.json` name; TOML
/// otherwise).
pub(crate) fn read_config(path: &Path) -> Result<(String, bool), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((text, path.extension().is_some_and(|ext| ext == "json")))
}

impl TrainingConfig {
    /// Parse TOML text (strict) and validate it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            format: "TOML",
            reason: e.message().to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parse JSON text (strict) and validate it.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let config: Self = serde_json::from_str(text).map_err(|e| ConfigError::Parse {
            format: "JSON",
            reason: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Read a `.json` file as JSON and anything else as TOML.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let (text, json) = read_config(path)?;
        if json {
            Self::from_json(&text)
        } else {
            Self::from_toml(&text)
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("config serialises")
    }

    /// Width of the sparse code.
    pub fn d_sae(&self) -> i64 {
        match (self.model.d_sae, self.model.expansion_factor) {
            (Some(d), _) => d,
            (None, Some(f)) => self.model.d_in * f,
            (None, None) => self.model.d_in * 8,
        }
    }

    /// Number of trainable parameters of the SAE.
    pub fn parameter_count(&self) -> i64 {
        let (d_in, d_sae) = (self.model.d_in, self.d_sae());
        d_in * d_sae * 2 + d_sae + d_in
    }

    /// `model.k` for topk (validated: set exactly then).
    pub fn topk(&self) -> Option<i64> {
        match self.model.architecture {
            Architecture::Topk => self.model.k,
            Architecture::Relu => None,
        }
    }

    /// `model.aux_k`, or its default d_in / 2 (at least 1, at most d_sae).
    pub fn aux_k(&self) -> i64 {
        self.model
            .aux_k
            .unwrap_or((self.model.d_in / 2).max(1))
            .min(self.d_sae())
    }

    /// Whether validation runs after optimizer step `done` of `total`.
    pub fn validates_at(&self, done: i64, total: i64) -> bool {
        let Some(v) = &self.validation else {
            return false;
        };
        let every = v.every_steps.unwrap_or(self.checkpoint.every_steps);
        done == total || (every > 0 && done % every == 0)
    }
}

#[cfg(test)]
mod tests;

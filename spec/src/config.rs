//! The training job config: the built-in sparse autoencoder, its optimizer, its
//! data and its checkpoints (DESIGN §6).
//!
//! Parsing is strict: every table denies unknown keys, so a typo is an error and
//! not a silently ignored setting. [`TrainingConfig::validate`] checks the values
//! and names the offending field in every error, so the API can turn each into a
//! `google.rpc.BadRequest` field violation.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Largest ground-truth feature matrix of the synthetic source
/// (`num_features x d_in` f32 elements, 256 MiB): it is the one part a rank holds.
pub const MAX_SYNTHETIC_FEATURE_ELEMENTS: u64 = 64 * 1024 * 1024;

/// URI schemes a `data.files.paths` entry may carry (none: a local path).
pub const DATA_SCHEMES: [&str; 2] = ["file://", "s3://"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    pub model: ModelConfig,
    pub optim: OptimConfig,
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    pub data: DataConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
}

/// The sparse autoencoder: encoder Linear(d_in, d_sae) + ReLU, decoder Linear(d_sae, d_in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub d_in: i64,
    /// Width of the sparse code; or give `expansion_factor` (d_sae = d_in x factor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_sae: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion_factor: Option<i64>,
    #[serde(default = "defaults::l1_coefficient")]
    pub l1_coefficient: f64,
    #[serde(default)]
    pub dtype: Dtype,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    Bf16,
}

impl Dtype {
    pub fn size_bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

/// Adam and the schedule. `batch_size` is per rank: the global batch is
/// `batch_size x world_size`.
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
    /// On an out-of-memory restart, halve the per-rank batch for the next attempt.
    #[serde(default)]
    pub allow_batch_shrink: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Write a checkpoint every N steps (0: only the final one).
    #[serde(default = "defaults::every_steps")]
    pub every_steps: i64,
    /// How many complete checkpoints to keep (the newest ones).
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
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            device: Device::default(),
            log_every_steps: defaults::log_every_steps(),
            rendezvous_timeout_s: defaults::rendezvous_timeout_s(),
            collective_timeout_s: defaults::collective_timeout_s(),
            allreduce: AllreduceMode::default(),
        }
    }
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

mod defaults {
    pub fn l1_coefficient() -> f64 {
        1e-3
    }
    pub fn learning_rate() -> f64 {
        1e-3
    }
    pub fn beta1() -> f64 {
        0.9
    }
    pub fn beta2() -> f64 {
        0.999
    }
    pub fn eps() -> f64 {
        1e-8
    }
    pub fn every_steps() -> i64 {
        100
    }
    pub fn keep() -> i64 {
        3
    }
    pub fn num_features() -> i64 {
        256
    }
    pub fn feature_probability() -> f64 {
        0.02
    }
    pub fn noise_std() -> f64 {
        0.01
    }
    pub fn shuffle_chunk() -> i64 {
        1024
    }
    pub fn shuffle_buffer() -> i64 {
        16384
    }
    pub fn prefetch_batches() -> i64 {
        4
    }
    pub fn log_every_steps() -> i64 {
        10
    }
    pub fn rendezvous_timeout_s() -> f64 {
        60.0
    }
    pub fn collective_timeout_s() -> f64 {
        30.0
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
    fn invalid(field: &str, reason: impl Into<String>) -> Self {
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
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        if path.extension().is_some_and(|ext| ext == "json") {
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

    /// Check every value; the first problem found is returned with its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let m = &self.model;
        if m.d_in <= 0 || m.d_in > 1 << 20 {
            return Err(ConfigError::invalid("model.d_in", "must be in 1..=1048576"));
        }
        match (m.d_sae, m.expansion_factor) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "model.d_sae",
                    "give d_sae or expansion_factor, not both",
                ))
            }
            (Some(d), None) if d <= 0 || d > 1 << 24 => {
                return Err(ConfigError::invalid(
                    "model.d_sae",
                    "must be in 1..=16777216",
                ))
            }
            (None, Some(f)) if f <= 0 || f > 1024 => {
                return Err(ConfigError::invalid(
                    "model.expansion_factor",
                    "must be in 1..=1024",
                ))
            }
            _ => {}
        }
        if !(m.l1_coefficient.is_finite() && m.l1_coefficient >= 0.0) {
            return Err(ConfigError::invalid(
                "model.l1_coefficient",
                "must be a finite number >= 0",
            ));
        }
        let o = &self.optim;
        if !(o.learning_rate.is_finite() && o.learning_rate > 0.0) {
            return Err(ConfigError::invalid("optim.learning_rate", "must be > 0"));
        }
        if o.batch_size <= 0 || o.batch_size > 1 << 24 {
            return Err(ConfigError::invalid(
                "optim.batch_size",
                "must be in 1..=16777216 (it is per rank)",
            ));
        }
        match (o.steps, o.epochs) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "optim.steps",
                    "give steps or epochs, not both",
                ))
            }
            (None, None) => {
                return Err(ConfigError::invalid("optim.steps", "give steps or epochs"))
            }
            (Some(s), None) if s <= 0 => {
                return Err(ConfigError::invalid("optim.steps", "must be > 0"))
            }
            (None, Some(e)) if e <= 0 => {
                return Err(ConfigError::invalid("optim.epochs", "must be > 0"))
            }
            _ => {}
        }
        for (field, beta) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(ConfigError::invalid(field, "must be in [0, 1)"));
            }
        }
        if !(o.eps.is_finite() && o.eps > 0.0) {
            return Err(ConfigError::invalid("optim.eps", "must be > 0"));
        }
        if self.checkpoint.every_steps < 0 {
            return Err(ConfigError::invalid(
                "checkpoint.every_steps",
                "must be >= 0",
            ));
        }
        if self.checkpoint.keep < 1 {
            return Err(ConfigError::invalid("checkpoint.keep", "must be >= 1"));
        }
        if let Some(storage) = &self.checkpoint.storage {
            validate_uri("checkpoint.storage", storage)?;
        }
        self.validate_data()?;
        let r = &self.runtime;
        if r.log_every_steps <= 0 {
            return Err(ConfigError::invalid(
                "runtime.log_every_steps",
                "must be > 0",
            ));
        }
        for (field, secs) in [
            ("runtime.rendezvous_timeout_s", r.rendezvous_timeout_s),
            ("runtime.collective_timeout_s", r.collective_timeout_s),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(ConfigError::invalid(field, "must be in (0, 86400] seconds"));
            }
        }
        Ok(())
    }

    fn validate_data(&self) -> Result<(), ConfigError> {
        let d = &self.data;
        for (field, value, max) in [
            ("data.shuffle_chunk", d.shuffle_chunk, 1 << 20),
            ("data.shuffle_buffer", d.shuffle_buffer, 1 << 26),
            ("data.prefetch_batches", d.prefetch_batches, 64),
        ] {
            if !(1..=max).contains(&value) {
                return Err(ConfigError::invalid(field, format!("must be in 1..={max}")));
            }
        }
        match (&d.synthetic, &d.files) {
            (Some(_), Some(_)) => Err(ConfigError::invalid(
                "data",
                "give [data.synthetic] or [data.files], not both",
            )),
            (None, None) => Err(ConfigError::invalid(
                "data",
                "give [data.synthetic] or [data.files]",
            )),
            (Some(s), None) => self.validate_synthetic(s),
            (None, Some(f)) => validate_files(f),
        }
    }

    fn validate_synthetic(&self, s: &SyntheticData) -> Result<(), ConfigError> {
        if s.num_samples <= 0 {
            return Err(ConfigError::invalid(
                "data.synthetic.num_samples",
                "must be > 0",
            ));
        }
        if s.num_features <= 0 || s.num_features > 1 << 20 {
            return Err(ConfigError::invalid(
                "data.synthetic.num_features",
                "must be in 1..=1048576",
            ));
        }
        if (s.num_features as u64).saturating_mul(self.model.d_in as u64)
            > MAX_SYNTHETIC_FEATURE_ELEMENTS
        {
            return Err(ConfigError::invalid(
                "data.synthetic.num_features",
                format!(
                    "num_features x d_in must be at most {MAX_SYNTHETIC_FEATURE_ELEMENTS} elements"
                ),
            ));
        }
        if !(s.feature_probability > 0.0 && s.feature_probability <= 1.0) {
            return Err(ConfigError::invalid(
                "data.synthetic.feature_probability",
                "must be in (0, 1]",
            ));
        }
        if !(s.noise_std.is_finite() && s.noise_std >= 0.0) {
            return Err(ConfigError::invalid(
                "data.synthetic.noise_std",
                "must be >= 0",
            ));
        }
        Ok(())
    }
}

/// A path, `file://` or `s3://bucket/...` URI: its form only.
fn validate_uri(field: &str, p: &str) -> Result<(), ConfigError> {
    if p.trim().is_empty() || p.contains('\0') {
        return Err(ConfigError::invalid(field, "an entry is empty"));
    }
    if let Some((scheme, rest)) = p.split_once("://") {
        if !DATA_SCHEMES.contains(&format!("{scheme}://").as_str()) {
            return Err(ConfigError::invalid(
                field,
                format!("{p}: scheme {scheme}:// is not one of file://, s3://"),
            ));
        }
        if scheme == "s3" && rest.split('/').next().is_none_or(str::is_empty) {
            return Err(ConfigError::invalid(
                field,
                format!("{p}: names no bucket (s3://bucket/prefix)"),
            ));
        }
    }
    Ok(())
}

/// The entries' form only: whether they exist is for the rank to find out,
/// on the host that reads them.
fn validate_files(f: &FileData) -> Result<(), ConfigError> {
    const FIELD: &str = "data.files.paths";
    if f.paths.is_empty() {
        return Err(ConfigError::invalid(FIELD, "give at least one entry"));
    }
    for p in &f.paths {
        validate_uri(FIELD, p)?;
    }
    for (field, name) in [
        ("data.files.tensor", &f.tensor),
        ("data.files.column", &f.column),
    ] {
        if name.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::invalid(field, "must not be empty"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[model]
d_in = 64
[optim]
batch_size = 32
steps = 10
[data.synthetic]
num_samples = 1000
"#;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = TrainingConfig::from_toml(MINIMAL).unwrap();
        assert_eq!(c.d_sae(), 512);
        assert_eq!(c.checkpoint.every_steps, 100);
        assert_eq!(c.runtime.allreduce, AllreduceMode::Flat);
        assert_eq!(c.parameter_count(), 64 * 512 * 2 + 512 + 64);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = TrainingConfig::from_toml(&format!("{MINIMAL}\n[extra]\nx = 1\n")).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = TrainingConfig::from_toml(&MINIMAL.replace("d_in = 64", "d_in = 64\nd_inn = 3"))
            .unwrap_err();
        assert!(err.to_string().contains("d_inn"), "{err}");
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            ("batch_size = 32", "batch_size = -4", "optim.batch_size"),
            ("steps = 10", "steps = 10\nepochs = 2", "optim.steps"),
            (
                "num_samples = 1000",
                "num_samples = 0",
                "data.synthetic.num_samples",
            ),
            (
                "d_in = 64",
                "d_in = 64\nd_sae = 8\nexpansion_factor = 2",
                "model.d_sae",
            ),
        ];
        for (from, to, field) in cases {
            let err = TrainingConfig::from_toml(&MINIMAL.replace(from, to)).unwrap_err();
            assert_eq!(err.field(), Some(field), "{to}: {err}");
        }
    }

    #[test]
    fn json_round_trip() {
        let c = TrainingConfig::from_toml(MINIMAL).unwrap();
        assert_eq!(TrainingConfig::from_json(&c.to_json()).unwrap(), c);
    }
}

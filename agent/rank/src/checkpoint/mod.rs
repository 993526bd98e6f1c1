//! Checkpoints: written by rank 0 only, holding the parameters and Adam's
//! state in one safetensors file plus a small JSON manifest written last. A
//! checkpoint is complete exactly when its manifest parses and its state file
//! is there; anything else is ignored.
//!
//! Where they go (`checkpoint.storage`, see [`Store`]):
//! - default: `<run-dir>/checkpoints/step-00000100/` on rank 0's host;
//! - a path or `file://` URI (a shared file system): `<storage>/<training-id>/step-…/`;
//! - `s3://bucket/prefix`: the same keys under the prefix.
//!
//! So any host can resume a training whose checkpoints are in shared storage.

mod local;
mod object;
mod store;

pub use local::{checkpoints_dir, latest, list, prune, save, Loaded};
pub use store::{Found, Store};

use crate::error::RankError;
use crate::model::{Adam, Sae, PARAM_NAMES};
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::Tensor;

pub const FORMAT: &str = "cohort-sae-checkpoint/1";
pub const STATE_FILE: &str = "state.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    /// Optimizer steps completed; training resumes at this step.
    pub step: i64,
    pub epoch: i64,
    pub world_size: i64,
    pub global_batch: i64,
    pub d_in: i64,
    pub d_sae: i64,
    pub dtype: String,
    pub param_checksum: String,
    pub files: Vec<String>,
    /// What a reader needs to run the SAE's forward pass without our code:
    /// "relu" (z = ReLU(x W_enc^T + b_enc)) or "topk".
    #[serde(default = "relu")]
    pub architecture: String,
    /// For "topk": how many latents stay active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<i64>,
    /// Whether the encoder sees x - b_dec rather than x.
    #[serde(default)]
    pub apply_b_dec_to_input: bool,
    /// Where the data order stood: the next step reads `batch` of `epoch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<SamplerState>,
}

fn relu() -> String {
    "relu".into()
}

/// The sampler's position and what defines its order (docs/data.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SamplerState {
    pub epoch: i64,
    pub batch: i64,
    pub num_samples: i64,
    pub seed: u64,
    pub shuffle_chunk: i64,
    pub shuffle_buffer: i64,
}

pub fn step_dir_name(step: i64) -> String {
    format!("step-{step:08}")
}

/// The step a `step-NNNNNNNN` name stands for.
pub fn step_of(name: &str) -> Option<i64> {
    name.strip_prefix("step-")?.parse().ok()
}

/// Parse a manifest; `None` for one of another format or unreadable.
pub fn parse_manifest(text: &[u8]) -> Option<Manifest> {
    let manifest: Manifest = serde_json::from_slice(text).ok()?;
    (manifest.format == FORMAT).then_some(manifest)
}

/// Write the state of `sae` and `adam` as a safetensors file at `path`.
pub fn write_state(path: &Path, sae: &Sae, adam: &Adam) -> Result<(), RankError> {
    let mut named: Vec<(String, Tensor)> = Vec::new();
    for (i, name) in PARAM_NAMES.iter().enumerate() {
        named.push((
            format!("param.{name}"),
            sae.params[i].detach().to_device(tch::Device::Cpu),
        ));
        named.push((
            format!("adam.m.{name}"),
            adam.m[i].to_device(tch::Device::Cpu),
        ));
        named.push((
            format!("adam.v.{name}"),
            adam.v[i].to_device(tch::Device::Cpu),
        ));
    }
    named.push(("adam.step".into(), Tensor::from_slice(&[adam.step])));
    Tensor::write_safetensors(&named, path).map_err(|e| io("write", path, e))
}

pub(crate) fn io(context: &str, path: &Path, e: impl std::fmt::Display) -> RankError {
    RankError::Checkpoint(format!("{context} {}: {e}", path.display()))
}

/// Copy a checkpoint's tensors into `sae` and `adam` (shapes must match).
/// `where_` names the checkpoint in errors.
pub fn restore_file(
    path: &Path,
    where_: &str,
    sae: &mut Sae,
    adam: &mut Adam,
) -> Result<(), RankError> {
    let tensors = Tensor::read_safetensors(path).map_err(|e| io("read", path, e))?;
    let get = |name: &str| {
        tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| io("read", path, format!("missing tensor {name}")))
    };
    tch::no_grad(|| -> Result<(), RankError> {
        for (i, name) in PARAM_NAMES.iter().enumerate() {
            for (dst, key) in [
                (&mut sae.params[i], format!("param.{name}")),
                (&mut adam.m[i], format!("adam.m.{name}")),
                (&mut adam.v[i], format!("adam.v.{name}")),
            ] {
                let src = get(&key)?;
                if src.size() != dst.size() {
                    return Err(RankError::Config(cohort_spec::ConfigError::Invalid {
                        field: "model".into(),
                        reason: format!(
                            "checkpoint {} has {key} of shape {:?}, the config wants {:?}",
                            where_,
                            src.size(),
                            dst.size()
                        ),
                    }));
                }
                dst.copy_(&src.to_kind(dst.kind()));
            }
        }
        Ok(())
    })?;
    adam.step = get("adam.step")?.int64_value(&[0]);
    Ok(())
}

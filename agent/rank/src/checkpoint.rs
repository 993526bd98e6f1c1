//! Checkpoints: written by rank 0 only, atomically (a temporary directory,
//! fsynced, then renamed), holding the parameters and Adam's state in one
//! safetensors file plus a small JSON manifest written last. A directory is
//! complete exactly when its manifest parses; anything else is ignored.
//!
//! Layout: `<run-dir>/checkpoints/step-00000100/{state.safetensors,manifest.json}`.

use crate::error::RankError;
use crate::model::{Adam, Sae, PARAM_NAMES};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use tch::Tensor;

pub const FORMAT: &str = "cohort-sae-checkpoint/1";
const STATE_FILE: &str = "state.safetensors";
const MANIFEST_FILE: &str = "manifest.json";

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

pub struct Loaded {
    pub manifest: Manifest,
    pub dir: PathBuf,
}

fn io(context: &str, path: &Path, e: impl std::fmt::Display) -> RankError {
    RankError::Checkpoint(format!("{context} {}: {e}", path.display()))
}

pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

fn step_dir_name(step: i64) -> String {
    format!("step-{step:08}")
}

/// Write a checkpoint of `sae` and `adam` at `manifest.step`; returns its directory.
pub fn save(
    run_dir: &Path,
    sae: &Sae,
    adam: &Adam,
    manifest: &Manifest,
) -> Result<PathBuf, RankError> {
    let root = checkpoints_dir(run_dir);
    fs::create_dir_all(&root).map_err(|e| io("create", &root, e))?;
    let final_dir = root.join(step_dir_name(manifest.step));
    let tmp = root.join(format!(
        ".{}.tmp-{}",
        step_dir_name(manifest.step),
        std::process::id()
    ));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| io("remove", &tmp, e))?;
    }
    fs::create_dir_all(&tmp).map_err(|e| io("create", &tmp, e))?;

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
    let state = tmp.join(STATE_FILE);
    Tensor::write_safetensors(&named, &state).map_err(|e| io("write", &state, e))?;
    sync_file(&state)?;

    let manifest_path = tmp.join(MANIFEST_FILE);
    let text = serde_json::to_string_pretty(manifest).expect("manifest serialises");
    fs::write(&manifest_path, text).map_err(|e| io("write", &manifest_path, e))?;
    sync_file(&manifest_path)?;

    if final_dir.exists() {
        fs::remove_dir_all(&final_dir).map_err(|e| io("replace", &final_dir, e))?;
    }
    fs::rename(&tmp, &final_dir).map_err(|e| io("rename", &final_dir, e))?;
    sync_file(&root)?;
    Ok(final_dir)
}

fn sync_file(path: &Path) -> Result<(), RankError> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("sync", path, e))
}

/// Complete checkpoints, oldest first.
pub fn list(run_dir: &Path) -> Vec<Loaded> {
    let Ok(entries) = fs::read_dir(checkpoints_dir(run_dir)) else {
        return Vec::new();
    };
    let mut found: Vec<Loaded> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .filter_map(|e| {
            let dir = e.path();
            let text = fs::read_to_string(dir.join(MANIFEST_FILE)).ok()?;
            let manifest: Manifest = serde_json::from_str(&text).ok()?;
            (manifest.format == FORMAT && dir.join(STATE_FILE).is_file())
                .then_some(Loaded { manifest, dir })
        })
        .collect();
    found.sort_by_key(|l| l.manifest.step);
    found
}

/// The newest complete checkpoint, if any.
pub fn latest(run_dir: &Path) -> Option<Loaded> {
    list(run_dir).pop()
}

/// Remove all but the newest `keep` complete checkpoints.
pub fn prune(run_dir: &Path, keep: usize) -> Result<(), RankError> {
    let all = list(run_dir);
    let excess = all.len().saturating_sub(keep);
    for old in all.into_iter().take(excess) {
        fs::remove_dir_all(&old.dir).map_err(|e| io("prune", &old.dir, e))?;
    }
    Ok(())
}

/// Copy a checkpoint's tensors into `sae` and `adam` (shapes must match).
pub fn restore(loaded: &Loaded, sae: &mut Sae, adam: &mut Adam) -> Result<(), RankError> {
    let path = loaded.dir.join(STATE_FILE);
    let tensors = Tensor::read_safetensors(&path).map_err(|e| io("read", &path, e))?;
    let get = |name: &str| {
        tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| io("read", &path, format!("missing tensor {name}")))
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
                            loaded.dir.display(),
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

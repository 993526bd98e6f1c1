//! The checkpoint on disk and in object storage: the names of its files and
//! directories and the manifest that describes it. The rank writes it, the
//! agent serves it, the coordinator exports it, the CLI saves it; all of
//! them spell it from here. Serde only, no I/O.
//!
//! Layout under a checkpoint root (`<run-dir>/checkpoints/`, or
//! `<storage>/<training id>/` in shared storage):
//!
//! ```text
//! step-00000100/state.safetensors   the whole training state
//! step-00000100/manifest.json       this module's Manifest, written last
//! best/...                          the state with the lowest validation loss
//! ```
//!
//! A step directory is complete once it is in place under its final name
//! (renamed there on a file system; its manifest written last in object
//! storage). Program checkpoints (a team's own training program) share the
//! directory naming and carry no manifest of ours.

use serde::{Deserialize, Serialize};

/// The format and version a manifest declares; a reader refuses others.
pub const FORMAT: &str = "cohort-sae-checkpoint/1";
pub const STATE_FILE: &str = "state.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";
/// The directory of the best checkpoint, beside the steps'.
pub const BEST_DIR: &str = "best";
/// The default checkpoint root under a run directory.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// `step-NNNNNNNN`, the directory of the checkpoint after `step` steps.
pub fn step_dir_name(step: i64) -> String {
    format!("step-{step:08}")
}

/// The step a `step-NNNNNNNN` name stands for.
pub fn step_of(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is the directory of a checkpoint (a step's, or the best).
pub fn is_checkpoint_dir(name: &str) -> bool {
    name == BEST_DIR || step_of(name).is_some()
}

/// Whether `name` is one of the files a checkpoint directory holds.
pub fn is_checkpoint_file(name: &str) -> bool {
    name == STATE_FILE || name == MANIFEST_FILE
}

/// What a checkpoint holds, and what a reader needs to use it without our
/// code. Fields added after the first version carry defaults, so every
/// manifest ever written still reads.
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
    /// The SAE's forward pass: "relu" (z = ReLU(x W_enc^T + b_enc)) or "topk".
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
    /// SHA-256 of the state file (hex), verified on restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_sha256: Option<String>,
    /// The dtype of the stored weights (always f32: the master weights).
    #[serde(default = "f32_name")]
    pub weights_dtype: String,
    /// The training config the checkpoint was written under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// The attempt that wrote it (absent in checkpoints written before
    /// checkpoints carried theirs). A restarted attempt resumes only from
    /// the checkpoints the coordinator published ([`crate::resume`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// The last progress line before it (`{"event":"progress",...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// The validation of this state, when it was validated
    /// (`{"event":"validation",...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<serde_json::Value>,
}

fn relu() -> String {
    "relu".into()
}

fn f32_name() -> String {
    "f32".into()
}

impl Manifest {
    /// A manifest of our format; why not, for one of another format or
    /// text that does not parse.
    pub fn parse(text: &[u8]) -> Result<Manifest, String> {
        let manifest: Manifest = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        if manifest.format != FORMAT {
            return Err(format!(
                "format {:?}, this build reads {FORMAT:?}",
                manifest.format
            ));
        }
        Ok(manifest)
    }

    /// The validation loss recorded with this state, if any.
    pub fn validation_loss(&self) -> Option<f64> {
        self.validation.as_ref()?.get("loss")?.as_f64()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest as the first cohort-rank wrote it: no architecture, no
    /// sampler, no digest, no attempt.
    const FIRST: &str = r#"{"format":"cohort-sae-checkpoint/1","step":40,"epoch":0,
        "world_size":2,"global_batch":64,"d_in":8,"d_sae":32,"dtype":"f32",
        "param_checksum":"abc","files":["state.safetensors"]}"#;

    #[test]
    fn manifests_of_every_version_read_with_their_defaults() {
        let old = Manifest::parse(FIRST.as_bytes()).unwrap();
        assert_eq!(old.step, 40);
        assert_eq!(old.architecture, "relu");
        assert_eq!(old.weights_dtype, "f32");
        assert!(!old.apply_b_dec_to_input);
        assert_eq!(
            (old.k, old.attempt, old.sampler.as_ref()),
            (None, None, None)
        );

        let current = Manifest {
            architecture: "topk".into(),
            k: Some(4),
            apply_b_dec_to_input: true,
            sampler: Some(SamplerState {
                epoch: 1,
                batch: 3,
                num_samples: 100,
                seed: 7,
                shuffle_chunk: 16,
                shuffle_buffer: 2,
            }),
            state_sha256: Some("00ff".into()),
            attempt: Some(2),
            validation: Some(serde_json::json!({"event": "validation", "loss": 0.5})),
            ..old.clone()
        };
        let text = serde_json::to_vec(&current).unwrap();
        let back = Manifest::parse(&text).unwrap();
        assert_eq!(back, current);
        assert_eq!(back.validation_loss(), Some(0.5));
        // What a writer leaves out for an old reader is what it would default.
        let plain = serde_json::to_value(&old).unwrap();
        assert!(plain.get("k").is_none() && plain.get("attempt").is_none());
        assert_eq!(
            Manifest::parse(&serde_json::to_vec(&old).unwrap()).unwrap(),
            old
        );
    }

    #[test]
    fn another_format_or_garbage_is_refused() {
        let next = FIRST.replace("checkpoint/1", "checkpoint/2");
        let e = Manifest::parse(next.as_bytes()).unwrap_err();
        assert!(e.contains("checkpoint/2"), "{e}");
        assert!(Manifest::parse(b"{}").is_err());
        assert!(Manifest::parse(b"not json").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(step_dir_name(40), "step-00000040");
        assert_eq!(step_of("step-00000040"), Some(40));
        assert_eq!(step_of("step-x"), None);
        assert!(is_checkpoint_dir("best") && is_checkpoint_dir("step-7"));
        assert!(!is_checkpoint_dir(".step-7.tmp-1") && !is_checkpoint_dir("steps"));
        assert!(is_checkpoint_file(MANIFEST_FILE) && is_checkpoint_file(STATE_FILE));
        assert!(!is_checkpoint_file("secret"));
    }
}

//! Checkpoints from the training loop (rank 0 writes them): the manifest
//! of the state at a step, where the data order stood, and the write with
//! its pruning and report.

use super::Trainer;
use crate::checkpoint::{self, Manifest, SamplerState};
use crate::error::RankError;
use cohort_spec::progress::ProgressLine;

impl Trainer<'_> {
    /// Where the data order stands after `step` steps.
    pub(super) fn sampler_state(&self, step: i64) -> SamplerState {
        let (epoch, batch) = self.sampler.position(step * self.accumulation);
        SamplerState {
            epoch,
            batch,
            num_samples: self.sampler.num_samples,
            seed: self.sampler.seed,
            shuffle_chunk: self.cfg.data.shuffle_chunk,
            shuffle_buffer: self.cfg.data.shuffle_buffer,
        }
    }

    /// The manifest of the state after `step` steps.
    pub(super) fn manifest(&self, step: i64, validation: Option<&ProgressLine>) -> Manifest {
        let m = &self.cfg.model;
        Manifest {
            format: checkpoint::FORMAT.into(),
            step,
            epoch: self.sampler.position(step * self.accumulation).0,
            world_size: self.launch.world_size,
            global_batch: self.global_batch(),
            d_in: m.d_in,
            d_sae: self.cfg.d_sae(),
            dtype: m.dtype.as_str().into(),
            param_checksum: self.state.sae.checksum(),
            files: vec![checkpoint::STATE_FILE.into()],
            architecture: m.architecture.as_str().into(),
            k: self.cfg.topk(),
            apply_b_dec_to_input: m.apply_b_dec_to_input,
            sampler: Some(self.sampler_state(step)),
            state_sha256: None,
            weights_dtype: "f32".into(),
            config: serde_json::to_value(self.cfg).ok(),
            attempt: self.launch.attempt,
            progress: self.last_progress.as_ref().map(ProgressLine::to_value),
            validation: validation.map(ProgressLine::to_value),
        }
    }

    /// The validation of `step`, if the last one was of it.
    pub(super) fn validation_of(&self, step: i64) -> Option<&ProgressLine> {
        self.last_validation
            .as_ref()
            .filter(|v| matches!(v, ProgressLine::Validation { step: s, .. } if *s == step))
    }

    pub(super) fn save_checkpoint(&self, step: i64) -> Result<(), RankError> {
        if !self.launch.is_leader() {
            return Ok(());
        }
        let manifest = self.manifest(step, self.validation_of(step));
        let path = self
            .checkpoints
            .save(self.run_dir, &self.state, &manifest)?;
        self.checkpoints.prune(self.cfg.checkpoint.keep as usize)?;
        self.out.emit(&ProgressLine::Checkpoint {
            step,
            path,
            best: false,
        });
        Ok(())
    }
}

//! Small SAE training configs for the tests: the same job as a TOML file (for
//! the CLI), a validated `cohort_spec` config, and a `cohort.v1` proto.

use cohort_proto::v1;
use std::path::{Path, PathBuf};

/// A small SAE job on synthetic data, trained on the CPU.
#[derive(Debug, Clone)]
pub struct SaeJob {
    pub d_in: i64,
    pub d_sae: i64,
    pub batch_size: i64,
    pub steps: i64,
    pub learning_rate: f64,
    pub checkpoint_every: i64,
    pub log_every: i64,
    pub num_samples: i64,
    pub num_features: i64,
    pub seed: u64,
    /// More `[model]` lines (e.g. `architecture = "topk"`), verbatim.
    pub model_extra: String,
    /// More tables (e.g. `[validation]`), appended verbatim.
    pub tables: String,
}

impl SaeJob {
    /// d_in 32, d_sae 128, batch 32, 60 steps, a checkpoint every 20: a few
    /// seconds with 4 ranks, and the loss falls by an order of magnitude.
    pub fn small() -> SaeJob {
        SaeJob {
            d_in: 32,
            d_sae: 128,
            batch_size: 32,
            steps: 60,
            learning_rate: 0.003,
            checkpoint_every: 20,
            log_every: 5,
            num_samples: 4096,
            num_features: 64,
            seed: 0,
            model_extra: String::new(),
            tables: String::new(),
        }
    }

    /// The small job with `steps` steps, logging and checkpointing less often.
    pub fn with_steps(steps: i64) -> SaeJob {
        SaeJob {
            steps,
            checkpoint_every: (steps / 4).max(1),
            log_every: (steps / 50).max(1),
            ..SaeJob::small()
        }
    }

    /// The config in the TOML of cohort-spec (what `cohort train submit --config` reads).
    pub fn toml(&self) -> String {
        format!(
            "[model]\nd_in = {}\nd_sae = {}\n{}\n\
             [optim]\nlearning_rate = {:?}\nbatch_size = {}\nsteps = {}\nseed = {}\n\n\
             [checkpoint]\nevery_steps = {}\n\n\
             [data.synthetic]\nnum_samples = {}\nnum_features = {}\n\n\
             [runtime]\ndevice = \"cpu\"\nlog_every_steps = {}\n{}",
            self.d_in,
            self.d_sae,
            self.model_extra,
            self.learning_rate,
            self.batch_size,
            self.steps,
            self.seed,
            self.checkpoint_every,
            self.num_samples,
            self.num_features,
            self.log_every,
            self.tables,
        )
    }

    /// Writes the TOML to `dir/name` and returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.toml())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// The config, parsed and validated by cohort-spec.
    pub fn spec(&self) -> cohort_spec::TrainingConfig {
        let config = cohort_spec::TrainingConfig::from_toml(&self.toml()).expect("a valid config");
        config.validate().expect("a valid config");
        config
    }

    /// The config as the API's message.
    pub fn proto(&self) -> v1::TrainingConfig {
        v1::TrainingConfig::from(&self.spec())
    }
}

/// A CreateTrainingRequest for `job` on `count` GPUs.
pub fn create_request(job: &SaeJob, count: i32, queue: bool) -> v1::CreateTrainingRequest {
    v1::CreateTrainingRequest {
        config: Some(job.proto()),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(count)),
            queue: Some(queue),
            ..Default::default()
        }),
        ..Default::default()
    }
}

//! The JSON lines `cohort-rank` writes on stdout, one object per line, tagged by
//! `"event"`. Rank 0 alone emits job-level events (`started`, `progress`,
//! `validation`, `checkpoint`, `checkpoint_rejected`, `diverged`, `finished`);
//! every rank emits its own `rank_stats` and, when a collective fails,
//! `collective_error`. Anything on stdout that does not parse as one of these
//! is a log line, not an error. Losses and metrics are over the global batch
//! (all ranks); times are milliseconds. Fields added after a line's first
//! release default when absent, so stored lines of older ranks still parse.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ProgressLine {
    /// The group formed and training is about to start (rank 0).
    Started {
        world_size: i64,
        device: String,
        total_steps: i64,
        /// The step training starts from (> 0 after a resume).
        start_step: i64,
        global_batch: i64,
        parameters: i64,
    },
    /// Job-level progress (rank 0), every `runtime.log_every_steps` steps:
    /// the last step's losses and metrics, the window's throughput.
    Progress(Progress),
    /// The whole validation set evaluated at `step` (rank 0; sums over all ranks).
    Validation {
        step: i64,
        #[serde(deserialize_with = "nan_if_null")]
        loss: f64,
        #[serde(deserialize_with = "nan_if_null")]
        mse: f64,
        l0: f64,
        #[serde(deserialize_with = "nan_if_null")]
        explained_variance: f64,
        /// Latents that fired on no validation sample.
        dead_fraction: f64,
        samples: i64,
        /// Whether this is the lowest validation loss so far (kept as `best/`).
        best: bool,
    },
    /// One rank's own timing and memory, every `runtime.log_every_steps` steps.
    RankStats {
        rank: i64,
        step: i64,
        step_time_ms: f64,
        compute_ms: f64,
        comm_ms: f64,
        /// Device memory the CUDA caching allocator holds for tensors on a
        /// GPU, the host RSS on a CPU: see `memory_kind`.
        memory_bytes: u64,
        /// Time the step waited for its batch from the background reader
        /// (part of `compute_ms`'s complement: step = compute + comm + wait).
        #[serde(default)]
        data_wait_ms: f64,
        /// What `memory_bytes` counts: "cuda_allocated" or "host_rss".
        #[serde(default = "host_rss")]
        memory_kind: String,
        /// The rank's host RSS (on CPU the same as `memory_bytes`).
        #[serde(default)]
        host_memory_bytes: u64,
    },
    /// A rank finished training; its parameter checksum must match every other rank's.
    RankFinished {
        rank: i64,
        step: i64,
        param_checksum: String,
    },
    /// A complete checkpoint was written (rank 0); `best` for `best/`.
    Checkpoint {
        step: i64,
        path: String,
        #[serde(default)]
        best: bool,
    },
    /// A rank is still evaluating the validation set (every few seconds of
    /// a long validation, so the control plane sees it is alive).
    Validating {
        rank: i64,
        step: i64,
        /// Rows of its share done, and its share.
        samples: i64,
        of: i64,
    },
    /// A checkpoint failed its verification on restore and was skipped (rank 0).
    CheckpointRejected {
        step: i64,
        path: String,
        reason: String,
    },
    /// More than `optim.max_nonfinite_steps` non-finite steps in a row (rank
    /// 0); the rank exits DIVERGED (15).
    Diverged {
        step: i64,
        /// Non-finite steps in a row at the end.
        nonfinite_steps: i64,
        #[serde(deserialize_with = "nan_if_null")]
        loss: f64,
        #[serde(deserialize_with = "nan_if_null")]
        grad_norm: f64,
        learning_rate: f64,
    },
    /// A collective (gloo or NCCL) failed on this rank: a peer died or timed
    /// out. The rank exits PEER_LOST (11).
    CollectiveError {
        rank: i64,
        step: i64,
        message: String,
    },
    /// A program's progress or final line ([`crate::metrics`]): the step,
    /// and whatever else it reported.
    Metrics(crate::metrics::Metrics),
    /// Training ended normally (rank 0).
    Finished {
        step: i64,
        #[serde(deserialize_with = "nan_if_null")]
        loss: f64,
        /// Exact fingerprint of the final parameters (FNV-1a of their f32 bytes).
        param_checksum: String,
        wall_time_s: f64,
        mean_samples_per_sec: f64,
    },
}

/// A `progress` line: the last step's losses and metrics over the global
/// batch, the logging window's throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub step: i64,
    pub total_steps: i64,
    pub epoch: i64,
    /// mse + l1_coefficient (as scheduled) x l1 + aux_coefficient x aux.
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub mse: f64,
    /// Mean |z| over the batch's latents.
    #[serde(deserialize_with = "nan_if_null")]
    pub l1: f64,
    pub samples_per_sec: f64,
    pub step_time_ms: f64,
    /// The TopK auxiliary loss (0 when off).
    #[serde(default)]
    #[serde(deserialize_with = "nan_if_null")]
    pub aux: f64,
    /// The learning rate the step used.
    #[serde(default)]
    pub learning_rate: f64,
    /// The global gradient norm after the all-reduce, before clipping.
    #[serde(default)]
    #[serde(deserialize_with = "nan_if_null")]
    pub grad_norm: f64,
    /// Mean number of non-zero latents per sample.
    #[serde(default)]
    #[serde(deserialize_with = "nan_if_null")]
    pub l0: f64,
    /// 1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2 over the global batch.
    #[serde(default)]
    #[serde(deserialize_with = "nan_if_null")]
    pub explained_variance: f64,
    /// Latents that fired on none of the last `model.dead_window_samples` samples.
    #[serde(default)]
    pub dead_fraction: f64,
    /// Which samples the step read, over all ranks: 16 hex digits that
    /// depend only on the set of sample ids (not on the world size, the
    /// micro-batches or the order); empty when not measured.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub samples_digest: String,
    /// Non-finite steps skipped so far in the run.
    #[serde(default)]
    pub nonfinite_steps: i64,
    /// The f16 loss scale (1 for f32 and bf16).
    #[serde(default = "one")]
    pub loss_scale: f64,
    /// Mean time per step waiting for a batch in the window.
    #[serde(default)]
    pub data_wait_ms: f64,
}

impl Default for Progress {
    /// A line with nothing measured (tests build on it).
    fn default() -> Self {
        Self {
            step: 0,
            total_steps: 0,
            epoch: 0,
            loss: 0.0,
            mse: 0.0,
            l1: 0.0,
            samples_per_sec: 0.0,
            step_time_ms: 0.0,
            aux: 0.0,
            learning_rate: 0.0,
            grad_norm: 0.0,
            l0: 0.0,
            explained_variance: 0.0,
            dead_fraction: 0.0,
            samples_digest: String::new(),
            nonfinite_steps: 0,
            loss_scale: 1.0,
            data_wait_ms: 0.0,
        }
    }
}

impl ProgressLine {
    /// The `event` tag the line carries in JSON.
    pub fn event(&self) -> &'static str {
        match self {
            ProgressLine::Started { .. } => "started",
            ProgressLine::Progress(_) => "progress",
            ProgressLine::RankStats { .. } => "rank_stats",
            ProgressLine::RankFinished { .. } => "rank_finished",
            ProgressLine::Checkpoint { .. } => "checkpoint",
            ProgressLine::Finished { .. } => "finished",
            ProgressLine::Validation { .. } => "validation",
            ProgressLine::Validating { .. } => "validating",
            ProgressLine::CheckpointRejected { .. } => "checkpoint_rejected",
            ProgressLine::Diverged { .. } => "diverged",
            ProgressLine::CollectiveError { .. } => "collective_error",
            ProgressLine::Metrics(_) => "metrics",
        }
    }

    /// The line as a JSON object (for manifests).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("progress line serialises")
    }

    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("progress line serialises")
    }

    /// Parse one stdout line; `None` for anything that is not a progress
    /// line. A line that is not one of `cohort-rank`'s may still be a
    /// program's looser `progress` or `finished` line ([`crate::metrics`]).
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        serde_json::from_str(line)
            .ok()
            .or_else(|| crate::metrics::Metrics::parse(line).map(ProgressLine::Metrics))
    }
}

/// JSON has no NaN or infinity: serde_json writes them as `null`. A line
/// reporting a non-finite loss must still parse (as NaN), not pass for a log line.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn one() -> f64 {
    1.0
}

fn host_rss() -> String {
    "host_rss".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_logs_are_ignored() {
        let line = ProgressLine::Checkpoint {
            step: 100,
            path: "/tmp/x".into(),
            best: false,
        };
        let text = line.to_line();
        assert!(text.contains("\"event\":\"checkpoint\""), "{text}");
        assert_eq!(ProgressLine::parse(&text), Some(line));
        assert_eq!(ProgressLine::parse("warning: something"), None);
        assert_eq!(ProgressLine::parse("{\"event\":\"nope\"}"), None);
    }

    #[test]
    fn event_names_the_json_tag_of_every_variant() {
        let lines = [
            ProgressLine::Started {
                world_size: 1,
                device: "cpu".into(),
                total_steps: 1,
                start_step: 0,
                global_batch: 1,
                parameters: 1,
            },
            ProgressLine::Progress(Progress {
                step: 1,
                total_steps: 1,
                loss: 0.0,
                mse: 0.0,
                samples_per_sec: 0.0,
                step_time_ms: 0.0,
                ..Progress::default()
            }),
            ProgressLine::RankStats {
                rank: 0,
                step: 1,
                step_time_ms: 0.0,
                compute_ms: 0.0,
                comm_ms: 0.0,
                memory_bytes: 0,
                data_wait_ms: 0.0,
                memory_kind: "host_rss".into(),
                host_memory_bytes: 0,
            },
            ProgressLine::Validation {
                step: 1,
                loss: 0.0,
                mse: 0.0,
                l0: 0.0,
                explained_variance: 0.0,
                dead_fraction: 0.0,
                samples: 1,
                best: true,
            },
            ProgressLine::Validating {
                rank: 0,
                step: 1,
                samples: 1,
                of: 2,
            },
            ProgressLine::CheckpointRejected {
                step: 1,
                path: String::new(),
                reason: String::new(),
            },
            ProgressLine::Diverged {
                step: 1,
                nonfinite_steps: 11,
                loss: f64::NAN,
                grad_norm: 0.0,
                learning_rate: 0.0,
            },
            ProgressLine::CollectiveError {
                rank: 1,
                step: 1,
                message: String::new(),
            },
            ProgressLine::RankFinished {
                rank: 0,
                step: 1,
                param_checksum: String::new(),
            },
            ProgressLine::Checkpoint {
                step: 1,
                path: String::new(),
                best: false,
            },
            ProgressLine::Finished {
                step: 1,
                loss: 0.0,
                param_checksum: String::new(),
                wall_time_s: 0.0,
                mean_samples_per_sec: 0.0,
            },
        ];
        for line in lines {
            let json: serde_json::Value = serde_json::from_str(&line.to_line()).unwrap();
            assert_eq!(json["event"], line.event(), "{line:?}");
        }
    }

    #[test]
    fn a_non_finite_loss_parses_as_nan() {
        let line = ProgressLine::Diverged {
            step: 7,
            nonfinite_steps: 11,
            loss: f64::NAN,
            grad_norm: f64::INFINITY,
            learning_rate: 1e30,
        };
        let text = line.to_line();
        assert!(text.contains("\"loss\":null"), "{text}");
        match ProgressLine::parse(&text) {
            Some(ProgressLine::Diverged {
                loss, grad_norm, ..
            }) => {
                assert!(loss.is_nan() && grad_norm.is_nan())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_of_older_ranks_still_parse() {
        let old = r#"{"event":"progress","step":5,"total_steps":10,"epoch":0,"loss":1.0,"mse":0.9,"l1":100.0,"samples_per_sec":10.0,"step_time_ms":3.0}"#;
        match ProgressLine::parse(old) {
            Some(ProgressLine::Progress(Progress { loss_scale, l0, .. })) => {
                assert_eq!((loss_scale, l0), (1.0, 0.0))
            }
            other => panic!("{other:?}"),
        }
        let old = r#"{"event":"rank_stats","rank":0,"step":1,"step_time_ms":1.0,"compute_ms":1.0,"comm_ms":0.0,"memory_bytes":5}"#;
        assert!(matches!(
            ProgressLine::parse(old),
            Some(ProgressLine::RankStats { memory_kind, .. }) if memory_kind == "host_rss"
        ));
    }
}

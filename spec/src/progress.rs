//! The JSON lines `cohort-rank` writes on stdout, one object per line, tagged by
//! `"event"`. Rank 0 alone emits job-level events (`started`, `progress`,
//! `checkpoint`, `finished`); every rank emits its own `rank_stats`. Anything on
//! stdout that does not parse as one of these is a log line, not an error.
//! Losses are averaged across ranks; times are milliseconds.

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
    /// Job-level progress (rank 0), every `runtime.log_every_steps` steps.
    Progress {
        step: i64,
        total_steps: i64,
        epoch: i64,
        loss: f64,
        mse: f64,
        l1: f64,
        samples_per_sec: f64,
        step_time_ms: f64,
    },
    /// One rank's own timing and memory, every `runtime.log_every_steps` steps.
    RankStats {
        rank: i64,
        step: i64,
        step_time_ms: f64,
        compute_ms: f64,
        comm_ms: f64,
        memory_bytes: u64,
        /// Time the step waited for its batch from the background reader
        /// (part of `compute_ms`'s complement: step = compute + comm + wait).
        #[serde(default)]
        data_wait_ms: f64,
    },
    /// A rank finished training; its parameter checksum must match every other rank's.
    RankFinished {
        rank: i64,
        step: i64,
        param_checksum: String,
    },
    /// A complete checkpoint was written (rank 0).
    Checkpoint { step: i64, path: String },
    /// Training ended normally (rank 0).
    Finished {
        step: i64,
        loss: f64,
        /// Exact fingerprint of the final parameters (FNV-1a of their f32 bytes).
        param_checksum: String,
        wall_time_s: f64,
        mean_samples_per_sec: f64,
    },
}

impl ProgressLine {
    /// The `event` tag the line carries in JSON.
    pub fn event(&self) -> &'static str {
        match self {
            ProgressLine::Started { .. } => "started",
            ProgressLine::Progress { .. } => "progress",
            ProgressLine::RankStats { .. } => "rank_stats",
            ProgressLine::RankFinished { .. } => "rank_finished",
            ProgressLine::Checkpoint { .. } => "checkpoint",
            ProgressLine::Finished { .. } => "finished",
        }
    }

    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("progress line serialises")
    }

    /// Parse one stdout line; `None` for anything that is not a progress line.
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        serde_json::from_str(line).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_logs_are_ignored() {
        let line = ProgressLine::Checkpoint {
            step: 100,
            path: "/tmp/x".into(),
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
            ProgressLine::Progress {
                step: 1,
                total_steps: 1,
                epoch: 0,
                loss: 0.0,
                mse: 0.0,
                l1: 0.0,
                samples_per_sec: 0.0,
                step_time_ms: 0.0,
            },
            ProgressLine::RankStats {
                rank: 0,
                step: 1,
                step_time_ms: 0.0,
                compute_ms: 0.0,
                comm_ms: 0.0,
                memory_bytes: 0,
                data_wait_ms: 0.0,
            },
            ProgressLine::RankFinished {
                rank: 0,
                step: 1,
                param_checksum: String::new(),
            },
            ProgressLine::Checkpoint {
                step: 1,
                path: String::new(),
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
}

//! The coordinator's commands about ranks as the agent works with them:
//! checked and typed once, at the edge (`connect/convert.rs`), so nothing
//! past it reads a protobuf message or meets a negative rank.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use cohort_proto::error::Reason;
use cohort_spec::resume::Published;
use cohort_spec::Workload;

use crate::supervisor::RankKey;

/// This agent's share of an attempt.
#[derive(Debug, Clone)]
pub struct StartRanks {
    /// A safe name: it names the training's directories.
    pub training_id: String,
    /// From 1.
    pub attempt: u32,
    /// The training's config (written as the rank's `--config` file).
    pub workload: Workload,
    /// Ranks across all agents (≥ 1; every rank below it).
    pub world_size: u32,
    /// The sizes the training may be re-formed at, smallest and largest
    /// (both `world_size` for one that is never resized).
    pub world_sizes: (u32, u32),
    /// Rank 0's host and rendezvous port.
    pub master_addr: String,
    pub master_port: u16,
    /// The ranks this agent runs (at least one).
    pub ranks: Vec<RankAssignment>,
    /// The run directory relative to the work dir; `None`: the agent's
    /// default, `<work>/trainings/<id>/run`, shared by attempts.
    pub run_dir: Option<PathBuf>,
    /// W3C trace context of the coordinator's `training.start` span.
    pub trace_context: HashMap<String, String>,
    /// The checkpoints earlier attempts published: the only ones to resume from.
    pub published: Published,
    /// The training's team ("" without token auth).
    pub team: String,
    /// This agent's place among the attempt's agents, and how many there are.
    pub group_rank: u32,
    pub group_world_size: u32,
    /// The training's restart budget.
    pub max_restarts: u32,
    /// Each rank's host-memory limit; `None`: unbounded.
    pub host_memory_limit: Option<u64>,
}

/// One rank this agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankAssignment {
    pub rank: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
    /// A GPU of this agent.
    pub gpu_index: u32,
}

impl StartRanks {
    /// The supervisor's key of each rank, in command order.
    pub fn keys(&self) -> Vec<RankKey> {
        self.ranks
            .iter()
            .map(|r| RankKey::new(&self.training_id, self.attempt, r.rank))
            .collect()
    }
}

/// Stop a training's ranks (of one attempt, or all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRanks {
    pub training_id: String,
    /// `None`: every attempt.
    pub attempt: Option<u32>,
    /// SIGTERM-to-SIGKILL grace; `None`: the agent's `--stop-grace`.
    pub grace: Option<Duration>,
    pub reason: String,
}

/// Give an attempt's ranks a preemption notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeRanks {
    pub training_id: String,
    pub attempt: u32,
    /// How long they have to checkpoint; `None`: the agent's `--stop-grace`.
    pub grace: Option<Duration>,
    pub reason: String,
}

/// Why ranks cannot start: a stable reason when the training is at fault
/// and must not be retried (its data or program outside the roots, a config
/// the agent refuses), none when a restart elsewhere may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Option<Reason>,
    pub message: String,
}

impl Refusal {
    /// The host's failure: a restart may help.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            reason: None,
            message: message.into(),
        }
    }

    /// The training's own fault: no restart helps.
    pub fn refused(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            message: message.into(),
        }
    }
}

/// A rank that did not start, and why.
pub type StartFailure = (RankKey, Refusal);

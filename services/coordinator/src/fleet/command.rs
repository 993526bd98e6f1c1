//! What the coordinator tells an agent and what an agent answers to a file
//! read, as domain types: the agent session converts them to and from the
//! protobuf messages on the agent's stream.

use std::collections::HashMap;
use std::time::Duration;

/// One command for one agent.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentCommand {
    /// Start this agent's share of an attempt's ranks.
    StartRanks(Box<StartRanks>),
    /// Stop the ranks of an attempt (SIGTERM, then SIGKILL after `grace`).
    StopRanks {
        training_id: String,
        attempt: i32,
        grace: Duration,
        reason: String,
    },
    /// A preemption notice to the ranks of an attempt: the built-in rank
    /// checkpoints and exits PREEMPTED, a program gets SIGTERM and its
    /// notice file; SIGKILL after `grace`.
    NoticeRanks {
        training_id: String,
        attempt: i32,
        grace: Duration,
        reason: String,
    },
    /// The agent's rank events through this delivery number are stored.
    Ack { through: u64 },
    /// Read up to `length` bytes of `file` from `offset` (0: only its size).
    ReadFile {
        request_id: u64,
        file: FileRef,
        offset: u64,
        length: u32,
    },
    /// The live coordinators' `--advertise` URLs changed.
    Members(Vec<String>),
    /// Run the host doctor; the answer carries `request_id`.
    RunDoctor { request_id: u64 },
}

/// A file on an agent's host the coordinator may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRef {
    /// A checkpoint file, by the path its rank reported.
    Path(String),
    /// The files below a program's checkpoint directory (its path as
    /// reported), one per line.
    Listing(String),
    /// The log the agent keeps of one of its ranks (`previous`: the
    /// generation before the current one).
    RankLog {
        training_id: String,
        attempt: i32,
        rank: i32,
        previous: bool,
    },
}

/// An agent's share of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct StartRanks {
    pub training_id: String,
    pub attempt: i32,
    /// The training's config (the rank's `--config`).
    pub config: cohort_spec::Workload,
    pub world_size: i32,
    pub master_addr: String,
    pub master_port: u16,
    pub ranks: Vec<LocalRank>,
    /// W3C trace context of the coordinator's `training.start` span.
    pub trace_context: HashMap<String, String>,
    /// (attempt, step) of the earlier attempts' recorded checkpoints: the
    /// only ones the ranks may resume from.
    pub published_checkpoints: Vec<(i32, i64)>,
    /// The training's team (which of the agent's roots and env files apply).
    pub team: String,
    /// This agent's place among the attempt's agents (ordered by their
    /// first rank) and how many there are.
    pub group_rank: i32,
    pub group_world_size: i32,
    /// The training's restart budget.
    pub max_restarts: i32,
    /// Each rank's host-memory limit (0: unbounded).
    pub host_memory_limit_bytes: u64,
    /// The smallest and largest size the training may be re-formed at
    /// (`world_size` both for one that is never resized).
    pub world_sizes: (i32, i32),
}

/// One rank an agent runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRank {
    pub rank: i32,
    pub local_rank: i32,
    pub local_world_size: i32,
    pub gpu_index: i32,
    pub gpu_uuid: String,
}

/// An agent's answer to a [`AgentCommand::ReadFile`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileChunk {
    pub request_id: u64,
    pub data: Vec<u8>,
    pub file_size: u64,
    /// Why the read was refused; empty when it was not.
    pub error: String,
}

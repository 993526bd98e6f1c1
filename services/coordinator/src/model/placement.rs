//! Where a training's ranks run: one slot per rank, each on one GPU of one agent.

use super::{GpuRecord, RankState};

/// One rank of an attempt, placed on a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankSlot {
    pub rank: i32,
    pub agent_id: String,
    pub gpu_uuid: String,
    pub gpu_index: i32,
    /// Position among this training's ranks on the same agent.
    pub local_rank: i32,
    /// How many of this training's ranks run on the same agent.
    pub local_world_size: i32,
}

/// A stored rank of some attempt, with what is known of its process.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRecord {
    pub training_id: String,
    pub attempt: i32,
    pub slot: RankSlot,
    pub pid: Option<i64>,
    pub state: RankState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// The placement of one attempt: its ranks and rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub master_addr: String,
    pub master_port: u16,
    pub slots: Vec<RankSlot>,
}

/// A registered agent and its GPUs, as the agent described them.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRecord {
    pub id: String,
    pub name: String,
    pub host_name: String,
    pub address: String,
    pub version: String,
    pub connected: bool,
    pub gpus: Vec<GpuRecord>,
    pub connect_time: chrono::DateTime<chrono::Utc>,
    pub last_seen_time: chrono::DateTime<chrono::Utc>,
    /// The latest host doctor report, if one was ever made.
    pub last_doctor: Option<super::DoctorReport>,
    /// Why it is cordoned (no new placements); `None` when it is not.
    pub cordon_reason: Option<String>,
    /// While a drain runs: when it moves what is left at once.
    pub drain_deadline: Option<chrono::DateTime<chrono::Utc>>,
}

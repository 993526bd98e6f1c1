//! The business outcomes a write can have besides success: the request
//! names a row that is not there, or the state forbids it. Each message is
//! written here once and is what the client reads.

use crate::model::JobState;
use cohort_proto::error::{metadata, Metadata, Reason, ServiceError};
use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum LogicalError {
    #[error("training {0} not found")]
    TrainingNotFound(String),
    /// An event for a rank the training's attempt does not have.
    #[error("no rank {rank} of attempt {attempt} of training {training_id}")]
    RankNotFound {
        training_id: String,
        attempt: i32,
        rank: i32,
    },
    #[error("training {id} is {from}: it cannot become {to}")]
    IllegalTransition {
        id: String,
        from: JobState,
        to: JobState,
    },
    #[error(
        "request_id {request_id:?} was already used for a different request (training {existing})"
    )]
    RequestIdConflict {
        request_id: String,
        existing: String,
    },
    /// An agent registered a GPU bound to another agent (`owner`, by name).
    #[error("GPU {uuid} is bound to agent {owner}: an agent cannot claim another host's GPUs (a cluster-admin may ForgetAgent {owner} when the GPU really moved)")]
    GpuClaimed { uuid: String, owner: String },
    /// No GPU of that uuid was ever registered.
    #[error("no GPU {0} was ever registered")]
    GpuNotFound(String),
    /// ReleaseGpu of a GPU that is not quarantined.
    #[error("GPU {0} is not quarantined: there is nothing to release")]
    NotQuarantined(String),
    /// No agent of that name.
    #[error("no agent named {0} ever registered")]
    AgentNotFound(String),
    /// The agent is connected or holds ranks of a placed training.
    #[error("agent {name} {why}: it cannot be forgotten now")]
    AgentBusy { name: String, why: String },
    /// The team has as many QUEUED trainings as it may.
    #[error("team {team} already has {queued} queued trainings, its cap: wait for some to start or end, or ask for a higher cap")]
    QueueFull { team: String, queued: i64 },
    #[error("sweep {0} not found")]
    SweepNotFound(String),
    /// CancelSweep of a sweep that ended on its own.
    #[error("sweep {id} is {state}: it cannot be cancelled")]
    SweepEnded { id: String, state: &'static str },
    #[error("request_id {request_id:?} was already used for a different sweep ({existing})")]
    SweepRequestIdConflict {
        request_id: String,
        existing: String,
    },
}

impl ServiceError for LogicalError {
    fn code(&self) -> Code {
        match self {
            LogicalError::TrainingNotFound(_)
            | LogicalError::RankNotFound { .. }
            | LogicalError::GpuNotFound(_)
            | LogicalError::AgentNotFound(_)
            | LogicalError::SweepNotFound(_) => Code::NotFound,
            LogicalError::IllegalTransition { .. }
            | LogicalError::SweepEnded { .. }
            | LogicalError::NotQuarantined(_)
            | LogicalError::AgentBusy { .. } => Code::FailedPrecondition,
            LogicalError::RequestIdConflict { .. }
            | LogicalError::SweepRequestIdConflict { .. } => Code::AlreadyExists,
            LogicalError::GpuClaimed { .. } => Code::PermissionDenied,
            LogicalError::QueueFull { .. } => Code::ResourceExhausted,
        }
    }

    fn reason(&self) -> Reason {
        match self {
            LogicalError::TrainingNotFound(_) => Reason::TrainingNotFound,
            LogicalError::RankNotFound { .. } => Reason::InvalidArgument,
            LogicalError::IllegalTransition { .. }
            | LogicalError::NotQuarantined(_)
            | LogicalError::SweepEnded { .. } => Reason::IllegalTransition,
            LogicalError::RequestIdConflict { .. }
            | LogicalError::SweepRequestIdConflict { .. } => Reason::RequestIdConflict,
            LogicalError::SweepNotFound(_) => Reason::SweepNotFound,
            LogicalError::GpuClaimed { .. } => Reason::GpuClaimed,
            LogicalError::GpuNotFound(_) => Reason::GpuNotFound,
            LogicalError::AgentNotFound(_) => Reason::AgentNotFound,
            LogicalError::AgentBusy { .. } => Reason::AgentBusy,
            LogicalError::QueueFull { .. } => Reason::QueueFull,
        }
    }

    fn metadata(&self) -> Metadata {
        match self {
            LogicalError::TrainingNotFound(id) => metadata([("training_id", id.clone())]),
            LogicalError::RankNotFound {
                training_id,
                attempt,
                rank,
            } => metadata([
                ("training_id", training_id.clone()),
                ("attempt", attempt.to_string()),
                ("rank", rank.to_string()),
            ]),
            LogicalError::IllegalTransition { id, from, to } => metadata([
                ("training_id", id.clone()),
                ("state", from.to_string()),
                ("requested_state", to.to_string()),
            ]),
            LogicalError::RequestIdConflict {
                request_id,
                existing,
            } => metadata([
                ("request_id", request_id.clone()),
                ("training_id", existing.clone()),
            ]),
            LogicalError::GpuClaimed { uuid, owner } => {
                metadata([("gpu_uuid", uuid.clone()), ("agent", owner.clone())])
            }
            LogicalError::GpuNotFound(uuid) => metadata([("gpu_ids", uuid.clone())]),
            LogicalError::NotQuarantined(uuid) => metadata([("gpu_uuid", uuid.clone())]),
            LogicalError::AgentNotFound(name) | LogicalError::AgentBusy { name, .. } => {
                metadata([("agent", name.clone())])
            }
            LogicalError::QueueFull { team, queued } => {
                metadata([("team", team.clone()), ("queued", queued.to_string())])
            }
            LogicalError::SweepNotFound(id) => metadata([("sweep_id", id.clone())]),
            LogicalError::SweepEnded { id, state } => {
                metadata([("sweep_id", id.clone()), ("state", state.to_string())])
            }
            LogicalError::SweepRequestIdConflict {
                request_id,
                existing,
            } => metadata([
                ("request_id", request_id.clone()),
                ("sweep_id", existing.clone()),
            ]),
        }
    }

    fn log(&self) {
        if let LogicalError::GpuClaimed { uuid, owner } = self {
            tracing::warn!(gpu = %uuid, owner = %owner, "an agent registered a GPU bound to another agent");
        }
    }
}

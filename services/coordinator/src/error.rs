//! Why a call fails: the one closed set of failures every handler, the
//! auth layer and the leader gate answer with, plus any domain error that
//! says its own code, reason and metadata ([`ServiceError`]: the database's
//! business outcomes, a training that cannot be placed, a checkpoint that
//! cannot be exported). It lives below `api/` and imports no domain module,
//! so that any of them can name a failure; `api/error.rs` holds the one
//! table that turns each into the `tonic::Status` a client gets (code,
//! stable reason, details).

use crate::model::InvalidGpuRequest;
use cohort_proto::error::{Reason, ServiceError};
use cohort_spec::ConfigError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request field is invalid: INVALID_ARGUMENT with a field violation
    /// (`reason` is INVALID_ARGUMENT unless the field has its own).
    #[error("{field}: {description}")]
    Field {
        reason: Reason,
        field: String,
        description: String,
    },
    /// A request's training config (its `config` field) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    GpuRequest(#[from] InvalidGpuRequest),
    #[error("no agent has GPU {}", .0.join(", "))]
    GpusNotFound(Vec<String>),
    #[error("training {training_id} has {what}")]
    CheckpointNotFound { training_id: String, what: String },
    #[error("team {team} has no token named {name}")]
    TokenNotFound { team: String, name: String },
    #[error("team {team} already has a token named {name}")]
    TokenExists { team: String, name: String },
    #[error("team {team} has no webhook {id}")]
    WebhookNotFound { team: String, id: String },
    #[error("team {team} has {max} webhooks already: remove one first")]
    WebhooksFull { team: String, max: i64 },
    /// A domain error that says its own code, reason and metadata.
    #[error("{0}")]
    Service(Box<dyn ServiceError + Send + Sync>),
    /// No credentials, or ones that no longer authenticate.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller lacks `permission` (in `team`, when scoped to one).
    #[error("{message}")]
    PermissionDenied {
        message: String,
        permission: String,
        team: String,
    },
    /// Something of another team, or that does not exist (the same answer
    /// to a caller scoped to a team). The audit row names `what` and its
    /// `owner` team; the caller sees neither.
    #[error("{what} belongs to another team")]
    NotYours {
        what: String,
        caller_team: String,
        owner: String,
    },
    /// A priority class above the team's cap.
    #[error(
        "team {team} may use priority classes up to {max} (value {max_value}); {class} is {value}"
    )]
    PriorityClassNotAllowed {
        team: String,
        class: String,
        value: i32,
        max: String,
        max_value: i32,
    },
    #[error(
        "this agent's certificate is for {certificate:?}: it cannot register as {agent_name:?}"
    )]
    AgentIdentityMismatch {
        certificate: String,
        agent_name: String,
    },
    #[error("{}", agent_name_message(.issuer, .certificate, .allowed))]
    AgentNameNotAllowed {
        certificate: String,
        issuer: String,
        allowed: Vec<String>,
    },
    /// The agent that ran a rank is not connected and the rank kept no
    /// lines at its exit.
    #[error("agent {agent}, which ran rank {rank}, is not connected and the rank kept no lines: its log is on that host")]
    AgentNotConnected { agent: String, rank: i32 },
    #[error("this token already holds {0} streams open: close some first")]
    TooManyStreams(usize),
    /// RunDoctor of an agent that has no session now.
    #[error("agent {0} is not connected: the doctor runs on a connected agent")]
    DoctorAgentOffline(String),
    /// RunDoctor while a doctor already runs there (or too many run).
    #[error("{0}")]
    DoctorBusy(String),
    /// The agent did not answer RunDoctor in time.
    #[error("agent {agent} did not answer within {} s (the doctor may still be running there)", .timeout.as_secs())]
    DoctorTimeout { agent: String, timeout: Duration },
    /// The agent could not run its doctor.
    #[error("agent {agent} could not run its doctor: {reason}")]
    DoctorFailed { agent: String, reason: String },
    /// A call the leader serves reached a standby (`leader`: where to send
    /// it, when one leads).
    #[error("{}", not_leader_message(.method, .leader.as_deref()))]
    NotLeader {
        method: String,
        leader: Option<String>,
    },
    #[error("no Register within {} s of connecting", .0.as_secs())]
    RegisterTimeout(Duration),
    /// A dependency that may come back (retry later); the message says
    /// what could not be done, never the internals.
    #[error("{0}")]
    Unavailable(String),
    /// A server-side fault; logged where it happens.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// INVALID_ARGUMENT for request field `field`.
    pub fn field(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self::field_with(Reason::InvalidArgument, field, description)
    }

    /// INVALID_ARGUMENT for request field `field`, with its own reason.
    pub fn field_with(
        reason: Reason,
        field: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        ApiError::Field {
            reason,
            field: field.into(),
            description: description.into(),
        }
    }

    /// A domain error, as it says it is shown.
    pub fn service(err: impl ServiceError + Send + Sync + 'static) -> Self {
        ApiError::Service(Box::new(err))
    }
}

/// `?` on a domain result in a handler: each [`ServiceError`] the handlers
/// meet gets its `From<…> for ApiError` beside its own type, in one line
/// (`crate::error::from_service_errors!(DatabaseError, LogicalError);`).
macro_rules! from_service_errors {
    ($($ty:path),* $(,)?) => {$(
        impl From<$ty> for $crate::error::ApiError {
            fn from(err: $ty) -> Self {
                $crate::error::ApiError::service(err)
            }
        }
    )*};
}
pub(crate) use from_service_errors;

fn agent_name_message(issuer: &str, certificate: &str, allowed: &[String]) -> String {
    if allowed.is_empty() {
        format!("the CA {issuer:?} that issued this agent's certificate may certify no agent here")
    } else {
        format!(
            "the CA {issuer:?} may certify agents named {} only, not {certificate:?}",
            allowed.join(", ")
        )
    }
}

fn not_leader_message(method: &str, leader: Option<&str>) -> String {
    match leader {
        Some(url) => format!("this coordinator is a standby: send {method} to the leader at {url}"),
        None => format!(
            "no coordinator leads right now (an election is under way): retry {method} in a few seconds"
        ),
    }
}

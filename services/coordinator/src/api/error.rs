//! The one error table of the gRPC services: every failure a handler, the
//! auth layer or the leader gate meets is an [`ApiError`] (defined below
//! `api/`, in `crate::error`), and this file is the one place an
//! [`ApiError`] becomes the `tonic::Status` a client gets — a precise code
//! and a `google.rpc.ErrorInfo` whose stable reason comes from
//! [`cohort_proto::error::reason`], the only place reason strings are
//! spelled; field violations as `google.rpc.BadRequest`.

pub use crate::error::ApiError;
use crate::export::ExportError;
use crate::persistence::DatabaseError;
use crate::policy::placement::Unplaceable;
use cohort_proto::error::{bad_field, invalid_config, reason, status};
use tonic::{Code, Status};

type Meta = Vec<(String, String)>;

fn meta<const N: usize>(pairs: [(&str, String); N]) -> Meta {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

impl Unplaceable {
    /// The ErrorInfo metadata: what a client needs to act on it.
    fn metadata(&self) -> (&'static str, String) {
        match self {
            Unplaceable::NoAgents => ("agents", "0".into()),
            Unplaceable::InsufficientGpus { wanted, free } => {
                ("missing", wanted.saturating_sub(*free).to_string())
            }
            Unplaceable::Busy(ids) | Unplaceable::Unknown(ids) => ("gpu_ids", ids.join(",")),
            Unplaceable::NotSuitable(why) | Unplaceable::WaitingForHealthy(why) => {
                ("why", why.clone())
            }
            Unplaceable::OutsideProgramRoots(dir) => ("working_dir", dir.clone()),
        }
    }
}

impl From<ApiError> for Status {
    fn from(err: ApiError) -> Self {
        let message = err.to_string();
        match err {
            ApiError::Field {
                reason,
                field,
                description,
            } => bad_field(reason, &field, description),
            ApiError::Config(e) => invalid_config(&e, "config."),
            ApiError::GpuRequest(e) => bad_field(reason::INVALID_ARGUMENT, e.field, e.reason),
            ApiError::TrainingNotFound(id) => status(
                Code::NotFound,
                reason::TRAINING_NOT_FOUND,
                message,
                meta([("training_id", id)]),
            ),
            ApiError::GpusNotFound(ids) => status(
                Code::NotFound,
                reason::GPU_NOT_FOUND,
                message,
                meta([("gpu_ids", ids.join(","))]),
            ),
            ApiError::CheckpointNotFound { training_id, .. } => status(
                Code::NotFound,
                reason::CHECKPOINT_NOT_FOUND,
                message,
                meta([("training_id", training_id)]),
            ),
            ApiError::TokenNotFound { team, name } => status(
                Code::NotFound,
                reason::TOKEN_NOT_FOUND,
                message,
                meta([("team", team), ("name", name)]),
            ),
            ApiError::TokenExists { team, name } => status(
                Code::AlreadyExists,
                reason::TOKEN_EXISTS,
                message,
                meta([("team", team), ("name", name)]),
            ),
            ApiError::Unplaceable(why) => {
                let code = match why {
                    Unplaceable::Unknown(_) => Code::NotFound,
                    _ => Code::FailedPrecondition,
                };
                let (key, value) = why.metadata();
                status(code, why.reason(), message, meta([(key, value)]))
            }
            ApiError::Database(e) => from_database(e),
            ApiError::Export {
                training_id,
                step,
                error,
            } => from_export(training_id, step, error),
            ApiError::Unauthenticated(_) => {
                status(Code::Unauthenticated, reason::UNAUTHENTICATED, message, [])
            }
            ApiError::PermissionDenied {
                permission, team, ..
            } => permission_denied(message, permission, team),
            ApiError::NotYours {
                what,
                caller_team,
                owner,
            } => {
                let mut status = permission_denied(message, "team".into(), caller_team);
                crate::auth::audit_target::attach(&mut status, &what, &owner);
                status
            }
            ApiError::AgentIdentityMismatch {
                certificate,
                agent_name,
            } => status(
                Code::PermissionDenied,
                reason::AGENT_IDENTITY_MISMATCH,
                message,
                meta([("certificate", certificate), ("agent_name", agent_name)]),
            ),
            ApiError::AgentNameNotAllowed {
                certificate,
                issuer,
                ..
            } => status(
                Code::PermissionDenied,
                reason::AGENT_NAME_NOT_ALLOWED,
                message,
                meta([("certificate", certificate), ("issuer", issuer)]),
            ),
            ApiError::PriorityClassNotAllowed {
                team, class, max, ..
            } => status(
                Code::PermissionDenied,
                reason::PRIORITY_CLASS_NOT_ALLOWED,
                message,
                meta([
                    ("priority_class", class),
                    ("max_priority_class", max),
                    ("team", team),
                ]),
            ),
            ApiError::AgentNotConnected { agent, rank } => status(
                Code::FailedPrecondition,
                reason::AGENT_NOT_CONNECTED,
                message,
                meta([("agent", agent), ("rank", rank.to_string())]),
            ),
            ApiError::DoctorAgentOffline(agent) => status(
                Code::FailedPrecondition,
                reason::AGENT_NOT_CONNECTED,
                message,
                meta([("agent", agent)]),
            ),
            ApiError::DoctorBusy(_) => {
                status(Code::ResourceExhausted, reason::AGENT_BUSY, message, [])
            }
            ApiError::DoctorTimeout { agent, timeout } => status(
                Code::DeadlineExceeded,
                reason::DOCTOR_TIMEOUT,
                message,
                meta([
                    ("agent", agent),
                    ("timeout_s", timeout.as_secs().to_string()),
                ]),
            ),
            ApiError::DoctorFailed { agent, .. } => status(
                Code::Unavailable,
                reason::INTERNAL,
                message,
                meta([("agent", agent)]),
            ),
            ApiError::TooManyStreams(_) => status(
                Code::ResourceExhausted,
                reason::TOO_MANY_STREAMS,
                message,
                [],
            ),
            ApiError::NotLeader { leader, .. } => status(
                Code::Unavailable,
                reason::NOT_LEADER,
                message,
                leader.map(|url| ("leader".to_string(), url)),
            ),
            ApiError::RegisterTimeout(_) => Status::deadline_exceeded(message),
            ApiError::Unavailable(_) => status(Code::Unavailable, reason::INTERNAL, message, []),
            ApiError::Internal(_) => status(Code::Internal, reason::INTERNAL, message, []),
        }
    }
}

/// PERMISSION_DENIED with reason PERMISSION_DENIED and what was missing.
fn permission_denied(message: String, permission: String, team: String) -> Status {
    let mut meta = vec![("permission".to_string(), permission)];
    if !team.is_empty() {
        meta.push(("team".to_string(), team));
    }
    status(
        Code::PermissionDenied,
        reason::PERMISSION_DENIED,
        message,
        meta,
    )
}

/// A checkpoint that cannot be exported: unreachable is the caller's to
/// fix (shared storage), the rest is logged.
fn from_export(training_id: String, step: i64, err: ExportError) -> Status {
    let message = err.to_string();
    let meta = meta([
        ("training_id", training_id.clone()),
        ("step", step.to_string()),
    ]);
    match err {
        ExportError::Unreachable(_) => status(
            Code::FailedPrecondition,
            reason::CHECKPOINT_UNREACHABLE,
            format!(
                "{message}, and its agent is not connected; give trainings shared checkpoint.storage (a shared path or s3://bucket/prefix) to download checkpoints whatever happens to their hosts"
            ),
            meta,
        ),
        ExportError::Storage(_) => {
            tracing::warn!(training_id, step, error = %message, "checkpoint storage failed");
            status(Code::Unavailable, reason::INTERNAL, message, meta)
        }
        ExportError::Malformed(_) => {
            tracing::error!(training_id, step, error = %message, "checkpoint cannot be exported");
            status(Code::Internal, reason::INTERNAL, message, meta)
        }
    }
}

/// The database's part of the table: what the client may act on has its
/// reason; a server-side failure is logged and says no more.
fn from_database(err: DatabaseError) -> Status {
    match err {
        DatabaseError::TrainingNotFound(id) => ApiError::TrainingNotFound(id).into(),
        DatabaseError::QueueFull { team, queued } => status(
            Code::ResourceExhausted,
            reason::QUEUE_FULL,
            format!("team {team} already has {queued} queued trainings, its cap: wait for some to start or end, or ask for a higher cap"),
            [("team".to_string(), team), ("queued".to_string(), queued.to_string())],
        ),
        DatabaseError::GpuClaimed { uuid, owner } => {
            tracing::warn!(gpu = %uuid, owner = %owner, "an agent registered a GPU bound to another agent");
            status(
                Code::PermissionDenied,
                reason::GPU_CLAIMED,
                format!("GPU {uuid} is bound to agent {owner}: an agent cannot claim another host's GPUs (a cluster-admin may ForgetAgent {owner} when the GPU really moved)"),
                [("gpu_uuid".to_string(), uuid), ("agent".to_string(), owner)],
            )
        }
        DatabaseError::GpuNotFound(uuid) => status(
            Code::NotFound,
            reason::GPU_NOT_FOUND,
            format!("no GPU {uuid} was ever registered"),
            [("gpu_ids".to_string(), uuid)],
        ),
        DatabaseError::NotQuarantined(uuid) => status(
            Code::FailedPrecondition,
            reason::ILLEGAL_TRANSITION,
            format!("GPU {uuid} is not quarantined: there is nothing to release"),
            [("gpu_uuid".to_string(), uuid)],
        ),
        DatabaseError::AgentNotFound(name) => status(
            Code::NotFound,
            reason::AGENT_NOT_FOUND,
            format!("no agent named {name} ever registered"),
            [("agent".to_string(), name)],
        ),
        DatabaseError::AgentBusy { name, why } => status(
            Code::FailedPrecondition,
            reason::AGENT_BUSY,
            format!("agent {name} {why}: it cannot be forgotten now"),
            [("agent".to_string(), name)],
        ),
        DatabaseError::IllegalTransition { id, from, to } => status(
            Code::FailedPrecondition,
            reason::ILLEGAL_TRANSITION,
            format!("training {id} is {from}: it cannot become {to}"),
            [
                ("training_id".to_string(), id),
                ("state".to_string(), from.to_string()),
                ("requested_state".to_string(), to.to_string()),
            ],
        ),
        DatabaseError::RequestIdConflict {
            request_id,
            existing,
        } => status(
            Code::AlreadyExists,
            reason::REQUEST_ID_CONFLICT,
            format!(
                "request_id {request_id:?} was already used for a different request (training {existing})"
            ),
            [
                ("request_id".to_string(), request_id),
                ("training_id".to_string(), existing),
            ],
        ),
        err @ (DatabaseError::NotLeader | DatabaseError::Deposed { .. }) => {
            tracing::warn!(error = %err, "a change reached a coordinator that does not lead");
            status(
                Code::Unavailable,
                reason::NOT_LEADER,
                format!("{err}: retry on the leader"),
                [],
            )
        }
        err if err.is_unavailable() => {
            tracing::error!(error = %err, "database unavailable");
            status(
                Code::Unavailable,
                reason::INTERNAL,
                "the database is unavailable",
                [],
            )
        }
        err => {
            tracing::error!(error = %err, "database operation failed");
            status(Code::Internal, reason::INTERNAL, "internal database error", [])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use cohort_proto::error::reason_of;

    fn of(err: impl Into<ApiError>) -> Status {
        Status::from(err.into())
    }

    #[test]
    fn database_errors_have_codes_and_reasons() {
        let s = of(DatabaseError::TrainingNotFound("trn-x".into()));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::TRAINING_NOT_FOUND));
        let s = of(DatabaseError::IllegalTransition {
            id: "trn-x".into(),
            from: JobState::Succeeded,
            to: JobState::Cancelled,
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::ILLEGAL_TRANSITION));
        let s = of(DatabaseError::Corrupt("x".into()));
        assert_eq!(s.code(), Code::Internal);
        assert!(
            !s.message().contains('x'),
            "no internals leak: {}",
            s.message()
        );
        let s = of(DatabaseError::Pool("timed out".into()));
        assert_eq!(s.code(), Code::Unavailable);
    }

    /// The pending reason of a waiting training and the ErrorInfo reason of
    /// a refused create come from one table, so they can't disagree.
    #[test]
    fn a_placement_failure_has_one_reason_everywhere() {
        let all = [
            Unplaceable::NoAgents,
            Unplaceable::InsufficientGpus { wanted: 4, free: 2 },
            Unplaceable::Busy(vec!["GPU-1".into()]),
            Unplaceable::Unknown(vec!["GPU-9".into()]),
            Unplaceable::NotSuitable("too little memory".into()),
            Unplaceable::WaitingForHealthy("GPU-1 has ECC errors".into()),
        ];
        for why in all {
            let pending = why.to_string();
            let s = of(why.clone());
            let reason = reason_of(&s).unwrap();
            assert!(
                pending.starts_with(&format!("{reason}: ")),
                "{pending} vs {reason}"
            );
            assert!(cohort_proto::error::reason::ALL.contains(&reason.as_str()));
        }
        let s = of(Unplaceable::WaitingForHealthy("x".into()));
        assert_eq!(reason_of(&s).as_deref(), Some(reason::GPU_UNHEALTHY));
        let s = of(Unplaceable::NoAgents);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::NO_AGENTS));
        assert_eq!(s.code(), Code::FailedPrecondition);
    }
}

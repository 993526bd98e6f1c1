//! The one error table of the gRPC services: every failure a handler, the
//! auth layer or the leader gate meets is an [`ApiError`] (defined below
//! `api/`, in `crate::error`), and this file is the one place an
//! [`ApiError`] becomes the `tonic::Status` a client gets — a precise code
//! and a `google.rpc.ErrorInfo` whose stable reason is a
//! [`cohort_proto::error::Reason`]; field violations as
//! `google.rpc.BadRequest`. A domain error ([`ApiError::Service`]) says its
//! own code, reason and metadata through `ServiceError`.

pub use crate::error::ApiError;
use cohort_proto::error::{bad_field, invalid_config, metadata as meta, status, Reason};
use tonic::{Code, Status};

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
            ApiError::GpuRequest(e) => bad_field(Reason::InvalidArgument, e.field, e.reason),
            ApiError::GpusNotFound(ids) => status(
                Code::NotFound,
                Reason::GpuNotFound,
                message,
                meta([("gpu_ids", ids.join(","))]),
            ),
            ApiError::CheckpointNotFound { training_id, .. } => status(
                Code::NotFound,
                Reason::CheckpointNotFound,
                message,
                meta([("training_id", training_id)]),
            ),
            ApiError::TokenNotFound { team, name } => status(
                Code::NotFound,
                Reason::TokenNotFound,
                message,
                meta([("team", team), ("name", name)]),
            ),
            ApiError::TokenExists { team, name } => status(
                Code::AlreadyExists,
                Reason::TokenExists,
                message,
                meta([("team", team), ("name", name)]),
            ),
            ApiError::WebhookNotFound { team, id } => status(
                Code::NotFound,
                Reason::WebhookNotFound,
                message,
                meta([("team", team), ("id", id)]),
            ),
            ApiError::WebhooksFull { team, max } => status(
                Code::ResourceExhausted,
                Reason::WebhooksFull,
                message,
                meta([("team", team), ("max", max.to_string())]),
            ),
            ApiError::Service(e) => e.to_status(),
            ApiError::Unauthenticated(_) => {
                status(Code::Unauthenticated, Reason::Unauthenticated, message, [])
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
                Reason::AgentIdentityMismatch,
                message,
                meta([("certificate", certificate), ("agent_name", agent_name)]),
            ),
            ApiError::AgentNameNotAllowed {
                certificate,
                issuer,
                ..
            } => status(
                Code::PermissionDenied,
                Reason::AgentNameNotAllowed,
                message,
                meta([("certificate", certificate), ("issuer", issuer)]),
            ),
            ApiError::PriorityClassNotAllowed {
                team, class, max, ..
            } => status(
                Code::PermissionDenied,
                Reason::PriorityClassNotAllowed,
                message,
                meta([
                    ("priority_class", class),
                    ("max_priority_class", max),
                    ("team", team),
                ]),
            ),
            ApiError::AgentNotConnected { agent, rank } => status(
                Code::FailedPrecondition,
                Reason::AgentNotConnected,
                message,
                meta([("agent", agent), ("rank", rank.to_string())]),
            ),
            ApiError::DoctorAgentOffline(agent) => status(
                Code::FailedPrecondition,
                Reason::AgentNotConnected,
                message,
                meta([("agent", agent)]),
            ),
            ApiError::DoctorBusy(_) => {
                status(Code::ResourceExhausted, Reason::AgentBusy, message, [])
            }
            ApiError::DoctorTimeout { agent, timeout } => status(
                Code::DeadlineExceeded,
                Reason::DoctorTimeout,
                message,
                meta([
                    ("agent", agent),
                    ("timeout_s", timeout.as_secs().to_string()),
                ]),
            ),
            ApiError::DoctorFailed { agent, .. } => status(
                Code::Unavailable,
                Reason::Internal,
                message,
                meta([("agent", agent)]),
            ),
            ApiError::TooManyStreams(_) => {
                status(Code::ResourceExhausted, Reason::TooManyStreams, message, [])
            }
            ApiError::NotLeader { leader, .. } => status(
                Code::Unavailable,
                Reason::NotLeader,
                message,
                leader.map(|url| ("leader".to_string(), url)),
            ),
            ApiError::RegisterTimeout(_) => Status::deadline_exceeded(message),
            ApiError::Unavailable(_) => status(Code::Unavailable, Reason::Internal, message, []),
            ApiError::Internal(_) => status(Code::Internal, Reason::Internal, message, []),
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
        Reason::PermissionDenied,
        message,
        meta,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::persistence::{DatabaseError, LogicalError};
    use crate::policy::placement::Unplaceable;
    use cohort_proto::error::reason_of;

    fn of(err: impl Into<ApiError>) -> Status {
        Status::from(err.into())
    }

    #[test]
    fn database_errors_have_codes_and_reasons() {
        let s = of(DatabaseError::from(LogicalError::TrainingNotFound(
            "trn-x".into(),
        )));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(reason_of(&s), Some(Reason::TrainingNotFound));
        let s = of(DatabaseError::from(LogicalError::IllegalTransition {
            id: "trn-x".into(),
            from: JobState::Succeeded,
            to: JobState::Cancelled,
        }));
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(reason_of(&s), Some(Reason::IllegalTransition));
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
            assert!(Reason::ALL.contains(&reason));
        }
        let s = of(Unplaceable::WaitingForHealthy("x".into()));
        assert_eq!(reason_of(&s), Some(Reason::GpuUnhealthy));
        let s = of(Unplaceable::NoAgents);
        assert_eq!(reason_of(&s), Some(Reason::NoAgents));
        assert_eq!(s.code(), Code::FailedPrecondition);
    }
}

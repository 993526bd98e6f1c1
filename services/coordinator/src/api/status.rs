//! Persistence errors as gRPC statuses, each with a stable ErrorInfo reason.

use crate::persistence::DatabaseError;
use cohort_proto::error::{reason, status};
use tonic::{Code, Status};

/// The status a persistence error answers with. Server-side failures are
/// logged here, with the operation that hit them.
pub fn from_db(op: &'static str, err: DatabaseError) -> Status {
    match err {
        DatabaseError::TrainingNotFound(id) => status(
            Code::NotFound,
            reason::TRAINING_NOT_FOUND,
            format!("training {id} not found"),
            [("training_id".to_string(), id)],
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
        err @ (DatabaseError::Connect(_) | DatabaseError::Pool(_) | DatabaseError::Task(_)) => {
            tracing::error!(op, error = %err, "database unavailable");
            status(
                Code::Unavailable,
                reason::INTERNAL,
                "the database is unavailable",
                [],
            )
        }
        err => {
            tracing::error!(op, error = %err, "database operation failed");
            status(Code::Internal, reason::INTERNAL, "internal database error", [])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use cohort_proto::error::reason_of;

    #[test]
    fn codes_and_reasons() {
        let s = from_db("t", DatabaseError::TrainingNotFound("trn-x".into()));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::TRAINING_NOT_FOUND));
        let s = from_db(
            "t",
            DatabaseError::IllegalTransition {
                id: "trn-x".into(),
                from: JobState::Succeeded,
                to: JobState::Cancelled,
            },
        );
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::ILLEGAL_TRANSITION));
        let s = from_db("t", DatabaseError::Corrupt("x".into()));
        assert_eq!(s.code(), Code::Internal);
    }
}

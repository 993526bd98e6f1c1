//! What can go wrong in the persistence layer.

use crate::model::JobState;

#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("database pool: {0}")]
    Pool(String),
    #[error("database migrations failed: {0}")]
    Migration(String),
    #[error("database query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("training {0} not found")]
    TrainingNotFound(String),
    #[error("training {id} cannot go from {from} to {to}")]
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
    /// The team has as many QUEUED trainings as it may.
    #[error("team {team} already has {queued} queued trainings, its cap")]
    QueueFull { team: String, queued: i64 },
    /// The row changed under a conditional update; the operation is retried.
    #[error("concurrent update of {0}")]
    Conflict(String),
    /// The request names a row that is not there, or breaks an invariant:
    /// running it again cannot help, so it is never retried.
    #[error("{0}")]
    Logical(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A write on a standby coordinator (it does not lead).
    #[error("this coordinator does not lead; changes go to the leader")]
    NotLeader,
    /// The lease moved on: another coordinator leads since this one's
    /// epoch; the write was refused in its own transaction.
    #[error("this coordinator was deposed (its epoch {epoch} is over); changes go to the leader")]
    Deposed { epoch: i64 },
    #[error("database task failed: {0}")]
    Task(String),
}

impl DatabaseError {
    /// Worth running the whole transaction again: a serialization failure
    /// (PostgreSQL), a busy or stale snapshot (SQLite), or a lost race on a
    /// conditional update.
    pub fn is_retryable(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            DatabaseError::Conflict(_) => true,
            DatabaseError::Query(Error::DatabaseError(kind, info)) => {
                matches!(kind, DatabaseErrorKind::SerializationFailure)
                    || info.message().contains("database is locked")
                    || info.message().contains("database is busy")
            }
            _ => false,
        }
    }

    /// The database could not be reached (or the connection broke): worth
    /// trying again later, unlike a failed query.
    pub fn is_unavailable(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            DatabaseError::Connect(_) | DatabaseError::Pool(_) | DatabaseError::Task(_) => true,
            DatabaseError::Query(Error::DatabaseError(kind, _)) => matches!(
                kind,
                DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand
            ),
            _ => false,
        }
    }

    /// A unique constraint was violated.
    pub fn is_unique_violation(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        matches!(
            self,
            DatabaseError::Query(Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _))
        )
    }
}

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
    /// An agent registered a GPU bound to another agent (`owner`, by name).
    #[error("GPU {uuid} is bound to agent {owner}")]
    GpuClaimed { uuid: String, owner: String },
    /// No GPU of that uuid was ever registered.
    #[error("no GPU {0} was ever registered")]
    GpuNotFound(String),
    /// ReleaseGpu of a GPU that is not quarantined.
    #[error("GPU {0} is not quarantined")]
    NotQuarantined(String),
    /// No agent of that name.
    #[error("no agent named {0}")]
    AgentNotFound(String),
    /// The agent is connected or holds ranks of a placed training.
    #[error("agent {name} {why}")]
    AgentBusy { name: String, why: String },
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

    /// Shared by every create of a batch that failed with it: this
    /// coordinator does not lead, the database is out of reach, or it stayed
    /// busy through every attempt. (Other failures may be one create's
    /// doing: its batch is written again one by one.)
    pub fn is_shared(&self) -> bool {
        match self {
            DatabaseError::NotLeader
            | DatabaseError::Deposed { .. }
            | DatabaseError::Connect(_)
            | DatabaseError::Pool(_) => true,
            // A panic in one create's work is that create's.
            DatabaseError::Task(_) => false,
            // Still busy or conflicting after every attempt: so would each
            // create alone be, after as long again.
            _ => self.is_unavailable() || self.is_retryable(),
        }
    }

    /// An error that reads and classifies like this one (diesel's errors
    /// cannot be cloned), for answering several callers with one failure.
    pub fn replica(&self) -> DatabaseError {
        use diesel::result::Error;
        match self {
            DatabaseError::NotLeader => DatabaseError::NotLeader,
            DatabaseError::Deposed { epoch } => DatabaseError::Deposed { epoch: *epoch },
            DatabaseError::Connect(m) => DatabaseError::Connect(m.clone()),
            DatabaseError::Pool(m) => DatabaseError::Pool(m.clone()),
            DatabaseError::Task(m) => DatabaseError::Task(m.clone()),
            DatabaseError::Conflict(m) => DatabaseError::Conflict(m.clone()),
            DatabaseError::Query(Error::DatabaseError(kind, info)) => DatabaseError::Query(
                Error::DatabaseError(*kind, Box::new(info.message().to_string())),
            ),
            other => DatabaseError::Task(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseError;
    use diesel::result::{DatabaseErrorKind, Error};

    fn query(kind: DatabaseErrorKind, message: &str) -> DatabaseError {
        DatabaseError::Query(Error::DatabaseError(kind, Box::new(message.to_string())))
    }

    #[test]
    fn a_batch_wide_failure_is_copied_with_its_class_and_message() {
        let shared = [
            DatabaseError::NotLeader,
            DatabaseError::Deposed { epoch: 3 },
            DatabaseError::Pool("timed out waiting for connection".into()),
            query(
                DatabaseErrorKind::ClosedConnection,
                "server closed the connection",
            ),
        ];
        for e in shared {
            let copy = e.replica();
            assert!(e.is_shared() && copy.is_shared(), "{e}");
            assert_eq!(copy.to_string(), e.to_string());
            assert_eq!(copy.is_unavailable(), e.is_unavailable(), "{e}");
        }
        assert!(matches!(
            DatabaseError::Deposed { epoch: 3 }.replica(),
            DatabaseError::Deposed { epoch: 3 }
        ));
        // One create's own failures are not shared: its batch is written one by one.
        let own = [
            query(DatabaseErrorKind::UniqueViolation, "duplicate key"),
            DatabaseError::QueueFull {
                team: "nlp".into(),
                queued: 5,
            },
            DatabaseError::Corrupt("bad json".into()),
            DatabaseError::Task("task panicked".into()),
        ];
        let task = DatabaseError::Task("task panicked".into());
        assert_eq!(task.replica().to_string(), task.to_string());
        for e in own {
            assert!(!e.is_shared(), "{e}");
        }
    }
}

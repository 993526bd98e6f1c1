//! What can go wrong in the persistence layer: technical failures (the
//! database, a conflict, corrupt data, a deposed leader), and one
//! [`DatabaseError::Logical`] kind for the business outcomes a request
//! causes ([`LogicalError`], in `logical.rs`).

pub use super::logical::LogicalError;
use cohort_proto::error::{Metadata, Reason, ServiceError};
use tonic::Code;

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
    /// A business outcome the request caused: refused, with what the
    /// client needs to act on it. Never retried.
    #[error(transparent)]
    Logical(#[from] LogicalError),
    /// The row changed under a conditional update; the operation is retried.
    #[error("concurrent update of {0}")]
    Conflict(String),
    /// A broken invariant of the stored data or the code: running it
    /// again cannot help, so it is never retried.
    #[error("{0}")]
    Invariant(String),
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

crate::error::from_service_errors!(DatabaseError, LogicalError);

impl ServiceError for DatabaseError {
    fn code(&self) -> Code {
        match self {
            DatabaseError::Logical(e) => e.code(),
            DatabaseError::NotLeader | DatabaseError::Deposed { .. } => Code::Unavailable,
            e if e.is_unavailable() => Code::Unavailable,
            _ => Code::Internal,
        }
    }

    fn reason(&self) -> Reason {
        match self {
            DatabaseError::Logical(e) => e.reason(),
            DatabaseError::NotLeader | DatabaseError::Deposed { .. } => Reason::NotLeader,
            _ => Reason::Internal,
        }
    }

    fn metadata(&self) -> Metadata {
        match self {
            DatabaseError::Logical(e) => e.metadata(),
            _ => Metadata::new(),
        }
    }

    /// A business outcome in its own words; a server-side failure says no
    /// more than whether to retry.
    fn client_message(&self) -> String {
        match self {
            DatabaseError::Logical(e) => e.to_string(),
            DatabaseError::NotLeader | DatabaseError::Deposed { .. } => {
                format!("{self}: retry on the leader")
            }
            e if e.is_unavailable() => "the database is unavailable".into(),
            _ => "internal database error".into(),
        }
    }

    fn log(&self) {
        match self {
            DatabaseError::Logical(e) => e.log(),
            DatabaseError::NotLeader | DatabaseError::Deposed { .. } => {
                tracing::warn!(error = %self, "a change reached a coordinator that does not lead")
            }
            e if e.is_unavailable() => tracing::error!(error = %e, "database unavailable"),
            e => tracing::error!(error = %e, "database operation failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DatabaseError, LogicalError};
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
            DatabaseError::Logical(LogicalError::QueueFull {
                team: "nlp".into(),
                queued: 5,
            }),
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

//! Weights out: a checkpoint's files read from wherever its training wrote
//! them ([`source`]), natively or converted for SAELens ([`saelens`]).

pub mod saelens;
pub mod source;
pub mod tree;

use cohort_proto::error::{metadata, Metadata, Reason, ServiceError};
use tonic::Code;

/// Why a checkpoint cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// On an agent's local disk that this coordinator cannot read, and the
    /// agent is not connected.
    #[error("checkpoint {0} is on its agent's local disk, which this coordinator cannot read")]
    Unreachable(String),
    /// The storage failed or is misconfigured.
    #[error("{0}")]
    Storage(String),
    /// The files are not a checkpoint we can convert.
    #[error("{0}")]
    Malformed(String),
}

/// An export of one checkpoint that failed: what its client is told.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ExportFailure {
    pub training_id: String,
    pub step: i64,
    pub error: ExportError,
}

crate::error::from_service_errors!(ExportFailure);

impl ServiceError for ExportFailure {
    /// Unreachable is the caller's to fix (shared storage); storage may
    /// come back; a malformed checkpoint is ours.
    fn code(&self) -> Code {
        match self.error {
            ExportError::Unreachable(_) => Code::FailedPrecondition,
            ExportError::Storage(_) => Code::Unavailable,
            ExportError::Malformed(_) => Code::Internal,
        }
    }

    fn reason(&self) -> Reason {
        match self.error {
            ExportError::Unreachable(_) => Reason::CheckpointUnreachable,
            _ => Reason::Internal,
        }
    }

    fn metadata(&self) -> Metadata {
        metadata([
            ("training_id", self.training_id.clone()),
            ("step", self.step.to_string()),
        ])
    }

    fn client_message(&self) -> String {
        match self.error {
            ExportError::Unreachable(_) => format!(
                "{}, and its agent is not connected; give trainings shared checkpoint.storage (a shared path or s3://bucket/prefix) to download checkpoints whatever happens to their hosts",
                self.error
            ),
            _ => self.error.to_string(),
        }
    }

    fn log(&self) {
        let (training_id, step) = (&self.training_id, self.step);
        match &self.error {
            ExportError::Unreachable(_) => {}
            ExportError::Storage(e) => {
                tracing::warn!(training_id, step, error = %e, "checkpoint storage failed")
            }
            ExportError::Malformed(e) => {
                tracing::error!(training_id, step, error = %e, "checkpoint cannot be exported")
            }
        }
    }
}

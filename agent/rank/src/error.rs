//! Every way a rank can fail, each mapped to one exit code of `cohort_spec::exit`.

use cohort_spec::{ConfigError, ExitCode};

#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error("invalid launch: {0}")]
    Launch(String),
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    #[error("invalid data: {0}")]
    Data(String),
    #[error("data unavailable: {0}")]
    DataUnavailable(String),
    #[error("rendezvous failed: {0}")]
    Rendezvous(String),
    #[error("lost the process group (a peer died or timed out): {0}")]
    PeerLost(String),
    #[error("checkpoint i/o: {0}")]
    Checkpoint(String),
    #[error("training diverged: {0}")]
    Diverged(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// A preemption notice: the step finished, the checkpoint written.
    #[error("preempted: {0}")]
    Preempted(String),
}

impl RankError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            RankError::Launch(_) => ExitCode::InvalidLaunch,
            RankError::Config(_) => ExitCode::InvalidConfig,
            RankError::Data(_) => ExitCode::InvalidData,
            RankError::DataUnavailable(_) => ExitCode::DataUnavailable,
            RankError::Rendezvous(_) => ExitCode::RendezvousFailed,
            RankError::PeerLost(_) => ExitCode::PeerLost,
            RankError::Checkpoint(_) => ExitCode::CheckpointIo,
            RankError::Diverged(_) => ExitCode::Diverged,
            RankError::OutOfMemory(_) => ExitCode::OutOfMemory,
            RankError::Internal(_) => ExitCode::Internal,
            RankError::Preempted(_) => ExitCode::Preempted,
        }
    }

    /// Classify an error message coming out of libtorch.
    pub fn from_torch(message: impl Into<String>) -> Self {
        let message = message.into();
        let lower = message.to_lowercase();
        if lower.contains("out of memory") || lower.contains("can't allocate memory") {
            RankError::OutOfMemory(message)
        } else {
            RankError::Internal(message)
        }
    }
}

impl From<tch::TchError> for RankError {
    fn from(e: tch::TchError) -> Self {
        RankError::from_torch(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_messages_are_classified() {
        let oom = RankError::from_torch("CUDA out of memory. Tried to allocate 2.00 GiB");
        assert_eq!(oom.exit_code(), ExitCode::OutOfMemory);
        let cpu =
            RankError::from_torch("[enforce fail] DefaultCPUAllocator: can't allocate memory");
        assert_eq!(cpu.exit_code(), ExitCode::OutOfMemory);
        assert_eq!(
            RankError::from_torch("shape mismatch").exit_code(),
            ExitCode::Internal
        );
    }
}

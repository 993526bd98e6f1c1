//! `cohort-rank` exit codes. The agent and the coordinator classify a rank's end
//! by these numbers: a user error fails the job at once, an infrastructure error
//! or an OOM may be retried (see docs/rank.md for the table).

/// Every exit code `cohort-rank` uses on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ExitCode {
    Success = 0,
    /// Bad command line or launch environment (RANK, WORLD_SIZE, ...).
    InvalidLaunch = 2,
    /// The config file is unreadable, malformed or has invalid values.
    InvalidConfig = 3,
    /// The data is missing, empty or does not match the config (d_in, dtype).
    InvalidData = 4,
    /// The ranks could not meet: MASTER_ADDR unreachable, a peer never came,
    /// or the rendezvous timed out.
    RendezvousFailed = 10,
    /// A collective failed mid-run: a peer died or timed out.
    PeerLost = 11,
    /// Reading or writing a checkpoint or report failed.
    CheckpointIo = 12,
    /// Any other runtime failure inside the rank.
    Internal = 13,
    /// Data that validated at start could not be read mid-run (a shared file
    /// system or object store failed): a restart may succeed.
    DataUnavailable = 14,
    /// More than `optim.max_nonfinite_steps` steps in a row had a non-finite
    /// loss or gradient norm (or the run ended on one): the training diverged.
    Diverged = 15,
    /// A preemption notice came: the rank finished its step, rank 0 wrote a
    /// checkpoint, and every rank stopped to be placed again later.
    Preempted = 16,
    /// The device or host ran out of memory.
    OutOfMemory = 20,
    /// Stopped by SIGTERM/SIGINT (a requested stop, e.g. a cancel).
    Terminated = 143,
}

/// How a rank's end is handled by the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitClass {
    Success,
    /// The user's config or data is at fault: retrying cannot help.
    UserError,
    /// The machine, network or a peer failed: a restart may succeed.
    Infrastructure,
    /// Out of memory: a restart helps only with a smaller batch.
    OutOfMemory,
    /// The numbers diverged: a restart helps only with a smaller learning rate.
    Diverged,
    /// Stopped on request.
    Stopped,
    /// Stopped by a preemption notice after a checkpoint: not a failure.
    Preempted,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<Self> {
        use ExitCode::*;
        [
            Success,
            InvalidLaunch,
            InvalidConfig,
            InvalidData,
            RendezvousFailed,
            PeerLost,
            CheckpointIo,
            Internal,
            DataUnavailable,
            Diverged,
            Preempted,
            OutOfMemory,
            Terminated,
        ]
        .into_iter()
        .find(|c| c.code() == code)
    }

    pub fn class(self) -> ExitClass {
        use ExitCode::*;
        match self {
            Success => ExitClass::Success,
            InvalidLaunch | InvalidConfig | InvalidData => ExitClass::UserError,
            RendezvousFailed | PeerLost | CheckpointIo | Internal | DataUnavailable => {
                ExitClass::Infrastructure
            }
            OutOfMemory => ExitClass::OutOfMemory,
            Diverged => ExitClass::Diverged,
            Terminated => ExitClass::Stopped,
            Preempted => ExitClass::Preempted,
        }
    }
}

/// Classify a process end: an exit code, or death by a signal (`None` code).
/// Unknown codes and signals count as infrastructure failures.
pub fn classify(code: Option<i32>) -> ExitClass {
    match code.and_then(ExitCode::from_code) {
        Some(c) => c.class(),
        None => ExitClass::Infrastructure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_classify() {
        for code in [0, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 20, 143] {
            assert_eq!(ExitCode::from_code(code).unwrap().code(), code);
        }
        assert_eq!(classify(Some(3)), ExitClass::UserError);
        assert_eq!(classify(Some(11)), ExitClass::Infrastructure);
        assert_eq!(classify(Some(20)), ExitClass::OutOfMemory);
        assert_eq!(classify(Some(15)), ExitClass::Diverged);
        assert_eq!(classify(Some(16)), ExitClass::Preempted);
        assert_eq!(classify(None), ExitClass::Infrastructure);
        assert_eq!(classify(Some(77)), ExitClass::Infrastructure);
    }
}

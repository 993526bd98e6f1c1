//! The stable `ErrorInfo.reason` values: one enum, each variant with its
//! wire string. Clients match on these, never on messages; docs/api.md's
//! error table and common.proto's error model are checked against
//! [`Reason::ALL`] (`proto/tests/reasons.rs`).

use std::fmt;
use std::str::FromStr;

macro_rules! reasons {
    ($( $(#[$doc:meta])* $name:ident = $wire:literal, )*) => {
        /// A stable `ErrorInfo.reason` of domain [`super::DOMAIN`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $( $(#[$doc])* $name, )*
        }

        impl Reason {
            /// Every reason, in the order of the table.
            pub const ALL: &'static [Reason] = &[$(Reason::$name,)*];

            /// The wire string (`ErrorInfo.reason`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => $wire,)*
                }
            }
        }

        impl FromStr for Reason {
            type Err = UnknownReason;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($wire => Ok(Reason::$name),)*
                    other => Err(UnknownReason(other.to_string())),
                }
            }
        }
    };
}

reasons! {
    InvalidConfig = "INVALID_CONFIG",
    InvalidArgument = "INVALID_ARGUMENT",
    InvalidPageToken = "INVALID_PAGE_TOKEN",
    TrainingNotFound = "TRAINING_NOT_FOUND",
    /// No sweep of that id (or none the caller's team may see); metadata
    /// `sweep_id`.
    SweepNotFound = "SWEEP_NOT_FOUND",
    GpuNotFound = "GPU_NOT_FOUND",
    GpuBusy = "GPU_BUSY",
    GpuUnhealthy = "GPU_UNHEALTHY",
    InsufficientGpus = "INSUFFICIENT_GPUS",
    NoAgents = "NO_AGENTS",
    InsufficientMemory = "INSUFFICIENT_MEMORY",
    IllegalTransition = "ILLEGAL_TRANSITION",
    RequestIdConflict = "REQUEST_ID_CONFLICT",
    CheckpointNotFound = "CHECKPOINT_NOT_FOUND",
    CheckpointUnreachable = "CHECKPOINT_UNREACHABLE",
    Unauthenticated = "UNAUTHENTICATED",
    PermissionDenied = "PERMISSION_DENIED",
    /// A priority class above the team's `max_priority_class`; metadata
    /// `priority_class`, `max_priority_class`, `team`.
    PriorityClassNotAllowed = "PRIORITY_CLASS_NOT_ALLOWED",
    AgentIdentityMismatch = "AGENT_IDENTITY_MISMATCH",
    /// An agent's certificate names an agent its issuing CA may not
    /// certify (`--agent-names`); metadata `certificate`, `issuer`.
    AgentNameNotAllowed = "AGENT_NAME_NOT_ALLOWED",
    TokenExists = "TOKEN_EXISTS",
    TokenNotFound = "TOKEN_NOT_FOUND",
    WebhookNotFound = "WEBHOOK_NOT_FOUND",
    /// The team has as many webhooks as it may; metadata `team`, `max`.
    WebhooksFull = "WEBHOOKS_FULL",
    QueueFull = "QUEUE_FULL",
    QuotaExceeded = "QUOTA_EXCEEDED",
    DataOutsideRoots = "DATA_OUTSIDE_ROOTS",
    /// Not an error: the pending reason of a program training whose
    /// working_dir lies under no connected agent's --program-root.
    ProgramOutsideRoots = "PROGRAM_OUTSIDE_ROOTS",
    /// An agent registered a GPU bound to another agent; metadata
    /// `gpu_uuid`, `agent` (the GPU's agent).
    GpuClaimed = "GPU_CLAIMED",
    /// ForgetAgent of an agent that is connected or holds placed ranks.
    AgentBusy = "AGENT_BUSY",
    AgentNotFound = "AGENT_NOT_FOUND",
    /// WatchLogs of a rank whose agent is not connected and that kept no
    /// lines at its exit; metadata `agent` (its name), `rank`.
    AgentNotConnected = "AGENT_NOT_CONNECTED",
    /// An agent did not answer RunDoctor in time.
    DoctorTimeout = "DOCTOR_TIMEOUT",
    /// A token already holds as many open streams as it may.
    TooManyStreams = "TOO_MANY_STREAMS",
    /// No uploaded code snapshot has the sha256; metadata `sha256`.
    CodeNotFound = "CODE_NOT_FOUND",
    /// A code snapshot over `--code-max-mib`; metadata `size_bytes`, `max_bytes`.
    CodeTooLarge = "CODE_TOO_LARGE",
    /// An upload's bytes are not what its header said; metadata `sha256`.
    CodeDigestMismatch = "CODE_DIGEST_MISMATCH",
    /// A change sent to a standby coordinator (or during an election);
    /// metadata `leader` is the leader's `--advertise` URL when one is known.
    NotLeader = "NOT_LEADER",
    Internal = "INTERNAL",
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason string this build does not know (a newer server's, or not one
/// of cohort's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error reason {0:?}")]
pub struct UnknownReason(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_wire_string() {
        for &r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert!("NOT_A_REASON".parse::<Reason>().is_err());
        let mut wires: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        wires.sort_unstable();
        wires.dedup();
        assert_eq!(wires.len(), Reason::ALL.len(), "wire strings are unique");
    }
}

//! The error model of `cohort.v1` (see the header of `common.proto`): every
//! failed RPC carries a precise code and a `google.rpc.ErrorInfo` with domain
//! [`DOMAIN`] and one of the stable [`reason`]s; config problems also carry a
//! `google.rpc.BadRequest` naming the field.

use cohort_spec::ConfigError;
use std::collections::HashMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every cohort error.
pub const DOMAIN: &str = "cohort.v1";

/// The stable `ErrorInfo.reason` values. Clients match on these, never on messages.
pub mod reason {
    pub const INVALID_CONFIG: &str = "INVALID_CONFIG";
    pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
    pub const INVALID_PAGE_TOKEN: &str = "INVALID_PAGE_TOKEN";
    pub const TRAINING_NOT_FOUND: &str = "TRAINING_NOT_FOUND";
    pub const GPU_NOT_FOUND: &str = "GPU_NOT_FOUND";
    pub const GPU_BUSY: &str = "GPU_BUSY";
    pub const GPU_UNHEALTHY: &str = "GPU_UNHEALTHY";
    pub const INSUFFICIENT_GPUS: &str = "INSUFFICIENT_GPUS";
    pub const NO_AGENTS: &str = "NO_AGENTS";
    pub const INSUFFICIENT_MEMORY: &str = "INSUFFICIENT_MEMORY";
    pub const ILLEGAL_TRANSITION: &str = "ILLEGAL_TRANSITION";
    pub const REQUEST_ID_CONFLICT: &str = "REQUEST_ID_CONFLICT";
    pub const CHECKPOINT_NOT_FOUND: &str = "CHECKPOINT_NOT_FOUND";
    pub const CHECKPOINT_UNREACHABLE: &str = "CHECKPOINT_UNREACHABLE";
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    /// A priority class above the team's `max_priority_class`; metadata
    /// `priority_class`, `max_priority_class`, `team`.
    pub const PRIORITY_CLASS_NOT_ALLOWED: &str = "PRIORITY_CLASS_NOT_ALLOWED";
    pub const AGENT_IDENTITY_MISMATCH: &str = "AGENT_IDENTITY_MISMATCH";
    /// An agent's certificate names an agent its issuing CA may not
    /// certify (`--agent-names`); metadata `certificate`, `issuer`.
    pub const AGENT_NAME_NOT_ALLOWED: &str = "AGENT_NAME_NOT_ALLOWED";
    pub const TOKEN_EXISTS: &str = "TOKEN_EXISTS";
    pub const TOKEN_NOT_FOUND: &str = "TOKEN_NOT_FOUND";
    pub const QUEUE_FULL: &str = "QUEUE_FULL";
    pub const QUOTA_EXCEEDED: &str = "QUOTA_EXCEEDED";
    pub const DATA_OUTSIDE_ROOTS: &str = "DATA_OUTSIDE_ROOTS";
    /// Not an error: the pending reason of a program training whose
    /// working_dir lies under no connected agent's --program-root.
    pub const PROGRAM_OUTSIDE_ROOTS: &str = "PROGRAM_OUTSIDE_ROOTS";
    /// An agent registered a GPU bound to another agent; metadata
    /// `gpu_uuid`, `agent` (the GPU's agent).
    pub const GPU_CLAIMED: &str = "GPU_CLAIMED";
    /// ForgetAgent of an agent that is connected or holds placed ranks.
    pub const AGENT_BUSY: &str = "AGENT_BUSY";
    pub const AGENT_NOT_FOUND: &str = "AGENT_NOT_FOUND";
    /// WatchLogs of a rank whose agent is not connected and that kept no
    /// lines at its exit; metadata `agent` (its name), `rank`.
    pub const AGENT_NOT_CONNECTED: &str = "AGENT_NOT_CONNECTED";
    /// An agent did not answer RunDoctor in time.
    pub const DOCTOR_TIMEOUT: &str = "DOCTOR_TIMEOUT";
    /// A token already holds as many open streams as it may.
    pub const TOO_MANY_STREAMS: &str = "TOO_MANY_STREAMS";
    /// A change sent to a standby coordinator (or during an election);
    /// metadata `leader` is the leader's `--advertise` URL when one is known.
    pub const NOT_LEADER: &str = "NOT_LEADER";
    pub const INTERNAL: &str = "INTERNAL";

    /// Every reason above (docs/api.md's table is checked against it).
    pub const ALL: &[&str] = &[
        INVALID_CONFIG,
        INVALID_ARGUMENT,
        INVALID_PAGE_TOKEN,
        TRAINING_NOT_FOUND,
        GPU_NOT_FOUND,
        GPU_BUSY,
        GPU_UNHEALTHY,
        INSUFFICIENT_GPUS,
        NO_AGENTS,
        INSUFFICIENT_MEMORY,
        ILLEGAL_TRANSITION,
        REQUEST_ID_CONFLICT,
        CHECKPOINT_NOT_FOUND,
        CHECKPOINT_UNREACHABLE,
        UNAUTHENTICATED,
        PERMISSION_DENIED,
        PRIORITY_CLASS_NOT_ALLOWED,
        AGENT_IDENTITY_MISMATCH,
        AGENT_NAME_NOT_ALLOWED,
        TOKEN_EXISTS,
        TOKEN_NOT_FOUND,
        QUEUE_FULL,
        QUOTA_EXCEEDED,
        DATA_OUTSIDE_ROOTS,
        PROGRAM_OUTSIDE_ROOTS,
        GPU_CLAIMED,
        AGENT_BUSY,
        AGENT_NOT_FOUND,
        AGENT_NOT_CONNECTED,
        DOCTOR_TIMEOUT,
        TOO_MANY_STREAMS,
        NOT_LEADER,
        INTERNAL,
    ];
}

/// A status with an `ErrorInfo` of `reason` and optional metadata.
pub fn status(
    code: Code,
    reason: &str,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (String, String)>,
) -> Status {
    let metadata: HashMap<String, String> = metadata.into_iter().collect();
    let details = ErrorDetails::with_error_info(reason, DOMAIN, metadata);
    Status::with_error_details(code, message, details)
}

/// INVALID_ARGUMENT with reason `reason` and one `BadRequest` field violation.
pub fn bad_field(reason: &str, field: &str, description: impl Into<String>) -> Status {
    let description = description.into();
    let mut details = ErrorDetails::with_error_info(reason, DOMAIN, HashMap::new());
    details.add_bad_request_violation(field, description.clone());
    Status::with_error_details(
        Code::InvalidArgument,
        format!("{field}: {description}"),
        details,
    )
}

/// INVALID_ARGUMENT / INVALID_CONFIG for a config problem, naming its field
/// (`"config"` for problems without one; `prefix` is prepended to the spec's
/// dotted path, e.g. `"config."`).
pub fn invalid_config(err: &ConfigError, prefix: &str) -> Status {
    match err {
        ConfigError::Invalid { field, reason } => bad_field(
            reason::INVALID_CONFIG,
            &format!("{prefix}{field}"),
            reason.clone(),
        ),
        other => bad_field(
            reason::INVALID_CONFIG,
            prefix.trim_end_matches('.'),
            other.to_string(),
        ),
    }
}

/// The `ErrorInfo.reason` a status carries, if any (for clients and tests).
pub fn reason_of(status: &Status) -> Option<String> {
    status.get_details_error_info().map(|info| info.reason)
}

/// Where a NOT_LEADER refusal says the leader is (its `leader` metadata):
/// what clients and agents follow. `None` for any other status, or while
/// no coordinator leads.
pub fn leader_of(status: &Status) -> Option<String> {
    let info = status.get_details_error_info()?;
    if info.reason != reason::NOT_LEADER {
        return None;
    }
    info.metadata
        .get("leader")
        .filter(|l| !l.is_empty())
        .cloned()
}

/// Whether a status is a NOT_LEADER refusal (a standby, or an election).
pub fn is_not_leader(status: &Status) -> bool {
    reason_of(status).as_deref() == Some(reason::NOT_LEADER)
}

/// The fields named by the `BadRequest` a status carries (empty if none).
pub fn bad_fields(status: &Status) -> Vec<String> {
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_reason_and_field() {
        let err = ConfigError::Invalid {
            field: "optim.batch_size".into(),
            reason: "must be > 0".into(),
        };
        let s = invalid_config(&err, "config.");
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(reason_of(&s).as_deref(), Some(reason::INVALID_CONFIG));
        assert_eq!(bad_fields(&s), vec!["config.optim.batch_size".to_string()]);

        let s = status(
            Code::FailedPrecondition,
            reason::GPU_BUSY,
            "gpu is busy",
            [("gpu".to_string(), "GPU-1".to_string())],
        );
        assert_eq!(reason_of(&s).as_deref(), Some("GPU_BUSY"));
        assert!(bad_fields(&s).is_empty());
    }
}

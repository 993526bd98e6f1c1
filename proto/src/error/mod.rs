//! The error model of `cohort.v1` (see the header of `common.proto`): every
//! failed RPC carries a precise code and a `google.rpc.ErrorInfo` with domain
//! [`DOMAIN`] and one of the stable [`Reason`]s; config problems also carry a
//! `google.rpc.BadRequest` naming the field. A domain error says its own
//! code, reason and metadata through [`ServiceError`].

use cohort_spec::ConfigError;
use std::collections::HashMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every cohort error.
pub const DOMAIN: &str = "cohort.v1";

mod reason;
mod service;

pub use reason::{Reason, UnknownReason};
pub use service::{metadata, Metadata, ServiceError};

/// A status with an `ErrorInfo` of `reason` and optional metadata.
pub fn status(
    code: Code,
    reason: Reason,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (String, String)>,
) -> Status {
    let metadata: HashMap<String, String> = metadata.into_iter().collect();
    let details = ErrorDetails::with_error_info(reason.as_str(), DOMAIN, metadata);
    Status::with_error_details(code, message, details)
}

/// INVALID_ARGUMENT with reason `reason` and one `BadRequest` field violation.
pub fn bad_field(reason: Reason, field: &str, description: impl Into<String>) -> Status {
    let description = description.into();
    let mut details = ErrorDetails::with_error_info(reason.as_str(), DOMAIN, HashMap::new());
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
            Reason::InvalidConfig,
            &format!("{prefix}{field}"),
            reason.clone(),
        ),
        other => bad_field(
            Reason::InvalidConfig,
            prefix.trim_end_matches('.'),
            other.to_string(),
        ),
    }
}

/// The cohort reason a status carries, if any (for clients and tests):
/// `None` without an `ErrorInfo`, or with a reason this build does not know.
pub fn reason_of(status: &Status) -> Option<Reason> {
    status.get_details_error_info()?.reason.parse().ok()
}

/// Where a NOT_LEADER refusal says the leader is (its `leader` metadata):
/// what clients and agents follow. `None` for any other status, or while
/// no coordinator leads.
pub fn leader_of(status: &Status) -> Option<String> {
    let info = status.get_details_error_info()?;
    if info.reason != Reason::NotLeader.as_str() {
        return None;
    }
    info.metadata
        .get("leader")
        .filter(|l| !l.is_empty())
        .cloned()
}

/// Whether a status is a NOT_LEADER refusal (a standby, or an election).
pub fn is_not_leader(status: &Status) -> bool {
    reason_of(status) == Some(Reason::NotLeader)
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
        assert_eq!(reason_of(&s), Some(Reason::InvalidConfig));
        assert_eq!(bad_fields(&s), vec!["config.optim.batch_size".to_string()]);

        let s = status(
            Code::FailedPrecondition,
            Reason::GpuBusy,
            "gpu is busy",
            [("gpu".to_string(), "GPU-1".to_string())],
        );
        assert_eq!(reason_of(&s), Some(Reason::GpuBusy));
        assert!(bad_fields(&s).is_empty());
    }
}

//! Checking gRPC errors: code plus the google.rpc.ErrorInfo reason.

use cohort_proto::error::Reason;
use std::fmt::Debug;
use tonic::{Code, Status};

/// Panics unless `result` failed with `code` and an ErrorInfo of `reason`
/// (domain cohort.v1); returns the status for further checks.
pub fn expect_error<T: Debug>(
    what: &str,
    result: Result<T, Status>,
    code: Code,
    reason: Reason,
) -> Status {
    let status = match result {
        Ok(value) => panic!("{what}: expected {code:?}/{reason}, got Ok({value:?})"),
        Err(status) => status,
    };
    assert_eq!(
        status.code(),
        code,
        "{what}: wrong code in {status:?} (ErrorInfo reason {:?})",
        cohort_proto::error::reason_of(&status)
    );
    assert_eq!(
        cohort_proto::error::reason_of(&status),
        Some(reason),
        "{what}: wrong or missing ErrorInfo reason in {status:?}"
    );
    let domain = tonic_types::StatusExt::get_details_error_info(&status).map(|i| i.domain);
    assert_eq!(
        domain.as_deref(),
        Some(cohort_proto::error::DOMAIN),
        "{what}: ErrorInfo domain"
    );
    status
}

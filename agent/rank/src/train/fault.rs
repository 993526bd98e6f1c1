//! Fault injection for tests and drills (docs/rank.md): a rank made to fail
//! as a real fault would, through the agent's passed-through `COHORT_FAULT_*`
//! variables.

use crate::error::RankError;

/// A micro-batch above this value fails as out of memory before anything
/// is allocated, as a GPU too small for it would.
pub const OOM_FAULT: &str = "COHORT_FAULT_OOM_ABOVE_MICRO_BATCH";

pub fn injected_oom(micro_batch: i64, limit: Option<&str>) -> Result<(), RankError> {
    match limit.and_then(|v| v.trim().parse::<i64>().ok()) {
        Some(limit) if micro_batch > limit => Err(RankError::OutOfMemory(format!(
            "micro-batch {micro_batch} does not fit ({OOM_FAULT}={limit})"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_micro_batch_over_the_limit_fails_and_as_out_of_memory() {
        assert!(injected_oom(256, None).is_ok());
        assert!(injected_oom(64, Some("100")).is_ok());
        assert!(injected_oom(256, Some("not a number")).is_ok());
        let err = injected_oom(128, Some("100")).unwrap_err();
        assert_eq!(err.exit_code(), cohort_spec::exit::ExitCode::OutOfMemory);
    }
}

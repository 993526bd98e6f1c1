//! Fault injection for tests and drills (docs/rank.md): a rank made to fail
//! as a real fault would, through the agent's passed-through `COHORT_FAULT_*`
//! variables.

use crate::error::RankError;

/// A micro-batch above this value fails as out of memory before anything
/// is allocated, as a GPU too small for it would.
pub const OOM_FAULT: &str = "COHORT_FAULT_OOM_ABOVE_MICRO_BATCH";

/// `N` or `RANK:N`: after step N every rank (or rank RANK alone) acts as
/// if a preemption notice came.
pub const PREEMPT_FAULT: &str = "COHORT_FAULT_PREEMPT_AT_STEP";

/// The step after which this rank hears an injected notice, if any.
pub fn injected_preemption(rank: i64, value: Option<&str>) -> Option<i64> {
    let value = value?.trim();
    match value.split_once(':') {
        Some((r, step)) => (r.trim().parse::<i64>().ok()? == rank)
            .then(|| step.trim().parse().ok())
            .flatten(),
        None => value.parse().ok(),
    }
}

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

    #[test]
    fn an_injected_notice_names_its_step_and_maybe_its_rank() {
        assert_eq!(injected_preemption(0, None), None);
        assert_eq!(injected_preemption(3, Some("24")), Some(24));
        assert_eq!(injected_preemption(1, Some("1:24")), Some(24));
        assert_eq!(injected_preemption(0, Some("1:24")), None);
        assert_eq!(injected_preemption(0, Some("soon")), None);
    }
}

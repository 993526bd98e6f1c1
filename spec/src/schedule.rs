//! What a training tells the scheduler about itself, in `[runtime]` for
//! the SAE and for a program alike (docs/scheduling.md):
//!
//! - `preemption_grace` ("60s", "5m"): how long its ranks get between a
//!   preemption notice and SIGKILL. The built-in rank needs a step and a
//!   checkpoint; a program whatever its own checkpoint takes.
//! - `expected_duration` ("6h"): how long it runs, when it cannot say by
//!   its step rate (a program that reports no `total_steps`, a training that
//!   has not run yet). Start-time estimates and backfill use it; nothing
//!   stops a training that runs longer.

use crate::config::ConfigError;
use crate::duration::parse_duration;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The grace a training gets when it sets none.
pub const DEFAULT_PREEMPTION_GRACE: Duration = Duration::from_secs(60);
/// The longest grace a training may ask for.
pub const MAX_PREEMPTION_GRACE: Duration = Duration::from_secs(3600);
/// The longest `expected_duration`.
pub const MAX_EXPECTED_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// The scheduling keys of a `[runtime]` table, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_grace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration: Option<String>,
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// `text` as a duration no longer than `max`, or the error naming `field`.
fn bounded(field: &str, text: &str, max: Duration) -> Result<Duration, ConfigError> {
    let d = parse_duration(text).map_err(|e| invalid(field, e))?;
    if d > max {
        return Err(invalid(field, format!("at most {}s", max.as_secs())));
    }
    Ok(d)
}

impl ScheduleHints {
    pub fn is_empty(&self) -> bool {
        self.preemption_grace.is_none() && self.expected_duration.is_none()
    }

    /// Checks both keys; `table` is the dotted prefix of the fields
    /// ("runtime").
    pub fn validate(&self, table: &str) -> Result<(), ConfigError> {
        if let Some(g) = &self.preemption_grace {
            bounded(
                &format!("{table}.preemption_grace"),
                g,
                MAX_PREEMPTION_GRACE,
            )?;
        }
        if let Some(d) = &self.expected_duration {
            bounded(
                &format!("{table}.expected_duration"),
                d,
                MAX_EXPECTED_DURATION,
            )?;
        }
        Ok(())
    }

    /// The grace between a notice and SIGKILL.
    pub fn preemption_grace(&self) -> Duration {
        self.preemption_grace
            .as_deref()
            .and_then(|g| parse_duration(g).ok())
            .map_or(DEFAULT_PREEMPTION_GRACE, |g| g.min(MAX_PREEMPTION_GRACE))
    }

    /// How long the training expects to run, when it said.
    pub fn expected_duration(&self) -> Option<Duration> {
        self.expected_duration
            .as_deref()
            .and_then(|d| parse_duration(d).ok())
            .map(|d| d.min(MAX_EXPECTED_DURATION))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_bounds_and_named_errors() {
        let none = ScheduleHints::default();
        assert!(none.is_empty() && none.validate("runtime").is_ok());
        assert_eq!(none.preemption_grace(), DEFAULT_PREEMPTION_GRACE);
        assert_eq!(none.expected_duration(), None);
        let set = ScheduleHints {
            preemption_grace: Some("90s".into()),
            expected_duration: Some("6h".into()),
        };
        assert!(set.validate("runtime").is_ok());
        assert_eq!(set.preemption_grace(), Duration::from_secs(90));
        assert_eq!(set.expected_duration(), Some(Duration::from_secs(6 * 3600)));
        let long = ScheduleHints {
            preemption_grace: Some("2h".into()),
            ..Default::default()
        };
        let err = long.validate("runtime").unwrap_err().to_string();
        assert!(err.contains("runtime.preemption_grace"), "{err}");
        let bad = ScheduleHints {
            expected_duration: Some("soon".into()),
            ..Default::default()
        };
        let err = bad.validate("runtime").unwrap_err().to_string();
        assert!(err.contains("runtime.expected_duration"), "{err}");
    }
}

//! `[tracking]`: where a training's run goes in its team's tracker (the
//! coordinator's `--mlflow-tracking-uri`, `--team-mlflow`). Optional in
//! every config, the SAE's and a program's.

use crate::config::ConfigError;
use serde::{Deserialize, Serialize};

/// The longest experiment name taken.
pub const MAX_EXPERIMENT: usize = 500;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingConfig {
    /// The MLflow experiment of the training's run (made when missing);
    /// unset: the team's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

impl TrackingConfig {
    pub fn is_empty(&self) -> bool {
        self.experiment.is_none()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(name) = &self.experiment else {
            return Ok(());
        };
        if name.trim().is_empty()
            || name.len() > MAX_EXPERIMENT
            || name.chars().any(char::is_control)
        {
            return Err(ConfigError::invalid(
                "tracking.experiment",
                format!("1 to {MAX_EXPERIMENT} characters, no control characters"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let named = |s: &str| TrackingConfig {
            experiment: Some(s.into()),
        };
        assert!(named("sae sweeps/l1").validate().is_ok());
        assert!(TrackingConfig::default().validate().is_ok());
        for bad in ["", "  ", "a\nb", &"x".repeat(MAX_EXPERIMENT + 1)] {
            let e = named(bad).validate().unwrap_err();
            assert!(e.to_string().starts_with("tracking.experiment:"), "{e}");
        }
    }
}

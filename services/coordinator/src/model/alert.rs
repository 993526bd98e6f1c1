//! Alerts as the coordinator keeps them: a kind, how serious, what it is
//! about (agent, GPU, training), the value that raised it, and when it was
//! raised and resolved.

use chrono::{DateTime, Utc};
use std::fmt;

/// How serious an alert is (ordered: `Info < Warning < Critical`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Severity::Info, Severity::Warning, Severity::Critical]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// What an alert is about. Each kind has one rule and one severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlertKind {
    /// Device memory used above the threshold for the window.
    GpuMemoryHigh,
    /// Temperature above the threshold for the window.
    GpuTemperatureHigh,
    /// A held GPU's utilization below the threshold for the window.
    GpuUtilizationLow,
    /// The uncorrected ECC error counter increased.
    GpuEccUncorrected,
    /// A critical XID error was reported (NVML's XID events).
    GpuXidError,
    /// An agent disconnected and did not come back within the grace period.
    AgentLost,
    /// A RUNNING training reported no progress for the window.
    TrainingStalled,
    /// A RUNNING training's loss made no new best for the step window.
    TrainingLossPlateau,
    /// A RUNNING training's gradient norm stayed above the threshold.
    TrainingGradNormHigh,
    /// A RUNNING training's steps stayed slower than the threshold.
    TrainingStepSlow,
    /// A rank of a RUNNING training kept waiting for its data.
    TrainingDataWaitHigh,
    /// A rank's host memory kept growing faster than the threshold.
    RankMemoryGrowth,
    /// A collective (gloo/NCCL) of the training's current attempt failed.
    TrainingCollectiveError,
    /// The training skipped non-finite steps repeatedly (or diverged).
    TrainingNonfiniteSteps,
}

impl AlertKind {
    pub const ALL: [AlertKind; 14] = [
        AlertKind::GpuMemoryHigh,
        AlertKind::GpuTemperatureHigh,
        AlertKind::GpuUtilizationLow,
        AlertKind::GpuEccUncorrected,
        AlertKind::GpuXidError,
        AlertKind::AgentLost,
        AlertKind::TrainingStalled,
        AlertKind::TrainingLossPlateau,
        AlertKind::TrainingGradNormHigh,
        AlertKind::TrainingStepSlow,
        AlertKind::TrainingDataWaitHigh,
        AlertKind::RankMemoryGrowth,
        AlertKind::TrainingCollectiveError,
        AlertKind::TrainingNonfiniteSteps,
    ];

    /// The stable name stored and sent (`Alert.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::GpuMemoryHigh => "GPU_MEMORY_HIGH",
            AlertKind::GpuTemperatureHigh => "GPU_TEMPERATURE_HIGH",
            AlertKind::GpuUtilizationLow => "GPU_UTILIZATION_LOW",
            AlertKind::GpuEccUncorrected => "GPU_ECC_UNCORRECTED",
            AlertKind::GpuXidError => "GPU_XID_ERROR",
            AlertKind::AgentLost => "AGENT_LOST",
            AlertKind::TrainingStalled => "TRAINING_STALLED",
            AlertKind::TrainingLossPlateau => "TRAINING_LOSS_PLATEAU",
            AlertKind::TrainingGradNormHigh => "TRAINING_GRAD_NORM_HIGH",
            AlertKind::TrainingStepSlow => "TRAINING_STEP_SLOW",
            AlertKind::TrainingDataWaitHigh => "TRAINING_DATA_WAIT_HIGH",
            AlertKind::RankMemoryGrowth => "RANK_MEMORY_GROWTH",
            AlertKind::TrainingCollectiveError => "TRAINING_COLLECTIVE_ERROR",
            AlertKind::TrainingNonfiniteSteps => "TRAINING_NONFINITE_STEPS",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn severity(self) -> Severity {
        match self {
            AlertKind::GpuUtilizationLow => Severity::Info,
            AlertKind::GpuMemoryHigh
            | AlertKind::GpuTemperatureHigh
            | AlertKind::TrainingLossPlateau
            | AlertKind::TrainingGradNormHigh
            | AlertKind::TrainingStepSlow
            | AlertKind::TrainingDataWaitHigh
            | AlertKind::RankMemoryGrowth
            | AlertKind::TrainingNonfiniteSteps => Severity::Warning,
            AlertKind::GpuEccUncorrected
            | AlertKind::GpuXidError
            | AlertKind::AgentLost
            | AlertKind::TrainingStalled
            | AlertKind::TrainingCollectiveError => Severity::Critical,
        }
    }

    /// True for the kinds about one GPU (their subject is its uuid).
    pub fn is_gpu(self) -> bool {
        matches!(
            self,
            AlertKind::GpuMemoryHigh
                | AlertKind::GpuTemperatureHigh
                | AlertKind::GpuUtilizationLow
                | AlertKind::GpuEccUncorrected
                | AlertKind::GpuXidError
        )
    }
}

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition on one subject: at most one alert per key is active.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertKey {
    pub kind: AlertKind,
    /// The GPU uuid, agent id or training id the kind is about.
    pub subject: String,
}

/// An alert, raised (no `resolve_time`) or resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub id: String,
    pub kind: AlertKind,
    pub severity: Severity,
    pub message: String,
    pub agent_id: Option<String>,
    pub gpu_uuid: Option<String>,
    pub training_id: Option<String>,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub raise_time: DateTime<Utc>,
    pub resolve_time: Option<DateTime<Utc>>,
}

impl Alert {
    pub fn key(&self) -> AlertKey {
        // Exhaustive, so a new kind must say what its subject is.
        let subject = match self.kind {
            AlertKind::AgentLost => self.agent_id.clone(),
            AlertKind::TrainingStalled
            | AlertKind::TrainingLossPlateau
            | AlertKind::TrainingGradNormHigh
            | AlertKind::TrainingStepSlow
            | AlertKind::TrainingDataWaitHigh
            | AlertKind::RankMemoryGrowth
            | AlertKind::TrainingCollectiveError
            | AlertKind::TrainingNonfiniteSteps => self.training_id.clone(),
            AlertKind::GpuMemoryHigh
            | AlertKind::GpuTemperatureHigh
            | AlertKind::GpuUtilizationLow
            | AlertKind::GpuEccUncorrected
            | AlertKind::GpuXidError => self.gpu_uuid.clone(),
        };
        AlertKey {
            kind: self.kind,
            subject: subject.unwrap_or_default(),
        }
    }

    pub fn is_active(&self) -> bool {
        self.resolve_time.is_none()
    }
}

/// A change the evaluator decided: an alert raised, or an active one resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Raised(Alert),
    Resolved(Alert),
}

impl Transition {
    pub fn alert(&self) -> &Alert {
        match self {
            Transition::Raised(a) | Transition::Resolved(a) => a,
        }
    }

    pub fn into_alert(self) -> Alert {
        match self {
            Transition::Raised(a) | Transition::Resolved(a) => a,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_severities_round_trip() {
        for kind in AlertKind::ALL {
            assert_eq!(AlertKind::parse(kind.as_str()), Some(kind));
            let s = kind.severity();
            assert_eq!(Severity::parse(s.as_str()), Some(s));
        }
        assert_eq!(AlertKind::parse("NOPE"), None);
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Critical);
    }
}

/// A RUNNING training and when it last showed life.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningTraining {
    pub id: String,
    /// The later of its newest progress event and its entry into RUNNING.
    pub last_activity: DateTime<Utc>,
    /// Micro-batches per optimizer step (`optim.accumulation_steps`): a
    /// step's data wait is that many batches'.
    pub batches_per_step: i64,
}

//! Job and rank lifecycle states, and which job transitions are legal
//! (DESIGN §4): QUEUED -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED |
//! CANCELLED, with RESTARTING between attempts.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A state name that is not one of ours (a corrupt row or a bad filter).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

/// The lifecycle state of a training job. Stored as its upper-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Queued,
    Scheduled,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Scheduled,
        JobState::Running,
        JobState::Restarting,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Scheduled => "SCHEDULED",
            JobState::Running => "RUNNING",
            JobState::Restarting => "RESTARTING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
        }
    }

    /// SUCCEEDED, FAILED and CANCELLED: nothing follows them.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// Whether a job in `self` may move to `to`. Every non-final state may be
    /// cancelled or failed; the rest follows the lifecycle.
    pub fn can_transition_to(self, to: JobState) -> bool {
        use JobState::*;
        if self.is_final() {
            return false;
        }
        match to {
            Cancelled | Failed => true,
            Scheduled => matches!(self, Queued | Restarting),
            Running => self == Scheduled,
            Succeeded => self == Running,
            Restarting => matches!(self, Scheduled | Running),
            // Back to the queue: the placement fell through before the ranks ran,
            // a restart found no GPUs, or a preempted gang stopped.
            Queued => matches!(self, Scheduled | Running | Restarting),
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, UnknownState> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// The state of one rank process. Stored as its upper-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RankState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Stopped,
    Lost,
}

impl RankState {
    pub const ALL: [RankState; 6] = [
        RankState::Pending,
        RankState::Running,
        RankState::Succeeded,
        RankState::Failed,
        RankState::Stopped,
        RankState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RankState::Pending => "PENDING",
            RankState::Running => "RUNNING",
            RankState::Succeeded => "SUCCEEDED",
            RankState::Failed => "FAILED",
            RankState::Stopped => "STOPPED",
            RankState::Lost => "LOST",
        }
    }
}

impl fmt::Display for RankState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RankState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, UnknownState> {
        RankState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
        }
        for state in RankState::ALL {
            assert_eq!(state.as_str().parse::<RankState>(), Ok(state));
        }
        assert!("queued".parse::<JobState>().is_err());
    }

    #[test]
    fn lifecycle() {
        use JobState::*;
        assert!(Queued.can_transition_to(Scheduled));
        assert!(Scheduled.can_transition_to(Running));
        assert!(Running.can_transition_to(Succeeded));
        assert!(Running.can_transition_to(Restarting));
        assert!(Restarting.can_transition_to(Scheduled));
        assert!(Queued.can_transition_to(Cancelled));
        assert!(!Queued.can_transition_to(Running));
        assert!(!Queued.can_transition_to(Succeeded));
        assert!(!Queued.can_transition_to(Queued));
        for to in JobState::ALL {
            assert!(!Succeeded.can_transition_to(to));
            assert!(!Cancelled.can_transition_to(to));
            assert!(!Failed.can_transition_to(to));
        }
    }
}

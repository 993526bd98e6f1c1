//! Training and rank states to and from their protobuf enums.

use crate::model::{JobState, RankState, UnknownState};
use cohort_proto::v1;

impl From<JobState> for v1::training::State {
    fn from(state: JobState) -> Self {
        use v1::training::State as P;
        match state {
            JobState::Queued => P::Queued,
            JobState::Scheduled => P::Scheduled,
            JobState::Running => P::Running,
            JobState::Restarting => P::Restarting,
            JobState::Succeeded => P::Succeeded,
            JobState::Failed => P::Failed,
            JobState::Cancelled => P::Cancelled,
        }
    }
}

impl TryFrom<v1::training::State> for JobState {
    type Error = UnknownState;

    fn try_from(state: v1::training::State) -> Result<Self, UnknownState> {
        use v1::training::State as P;
        Ok(match state {
            P::Unspecified => return Err(UnknownState("STATE_UNSPECIFIED".into())),
            P::Queued => JobState::Queued,
            P::Scheduled => JobState::Scheduled,
            P::Running => JobState::Running,
            P::Restarting => JobState::Restarting,
            P::Succeeded => JobState::Succeeded,
            P::Failed => JobState::Failed,
            P::Cancelled => JobState::Cancelled,
        })
    }
}

impl From<RankState> for v1::RankState {
    fn from(state: RankState) -> Self {
        match state {
            RankState::Pending => v1::RankState::Pending,
            RankState::Running => v1::RankState::Running,
            RankState::Succeeded => v1::RankState::Succeeded,
            RankState::Failed => v1::RankState::Failed,
            RankState::Stopped => v1::RankState::Stopped,
            RankState::Lost => v1::RankState::Lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips() {
        for state in JobState::ALL {
            assert_eq!(
                JobState::try_from(v1::training::State::from(state)),
                Ok(state)
            );
        }
        assert!(JobState::try_from(v1::training::State::Unspecified).is_err());
    }
}

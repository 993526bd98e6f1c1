//! The runner's in-memory state beside the database: one [`Tracked`] per
//! training it runs (and the agents missing while holding ranks), and the
//! one way an attempt's or a training's state leaves it
//! ([`Runtime::forget`]).

use super::lifecycle::AttemptSpans;
use super::tracker::AttemptProgress;
use crate::model::JobState;
use std::collections::{HashMap, HashSet};
use tokio::time::Instant;

/// How the current attempt of a training ended, for [`Runtime::forget`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome<'a> {
    /// The training reached a final state: succeeded, failed or cancelled.
    Final { state: JobState, reason: &'a str },
    /// The attempt ended and the training waits for another one (a gang
    /// restart, or back to the queue when its placement fell through).
    Retry { reason: &'a str },
}

/// What the runner keeps for one training.
#[derive(Default)]
pub(super) struct Tracked {
    /// Progress of the current attempt.
    pub progress: Option<AttemptProgress>,
    /// GPUs to avoid when re-placing it (the faulty one of a crash).
    pub avoid: HashSet<String>,
    /// Attempts whose failure is being decided (peer-lost grace running).
    pub deciding: HashSet<i32>,
    /// When a restart's teardown began.
    pub teardown_since: Option<Instant>,
    /// Open lifecycle spans of the current attempt.
    pub spans: Option<AttemptSpans>,
    /// Its step rate and total steps (kept across attempts).
    pub pace: Option<super::pace::Pace>,
}

impl Tracked {
    fn is_empty(&self) -> bool {
        self.progress.is_none()
            && self.avoid.is_empty()
            && self.deciding.is_empty()
            && self.teardown_since.is_none()
            && self.spans.is_none()
            && self.pace.is_none()
    }

    /// Ends the current attempt's spans, if open.
    fn end_spans(&mut self, succeeded: bool, why: &str) {
        if let Some(spans) = self.spans.take() {
            spans.ended(succeeded, why);
        }
    }
}

/// In-memory state of the runner, beside the database.
#[derive(Default)]
pub(super) struct Runtime {
    trainings: HashMap<String, Tracked>,
    /// Agents missing since (disconnected while holding ranks), by agent id.
    pub missing_since: HashMap<String, Instant>,
}

impl Runtime {
    /// What is kept for `training_id`, if anything.
    pub fn get(&self, training_id: &str) -> Option<&Tracked> {
        self.trainings.get(training_id)
    }

    /// What is kept for `training_id`, if anything, to change.
    pub fn get_mut(&mut self, training_id: &str) -> Option<&mut Tracked> {
        self.trainings.get_mut(training_id)
    }

    /// What is kept for `training_id`, an empty entry when nothing was.
    /// A caller that may leave it empty calls [`Runtime::tidy`] after.
    pub fn of(&mut self, training_id: &str) -> &mut Tracked {
        self.trainings.entry(training_id.to_string()).or_default()
    }

    /// Drops the entry of `training_id` when it keeps nothing any more.
    pub fn tidy(&mut self, training_id: &str) {
        if self
            .trainings
            .get(training_id)
            .is_some_and(Tracked::is_empty)
        {
            self.trainings.remove(training_id);
        }
    }

    /// The current attempt of `training_id` was placed: its spans replace
    /// any still open (a superseded attempt).
    pub fn placed(&mut self, training_id: &str, spans: AttemptSpans) {
        let tracked = self.of(training_id);
        tracked.end_spans(false, "superseded by a new attempt");
        tracked.spans = Some(spans);
        tracked.teardown_since = None;
    }

    /// The current attempt of `training_id` ended: its progress goes and its
    /// lifecycle spans end with the outcome. A final outcome drops
    /// everything kept for the training (GPUs to avoid, a teardown under
    /// way, a failure being decided).
    pub fn forget(&mut self, training_id: &str, outcome: Outcome<'_>) {
        match outcome {
            Outcome::Final { state, reason } => {
                if let Some(mut tracked) = self.trainings.remove(training_id) {
                    tracked.end_spans(state == JobState::Succeeded, reason);
                }
            }
            Outcome::Retry { reason } => {
                if let Some(tracked) = self.trainings.get_mut(training_id) {
                    tracked.progress = None;
                    tracked.end_spans(false, reason);
                }
                self.tidy(training_id);
            }
        }
    }

    /// Whether anything is kept for `training_id`.
    pub fn tracks(&self, training_id: &str) -> bool {
        self.trainings.contains_key(training_id)
    }
}

//! The runner's in-memory state beside the database, and the one way an
//! attempt's or a training's entries leave it ([`Runtime::forget`]).

use super::lifecycle::Lifecycle;
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

/// In-memory state of the runner, beside the database.
#[derive(Default)]
pub(super) struct Runtime {
    /// Progress of the current attempt of each running training.
    pub progress: HashMap<String, AttemptProgress>,
    /// GPUs to avoid when re-placing a training (the faulty one of a crash).
    pub avoid: HashMap<String, HashSet<String>>,
    /// Agents missing since (disconnected while holding ranks).
    pub missing_since: HashMap<String, Instant>,
    /// Attempts whose failure is being decided (peer-lost grace running).
    pub deciding: HashSet<(String, i32)>,
    /// When a restart's teardown began.
    pub teardown_since: HashMap<String, Instant>,
    /// Open lifecycle spans of the current attempts.
    pub lifecycle: Lifecycle,
}

impl Runtime {
    /// The current attempt of `training_id` ended: its progress goes and its
    /// lifecycle span ends with the outcome. A final outcome also drops
    /// everything else kept for the training (GPUs to avoid, a teardown
    /// under way, a failure being decided).
    pub fn forget(&mut self, training_id: &str, outcome: Outcome<'_>) {
        self.progress.remove(training_id);
        match outcome {
            Outcome::Final { state, reason } => {
                self.lifecycle
                    .ended(training_id, state == JobState::Succeeded, reason);
                self.avoid.remove(training_id);
                self.teardown_since.remove(training_id);
                self.deciding.retain(|(id, _)| id != training_id);
            }
            Outcome::Retry { reason } => self.lifecycle.ended(training_id, false, reason),
        }
    }

    /// Whether anything is kept for `training_id`.
    pub fn tracks(&self, training_id: &str) -> bool {
        self.progress.contains_key(training_id)
            || self.avoid.contains_key(training_id)
            || self.teardown_since.contains_key(training_id)
            || self.deciding.iter().any(|(id, _)| id == training_id)
            || self.lifecycle.has(training_id)
    }
}

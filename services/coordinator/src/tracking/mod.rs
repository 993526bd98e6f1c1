//! Experiment tracking: every training of a team with a tracker is an
//! MLflow run (docs/api.md, "MLflow"). `--mlflow-tracking-uri URL` gives
//! every team's trainings one, `--team-mlflow TEAM=URL` a team its own.
//!
//! The run is the training's: its experiment is the config's
//! `[tracking] experiment`, else the team's name (`cohort` for trainings
//! of no team), its name the training's, its params the
//! config's leaves by dotted path, its tags the team, id, attempt and
//! labels; each progress point's metrics at its step; at the end the
//! report (`summary.json`, `metrics.jsonl`) as artifacts and the status
//! (FINISHED, FAILED, KILLED). The leader follows ([`follow`]): a tracker
//! that is slow or down never slows or fails a training — each call has a
//! deadline, a failing tracker is tried again with backoff, each
//! training's backlog is bounded (the oldest points dropped and counted),
//! and what happened is in `GetTraining.tracking` and on /metrics.

pub mod follow;
pub mod mlflow;
pub mod points;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Trainings whose run status is kept (the oldest ended ones go first).
pub const MAX_STATUSES: usize = 10_000;

/// Which tracker each team's trainings go to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackingSettings {
    /// `--mlflow-tracking-uri`: every team's, unless the team has its own.
    pub default_uri: Option<String>,
    /// `--team-mlflow TEAM=URL`.
    pub teams: HashMap<String, String>,
}

impl TrackingSettings {
    pub fn uri_for(&self, team: &str) -> Option<&str> {
        self.teams
            .get(team)
            .or(self.default_uri.as_ref())
            .map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.default_uri.is_none() && self.teams.is_empty()
    }
}

/// A training's run, as GetTraining shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStatus {
    pub uri: String,
    /// Empty until the run is made.
    pub run_id: String,
    pub experiment_id: String,
    /// Metric points the tracker took.
    pub logged: u64,
    /// Points dropped from a full backlog (the tracker was down too long).
    pub dropped: u64,
    /// Waiting to be sent.
    pub pending: u64,
    /// The last failure talking to the tracker (empty once it answers again).
    pub last_error: String,
    /// The run was ended (its status and report sent).
    pub ended: bool,
}

/// Every tracked training's status, and the order they came in.
type Statuses = (
    HashMap<String, RunStatus>,
    std::collections::VecDeque<String>,
);

/// The settings and every tracked training's status, shared with the API.
#[derive(Clone, Default)]
pub struct Tracking {
    pub settings: TrackingSettings,
    statuses: Arc<Mutex<Statuses>>,
    /// Points logged, dropped, and failed calls, across trainings.
    pub logged: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    pub errors: Arc<AtomicU64>,
}

impl std::fmt::Debug for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracking")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Tracking {
    pub fn new(settings: TrackingSettings) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// A training's run status, while kept.
    pub fn status(&self, training_id: &str) -> Option<RunStatus> {
        let guard = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.get(training_id).cloned()
    }

    /// Changes a training's status (kept; the oldest go past [`MAX_STATUSES`]).
    pub fn update(&self, training_id: &str, change: impl FnOnce(&mut RunStatus)) {
        let mut guard = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        if !map.contains_key(training_id) {
            order.push_back(training_id.to_string());
            while order.len() > MAX_STATUSES {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        change(map.entry(training_id.to_string()).or_default());
    }

    pub fn count_logged(&self, n: u64) {
        self.logged.fetch_add(n, Ordering::Relaxed);
    }

    pub fn count_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    pub fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

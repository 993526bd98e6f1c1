//! A sweep (docs/sweeps.md): trainings of one base config over a search
//! space, started by a searcher within a budget, judged on one objective.

use super::{GpuRequest, JobState};
use chrono::{DateTime, Utc};
use cohort_spec::sweep::{Params, Space};
use cohort_spec::Workload;

/// How a sweep picks its trials' params.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Searcher {
    /// Every combination of the space, in order.
    Grid,
    /// Seeded independent draws.
    Random,
    /// Random's draws, stopped early by asynchronous successive halving.
    Asha,
    /// Random's draws, stopped early when worse than the median.
    Median,
}

impl Searcher {
    pub fn as_str(self) -> &'static str {
        match self {
            Searcher::Grid => "grid",
            Searcher::Random => "random",
            Searcher::Asha => "asha",
            Searcher::Median => "median",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "grid" => Some(Searcher::Grid),
            "random" => Some(Searcher::Random),
            "asha" => Some(Searcher::Asha),
            "median" => Some(Searcher::Median),
            _ => None,
        }
    }

    /// Whether it stops trials early.
    pub fn stops_early(self) -> bool {
        matches!(self, Searcher::Asha | Searcher::Median)
    }
}

/// Which way the objective is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Minimize,
    Maximize,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Minimize => "minimize",
            Direction::Maximize => "maximize",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "minimize" => Some(Direction::Minimize),
            "maximize" => Some(Direction::Maximize),
            _ => None,
        }
    }

    /// Whether `a` is better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Direction::Minimize => a < b,
            Direction::Maximize => a > b,
        }
    }
}

/// The built-in SAE's metrics an objective may name, each with the
/// direction that is better when the request does not say.
pub const SAE_METRICS: &[(&str, Direction)] = &[
    ("loss", Direction::Minimize),
    ("mse", Direction::Minimize),
    ("l1", Direction::Minimize),
    ("l0", Direction::Minimize),
    ("explained_variance", Direction::Maximize),
    ("dead_fraction", Direction::Minimize),
];

/// The objective that ranks an SAE's trials by the L0 / explained-variance
/// frontier rather than one metric.
pub const FRONTIER: &str = "frontier";

/// What a sweep is judged on.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// A metric, or [`FRONTIER`].
    pub metric: String,
    /// The metric's; the frontier's is stored as maximize (explained
    /// variance, the value its rungs record beside the L0).
    pub direction: Direction,
}

impl Objective {
    pub fn is_frontier(&self) -> bool {
        self.metric == FRONTIER
    }
}

/// A sweep's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl SweepState {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepState::Running => "RUNNING",
            SweepState::Succeeded => "SUCCEEDED",
            SweepState::Failed => "FAILED",
            SweepState::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "RUNNING" => Some(SweepState::Running),
            "SUCCEEDED" => Some(SweepState::Succeeded),
            "FAILED" => Some(SweepState::Failed),
            "CANCELLED" => Some(SweepState::Cancelled),
            _ => None,
        }
    }

    pub fn is_final(self) -> bool {
        self != SweepState::Running
    }
}

/// What a sweep's trials are given, beside their params.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialTemplate {
    pub gpu_request: GpuRequest,
    pub priority: i32,
    pub priority_class: String,
    pub max_restarts: i32,
}

/// A stored sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub id: String,
    /// The client's idempotency key, if it gave one.
    pub request_id: Option<String>,
    pub team: String,
    pub creator: String,
    pub display_name: String,
    pub config: Workload,
    pub space: Space,
    pub searcher: Searcher,
    /// ASHA's reduction factor (0 for the other searchers).
    pub eta: f64,
    pub seed: u64,
    pub objective: Objective,
    pub max_trials: i32,
    pub max_concurrent: i32,
    /// 0: no limit.
    pub max_gpu_hours: f64,
    pub trial: TrialTemplate,
    pub state: SweepState,
    pub state_reason: String,
    pub create_time: DateTime<Utc>,
    pub end_time: Option<DateTime<Utc>>,
}

/// One trial, with its training's state now.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub index: i32,
    /// The searcher's draw it came from.
    pub draw: i32,
    pub training_id: String,
    pub params: Params,
    pub state: JobState,
    pub state_reason: String,
    /// QUEUED and held back by its sweep: paused at a rung until promoted.
    pub paused: bool,
}

impl Trial {
    /// Whether it is a result: not FAILED (a NaN loss is a failure) and
    /// not stopped early at a rung (its newest value is from part-way,
    /// judged worse there); one the budget stopped is what it reached.
    pub fn is_result(&self) -> bool {
        let stopped_early = self.state_reason.starts_with(STOPPED_BY_SEARCHER)
            && !self.state_reason.starts_with(BUDGET_SPENT);
        self.state != JobState::Failed && !stopped_early
    }
}

/// How the reason of a trial the searcher stopped begins.
pub const STOPPED_BY_SEARCHER: &str = "STOPPED_BY_SEARCHER";
/// How the reason of a trial stopped because the budget is spent begins.
pub const BUDGET_SPENT: &str = "STOPPED_BY_SEARCHER: the sweep's max_gpu_hours";

/// A trial's objective when the searcher first saw it at or past a rung.
#[derive(Debug, Clone, PartialEq)]
pub struct RungRecord {
    pub trial_index: i32,
    /// From 1.
    pub rung: i32,
    pub step: i64,
    /// The objective's value; for the frontier, the explained variance.
    pub value: f64,
    /// For the frontier, the L0 beside it.
    pub l0: Option<f64>,
}

//! What the scheduling policy looks at: one snapshot of the fleet, the
//! waiting and running trainings and the teams' shares, at one instant.
//! The coordinator builds one from its database and fleet for every pass;
//! the estimates and the simulator evolve one on virtual time with
//! [`Snapshot::apply`], [`Snapshot::end`] and [`Snapshot::requeue`].

use super::need::Need;
use super::placement::FleetView;
use super::shares::Shares;
use crate::fleet::Hold;
use crate::model::{GpuRequest, GpuSelection};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// A training as the policy sees it, waiting or running.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    pub team: String,
    /// The numeric priority (its class's value, or as given).
    pub priority: i32,
    /// Its priority class ("" for none).
    pub class: String,
    /// Its class may preempt lower priorities.
    pub preempting: bool,
    /// It may borrow idle quota.
    pub borrow: bool,
    /// Submitted at: the queue order's age (kept across preemptions).
    pub create_time: DateTime<Utc>,
    pub request: GpuRequest,
    pub need: Need,
    /// How long it runs once placed (a waiting training's), when known:
    /// its step rate and remaining steps, else its `expected_duration`
    /// less what it ran. (A running one's end is [`RunningJob::ends_at`].)
    pub remaining: Option<Duration>,
    /// Between a notice and SIGKILL.
    pub grace: Duration,
    /// How long its stop takes after a notice: a step and a checkpoint for
    /// a training that saves on notice, else the whole grace.
    pub stop_within: Duration,
    /// A notice loses (almost) nothing: it checkpoints when noticed.
    pub saves_on_notice: bool,
    /// It may change size while running (an elastic request of the
    /// built-in SAE): the policy grows it onto GPUs nobody waits for.
    pub resizable: bool,
}

impl Job {
    /// The GPUs it asks for, when the request says (AUTO: at least one; a
    /// range: its smallest size, what admits it).
    pub fn count(&self) -> usize {
        match &self.request.selection {
            GpuSelection::Count { count } => *count as usize,
            GpuSelection::Ids { ids } => ids.len(),
            GpuSelection::Auto { .. } => 1,
            GpuSelection::Range { sizes, .. } => sizes.first().map_or(1, |&s| s as usize),
        }
    }
}

/// A training waiting for GPUs: QUEUED, or RESTARTING.
#[derive(Debug, Clone)]
pub struct WaitingJob {
    pub job: Job,
    /// RESTARTING: placed before every QUEUED one.
    pub restarting: bool,
    /// RESTARTING only: its old gang is verified gone (else it waits).
    pub torn_down: bool,
    /// 0 until first placed.
    pub attempt: i32,
    /// Its pending reason now (rewritten only when it changes).
    pub state_reason: String,
    /// GPUs to avoid when re-placing it (the faulty one of a crash).
    pub avoid: HashSet<String>,
    /// The agent of its newest checkpoint: rank 0 goes there on a restart.
    pub leader: Option<String>,
}

impl WaitingJob {
    /// `job` just submitted: never placed, nothing to tear down or avoid.
    pub fn submitted(job: Job) -> Self {
        Self {
            job,
            restarting: false,
            torn_down: true,
            attempt: 0,
            state_reason: String::new(),
            avoid: HashSet::new(),
            leader: None,
        }
    }
}

/// Why a running training is stopping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopping {
    /// The training it makes room for (a drained agent's name for a drain).
    pub by: String,
    /// When it will be gone, at the latest.
    pub until: DateTime<Utc>,
}

/// A placed training (SCHEDULED or RUNNING) holding GPUs.
#[derive(Debug, Clone)]
pub struct RunningJob {
    pub job: Job,
    /// The GPUs its ranks hold (uuids).
    pub gpus: Vec<String>,
    /// When its current attempt was placed (the protection window runs from it).
    pub since: DateTime<Utc>,
    /// Its newest recorded checkpoint (of any attempt), if any.
    pub checkpoint_time: Option<DateTime<Utc>>,
    /// It was given a notice and is stopping.
    pub stopping: Option<Stopping>,
    /// When it ends at its pace, if known.
    pub ends_at: Option<DateTime<Utc>>,
}

impl RunningJob {
    /// GPU-seconds a preemption now would lose: the work since its newest
    /// checkpoint (or since its attempt began), unless it saves on notice.
    pub fn lost_if_preempted(&self, now: DateTime<Utc>) -> f64 {
        if self.job.saves_on_notice {
            return 0.0;
        }
        let from = self
            .checkpoint_time
            .map_or(self.since, |c| c.max(self.since));
        let secs = (now - from).num_milliseconds().max(0) as f64 / 1e3;
        secs * self.gpus.len() as f64
    }
}

/// One instant of the scheduler's world.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: DateTime<Utc>,
    pub fleet: FleetView,
    /// Waiting trainings, in no particular order.
    pub waiting: Vec<WaitingJob>,
    pub running: Vec<RunningJob>,
    pub shares: Shares,
    /// GPUs each team holds now (its running trainings', and those its
    /// restarting trainings take back).
    pub held: HashMap<String, i64>,
    /// Waiting trainings that made room (their victims stopping, or stopped
    /// moments ago), until when: the room is theirs, so a pass considers
    /// them before its queue order.
    pub claims: HashMap<String, DateTime<Utc>>,
}

/// How long after its victims are gone a claim lasts (a pass or two).
pub const CLAIM_AFTER_STOP: Duration = Duration::from_secs(120);

/// The hold the policy's own placements and reservations carry in a view.
pub fn hold_for(job: &Job, attempt: i32, rank: i32) -> Hold {
    Hold {
        training_id: job.id.clone(),
        attempt,
        rank,
        team: job.team.clone(),
    }
}

impl Snapshot {
    /// The running training `id`, if any.
    pub fn running(&self, id: &str) -> Option<&RunningJob> {
        self.running.iter().find(|r| r.job.id == id)
    }

    /// A running training ended (succeeded, failed, was cancelled, or
    /// stopped after a notice): its GPUs are free.
    pub fn end(&mut self, id: &str) -> Option<RunningJob> {
        let i = self.running.iter().position(|r| r.job.id == id)?;
        let gone = self.running.swap_remove(i);
        self.fleet.release(&gone.gpus);
        *self.held.entry(gone.job.team.clone()).or_default() -= gone.gpus.len() as i64;
        Some(gone)
    }

    /// A stopped training goes back to the queue (a preemption): it runs
    /// `remaining` more once placed again.
    pub fn requeue(&mut self, id: &str, remaining: Option<Duration>) {
        let Some(mut gone) = self.end(id) else {
            return;
        };
        gone.job.remaining = remaining;
        self.waiting.push(WaitingJob {
            attempt: 1,
            ..WaitingJob::submitted(gone.job)
        });
    }
}

//! Starts, watches and stops `cohort-rank` processes.
//!
//! Each rank runs in its own process group so that stopping it reaches every
//! process it forked. Its stdout is read line by line: progress lines
//! ([`cohort_spec::progress::ProgressLine`]) become [`RankEventKind::Progress`],
//! anything else is logged. Its stderr is logged and its last lines are kept for
//! the exit report. Both (less the progress lines) go to the rank's [`log`]. Events leave through one mpsc channel, in order per rank:
//! `Started`, any number of `Progress`, then exactly one `Exited`.

pub mod cgroup;
mod error;
mod events;
pub mod log;
mod process;
mod signal;
pub(crate) mod spawner;
mod spec;
mod stop;

pub use error::SupervisorError;
pub use events::{RankEvent, RankEventKind, RankExit, STDERR_TAIL_LINES};
pub use spec::{default_rank_program, NoticeSpec, RankKey, RankSpec, RANK_PROGRAM_NAME};
pub use stop::{RankStopper, StopOutcome};

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;

use process::RankHandle;

/// Time a rank gets between SIGTERM and SIGKILL unless told otherwise.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

/// The ranks this agent runs, keyed by (job id, attempt, rank).
///
/// Dropping the supervisor SIGKILLs every process group it still runs.
pub struct Supervisor {
    events: mpsc::Sender<RankEvent>,
    ranks: HashMap<RankKey, RankHandle>,
    grace: Duration,
}

impl Supervisor {
    /// Events go to `events`; the receiver must keep draining it, or ranks
    /// block once their output fills the channel and the pipe behind it.
    pub fn new(events: mpsc::Sender<RankEvent>, grace: Duration) -> Self {
        Self {
            events,
            ranks: HashMap::new(),
            grace,
        }
    }

    /// Starts one rank process and returns its pid (also its process group id).
    /// The rank is SIGKILLed by the kernel if the agent dies. Must be called
    /// inside a tokio runtime.
    pub async fn start(&mut self, spec: RankSpec) -> Result<u32, SupervisorError> {
        self.ranks.retain(|_, h| !h.has_exited());
        if self.ranks.contains_key(&spec.key) {
            return Err(SupervisorError::AlreadyRunning(spec.key));
        }
        let key = spec.key.clone();
        let handle = process::spawn(spec, self.events.clone()).await?;
        let pid = handle.pid();
        self.ranks.insert(key, handle);
        Ok(pid)
    }

    /// Ranks whose process has not exited yet.
    pub fn running(&self) -> Vec<RankKey> {
        let mut keys: Vec<RankKey> = self
            .ranks
            .iter()
            .filter(|(_, h)| !h.has_exited())
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// The pid of a running rank.
    pub fn pid(&self, key: &RankKey) -> Option<u32> {
        self.ranks
            .get(key)
            .filter(|h| !h.has_exited())
            .map(|h| h.pid())
    }

    /// Running ranks with their pids, in key order (for re-registration).
    pub fn running_pids(&self) -> Vec<(RankKey, u32)> {
        self.running()
            .into_iter()
            .filter_map(|k| self.pid(&k).map(|pid| (k, pid)))
            .collect()
    }

    /// Stoppers for the ranks of `job_id` (one attempt, or all when `None`)
    /// with their own grace period, to run from a spawned task.
    pub fn stoppers(
        &self,
        job_id: &str,
        attempt: Option<u32>,
        grace: Duration,
    ) -> Vec<RankStopper> {
        let mut keys: Vec<&RankKey> = self
            .ranks
            .keys()
            .filter(|k| k.job_id == job_id && attempt.is_none_or(|a| k.attempt == a))
            .collect();
        keys.sort();
        keys.into_iter()
            .map(|k| RankStopper::new(k.clone(), self.ranks[k].clone(), grace))
            .collect()
    }

    /// Stoppers that give the ranks of one attempt of `job_id` a preemption
    /// notice (see [`RankStopper::notice`]) with their own grace period.
    pub fn noticers(&self, job_id: &str, attempt: u32, grace: Duration) -> Vec<RankStopper> {
        self.stoppers(job_id, Some(attempt), grace)
    }

    /// A handle that stops one rank without borrowing the supervisor, for
    /// callers that stop ranks from a spawned task.
    pub fn stopper(&self, key: &RankKey) -> Option<RankStopper> {
        self.ranks
            .get(key)
            .map(|h| RankStopper::new(key.clone(), h.clone(), self.grace))
    }

    /// SIGTERM to the rank's group, SIGKILL after the grace period; returns once
    /// the process is reaped and its group is gone.
    pub async fn stop(&self, key: &RankKey) -> Result<StopOutcome, SupervisorError> {
        let stopper = self
            .stopper(key)
            .ok_or_else(|| SupervisorError::NotFound(key.clone()))?;
        Ok(stopper.stop().await)
    }

    /// Stops every rank of `job_id` (all attempts) at once.
    pub async fn stop_job(&self, job_id: &str) -> Vec<(RankKey, StopOutcome)> {
        let keys: Vec<RankKey> = self
            .ranks
            .keys()
            .filter(|k| k.job_id == job_id)
            .cloned()
            .collect();
        self.stop_many(keys).await
    }

    /// Stops every rank; used when the agent shuts down.
    pub async fn shutdown(&mut self) -> Vec<(RankKey, StopOutcome)> {
        let keys: Vec<RankKey> = self.ranks.keys().cloned().collect();
        let outcomes = self.stop_many(keys).await;
        self.ranks.clear();
        outcomes
    }

    async fn stop_many(&self, keys: Vec<RankKey>) -> Vec<(RankKey, StopOutcome)> {
        let stoppers = keys.iter().filter_map(|k| self.stopper(k)).collect();
        RankStopper::stop_all(stoppers).await
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        for (key, handle) in &self.ranks {
            if !handle.has_exited() {
                tracing::warn!(rank = %key, pid = handle.pid(), "killing rank group on supervisor drop");
                signal::kill_group(handle.pid(), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

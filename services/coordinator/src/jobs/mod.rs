//! Running training jobs: the scheduling loop that places QUEUED trainings on
//! free GPUs (gang: all ranks or none) and tells the agents to start them, and
//! the reactions to what the agents report (ranks started, progress,
//! checkpoints, exits) and to cancels. Every state change goes through the
//! database first (one transaction each); the fleet's GPU holds follow.

mod commands;
pub mod placement;

use crate::fleet::{Fleet, Hold};
use crate::model::{GpuRequest, GpuSelection, JobState, Placement, RankSlot, RankState, Training};
use crate::persistence::{DatabaseError, Persistence};
use cohort_proto::v1;
use cohort_spec::exit::{classify, ExitClass};
use cohort_spec::progress::ProgressLine;
use placement::Unplaceable;
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Tuning of the job runner.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// How long ranks get between SIGTERM and SIGKILL when stopped.
    pub stop_grace: Duration,
    /// Ports MASTER_PORT is chosen from.
    pub master_ports: RangeInclusive<u16>,
    /// How often the queue is looked at even when nothing happened.
    pub schedule_interval: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            stop_grace: Duration::from_secs(5),
            master_ports: 29500..=29999,
            schedule_interval: Duration::from_secs(2),
        }
    }
}

/// Shared by the services; cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    db: Persistence,
    fleet: Fleet,
    wake: Arc<Notify>,
    settings: Arc<JobSettings>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}

/// What `plan` decided for one training.
pub type Plan = Result<Vec<RankSlot>, Unplaceable>;

impl Jobs {
    pub fn new(db: Persistence, fleet: Fleet, settings: JobSettings) -> Self {
        Self {
            db,
            fleet,
            wake: Arc::new(Notify::new()),
            settings: Arc::new(settings),
        }
    }

    /// Ask the scheduler to look at the queue now.
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// After a restart: hold the GPUs of every training that was placed, so
    /// nothing else lands on them while their agents reconnect.
    pub async fn adopt(&self) -> Result<usize, DatabaseError> {
        let active = self.db.active_placements().await?;
        for (training, ranks) in &active {
            let holds = ranks
                .iter()
                .map(|r| (r.slot.gpu_uuid.clone(), hold_of(training, r.slot.rank)))
                .collect();
            if let Err(uuid) = self.fleet.hold(holds) {
                tracing::warn!(training_id = %training.id, gpu = %uuid, "gpu held twice in the database");
            }
        }
        tracing::info!(trainings = active.len(), "adopted placed trainings");
        Ok(active.len())
    }

    /// The scheduling loop; returns when `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.schedule_pass().await {
                tracing::warn!(error = %e, "scheduling pass failed");
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.settings.schedule_interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Where a training asking for `request` would go right now, without placing it.
    pub fn plan(&self, request: &GpuRequest) -> Plan {
        let free = self.fleet.free_gpus();
        let any_agent = !self.fleet.agents().is_empty();
        match &request.selection {
            GpuSelection::Count { count } => placement::by_count(&free, *count as usize, any_agent),
            GpuSelection::Auto { max_gpus } => {
                let bound = if *max_gpus == 0 {
                    usize::MAX
                } else {
                    *max_gpus as usize
                };
                placement::by_count(&free, free.len().min(bound).max(1), any_agent)
            }
            GpuSelection::Ids { ids } => {
                let known: Vec<String> = self
                    .fleet
                    .all_gpus()
                    .into_iter()
                    .map(|(_, g)| g.uuid)
                    .collect();
                placement::by_ids(&free, &known, ids)
            }
        }
    }

    /// One look at the queue: place what fits, in priority then age order;
    /// refresh the pending reason of what doesn't.
    pub async fn schedule_pass(&self) -> Result<(), DatabaseError> {
        for training in self.db.queued_trainings().await? {
            match self.plan(&training.gpu_request) {
                Ok(slots) => self.start(&training, slots).await?,
                Err(why) if !training.gpu_request.queue => {
                    let reason = format!("cannot be placed and queueing is off: {why}");
                    self.finish(&training.id, JobState::Failed, &reason).await?;
                }
                Err(why) => {
                    let reason = why.to_string();
                    if training.state_reason != reason {
                        self.db.set_pending_reason(&training.id, &reason).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A MASTER_PORT on `host` that no placed training uses, from a random
    /// point of the configured range.
    async fn master_port(&self, host: &str) -> Result<u16, DatabaseError> {
        let used: HashSet<u16> = self
            .db
            .active_placements()
            .await?
            .into_iter()
            .filter(|(t, _)| t.master_addr.as_deref() == Some(host))
            .filter_map(|(t, _)| t.master_port.and_then(|p| u16::try_from(p).ok()))
            .collect();
        let range = self.settings.master_ports.clone();
        let span = u64::from(*range.end() - *range.start()) + 1;
        let offset = (uuid::Uuid::new_v4().as_u128() % u128::from(span)) as u64;
        Ok((0..span)
            .map(|i| *range.start() + ((offset + i) % span) as u16)
            .find(|p| !used.contains(p))
            .unwrap_or(*range.start()))
    }

    /// Place a training: hold its GPUs, persist the rank map (SCHEDULED), and
    /// send each agent its ranks.
    async fn start(&self, training: &Training, slots: Vec<RankSlot>) -> Result<(), DatabaseError> {
        let attempt = training.attempt + 1;
        let holds = slots
            .iter()
            .map(|s| {
                (
                    s.gpu_uuid.clone(),
                    Hold {
                        training_id: training.id.clone(),
                        attempt,
                        rank: s.rank,
                    },
                )
            })
            .collect();
        if self.fleet.hold(holds).is_err() {
            return Ok(()); // raced with another placement: next pass
        }
        let Some(leader) = self.fleet.agent(&slots[0].agent_id) else {
            self.fleet.release(&training.id);
            return Ok(());
        };
        let master_addr = if leader.address.is_empty() {
            leader.host_name.clone()
        } else {
            leader.address.clone()
        };
        let master_port = match self.master_port(&master_addr).await {
            Ok(p) => p,
            Err(e) => {
                self.fleet.release(&training.id);
                return Err(e);
            }
        };
        let placement = Placement {
            master_port,
            master_addr,
            slots,
        };
        let hosts: HashSet<&str> = placement
            .slots
            .iter()
            .map(|s| s.agent_id.as_str())
            .collect();
        let reason = format!(
            "placed {} ranks on {} agent(s)",
            placement.slots.len(),
            hosts.len()
        );
        let placed = match self
            .db
            .place_training(&training.id, placement.clone(), &reason)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                self.fleet.release(&training.id);
                return Err(e);
            }
        };
        tracing::info!(training_id = %placed.id, attempt, world_size = placed.world_size,
            master = %format!("{}:{}", placement.master_addr, placement.master_port), "training placed");
        if let Err(agent) = commands::start_ranks(&self.fleet, &placed, &placement) {
            let why = format!("agent {agent} went away before its ranks started");
            self.stop_attempt(&placed, &why).await;
            self.finish(&placed.id, JobState::Queued, &why).await?;
        }
        Ok(())
    }

    /// Stop an attempt's ranks everywhere and mark the live ones STOPPED.
    async fn stop_attempt(&self, training: &Training, reason: &str) {
        let ranks = match self.db.ranks(&training.id, training.attempt).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(training_id = %training.id, error = %e, "cannot read ranks to stop");
                return;
            }
        };
        commands::stop_ranks(
            &self.fleet,
            training,
            &ranks,
            self.settings.stop_grace,
            reason,
        );
        if let Err(e) = self
            .db
            .end_live_ranks(&training.id, training.attempt, RankState::Stopped)
            .await
        {
            tracing::warn!(training_id = %training.id, error = %e, "cannot mark ranks stopped");
        }
    }

    /// Move to `to` and free the GPUs when that ends the attempt. An illegal
    /// transition (someone else got there first) is not an error here.
    async fn finish(
        &self,
        training_id: &str,
        to: JobState,
        reason: &str,
    ) -> Result<(), DatabaseError> {
        match self.db.transition(training_id, to, reason).await {
            Ok(_) | Err(DatabaseError::IllegalTransition { .. }) => {}
            Err(e) => return Err(e),
        }
        self.fleet.release(training_id);
        self.kick();
        Ok(())
    }

    /// Cancel a training in any non-final state: persist CANCELLED, then stop
    /// its ranks and free its GPUs.
    pub async fn cancel(&self, training_id: &str, reason: &str) -> Result<Training, DatabaseError> {
        let cancelled = self
            .db
            .transition(training_id, JobState::Cancelled, reason)
            .await?;
        if cancelled.attempt > 0 {
            self.stop_attempt(&cancelled, "cancelled").await;
        }
        self.fleet.release(training_id);
        self.kick();
        tracing::info!(training_id, "training cancelled");
        Ok(cancelled)
    }

    /// React to one rank event from `agent_id`.
    pub async fn on_rank_event(
        &self,
        agent_id: &str,
        event: v1::RankEvent,
    ) -> Result<(), DatabaseError> {
        use v1::rank_event::Kind;
        let (id, attempt, rank) = (event.training_id.as_str(), event.attempt, event.rank);
        match event.kind {
            Some(Kind::Started(s)) => {
                if let Some(t) = self
                    .db
                    .rank_started(id, attempt, rank, i64::from(s.pid))
                    .await?
                {
                    tracing::info!(training_id = %t.id, attempt, "training running");
                }
            }
            Some(Kind::Progress(p)) => match ProgressLine::parse(&p.json_line) {
                Some(line @ ProgressLine::Checkpoint { .. }) => {
                    self.db
                        .record_checkpoint(id, attempt, agent_id, line)
                        .await?
                }
                Some(line) => {
                    self.db
                        .append_event(id, attempt, crate::model::EventPayload::Rank(line))
                        .await?;
                }
                None => {
                    tracing::debug!(training_id = id, rank, "ignoring an unknown progress line")
                }
            },
            Some(Kind::Exited(exit)) => {
                use v1::rank_exited::Status;
                let (code, signal) = match exit.status {
                    Some(Status::ExitCode(c)) => (Some(c), None),
                    Some(Status::Signal(s)) => (None, Some(s)),
                    None => (None, None),
                };
                let state = if code == Some(0) {
                    RankState::Succeeded
                } else {
                    RankState::Failed
                };
                let ranks = self
                    .db
                    .rank_ended(id, attempt, rank, state, code, signal)
                    .await?;
                let cause = describe_exit(rank, code, signal, &exit.stderr_tail);
                self.after_rank_end(id, attempt, state, &ranks, cause)
                    .await?;
            }
            Some(Kind::StartFailed(f)) => {
                let ranks = self
                    .db
                    .rank_ended(id, attempt, rank, RankState::Failed, None, None)
                    .await?;
                let cause = format!("rank {rank} could not start: {}", f.message);
                self.after_rank_end(id, attempt, RankState::Failed, &ranks, cause)
                    .await?;
            }
            None => {}
        }
        Ok(())
    }

    async fn after_rank_end(
        &self,
        training_id: &str,
        attempt: i32,
        state: RankState,
        ranks: &[crate::model::RankRecord],
        cause: String,
    ) -> Result<(), DatabaseError> {
        let Some(training) = self.db.get_training(training_id).await? else {
            return Ok(());
        };
        if training.attempt != attempt || training.state.is_final() {
            return Ok(()); // an old attempt, or a cancel already handled it
        }
        if state == RankState::Failed {
            tracing::warn!(training_id, attempt, cause = %cause, "rank failed");
            self.stop_attempt(&training, &cause).await;
            return self.finish(training_id, JobState::Failed, &cause).await;
        }
        if ranks.iter().all(|r| r.state == RankState::Succeeded) {
            if training.state == JobState::Scheduled {
                // exits overtook a start report from another agent
                self.finish(training_id, JobState::Running, "all ranks started")
                    .await?;
            }
            let reason = format!("all {} ranks exited 0", ranks.len());
            tracing::info!(training_id, attempt, "training succeeded");
            return self.finish(training_id, JobState::Succeeded, &reason).await;
        }
        Ok(())
    }

    /// An agent (re)registered reporting ranks it runs: stop those that belong
    /// to no live attempt (the training ended or moved on while it was away).
    pub async fn reconcile_agent(
        &self,
        agent_id: &str,
        running: &[v1::RunningRank],
    ) -> Result<(), DatabaseError> {
        for r in running {
            let live = match self.db.get_training(&r.training_id).await? {
                Some(t) => !t.state.is_final() && t.attempt == r.attempt,
                None => false,
            };
            if !live {
                tracing::info!(agent_id, training_id = %r.training_id, attempt = r.attempt, rank = r.rank, "stopping a stale rank");
                commands::stop_stale(&self.fleet, agent_id, r, self.settings.stop_grace);
            }
        }
        Ok(())
    }
}

fn hold_of(training: &Training, rank: i32) -> Hold {
    Hold {
        training_id: training.id.clone(),
        attempt: training.attempt,
        rank,
    }
}

/// A rank's end in words: code, class and the last line of its stderr.
pub fn describe_exit(
    rank: i32,
    code: Option<i32>,
    signal: Option<i32>,
    stderr_tail: &str,
) -> String {
    let class = match classify(code) {
        ExitClass::Success => "success",
        ExitClass::UserError => "user error",
        ExitClass::Infrastructure => "infrastructure error",
        ExitClass::OutOfMemory => "out of memory",
        ExitClass::Stopped => "stopped",
    };
    let how = match (code, signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".to_string(),
    };
    let last = stderr_tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if last.is_empty() {
        format!("rank {rank} {how} ({class})")
    } else {
        format!("rank {rank} {how} ({class}): {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described_with_their_class_and_last_stderr_line() {
        assert_eq!(
            describe_exit(1, Some(4), None, "loading\ncohort-rank: error: invalid data: x.npy: file is empty\n"),
            "rank 1 exited with code 4 (user error): cohort-rank: error: invalid data: x.npy: file is empty"
        );
        assert_eq!(
            describe_exit(0, None, Some(9), ""),
            "rank 0 was killed by signal 9 (infrastructure error)"
        );
    }
}

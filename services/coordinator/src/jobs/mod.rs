//! Running training jobs: the scheduling loop that applies the policy's
//! decisions ([`crate::policy`]) — placements (gang: all ranks or none)
//! started on the agents, notices to preempted gangs ([`notice`]); the
//! reactions to what the agents report ([`events`]); gang restarts within
//! a budget ([`failure`]); the watchdog for lost agents and hangs
//! ([`watchdog`]); and the start-time estimates ([`estimates`]). Every
//! state change goes through the database first (one transaction each);
//! the fleet's GPU holds follow.

mod commands;
mod drain;
pub mod estimates;
mod events;
mod failure;
pub mod flags;
mod lifecycle;
mod needs;
mod notice;
pub mod oom;
mod pace;
pub mod passes;
pub mod pause;
pub mod positions;
pub mod queue;
pub mod quota;
mod resize;
mod runtime;
mod scheduling;
mod snapshot;
mod start;
mod tracker;
mod usage;
mod watchdog;

pub use failure::describe_exit;
pub use quota::QuotaDefaults;
pub use tracker::StragglerChange;

use crate::fleet::{Fleet, Hold};
use crate::model::{GpuRequest, JobState, RunningRank, Training};
use crate::persistence::waiting::WaitingTraining;
use crate::persistence::{DatabaseError, LogicalError, Persistence};
use crate::policy::{placement, FleetView, Policy, PriorityClasses};
use runtime::{Outcome, Runtime};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracker::AttemptProgress;

/// Tuning of the job runner.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// How long ranks get between SIGTERM and SIGKILL when stopped.
    pub stop_grace: Duration,
    /// Ports MASTER_PORT is chosen from.
    pub master_ports: RangeInclusive<u16>,
    /// How often the queue and the watchdog run even when nothing happened.
    pub schedule_interval: Duration,
    /// An agent silent (or gone) this long is lost; its ranks are restarted elsewhere.
    pub agent_timeout: Duration,
    /// A running attempt silent for max(hang_factor x time between reports,
    /// hang_floor) is hung and restarted.
    pub hang_floor: Duration,
    pub hang_factor: f64,
    /// After a rank reports a lost peer, how long to wait for the others to
    /// exit before naming the ones that didn't as hung.
    pub peer_lost_grace: Duration,
    /// The scheduling policy (queue order, preemption, lending, fair share).
    pub policy: Policy,
    /// `--priority-class`: the named priorities.
    pub classes: PriorityClasses,
    /// `--fair-share-half-life`: usage halves over this long.
    pub fair_share_half_life: Duration,
    /// How often the start-time estimates are recomputed, at most.
    pub estimate_interval: Duration,
    /// Where each ended training's report files go
    /// (`<reports_dir>/<training-id>/`); none written when unset.
    pub reports_dir: Option<std::path::PathBuf>,
    /// Team quotas' defaults.
    pub quotas: QuotaDefaults,
    /// `--gpu-price`: what a GPU-hour costs, by GPU model (the reports' cost).
    pub prices: crate::report::cost::Prices,
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            stop_grace: Duration::from_secs(5),
            master_ports: 29500..=29999,
            schedule_interval: Duration::from_secs(1),
            agent_timeout: Duration::from_secs(10),
            hang_floor: Duration::from_secs(60),
            hang_factor: 5.0,
            peer_lost_grace: Duration::from_secs(2),
            policy: Policy::default(),
            classes: PriorityClasses::default(),
            fair_share_half_life: Duration::from_secs(7 * 86_400),
            estimate_interval: Duration::from_secs(5),
            reports_dir: None,
            quotas: QuotaDefaults::default(),
            prices: Default::default(),
        }
    }
}

/// The longest a kicked scheduling pass waits after the last one (see [`Jobs::run`]).
const MAX_REST: Duration = Duration::from_millis(500);

/// Shared by the services; cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    db: Persistence,
    fleet: Fleet,
    wake: Arc<Notify>,
    /// New trainings (see [`Jobs::arrived`]).
    arrivals: Arc<Notify>,
    settings: Arc<JobSettings>,
    runtime: Arc<Mutex<Runtime>>,
    /// Where report writers and pending decisions run (drained at shutdown).
    tasks: crate::tasks::Tasks,
    /// The waiting trainings' positions, kept between reads.
    positions: positions::PositionCache,
    /// What the scheduling passes cost.
    passes: passes::PassStats,
    /// What each waiting or placed training tells the scheduler.
    profiles: needs::Profiles,
    /// The estimates last written, and when.
    estimates: estimates::EstimateCache,
    /// When the teams' usage was last accrued.
    usage: usage::UsageClock,
    /// The teams' highest priority classes, kept briefly for creates.
    caps: quota::ClassCaps,
    /// Trainings that made room by a notice just closed, until when (a
    /// handful: each goes within minutes).
    claims: Arc<Mutex<std::collections::HashMap<String, chrono::DateTime<chrono::Utc>>>>,
    /// Elastic trainings re-forming at another size, until placed.
    resizing: resize::Resizing,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}

pub use placement::Plan;

impl Jobs {
    pub fn new(
        db: Persistence,
        fleet: Fleet,
        settings: JobSettings,
        tasks: crate::tasks::Tasks,
    ) -> Self {
        Self {
            db,
            fleet,
            wake: Arc::new(Notify::new()),
            arrivals: Arc::new(Notify::new()),
            settings: Arc::new(settings),
            runtime: Arc::default(),
            positions: Default::default(),
            passes: Default::default(),
            profiles: Default::default(),
            estimates: Default::default(),
            usage: Default::default(),
            caps: Default::default(),
            claims: Default::default(),
            resizing: Default::default(),
            tasks,
        }
    }

    /// What the last scheduling pass cost (and the slowest so far).
    pub fn pass_figures(&self) -> passes::PassFigures {
        self.passes.figures()
    }

    fn rt(&self) -> std::sync::MutexGuard<'_, Runtime> {
        self.runtime.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn settings(&self) -> &JobSettings {
        &self.settings
    }

    /// Ask the scheduler to look at the queue now.
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// A new training is waiting: a pass comes at once while some GPU is
    /// free; while none is (no agent, every GPU held), the next regular pass
    /// (within `schedule_interval`) gives it its pending reason, so a burst
    /// of creates does not run a pass over the whole queue after each batch.
    pub fn arrived(&self) {
        self.arrivals.notify_one();
    }

    /// Ranks of a training's current attempt that straggle.
    pub fn stragglers(&self, training_id: &str) -> Vec<i32> {
        self.rt()
            .get(training_id)
            .and_then(|t| t.progress.as_ref())
            .map(|p| p.stragglers.clone())
            .unwrap_or_default()
    }

    /// After a restart: hold the GPUs of every training that was placed, so
    /// nothing else lands on them while their agents reconnect.
    pub async fn adopt(&self) -> Result<usize, DatabaseError> {
        let active = self.db.active_placements().await?;
        for (training, ranks) in &active {
            let holds = ranks
                .iter()
                .map(|r| {
                    (
                        r.slot.gpu_uuid.clone(),
                        hold_of(&training.id, &training.team, training.attempt, r.slot.rank),
                    )
                })
                .collect();
            if let Err(uuid) = self.fleet.hold(holds) {
                tracing::warn!(training_id = %training.id, gpu = %uuid, "gpu held twice in the database");
            }
            self.track(training);
        }
        tracing::info!(trainings = active.len(), "adopted placed trainings");
        Ok(active.len())
    }

    fn track(&self, training: &Training) {
        let mut progress = AttemptProgress::new(
            training.attempt,
            usize::try_from(training.world_size).unwrap_or(0),
            training
                .config
                .sae()
                .map_or(1, |c| c.runtime.log_every_steps),
            Instant::now(),
        );
        if let Some(program) = training.config.program() {
            progress.fixed_deadline = Some(program.heartbeat());
        }
        self.rt().of(&training.id).progress = Some(progress);
    }

    /// The scheduling loop and watchdog; returns when `shutdown` resolves.
    ///
    /// A pass looks at the whole queue, so passes kicked back to back (a
    /// burst of creates) would take a core at a long queue: after a pass,
    /// the next one waits at least twice as long as it took (at most
    /// [`MAX_REST`]), which keeps the passes to a third of a core.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let began = Instant::now();
            if let Err(e) = self.watchdog_pass().await {
                tracing::warn!(error = %e, "watchdog pass failed");
            }
            if let Err(e) = self.drain_pass().await {
                tracing::warn!(error = %e, "drain pass failed");
            }
            if let Err(e) = self.notice_pass().await {
                tracing::warn!(error = %e, "notice pass failed");
            }
            if let Err(e) = self.accrue_usage().await {
                tracing::warn!(error = %e, "usage accrual failed");
            }
            if let Err(e) = self.schedule_pass().await {
                tracing::warn!(error = %e, "scheduling pass failed");
            }
            let rested = Instant::now() + (began.elapsed() * 2).min(MAX_REST);
            let full = self.passes.full();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = self.arrivals.notified(), if !full => {}
                _ = tokio::time::sleep(self.settings.schedule_interval) => {}
                _ = &mut shutdown => return,
            }
            tokio::select! {
                _ = tokio::time::sleep_until(rested) => {}
                _ = &mut shutdown => return,
            }
        }
    }

    /// Where a new training would go right now, without placing it (see
    /// [`placement::plan_first`]).
    pub fn plan_first(
        &self,
        request: &GpuRequest,
        config: &cohort_spec::Workload,
        team: &str,
    ) -> Plan {
        let need = crate::policy::Need::of(config);
        let fleet = FleetView::of(&self.fleet);
        match need.program_dir.as_deref() {
            Some(dir) => {
                placement::plan_first(&fleet.for_program(team, dir)?, request, need.memory)
            }
            None => placement::plan_first(&fleet, request, need.memory),
        }
    }

    /// The waiting trainings in scheduling order (see [`QueuePolicy::schedule`]).
    pub async fn waiting(&self) -> Result<Vec<WaitingTraining>, DatabaseError> {
        let waiting = self.db.waiting_trainings().await?;
        Ok(self
            .settings
            .policy
            .queue
            .schedule(waiting, chrono::Utc::now()))
    }

    /// The waiting trainings' positions in the scheduling order (1 = placed
    /// next), read again only after a state change (see [`positions`]).
    pub async fn queue_positions(&self) -> Result<Arc<positions::QueuePositions>, DatabaseError> {
        let epoch = self.db.events_bell().state_epoch();
        let (db, policy) = (self.db.clone(), self.settings.policy.queue.clone());
        self.positions
            .get_or_refresh(epoch, move || async move {
                // The order of `waiting`, from the keys alone.
                let order = policy.schedule(db.waiting_keys().await?, chrono::Utc::now());
                Ok(positions::QueuePositions::new(
                    epoch,
                    order.iter().map(|k| k.id.as_str()),
                ))
            })
            .await
    }

    /// How many QUEUED trainings a team without a cap of its own may have.
    pub fn default_queue_cap(&self) -> i64 {
        i64::from(self.settings.quotas.max_queued)
    }

    /// Move to `to`, free the GPUs and forget the attempt (and, in a final
    /// state, the training). An illegal transition (someone else got there
    /// first) is not an error here.
    async fn finish(
        &self,
        training_id: &str,
        to: JobState,
        reason: &str,
    ) -> Result<(), DatabaseError> {
        self.settle(training_id, to, reason).await?;
        let outcome = if to.is_final() {
            Outcome::Final { state: to, reason }
        } else {
            Outcome::Retry { reason }
        };
        self.forget(training_id, outcome);
        Ok(())
    }

    /// Move to `to` and free the GPUs, keeping the runner's state.
    async fn settle(
        &self,
        training_id: &str,
        to: JobState,
        reason: &str,
    ) -> Result<(), DatabaseError> {
        match self.db.transition(training_id, to, reason).await {
            Ok(_) | Err(DatabaseError::Logical(LogicalError::IllegalTransition { .. })) => {}
            Err(e) => return Err(e),
        }
        self.fleet.release(training_id);
        self.kick();
        Ok(())
    }

    /// The one exit of a training's attempt from the runner's memory (see
    /// [`Runtime::forget`]); a final outcome also writes the training's report.
    fn forget(&self, training_id: &str, outcome: Outcome<'_>) {
        self.rt().forget(training_id, outcome);
        if let Outcome::Final { .. } = outcome {
            self.write_report(training_id);
        }
    }

    /// Whether the runner keeps anything in memory for `training_id` (an
    /// attempt's progress, GPUs to avoid, a teardown, open lifecycle spans).
    pub fn tracks(&self, training_id: &str) -> bool {
        self.rt().tracks(training_id)
    }

    /// Cancel a training in any non-final state: persist CANCELLED, then stop
    /// its ranks and free its GPUs.
    /// Cancels a training (its audit row, when a caller asked, written in
    /// the same transaction), stops its ranks and frees its GPUs.
    pub async fn cancel(
        &self,
        training_id: &str,
        reason: &str,
        audit: Option<crate::model::AuditEntry>,
    ) -> Result<Training, DatabaseError> {
        let cancelled = self.db.cancel_training(training_id, reason, audit).await?;
        if cancelled.attempt > 0 {
            self.stop_attempt(&cancelled, "cancelled").await;
        }
        self.fleet.release(training_id);
        self.forget(
            training_id,
            Outcome::Final {
                state: JobState::Cancelled,
                reason,
            },
        );
        self.kick();
        tracing::info!(training_id, "training cancelled");
        Ok(cancelled)
    }

    /// Writes the report files of a training that ended, in the background.
    fn write_report(&self, training_id: &str) {
        if let Some(dir) = &self.settings.reports_dir {
            self.tasks.spawn(crate::report::files::write(
                self.db.clone(),
                dir.clone(),
                training_id.to_string(),
                self.settings.prices.clone(),
            ));
        }
    }

    /// An agent (re)registered reporting ranks it runs: stop those that belong
    /// to no live attempt (the training ended or moved on while it was away).
    pub async fn reconcile_agent(
        &self,
        agent_id: &str,
        running: &[RunningRank],
    ) -> Result<(), DatabaseError> {
        self.rt().missing_since.remove(agent_id);
        self.renotice(agent_id, running).await?;
        for r in running {
            let live = match self.db.get_training(&r.training_id).await? {
                Some(t) => {
                    matches!(t.state, JobState::Scheduled | JobState::Running)
                        && t.attempt == r.attempt
                }
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

fn hold_of(training_id: &str, team: &str, attempt: i32, rank: i32) -> Hold {
    Hold {
        training_id: training_id.to_string(),
        attempt,
        rank,
        team: team.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests;

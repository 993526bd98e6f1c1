//! Notices: a placed gang asked to stop with a checkpoint, to make room
//! (a preemption or a reclaim) or to move off a drained agent. The
//! decision is written first (with its audit row), then the attempt's
//! agents are told; the built-in rank finishes its step, checkpoints and
//! exits PREEMPTED, a program gets SIGTERM and its notice file. When the
//! whole gang is gone the notice closes exactly once: the training goes
//! back to QUEUED (or RESTARTING, for a drain) with no restart spent and a
//! `preempted` event, resuming later from its newest checkpoint (a sweep's
//! pause, [`super::pause`], leaves it QUEUED but held). Past the
//! deadline (grace + agent timeout) what is left is killed. A coordinator
//! that takes over finds the notices in the database and finishes them.

use super::runtime::Outcome;
use super::{commands, Jobs};
use crate::model::{AuditEntry, JobState, Preempted, RankRecord, RankState, Training};
use crate::persistence::notices::{Notice, NoticeEnd};
use crate::persistence::DatabaseError;
use crate::policy::{NoticeKind, Preemption, RunningJob};
use chrono::Utc;
use std::time::Duration;

/// Beyond the grace and the agent timeout, before a notice is forced.
const NOTICE_SLACK: Duration = Duration::from_secs(5);

/// "60s", "5m 0s": a grace as people write it.
fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

impl Jobs {
    /// Gives `victim` the notice of preemption `p`.
    pub(super) async fn give_notice(
        &self,
        p: &Preemption,
        victim: &RunningJob,
        attempt: i32,
    ) -> Result<(), DatabaseError> {
        if p.kind == NoticeKind::Resize {
            return self.give_shrink(p, victim, attempt).await;
        }
        let by = self.db.get_training(&p.by).await?;
        let (by_class, by_team) = by
            .as_ref()
            .map(|t| (t.priority_class.clone(), t.team.clone()))
            .unwrap_or_default();
        let grace = victim.job.grace;
        let (end, stopping) = match p.kind {
            NoticeKind::Reclaim => (
                format!(
                    "PREEMPTED: reclaimed for team {by_team} (training {}): it borrowed GPUs beyond team {}'s guarantee",
                    p.by, victim.job.team
                ),
                format!(
                    "PREEMPTING: team {by_team} reclaims its guarantee for training {}; checkpoint and stop within {}",
                    p.by,
                    seconds(grace)
                ),
            ),
            _ => (
                format!("PREEMPTED: by {} (class {by_class})", p.by),
                format!(
                    "PREEMPTING: notice given for {} (class {by_class}); checkpoint and stop within {}",
                    p.by,
                    seconds(grace)
                ),
            ),
        };
        let detail = format!(
            "{} for {} ({}); about {:.0} GPU-seconds since its checkpoint",
            p.kind.as_str(),
            p.by,
            if by_class.is_empty() {
                "no class"
            } else {
                &by_class
            },
            p.lost_gpu_seconds
        );
        let audit = scheduler_audit("Preempt", &victim.job.id, &victim.job.team, detail);
        self.notify(
            &victim.job.id,
            attempt,
            p.kind,
            &p.by,
            end,
            stopping,
            grace,
            audit,
        )
        .await
        .map(|_| ())
    }

    /// A training on draining agent `agent` gets notice to move.
    pub(super) async fn notice_for_drain(
        &self,
        training: &Training,
        agent: &str,
    ) -> Result<(), DatabaseError> {
        let grace = training.config.schedule().preemption_grace();
        let end = format!("drain: moved off agent {agent}");
        let stopping = format!(
            "DRAINING: agent {agent} is drained; checkpoint and stop within {}",
            seconds(grace)
        );
        let audit = scheduler_audit(
            "Drain",
            &training.id,
            &training.team,
            format!("notice to move off agent {agent}"),
        );
        self.notify(
            &training.id,
            training.attempt,
            NoticeKind::Drain,
            agent,
            end,
            stopping,
            grace,
            audit,
        )
        .await
        .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn notify(
        &self,
        training_id: &str,
        attempt: i32,
        kind: NoticeKind,
        by: &str,
        end: String,
        stopping: String,
        grace: Duration,
        audit: AuditEntry,
    ) -> Result<bool, DatabaseError> {
        let now = Utc::now();
        let notice = Notice {
            training_id: training_id.to_string(),
            attempt,
            kind,
            by: by.to_string(),
            reason: end,
            time: now,
            deadline: now + grace + self.settings.agent_timeout + NOTICE_SLACK,
        };
        if !self.db.give_notice(notice, stopping.clone(), audit).await? {
            return Ok(false); // decided otherwise meanwhile, or noticed already
        }
        tracing::info!(
            training_id,
            attempt,
            kind = kind.as_str(),
            by,
            grace_s = grace.as_secs(),
            "notice given"
        );
        let ranks = self.db.ranks(training_id, attempt).await?;
        commands::notice_ranks(
            &self.fleet,
            training_id,
            attempt,
            &ranks,
            None,
            grace,
            &stopping,
        );
        self.kick();
        Ok(true)
    }

    /// A rank of a noticed attempt ended: once the whole gang is gone the
    /// notice closes. False when `training` has no notice for its attempt
    /// (or every rank succeeded: the run finished anyway).
    pub(super) async fn noticed_end(
        &self,
        training: &Training,
        ranks: &[RankRecord],
    ) -> Result<bool, DatabaseError> {
        let Some(notice) = self
            .db
            .notice_of(&training.id)
            .await?
            .filter(|n| n.attempt == training.attempt)
        else {
            return Ok(false);
        };
        // Every rank exited 0: finished in the grace (its `finished` line
        // came), or a program that stopped early on its notice.
        if ranks.iter().all(|r| r.state == RankState::Succeeded)
            && self
                .db
                .attempt_finished(&training.id, training.attempt)
                .await?
        {
            self.db.drop_notice(&training.id).await?;
            return Ok(false);
        }
        if self.gang_gone(ranks) {
            self.close(&notice, training).await?;
        }
        Ok(true)
    }

    /// Whether every rank of an attempt is gone: its exit reported, or its
    /// agent missing longer than the agent timeout.
    fn gang_gone(&self, ranks: &[RankRecord]) -> bool {
        let timeout = self.settings.agent_timeout;
        ranks.iter().all(|r| {
            r.exit_code.is_some()
                || r.signal.is_some()
                || matches!(
                    r.state,
                    RankState::Lost | RankState::Succeeded | RankState::Failed
                )
                || (!self.fleet.is_connected(&r.slot.agent_id)
                    && self
                        .rt()
                        .missing_since
                        .get(&r.slot.agent_id)
                        .is_some_and(|since| since.elapsed() > timeout))
        })
    }

    /// Closes `notice` of `training`'s current attempt: back to the queue
    /// (or moving, for a drain) from its newest checkpoint.
    async fn close(&self, notice: &Notice, training: &Training) -> Result<(), DatabaseError> {
        let newest = self
            .db
            .checkpoints(&training.id)
            .await?
            .into_iter()
            .filter(|c| !c.best)
            .max_by_key(|c| c.step);
        let now = Utc::now();
        let checkpointed = newest
            .as_ref()
            .is_some_and(|c| c.attempt == notice.attempt && c.create_time >= notice.time);
        let since = newest
            .as_ref()
            .map(|c| c.create_time)
            .into_iter()
            .chain(training.attempt_time)
            .max()
            .unwrap_or(now);
        let lost = (now - since).num_milliseconds().max(0) as f64 / 1e3
            * f64::from(training.world_size.max(0));
        let resume_step = newest.as_ref().map(|c| c.step);
        let (to, reason) = match notice.kind {
            NoticeKind::Drain => (
                JobState::Restarting,
                match resume_step {
                    Some(step) if checkpointed => {
                        format!("{} at its checkpoint of step {step}", notice.reason)
                    }
                    _ => format!("{} from its last checkpoint", notice.reason),
                },
            ),
            _ => (JobState::Queued, notice.reason.clone()),
        };
        let priority_class = match notice.kind {
            NoticeKind::Preempt => self
                .db
                .get_training(&notice.by)
                .await?
                .map(|t| t.priority_class)
                .unwrap_or_default(),
            _ => String::new(),
        };
        let end = NoticeEnd {
            training_id: training.id.clone(),
            attempt: notice.attempt,
            to,
            reason: reason.clone(),
            event: Preempted {
                by: notice.by.clone(),
                kind: notice.kind.as_str().to_string(),
                priority_class,
                resume_step,
                gpu_seconds_lost: lost,
                checkpointed,
            },
        };
        let Some(closed) = self.db.close_notice(end).await? else {
            return Ok(()); // closed by another report, or ended otherwise
        };
        if let Err(e) = self
            .db
            .end_live_ranks(&closed.id, notice.attempt, RankState::Stopped)
            .await
        {
            tracing::warn!(training_id = %closed.id, error = %e, "cannot mark ranks stopped");
        }
        tracing::info!(training_id = %closed.id, attempt = notice.attempt, kind = notice.kind.as_str(),
            by = %notice.by, resume_step, checkpointed, lost_gpu_s = lost, "notice closed");
        // Who made room takes it first; a resizing training takes its own
        // GPUs and the free ones back first.
        if matches!(
            notice.kind,
            NoticeKind::Preempt | NoticeKind::Reclaim | NoticeKind::Resize
        ) {
            self.claim(&notice.by);
        }
        match to {
            JobState::Restarting => self.restart_began(&closed.id, &reason),
            _ => {
                self.fleet.release(&closed.id);
                self.forget(&closed.id, Outcome::Retry { reason: &reason });
                self.kick();
            }
        }
        Ok(())
    }

    /// Once per loop: a notice whose attempt ended otherwise goes; one
    /// whose gang is gone closes; past its deadline what is left of the
    /// gang is killed, and once the agents had their time it closes.
    pub(super) async fn notice_pass(&self) -> Result<(), DatabaseError> {
        let now = Utc::now();
        for notice in self.db.notices().await? {
            let Some(training) = self.db.get_training(&notice.training_id).await? else {
                continue;
            };
            let placed = matches!(training.state, JobState::Scheduled | JobState::Running);
            if !placed || training.attempt != notice.attempt {
                self.db.drop_notice(&training.id).await?;
                continue;
            }
            let ranks = self.db.ranks(&training.id, notice.attempt).await?;
            if self.gang_gone(&ranks) {
                self.close(&notice, &training).await?;
                continue;
            }
            if now < notice.deadline {
                continue;
            }
            // The grace is over: SIGKILL (a zero grace would mean the
            // agent's default).
            commands::stop_ranks(
                &self.fleet,
                &training,
                &ranks,
                Duration::from_millis(100),
                "the notice's grace is over",
            );
            let overdue = (now - notice.deadline).to_std().unwrap_or_default();
            if overdue > self.settings.agent_timeout {
                tracing::warn!(training_id = %training.id, attempt = notice.attempt,
                    "ranks not confirmed gone after their notice: marked lost");
                self.db
                    .mark_unconfirmed_lost(&training.id, notice.attempt)
                    .await?;
                let ranks = self.db.ranks(&training.id, notice.attempt).await?;
                if self.gang_gone(&ranks) {
                    self.close(&notice, &training).await?;
                }
            }
        }
        Ok(())
    }

    /// An agent came (back) with ranks of noticed attempts: it gets the
    /// notice (again; an agent that has it already ignores it).
    pub(super) async fn renotice(
        &self,
        agent_id: &str,
        running: &[crate::model::RunningRank],
    ) -> Result<(), DatabaseError> {
        for notice in self.db.notices().await? {
            if !running
                .iter()
                .any(|r| r.training_id == notice.training_id && r.attempt == notice.attempt)
            {
                continue;
            }
            let Some(training) = self.db.get_training(&notice.training_id).await? else {
                continue;
            };
            let grace = training.config.schedule().preemption_grace();
            let left = (notice.deadline - Utc::now()).to_std().unwrap_or_default();
            let ranks = self.db.ranks(&training.id, notice.attempt).await?;
            commands::notice_ranks(
                &self.fleet,
                &training.id,
                notice.attempt,
                &ranks,
                Some(agent_id),
                grace.min(left),
                &training.state_reason,
            );
        }
        Ok(())
    }
}

impl Jobs {
    /// `by` made room: the next passes consider it first, for a while.
    fn claim(&self, by: &str) {
        let until = Utc::now()
            + chrono::Duration::from_std(crate::policy::snapshot::CLAIM_AFTER_STOP)
                .unwrap_or_default();
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claims.retain(|_, u| *u > Utc::now());
        claims.insert(by.to_string(), until);
    }

    /// The live claims (see [`crate::policy::Snapshot::claims`]).
    pub(super) fn claims(
        &self,
        now: chrono::DateTime<Utc>,
    ) -> std::collections::HashMap<String, chrono::DateTime<Utc>> {
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claims.retain(|_, u| *u > now);
        claims.clone()
    }
}

/// An audit row of a decision the scheduler made on its own.
pub(super) fn scheduler_audit(
    method: &str,
    target: &str,
    team: &str,
    detail: String,
) -> AuditEntry {
    AuditEntry {
        actor_kind: "scheduler".into(),
        actor: "coordinator".into(),
        actor_team: String::new(),
        method: format!("scheduler/{method}"),
        target: target.into(),
        target_team: team.into(),
        code: "OK".into(),
        detail,
    }
}

//! The policy's snapshot of the coordinator's world: the waiting and
//! placed trainings from the database, each one's profile (memory, grace,
//! expected duration) from the memo, its pace from the runner's memory,
//! the notices in force, the teams' shares and usage, and one look at the
//! live fleet. The scheduling pass and the estimator both start here.

use super::needs::Profile;
use super::Jobs;
use crate::model::JobState;
use crate::persistence::notices::Notice;
use crate::persistence::sharing::PlacedTraining;
use crate::persistence::waiting::WaitingTraining;
use crate::persistence::DatabaseError;
use crate::policy::{FleetView, Job, RunningJob, Snapshot, Stopping, WaitingJob};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// How long the built-in rank takes to stop after a notice, at most: its
/// step and a checkpoint (the grace bounds it anyway).
const SAE_STOP: Duration = Duration::from_secs(30);

/// A snapshot, and what the pass's caller needs beside it.
pub(super) struct Built {
    pub snapshot: Snapshot,
    /// Each placed training's stored borrowing mark.
    pub borrowing: HashMap<String, bool>,
    /// Each placed training's current attempt.
    pub attempts: HashMap<String, i32>,
}

impl Jobs {
    /// One snapshot for a pass or an estimate; `torn_down` checks whether
    /// each RESTARTING training's old gang is gone (the pass's; the
    /// estimator assumes so).
    pub(super) async fn snapshot(&self, check_teardown: bool) -> Result<Built, DatabaseError> {
        let now = Utc::now();
        let waiting = self.db.waiting_trainings().await?;
        let placed = self.db.placed_trainings().await?;
        let ids: Vec<&str> = waiting
            .iter()
            .map(|w| w.id.as_str())
            .chain(placed.iter().map(|p| p.id.as_str()))
            .collect();
        self.profiles.refresh(&self.db, &ids).await?;
        let notices: HashMap<String, Notice> = self
            .db
            .notices()
            .await?
            .into_iter()
            .map(|n| (n.training_id.clone(), n))
            .collect();
        let restarts: Vec<String> = waiting
            .iter()
            .filter(|w| w.attempt > 0)
            .map(|w| w.id.clone())
            .collect();
        let leaders = if restarts.is_empty() {
            HashMap::new()
        } else {
            self.db.checkpoint_agents(restarts).await?
        };
        let shares = super::quota::load_shares(
            &self.db,
            self.settings.quotas,
            self.settings.fair_share_half_life,
        )
        .await?;
        let fleet = FleetView::of(&self.fleet);
        let mut held: HashMap<String, i64> = HashMap::new();
        for p in &placed {
            *held.entry(p.team.clone()).or_default() += i64::from(p.world_size);
        }
        for w in waiting.iter().filter(|w| w.state == JobState::Restarting) {
            *held.entry(w.team.clone()).or_default() += i64::from(w.world_size);
        }
        let mut waiting_jobs = Vec::with_capacity(waiting.len());
        for w in waiting {
            let Some(profile) = self.profiles.get(&w.id) else {
                continue; // gone since the read
            };
            let torn_down = w.state != JobState::Restarting
                || !check_teardown
                || self.torn_down(&w.id, w.attempt).await?;
            let leader = leaders.get(&w.id).cloned();
            waiting_jobs.push(self.waiting_job(w, profile, torn_down, leader));
        }
        let gpus = gpus_by_training(&fleet);
        let borrowing = placed.iter().map(|p| (p.id.clone(), p.borrowing)).collect();
        let attempts = placed.iter().map(|p| (p.id.clone(), p.attempt)).collect();
        let running = placed
            .into_iter()
            .filter_map(|p| {
                let profile = self.profiles.get(&p.id)?;
                let gpus = gpus.get(&p.id).cloned().unwrap_or_default();
                let notice = notices.get(&p.id).filter(|n| n.attempt == p.attempt);
                Some(self.running_job(p, profile, gpus, notice, now))
            })
            .collect();
        Ok(Built {
            snapshot: Snapshot {
                now,
                fleet,
                waiting: waiting_jobs,
                running,
                shares,
                held,
                claims: self.claims(now),
            },
            borrowing,
            attempts,
        })
    }

    fn job(
        &self,
        id: &str,
        fields: JobFields,
        profile: Profile,
        remaining: Option<Duration>,
    ) -> Job {
        let sae = profile.sae;
        let saves = sae || fields.notice_saves;
        let resizable = profile.elastic && fields.request.selection.is_elastic();
        Job {
            id: id.to_string(),
            team: fields.team,
            priority: fields.priority,
            preempting: self.settings.classes.preempting(&fields.class),
            class: fields.class,
            borrow: fields.borrow,
            create_time: fields.create_time,
            request: fields.request,
            need: profile.need,
            remaining,
            grace: profile.grace,
            stop_within: if saves {
                profile.grace.min(SAE_STOP)
            } else {
                profile.grace
            },
            saves_on_notice: saves,
            resizable,
        }
    }

    fn waiting_job(
        &self,
        w: WaitingTraining,
        profile: Profile,
        torn_down: bool,
        leader: Option<String>,
    ) -> WaitingJob {
        let (avoid, pace) = self
            .rt()
            .get(&w.id)
            .map(|t| (t.avoid.clone(), t.pace.clone()))
            .unwrap_or_default();
        // A training that ran resumes at its pace; else it runs what it said.
        let remaining = pace
            .and_then(|p| p.left_from(p.last_step()?))
            .or(profile.expected);
        let mut job = self.job(
            &w.id,
            JobFields {
                team: w.team,
                priority: w.priority,
                class: w.priority_class,
                borrow: w.borrow,
                create_time: w.create_time,
                request: w.gpu_request,
                notice_saves: false,
            },
            profile,
            remaining,
        );
        // A range that may not be resized keeps the size it first ran at
        // (a program's checkpoints are written for it).
        if !job.resizable && w.attempt > 0 {
            job.request.selection.pin(w.world_size.max(0) as u32);
        }
        WaitingJob {
            job,
            restarting: w.state == JobState::Restarting,
            torn_down,
            attempt: w.attempt,
            state_reason: w.state_reason,
            avoid,
            leader,
        }
    }

    fn running_job(
        &self,
        p: PlacedTraining,
        profile: Profile,
        gpus: Vec<String>,
        notice: Option<&Notice>,
        now: DateTime<Utc>,
    ) -> RunningJob {
        let pace = self.rt().get(&p.id).and_then(|t| t.pace.clone());
        let ran = p
            .start_time
            .map(|s| (now - s).to_std().unwrap_or_default())
            .unwrap_or_default();
        // Its pace, else what it said less what it ran (a minute at least:
        // it is still running).
        let remaining = pace
            .and_then(|pace| pace.remaining(tokio::time::Instant::now()))
            .or_else(|| {
                profile
                    .expected
                    .map(|e| e.saturating_sub(ran).max(Duration::from_secs(60)))
            });
        let since = p.attempt_time.unwrap_or(now);
        let job = self.job(
            &p.id,
            JobFields {
                team: p.team,
                priority: p.priority,
                class: p.priority_class,
                borrow: p.borrow,
                create_time: p.create_time,
                request: p.gpu_request,
                notice_saves: p.notice_saves,
            },
            profile,
            remaining,
        );
        RunningJob {
            ends_at: job.remaining.map(|r| now + r),
            job,
            gpus,
            since,
            checkpoint_time: p.checkpoint_time,
            stopping: notice.map(|n| Stopping {
                by: n.by.clone(),
                until: n.deadline,
            }),
        }
    }
}

/// What a [`Job`] takes from its row.
struct JobFields {
    team: String,
    priority: i32,
    class: String,
    borrow: bool,
    create_time: DateTime<Utc>,
    request: crate::model::GpuRequest,
    notice_saves: bool,
}

/// The GPUs each training's ranks hold, as the fleet says (not the
/// reservations of a pass: there are none in a fresh view).
fn gpus_by_training(view: &FleetView) -> HashMap<String, Vec<String>> {
    let mut by: HashMap<String, Vec<String>> = HashMap::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for c in &view.candidates {
        if let Some(h) = &c.hold {
            if seen.insert(c.uuid.as_str()) {
                by.entry(h.training_id.clone())
                    .or_default()
                    .push(c.uuid.clone());
            }
        }
    }
    by
}

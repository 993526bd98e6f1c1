//! Elastic trainings that change size while running (docs/scheduling.md,
//! "Elastic trainings"). A resize is a verb on a placed gang, as a
//! preemption is: the policy decides it ([`crate::policy::Resize`]), the
//! training gets a notice of kind `resize` (a grow onto GPUs nobody waits
//! for, or a shrink that makes room for a preempting or reclaiming
//! training instead of stopping it whole; the SAE rank finishes its step,
//! checkpoints and exits PREEMPTED), and when its whole gang is gone it is
//! QUEUED again, claiming the room first, with no restart and no
//! preemption counted. The next pass places it at the largest of its sizes
//! that fits, from that checkpoint, its global batch unchanged; the
//! placement's reason says `RESIZED: 2 -> 4 ranks` and a `resized` event
//! says from, to, the step and how long it took.

use super::notice::scheduler_audit;
use super::Jobs;
use crate::model::{EventPayload, Resized, Training, RESIZING};
use crate::persistence::DatabaseError;
use crate::policy::{NoticeKind, Preemption, Resize, RunningJob};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A resize decided and not yet placed: the size it had, when, and why
/// ("grow", "shrink").
#[derive(Debug, Clone, Copy)]
struct Pending {
    from: i32,
    decided: Instant,
    why: &'static str,
}

/// The resizes under way (one per resizing training; one decided longer
/// ago than [`FORGET_AFTER`] is dropped: its training ended otherwise).
#[derive(Debug, Clone, Default)]
pub(super) struct Resizing(Arc<Mutex<HashMap<String, Pending>>>);

const FORGET_AFTER: Duration = Duration::from_secs(3600);

impl Resizing {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn begin(&self, id: &str, from: i32, why: &'static str) {
        let mut map = self.lock();
        map.retain(|_, p| p.decided.elapsed() < FORGET_AFTER);
        map.insert(
            id.to_string(),
            Pending {
                from,
                decided: Instant::now(),
                why,
            },
        );
    }

    fn end(&self, id: &str) -> Option<Pending> {
        self.lock().remove(id)
    }
}

impl Jobs {
    /// Gives `running` the notice of grow `r`.
    pub(super) async fn give_resize(
        &self,
        r: &Resize,
        running: &RunningJob,
        attempt: i32,
    ) -> Result<(), DatabaseError> {
        let what = format!(
            "growing from {} to {} ranks: GPUs are free that no waiting training can use",
            r.from, r.to
        );
        self.resize_notice(running, attempt, &r.id, what, "grow")
            .await
    }

    /// Gives `running` the notice of shrink `p`: it re-forms smaller so
    /// that `p.by` fits.
    pub(super) async fn give_shrink(
        &self,
        p: &Preemption,
        running: &RunningJob,
        attempt: i32,
    ) -> Result<(), DatabaseError> {
        let what = format!(
            "shrinking from {} ranks to make room for {}",
            running.gpus.len(),
            p.by
        );
        self.resize_notice(running, attempt, &p.by, what, "shrink")
            .await
    }

    /// The notice of a resize, `by` the training the room is for (itself
    /// for a grow).
    async fn resize_notice(
        &self,
        running: &RunningJob,
        attempt: i32,
        by: &str,
        what: String,
        why: &'static str,
    ) -> Result<(), DatabaseError> {
        let id = &running.job.id;
        let grace = running.job.grace;
        let stopping = format!(
            "{RESIZING}{what}; checkpoint and re-form within {}s",
            grace.as_secs()
        );
        let audit = scheduler_audit("Resize", id, &running.job.team, what.clone());
        let given = self
            .notify(
                id,
                attempt,
                NoticeKind::Resize,
                by,
                format!("{RESIZING}{what}"),
                stopping,
                grace,
                audit,
            )
            .await?;
        if given {
            self.resizing.begin(id, running.gpus.len() as i32, why);
        }
        Ok(())
    }

    /// `placed` was just placed: when a resize of it was under way, its
    /// `resized` event (from, to, the step it resumes from, how long).
    pub(super) async fn resized(&self, placed: &Training) -> Result<(), DatabaseError> {
        let Some(pending) = self.resizing.end(&placed.id) else {
            return Ok(());
        };
        let step = self
            .db
            .checkpoints(&placed.id)
            .await?
            .into_iter()
            .filter(|c| !c.best)
            .map(|c| c.step)
            .max();
        let seconds = pending.decided.elapsed().as_secs_f64();
        tracing::info!(training_id = %placed.id, from = pending.from, to = placed.world_size,
            step, seconds, "resized");
        let event = EventPayload::Resized(Resized {
            from_world_size: pending.from,
            to_world_size: placed.world_size,
            step,
            seconds,
            why: pending.why.to_string(),
        });
        self.db
            .append_event(&placed.id, placed.attempt, event)
            .await
            .map(|_| ())
    }
}

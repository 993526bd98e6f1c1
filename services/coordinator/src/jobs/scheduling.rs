//! The scheduling pass: the waiting trainings in queue order against one
//! view of the fleet; what fits is held and placed at the pass's end, what
//! does not gets its pending reason.

use super::needs::Need;
use super::placement::{self, FleetView, Unplaceable};
use super::{hold_of, quota, start, Jobs};
use crate::model::{GpuSelection, JobState};
use crate::persistence::DatabaseError;
use std::collections::HashMap;

impl Jobs {
    /// One look at the waiting trainings: place what fits, in order; refresh
    /// the pending reason of what doesn't.
    ///
    /// The fleet is looked at once; each placement marks its GPUs held in
    /// that view. A first placement that failed is not planned again for a
    /// training asking the same (same selection, same memory need) until a
    /// placement took GPUs. The pass's placements are written together at
    /// its end (rank maps in one transaction per [`start::PLACE_BATCH`]),
    /// then their agents told; pending reasons that changed are written
    /// together too. So a pass over a long queue that cannot move costs a
    /// plan per distinct request, and a burst of placements a few
    /// transactions, not one (and a look at every GPU) per training.
    pub async fn schedule_pass(&self) -> Result<(), DatabaseError> {
        let started = std::time::Instant::now();
        let now = chrono::Utc::now();
        let mut reserved = false;
        let mut quotas = quota::QuotaBook::load(&self.db, self.settings.quotas).await?;
        let waiting = self.waiting().await?;
        self.needs.refresh(&self.db, &waiting).await?;
        let looked_at = waiting.len();
        let mut view: Option<FleetView> = None;
        let mut failed: HashMap<(GpuSelection, Need), Unplaceable> = HashMap::new();
        let mut reasons: Vec<(String, String)> = Vec::new();
        let mut chosen: Vec<start::Chosen> = Vec::new();
        for training in waiting {
            if training.state == JobState::Restarting
                && !self.torn_down(&training.id, training.attempt).await?
            {
                continue; // the old gang is not verified gone yet
            }
            if reserved {
                let reason = "WAITING_FOR_RESERVATION: an older training that has waited long is placed first";
                if training.state == JobState::Queued && training.state_reason != reason {
                    reasons.push((training.id.clone(), reason.to_string()));
                }
                continue;
            }
            let fleet = view.get_or_insert_with(|| FleetView::of(&self.fleet));
            // First placements follow the recommender; restarts keep rank 0 on
            // the checkpoint's host and avoid the faulty GPU.
            let Some(need) = self.needs.get(&training.id) else {
                continue; // gone since the pass began
            };
            // A program runs only where a program root holds its directory.
            let narrowed = match need
                .program_dir
                .as_deref()
                .map(|d| fleet.for_program(&training.team, d))
            {
                Some(Err(why)) => Err(why),
                Some(Ok(view)) => Ok(Some(view)),
                None => Ok(None),
            };
            let plan = match narrowed {
                Err(why) => Err(why),
                Ok(narrowed) if training.attempt == 0 => {
                    let view = narrowed.as_ref().unwrap_or(fleet);
                    let key = (training.gpu_request.selection.clone(), need);
                    match failed.get(&key) {
                        Some(why) => Err(why.clone()),
                        None => {
                            let plan =
                                placement::plan_first(view, &training.gpu_request, key.1.memory);
                            if let Err(why) = &plan {
                                failed.insert(key, why.clone());
                            }
                            plan
                        }
                    }
                }
                Ok(narrowed) => {
                    let view = narrowed.as_ref().unwrap_or(fleet);
                    let avoid = self
                        .rt()
                        .get(&training.id)
                        .map(|t| t.avoid.clone())
                        .unwrap_or_default();
                    let leader = self.db.checkpoint_agent(&training.id).await?;
                    placement::plan_restart(view, &training.gpu_request, &avoid, leader.as_deref())
                }
            };
            // A first placement must fit its team's quota (a restart takes
            // back GPUs it was already granted); over it, the training waits
            // and the ones behind it, other teams', go on.
            let over = match &plan {
                Ok(slots) if training.state == JobState::Queued => {
                    quotas.exceeded(&training.team, slots.len())
                }
                _ => None,
            };
            if let Some(reason) = over {
                if training.state_reason != reason {
                    reasons.push((training.id.clone(), reason));
                }
                continue;
            }
            match plan {
                Ok(slots) => {
                    // Held now, placed with the pass's others at its end.
                    let attempt = training.attempt + 1;
                    let hold = |s: &crate::model::RankSlot| {
                        hold_of(&training.id, &training.team, attempt, s.rank)
                    };
                    let holds = slots
                        .iter()
                        .map(|s| (s.gpu_uuid.clone(), hold(s)))
                        .collect();
                    if self.fleet.hold(holds).is_err() {
                        continue; // raced with another placement: next pass
                    }
                    quotas.take(&training.team, slots.len());
                    fleet.take(&slots, hold);
                    chosen.push(start::Chosen {
                        id: training.id.clone(),
                        slots,
                    });
                    // GPUs were taken: plan again.
                    failed.clear();
                }
                Err(why) if !training.gpu_request.queue && training.state == JobState::Queued => {
                    let reason = format!("cannot be placed and queueing is off: {why}");
                    self.finish(&training.id, JobState::Failed, &reason).await?;
                }
                Err(why) => {
                    let reason = why.to_string();
                    if training.state == JobState::Restarting {
                        self.settle(
                            &training.id,
                            JobState::Queued,
                            &format!("restart waits for GPUs: {reason}"),
                        )
                        .await?;
                    } else if training.state_reason != reason {
                        reasons.push((training.id.clone(), reason));
                    }
                    if training.state == JobState::Queued
                        && self.settings.queue.reserves(&training, now)
                    {
                        reserved = true;
                    }
                }
            }
        }
        // No GPU left for any rank: new arrivals wait for the regular pass.
        let full = view
            .as_ref()
            .is_some_and(|v| v.candidates.iter().all(|c| !c.fits(0)));
        self.passes.set_full(full);
        let placed = self.start_all(chosen).await;
        let rewritten = reasons.len();
        if !reasons.is_empty() {
            self.db.set_pending_reasons(reasons).await?;
        }
        self.passes.record(started.elapsed(), looked_at, rewritten);
        placed
    }
}

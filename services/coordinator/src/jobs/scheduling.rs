//! The scheduling pass: a snapshot of the queue, the placed trainings and
//! the fleet handed to the policy ([`crate::policy::pass`]), its decisions
//! applied — placements held and started at the pass's end (rank maps in
//! one transaction per [`start::PLACE_BATCH`]), notices given, restarts
//! that wait put back in the queue, borrowing marks and pending reasons
//! that changed written together.

use super::{hold_of, start, Jobs};
use crate::model::JobState;
use crate::persistence::DatabaseError;
use crate::policy::{self, Decisions, Snapshot};
use std::collections::HashMap;

impl Jobs {
    /// One look at the waiting trainings: place what fits, in order; make
    /// room for what may preempt or reclaim; refresh the pending reason of
    /// what waits.
    ///
    /// A first placement that failed is not planned again for a training
    /// asking the same (same selection, same memory need) until a
    /// placement took GPUs, so a pass over a long queue that cannot move
    /// costs a plan per distinct request.
    pub async fn schedule_pass(&self) -> Result<(), DatabaseError> {
        let started = std::time::Instant::now();
        let built = self.snapshot(true).await?;
        let mut snapshot = built.snapshot;
        let looked_at = snapshot.waiting.len();
        let decisions = policy::pass(&mut snapshot, &self.settings.policy);
        self.passes.set_full(decisions.full);
        for (id, why) in &decisions.refuse {
            self.finish(id, JobState::Failed, why).await?;
        }
        for (id, why) in &decisions.requeue {
            self.settle(id, JobState::Queued, why).await?;
        }
        self.mark_borrowing(&decisions, &built.borrowing).await?;
        for p in &decisions.preemptions {
            if let (Some(victim), Some(attempt)) =
                (snapshot.running(&p.victim), built.attempts.get(&p.victim))
            {
                self.give_notice(p, victim, *attempt).await?;
            }
        }
        for r in &decisions.resizes {
            if let (Some(running), Some(attempt)) =
                (snapshot.running(&r.id), built.attempts.get(&r.id))
            {
                self.give_resize(r, running, *attempt).await?;
            }
        }
        let chosen = self.hold_placements(&decisions, &snapshot);
        let placed = self.start_all(chosen).await;
        let rewritten = decisions.reasons.len();
        if !decisions.reasons.is_empty() {
            self.db.set_pending_reasons(decisions.reasons).await?;
        }
        self.passes.record(started.elapsed(), looked_at, rewritten);
        placed
    }

    /// The pass's placements held in the fleet (one that raced another
    /// placement for a GPU waits for the next pass).
    fn hold_placements(&self, d: &Decisions, snapshot: &Snapshot) -> Vec<start::Chosen> {
        let teams: HashMap<&str, &str> = snapshot
            .waiting
            .iter()
            .map(|w| (w.job.id.as_str(), w.job.team.as_str()))
            .collect();
        let attempts: HashMap<&str, i32> = snapshot
            .waiting
            .iter()
            .map(|w| (w.job.id.as_str(), w.attempt))
            .collect();
        let mut chosen = Vec::with_capacity(d.placements.len());
        for p in &d.placements {
            let team = teams.get(p.id.as_str()).copied().unwrap_or_default();
            let attempt = attempts.get(p.id.as_str()).copied().unwrap_or_default() + 1;
            let holds = p
                .slots
                .iter()
                .map(|s| (s.gpu_uuid.clone(), hold_of(&p.id, team, attempt, s.rank)))
                .collect();
            if self.fleet.hold(holds).is_err() {
                continue; // raced with another placement: next pass
            }
            chosen.push(start::Chosen {
                id: p.id.clone(),
                slots: p.slots.clone(),
                borrowing: p.borrowing,
            });
        }
        chosen
    }

    /// Writes the borrowing marks of placed trainings that changed.
    async fn mark_borrowing(
        &self,
        d: &Decisions,
        stored: &HashMap<String, bool>,
    ) -> Result<(), DatabaseError> {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for (id, was) in stored {
            match (d.borrowing.contains(id), *was) {
                (true, false) => on.push(id.clone()),
                (false, true) => off.push(id.clone()),
                _ => {}
            }
        }
        if on.is_empty() && off.is_empty() {
            return Ok(());
        }
        self.db.set_borrowing(on, off).await
    }
}

//! Making room for a waiting training that does not fit: which running
//! trainings to give notice.
//!
//! Who may be a victim: a borrowing training of another team when the
//! waiting one is within its team's guarantee (a reclaim: the guarantee
//! wins, whatever the borrower's priority, protection window or not); a
//! training of strictly lower priority when the waiting one's class
//! preempts, outside its protection window (`min_runtime`), of the same
//! team, borrowing, or with no guarantees in force. Never one already
//! stopping, and whole gangs only.
//!
//! Elastic trainings shrink first: when re-forming some of them at a
//! smaller size of their range frees a placement (each fitting again at
//! its smallest size on what is left), they get a notice of kind `resize`
//! instead and nobody is stopped whole. What an elastic training holds
//! above its smallest size it holds only while nobody waits for it: a
//! waiting training of the same or a higher priority that does not fit
//! may shrink it (never stop it), whatever its class, unless the elastic
//! one runs within its team's guarantee and the waiting one is of
//! another team.
//!
//! Which: the set that frees a placement with the least work lost, then
//! the fewest victims, then the youngest — found as Kueue does: candidates
//! cheapest first until the training fits, then each victim not needed
//! after all given back, the dearest first. No victim is chosen unless the
//! training fits afterwards.

use super::pass::{plan_on, NoticeKind, Pass, Preemption};
use super::placement::Saved;
use super::shares::Admission;
use super::snapshot::{RunningJob, WaitingJob};
use crate::model::GpuSelection;
use std::time::Duration;

/// What restarting one rank costs beyond the lost work (start, rendezvous,
/// loading the checkpoint), in GPU-seconds: with nothing lost to a
/// checkpoint on notice, it makes small gangs the cheaper victims.
pub const RESTART_COST_GPU_SECONDS: f64 = 60.0;

/// What preempting `r` now costs.
pub fn cost(r: &RunningJob, now: chrono::DateTime<chrono::Utc>) -> f64 {
    r.lost_if_preempted(now) + RESTART_COST_GPU_SECONDS * r.gpus.len() as f64
}

impl Pass<'_> {
    /// Gives notice to the victims that make room for `w` and reserves the
    /// GPUs it will get; the pending reason when room is being made (now
    /// or by victims of earlier passes still stopping).
    pub(super) fn make_room(&mut self, w: &WaitingJob, admission: &Admission) -> Option<String> {
        let running = self.running;
        // Its victims of earlier passes, still stopping.
        let mine: Vec<&RunningJob> = self
            .stopping_for
            .get(w.job.id.as_str())
            .map(|ids| ids.iter().map(|&i| &running[i]).collect())
            .unwrap_or_default();
        let reclaim =
            self.p.lending && *admission == Admission::Within && self.shares.any_guarantee();
        let by_class = self.p.preemption && w.job.preempting;
        let yielding = self.p.preemption && self.grown;
        if mine.is_empty() && !reclaim && !by_class && !yielding {
            return None;
        }
        // AUTO takes what is free; it never makes room.
        if matches!(w.job.request.selection, GpuSelection::Auto { .. }) {
            return None;
        }
        let key = (
            w.job.request.selection.clone(),
            w.job.need.clone(),
            w.job.team.clone(),
            w.job.priority,
        );
        if mine.is_empty() && self.no_room.contains(&key) {
            return None;
        }
        // Victims, and elastic trainings that may only shrink for it.
        let (mut candidates, mut yielders): (Vec<&RunningJob>, Vec<&RunningJob>) = running
            .iter()
            .filter(|r| self.eligible(w, r, reclaim, by_class) || (yielding && self.yields(w, r)))
            .partition(|r| self.eligible(w, r, reclaim, by_class));
        if mine.is_empty() && candidates.is_empty() && yielders.is_empty() {
            self.no_room.insert(key);
            return None;
        }
        // Plans are made on the pass's own view with the GPUs in question
        // freed for the moment, and everything put back after.
        let mut saved = Vec::new();
        for r in &mine {
            saved.extend(self.view.release_saving(&r.gpus));
        }
        if !mine.is_empty() {
            if let Ok(slots) = plan_on(w, self.view, false) {
                self.view.restore(saved);
                self.reserve(w, &slots);
                return Some(stopping_reason(&mine));
            }
        }
        if candidates.is_empty() && yielders.is_empty() {
            self.view.restore(saved);
            self.no_room.insert(key);
            return None;
        }
        let now = self.now;
        let cheapest = |a: &&RunningJob, b: &&RunningJob| {
            cost(a, now)
                .total_cmp(&cost(b, now))
                .then(b.since.cmp(&a.since))
                .then(a.job.id.cmp(&b.job.id))
        };
        candidates.sort_by(cheapest);
        let mut shrinkable: Vec<&RunningJob> = candidates.clone();
        shrinkable.append(&mut yielders);
        shrinkable.sort_by(cheapest);
        // Elastic trainings give up what they hold above their smallest
        // size before anyone is stopped whole.
        let (found, shrinking) = match self.shrink(w, &shrinkable) {
            Some(shrunk) => (Some(shrunk), true),
            None if candidates.is_empty() => (None, false),
            None => (self.fewest(w, candidates), false),
        };
        self.view.restore(saved);
        let Some((victims, slots)) = found else {
            self.no_room.insert(key);
            return None;
        };
        for r in &victims {
            let kind = if shrinking {
                NoticeKind::Resize
            } else if reclaim && self.d.borrowing.contains(&r.job.id) && r.job.team != w.job.team {
                NoticeKind::Reclaim
            } else {
                NoticeKind::Preempt
            };
            self.stopping.insert(r.job.id.clone());
            self.d.preemptions.push(Preemption {
                victim: r.job.id.clone(),
                by: w.job.id.clone(),
                kind,
                lost_gpu_seconds: r.lost_if_preempted(now),
            });
        }
        self.reserve(w, &slots);
        let mut all = mine;
        all.extend(victims);
        Some(stopping_reason(&all))
    }

    /// Whether `r` may be preempted for `w`.
    fn eligible(&self, w: &WaitingJob, r: &RunningJob, reclaim: bool, by_class: bool) -> bool {
        if r.stopping.is_some() || self.stopping.contains(&r.job.id) || r.job.id == w.job.id {
            return false;
        }
        let borrowing = self.d.borrowing.contains(&r.job.id);
        let reclaimable = reclaim && borrowing && r.job.team != w.job.team;
        let ran = (self.now - r.since).to_std().unwrap_or(Duration::ZERO);
        let lower = by_class
            && r.job.priority < w.job.priority
            && ran >= self.p.min_runtime
            && (r.job.team == w.job.team || borrowing || !self.shares.any_guarantee());
        reclaimable || lower
    }

    /// Whether elastic `r` gives back what it holds above its smallest size
    /// to `w`, which may not stop it (see the module's comment).
    fn yields(&self, w: &WaitingJob, r: &RunningJob) -> bool {
        if !r.job.resizable || r.gpus.len() <= r.job.count() || r.job.id == w.job.id {
            return false;
        }
        if r.stopping.is_some() || self.stopping.contains(&r.job.id) {
            return false;
        }
        // Not before it has run its protection window at this size.
        let ran = (self.now - r.since).to_std().unwrap_or(Duration::ZERO);
        if ran < self.p.min_runtime {
            return false;
        }
        let guaranteed = self.shares.any_guarantee() && !self.d.borrowing.contains(&r.job.id);
        r.job.priority <= w.job.priority && (r.job.team == w.job.team || !guaranteed)
    }

    /// Elastic candidates, cheapest first, until `w` fits and every one of
    /// them fits again at its smallest size on what `w` leaves: they are
    /// re-formed smaller (a notice of kind `resize`), not stopped. `None`
    /// when no such set exists. The view comes back as it was.
    fn shrink<'r>(
        &mut self,
        w: &WaitingJob,
        candidates: &[&'r RunningJob],
    ) -> Option<(Vec<&'r RunningJob>, Vec<crate::model::RankSlot>)> {
        let mut chosen: Vec<(&RunningJob, Saved)> = Vec::new();
        let mut found = None;
        for r in candidates
            .iter()
            .copied()
            // A range's count is its smallest size.
            .filter(|r| r.job.resizable && r.job.count() < r.gpus.len())
        {
            chosen.push((r, self.view.release_saving(&r.gpus)));
            let Ok(slots) = plan_on(w, self.view, false) else {
                continue;
            };
            // A re-placement takes any free GPUs (by count): what `w`
            // leaves must hold each shrunk gang at its smallest size.
            let again: usize = chosen.iter().map(|(r, _)| r.job.count()).sum();
            if self.view.free_count().saturating_sub(slots.len()) >= again {
                found = Some(slots);
                break;
            }
        }
        let shrunk = chosen.iter().map(|(r, _)| *r).collect();
        for (_, saved) in chosen.into_iter().rev() {
            self.view.restore(saved);
        }
        found.map(|slots| (shrunk, slots))
    }

    /// Candidates cheapest first until `w` fits, then each one not needed
    /// after all given back, dearest first: the victims and where `w` then
    /// goes; `None` when it fits not even with them all. The view comes
    /// back as it was.
    fn fewest<'r>(
        &mut self,
        w: &WaitingJob,
        candidates: Vec<&'r RunningJob>,
    ) -> Option<(Vec<&'r RunningJob>, Vec<crate::model::RankSlot>)> {
        let want = w.job.count();
        let mut chosen: Vec<(&RunningJob, Saved)> = Vec::new();
        let mut free = self.view.free_count();
        let mut slots = None;
        for r in candidates {
            chosen.push((r, self.view.release_saving(&r.gpus)));
            free += r.gpus.len();
            if free < want {
                continue;
            }
            if let Ok(s) = plan_on(w, self.view, false) {
                slots = Some(s);
                break;
            }
        }
        let Some(mut slots) = slots else {
            for (_, saved) in chosen {
                self.view.restore(saved);
            }
            return None;
        };
        let mut kept = Vec::with_capacity(chosen.len());
        while let Some((r, saved)) = chosen.pop() {
            // Given back: still fits without it?
            self.view.restore(saved);
            match plan_on(w, self.view, false) {
                Ok(s) => slots = s,
                Err(_) => kept.push((r, self.view.release_saving(&r.gpus))),
            }
        }
        let victims = kept.iter().map(|(r, _)| *r).collect();
        for (_, saved) in kept {
            self.view.restore(saved);
        }
        Some((victims, slots))
    }
}

/// "PREEMPTING: waiting for a, b to stop".
fn stopping_reason(victims: &[&RunningJob]) -> String {
    let mut ids: Vec<&str> = victims.iter().map(|r| r.job.id.as_str()).collect();
    ids.sort_unstable();
    format!(
        "PREEMPTING: waiting for {} to stop after a notice to make room",
        ids.join(", ")
    )
}

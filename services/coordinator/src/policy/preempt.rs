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
//! Which: the set that frees a placement with the least work lost, then
//! the fewest victims, then the youngest — found as Kueue does: candidates
//! cheapest first until the training fits, then each victim not needed
//! after all given back, the dearest first. No victim is chosen unless the
//! training fits afterwards.

use super::pass::{NoticeKind, Pass, Preemption};
use super::placement::FleetView;
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
        let mine: Vec<&RunningJob> = running
            .iter()
            .filter(|r| r.stopping.as_ref().is_some_and(|s| s.by == w.job.id))
            .collect();
        let reclaim =
            self.p.lending && *admission == Admission::Within && self.shares.any_guarantee();
        let by_class = self.p.preemption && w.job.preempting;
        if mine.is_empty() && !reclaim && !by_class {
            return None;
        }
        // AUTO takes what is free; it never makes room.
        if matches!(w.job.request.selection, GpuSelection::Auto { .. }) {
            return None;
        }
        let mut hypo = self.view.clone();
        for r in &mine {
            hypo.release(&r.gpus);
        }
        if !mine.is_empty() {
            if let Ok(slots) = self.plan(w, Some(&hypo)) {
                self.reserve(w, &slots);
                return Some(stopping_reason(&mine));
            }
        }
        if !reclaim && !by_class {
            return None;
        }
        let mut candidates: Vec<&RunningJob> = running
            .iter()
            .filter(|r| self.eligible(w, r, reclaim, by_class))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let now = self.now;
        candidates.sort_by(|a, b| {
            cost(a, now)
                .total_cmp(&cost(b, now))
                .then(b.since.cmp(&a.since))
                .then(a.job.id.cmp(&b.job.id))
        });
        let (victims, slots) = self.fewest(w, hypo, candidates)?;
        for r in &victims {
            let kind =
                if reclaim && self.d.borrowing.contains(&r.job.id) && r.job.team != w.job.team {
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

    /// Candidates cheapest first until `w` fits in `hypo`, then each one
    /// not needed after all given back, dearest first: the victims and
    /// where `w` then goes; `None` when it fits not even with them all.
    fn fewest<'r>(
        &mut self,
        w: &WaitingJob,
        mut hypo: FleetView,
        candidates: Vec<&'r RunningJob>,
    ) -> Option<(Vec<&'r RunningJob>, Vec<crate::model::RankSlot>)> {
        let want = w.job.count();
        let mut chosen: Vec<&RunningJob> = Vec::new();
        let mut free = hypo.free_count();
        let mut slots = None;
        for r in candidates {
            hypo.release(&r.gpus);
            free += r.gpus.len();
            chosen.push(r);
            if free < want {
                continue;
            }
            if let Ok(s) = self.plan(w, Some(&hypo)) {
                slots = Some(s);
                break;
            }
        }
        let mut slots = slots?;
        for k in (0..chosen.len()).rev() {
            let r = chosen[k];
            hypo.hold(&r.gpus, &super::snapshot::hold_for(&r.job, 0, 0));
            match self.plan(w, Some(&hypo)) {
                Ok(s) => {
                    chosen.remove(k);
                    slots = s;
                }
                Err(_) => hypo.release(&r.gpus),
            }
        }
        Some((chosen, slots))
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

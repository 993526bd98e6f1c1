//! A snapshot moved forward by a pass's decisions, as the estimates and
//! the simulator move theirs (the coordinator applies decisions to its
//! database and agents instead, and reads a fresh snapshot).

use super::pass::Decisions;
use super::snapshot::{RunningJob, Snapshot, Stopping};

impl Snapshot {
    /// Applies `d` (whose placements the pass already took in `self.fleet`
    /// and `self.held`): placed trainings run from now, victims stop within
    /// their `stop_within`, restarts that wait are QUEUED again, refused
    /// trainings leave.
    pub fn apply(&mut self, d: &Decisions) {
        let now = self.now;
        self.claims.retain(|_, until| *until > now);
        for placement in &d.placements {
            self.claims.remove(&placement.id);
            let Some(i) = self.waiting.iter().position(|w| w.job.id == placement.id) else {
                continue;
            };
            let waiting = self.waiting.swap_remove(i);
            self.running.push(RunningJob {
                ends_at: waiting.job.remaining.map(|r| now + r),
                job: waiting.job,
                gpus: placement.slots.iter().map(|s| s.gpu_uuid.clone()).collect(),
                since: now,
                checkpoint_time: None,
                stopping: None,
            });
        }
        for p in &d.preemptions {
            if let Some(r) = self.running.iter_mut().find(|r| r.job.id == p.victim) {
                let until = now + r.job.stop_within;
                r.stopping = Some(Stopping {
                    by: p.by.clone(),
                    until,
                });
                let claim = self.claims.entry(p.by.clone()).or_insert(until);
                *claim = (*claim).max(until + super::snapshot::CLAIM_AFTER_STOP);
            }
        }
        for (id, _) in &d.requeue {
            if let Some(w) = self.waiting.iter_mut().find(|w| &w.job.id == id) {
                w.restarting = false;
            }
        }
        for (id, _) in &d.refuse {
            self.waiting.retain(|w| &w.job.id != id);
        }
        for (id, reason) in &d.reasons {
            if let Some(w) = self.waiting.iter_mut().find(|w| &w.job.id == id) {
                w.state_reason = reason.clone();
            }
        }
    }
}

//! The scheduling pass: one look at a [`Snapshot`], deciding what to place,
//! what to preempt and why the rest waits. Pure: the coordinator applies
//! the decisions to its database and agents, the estimates and the
//! simulator to a snapshot on virtual time ([`Snapshot::apply`]).
//!
//! Order: restarting trainings first, then the queue by effective priority
//! and age ([`QueuePolicy`]). Trainings within their team's guarantee are
//! placed first, in that order; trainings that would borrow idle quota
//! after them, the team with the least decayed usage per weight first
//! (fair share). What fits is placed; what does not may make room
//! ([`super::preempt`]): a training within its guarantee reclaims borrowed
//! GPUs, a preempting class preempts strictly lower priorities. The oldest
//! training that has waited past `reserve_after` reserves the GPUs it will
//! get first (EASY backfill): the trainings behind it use the others.

use super::need::Need;
use super::order::{QueuePolicy, Waiting};
use super::placement::{plan_first, plan_restart, FleetView, Plan, Unplaceable};
use super::shares::{Admission, Shares};
use super::snapshot::{hold_for, RunningJob, Snapshot, WaitingJob};
use crate::model::{GpuSelection, RankSlot};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// What the policy does, and which of its features are on.
#[derive(Debug, Clone)]
pub struct Policy {
    pub queue: QueuePolicy,
    /// Preempting classes make room by preempting lower priorities.
    pub preemption: bool,
    /// Quotas lend: trainings may borrow idle guarantees, and a team
    /// reclaims its guarantee by preemption.
    pub lending: bool,
    /// Borrowers are served by decayed usage per weight (else in queue order).
    pub fair_share: bool,
    /// A training younger than this is never preempted by priority
    /// (reclaiming a borrowed GPU ignores it: the guarantee wins).
    pub min_runtime: Duration,
    /// Pending reasons are worth computing (the coordinator's passes; not
    /// the estimates' or the simulator's).
    pub reasons: bool,
}

impl Default for Policy {
    /// The coordinator's: everything on.
    fn default() -> Self {
        Self {
            queue: QueuePolicy::default(),
            preemption: true,
            lending: true,
            fair_share: true,
            min_runtime: Duration::from_secs(600),
            reasons: true,
        }
    }
}

impl Policy {
    /// Queueing and backfill only: no preemption, quotas as hard caps.
    pub fn fifo_backfill() -> Self {
        Self {
            preemption: false,
            lending: false,
            fair_share: false,
            ..Self::default()
        }
    }
}

/// A training to place now.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub id: String,
    pub slots: Vec<RankSlot>,
    /// It runs beyond its team's guarantee.
    pub borrowing: bool,
}

/// Why a running training gets a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    /// A training of a preempting class makes room.
    Preempt,
    /// A team takes its guarantee back from a borrower.
    Reclaim,
    /// Its agent is being drained (the coordinator's, not the policy's).
    Drain,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Preempt => "preempt",
            NoticeKind::Reclaim => "reclaim",
            NoticeKind::Drain => "drain",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [NoticeKind::Preempt, NoticeKind::Reclaim, NoticeKind::Drain]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// A running training to give notice, to make room for `by`.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    pub victim: String,
    pub by: String,
    pub kind: NoticeKind,
    /// The work a preemption now loses (see [`RunningJob::lost_if_preempted`]).
    pub lost_gpu_seconds: f64,
}

/// What one pass decided.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    pub placements: Vec<Placement>,
    pub preemptions: Vec<Preemption>,
    /// QUEUED trainings whose pending reason changed (only with `reasons`).
    pub reasons: Vec<(String, String)>,
    /// RESTARTING trainings that cannot be placed: back to QUEUED, with why.
    pub requeue: Vec<(String, String)>,
    /// Trainings that asked not to queue and cannot be placed: they fail.
    pub refuse: Vec<(String, String)>,
    /// Running trainings (before this pass's placements) beyond their
    /// team's guarantee.
    pub borrowing: HashSet<String>,
    /// No GPU was left free for any rank.
    pub full: bool,
}

/// Which phase a waiting training is considered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Within guarantees (or no quotas): queue order.
    Guaranteed,
    /// Borrowers: fair-share order.
    Borrowing,
}

/// One pass over `s`: `s.fleet` and `s.held` come out with this pass's
/// placements taken (nothing else of `s` changes; see [`Snapshot::apply`]).
pub fn pass(s: &mut Snapshot, p: &Policy) -> Decisions {
    let order = p.queue.order_of(&s.waiting, s.now);
    let borrowing = borrowing_set(&s.running, &s.shares, p.lending);
    let Snapshot {
        now,
        fleet,
        waiting,
        running,
        shares,
        held,
    } = s;
    let mut pass = Pass {
        now: *now,
        p,
        view: fleet,
        waiting,
        running,
        shares,
        held,
        failed: HashMap::new(),
        reserved: Vec::new(),
        head_reserved: false,
        stopping: running
            .iter()
            .filter(|r| r.stopping.is_some())
            .map(|r| r.job.id.clone())
            .collect(),
        blocked: HashMap::new(),
        d: Decisions {
            borrowing,
            ..Decisions::default()
        },
    };
    let mut deferred = Vec::new();
    for i in order {
        if !pass.consider(i, Phase::Guaranteed) {
            deferred.push(i);
        }
    }
    if p.fair_share {
        // Stable: equal shares keep the queue order.
        deferred.sort_by(|&a, &b| {
            let key = |i: usize| pass.shares.fair_share_key(&pass.waiting[i].job.team);
            key(a).total_cmp(&key(b))
        });
    }
    for i in deferred {
        pass.consider(i, Phase::Borrowing);
    }
    pass.finish()
}

/// The running trainings beyond their team's guarantee: per team, the
/// newest placed beyond what the older ones leave of it.
pub fn borrowing_set(running: &[RunningJob], shares: &Shares, lending: bool) -> HashSet<String> {
    if !lending || !shares.any_guarantee() {
        return HashSet::new();
    }
    let mut by_team: HashMap<&str, Vec<&RunningJob>> = HashMap::new();
    for r in running {
        by_team.entry(&r.job.team).or_default().push(r);
    }
    let mut borrowing = HashSet::new();
    for (team, mut jobs) in by_team {
        let guaranteed = i64::from(shares.guaranteed(team).unwrap_or(u32::MAX));
        jobs.sort_by(|a, b| a.since.cmp(&b.since).then(a.job.id.cmp(&b.job.id)));
        let mut held = 0i64;
        for r in jobs {
            held += r.gpus.len() as i64;
            if held > guaranteed {
                borrowing.insert(r.job.id.clone());
            }
        }
    }
    borrowing
}

/// The hold of a reservation: the GPUs wait for `job`, no rank holds them.
fn reservation(w: &WaitingJob) -> crate::fleet::Hold {
    hold_for(&w.job, -1, -1)
}

pub(super) struct Pass<'a> {
    pub now: DateTime<Utc>,
    pub p: &'a Policy,
    pub view: &'a mut FleetView,
    pub waiting: &'a [WaitingJob],
    pub running: &'a [RunningJob],
    pub shares: &'a Shares,
    held: &'a mut HashMap<String, i64>,
    /// First placements that failed, by what they ask (until GPUs are taken).
    failed: HashMap<(GpuSelection, Need), Unplaceable>,
    /// GPUs held back in the view for a waiting training; freed at the end.
    pub reserved: Vec<String>,
    /// The oldest training's reservation was made this pass.
    head_reserved: bool,
    /// Running trainings given notice, before or in this pass.
    pub stopping: HashSet<String>,
    /// Whether a request that failed would fit but for the reservations.
    blocked: HashMap<(GpuSelection, Need), bool>,
    pub d: Decisions,
}

impl<'a> Pass<'a> {
    /// Considers waiting training `i`; false when it would borrow and
    /// waits for the borrowing phase.
    fn consider(&mut self, i: usize, phase: Phase) -> bool {
        let waiting = self.waiting;
        let w = &waiting[i];
        if w.restarting && !w.torn_down {
            return true; // its old gang is not verified gone yet
        }
        let plan = self.plan(w, None);
        let need = plan.as_ref().map_or(w.job.count(), Vec::len) as i64;
        let admission = if w.restarting {
            Admission::Within // it takes back GPUs it was granted
        } else {
            let held = self.held.get(&w.job.team).copied().unwrap_or(0);
            self.shares
                .admit(&w.job.team, held, need, w.job.borrow, self.p.lending)
        };
        match (&admission, phase) {
            (Admission::Over(why), _) => {
                let why = why.clone();
                self.pend(w, why);
                return true;
            }
            (Admission::Borrow, Phase::Guaranteed) => return false,
            _ => {}
        }
        match plan {
            Ok(slots) => self.place(w, slots, admission == Admission::Borrow),
            Err(why) => self.wait(w, why, &admission),
        }
        true
    }

    /// Where `w` goes in `view` (the pass's own view when `None`): a first
    /// placement by the recommender (remembered when it fails), a restart
    /// on its checkpoint's host avoiding its faulty GPU; a program only
    /// where a program root holds it.
    pub fn plan(&mut self, w: &WaitingJob, view: Option<&FleetView>) -> Plan {
        let live = view.is_none();
        let view = view.unwrap_or(self.view);
        let narrowed = match w.job.need.program_dir.as_deref() {
            Some(dir) => Some(view.for_program(&w.job.team, dir)?),
            None => None,
        };
        let view = narrowed.as_ref().unwrap_or(view);
        if w.attempt > 0 {
            return plan_restart(view, &w.job.request, &w.avoid, w.leader.as_deref());
        }
        if !live {
            return plan_first(view, &w.job.request, w.job.need.memory);
        }
        let key = (w.job.request.selection.clone(), w.job.need.clone());
        if let Some(why) = self.failed.get(&key) {
            return Err(why.clone());
        }
        let plan = plan_first(view, &w.job.request, w.job.need.memory);
        if let Err(why) = &plan {
            self.failed.insert(key, why.clone());
        }
        plan
    }

    fn place(&mut self, w: &WaitingJob, slots: Vec<RankSlot>, borrowing: bool) {
        let attempt = w.attempt + 1;
        self.view
            .take(&slots, |s| hold_for(&w.job, attempt, s.rank));
        *self.held.entry(w.job.team.clone()).or_default() += slots.len() as i64;
        self.failed.clear();
        self.blocked.clear();
        self.d.placements.push(super::pass::Placement {
            id: w.job.id.clone(),
            slots,
            borrowing,
        });
    }

    /// `w` does not fit: a restart goes back to the queue, a training that
    /// may not queue fails, else it makes room or waits (the oldest
    /// reserving what it will get).
    fn wait(&mut self, w: &WaitingJob, why: Unplaceable, admission: &Admission) {
        if w.restarting {
            self.d
                .requeue
                .push((w.job.id.clone(), format!("restart waits for GPUs: {why}")));
            return;
        }
        if !w.job.request.queue && w.attempt == 0 {
            self.d.refuse.push((
                w.job.id.clone(),
                format!("cannot be placed and queueing is off: {why}"),
            ));
            return;
        }
        if let Some(reason) = self.make_room(w, admission) {
            self.pend(w, reason);
            return;
        }
        if !self.head_reserved && self.p.queue.reserves(w, self.now) {
            self.head_reserved = true;
            self.reserve_ahead(w);
            self.pend(w, why.to_string());
            return;
        }
        let reason = if self.p.reasons && self.blocked_by_reservations(w) {
            format!(
                "WAITING_FOR_RESERVATION: the GPUs it would take are held for an older or more urgent training ({why})"
            )
        } else {
            why.to_string()
        };
        self.pend(w, reason);
    }

    /// Whether `w` would fit but for this pass's reservations.
    fn blocked_by_reservations(&mut self, w: &WaitingJob) -> bool {
        if self.reserved.is_empty() {
            return false;
        }
        let key = (w.job.request.selection.clone(), w.job.need.clone());
        if let Some(blocked) = self.blocked.get(&key) {
            return *blocked;
        }
        let mut open = self.view.clone();
        open.unhold(&self.reserved);
        let blocked = self.plan(w, Some(&open)).is_ok();
        self.blocked.insert(key, blocked);
        blocked
    }

    /// Holds back for `w` the GPUs of `slots` that are free now (the rest
    /// it waits for).
    pub fn reserve(&mut self, w: &WaitingJob, slots: &[RankSlot]) {
        let hold = reservation(w);
        for slot in slots {
            if self.view.is_free(&slot.gpu_uuid) {
                let uuid = [slot.gpu_uuid.clone()];
                self.view.hold(&uuid, &hold);
                self.reserved.extend(uuid);
            }
        }
    }

    /// The oldest waiting training reserves the GPUs it gets first: the
    /// running trainings are let go in the order they end (stopping ones
    /// first, those of unknown end last, oldest first) until it fits.
    fn reserve_ahead(&mut self, w: &WaitingJob) {
        let now = self.now;
        let running = self.running;
        let mut ending: Vec<&RunningJob> = running.iter().collect();
        ending.sort_by_key(|r| {
            let stopping = r.stopping.as_ref().map(|s| s.until);
            (
                stopping.is_none(),
                stopping.or_else(|| r.ends_at(now)).is_none(),
                stopping.or_else(|| r.ends_at(now)),
                r.since,
            )
        });
        let mut ahead = self.view.clone();
        for r in ending {
            ahead.release(&r.gpus);
            if let Ok(slots) = self.plan(w, Some(&ahead)) {
                self.reserve(w, &slots);
                return;
            }
        }
    }

    /// Sets `w`'s pending reason when it changed (QUEUED only).
    pub fn pend(&mut self, w: &WaitingJob, reason: String) {
        if self.p.reasons && !w.restarting && w.state_reason != reason {
            self.d.reasons.push((w.job.id.clone(), reason));
        }
    }

    /// Frees the reservations and says whether any GPU is left.
    fn finish(mut self) -> Decisions {
        self.view.unhold(&self.reserved);
        self.d.full = self.view.free_count() == 0;
        self.d
    }
}

impl Waiting for WaitingJob {
    fn id(&self) -> &str {
        &self.job.id
    }
    fn priority(&self) -> i32 {
        self.job.priority
    }
    fn create_time(&self) -> DateTime<Utc> {
        self.job.create_time
    }
    fn restarting(&self) -> bool {
        self.restarting
    }
}

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
use super::placement::{plan_first_as, plan_restart, FleetView, Plan, Unplaceable};
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
    /// An elastic training grows at most once this often (from when its
    /// current size was placed).
    pub elastic_cooldown: Duration,
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
            elastic_cooldown: Duration::from_secs(300),
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
    /// Its sweep pauses it at a rung until it promotes it (the
    /// coordinator's, not the policy's; `by` is the sweep).
    Pause,
    /// An elastic training re-forms at another size (`by` is itself).
    Resize,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Preempt => "preempt",
            NoticeKind::Reclaim => "reclaim",
            NoticeKind::Drain => "drain",
            NoticeKind::Pause => "pause",
            NoticeKind::Resize => "resize",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            NoticeKind::Preempt,
            NoticeKind::Reclaim,
            NoticeKind::Drain,
            NoticeKind::Pause,
            NoticeKind::Resize,
        ]
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

/// A running elastic training to re-form at another size: a notice (it
/// checkpoints and stops), then a placement at the largest of its sizes
/// that fits, from that checkpoint, its global batch unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resize {
    pub id: String,
    pub from: usize,
    pub to: usize,
}

/// What one pass decided.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    pub placements: Vec<Placement>,
    pub preemptions: Vec<Preemption>,
    /// Elastic trainings that grow onto GPUs no waiting training can use.
    pub resizes: Vec<Resize>,
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
    /// The oldest waiting training that holds back the GPUs it gets first.
    pub head: Option<String>,
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
    let (claimed, order) = claimed_first(p.queue.order_of(&s.waiting, s.now), s);
    let borrowing = borrowing_set(&s.running, &s.shares, p.lending);
    let Snapshot {
        now,
        fleet,
        waiting,
        running,
        shares,
        held,
        ..
    } = s;
    let mut pass = Pass {
        now: *now,
        p,
        view: fleet,
        waiting,
        running,
        shares,
        held,
        failed: Vec::new(),
        reserved: Vec::new(),
        head_reserved: false,
        head: None,
        no_backfill: Vec::new(),
        stopping: running
            .iter()
            .filter(|r| r.stopping.is_some())
            .map(|r| r.job.id.clone())
            .collect(),
        stopping_for: stopping_for(running),
        blocked: HashMap::new(),
        free: 0,
        no_room: HashSet::new(),
        grown: running
            .iter()
            .any(|r| r.job.resizable && r.stopping.is_none() && r.gpus.len() > r.job.count()),
        d: Decisions {
            borrowing,
            ..Decisions::default()
        },
    };
    pass.free = pass.view.free_count();
    let mut deferred = Vec::new();
    // Who made room goes first, borrowing or not: the room is theirs.
    for i in claimed {
        pass.consider(i, Phase::Borrowing);
    }
    for i in order {
        if !pass.consider(i, Phase::Guaranteed) {
            deferred.push(i);
        }
    }
    if p.fair_share {
        // Stable: equal shares keep the queue order.
        // A few teams: each one's key once.
        let mut keys: Vec<(&str, f64)> = Vec::new();
        let mut keyed: Vec<(f64, usize)> = Vec::with_capacity(deferred.len());
        for &i in &deferred {
            let team = pass.waiting[i].job.team.as_str();
            let key = match keys.iter().find(|(t, _)| *t == team) {
                Some((_, k)) => *k,
                None => {
                    let k = pass.shares.fair_share_key(team);
                    keys.push((team, k));
                    k
                }
            };
            keyed.push((key, i));
        }
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        deferred = keyed.into_iter().map(|(_, i)| i).collect();
    }
    for i in deferred {
        pass.consider(i, Phase::Borrowing);
    }
    pass.finish()
}

/// The waiting trainings that made room (a live claim, or victims
/// stopping for them), and the rest, each in `order`: the room goes to who
/// made it, not to whoever comes first in the queue when it frees.
fn claimed_first(order: Vec<usize>, s: &Snapshot) -> (Vec<usize>, Vec<usize>) {
    let stopping_for: HashSet<&str> = s
        .running
        .iter()
        .filter_map(|r| r.stopping.as_ref().map(|st| st.by.as_str()))
        .collect();
    if s.claims.is_empty() && stopping_for.is_empty() {
        return (Vec::new(), order);
    }
    let claiming = |i: &usize| {
        let id = s.waiting[*i].job.id.as_str();
        s.claims.get(id).is_some_and(|until| *until > s.now) || stopping_for.contains(id)
    };
    order.into_iter().partition(claiming)
}

/// The running trainings stopping for each waiting training (by index).
fn stopping_for(running: &[RunningJob]) -> HashMap<&str, Vec<usize>> {
    let mut by: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in running.iter().enumerate() {
        if let Some(stop) = &r.stopping {
            by.entry(stop.by.as_str()).or_default().push(i);
        }
    }
    by
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

/// Where `w` goes in `view`: a first placement by the recommender, a
/// restart on its checkpoint's host avoiding its faulty GPU; a program
/// only where a program root holds it.
pub(super) fn plan_on(w: &WaitingJob, view: &FleetView, explain: bool) -> Plan {
    let narrowed = match w.job.need.program_dir.as_deref() {
        Some(dir) => Some(view.for_program(&w.job.team, dir)?),
        None => None,
    };
    let view = narrowed.as_ref().unwrap_or(view);
    if w.attempt > 0 {
        plan_restart(view, &w.job.request, &w.avoid, w.leader.as_deref())
    } else {
        plan_first_as(view, &w.job.request, w.job.need.memory, explain)
    }
}

/// The prefix of a preempted training's reason (the notice's end).
pub const PREEMPTED: &str = "PREEMPTED: ";
/// What a preempted training's reason says next, while it waits.
const WAITS: &str = "; waits: ";

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
    /// First placements that failed, by what they ask (until GPUs are
    /// taken): a few distinct requests, looked up without a copy.
    failed: Vec<((GpuSelection, Need), Unplaceable)>,
    /// GPUs held back in the view for a waiting training; freed at the end.
    pub reserved: Vec<String>,
    /// The oldest training's reservation was made this pass.
    head_reserved: bool,
    /// Its GPUs free now and when it is expected to have the rest (the
    /// end of the last training it waits for): a training that ends
    /// before then may use them (EASY backfill).
    head: Option<(Vec<String>, DateTime<Utc>)>,
    /// Requests that could not backfill into the head's GPUs this pass.
    no_backfill: Vec<(GpuSelection, Need)>,
    /// Running trainings given notice, before or in this pass.
    pub stopping: HashSet<String>,
    /// The running trainings stopping (after notices of earlier passes)
    /// for each waiting training, by their index in `running`.
    pub stopping_for: HashMap<&'a str, Vec<usize>>,
    /// Whether a request that failed would fit but for the reservations.
    blocked: HashMap<(GpuSelection, Need), bool>,
    /// GPUs free in the view now (placements and reservations take them).
    pub free: usize,
    /// Requests that could not make room this pass (nothing frees room
    /// later in a pass), by what they ask and who asks.
    pub no_room: HashSet<(GpuSelection, Need, String, i32)>,
    /// Some running elastic training holds more than its smallest size:
    /// it may give that back to a waiting training.
    pub grown: bool,
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
        // What it takes is known before a plan but for AUTO and a range
        // (what is free): a training its team may not run now, or that
        // waits for the borrowing phase, costs no plan.
        let sized_by_fleet = matches!(
            w.job.request.selection,
            GpuSelection::Auto { .. } | GpuSelection::Range { .. }
        );
        let mut planned = sized_by_fleet.then(|| self.plan(w));
        if let Some(Ok(slots)) = &mut planned {
            self.cut_to_share(w, slots);
        }
        let need = match &planned {
            Some(plan) => plan.as_ref().map_or(w.job.count(), Vec::len),
            None => w.job.count(),
        } as i64;
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
        let plan = planned.take().unwrap_or_else(|| self.plan(w));
        match plan.or_else(|why| self.backfill(w).ok_or(why)) {
            Ok(slots) => self.place(w, slots, admission == Admission::Borrow),
            Err(why) => self.wait(w, why, &admission),
        }
        true
    }

    /// An elastic training's plan cut to the largest of its sizes its team
    /// may run now (a range is admitted by its smallest size, and takes
    /// no more than its share allows).
    fn cut_to_share(&self, w: &WaitingJob, slots: &mut Vec<RankSlot>) {
        let GpuSelection::Range { sizes, .. } = &w.job.request.selection else {
            return;
        };
        if w.restarting {
            return;
        }
        let held = self.held.get(&w.job.team).copied().unwrap_or(0);
        let admitted = |size: usize| {
            let admission =
                self.shares
                    .admit(&w.job.team, held, size as i64, w.job.borrow, self.p.lending);
            !matches!(admission, Admission::Over(_))
        };
        let fits = sizes
            .iter()
            .rev()
            .map(|&s| s as usize)
            .filter(|&s| s <= slots.len())
            .find(|&s| admitted(s));
        if let Some(size) = fits {
            slots.truncate(size);
        }
    }

    /// Where `w` goes using the GPUs held back for the oldest training,
    /// when `w` says it ends before that one is expected to start (EASY
    /// backfill; a training of unknown length never does).
    fn backfill(&mut self, w: &WaitingJob) -> Option<Vec<RankSlot>> {
        let (held_back, shadow) = self.head.as_ref()?;
        if w.restarting || w.job.remaining.is_none_or(|r| self.now + r > *shadow) {
            return None;
        }
        let asks =
            |(s, n): &(GpuSelection, Need)| *s == w.job.request.selection && *n == w.job.need;
        if self.no_backfill.iter().any(asks) {
            return None;
        }
        let saved = self.view.unhold_saving(held_back);
        let plan = plan_on(w, self.view, false);
        self.view.restore(saved);
        match plan {
            Ok(slots) => {
                // What it takes is no longer held back.
                let taken: HashSet<&str> = slots.iter().map(|s| s.gpu_uuid.as_str()).collect();
                self.reserved.retain(|u| !taken.contains(u.as_str()));
                if let Some((held_back, _)) = &mut self.head {
                    let before = held_back.len();
                    held_back.retain(|u| !taken.contains(u.as_str()));
                    // Counted out of the free ones while held back.
                    self.free += before - held_back.len();
                }
                Some(slots)
            }
            Err(_) => {
                let key = (w.job.request.selection.clone(), w.job.need.clone());
                self.no_backfill.push(key);
                None
            }
        }
    }

    /// Where `w` goes on the pass's view (see [`plan_on`]), a first
    /// placement that failed remembered until GPUs are taken.
    pub fn plan(&mut self, w: &WaitingJob) -> Plan {
        // Without reasons to give, a gang bigger than what is free fails
        // at once (the estimates and the simulator pass often).
        if !self.p.reasons {
            let least = match &w.job.request.selection {
                GpuSelection::Count { .. } | GpuSelection::Range { .. } => w.job.count(),
                _ => 0,
            };
            if least > self.free {
                return Err(Unplaceable::InsufficientGpus {
                    wanted: least,
                    free: self.free,
                });
            }
        }
        if w.attempt > 0 {
            return plan_on(w, self.view, self.p.reasons);
        }
        let asks =
            |(s, n): &(GpuSelection, Need)| *s == w.job.request.selection && *n == w.job.need;
        if let Some((_, why)) = self.failed.iter().find(|(key, _)| asks(key)) {
            return Err(why.clone());
        }
        let plan = plan_on(w, self.view, self.p.reasons);
        if let Err(why) = &plan {
            let key = (w.job.request.selection.clone(), w.job.need.clone());
            self.failed.push((key, why.clone()));
        }
        plan
    }

    fn place(&mut self, w: &WaitingJob, slots: Vec<RankSlot>, borrowing: bool) {
        let attempt = w.attempt + 1;
        self.view
            .take(&slots, |s| hold_for(&w.job, attempt, s.rank));
        *self.held.entry(w.job.team.clone()).or_default() += slots.len() as i64;
        self.free = self.free.saturating_sub(slots.len());
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
        // A borrower holds nothing back: it runs on what others leave idle.
        let may_reserve = !(self.p.lending && *admission == Admission::Borrow);
        if !self.head_reserved && may_reserve && self.p.queue.reserves(w, self.now) {
            self.head_reserved = true;
            self.reserve_ahead(w);
            if self.p.reasons {
                self.pend(w, why.to_string());
            }
            return;
        }
        if !self.p.reasons {
            return;
        }
        let reason = if self.blocked_by_reservations(w) {
            let whom = match &self.d.head {
                Some(head) => format!("training {head}, which has waited longest"),
                None => "a training that made room for itself".to_string(),
            };
            format!("WAITING_FOR_RESERVATION: the GPUs it would take are held for {whom} ({why})")
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
        let saved = self.view.unhold_saving(&self.reserved);
        let blocked = plan_on(w, self.view, false).is_ok();
        self.view.restore(saved);
        self.blocked.insert(key, blocked);
        blocked
    }

    /// Holds back for `w` the GPUs of `slots` that are free now (the rest
    /// it waits for); returns them.
    pub fn reserve(&mut self, w: &WaitingJob, slots: &[RankSlot]) -> Vec<String> {
        let hold = reservation(w);
        let mut reserved = Vec::new();
        for slot in slots {
            if self.view.is_free(&slot.gpu_uuid) {
                let uuid = [slot.gpu_uuid.clone()];
                self.view.hold(&uuid, &hold);
                reserved.extend(uuid);
                self.free = self.free.saturating_sub(1);
            }
        }
        self.reserved.extend(reserved.iter().cloned());
        reserved
    }

    /// The oldest waiting training reserves the GPUs it gets first: the
    /// running trainings are let go in the order they end (stopping ones
    /// first, those of unknown end last, oldest first) until it fits.
    fn reserve_ahead(&mut self, w: &WaitingJob) {
        let running = self.running;
        // Stopping ones first, then by end, unknown ends last (oldest first).
        let mut keyed: Vec<(bool, bool, i64, i64, usize)> = running
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let stopping = r.stopping.as_ref().map(|s| s.until);
                let end = stopping.or(r.ends_at);
                (
                    stopping.is_none(),
                    end.is_none(),
                    end.map_or(i64::MAX, |e| e.timestamp_millis()),
                    r.since.timestamp_millis(),
                    i,
                )
            })
            .collect();
        keyed.sort_unstable();
        let ending = keyed.into_iter().map(|k| &running[k.4]);
        let (want, mut free) = (w.job.count(), self.free);
        let mut saved = Vec::new();
        let mut found = None;
        for r in ending {
            saved.extend(self.view.release_saving(&r.gpus));
            free += r.gpus.len();
            if free < want {
                continue;
            }
            if let Ok(s) = plan_on(w, self.view, false) {
                // It starts when the last one it waits for is gone.
                let shadow = r.stopping.as_ref().map(|s| s.until).or(r.ends_at);
                found = Some((s, shadow));
                break;
            }
        }
        self.view.restore(saved);
        if let Some((slots, shadow)) = found {
            let held_back = self.reserve(w, &slots);
            self.head = shadow.map(|shadow| (held_back, shadow));
            self.d.head = Some(w.job.id.clone());
        }
    }

    /// Sets `w`'s pending reason when it changed (QUEUED only). A training
    /// back in the queue after a preemption keeps saying so, with why it
    /// still waits after it: `PREEMPTED: by X (class urgent); waits:
    /// INSUFFICIENT_GPUS: ...`.
    pub fn pend(&mut self, w: &WaitingJob, reason: String) {
        if !self.p.reasons || w.restarting {
            return;
        }
        let reason = match w.state_reason.strip_prefix(PREEMPTED) {
            Some(_) => {
                let why = w.state_reason.split(WAITS).next().unwrap_or_default();
                format!("{why}{WAITS}{reason}")
            }
            None => reason,
        };
        if w.state_reason != reason {
            self.d.reasons.push((w.job.id.clone(), reason));
        }
    }

    /// Frees the reservations and says whether any GPU is left.
    fn finish(mut self) -> Decisions {
        // What is free now, the reservation still held, no waiting
        // training could take: elastic trainings may grow onto it.
        self.grow();
        self.view.unhold(&self.reserved);
        self.d.full = self.view.free_count() == 0;
        self.d
    }
}

impl Pass<'_> {
    /// Elastic trainings grown onto the GPUs this pass leaves free, the
    /// longest placed first: each to the largest of its sizes that its
    /// GPUs and the free ones hold and its team may run (into borrowed
    /// quota as a placement may: a reclaim shrinks it back first), once
    /// per cooldown, never while stopping.
    fn grow(&mut self) {
        let mut free = self.view.free_count();
        if free == 0 {
            return;
        }
        let mut order: Vec<&RunningJob> = self
            .running
            .iter()
            .filter(|r| r.job.resizable && r.stopping.is_none())
            .filter(|r| !self.stopping.contains(&r.job.id))
            .collect();
        order.sort_by(|a, b| a.since.cmp(&b.since).then(a.job.id.cmp(&b.job.id)));
        let cooldown = chrono::Duration::from_std(self.p.elastic_cooldown).unwrap_or_default();
        // What this pass's grows add to each team (the snapshot's `held`
        // stays what the placements made it).
        let mut grown: HashMap<&str, i64> = HashMap::new();
        for r in order {
            let GpuSelection::Range { sizes, .. } = &r.job.request.selection else {
                continue;
            };
            if self.now - r.since < cooldown {
                continue;
            }
            let current = r.gpus.len();
            let Some(to) = GpuSelection::largest_size(sizes, current + free) else {
                continue;
            };
            if to <= current {
                continue;
            }
            let more = (to - current) as i64;
            let held = self.held.get(&r.job.team).copied().unwrap_or(0)
                + grown.get(r.job.team.as_str()).copied().unwrap_or(0);
            let admission =
                self.shares
                    .admit(&r.job.team, held, more, r.job.borrow, self.p.lending);
            if matches!(admission, Admission::Over(_)) {
                continue;
            }
            free -= to - current;
            *grown.entry(r.job.team.as_str()).or_default() += more;
            self.d.resizes.push(Resize {
                id: r.job.id.clone(),
                from: current,
                to,
            });
        }
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

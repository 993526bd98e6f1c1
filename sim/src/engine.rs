//! The simulation: a trace's jobs through the coordinator's own policy
//! ([`cohort_coordinator::policy::pass`]) on virtual time. Events are
//! submissions, ends, the ends of notices, and estimate ticks; after each
//! instant's events one pass decides, as the coordinator's passes do.
//!
//! A job runs `duration_s` of work on its gang, checkpointing every
//! `checkpoint_every_s` of it. Given a notice, one that saves on notice
//! stops `notice_checkpoint_s` later keeping all its work; one that does
//! not runs on to the end of its grace and is killed, keeping only its
//! last checkpoint. Back in the queue it runs what is left, plus the
//! restart overhead. What the scheduler knows of a job is what the
//! coordinator would: a running job's pace once it has run a minute, a
//! job's expected duration before.
//!
//! With elastic requests (a policy with `:elastic`) a job that saves on
//! notice asks for `min_gpus..=gpus`: it starts at the largest size that
//! fits, grows and shrinks through a notice of kind `resize` as the
//! coordinator decides, and does its work at a pace proportional to its
//! size (`duration_s` is its time at `gpus`; linear scaling, the global
//! batch held). A resize costs its stop and the restart overhead, as a
//! preemption that saves on notice does, and is counted on its own.

use crate::scenario::PolicyRun;
use crate::trace::TraceJob;
use chrono::{DateTime, Utc};
use cohort_coordinator::model::{GpuRequest, GpuSelection};
use cohort_coordinator::policy::snapshot::CLAIM_AFTER_STOP;
use cohort_coordinator::policy::{
    forecast, pass, Estimate, FleetView, Horizon, Job, Need, NoticeKind, PriorityClasses, Shares,
    Snapshot, Stopping, WaitingJob,
};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// How the jobs behave and how the run is measured.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Between a notice and SIGKILL.
    pub grace_s: f64,
    /// How long a job that saves on notice takes to checkpoint and stop.
    pub notice_checkpoint_s: f64,
    /// Seconds of every attempt that train nothing (start, rendezvous, load).
    pub restart_overhead_s: f64,
    /// After this much running a job's pace is known.
    pub pace_after_s: f64,
    pub half_life: Duration,
    /// A forecast after a pass that leaves newly submitted jobs waiting,
    /// as the coordinator's estimate loop does, at most this often (none
    /// when `None`).
    pub estimate_every_s: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            grace_s: 60.0,
            notice_checkpoint_s: 20.0,
            restart_overhead_s: 0.0,
            pace_after_s: 60.0,
            half_life: Duration::from_secs(7 * 86_400),
            estimate_every_s: Some(60.0),
        }
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotYet,
    Waiting,
    Running,
    Stopping,
    Done,
}

/// One job's life, as the simulation keeps it.
#[derive(Debug, Clone)]
pub struct SimJob {
    pub trace: TraceJob,
    phase: Phase,
    /// Work kept (seconds of its duration) when its current attempt began.
    kept_at_start: f64,
    /// When the current attempt began.
    started_at: f64,
    /// Bumped at every start and stop: stale events are ignored.
    epoch: u64,
    /// When the notice came, for a stopping job.
    noticed_at: f64,
    pub first_start: Option<f64>,
    pub end: Option<f64>,
    pub preemptions: u32,
    pub reclaims: u32,
    /// GPU-seconds lost to preemptions (redone work, stops, restarts).
    pub lost_gpu_s: f64,
    /// The GPUs it runs on now (its last size once stopped).
    pub size: u32,
    /// Resizes (grows and shrinks), and the GPU-seconds they cost (stops
    /// and restarts).
    pub resizes: u32,
    pub resize_gpu_s: f64,
    /// Its current notice is a resize's.
    resizing: bool,
    /// GPU-seconds it held GPUs (running or stopping).
    pub held_gpu_s: f64,
    /// Submitted within its team's guarantee.
    pub within_guarantee: bool,
    /// Its first start estimate: (when made, the estimate), or why none.
    pub estimate: Option<(f64, Result<f64, String>)>,
    /// The estimates it carried later while it waited for its first start
    /// (when made, the estimate), at most one per [`RESAMPLE_S`].
    pub later: Vec<(f64, f64)>,
}

/// How often a waiting job's later estimates are kept.
pub const RESAMPLE_S: f64 = 600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Submit,
    End,
    Stopped,
    Tick,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    at: f64,
    seq: u64,
    kind: Kind,
    job: usize,
    epoch: u64,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Earliest first (the heap is a max-heap).
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

/// The run's result: every job's life, and what the policy cost.
#[derive(Debug, Clone)]
pub struct Run {
    pub jobs: Vec<SimJob>,
    pub gpus: u32,
    /// From the first submission to the last, and the GPU-seconds held in it.
    pub window: (f64, f64),
    pub window_held_gpu_s: f64,
    pub passes: u64,
    pub forecast_passes: u64,
    pub forecasts: u64,
    pub wall: Duration,
}

/// FNV-1a: job ids are looked up at every pass; SipHash's defence against
/// chosen keys is not needed for a trace's own ids.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type Ids = HashMap<String, usize, std::hash::BuildHasherDefault<Fnv>>;

/// The virtual clock's origin.
fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid instant")
}

fn at(t: f64) -> DateTime<Utc> {
    epoch() + chrono::Duration::milliseconds((t * 1000.0).round() as i64)
}

fn secs(d: DateTime<Utc>) -> f64 {
    (d - epoch()).num_milliseconds() as f64 / 1000.0
}

pub struct Engine<'a> {
    settings: &'a Settings,
    run: &'a PolicyRun,
    classes: PriorityClasses,
    guarantees: HashMap<String, u32>,
    jobs: Vec<SimJob>,
    by_id: Ids,
    snapshot: Snapshot,
    events: BinaryHeap<Event>,
    seq: u64,
    now: f64,
    /// Jobs submitted since the last forecast.
    unestimated: Vec<usize>,
    /// When the last forecast ran, and whether one is due after this
    /// instant's pass.
    last_forecast: f64,
    forecast_due: bool,
    tick_pending: bool,
    /// GPUs each team holds, for the guarantee measure (also when the
    /// policy runs without quotas).
    held: HashMap<String, i64>,
    window: (f64, f64),
    window_held_gpu_s: f64,
    passes: u64,
    forecast_passes: u64,
    forecasts: u64,
}

impl<'a> Engine<'a> {
    pub fn new(
        trace: &[TraceJob],
        fleet: FleetView,
        shares: Shares,
        guarantees: HashMap<String, u32>,
        run: &'a PolicyRun,
        settings: &'a Settings,
    ) -> Self {
        let jobs: Vec<SimJob> = trace
            .iter()
            .map(|t| SimJob {
                trace: t.clone(),
                phase: Phase::NotYet,
                kept_at_start: 0.0,
                started_at: 0.0,
                epoch: 0,
                noticed_at: 0.0,
                first_start: None,
                end: None,
                preemptions: 0,
                reclaims: 0,
                lost_gpu_s: 0.0,
                size: 0,
                resizes: 0,
                resize_gpu_s: 0.0,
                resizing: false,
                held_gpu_s: 0.0,
                within_guarantee: false,
                estimate: None,
                later: Vec::new(),
            })
            .collect();
        let by_id = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.trace.id.clone(), i))
            .collect();
        let mut engine = Self {
            settings,
            run,
            classes: PriorityClasses::default(),
            guarantees,
            by_id,
            snapshot: Snapshot {
                now: at(0.0),
                fleet,
                waiting: Vec::new(),
                running: Vec::new(),
                shares,
                held: HashMap::new(),
                claims: HashMap::new(),
            },
            events: BinaryHeap::new(),
            seq: 0,
            now: 0.0,
            unestimated: Vec::new(),
            last_forecast: f64::NEG_INFINITY,
            forecast_due: false,
            tick_pending: false,
            held: HashMap::new(),
            window: (
                trace
                    .iter()
                    .map(|t| t.submit_s)
                    .fold(f64::INFINITY, f64::min),
                trace.iter().map(|t| t.submit_s).fold(0.0, f64::max),
            ),
            window_held_gpu_s: 0.0,
            passes: 0,
            forecast_passes: 0,
            forecasts: 0,
            jobs,
        };
        for i in 0..engine.jobs.len() {
            let t = engine.jobs[i].trace.submit_s;
            engine.push(t, Kind::Submit, i);
        }
        engine
    }

    fn push(&mut self, at: f64, kind: Kind, job: usize) {
        self.seq += 1;
        let epoch = self.jobs.get(job).map_or(0, |j| j.epoch);
        self.events.push(Event {
            at,
            seq: self.seq,
            kind,
            job,
            epoch,
        });
    }

    /// Runs to the last job's end (or until nothing can move).
    pub fn run(mut self) -> Run {
        let began = std::time::Instant::now();
        self.run_until(f64::INFINITY);
        Run {
            gpus: self.snapshot.fleet.candidates.len() as u32,
            window: self.window,
            window_held_gpu_s: self.window_held_gpu_s,
            jobs: self.jobs,
            passes: self.passes,
            forecast_passes: self.forecast_passes,
            forecasts: self.forecasts,
            wall: began.elapsed(),
        }
    }

    /// Runs until virtual time `until_s` and returns the scheduler's world
    /// then, as a forecast would see it (the cost benchmark's starting point).
    pub fn snapshot_at(mut self, until_s: f64) -> Snapshot {
        self.run_until(until_s);
        self.advance(until_s.max(self.now));
        self.refresh();
        self.snapshot
    }

    /// Handles every event up to virtual time `until_s`, a pass (and a
    /// forecast when one is due) after each instant's events.
    fn run_until(&mut self, until_s: f64) {
        while let Some(next) = self.events.peek().map(|e| e.at) {
            if next > until_s || self.only_ticks_left() {
                break;
            }
            self.advance(next);
            while self.events.peek().is_some_and(|e| e.at <= next) {
                let event = self.events.pop().expect("peeked");
                self.handle(event);
            }
            self.decide();
            if std::mem::take(&mut self.forecast_due) {
                self.estimate();
            }
        }
    }

    fn only_ticks_left(&self) -> bool {
        self.events.iter().all(|e| e.kind == Kind::Tick)
    }

    /// Time passes: usage accrues, running jobs hold their GPUs.
    fn advance(&mut self, to: f64) {
        let dt = (to - self.now).max(0.0);
        if dt > 0.0 {
            let d = Duration::from_secs_f64(dt);
            let held = self.snapshot.held.clone();
            self.snapshot
                .shares
                .accrue(&held, d, self.settings.half_life);
            let (from, until) = self.window;
            let inside = (to.min(until) - self.now.max(from)).max(0.0);
            for j in &mut self.jobs {
                if matches!(j.phase, Phase::Running | Phase::Stopping) {
                    j.held_gpu_s += dt * f64::from(j.size);
                    self.window_held_gpu_s += inside * f64::from(j.size);
                }
            }
        }
        self.now = to;
        self.snapshot.now = at(to);
    }

    fn handle(&mut self, e: Event) {
        match e.kind {
            Kind::Tick => {
                self.tick_pending = false;
                self.forecast_due = true;
            }
            Kind::Submit => self.submit(e.job),
            _ if self.jobs[e.job].epoch != e.epoch => {} // stale
            Kind::End => self.finish(e.job),
            Kind::Stopped => self.stopped(e.job),
        }
    }

    fn job(&self, i: usize) -> Job {
        let t = &self.jobs[i].trace;
        let class = self.classes.get(&t.class);
        Job {
            id: t.id.clone(),
            team: t.team.clone(),
            priority: class.map_or(0, |c| c.value),
            class: t.class.clone(),
            preempting: class.is_some_and(|c| c.preempting),
            borrow: true,
            create_time: at(t.submit_s),
            request: GpuRequest {
                selection: match self.sizes(i) {
                    Some((min, max)) => GpuSelection::Range {
                        min,
                        max,
                        sizes: (min..=max).collect(),
                    },
                    None => GpuSelection::Count { count: t.gpus },
                },
                queue: true,
            },
            need: Need {
                memory: 1 << 30,
                program_dir: None,
            },
            remaining: None,
            grace: Duration::from_secs_f64(self.settings.grace_s),
            stop_within: Duration::from_secs_f64(if t.saves_on_notice {
                self.settings.notice_checkpoint_s.min(self.settings.grace_s)
            } else {
                self.settings.grace_s
            }),
            saves_on_notice: t.saves_on_notice,
            resizable: self.sizes(i).is_some(),
        }
    }

    /// The range job `i` asks for under elastic requests: a job that saves
    /// on notice, from its `min_gpus` (half its size) to its size; None
    /// for a fixed request.
    fn sizes(&self, i: usize) -> Option<(u32, u32)> {
        let t = &self.jobs[i].trace;
        let min = t.min_gpus.unwrap_or(t.gpus.div_ceil(2));
        (self.run.elastic && t.saves_on_notice && min < t.gpus).then_some((min, t.gpus))
    }

    /// Work (seconds of its duration) job `i` does per second at its size.
    fn pace(&self, i: usize) -> f64 {
        let j = &self.jobs[i];
        f64::from(j.size.max(1)) / f64::from(j.trace.gpus)
    }

    fn submit(&mut self, i: usize) {
        let team = self.jobs[i].trace.team.clone();
        let held = self.held.get(&team).copied().unwrap_or(0);
        let guarantee = i64::from(self.guarantees.get(&team).copied().unwrap_or(0));
        self.jobs[i].within_guarantee = held + i64::from(self.jobs[i].trace.gpus) <= guarantee;
        self.jobs[i].phase = Phase::Waiting;
        let job = self.job(i);
        self.snapshot.waiting.push(WaitingJob::submitted(job));
        self.unestimated.push(i);
        if let (Some(every), false) = (self.settings.estimate_every_s, self.tick_pending) {
            self.tick_pending = true;
            let at = self.now.max(self.last_forecast + every);
            self.push(at, Kind::Tick, usize::MAX);
        }
    }

    /// Work kept so far by job `i` (of its duration), were it to stop now
    /// with a checkpoint.
    fn worked(&self, i: usize) -> f64 {
        let j = &self.jobs[i];
        let ran = (self.now - j.started_at - self.settings.restart_overhead_s).max(0.0);
        (j.kept_at_start + ran * self.pace(i)).min(j.trace.duration_s)
    }

    /// The work of its newest periodic checkpoint.
    fn checkpointed(&self, i: usize) -> f64 {
        let j = &self.jobs[i];
        let every = j.trace.checkpoint_every_s;
        let ran = (self.now - j.started_at - self.settings.restart_overhead_s).max(0.0);
        j.kept_at_start + (ran / every).floor() * every * self.pace(i)
    }

    fn finish(&mut self, i: usize) {
        let j = &mut self.jobs[i];
        j.phase = Phase::Done;
        j.end = Some(self.now);
        *self.held.entry(j.trace.team.clone()).or_default() -= i64::from(j.size);
        let id = j.trace.id.clone();
        self.snapshot.end(&id);
    }

    /// A noticed job is gone: back in the queue with what it kept.
    fn stopped(&mut self, i: usize) {
        let saves = self.jobs[i].trace.saves_on_notice;
        let kept = if saves {
            // Its work at the notice: it checkpointed then.
            let now = self.now;
            self.now = self.jobs[i].noticed_at;
            let w = self.worked(i);
            self.now = now;
            w
        } else {
            self.checkpointed(i)
        };
        let gpus = f64::from(self.jobs[i].size);
        let overhead = self.settings.restart_overhead_s * gpus;
        let lost = if saves {
            (self.now - self.jobs[i].noticed_at) * gpus + overhead
        } else {
            (self.worked(i) - kept).max(0.0) / self.pace(i) * gpus + overhead
        };
        let j = &mut self.jobs[i];
        if std::mem::take(&mut j.resizing) {
            j.resizes += 1;
            j.resize_gpu_s += lost;
        } else {
            j.lost_gpu_s += lost;
        }
        j.kept_at_start = kept;
        j.phase = Phase::Waiting;
        j.epoch += 1;
        *self.held.entry(j.trace.team.clone()).or_default() -= i64::from(j.size);
        let (id, left) = (j.trace.id.clone(), j.trace.duration_s - kept);
        self.snapshot
            .requeue(&id, Some(Duration::from_secs_f64(left.max(0.0))));
    }

    /// What the scheduler knows of each job now.
    fn refresh(&mut self) {
        let by_id = &self.by_id;
        for r in &mut self.snapshot.running {
            let i = by_id[&r.job.id];
            let j = &self.jobs[i];
            let pace = f64::from(j.size.max(1)) / f64::from(j.trace.gpus);
            let ran = self.now - j.started_at;
            // Seconds at its size, from work left at its pace.
            let left = (j.trace.duration_s - j.kept_at_start) / pace
                - (ran - self.settings.restart_overhead_s).max(0.0);
            let remaining = if ran >= self.settings.pace_after_s {
                Some(left.max(0.0))
            } else {
                j.trace
                    .expected_duration_s
                    .map(|e| ((e - j.kept_at_start) / pace - ran).max(60.0))
            };
            r.ends_at = remaining.map(|r| at(self.now + r));
            let every = j.trace.checkpoint_every_s;
            let done = (ran - self.settings.restart_overhead_s).max(0.0);
            let last = (done / every).floor() * every;
            r.checkpoint_time =
                (last > 0.0).then(|| at(j.started_at + self.settings.restart_overhead_s + last));
        }
        for w in &mut self.snapshot.waiting {
            let j = &self.jobs[by_id[&w.job.id]];
            w.job.remaining = if j.first_start.is_some() {
                Some(Duration::from_secs_f64(
                    (j.trace.duration_s - j.kept_at_start).max(0.0),
                ))
            } else {
                j.trace.expected_duration_s.map(Duration::from_secs_f64)
            };
        }
    }

    /// One pass, its decisions applied.
    fn decide(&mut self) {
        let growable = self.run.elastic && self.snapshot.running.iter().any(|r| r.job.resizable);
        if self.snapshot.waiting.is_empty() && !growable {
            return;
        }
        self.refresh();
        let d = pass(&mut self.snapshot, &self.run.policy);
        self.passes += 1;
        for p in &d.placements {
            let i = self.by_id[&p.id];
            let overhead = self.settings.restart_overhead_s;
            let j = &mut self.jobs[i];
            j.phase = Phase::Running;
            j.size = p.slots.len() as u32;
            j.started_at = self.now;
            j.first_start.get_or_insert(self.now);
            j.epoch += 1;
            *self.held.entry(j.trace.team.clone()).or_default() += i64::from(j.size);
            let end = self.now + overhead + (j.trace.duration_s - j.kept_at_start) / self.pace(i);
            self.push(end, Kind::End, i);
        }
        for p in &d.preemptions {
            let i = self.by_id[&p.victim];
            let j = &mut self.jobs[i];
            match p.kind {
                // A shrink: it re-forms smaller after the notice.
                NoticeKind::Resize => j.resizing = true,
                NoticeKind::Reclaim => {
                    j.preemptions += 1;
                    j.reclaims += 1;
                }
                _ => j.preemptions += 1,
            }
            self.notice(i);
        }
        self.snapshot.apply(&d);
        for r in &d.resizes {
            self.grow(self.by_id[&r.id]);
        }
    }

    /// Job `i` gets a notice: it is gone `stop_within` later.
    fn notice(&mut self, i: usize) {
        let j = &mut self.jobs[i];
        j.phase = Phase::Stopping;
        j.noticed_at = self.now;
        j.epoch += 1;
        let stop = if j.trace.saves_on_notice {
            self.settings.notice_checkpoint_s.min(self.settings.grace_s)
        } else {
            self.settings.grace_s
        };
        self.push(self.now + stop, Kind::Stopped, i);
    }

    /// A grow of job `i`: the notice of a resize, and the room it stops in
    /// claimed for itself (as the coordinator's closing of a resize notice
    /// claims it), so the next pass places it at its larger size.
    fn grow(&mut self, i: usize) {
        self.jobs[i].resizing = true;
        self.notice(i);
        let id = self.jobs[i].trace.id.clone();
        let now = self.snapshot.now;
        if let Some(r) = self.snapshot.running.iter_mut().find(|r| r.job.id == id) {
            let until = now + r.job.stop_within;
            r.stopping = Some(Stopping {
                by: id.clone(),
                until,
            });
            self.snapshot.claims.insert(id, until + CLAIM_AFTER_STOP);
        }
    }

    /// A forecast over a copy of now; the first estimate of each job
    /// submitted since the last tick that still waits.
    fn estimate(&mut self) {
        let waiting: Vec<usize> = self
            .unestimated
            .drain(..)
            .filter(|&i| self.jobs[i].phase == Phase::Waiting && self.jobs[i].first_start.is_none())
            .collect();
        if waiting.is_empty() {
            return;
        }
        self.last_forecast = self.now;
        self.refresh();
        let f = forecast(
            self.snapshot.clone(),
            &self.run.policy,
            self.settings.half_life,
            Horizon::default(),
        );
        self.forecasts += 1;
        self.forecast_passes += f.passes as u64;
        for i in waiting {
            let made = match f.starts.get(&self.jobs[i].trace.id) {
                Some(Estimate::At(t)) => Ok(secs(*t)),
                Some(Estimate::Unknown(why)) => Err(why.clone()),
                None => Err("not in the forecast".to_string()),
            };
            self.jobs[i].estimate = Some((self.now, made));
        }
        for w in &self.snapshot.waiting {
            let j = &mut self.jobs[self.by_id[&w.job.id]];
            let Some(Estimate::At(t)) = f.starts.get(&w.job.id) else {
                continue;
            };
            let last = j.later.last().map_or(
                j.estimate.as_ref().map_or(f64::NEG_INFINITY, |e| e.0),
                |l| l.0,
            );
            if j.first_start.is_none() && self.now - last >= RESAMPLE_S {
                j.later.push((self.now, secs(*t)));
            }
        }
    }
}

#[cfg(test)]
mod tests;

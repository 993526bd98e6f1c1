//! Start and end estimates: the scheduler's own pass run forward on virtual
//! time over the queue and fleet as they are now, with no new arrivals
//! (whom newcomers will overtake, nobody knows yet: docs/scheduling.md).
//! A running training ends when its pace says (its remaining steps at its
//! recent step rate, else its `expected_duration` less what it ran); a
//! training placed in the run lasts what it is expected to; victims stop
//! within their grace and go back to the queue with their lost work. A
//! training whose start depends on a duration nobody knows gets no
//! estimate but the reason, never a made-up number.

use super::pass::{pass, Policy};
use super::snapshot::{RunningJob, Snapshot};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

/// When something happens, or why nobody can say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    At(DateTime<Utc>),
    /// The reason: `NO_DURATION: ...` or `NO_ESTIMATE: ...`.
    Unknown(String),
}

impl Estimate {
    pub fn at(&self) -> Option<DateTime<Utc>> {
        match self {
            Estimate::At(t) => Some(*t),
            Estimate::Unknown(_) => None,
        }
    }
}

/// The estimates of one forward run.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    /// Every waiting training of the snapshot: when it is placed.
    pub starts: HashMap<String, Estimate>,
    /// Every running training of the snapshot, and every waiting one whose
    /// start and duration are known: when it ends.
    pub ends: HashMap<String, Estimate>,
    /// Passes the run took.
    pub passes: usize,
}

/// How far a forward run goes.
#[derive(Debug, Clone, Copy)]
pub struct Horizon {
    /// Virtual time from the snapshot's instant.
    pub span: Duration,
    /// Passes, at most.
    pub passes: usize,
}

impl Default for Horizon {
    fn default() -> Self {
        Self {
            span: Duration::from_secs(90 * 86_400),
            passes: 200_000,
        }
    }
}

/// Runs `p` forward from `s` (fair-share usage aging with `half_life`).
pub fn forecast(mut s: Snapshot, p: &Policy, half_life: Duration, horizon: Horizon) -> Forecast {
    let p = Policy {
        reasons: false,
        ..p.clone()
    };
    let start = s.now;
    let waiting: Vec<String> = s.waiting.iter().map(|w| w.job.id.clone()).collect();
    let running: Vec<String> = s.running.iter().map(|r| r.job.id.clone()).collect();
    for w in &mut s.waiting {
        w.torn_down = true; // an old gang's teardown takes seconds
    }
    // What a victim has left to run once placed again: what it had left
    // at its notice plus the work it lost (unknown when its end was).
    let mut left: HashMap<String, Option<Duration>> = s
        .running
        .iter()
        .filter(|r| r.stopping.is_some())
        .map(|r| {
            (
                r.job.id.clone(),
                left_after_notice(r, start, r.lost_if_preempted(start)),
            )
        })
        .collect();
    let mut f = Forecast::default();
    let mut reasons: HashMap<String, String> = HashMap::new();
    loop {
        let d = pass(&mut s, &p);
        f.passes += 1;
        for placed in &d.placements {
            f.starts
                .entry(placed.id.clone())
                .or_insert(Estimate::At(s.now));
        }
        for p in &d.preemptions {
            if let Some(r) = s.running(&p.victim) {
                left.insert(
                    p.victim.clone(),
                    left_after_notice(r, s.now, p.lost_gpu_seconds),
                );
            }
        }
        for (id, why) in &d.refuse {
            f.starts
                .entry(id.clone())
                .or_insert_with(|| Estimate::Unknown(format!("NO_ESTIMATE: {why}")));
        }
        for (id, why) in &d.requeue {
            reasons.insert(id.clone(), why.clone());
        }
        s.apply(&d);
        let Some(next) = next_event(&s) else {
            break;
        };
        if f.passes >= horizon.passes || (next - start).to_std().unwrap_or_default() > horizon.span
        {
            break;
        }
        let elapsed = (next - s.now).to_std().unwrap_or(Duration::ZERO);
        s.shares.accrue(&s.held, elapsed, half_life);
        s.now = next;
        complete(&mut s, &mut left, &mut f);
    }
    // Whatever did not start: why not.
    let blocker = s
        .running
        .iter()
        .filter(|r| r.stopping.is_none() && r.ends_at.is_none())
        .min_by(|a, b| a.since.cmp(&b.since).then(a.job.id.cmp(&b.job.id)))
        .map(|r| r.job.id.clone());
    for id in waiting {
        f.starts.entry(id.clone()).or_insert_with(|| {
            Estimate::Unknown(match &blocker {
                Some(b) => format!(
                    "NO_DURATION: waits behind training {b}, whose end is unknown (no step rate with total_steps, no expected_duration)"
                ),
                None => format!(
                    "NO_ESTIMATE: it does not start within the forecast's horizon{}",
                    reasons.get(&id).map(|r| format!(" ({r})")).unwrap_or_default()
                ),
            })
        });
    }
    for id in running {
        f.ends.entry(id).or_insert_with(|| {
            Estimate::Unknown(
                "NO_DURATION: no step rate with total_steps and no expected_duration".to_string(),
            )
        });
    }
    f
}

/// What `r`, noticed at `now` losing `lost_gpu_seconds`, has left to run
/// once placed again (unknown when its end was).
fn left_after_notice(
    r: &RunningJob,
    now: DateTime<Utc>,
    lost_gpu_seconds: f64,
) -> Option<Duration> {
    let lost = Duration::from_secs_f64(lost_gpu_seconds / r.gpus.len().max(1) as f64);
    r.ends_at
        .map(|e| (e - now).to_std().unwrap_or(Duration::ZERO) + lost)
}

/// The next end or stop.
fn next_event(s: &Snapshot) -> Option<DateTime<Utc>> {
    s.running
        .iter()
        .filter_map(|r| match &r.stopping {
            Some(stop) => Some(stop.until),
            None => r.ends_at,
        })
        .min()
}

/// Ends and stops due at `s.now`: ended trainings leave, stopped victims
/// go back to the queue with what they have left plus what they lost.
fn complete(s: &mut Snapshot, left: &mut HashMap<String, Option<Duration>>, f: &mut Forecast) {
    let now = s.now;
    let due: Vec<(String, bool)> = s
        .running
        .iter()
        .filter_map(|r| match &r.stopping {
            Some(stop) if stop.until <= now => Some((r.job.id.clone(), true)),
            None if r.ends_at.is_some_and(|e| e <= now) => Some((r.job.id.clone(), false)),
            _ => None,
        })
        .collect();
    for (id, stopped) in due {
        if stopped {
            s.requeue(&id, left.remove(&id).flatten());
        } else {
            f.ends.entry(id.clone()).or_insert(Estimate::At(now));
            s.end(&id);
        }
    }
}

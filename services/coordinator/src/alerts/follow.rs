//! Follows each RUNNING training's events incrementally (by sequence number,
//! so each check reads only what is new) and keeps what the training rules
//! need: the best loss and how far it trained since (the plateau rule), and
//! what arrived since the last check (gradient norms, step times, each
//! rank's data wait, non-finite steps, divergence, collective errors) plus a
//! short, thinned history of each rank's host memory (the growth rule).
//! Everything is per running training and per rank: bounded by what runs.

use crate::model::{EventPayload, RunningTraining, StoredEvent};
use chrono::{DateTime, Utc};
use cohort_spec::progress::{Progress, ProgressLine};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// The best loss of one training so far and how far it has trained since.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossProgress {
    pub best_loss: f64,
    pub best_step: i64,
    pub latest_step: i64,
}

impl LossProgress {
    /// Steps trained since the loss last reached a new best.
    pub fn steps_without_improvement(&self) -> i64 {
        self.latest_step - self.best_step
    }
}

/// What arrived for one training since the last check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interval {
    pub grad_norms: Vec<f64>,
    pub step_times_ms: Vec<f64>,
    /// The highest data wait per step each rank reported.
    pub data_wait_ms: BTreeMap<i64, f64>,
    /// Progress lines seen.
    pub progress_lines: usize,
    /// How much the non-finite step count rose.
    pub nonfinite_rise: i64,
    /// A `diverged` line arrived.
    pub diverged: bool,
}

/// A collective error of an attempt: (rank, step, message).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveFailure {
    pub attempt: i32,
    pub rank: i64,
    pub step: i64,
    pub message: String,
}

/// What the tracker knows of one training.
#[derive(Debug, Clone, Default)]
struct Followed {
    after_seq: i64,
    loss: Option<LossProgress>,
    interval: Interval,
    /// The newest attempt a progress line came from, and its non-finite count.
    attempt: i32,
    nonfinite: i64,
    collective: Option<CollectiveFailure>,
    /// Each rank's host memory, one sample per `spacing`, over `window`
    /// (reset when a new attempt starts: new processes).
    memory: BTreeMap<i64, VecDeque<(DateTime<Utc>, u64)>>,
}

/// Follows the events of the running trainings.
#[derive(Debug)]
pub struct TrainingTracker {
    trainings: HashMap<String, Followed>,
    /// How much memory history is kept per rank.
    memory_window: Duration,
}

/// Memory samples kept per rank over the window.
const MEMORY_SAMPLES: u32 = 16;

impl Default for TrainingTracker {
    fn default() -> Self {
        Self::new(Duration::from_secs(15 * 60))
    }
}

impl TrainingTracker {
    pub fn new(memory_window: Duration) -> Self {
        Self {
            trainings: HashMap::new(),
            memory_window,
        }
    }

    /// The sequence number after which `training_id`'s events are unread.
    pub fn after_seq(&self, training_id: &str) -> i64 {
        self.trainings.get(training_id).map_or(0, |f| f.after_seq)
    }

    /// Takes in events read after [`TrainingTracker::after_seq`], in order.
    pub fn feed(&mut self, training_id: &str, events: &[StoredEvent]) {
        let window = self.memory_window;
        let followed = self.trainings.entry(training_id.to_string()).or_default();
        for event in events {
            followed.after_seq = followed.after_seq.max(event.seq);
            let EventPayload::Rank(line) = &event.payload else {
                continue;
            };
            match line {
                ProgressLine::Progress(Progress {
                    step,
                    loss,
                    grad_norm,
                    step_time_ms,
                    nonfinite_steps,
                    ..
                }) => {
                    if event.attempt != followed.attempt {
                        followed.attempt = event.attempt;
                        followed.nonfinite = 0;
                        followed.memory.clear();
                    }
                    if followed
                        .collective
                        .as_ref()
                        .is_some_and(|c| c.attempt < event.attempt)
                    {
                        followed.collective = None;
                    }
                    let i = &mut followed.interval;
                    i.progress_lines += 1;
                    i.grad_norms.push(*grad_norm);
                    i.step_times_ms.push(*step_time_ms);
                    i.nonfinite_rise += (nonfinite_steps - followed.nonfinite).max(0);
                    followed.nonfinite = *nonfinite_steps;
                    followed.loss = next_loss(followed.loss, *step, *loss);
                }
                ProgressLine::RankStats {
                    rank,
                    data_wait_ms,
                    host_memory_bytes,
                    memory_bytes,
                    memory_kind,
                    ..
                } => {
                    let wait = followed.interval.data_wait_ms.entry(*rank).or_default();
                    *wait = wait.max(*data_wait_ms);
                    // Lines of older ranks carry the RSS in memory_bytes only.
                    let host = match (*host_memory_bytes, memory_kind.as_str()) {
                        (0, "host_rss") => *memory_bytes,
                        (h, _) => h,
                    };
                    if host > 0 {
                        let samples = followed.memory.entry(*rank).or_default();
                        keep_sample(samples, event.time, host, window);
                    }
                }
                // A program's line: a progress line seen, its loss (when it
                // gave one) for the plateau rule, a non-finite loss counted
                // as a non-finite step. What it did not report stays out.
                ProgressLine::Metrics(m) => {
                    if event.attempt != followed.attempt {
                        followed.attempt = event.attempt;
                        followed.memory.clear();
                    }
                    followed.interval.progress_lines += 1;
                    if let Some(loss) = m.loss {
                        if !loss.is_finite() {
                            followed.interval.nonfinite_rise += 1;
                        }
                        followed.loss = next_loss(followed.loss, m.step, loss);
                    }
                }
                ProgressLine::Diverged { .. } => followed.interval.diverged = true,
                ProgressLine::CollectiveError {
                    rank,
                    step,
                    message,
                } => {
                    followed.collective = Some(CollectiveFailure {
                        attempt: event.attempt,
                        rank: *rank,
                        step: *step,
                        message: message.clone(),
                    })
                }
                _ => {}
            }
        }
    }

    pub fn progress(&self, training_id: &str) -> Option<LossProgress> {
        self.trainings.get(training_id)?.loss
    }

    /// What arrived for `training_id` since the last call.
    pub fn take_interval(&mut self, training_id: &str) -> Interval {
        self.trainings
            .get_mut(training_id)
            .map(|f| std::mem::take(&mut f.interval))
            .unwrap_or_default()
    }

    /// The collective error of the training's current attempt, if any.
    pub fn collective_failure(&self, training_id: &str) -> Option<&CollectiveFailure> {
        self.trainings.get(training_id)?.collective.as_ref()
    }

    /// The fastest host-memory growth of any rank, in bytes per hour, over
    /// at least half the window: (rank, rate). `None` without enough history.
    pub fn memory_growth(&self, training_id: &str) -> Option<(i64, f64)> {
        let followed = self.trainings.get(training_id)?;
        followed
            .memory
            .iter()
            .filter_map(|(rank, samples)| {
                let ((t0, b0), (t1, b1)) = (samples.front()?, samples.back()?);
                let span = (*t1 - *t0).to_std().ok()?;
                (span >= self.memory_window / 2).then(|| {
                    let grown = *b1 as f64 - *b0 as f64;
                    (*rank, grown * 3600.0 / span.as_secs_f64())
                })
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Forgets the trainings that are no longer running.
    pub fn retain(&mut self, running: &[RunningTraining]) {
        self.trainings
            .retain(|id, _| running.iter().any(|t| &t.id == id));
    }
}

fn next_loss(current: Option<LossProgress>, step: i64, loss: f64) -> Option<LossProgress> {
    if !loss.is_finite() {
        return current;
    }
    let fresh = LossProgress {
        best_loss: loss,
        best_step: step,
        latest_step: step,
    };
    Some(match current {
        // a resumed attempt went back to its checkpoint: a new baseline
        Some(p) if step < p.latest_step => fresh,
        Some(p) if loss < p.best_loss => fresh,
        Some(p) => LossProgress {
            latest_step: step,
            ..p
        },
        None => fresh,
    })
}

/// One sample per window / [`MEMORY_SAMPLES`], the newest always kept, none
/// older than the window.
fn keep_sample(
    samples: &mut VecDeque<(DateTime<Utc>, u64)>,
    at: DateTime<Utc>,
    bytes: u64,
    window: Duration,
) {
    let spacing = window / MEMORY_SAMPLES;
    // The newest sample replaces the last one until it is `spacing` past the one before.
    if samples.len() >= 2 {
        let before = samples[samples.len() - 2].0;
        if (at - before).to_std().unwrap_or_default() < spacing {
            samples.pop_back();
        }
    }
    samples.push_back((at, bytes));
    while samples
        .front()
        .is_some_and(|(t, _)| (at - *t).to_std().unwrap_or_default() > window)
    {
        samples.pop_front();
    }
}

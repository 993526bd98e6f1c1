//! The data contract's training alerts, evaluated with the stall check from
//! what the [`TrainingTracker`] followed since the last one:
//! TRAINING_GRAD_NORM_HIGH, TRAINING_STEP_SLOW and TRAINING_DATA_WAIT_HIGH
//! (a mean above the threshold at every check for the rule's window),
//! RANK_MEMORY_GROWTH (a rank's host memory rate over the window),
//! TRAINING_COLLECTIVE_ERROR (raised at once, resolved when a later attempt
//! makes progress) and TRAINING_NONFINITE_STEPS (non-finite steps between
//! two checks, or a divergence). A check without the input a rule needs
//! leaves its alert as it is; every one resolves when the training stops
//! running.

use super::evaluator::{Draft, Evaluator, Level};
use super::follow::{Interval, TrainingTracker};
use crate::model::{AlertKind, RunningTraining, Transition};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The kinds evaluated here.
const KINDS: [AlertKind; 6] = [
    AlertKind::TrainingGradNormHigh,
    AlertKind::TrainingStepSlow,
    AlertKind::TrainingDataWaitHigh,
    AlertKind::RankMemoryGrowth,
    AlertKind::TrainingCollectiveError,
    AlertKind::TrainingNonfiniteSteps,
];

fn mean(values: &[f64]) -> Option<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64)
}

/// Above the threshold fires; at or below `clear` of it clears.
fn level(value: f64, threshold: f64, clear: f64) -> Level {
    if value > threshold {
        Level::Firing
    } else if value <= threshold * clear {
        Level::Clear
    } else {
        Level::Between
    }
}

/// One rule's input at one check.
struct Reading {
    kind: AlertKind,
    level: Level,
    window: Duration,
    value: f64,
    threshold: f64,
    message: String,
}

impl Evaluator {
    /// The training rules over every RUNNING training, then the alerts of
    /// trainings no longer running resolve.
    pub fn observe_training_health(
        &mut self,
        running: &[RunningTraining],
        tracker: &mut TrainingTracker,
        now: DateTime<Utc>,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        for t in running {
            for r in self.readings(t, tracker) {
                out.extend(self.check(r.kind, &t.id, r.level, r.window, now, || Draft {
                    message: r.message,
                    training_id: Some(t.id.clone()),
                    value: Some(r.value),
                    threshold: Some(r.threshold),
                    ..Draft::default()
                }));
            }
        }
        for kind in KINDS {
            out.extend(self.resolve_not_running(kind, running, now));
        }
        out
    }

    fn readings(&self, t: &RunningTraining, tracker: &mut TrainingTracker) -> Vec<Reading> {
        let interval = tracker.take_interval(&t.id);
        let mut out = self.pace_readings(t, &interval);
        out.extend(self.rank_readings(&t.id, tracker));
        out.extend(self.nonfinite_reading(&t.id, &interval));
        out
    }

    /// Gradient norm, step time and the slowest rank's data wait over the
    /// interval since the last check.
    fn pace_readings(&self, t: &RunningTraining, interval: &Interval) -> Vec<Reading> {
        let s = &self.settings;
        let id = &t.id;
        let mut out = Vec::new();
        if let Some(norm) = mean(&interval.grad_norms) {
            out.push(Reading {
                kind: AlertKind::TrainingGradNormHigh,
                level: level(norm, s.grad_norm, 0.9),
                window: s.grad_norm_for,
                value: norm,
                threshold: s.grad_norm,
                message: format!(
                    "training {id}: gradient norm {norm:.3} above {} (mean of its last progress lines)",
                    s.grad_norm
                ),
            });
        }
        if let Some(ms) = mean(&interval.step_times_ms) {
            out.push(Reading {
                kind: AlertKind::TrainingStepSlow,
                level: level(ms, s.step_time_ms, 0.9),
                window: s.step_time_for,
                value: ms,
                threshold: s.step_time_ms,
                message: format!(
                    "training {id}: steps take {ms:.1} ms, above {} ms",
                    s.step_time_ms
                ),
            });
        }
        let batches = t.batches_per_step.max(1) as f64;
        if let Some((rank, wait)) = interval
            .data_wait_ms
            .iter()
            .map(|(rank, ms)| (*rank, ms / batches))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        {
            out.push(Reading {
                kind: AlertKind::TrainingDataWaitHigh,
                level: level(wait, s.data_wait_ms, 0.9),
                window: s.data_wait_for,
                value: wait,
                threshold: s.data_wait_ms,
                message: format!(
                    "training {id}: rank {rank} waits {wait:.1} ms per batch for its data, above {} ms (the input pipeline starves it)",
                    s.data_wait_ms
                ),
            });
        }
        out
    }

    /// A rank whose host memory keeps growing, and a failed collective.
    fn rank_readings(&self, id: &str, tracker: &TrainingTracker) -> Vec<Reading> {
        let s = &self.settings;
        let mut out = Vec::new();
        if s.memory_growth_per_hour > 0.0 {
            if let Some((rank, rate)) = tracker.memory_growth(id) {
                out.push(Reading {
                    kind: AlertKind::RankMemoryGrowth,
                    level: level(rate, s.memory_growth_per_hour, 0.5),
                    window: Duration::ZERO,
                    value: rate,
                    threshold: s.memory_growth_per_hour,
                    message: format!(
                        "training {id}: rank {rank}'s host memory grows {:.2} GB an hour, above {:.2} (a leak?)",
                        rate / 1e9,
                        s.memory_growth_per_hour / 1e9
                    ),
                });
            }
        }
        let collective = tracker.collective_failure(id);
        out.push(Reading {
            kind: AlertKind::TrainingCollectiveError,
            level: if collective.is_some() {
                Level::Firing
            } else {
                Level::Clear
            },
            window: Duration::ZERO,
            value: collective.map_or(0.0, |c| c.rank as f64),
            threshold: 0.0,
            message: collective.map_or_else(String::new, |c| {
                format!(
                    "training {id}: rank {}'s collective failed at step {} (attempt {}): {}",
                    c.rank, c.step, c.attempt, c.message
                )
            }),
        });
        out
    }

    /// Non-finite steps skipped since the last check (or a divergence).
    fn nonfinite_reading(&self, id: &str, interval: &Interval) -> Option<Reading> {
        let s = &self.settings;
        if s.nonfinite_steps > 0 && (interval.progress_lines > 0 || interval.diverged) {
            let firing = interval.diverged || interval.nonfinite_rise >= s.nonfinite_steps;
            return Some(Reading {
                kind: AlertKind::TrainingNonfiniteSteps,
                level: match (firing, interval.nonfinite_rise) {
                    (true, _) => Level::Firing,
                    (false, 0) => Level::Clear,
                    _ => Level::Between,
                },
                window: Duration::ZERO,
                value: interval.nonfinite_rise as f64,
                threshold: s.nonfinite_steps as f64,
                message: if interval.diverged {
                    format!("training {id} diverged: too many non-finite steps in a row")
                } else {
                    format!(
                        "training {id}: {} non-finite steps skipped since the last check",
                        interval.nonfinite_rise
                    )
                },
            });
        }
        None
    }
}

#[cfg(test)]
mod tests;

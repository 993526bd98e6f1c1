//! TRAINING_LOSS_PLATEAU: a RUNNING training whose loss has made no new best
//! for `plateau_steps` steps (the data contract's "alert if no improvement
//! 1000 steps"). [`LossTracker`] follows each running training's progress
//! events incrementally (by sequence number, so each check reads only what
//! is new); the rule is evaluated with the stall check.

use super::evaluator::{Draft, Evaluator, Level};
use super::presence::RunningTraining;
use crate::model::{AlertKind, Transition};
use crate::model::{EventPayload, StoredEvent};
use chrono::{DateTime, Utc};
use cohort_spec::progress::ProgressLine;
use std::collections::HashMap;
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

/// What the tracker knows of one training.
#[derive(Debug, Clone, Default)]
struct Followed {
    after_seq: i64,
    progress: Option<LossProgress>,
}

/// Follows the progress events of the running trainings.
#[derive(Debug, Default)]
pub struct LossTracker {
    trainings: HashMap<String, Followed>,
}

impl LossTracker {
    /// The sequence number after which `training_id`'s events are unread.
    pub fn after_seq(&self, training_id: &str) -> i64 {
        self.trainings.get(training_id).map_or(0, |f| f.after_seq)
    }

    /// Takes in events read after [`LossTracker::after_seq`], in order.
    pub fn feed(&mut self, training_id: &str, events: &[StoredEvent]) {
        let followed = self.trainings.entry(training_id.to_string()).or_default();
        for event in events {
            followed.after_seq = followed.after_seq.max(event.seq);
            let EventPayload::Rank(ProgressLine::Progress { step, loss, .. }) = &event.payload
            else {
                continue;
            };
            let (step, loss) = (*step, *loss);
            if !loss.is_finite() {
                continue;
            }
            followed.progress = Some(match followed.progress {
                // a resumed attempt went back to its checkpoint: a new baseline
                Some(p) if step < p.latest_step => LossProgress {
                    best_loss: loss,
                    best_step: step,
                    latest_step: step,
                },
                Some(p) if loss < p.best_loss => LossProgress {
                    best_loss: loss,
                    best_step: step,
                    latest_step: step,
                },
                Some(p) => LossProgress {
                    latest_step: step,
                    ..p
                },
                None => LossProgress {
                    best_loss: loss,
                    best_step: step,
                    latest_step: step,
                },
            });
        }
    }

    pub fn progress(&self, training_id: &str) -> Option<LossProgress> {
        self.trainings.get(training_id)?.progress
    }

    /// Forgets the trainings that are no longer running.
    pub fn retain(&mut self, running: &[RunningTraining]) {
        self.trainings
            .retain(|id, _| running.iter().any(|t| &t.id == id));
    }
}

impl Evaluator {
    /// Raises TRAINING_LOSS_PLATEAU for running trainings without a new best
    /// loss for `plateau_steps` steps; resolves it on a new best or when the
    /// training stops running. Off when `plateau_steps` is 0.
    pub fn observe_plateaus(
        &mut self,
        running: &[RunningTraining],
        tracker: &LossTracker,
        now: DateTime<Utc>,
    ) -> Vec<Transition> {
        let limit = self.settings.plateau_steps;
        let mut out = Vec::new();
        for t in running {
            let Some(p) = tracker.progress(&t.id) else {
                continue;
            };
            let flat = p.steps_without_improvement();
            let level = if limit > 0 && flat >= limit {
                Level::Firing
            } else {
                Level::Clear
            };
            out.extend(self.check(
                AlertKind::TrainingLossPlateau,
                &t.id,
                level,
                Duration::ZERO,
                now,
                || Draft {
                    message: format!(
                        "training {}: no new best loss for {flat} steps (best {:.6} at step {}, now step {})",
                        t.id, p.best_loss, p.best_step, p.latest_step
                    ),
                    training_id: Some(t.id.clone()),
                    value: Some(flat as f64),
                    threshold: Some(limit as f64),
                    ..Draft::default()
                },
            ));
        }
        out.extend(self.resolve_not_running(AlertKind::TrainingLossPlateau, running, now));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::{AlertSettings, Severity};
    use chrono::TimeZone;

    fn progress(seq: i64, step: i64, loss: f64) -> StoredEvent {
        StoredEvent {
            training_id: "trn-a".into(),
            seq,
            attempt: 1,
            payload: EventPayload::Rank(ProgressLine::Progress {
                step,
                total_steps: 10_000,
                epoch: 0,
                loss,
                mse: loss,
                l1: 0.0,
                samples_per_sec: 1.0,
                step_time_ms: 1.0,
            }),
            time: Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap(),
        }
    }

    fn running() -> Vec<RunningTraining> {
        vec![RunningTraining {
            id: "trn-a".into(),
            last_activity: Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap(),
        }]
    }

    fn kinds(t: &[Transition]) -> Vec<(bool, AlertKind)> {
        t.iter()
            .map(|t| (matches!(t, Transition::Raised(_)), t.alert().kind))
            .collect()
    }

    #[test]
    fn tracks_the_best_loss_and_restarts_after_a_resume() {
        let mut tracker = LossTracker::default();
        tracker.feed(
            "trn-a",
            &[
                progress(1, 10, 1.0),
                progress(2, 20, 0.5),
                progress(3, 30, 0.7),
            ],
        );
        let p = tracker.progress("trn-a").unwrap();
        assert_eq!((p.best_loss, p.best_step, p.latest_step), (0.5, 20, 30));
        assert_eq!(tracker.after_seq("trn-a"), 3);
        // NaN is no progress; a resume from step 15 is a new baseline.
        tracker.feed("trn-a", &[progress(4, 40, f64::NAN), progress(5, 15, 0.9)]);
        let p = tracker.progress("trn-a").unwrap();
        assert_eq!((p.best_loss, p.best_step, p.latest_step), (0.9, 15, 15));
        assert_eq!(tracker.after_seq("trn-a"), 5);
        tracker.retain(&[]);
        assert_eq!(tracker.after_seq("trn-a"), 0);
    }

    #[test]
    fn raised_after_the_step_window_without_a_new_best_and_cleared_by_one() {
        let settings = AlertSettings {
            plateau_steps: 100,
            ..AlertSettings::default()
        };
        let mut ev = Evaluator::new(settings);
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let mut tracker = LossTracker::default();
        tracker.feed("trn-a", &[progress(1, 100, 0.5), progress(2, 190, 0.6)]);
        assert!(ev.observe_plateaus(&running(), &tracker, now).is_empty());
        tracker.feed("trn-a", &[progress(3, 200, 0.55)]);
        let t = ev.observe_plateaus(&running(), &tracker, now);
        assert_eq!(kinds(&t), vec![(true, AlertKind::TrainingLossPlateau)]);
        let alert = t[0].alert();
        assert_eq!(alert.severity, Severity::Warning);
        assert_eq!((alert.value, alert.threshold), (Some(100.0), Some(100.0)));
        assert_eq!(alert.training_id.as_deref(), Some("trn-a"));
        assert!(
            alert.message.contains("best 0.500000 at step 100"),
            "{}",
            alert.message
        );
        // Its key (what a restarted coordinator adopts it under) is the training.
        assert_eq!(alert.key().subject, "trn-a");
        // Still flat: nothing new. A new best clears it.
        tracker.feed("trn-a", &[progress(4, 250, 0.6)]);
        assert!(ev.observe_plateaus(&running(), &tracker, now).is_empty());
        tracker.feed("trn-a", &[progress(5, 260, 0.4)]);
        let t = ev.observe_plateaus(&running(), &tracker, now);
        assert_eq!(kinds(&t), vec![(false, AlertKind::TrainingLossPlateau)]);
        // Flat again, then no longer running: resolved.
        tracker.feed("trn-a", &[progress(6, 400, 0.45)]);
        assert_eq!(
            kinds(&ev.observe_plateaus(&running(), &tracker, now)),
            vec![(true, AlertKind::TrainingLossPlateau)]
        );
        assert_eq!(
            kinds(&ev.observe_plateaus(&[], &tracker, now)),
            vec![(false, AlertKind::TrainingLossPlateau)]
        );
    }

    #[test]
    fn zero_steps_turns_the_rule_off() {
        let mut ev = Evaluator::new(AlertSettings {
            plateau_steps: 0,
            ..AlertSettings::default()
        });
        let mut tracker = LossTracker::default();
        tracker.feed("trn-a", &[progress(1, 1, 0.5), progress(2, 1_000_000, 0.9)]);
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        assert!(ev.observe_plateaus(&running(), &tracker, now).is_empty());
    }
}

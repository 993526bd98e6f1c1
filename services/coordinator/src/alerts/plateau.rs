//! TRAINING_LOSS_PLATEAU: a RUNNING training whose loss has made no new best
//! for `plateau_steps` steps (the data contract's "alert if no improvement
//! 1000 steps"), from what the [`TrainingTracker`] followed; the rule is
//! evaluated with the stall check.

use super::evaluator::{Draft, Evaluator, Level};
use super::follow::TrainingTracker;
use super::presence::RunningTraining;
use crate::model::{AlertKind, Transition};
use chrono::{DateTime, Utc};
use std::time::Duration;

impl Evaluator {
    /// Raises TRAINING_LOSS_PLATEAU for running trainings without a new best
    /// loss for `plateau_steps` steps; resolves it on a new best or when the
    /// training stops running. Off when `plateau_steps` is 0.
    pub fn observe_plateaus(
        &mut self,
        running: &[RunningTraining],
        tracker: &TrainingTracker,
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
    use crate::model::{EventPayload, StoredEvent};
    use chrono::TimeZone;
    use cohort_spec::progress::{Progress, ProgressLine};

    fn progress(seq: i64, step: i64, loss: f64) -> StoredEvent {
        StoredEvent {
            training_id: "trn-a".into(),
            seq,
            attempt: 1,
            payload: EventPayload::Rank(ProgressLine::Progress(Progress {
                step,
                total_steps: 10_000,
                loss,
                mse: loss,
                samples_per_sec: 1.0,
                step_time_ms: 1.0,
                learning_rate: 0.001,
                grad_norm: 1.0,
                l0: 8.0,
                explained_variance: 0.9,
                ..Progress::default()
            })),
            time: Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap(),
        }
    }

    fn running() -> Vec<RunningTraining> {
        vec![RunningTraining {
            id: "trn-a".into(),
            last_activity: Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap(),
            batches_per_step: 1,
        }]
    }

    fn kinds(t: &[Transition]) -> Vec<(bool, AlertKind)> {
        t.iter()
            .map(|t| (matches!(t, Transition::Raised(_)), t.alert().kind))
            .collect()
    }

    #[test]
    fn tracks_the_best_loss_and_restarts_after_a_resume() {
        let mut tracker = TrainingTracker::default();
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
        let mut tracker = TrainingTracker::default();
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
        let mut tracker = TrainingTracker::default();
        tracker.feed("trn-a", &[progress(1, 1, 0.5), progress(2, 1_000_000, 0.9)]);
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        assert!(ev.observe_plateaus(&running(), &tracker, now).is_empty());
    }
}

//! Each training rule raised and resolved by scripted events on a scripted clock.

use super::*;
use crate::alerts::{AlertSettings, Severity};
use crate::model::{EventPayload, StoredEvent};
use chrono::TimeZone;
use cohort_spec::progress::{Progress, ProgressLine};

const ID: &str = "trn-h";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 25, 12, 0, 0).unwrap()
}

fn at(seconds: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(seconds)
}

fn event(seq: i64, attempt: i32, time: DateTime<Utc>, line: ProgressLine) -> StoredEvent {
    StoredEvent {
        training_id: ID.into(),
        seq,
        attempt,
        payload: EventPayload::Rank(line),
        time,
    }
}

fn progress(grad_norm: f64, step_time_ms: f64, nonfinite_steps: i64) -> ProgressLine {
    ProgressLine::Progress(Progress {
        step: 10,
        total_steps: 100,
        loss: 0.5,
        mse: 0.5,
        samples_per_sec: 1.0,
        step_time_ms,
        learning_rate: 0.001,
        grad_norm,
        l0: 8.0,
        explained_variance: 0.9,
        nonfinite_steps,
        ..Progress::default()
    })
}

fn stats(rank: i64, data_wait_ms: f64, host_memory_bytes: u64) -> ProgressLine {
    ProgressLine::RankStats {
        rank,
        step: 10,
        step_time_ms: 10.0,
        compute_ms: 5.0,
        comm_ms: 1.0,
        memory_bytes: 1 << 30,
        data_wait_ms,
        memory_kind: "cuda_allocated".into(),
        host_memory_bytes,
    }
}

fn running(batches_per_step: i64) -> Vec<RunningTraining> {
    vec![RunningTraining {
        id: ID.into(),
        last_activity: t0(),
        batches_per_step,
    }]
}

/// (raised?, kind) of each transition.
fn kinds(t: &[Transition]) -> Vec<(bool, AlertKind)> {
    t.iter()
        .map(|t| (matches!(t, Transition::Raised(_)), t.alert().kind))
        .collect()
}

struct Rig {
    ev: Evaluator,
    tracker: TrainingTracker,
    seq: i64,
}

impl Rig {
    fn new(settings: AlertSettings) -> Self {
        Self {
            tracker: TrainingTracker::new(settings.memory_growth_window),
            ev: Evaluator::new(settings),
            seq: 0,
        }
    }

    fn feed(&mut self, attempt: i32, time: DateTime<Utc>, line: ProgressLine) {
        self.seq += 1;
        self.tracker
            .feed(ID, &[event(self.seq, attempt, time, line)]);
    }

    fn check(&mut self, now: DateTime<Utc>, batches_per_step: i64) -> Vec<(bool, AlertKind)> {
        kinds(
            &self
                .ev
                .observe_training_health(&running(batches_per_step), &mut self.tracker, now),
        )
    }
}

#[test]
fn a_sustained_high_gradient_norm_raises_and_a_normal_one_resolves() {
    let mut rig = Rig::new(AlertSettings::default());
    rig.feed(1, at(0), progress(25.0, 10.0, 0));
    assert!(rig.check(at(0), 1).is_empty(), "pending for its 2 minutes");
    rig.feed(1, at(60), progress(30.0, 10.0, 0));
    assert!(rig.check(at(60), 1).is_empty());
    // A check with no progress line changes nothing.
    assert!(rig.check(at(90), 1).is_empty());
    rig.feed(1, at(120), progress(20.0, 10.0, 0));
    let raised = rig
        .ev
        .observe_training_health(&running(1), &mut rig.tracker, at(120));
    assert_eq!(
        kinds(&raised),
        vec![(true, AlertKind::TrainingGradNormHigh)]
    );
    let alert = raised[0].alert();
    assert_eq!(alert.severity, Severity::Warning);
    assert_eq!((alert.value, alert.threshold), (Some(20.0), Some(10.0)));
    assert_eq!(alert.training_id.as_deref(), Some(ID));
    rig.feed(1, at(150), progress(9.5, 10.0, 0));
    assert!(
        rig.check(at(150), 1).is_empty(),
        "within the hysteresis band"
    );
    rig.feed(1, at(180), progress(2.0, 10.0, 0));
    assert_eq!(
        rig.check(at(180), 1),
        vec![(false, AlertKind::TrainingGradNormHigh)]
    );
}

#[test]
fn slow_steps_raise_and_resolve() {
    let mut rig = Rig::new(AlertSettings {
        step_time_for: Duration::ZERO,
        ..AlertSettings::default()
    });
    rig.feed(1, at(0), progress(1.0, 250.0, 0));
    rig.feed(1, at(1), progress(1.0, 350.0, 0));
    assert_eq!(
        rig.check(at(1), 1),
        vec![(true, AlertKind::TrainingStepSlow)]
    );
    rig.feed(1, at(30), progress(1.0, 90.0, 0));
    assert_eq!(
        rig.check(at(30), 1),
        vec![(false, AlertKind::TrainingStepSlow)]
    );
}

#[test]
fn a_starved_rank_raises_data_wait_per_batch() {
    let mut rig = Rig::new(AlertSettings {
        data_wait_for: Duration::ZERO,
        ..AlertSettings::default()
    });
    // Two micro-batches a step: rank 1's 120 ms a step is 60 ms a batch.
    rig.feed(1, at(0), stats(0, 2.0, 1 << 30));
    rig.feed(1, at(0), stats(1, 120.0, 1 << 30));
    let raised = rig
        .ev
        .observe_training_health(&running(2), &mut rig.tracker, at(0));
    assert_eq!(
        kinds(&raised),
        vec![(true, AlertKind::TrainingDataWaitHigh)]
    );
    assert!(raised[0]
        .alert()
        .message
        .contains("rank 1 waits 60.0 ms per batch"));
    // 80 ms a step is 40 a batch: below 90 % of the threshold.
    rig.feed(1, at(30), stats(1, 80.0, 1 << 30));
    assert_eq!(
        rig.check(at(30), 2),
        vec![(false, AlertKind::TrainingDataWaitHigh)]
    );
}

#[test]
fn host_memory_growing_over_the_window_raises_and_levelling_off_resolves() {
    let mut rig = Rig::new(AlertSettings {
        memory_growth_window: Duration::from_secs(600),
        ..AlertSettings::default()
    });
    const MB: u64 = 1_000_000;
    // 100 MB a minute = 6 GB an hour; rank 0 flat.
    for minute in 0..=4 {
        let t = at(minute * 60);
        rig.feed(1, t, stats(0, 0.0, 900 * MB));
        rig.feed(1, t, stats(1, 0.0, (1000 + 100 * minute as u64) * MB));
        assert!(
            rig.check(t, 1).is_empty(),
            "not half the window yet at minute {minute}"
        );
    }
    rig.feed(1, at(300), stats(1, 0.0, 1500 * MB));
    let raised = rig
        .ev
        .observe_training_health(&running(1), &mut rig.tracker, at(300));
    assert_eq!(kinds(&raised), vec![(true, AlertKind::RankMemoryGrowth)]);
    let alert = raised[0].alert();
    assert!(
        alert
            .message
            .contains("rank 1's host memory grows 6.00 GB an hour"),
        "{}",
        alert.message
    );
    // Flat for a whole window: the rate over the window falls to 0.
    for minute in 6..=16 {
        rig.feed(1, at(minute * 60), stats(1, 0.0, 1500 * MB));
    }
    assert_eq!(
        rig.check(at(960), 1),
        vec![(false, AlertKind::RankMemoryGrowth)]
    );
}

#[test]
fn a_collective_error_raises_at_once_until_a_later_attempt_progresses() {
    let mut rig = Rig::new(AlertSettings::default());
    rig.feed(1, at(0), progress(1.0, 10.0, 0));
    assert!(rig.check(at(0), 1).is_empty());
    rig.feed(
        1,
        at(5),
        ProgressLine::CollectiveError {
            rank: 1,
            step: 12,
            message: "Connection reset by peer".into(),
        },
    );
    let raised = rig
        .ev
        .observe_training_health(&running(1), &mut rig.tracker, at(5));
    assert_eq!(
        kinds(&raised),
        vec![(true, AlertKind::TrainingCollectiveError)]
    );
    assert_eq!(raised[0].alert().severity, Severity::Critical);
    assert!(raised[0]
        .alert()
        .message
        .contains("Connection reset by peer"));
    assert!(rig.check(at(30), 1).is_empty(), "still the failed attempt");
    rig.feed(2, at(60), progress(1.0, 10.0, 0));
    assert_eq!(
        rig.check(at(60), 1),
        vec![(false, AlertKind::TrainingCollectiveError)]
    );
}

#[test]
fn repeated_non_finite_steps_and_divergence_raise_and_finite_steps_resolve() {
    let mut rig = Rig::new(AlertSettings::default());
    rig.feed(1, at(0), progress(1.0, 10.0, 1));
    assert!(
        rig.check(at(0), 1).is_empty(),
        "one is below the threshold of 3"
    );
    rig.feed(1, at(30), progress(f64::NAN, 10.0, 5));
    assert_eq!(
        rig.check(at(30), 1),
        vec![(true, AlertKind::TrainingNonfiniteSteps)]
    );
    rig.feed(1, at(60), progress(1.0, 10.0, 5));
    assert_eq!(
        rig.check(at(60), 1),
        vec![(false, AlertKind::TrainingNonfiniteSteps)]
    );
    rig.feed(
        1,
        at(90),
        ProgressLine::Diverged {
            step: 40,
            nonfinite_steps: 11,
            loss: f64::NAN,
            grad_norm: f64::NAN,
            learning_rate: 1.0,
        },
    );
    assert_eq!(
        rig.check(at(90), 1),
        vec![(true, AlertKind::TrainingNonfiniteSteps)]
    );
    // The training stopped running: everything resolves.
    let resolved = rig
        .ev
        .observe_training_health(&[], &mut rig.tracker, at(120));
    assert_eq!(
        kinds(&resolved),
        vec![(false, AlertKind::TrainingNonfiniteSteps)]
    );
}

#[test]
fn a_program_s_non_finite_losses_raise_and_a_finite_one_resolves() {
    let line = |step: i64, loss: f64| {
        ProgressLine::Metrics(cohort_spec::metrics::Metrics {
            step,
            total_steps: None,
            loss: Some(loss),
            metrics: Default::default(),
            finished: false,
        })
    };
    let mut rig = Rig::new(AlertSettings::default());
    rig.feed(1, at(0), line(1, 0.5));
    assert!(
        rig.check(at(0), 1).is_empty(),
        "nothing it did not report is judged"
    );
    for (i, step) in [2, 3, 4].into_iter().enumerate() {
        rig.feed(1, at(10 + i as i64), line(step, f64::NAN));
    }
    assert_eq!(
        rig.check(at(30), 1),
        vec![(true, AlertKind::TrainingNonfiniteSteps)]
    );
    rig.feed(1, at(60), line(5, 0.4));
    assert_eq!(
        rig.check(at(60), 1),
        vec![(false, AlertKind::TrainingNonfiniteSteps)]
    );
    let p = rig.tracker.progress(ID).unwrap();
    assert_eq!((p.best_loss, p.best_step, p.latest_step), (0.4, 5, 5));
}

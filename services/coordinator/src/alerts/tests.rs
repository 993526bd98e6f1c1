//! Every rule raised and cleared by scripted values on a scripted clock.

use super::*;
use crate::fleet::{GpuReading, Hold};
use crate::model::GpuSample;
use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;

const UUID: &str = "GPU-SIM-a-0";
const GIB: u64 = 1 << 30;

/// A clock the test moves by hand.
struct Clock(DateTime<Utc>);

impl Clock {
    fn new() -> Self {
        Clock(Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap())
    }
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
    fn advance(&mut self, secs: u64) -> DateTime<Utc> {
        self.0 += chrono::Duration::seconds(secs as i64);
        self.0
    }
}

/// A quiet, healthy sample; tests change the field they script.
fn sample() -> GpuSample {
    GpuSample {
        gpu_uuid: UUID.into(),
        index: 0,
        utilization_gpu_percent: Some(90.0),
        memory_used_bytes: 8 * GIB,
        memory_total_bytes: 16 * GIB,
        temperature_celsius: Some(60.0),
        ecc_errors_uncorrected: Some(0),
        ..Default::default()
    }
}

fn reading(sample: GpuSample, held: bool) -> GpuReading {
    GpuReading {
        agent_id: "agt-a".into(),
        agent_name: "a".into(),
        hold: held.then(|| Hold {
            training_id: "trn-1".into(),
            attempt: 1,
            rank: 0,
            team: String::new(),
        }),
        sample,
    }
}

fn raised(t: &[Transition]) -> Vec<(AlertKind, Option<f64>)> {
    t.iter()
        .filter_map(|t| match t {
            Transition::Raised(a) => Some((a.kind, a.value)),
            _ => None,
        })
        .collect()
}

fn resolved(t: &[Transition]) -> Vec<AlertKind> {
    t.iter()
        .filter_map(|t| match t {
            Transition::Resolved(a) => Some(a.kind),
            _ => None,
        })
        .collect()
}

fn memory(percent: f64) -> GpuSample {
    GpuSample {
        memory_used_bytes: (16.0 * GIB as f64 * percent / 100.0) as u64,
        ..sample()
    }
}

#[test]
fn memory_high_after_its_window_and_clears_below_the_band() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    // 96% for 4 min 59 s: pending, nothing raised.
    assert!(ev
        .observe(&reading(memory(96.0), false), clock.now())
        .is_empty());
    assert!(ev
        .observe(&reading(memory(97.0), false), clock.advance(299))
        .is_empty());
    // A dip into the band (94%) restarts the window.
    assert!(ev
        .observe(&reading(memory(94.0), false), clock.advance(1))
        .is_empty());
    assert!(ev
        .observe(&reading(memory(96.0), false), clock.advance(1))
        .is_empty());
    assert!(ev
        .observe(&reading(memory(96.0), false), clock.advance(299))
        .is_empty());
    let t = ev.observe(&reading(memory(96.0), false), clock.advance(1));
    assert_eq!(raised(&t).len(), 1);
    assert_eq!(raised(&t)[0].0, AlertKind::GpuMemoryHigh);
    let alert = t[0].alert();
    assert_eq!(alert.severity, Severity::Warning);
    assert_eq!(alert.gpu_uuid.as_deref(), Some(UUID));
    assert_eq!(alert.agent_id.as_deref(), Some("agt-a"));
    assert_eq!(alert.threshold, Some(95.0));
    assert!((alert.value.unwrap() - 96.0).abs() < 0.01);
    // Raised once: still 96% raises nothing more.
    assert!(ev
        .observe(&reading(memory(96.0), false), clock.advance(60))
        .is_empty());
    // Inside the hysteresis band (93..95]: stays active.
    assert!(ev
        .observe(&reading(memory(94.0), false), clock.advance(1))
        .is_empty());
    assert_eq!(ev.active().len(), 1);
    // At or below 93%: resolved, with its resolve time.
    let t = ev.observe(&reading(memory(90.0), false), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuMemoryHigh]);
    assert_eq!(t[0].alert().resolve_time, Some(clock.now()));
    assert_eq!(t[0].alert().id, alert.id);
    assert!(ev.active().is_empty());
}

fn hot(t: f64) -> GpuSample {
    GpuSample {
        temperature_celsius: Some(t),
        ..sample()
    }
}

#[test]
fn temperature_high_at_once_by_default_and_clears_with_hysteresis() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    assert!(ev
        .observe(&reading(hot(85.0), false), clock.now())
        .is_empty());
    let t = ev.observe(&reading(hot(90.0), false), clock.advance(1));
    assert_eq!(
        raised(&t),
        vec![(AlertKind::GpuTemperatureHigh, Some(90.0))]
    );
    assert_eq!(t[0].alert().threshold, Some(85.0));
    assert!(ev
        .observe(&reading(hot(91.0), false), clock.advance(1))
        .is_empty());
    // 84 °C is inside the 3 °C band: still active.
    assert!(ev
        .observe(&reading(hot(84.0), false), clock.advance(1))
        .is_empty());
    let t = ev.observe(&reading(hot(82.0), false), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuTemperatureHigh]);
    // Hot again: a new alert, a new id.
    let again = ev.observe(&reading(hot(95.0), false), clock.advance(1));
    assert_eq!(raised(&again).len(), 1);
    assert_ne!(again[0].alert().id, t[0].alert().id);
}

#[test]
fn temperature_window_when_configured() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings {
        temperature_for: Duration::from_secs(30),
        ..AlertSettings::default()
    });
    assert!(ev
        .observe(&reading(hot(90.0), false), clock.now())
        .is_empty());
    assert!(ev
        .observe(&reading(hot(90.0), false), clock.advance(29))
        .is_empty());
    let t = ev.observe(&reading(hot(90.0), false), clock.advance(1));
    assert_eq!(
        raised(&t),
        vec![(AlertKind::GpuTemperatureHigh, Some(90.0))]
    );
}

fn util(u: f64) -> GpuSample {
    GpuSample {
        utilization_gpu_percent: Some(u),
        ..sample()
    }
}

#[test]
fn utilization_low_only_while_a_training_holds_the_gpu() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    // Idle and free: never an alert.
    assert!(ev
        .observe(&reading(util(0.0), false), clock.now())
        .is_empty());
    assert!(ev
        .observe(&reading(util(0.0), false), clock.advance(3600))
        .is_empty());
    // Held and idle: raised after 5 minutes, naming the training.
    assert!(ev
        .observe(&reading(util(20.0), true), clock.advance(1))
        .is_empty());
    assert!(ev
        .observe(&reading(util(20.0), true), clock.advance(299))
        .is_empty());
    let t = ev.observe(&reading(util(20.0), true), clock.advance(1));
    assert_eq!(raised(&t), vec![(AlertKind::GpuUtilizationLow, Some(20.0))]);
    let alert = t[0].alert();
    assert_eq!(alert.training_id.as_deref(), Some("trn-1"));
    assert_eq!(alert.severity, Severity::Info);
    assert!(alert.message.contains("rank 0"), "{}", alert.message);
    // 52% is inside the band; 55% clears.
    assert!(ev
        .observe(&reading(util(52.0), true), clock.advance(1))
        .is_empty());
    let t = ev.observe(&reading(util(55.0), true), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuUtilizationLow]);
    // Raised again, then the training lets go of the GPU: resolved.
    ev.observe(&reading(util(10.0), true), clock.advance(1));
    let t = ev.observe(&reading(util(10.0), true), clock.advance(300));
    assert_eq!(raised(&t).len(), 1);
    let t = ev.observe(&reading(util(10.0), false), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuUtilizationLow]);
}

fn ecc(n: u64) -> GpuSample {
    GpuSample {
        ecc_errors_uncorrected: Some(n),
        ..sample()
    }
}

#[test]
fn ecc_uncorrected_on_an_increase_and_clears_after_a_quiet_window() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    // Errors from before the first sample are not new.
    assert!(ev.observe(&reading(ecc(3), false), clock.now()).is_empty());
    assert!(ev
        .observe(&reading(ecc(3), false), clock.advance(1))
        .is_empty());
    let t = ev.observe(&reading(ecc(5), false), clock.advance(1));
    assert_eq!(raised(&t), vec![(AlertKind::GpuEccUncorrected, Some(5.0))]);
    assert_eq!(t[0].alert().threshold, Some(3.0));
    assert_eq!(t[0].alert().severity, Severity::Critical);
    assert!(
        t[0].alert().message.contains("2 new"),
        "{}",
        t[0].alert().message
    );
    // A further increase keeps it active and restarts the quiet window.
    assert!(ev
        .observe(&reading(ecc(6), false), clock.advance(600))
        .is_empty());
    assert!(ev
        .observe(&reading(ecc(6), false), clock.advance(899))
        .is_empty());
    let t = ev.observe(&reading(ecc(6), false), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuEccUncorrected]);
    // A GPU that reports no ECC counter never raises it.
    let none = GpuSample {
        ecc_errors_uncorrected: None,
        ..sample()
    };
    assert!(ev
        .observe(&reading(none, false), clock.advance(1))
        .is_empty());
}

fn errors(ecc: u64, xid: Option<u64>, last: Option<u32>) -> GpuSample {
    GpuSample {
        ecc_errors_uncorrected: Some(ecc),
        xid_errors: xid,
        last_xid: last,
        ..sample()
    }
}

#[test]
fn xid_errors_raise_on_an_increase_apart_from_ecc_and_clear_after_a_quiet_window() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    assert!(ev
        .observe(&reading(errors(0, Some(0), None), false), clock.now())
        .is_empty());
    let t = ev.observe(
        &reading(errors(0, Some(1), Some(79)), false),
        clock.advance(1),
    );
    assert_eq!(raised(&t), vec![(AlertKind::GpuXidError, Some(1.0))]);
    assert_eq!(t[0].alert().severity, Severity::Critical);
    assert!(
        t[0].alert()
            .message
            .contains("1 new critical XID error(s) (last: XID 79)"),
        "{}",
        t[0].alert().message
    );
    // An ECC increase is its own alert; XID's quiet window runs from its own
    // last increase.
    let t = ev.observe(
        &reading(errors(2, Some(1), Some(79)), false),
        clock.advance(600),
    );
    assert_eq!(raised(&t), vec![(AlertKind::GpuEccUncorrected, Some(2.0))]);
    let t = ev.observe(
        &reading(errors(2, Some(1), Some(79)), false),
        clock.advance(300),
    );
    assert_eq!(resolved(&t), vec![AlertKind::GpuXidError]);
    let t = ev.observe(
        &reading(errors(2, Some(1), Some(79)), false),
        clock.advance(600),
    );
    assert_eq!(resolved(&t), vec![AlertKind::GpuEccUncorrected]);
    // A GPU without XID events (None) never raises it; a counter that went
    // back (the agent restarted) is a new baseline, not an error.
    assert!(ev
        .observe(&reading(errors(2, None, None), false), clock.advance(1))
        .is_empty());
    assert!(ev
        .observe(&reading(errors(2, Some(0), None), false), clock.advance(1))
        .is_empty());
    let t = ev.observe(
        &reading(errors(2, Some(1), Some(48)), false),
        clock.advance(1),
    );
    assert_eq!(raised(&t), vec![(AlertKind::GpuXidError, Some(1.0))]);
}

#[test]
fn agent_lost_after_the_grace_period_and_cleared_when_back() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    assert!(ev.agent_connected("agt-a", "a", clock.now()).is_empty());
    ev.agent_disconnected("agt-a", "a", clock.advance(1));
    assert!(ev.tick(clock.advance(59)).is_empty());
    let t = ev.tick(clock.advance(1));
    assert_eq!(raised(&t), vec![(AlertKind::AgentLost, Some(60.0))]);
    assert_eq!(t[0].alert().agent_id.as_deref(), Some("agt-a"));
    assert!(ev.tick(clock.advance(10)).is_empty());
    let t = ev.agent_connected("agt-a", "a", clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::AgentLost]);
    // Back within the grace period: nothing.
    ev.agent_disconnected("agt-a", "a", clock.advance(1));
    assert!(ev.tick(clock.advance(30)).is_empty());
    assert!(ev
        .agent_connected("agt-a", "a", clock.advance(1))
        .is_empty());
    assert!(ev.tick(clock.advance(120)).is_empty());
}

#[test]
fn gpu_alerts_resolve_when_the_gpu_stops_reporting() {
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    assert_eq!(
        raised(&ev.observe(&reading(hot(90.0), false), clock.now())).len(),
        1
    );
    assert!(ev.tick(clock.advance(59)).is_empty());
    let t = ev.tick(clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuTemperatureHigh]);
}

#[test]
fn training_stalled_without_progress_and_cleared_by_progress_or_its_end() {
    let mut clock = Clock::new();
    let start = clock.now();
    let mut ev = Evaluator::new(AlertSettings::default());
    let running = |at| {
        vec![RunningTraining {
            id: "trn-1".into(),
            last_activity: at,
            batches_per_step: 1,
        }]
    };
    assert!(ev
        .observe_trainings(&running(start), clock.advance(599))
        .is_empty());
    let t = ev.observe_trainings(&running(start), clock.advance(1));
    assert_eq!(raised(&t), vec![(AlertKind::TrainingStalled, Some(600.0))]);
    assert_eq!(t[0].alert().training_id.as_deref(), Some("trn-1"));
    assert!(ev
        .observe_trainings(&running(start), clock.advance(30))
        .is_empty());
    // Progress came: resolved.
    let t = ev.observe_trainings(&running(clock.now()), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::TrainingStalled]);
    // Stalled again, then no longer RUNNING: resolved.
    let last = clock.now();
    let t = ev.observe_trainings(&running(last), clock.advance(600));
    assert_eq!(raised(&t).len(), 1);
    let t = ev.observe_trainings(&[], clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::TrainingStalled]);
}

#[test]
fn adopted_alerts_resolve_like_their_own() {
    let mut clock = Clock::new();
    let mut first = Evaluator::new(AlertSettings::default());
    first.agent_disconnected("agt-b", "b", clock.now());
    let mut before = raised_alerts(first.tick(clock.advance(60)));
    before.extend(raised_alerts(
        first.observe(&reading(hot(90.0), false), clock.advance(1)),
    ));
    assert_eq!(before.len(), 2);

    // A restart: a new evaluator takes them over.
    let mut ev = Evaluator::new(AlertSettings::default());
    ev.adopt(before.clone(), clock.advance(5));
    assert_eq!(ev.active().len(), 2);
    // Still hot: nothing new. Cool: the adopted alert resolves, same id.
    assert!(ev
        .observe(&reading(hot(90.0), false), clock.advance(1))
        .is_empty());
    let t = ev.observe(&reading(hot(60.0), false), clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::GpuTemperatureHigh]);
    assert_eq!(t[0].alert().id, before[1].id);
    let t = ev.agent_connected("agt-b", "b", clock.advance(1));
    assert_eq!(resolved(&t), vec![AlertKind::AgentLost]);
    assert_eq!(t[0].alert().id, before[0].id);
}

fn raised_alerts(t: Vec<Transition>) -> Vec<Alert> {
    t.into_iter()
        .filter_map(|t| match t {
            Transition::Raised(a) => Some(a),
            _ => None,
        })
        .collect()
}

#[test]
fn hub_subscribers_get_the_active_set_then_every_change() {
    let hub = AlertHub::default();
    let mut clock = Clock::new();
    let mut ev = Evaluator::new(AlertSettings::default());
    let t = ev.observe(&reading(hot(90.0), false), clock.now());
    hub.publish(t[0].alert().clone());
    let (active, mut rx) = hub.subscribe();
    assert_eq!(active.len(), 1);
    let t = ev.observe(&reading(hot(60.0), false), clock.advance(1));
    hub.publish(t[0].alert().clone());
    let change = rx.try_recv().expect("the resolution");
    assert!(change.resolve_time.is_some());
    assert!(hub.active().is_empty());
    assert_eq!(hub.raised_total(), 1);
}

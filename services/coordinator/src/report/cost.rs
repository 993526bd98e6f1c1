//! The cost analysis of a training (`cost_analysis.json`, and the report's
//! `cost`): GPU-hours per attempt and in all, the idle part of them, and —
//! when a `--gpu-price` pattern matches the GPU model — what they cost.
//!
//! The model, documented in docs/operations.md ("Cost"):
//! - an attempt holds `world_size` GPUs from its placement (the transition to
//!   SCHEDULED) to its end (the next RESTARTING or final state; now while it
//!   runs);
//! - idle GPU-hours of an attempt: its GPUs from placement to the attempt's
//!   `started` line (process start and rendezvous; a program, which sends
//!   none, to its first progress line; the whole attempt when it never
//!   started), plus the time its ranks waited for data (each rank_stats
//!   window's `data_wait_ms` per step times the window's steps);
//! - samples: the last step times the global batch of the `started` line;
//! - cost: GPU-hours times the price; per million samples when samples are
//!   known.

use crate::model::{EventPayload, JobState, StateTransition, StoredEvent};
use chrono::{DateTime, Utc};
use cohort_spec::progress::ProgressLine;
use serde::Serialize;
use std::collections::BTreeMap;

/// One `--gpu-price PATTERN=USD_PER_GPU_HOUR`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPrice {
    pub pattern: String,
    pub usd_per_gpu_hour: f64,
}

impl std::str::FromStr for GpuPrice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (pattern, price) = s
            .split_once('=')
            .ok_or("expected PATTERN=USD_PER_GPU_HOUR, e.g. H100=2.50")?;
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err("the pattern is empty".into());
        }
        let usd_per_gpu_hour: f64 = price
            .trim()
            .parse()
            .map_err(|_| format!("{price:?} is not a price in USD per GPU-hour"))?;
        if !usd_per_gpu_hour.is_finite() || usd_per_gpu_hour < 0.0 {
            return Err(format!("{price:?} is not a price in USD per GPU-hour"));
        }
        Ok(GpuPrice {
            pattern: pattern.to_string(),
            usd_per_gpu_hour,
        })
    }
}

/// The prices in the order given: the first pattern found in a GPU's model
/// name (ignoring case) prices it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(pub Vec<GpuPrice>);

impl Prices {
    pub fn for_model(&self, model: &str) -> Option<&GpuPrice> {
        let model = model.to_lowercase();
        self.0
            .iter()
            .find(|p| model.contains(&p.pattern.to_lowercase()))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptCost {
    pub attempt: i32,
    pub gpus: i32,
    pub start_time: DateTime<Utc>,
    /// `None` while it runs (its hours count up to now).
    pub end_time: Option<DateTime<Utc>>,
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// A program's attempt with no progress line: its idle part is not
    /// known (and `idle_gpu_hours` is 0).
    pub idle_unknown: bool,
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostAnalysis {
    /// Every attempt's, restarts included.
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    pub attempts: Vec<AttemptCost>,
    /// The model of the training's GPUs ("" when never placed).
    pub gpu_model: String,
    /// The price used; `None` when no pattern matches the model.
    pub price: Option<GpuPrice>,
    pub cost_usd: Option<f64>,
    /// Samples trained on (0 when unknown, e.g. a program).
    pub samples: u64,
    pub cost_per_million_samples_usd: Option<f64>,
    /// Some attempt's idle part is not known (left out of `idle_gpu_hours`).
    pub idle_unknown: bool,
}

const MS_PER_HOUR: f64 = 3_600_000.0;

fn hours(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / MS_PER_HOUR
}

/// What the events say per attempt: when it started, its data waits (ms
/// over every rank), its global batch and last step.
#[derive(Default)]
struct AttemptEvents {
    started: Option<DateTime<Utc>>,
    /// The first progress line (a program reports no `started` line).
    first_progress: Option<DateTime<Utc>>,
    data_wait_ms: f64,
    global_batch: i64,
    last_step: i64,
    /// The step the attempt started from (its first windows count from it).
    start_step: i64,
    rank_steps: BTreeMap<i64, i64>,
}

fn per_attempt(events: &[StoredEvent]) -> BTreeMap<i32, AttemptEvents> {
    let mut out: BTreeMap<i32, AttemptEvents> = BTreeMap::new();
    for e in events {
        let EventPayload::Rank(line) = &e.payload else {
            continue;
        };
        let a = out.entry(e.attempt).or_default();
        match line {
            ProgressLine::Started {
                global_batch,
                start_step,
                ..
            } => {
                a.started.get_or_insert(e.time);
                a.global_batch = *global_batch;
                a.start_step = *start_step;
                a.last_step = a.last_step.max(*start_step);
            }
            ProgressLine::Progress(p) => {
                a.first_progress.get_or_insert(e.time);
                a.last_step = a.last_step.max(p.step);
            }
            ProgressLine::Metrics(m) => {
                a.first_progress.get_or_insert(e.time);
                a.last_step = a.last_step.max(m.step);
            }
            ProgressLine::Finished { step, .. } => a.last_step = a.last_step.max(*step),
            ProgressLine::RankStats {
                rank,
                step,
                data_wait_ms,
                ..
            } => {
                let prev = a.rank_steps.insert(*rank, *step).unwrap_or(a.start_step);
                a.data_wait_ms += data_wait_ms * (step - prev).max(0) as f64;
            }
            _ => {}
        }
    }
    out
}

fn ends_attempt(to: JobState) -> bool {
    to == JobState::Restarting || to.is_final()
}

/// The analysis of one training (`program`: a team's program, which
/// reports its start only with its first progress line, if at all).
pub fn analyse(
    transitions: &[StateTransition],
    events: &[StoredEvent],
    program: bool,
    world_size: i32,
    gpu_model: &str,
    prices: &Prices,
    now: DateTime<Utc>,
) -> CostAnalysis {
    let price = prices.for_model(gpu_model).cloned();
    let seen = per_attempt(events);
    let mut attempts = Vec::new();
    for (i, t) in transitions.iter().enumerate() {
        if t.to != JobState::Scheduled {
            continue;
        }
        let end = transitions[i + 1..]
            .iter()
            .find(|n| ends_attempt(n.to))
            .map(|n| n.at);
        let until = end.unwrap_or(now);
        let gpus = world_size.max(0);
        let gpu_hours = hours(t.at, until) * f64::from(gpus);
        let got = seen.get(&t.attempt);
        let working = got.and_then(|a| a.started.or(a.first_progress));
        let waiting = working.map_or(until, |s| s.min(until));
        let data_wait = got.map_or(0.0, |a| a.data_wait_ms / MS_PER_HOUR);
        // A program that never reported says nothing of when it worked.
        let idle_unknown = program && working.is_none();
        let idle = if idle_unknown {
            0.0
        } else {
            (hours(t.at, waiting) * f64::from(gpus) + data_wait).min(gpu_hours)
        };
        attempts.push(AttemptCost {
            attempt: t.attempt,
            gpus,
            start_time: t.at,
            end_time: end,
            gpu_hours,
            idle_gpu_hours: idle,
            idle_unknown,
            cost_usd: price.as_ref().map(|p| gpu_hours * p.usd_per_gpu_hour),
        });
    }
    let gpu_hours: f64 = attempts.iter().map(|a| a.gpu_hours).sum();
    let idle_gpu_hours: f64 = attempts.iter().map(|a| a.idle_gpu_hours).sum();
    let idle_unknown = attempts.iter().any(|a| a.idle_unknown);
    // Samples: the newest attempt's last step over its global batch (a
    // restart resumes from a checkpoint, so the last attempt's step counts
    // the whole run's steps).
    let samples = seen
        .values()
        .rev()
        .find(|a| a.global_batch > 0)
        .map_or(0, |a| {
            (a.last_step.max(0) as u64).saturating_mul(a.global_batch as u64)
        });
    let cost_usd = price.as_ref().map(|p| gpu_hours * p.usd_per_gpu_hour);
    CostAnalysis {
        gpu_hours,
        idle_gpu_hours,
        attempts,
        gpu_model: gpu_model.to_string(),
        cost_per_million_samples_usd: cost_usd
            .filter(|_| samples > 0)
            .map(|c| c / (samples as f64 / 1e6)),
        price,
        cost_usd,
        idle_unknown,
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn change(attempt: i32, to: JobState, s: i64) -> StateTransition {
        StateTransition {
            training_id: "t".into(),
            attempt,
            from: None,
            to,
            reason: String::new(),
            at: at(s),
        }
    }

    fn line(attempt: i32, s: i64, json: &str) -> StoredEvent {
        StoredEvent {
            training_id: "t".into(),
            seq: s,
            attempt,
            payload: EventPayload::Rank(ProgressLine::parse(json).expect(json)),
            time: at(s),
        }
    }

    fn started(attempt: i32, s: i64, start_step: i64) -> StoredEvent {
        line(
            attempt,
            s,
            &format!(
                r#"{{"event":"started","world_size":2,"device":"cpu","total_steps":1000,"start_step":{start_step},"global_batch":512,"parameters":10}}"#
            ),
        )
    }

    fn progress(attempt: i32, s: i64, step: i64) -> StoredEvent {
        line(
            attempt,
            s,
            &format!(
                r#"{{"event":"progress","step":{step},"total_steps":1000,"epoch":0,"loss":0.1,"mse":0.1,"l1":0.0,"samples_per_sec":1.0,"step_time_ms":1.0}}"#
            ),
        )
    }

    fn stats(attempt: i32, s: i64, rank: i64, step: i64, wait_ms: f64) -> StoredEvent {
        line(
            attempt,
            s,
            &format!(
                r#"{{"event":"rank_stats","rank":{rank},"step":{step},"step_time_ms":10.0,"compute_ms":5.0,"comm_ms":5.0,"memory_bytes":1,"data_wait_ms":{wait_ms}}}"#
            ),
        )
    }

    fn prices() -> Prices {
        Prices(vec![
            "h100=2.50".parse().unwrap(),
            "A100=1.20".parse().unwrap(),
        ])
    }

    #[test]
    fn every_attempt_counts_and_the_price_matches_the_model_ignoring_case() {
        // Attempt 1: placed at 0, started at 360 s, restarted at 3600 s.
        // Attempt 2: placed at 3600 s, started at 3600 s, succeeded at 7200 s.
        let transitions = [
            change(0, JobState::Queued, 0),
            change(1, JobState::Scheduled, 0),
            change(1, JobState::Running, 360),
            change(1, JobState::Restarting, 3600),
            change(2, JobState::Scheduled, 3600),
            change(2, JobState::Running, 3600),
            change(2, JobState::Succeeded, 7200),
        ];
        let events = [
            started(1, 360, 0),
            progress(1, 1000, 400),
            started(2, 3600, 400),
            progress(2, 7000, 1000),
        ];
        let c = analyse(
            &transitions,
            &events,
            false,
            2,
            "NVIDIA H100 80GB HBM3",
            &prices(),
            at(9999),
        );
        assert_eq!(c.attempts.len(), 2);
        assert!((c.attempts[0].gpu_hours - 2.0).abs() < 1e-9);
        assert!(
            (c.attempts[0].idle_gpu_hours - 0.2).abs() < 1e-9,
            "{}",
            c.attempts[0].idle_gpu_hours
        );
        assert!((c.gpu_hours - 4.0).abs() < 1e-9);
        assert_eq!(c.price.as_ref().unwrap().pattern, "h100");
        assert!((c.cost_usd.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(c.samples, 1000 * 512);
        assert!((c.cost_per_million_samples_usd.unwrap() - 10.0 / 0.512).abs() < 1e-9);
    }

    #[test]
    fn no_matching_price_still_gives_gpu_hours() {
        let transitions = [
            change(1, JobState::Scheduled, 0),
            change(1, JobState::Succeeded, 1800),
        ];
        let c = analyse(
            &transitions,
            &[],
            false,
            4,
            "cohort simulated gpu (16 GiB)",
            &prices(),
            at(9999),
        );
        assert!((c.gpu_hours - 2.0).abs() < 1e-9);
        assert!(
            c.price.is_none() && c.cost_usd.is_none() && c.cost_per_million_samples_usd.is_none()
        );
        // It never started: the whole attempt was idle.
        assert!((c.idle_gpu_hours - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_running_attempt_counts_up_to_now_and_data_waits_are_idle() {
        let transitions = [
            change(1, JobState::Scheduled, 0),
            change(1, JobState::Running, 0),
        ];
        // Two ranks, each waiting 1800 ms a step for 1000 steps: 1 GPU-hour.
        let events = [
            started(1, 0, 0),
            stats(1, 10, 0, 1000, 1800.0),
            stats(1, 10, 1, 1000, 1800.0),
        ];
        let c = analyse(
            &transitions,
            &events,
            false,
            2,
            "A100-SXM4-40GB",
            &prices(),
            at(7200),
        );
        assert_eq!(c.attempts[0].end_time, None);
        assert!((c.gpu_hours - 4.0).abs() < 1e-9);
        assert!(
            (c.idle_gpu_hours - 1.0).abs() < 1e-6,
            "{}",
            c.idle_gpu_hours
        );
        assert!((c.cost_usd.unwrap() - 4.8).abs() < 1e-9);
    }

    #[test]
    fn a_program_is_busy_from_its_first_progress_line() {
        let transitions = [
            change(1, JobState::Scheduled, 0),
            change(1, JobState::Succeeded, 3600),
        ];
        let metrics = line(1, 360, r#"{"event":"progress","step":1,"loss":2.0}"#);
        let c = analyse(&transitions, &[metrics], true, 1, "x", &prices(), at(9999));
        assert!(
            (c.idle_gpu_hours - 0.1).abs() < 1e-9,
            "{}",
            c.idle_gpu_hours
        );
        assert!(!c.idle_unknown);
        assert_eq!(c.samples, 0);
    }

    #[test]
    fn a_program_that_reports_nothing_has_an_unknown_idle_part() {
        let transitions = [
            change(1, JobState::Scheduled, 0),
            change(1, JobState::Succeeded, 3600),
        ];
        let c = analyse(&transitions, &[], true, 2, "x", &prices(), at(9999));
        assert!((c.gpu_hours - 2.0).abs() < 1e-9);
        assert!(c.idle_unknown && c.attempts[0].idle_unknown);
        assert_eq!(c.idle_gpu_hours, 0.0, "not guessed");
        // The SAE, which always says when it started, is idle throughout.
        let sae = analyse(&transitions, &[], false, 2, "x", &prices(), at(9999));
        assert!(!sae.idle_unknown);
        assert!((sae.idle_gpu_hours - 2.0).abs() < 1e-9);
    }

    #[test]
    fn prices_parse_or_say_why_not() {
        assert_eq!(
            "H100=2.5".parse::<GpuPrice>().unwrap().usd_per_gpu_hour,
            2.5
        );
        for bad in ["H100", "=2", "H100=x", "H100=-1", "H100=inf"] {
            assert!(bad.parse::<GpuPrice>().is_err(), "{bad}");
        }
    }
}

//! A program's own metrics over its run: for its loss and every metric it
//! reported by name (`episode_return`, `accuracy`, ...), the first and the
//! last value with their steps, the lowest, the highest and how many
//! points — what shows whether the number went the right way.

use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::ProgressLine;
use serde::Serialize;
use std::collections::BTreeMap;

/// The most metric names a report keeps (a program's lines may name new
/// ones as they go; the first ones seen are kept).
pub const MAX_REPORTED_METRICS: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSummary {
    pub name: String,
    pub first_step: i64,
    pub first: f64,
    pub last_step: i64,
    pub last: f64,
    /// Of the finite values (NaN when none was finite).
    pub min: f64,
    pub max: f64,
    pub points: u64,
}

impl MetricSummary {
    fn new(name: &str, step: i64, value: f64) -> Self {
        let finite = if value.is_finite() { value } else { f64::NAN };
        Self {
            name: name.to_string(),
            first_step: step,
            first: value,
            last_step: step,
            last: value,
            min: finite,
            max: finite,
            points: 1,
        }
    }

    fn add(&mut self, step: i64, value: f64) {
        self.last_step = step;
        self.last = value;
        self.points += 1;
        if value.is_finite() {
            self.min = if self.min.is_nan() {
                value
            } else {
                self.min.min(value)
            };
            self.max = if self.max.is_nan() {
                value
            } else {
                self.max.max(value)
            };
        }
    }
}

/// Every metric of a program's progress lines, in name order (`loss` among them).
pub fn program_metrics(events: &[StoredEvent]) -> Vec<MetricSummary> {
    let mut by_name: BTreeMap<String, MetricSummary> = BTreeMap::new();
    for event in events {
        let EventPayload::Rank(ProgressLine::Metrics(m)) = &event.payload else {
            continue;
        };
        let values = m
            .loss
            .map(|l| ("loss", l))
            .into_iter()
            .chain(m.metrics.iter().map(|(k, v)| (k.as_str(), *v)));
        for (name, value) in values {
            let room = by_name.len() < MAX_REPORTED_METRICS;
            match by_name.get_mut(name) {
                Some(summary) => summary.add(m.step, value),
                None if room => {
                    by_name.insert(name.to_string(), MetricSummary::new(name, m.step, value));
                }
                None => {}
            }
        }
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use cohort_spec::metrics::Metrics;

    fn line(step: i64, loss: Option<f64>, ret: f64) -> StoredEvent {
        StoredEvent {
            seq: step,
            training_id: "t".into(),
            attempt: 1,
            time: Utc::now(),
            payload: EventPayload::Rank(ProgressLine::Metrics(Metrics {
                step,
                total_steps: Some(3),
                loss,
                metrics: [("episode_return".to_string(), ret)].into(),
                finished: false,
            })),
        }
    }

    #[test]
    fn first_last_and_range_of_each_metric() {
        let events = [
            line(1, Some(0.9), 0.5),
            line(2, None, f64::NAN),
            line(3, Some(0.2), 0.75),
        ];
        let m = program_metrics(&events);
        assert_eq!(m.len(), 2);
        let (loss, ret) = (&m[1], &m[0]);
        assert_eq!(loss.name, "loss");
        assert_eq!((loss.first, loss.last, loss.points), (0.9, 0.2, 2));
        assert_eq!(ret.name, "episode_return");
        assert_eq!((ret.first_step, ret.last_step, ret.points), (1, 3, 3));
        assert_eq!(
            (ret.min, ret.max),
            (0.5, 0.75),
            "a NaN is a point, not a bound"
        );
    }
}

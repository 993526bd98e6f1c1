//! A trial's objective: a metric of its newest progress event — the
//! built-in SAE's progress fields, or a program's loss and metrics.

use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::ProgressLine;

/// A metric read from one progress event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub step: i64,
    /// The trial's total steps, when the line says.
    pub total_steps: Option<i64>,
}

/// `metric` in `event`, if the event is a progress line that carries it.
pub fn read(metric: &str, event: &StoredEvent) -> Option<Reading> {
    let EventPayload::Rank(line) = &event.payload else {
        return None;
    };
    match line {
        ProgressLine::Progress(p) => {
            let value = match metric {
                "loss" => p.loss,
                "mse" => p.mse,
                "l1" => p.l1,
                "l0" => p.l0,
                "explained_variance" => p.explained_variance,
                "dead_fraction" => p.dead_fraction,
                _ => return None,
            };
            Some(Reading {
                value,
                step: p.step,
                total_steps: Some(p.total_steps).filter(|t| *t > 0),
            })
        }
        ProgressLine::Metrics(m) => {
            let value = match metric {
                "loss" => m.loss,
                other => m.metrics.get(other).copied(),
            }?;
            Some(Reading {
                value,
                step: m.step,
                total_steps: m.total_steps.filter(|t| *t > 0),
            })
        }
        _ => None,
    }
}

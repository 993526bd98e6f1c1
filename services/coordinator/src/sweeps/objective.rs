//! A trial's objective: a metric of its newest progress event — the
//! built-in SAE's progress fields, or a program's loss and metrics — or,
//! for the frontier, its explained variance with its L0 beside it.

use crate::model::{EventPayload, StoredEvent, FRONTIER};
use cohort_spec::frontier::{self, Point};
use cohort_spec::progress::ProgressLine;
use std::collections::HashMap;

/// A metric read from one progress event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The metric; for the frontier, the explained variance.
    pub value: f64,
    /// For the frontier, the L0.
    pub l0: Option<f64>,
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
                FRONTIER => {
                    return Some(Reading {
                        value: p.explained_variance,
                        l0: Some(p.l0),
                        step: p.step,
                        total_steps: Some(p.total_steps).filter(|t| *t > 0),
                    })
                }
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
                l0: None,
                step: p.step,
                total_steps: Some(p.total_steps).filter(|t| *t > 0),
            })
        }
        ProgressLine::Metrics(m) => {
            let (value, l0) = match metric {
                FRONTIER => (
                    m.metrics.get("explained_variance").copied()?,
                    Some(m.metrics.get("l0").copied()?),
                ),
                "loss" => (m.loss?, None),
                other => (m.metrics.get(other).copied()?, None),
            };
            Some(Reading {
                value,
                l0,
                step: m.step,
                total_steps: m.total_steps.filter(|t| *t > 0),
            })
        }
        _ => None,
    }
}

/// The frontier of a sweep's trials, from their newest points.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standing {
    /// Each trial's distance to the frontier (0 on it), by training id.
    pub distance: HashMap<String, f64>,
    /// The trials on it, sparsest first.
    pub on: Vec<String>,
    /// The area it dominates from (`reference_l0`, explained variance 0).
    pub hypervolume: f64,
}

/// The frontier of `points` (training id, newest point; FAILED trials left
/// out by the caller), its hypervolume measured from L0 = `reference_l0`:
/// the largest dictionary of the trials (every latent active), so sweeps
/// over the same space compare.
pub fn standing(points: &[(String, Point)], reference_l0: f64) -> Standing {
    let only: Vec<Point> = points.iter().map(|(_, p)| *p).collect();
    let distances = frontier::distances(&only);
    let mut on: Vec<(&String, &Point)> = points
        .iter()
        .zip(&distances)
        .filter(|(_, d)| **d == 0.0)
        .map(|((id, p), _)| (id, p))
        .collect();
    on.sort_by(|a, b| a.1.l0.total_cmp(&b.1.l0));
    Standing {
        distance: points
            .iter()
            .zip(distances)
            .map(|((id, _), d)| (id.clone(), d))
            .collect(),
        on: on.into_iter().map(|(id, _)| id.clone()).collect(),
        hypervolume: frontier::hypervolume(&only, Point::new(reference_l0, 0.0)),
    }
}

/// The point of `event`, when it reports an L0 and an explained variance.
pub fn point(event: &StoredEvent) -> Option<Point> {
    read(FRONTIER, event).and_then(|r| Some(Point::new(r.l0?, r.value)))
}

//! What an SAE user judges a run by, from its stored events: the newest
//! progress window's metrics (L0, explained variance, dead latents, gradient
//! norm, learning rate, non-finite steps), the last and the best validation,
//! and how often checkpoints were rejected or the run diverged.

use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::{Progress, ProgressLine};
use serde::Serialize;

/// One validation of the whole held-out set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ValidationSummary {
    pub step: i64,
    pub loss: f64,
    pub mse: f64,
    pub l0: f64,
    pub explained_variance: f64,
    pub dead_fraction: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quality {
    /// From the newest progress window (unset before the first one).
    pub l0: Option<f64>,
    pub explained_variance: Option<f64>,
    pub dead_fraction: Option<f64>,
    pub grad_norm: Option<f64>,
    pub learning_rate: Option<f64>,
    /// Non-finite steps skipped (the newest window's count of its attempt).
    pub nonfinite_steps: i64,
    pub last_validation: Option<ValidationSummary>,
    /// The lowest validation loss (the state kept as the best checkpoint).
    pub best_validation: Option<ValidationSummary>,
    /// Checkpoints that failed their verification on restore.
    pub checkpoints_rejected: u64,
    /// Attempts that ended diverged.
    pub divergences: u64,
}

/// The quality of a run from its events, in order.
pub fn quality(events: &[StoredEvent]) -> Quality {
    let mut q = Quality::default();
    for event in events {
        let EventPayload::Rank(line) = &event.payload else {
            continue;
        };
        match line {
            ProgressLine::Progress(Progress {
                l0,
                explained_variance,
                dead_fraction,
                grad_norm,
                learning_rate,
                nonfinite_steps,
                ..
            }) => {
                q.l0 = Some(*l0);
                q.explained_variance = Some(*explained_variance);
                q.dead_fraction = Some(*dead_fraction);
                q.grad_norm = Some(*grad_norm);
                q.learning_rate = Some(*learning_rate);
                q.nonfinite_steps = *nonfinite_steps;
            }
            ProgressLine::Validation {
                step,
                loss,
                mse,
                l0,
                explained_variance,
                dead_fraction,
                ..
            } => {
                let v = ValidationSummary {
                    step: *step,
                    loss: *loss,
                    mse: *mse,
                    l0: *l0,
                    explained_variance: *explained_variance,
                    dead_fraction: *dead_fraction,
                };
                if q.best_validation.is_none_or(|b| v.loss < b.loss) {
                    q.best_validation = Some(v);
                }
                q.last_validation = Some(v);
            }
            ProgressLine::CheckpointRejected { .. } => q.checkpoints_rejected += 1,
            ProgressLine::Diverged { .. } => q.divergences += 1,
            _ => {}
        }
    }
    q
}

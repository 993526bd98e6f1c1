//! Alerts: rules evaluated continuously on the live telemetry stream, agent
//! presence and training progress; raised once a condition holds for its
//! window, resolved when it stops holding (with hysteresis), stored in the
//! `alerts` table and fanned out to WatchAlerts.
//!
//! - [`settings`]: thresholds and windows ([`AlertSettings`], data-contract defaults);
//!   [`AlertFlags`]: the coordinator's flags for the main ones.
//! - The alert types ([`Alert`], [`AlertKind`], [`Severity`], [`Transition`])
//!   are domain types, in [`crate::model`].
//! - [`evaluator`]: the pure state machine (time is passed in); the rules are
//!   in `gpu_rules` (memory, temperature, utilization, ECC) and `presence`
//!   (agent lost, stale GPUs, stalled trainings); [`plateau`]: loss plateaus;
//!   `training_rules`: gradient norm, step time, data wait, memory growth,
//!   collective errors, non-finite steps, from what [`follow`] followed.
//! - [`hub`]: the active set and the live feed.
//! - [`engine`]: the task that feeds the evaluator and persists transitions.

pub mod engine;
pub mod evaluator;
mod flags;
pub mod follow;
mod gpu_rules;
pub mod hub;
pub mod plateau;
mod presence;
pub mod settings;
mod training_rules;

pub use crate::model::{Alert, AlertKey, AlertKind, Severity, Transition};
pub use evaluator::Evaluator;
pub use flags::AlertFlags;
pub use hub::AlertHub;
pub use presence::RunningTraining;
pub use settings::AlertSettings;

#[cfg(test)]
mod tests;

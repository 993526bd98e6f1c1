//! Job reports: what a training did, from what the coordinator stored.
//!
//! - [`metrics`]: `metrics.jsonl`, every line the ranks emitted.
//! - [`summary`]: the performance summary (throughput, step-time
//!   percentiles, compute vs communication share, memory, GPU use per rank).
//! - [`quality`]: the SAE's metrics, validations, rejected checkpoints, divergences.
//! - [`program`]: a program's loss and own metrics over its run.
//! - [`gpu`]: GPU utilization and memory per rank from telemetry history.
//! - [`scaling`]: speed-up and efficiency across world sizes of one config.
//! - [`cost`]: GPU-hours per attempt, the idle part, and their price.
//! - [`preemptions`]: the notices that stopped it and the work they cost.
//! - [`resizes`]: an elastic training's grows and shrinks.
//! - [`estimate`]: speed-up at 2, 4 and 8 GPUs from measured compute and communication.
//! - [`stats`]: mean and percentiles.
//! - [`load`]: reads the database and builds a [`Report`].
//! - [`files`]: the report files under the data dir, written at a job's end.
//!
//! Everything but `load` and `files` is pure.

pub mod cost;
pub mod estimate;
pub mod files;
pub mod gpu;
pub mod load;
pub mod metrics;
pub mod preemptions;
pub mod program;
pub mod quality;
pub mod resizes;
pub mod scaling;
pub mod stats;
pub mod summary;

#[cfg(test)]
mod tests;

pub use load::build_report;
pub use scaling::{Scaling, ScalingRow, ScalingRun};
pub use summary::{RankSummary, Summary, TrainingFacts};

use crate::model::JobState;
use serde::Serialize;

/// The report of one training (`summary.json` is this without the metrics lines).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub training_id: String,
    pub state: JobState,
    /// False while the training has not ended: the figures may still change.
    #[serde(rename = "final")]
    pub is_final: bool,
    pub summary: Summary,
    pub scaling: Scaling,
    pub preemptions: preemptions::Preemptions,
    pub resizes: resizes::Resizes,
    /// The program's code snapshot, when it carried its code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<cohort_spec::code::CodeSnapshot>,
    /// Written as its own file (`cost_analysis.json`).
    #[serde(skip)]
    pub cost: cost::CostAnalysis,
    #[serde(skip)]
    pub metrics_jsonl: String,
}

//! The scaling report: trainings of the same config at different world
//! sizes, each run's throughput against the 1-rank run's. speed-up(N) =
//! throughput(N) / throughput(1); efficiency(N) = speed-up(N) / N. Without a
//! 1-rank run there is no baseline, and no speed-up is made up.

use serde::Serialize;

/// One training of the config, as the report compares them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingRun {
    pub training_id: String,
    pub world_size: i32,
    /// Mean global samples/s (see `Summary::mean_samples_per_sec`).
    pub samples_per_sec: Option<f64>,
    /// Newer runs first among equals: the baseline is the newest 1-rank run.
    pub create_time: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingRow {
    pub training_id: String,
    pub world_size: i32,
    pub samples_per_sec: Option<f64>,
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    /// The row of the training the report is about.
    pub current: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scaling {
    /// The 1-rank run every speed-up is relative to; `None` when there is none.
    pub baseline_training_id: Option<String>,
    /// Why rows lack a speed-up, when they do.
    pub note: String,
    /// By world size, then newest first.
    pub rows: Vec<ScalingRow>,
    /// Estimated at 2, 4 and 8 GPUs from this training's own times (see
    /// [`super::estimate`]); empty when it has none (a 1-rank run).
    pub estimates: Vec<super::estimate::ScalingEstimate>,
}

/// Compares `runs` (the current training among them, as `current_id`).
pub fn scaling(current_id: &str, runs: &[ScalingRun]) -> Scaling {
    let baseline = runs
        .iter()
        .filter(|r| r.world_size == 1 && r.samples_per_sec.is_some_and(|t| t > 0.0))
        .max_by_key(|r| r.create_time);
    let mut sorted: Vec<&ScalingRun> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        a.world_size
            .cmp(&b.world_size)
            .then(b.create_time.cmp(&a.create_time))
    });
    let rows = sorted
        .into_iter()
        .map(|run| {
            let speedup = match (baseline, run.samples_per_sec) {
                (Some(base), Some(t)) => base.samples_per_sec.map(|b| t / b),
                _ => None,
            };
            ScalingRow {
                training_id: run.training_id.clone(),
                world_size: run.world_size,
                samples_per_sec: run.samples_per_sec,
                speedup,
                efficiency: speedup
                    .filter(|_| run.world_size > 0)
                    .map(|s| s / run.world_size as f64),
                current: run.training_id == current_id,
            }
        })
        .collect();
    let note = match baseline {
        Some(_) => String::new(),
        None => "no succeeded 1-rank run of this config: no speed-up or efficiency".to_string(),
    };
    Scaling {
        baseline_training_id: baseline.map(|b| b.training_id.clone()),
        note,
        rows,
        estimates: Vec::new(),
    }
}

//! The report files of a training in the coordinator's data dir:
//! `<reports>/<training-id>/metrics.jsonl`, `summary.json` (the report
//! without the metrics lines) and `cost_analysis.json`. Each is written to a temporary file and
//! renamed, so a reader never sees half a file.

use super::Report;
use crate::persistence::Persistence;
use std::path::{Path, PathBuf};

pub const METRICS_FILE: &str = "metrics.jsonl";
pub const SUMMARY_FILE: &str = "summary.json";
pub const COST_FILE: &str = "cost_analysis.json";

/// The directory of one training's report files.
pub fn report_dir(reports: &Path, training_id: &str) -> PathBuf {
    reports.join(training_id)
}

/// Writes both files; returns their directory. Blocking: [`spawn_write`]
/// runs it on a blocking thread.
#[allow(clippy::disallowed_methods)]
pub fn write_files(reports: &Path, report: &Report) -> std::io::Result<PathBuf> {
    let dir = report_dir(reports, &report.training_id);
    std::fs::create_dir_all(&dir)?;
    let summary = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    let cost = serde_json::to_string_pretty(&report.cost).map_err(std::io::Error::other)?;
    write_atomic(&dir.join(METRICS_FILE), report.metrics_jsonl.as_bytes())?;
    write_atomic(&dir.join(SUMMARY_FILE), format!("{summary}\n").as_bytes())?;
    write_atomic(&dir.join(COST_FILE), format!("{cost}\n").as_bytes())?;
    Ok(dir)
}

#[allow(clippy::disallowed_methods)]
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Builds the report of a training that just ended and writes its files;
/// failures are logged. The job runner runs it as a background task.
pub async fn write(
    db: Persistence,
    reports: PathBuf,
    training_id: String,
    prices: super::cost::Prices,
) {
    let report = match super::build_report(&db, &training_id, &prices).await {
        Ok(Some(report)) => report,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(training_id, error = %e, "building the job report failed");
            return;
        }
    };
    let written = tokio::task::spawn_blocking(move || write_files(&reports, &report)).await;
    match written {
        Ok(Ok(dir)) => {
            tracing::info!(training_id, dir = %dir.display(), "job report written")
        }
        Ok(Err(e)) => tracing::warn!(training_id, error = %e, "writing the job report failed"),
        Err(e) => tracing::warn!(training_id, error = %e, "writing the job report failed"),
    }
}

//! Retention: old raw samples folded into 1-minute rollups (merged with a
//! row already there), expired rollups deleted; and the stored rollup row.

use super::{RetentionPass, ROLLUP_MS};
use crate::persistence::schema::gpu_metrics;
use crate::persistence::{DatabaseError, DbConnection};
use diesel::prelude::*;

/// The min / weighted-mean merge of one column of the rollup upsert.
fn merge_min(col: &str) -> String {
    format!(
        "{col} = CASE WHEN gpu_metrics_rollup.{col} IS NULL OR excluded.{col} < gpu_metrics_rollup.{col} \
         THEN excluded.{col} ELSE gpu_metrics_rollup.{col} END"
    )
}
fn merge_max(col: &str) -> String {
    format!(
        "{col} = CASE WHEN gpu_metrics_rollup.{col} IS NULL OR excluded.{col} > gpu_metrics_rollup.{col} \
         THEN excluded.{col} ELSE gpu_metrics_rollup.{col} END"
    )
}
fn merge_mean(col: &str, count: &str) -> String {
    format!(
        "{col} = CASE WHEN gpu_metrics_rollup.{col} IS NULL THEN excluded.{col} \
         WHEN excluded.{col} IS NULL THEN gpu_metrics_rollup.{col} \
         ELSE (gpu_metrics_rollup.{col} * gpu_metrics_rollup.{count} + excluded.{col} * excluded.{count}) \
              / (gpu_metrics_rollup.{count} + excluded.{count}) END"
    )
}

/// Folds every raw sample before `raw_cutoff_ms` (a minute boundary) into
/// its minute's rollup row (merging with a row already there, e.g. for a
/// late sample), deletes those samples, and deletes rollups of minutes that
/// start before `rollup_cutoff_ms`. One transaction: a sample is always in
/// exactly one of the two tables.
pub(super) fn retention_pass_in(
    conn: &mut DbConnection,
    raw_cutoff_ms: i64,
    rollup_cutoff_ms: i64,
) -> Result<RetentionPass, DatabaseError> {
    let m = ROLLUP_MS;
    let mut set = vec![
        "gpu_index = excluded.gpu_index".to_string(),
        "agent_id = excluded.agent_id".to_string(),
        "agent_name = excluded.agent_name".to_string(),
        "rank = excluded.rank".to_string(),
    ];
    // Every SET expression sees the old row, so the means read the old counts.
    for (col, count) in [
        ("utilization_gpu_mean", "utilization_gpu_count"),
        ("memory_used_mean", "sample_count"),
        ("temperature_mean", "temperature_count"),
        ("power_mean", "power_count"),
    ] {
        set.push(merge_mean(col, count));
    }
    for count in ["utilization_gpu_count", "temperature_count", "power_count"] {
        set.push(format!(
            "{count} = gpu_metrics_rollup.{count} + excluded.{count}"
        ));
    }
    for col in [
        "utilization_gpu_min",
        "memory_used_min",
        "temperature_min",
        "power_min",
    ] {
        set.push(merge_min(col));
    }
    for col in [
        "utilization_gpu_max",
        "memory_used_max",
        "memory_total_bytes",
        "temperature_max",
        "power_max",
    ] {
        set.push(merge_max(col));
    }
    set.push("sample_count = gpu_metrics_rollup.sample_count + excluded.sample_count".into());
    let sql = format!(
        "INSERT INTO gpu_metrics_rollup (gpu_uuid, bucket_ms, training_id, gpu_index, agent_id, agent_name, \
           rank, sample_count, utilization_gpu_min, utilization_gpu_mean, utilization_gpu_max, \
           utilization_gpu_count, memory_used_min, memory_used_mean, memory_used_max, memory_total_bytes, \
           temperature_min, temperature_mean, temperature_max, temperature_count, \
           power_min, power_mean, power_max, power_count) \
         SELECT gpu_uuid, (sample_ms / {m}) * {m}, COALESCE(training_id, ''), MAX(gpu_index), \
           MAX(agent_id), MAX(agent_name), MAX(rank), COUNT(*), \
           MIN(utilization_gpu_percent), AVG(utilization_gpu_percent), MAX(utilization_gpu_percent), \
           COUNT(utilization_gpu_percent), \
           MIN(memory_used_bytes), CAST(AVG(memory_used_bytes) AS DOUBLE PRECISION), MAX(memory_used_bytes), \
           MAX(memory_total_bytes), \
           MIN(temperature_celsius), AVG(temperature_celsius), MAX(temperature_celsius), COUNT(temperature_celsius), \
           MIN(power_draw_watts), AVG(power_draw_watts), MAX(power_draw_watts), COUNT(power_draw_watts) \
         FROM gpu_metrics WHERE sample_ms < {raw_cutoff_ms} \
         GROUP BY gpu_uuid, (sample_ms / {m}) * {m}, COALESCE(training_id, '') \
         ON CONFLICT (gpu_uuid, bucket_ms, training_id) DO UPDATE SET {}",
        set.join(", ")
    );
    let rollups_written = diesel::sql_query(sql).execute(conn)?;
    let raw_rolled_up =
        diesel::delete(gpu_metrics::table.filter(gpu_metrics::sample_ms.lt(raw_cutoff_ms)))
            .execute(conn)?;
    use crate::persistence::schema::gpu_metrics_rollup as r;
    let rollups_expired =
        diesel::delete(r::table.filter(r::bucket_ms.lt(rollup_cutoff_ms))).execute(conn)?;
    Ok(RetentionPass {
        raw_rolled_up,
        rollups_written,
        rollups_expired,
    })
}

/// One stored rollup row.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = crate::persistence::schema::gpu_metrics_rollup)]
pub struct RollupRow {
    pub gpu_uuid: String,
    pub bucket_ms: i64,
    pub training_id: String,
    pub gpu_index: i32,
    pub agent_id: String,
    pub agent_name: String,
    pub rank: Option<i32>,
    pub sample_count: i64,
    pub utilization_gpu_min: Option<f64>,
    pub utilization_gpu_mean: Option<f64>,
    pub utilization_gpu_max: Option<f64>,
    pub utilization_gpu_count: i64,
    pub memory_used_min: i64,
    pub memory_used_mean: f64,
    pub memory_used_max: i64,
    pub memory_total_bytes: i64,
    pub temperature_min: Option<f64>,
    pub temperature_mean: Option<f64>,
    pub temperature_max: Option<f64>,
    pub temperature_count: i64,
    pub power_min: Option<f64>,
    pub power_mean: Option<f64>,
    pub power_max: Option<f64>,
    pub power_count: i64,
}

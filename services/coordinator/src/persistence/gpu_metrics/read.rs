//! Bucketed reads over raw samples and rollups, as portable SQL (the bind
//! placeholder is the only backend difference).

use super::{BucketWindow, GpuBucket, MetricsSelection};
use crate::persistence::{DatabaseError, DbConnection};
use diesel::prelude::*;
use diesel::sql_types::Text;

/// Bind placeholders of the connection's backend.
pub(super) fn placeholders(conn: &DbConnection) -> fn(usize) -> String {
    match conn {
        DbConnection::Pg(_) => |i| format!("${i}"),
        DbConnection::Sqlite(_) => |_| "?".to_string(),
    }
}

/// The WHERE conditions of a selection, with their bind values in order.
fn selection_sql(sel: &MetricsSelection, ph: fn(usize) -> String) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut binds: Vec<String> = Vec::new();
    let list = |values: &[String], binds: &mut Vec<String>| -> String {
        let items: Vec<String> = values
            .iter()
            .map(|v| {
                binds.push(v.clone());
                ph(binds.len())
            })
            .collect();
        items.join(", ")
    };
    if !sel.gpu_uuids.is_empty() {
        sql.push_str(&format!(
            " AND gpu_uuid IN ({})",
            list(&sel.gpu_uuids, &mut binds)
        ));
    }
    if !sel.agents.is_empty() {
        let ids = list(&sel.agents, &mut binds);
        let names = list(&sel.agents, &mut binds);
        sql.push_str(&format!(
            " AND (agent_id IN ({ids}) OR agent_name IN ({names}))"
        ));
    }
    if !sel.training_id.is_empty() {
        binds.push(sel.training_id.clone());
        sql.push_str(&format!(" AND training_id = {}", ph(binds.len())));
    }
    (sql, binds)
}

fn load_buckets(
    conn: &mut DbConnection,
    sql: String,
    binds: Vec<String>,
) -> Result<Vec<GpuBucket>, DatabaseError> {
    let mut query = diesel::sql_query(sql).into_boxed();
    for b in binds {
        query = query.bind::<Text, _>(b);
    }
    Ok(query.load::<GpuBucket>(conn)?)
}

/// Raw samples of `window`, summed per GPU and bucket.
pub(super) fn raw_buckets(
    conn: &mut DbConnection,
    sel: &MetricsSelection,
    w: &BucketWindow,
) -> Result<Vec<GpuBucket>, DatabaseError> {
    let (filter, binds) = selection_sql(sel, placeholders(conn));
    let (start, step, from, to) = (w.start_ms, w.step_ms, w.first_ms(), w.end_ms());
    let sql = format!(
        "SELECT gpu_uuid, (sample_ms - {start}) / {step} AS bucket, \
           MAX(gpu_index) AS gpu_index, MAX(agent_id) AS agent_id, MAX(agent_name) AS agent_name, \
           MAX(training_id) AS training_id, MAX(rank) AS rank, COUNT(*) AS samples, \
           SUM(utilization_gpu_percent) AS util_sum, COUNT(utilization_gpu_percent) AS util_n, \
           SUM(utilization_memory_percent) AS util_mem_sum, COUNT(utilization_memory_percent) AS util_mem_n, \
           CAST(SUM(memory_used_bytes) AS DOUBLE PRECISION) AS mem_used_sum, \
           MAX(memory_total_bytes) AS mem_total_max, MAX(temperature_celsius) AS temp_max, \
           SUM(power_draw_watts) AS power_sum, COUNT(power_draw_watts) AS power_n, \
           MAX(ecc_errors_corrected) AS ecc_corrected_max, MAX(ecc_errors_uncorrected) AS ecc_uncorrected_max, \
           MAX(CASE WHEN simulated THEN 1 ELSE 0 END) AS simulated \
         FROM gpu_metrics WHERE sample_ms >= {from} AND sample_ms < {to}{filter} \
         GROUP BY gpu_uuid, (sample_ms - {start}) / {step}"
    );
    load_buckets(conn, sql, binds)
}

/// Rollup rows whose minute starts in `window`, summed per GPU and bucket
/// (each mean weighted by how many samples of its minute had the value).
pub(super) fn rollup_buckets(
    conn: &mut DbConnection,
    sel: &MetricsSelection,
    w: &BucketWindow,
) -> Result<Vec<GpuBucket>, DatabaseError> {
    let (filter, binds) = selection_sql(sel, placeholders(conn));
    let (start, step, from, to) = (w.start_ms, w.step_ms, w.first_ms(), w.end_ms());
    let sql = format!(
        "SELECT gpu_uuid, (bucket_ms - {start}) / {step} AS bucket, \
           MAX(gpu_index) AS gpu_index, MAX(agent_id) AS agent_id, MAX(agent_name) AS agent_name, \
           MAX(NULLIF(training_id, '')) AS training_id, MAX(rank) AS rank, \
           CAST(SUM(sample_count) AS BIGINT) AS samples, \
           SUM(utilization_gpu_mean * utilization_gpu_count) AS util_sum, \
           CAST(SUM(utilization_gpu_count) AS BIGINT) AS util_n, \
           CAST(NULL AS DOUBLE PRECISION) AS util_mem_sum, CAST(0 AS BIGINT) AS util_mem_n, \
           SUM(memory_used_mean * sample_count) AS mem_used_sum, \
           MAX(memory_total_bytes) AS mem_total_max, MAX(temperature_max) AS temp_max, \
           SUM(power_mean * power_count) AS power_sum, CAST(SUM(power_count) AS BIGINT) AS power_n, \
           CAST(NULL AS BIGINT) AS ecc_corrected_max, CAST(NULL AS BIGINT) AS ecc_uncorrected_max, \
           0 AS simulated \
         FROM gpu_metrics_rollup WHERE bucket_ms >= {from} AND bucket_ms < {to}{filter} \
         GROUP BY gpu_uuid, (bucket_ms - {start}) / {step}"
    );
    load_buckets(conn, sql, binds)
}

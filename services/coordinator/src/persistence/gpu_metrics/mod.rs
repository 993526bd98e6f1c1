//! GPU telemetry history: batched inserts of raw samples, the move of old
//! samples into 1-minute rollups, expiry ([`rollup`]), and bucketed reads
//! over both tables ([`read`], into [`bucket`]'s sums).
//!
//! Times are epoch milliseconds (`sample_ms`, `bucket_ms`) so bucket
//! arithmetic is plain integer division on both backends. Every statement
//! here is portable SQL; the only backend difference is the bind placeholder
//! (`?` on SQLite, `$n` on PostgreSQL), chosen from the connection.

mod bucket;
mod read;
mod rollup;

pub use bucket::{BucketWindow, GpuBucket};
pub use rollup::RollupRow;

use super::schema::gpu_metrics;
use super::{DatabaseError, DbConnection, Persistence};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use read::{raw_buckets, rollup_buckets};
use rollup::retention_pass_in;

/// The width of one rollup bucket.
pub const ROLLUP_MS: i64 = 60_000;

/// One raw sample as stored.
#[derive(Debug, Clone, PartialEq, Insertable, Queryable, Selectable)]
#[diesel(table_name = gpu_metrics)]
pub struct NewGpuMetric {
    pub gpu_uuid: String,
    pub gpu_index: i32,
    pub agent_id: String,
    pub agent_name: String,
    pub training_id: Option<String>,
    pub rank: Option<i32>,
    pub sample_time: NaiveDateTime,
    pub sample_ms: i64,
    pub utilization_gpu_percent: Option<f64>,
    pub utilization_memory_percent: Option<f64>,
    pub memory_used_bytes: i64,
    pub memory_total_bytes: i64,
    pub temperature_celsius: Option<f64>,
    pub power_draw_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_mhz: Option<i32>,
    pub memory_clock_mhz: Option<i32>,
    pub ecc_errors_corrected: Option<i64>,
    pub ecc_errors_uncorrected: Option<i64>,
    pub throttle_reasons: String,
    pub simulated: bool,
}

/// Rows per INSERT statement: 21 binds a row stays under both backends'
/// bind-parameter limits (SQLite 32766, PostgreSQL 65535).
const INSERT_CHUNK: usize = 1000;

/// What one retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPass {
    /// Raw samples older than the raw cutoff, folded into rollups and deleted.
    pub raw_rolled_up: usize,
    /// Rollup rows inserted or merged into.
    pub rollups_written: usize,
    /// Rollup rows older than the rollup cutoff, deleted.
    pub rollups_expired: usize,
}

/// Which samples a history read concerns (empty lists match everything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSelection {
    /// Agent ids or names.
    pub agents: Vec<String>,
    pub gpu_uuids: Vec<String>,
    /// Empty: any (or no) holder.
    pub training_id: String,
}

impl Persistence {
    /// Inserts raw samples: one transaction, multi-row INSERTs of up to
    /// 1000 rows each. Returns how many rows were written.
    pub async fn insert_gpu_metrics(
        &self,
        rows: Vec<NewGpuMetric>,
    ) -> Result<usize, DatabaseError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let rows = std::sync::Arc::new(rows);
        self.transaction("insert_gpu_metrics", move |c| {
            let mut written = 0;
            for chunk in rows.chunks(INSERT_CHUNK) {
                // Multi-row INSERTs are per backend (the multi-connection can't batch).
                let insert = diesel::insert_into(gpu_metrics::table).values(chunk);
                written += match c {
                    DbConnection::Pg(pg) => insert.execute(pg)?,
                    DbConnection::Sqlite(lite) => insert.execute(lite)?,
                };
            }
            Ok(written)
        })
        .await
    }

    /// One retention pass (see `retention_pass_in`); `raw_cutoff_ms` is
    /// rounded down to a minute so only complete minutes are rolled up.
    pub async fn gpu_metrics_retention(
        &self,
        raw_cutoff_ms: i64,
        rollup_cutoff_ms: i64,
    ) -> Result<RetentionPass, DatabaseError> {
        let raw_cutoff_ms = raw_cutoff_ms.div_euclid(ROLLUP_MS) * ROLLUP_MS;
        self.transaction("gpu_metrics_retention", move |c| {
            retention_pass_in(c, raw_cutoff_ms, rollup_cutoff_ms)
        })
        .await
    }

    /// Per GPU and bucket sums over `window`, from raw samples and rollups
    /// together (a sample is in exactly one of them), unmerged: several
    /// entries may share a (GPU, bucket); `GpuBucket::merge` folds them.
    pub async fn gpu_metric_buckets(
        &self,
        selection: MetricsSelection,
        window: BucketWindow,
    ) -> Result<Vec<GpuBucket>, DatabaseError> {
        self.read("gpu_metric_buckets", move |c| {
            let mut all = raw_buckets(c, &selection, &window)?;
            all.extend(rollup_buckets(c, &selection, &window)?);
            Ok(all)
        })
        .await
    }
}

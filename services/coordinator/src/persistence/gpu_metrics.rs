//! GPU telemetry history: batched inserts of raw samples, the move of old
//! samples into 1-minute rollups, expiry, and bucketed reads over both tables.
//!
//! Times are epoch milliseconds (`sample_ms`, `bucket_ms`) so bucket
//! arithmetic is plain integer division on both backends. Every statement
//! here is portable SQL; the only backend difference is the bind placeholder
//! (`?` on SQLite, `$n` on PostgreSQL), chosen from the connection.

use super::schema::gpu_metrics;
use super::{DatabaseError, DbConnection, Persistence};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text};

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

/// The buckets of a read: `[start_ms + i*step_ms, ...)` for i in
/// `first..end` (bucket indexes relative to `start_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketWindow {
    pub start_ms: i64,
    pub step_ms: i64,
    pub first: i64,
    pub end: i64,
    /// The query's end: samples at or after it are left out even inside the last bucket.
    pub until_ms: i64,
}

impl BucketWindow {
    fn first_ms(&self) -> i64 {
        self.start_ms + self.first * self.step_ms
    }
    fn end_ms(&self) -> i64 {
        (self.start_ms + self.end * self.step_ms).min(self.until_ms)
    }
}

/// Sums and counts of one GPU in one bucket, from raw samples or rollups;
/// partial sums from both sources merge exactly (see `GpuBucket::merge`).
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct GpuBucket {
    #[diesel(sql_type = Text)]
    pub gpu_uuid: String,
    #[diesel(sql_type = BigInt)]
    pub bucket: i64,
    #[diesel(sql_type = Integer)]
    pub gpu_index: i32,
    #[diesel(sql_type = Text)]
    pub agent_id: String,
    #[diesel(sql_type = Text)]
    pub agent_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub training_id: Option<String>,
    #[diesel(sql_type = Nullable<Integer>)]
    pub rank: Option<i32>,
    #[diesel(sql_type = BigInt)]
    pub samples: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub util_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub util_n: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub util_mem_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub util_mem_n: i64,
    #[diesel(sql_type = Double)]
    pub mem_used_sum: f64,
    #[diesel(sql_type = BigInt)]
    pub mem_total_max: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub temp_max: Option<f64>,
    #[diesel(sql_type = Nullable<Double>)]
    pub power_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub power_n: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub ecc_corrected_max: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub ecc_uncorrected_max: Option<i64>,
    #[diesel(sql_type = Integer)]
    pub simulated: i32,
}

/// Bind placeholders of the connection's backend.
fn placeholders(conn: &DbConnection) -> fn(usize) -> String {
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
fn raw_buckets(
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
fn rollup_buckets(
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
fn retention_pass_in(
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
    use super::schema::gpu_metrics_rollup as r;
    let rollups_expired =
        diesel::delete(r::table.filter(r::bucket_ms.lt(rollup_cutoff_ms))).execute(conn)?;
    Ok(RetentionPass {
        raw_rolled_up,
        rollups_written,
        rollups_expired,
    })
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

    /// Every stored raw sample of a GPU in time order (tests and tools).
    pub async fn raw_gpu_metrics(
        &self,
        gpu_uuid: &str,
    ) -> Result<Vec<NewGpuMetric>, DatabaseError> {
        let uuid = gpu_uuid.to_string();
        self.read("raw_gpu_metrics", move |c| {
            use gpu_metrics::dsl as m;
            Ok(m::gpu_metrics
                .filter(m::gpu_uuid.eq(&uuid))
                .order((m::sample_ms.asc(), m::id.asc()))
                .select(NewGpuMetric::as_select())
                .load(c)?)
        })
        .await
    }

    /// Every rollup row of a GPU in time order (tests and tools).
    pub async fn gpu_metric_rollups(
        &self,
        gpu_uuid: &str,
    ) -> Result<Vec<RollupRow>, DatabaseError> {
        let uuid = gpu_uuid.to_string();
        self.read("gpu_metric_rollups", move |c| {
            use super::schema::gpu_metrics_rollup as r;
            Ok(r::table
                .filter(r::gpu_uuid.eq(&uuid))
                .order((r::bucket_ms.asc(), r::training_id.asc()))
                .select(RollupRow::as_select())
                .load(c)?)
        })
        .await
    }
}

/// One stored rollup row.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = super::schema::gpu_metrics_rollup)]
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

impl GpuBucket {
    /// Adds another partial sum of the same GPU and bucket.
    pub fn merge(&mut self, other: &GpuBucket) {
        fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x + y),
                (x, None) => x,
                (None, y) => y,
            }
        }
        fn max<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(if y > x { y } else { x }),
                (x, None) => x,
                (None, y) => y,
            }
        }
        if other.samples > self.samples {
            // The larger part names the holder and agent.
            self.gpu_index = other.gpu_index;
            self.agent_id.clone_from(&other.agent_id);
            self.agent_name.clone_from(&other.agent_name);
            self.training_id.clone_from(&other.training_id);
            self.rank = other.rank;
        }
        self.samples += other.samples;
        self.util_sum = add(self.util_sum, other.util_sum);
        self.util_n += other.util_n;
        self.util_mem_sum = add(self.util_mem_sum, other.util_mem_sum);
        self.util_mem_n += other.util_mem_n;
        self.mem_used_sum += other.mem_used_sum;
        self.mem_total_max = self.mem_total_max.max(other.mem_total_max);
        self.temp_max = max(self.temp_max, other.temp_max);
        self.power_sum = add(self.power_sum, other.power_sum);
        self.power_n += other.power_n;
        self.ecc_corrected_max = max(self.ecc_corrected_max, other.ecc_corrected_max);
        self.ecc_uncorrected_max = max(self.ecc_uncorrected_max, other.ecc_uncorrected_max);
        self.simulated = self.simulated.max(other.simulated);
    }

    fn mean(sum: Option<f64>, n: i64) -> Option<f64> {
        sum.filter(|_| n > 0).map(|s| s / n as f64)
    }
    pub fn utilization_gpu_mean(&self) -> Option<f64> {
        Self::mean(self.util_sum, self.util_n)
    }
    pub fn utilization_memory_mean(&self) -> Option<f64> {
        Self::mean(self.util_mem_sum, self.util_mem_n)
    }
    pub fn memory_used_mean(&self) -> f64 {
        if self.samples > 0 {
            self.mem_used_sum / self.samples as f64
        } else {
            0.0
        }
    }
    pub fn power_mean(&self) -> Option<f64> {
        Self::mean(self.power_sum, self.power_n)
    }
}

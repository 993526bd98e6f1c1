//! QueryGpuMetrics: stored GPU metrics over a time range, downsampled.
//!
//! Buckets are `[start + i*step, start + (i+1)*step)`, aligned to the
//! request's start; the last one is cut at the end. Each bucket of a GPU
//! carries the means of utilization, memory used and power, and the maxima
//! of temperature, total memory and ECC counts, over every sample in it
//! (buckets with no sample are left out).
//!
//! Raw samples or rollups: each sample lives in exactly one of the two
//! tables (the retention pass moves samples older than the raw window into
//! 1-minute rollups and deletes them in one transaction), so every page reads
//! both and merges the partial sums exactly: the part of the range inside the
//! raw window is answered from raw samples at any step; the part before it
//! from rollups, each minute counted in the bucket holding its start (so
//! steps under a minute see one point per minute there).
//!
//! Pages hold up to `page_size` buckets (and at most [`MAX_ENTRIES_PER_PAGE`]
//! per-GPU entries); the token names the next bucket and pins the resolved
//! end time, so later pages see the same range.

use crate::api::caller::TeamScope;
use crate::api::error::ApiError;
use crate::api::page_token::{hex, unhex};
use crate::context::Context;
use crate::model::Principal;
use crate::persistence::gpu_metrics::{BucketWindow, GpuBucket, MetricsSelection};
use chrono::{DateTime, Utc};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use std::collections::BTreeMap;
use tonic::Status;

/// The smallest step.
pub const MIN_STEP_MS: i64 = 1_000;
/// Buckets per page when `page_size` is 0.
pub const DEFAULT_PAGE_SIZE: i64 = 1_000;
/// The largest `page_size`.
pub const MAX_PAGE_SIZE: i64 = 10_000;
/// Buckets of a whole query (all pages): a bigger range needs a bigger step.
pub const MAX_BUCKETS: i64 = 1_000_000;
/// Per-GPU entries of one page (keeps a page well under gRPC's 4 MiB).
pub const MAX_ENTRIES_PER_PAGE: usize = 20_000;
/// Buckets the default step divides the range into.
const DEFAULT_BUCKETS: i64 = 100;

/// A validated query and the page it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub selection: MetricsSelection,
    pub view: v1::MetricsView,
    pub start_ms: i64,
    /// The end (exclusive), resolved once: "now" on the first page, then the token's.
    pub until_ms: i64,
    pub step_ms: i64,
    pub page_size: i64,
    /// Bucket index this page starts at.
    pub first: i64,
    /// Number of buckets in the whole range.
    pub total: i64,
    fingerprint: u64,
}

fn invalid(field: &str, description: impl Into<String>) -> Status {
    ApiError::field(field, description).into()
}

fn timestamp_ms(field: &str, t: &prost_types::Timestamp) -> Result<i64, Status> {
    if !(0..1_000_000_000).contains(&t.nanos) {
        return Err(invalid(field, "nanos must be in 0..1e9"));
    }
    DateTime::from_timestamp(t.seconds, t.nanos as u32)
        .map(|d| d.timestamp_millis())
        .ok_or_else(|| invalid(field, "out of range"))
}

fn step_ms(d: &prost_types::Duration) -> Result<i64, Status> {
    if d.seconds < 0 || d.nanos < 0 {
        return Err(invalid("step", "must not be negative"));
    }
    if d.nanos % 1_000_000 != 0 {
        return Err(invalid("step", "must be a whole number of milliseconds"));
    }
    let ms = d
        .seconds
        .checked_mul(1000)
        .and_then(|s| s.checked_add(i64::from(d.nanos / 1_000_000)))
        .ok_or_else(|| invalid("step", "too large"))?;
    if ms != 0 && ms < MIN_STEP_MS {
        return Err(invalid("step", format!("must be at least 1s, got {ms}ms")));
    }
    Ok(ms)
}

/// Ceiling division of positive numbers (`i64::div_ceil` is unstable here).
trait DivCeil {
    fn div_ceil_(self, d: i64) -> i64;
}
impl DivCeil for i64 {
    fn div_ceil_(self, d: i64) -> i64 {
        (self + d - 1) / d
    }
}

/// FNV-1a: a hash stable across builds, for binding a token to its query.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The token of the page starting at bucket `next`.
fn encode_token(plan: &Plan, next: i64) -> String {
    hex(format!("m1:{:016x}:{next}:{}", plan.fingerprint, plan.until_ms).as_bytes())
}

/// (next bucket, end ms) of a token issued for the query with `fingerprint`.
fn decode_token(token: &str, fingerprint: u64) -> Result<(i64, i64), Status> {
    let bad = |why: &str| -> Status {
        ApiError::field_with(Reason::InvalidPageToken, "page_token", why).into()
    };
    let text = unhex(token)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| bad("not a token this server issued"))?;
    let parts: Vec<&str> = text.split(':').collect();
    let ["m1", fp, next, until] = parts.as_slice() else {
        return Err(bad("not a token this server issued"));
    };
    let (Ok(fp), Ok(next), Ok(until)) = (
        u64::from_str_radix(fp, 16),
        next.parse::<i64>(),
        until.parse::<i64>(),
    ) else {
        return Err(bad("not a token this server issued"));
    };
    if fp != fingerprint {
        return Err(bad(
            "the token belongs to a query with a different filter, view, range or step",
        ));
    }
    Ok((next, until))
}

impl Plan {
    /// Validates a request; `now` resolves an unset end on the first page.
    pub fn from_request(
        req: &v1::QueryGpuMetricsRequest,
        now: DateTime<Utc>,
    ) -> Result<Self, Status> {
        let view = super::metrics_view(req.view)?;
        let start_ms = match &req.start_time {
            Some(t) => timestamp_ms("start_time", t)?,
            None => return Err(invalid("start_time", "required")),
        };
        let given_end = req
            .end_time
            .as_ref()
            .map(|t| timestamp_ms("end_time", t))
            .transpose()?;
        let step_given = req.step.as_ref().map(step_ms).transpose()?.unwrap_or(0);
        if !(0..=MAX_PAGE_SIZE).contains(&i64::from(req.page_size)) {
            return Err(invalid(
                "page_size",
                format!("must be 0..={MAX_PAGE_SIZE}, got {}", req.page_size),
            ));
        }
        let page_size = match i64::from(req.page_size) {
            0 => DEFAULT_PAGE_SIZE,
            n => n,
        };
        let filter = req.filter.clone().unwrap_or_default();
        let selection = MetricsSelection {
            agents: filter.agents,
            gpu_uuids: filter.gpu_uuids,
            training_id: filter.training_id,
        };
        // Everything that defines the result, but not the page.
        let fingerprint = fnv1a(&format!(
            "{:?}|{}|{start_ms}|{given_end:?}|{step_given}",
            selection, view as i32
        ));
        let (first, until_ms) = if req.page_token.is_empty() {
            (0, given_end.unwrap_or_else(|| now.timestamp_millis()))
        } else {
            decode_token(&req.page_token, fingerprint)?
        };
        if until_ms <= start_ms {
            let field = if given_end.is_some() {
                "end_time"
            } else {
                "start_time"
            };
            return Err(invalid(
                field,
                format!(
                    "the range is empty: end ({}) must be after start ({})",
                    fmt_ms(until_ms),
                    fmt_ms(start_ms)
                ),
            ));
        }
        let range = until_ms - start_ms;
        let step_ms = match step_given {
            0 => {
                (range.div_ceil_(DEFAULT_BUCKETS))
                    .div_ceil_(MIN_STEP_MS)
                    .max(1)
                    * MIN_STEP_MS
            }
            s => s,
        };
        let total = range.div_ceil_(step_ms);
        if total > MAX_BUCKETS {
            return Err(invalid(
                "step",
                format!(
                    "the range holds {total} buckets of {step_ms}ms; at most {MAX_BUCKETS}: use a larger step or a shorter range"
                ),
            ));
        }
        if first < 0 || first >= total {
            return Err(ApiError::field_with(
                Reason::InvalidPageToken,
                "page_token",
                "the token points outside the range",
            )
            .into());
        }
        Ok(Self {
            selection,
            view,
            start_ms,
            until_ms,
            step_ms,
            page_size,
            first,
            total,
            fingerprint,
        })
    }

    /// The buckets this page reads.
    pub fn window(&self) -> BucketWindow {
        BucketWindow {
            start_ms: self.start_ms,
            step_ms: self.step_ms,
            first: self.first,
            end: (self.first + self.page_size).min(self.total),
            until_ms: self.until_ms,
        }
    }
}

fn fmt_ms(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

fn proto_time(ms: i64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    })
}

fn gpu_metrics(b: &GpuBucket, time_ms: i64) -> v1::GpuMetrics {
    let u64_of = |v: i64| u64::try_from(v).unwrap_or(0);
    v1::GpuMetrics {
        sample: Some(v1::GpuSample {
            gpu_uuid: b.gpu_uuid.clone(),
            index: b.gpu_index,
            time: proto_time(time_ms),
            utilization_gpu_percent: b.utilization_gpu_mean(),
            utilization_memory_percent: b.utilization_memory_mean(),
            memory_used_bytes: b.memory_used_mean().round().max(0.0) as u64,
            memory_total_bytes: u64_of(b.mem_total_max),
            temperature_celsius: b.temp_max,
            power_draw_watts: b.power_mean(),
            ecc_errors_corrected: b.ecc_corrected_max.map(u64_of),
            ecc_errors_uncorrected: b.ecc_uncorrected_max.map(u64_of),
            simulated: b.simulated != 0,
            ..Default::default()
        }),
        agent_id: b.agent_id.clone(),
        agent_name: b.agent_name.clone(),
        training_id: b.training_id.clone().unwrap_or_default(),
        rank: b.rank.unwrap_or(0),
    }
}

/// The aggregated view of one bucket: over the GPUs' bucket values, total
/// memory, mean utilization, max temperature, total power (as WatchGpuMetrics).
pub fn aggregate(gpus: &[&GpuBucket]) -> v1::AggregatedGpuMetrics {
    let mut agg = super::aggregate::Aggregator::default();
    for g in gpus {
        agg.add(super::aggregate::GpuValues {
            utilization_gpu_percent: g.utilization_gpu_mean(),
            utilization_memory_percent: g.utilization_memory_mean(),
            memory_used_bytes: g.memory_used_mean().round().max(0.0) as u64,
            memory_total_bytes: u64::try_from(g.mem_total_max).unwrap_or(0),
            temperature_celsius: g.temp_max,
            power_draw_watts: g.power_mean(),
            busy: g.training_id.is_some(),
            simulated: g.simulated != 0,
        });
    }
    agg.finish()
}

/// Merges the partial sums per (bucket, GPU) and builds the page's updates,
/// oldest first; returns them and the bucket the next page starts at (None
/// when this page reaches the end of the range).
pub fn assemble(plan: &Plan, parts: Vec<GpuBucket>) -> (Vec<v1::GpuMetricsUpdate>, Option<i64>) {
    let window = plan.window();
    let mut merged: BTreeMap<i64, BTreeMap<String, GpuBucket>> = BTreeMap::new();
    for part in parts {
        let per_gpu = merged.entry(part.bucket).or_default();
        match per_gpu.get_mut(&part.gpu_uuid) {
            Some(existing) => existing.merge(&part),
            None => {
                per_gpu.insert(part.gpu_uuid.clone(), part);
            }
        }
    }
    let mut updates = Vec::new();
    let mut entries = 0usize;
    for (bucket, per_gpu) in merged {
        let mut gpus: Vec<&GpuBucket> = per_gpu.values().collect();
        gpus.sort_by(|a, b| {
            (&a.agent_name, a.gpu_index, &a.gpu_uuid).cmp(&(
                &b.agent_name,
                b.gpu_index,
                &b.gpu_uuid,
            ))
        });
        let time_ms = plan.start_ms + bucket * plan.step_ms;
        let update = match plan.view {
            v1::MetricsView::Aggregated => {
                entries += 1;
                v1::GpuMetricsUpdate {
                    time: proto_time(time_ms),
                    view: v1::MetricsView::Aggregated as i32,
                    aggregate: Some(aggregate(&gpus)),
                    ..Default::default()
                }
            }
            _ => {
                if !updates.is_empty() && entries + gpus.len() > MAX_ENTRIES_PER_PAGE {
                    return (updates, Some(bucket));
                }
                entries += gpus.len();
                v1::GpuMetricsUpdate {
                    time: proto_time(time_ms),
                    view: v1::MetricsView::PerGpu as i32,
                    gpus: gpus.iter().map(|g| gpu_metrics(g, time_ms)).collect(),
                    ..Default::default()
                }
            }
        };
        updates.push(update);
    }
    let next = (window.end < plan.total).then_some(window.end);
    (updates, next)
}

/// The RPC.
pub async fn query(
    ctx: &Context,
    who: &Principal,
    req: v1::QueryGpuMetricsRequest,
) -> Result<v1::QueryGpuMetricsResponse, Status> {
    let plan = Plan::from_request(&req, Utc::now())?;
    let mut scope = TeamScope::new(ctx, who);
    scope.check_filter(&plan.selection.training_id).await?;
    let mut parts = ctx
        .db
        .gpu_metric_buckets(plan.selection.clone(), plan.window())
        .await
        .map_err(ApiError::from)?;
    // Every GPU is shown; another team's training that held it is not named.
    for part in &mut parts {
        if let Some(id) = &part.training_id {
            if !scope.sees(id).await {
                part.training_id = Some(String::new());
                part.rank = Some(-1);
            }
        }
    }
    let (updates, next) = assemble(&plan, parts);
    Ok(v1::QueryGpuMetricsResponse {
        updates,
        next_page_token: next.map(|n| encode_token(&plan, n)).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;

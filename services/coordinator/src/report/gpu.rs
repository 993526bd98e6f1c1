//! GPU utilization and memory per rank, from a training's telemetry history
//! (the `gpu_metrics` samples, and rollups once retention folded them, each
//! tagged with the training and rank holding the GPU).

use crate::persistence::gpu_metrics::GpuBucket;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the telemetry says about the GPU(s) one rank ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RankGpuUsage {
    /// The GPUs the rank ran on (more than one after a restart elsewhere).
    pub gpu_uuids: Vec<String>,
    /// Samples seen.
    pub samples: u64,
    /// Mean over every sample; `None` when no sample reported utilization.
    pub utilization_mean_percent: Option<f64>,
    /// The highest bucket mean (a single sample at the read's resolution).
    pub utilization_max_percent: Option<f64>,
    pub memory_used_mean_bytes: u64,
    /// The highest bucket mean of memory used.
    pub memory_used_max_bytes: u64,
    pub memory_total_bytes: u64,
}

#[derive(Default)]
struct Acc {
    gpus: BTreeSet<String>,
    samples: i64,
    util_sum: f64,
    util_n: i64,
    util_max: Option<f64>,
    mem_sum: f64,
    mem_max: f64,
    total: i64,
}

/// Folds buckets (of any step, possibly several per GPU and bucket) into
/// per-rank usage; buckets without a rank are left out.
pub fn usage_by_rank(buckets: &[GpuBucket]) -> BTreeMap<i32, RankGpuUsage> {
    let mut acc: BTreeMap<i32, Acc> = BTreeMap::new();
    for b in buckets {
        let Some(rank) = b.rank else { continue };
        if b.samples <= 0 {
            continue;
        }
        let a = acc.entry(rank).or_default();
        a.gpus.insert(b.gpu_uuid.clone());
        a.samples += b.samples;
        if let (Some(sum), n) = (b.util_sum, b.util_n) {
            if n > 0 {
                a.util_sum += sum;
                a.util_n += n;
                let bucket_mean = sum / n as f64;
                a.util_max = Some(a.util_max.map_or(bucket_mean, |m| m.max(bucket_mean)));
            }
        }
        a.mem_sum += b.mem_used_sum;
        a.mem_max = a.mem_max.max(b.mem_used_sum / b.samples as f64);
        a.total = a.total.max(b.mem_total_max);
    }
    acc.into_iter()
        .map(|(rank, a)| {
            let usage = RankGpuUsage {
                gpu_uuids: a.gpus.into_iter().collect(),
                samples: a.samples as u64,
                utilization_mean_percent: (a.util_n > 0).then(|| a.util_sum / a.util_n as f64),
                utilization_max_percent: a.util_max,
                memory_used_mean_bytes: (a.mem_sum / a.samples as f64).round() as u64,
                memory_used_max_bytes: a.mem_max.round() as u64,
                memory_total_bytes: a.total.max(0) as u64,
            };
            (rank, usage)
        })
        .collect()
}

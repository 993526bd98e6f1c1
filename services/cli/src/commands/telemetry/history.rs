//! `cohort telemetry history`: QueryGpuMetrics (per GPU, every page) over
//! the last `--since`, shown as one utilization and one memory sparkline per
//! GPU, or in `-o json` as one series of points per GPU.
//!
//! The CLI always sends a step (by default the range / [`COLUMNS`], at least
//! 1 s), so it knows the bucket grid: column i is the bucket starting at
//! `start + i*step`; a bucket without samples is a blank column.

use super::args::{filter, TelemetryHistoryArgs};
use super::live::query_all;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{bytes, emit, emit_json, time};
use cohort_proto::v1::{GpuMetricsUpdate, MetricsView, QueryGpuMetricsRequest};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Columns of a sparkline with the default step.
pub const COLUMNS: u64 = 60;
/// Eighths of a cell, lowest to full.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The step the CLI asks for: `--step`, or the range / [`COLUMNS`] rounded
/// up to whole seconds, at least 1 s.
pub fn step_for(since: Duration, step: Option<Duration>) -> Duration {
    step.unwrap_or_else(|| Duration::from_secs(since.as_secs().div_ceil(COLUMNS).max(1)))
}

/// One GPU's buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub gpu_uuid: String,
    pub agent_name: String,
    pub index: i32,
    /// Bucket index -> (utilization %, memory used, memory total).
    pub points: BTreeMap<u64, (Option<f64>, u64, u64)>,
}

/// Per-GPU series from query updates (bucket i starts at `start + i*step`).
pub fn series(updates: &[GpuMetricsUpdate], start_ms: i64, step: Duration) -> Vec<Series> {
    let step_ms = step.as_millis().max(1) as i64;
    let mut by_gpu: BTreeMap<(String, i32, String), Series> = BTreeMap::new();
    for u in updates {
        let Some(t) = &u.time else { continue };
        let ms = t.seconds * 1000 + i64::from(t.nanos) / 1_000_000;
        let Ok(bucket) = u64::try_from((ms - start_ms).div_euclid(step_ms)) else {
            continue;
        };
        for g in &u.gpus {
            let Some(s) = &g.sample else { continue };
            let key = (g.agent_name.clone(), s.index, s.gpu_uuid.clone());
            by_gpu
                .entry(key)
                .or_insert_with(|| Series {
                    gpu_uuid: s.gpu_uuid.clone(),
                    agent_name: g.agent_name.clone(),
                    index: s.index,
                    points: BTreeMap::new(),
                })
                .points
                .insert(
                    bucket,
                    (
                        s.utilization_gpu_percent,
                        s.memory_used_bytes,
                        s.memory_total_bytes,
                    ),
                );
        }
    }
    by_gpu.into_values().collect()
}

/// A sparkline of `columns` cells: `value(i)` scaled to `0..=max`; a blank
/// cell where a bucket has no value.
pub fn sparkline(columns: u64, max: f64, value: impl Fn(u64) -> Option<f64>) -> String {
    (0..columns)
        .map(|i| match value(i) {
            None => ' ',
            Some(v) => {
                let frac = if max > 0.0 {
                    (v / max).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                BARS[((frac * (BARS.len() - 1) as f64).round()) as usize]
            }
        })
        .collect()
}

/// The table view: two sparklines per GPU with their ranges.
pub fn render(all: &[Series], columns: u64, start_ms: i64, step: Duration) -> String {
    if all.is_empty() {
        return "no metrics in this range".to_string();
    }
    let start = prost_types::Timestamp {
        seconds: start_ms.div_euclid(1000),
        nanos: 0,
    };
    let mut out = format!(
        "from {} in steps of {}s ({} columns; blank: no samples)\n",
        time(Some(&start)),
        step.as_secs(),
        columns
    );
    for s in all {
        let utils: Vec<f64> = s.points.values().filter_map(|p| p.0).collect();
        let mem_total = s.points.values().map(|p| p.2).max().unwrap_or(0);
        let mem_peak = s.points.values().map(|p| p.1).max().unwrap_or(0);
        let util_line = sparkline(columns, 100.0, |i| s.points.get(&i).and_then(|p| p.0));
        let mem_line = sparkline(columns, mem_total as f64, |i| {
            s.points.get(&i).map(|p| p.1 as f64)
        });
        let util_summary = if utils.is_empty() {
            "-".to_string()
        } else {
            let mean = utils.iter().sum::<f64>() / utils.len() as f64;
            let max = utils.iter().cloned().fold(f64::MIN, f64::max);
            format!("mean {mean:.0}% max {max:.0}%")
        };
        out.push_str(&format!(
            "\n{} #{} {}\n  util |{util_line}| {util_summary}\n  mem  |{mem_line}| peak {} of {}\n",
            s.agent_name,
            s.index,
            s.gpu_uuid,
            bytes(mem_peak),
            bytes(mem_total),
        ));
    }
    out.trim_end().to_string()
}

/// The JSON view: one object per GPU with its points.
pub fn to_json(all: &[Series], start_ms: i64, step: Duration) -> Value {
    let step_ms = step.as_millis() as i64;
    json!({
        "start_time": time(Some(&prost_types::Timestamp { seconds: start_ms.div_euclid(1000), nanos: 0 })),
        "step_seconds": step.as_secs_f64(),
        "gpus": all.iter().map(|s| json!({
            "gpu_uuid": s.gpu_uuid,
            "agent_name": s.agent_name,
            "index": s.index,
            "points": s.points.iter().map(|(i, p)| {
                let ms = start_ms + *i as i64 * step_ms;
                json!({
                    "time": time(Some(&prost_types::Timestamp { seconds: ms.div_euclid(1000), nanos: 0 })),
                    "utilization_gpu_percent": p.0,
                    "memory_used_bytes": p.1,
                    "memory_total_bytes": p.2,
                })
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

pub async fn history(
    coordinator: &Coordinator,
    args: &TelemetryHistoryArgs,
    out: crate::render::OutputFormat,
) -> Result<(), CliError> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let start_ms = now.saturating_sub(args.since).as_millis() as i64;
    let end_ms = now.as_millis() as i64;
    let step = step_for(args.since, args.step);
    let columns = ((end_ms - start_ms).max(1) as u64).div_ceil(step.as_millis().max(1) as u64);
    let ts = |ms: i64| prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    };
    let updates = query_all(
        coordinator,
        QueryGpuMetricsRequest {
            filter: Some(filter(&args.filter)),
            view: MetricsView::PerGpu as i32,
            start_time: Some(ts(start_ms)),
            end_time: Some(ts(end_ms)),
            step: prost_types::Duration::try_from(step).ok(),
            ..Default::default()
        },
    )
    .await?;
    let all = series(&updates, start_ms, step);
    match out {
        crate::render::OutputFormat::Json => emit_json(&to_json(&all, start_ms, step)),
        crate::render::OutputFormat::Table => emit(&render(&all, columns, start_ms, step)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::v1::{GpuMetrics, GpuSample};

    fn update(ms: i64, gpus: Vec<(&str, i32, Option<f64>, u64)>) -> GpuMetricsUpdate {
        GpuMetricsUpdate {
            time: Some(prost_types::Timestamp {
                seconds: ms / 1000,
                nanos: 0,
            }),
            view: MetricsView::PerGpu as i32,
            gpus: gpus
                .into_iter()
                .map(|(uuid, index, util, mem)| GpuMetrics {
                    sample: Some(GpuSample {
                        gpu_uuid: uuid.into(),
                        index,
                        utilization_gpu_percent: util,
                        memory_used_bytes: mem,
                        memory_total_bytes: 100,
                        ..Default::default()
                    }),
                    agent_name: "host".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn default_step_spreads_the_range_over_the_columns() {
        assert_eq!(
            step_for(Duration::from_secs(900), None),
            Duration::from_secs(15)
        );
        assert_eq!(
            step_for(Duration::from_secs(30), None),
            Duration::from_secs(1)
        );
        assert_eq!(
            step_for(Duration::from_secs(61), None),
            Duration::from_secs(2)
        );
        assert_eq!(
            step_for(Duration::from_secs(900), Some(Duration::from_secs(10))),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn sparklines_scale_and_leave_gaps_blank() {
        let values = [Some(0.0), Some(50.0), None, Some(100.0), Some(150.0)];
        assert_eq!(sparkline(5, 100.0, |i| values[i as usize]), "▁▅ ██");
        assert_eq!(sparkline(2, 0.0, |_| Some(5.0)), "▁▁");
    }

    #[test]
    fn updates_become_one_series_per_gpu_on_the_bucket_grid() {
        let start = 1_000_000;
        let step = Duration::from_secs(10);
        let updates = vec![
            update(
                start,
                vec![("GPU-b", 1, Some(10.0), 50), ("GPU-a", 0, Some(100.0), 100)],
            ),
            update(start + 20_000, vec![("GPU-a", 0, None, 25)]),
        ];
        let all = series(&updates, start, step);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].gpu_uuid, "GPU-a");
        assert_eq!(
            all[0].points.keys().copied().collect::<Vec<_>>(),
            vec![0, 2]
        );
        let text = render(&all, 3, start, step);
        assert!(
            text.contains("host #0 GPU-a\n  util |█  | mean 100% max 100%"),
            "{text}"
        );
        assert!(text.contains("  mem  |█ ▃| peak 100 B of 100 B"), "{text}");
        assert!(text.contains("host #1 GPU-b\n  util |▂  |"), "{text}");
        let j = to_json(&all, start, step);
        assert_eq!(j["step_seconds"], 10.0);
        assert_eq!(j["gpus"][0]["points"][1]["memory_used_bytes"], 25);
        assert_eq!(
            j["gpus"][0]["points"][1]["utilization_gpu_percent"],
            Value::Null
        );
        assert_eq!(render(&[], 3, start, step), "no metrics in this range");
    }
}

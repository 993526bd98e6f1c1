//! One WatchGpuMetrics stream.

use crate::fleet::{Fleet, GpuReading, ReadingFilter};
use cohort_proto::v1;
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tonic::Status;

/// How often the aggregated view is sent.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(1);

fn now() -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(SystemTime::now()))
}

fn metrics(r: &GpuReading) -> v1::GpuMetrics {
    v1::GpuMetrics {
        sample: Some(r.sample.clone()),
        agent_id: r.agent_id.clone(),
        agent_name: r.agent_name.clone(),
        training_id: r
            .hold
            .as_ref()
            .map(|h| h.training_id.clone())
            .unwrap_or_default(),
        rank: r.hold.as_ref().map_or(-1, |h| h.rank),
    }
}

/// The aggregated view over `readings` (reference design §5.1).
pub fn aggregated(readings: &[GpuReading]) -> v1::AggregatedGpuMetrics {
    let agg = crate::fleet::aggregate(readings.iter().map(|r| &r.sample));
    let mem_utils: Vec<f64> = readings
        .iter()
        .filter_map(|r| r.sample.utilization_memory_percent)
        .collect();
    v1::AggregatedGpuMetrics {
        gpu_count: agg.gpu_count as i32,
        busy_count: readings.iter().filter(|r| r.hold.is_some()).count() as i32,
        simulated_count: readings.iter().filter(|r| r.sample.simulated).count() as i32,
        mean_utilization_gpu_percent: agg.mean_utilization_gpu_percent.unwrap_or(0.0),
        mean_utilization_memory_percent: if mem_utils.is_empty() {
            0.0
        } else {
            mem_utils.iter().sum::<f64>() / mem_utils.len() as f64
        },
        memory_used_bytes: agg.memory_used_bytes,
        memory_total_bytes: agg.memory_total_bytes,
        max_temperature_celsius: agg.max_temperature_celsius.unwrap_or(0.0),
        power_draw_watts: agg.total_power_draw_watts.unwrap_or(0.0),
    }
}

fn update(view: v1::MetricsView, readings: &[GpuReading]) -> v1::GpuMetricsUpdate {
    let (gpus, aggregate) = match view {
        v1::MetricsView::Aggregated => (Vec::new(), Some(aggregated(readings))),
        _ => (readings.iter().map(metrics).collect(), None),
    };
    v1::GpuMetricsUpdate {
        time: now(),
        view: view as i32,
        gpus,
        aggregate,
        lagged: None,
    }
}

/// Stream updates to `tx` until the watcher goes away.
pub async fn run(
    fleet: Fleet,
    view: v1::MetricsView,
    filter: ReadingFilter,
    tx: mpsc::Sender<Result<v1::GpuMetricsUpdate, Status>>,
) {
    let mut batches = fleet.subscribe_telemetry();
    let snapshot = |fleet: &Fleet| -> Vec<GpuReading> {
        fleet
            .snapshot()
            .into_iter()
            .filter(|r| filter.matches(r))
            .collect()
    };
    // What is known now, at once.
    if tx.send(Ok(update(view, &snapshot(&fleet)))).await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval(AGGREGATE_INTERVAL);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            _ = tick.tick(), if view == v1::MetricsView::Aggregated => {
                if tx.send(Ok(update(view, &snapshot(&fleet)))).await.is_err() {
                    return;
                }
            }
            batch = batches.recv() => match batch {
                Ok(batch) if view == v1::MetricsView::PerGpu => {
                    let readings: Vec<GpuReading> =
                        batch.readings.iter().filter(|r| filter.matches(r)).cloned().collect();
                    if !readings.is_empty() && tx.send(Ok(update(view, &readings))).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    let notice = v1::GpuMetricsUpdate {
                        time: now(),
                        view: view as i32,
                        lagged: Some(v1::Lagged { missed_events: missed, first_missed_sequence: 0 }),
                        ..Default::default()
                    };
                    if tx.send(Ok(notice)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}

//! The batched writer of raw samples. A collector task reads the fleet's
//! telemetry broadcast (never blocking ingest: a broadcast send does not
//! wait) and buffers rows; every `flush_interval` or `flush_rows` rows it
//! hands the buffer to the flusher through a bounded channel, and the
//! flusher writes it as ONE transaction of multi-row INSERTs. When the
//! flusher can't keep up the channel is full and the buffer is dropped and
//! counted; batches the collector itself missed on the broadcast are counted
//! too. Nothing here ever waits on an agent session.

use super::{HistorySettings, WriterStats};
use crate::fleet::{GpuReading, TelemetryBatch};
use crate::persistence::gpu_metrics::NewGpuMetric;
use crate::persistence::Persistence;
use chrono::SubsecRound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, watch};

/// Full buffers waiting for the flusher before new ones are dropped.
const PENDING_FLUSHES: usize = 4;
/// At most one "dropping samples" warning per this long.
const DROP_LOG_EVERY: Duration = Duration::from_secs(10);

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A reading as a row, its time to the millisecond.
pub fn row(r: &GpuReading) -> NewGpuMetric {
    let s = &r.sample;
    let time = s.time.trunc_subsecs(3);
    NewGpuMetric {
        gpu_uuid: s.gpu_uuid.clone(),
        gpu_index: s.index,
        agent_id: r.agent_id.clone(),
        agent_name: r.agent_name.clone(),
        training_id: r.hold.as_ref().map(|h| h.training_id.clone()),
        rank: r.hold.as_ref().map(|h| h.rank),
        sample_time: time.naive_utc(),
        sample_ms: time.timestamp_millis(),
        utilization_gpu_percent: s.utilization_gpu_percent,
        utilization_memory_percent: s.utilization_memory_percent,
        memory_used_bytes: clamp_i64(s.memory_used_bytes),
        memory_total_bytes: clamp_i64(s.memory_total_bytes),
        temperature_celsius: s.temperature_celsius,
        power_draw_watts: s.power_draw_watts,
        power_limit_watts: s.power_limit_watts,
        sm_clock_mhz: s.sm_clock_mhz.map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        memory_clock_mhz: s
            .memory_clock_mhz
            .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        ecc_errors_corrected: s.ecc_errors_corrected.map(clamp_i64),
        ecc_errors_uncorrected: s.ecc_errors_uncorrected.map(clamp_i64),
        throttle_reasons: s.throttle_reasons.join(","),
        simulated: s.simulated,
    }
}

struct Collector {
    settings: HistorySettings,
    stats: Arc<WriterStats>,
    flushes: mpsc::Sender<Vec<NewGpuMetric>>,
    buffer: Vec<NewGpuMetric>,
    last_drop_log: Option<Instant>,
}

impl Collector {
    fn push(&mut self, batch: &TelemetryBatch) {
        self.buffer.extend(batch.readings.iter().map(row));
        if self.buffer.len() >= self.settings.flush_rows {
            self.hand_off();
        }
    }

    fn hand_off(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let rows = std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(self.settings.flush_rows),
        );
        let n = rows.len() as u64;
        if let Err(e) = self.flushes.try_send(rows) {
            let reason = match e {
                mpsc::error::TrySendError::Full(_) => "writer behind",
                mpsc::error::TrySendError::Closed(_) => "writer stopped",
            };
            self.dropped(n, reason);
        }
    }

    fn dropped(&mut self, rows: u64, reason: &'static str) {
        let total = self.stats.dropped_rows.fetch_add(rows, Ordering::Relaxed) + rows;
        if self
            .last_drop_log
            .is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY)
        {
            self.last_drop_log = Some(Instant::now());
            tracing::warn!(
                dropped = rows,
                dropped_total = total,
                reason,
                "gpu metrics history dropping samples"
            );
        }
    }

    fn lagged(&mut self, batches: u64) {
        let total = self
            .stats
            .lagged_batches
            .fetch_add(batches, Ordering::Relaxed)
            + batches;
        tracing::warn!(
            missed_batches = batches,
            missed_total = total,
            "gpu metrics history missed telemetry batches"
        );
    }
}

/// Runs until `stop` turns true (then flushes what it holds) and returns
/// when the last flush is written.
pub async fn run(
    db: Persistence,
    mut telemetry: broadcast::Receiver<Arc<TelemetryBatch>>,
    settings: HistorySettings,
    stats: Arc<WriterStats>,
    mut stop: watch::Receiver<bool>,
) {
    let (tx, mut rx) = mpsc::channel::<Vec<NewGpuMetric>>(PENDING_FLUSHES);
    let flusher_stats = stats.clone();
    let flusher = tokio::spawn(async move {
        while let Some(rows) = rx.recv().await {
            let n = rows.len() as u64;
            match db.insert_gpu_metrics(rows).await {
                Ok(written) => {
                    flusher_stats
                        .written_rows
                        .fetch_add(written as u64, Ordering::Relaxed);
                    flusher_stats.flushes.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    flusher_stats.failed_rows.fetch_add(n, Ordering::Relaxed);
                    tracing::error!(rows = n, error = %e, "cannot write gpu metrics history");
                }
            }
        }
    });
    let mut collector = Collector {
        buffer: Vec::with_capacity(settings.flush_rows),
        settings: settings.clone(),
        stats,
        flushes: tx,
        last_drop_log: None,
    };
    let mut tick = tokio::time::interval(settings.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = super::stopped(&mut stop) => break,
            _ = tick.tick() => collector.hand_off(),
            batch = telemetry.recv() => match batch {
                Ok(batch) => collector.push(&batch),
                Err(broadcast::error::RecvError::Lagged(n)) => collector.lagged(n),
                Err(broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    // What arrived before the stop still goes in.
    while let Ok(batch) = telemetry.try_recv() {
        collector.push(&batch);
    }
    collector.hand_off();
    drop(collector);
    let _ = flusher.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Hold;
    use crate::model::GpuSample;
    use chrono::DateTime;

    #[test]
    fn a_reading_becomes_a_row_with_its_holder() {
        let reading = GpuReading {
            agent_id: "agt-1".into(),
            agent_name: "host-a".into(),
            hold: Some(Hold {
                training_id: "trn-1".into(),
                attempt: 1,
                rank: 3,
                team: String::new(),
            }),
            sample: GpuSample {
                gpu_uuid: "GPU-1".into(),
                index: 2,
                time: DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap(),
                utilization_gpu_percent: Some(50.0),
                memory_used_bytes: 10,
                memory_total_bytes: u64::MAX,
                sm_clock_mhz: Some(1500),
                throttle_reasons: vec!["a".into(), "b".into()],
                simulated: true,
                ..Default::default()
            },
        };
        let r = row(&reading);
        assert_eq!(r.sample_ms, 1_700_000_000_123);
        assert_eq!((r.training_id.as_deref(), r.rank), (Some("trn-1"), Some(3)));
        assert_eq!((r.gpu_index, r.agent_name.as_str()), (2, "host-a"));
        assert_eq!(r.memory_total_bytes, i64::MAX);
        assert_eq!(r.sm_clock_mhz, Some(1500));
        assert_eq!(r.throttle_reasons, "a,b");
        assert!(r.simulated);

        let unheld = GpuReading {
            hold: None,
            ..reading
        };
        let r = row(&unheld);
        assert_eq!((r.training_id, r.rank), (None, None));
    }

    fn batch(n: usize) -> TelemetryBatch {
        TelemetryBatch {
            received: Instant::now(),
            readings: (0..n)
                .map(|i| GpuReading {
                    agent_id: "agt".into(),
                    agent_name: "host".into(),
                    hold: None,
                    sample: GpuSample {
                        gpu_uuid: format!("GPU-{i}"),
                        ..Default::default()
                    },
                })
                .collect(),
            encoded: Default::default(),
        }
    }

    #[test]
    fn full_buffers_go_to_the_flusher_and_are_dropped_and_counted_when_it_is_behind() {
        let (tx, mut rx) = mpsc::channel(1);
        let stats = Arc::new(WriterStats::default());
        let mut collector = Collector {
            settings: HistorySettings {
                flush_rows: 3,
                ..Default::default()
            },
            stats: stats.clone(),
            flushes: tx,
            buffer: Vec::new(),
            last_drop_log: None,
        };
        collector.push(&batch(2));
        assert!(rx.try_recv().is_err(), "below flush_rows: still buffered");
        collector.push(&batch(2));
        // 4 rows >= 3: handed off as one flush; the channel is now full.
        collector.push(&batch(3));
        assert_eq!(stats.counts().dropped_rows, 3);
        assert_eq!(rx.try_recv().unwrap().len(), 4);
        collector.push(&batch(1));
        collector.hand_off(); // the interval tick
        assert_eq!(rx.try_recv().unwrap().len(), 1);
        collector.hand_off(); // nothing buffered: nothing sent
        assert!(rx.try_recv().is_err());
        drop(rx);
        collector.push(&batch(5));
        assert_eq!(stats.counts().dropped_rows, 8, "a stopped writer drops too");
    }
}

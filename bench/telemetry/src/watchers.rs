//! Watchers: each one its own HTTP/2 connection and
//! `TelemetryService/WatchGpuMetrics` stream (PER_GPU view, no filter). For
//! every sample of the measured window it receives it records
//! receive time - sample time.

use crate::histogram::Histogram;
use crate::window::{timestamp_micros, unix_micros, Window};
use anyhow::Context as _;
use cohort_proto::v1;
use cohort_proto::v1::telemetry_service_client::TelemetryServiceClient;
use std::time::SystemTime;
use tokio::time::Instant;
use tonic::Streaming;

/// What one watcher saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Samples of the window received.
    pub received: u64,
    /// Samples received more than once (should stay 0).
    pub duplicates: u64,
    /// Lagged notices and the batches they say were missed.
    pub lagged_notices: u64,
    pub missed_batches: u64,
    /// Sample-to-watcher latency of the window's samples, microseconds.
    pub latency: Histogram,
    /// Why the stream ended early, if it did.
    pub error: Option<String>,
}

/// A watcher whose stream is open and has delivered its first update.
pub struct Open {
    stream: Streaming<v1::GpuMetricsUpdate>,
}

pub async fn open(url: &str) -> anyhow::Result<Open> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("watcher: connecting to {url}"))?;
    let mut client = TelemetryServiceClient::new(channel).max_decoding_message_size(64 << 20);
    let mut stream = client
        .watch_gpu_metrics(v1::WatchGpuMetricsRequest {
            view: v1::MetricsView::PerGpu as i32,
            filter: None,
        })
        .await
        .context("WatchGpuMetrics")?
        .into_inner();
    // The first update is the snapshot sent on subscribing: after it, every
    // batch the coordinator ingests reaches this stream.
    stream
        .message()
        .await
        .context("WatchGpuMetrics: first update")?;
    Ok(Open { stream })
}

impl Open {
    /// Reads until `stop`.
    pub async fn run(mut self, window: Window, stop: Instant) -> Seen {
        let mut seen = Seen::default();
        // Per GPU uuid, the newest sample time seen, to spot duplicates.
        let mut newest: std::collections::HashMap<String, i64> = Default::default();
        loop {
            let update = tokio::select! {
                m = self.stream.message() => m,
                _ = tokio::time::sleep_until(stop) => break,
            };
            let received = unix_micros(SystemTime::now());
            let update = match update {
                Ok(Some(u)) => u,
                Ok(None) => {
                    seen.error = Some("stream ended".into());
                    break;
                }
                Err(status) => {
                    seen.error = Some(status.to_string());
                    break;
                }
            };
            if let Some(lagged) = update.lagged {
                seen.lagged_notices += 1;
                seen.missed_batches += lagged.missed_events;
                continue;
            }
            for gpu in update.gpus {
                let Some(sample) = gpu.sample else { continue };
                let Some(time) = sample.time.as_ref() else {
                    continue;
                };
                let micros = timestamp_micros(time);
                if !window.contains(micros.div_euclid(1000)) {
                    continue;
                }
                match newest.get_mut(&sample.gpu_uuid) {
                    Some(t) if *t >= micros => {
                        seen.duplicates += 1;
                        continue;
                    }
                    Some(t) => *t = micros,
                    None => {
                        newest.insert(sample.gpu_uuid, micros);
                    }
                }
                seen.received += 1;
                seen.latency.record((received - micros).max(0) as u64);
            }
        }
        seen
    }
}

//! One WatchGpuMetrics stream.
//!
//! PER_GPU: the watcher coalesces. The first batch after a quiet spell goes
//! out at once; whatever arrives in the next [`COALESCE_WINDOW`] is merged
//! into ONE update, so a watcher sends at most ~1 / [`COALESCE_WINDOW`]
//! updates a second however many agents report. Each GPU entry is encoded
//! once per batch (the first watcher to need it does it) and its bytes are
//! shared by every watcher (see `wire`). AGGREGATED: the aggregate of the
//! latest samples once per [`AGGREGATE_INTERVAL`].

use super::wire::EncodedUpdate;
use crate::fleet::WatcherGuard;
use crate::fleet::{Fleet, GpuReading, Hold, ReadingFilter, TelemetryBatch};
use cohort_proto::v1;
use prost::bytes::Bytes;
use prost::Message;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

/// How often the aggregated view is sent.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(1);
/// PER_GPU: the longest a sample waits to be merged with later ones; also
/// the shortest time between two updates of one watcher (unless one is full).
pub const COALESCE_WINDOW: Duration = Duration::from_millis(50);
/// PER_GPU: most GPU entries in one update (~200 bytes each); more go out in
/// further updates at once, far below a client's default 4 MiB message limit.
pub const MAX_GPUS_PER_UPDATE: usize = 4096;
/// Updates queued for the client. Few: for a slow client one bigger
/// coalesced update later beats a queue of small ones (memory, freshness).
pub const QUEUE: usize = 2;

pub(super) type Tx = mpsc::Sender<Result<EncodedUpdate, Status>>;

fn now() -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(SystemTime::now()))
}

fn metrics(r: &GpuReading, hold: Option<&Hold>) -> v1::GpuMetrics {
    v1::GpuMetrics {
        sample: Some(v1::GpuSample::from(&r.sample)),
        agent_id: r.agent_id.clone(),
        agent_name: r.agent_name.clone(),
        training_id: hold.map(|h| h.training_id.clone()).unwrap_or_default(),
        rank: hold.map_or(-1, |h| h.rank),
    }
}

/// `r` as the watcher with `filter` may see it: another team's training
/// holding the GPU is not named.
fn visible_metrics(r: &GpuReading, filter: &ReadingFilter) -> v1::GpuMetrics {
    match filter.redacted_hold(r) {
        Some(hold) => metrics(r, Some(&hold)),
        None => metrics(r, r.hold.as_ref()),
    }
}

/// The aggregated view over `readings` (reference design §5.1).
pub fn aggregated(readings: &[GpuReading]) -> v1::AggregatedGpuMetrics {
    let mut agg = super::aggregate::Aggregator::default();
    for r in readings {
        agg.add(super::aggregate::GpuValues::of_sample(
            &r.sample,
            r.hold.is_some(),
        ));
    }
    agg.finish()
}

fn per_gpu_update(gpus: Vec<Bytes>) -> EncodedUpdate {
    EncodedUpdate {
        time: now(),
        view: v1::MetricsView::PerGpu as i32,
        gpus,
        aggregate: None,
        lagged: None,
    }
}

fn update(view: v1::MetricsView, readings: &[GpuReading], filter: &ReadingFilter) -> EncodedUpdate {
    match view {
        v1::MetricsView::Aggregated => EncodedUpdate {
            time: now(),
            view: view as i32,
            aggregate: Some(aggregated(readings)),
            ..Default::default()
        },
        _ => per_gpu_update(
            readings
                .iter()
                .map(|r| Bytes::from(visible_metrics(r, filter).encode_to_vec()))
                .collect(),
        ),
    }
}

fn lagged_notice(view: v1::MetricsView, missed: u64) -> EncodedUpdate {
    EncodedUpdate {
        time: now(),
        view: view as i32,
        lagged: Some(v1::Lagged {
            missed_events: missed,
            first_missed_sequence: 0,
        }),
        ..Default::default()
    }
}

/// The batch's readings as encoded `v1::GpuMetrics`: encoded by the first
/// caller, shared afterwards.
fn encoded(batch: &TelemetryBatch) -> &[Bytes] {
    batch.encoded.get_or_init(|| {
        batch
            .readings
            .iter()
            .map(|r| Bytes::from(metrics(r, r.hold.as_ref()).encode_to_vec()))
            .collect()
    })
}

/// The PER_GPU entries a watcher has taken in but not sent yet, in arrival order.
#[derive(Debug, Default)]
pub(super) struct Coalescer {
    filter: ReadingFilter,
    /// Encoded `v1::GpuMetrics`.
    pending: Vec<Bytes>,
}

impl Coalescer {
    pub(super) fn new(filter: ReadingFilter) -> Self {
        Self {
            filter,
            pending: Vec::new(),
        }
    }

    /// Takes in the batch's readings that the filter lets through (the
    /// shared encoding, or one of its own where a hold is redacted).
    pub(super) fn push(&mut self, batch: &TelemetryBatch) {
        let filter = &self.filter;
        self.pending.extend(
            batch
                .readings
                .iter()
                .zip(encoded(batch))
                .filter(|(r, _)| filter.matches(r))
                .map(|(r, bytes)| match filter.redacted_hold(r) {
                    Some(hold) => Bytes::from(metrics(r, Some(&hold)).encode_to_vec()),
                    None => bytes.clone(),
                }),
        );
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Enough for a full update.
    pub(super) fn is_full(&self) -> bool {
        self.pending.len() >= MAX_GPUS_PER_UPDATE
    }

    /// The oldest pending entries (at most [`MAX_GPUS_PER_UPDATE`]) as one
    /// update; `None` when nothing is pending.
    pub(super) fn take(&mut self) -> Option<EncodedUpdate> {
        if self.pending.is_empty() {
            return None;
        }
        let gpus = if self.pending.len() <= MAX_GPUS_PER_UPDATE {
            std::mem::take(&mut self.pending)
        } else {
            let rest = self.pending.split_off(MAX_GPUS_PER_UPDATE);
            std::mem::replace(&mut self.pending, rest)
        };
        Some(per_gpu_update(gpus))
    }
}

/// Whether the stream goes on.
enum Flow {
    Continue,
    Stop,
}

/// A PER_GPU watcher's state between batches.
struct PerGpu {
    tx: Tx,
    /// Counts this watcher as open, and its lag.
    open: WatcherGuard,
    coalescer: Coalescer,
    /// When the pending entries go out; `None` when nothing is pending.
    flush_at: Option<Instant>,
    last_sent: Option<Instant>,
}

impl PerGpu {
    async fn send(&self, update: EncodedUpdate) -> Flow {
        match self.tx.send(Ok(update)).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop,
        }
    }

    /// Sends everything pending (in as many updates as it takes).
    async fn flush(&mut self) -> Flow {
        self.flush_at = None;
        while let Some(update) = self.coalescer.take() {
            if let Flow::Stop = self.send(update).await {
                return Flow::Stop;
            }
            self.last_sent = Some(Instant::now());
        }
        Flow::Continue
    }

    /// One event of the fan-out: the only place a watcher's lag is handled.
    async fn on_event(&mut self, event: Result<Arc<TelemetryBatch>, RecvError>) -> Flow {
        match event {
            Ok(batch) => {
                self.coalescer.push(&batch);
                if self.coalescer.is_full() {
                    return self.flush().await;
                }
                if self.flush_at.is_none() && !self.coalescer.is_empty() {
                    let now = Instant::now();
                    self.flush_at = Some(
                        self.last_sent
                            .map_or(now, |t| (t + COALESCE_WINDOW).max(now)),
                    );
                }
                Flow::Continue
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::debug!(missed_batches = missed, "telemetry watcher lagged");
                self.open.lagged(missed);
                // What is pending came before the gap: it goes first.
                if let Flow::Stop = self.flush().await {
                    return Flow::Stop;
                }
                self.send(lagged_notice(v1::MetricsView::PerGpu, missed))
                    .await
            }
            Err(RecvError::Closed) => {
                let _ = self.flush().await;
                Flow::Stop
            }
        }
    }

    /// Takes in every batch already waiting, without waiting for more.
    async fn drain(&mut self, batches: &mut broadcast::Receiver<Arc<TelemetryBatch>>) -> Flow {
        // Bounded: a fast producer can't keep this loop from sending.
        for _ in 0..crate::fleet::TELEMETRY_BUFFER {
            let event = match batches.try_recv() {
                Ok(batch) => Ok(batch),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(missed)) => Err(RecvError::Lagged(missed)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
            };
            if let Flow::Stop = self.on_event(event).await {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }
}

/// Stream updates to `tx` until the watcher goes away or the server stops.
pub async fn run(
    fleet: Fleet,
    view: v1::MetricsView,
    filter: ReadingFilter,
    tx: Tx,
    stopping: watch::Receiver<bool>,
    open: WatcherGuard,
) {
    let stop = crate::context::stopped(stopping);
    // Subscribe before the snapshot, so no batch falls between the two.
    let batches = (view == v1::MetricsView::PerGpu).then(|| fleet.subscribe_telemetry());
    let snapshot: Vec<GpuReading> = fleet
        .snapshot()
        .into_iter()
        .filter(|r| filter.matches(r))
        .collect();
    // What is known now, at once.
    if tx.send(Ok(update(view, &snapshot, &filter))).await.is_err() {
        return;
    }
    match batches {
        Some(batches) => run_per_gpu(batches, filter, tx, stop, open).await,
        None => {
            let _open = open;
            run_aggregated(fleet, filter, tx, stop).await
        }
    }
}

async fn run_aggregated(
    fleet: Fleet,
    filter: ReadingFilter,
    tx: Tx,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(AGGREGATE_INTERVAL);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tx.closed() => return,
            _ = tick.tick() => {
                let readings: Vec<GpuReading> = fleet
                    .snapshot()
                    .into_iter()
                    .filter(|r| filter.matches(r))
                    .collect();
                if tx.send(Ok(update(v1::MetricsView::Aggregated, &readings, &filter))).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn run_per_gpu(
    mut batches: broadcast::Receiver<Arc<TelemetryBatch>>,
    filter: ReadingFilter,
    tx: Tx,
    stop: impl Future<Output = ()>,
    open: WatcherGuard,
) {
    tokio::pin!(stop);
    let mut watcher = PerGpu {
        tx,
        open,
        coalescer: Coalescer::new(filter),
        flush_at: None,
        last_sent: None,
    };
    loop {
        let flush_at = watcher.flush_at;
        let flow = tokio::select! {
            biased;
            _ = &mut stop => Flow::Stop,
            _ = watcher.tx.closed() => Flow::Stop,
            _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                match watcher.drain(&mut batches).await {
                    Flow::Continue => watcher.flush().await,
                    Flow::Stop => Flow::Stop,
                }
            }
            event = batches.recv() => watcher.on_event(event).await,
        };
        if let Flow::Stop = flow {
            return;
        }
    }
}

#[cfg(test)]
mod tests;

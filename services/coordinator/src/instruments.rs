//! The coordinator's OpenTelemetry metrics, exported over OTLP with the
//! traces when `--otlp-endpoint` is set (no-ops otherwise). Beside the
//! `rpc.server.call.duration` histogram of every gRPC call
//! (`cohort_observe::grpc`):
//!
//! | instrument | kind | attributes |
//! |---|---|---|
//! | `cohort.trainings` | gauge | `state` |
//! | `cohort.agents.connected` | gauge | |
//! | `cohort.telemetry.samples` | counter (ingest rate) | |
//! | `cohort.telemetry.batches` | counter | |
//! | `cohort.telemetry.watchers` | gauge | |
//! | `cohort.telemetry.watcher_lag_notices` | counter (lagged watchers) | |
//! | `cohort.telemetry.watcher_missed_batches` | counter | |
//! | `cohort.telemetry.history_dropped_rows` | counter | |
//! | `cohort.alerts.active` | gauge | `kind`, `severity` |
//! | `cohort.db.operation.duration` (s) | histogram | `db.operation`, `outcome` (`ok`, `error`) |
//! | `cohort.agent.refused_samples`, `cohort.agent.refused_rank_events` | counters | |
//! | `gpu.utilization` (%), `gpu.memory.used` / `gpu.memory.total` (By), `gpu.temperature` (Cel), `gpu.power.draw` (W) | gauges | `gpu.uuid`, `gpu.index`, `agent`, `host`, `training.id`, `training.rank` |
//!
//! Observations are taken when the exporter collects. Trainings by state
//! need the database, which a collection callback can't await: a task keeps
//! them fresh (every [`TRAININGS_REFRESH`]), starting only once a collection
//! asked for them, so nothing queries the database when nothing exports.

use crate::alerts::AlertKind;
use crate::context::Context;
use crate::model::JobState;
use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How often trainings by state are re-counted while metrics are exported.
pub const TRAININGS_REFRESH: Duration = Duration::from_secs(5);

/// The registered instruments; dropping it stops the refresher.
pub struct Instruments {
    _instruments: Vec<Box<dyn std::any::Any + Send + Sync>>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Drop for Instruments {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

type Cached = Arc<Mutex<Vec<(String, i64)>>>;

type Labelled = Arc<Vec<(Vec<KeyValue>, crate::fleet::GpuReading)>>;

/// How long the labelled GPU readings are reused: the five GPU gauges are
/// observed one after the other in one collection and share one snapshot.
const GPU_SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// The fleet's GPU readings with their attributes, taken at most once per
/// [`GPU_SNAPSHOT_TTL`].
#[derive(Clone, Default)]
struct GpuSnapshot(Arc<Mutex<Option<(std::time::Instant, Labelled)>>>);

impl GpuSnapshot {
    fn get(&self, ctx: &Context) -> Labelled {
        let mut cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some((at, readings)) if at.elapsed() < GPU_SNAPSHOT_TTL => readings.clone(),
            _ => {
                let readings = Arc::new(gpu_attributes(ctx));
                *cached = Some((std::time::Instant::now(), readings.clone()));
                readings
            }
        }
    }
}

fn gpu_attributes(ctx: &Context) -> Vec<(Vec<KeyValue>, crate::fleet::GpuReading)> {
    let hosts: HashMap<String, String> = ctx
        .fleet
        .agents()
        .into_iter()
        .map(|a| (a.id, a.host_name))
        .collect();
    ctx.fleet
        .snapshot()
        .into_iter()
        .map(|r| {
            let (training, rank) = match &r.hold {
                Some(h) => (h.training_id.clone(), i64::from(h.rank)),
                None => (String::new(), -1),
            };
            let attributes = vec![
                KeyValue::new("gpu.uuid", r.sample.gpu_uuid.clone()),
                KeyValue::new("gpu.index", i64::from(r.sample.index)),
                KeyValue::new("agent", r.agent_name.clone()),
                KeyValue::new("host", hosts.get(&r.agent_id).cloned().unwrap_or_default()),
                KeyValue::new("training.id", training),
                KeyValue::new("training.rank", rank),
            ];
            (attributes, r)
        })
        .collect()
}

type SampleValue = fn(&crate::model::GpuSample) -> Option<f64>;

/// The per-GPU gauges: name, unit, description, value.
const GPU_GAUGES: [(&str, &str, &str, SampleValue); 5] = [
    ("gpu.utilization", "%", "GPU utilization.", |s| {
        s.utilization_gpu_percent
    }),
    ("gpu.memory.used", "By", "GPU memory used.", |s| {
        Some(s.memory_used_bytes as f64)
    }),
    ("gpu.memory.total", "By", "GPU memory in all.", |s| {
        Some(s.memory_total_bytes as f64)
    }),
    ("gpu.temperature", "Cel", "GPU temperature.", |s| {
        s.temperature_celsius
    }),
    ("gpu.power.draw", "W", "GPU power draw.", |s| {
        s.power_draw_watts
    }),
];

/// A gauge per GPU, reading one value of each sample.
fn gpu_gauge(
    meter: &Meter,
    ctx: &Context,
    snapshot: &GpuSnapshot,
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    value: SampleValue,
) -> Box<dyn std::any::Any + Send + Sync> {
    let (ctx, snapshot) = (ctx.clone(), snapshot.clone());
    Box::new(
        meter
            .f64_observable_gauge(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(move |o| {
                for (attributes, r) in snapshot.get(&ctx).iter() {
                    if let Some(v) = value(&r.sample) {
                        o.observe(v, attributes);
                    }
                }
            })
            .build(),
    )
}

type Read = fn(&Context) -> u64;

/// Counters read from the coordinator's own tallies: name, description, read.
const COUNTERS: [(&str, &str, Read); 7] = [
    (
        "cohort.telemetry.samples",
        "GPU samples ingested since start.",
        |c| c.fleet.ingested().1,
    ),
    (
        "cohort.telemetry.batches",
        "Telemetry batches (one agent's samples of one tick) ingested since start.",
        |c| c.fleet.ingested().0,
    ),
    (
        "cohort.agent.refused_samples",
        "GPU samples refused because the sending agent did not register that GPU.",
        |c| c.fleet.samples_refused(),
    ),
    (
        "cohort.agent.refused_rank_events",
        "Rank events refused because the rank is not placed on the sending agent.",
        |c| c.refusals.rank_events(),
    ),
    (
        "cohort.telemetry.watcher_lag_notices",
        "Times a watcher fell behind the live fan-out and was sent a lag notice.",
        |c| c.watchers.counts().lag_notices,
    ),
    (
        "cohort.telemetry.watcher_missed_batches",
        "Telemetry batches watchers missed by falling behind.",
        |c| c.watchers.counts().missed_batches,
    ),
    (
        "cohort.telemetry.history_dropped_rows",
        "GPU samples the history writer dropped because it was behind.",
        |c| c.history.stats().dropped_rows,
    ),
];

/// Gauges without attributes: name, description, read.
const GAUGES: [(&str, &str, Read); 2] = [
    ("cohort.agents.connected", "Agents connected now.", |c| {
        c.fleet.agent_count() as u64
    }),
    (
        "cohort.telemetry.watchers",
        "Open WatchGpuMetrics streams.",
        |c| c.watchers.counts().open,
    ),
];

/// Registers the instruments with the global meter provider (install it
/// first; see `cohort_observe::Observability`).
pub fn register(ctx: &Context) -> Instruments {
    let meter = opentelemetry::global::meter("cohort-coordinator");
    let cached: Cached = Arc::default();
    let wanted = Arc::new(Notify::new());
    let refresher = tokio::spawn(refresh_trainings(
        ctx.clone(),
        cached.clone(),
        wanted.clone(),
    ));

    let mut instruments: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
    instruments.push(Box::new(
        meter
            .i64_observable_gauge("cohort.trainings")
            .with_description("Trainings by state.")
            .with_callback(move |o| {
                wanted.notify_one();
                for (state, n) in cached.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    o.observe(*n, &[KeyValue::new("state", state.clone())]);
                }
            })
            .build(),
    ));
    for (name, description, read) in COUNTERS {
        let c = ctx.clone();
        instruments.push(Box::new(
            meter
                .u64_observable_counter(name)
                .with_description(description)
                .with_callback(move |o| o.observe(read(&c), &[]))
                .build(),
        ));
    }
    for (name, description, read) in GAUGES {
        let c = ctx.clone();
        instruments.push(Box::new(
            meter
                .u64_observable_gauge(name)
                .with_description(description)
                .with_callback(move |o| o.observe(read(&c), &[]))
                .build(),
        ));
    }
    let c = ctx.clone();
    instruments.push(Box::new(
        meter
            .u64_observable_gauge("cohort.alerts.active")
            .with_description("Alerts active now, by kind and severity.")
            .with_callback(move |o| {
                let active = c.alerts.active();
                for kind in AlertKind::ALL {
                    let n = active.iter().filter(|a| a.kind == kind).count() as u64;
                    o.observe(
                        n,
                        &[
                            KeyValue::new("kind", kind.as_str()),
                            KeyValue::new("severity", kind.severity().as_str()),
                        ],
                    );
                }
            })
            .build(),
    ));
    let duration = meter
        .f64_histogram("cohort.db.operation.duration")
        .with_unit("s")
        .with_description(
            "Latency of each named database operation (one transaction with its retries).",
        )
        .build();
    ctx.db
        .op_metrics()
        .observe(Arc::new(move |op, elapsed, ok| {
            let outcome = if ok { "ok" } else { "error" };
            duration.record(
                elapsed.as_secs_f64(),
                &[
                    KeyValue::new("db.operation", op),
                    KeyValue::new("outcome", outcome),
                ],
            );
        }));
    let snapshot = GpuSnapshot::default();
    for (name, unit, description, value) in GPU_GAUGES {
        instruments.push(gpu_gauge(
            &meter,
            ctx,
            &snapshot,
            name,
            unit,
            description,
            value,
        ));
    }
    Instruments {
        _instruments: instruments,
        refresher,
    }
}

/// Keeps trainings by state fresh once a collection has asked for them.
async fn refresh_trainings(ctx: Context, cached: Cached, wanted: Arc<Notify>) {
    wanted.notified().await;
    loop {
        match ctx.db.count_trainings_by_state().await {
            Ok(counts) => {
                let counts: HashMap<String, i64> = counts.into_iter().collect();
                let all = JobState::ALL
                    .iter()
                    .map(|s| {
                        let state = s.as_str().to_string();
                        let n = counts.get(&state).copied().unwrap_or(0);
                        (state, n)
                    })
                    .collect();
                *cached.lock().unwrap_or_else(|p| p.into_inner()) = all;
            }
            Err(e) => tracing::warn!(error = %e, "metrics: cannot count trainings"),
        }
        tokio::time::sleep(TRAININGS_REFRESH).await;
    }
}

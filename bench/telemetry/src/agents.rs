//! Simulated agents: each one its own HTTP/2 connection and
//! `AgentService/Connect` stream, registering 8 GPUs, then sending one
//! TelemetrySamples (8 GpuSample, `time` = the send time) and one Heartbeat
//! per second, at its own phase of the second so the load is smooth.

use crate::window::{unix_ms, Window};
use anyhow::{bail, Context as _};
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

pub const GPUS_PER_AGENT: usize = 8;
const GPU_MEMORY: u64 = 80 << 30;
const OUTBOUND: usize = 16;

/// Samples the agents sent.
#[derive(Debug, Default)]
pub struct Sent {
    /// All samples sent.
    pub total: AtomicU64,
    /// Samples whose time is inside the measured window.
    pub in_window: AtomicU64,
    /// Sends that waited on a full outbound buffer (the connection pushing back).
    pub blocked_sends: AtomicU64,
}

/// An agent that is registered and ready to send.
pub struct Registered {
    index: usize,
    name: String,
    tx: mpsc::Sender<v1::AgentMessage>,
    _inbound: tokio::task::JoinHandle<()>,
}

fn message(m: Message) -> v1::AgentMessage {
    v1::AgentMessage { message: Some(m) }
}

fn gpu_uuid(name: &str, i: usize) -> String {
    format!("GPU-BENCH-{name}-{i}")
}

fn register(name: &str) -> v1::Register {
    v1::Register {
        program_roots: Vec::new(),
        team_program_roots: Vec::new(),
        host_name: name.to_string(),
        agent_name: name.to_string(),
        gpus: (0..GPUS_PER_AGENT)
            .map(|i| v1::GpuInfo {
                index: i as i32,
                uuid: gpu_uuid(name, i),
                name: "cohort bench gpu".into(),
                memory_total_bytes: GPU_MEMORY,
                compute_capability: "9.0".into(),
                simulated: true,
            })
            .collect(),
        address: "127.0.0.1".into(),
        version: "bench".into(),
        ..Default::default()
    }
}

/// Connects agent `index` (named `<prefix>-<index>`) and waits for Registered.
pub async fn connect(url: &str, prefix: &str, index: usize) -> anyhow::Result<Registered> {
    let name = format!("{prefix}-{index:05}");
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("agent {name}: connecting to {url}"))?;
    let mut client = AgentServiceClient::new(channel);
    let (tx, rx) = mpsc::channel(OUTBOUND);
    tx.send(message(Message::Register(register(&name))))
        .await
        .ok()
        .context("fresh channel")?;
    let mut inbound = client
        .connect(ReceiverStream::new(rx))
        .await
        .with_context(|| format!("agent {name}: Connect"))?
        .into_inner();
    match inbound.message().await? {
        Some(v1::CoordinatorMessage {
            message: Some(v1::coordinator_message::Message::Registered(_)),
            ..
        }) => {}
        other => bail!("agent {name}: expected Registered, got {other:?}"),
    }
    // Commands are never expected (no training runs); drain them so the
    // coordinator's side never blocks.
    let inbound = tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
    Ok(Registered {
        index,
        name,
        tx,
        _inbound: inbound,
    })
}

fn timestamp(t: SystemTime) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(t))
}

fn samples(name: &str, tick: u64, now: SystemTime) -> Vec<v1::GpuSample> {
    (0..GPUS_PER_AGENT)
        .map(|i| v1::GpuSample {
            gpu_uuid: gpu_uuid(name, i),
            index: i as i32,
            time: timestamp(now),
            utilization_gpu_percent: Some(((tick + i as u64) % 101) as f64),
            utilization_memory_percent: Some(40.0),
            memory_used_bytes: GPU_MEMORY / 2,
            memory_total_bytes: GPU_MEMORY,
            temperature_celsius: Some(55.0),
            power_draw_watts: Some(350.0),
            power_limit_watts: Some(700.0),
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(2619),
            ecc_errors_corrected: Some(0),
            ecc_errors_uncorrected: Some(0),
            simulated: true,
            ..Default::default()
        })
        .collect()
}

impl Registered {
    /// Sends once a second from `start + phase` until `stop`, then closes
    /// the stream. Phase = index / agents of a second.
    pub async fn run(
        self,
        agents: usize,
        start: Instant,
        stop: Instant,
        window: Window,
        sent: Arc<Sent>,
    ) {
        let phase = Duration::from_secs(1).mul_f64(self.index as f64 / agents.max(1) as f64);
        let mut every = tokio::time::interval_at(start + phase, Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tick = 0u64;
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = tokio::time::sleep_until(stop) => break,
            }
            if Instant::now() >= stop {
                break;
            }
            if self.tx.capacity() == 0 {
                sent.blocked_sends.fetch_add(1, Ordering::Relaxed);
            }
            let now = SystemTime::now();
            let batch = samples(&self.name, tick, now);
            let n = batch.len() as u64;
            let telemetry = message(Message::Telemetry(v1::TelemetrySamples { samples: batch }));
            if self.tx.send(telemetry).await.is_err() {
                break;
            }
            sent.total.fetch_add(n, Ordering::Relaxed);
            if window.contains(unix_ms(now)) {
                sent.in_window.fetch_add(n, Ordering::Relaxed);
            }
            let heartbeat = message(Message::Heartbeat(v1::Heartbeat {
                time: timestamp(SystemTime::now()),
            }));
            if self.tx.send(heartbeat).await.is_err() {
                break;
            }
            tick += 1;
        }
    }
}

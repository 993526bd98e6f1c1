//! GPU telemetry history end to end on the real server (127.0.0.1:0), on
//! SQLite and PostgreSQL: an agent-side client registers and streams
//! TelemetrySamples over AgentService.Connect; the batched writer stores
//! them; QueryGpuMetrics returns them downsampled, per GPU and aggregated,
//! filtered and paged; bad arguments are INVALID_ARGUMENT naming the field.

mod common;

use cohort_coordinator::context::Context;
use cohort_coordinator::history::{History, HistorySettings, SystemClock};
use cohort_proto::error::{bad_fields, reason_of, Reason};
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_proto::v1::telemetry_service_client::TelemetryServiceClient;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::Code;

const GPUS: [&str; 2] = ["GPU-h0", "GPU-h1"];
const TICKS: i64 = 10;

fn ts(ms: i64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    })
}

fn secs(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: s,
        nanos: 0,
    })
}

/// GPU g at tick i (1 s apart from `base`): utilization 10*i + g, memory
/// 100*(i+1) MiB, temperature 50 + i, power 100 + 10*g.
fn sample(base: i64, g: usize, i: i64) -> v1::GpuSample {
    v1::GpuSample {
        gpu_uuid: GPUS[g].into(),
        index: g as i32,
        time: ts(base + i * 1000),
        utilization_gpu_percent: Some((10 * i + g as i64) as f64),
        memory_used_bytes: (100 * (i + 1) as u64) << 20,
        memory_total_bytes: 16 << 30,
        temperature_celsius: Some(50.0 + i as f64),
        power_draw_watts: Some(100.0 + 10.0 * g as f64),
        simulated: true,
        ..Default::default()
    }
}

fn register() -> v1::AgentMessage {
    v1::AgentMessage {
        message: Some(v1::agent_message::Message::Register(v1::Register {
            program_roots: Vec::new(),
            team_program_roots: Vec::new(),
            host_name: "hist-host".into(),
            agent_name: "hist-agent".into(),
            gpus: GPUS
                .iter()
                .enumerate()
                .map(|(i, uuid)| v1::GpuInfo {
                    index: i as i32,
                    uuid: uuid.to_string(),
                    name: "Simulated".into(),
                    memory_total_bytes: 16 << 30,
                    compute_capability: "8.0".into(),
                    simulated: true,
                })
                .collect(),
            address: "127.0.0.1".into(),
            version: "test".into(),
            running_ranks: vec![],
        })),
    }
}

async fn wait_for_rows(history: &History, rows: u64) {
    let what = format!("history to write {rows} rows");
    cohort_testkit::eventually(&what, Duration::from_secs(20), || async {
        let stats = history.stats();
        (stats.written_rows >= rows)
            .then_some(())
            .ok_or(format!("{stats:?}"))
    })
    .await;
}

fn query(start: i64, end: i64, step_s: i64) -> v1::QueryGpuMetricsRequest {
    v1::QueryGpuMetricsRequest {
        start_time: ts(start),
        end_time: ts(end),
        step: secs(step_s),
        ..Default::default()
    }
}

async fn exercise(db: common::TestDb) {
    let name = db.name;
    let history = History::new(
        HistorySettings {
            flush_interval: Duration::from_millis(100),
            ..Default::default()
        },
        Arc::new(SystemClock),
    );
    let ctx = Context::new(db.db.clone()).with_history(history.clone());
    let server = common::server::TestServer::start(ctx).await;
    let channel: Channel = server.channel.clone();

    // The agent side: Register, then one TelemetrySamples per tick.
    let (tx, rx) = mpsc::channel(64);
    tx.send(register()).await.unwrap();
    let mut inbound = AgentServiceClient::new(channel.clone())
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::coordinator_message::Message::Registered(registered)) =
        inbound.message().await.unwrap().unwrap().message
    else {
        panic!("expected Registered");
    };
    // Ten seconds of samples starting at a whole minute ten minutes ago.
    let now = chrono::Utc::now().timestamp_millis();
    let base = (now - 600_000).div_euclid(60_000) * 60_000;
    for i in 0..TICKS {
        let samples = (0..GPUS.len()).map(|g| sample(base, g, i)).collect();
        tx.send(v1::AgentMessage {
            message: Some(v1::agent_message::Message::Telemetry(
                v1::TelemetrySamples { samples },
            )),
        })
        .await
        .unwrap();
    }
    wait_for_rows(&history, TICKS as u64 * 2).await;
    let stored = common::raw_gpu_metrics(&db.db, GPUS[1]).await;
    assert_eq!(stored.len(), TICKS as usize, "{name}");
    assert_eq!(stored[3].sample_ms, base + 3000);
    assert_eq!(stored[3].agent_id, registered.agent_id);
    assert_eq!(stored[3].agent_name, "hist-agent");
    assert_eq!(stored[3].utilization_gpu_percent, Some(31.0));
    assert_eq!(
        (stored[3].training_id.clone(), stored[3].rank),
        (None, None)
    );

    let mut telemetry = TelemetryServiceClient::new(channel.clone());

    // Per GPU, two 5 s buckets: ticks 0..5 and 5..10.
    let page = telemetry
        .query_gpu_metrics(query(base, base + 10_000, 5))
        .await
        .unwrap()
        .into_inner();
    assert!(page.next_page_token.is_empty(), "{name}");
    assert_eq!(page.updates.len(), 2, "{name}");
    assert_eq!(page.updates[0].time, ts(base));
    assert_eq!(page.updates[1].time, ts(base + 5000));
    let second = &page.updates[1];
    assert_eq!(second.view, v1::MetricsView::PerGpu as i32);
    assert_eq!(second.gpus.len(), 2);
    let g1 = &second.gpus[1];
    assert_eq!(
        (g1.agent_id.as_str(), g1.agent_name.as_str()),
        (registered.agent_id.as_str(), "hist-agent")
    );
    let s = g1.sample.as_ref().unwrap();
    assert_eq!(s.gpu_uuid, GPUS[1]);
    // Ticks 5..10 of GPU 1: utilization 51, 61, 71, 81, 91 -> mean 71;
    // memory (6..=10) * 100 MiB -> mean 800 MiB; temperature max 59.
    assert_eq!(s.utilization_gpu_percent, Some(71.0));
    assert_eq!(s.memory_used_bytes, 800 << 20);
    assert_eq!(s.memory_total_bytes, 16 << 30);
    assert_eq!(s.temperature_celsius, Some(59.0));
    assert_eq!(s.power_draw_watts, Some(110.0));
    assert!(s.simulated);

    // Aggregated over both GPUs per bucket.
    let mut agg = query(base, base + 10_000, 10);
    agg.view = v1::MetricsView::Aggregated as i32;
    let page = telemetry.query_gpu_metrics(agg).await.unwrap().into_inner();
    assert_eq!(page.updates.len(), 1, "{name}");
    let a = page.updates[0].aggregate.as_ref().unwrap();
    assert_eq!((a.gpu_count, a.busy_count, a.simulated_count), (2, 0, 2));
    // GPU 0: mean of 0, 10, ..., 90 = 45; GPU 1: 46 -> 45.5.
    assert_eq!(a.mean_utilization_gpu_percent, 45.5);
    assert_eq!(a.memory_used_bytes, 2 * (550 << 20));
    assert_eq!(a.max_temperature_celsius, 59.0);
    assert_eq!(a.power_draw_watts, 210.0);

    // Filters: one GPU by uuid; by agent name; a training nobody holds.
    let mut by_gpu = query(base, base + 10_000, 10);
    by_gpu.filter = Some(v1::GpuMetricsFilter {
        gpu_uuids: vec![GPUS[0].into()],
        ..Default::default()
    });
    let page = telemetry
        .query_gpu_metrics(by_gpu)
        .await
        .unwrap()
        .into_inner();
    let uuids: Vec<&str> = page.updates[0]
        .gpus
        .iter()
        .map(|g| g.sample.as_ref().unwrap().gpu_uuid.as_str())
        .collect();
    assert_eq!(uuids, vec![GPUS[0]], "{name}");
    let mut by_agent = query(base, base + 10_000, 10);
    by_agent.filter = Some(v1::GpuMetricsFilter {
        agents: vec!["hist-agent".into()],
        ..Default::default()
    });
    let page = telemetry
        .query_gpu_metrics(by_agent)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.updates[0].gpus.len(), 2, "{name}");
    let mut by_job = query(base, base + 10_000, 10);
    by_job.filter = Some(v1::GpuMetricsFilter {
        training_id: "trn-none".into(),
        ..Default::default()
    });
    let page = telemetry
        .query_gpu_metrics(by_job)
        .await
        .unwrap()
        .into_inner();
    assert!(page.updates.is_empty(), "{name}");

    // Pages of 3 one-second buckets: 10 buckets in 4 pages, same data.
    let mut paged = query(base, base + 10_000, 1);
    paged.page_size = 3;
    let mut times = Vec::new();
    let mut pages = 0;
    loop {
        let page = telemetry
            .query_gpu_metrics(paged.clone())
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        times.extend(page.updates.iter().map(|u| u.time));
        if page.next_page_token.is_empty() {
            break;
        }
        paged.page_token = page.next_page_token;
    }
    assert_eq!(pages, 4, "{name}");
    assert_eq!(
        times,
        (0..TICKS).map(|i| ts(base + i * 1000)).collect::<Vec<_>>()
    );

    // Bad arguments, over the wire.
    let err = telemetry
        .query_gpu_metrics(query(base + 10_000, base, 1))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{name}");
    assert_eq!(reason_of(&err), Some(Reason::InvalidArgument));
    assert_eq!(bad_fields(&err), vec!["end_time".to_string()]);
    let mut tiny = query(base, base + 10_000, 0);
    tiny.step = Some(prost_types::Duration {
        seconds: 0,
        nanos: 100_000_000,
    });
    let err = telemetry.query_gpu_metrics(tiny).await.unwrap_err();
    assert_eq!(bad_fields(&err), vec!["step".to_string()], "{name}");
    let mut forged = query(base, base + 10_000, 1);
    forged.page_token = "not-a-token".into();
    let err = telemetry.query_gpu_metrics(forged).await.unwrap_err();
    assert_eq!(reason_of(&err), Some(Reason::InvalidPageToken), "{name}");

    drop(tx);
    server.stop().await;
    let stats = history.stats();
    assert_eq!(stats.written_rows, TICKS as u64 * 2, "{name}: {stats:?}");
    assert_eq!(
        (stats.dropped_rows, stats.failed_rows, stats.lagged_batches),
        (0, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_on_sqlite() {
    exercise(common::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_on_postgres() {
    exercise(common::postgres().await).await;
}

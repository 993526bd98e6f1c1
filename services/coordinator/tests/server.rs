//! The real server on 127.0.0.1:0: health, reflection, and the training RPCs
//! that persistence alone answers. Runs on SQLite and on PostgreSQL.

mod common;

use cohort_coordinator::context::Context;
use cohort_proto::error::{bad_fields, reason_of, Reason};
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

struct Running {
    server: common::server::TestServer,
    channel: Channel,
    fleet: cohort_coordinator::fleet::Fleet,
    db: common::TestDb,
}

impl Running {
    async fn stop(self) {
        self.server.stop().await;
    }
}

async fn start(db: common::TestDb) -> Running {
    let ctx = Context::new(db.db.clone());
    let fleet = ctx.fleet.clone();
    let server = common::server::TestServer::start(ctx).await;
    Running {
        channel: server.channel.clone(),
        server,
        fleet,
        db,
    }
}

fn config() -> v1::TrainingConfig {
    let text = "[model]\nd_in = 8\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n";
    let config = cohort_spec::TrainingConfig::from_toml(text).unwrap();
    (&config).into()
}

fn create_request(request_id: &str) -> v1::CreateTrainingRequest {
    v1::CreateTrainingRequest {
        request_id: request_id.into(),
        config: Some(config()),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(2)),
            queue: None,
            ..Default::default()
        }),
        display_name: "t".into(),
        max_restarts: None,
        priority: 0,
        labels: Default::default(),
        priority_class: String::new(),
        borrow: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_v1_and_v1alpha() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{health_check_response::ServingStatus, HealthCheckRequest};
    let server = start(common::sqlite().await).await;
    let mut health = HealthClient::new(server.channel.clone());
    for service in [
        "",
        "cohort.v1.TrainingService",
        "cohort.v1.GpuService",
        "cohort.v1.TelemetryService",
        "cohort.v1.AgentService",
    ] {
        let reply = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.status(), ServingStatus::Serving, "{service:?}");
    }
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "cohort.v1.TrainingService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    drop(watch);

    {
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        let mut client = ServerReflectionClient::new(server.channel.clone());
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut replies = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let reply = replies.next().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
            panic!("unexpected reply {reply:?}");
        };
        let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
        for name in [
            "cohort.v1.TrainingService",
            "cohort.v1.AgentService",
            "grpc.health.v1.Health",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }
    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        let mut client = ServerReflectionClient::new(server.channel.clone());
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "cohort.v1.TrainingConfig".into(),
            )),
        };
        let mut replies = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let reply = replies.next().await.unwrap().unwrap();
        let Some(MessageResponse::FileDescriptorResponse(files)) = reply.message_response else {
            panic!("unexpected reply {reply:?}");
        };
        assert!(!files.file_descriptor_proto.is_empty());
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_rpcs_over_persistence() {
    for db in common::databases().await {
        let name = db.name;
        let server = start(db).await;
        let mut client = TrainingServiceClient::new(server.channel.clone());

        // Bad requests: precise code, ErrorInfo reason, BadRequest field, nothing written.
        let mut missing = create_request("bad-1");
        missing.config = None;
        let err = client.create_training(missing).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name}");
        assert_eq!(reason_of(&err), Some(Reason::InvalidConfig));
        let mut negative = create_request("bad-2");
        negative
            .config
            .as_mut()
            .unwrap()
            .optim
            .as_mut()
            .unwrap()
            .batch_size = -1;
        let err = client.create_training(negative).await.unwrap_err();
        assert_eq!(bad_fields(&err), ["config.optim.batch_size"], "{name}");
        let list = client
            .list_trainings(v1::ListTrainingsRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(list.trainings.is_empty(), "{name}: {list:?}");

        // Idempotent create, get, list.
        let a = client
            .create_training(create_request("req-1"))
            .await
            .unwrap()
            .into_inner();
        let b = client
            .create_training(create_request("req-1"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(a.id, b.id, "{name}");
        assert_eq!(a.state(), v1::training::State::Queued);
        let got = client
            .get_training(v1::GetTrainingRequest { id: a.id.clone() })
            .await
            .unwrap()
            .into_inner();
        // The scheduler may have updated the pending reason since: compare what is ours.
        assert_eq!(
            (&got.id, &got.request_id, &got.config),
            (&a.id, &a.request_id, &a.config)
        );
        assert_eq!(got.state(), v1::training::State::Queued, "{name}");
        let err = client
            .get_training(v1::GetTrainingRequest {
                id: "trn-nope".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
        assert_eq!(reason_of(&err), Some(Reason::TrainingNotFound));

        // Paging with tokens.
        client
            .create_training(create_request("req-2"))
            .await
            .unwrap();
        client
            .create_training(create_request("req-3"))
            .await
            .unwrap();
        let mut token = String::new();
        let mut seen = 0;
        loop {
            let page = client
                .list_trainings(v1::ListTrainingsRequest {
                    page_size: 2,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen += page.trainings.len();
            token = page.next_page_token;
            if token.is_empty() {
                break;
            }
        }
        assert_eq!(seen, 3, "{name}");

        // Watch, then cancel: the stream replays history and ends with CANCELLED.
        let mut events = client
            .watch_training(v1::WatchTrainingRequest {
                id: a.id.clone(),
                after_sequence: 0,
                include_rank_stats: false,
                max_points: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let cancelled = client
            .cancel_training(v1::CancelTrainingRequest {
                id: a.id.clone(),
                reason: "test".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(cancelled.state(), v1::training::State::Cancelled, "{name}");
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            seen.push(event.unwrap());
        }
        assert_eq!(seen.first().map(|e| e.sequence), Some(1), "{name}");
        let last = seen.last().unwrap();
        let Some(v1::training_event::Event::StateChange(change)) = &last.event else {
            panic!("{name}: the stream should end with the final state change: {last:?}");
        };
        assert_eq!(change.to(), v1::training::State::Cancelled, "{name}");
        // Cancelling again is a no-op.
        let again = client
            .cancel_training(v1::CancelTrainingRequest {
                id: a.id.clone(),
                reason: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again.state(), v1::training::State::Cancelled, "{name}");
        server.stop().await;
    }
}

/// PER_GPU updates until `want` entries came: how many updates, the entries.
async fn read_entries(
    stream: &mut tonic::Streaming<v1::GpuMetricsUpdate>,
    want: usize,
) -> (usize, Vec<v1::GpuMetrics>) {
    let (mut updates, mut entries) = (0, Vec::new());
    while entries.len() < want {
        let update = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
            .await
            .expect("an update within 10 s")
            .unwrap()
            .expect("stream open");
        assert!(update.lagged.is_none());
        assert_eq!(update.view, v1::MetricsView::PerGpu as i32);
        updates += 1;
        entries.extend(update.gpus);
    }
    assert_eq!(entries.len(), want);
    (updates, entries)
}

/// Over the wire, through the server's own WatchGpuMetrics route: a
/// generated client decodes the shared pre-encoded entries, a burst of agent
/// batches arrives coalesced, filters hold, a bad view is refused, and the
/// streams end when the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_gpu_metrics_coalesces_and_filters_over_the_wire() {
    use cohort_proto::v1::telemetry_service_client::TelemetryServiceClient;
    use std::time::Duration;
    let server = start(common::sqlite().await).await;
    let mut client = TelemetryServiceClient::new(server.channel.clone());
    let watch = |filter: Option<v1::GpuMetricsFilter>| {
        let mut client = client.clone();
        async move {
            let mut stream = client
                .watch_gpu_metrics(v1::WatchGpuMetricsRequest {
                    view: v1::MetricsView::PerGpu as i32,
                    filter,
                })
                .await
                .unwrap()
                .into_inner();
            let snapshot = stream.message().await.unwrap().unwrap();
            assert!(snapshot.gpus.is_empty(), "no agent connected yet");
            stream
        }
    };
    let mut all = watch(None).await;
    let mut one = watch(Some(v1::GpuMetricsFilter {
        agents: vec!["agent-1".into()],
        ..Default::default()
    }))
    .await;

    let (agents, rounds, gpus) = (5, 10, 8);
    // The fleet takes samples only from connected agents, of their GPUs.
    for a in 0..agents {
        server.fleet.connect(cohort_coordinator::fleet::LiveAgent {
            id: format!("agent-{a}"),
            name: format!("agent-{a}"),
            host_name: format!("host-{a}"),
            address: String::new(),
            gpus: (0..gpus)
                .map(|g| cohort_coordinator::model::GpuRecord {
                    index: g,
                    uuid: format!("GPU-{a}-{g}"),
                    simulated: true,
                    quarantine: None,
                    ..Default::default()
                })
                .collect(),
            program_roots: Default::default(),
            session: 0,
            commands: tokio::sync::mpsc::channel(1).0,
            last_seen: tokio::time::Instant::now(),
            cordon: None,
            drain_deadline: None,
        });
    }
    for round in 0..rounds {
        for a in 0..agents {
            let samples = (0..gpus)
                .map(|g| cohort_coordinator::model::GpuSample {
                    gpu_uuid: format!("GPU-{a}-{g}"),
                    index: g,
                    memory_used_bytes: round,
                    simulated: true,
                    ..Default::default()
                })
                .collect();
            server.fleet.ingest(&format!("agent-{a}"), samples);
        }
    }
    let batches = (agents * rounds) as usize;
    let (updates, entries) = read_entries(&mut all, batches * gpus as usize).await;
    assert!(updates < batches, "{updates} updates for {batches} batches");
    let first = &entries[0];
    assert_eq!(first.agent_id, "agent-0");
    assert_eq!(first.rank, -1);
    assert_eq!(
        first.sample.as_ref().map(|s| s.gpu_uuid.as_str()),
        Some("GPU-0-0")
    );
    let (_, mine) = read_entries(&mut one, rounds as usize * gpus as usize).await;
    assert!(mine.iter().all(|g| g.agent_id == "agent-1"));

    let refused = client
        .watch_gpu_metrics(v1::WatchGpuMetricsRequest {
            view: 42,
            filter: None,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);

    tokio::time::timeout(Duration::from_secs(10), server.stop())
        .await
        .expect("the server stops with watchers open");
    let end = tokio::time::timeout(Duration::from_secs(5), all.message()).await;
    assert!(
        matches!(end, Ok(Ok(None)) | Ok(Err(_))),
        "the stream ended: {end:?}"
    );
}

/// A refused create and a waiting training say why with the same reason
/// (issue 12, defect 2: they came from two tables that disagreed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_agents_a_refused_create_and_a_queued_training_give_one_reason() {
    let server = start(common::sqlite().await).await;
    let mut client = TrainingServiceClient::new(server.channel.clone());
    let mut refused = create_request("");
    refused.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::Count(2)),
        queue: Some(false),
        ..Default::default()
    });
    let status = client.create_training(refused).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(reason_of(&status), Some(Reason::NoAgents));
    let queued = client
        .create_training(create_request(""))
        .await
        .unwrap()
        .into_inner();
    let wait = std::time::Duration::from_secs(20);
    cohort_testkit::eventually("the pending reason NO_AGENTS", wait, || {
        let mut client = client.clone();
        let id = queued.id.clone();
        async move {
            let t = client
                .get_training(v1::GetTrainingRequest { id })
                .await
                .unwrap()
                .into_inner();
            t.state_reason
                .starts_with("NO_AGENTS: ")
                .then_some(())
                .ok_or(format!("pending reason: {}", t.state_reason))
        }
    })
    .await;
    server.stop().await;
}

/// ListTrainings reads a page with its ranks, progress and estimates in one
/// transaction, not two per training (issue 12, defect 6) nor one for the
/// rows and another for their details; for a page of trainings never placed
/// that transaction reads their start estimates beside the rows (no ranks,
/// no progress). Counted by the per-operation database metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_trainings_reads_a_page_in_a_fixed_number_of_transactions() {
    for db in common::databases().await {
        let name = db.name;
        let server = start(db).await;
        let mut client = TrainingServiceClient::new(server.channel.clone());
        for _ in 0..40 {
            client.create_training(create_request("")).await.unwrap();
        }
        let ops = server.db.db.op_metrics().clone();
        let (progress, details, lists) = (
            ops.count("latest_progress"),
            ops.count("training_details"),
            ops.count("list_trainings"),
        );
        let page = client
            .list_trainings(v1::ListTrainingsRequest {
                page_size: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.trainings.len(), 40, "{name}");
        assert!(
            page.trainings.iter().all(|t| t.queue_position > 0),
            "{name}"
        );
        assert_eq!(
            ops.count("latest_progress"),
            progress,
            "{name}: no per-training read"
        );
        assert_eq!(
            (ops.count("list_trainings"), ops.count("training_details")),
            (lists + 1, details),
            "{name}: one read for the page and its details, none per training"
        );
        server.stop().await;
    }
}

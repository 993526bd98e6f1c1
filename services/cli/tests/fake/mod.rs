//! A scripted in-process `cohort.v1` server (the same generated server code the
//! coordinator uses) and helpers to run the real `cohort` binary against it.

// Messages are built with `..Default::default()` so fields added to cohort.v1
// don't break the build.
#![allow(clippy::needless_update)]

use cohort_proto::error::{status, Reason};
use cohort_proto::v1::{
    self, agent_service_server::AgentService, gpu_service_server::GpuService,
    telemetry_service_server::TelemetryService, training::State, training_event::Event,
    training_service_server::TrainingService,
};
use std::pin::Pin;
use std::process::Output;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status};

type Reply<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The scripted coordinator. `hang`: "t-restart" streams its first two
/// events and then nothing, like a coordinator about to be killed.
#[derive(Clone, Copy)]
pub struct Fake {
    pub hang: bool,
}

pub fn gpu(index: i32) -> v1::Gpu {
    v1::Gpu {
        info: Some(v1::GpuInfo {
            index,
            uuid: format!("SIM-{index}"),
            name: "Simulated GPU".into(),
            memory_total_bytes: 16 << 30,
            compute_capability: "8.0".into(),
            simulated: true,
            ..Default::default()
        }),
        agent_id: "a-1".into(),
        agent_name: "node1".into(),
        availability: v1::GpuAvailability::Available as i32,
        ..Default::default()
    }
}

pub fn training(id: &str, state: State) -> v1::Training {
    v1::Training {
        id: id.into(),
        state: state as i32,
        state_reason: if state == State::Queued {
            "waiting for 2 GPUs".into()
        } else {
            String::new()
        },
        world_size: 2,
        ..Default::default()
    }
}

pub fn change(seq: u64, id: &str, from: State, to: State, why: &str) -> v1::TrainingEvent {
    event(
        seq,
        id,
        Event::StateChange(v1::StateChange {
            from: from as i32,
            to: to as i32,
            reason: why.into(),
            ..Default::default()
        }),
    )
}

pub fn event(seq: u64, id: &str, event: Event) -> v1::TrainingEvent {
    v1::TrainingEvent {
        sequence: seq,
        training_id: id.into(),
        attempt: 1,
        time: Some(prost_types::Timestamp {
            seconds: 1_795_000_000 + seq as i64,
            nanos: 0,
        }),
        event: Some(event),
        ..Default::default()
    }
}

pub fn progress(step: i64, loss: f64) -> Event {
    Event::Progress(v1::ProgressEvent {
        step,
        total_steps: 20,
        loss,
        samples_per_sec: 1000.0,
        ..Default::default()
    })
}

/// The stored history of each scripted training.
pub fn history(id: &str) -> Vec<v1::TrainingEvent> {
    let ending = match id {
        "t-fail" => (State::Failed, "rank 1 exited with code 11"),
        _ => (State::Succeeded, "all 20 steps done"),
    };
    vec![
        change(1, id, State::Unspecified, State::Queued, "created"),
        change(2, id, State::Queued, State::Running, "placed on 2 GPUs"),
        event(3, id, progress(10, 0.5)),
        event(4, id, progress(20, 0.25)),
        change(5, id, State::Running, ending.0, ending.1),
    ]
}

#[tonic::async_trait]
impl TrainingService for Fake {
    async fn create_training(
        &self,
        req: Request<v1::CreateTrainingRequest>,
    ) -> Reply<v1::Training> {
        let req = req.into_inner();
        let gpus = req.gpus.unwrap_or_default();
        if req.request_id == "bad-config" {
            return Err(cohort_proto::error::bad_field(
                Reason::InvalidConfig,
                "config.model.d_in",
                "must be in 1..=65536",
            ));
        }
        if gpus.queue == Some(false) {
            return Err(status(
                Code::FailedPrecondition,
                Reason::InsufficientGpus,
                "2 GPUs requested, 1 free",
                [],
            ));
        }
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("config"))?;
        let steps = config.optim.as_ref().and_then(|o| o.steps);
        let mut t = training("t-1", State::Queued);
        t.display_name = format!("steps={}", steps.unwrap_or(0));
        t.config = Some(config);
        Ok(Response::new(t))
    }

    async fn get_training(&self, req: Request<v1::GetTrainingRequest>) -> Reply<v1::Training> {
        match req.into_inner().id.as_str() {
            "t-1" => Ok(Response::new(training("t-1", State::Succeeded))),
            "t-early" => Ok(Response::new(training("t-early", State::Running))),
            other => Err(status(
                Code::NotFound,
                Reason::TrainingNotFound,
                format!("no training {other}"),
                [],
            )),
        }
    }

    async fn list_trainings(
        &self,
        req: Request<v1::ListTrainingsRequest>,
    ) -> Reply<v1::ListTrainingsResponse> {
        let (ids, next) = match req.into_inner().page_token.as_str() {
            "" => (vec!["t-3", "t-2"], "p2"),
            "p2" => (vec!["t-1"], ""),
            _ => {
                return Err(status(
                    Code::InvalidArgument,
                    Reason::InvalidPageToken,
                    "bad token",
                    [],
                ))
            }
        };
        Ok(Response::new(v1::ListTrainingsResponse {
            trainings: ids
                .into_iter()
                .map(|id| training(id, State::Running))
                .collect(),
            next_page_token: next.into(),
            ..Default::default()
        }))
    }

    async fn cancel_training(
        &self,
        req: Request<v1::CancelTrainingRequest>,
    ) -> Reply<v1::Training> {
        Ok(Response::new(training(
            &req.into_inner().id,
            State::Cancelled,
        )))
    }

    type WatchTrainingStream = BoxStream<v1::TrainingEvent>;

    async fn watch_training(
        &self,
        req: Request<v1::WatchTrainingRequest>,
    ) -> Reply<Self::WatchTrainingStream> {
        let req = req.into_inner();
        let after = req.after_sequence;
        let mut events: Vec<v1::TrainingEvent> = history(&req.id)
            .into_iter()
            .filter(|e| e.sequence > after)
            .collect();
        // "t-lag": a first reader from the start misses events 2..=4.
        if req.id == "t-lag" && after == 0 {
            events = vec![
                events[0].clone(),
                event(
                    0,
                    "t-lag",
                    Event::Lagged(v1::Lagged {
                        missed_events: 3,
                        first_missed_sequence: 2,
                        ..Default::default()
                    }),
                ),
            ];
        }
        let mut items: Vec<Result<v1::TrainingEvent, Status>> =
            events.into_iter().map(Ok).collect();
        // "t-drop": the connection breaks after event 2 on the first try.
        if req.id == "t-drop" && after == 0 {
            items.truncate(2);
            items.push(Err(Status::unavailable("connection reset")));
        }
        // "t-early": the first stream ends cleanly after event 2, as a
        // coordinator shutting down would end it.
        if req.id == "t-early" && after == 0 {
            items.truncate(2);
        }
        if req.id == "t-restart" && self.hang {
            items.truncate(2);
            let stalled = tokio_stream::iter(items).chain(tokio_stream::pending());
            return Ok(Response::new(Box::pin(stalled)));
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }

    async fn list_checkpoints(
        &self,
        _req: Request<v1::ListCheckpointsRequest>,
    ) -> Reply<v1::ListCheckpointsResponse> {
        Ok(Response::new(v1::ListCheckpointsResponse {
            checkpoints: vec![v1::Checkpoint {
                training_id: "t-1".into(),
                attempt: 1,
                step: 20,
                path: "/runs/t-1/ckpt-20".into(),
                agent_id: "a-1".into(),
                create_time: None,
                ..Default::default()
            }],
            next_page_token: String::new(),
            ..Default::default()
        }))
    }

    type DownloadCheckpointStream = BoxStream<v1::CheckpointChunk>;

    /// t-1: "manifest.json" in two chunks, then "state.safetensors"; t-evil:
    /// a file name that would leave the output directory; t-short: a file
    /// whose stream ends early.
    async fn download_checkpoint(
        &self,
        req: Request<v1::DownloadCheckpointRequest>,
    ) -> Reply<Self::DownloadCheckpointStream> {
        let id = req.into_inner().training_id;
        let chunk = |file: &str, offset: u64, size: u64, data: &[u8]| {
            Ok(v1::CheckpointChunk {
                file: file.into(),
                offset,
                file_size: size,
                data: data.to_vec(),
                step: 20,
            })
        };
        let chunks = match id.as_str() {
            "t-1" => vec![
                chunk("manifest.json", 0, 6, b"{\"a\""),
                chunk("manifest.json", 4, 6, b":1"),
                chunk("state.safetensors", 0, 3, b"xyz"),
            ],
            "t-evil" => vec![chunk("../escape", 0, 1, b"x")],
            "t-short" => vec![chunk("state.safetensors", 0, 10, b"abc")],
            _ => {
                return Err(status(
                    Code::NotFound,
                    Reason::CheckpointNotFound,
                    "no complete checkpoint",
                    [],
                ))
            }
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    type WatchLogsStream = BoxStream<v1::LogLine>;

    /// t-1: two lines of rank 0 and one of rank 1, whatever was asked
    /// (the request's ranks come back in the first line's text).
    async fn watch_logs(&self, req: Request<v1::WatchLogsRequest>) -> Reply<Self::WatchLogsStream> {
        let req = req.into_inner();
        if req.training_id != "t-1" {
            return Err(status(
                Code::NotFound,
                Reason::TrainingNotFound,
                "no such training",
                [],
            ));
        }
        let line = |rank: i32, text: String| {
            Ok(v1::LogLine {
                rank,
                attempt: 1,
                line: text,
                note: false,
            })
        };
        let lines = vec![
            line(
                0,
                format!("asked for ranks {:?} tail {}", req.ranks, req.tail),
            ),
            line(0, "step 1".into()),
            line(1, "step 1".into()),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(lines))))
    }

    // `cohort train report` is tested against the real coordinator
    // (integration-tests/tests/it/report.rs).
    async fn get_training_report(
        &self,
        _req: Request<v1::GetTrainingReportRequest>,
    ) -> Reply<v1::TrainingReport> {
        Err(Status::unimplemented("no reports in the fake"))
    }

    async fn parse_training_config(
        &self,
        _req: Request<v1::ParseTrainingConfigRequest>,
    ) -> Reply<v1::TrainingConfig> {
        Err(Status::unimplemented("the CLI parses configs itself"))
    }

    async fn upload_code(
        &self,
        _req: Request<tonic::Streaming<v1::UploadCodeRequest>>,
    ) -> Reply<v1::CodeSnapshot> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn get_code(&self, _req: Request<v1::GetCodeRequest>) -> Reply<v1::CodeSnapshot> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn list_priority_classes(
        &self,
        _req: Request<v1::ListPriorityClassesRequest>,
    ) -> Reply<v1::ListPriorityClassesResponse> {
        let class = |name: &str, value, preempting| v1::PriorityClass {
            name: name.into(),
            value,
            preempting,
        };
        Ok(Response::new(v1::ListPriorityClassesResponse {
            classes: vec![
                class("urgent", 1000, true),
                class("high", 100, true),
                class("normal", 0, false),
                class("low", -100, false),
            ],
            default_class: "normal".into(),
        }))
    }
}

#[tonic::async_trait]
impl GpuService for Fake {
    async fn list_gpus(&self, req: Request<v1::ListGpusRequest>) -> Reply<v1::ListGpusResponse> {
        // Two pages, so the CLI has to follow the token.
        let (gpus, next) = match req.into_inner().page_token.as_str() {
            "" => (vec![gpu(0)], "next"),
            _ => (vec![gpu(1)], ""),
        };
        Ok(Response::new(v1::ListGpusResponse {
            gpus,
            next_page_token: next.into(),
            ..Default::default()
        }))
    }
    async fn recommend_gpus(
        &self,
        req: Request<v1::RecommendGpusRequest>,
    ) -> Reply<v1::RecommendGpusResponse> {
        use v1::recommend_gpus_request::Need;
        let req = req.into_inner();
        let estimate = match req.need {
            Some(Need::Config(_)) => Some(estimate()),
            _ => None,
        };
        Ok(Response::new(v1::RecommendGpusResponse {
            gpus: vec![gpu(1)],
            estimate,
            shortfall_reason: if req.count > 1 {
                "only 1 GPU is free".into()
            } else {
                String::new()
            },
            ..Default::default()
        }))
    }
    async fn validate_gpu_selection(
        &self,
        req: Request<v1::ValidateGpuSelectionRequest>,
    ) -> Reply<v1::ValidateGpuSelectionResponse> {
        let problems: Vec<v1::GpuSelectionProblem> = req
            .into_inner()
            .gpu_ids
            .into_iter()
            .filter(|id| !id.starts_with("SIM-"))
            .map(|id| v1::GpuSelectionProblem {
                message: format!("no agent has GPU {id}"),
                gpu_id: id,
                reason: Reason::GpuNotFound.as_str().into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(v1::ValidateGpuSelectionResponse {
            valid: problems.is_empty(),
            problems,
            estimate: None,
            ..Default::default()
        }))
    }
    async fn estimate_memory(
        &self,
        _: Request<v1::EstimateMemoryRequest>,
    ) -> Reply<v1::MemoryEstimate> {
        Ok(Response::new(estimate()))
    }
    async fn release_gpu(&self, _: Request<v1::ReleaseGpuRequest>) -> Reply<v1::Gpu> {
        Err(Status::unimplemented("not in the fake"))
    }
}

fn estimate() -> v1::MemoryEstimate {
    v1::MemoryEstimate {
        parameter_count: 66_112,
        parameters_bytes: 264_448,
        gradients_bytes: 528_896,
        optimizer_bytes: 528_896,
        activations_bytes: 1 << 20,
        data_bytes: 1 << 20,
        overhead_bytes: 512 << 20,
        total_bytes: (512 << 20) + (2 << 20) + 1_322_240,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl TelemetryService for Fake {
    type WatchGpuMetricsStream = BoxStream<v1::GpuMetricsUpdate>;
    async fn watch_gpu_metrics(
        &self,
        req: Request<v1::WatchGpuMetricsRequest>,
    ) -> Reply<Self::WatchGpuMetricsStream> {
        let view = req.into_inner().view;
        // An endless stream: the CLI must stop by itself after --count updates.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            for i in 0.. {
                let update = v1::GpuMetricsUpdate {
                    time: Some(prost_types::Timestamp {
                        seconds: 1_795_000_000 + i,
                        nanos: 0,
                    }),
                    view,
                    gpus: vec![v1::GpuMetrics {
                        sample: Some(v1::GpuSample {
                            gpu_uuid: "SIM-0".into(),
                            utilization_gpu_percent: Some(50.0),
                            simulated: true,
                            ..Default::default()
                        }),
                        agent_name: "node1".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                if tx.send(Ok(update)).await.is_err() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        });
        let updates = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(updates)))
    }
    async fn query_gpu_metrics(
        &self,
        req: Request<v1::QueryGpuMetricsRequest>,
    ) -> Reply<v1::QueryGpuMetricsResponse> {
        let req = req.into_inner();
        if req.start_time.is_none() {
            return Err(Status::invalid_argument("start_time is required"));
        }
        // Two pages of one aggregated bucket each.
        let (bucket, next) = match req.page_token.as_str() {
            "" => (0, "b2"),
            _ => (1, ""),
        };
        Ok(Response::new(v1::QueryGpuMetricsResponse {
            updates: vec![v1::GpuMetricsUpdate {
                time: Some(prost_types::Timestamp {
                    seconds: 1_795_000_000 + 60 * bucket,
                    nanos: 0,
                }),
                view: req.view,
                aggregate: Some(v1::AggregatedGpuMetrics {
                    gpu_count: 2,
                    busy_count: 1,
                    simulated_count: 2,
                    mean_utilization_gpu_percent: 40.0 + bucket as f64,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            next_page_token: next.into(),
            ..Default::default()
        }))
    }
    type WatchAlertsStream = BoxStream<v1::WatchAlertsResponse>;
    async fn watch_alerts(
        &self,
        req: Request<v1::WatchAlertsRequest>,
    ) -> Reply<Self::WatchAlertsStream> {
        use v1::watch_alerts_response::Event as AlertEvent;
        let alert = v1::Alert {
            id: "al-1".into(),
            severity: v1::AlertSeverity::Warning as i32,
            kind: "GPU_TEMPERATURE_HIGH".into(),
            message: "GPU SIM-0 is at 91 C".into(),
            agent_id: "a-1".into(),
            gpu_uuid: "SIM-0".into(),
            value: Some(91.0),
            threshold: Some(85.0),
            raise_time: Some(prost_types::Timestamp {
                seconds: 1_795_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let mut resolved = alert.clone();
        resolved.resolve_time = Some(prost_types::Timestamp {
            seconds: 1_795_000_100,
            nanos: 0,
        });
        let mut items = Vec::new();
        if req.into_inner().include_active {
            items.push(alert);
        }
        items.push(resolved);
        let events = items.into_iter().map(|a| {
            Ok(v1::WatchAlertsResponse {
                event: Some(AlertEvent::Alert(a)),
                ..Default::default()
            })
        });
        // Then nothing: the CLI stops after --count alerts.
        let stream = tokio_stream::iter(events).chain(tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }
}

#[tonic::async_trait]
impl AgentService for Fake {
    type ConnectStream = BoxStream<v1::CoordinatorMessage>;
    async fn connect(
        &self,
        _: Request<tonic::Streaming<v1::AgentMessage>>,
    ) -> Reply<Self::ConnectStream> {
        Err(Status::unimplemented("not in the fake"))
    }
    async fn list_agents(
        &self,
        _: Request<v1::ListAgentsRequest>,
    ) -> Reply<v1::ListAgentsResponse> {
        Ok(Response::new(v1::ListAgentsResponse {
            agents: vec![v1::Agent {
                id: "a-1".into(),
                name: "node1".into(),
                host_name: "node1".into(),
                state: v1::AgentState::Connected as i32,
                gpus: vec![gpu(0).info.unwrap(), gpu(1).info.unwrap()],
                ..Default::default()
            }],
            next_page_token: String::new(),
            ..Default::default()
        }))
    }
    async fn run_doctor(&self, _: Request<v1::RunDoctorRequest>) -> Reply<v1::DoctorReport> {
        Err(Status::unimplemented("not in the fake"))
    }
    async fn cordon_agent(&self, _: Request<v1::CordonAgentRequest>) -> Reply<v1::Agent> {
        Err(Status::unimplemented("not in the fake"))
    }
    async fn uncordon_agent(&self, _: Request<v1::UncordonAgentRequest>) -> Reply<v1::Agent> {
        Err(Status::unimplemented("not in the fake"))
    }
    async fn drain_agent(&self, _: Request<v1::DrainAgentRequest>) -> Reply<v1::Agent> {
        Err(Status::unimplemented("not in the fake"))
    }
    type FetchCheckpointStream = BoxStream<v1::CheckpointChunk>;
    async fn fetch_checkpoint(
        &self,
        _: Request<v1::FetchCheckpointRequest>,
    ) -> Reply<Self::FetchCheckpointStream> {
        Err(Status::unimplemented("not in the fake"))
    }

    type FetchCodeStream = BoxStream<v1::CodeChunk>;
    async fn fetch_code(&self, _: Request<v1::FetchCodeRequest>) -> Reply<Self::FetchCodeStream> {
        Err(Status::unimplemented("not in the fake"))
    }
}

/// Serves `fake` on `listener` until the returned future is dropped.
pub async fn serve_on(fake: Fake, listener: tokio::net::TcpListener) {
    use cohort_proto::v1::{
        agent_service_server::AgentServiceServer, gpu_service_server::GpuServiceServer,
        telemetry_service_server::TelemetryServiceServer,
        training_service_server::TrainingServiceServer,
    };
    let _ = tonic::transport::Server::builder()
        .add_service(TrainingServiceServer::new(fake))
        .add_service(GpuServiceServer::new(fake))
        .add_service(TelemetryServiceServer::new(fake))
        .add_service(AgentServiceServer::new(fake))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await;
}

/// Starts the fake on 127.0.0.1 (a free port) and returns its URL.
pub async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve_on(Fake { hang: false }, listener));
    url
}

/// A fake in a runtime of its own: dropping it kills every connection at
/// once, as `kill -9` of a coordinator would.
pub struct Killable(tokio::runtime::Runtime);

impl Killable {
    pub fn start(fake: Fake, addr: std::net::SocketAddr) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt.block_on(async {
            // The port may take a moment to be free again after a kill.
            for _ in 0..50 {
                if let Ok(l) = tokio::net::TcpListener::bind(addr).await {
                    return l;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            panic!("cannot bind {addr} again");
        });
        rt.spawn(serve_on(fake, listener));
        Killable(rt)
    }

    pub fn kill(self) {
        self.0.shutdown_background();
    }
}

/// Runs `cohort --coordinator URL ARGS...` to completion.
pub async fn cohort(url: &str, args: &[&str]) -> Output {
    let running = tokio::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .arg("--coordinator")
        .arg(url)
        .args(args)
        .env_remove("COHORT_COORDINATOR")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), running)
        .await
        .expect("cohort finished in time")
        .unwrap();
    // COHORT_TEST_SHOW=1 prints what a person would see.
    if std::env::var_os("COHORT_TEST_SHOW").is_some() {
        eprintln!(
            "$ cohort {}\n{}{}[exit {:?}]\n",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            output.status.code()
        );
    }
    output
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn config_file(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "cohort-cli-fake-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = 4\nsteps = 10\n\
         [data.synthetic]\nnum_samples = 64\n",
    )
    .unwrap();
    path
}

//! What the agent's tests share: an in-process fake coordinator (a real
//! tonic server on 127.0.0.1), fake rank programs (shell scripts) and an
//! agent running in the test's runtime.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)] // each test binary uses its own part

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use cohort_agent::probe::{GpuProbe, SimulatedProbe};
use cohort_agent::telemetry;
use cohort_agent::{Agent, AgentConfig};
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message as Out;
use cohort_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use cohort_proto::v1::coordinator_message::Message as In;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

pub const WAIT: Duration = Duration::from_secs(20);

/// One Connect call as the fake coordinator sees it.
pub struct Session {
    pub inbound: mpsc::UnboundedReceiver<v1::AgentMessage>,
    pub outbound: mpsc::Sender<Result<v1::CoordinatorMessage, Status>>,
    /// The leader epoch its messages carry (the one it registered the agent at).
    pub epoch: u64,
}

impl Session {
    pub async fn next(&mut self) -> v1::AgentMessage {
        tokio::time::timeout(WAIT, self.inbound.recv())
            .await
            .expect("agent message in time")
            .expect("agent stream open")
    }

    /// The next message matching `pick`, skipping others.
    pub async fn next_matching<T>(&mut self, mut pick: impl FnMut(Out) -> Option<T>) -> T {
        loop {
            if let Some(message) = self.next().await.message {
                if let Some(found) = pick(message) {
                    return found;
                }
            }
        }
    }

    pub async fn next_rank_event(&mut self) -> v1::RankEvent {
        self.next_matching(|m| match m {
            Out::RankEvent(e) => Some(e),
            _ => None,
        })
        .await
    }

    pub async fn send(&self, message: In) {
        self.send_at_epoch(message, self.epoch).await
    }

    /// Sends `message` as a leader at `epoch`.
    pub async fn send_at_epoch(&self, message: In, epoch: u64) {
        self.outbound
            .send(Ok(v1::CoordinatorMessage {
                message: Some(message),
                leader_epoch: epoch,
            }))
            .await
            .unwrap();
    }

    pub async fn register(&mut self) -> v1::Register {
        self.register_at_epoch(0).await
    }

    /// Answers Register as a leader at `epoch`.
    pub async fn register_at_epoch(&mut self, epoch: u64) -> v1::Register {
        let register = match self.next().await.message {
            Some(Out::Register(r)) => r,
            other => panic!("expected Register first, got {other:?}"),
        };
        self.epoch = epoch;
        self.send(In::Registered(v1::Registered {
            agent_id: "agent-1".into(),
            heartbeat_interval: Some(millis(100)),
            telemetry_interval: Some(millis(100)),
            leader_epoch: epoch,
            members: None,
        }))
        .await;
        register
    }

    /// Whether the agent ends the session within [`WAIT`] (its stream closes).
    pub async fn ended_by_agent(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.inbound.recv()).await {
                Ok(None) => return true,
                Ok(Some(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub struct FakeCoordinator {
    pub sessions: mpsc::UnboundedSender<Session>,
}

type CoordinatorStream = Pin<Box<dyn Stream<Item = Result<v1::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for FakeCoordinator {
    type ConnectStream = CoordinatorStream;

    async fn connect(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let mut incoming = request.into_inner();
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::channel(64);
        tokio::spawn(async move {
            while let Some(Ok(message)) = incoming.next().await {
                if in_tx.send(message).is_err() {
                    break;
                }
            }
        });
        let _ = self.sessions.send(Session {
            inbound: in_rx,
            outbound: out_tx,
            epoch: 0,
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out_rx))))
    }

    async fn list_agents(
        &self,
        _: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn run_doctor(
        &self,
        _: Request<v1::RunDoctorRequest>,
    ) -> Result<Response<v1::DoctorReport>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn cordon_agent(
        &self,
        _: Request<v1::CordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn uncordon_agent(
        &self,
        _: Request<v1::UncordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn drain_agent(
        &self,
        _: Request<v1::DrainAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type FetchCheckpointStream = FetchStream;

    async fn fetch_checkpoint(
        &self,
        _: Request<v1::FetchCheckpointRequest>,
    ) -> Result<Response<Self::FetchCheckpointStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type FetchCodeStream = CodeStream;

    async fn fetch_code(
        &self,
        _: Request<v1::FetchCodeRequest>,
    ) -> Result<Response<Self::FetchCodeStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// FetchCheckpoint's stream (never served by the fakes).
pub type FetchStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::CheckpointChunk, Status>> + Send>>;

/// FetchCode's stream (never served by the fakes).
pub type CodeStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::CodeChunk, Status>> + Send>>;

pub async fn serve(listener: TcpListener) -> mpsc::UnboundedReceiver<Session> {
    let (tx, rx) = mpsc::unbounded_channel();
    let service = AgentServiceServer::new(FakeCoordinator { sessions: tx });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    rx
}

/// A standby coordinator: refuses every session with NOT_LEADER, naming
/// `leader`.
pub struct Standby {
    pub leader: String,
}

#[tonic::async_trait]
impl AgentService for Standby {
    type ConnectStream = CoordinatorStream;

    async fn connect(
        &self,
        _: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        Err(cohort_proto::error::status(
            tonic::Code::Unavailable,
            cohort_proto::error::Reason::NotLeader,
            "a standby",
            [("leader".to_string(), self.leader.clone())],
        ))
    }

    async fn list_agents(
        &self,
        _: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn run_doctor(
        &self,
        _: Request<v1::RunDoctorRequest>,
    ) -> Result<Response<v1::DoctorReport>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn cordon_agent(
        &self,
        _: Request<v1::CordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn uncordon_agent(
        &self,
        _: Request<v1::UncordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn drain_agent(
        &self,
        _: Request<v1::DrainAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type FetchCheckpointStream = FetchStream;

    async fn fetch_checkpoint(
        &self,
        _: Request<v1::FetchCheckpointRequest>,
    ) -> Result<Response<Self::FetchCheckpointStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type FetchCodeStream = CodeStream;

    async fn fetch_code(
        &self,
        _: Request<v1::FetchCodeRequest>,
    ) -> Result<Response<Self::FetchCodeStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

pub async fn serve_standby(listener: TcpListener, leader: String) {
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(Standby { leader }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
}

pub async fn next_session(sessions: &mut mpsc::UnboundedReceiver<Session>) -> Session {
    tokio::time::timeout(WAIT, sessions.recv())
        .await
        .expect("agent connected in time")
        .expect("server running")
}

pub fn millis(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

pub fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("fake-rank.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A rank that records its environment, reports progress and then trains "forever".
pub const RANK_SCRIPT: &str = r#"
echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT CUDA=[$CUDA_VISIBLE_DEVICES] CONFIG=$2" > "rank-$RANK.env"
echo '{"event":"checkpoint","step":5,"path":"ckpt"}'
sleep 1000 &
wait
"#;

pub fn start_agent(
    url: String,
    work: &Path,
    program: PathBuf,
) -> (tokio::task::JoinHandle<()>, watch::Sender<bool>) {
    let sim: SimulatedProbe = SimulatedProbe::new("test", &"2:16GiB".parse().unwrap());
    let gpus = sim.inventory().unwrap();
    let config = AgentConfig {
        coordinator: url,
        agent_name: "test".into(),
        host_name: "test-host".into(),
        address: "127.0.0.1".into(),
        interval: Duration::from_millis(100),
        work_dir: work.to_path_buf(),
        rank_program: program.clone(),
        doctor: cohort_agent::doctor::DoctorSetup {
            simulate: Some("2:16GiB".parse().unwrap()),
            agent_name: "test".into(),
            rank_program: program,
            roots: Vec::new(),
            all_reduce_bytes: None,
            timeout: Duration::from_secs(60),
        },
        program_roots: Default::default(),
        program_sandbox: Default::default(),
        stop_grace: Duration::from_secs(5),
        resume_fetch: Default::default(),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(300),
        teams: Default::default(),
        tls: Default::default(),
    };
    let agent = Agent::new(config, telemetry::share(Box::new(sim)), gpus);
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        agent.run(stop_rx).await;
    });
    (task, stop_tx)
}

/// The small SAE config every test command carries (the fake ranks
/// ignore it; the agent writes it as their `--config`).
pub fn test_workload() -> cohort_spec::Workload {
    cohort_spec::Workload::from_toml(
        "[model]\nd_in = 4\n[optim]\nbatch_size = 8\nsteps = 1\n[data.synthetic]\nnum_samples = 4\n",
    )
    .unwrap()
}

pub fn start_ranks(training: &str, gpus: &[(i32, i32)], world_size: i32) -> In {
    In::StartRanks(v1::StartRanks {
        training_id: training.into(),
        attempt: 1,
        config: Some(v1::TrainingConfig::from(&test_workload())),
        world_size,
        master_addr: "127.0.0.1".into(),
        master_port: 29555,
        ranks: gpus
            .iter()
            .enumerate()
            .map(|(local, &(rank, gpu))| v1::LocalRankAssignment {
                rank,
                local_rank: local as i32,
                local_world_size: gpus.len() as i32,
                gpu_index: gpu,
                gpu_uuid: format!("GPU-SIM-test-{gpu}"),
            })
            .collect(),
        run_dir: String::new(),
        trace_context: Default::default(),
        published_checkpoints: vec![],
        team: String::new(),
        ..Default::default()
    })
}

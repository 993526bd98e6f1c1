//! The agent-session boundary on the real server (127.0.0.1:0, SQLite): two
//! agents connect over AgentService.Connect; one may not speak for the
//! other's GPUs or ranks. Refused messages change nothing and are counted
//! (issue 12, defect 4).

mod common;

use cohort_coordinator::context::Context;
use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_proto::v1::coordinator_message::Message as Command;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(20);

/// The Register of agent `name` with one GPU, `gpu`.
fn register(name: &str, gpu: &str) -> v1::AgentMessage {
    v1::AgentMessage {
        message: Some(Message::Register(v1::Register {
            program_roots: Vec::new(),
            team_program_roots: Vec::new(),
            host_name: name.into(),
            agent_name: name.into(),
            gpus: vec![v1::GpuInfo {
                index: 0,
                uuid: gpu.into(),
                name: "Simulated".into(),
                memory_total_bytes: 80 << 30,
                compute_capability: "9.0".into(),
                simulated: true,
            }],
            address: "127.0.0.1".into(),
            version: "test".into(),
            running_ranks: vec![],
        })),
    }
}

struct TestAgent {
    tx: mpsc::Sender<v1::AgentMessage>,
    commands: tonic::Streaming<v1::CoordinatorMessage>,
}

impl TestAgent {
    async fn connect(channel: Channel, name: &str, gpu: &str) -> Self {
        let (tx, rx) = mpsc::channel(16);
        tx.send(register(name, gpu)).await.unwrap();
        let mut commands = AgentServiceClient::new(channel)
            .connect(ReceiverStream::new(rx))
            .await
            .expect("Connect")
            .into_inner();
        let first = commands.message().await.unwrap().expect("Registered");
        assert!(matches!(first.message, Some(Command::Registered(_))));
        Self { tx, commands }
    }

    async fn send(&self, message: Message) {
        self.tx
            .send(v1::AgentMessage {
                message: Some(message),
            })
            .await
            .unwrap();
    }

    async fn rank_event(&self, id: &str, attempt: i32, kind: v1::rank_event::Kind) {
        self.send(Message::RankEvent(v1::RankEvent {
            training_id: id.into(),
            attempt,
            rank: 0,
            time: None,
            delivery: 0,
            kind: Some(kind),
        }))
        .await;
    }

    async fn start_ranks(&mut self) -> v1::StartRanks {
        loop {
            let m = tokio::time::timeout(WAIT, self.commands.message())
                .await
                .expect("a command in time")
                .unwrap()
                .expect("the stream is open");
            if let Some(Command::StartRanks(s)) = m.message {
                return s;
            }
        }
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    cohort_testkit::eventually(what, WAIT, || {
        let done = done();
        async move { done.then_some(()).ok_or("not yet".to_string()) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_speak_for_another_agents_gpus_or_ranks() {
    let db = common::sqlite().await;
    let ctx = Context::new(db.db.clone());
    let (fleet, refusals) = (ctx.fleet.clone(), ctx.refusals.clone());
    let server = common::server::TestServer::start(ctx).await;
    let channel = server.channel.clone();
    let mut a = TestAgent::connect(channel.clone(), "host-a", "GPU-a0").await;
    let b = TestAgent::connect(channel.clone(), "host-b", "GPU-b0").await;

    // b reports a sample of a's GPU: refused, a's GPU keeps no sample.
    b.send(Message::Telemetry(v1::TelemetrySamples {
        samples: vec![v1::GpuSample {
            gpu_uuid: "GPU-a0".into(),
            memory_used_bytes: 1 << 30,
            simulated: true,
            ..Default::default()
        }],
    }))
    .await;
    until("the foreign sample is refused", || {
        fleet.samples_refused() == 1
    })
    .await;
    assert!(fleet.latest("GPU-a0").is_none());

    // A training pinned to a's GPU.
    let config = cohort_spec::TrainingConfig::from_toml(
        "[model]\nd_in = 8\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n",
    )
    .unwrap();
    let mut trainings = TrainingServiceClient::new(channel.clone());
    let training = trainings
        .create_training(v1::CreateTrainingRequest {
            config: Some((&config).into()),
            gpus: Some(v1::GpuRequest {
                selection: Some(v1::gpu_request::Selection::GpuIds(
                    v1::gpu_request::GpuIds {
                        ids: vec!["GPU-a0".into()],
                    },
                )),
                queue: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let start = a.start_ranks().await;
    assert_eq!(start.training_id, training.id);

    // b claims a's rank started, then failed; and a speaks of a rank that
    // does not exist. All refused: nothing is written.
    use v1::rank_event::Kind;
    b.rank_event(
        &training.id,
        start.attempt,
        Kind::Started(v1::RankStarted { pid: 666 }),
    )
    .await;
    b.rank_event(
        &training.id,
        start.attempt,
        Kind::Exited(v1::RankExited {
            status: Some(v1::rank_exited::Status::ExitCode(1)),
            stderr_tail: String::new(),
        }),
    )
    .await;
    a.rank_event(
        "trn-nonexistent",
        1,
        Kind::Started(v1::RankStarted { pid: 1 }),
    )
    .await;
    until("three rank events refused", || refusals.rank_events() == 3).await;
    let get = |t: &mut TrainingServiceClient<Channel>| {
        let id = training.id.clone();
        let mut t = t.clone();
        async move {
            t.get_training(v1::GetTrainingRequest { id })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let now = get(&mut trainings).await;
    assert_eq!(now.state, v1::training::State::Scheduled as i32, "{now:?}");
    assert_eq!(now.ranks[0].pid, 0, "b's pid was not recorded");

    // a's own report is taken.
    a.rank_event(
        &training.id,
        start.attempt,
        Kind::Started(v1::RankStarted { pid: 4242 }),
    )
    .await;
    let now = cohort_testkit::eventually("the training to run", WAIT, || {
        let mut trainings = trainings.clone();
        async move {
            let now = get(&mut trainings).await;
            (now.state == v1::training::State::Running as i32)
                .then_some(now.clone())
                .ok_or(format!("{now:?}"))
        }
    })
    .await;
    assert_eq!(now.ranks[0].pid, 4242);
    assert_eq!(now.restart_count, 0);
    assert_eq!(refusals.rank_events(), 3);

    drop((a, b));
    tokio::time::timeout(WAIT, server.stop()).await.unwrap();
}

/// Registers `name` with GPU `gpu`; the status of a refused Connect.
async fn register_refused(channel: Channel, name: &str, gpu: &str) -> tonic::Status {
    let (tx, rx) = mpsc::channel(4);
    tx.send(register(name, gpu)).await.unwrap();
    match AgentServiceClient::new(channel)
        .connect(ReceiverStream::new(rx))
        .await
    {
        Err(status) => status,
        Ok(response) => {
            let mut stream = response.into_inner();
            match stream.message().await {
                Err(status) => status,
                Ok(m) => panic!("{name} registered {gpu}: {m:?}"),
            }
        }
    }
}

/// A GPU is bound to the first agent that registered it: another agent
/// reporting its UUID is refused (PERMISSION_DENIED, GPU_CLAIMED) and
/// nothing of it is recorded; once a cluster-admin forgets the first agent
/// (refused while it is connected), the other may register it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_is_bound_to_the_first_agent_that_registered_it() {
    let db = common::sqlite().await;
    let ctx = Context::new(db.db.clone());
    let server = common::server::TestServer::start(ctx.clone()).await;
    let first = TestAgent::connect(server.channel.clone(), "host-a", "GPU-real-0").await;

    let refused = register_refused(server.channel.clone(), "host-b", "GPU-real-0").await;
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert_eq!(
        cohort_proto::error::reason_of(&refused),
        Some(cohort_proto::error::Reason::GpuClaimed)
    );
    assert!(refused.message().contains("host-a"), "{refused:?}");
    let agents = db.db.list_agents().await.unwrap();
    assert_eq!(
        agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
        vec!["host-a"],
        "nothing of host-b is recorded"
    );

    let mut admin =
        cohort_proto::v1::admin_service_client::AdminServiceClient::new(server.channel.clone());
    let forget = |name: &str| v1::ForgetAgentRequest { name: name.into() };
    let busy = admin.forget_agent(forget("host-a")).await.unwrap_err();
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition, "{busy:?}");
    let missing = admin.forget_agent(forget("host-z")).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");

    drop(first);
    until("host-a to be disconnected", || ctx.fleet.agent_count() == 0).await;
    admin
        .forget_agent(forget("host-a"))
        .await
        .expect("forget host-a");
    let moved = TestAgent::connect(server.channel.clone(), "host-b", "GPU-real-0").await;
    let agents = db.db.list_agents().await.unwrap();
    assert_eq!(
        agents
            .iter()
            .map(|a| (a.name.as_str(), a.gpus.len()))
            .collect::<Vec<_>>(),
        vec![("host-b", 1)]
    );
    drop(moved);
    server.stop().await;
}

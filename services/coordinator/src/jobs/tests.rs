//! The runner in-process: a real SQLite database, the live fleet, and
//! agents that are in-memory connections (a command channel each) instead
//! of processes. The real-process integration tests stay beside these.

use super::*;
use crate::fleet::LiveAgent;
use crate::model::{GpuRecord, GpuRequest, GpuSelection};
use crate::persistence::{AgentRegistration, DatabaseTarget, NewTraining};
use cohort_proto::v1::coordinator_message::Message as Command;
use cohort_proto::v1::rank_event::Kind;
use tokio::sync::mpsc;

const GIB: u64 = 1 << 30;

pub(crate) struct Harness {
    _dir: tempfile::TempDir,
    pub db: Persistence,
    pub fleet: Fleet,
    pub jobs: Jobs,
}

/// An agent connected through a channel: what the coordinator sends it
/// arrives on `commands`.
pub(crate) struct MemoryAgent {
    pub id: String,
    pub gpus: Vec<v1::GpuInfo>,
    pub commands: mpsc::Receiver<v1::CoordinatorMessage>,
}

impl Harness {
    pub async fn new(settings: JobSettings) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Persistence::open(DatabaseTarget::Sqlite(dir.path().join("cohort.db")))
            .await
            .expect("open sqlite");
        let fleet = Fleet::new();
        let jobs = Jobs::new(db.clone(), fleet.clone(), settings);
        Self {
            _dir: dir,
            db,
            fleet,
            jobs,
        }
    }

    /// Registers an agent with `gpus` 80 GiB GPUs and connects it.
    pub async fn agent(&self, name: &str, gpus: usize) -> MemoryAgent {
        let infos: Vec<v1::GpuInfo> = (0..gpus)
            .map(|i| v1::GpuInfo {
                index: i as i32,
                uuid: format!("GPU-{name}-{i}"),
                name: "test GPU".into(),
                memory_total_bytes: 80 * GIB,
                compute_capability: "9.0".into(),
                simulated: true,
            })
            .collect();
        let id = self
            .db
            .register_agent(AgentRegistration {
                name: name.into(),
                host_name: name.into(),
                address: "127.0.0.1".into(),
                version: "test".into(),
                gpus: infos
                    .iter()
                    .map(|g| GpuRecord {
                        uuid: g.uuid.clone(),
                        index: g.index,
                        name: g.name.clone(),
                        memory_total_bytes: g.memory_total_bytes as i64,
                        compute_capability: g.compute_capability.clone(),
                        simulated: true,
                    })
                    .collect(),
            })
            .await
            .expect("register");
        let (tx, commands) = mpsc::channel(64);
        self.fleet.connect(LiveAgent {
            id: id.clone(),
            name: name.into(),
            host_name: name.into(),
            address: "127.0.0.1".into(),
            gpus: infos.clone(),
            session: 0,
            commands: tx,
            last_seen: std::time::Instant::now(),
        });
        MemoryAgent {
            id,
            gpus: infos,
            commands,
        }
    }

    /// A queued training of `gpus` ranks with `max_restarts`.
    pub async fn create(&self, gpus: u32, max_restarts: i32) -> Training {
        let config = cohort_spec::TrainingConfig::from_toml(
            "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = 4\nsteps = 100\n[data.synthetic]\nnum_samples = 64\n",
        )
        .expect("config");
        self.db
            .create_training(NewTraining {
                request_id: None,
                display_name: "runner test".into(),
                config,
                gpu_request: GpuRequest {
                    selection: GpuSelection::Count { count: gpus },
                    queue: true,
                },
                priority: 0,
                max_restarts,
                trace_context: None,
            })
            .await
            .expect("create")
            .training
    }

    pub async fn training(&self, id: &str) -> Training {
        self.db.get_training(id).await.unwrap().expect("training")
    }

    /// Sends a rank event as `agent` would.
    pub async fn event(&self, agent: &MemoryAgent, id: &str, attempt: i32, rank: i32, kind: Kind) {
        let event = v1::RankEvent {
            training_id: id.into(),
            attempt,
            rank,
            time: None,
            kind: Some(kind),
        };
        self.jobs
            .on_rank_event(&agent.id, event)
            .await
            .expect("rank event");
    }
}

impl MemoryAgent {
    /// The next StartRanks sent to this agent (panics when none is waiting).
    pub fn started(&mut self) -> v1::StartRanks {
        loop {
            match self.commands.try_recv().expect("a command") {
                v1::CoordinatorMessage {
                    message: Some(Command::StartRanks(s)),
                } => return s,
                _ => continue,
            }
        }
    }
}

fn started(pid: u32) -> Kind {
    Kind::Started(v1::RankStarted { pid })
}

fn exited(code: i32) -> Kind {
    Kind::Exited(v1::RankExited {
        status: Some(v1::rank_exited::Status::ExitCode(code)),
        stderr_tail: String::new(),
    })
}

/// One rank placed on `agent` and started; returns the training.
async fn running(h: &Harness, agent: &mut MemoryAgent, max_restarts: i32) -> Training {
    let training = h.create(1, max_restarts).await;
    h.jobs.schedule_pass().await.unwrap();
    let start = agent.started();
    assert_eq!(start.training_id, training.id);
    h.event(agent, &training.id, start.attempt, 0, started(100))
        .await;
    let training = h.training(&training.id).await;
    assert_eq!(training.state, JobState::Running);
    assert!(h.jobs.tracks(&training.id));
    training
}

#[tokio::test]
async fn a_succeeded_training_leaves_nothing_in_the_runner() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 3).await;
    h.event(&agent, &t.id, t.attempt, 0, exited(0)).await;
    assert_eq!(h.training(&t.id).await.state, JobState::Succeeded);
    assert!(!h.jobs.tracks(&t.id));
    assert!(h.fleet.holder(&agent.gpus[0].uuid).is_none());
}

#[tokio::test]
async fn cancelling_a_running_training_ends_its_attempt_in_the_runner() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 3).await;
    h.jobs.cancel(&t.id, "cancelled by a test").await.unwrap();
    assert_eq!(h.training(&t.id).await.state, JobState::Cancelled);
    assert!(
        !h.jobs.tracks(&t.id),
        "the attempt's span and progress must go"
    );
    assert!(h.fleet.holder(&agent.gpus[0].uuid).is_none());
}

#[tokio::test]
async fn cancelling_a_restarting_training_forgets_its_teardown() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 3).await;
    // A crash (signal-like infrastructure exit): a gang restart begins.
    h.event(&agent, &t.id, t.attempt, 0, exited(77)).await;
    let restarting = h.training(&t.id).await;
    assert_eq!(restarting.state, JobState::Restarting);
    assert!(h.jobs.tracks(&t.id), "the teardown is under way");
    h.jobs.cancel(&t.id, "cancelled by a test").await.unwrap();
    assert_eq!(h.training(&t.id).await.state, JobState::Cancelled);
    assert!(!h.jobs.tracks(&t.id), "teardown and GPUs to avoid must go");
}

#[tokio::test]
async fn a_spent_restart_budget_leaves_nothing_in_the_runner() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 0).await;
    h.event(&agent, &t.id, t.attempt, 0, exited(77)).await;
    let failed = h.training(&t.id).await;
    assert_eq!(failed.state, JobState::Failed, "{}", failed.state_reason);
    assert!(failed.state_reason.contains("restart budget of 0 spent"));
    assert!(!h.jobs.tracks(&t.id));
}

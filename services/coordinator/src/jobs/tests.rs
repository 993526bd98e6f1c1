//! The runner in-process: a real SQLite database, the live fleet, and
//! agents that are in-memory connections (a command channel each) instead
//! of processes. The runner's clocks are tokio's, so the tests that wait
//! for deadlines (a hang, a lost agent) run on paused time, in milliseconds.
//! The real-process integration tests stay beside these.

use super::*;
use crate::fleet::{AgentCommand, LiveAgent, StartRanks};
use crate::model::{GpuRecord, GpuRequest, GpuSelection};
use crate::persistence::{AgentRegistration, DatabaseTarget, NewTraining};
use cohort_proto::v1;
use cohort_proto::v1::rank_event::Kind;
use std::time::Duration;
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
    pub gpus: Vec<GpuRecord>,
    pub commands: mpsc::Receiver<AgentCommand>,
}

impl Harness {
    pub async fn new(settings: JobSettings) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Persistence::open(DatabaseTarget::Sqlite(dir.path().join("cohort.db")))
            .await
            .expect("open sqlite");
        let fleet = Fleet::new();
        let jobs = Jobs::new(db.clone(), fleet.clone(), settings, Default::default());
        Self {
            _dir: dir,
            db,
            fleet,
            jobs,
        }
    }

    /// Registers an agent with `gpus` 80 GiB GPUs and connects it.
    pub async fn agent(&self, name: &str, gpus: usize) -> MemoryAgent {
        let infos: Vec<GpuRecord> = (0..gpus)
            .map(|i| GpuRecord {
                index: i as i32,
                uuid: format!("GPU-{name}-{i}"),
                name: "test GPU".into(),
                memory_total_bytes: 80 * GIB,
                compute_capability: "9.0".into(),
                simulated: true,
                quarantine: None,
            })
            .collect();
        let id = self
            .db
            .register_agent(AgentRegistration {
                name: name.into(),
                host_name: name.into(),
                address: "127.0.0.1".into(),
                version: "test".into(),
                gpus: infos.clone(),
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
            program_roots: Default::default(),
            session: 0,
            commands: tx,
            last_seen: tokio::time::Instant::now(),
            cordon: None,
            drain_deadline: None,
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
                config: config.into(),
                gpu_request: GpuRequest {
                    selection: GpuSelection::Count { count: gpus },
                    queue: true,
                },
                priority: 0,
                priority_class: String::new(),
                borrow: true,
                max_restarts,
                trace_context: None,
                team: String::new(),
                creator: "anonymous".into(),
                labels: Default::default(),
                audit: None,
                max_queued: None,
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
            delivery: 0,
            kind: Some(kind),
        };
        self.jobs
            .on_rank_event(&agent.id, event.try_into().expect("a kind"))
            .await
            .expect("rank event");
    }
}

impl MemoryAgent {
    /// The next StartRanks sent to this agent (panics when none is waiting).
    pub fn started(&mut self) -> StartRanks {
        loop {
            if let AgentCommand::StartRanks(s) = self.commands.try_recv().expect("a command") {
                return *s;
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
    h.jobs
        .cancel(&t.id, "cancelled by a test", None)
        .await
        .unwrap();
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
    h.jobs
        .cancel(&t.id, "cancelled by a test", None)
        .await
        .unwrap();
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

/// The runner's deadlines, short enough to read and far from each other.
fn deadlines() -> JobSettings {
    JobSettings {
        agent_timeout: Duration::from_secs(10),
        hang_floor: Duration::from_secs(60),
        stop_grace: Duration::from_secs(5),
        ..JobSettings::default()
    }
}

fn progress(step: i64) -> Kind {
    Kind::Progress(v1::RankProgress {
        json_line: format!(
            r#"{{"event":"progress","step":{step},"loss":0.5,"mse":0.4,"l1":0.1,"mean_abs_z":0.2,"steps_per_s":10.0}}"#
        ),
    })
}

#[tokio::test(start_paused = true)]
async fn a_silent_running_attempt_is_a_hang_past_its_deadline_and_restarts() {
    let h = Harness::new(deadlines()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 3).await;
    h.event(&agent, &t.id, t.attempt, 0, progress(10)).await;
    tokio::time::advance(Duration::from_secs(59)).await;
    h.fleet.touch(&agent.id); // the agent itself keeps heartbeating
    h.jobs.watchdog_pass().await.unwrap();
    assert_eq!(
        h.training(&t.id).await.state,
        JobState::Running,
        "within the floor"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    h.fleet.touch(&agent.id);
    h.jobs.watchdog_pass().await.unwrap();
    let hung = h.training(&t.id).await;
    assert_eq!(hung.state, JobState::Restarting);
    assert!(
        hung.state_reason.starts_with("HANG: "),
        "{}",
        hung.state_reason
    );
    assert_eq!(hung.restart_count, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_agent_restarts_its_gangs_elsewhere_after_the_agent_timeout() {
    let h = Harness::new(deadlines()).await;
    let mut a = h.agent("a", 1).await;
    let t = running(&h, &mut a, 3).await;
    let mut b = h.agent("b", 1).await;
    // a's stream broke: the fleet no longer has it.
    let session = h.fleet.agent(&a.id).unwrap().session;
    assert!(h.fleet.disconnect(&a.id, session));
    h.jobs.watchdog_pass().await.unwrap();
    assert_eq!(
        h.training(&t.id).await.state,
        JobState::Running,
        "missing, not yet lost"
    );
    tokio::time::advance(Duration::from_secs(11)).await;
    h.fleet.touch(&b.id);
    h.jobs.watchdog_pass().await.unwrap();
    let lost = h.training(&t.id).await;
    assert_eq!(lost.state, JobState::Restarting);
    assert!(
        lost.state_reason.starts_with("agent a lost"),
        "{}",
        lost.state_reason
    );
    // Its ranks are LOST (their agent is gone), so the teardown is done and
    // the next pass places attempt 2 on b.
    h.jobs.schedule_pass().await.unwrap();
    let start = b.started();
    assert_eq!(
        (start.training_id.as_str(), start.attempt),
        (t.id.as_str(), 2)
    );
    assert_eq!(h.training(&t.id).await.state, JobState::Scheduled);
}

#[tokio::test(start_paused = true)]
async fn a_crash_restarts_the_gang_once_its_exit_is_confirmed() {
    let h = Harness::new(deadlines()).await;
    let mut agent = h.agent("a", 2).await;
    let training = h.create(2, 3).await;
    h.jobs.schedule_pass().await.unwrap();
    let start = agent.started();
    for rank in 0..2 {
        h.event(&agent, &training.id, 1, rank, started(100 + rank as u32))
            .await;
    }
    // Rank 1 crashes; rank 0 is asked to stop but has not exited yet.
    h.event(&agent, &training.id, 1, 1, exited(77)).await;
    assert_eq!(h.training(&training.id).await.state, JobState::Restarting);
    h.jobs.schedule_pass().await.unwrap();
    assert_eq!(
        h.training(&training.id).await.state,
        JobState::Restarting,
        "not re-placed while rank 0 may still run"
    );
    h.event(&agent, &training.id, 1, 0, exited(143)).await;
    h.jobs.schedule_pass().await.unwrap();
    let again = h.training(&training.id).await;
    assert_eq!((again.state, again.attempt), (JobState::Scheduled, 2));
    let restart = loop {
        let s = agent.started();
        if s.attempt == 2 {
            break s;
        }
    };
    assert_eq!(restart.ranks.len(), 2);
    assert_eq!(start.world_size, restart.world_size);
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_teardown_is_marked_lost_after_its_deadline() {
    let h = Harness::new(deadlines()).await;
    let mut agent = h.agent("a", 2).await;
    let training = h.create(2, 3).await;
    h.jobs.schedule_pass().await.unwrap();
    agent.started();
    for rank in 0..2 {
        h.event(&agent, &training.id, 1, rank, started(100 + rank as u32))
            .await;
    }
    h.event(&agent, &training.id, 1, 1, exited(77)).await;
    // Rank 0 never confirms its exit; its agent stays connected.
    h.jobs.schedule_pass().await.unwrap();
    assert_eq!(h.training(&training.id).await.state, JobState::Restarting);
    // stop_grace + agent_timeout later, it is marked LOST and the gang re-placed.
    tokio::time::advance(Duration::from_secs(16)).await;
    h.fleet.touch(&agent.id);
    h.jobs.schedule_pass().await.unwrap();
    let again = h.training(&training.id).await;
    assert_eq!((again.state, again.attempt), (JobState::Scheduled, 2));
    let ranks = h.db.ranks(&training.id, 1).await.unwrap();
    assert_eq!(ranks[0].state, crate::model::RankState::Lost);
}

fn line(json: &str) -> Kind {
    Kind::Progress(v1::RankProgress {
        json_line: json.to_string(),
    })
}

#[tokio::test]
async fn a_diverged_run_restarts_at_a_tenth_of_the_rate_then_fails_as_diverged() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 1).await;
    assert_eq!(t.config.sae().unwrap().optim.learning_rate, 1e-3);
    h.event(&agent, &t.id, 1, 0, exited(15)).await;
    let restarting = h.training(&t.id).await;
    assert_eq!(restarting.state, JobState::Restarting);
    assert!(
        restarting
            .state_reason
            .starts_with("TRAINING_DIVERGED: rank 0 exited with code 15 (diverged)")
            && restarting
                .state_reason
                .ends_with("learning rate 1e-3 -> 1e-4 for the next attempt"),
        "{}",
        restarting.state_reason
    );
    assert_eq!(
        restarting.config.sae().unwrap().optim.learning_rate,
        1e-4,
        "stored with the restart"
    );
    // The next attempt gets the lowered rate, on the same GPU (not its fault).
    h.jobs.schedule_pass().await.unwrap();
    let next = agent.started();
    assert_eq!(next.attempt, 2);
    assert_eq!(next.config.sae().unwrap().optim.learning_rate, 1e-4);
    h.event(&agent, &t.id, 2, 0, started(101)).await;
    h.event(&agent, &t.id, 2, 0, exited(15)).await;
    let failed = h.training(&t.id).await;
    assert_eq!(failed.state, JobState::Failed);
    assert!(
        failed
            .state_reason
            .starts_with("TRAINING_DIVERGED: restart budget of 1 spent"),
        "{}",
        failed.state_reason
    );
    assert_eq!(
        failed.config.sae().unwrap().optim.learning_rate,
        1e-4,
        "no restart left to lower it for"
    );
    assert!(!h.jobs.tracks(&t.id));
}

#[tokio::test]
async fn a_run_that_finished_on_a_nan_loss_does_not_succeed() {
    let h = Harness::new(JobSettings::default()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 0).await;
    let finished = r#"{"event":"finished","step":100,"loss":null,"param_checksum":"x","wall_time_s":1.0,"mean_samples_per_sec":1.0}"#;
    h.event(&agent, &t.id, 1, 0, line(finished)).await;
    h.event(&agent, &t.id, 1, 0, exited(0)).await;
    let failed = h.training(&t.id).await;
    assert_eq!(failed.state, JobState::Failed, "{}", failed.state_reason);
    assert!(
        failed.state_reason.starts_with("TRAINING_DIVERGED: ")
            && failed
                .state_reason
                .contains("rank 0 finished with loss NaN"),
        "{}",
        failed.state_reason
    );
}

/// Trainings whose rank 0 share a host get MASTER_PORTs no placed training
/// there uses: four trainings, four ports in the range, all taken once.
#[tokio::test]
async fn trainings_on_one_host_get_distinct_master_ports() {
    let h = Harness::new(JobSettings {
        master_ports: 29500..=29503,
        ..Default::default()
    })
    .await;
    let mut agent = h.agent("host-a", 4).await;
    for _ in 0..4 {
        h.create(1, 0).await;
    }
    h.jobs.schedule_pass().await.unwrap();
    let mut ports: Vec<u16> = (0..4).map(|_| agent.started().master_port).collect();
    ports.sort_unstable();
    assert_eq!(ports, vec![29500, 29501, 29502, 29503]);
}

fn checkpoint(step: i64) -> Kind {
    line(&format!(
        r#"{{"event":"checkpoint","step":{step},"path":"/shared/ckpt/step-{step}"}}"#
    ))
}

/// A rank of attempt 1 that missed its stop (a partitioned host that came
/// back) reports a checkpoint after attempt 2 was placed: it is not
/// recorded, not listed, and the next attempt is not told it may resume
/// from it; attempt 1's checkpoints from before the restart are.
#[tokio::test(start_paused = true)]
async fn a_superseded_attempt_cannot_publish_a_checkpoint() {
    let h = Harness::new(deadlines()).await;
    let mut agent = h.agent("a", 1).await;
    let t = running(&h, &mut agent, 3).await;
    h.event(&agent, &t.id, 1, 0, checkpoint(20)).await;
    h.event(&agent, &t.id, 1, 0, exited(77)).await;
    h.jobs.schedule_pass().await.unwrap();
    let second = loop {
        let s = agent.started();
        if s.attempt == 2 {
            break s;
        }
    };
    assert_eq!(second.published_checkpoints, vec![(1, 20)]);
    h.event(&agent, &t.id, 2, 0, started(101)).await;
    // The stale rank's late checkpoint, then attempt 2's own.
    h.event(&agent, &t.id, 1, 0, checkpoint(40)).await;
    h.event(&agent, &t.id, 2, 0, checkpoint(30)).await;
    let recorded: Vec<(i32, i64)> =
        h.db.checkpoints(&t.id)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.attempt, c.step))
            .collect();
    assert_eq!(recorded, vec![(1, 20), (2, 30)]);
    // Attempt 3 may resume from what attempts 1 and 2 published only.
    h.event(&agent, &t.id, 2, 0, exited(77)).await;
    h.jobs.schedule_pass().await.unwrap();
    let third = loop {
        let s = agent.started();
        if s.attempt == 3 {
            break s;
        }
    };
    assert_eq!(third.published_checkpoints, vec![(2, 30), (1, 20)]);
}

/// A gang over two hosts: each agent is told its place among them (by
/// their first rank, as torchrun numbers nodes) and the restart budget.
#[tokio::test]
async fn each_host_of_a_gang_learns_its_group_rank() {
    let h = Harness::new(JobSettings::default()).await;
    let mut a = h.agent("a", 1).await;
    let mut b = h.agent("b", 1).await;
    let training = h.create(2, 5).await;
    h.jobs.schedule_pass().await.unwrap();
    let (sa, sb) = (a.started(), b.started());
    let mut starts = [sa, sb];
    starts.sort_by_key(|s| s.ranks[0].rank);
    for (group_rank, s) in starts.iter().enumerate() {
        assert_eq!(s.training_id, training.id);
        assert_eq!(s.group_rank, group_rank as i32, "{s:?}");
        assert_eq!((s.group_world_size, s.max_restarts), (2, 5));
    }
}

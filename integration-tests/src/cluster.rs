//! A coordinator on a fresh database plus simulated agents, on 127.0.0.1.

mod agents;
mod calls;
mod peers;
mod security;

pub use agents::AgentSpec;
pub use security::{connect, Security, ServerTls};

use crate::bins::{binaries, Binaries};
use crate::db::{Backend, TestDatabase};
use crate::launch;
use crate::procs::{self, ChildProc};
use cohort_testkit::PortLease;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;

/// How long the coordinator gets to answer health checks after it starts.
pub const COORDINATOR_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the agents get to register their GPUs.
pub const AGENTS_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a CLI command may take.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// How long agents get to stop their ranks on SIGTERM before everything is SIGKILLed.
const AGENT_STOP_TIMEOUT: Duration = Duration::from_secs(8);

/// Held by every cluster with agents: tests of one test binary run in
/// parallel, but two sets of rank processes on a 2-core machine slow each
/// other past their deadlines, so clusters with agents take turns.
static RANKS_TURN: Mutex<()> = Mutex::new(());

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub backend: Backend,
    /// Number of agents (`agent-0`, `agent-1`, ...).
    pub agents: usize,
    /// Simulated GPUs per agent.
    pub gpus_per_agent: usize,
    /// Extra environment of the coordinator and the agents.
    pub env: Vec<(String, String)>,
    /// More flags of every agent (e.g. `--data-root DIR`).
    pub agent_args: Vec<String>,
    /// More flags of every coordinator (e.g. `--lease-ttl 3s`).
    pub coordinator_args: Vec<String>,
    /// Start no agent in [`Cluster::start`] (the test starts them with
    /// [`Cluster::start_agents`], e.g. once every coordinator is up); the
    /// ranks' turn is taken all the same.
    pub defer_agents: bool,
    /// Coordinators reach PostgreSQL at this `host:port` (a proxy the test
    /// can cut) instead of the server itself.
    pub database_via: Option<String>,
    /// TLS, the agent CA and the auth mode of every coordinator.
    pub security: Security,
}

impl ClusterOptions {
    pub fn new(backend: Backend, agents: usize) -> ClusterOptions {
        ClusterOptions {
            backend,
            agents,
            gpus_per_agent: 2,
            env: Vec::new(),
            agent_args: Vec::new(),
            coordinator_args: Vec::new(),
            defer_agents: false,
            database_via: None,
            security: Security::default(),
        }
    }
}

/// A coordinator and its agents, plaintext or secured (see
/// [`ClusterOptions::security`]). Dropping it stops the agents (which
/// stop their ranks), kills the coordinator and any rank left with this
/// cluster's mark, drops the PostgreSQL schema, and removes the temp dir
/// (kept, with the logs' tails printed, when the test panicked, or with
/// `COHORT_IT_KEEP` set).
pub struct Cluster {
    pub options: ClusterOptions,
    pub bins: Binaries,
    /// This cluster's value of [`crate::procs::MARK_VAR`], inherited by agents and ranks.
    pub mark: String,
    pub port: u16,
    coordinator: Option<ChildProc>,
    coordinator_starts: usize,
    /// Coordinator 0's port, held bound from [`Cluster::prepare`] until
    /// [`Cluster::launch`] hands it over.
    lease: Option<PortLease>,
    /// More coordinators on the same database (PostgreSQL): 1, 2, ...
    peers: Vec<peers::Peer>,
    agents: Vec<ChildProc>,
    db: TestDatabase,
    root: Option<tempfile::TempDir>,
    _turn: Option<MutexGuard<'static, ()>>,
}

impl Cluster {
    /// Starts the coordinator, waits until it is SERVING, starts the agents
    /// and waits until the coordinator lists all their GPUs.
    pub async fn start(options: ClusterOptions) -> Cluster {
        let mut cluster = Cluster::prepare(options);
        cluster.launch().await;
        cluster
    }

    /// Makes the temp dir, the database and coordinator 0's port; nothing
    /// runs until [`Cluster::launch`] (time for [`Cluster::bootstrap_token`]).
    pub fn prepare(options: ClusterOptions) -> Cluster {
        let bins = binaries().clone();
        let turn = (options.agents > 0).then(|| {
            RANKS_TURN
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        });
        let root = tempfile::Builder::new()
            .prefix("cohort-it-")
            .tempdir()
            .expect("temp dir");
        let data_dir = root.path().join("coordinator");
        std::fs::create_dir_all(&data_dir).expect("data dir");
        let db = TestDatabase::create(options.backend, &data_dir);
        let lease = PortLease::new();
        Cluster {
            options,
            bins,
            mark: uuid::Uuid::new_v4().simple().to_string(),
            port: lease.port(),
            coordinator: None,
            coordinator_starts: 0,
            lease: Some(lease),
            peers: Vec::new(),
            agents: Vec::new(),
            db,
            root: Some(root),
            _turn: turn,
        }
    }

    /// Starts coordinator 0, waits until it is SERVING, and starts the
    /// agents unless [`ClusterOptions::defer_agents`].
    pub async fn launch(&mut self) {
        let lease = self.lease.take().expect("a cluster is launched once");
        self.spawn_coordinator_on(lease);
        if let Err(e) = self.wait_serving().await {
            self.fail(&e);
        }
        if !self.options.defer_agents {
            self.start_agents().await;
        }
    }

    /// The temp dir holding the data dir, agent work dirs, configs and logs.
    pub fn root(&self) -> &Path {
        self.root
            .as_ref()
            .expect("the root lives as long as the cluster")
            .path()
    }

    /// Coordinator 0's gRPC URL (`https://` with TLS).
    pub fn url(&self) -> String {
        self.coordinator_url(0)
    }

    /// Coordinator 0's data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.root().join("coordinator")
    }

    pub fn db(&self) -> &TestDatabase {
        &self.db
    }

    /// Starts the coordinator again on its port (free again once the last
    /// one is gone).
    fn spawn_coordinator(&mut self) {
        let lease = self.lease_again(self.port);
        self.spawn_coordinator_on(lease);
    }

    fn spawn_coordinator_on(&mut self, lease: PortLease) {
        self.coordinator_starts += 1;
        let process = self.coordinator_process("coordinator", lease, self.coordinator_starts, &[]);
        self.coordinator = Some(process);
    }

    /// `port` bound again for a coordinator restarted on it.
    fn lease_again(&self, port: u16) -> PortLease {
        PortLease::on(port).unwrap_or_else(|e| {
            self.fail(&format!(
                "port {port} is taken after its coordinator stopped: {e}"
            ))
        })
    }

    /// A coordinator process named `name` (its data dir and log), serving
    /// on the socket of `lease` (handed over bound: `--listen-fd`).
    fn coordinator_process(
        &self,
        name: &str,
        lease: PortLease,
        start: usize,
        extra: &[String],
    ) -> ChildProc {
        let port = lease.port();
        let data_dir = self.root().join(name);
        let log = self.root().join(format!("{name}.log"));
        let mut command = launch::coordinator(&self.bins, port, &data_dir, &self.mark);
        command
            .args(
                self.db
                    .coordinator_args_via(self.options.database_via.as_deref()),
            )
            .args(&self.options.coordinator_args)
            .args(extra)
            .envs(self.options.env.iter().cloned());
        self.options.security.apply(&mut command);
        lease.pass_to(&mut command, 3);
        let _ = std::fs::write(&log, format!("---- {name} start #{start} ----\n"));
        // The child holds the only copy of the socket from now on.
        ChildProc::spawn(name, command, &log)
    }

    /// Polls grpc.health.v1 Check of TrainingService until SERVING: up,
    /// and leading (at once on SQLite; on PostgreSQL once elected). Health
    /// needs no token, so this holds with any [`Security`].
    async fn wait_serving(&mut self) -> Result<(), String> {
        let mut process = self.coordinator.take().expect("a coordinator was started");
        let serving = launch::until_ready(&mut process, COORDINATOR_READY_TIMEOUT, || async {
            match self.health("cohort.v1.TrainingService").await? {
                ServingStatus::Serving => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        self.coordinator = Some(process);
        serving.map_err(|e| format!("the coordinator was not SERVING: {e}"))
    }

    /// grpc.health.v1 Check of `service` ("" for the whole server).
    pub async fn health(&self, service: &str) -> Result<ServingStatus, String> {
        self.health_at(0, service).await
    }

    /// Kills the coordinator with SIGKILL (no shutdown, no goodbye to the agents).
    pub fn kill_coordinator(&mut self) {
        if let Some(mut c) = self.coordinator.take() {
            c.kill();
        }
    }

    /// Starts the coordinator again on the same port and database; waits for SERVING.
    pub async fn restart_coordinator(&mut self) {
        self.kill_coordinator();
        self.spawn_coordinator();
        if let Err(e) = self.wait_serving().await {
            self.fail(&e);
        }
    }

    /// Coordinator 0's log so far.
    pub fn coordinator_log(&self) -> String {
        std::fs::read_to_string(self.root().join("coordinator.log")).unwrap_or_default()
    }

    /// The tails of every log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(self.root())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            if path.extension().is_some_and(|e| e == "log") {
                out.push_str(&format!(
                    "==== {} (last {lines} lines) ====\n{}\n",
                    path.display(),
                    procs::log_tail(&path, lines)
                ));
            }
        }
        out
    }

    /// Panics with `message` and the logs' tails.
    pub fn fail(&self, message: &str) -> ! {
        panic!("{message}\n{}", self.logs(40));
    }

    fn stop_everything(&mut self) {
        for agent in &mut self.agents {
            agent.signal_group(Signal::SIGTERM);
        }
        for agent in &mut self.agents {
            if agent.wait_timeout(AGENT_STOP_TIMEOUT).is_none() {
                eprintln!("{} did not stop on SIGTERM; killing it", agent.name);
            }
            agent.kill();
        }
        self.kill_coordinator();
        for peer in &mut self.peers {
            if let Some(mut p) = peer.process.take() {
                p.signal_group(Signal::SIGCONT);
                p.kill();
            }
        }
        let left = self.rank_processes();
        if !left.is_empty() {
            eprintln!("killing rank processes left behind: {left:?}");
            procs::kill_groups(&left);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_everything();
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("{}", self.logs(60));
        }
        // COHORT_IT_KEEP=1 keeps a passing test's files too (to read its logs).
        if panicking || std::env::var_os("COHORT_IT_KEEP").is_some() {
            if let Some(root) = self.root.take() {
                let kept = root.keep();
                eprintln!("test files kept in {}", kept.display());
            }
        }
    }
}

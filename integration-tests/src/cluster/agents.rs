//! A cluster's agents: the numbered ones its options ask for (`agent-0`,
//! `agent-1`, ...) and the ones a test names and equips itself (TLS
//! files, team roots), each with its own work dir and log.

use super::{Cluster, AGENTS_READY_TIMEOUT};
use crate::launch;
use crate::procs::ChildProc;
use cohort_proto::v1;
use cohort_proto::v1::gpu_service_client::GpuServiceClient;
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::time::Duration;

/// An agent to start: its name (also its work dir's and log's), its
/// simulated GPUs, flags and environment of its own besides the cluster's.
#[derive(Debug, Clone, Default)]
pub struct AgentSpec {
    pub name: String,
    pub gpus: usize,
    pub flags: Vec<String>,
    /// Variables of the agent's host (not handed to its ranks).
    pub env: Vec<(String, String)>,
}

impl AgentSpec {
    /// `name` with `gpus` simulated GPUs and `flags`.
    pub fn new(name: &str, gpus: usize, flags: &[String]) -> AgentSpec {
        AgentSpec {
            name: name.to_string(),
            gpus,
            flags: flags.to_vec(),
            env: Vec::new(),
        }
    }
}

impl Cluster {
    /// Starts every numbered agent and waits until the coordinator lists
    /// their GPUs.
    pub async fn start_agents(&mut self) {
        for i in 0..self.options.agents {
            self.start_agent(i);
        }
        if self.options.agents > 0 {
            self.wait_for_gpus().await;
        }
    }

    /// The work dir of agent `i`.
    pub fn agent_work_dir(&self, i: usize) -> PathBuf {
        self.root().join(self.agent_name(i))
    }

    /// The name of agent `i`.
    pub fn agent_name(&self, i: usize) -> String {
        format!("agent-{i}")
    }

    /// Starts numbered agent `i` with the options' GPUs and flags.
    pub fn start_agent(&mut self, i: usize) {
        let spec = AgentSpec::new(
            &self.agent_name(i),
            self.options.gpus_per_agent,
            &self.options.agent_args,
        );
        self.start_agent_as(spec);
    }

    /// Starts the agent `spec` describes (again, when one of that name ran
    /// before), told every coordinator; its log is `<root>/<name>.log`.
    pub fn start_agent_as(&mut self, spec: AgentSpec) {
        let work_dir = self.root().join(&spec.name);
        std::fs::create_dir_all(&work_dir).expect("agent work dir");
        let log = self.root().join(format!("{}.log", spec.name));
        let coordinators = self.coordinator_urls().join(",");
        let mut command = launch::agent(
            &self.bins,
            &launch::AgentLaunch {
                coordinators: &coordinators,
                name: &spec.name,
                gpus: spec.gpus,
                work_dir: &work_dir,
                interval: "500ms",
                mark: &self.mark,
                rank_env: &self.options.env,
            },
        );
        command
            .args(&spec.flags)
            .envs(self.options.env.iter().cloned())
            .envs(spec.env.iter().cloned());
        let agent = ChildProc::spawn(&spec.name, command, &log);
        match self.agents.iter_mut().find(|a| a.name == spec.name) {
            Some(slot) => *slot = agent,
            None => self.agents.push(agent),
        }
    }

    /// Waits until ListGpus (asked with no token) shows every numbered
    /// agent's GPUs; fails, with the logs, when an agent exits first.
    pub async fn wait_for_gpus(&mut self) {
        let want = self.options.agents * self.options.gpus_per_agent;
        let deadline = tokio::time::Instant::now() + AGENTS_READY_TIMEOUT;
        loop {
            match self.live_gpus_at(0).await {
                Ok(live) if live >= want => return,
                Ok(live) if tokio::time::Instant::now() >= deadline => self.fail(&format!(
                    "agents did not register their GPUs: {live} of {want} connected"
                )),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    self.fail(&format!("agents did not register their GPUs: {e}"))
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            for agent in &mut self.agents {
                if let Some(status) = agent.try_exit() {
                    let msg = format!("{} exited ({status}) while registering", agent.name);
                    self.fail(&msg);
                }
            }
        }
    }

    /// How many GPUs coordinator `i` lists as connected, asked with no
    /// token (GPUs of agents not (yet) connected are listed OFFLINE).
    pub async fn live_gpus_at(&self, i: usize) -> Result<usize, String> {
        let ca = self.options.security.client_ca();
        let channel = super::connect(&self.coordinator_url(i), ca, Duration::from_secs(2))
            .await
            .map_err(|e| e.to_string())?;
        let gpus = GpuServiceClient::new(channel)
            .list_gpus(v1::ListGpusRequest::default())
            .await
            .map_err(|s| format!("ListGpus: {s:?}"))?
            .into_inner()
            .gpus;
        Ok(gpus
            .iter()
            .filter(|g| g.availability() != v1::GpuAvailability::Offline)
            .count())
    }

    /// Sends `signal` to the agent named `name`.
    pub fn signal_agent(&mut self, name: &str, signal: Signal) {
        let agent = self.agents.iter_mut().find(|a| a.name == name);
        agent
            .unwrap_or_else(|| panic!("no agent {name}"))
            .signal_group(signal);
    }

    /// The log so far of the agent named `name`.
    pub fn agent_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.root().join(format!("{name}.log"))).unwrap_or_default()
    }
}

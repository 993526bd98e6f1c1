//! More coordinators on the cluster's database (PostgreSQL): the first one
//! is coordinator 0, its peers 1, 2, ... Each has its own port, data dir
//! (`coordinator-N`) and log; they elect a leader among themselves.

use super::Cluster;
use crate::procs::{self, ChildProc};
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_testkit::eventually;
use cohort_testkit::PortLease;
use nix::sys::signal::Signal;
use std::process::ExitStatus;
use std::process::Output;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How long one health check of one coordinator may take (a stopped one
/// never answers).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) struct Peer {
    port: u16,
    pub(super) process: Option<ChildProc>,
    starts: usize,
    /// Its own flags, besides the cluster's.
    args: Vec<String>,
}

impl Cluster {
    /// Every coordinator's URL: coordinator 0 first.
    pub fn coordinator_urls(&self) -> Vec<String> {
        (0..=self.peers.len())
            .map(|i| self.coordinator_url(i))
            .collect()
    }

    /// Coordinator `i`'s URL.
    pub fn coordinator_url(&self, i: usize) -> String {
        let port = if i == 0 {
            self.port
        } else {
            self.peers[i - 1].port
        };
        format!("{}://127.0.0.1:{port}", self.options.security.scheme())
    }

    /// Starts one more coordinator on the same database and waits until it
    /// answers health checks (as a standby, or leading); returns its index.
    pub async fn start_peer(&mut self) -> usize {
        self.start_peer_with(&[]).await
    }

    /// [`Cluster::start_peer`] with flags of its own (e.g. `--no-forward`).
    pub async fn start_peer_with(&mut self, args: &[&str]) -> usize {
        let lease = PortLease::new();
        let port = lease.port();
        let i = self.peers.len() + 1;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let process = self.coordinator_process(&format!("coordinator-{i}"), lease, 1, &args);
        self.peers.push(Peer {
            port,
            process: Some(process),
            starts: 1,
            args,
        });
        let what = format!("coordinator {i} to answer health checks");
        eventually(&what, super::COORDINATOR_READY_TIMEOUT, || async {
            match self.health_at(i, "").await {
                Ok(ServingStatus::Serving) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        i
    }

    /// Starts coordinator `i` (a peer) again on its port, after it exited.
    pub fn respawn_peer(&mut self, i: usize) {
        let peer = &self.peers[i - 1];
        let (port, starts) = (peer.port, peer.starts + 1);
        let lease = self.lease_again(port);
        let process =
            self.coordinator_process(&format!("coordinator-{i}"), lease, starts, &peer.args);
        let peer = &mut self.peers[i - 1];
        peer.process = Some(process);
        peer.starts = starts;
    }

    /// Starts coordinator `i` again on its port (killing what is left of it
    /// first), without waiting: on PostgreSQL it comes back as a standby.
    pub fn respawn_at(&mut self, i: usize) {
        if i == 0 {
            self.kill_coordinator();
            self.spawn_coordinator();
        } else {
            self.kill_coordinator_at(i);
            self.respawn_peer(i);
        }
    }

    /// grpc.health.v1 Check of `service` on coordinator `i`, given up after
    /// a second.
    pub async fn health_at(&self, i: usize, service: &str) -> Result<ServingStatus, String> {
        let url = self.coordinator_url(i);
        let ca = self.options.security.client_ca();
        let check = async {
            let channel = super::connect(&url, ca, PROBE_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: service.to_string(),
                })
                .await
                .map(|r| r.into_inner().status())
                .map_err(|s| format!("{s:?}"))
        };
        tokio::time::timeout(PROBE_TIMEOUT, check)
            .await
            .unwrap_or_else(|_| Err(format!("{url} did not answer within {PROBE_TIMEOUT:?}")))
    }

    /// The coordinators reporting TrainingService SERVING (leading) now.
    pub async fn leaders(&self) -> Vec<usize> {
        let mut leading = Vec::new();
        for i in 0..=self.peers.len() {
            if self.process_at(i).is_some()
                && self.health_at(i, "cohort.v1.TrainingService").await
                    == Ok(ServingStatus::Serving)
            {
                leading.push(i);
            }
        }
        leading
    }

    /// Waits until exactly one coordinator leads, other than `not`; returns it.
    pub async fn wait_leader(&self, not: Option<usize>, timeout: Duration) -> usize {
        eventually("one coordinator to lead", timeout, || async {
            match self.leaders().await.as_slice() {
                [one] if Some(*one) != not => Ok(*one),
                other => Err(format!("leading: {other:?}")),
            }
        })
        .await
    }

    fn process_at(&self, i: usize) -> Option<&ChildProc> {
        if i == 0 {
            self.coordinator.as_ref()
        } else {
            self.peers[i - 1].process.as_ref()
        }
    }

    fn process_at_mut(&mut self, i: usize) -> Option<&mut ChildProc> {
        if i == 0 {
            self.coordinator.as_mut()
        } else {
            self.peers[i - 1].process.as_mut()
        }
    }

    /// GetTraining on the coordinator at `url` (a standby answers too).
    pub async fn get_training_at(&self, url: &str, id: &str) -> v1::Training {
        let ca = self.options.security.client_ca();
        let channel = super::connect(url, ca, Duration::from_secs(2))
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        TrainingServiceClient::new(channel)
            .get_training(v1::GetTrainingRequest { id: id.to_string() })
            .await
            .unwrap_or_else(|s| panic!("GetTraining {id} on {url}: {s:?}"))
            .into_inner()
    }

    /// The `cohort` CLI told `coordinators` (one URL or a comma-separated list).
    pub async fn cli_at(&self, coordinators: &str, args: &[&str]) -> Output {
        self.cli_at_as(coordinators, None, args).await
    }

    /// [`Cluster::cli_at`] presenting `token` when given; with TLS it
    /// trusts the cluster's CA (`--ca-cert`).
    pub async fn cli_at_as(
        &self,
        coordinators: &str,
        token: Option<&str>,
        args: &[&str],
    ) -> Output {
        let mut command = tokio::process::Command::new(&self.bins.cli);
        command.arg("--coordinator").arg(coordinators);
        if let Some(ca) = self.options.security.client_ca() {
            command.arg("--ca-cert").arg(ca);
        }
        command
            .args(args)
            .env_remove("COHORT_COORDINATOR")
            .env_remove("COHORT_TOKEN")
            .env_remove("COHORT_CA_CERT")
            // The member sets the CLI learns stay with this cluster.
            .env("COHORT_CACHE_DIR", self.root().join("cli-cache"));
        if let Some(token) = token {
            command.env("COHORT_TOKEN", token);
        }
        procs::output_within(
            &mut command,
            super::CLI_TIMEOUT,
            &format!("cohort {args:?}"),
        )
        .await
    }

    /// Coordinator `i`'s pid.
    pub fn coordinator_pid(&self, i: usize) -> u32 {
        self.process_at(i)
            .unwrap_or_else(|| panic!("coordinator {i} is not running"))
            .pid()
    }

    /// Sends `signal` to coordinator `i` (SIGSTOP freezes it, SIGCONT thaws it).
    pub fn signal_coordinator(&mut self, i: usize, signal: Signal) {
        if let Some(process) = self.process_at_mut(i) {
            process.signal_group(signal);
        }
    }

    /// SIGKILLs coordinator `i` (no goodbye to anyone).
    pub fn kill_coordinator_at(&mut self, i: usize) {
        if i == 0 {
            self.kill_coordinator();
        } else if let Some(mut process) = self.peers[i - 1].process.take() {
            process.kill();
        }
    }

    /// Waits up to `timeout` for coordinator `i` to exit on its own.
    pub fn wait_coordinator_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        self.process_at_mut(i)?.wait_timeout(timeout)
    }
}

//! Calls into a running [`Cluster`]: gRPC clients of each service, the
//! common reads and waits, the real `cohort` CLI, and the rank processes
//! its agents left.

use super::Cluster;
use crate::procs;
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_proto::v1::gpu_service_client::GpuServiceClient;
use cohort_proto::v1::telemetry_service_client::TelemetryServiceClient;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_testkit::eventually;
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use tonic::transport::Channel;

impl Cluster {
    /// A channel to coordinator 0, trusting the cluster's CA with TLS.
    pub(super) async fn try_channel(&self) -> Result<Channel, tonic::transport::Error> {
        let ca = self.options.security.client_ca();
        super::connect(&self.url(), ca, Duration::from_secs(2)).await
    }

    /// A connected channel to coordinator 0 (TLS when the cluster has it).
    pub async fn channel(&self) -> Channel {
        self.try_channel()
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url()))
    }

    pub async fn training(&self) -> TrainingServiceClient<Channel> {
        TrainingServiceClient::new(self.channel().await)
    }

    pub async fn gpus(&self) -> GpuServiceClient<Channel> {
        GpuServiceClient::new(self.channel().await)
    }

    pub async fn telemetry(&self) -> TelemetryServiceClient<Channel> {
        TelemetryServiceClient::new(self.channel().await)
    }

    pub async fn agents(&self) -> AgentServiceClient<Channel> {
        AgentServiceClient::new(self.channel().await)
    }

    /// Every GPU ListGpus returns.
    pub async fn list_gpus(&self) -> Vec<v1::Gpu> {
        self.gpus()
            .await
            .list_gpus(v1::ListGpusRequest::default())
            .await
            .unwrap_or_else(|s| panic!("ListGpus: {s:?}"))
            .into_inner()
            .gpus
    }

    /// GetTraining, panicking on error.
    pub async fn get_training(&self, id: &str) -> v1::Training {
        self.get_training_at(&self.url(), id).await
    }

    /// Polls GetTraining until the training is in `state`; panics if it
    /// reaches another final state first, or after `timeout`.
    pub async fn wait_state(
        &self,
        id: &str,
        state: v1::training::State,
        timeout: Duration,
    ) -> v1::Training {
        let what = format!("training {id} to be {state:?}");
        eventually(&what, timeout, || async {
            let t = self.get_training(id).await;
            if t.state() == state {
                return Ok(t);
            }
            let finals = [
                v1::training::State::Succeeded,
                v1::training::State::Failed,
                v1::training::State::Cancelled,
            ];
            if finals.contains(&t.state()) {
                panic!(
                    "training {id} ended {:?} ({}) while waiting for {state:?}",
                    t.state(),
                    t.state_reason
                );
            }
            Err(format!("{:?} ({})", t.state(), t.state_reason))
        })
        .await
    }

    /// ListAgents, panicking on error.
    pub async fn list_agents(&self) -> Vec<v1::Agent> {
        self.agents()
            .await
            .list_agents(v1::ListAgentsRequest::default())
            .await
            .unwrap_or_else(|s| panic!("ListAgents: {s:?}"))
            .into_inner()
            .agents
    }

    /// The agent named `name` (from ListAgents).
    pub async fn agent_named(&self, name: &str) -> v1::Agent {
        self.list_agents()
            .await
            .into_iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("no agent {name}"))
    }

    /// The name of the agent with id `agent_id` (from ListAgents).
    pub async fn agent_name_of(&self, agent_id: &str) -> String {
        self.list_agents()
            .await
            .into_iter()
            .find(|a| a.id == agent_id)
            .unwrap_or_else(|| panic!("no agent {agent_id}"))
            .name
    }

    /// Runs the `cohort` CLI against this coordinator: `cohort --coordinator URL <args>`.
    pub async fn cli(&self, args: &[&str]) -> Output {
        self.cli_as(None, args).await
    }

    /// Runs the CLI and panics unless it exits 0; returns its stdout.
    pub async fn cli_ok(&self, args: &[&str]) -> String {
        self.cli_ok_as(None, args).await
    }

    /// [`Cluster::cli`] presenting `token` (`COHORT_TOKEN`) when given.
    pub async fn cli_as(&self, token: Option<&str>, args: &[&str]) -> Output {
        self.cli_at_as(&self.url(), token, args).await
    }

    /// [`Cluster::cli_ok`] presenting `token` when given.
    pub async fn cli_ok_as(&self, token: Option<&str>, args: &[&str]) -> String {
        let output = self.cli_as(token, args).await;
        assert!(
            output.status.success(),
            "cohort {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// CreateTraining: the new training's id.
    pub async fn create(&self, request: v1::CreateTrainingRequest) -> String {
        self.training()
            .await
            .create_training(request)
            .await
            .expect("CreateTraining")
            .into_inner()
            .id
    }

    /// CancelTraining, expected to succeed.
    pub async fn cancel(&self, id: &str, reason: &str) {
        self.training()
            .await
            .cancel_training(v1::CancelTrainingRequest {
                id: id.to_string(),
                reason: reason.to_string(),
            })
            .await
            .expect("CancelTraining");
    }

    /// `cohort -o json train submit --config FILE <extra>`: returns the training id.
    pub async fn submit(&self, config: &Path, extra: &[&str]) -> String {
        let config = config.to_str().expect("UTF-8 path");
        let mut args = vec!["-o", "json", "train", "submit", "--config", config];
        args.extend_from_slice(extra);
        let stdout = self.cli_ok(&args).await;
        let first = stdout.lines().next().unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(first)
            .or_else(|_| serde_json::from_str(&stdout))
            .unwrap_or_else(|e| panic!("submit printed no JSON ({e}): {stdout}"));
        json["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {json}"))
            .to_string()
    }

    /// The live rank processes this cluster's agents started.
    pub fn rank_processes(&self) -> Vec<i32> {
        procs::rank_processes(&self.mark)
    }

    /// Waits until no rank process of this cluster is left.
    pub async fn assert_no_rank_processes(&self, timeout: Duration) {
        eventually("every rank process to exit", timeout, || async {
            let pids = self.rank_processes();
            if pids.is_empty() {
                Ok(())
            } else {
                Err(format!("rank processes still running: {pids:?}"))
            }
        })
        .await
    }
}

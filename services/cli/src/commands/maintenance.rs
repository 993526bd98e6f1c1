//! `cohort agents cordon|uncordon|drain NAME`: AgentService's maintenance
//! RPCs, and a drain's wait until the agent is empty (printing what is left).

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::emit;
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use std::time::{Duration, Instant};

/// How often a drain looks at what is left.
const DRAIN_POLL: Duration = Duration::from_secs(1);

pub async fn cordon(
    coordinator: &Coordinator,
    agent: String,
    reason: String,
) -> Result<v1::Agent, CliError> {
    let request = v1::CordonAgentRequest { agent, reason };
    Ok(AgentServiceClient::new(coordinator.channel().await?)
        .cordon_agent(request)
        .await?
        .into_inner())
}

pub async fn uncordon(coordinator: &Coordinator, agent: String) -> Result<v1::Agent, CliError> {
    let request = v1::UncordonAgentRequest { agent };
    Ok(AgentServiceClient::new(coordinator.channel().await?)
        .uncordon_agent(request)
        .await?
        .into_inner())
}

pub async fn drain(
    coordinator: &Coordinator,
    agent: String,
    deadline: Duration,
    reason: String,
) -> Result<v1::Agent, CliError> {
    let request = v1::DrainAgentRequest {
        agent,
        reason,
        deadline: prost_types::Duration::try_from(deadline).ok(),
    };
    Ok(AgentServiceClient::new(coordinator.channel().await?)
        .drain_agent(request)
        .await?
        .into_inner())
}

/// A drained agent, and how long the drain took from the wait's start.
pub struct Drained {
    pub name: String,
    pub agent: v1::Agent,
    pub drained_in: Duration,
}

/// Waits until `agent`'s drain is over and nothing of a placed training is
/// left on it; with `progress`, prints each change of what is left.
pub async fn wait_empty(
    coordinator: &Coordinator,
    agent: &v1::Agent,
    progress: bool,
) -> Result<Drained, CliError> {
    let mut client = AgentServiceClient::new(coordinator.channel().await?);
    let started = Instant::now();
    let mut last = None;
    loop {
        let now = client
            .list_agents(v1::ListAgentsRequest::default())
            .await?
            .into_inner()
            .agents
            .into_iter()
            .find(|a| a.id == agent.id)
            .ok_or_else(|| CliError::Usage(format!("agent {} is gone", agent.name)))?;
        if now.placed_ranks == 0 && !now.draining {
            return Ok(Drained {
                name: now.name.clone(),
                agent: now,
                drained_in: started.elapsed(),
            });
        }
        if progress && last != Some(now.placed_ranks) {
            emit(&format!(
                "agent {}: {} rank(s) of placed trainings left; each has notice to checkpoint and move",
                now.name, now.placed_ranks
            ))?;
            last = Some(now.placed_ranks);
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

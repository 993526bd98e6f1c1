//! `cohort agents cordon|uncordon|drain NAME`: AgentService's maintenance
//! RPCs; a drain waits, printing what is left, until the agent is empty.

use super::agents::{agents_table, AgentsCommand};
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, OutputFormat};
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use std::time::{Duration, Instant};

/// How often a drain looks at what is left.
const DRAIN_POLL: Duration = Duration::from_secs(1);

pub async fn run(
    coordinator: &Coordinator,
    command: AgentsCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = AgentServiceClient::new(coordinator.channel().await?);
    let (agent, wait) = match command {
        AgentsCommand::Cordon { name, reason } => (
            client
                .cordon_agent(v1::CordonAgentRequest {
                    agent: name,
                    reason,
                })
                .await?,
            false,
        ),
        AgentsCommand::Uncordon { name } => (
            client
                .uncordon_agent(v1::UncordonAgentRequest { agent: name })
                .await?,
            false,
        ),
        AgentsCommand::Drain {
            name,
            deadline,
            reason,
            no_wait,
        } => (
            client
                .drain_agent(v1::DrainAgentRequest {
                    agent: name,
                    reason,
                    deadline: prost_types::Duration::try_from(deadline).ok(),
                })
                .await?,
            !no_wait,
        ),
        AgentsCommand::List | AgentsCommand::Doctor { .. } => unreachable!("handled by `agents`"),
    };
    let agent = agent.into_inner();
    if !wait {
        return match out {
            OutputFormat::Json => emit_json(&json::message(&agent)),
            OutputFormat::Table => emit(&agents_table(std::slice::from_ref(&agent))),
        };
    }
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
            let took = started.elapsed().as_secs();
            return match out {
                OutputFormat::Json => emit_json(&json::message(&now)),
                OutputFormat::Table => emit(&format!(
                    "agent {} is empty (drained in {took} s); it stays cordoned: `cohort agents uncordon {}` to place on it again",
                    now.name, now.name
                )),
            };
        }
        if last != Some(now.placed_ranks) && out == OutputFormat::Table {
            emit(&format!(
                "agent {}: {} rank(s) of placed trainings left; each moves at its next checkpoint",
                now.name, now.placed_ranks
            ))?;
            last = Some(now.placed_ranks);
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

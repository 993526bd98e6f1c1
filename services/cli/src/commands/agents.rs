//! `cohort agents`: AgentService.ListAgents, every page (with each agent's
//! last host doctor verdict); `cohort agents doctor NAME`: RunDoctor.

use super::maintenance;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, OutputFormat};
use crate::render::{short_name, time};
use cohort_proto::v1;
use cohort_proto::v1::{agent_service_client::AgentServiceClient, ListAgentsRequest};
use serde_json::Value;

#[derive(Debug, Clone, clap::Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: Option<AgentsCommand>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AgentsCommand {
    /// List the agents (what bare `cohort agents` does).
    List,
    /// Run the host doctor on a connected agent and show its checks
    /// (cluster-admin); exits 1 when a check fails. The report is kept:
    /// `cohort agents` shows each agent's last verdict.
    Doctor {
        /// The agent's name.
        name: String,
        /// How long the coordinator waits for the agent's report, in seconds.
        #[arg(long, default_value = "300", value_name = "SECS", value_parser = crate::parse_seconds)]
        timeout: std::time::Duration,
    },
    /// No new placements on the agent (cluster-admin); what runs there
    /// keeps running.
    Cordon {
        name: String,
        /// Why (shown with the agent).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Placements on the agent again; a drain stops (cluster-admin).
    Uncordon { name: String },
    /// Cordon the agent and move each training off it at its next
    /// checkpoint (no restart budget spent); at the deadline the rest move
    /// at once. Waits until the agent is empty unless --no-wait.
    Drain {
        name: String,
        /// How long trainings may take to reach their next checkpoint, e.g. `10m`.
        #[arg(long, default_value = "10m", value_parser = cohort_spec::duration::parse_duration)]
        deadline: std::time::Duration,
        /// Why (shown with the agent).
        #[arg(long, default_value = "")]
        reason: String,
        /// Print the agent and return at once.
        #[arg(long)]
        no_wait: bool,
    },
}

pub async fn run(
    coordinator: &Coordinator,
    args: AgentsArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    match args.command {
        None | Some(AgentsCommand::List) => list(coordinator, out).await,
        Some(AgentsCommand::Doctor { name, timeout }) => {
            doctor(coordinator, name, timeout, out).await
        }
        Some(AgentsCommand::Cordon { name, reason }) => {
            let agent = maintenance::cordon(coordinator, name, reason).await?;
            show(&agent, out)
        }
        Some(AgentsCommand::Uncordon { name }) => {
            let agent = maintenance::uncordon(coordinator, name).await?;
            show(&agent, out)
        }
        Some(AgentsCommand::Drain {
            name,
            deadline,
            reason,
            no_wait,
        }) => {
            let agent = maintenance::drain(coordinator, name, deadline, reason).await?;
            if no_wait {
                return show(&agent, out);
            }
            let empty =
                maintenance::wait_empty(coordinator, &agent, out == OutputFormat::Table).await?;
            match out {
                OutputFormat::Json => emit_json(&json::message(&empty.agent)),
                OutputFormat::Table => emit(&format!(
                    "agent {} is empty (drained in {} s); it stays cordoned: `cohort agents uncordon {}` to place on it again",
                    empty.name,
                    empty.drained_in.as_secs(),
                    empty.name
                )),
            }
        }
    }
}

/// One agent, as a table row or the API's message.
fn show(agent: &v1::Agent, out: OutputFormat) -> Result<(), CliError> {
    match out {
        OutputFormat::Json => emit_json(&json::message(agent)),
        OutputFormat::Table => emit(&agents_table(std::slice::from_ref(agent))),
    }
}

async fn doctor(
    coordinator: &Coordinator,
    name: String,
    timeout: std::time::Duration,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = AgentServiceClient::new(coordinator.channel().await?);
    let report = client
        .run_doctor(v1::RunDoctorRequest {
            agent: name,
            timeout: prost_types::Duration::try_from(timeout).ok(),
        })
        .await?
        .into_inner();
    match out {
        OutputFormat::Table => emit(&crate::render::doctor::report(&report))?,
        OutputFormat::Json => emit_json(&json::message(&report))?,
    }
    if report.ok {
        Ok(())
    } else {
        Err(CliError::Silent(1))
    }
}

pub async fn list(coordinator: &Coordinator, out: OutputFormat) -> Result<(), CliError> {
    let mut client = AgentServiceClient::new(coordinator.channel().await?);
    let mut agents = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_agents(ListAgentsRequest {
                page_size: 0,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        agents.extend(page.agents);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Table => emit(&agents_table(&agents)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "agents": agents.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

// The table.

pub fn agents_table(agents: &[v1::Agent]) -> String {
    if agents.is_empty() {
        return "no agents".to_string();
    }
    let now = std::time::SystemTime::now();
    let mut t = Table::new(&[
        "NAME",
        "ID",
        "HOST",
        "STATE",
        "GPUS",
        "VERSION",
        "CONNECTED",
        "LAST SEEN",
        "DOCTOR",
    ]);
    for a in agents {
        let simulated = a.gpus.iter().filter(|g| g.simulated).count();
        let gpus = if simulated > 0 {
            format!("{} ({simulated} simulated)", a.gpus.len())
        } else {
            a.gpus.len().to_string()
        };
        let mut state = v1::AgentState::try_from(a.state)
            .map(|s| short_name(s.as_str_name(), "AGENT_STATE_"))
            .unwrap_or_else(|_| a.state.to_string());
        if a.draining {
            state.push_str(&format!(", draining ({} ranks left)", a.placed_ranks));
        } else if !a.cordon_reason.is_empty() {
            state.push_str(&format!(", cordoned: {}", a.cordon_reason));
        }
        t.row(vec![
            dash(&a.name),
            dash(&a.id),
            dash(&a.host_name),
            state,
            gpus,
            dash(&a.version),
            time(a.connect_time.as_ref()),
            crate::render::ago(a.last_seen_time.as_ref(), now),
            crate::render::doctor::verdict(a.last_doctor.as_ref(), now),
        ]);
    }
    t.render()
}

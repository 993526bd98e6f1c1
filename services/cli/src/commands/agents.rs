//! `cohort agents`: AgentService.ListAgents, every page.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, OutputFormat};
use crate::render::{short_name, time};
use cohort_proto::v1;
use cohort_proto::v1::{agent_service_client::AgentServiceClient, ListAgentsRequest};
use serde_json::Value;

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
    ]);
    for a in agents {
        let simulated = a.gpus.iter().filter(|g| g.simulated).count();
        let gpus = if simulated > 0 {
            format!("{} ({simulated} simulated)", a.gpus.len())
        } else {
            a.gpus.len().to_string()
        };
        let state = v1::AgentState::try_from(a.state)
            .map(|s| short_name(s.as_str_name(), "AGENT_STATE_"))
            .unwrap_or_else(|_| a.state.to_string());
        t.row(vec![
            dash(&a.name),
            dash(&a.id),
            dash(&a.host_name),
            state,
            gpus,
            dash(&a.version),
            time(a.connect_time.as_ref()),
            crate::render::ago(a.last_seen_time.as_ref(), now),
        ]);
    }
    t.render()
}

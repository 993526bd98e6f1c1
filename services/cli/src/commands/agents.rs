//! `cohort agents`: AgentService.ListAgents, every page.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
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
        OutputFormat::Table => emit(&table::agents(&agents)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "agents": agents.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

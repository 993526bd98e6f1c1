//! `cohort gpus`: GpuService.ListGpus, every page.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::GpusArgs;
use cohort_proto::v1::{gpu_service_client::GpuServiceClient, ListGpusRequest};
use serde_json::Value;

pub async fn list(
    coordinator: &Coordinator,
    args: &GpusArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = GpuServiceClient::new(coordinator.channel().await?);
    let mut gpus = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_gpus(ListGpusRequest {
                agent_id: args.agent.clone().unwrap_or_default(),
                available_only: args.available,
                page_size: 0,
                page_token,
            })
            .await?
            .into_inner();
        gpus.extend(page.gpus);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Table => emit(&table::gpus(&gpus)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "gpus": gpus.iter().map(json::gpu).collect::<Vec<Value>>(),
        })),
    }
}

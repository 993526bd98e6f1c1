//! `cohort gpus`: GpuService.ListGpus (every page), and `gpus recommend`,
//! `gpus validate`, `gpus estimate`: RecommendGpus, ValidateGpuSelection,
//! EstimateMemory.

use crate::client::Coordinator;
use crate::errors::exit;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::{GpusArgs, GpusCommand};
use cohort_proto::v1::{
    self, gpu_service_client::GpuServiceClient, recommend_gpus_request::Need,
    EstimateMemoryRequest, ListGpusRequest, RecommendGpusRequest, ValidateGpuSelectionRequest,
};
use cohort_spec::TrainingConfig;
use serde_json::Value;
use std::path::Path;

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
                ..Default::default()
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
            "gpus": gpus.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

fn read_config(path: &Path) -> Result<v1::TrainingConfig, CliError> {
    let config = TrainingConfig::from_file(path).map_err(CliError::Config)?;
    Ok(v1::TrainingConfig::from(&config))
}

/// `gpus recommend|validate|estimate`.
pub async fn advise(
    coordinator: &Coordinator,
    command: &GpusCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    match command {
        GpusCommand::Recommend {
            config,
            memory_gib,
            count,
            single_host,
        } => {
            let need = match (config, memory_gib) {
                (Some(path), _) => Need::Config(read_config(path)?),
                (None, Some(gib)) => Need::MemoryBytes((gib.max(0.0) * (1u64 << 30) as f64) as u64),
                (None, None) => {
                    return Err(CliError::Usage("give --config FILE or --memory GIB".into()))
                }
            };
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let r = client
                .recommend_gpus(RecommendGpusRequest {
                    need: Some(need),
                    count: count.unwrap_or(0),
                    single_host: *single_host,
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&r)),
                OutputFormat::Table => emit(&table::recommendation(&r)),
            }
        }
        GpusCommand::Validate { ids, config } => {
            let config = config.as_deref().map(read_config).transpose()?;
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let r = client
                .validate_gpu_selection(ValidateGpuSelectionRequest {
                    gpu_ids: ids.clone(),
                    config,
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&r))?,
                OutputFormat::Table => emit(&table::validation(&r))?,
            }
            if r.valid {
                Ok(())
            } else {
                Err(CliError::Silent(exit::REFUSED))
            }
        }
        GpusCommand::Estimate { config } => {
            let config = read_config(config)?;
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let e = client
                .estimate_memory(EstimateMemoryRequest {
                    config: Some(config),
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&e)),
                OutputFormat::Table => emit(&table::memory_estimate(&e)),
            }
        }
    }
}

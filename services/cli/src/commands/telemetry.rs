//! `cohort telemetry watch`: TelemetryService.WatchGpuMetrics as a refreshing
//! table (redrawn in place on a terminal), or one JSON object per update; and
//! `cohort telemetry query`: QueryGpuMetrics, every page.

use super::interruptible;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::{MetricsFilterArgs, TelemetryQueryArgs, TelemetryWatchArgs, ViewArg};
use cohort_proto::v1::{
    telemetry_service_client::TelemetryServiceClient, GpuMetricsFilter, GpuMetricsUpdate,
    MetricsView, QueryGpuMetricsRequest, WatchGpuMetricsRequest,
};
use serde_json::Value;
use std::io::IsTerminal;
use std::time::SystemTime;

/// Clears the terminal and moves the cursor home.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// The filter the flags describe.
pub fn filter(args: &MetricsFilterArgs) -> GpuMetricsFilter {
    GpuMetricsFilter {
        agents: args.agent.clone(),
        gpu_uuids: args.gpu.clone(),
        training_id: args.job.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn view(view: ViewArg) -> i32 {
    let view = match view {
        ViewArg::Aggregated => MetricsView::Aggregated,
        ViewArg::PerGpu => MetricsView::PerGpu,
    };
    view as i32
}

/// The request the flags describe.
pub fn request(args: &TelemetryWatchArgs) -> WatchGpuMetricsRequest {
    WatchGpuMetricsRequest {
        view: view(args.view),
        filter: Some(filter(&args.filter)),
        ..Default::default()
    }
}

/// Every page of a QueryGpuMetrics (the request's `page_token` is set here).
pub async fn query_all(
    coordinator: &Coordinator,
    request: QueryGpuMetricsRequest,
) -> Result<Vec<GpuMetricsUpdate>, CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let mut updates = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .query_gpu_metrics(QueryGpuMetricsRequest {
                page_token,
                ..request.clone()
            })
            .await?
            .into_inner();
        updates.extend(page.updates);
        if page.next_page_token.is_empty() {
            return Ok(updates);
        }
        page_token = page.next_page_token;
    }
}

pub async fn query(
    coordinator: &Coordinator,
    args: &TelemetryQueryArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let start = SystemTime::now()
        .checked_sub(args.since)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let step = args
        .step
        .and_then(|d| prost_types::Duration::try_from(d).ok());
    let updates = query_all(
        coordinator,
        QueryGpuMetricsRequest {
            filter: Some(filter(&args.filter)),
            view: view(args.view),
            start_time: Some(prost_types::Timestamp::from(start)),
            step,
            ..Default::default()
        },
    )
    .await?;
    match out {
        OutputFormat::Json => emit_json(&serde_json::json!({
            "updates": updates.iter().map(json::message).collect::<Vec<Value>>(),
        })),
        OutputFormat::Table => emit(&table::metrics_history(&updates)),
    }
}

pub async fn watch(
    coordinator: &Coordinator,
    args: &TelemetryWatchArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let mut stream = client.watch_gpu_metrics(request(args)).await?.into_inner();
    let redraw = std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let update = match interruptible(stream.message()).await {
            // Ctrl-C is the usual way to stop watching: end quietly.
            None => return Ok(()),
            Some(next) => match next? {
                Some(update) => update,
                None => break,
            },
        };
        match out {
            OutputFormat::Json => emit_json(&json::message(&update))?,
            OutputFormat::Table => {
                if let Some(lagged) = &update.lagged {
                    emit(&format!(
                        "(lagged: missed {} updates; showing live ones again)",
                        lagged.missed_events
                    ))?;
                    continue;
                }
                let text = table::metrics(&update);
                if redraw {
                    emit(&format!("{CLEAR_SCREEN}{text}"))?;
                } else if shown == 0 {
                    emit(&text)?;
                } else {
                    emit(&format!("\n{text}"))?;
                }
            }
        }
        shown += 1;
        if args.count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
    if out == OutputFormat::Table {
        emit("the coordinator closed the telemetry stream")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_become_the_filter() {
        let cli = crate::Cli::try_parse_from([
            "cohort",
            "telemetry",
            "watch",
            "--view",
            "aggregated",
            "--gpu",
            "SIM-1",
            "--job",
            "t-3",
        ])
        .unwrap();
        let crate::Command::Telemetry(crate::TelemetryCommand::Watch(args)) = cli.command else {
            panic!("not telemetry watch");
        };
        let r = request(&args);
        assert_eq!(r.view, MetricsView::Aggregated as i32);
        let f = r.filter.unwrap();
        assert_eq!(f.gpu_uuids, vec!["SIM-1"]);
        assert_eq!(f.training_id, "t-3");
        assert!(f.agents.is_empty());
    }
}

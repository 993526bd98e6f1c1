//! `cohort telemetry watch`: TelemetryService.WatchGpuMetrics as a refreshing
//! table (redrawn in place on a terminal), or one JSON object per update.

use super::interruptible;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::{TelemetryWatchArgs, ViewArg};
use cohort_proto::v1::{
    telemetry_service_client::TelemetryServiceClient, GpuMetricsFilter, MetricsView,
    WatchGpuMetricsRequest,
};
use std::io::IsTerminal;

/// Clears the terminal and moves the cursor home.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// The request the flags describe.
pub fn request(args: &TelemetryWatchArgs) -> WatchGpuMetricsRequest {
    WatchGpuMetricsRequest {
        view: match args.view {
            ViewArg::Aggregated => MetricsView::Aggregated,
            ViewArg::PerGpu => MetricsView::PerGpu,
        } as i32,
        filter: Some(GpuMetricsFilter {
            agents: args.agent.clone(),
            gpu_uuids: args.gpu.clone(),
            training_id: args.job.clone().unwrap_or_default(),
        }),
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
            OutputFormat::Json => emit_json(&json::metrics_update(&update))?,
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

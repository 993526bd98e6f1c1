//! `cohort alerts watch`: TelemetryService.WatchAlerts, one line per alert
//! raised or resolved (one JSON object per line with `-o json`).

use super::interruptible;
use super::telemetry::filter;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::{AlertsWatchArgs, MetricsFilterArgs, SeverityArg};
use cohort_proto::v1::{
    telemetry_service_client::TelemetryServiceClient, watch_alerts_response::Event, AlertSeverity,
    WatchAlertsRequest, WatchAlertsResponse,
};
use tonic::Streaming;

/// A WatchAlerts request (shared by `alerts watch` and `alerts`).
pub fn watch_request(
    min_severity: Option<SeverityArg>,
    filter_args: &MetricsFilterArgs,
    include_active: bool,
    resolved_within: Option<prost_types::Duration>,
) -> WatchAlertsRequest {
    let min_severity = min_severity.map_or(AlertSeverity::Unspecified, AlertSeverity::from);
    WatchAlertsRequest {
        min_severity: min_severity as i32,
        filter: Some(filter(filter_args)),
        include_active,
        resolved_within,
    }
}

/// The request the flags describe.
pub fn request(args: &AlertsWatchArgs) -> WatchAlertsRequest {
    watch_request(args.min_severity, &args.filter, args.active, None)
}

pub async fn watch(
    coordinator: &Coordinator,
    args: &AlertsWatchArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let stream = client.watch_alerts(request(args)).await?.into_inner();
    follow(stream, out, args.count).await
}

/// Print alerts as they are raised and resolved until the stream ends, Ctrl-C,
/// or `count` alerts (one line each; one JSON object per line with `-o json`).
pub async fn follow(
    mut stream: Streaming<WatchAlertsResponse>,
    out: OutputFormat,
    count: Option<u64>,
) -> Result<(), CliError> {
    let mut shown = 0u64;
    loop {
        let message = match interruptible(stream.message()).await {
            // Ctrl-C is the usual way to stop watching: end quietly.
            None => return Ok(()),
            Some(next) => match next? {
                Some(message) => message,
                None => break,
            },
        };
        match (out, &message.event) {
            (OutputFormat::Json, _) => emit_json(&json::message(&message))?,
            (OutputFormat::Table, Some(Event::Alert(a))) => emit(&table::alert_line(a))?,
            (OutputFormat::Table, Some(Event::Lagged(l))) => emit(&format!(
                "(lagged: missed {} alerts; showing live ones again)",
                l.missed_events
            ))?,
            // The end of the initial alerts, or a message newer than this CLI.
            #[allow(unreachable_patterns)]
            (OutputFormat::Table, _) => continue,
        }
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
    if out == OutputFormat::Table {
        emit("the coordinator closed the alert stream")?;
    }
    Ok(())
}

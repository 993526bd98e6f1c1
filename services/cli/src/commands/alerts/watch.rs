//! `cohort alerts watch`: TelemetryService.WatchAlerts, one line per alert
//! raised or resolved (one JSON object per line with `-o json`).

use super::args::{watch_request, AlertsWatchArgs};
use crate::client::Coordinator;
use crate::commands::interruptible;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, OutputFormat};
use crate::render::{short_name, time};
use cohort_proto::v1;
use cohort_proto::v1::{
    telemetry_service_client::TelemetryServiceClient, watch_alerts_response::Event,
    WatchAlertsRequest, WatchAlertsResponse,
};
use tonic::Streaming;

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
            (OutputFormat::Table, Some(Event::Alert(a))) => emit(&alert_line(a))?,
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

/// An alert severity as shown: `WARNING`, `CRITICAL`, ...
pub fn severity_name(severity: i32) -> String {
    v1::AlertSeverity::try_from(severity)
        .map(|s| short_name(s.as_str_name(), "ALERT_SEVERITY_").to_ascii_uppercase())
        .unwrap_or_else(|_| severity.to_string())
}

/// One alert as a line: time, severity, kind, message, what it concerns.
pub fn alert_line(a: &v1::Alert) -> String {
    let severity = severity_name(a.severity);
    let mut about = Vec::new();
    for (name, value) in [
        ("agent", &a.agent_id),
        ("gpu", &a.gpu_uuid),
        ("training", &a.training_id),
    ] {
        if !value.is_empty() {
            about.push(format!("{name} {value}"));
        }
    }
    let (status, at) = match &a.resolve_time {
        Some(t) => ("resolved", time(Some(t))),
        None => ("raised", time(a.raise_time.as_ref())),
    };
    let mut line = format!(
        "{at}  {severity:<8}  {status:<8}  {}: {}",
        a.kind, a.message
    );
    if !about.is_empty() {
        line.push_str(&format!(" ({})", about.join(", ")));
    }
    line
}

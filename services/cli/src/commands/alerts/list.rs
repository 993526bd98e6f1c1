//! `cohort alerts [--all] [--watch]`: the alerts active now (with `--all`,
//! also those resolved within `--since`) as a table, read from WatchAlerts
//! up to its `caught_up` marker; with `--watch`, then every raise and
//! resolution as it happens (one line each, or one JSON object per line).

use super::args::{watch_request, AlertsListArgs};
use super::watch::{follow, severity_name};
use crate::client::Coordinator;
use crate::commands::interruptible;
use crate::errors::CliError;
use crate::render::table::Table;
use crate::render::{emit, emit_json, json, time, OutputFormat};
use cohort_proto::v1::{
    self, telemetry_service_client::TelemetryServiceClient, watch_alerts_response::Event,
    WatchAlertsRequest,
};
use serde_json::Value;

/// The request the flags describe.
pub fn request(args: &AlertsListArgs) -> WatchAlertsRequest {
    let resolved_within = args
        .all
        .then(|| prost_types::Duration::try_from(args.since).ok())
        .flatten();
    watch_request(args.min_severity, &args.filter, true, resolved_within)
}

/// The alerts as a table, oldest first.
pub fn alerts_table(alerts: &[v1::Alert]) -> String {
    if alerts.is_empty() {
        return "no alerts".to_string();
    }
    let mut t = Table::new(&[
        "SEVERITY", "KIND", "STATE", "RAISED", "RESOLVED", "ABOUT", "MESSAGE",
    ]);
    for a in alerts {
        let severity = severity_name(a.severity);
        let about: Vec<&str> = [&a.agent_id, &a.gpu_uuid, &a.training_id]
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(String::as_str)
            .collect();
        t.row(vec![
            severity,
            a.kind.clone(),
            if a.resolve_time.is_some() {
                "resolved"
            } else {
                "active"
            }
            .to_string(),
            time(a.raise_time.as_ref()),
            a.resolve_time
                .as_ref()
                .map_or("-".to_string(), |t| time(Some(t))),
            about.join(" "),
            a.message.clone(),
        ]);
    }
    t.render()
}

pub async fn list(
    coordinator: &Coordinator,
    args: &AlertsListArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let mut stream = client.watch_alerts(request(args)).await?.into_inner();
    // Everything up to caught_up is the state when the stream opened.
    let mut alerts = Vec::new();
    loop {
        let Some(next) = interruptible(stream.message()).await else {
            return Ok(());
        };
        match next?.and_then(|m| m.event) {
            Some(Event::Alert(a)) => alerts.push(a),
            Some(Event::CaughtUp(_)) | None => break,
            Some(_) => {}
        }
    }
    match out {
        OutputFormat::Table => emit(&alerts_table(&alerts))?,
        OutputFormat::Json => emit_json(&serde_json::json!({
            "alerts": alerts.iter().map(json::message).collect::<Vec<Value>>(),
        }))?,
    }
    if !args.watch {
        return Ok(());
    }
    follow(stream, out, None).await
}

#[cfg(test)]
mod tests {
    use super::super::args::SeverityArg;
    use super::*;
    use crate::commands::telemetry::MetricsFilterArgs;
    use std::time::Duration;

    fn args(all: bool) -> AlertsListArgs {
        AlertsListArgs {
            all,
            since: Duration::from_secs(3600),
            watch: false,
            min_severity: Some(SeverityArg::Warning),
            filter: MetricsFilterArgs {
                agent: vec!["node-a".into()],
                gpu: vec![],
                job: None,
            },
        }
    }

    #[test]
    fn all_asks_for_the_resolved_ones_too() {
        let r = request(&args(false));
        assert!(r.include_active);
        assert_eq!(r.resolved_within, None);
        assert_eq!(r.min_severity, v1::AlertSeverity::Warning as i32);
        assert_eq!(r.filter.unwrap().agents, vec!["node-a"]);
        let r = request(&args(true));
        assert_eq!(r.resolved_within.map(|d| d.seconds), Some(3600));
    }

    #[test]
    fn table_shows_state_and_subject() {
        assert_eq!(alerts_table(&[]), "no alerts");
        let a = v1::Alert {
            id: "alr-1".into(),
            severity: v1::AlertSeverity::Critical as i32,
            kind: "AGENT_LOST".into(),
            message: "agent node-a is gone".into(),
            agent_id: "agt-1".into(),
            raise_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let text = alerts_table(&[a]);
        let row = text.lines().nth(1).unwrap();
        assert!(row.starts_with("CRITICAL  AGENT_LOST  active"), "{row}");
        assert!(
            row.contains("agt-1") && row.ends_with("agent node-a is gone"),
            "{row}"
        );
    }
}

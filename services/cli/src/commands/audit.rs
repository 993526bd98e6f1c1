//! `cohort audit list [--team T] [--since SPAN]`: AdminService.ListAuditEvents,
//! every page, newest first: who did what to which object, and the outcome
//! (denials and failed changes included).

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, time, OutputFormat};
use clap::{Args, Subcommand};
use cohort_proto::v1::{self, admin_service_client::AdminServiceClient};
use serde_json::Value;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, Subcommand)]
pub enum AuditCommand {
    /// The audit trail; a team admin sees its own team's.
    List(AuditListArgs),
}

#[derive(Debug, Clone, Args)]
pub struct AuditListArgs {
    /// Only events about this team's objects or by its members.
    #[arg(long)]
    pub team: Option<String>,
    /// Only events of this recent span (e.g. `1h`, `7d`).
    #[arg(long, value_parser = cohort_spec::duration::parse_duration, value_name = "SPAN", default_value = "24h")]
    pub since: Duration,
}

pub async fn run(
    coordinator: &Coordinator,
    cmd: AuditCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let AuditCommand::List(args) = cmd;
    let since = SystemTime::now()
        .checked_sub(args.since)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut client = AdminServiceClient::new(coordinator.channel().await?);
    let mut events = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_audit_events(v1::ListAuditEventsRequest {
                team: args.team.clone().unwrap_or_default(),
                since: Some(since.into()),
                page_size: 0,
                page_token,
            })
            .await?
            .into_inner();
        events.extend(page.events);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Json => emit_json(&serde_json::json!({
            "events": events.iter().map(json::message).collect::<Vec<Value>>(),
        })),
        OutputFormat::Table => emit(&events_table(&events)),
    }
}

pub fn events_table(events: &[v1::AuditEvent]) -> String {
    if events.is_empty() {
        return "no audit events".to_string();
    }
    let mut t = Table::new(&[
        "TIME", "ACTOR", "TEAM", "METHOD", "TARGET", "CODE", "DETAIL",
    ]);
    for e in events {
        let method = e.method.rsplit('/').next().unwrap_or(&e.method).to_string();
        t.row(vec![
            time(e.time.as_ref()),
            format!("{}:{}", e.actor_kind, e.actor),
            dash(&e.actor_team),
            method,
            dash(&e.target),
            e.code.clone(),
            dash(&e.detail),
        ]);
    }
    t.render()
}

//! `cohort admin webhook add|list|remove`: a team's webhooks (AddWebhook,
//! ListWebhooks, RemoveWebhook). The signing secret of a new webhook is
//! shown once, on the last line of the output (so `| tail -1` captures it).

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, time, OutputFormat};
use clap::{Subcommand, ValueEnum};
use cohort_proto::v1::{self, admin_service_client::AdminServiceClient};
use serde_json::Value;

#[derive(Debug, Clone, Subcommand)]
pub enum WebhookCommand {
    /// Add a webhook to a team: a signed JSON POST to URL for each event
    /// chosen; its signing secret is printed once, on the last line.
    Add {
        /// The team whose trainings it hears.
        team: String,
        /// Where the POSTs go (http:// or https://).
        url: String,
        /// Of ended, failed, preempted, alert (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "ended")]
        events: Vec<String>,
        /// The body: cohort's JSON, or Slack's `{"text": ...}`.
        #[arg(long, value_enum, default_value_t = FormatArg::Json)]
        format: FormatArg,
    },
    /// List webhooks with their recent deliveries (a cluster-admin sees
    /// every team's and the operator's --webhook ones).
    List {
        /// Only this team's.
        team: Option<String>,
    },
    /// Remove a webhook: no delivery starts for it from now on.
    Remove {
        /// The webhook's id (`whk-...`).
        id: String,
        /// Its team (default: your own; a cluster-admin may leave it out).
        #[arg(long)]
        team: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Json,
    Slack,
}

pub async fn run(
    coordinator: &Coordinator,
    cmd: WebhookCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = AdminServiceClient::new(coordinator.channel().await?);
    match cmd {
        WebhookCommand::Add {
            team,
            url,
            events,
            format,
        } => {
            let format = match format {
                FormatArg::Json => "json",
                FormatArg::Slack => "slack",
            };
            let added = client
                .add_webhook(v1::AddWebhookRequest {
                    team,
                    url,
                    events,
                    format: format.into(),
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&added)),
                OutputFormat::Table => {
                    let hook = added.webhook.unwrap_or_default();
                    emit(&format!(
                        "added webhook {} for team {}: {} on {} ({}); its signing secret, shown only now:\n{}",
                        hook.id,
                        hook.team,
                        hook.url,
                        hook.events.join(","),
                        hook.format,
                        added.secret
                    ))
                }
            }
        }
        WebhookCommand::List { team } => {
            let hooks = client
                .list_webhooks(v1::ListWebhooksRequest {
                    team: team.unwrap_or_default(),
                })
                .await?
                .into_inner()
                .webhooks;
            match out {
                OutputFormat::Json => emit_json(&serde_json::json!({
                    "webhooks": hooks.iter().map(json::message).collect::<Vec<Value>>(),
                })),
                OutputFormat::Table => emit(&webhooks_table(&hooks)),
            }
        }
        WebhookCommand::Remove { id, team } => {
            let hook = client
                .remove_webhook(v1::RemoveWebhookRequest {
                    team: team.unwrap_or_default(),
                    id,
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&hook)),
                OutputFormat::Table => emit(&format!(
                    "removed webhook {} of team {} ({})",
                    hook.id, hook.team, hook.url
                )),
            }
        }
    }
}

/// One row per webhook, then its recent deliveries, newest first.
pub fn webhooks_table(hooks: &[v1::Webhook]) -> String {
    if hooks.is_empty() {
        return "no webhooks".to_string();
    }
    let mut t = Table::new(&[
        "ID",
        "TEAM",
        "URL",
        "EVENTS",
        "FORMAT",
        "DELIVERED",
        "FAILED",
        "DROPPED",
        "LAST",
    ]);
    for h in hooks {
        let last = h.recent.last().map_or("-".to_string(), |d| {
            format!(
                "{} {} ({})",
                d.outcome,
                d.last_answer,
                time(d.first_try.as_ref())
            )
        });
        t.row(vec![
            h.id.clone(),
            if h.team.is_empty() {
                "(all)".into()
            } else {
                h.team.clone()
            },
            h.url.clone(),
            h.events.join(","),
            h.format.clone(),
            h.delivered.to_string(),
            h.failed.to_string(),
            h.dropped.to_string(),
            last,
        ]);
    }
    let mut text = t.render();
    let recent: Vec<(&v1::Webhook, &v1::WebhookDelivery)> = hooks
        .iter()
        .flat_map(|h| h.recent.iter().rev().map(move |d| (h, d)))
        .collect();
    if !recent.is_empty() {
        let mut d = Table::new(&[
            "WEBHOOK",
            "DELIVERY",
            "EVENT",
            "TRAINING",
            "FIRST TRY",
            "TRIES",
            "OUTCOME",
            "ANSWER",
        ]);
        for (h, r) in recent {
            d.row(vec![
                h.id.clone(),
                r.id.clone(),
                r.event.clone(),
                dash(&r.training_id),
                time(r.first_try.as_ref()),
                r.attempts.to_string(),
                r.outcome.clone(),
                dash(&r.last_answer),
            ]);
        }
        text.push_str("\n\nrecent deliveries:\n");
        text.push_str(&d.render());
    }
    text
}

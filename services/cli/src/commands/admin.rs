//! `cohort admin token create|list|revoke`, `cohort admin quota set|list`
//! (`cohort admin webhook` is [`super::webhook`]'s)
//! and `cohort whoami`: AdminService. The secret of a new token is shown
//! once, on the last line of the output (so `| tail -1` captures it).

use crate::client::{Conn, Coordinator};
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, time, OutputFormat};
use clap::{Args, Subcommand, ValueEnum};
use cohort_proto::v1::{self, admin_service_client::AdminServiceClient};
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Set and list teams' GPU quotas and queue caps.
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// Add, list and remove webhooks: HTTP endpoints told when a team's
    /// trainings end, fail or are preempted, and of alerts.
    #[command(subcommand)]
    Webhook(super::webhook::WebhookCommand),
    /// Forget a disconnected agent, so another agent may register its GPUs
    /// (a GPU stays bound to the first agent that registered it).
    ForgetAgent {
        /// The agent's name.
        name: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once, on the last line.
    Create(TokenCreateArgs),
    /// List tokens (never their secrets); a team admin sees its own team's.
    List {
        /// Only this team's tokens.
        #[arg(long)]
        team: Option<String>,
    },
    /// Revoke a token: it stops working within seconds.
    Revoke {
        /// The token's team (default: your own).
        #[arg(long)]
        team: Option<String>,
        /// The token's name.
        name: String,
    },
}

#[derive(Debug, Clone, Args)]
pub struct TokenCreateArgs {
    /// The team the token acts for.
    #[arg(long)]
    pub team: String,
    /// The token's name, unique within its team.
    #[arg(long)]
    pub name: String,
    /// What the token may do.
    #[arg(long, value_enum)]
    pub role: RoleArg,
    /// Valid this long (e.g. `30d`); default: until revoked.
    #[arg(long, value_parser = cohort_spec::duration::parse_duration, value_name = "SPAN")]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Viewer,
    Editor,
    Admin,
    ClusterAdmin,
}

impl From<RoleArg> for v1::Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Viewer => v1::Role::Viewer,
            RoleArg::Editor => v1::Role::Editor,
            RoleArg::Admin => v1::Role::Admin,
            RoleArg::ClusterAdmin => v1::Role::ClusterAdmin,
        }
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum QuotaCommand {
    /// Set a team's limits. It replaces them: a limit left out is lifted
    /// (no GPU quota; the coordinator's default queue cap).
    Set {
        /// The team.
        team: String,
        /// GPUs guaranteed to the team (reclaimed from borrowers when it
        /// needs them).
        #[arg(long, value_name = "N")]
        gpus: Option<u32>,
        /// Trainings the team may have QUEUED at once.
        #[arg(long, value_name = "N")]
        max_queued: Option<u32>,
        /// GPUs beyond the guarantee it may borrow while others' sit idle
        /// (left out: none, the guarantee is a hard cap).
        #[arg(long, value_name = "N")]
        borrow_limit: Option<u32>,
        /// Its fair-share weight (left out: 1).
        #[arg(long, value_name = "W")]
        weight: Option<f64>,
        /// The highest priority class its trainings may use.
        #[arg(long, value_name = "CLASS")]
        max_priority_class: Option<String>,
    },
    /// Every team with a quota or with trainings: limits and use.
    List,
}

async fn client(coordinator: &Coordinator) -> Result<AdminServiceClient<Conn>, CliError> {
    Ok(AdminServiceClient::new(coordinator.channel().await?))
}

pub async fn run(
    coordinator: &Coordinator,
    cmd: AdminCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    match cmd {
        AdminCommand::Token(cmd) => token(coordinator, cmd, out).await,
        AdminCommand::Quota(cmd) => quota(coordinator, cmd, out).await,
        AdminCommand::Webhook(cmd) => super::webhook::run(coordinator, cmd, out).await,
        AdminCommand::ForgetAgent { name } => {
            let forgotten = client(coordinator)
                .await?
                .forget_agent(v1::ForgetAgentRequest { name: name.clone() })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&forgotten)),
                OutputFormat::Table => emit(&format!(
                    "forgot agent {name} ({}): its GPUs may be registered by another agent",
                    forgotten.agent_id
                )),
            }
        }
    }
}

async fn token(
    coordinator: &Coordinator,
    cmd: TokenCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = client(coordinator).await?;
    match cmd {
        TokenCommand::Create(args) => {
            let ttl = args
                .ttl
                .map(prost_types::Duration::try_from)
                .transpose()
                .map_err(|_| CliError::Usage("--ttl is too long".into()))?;
            let created = client
                .create_token(v1::CreateTokenRequest {
                    team: args.team,
                    name: args.name,
                    role: v1::Role::from(args.role) as i32,
                    ttl,
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&created)),
                OutputFormat::Table => {
                    let token = created.token.unwrap_or_default();
                    emit(&format!(
                        "created token {}/{} ({}), {}; its secret, shown only now:\n{}",
                        token.team,
                        token.name,
                        role_name(token.role),
                        token.expire_time.as_ref().map_or(
                            "valid until revoked".into(),
                            |t| format!("expires {}", time(Some(t)))
                        ),
                        created.secret
                    ))
                }
            }
        }
        TokenCommand::List { team } => {
            let mut tokens = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .list_tokens(v1::ListTokensRequest {
                        team: team.clone().unwrap_or_default(),
                        page_size: 0,
                        page_token,
                    })
                    .await?
                    .into_inner();
                tokens.extend(page.tokens);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match out {
                OutputFormat::Json => emit_json(&serde_json::json!({
                    "tokens": tokens.iter().map(json::message).collect::<Vec<Value>>(),
                })),
                OutputFormat::Table => emit(&tokens_table(&tokens)),
            }
        }
        TokenCommand::Revoke { team, name } => {
            let team = match team {
                Some(team) => team,
                None => {
                    client
                        .who_am_i(v1::WhoAmIRequest {})
                        .await?
                        .into_inner()
                        .team
                }
            };
            let token = client
                .revoke_token(v1::RevokeTokenRequest { team, name })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&token)),
                OutputFormat::Table => emit(&format!(
                    "revoked token {}/{} at {}",
                    token.team,
                    token.name,
                    time(token.revoke_time.as_ref())
                )),
            }
        }
    }
}

async fn quota(
    coordinator: &Coordinator,
    cmd: QuotaCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = client(coordinator).await?;
    let quotas = match cmd {
        QuotaCommand::Set {
            team,
            gpus,
            max_queued,
            borrow_limit,
            weight,
            max_priority_class,
        } => {
            let count = |n: Option<u32>| {
                n.map(i32::try_from)
                    .transpose()
                    .map_err(|_| CliError::Usage("a limit is too large".into()))
            };
            let quota = client
                .set_quota(v1::SetQuotaRequest {
                    team,
                    gpus: count(gpus)?,
                    max_queued: count(max_queued)?,
                    borrow_limit: count(borrow_limit)?,
                    weight,
                    max_priority_class,
                })
                .await?
                .into_inner();
            vec![quota]
        }
        QuotaCommand::List => {
            client
                .list_quotas(v1::ListQuotasRequest {})
                .await?
                .into_inner()
                .quotas
        }
    };
    match out {
        OutputFormat::Json => emit_json(&serde_json::json!({
            "quotas": quotas.iter().map(json::message).collect::<Vec<Value>>(),
        })),
        OutputFormat::Table => emit(&quotas_table(&quotas)),
    }
}

/// `cohort whoami`: who the coordinator takes the caller for.
pub async fn whoami(coordinator: &Coordinator, out: OutputFormat) -> Result<(), CliError> {
    let me = client(coordinator)
        .await?
        .who_am_i(v1::WhoAmIRequest {})
        .await?
        .into_inner();
    match out {
        OutputFormat::Json => emit_json(&json::message(&me)),
        OutputFormat::Table => {
            let mut t = Table::new(&["KIND", "NAME", "TEAM", "ROLE"]);
            t.row(vec![
                me.kind.clone(),
                dash(&me.name),
                dash(&me.team),
                role_name(me.role),
            ]);
            emit(&t.render())
        }
    }
}

pub fn role_name(raw: i32) -> String {
    match v1::Role::try_from(raw) {
        Ok(v1::Role::Viewer) => "viewer",
        Ok(v1::Role::Editor) => "editor",
        Ok(v1::Role::Admin) => "admin",
        Ok(v1::Role::ClusterAdmin) => "cluster-admin",
        _ => "-",
    }
    .to_string()
}

pub fn tokens_table(tokens: &[v1::Token]) -> String {
    if tokens.is_empty() {
        return "no tokens".to_string();
    }
    let mut t = Table::new(&[
        "TEAM", "NAME", "ROLE", "CREATOR", "CREATED", "EXPIRES", "REVOKED",
    ]);
    for k in tokens {
        let or_dash =
            |ts: Option<&prost_types::Timestamp>| ts.map_or("-".into(), |t| time(Some(t)));
        t.row(vec![
            k.team.clone(),
            k.name.clone(),
            role_name(k.role),
            dash(&k.creator),
            time(k.create_time.as_ref()),
            or_dash(k.expire_time.as_ref()),
            or_dash(k.revoke_time.as_ref()),
        ]);
    }
    t.render()
}

pub fn quotas_table(quotas: &[v1::TeamQuota]) -> String {
    if quotas.is_empty() {
        return "no teams".to_string();
    }
    let limit = |l: Option<i32>, unset: &str| l.map_or(unset.to_string(), |n: i32| n.to_string());
    let mut t = Table::new(&[
        "TEAM",
        "GUARANTEED",
        "BORROW LIMIT",
        "WEIGHT",
        "MAX CLASS",
        "IN USE",
        "BORROWED",
        "LENT",
        "GPU-H (DECAYED)",
        "MAX QUEUED",
        "QUEUED",
    ]);
    for q in quotas {
        t.row(vec![
            q.team.clone(),
            limit(q.gpus, "none"),
            limit(q.borrow_limit, "none"),
            format!("{}", q.weight.unwrap_or(1.0)),
            q.max_priority_class.clone().unwrap_or_else(|| "any".into()),
            q.gpus_in_use.to_string(),
            q.gpus_borrowed.to_string(),
            q.gpus_lent.to_string(),
            format!("{:.1}", q.decayed_gpu_hours),
            limit(q.max_queued, "default"),
            q.queued.to_string(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_table_says_none_for_no_limit() {
        let table = quotas_table(&[v1::TeamQuota {
            team: "vision".into(),
            gpus: Some(4),
            max_queued: None,
            gpus_in_use: 6,
            queued: 1,
            borrow_limit: Some(8),
            weight: Some(2.0),
            max_priority_class: Some("high".into()),
            gpus_borrowed: 2,
            gpus_lent: 0,
            decayed_gpu_hours: 12.25,
        }]);
        let row = table.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            ["vision", "4", "8", "2", "high", "6", "2", "0", "12.2", "default", "1"]
        );
    }
}

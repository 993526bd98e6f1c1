//! `cohort-coordinator token create`: the first token, made offline
//! against the database (nobody can call AdminService before a token
//! exists). Audited as actor "bootstrap".

use super::issue::{issue, IssueError, TokenRequest};
use crate::model::{AuditEntry, Role};
use crate::persistence::tokens::TokenRecord;
use crate::persistence::Persistence;
use std::path::PathBuf;
use std::time::Duration;

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| "one of viewer, editor, admin, cluster-admin".to_string())
}

/// `token create`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenCreateArgs {
    /// The coordinator's --data-dir (its SQLite database).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "database_url",
        conflicts_with = "database_url"
    )]
    pub data_dir: Option<PathBuf>,
    /// The coordinator's PostgreSQL URL.
    #[arg(long, env = "COHORT_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// The team (1-63 of a-z, 0-9, '-', '_', '.').
    #[arg(long)]
    pub team: String,
    /// The token's name, unique within the team.
    #[arg(long)]
    pub name: String,
    /// viewer, editor, admin or cluster-admin.
    #[arg(long, value_parser = parse_role)]
    pub role: Role,
    /// Valid this long (e.g. 30d); default: until revoked.
    #[arg(long, value_parser = cohort_spec::duration::parse_duration, value_name = "SPAN")]
    pub expires: Option<Duration>,
}

/// Issues the token: it and its secret.
pub async fn create(
    db: &Persistence,
    args: &TokenCreateArgs,
) -> Result<(TokenRecord, String), IssueError> {
    let audit = AuditEntry {
        actor_kind: "bootstrap".into(),
        actor: "bootstrap".into(),
        actor_team: String::new(),
        method: "cohort-coordinator token create".into(),
        target: args.name.clone(),
        target_team: args.team.clone(),
        code: "OK".into(),
        detail: String::new(),
    };
    issue(
        db,
        TokenRequest {
            team: args.team.clone(),
            name: args.name.clone(),
            role: args.role,
            ttl: args.expires,
            creator: "bootstrap".into(),
            audit,
        },
    )
    .await
}

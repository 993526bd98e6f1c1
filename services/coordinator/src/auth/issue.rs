//! Issuing a token: one path for `AdminService.CreateToken` and for the
//! offline `cohort-coordinator token create`. The secret is made here,
//! returned once, and only its SHA-256 is stored, with the audit row of
//! its creation in the same transaction.

use super::secret;
use crate::error::ApiError;
use crate::model::{valid_team, AuditEntry, Role};
use crate::persistence::tokens::{NewToken, TokenRecord};
use crate::persistence::{DatabaseError, Persistence};
use std::time::Duration;

/// A token to issue.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub team: String,
    pub name: String,
    pub role: Role,
    /// How long it is valid; `None`: until revoked.
    pub ttl: Option<Duration>,
    /// Who creates it (a token name, "bootstrap").
    pub creator: String,
    /// Its creation's audit row (the outcome is filled in here).
    pub audit: AuditEntry,
}

#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("{field}: 1 to 63 of a-z, 0-9, '-', '_', '.'")]
    InvalidName { field: &'static str },
    #[error("ttl: must be more than 0 and less than 1000 years")]
    InvalidTtl,
    #[error("team {team} already has a token named {name}")]
    Exists { team: String, name: String },
    #[error("the OS random number generator failed: {0}")]
    Random(String),
    #[error(transparent)]
    Database(DatabaseError),
}

impl From<IssueError> for ApiError {
    fn from(err: IssueError) -> Self {
        match err {
            IssueError::Exists { team, name } => ApiError::TokenExists { team, name },
            e @ IssueError::InvalidName { field } => ApiError::field(field, e.to_string()),
            e @ IssueError::InvalidTtl => ApiError::field("ttl", e.to_string()),
            IssueError::Random(e) => {
                tracing::error!(error = %e, "cannot issue a token");
                ApiError::Internal(format!("the OS random number generator failed: {e}"))
            }
            IssueError::Database(e) => e.into(),
        }
    }
}

/// Stores the token; returns it and its secret (shown once).
pub async fn issue(
    db: &Persistence,
    req: TokenRequest,
) -> Result<(TokenRecord, String), IssueError> {
    for (field, value) in [("team", &req.team), ("name", &req.name)] {
        if !valid_team(value) {
            return Err(IssueError::InvalidName { field });
        }
    }
    let expire_time = match req.ttl {
        None => None,
        Some(ttl) => {
            let ttl = chrono::Duration::from_std(ttl)
                .ok()
                .filter(|d| *d > chrono::Duration::zero() && *d < chrono::Duration::days(365_000))
                .ok_or(IssueError::InvalidTtl)?;
            Some(chrono::Utc::now() + ttl)
        }
    };
    let secret = secret::new_secret().map_err(|e| IssueError::Random(e.to_string()))?;
    let audit = req.audit.with("OK", format!("role {}", req.role));
    let token = db
        .create_token(NewToken {
            team: req.team.clone(),
            name: req.name.clone(),
            role: req.role,
            secret_sha256: secret::hash(&secret),
            creator: req.creator,
            expire_time,
            audit: Some(audit),
        })
        .await
        .map_err(|e| {
            if e.is_unique_violation() {
                IssueError::Exists {
                    team: req.team,
                    name: req.name,
                }
            } else {
                IssueError::Database(e)
            }
        })?;
    tracing::info!(team = %token.team, name = %token.name, role = %token.role, "token issued");
    Ok((token, secret))
}

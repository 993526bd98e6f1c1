//! Bearer tokens: their SHA-256 (never the secret), team, name, role,
//! expiry and revocation. Creating and revoking write their audit row in
//! the same transaction.

use super::audit::insert_in;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::tokens;
use super::{DatabaseError, Persistence};
use crate::model::{AuditEntry, Role};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A stored token, without its secret.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub team: String,
    pub name: String,
    pub role: Role,
    pub creator: String,
    pub create_time: DateTime<Utc>,
    pub expire_time: Option<DateTime<Utc>>,
    pub revoke_time: Option<DateTime<Utc>>,
}

impl TokenRecord {
    /// Neither revoked nor expired at `at`.
    pub fn is_active(&self, at: DateTime<Utc>) -> bool {
        self.revoke_time.is_none() && self.expire_time.is_none_or(|e| e > at)
    }
}

/// What [`Persistence::create_token`] stores.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub team: String,
    pub name: String,
    pub role: Role,
    pub secret_sha256: String,
    pub creator: String,
    pub expire_time: Option<DateTime<Utc>>,
    pub audit: Option<AuditEntry>,
}

type Row = (
    String,
    String,
    String,
    String,
    String,
    chrono::NaiveDateTime,
    Option<chrono::NaiveDateTime>,
    Option<chrono::NaiveDateTime>,
);

fn select() -> (
    tokens::id,
    tokens::team,
    tokens::name,
    tokens::role,
    tokens::creator,
    tokens::create_time,
    tokens::expire_time,
    tokens::revoke_time,
) {
    (
        tokens::id,
        tokens::team,
        tokens::name,
        tokens::role,
        tokens::creator,
        tokens::create_time,
        tokens::expire_time,
        tokens::revoke_time,
    )
}

fn record(row: Row) -> Result<TokenRecord, DatabaseError> {
    let (id, team, name, role, creator, created, expires, revoked) = row;
    let role = Role::parse(&role)
        .ok_or_else(|| DatabaseError::Corrupt(format!("token {id} has role {role:?}")))?;
    Ok(TokenRecord {
        id,
        team,
        name,
        role,
        creator,
        create_time: from_db_time(created),
        expire_time: expires.map(from_db_time),
        revoke_time: revoked.map(from_db_time),
    })
}

impl Persistence {
    /// Stores a new token; a team with a token of that name is
    /// [`DatabaseError::is_unique_violation`].
    pub async fn create_token(&self, new: NewToken) -> Result<TokenRecord, DatabaseError> {
        self.transaction("create_token", move |c| {
            let at = now();
            let id = format!("tok-{}", uuid::Uuid::new_v4().simple());
            diesel::insert_into(tokens::table)
                .values((
                    tokens::id.eq(&id),
                    tokens::team.eq(&new.team),
                    tokens::name.eq(&new.name),
                    tokens::role.eq(new.role.as_str()),
                    tokens::secret_sha256.eq(&new.secret_sha256),
                    tokens::creator.eq(&new.creator),
                    tokens::create_time.eq(to_db_time(at)),
                    tokens::expire_time.eq(new.expire_time.map(to_db_time)),
                ))
                .execute(c)?;
            if let Some(audit) = &new.audit {
                insert_in(c, audit, at)?;
            }
            let row: Row = tokens::table.find(&id).select(select()).first(c)?;
            record(row)
        })
        .await
    }

    /// The token whose secret hashes to `secret_sha256`, active or not.
    pub async fn token_by_hash(
        &self,
        secret_sha256: &str,
    ) -> Result<Option<TokenRecord>, DatabaseError> {
        let hash = secret_sha256.to_string();
        self.read("token_by_hash", move |c| {
            let row: Option<Row> = tokens::table
                .filter(tokens::secret_sha256.eq(&hash))
                .select(select())
                .first(c)
                .optional()?;
            row.map(record).transpose()
        })
        .await
    }

    /// A team's tokens by name, after `after_name`, at most `limit`.
    pub async fn tokens(
        &self,
        team: &str,
        after_name: &str,
        limit: i64,
    ) -> Result<Vec<TokenRecord>, DatabaseError> {
        let (team, after) = (team.to_string(), after_name.to_string());
        self.read("tokens", move |c| {
            let rows: Vec<Row> = tokens::table
                .filter(tokens::team.eq(&team))
                .filter(tokens::name.gt(&after))
                .order(tokens::name.asc())
                .limit(limit.max(0))
                .select(select())
                .load(c)?;
            rows.into_iter().map(record).collect()
        })
        .await
    }

    /// Revokes `team`'s token `name` (once: a revoked one keeps its first
    /// revocation time); `None` when there is no such token.
    pub async fn revoke_token(
        &self,
        team: &str,
        name: &str,
        up_to: Role,
        audit: Option<AuditEntry>,
    ) -> Result<Revoked, DatabaseError> {
        let (team, name) = (team.to_string(), name.to_string());
        self.transaction("revoke_token", move |c| {
            let at = now();
            let this = tokens::table
                .filter(tokens::team.eq(&team))
                .filter(tokens::name.eq(&name));
            let found: Option<Row> = this.select(select()).first(c).optional()?;
            let Some(found) = found.map(record).transpose()? else {
                return Ok(Revoked::NotFound);
            };
            if found.role > up_to {
                return Ok(Revoked::Outranks(found.role));
            }
            let updated = diesel::update(this.filter(tokens::revoke_time.is_null()))
                .set(tokens::revoke_time.eq(Some(to_db_time(at))))
                .execute(c)?;
            let row: Option<Row> = this.select(select()).first(c).optional()?;
            if row.is_some() && updated > 0 {
                if let Some(audit) = &audit {
                    insert_in(c, audit, at)?;
                }
            }
            match row.map(record).transpose()? {
                Some(token) => Ok(Revoked::Done(token)),
                None => Ok(Revoked::NotFound),
            }
        })
        .await
    }
}

/// What [`Persistence::revoke_token`] did.
#[derive(Debug)]
pub enum Revoked {
    Done(TokenRecord),
    NotFound,
    /// The token's role is above what the caller may revoke: nothing changed.
    Outranks(Role),
}

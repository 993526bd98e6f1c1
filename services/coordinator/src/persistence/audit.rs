//! The audit log: every change (written in the change's own transaction, so
//! a change whose row can't be written does not happen) and every denial.

use super::connection::on_backend;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::audit_events;
use super::{DatabaseError, DbConnection, Persistence};
use crate::model::AuditEntry;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A stored audit row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: i64,
    pub time: DateTime<Utc>,
    pub entry: AuditEntry,
}

/// Which rows [`Persistence::audit_events`] returns: newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only rows about this team (its trainings, tokens, quota) or by it.
    pub team: Option<String>,
    /// Only rows at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only rows with an id below this (the previous page's last).
    pub before_id: Option<i64>,
    pub limit: i64,
}

#[derive(Debug, Queryable)]
struct AuditRow {
    id: i64,
    time: chrono::NaiveDateTime,
    actor_kind: String,
    actor: String,
    actor_team: String,
    method: String,
    target: String,
    target_team: String,
    code: String,
    detail: String,
}

/// Writes `entry` at `at` inside the caller's transaction.
pub fn insert_in(
    conn: &mut DbConnection,
    entry: &AuditEntry,
    at: DateTime<Utc>,
) -> Result<(), DatabaseError> {
    insert_all_in(conn, std::slice::from_ref(entry), at)
}

/// Writes `entries`, all at `at`, with one statement inside the caller's transaction.
pub fn insert_all_in(
    conn: &mut DbConnection,
    entries: &[AuditEntry],
    at: DateTime<Utc>,
) -> Result<(), DatabaseError> {
    if entries.is_empty() {
        return Ok(());
    }
    let rows: Vec<_> = entries
        .iter()
        .map(|entry| {
            (
                audit_events::time.eq(to_db_time(at)),
                audit_events::actor_kind.eq(&entry.actor_kind),
                audit_events::actor.eq(&entry.actor),
                audit_events::actor_team.eq(&entry.actor_team),
                audit_events::method.eq(&entry.method),
                audit_events::target.eq(&entry.target),
                audit_events::target_team.eq(&entry.target_team),
                audit_events::code.eq(&entry.code),
                audit_events::detail.eq(&entry.detail),
            )
        })
        .collect();
    on_backend!(conn, |c| diesel::insert_into(audit_events::table)
        .values(&rows)
        .execute(c))?;
    Ok(())
}

impl Persistence {
    /// Records one entry on its own (a denial: nothing else changes).
    pub async fn record_audit(&self, entry: AuditEntry) -> Result<(), DatabaseError> {
        // Any coordinator of the database may append a denial: unfenced.
        self.unfenced("record_audit", move |c| insert_in(c, &entry, now()))
            .await
    }

    /// One page of the log, newest first.
    pub async fn audit_events(&self, query: AuditQuery) -> Result<Vec<AuditRecord>, DatabaseError> {
        self.read("audit_events", move |c| {
            let mut q = audit_events::table
                .order(audit_events::id.desc())
                .limit(query.limit.max(0))
                .into_boxed();
            if let Some(team) = &query.team {
                q = q.filter(
                    audit_events::target_team
                        .eq(team.clone())
                        .or(audit_events::actor_team.eq(team.clone())),
                );
            }
            if let Some(since) = query.since {
                q = q.filter(audit_events::time.ge(to_db_time(since)));
            }
            if let Some(before) = query.before_id {
                q = q.filter(audit_events::id.lt(before));
            }
            let rows: Vec<AuditRow> = q.load(c)?;
            Ok(rows
                .into_iter()
                .map(|r| AuditRecord {
                    id: r.id,
                    time: from_db_time(r.time),
                    entry: AuditEntry {
                        actor_kind: r.actor_kind,
                        actor: r.actor,
                        actor_team: r.actor_team,
                        method: r.method,
                        target: r.target,
                        target_team: r.target_team,
                        code: r.code,
                        detail: r.detail,
                    },
                })
                .collect())
        })
        .await
    }

    /// Deletes the rows older than `before` (retention); returns how many.
    pub async fn prune_audit(&self, before: DateTime<Utc>) -> Result<usize, DatabaseError> {
        self.transaction("prune_audit", move |c| {
            Ok(diesel::delete(
                audit_events::table.filter(audit_events::time.lt(to_db_time(before))),
            )
            .execute(c)?)
        })
        .await
    }
}

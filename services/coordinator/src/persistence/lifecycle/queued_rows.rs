//! The rows a batch of creates adds: each new QUEUED training, its
//! "created" transition and that transition's event (sequence number 1),
//! its labels, and the audit row of its create.
//!
//! On SQLite, one multi-row insert per table. On PostgreSQL all of them in
//! ONE statement — data-modifying CTEs, each inserting from `unnest` over
//! one array per column, so the statement's text and bind count are the
//! same for any batch — one round trip instead of four or five. Each round
//! trip is a wake-up of the coordinator's thread and of a backend; with
//! the clients, the coordinator and PostgreSQL on the same busy cores,
//! those waits were most of a batch's time (docs/benchmarks.md). The
//! foreign keys of transitions, events and labels to their training hold:
//! PostgreSQL checks them at the end of the statement, after every CTE.

use crate::model::{AuditEntry, EventPayload, JobState, StateChange};
use crate::persistence::connection::on_backend;
use crate::persistence::labels::LabelRow;
use crate::persistence::rows::{to_db_time, EventRow, NewTransitionRow, TrainingRow};
use crate::persistence::schema::{state_transitions, training_events, training_labels, trainings};
use crate::persistence::{DatabaseError, DbConnection, Outbox};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamp};

/// Writes `rows` (new QUEUED trainings) with their first transition, event
/// and labels, and `audits` at `audit_time`, inside the caller's transaction.
pub(super) fn insert(
    conn: &mut DbConnection,
    out: &mut Outbox,
    rows: &[TrainingRow],
    audits: &[AuditEntry],
    audit_time: DateTime<Utc>,
) -> Result<(), DatabaseError> {
    if rows.is_empty() && audits.is_empty() {
        return Ok(());
    }
    let change = EventPayload::StateChange(StateChange {
        from: None,
        to: JobState::Queued,
        reason: "created".to_string(),
    });
    let (kind, payload_json) = (change.kind(), change.to_json());
    let transitions: Vec<NewTransitionRow> = rows
        .iter()
        .map(|row| NewTransitionRow {
            training_id: &row.id,
            attempt: 0,
            from_state: None,
            to_state: JobState::Queued.as_str(),
            reason: "created",
            at: row.create_time,
        })
        .collect();
    let events: Vec<EventRow> = rows
        .iter()
        .map(|row| EventRow {
            training_id: row.id.clone(),
            seq: 1,
            attempt: 0,
            kind: kind.clone(),
            payload_json: payload_json.clone(),
            event_time: row.create_time,
        })
        .collect();
    let parsed = crate::persistence::labels::parse(rows)?;
    let labels = crate::persistence::labels::rows_of(&parsed);
    match conn {
        DbConnection::Pg(pg) => {
            let statement = OneStatement {
                trainings: TrainingColumns::of(rows),
                transitions: TransitionColumns::of(&transitions),
                events: EventColumns::of(&events),
                labels: LabelColumns::of(&labels),
                audits: AuditColumns::of(
                    &audits
                        .iter()
                        .map(|e| (e, to_db_time(audit_time)))
                        .collect::<Vec<_>>(),
                ),
            };
            statement.execute(pg)?;
        }
        DbConnection::Sqlite(_) => {
            if !rows.is_empty() {
                on_backend!(conn, |c| diesel::insert_into(trainings::table)
                    .values(rows)
                    .execute(c))?;
            }
            if !labels.is_empty() {
                on_backend!(conn, |c| diesel::insert_into(training_labels::table)
                    .values(&labels)
                    .execute(c))?;
            }
            if !rows.is_empty() {
                on_backend!(conn, |c| diesel::insert_into(state_transitions::table)
                    .values(&transitions)
                    .execute(c))?;
                on_backend!(conn, |c| diesel::insert_into(training_events::table)
                    .values(&events)
                    .execute(c))?;
            }
            crate::persistence::audit::insert_all_in(conn, audits, audit_time)?;
        }
    }
    for row in rows {
        out.event(&row.id, 1);
    }
    if !rows.is_empty() {
        out.state_change();
    }
    Ok(())
}

/// One array per column of a table's new rows; `bind` writes them as
/// `$n, $n+1, ...` in the order of `COLUMNS`.
macro_rules! columns {
    ($name:ident of $row:ty, |$r:ident| { $($col:ident: $st:ty => $rt:ty = $value:expr),* $(,)? }) => {
        struct $name {
            $($col: Vec<$rt>,)*
        }

        impl $name {
            const COLUMNS: &'static str = concat!($("\"", stringify!($col), "\", ",)* "");

            fn bind<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
                let mut first = true;
                $(
                    if !first {
                        out.push_sql(", ");
                    }
                    first = false;
                    out.push_bind_param::<Array<$st>, Vec<$rt>>(&self.$col)?;
                )*
                let _ = first;
                Ok(())
            }
        }

        impl $name {
            fn of(rows: &[$row]) -> Self {
                let mut columns = Self { $($col: Vec::new(),)* };
                for $r in rows {
                    $(columns.$col.push($value);)*
                }
                columns
            }
        }
    };
}

columns!(TrainingColumns of TrainingRow, |r| {
    id: Text => String = r.id.clone(),
    request_id: Nullable<Text> => Option<String> = r.request_id.clone(),
    display_name: Text => String = r.display_name.clone(),
    config_json: Text => String = r.config_json.clone(),
    gpu_request_json: Text => String = r.gpu_request_json.clone(),
    state: Text => String = r.state.clone(),
    state_reason: Text => String = r.state_reason.clone(),
    world_size: Integer => i32 = r.world_size,
    distributed: Bool => bool = r.distributed,
    priority: Integer => i32 = r.priority,
    attempt: Integer => i32 = r.attempt,
    restart_count: Integer => i32 = r.restart_count,
    max_restarts: Integer => i32 = r.max_restarts,
    master_addr: Nullable<Text> => Option<String> = r.master_addr.clone(),
    master_port: Nullable<Integer> => Option<i32> = r.master_port,
    last_event_seq: BigInt => i64 = r.last_event_seq,
    create_time: Timestamp => NaiveDateTime = r.create_time,
    update_time: Timestamp => NaiveDateTime = r.update_time,
    start_time: Nullable<Timestamp> => Option<NaiveDateTime> = r.start_time,
    end_time: Nullable<Timestamp> => Option<NaiveDateTime> = r.end_time,
    trace_context: Nullable<Text> => Option<String> = r.trace_context.clone(),
    team: Text => String = r.team.clone(),
    creator: Text => String = r.creator.clone(),
    labels_json: Text => String = r.labels_json.clone(),
    priority_class: Text => String = r.priority_class.clone(),
    borrow: Bool => bool = r.borrow,
    borrowing: Bool => bool = r.borrowing,
    preemption_count: Integer => i32 = r.preemption_count,
    attempt_time: Nullable<Timestamp> => Option<NaiveDateTime> = r.attempt_time,
    notice_saves: Bool => bool = r.notice_saves,
    resize_count: Integer => i32 = r.resize_count,
});

columns!(TransitionColumns of NewTransitionRow<'_>, |r| {
    training_id: Text => String = r.training_id.to_string(),
    attempt: Integer => i32 = r.attempt,
    from_state: Nullable<Text> => Option<String> = r.from_state.map(str::to_string),
    to_state: Text => String = r.to_state.to_string(),
    reason: Text => String = r.reason.to_string(),
    at: Timestamp => NaiveDateTime = r.at,
});

columns!(EventColumns of EventRow, |r| {
    training_id: Text => String = r.training_id.clone(),
    seq: BigInt => i64 = r.seq,
    attempt: Integer => i32 = r.attempt,
    kind: Text => String = r.kind.clone(),
    payload_json: Text => String = r.payload_json.clone(),
    event_time: Timestamp => NaiveDateTime = r.event_time,
});

columns!(LabelColumns of LabelRow<'_>, |r| {
    training_id: Text => String = r.training_id.to_string(),
    key: Text => String = r.key.to_string(),
    value: Text => String = r.value.to_string(),
});

columns!(AuditColumns of (&AuditEntry, NaiveDateTime), |r| {
    time: Timestamp => NaiveDateTime = r.1,
    actor_kind: Text => String = r.0.actor_kind.clone(),
    actor: Text => String = r.0.actor.clone(),
    actor_team: Text => String = r.0.actor_team.clone(),
    method: Text => String = r.0.method.clone(),
    target: Text => String = r.0.target.clone(),
    target_team: Text => String = r.0.target_team.clone(),
    code: Text => String = r.0.code.clone(),
    detail: Text => String = r.0.detail.clone(),
});

/// Every insert of a batch as one PostgreSQL statement.
struct OneStatement {
    trainings: TrainingColumns,
    transitions: TransitionColumns,
    events: EventColumns,
    labels: LabelColumns,
    audits: AuditColumns,
}

impl OneStatement {
    fn execute(self, conn: &mut diesel::PgConnection) -> QueryResult<usize> {
        RunQueryDsl::execute(self, conn)
    }
}

/// `INSERT INTO table (columns) SELECT * FROM unnest(arrays)`.
fn insert_from_arrays<'b>(
    out: &mut AstPass<'_, 'b, Pg>,
    table: &str,
    columns: &str,
    bind: impl FnOnce(&mut AstPass<'_, 'b, Pg>) -> QueryResult<()>,
) -> QueryResult<()> {
    out.push_sql("INSERT INTO ");
    out.push_sql(table);
    out.push_sql(" (");
    out.push_sql(columns.trim_end_matches(", "));
    out.push_sql(") SELECT * FROM unnest(");
    bind(out)?;
    out.push_sql(")");
    Ok(())
}

impl QueryFragment<Pg> for OneStatement {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH new_trainings AS (");
        insert_from_arrays(&mut out, "trainings", TrainingColumns::COLUMNS, |o| {
            self.trainings.bind(o)
        })?;
        out.push_sql("), new_transitions AS (");
        insert_from_arrays(
            &mut out,
            "state_transitions",
            TransitionColumns::COLUMNS,
            |o| self.transitions.bind(o),
        )?;
        out.push_sql("), new_events AS (");
        insert_from_arrays(&mut out, "training_events", EventColumns::COLUMNS, |o| {
            self.events.bind(o)
        })?;
        out.push_sql("), new_labels AS (");
        insert_from_arrays(&mut out, "training_labels", LabelColumns::COLUMNS, |o| {
            self.labels.bind(o)
        })?;
        out.push_sql(") ");
        insert_from_arrays(&mut out, "audit_events", AuditColumns::COLUMNS, |o| {
            self.audits.bind(o)
        })
    }
}

impl QueryId for OneStatement {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl RunQueryDsl<diesel::PgConnection> for OneStatement {}

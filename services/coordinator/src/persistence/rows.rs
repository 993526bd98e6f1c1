//! Row structs, one per table as diesel reads and writes it, kept apart from
//! the domain types in `crate::model` (conversions live here).

use super::schema::{state_transitions, training_events, trainings};
use super::DatabaseError;
use crate::model::{EventPayload, JobState, StateTransition, StoredEvent, Training};
use chrono::{DateTime, NaiveDateTime, SubsecRound, Utc};
use cohort_spec::workload::Workload;
use diesel::prelude::*;

/// Now, at the microsecond precision both backends store.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub fn to_db_time(t: DateTime<Utc>) -> NaiveDateTime {
    t.naive_utc()
}

pub fn from_db_time(t: NaiveDateTime) -> DateTime<Utc> {
    t.and_utc()
}

pub(super) fn parse_state(s: &str) -> Result<JobState, DatabaseError> {
    s.parse()
        .map_err(|e| DatabaseError::Corrupt(format!("trainings.state: {e}")))
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = trainings)]
pub struct TrainingRow {
    pub id: String,
    pub request_id: Option<String>,
    pub display_name: String,
    pub config_json: String,
    pub gpu_request_json: String,
    pub state: String,
    pub state_reason: String,
    pub world_size: i32,
    pub distributed: bool,
    pub priority: i32,
    pub attempt: i32,
    pub restart_count: i32,
    pub max_restarts: i32,
    pub master_addr: Option<String>,
    pub master_port: Option<i32>,
    pub last_event_seq: i64,
    pub create_time: NaiveDateTime,
    pub update_time: NaiveDateTime,
    pub start_time: Option<NaiveDateTime>,
    pub end_time: Option<NaiveDateTime>,
    pub trace_context: Option<String>,
    pub team: String,
    pub creator: String,
    pub labels_json: String,
    pub priority_class: String,
    pub borrow: bool,
    pub borrowing: bool,
    pub preemption_count: i32,
    pub attempt_time: Option<NaiveDateTime>,
    pub notice_saves: bool,
    pub resize_count: i32,
}

impl TryFrom<TrainingRow> for Training {
    type Error = DatabaseError;

    fn try_from(row: TrainingRow) -> Result<Self, DatabaseError> {
        let corrupt = |what: &str, e: serde_json::Error| {
            DatabaseError::Corrupt(format!("training {} {what}: {e}", row.id))
        };
        Ok(Training {
            config: Workload::from_stored_json(&row.config_json)
                .map_err(|e| corrupt("config", e))?,
            gpu_request: serde_json::from_str(&row.gpu_request_json)
                .map_err(|e| corrupt("gpu request", e))?,
            labels: serde_json::from_str(&row.labels_json).map_err(|e| corrupt("labels", e))?,
            state: parse_state(&row.state)?,
            create_time: from_db_time(row.create_time),
            update_time: from_db_time(row.update_time),
            start_time: row.start_time.map(from_db_time),
            end_time: row.end_time.map(from_db_time),
            id: row.id,
            display_name: row.display_name,
            state_reason: row.state_reason,
            world_size: row.world_size,
            distributed: row.distributed,
            priority: row.priority,
            attempt: row.attempt,
            restart_count: row.restart_count,
            max_restarts: row.max_restarts,
            master_addr: row.master_addr,
            master_port: row.master_port,
            last_event_seq: row.last_event_seq,
            trace_context: row.trace_context,
            request_id: row.request_id.map(|key| client_request_id(&row.team, key)),
            team: row.team,
            creator: row.creator,
            priority_class: row.priority_class,
            borrow: row.borrow,
            borrowing: row.borrowing,
            preemption_count: row.preemption_count,
            attempt_time: row.attempt_time.map(from_db_time),
            notice_saves: row.notice_saves,
            resize_count: row.resize_count,
        })
    }
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = state_transitions)]
pub struct NewTransitionRow<'a> {
    pub training_id: &'a str,
    pub attempt: i32,
    pub from_state: Option<&'a str>,
    pub to_state: &'a str,
    pub reason: &'a str,
    pub at: NaiveDateTime,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = state_transitions)]
pub struct TransitionRow {
    pub id: i64,
    pub training_id: String,
    pub attempt: i32,
    pub from_state: Option<String>,
    pub to_state: String,
    pub reason: String,
    pub at: NaiveDateTime,
}

impl TryFrom<TransitionRow> for StateTransition {
    type Error = DatabaseError;

    fn try_from(row: TransitionRow) -> Result<Self, DatabaseError> {
        Ok(StateTransition {
            from: row.from_state.as_deref().map(parse_state).transpose()?,
            to: parse_state(&row.to_state)?,
            training_id: row.training_id,
            attempt: row.attempt,
            reason: row.reason,
            at: from_db_time(row.at),
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = training_events)]
pub struct EventRow {
    pub training_id: String,
    pub seq: i64,
    pub attempt: i32,
    pub kind: String,
    pub payload_json: String,
    pub event_time: NaiveDateTime,
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = DatabaseError;

    fn try_from(row: EventRow) -> Result<Self, DatabaseError> {
        let payload = EventPayload::from_stored(&row.kind, &row.payload_json).ok_or_else(|| {
            DatabaseError::Corrupt(format!(
                "event {} of training {}: undecodable {} payload",
                row.seq, row.training_id, row.kind
            ))
        })?;
        Ok(StoredEvent {
            training_id: row.training_id,
            seq: row.seq,
            attempt: row.attempt,
            payload,
            time: from_db_time(row.event_time),
        })
    }
}

/// How a client's request_id is stored: under its team, so teams never see
/// each other's keys (team "" keeps the key as given).
pub(crate) fn request_key(team: &str, request_id: &str) -> String {
    if team.is_empty() {
        request_id.to_string()
    } else {
        format!("{team}/{request_id}")
    }
}

/// The client's request_id of a stored key.
pub(crate) fn client_request_id(team: &str, key: String) -> String {
    match key.strip_prefix(team).and_then(|k| k.strip_prefix('/')) {
        Some(id) if !team.is_empty() => id.to_string(),
        _ => key,
    }
}

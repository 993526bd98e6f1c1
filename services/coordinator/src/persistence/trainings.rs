//! Trainings and their state history. Every change of a training's state
//! updates the row, appends a `state_transitions` row and a `state_change`
//! event, in one transaction.

use super::events::append_event_in;
use super::rows::{now, to_db_time, NewTransitionRow, TrainingRow, TransitionRow};
use super::schema::{state_transitions, trainings};
use super::{DatabaseError, DbConnection, Persistence};
use crate::model::{
    AuditEntry, EventPayload, GpuRequest, JobState, StateChange, StateTransition, Training,
};
use chrono::{DateTime, Utc};
use cohort_spec::TrainingConfig;
use diesel::prelude::*;

/// What CreateTraining persists.
#[derive(Debug, Clone)]
pub struct NewTraining {
    /// Idempotency key: a second create with the same key returns the first training.
    pub request_id: Option<String>,
    pub display_name: String,
    pub config: TrainingConfig,
    pub gpu_request: GpuRequest,
    pub priority: i32,
    pub max_restarts: i32,
    /// The creating call's W3C traceparent, when traced.
    pub trace_context: Option<String>,
    /// The team it belongs to and who creates it.
    pub team: String,
    pub creator: String,
    /// The audit row of the create, written in its transaction.
    pub audit: Option<AuditEntry>,
    /// Refuse ([`DatabaseError::QueueFull`]) when the team already has this
    /// many QUEUED trainings; `None`: no cap.
    pub max_queued: Option<i64>,
}

/// QueueFull when `team` has `cap` QUEUED trainings already. On PostgreSQL
/// a per-team advisory lock (held to the end of the transaction) makes
/// concurrent creates count one after the other; SQLite's writers are
/// serial already.
fn check_queue_cap(conn: &mut DbConnection, team: &str, cap: i64) -> Result<(), DatabaseError> {
    if let DbConnection::Pg(pg) = conn {
        diesel::sql_query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind::<diesel::sql_types::Text, _>(format!("cohort-queue/{team}"))
            .execute(pg)?;
    }
    let queued: i64 = trainings::table
        .filter(trainings::team.eq(team))
        .filter(trainings::state.eq(JobState::Queued.as_str()))
        .count()
        .get_result(conn)?;
    if queued >= cap {
        return Err(DatabaseError::QueueFull {
            team: team.to_string(),
            queued,
        });
    }
    Ok(())
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

/// The result of [`Persistence::create_training`].
#[derive(Debug, Clone)]
pub struct Created {
    pub training: Training,
    /// False when the request_id matched an existing training (nothing written).
    pub created: bool,
}

/// Position after which the next page of trainings starts (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingCursor {
    pub create_time: DateTime<Utc>,
    pub id: String,
}

impl From<&Training> for TrainingCursor {
    fn from(t: &Training) -> Self {
        Self {
            create_time: t.create_time,
            id: t.id.clone(),
        }
    }
}

/// A page request of [`Persistence::list_trainings`].
#[derive(Debug, Clone, Default)]
pub struct ListTrainings {
    /// Only these states; empty: all.
    pub states: Vec<JobState>,
    /// At most this many trainings.
    pub limit: i64,
    /// Start after this training (the last one of the previous page).
    pub after: Option<TrainingCursor>,
    /// Only this team's; `None`: every team's.
    pub team: Option<String>,
}

fn new_training_id() -> String {
    format!("trn-{}", uuid::Uuid::new_v4().simple())
}

pub(crate) fn load_training(
    conn: &mut DbConnection,
    training_id: &str,
) -> Result<Option<Training>, DatabaseError> {
    trainings::table
        .find(training_id)
        .select(TrainingRow::as_select())
        .first(conn)
        .optional()?
        .map(Training::try_from)
        .transpose()
}

fn find_by_request_id(
    conn: &mut DbConnection,
    request_id: &str,
) -> Result<Option<TrainingRow>, DatabaseError> {
    Ok(trainings::table
        .filter(trainings::request_id.eq(request_id))
        .select(TrainingRow::as_select())
        .first(conn)
        .optional()?)
}

fn insert_transition(
    conn: &mut DbConnection,
    training_id: &str,
    attempt: i32,
    change: &StateChange,
    at: DateTime<Utc>,
) -> Result<(), DatabaseError> {
    diesel::insert_into(state_transitions::table)
        .values(NewTransitionRow {
            training_id,
            attempt,
            from_state: change.from.map(JobState::as_str),
            to_state: change.to.as_str(),
            reason: &change.reason,
            at: to_db_time(at),
        })
        .execute(conn)?;
    super::bell::note_state_change();
    append_event_in(
        conn,
        training_id,
        attempt,
        &EventPayload::StateChange(change.clone()),
        at,
    )?;
    Ok(())
}

fn create_in(conn: &mut DbConnection, new: &NewTraining) -> Result<Created, DatabaseError> {
    let config_json = new.config.to_json();
    let gpu_request_json = serde_json::to_string(&new.gpu_request).expect("gpu request serialises");
    let key = new
        .request_id
        .as_deref()
        .map(|id| request_key(&new.team, id));
    if let Some(key) = &key {
        let request_id = new.request_id.clone().unwrap_or_default();
        if let Some(row) = find_by_request_id(conn, key)? {
            let same = row.config_json == config_json
                && row.gpu_request_json == gpu_request_json
                && row.priority == new.priority
                && row.max_restarts == new.max_restarts
                && row.display_name == new.display_name;
            if !same {
                return Err(DatabaseError::RequestIdConflict {
                    request_id,
                    existing: row.id,
                });
            }
            return Ok(Created {
                training: row.try_into()?,
                created: false,
            });
        }
    }
    if let Some(cap) = new.max_queued {
        check_queue_cap(conn, &new.team, cap)?;
    }
    let at = now();
    let row = TrainingRow {
        id: new_training_id(),
        request_id: key,
        display_name: new.display_name.clone(),
        config_json,
        gpu_request_json,
        state: JobState::Queued.as_str().to_string(),
        state_reason: "waiting to be scheduled".to_string(),
        world_size: 0,
        distributed: false,
        priority: new.priority,
        attempt: 0,
        restart_count: 0,
        max_restarts: new.max_restarts,
        master_addr: None,
        master_port: None,
        last_event_seq: 0,
        create_time: to_db_time(at),
        update_time: to_db_time(at),
        start_time: None,
        end_time: None,
        trace_context: new.trace_context.clone(),
        team: new.team.clone(),
        creator: new.creator.clone(),
    };
    diesel::insert_into(trainings::table)
        .values(&row)
        .execute(conn)?;
    let change = StateChange {
        from: None,
        to: JobState::Queued,
        reason: "created".to_string(),
    };
    insert_transition(conn, &row.id, 0, &change, at)?;
    if let Some(audit) = &new.audit {
        super::audit::insert_in(
            conn,
            &AuditEntry {
                target: row.id.clone(),
                ..audit.clone()
            },
            at,
        )?;
    }
    let training = load_training(conn, &row.id)?
        .ok_or_else(|| DatabaseError::TrainingNotFound(row.id.clone()))?;
    Ok(Created {
        training,
        created: true,
    })
}

/// Moves a training to `to` inside the caller's transaction: refuses an
/// illegal transition (writing nothing), else updates the row and records the
/// transition and its event. For composing with other writes (e.g. the rank map).
pub fn transition_in(
    conn: &mut DbConnection,
    training_id: &str,
    to: JobState,
    reason: &str,
) -> Result<Training, DatabaseError> {
    let current = load_training(conn, training_id)?
        .ok_or_else(|| DatabaseError::TrainingNotFound(training_id.to_string()))?;
    let from = current.state;
    if !from.can_transition_to(to) {
        return Err(DatabaseError::IllegalTransition {
            id: training_id.to_string(),
            from,
            to,
        });
    }
    let at = now();
    let this = trainings::table
        .filter(trainings::id.eq(training_id))
        .filter(trainings::state.eq(from.as_str()));
    let updated = diesel::update(this)
        .set((
            trainings::state.eq(to.as_str()),
            trainings::state_reason.eq(reason),
            trainings::update_time.eq(to_db_time(at)),
        ))
        .execute(conn)?;
    if updated == 0 {
        return Err(DatabaseError::Conflict(format!("training {training_id}")));
    }
    let this = trainings::table.filter(trainings::id.eq(training_id));
    if to == JobState::Running && current.start_time.is_none() {
        diesel::update(this)
            .set(trainings::start_time.eq(Some(to_db_time(at))))
            .execute(conn)?;
    }
    if to.is_final() {
        diesel::update(this)
            .set(trainings::end_time.eq(Some(to_db_time(at))))
            .execute(conn)?;
    }
    let change = StateChange {
        from: Some(from),
        to,
        reason: reason.to_string(),
    };
    insert_transition(conn, training_id, current.attempt, &change, at)?;
    load_training(conn, training_id)?
        .ok_or_else(|| DatabaseError::TrainingNotFound(training_id.to_string()))
}

fn list_in(conn: &mut DbConnection, page: &ListTrainings) -> Result<Vec<Training>, DatabaseError> {
    let mut query = trainings::table
        .select(TrainingRow::as_select())
        .order((trainings::create_time.desc(), trainings::id.desc()))
        .limit(page.limit.max(0))
        .into_boxed();
    if !page.states.is_empty() {
        let states: Vec<&str> = page.states.iter().map(|s| s.as_str()).collect();
        query = query.filter(trainings::state.eq_any(states));
    }
    if let Some(team) = &page.team {
        query = query.filter(trainings::team.eq(team.clone()));
    }
    if let Some(after) = &page.after {
        let t = to_db_time(after.create_time);
        query = query.filter(
            trainings::create_time.lt(t).or(trainings::create_time
                .eq(t)
                .and(trainings::id.lt(after.id.clone()))),
        );
    }
    query
        .load(conn)?
        .into_iter()
        .map(Training::try_from)
        .collect()
}

/// Trainings in `state` by priority (higher first), then age.
fn trainings_in_state(
    conn: &mut DbConnection,
    state: JobState,
) -> Result<Vec<Training>, DatabaseError> {
    trainings::table
        .filter(trainings::state.eq(state.as_str()))
        .order((
            trainings::priority.desc(),
            trainings::create_time.asc(),
            trainings::id.asc(),
        ))
        .select(TrainingRow::as_select())
        .load(conn)?
        .into_iter()
        .map(Training::try_from)
        .collect()
}

impl Persistence {
    /// Creates a QUEUED training with its first transition and event, or, when
    /// `request_id` names an existing training with the same config and GPU
    /// request, returns that one (`created: false`). The same request_id with
    /// a different request is [`DatabaseError::RequestIdConflict`].
    pub async fn create_training(&self, new: NewTraining) -> Result<Created, DatabaseError> {
        let first = {
            let new = new.clone();
            self.transaction("create_training", move |c| create_in(c, &new))
                .await
        };
        match first {
            // A concurrent create with the same request_id won the race: the
            // second run finds its training.
            Err(e) if e.is_unique_violation() && new.request_id.is_some() => {
                self.transaction("create_training", move |c| create_in(c, &new))
                    .await
            }
            other => other,
        }
    }

    /// One training, if it exists.
    pub async fn get_training(&self, training_id: &str) -> Result<Option<Training>, DatabaseError> {
        let id = training_id.to_string();
        self.read("get_training", move |c| load_training(c, &id))
            .await
    }

    /// One page of trainings, newest first.
    pub async fn list_trainings(
        &self,
        page: ListTrainings,
    ) -> Result<Vec<Training>, DatabaseError> {
        self.read("list_trainings", move |c| list_in(c, &page))
            .await
    }

    /// Moves a training to `to`, recording the transition and its event
    /// atomically. An illegal transition is [`DatabaseError::IllegalTransition`]
    /// and writes nothing.
    pub async fn transition(
        &self,
        training_id: &str,
        to: JobState,
        reason: &str,
    ) -> Result<Training, DatabaseError> {
        let (id, reason) = (training_id.to_string(), reason.to_string());
        self.transaction("transition", move |c| transition_in(c, &id, to, &reason))
            .await
    }

    /// Cancels a training on behalf of a caller: the transition and its
    /// audit row in one transaction.
    pub async fn cancel_training(
        &self,
        training_id: &str,
        reason: &str,
        audit: Option<AuditEntry>,
    ) -> Result<Training, DatabaseError> {
        let (id, reason) = (training_id.to_string(), reason.to_string());
        self.transaction("cancel_training", move |c| {
            let t = transition_in(c, &id, JobState::Cancelled, &reason)?;
            if let Some(audit) = &audit {
                super::audit::insert_in(c, audit, now())?;
            }
            Ok(t)
        })
        .await
    }

    /// A training's state history, oldest first.
    pub async fn transitions(
        &self,
        training_id: &str,
    ) -> Result<Vec<StateTransition>, DatabaseError> {
        let id = training_id.to_string();
        self.read("transitions", move |c| {
            state_transitions::table
                .filter(state_transitions::training_id.eq(&id))
                .order(state_transitions::id.asc())
                .select(TransitionRow::as_select())
                .load(c)?
                .into_iter()
                .map(StateTransition::try_from)
                .collect()
        })
        .await
    }

    /// QUEUED trainings by priority (higher first), then age.
    pub async fn queued_trainings(&self) -> Result<Vec<Training>, DatabaseError> {
        self.read("queued_trainings", |c| {
            trainings_in_state(c, JobState::Queued)
        })
        .await
    }

    /// Updates QUEUED trainings' pending reasons without a state change, in
    /// one transaction (a scheduling pass's changed reasons); a training no
    /// longer QUEUED is left alone.
    pub async fn set_pending_reasons(
        &self,
        reasons: Vec<(String, String)>,
    ) -> Result<(), DatabaseError> {
        self.transaction("set_pending_reasons", move |c| {
            for (id, reason) in &reasons {
                diesel::update(
                    trainings::table
                        .filter(trainings::id.eq(id))
                        .filter(trainings::state.eq(JobState::Queued.as_str())),
                )
                .set(trainings::state_reason.eq(reason))
                .execute(c)?;
            }
            Ok(())
        })
        .await
    }

    /// RESTARTING trainings by priority (higher first), then age.
    pub async fn restarting_trainings(&self) -> Result<Vec<Training>, DatabaseError> {
        self.read("restarting_trainings", |c| {
            trainings_in_state(c, JobState::Restarting)
        })
        .await
    }

    /// How many trainings are in each state (states with none are left out).
    pub async fn count_trainings_by_state(&self) -> Result<Vec<(String, i64)>, DatabaseError> {
        self.read("count_trainings_by_state", |c| {
            Ok(trainings::table
                .group_by(trainings::state)
                .select((trainings::state, diesel::dsl::count_star()))
                .order(trainings::state.asc())
                .load::<(String, i64)>(c)?)
        })
        .await
    }
}

//! Trainings and their state history. Every change of a training's state
//! updates the row, appends a `state_transitions` row and a `state_change`
//! event, in one transaction.

use super::events::append_event_in;
use super::rows::{now, to_db_time, NewTransitionRow, TrainingRow, TransitionRow};
use super::schema::{state_transitions, training_labels, trainings};
use super::{DatabaseError, DbConnection, LogicalError, Outbox, Persistence};
use crate::model::{AuditEntry, EventPayload, JobState, StateChange, StateTransition, Training};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

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
    /// Only trainings carrying every one of these labels.
    pub labels: Vec<(String, String)>,
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

fn insert_transition(
    conn: &mut DbConnection,
    out: &mut Outbox,
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
    out.state_change();
    append_event_in(
        conn,
        out,
        training_id,
        attempt,
        &EventPayload::StateChange(change.clone()),
        at,
    )?;
    Ok(())
}

/// Moves a training to `to` inside the caller's transaction: refuses an
/// illegal transition (writing nothing), else updates the row and records the
/// transition and its event. For composing with other writes (e.g. the rank map).
pub fn transition_in(
    conn: &mut DbConnection,
    out: &mut Outbox,
    training_id: &str,
    to: JobState,
    reason: &str,
) -> Result<Training, DatabaseError> {
    let current = load_training(conn, training_id)?.ok_or_else(|| {
        DatabaseError::Logical(LogicalError::TrainingNotFound(training_id.to_string()))
    })?;
    let from = current.state;
    if !from.can_transition_to(to) {
        return Err(DatabaseError::Logical(LogicalError::IllegalTransition {
            id: training_id.to_string(),
            from,
            to,
        }));
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
    insert_transition(conn, out, training_id, current.attempt, &change, at)?;
    load_training(conn, training_id)?.ok_or_else(|| {
        DatabaseError::Logical(LogicalError::TrainingNotFound(training_id.to_string()))
    })
}

pub(crate) fn list_in(
    conn: &mut DbConnection,
    page: &ListTrainings,
) -> Result<Vec<Training>, DatabaseError> {
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
    for (key, value) in &page.labels {
        let carrying = training_labels::table
            .filter(training_labels::key.eq(key.clone()))
            .filter(training_labels::value.eq(value.clone()))
            .select(training_labels::training_id);
        query = query.filter(trainings::id.eq_any(carrying));
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

impl Persistence {
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
    /// atomically. An illegal transition is [`LogicalError::IllegalTransition`]
    /// and writes nothing.
    pub async fn transition(
        &self,
        training_id: &str,
        to: JobState,
        reason: &str,
    ) -> Result<Training, DatabaseError> {
        let (id, reason) = (training_id.to_string(), reason.to_string());
        self.transaction_noting("transition", move |c, out| {
            transition_in(c, out, &id, to, &reason)
        })
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
        self.transaction_noting("cancel_training", move |c, out| {
            let t = transition_in(c, out, &id, JobState::Cancelled, &reason)?;
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

    /// Updates QUEUED trainings' pending reasons without a state change, in
    /// one transaction (a scheduling pass's changed reasons); a training no
    /// longer QUEUED is left alone.
    pub async fn set_pending_reasons(
        &self,
        reasons: Vec<(String, String)>,
    ) -> Result<(), DatabaseError> {
        // One statement per distinct reason (and 1,000 trainings), not per
        // training: a pass usually gives many the same one (a burst of
        // creates with no free GPU), and per-row updates doubled the
        // database's work per create.
        let mut by_reason: std::collections::HashMap<String, Vec<String>> =
            std::collections::HashMap::new();
        for (id, reason) in reasons {
            by_reason.entry(reason).or_default().push(id);
        }
        self.transaction("set_pending_reasons", move |c| {
            for (reason, ids) in &by_reason {
                for chunk in ids.chunks(1000) {
                    diesel::update(
                        trainings::table
                            .filter(trainings::id.eq_any(chunk))
                            .filter(trainings::state.eq(JobState::Queued.as_str()))
                            .filter(trainings::held_by.eq("")),
                    )
                    .set(trainings::state_reason.eq(reason))
                    .execute(c)?;
                }
            }
            Ok(())
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

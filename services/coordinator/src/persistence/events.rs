//! The sequence-numbered event history of each training (what WatchTraining
//! replays). Sequence numbers come from `trainings.last_event_seq`, bumped in
//! the same transaction as the insert, so they are dense and never reused.

use super::connection::on_backend;
use super::rows::{now, to_db_time, EventRow};
use super::schema::{training_events, trainings};
use super::{DatabaseError, DbConnection, LogicalError, Outbox, Persistence};
use crate::model::{EventPayload, StoredEvent};
use chrono::{DateTime, Utc};
use cohort_spec::progress::ProgressLine;
use diesel::prelude::*;

/// How many of a program's last progress lines are looked at for its
/// final loss (a program may report its loss only now and then).
const FINAL_LOSS_LOOKBACK: i64 = 64;

/// Appends one event inside the caller's transaction and returns it.
pub fn append_event_in(
    conn: &mut DbConnection,
    out: &mut Outbox,
    training_id: &str,
    attempt: i32,
    payload: &EventPayload,
    at: DateTime<Utc>,
) -> Result<StoredEvent, DatabaseError> {
    let this = trainings::table.filter(trainings::id.eq(training_id));
    let updated = diesel::update(this)
        .set(trainings::last_event_seq.eq(trainings::last_event_seq + 1))
        .execute(conn)?;
    if updated == 0 {
        return Err(DatabaseError::Logical(LogicalError::TrainingNotFound(
            training_id.to_string(),
        )));
    }
    let seq: i64 = this.select(trainings::last_event_seq).first(conn)?;
    let row = EventRow {
        training_id: training_id.to_string(),
        seq,
        attempt,
        kind: payload.kind(),
        payload_json: payload.to_json(),
        event_time: to_db_time(at),
    };
    diesel::insert_into(training_events::table)
        .values(&row)
        .execute(conn)?;
    out.event(training_id, seq);
    Ok(StoredEvent {
        training_id: row.training_id,
        seq,
        attempt,
        payload: payload.clone(),
        time: row.event_time.and_utc(),
    })
}

/// One event for each of several distinct trainings, appended inside the
/// caller's transaction in three statements whatever their number (the
/// sequence numbers move on together, then the rows go in as one insert).
/// Trainings that are gone are skipped: the ids that got their event are
/// returned. Keep a call to a few hundred events (SQLite binds six values
/// per row).
pub fn append_events_in(
    conn: &mut DbConnection,
    out: &mut Outbox,
    events: &[(&str, i32, EventPayload)],
    at: DateTime<Utc>,
) -> Result<Vec<String>, DatabaseError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = events.iter().map(|(id, _, _)| *id).collect();
    debug_assert!(
        ids.iter().collect::<std::collections::HashSet<_>>().len() == ids.len(),
        "one event per training"
    );
    diesel::update(trainings::table.filter(trainings::id.eq_any(&ids)))
        .set(trainings::last_event_seq.eq(trainings::last_event_seq + 1))
        .execute(conn)?;
    let seqs: std::collections::HashMap<String, i64> = trainings::table
        .filter(trainings::id.eq_any(&ids))
        .select((trainings::id, trainings::last_event_seq))
        .load::<(String, i64)>(conn)?
        .into_iter()
        .collect();
    let rows: Vec<EventRow> = events
        .iter()
        .filter_map(|(id, attempt, payload)| {
            Some(EventRow {
                training_id: id.to_string(),
                seq: *seqs.get(*id)?,
                attempt: *attempt,
                kind: payload.kind(),
                payload_json: payload.to_json(),
                event_time: to_db_time(at),
            })
        })
        .collect();
    if !rows.is_empty() {
        on_backend!(conn, |c| diesel::insert_into(training_events::table)
            .values(&rows)
            .execute(c))?;
    }
    for row in &rows {
        out.event(&row.training_id, row.seq);
    }
    Ok(rows.into_iter().map(|r| r.training_id).collect())
}

impl Persistence {
    /// Appends one event to a training's history.
    pub async fn append_event(
        &self,
        training_id: &str,
        attempt: i32,
        payload: EventPayload,
    ) -> Result<StoredEvent, DatabaseError> {
        let id = training_id.to_string();
        self.transaction_noting("append_event", move |c, out| {
            append_event_in(c, out, &id, attempt, &payload, now())
        })
        .await
    }

    /// Up to `limit` events with a sequence number above `after_seq`, in order.
    pub async fn events_after(
        &self,
        training_id: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, DatabaseError> {
        let id = training_id.to_string();
        self.read("events_after", move |c| {
            training_events::table
                .filter(training_events::training_id.eq(&id))
                .filter(training_events::seq.gt(after_seq))
                .order(training_events::seq.asc())
                .limit(limit.max(0))
                .select(EventRow::as_select())
                .load(c)?
                .into_iter()
                .map(StoredEvent::try_from)
                .collect()
        })
        .await
    }

    /// How many events of `kinds` a training has with a sequence number in
    /// `(after_seq, up_to_seq]`.
    pub async fn count_events_of_kinds(
        &self,
        training_id: &str,
        after_seq: i64,
        up_to_seq: i64,
        kinds: &'static [&'static str],
    ) -> Result<i64, DatabaseError> {
        let id = training_id.to_string();
        self.read("count_events_of_kinds", move |c| {
            Ok(training_events::table
                .filter(training_events::training_id.eq(&id))
                .filter(training_events::seq.gt(after_seq))
                .filter(training_events::seq.le(up_to_seq))
                .filter(training_events::kind.eq_any(kinds))
                .count()
                .get_result(c)?)
        })
        .await
    }

    /// Every event of a training whose kind is one of `kinds`, in order.
    pub async fn events_of_kinds(
        &self,
        training_id: &str,
        kinds: &'static [&'static str],
    ) -> Result<Vec<StoredEvent>, DatabaseError> {
        let id = training_id.to_string();
        self.read("events_of_kinds", move |c| {
            training_events::table
                .filter(training_events::training_id.eq(&id))
                .filter(training_events::kind.eq_any(kinds))
                .order(training_events::seq.asc())
                .select(EventRow::as_select())
                .load(c)?
                .into_iter()
                .map(StoredEvent::try_from)
                .collect()
        })
        .await
    }
}

impl Persistence {
    /// The loss of rank 0's `finished` line of `attempt`, if it sent one;
    /// for a program, the loss of its last progress line that had one.
    pub async fn finished_loss(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<Option<f64>, DatabaseError> {
        let id = training_id.to_string();
        self.read("finished_loss", move |c| {
            let rows: Vec<EventRow> = training_events::table
                .filter(training_events::training_id.eq(&id))
                .filter(training_events::kind.eq_any(["finished", "metrics"]))
                .filter(training_events::attempt.eq(attempt))
                .order(training_events::seq.desc())
                .select(EventRow::as_select())
                .limit(FINAL_LOSS_LOOKBACK)
                .load(c)?;
            for row in rows {
                let loss = match StoredEvent::try_from(row)?.payload {
                    EventPayload::Rank(ProgressLine::Finished { loss, .. }) => Some(loss),
                    EventPayload::Rank(ProgressLine::Metrics(m)) => m.loss,
                    _ => None,
                };
                if loss.is_some() {
                    return Ok(loss);
                }
            }
            Ok(None)
        })
        .await
    }
}

impl Persistence {
    /// Whether rank 0 of `attempt` said it finished (the SAE's `finished`
    /// line, or a program's).
    pub async fn attempt_finished(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<bool, DatabaseError> {
        let id = training_id.to_string();
        self.read("attempt_finished", move |c| {
            let rows: Vec<EventRow> = training_events::table
                .filter(training_events::training_id.eq(&id))
                .filter(training_events::kind.eq_any(["finished", "metrics"]))
                .filter(training_events::attempt.eq(attempt))
                .order(training_events::seq.desc())
                .select(EventRow::as_select())
                .limit(FINAL_LOSS_LOOKBACK)
                .load(c)?;
            for row in rows {
                match StoredEvent::try_from(row)?.payload {
                    EventPayload::Rank(ProgressLine::Finished { .. }) => return Ok(true),
                    EventPayload::Rank(ProgressLine::Metrics(m)) if m.finished => return Ok(true),
                    _ => {}
                }
            }
            Ok(false)
        })
        .await
    }
}

/// The newest `progress` (or a program's `metrics`) event of a training
/// (an index walk back from its newest event).
pub(super) fn latest_progress_in(
    conn: &mut DbConnection,
    training_id: &str,
) -> Result<Option<StoredEvent>, DatabaseError> {
    training_events::table
        .filter(training_events::training_id.eq(training_id))
        .filter(training_events::kind.eq_any(["progress", "metrics"]))
        .order(training_events::seq.desc())
        .select(EventRow::as_select())
        .first(conn)
        .optional()?
        .map(StoredEvent::try_from)
        .transpose()
}

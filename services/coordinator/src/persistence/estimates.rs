//! The start (QUEUED) and end (RUNNING) estimates, kept so that every
//! coordinator (a standby too) answers with them, and rewritten only when
//! one moves by more than 10 % (with an `estimate` event for watchers).

use super::connection::on_backend;
use super::events::append_events_in;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::training_estimates;
use super::{DatabaseError, DbConnection, Outbox, Persistence};
use crate::model::{EstimateChange, EventPayload};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::collections::{HashMap, HashSet};

/// Ids per `IN (...)` list.
const CHUNK: usize = 500;
/// Estimates per write transaction.
const WRITE_CHUNK: usize = 100;

/// A training's stored estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEstimate {
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    /// Why one is absent ("NO_DURATION: ..."); empty when both are known.
    pub reason: String,
}

/// One estimate to write.
#[derive(Debug, Clone)]
pub struct EstimateWrite {
    pub training_id: String,
    /// The training's current attempt (its event's).
    pub attempt: i32,
    pub estimate: StoredEstimate,
    /// Whether it changed a stored one (it moved, or a time appeared or
    /// went): an `estimate` event for watchers. A training's first
    /// estimate is only stored (GetTraining carries it).
    pub event: bool,
}

type EstimateRow = (
    String,
    Option<chrono::NaiveDateTime>,
    Option<chrono::NaiveDateTime>,
    String,
);

/// The columns of an [`EstimateRow`].
const COLUMNS: (
    training_estimates::training_id,
    training_estimates::start_time,
    training_estimates::end_time,
    training_estimates::reason,
) = (
    training_estimates::training_id,
    training_estimates::start_time,
    training_estimates::end_time,
    training_estimates::reason,
);

/// A stored row as the training it belongs to and its estimate.
fn stored((id, start, end, reason): EstimateRow) -> (String, StoredEstimate) {
    let estimate = StoredEstimate {
        start_time: start.map(from_db_time),
        end_time: end.map(from_db_time),
        reason,
    };
    (id, estimate)
}

impl Persistence {
    /// The stored estimates of those of `ids` that have one.
    pub async fn estimates(
        &self,
        ids: Vec<String>,
    ) -> Result<HashMap<String, StoredEstimate>, DatabaseError> {
        self.read("estimates", move |c| estimates_in(c, &ids)).await
    }

    /// Every stored estimate (the estimator's memory after a takeover).
    pub async fn all_estimates(&self) -> Result<HashMap<String, StoredEstimate>, DatabaseError> {
        self.read("all_estimates", |c| {
            let rows: Vec<EstimateRow> = training_estimates::table.select(COLUMNS).load(c)?;
            Ok(rows.into_iter().map(stored).collect())
        })
        .await
    }

    /// Writes `changed` (with their `estimate` events) and drops the
    /// estimates of `gone` (trainings that ended). One transaction per
    /// [`WRITE_CHUNK`] trainings, each a handful of statements, so that a
    /// run that moved thousands of estimates never holds SQLite's one
    /// writer for long: creates and state changes get in between. A reader
    /// may see some of a run's estimates new and some old, as it would a
    /// moment later or earlier.
    pub async fn write_estimates(
        &self,
        changed: Vec<EstimateWrite>,
        gone: Vec<String>,
    ) -> Result<(), DatabaseError> {
        for chunk in gone.chunks(CHUNK) {
            let chunk = chunk.to_vec();
            self.transaction("drop_estimates", move |c| {
                diesel::delete(
                    training_estimates::table
                        .filter(training_estimates::training_id.eq_any(&chunk)),
                )
                .execute(c)?;
                Ok(())
            })
            .await?;
        }
        let mut changed = changed.into_iter().peekable();
        while changed.peek().is_some() {
            let chunk: Vec<EstimateWrite> = changed.by_ref().take(WRITE_CHUNK).collect();
            self.transaction_noting("write_estimates", move |c, out| write_chunk(c, out, &chunk))
                .await?;
        }
        Ok(())
    }
}

/// Replaces the estimates of `chunk` and appends their events.
fn write_chunk(
    c: &mut DbConnection,
    out: &mut Outbox,
    chunk: &[EstimateWrite],
) -> Result<(), DatabaseError> {
    let at = now();
    let ids: Vec<&str> = chunk.iter().map(|w| w.training_id.as_str()).collect();
    diesel::delete(training_estimates::table.filter(training_estimates::training_id.eq_any(&ids)))
        .execute(c)?;
    let events: Vec<(&str, i32, EventPayload)> = chunk
        .iter()
        .filter(|w| w.event)
        .map(|w| {
            let payload = EventPayload::Estimate(EstimateChange {
                start_time: w.estimate.start_time,
                end_time: w.estimate.end_time,
                reason: w.estimate.reason.clone(),
            });
            (w.training_id.as_str(), w.attempt, payload)
        })
        .collect();
    let evented: HashSet<String> = append_events_in(c, out, &events, at)?.into_iter().collect();
    // (Trainings are never deleted; one that was would fail the chunk on
    // its foreign key, and the next run would write it again.)
    let rows: Vec<_> = chunk
        .iter()
        .filter(|w| !w.event || evented.contains(&w.training_id))
        .map(|w| {
            (
                training_estimates::training_id.eq(&w.training_id),
                training_estimates::start_time.eq(w.estimate.start_time.map(to_db_time)),
                training_estimates::end_time.eq(w.estimate.end_time.map(to_db_time)),
                training_estimates::reason.eq(&w.estimate.reason),
                training_estimates::update_time.eq(to_db_time(at)),
            )
        })
        .collect();
    if !rows.is_empty() {
        on_backend!(c, |c| diesel::insert_into(training_estimates::table)
            .values(&rows)
            .execute(c))?;
    }
    Ok(())
}

/// The stored estimates of those of `ids` that have one, read in chunks.
pub(crate) fn estimates_in(
    c: &mut DbConnection,
    ids: &[String],
) -> Result<HashMap<String, StoredEstimate>, DatabaseError> {
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        let rows: Vec<EstimateRow> = training_estimates::table
            .filter(training_estimates::training_id.eq_any(chunk))
            .select(COLUMNS)
            .load(c)?;
        out.extend(rows.into_iter().map(stored));
    }
    Ok(out)
}

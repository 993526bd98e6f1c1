//! The start (QUEUED) and end (RUNNING) estimates, kept so that every
//! coordinator (a standby too) answers with them, and rewritten only when
//! one moves by more than 10 % (with an `estimate` event for watchers).

use super::events::append_event_in;
use super::rows::{from_db_time, now, to_db_time};
use super::schema::training_estimates;
use super::{DatabaseError, Persistence};
use crate::model::{EstimateChange, EventPayload};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::collections::HashMap;

/// Ids per `IN (...)` list.
const CHUNK: usize = 500;

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
    /// Write an `estimate` event too (it appeared or moved by more than 10 %).
    pub event: bool,
}

type EstimateRow = (
    String,
    Option<chrono::NaiveDateTime>,
    Option<chrono::NaiveDateTime>,
    String,
);

impl Persistence {
    /// The stored estimates of those of `ids` that have one.
    pub async fn estimates(
        &self,
        ids: Vec<String>,
    ) -> Result<HashMap<String, StoredEstimate>, DatabaseError> {
        self.read("estimates", move |c| {
            let mut out = HashMap::with_capacity(ids.len());
            for chunk in ids.chunks(CHUNK) {
                let rows: Vec<EstimateRow> = training_estimates::table
                    .filter(training_estimates::training_id.eq_any(chunk))
                    .select((
                        training_estimates::training_id,
                        training_estimates::start_time,
                        training_estimates::end_time,
                        training_estimates::reason,
                    ))
                    .load(c)?;
                out.extend(rows.into_iter().map(|(id, start, end, reason)| {
                    (
                        id,
                        StoredEstimate {
                            start_time: start.map(from_db_time),
                            end_time: end.map(from_db_time),
                            reason,
                        },
                    )
                }));
            }
            Ok(out)
        })
        .await
    }

    /// Every stored estimate (the estimator's memory after a takeover).
    pub async fn all_estimates(&self) -> Result<HashMap<String, StoredEstimate>, DatabaseError> {
        self.read("all_estimates", |c| {
            let rows: Vec<EstimateRow> = training_estimates::table
                .select((
                    training_estimates::training_id,
                    training_estimates::start_time,
                    training_estimates::end_time,
                    training_estimates::reason,
                ))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|(id, start, end, reason)| {
                    (
                        id,
                        StoredEstimate {
                            start_time: start.map(from_db_time),
                            end_time: end.map(from_db_time),
                            reason,
                        },
                    )
                })
                .collect())
        })
        .await
    }

    /// Writes `changed` (with their events) and drops the estimates of
    /// `gone` (trainings that ended), in one transaction.
    pub async fn write_estimates(
        &self,
        changed: Vec<EstimateWrite>,
        gone: Vec<String>,
    ) -> Result<(), DatabaseError> {
        self.transaction_noting("write_estimates", move |c, out| {
            let at = now();
            for chunk in gone.chunks(CHUNK) {
                diesel::delete(
                    training_estimates::table.filter(training_estimates::training_id.eq_any(chunk)),
                )
                .execute(c)?;
            }
            for w in &changed {
                diesel::delete(training_estimates::table.find(&w.training_id)).execute(c)?;
                diesel::insert_into(training_estimates::table)
                    .values((
                        training_estimates::training_id.eq(&w.training_id),
                        training_estimates::start_time.eq(w.estimate.start_time.map(to_db_time)),
                        training_estimates::end_time.eq(w.estimate.end_time.map(to_db_time)),
                        training_estimates::reason.eq(&w.estimate.reason),
                        training_estimates::update_time.eq(to_db_time(at)),
                    ))
                    .execute(c)?;
                if w.event {
                    append_event_in(
                        c,
                        out,
                        &w.training_id,
                        w.attempt,
                        &EventPayload::Estimate(EstimateChange {
                            start_time: w.estimate.start_time,
                            end_time: w.estimate.end_time,
                            reason: w.estimate.reason.clone(),
                        }),
                        at,
                    )?;
                }
            }
            Ok(())
        })
        .await
    }
}

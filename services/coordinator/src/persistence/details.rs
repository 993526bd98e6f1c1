//! What describing a page of trainings needs beyond their rows — the
//! current attempt's ranks, the newest progress event of each, and the
//! start/end estimates of those not ended — read in one transaction for
//! the whole page.

use super::estimates::StoredEstimate;
use super::events::latest_progress_in;
use super::ranks::RankRow;
use super::rows::from_db_time;
use super::schema::{ranks, training_estimates};
use super::{DatabaseError, Persistence};
use crate::model::{RankRecord, StoredEvent, Training};
use diesel::prelude::*;
use std::collections::HashMap;

/// Ranks and newest progress of some trainings, by training id.
#[derive(Debug, Default)]
pub struct TrainingDetails {
    /// The current attempt's ranks, by rank (placed trainings only).
    pub ranks: HashMap<String, Vec<RankRecord>>,
    /// The newest `progress` event.
    pub progress: HashMap<String, StoredEvent>,
    /// The stored estimates (trainings not ended).
    pub estimates: HashMap<String, StoredEstimate>,
}

impl Persistence {
    /// The details of `trainings`: one query for all their ranks, one
    /// indexed look-up per placed training for its newest progress, all in
    /// one read transaction.
    pub async fn training_details(
        &self,
        trainings: &[&Training],
    ) -> Result<TrainingDetails, DatabaseError> {
        // Ranks and progress come from placements: a training never placed
        // has neither, and a page of those reads nothing.
        let placed: HashMap<String, i32> = trainings
            .iter()
            .filter(|t| t.attempt > 0)
            .map(|t| (t.id.clone(), t.attempt))
            .collect();
        let live: Vec<String> = trainings
            .iter()
            .filter(|t| !t.state.is_final())
            .map(|t| t.id.clone())
            .collect();
        if placed.is_empty() && live.is_empty() {
            return Ok(TrainingDetails::default());
        }
        self.read("training_details", move |c| {
            let mut details = TrainingDetails::default();
            if !live.is_empty() {
                let rows: Vec<(
                    String,
                    Option<chrono::NaiveDateTime>,
                    Option<chrono::NaiveDateTime>,
                    String,
                )> = training_estimates::table
                    .filter(training_estimates::training_id.eq_any(&live))
                    .select((
                        training_estimates::training_id,
                        training_estimates::start_time,
                        training_estimates::end_time,
                        training_estimates::reason,
                    ))
                    .load(c)?;
                for (id, start, end, reason) in rows {
                    details.estimates.insert(
                        id,
                        StoredEstimate {
                            start_time: start.map(from_db_time),
                            end_time: end.map(from_db_time),
                            reason,
                        },
                    );
                }
            }
            if placed.is_empty() {
                return Ok(details);
            }
            let ids: Vec<&str> = placed.keys().map(String::as_str).collect();
            for row in ranks::table
                .filter(ranks::training_id.eq_any(&ids))
                .order((ranks::training_id.asc(), ranks::rank.asc()))
                .select(RankRow::as_select())
                .load::<RankRow>(c)?
            {
                if placed.get(&row.training_id) == Some(&row.attempt) {
                    details
                        .ranks
                        .entry(row.training_id.clone())
                        .or_default()
                        .push(RankRecord::try_from(row)?);
                }
            }
            for id in placed.keys() {
                if let Some(event) = latest_progress_in(c, id)? {
                    details.progress.insert(id.clone(), event);
                }
            }
            Ok(details)
        })
        .await
    }
}

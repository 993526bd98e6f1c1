//! What describing a page of trainings needs beyond their rows — the
//! current attempt's ranks and the newest progress event of each — read in
//! one transaction for the whole page.

use super::events::latest_progress_in;
use super::ranks::RankRow;
use super::schema::ranks;
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
}

impl Persistence {
    /// The details of `trainings`: one query for all their ranks, one
    /// indexed look-up per training for its newest progress, all in one
    /// read transaction.
    pub async fn training_details(
        &self,
        trainings: &[&Training],
    ) -> Result<TrainingDetails, DatabaseError> {
        let wanted: Vec<(String, i32)> = trainings
            .iter()
            .map(|t| (t.id.clone(), t.attempt))
            .collect();
        self.read("training_details", move |c| {
            let mut details = TrainingDetails::default();
            let placed: HashMap<&str, i32> = wanted
                .iter()
                .filter(|(_, attempt)| *attempt > 0)
                .map(|(id, attempt)| (id.as_str(), *attempt))
                .collect();
            if !placed.is_empty() {
                let ids: Vec<&str> = placed.keys().copied().collect();
                for row in ranks::table
                    .filter(ranks::training_id.eq_any(&ids))
                    .order((ranks::training_id.asc(), ranks::rank.asc()))
                    .load::<RankRow>(c)?
                {
                    if placed.get(row.training_id.as_str()) == Some(&row.attempt) {
                        details
                            .ranks
                            .entry(row.training_id.clone())
                            .or_default()
                            .push(RankRecord::try_from(row)?);
                    }
                }
            }
            for (id, _) in &wanted {
                if let Some(event) = latest_progress_in(c, id)? {
                    details.progress.insert(id.clone(), event);
                }
            }
            Ok(details)
        })
        .await
    }
}

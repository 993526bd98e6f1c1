//! What describing a page of trainings needs beyond their rows — the
//! current attempt's ranks and their agents' hosts, the newest progress
//! event of each, and the start/end estimates of those not ended — read in
//! one transaction for the whole page, with the rows themselves where
//! GetTraining and ListTrainings read them (one transaction per call: on
//! PostgreSQL each more costs a BEGIN and a COMMIT round trip).

use super::estimates::{estimates_in, StoredEstimate};
use super::events::latest_progress_in;
use super::fleet::agent_hosts_in;
use super::ranks::RankRow;
use super::schema::ranks;
use super::trainings::{list_in, load_training};
use super::{DatabaseError, DbConnection, ListTrainings, Persistence};
use crate::model::{RankRecord, StoredEvent, Training};
use diesel::prelude::*;
use std::collections::{HashMap, HashSet};

/// Ranks, newest progress, estimates and the ranks' hosts of some
/// trainings.
#[derive(Debug, Default)]
pub struct TrainingDetails {
    /// The current attempt's ranks, by rank (placed trainings only).
    pub ranks: HashMap<String, Vec<RankRecord>>,
    /// The newest `progress` event.
    pub progress: HashMap<String, StoredEvent>,
    /// The stored estimates (trainings not ended).
    pub estimates: HashMap<String, StoredEstimate>,
    /// The host names of the ranks' agents, by agent id.
    pub hosts: HashMap<String, String>,
}

impl Persistence {
    /// The details of `trainings`: one query for all their ranks, one
    /// indexed look-up per placed training for its newest progress, all in
    /// one read transaction.
    pub async fn training_details(
        &self,
        trainings: &[&Training],
    ) -> Result<TrainingDetails, DatabaseError> {
        let wanted = Wanted::of(trainings.iter().copied());
        if wanted.is_empty() {
            return Ok(TrainingDetails::default());
        }
        self.read("training_details", move |c| details_in(c, &wanted))
            .await
    }

    /// One training and its details, read together: GetTraining's one
    /// transaction (a round trip each for BEGIN and COMMIT fewer than two
    /// reads on PostgreSQL).
    pub async fn described_training(
        &self,
        training_id: &str,
    ) -> Result<Option<(Training, TrainingDetails)>, DatabaseError> {
        let id = training_id.to_string();
        self.read("described_training", move |c| {
            let Some(training) = load_training(c, &id)? else {
                return Ok(None);
            };
            let details = details_in(c, &Wanted::of([&training]))?;
            Ok(Some((training, details)))
        })
        .await
    }

    /// One page of trainings (newest first) and their details, read
    /// together: ListTrainings' one transaction.
    pub async fn described_page(
        &self,
        page: ListTrainings,
    ) -> Result<(Vec<Training>, TrainingDetails), DatabaseError> {
        self.read("list_trainings", move |c| {
            let trainings = list_in(c, &page)?;
            let details = details_in(c, &Wanted::of(trainings.iter()))?;
            Ok((trainings, details))
        })
        .await
    }
}

/// Which trainings' details a read loads.
#[derive(Debug, Default)]
struct Wanted {
    /// Placed trainings (ranks and progress come from placements: a
    /// training never placed has neither, and a page of those reads
    /// nothing), with their current attempt.
    placed: HashMap<String, i32>,
    /// Trainings not ended (they may carry estimates).
    live: Vec<String>,
}

impl Wanted {
    fn of<'a>(trainings: impl IntoIterator<Item = &'a Training>) -> Self {
        let mut wanted = Self::default();
        for t in trainings {
            if t.attempt > 0 {
                wanted.placed.insert(t.id.clone(), t.attempt);
            }
            if !t.state.is_final() {
                wanted.live.push(t.id.clone());
            }
        }
        wanted
    }

    fn is_empty(&self) -> bool {
        self.placed.is_empty() && self.live.is_empty()
    }
}

fn details_in(c: &mut DbConnection, wanted: &Wanted) -> Result<TrainingDetails, DatabaseError> {
    let Wanted { placed, live } = wanted;
    let mut details = TrainingDetails::default();
    if !live.is_empty() {
        details.estimates = estimates_in(c, live)?;
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
    let agents: HashSet<&str> = details
        .ranks
        .values()
        .flatten()
        .map(|r| r.slot.agent_id.as_str())
        .collect();
    if !agents.is_empty() {
        details.hosts = agent_hosts_in(c, &agents.into_iter().collect::<Vec<_>>())?;
    }
    Ok(details)
}

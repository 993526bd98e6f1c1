//! Placing a training: the rank map of an attempt written with the state
//! change, the trainings that hold GPUs now, and the start of a restart.

use super::ranks::RankRow;
use super::rows::TrainingRow;
use super::rows::{now, to_db_time};
use super::schema::{ranks, trainings};
use super::trainings::{load_training, transition_in};
use super::{DatabaseError, DbConnection, Persistence};
use crate::model::{JobState, Placement, RankRecord, RankState, Training};
use diesel::prelude::*;
use std::collections::HashMap;

fn place_in(
    conn: &mut DbConnection,
    training_id: &str,
    placement: &Placement,
    reason: &str,
) -> Result<Training, DatabaseError> {
    let current = load_training(conn, training_id)?
        .ok_or_else(|| DatabaseError::TrainingNotFound(training_id.to_string()))?;
    if !current.state.can_transition_to(JobState::Scheduled) {
        return Err(DatabaseError::IllegalTransition {
            id: training_id.to_string(),
            from: current.state,
            to: JobState::Scheduled,
        });
    }
    let attempt = current.attempt + 1;
    let world = placement.slots.len() as i32;
    diesel::update(trainings::table.find(training_id))
        .set((
            trainings::attempt.eq(attempt),
            trainings::world_size.eq(world),
            trainings::distributed.eq(world > 1),
            trainings::master_addr.eq(Some(&placement.master_addr)),
            trainings::master_port.eq(Some(i32::from(placement.master_port))),
        ))
        .execute(conn)?;
    let at = to_db_time(now());
    for s in &placement.slots {
        diesel::insert_into(ranks::table)
            .values((
                ranks::training_id.eq(training_id),
                ranks::attempt.eq(attempt),
                ranks::rank.eq(s.rank),
                ranks::agent_id.eq(&s.agent_id),
                ranks::gpu_uuid.eq(&s.gpu_uuid),
                ranks::gpu_index.eq(s.gpu_index),
                ranks::local_rank.eq(s.local_rank),
                ranks::local_world_size.eq(s.local_world_size),
                ranks::state.eq(RankState::Pending.as_str()),
                ranks::update_time.eq(at),
            ))
            .execute(conn)?;
    }
    transition_in(conn, training_id, JobState::Scheduled, reason)
}

impl Persistence {
    /// Writes the attempt's rank map and moves the training to SCHEDULED
    /// (attempt + 1), all or nothing.
    pub async fn place_training(
        &self,
        training_id: &str,
        placement: Placement,
        reason: &str,
    ) -> Result<Training, DatabaseError> {
        let (id, reason) = (training_id.to_string(), reason.to_string());
        self.transaction("place_training", move |c| {
            place_in(c, &id, &placement, &reason)
        })
        .await
    }

    /// The rendezvous ports of the trainings whose current attempt holds
    /// GPUs (SCHEDULED or RUNNING) with rank 0 on `host`.
    pub async fn master_ports_in_use(&self, host: &str) -> Result<Vec<i32>, DatabaseError> {
        let host = host.to_string();
        self.read("master_ports_in_use", move |c| {
            Ok(trainings::table
                .filter(
                    trainings::state
                        .eq_any([JobState::Scheduled.as_str(), JobState::Running.as_str()]),
                )
                .filter(trainings::master_addr.eq(&host))
                .select(trainings::master_port)
                .load::<Option<i32>>(c)?
                .into_iter()
                .flatten()
                .collect())
        })
        .await
    }

    /// Trainings whose current attempt holds GPUs (SCHEDULED or RUNNING), with
    /// that attempt's ranks: what the coordinator re-adopts after a restart.
    pub async fn active_placements(
        &self,
    ) -> Result<Vec<(Training, Vec<RankRecord>)>, DatabaseError> {
        self.read("active_placements", |c| {
            // Two queries whatever the number of trainings: their rows, then
            // the ranks of all of them (kept for each one's current attempt).
            let active: Vec<Training> = trainings::table
                .filter(
                    trainings::state
                        .eq_any([JobState::Scheduled.as_str(), JobState::Running.as_str()]),
                )
                .select(TrainingRow::as_select())
                .load(c)?
                .into_iter()
                .map(Training::try_from)
                .collect::<Result<_, _>>()?;
            let ids: Vec<&str> = active.iter().map(|t| t.id.as_str()).collect();
            let mut ranks: HashMap<String, Vec<RankRecord>> = HashMap::new();
            for row in ranks::table
                .filter(ranks::training_id.eq_any(&ids))
                .order((ranks::training_id.asc(), ranks::rank.asc()))
                .load::<RankRow>(c)?
            {
                ranks
                    .entry(row.training_id.clone())
                    .or_default()
                    .push(RankRecord::try_from(row)?);
            }
            Ok(active
                .into_iter()
                .map(|t| {
                    let current = ranks
                        .remove(&t.id)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|r| r.attempt == t.attempt)
                        .collect();
                    (t, current)
                })
                .collect())
        })
        .await
    }

    /// Moves a SCHEDULED or RUNNING training to RESTARTING and spends one
    /// restart of its budget, atomically; with `next_config`, the next
    /// attempt's config (a smaller batch, a lower learning rate) too.
    pub async fn begin_restart(
        &self,
        training_id: &str,
        cause: &str,
        next_config: Option<&cohort_spec::TrainingConfig>,
    ) -> Result<Training, DatabaseError> {
        let (id, cause) = (training_id.to_string(), cause.to_string());
        let next = next_config.cloned();
        self.transaction("begin_restart", move |c| {
            let t = transition_in(c, &id, JobState::Restarting, &cause)?;
            diesel::update(trainings::table.find(&id))
                .set(trainings::restart_count.eq(trainings::restart_count + 1))
                .execute(c)?;
            if let Some(config) = &next {
                diesel::update(trainings::table.find(&id))
                    .set(trainings::config_json.eq(config.to_json()))
                    .execute(c)?;
            }
            Ok(Training {
                restart_count: t.restart_count + 1,
                config: next.clone().unwrap_or_else(|| t.config.clone()),
                ..t
            })
        })
        .await
    }
}

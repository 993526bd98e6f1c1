//! The waiting (QUEUED or RESTARTING) trainings without their configs (a
//! training its sweep holds back, paused at a rung, is not waiting):
//! their ordering keys alone (what queue positions need) and what a
//! scheduling pass looks at, so neither decodes 20,000 configs. A pass reads
//! the configs of trainings it has not seen yet with [`Persistence::configs`].

use super::rows::{from_db_time, parse_state};
use super::schema::trainings;
use super::{DatabaseError, Persistence};
use crate::model::{GpuRequest, JobState};
use chrono::{DateTime, Utc};
use cohort_spec::Workload;
use diesel::prelude::*;

fn waiting_states() -> [&'static str; 2] {
    [JobState::Queued.as_str(), JobState::Restarting.as_str()]
}

/// What orders a waiting training (see [`crate::policy::QueuePolicy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingKey {
    pub id: String,
    pub priority: i32,
    pub create_time: DateTime<Utc>,
    /// QUEUED or RESTARTING.
    pub state: JobState,
}

/// What a scheduling pass looks at of a waiting training.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingTraining {
    pub id: String,
    pub state: JobState,
    pub state_reason: String,
    pub gpu_request: GpuRequest,
    pub priority: i32,
    /// 0 until first placed: then its config decides where it fits.
    pub attempt: i32,
    pub create_time: DateTime<Utc>,
    pub team: String,
    pub priority_class: String,
    /// May borrow idle quota.
    pub borrow: bool,
    /// Its last attempt's ranks (a RESTARTING training takes them back).
    pub world_size: i32,
}

type WaitingRow = (
    String,
    String,
    String,
    String,
    i32,
    i32,
    chrono::NaiveDateTime,
    String,
    String,
    bool,
    i32,
);

fn waiting_training(row: WaitingRow) -> Result<WaitingTraining, DatabaseError> {
    let (
        id,
        state,
        state_reason,
        gpu_request_json,
        priority,
        attempt,
        created,
        team,
        class,
        borrow,
        world_size,
    ) = row;
    let gpu_request = serde_json::from_str(&gpu_request_json)
        .map_err(|e| DatabaseError::Corrupt(format!("training {id} gpu request: {e}")))?;
    Ok(WaitingTraining {
        state: parse_state(&state)?,
        id,
        state_reason,
        gpu_request,
        priority,
        attempt,
        create_time: from_db_time(created),
        team,
        priority_class: class,
        borrow,
        world_size,
    })
}

impl Persistence {
    /// Every QUEUED or RESTARTING training, unordered, without its config.
    pub async fn waiting_trainings(&self) -> Result<Vec<WaitingTraining>, DatabaseError> {
        self.read("waiting_trainings", |c| {
            trainings::table
                .filter(trainings::state.eq_any(waiting_states()))
                .filter(trainings::held_by.eq(""))
                .select((
                    trainings::id,
                    trainings::state,
                    trainings::state_reason,
                    trainings::gpu_request_json,
                    trainings::priority,
                    trainings::attempt,
                    trainings::create_time,
                    trainings::team,
                    trainings::priority_class,
                    trainings::borrow,
                    trainings::world_size,
                ))
                .load::<WaitingRow>(c)?
                .into_iter()
                .map(waiting_training)
                .collect()
        })
        .await
    }

    /// The configs of those of `ids` that exist.
    pub async fn configs(
        &self,
        ids: Vec<String>,
    ) -> Result<Vec<(String, Workload)>, DatabaseError> {
        self.read("configs", move |c| {
            trainings::table
                .filter(trainings::id.eq_any(&ids))
                .select((trainings::id, trainings::config_json))
                .load::<(String, String)>(c)?
                .into_iter()
                .map(|(id, json)| {
                    let config = Workload::from_stored_json(&json).map_err(|e| {
                        DatabaseError::Corrupt(format!("training {id} config: {e}"))
                    })?;
                    Ok((id, config))
                })
                .collect()
        })
        .await
    }

    /// Every QUEUED or RESTARTING training's ordering key, unordered.
    pub async fn waiting_keys(&self) -> Result<Vec<WaitingKey>, DatabaseError> {
        self.read("waiting_keys", |c| {
            let rows: Vec<(String, String, i32, chrono::NaiveDateTime)> = trainings::table
                .filter(trainings::state.eq_any(waiting_states()))
                .filter(trainings::held_by.eq(""))
                .select((
                    trainings::id,
                    trainings::state,
                    trainings::priority,
                    trainings::create_time,
                ))
                .load(c)?;
            rows.into_iter()
                .map(|(id, state, priority, created)| {
                    Ok(WaitingKey {
                        id,
                        priority,
                        create_time: from_db_time(created),
                        state: parse_state(&state)?,
                    })
                })
                .collect()
        })
        .await
    }
}

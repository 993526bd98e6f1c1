//! The waiting trainings' ordering keys alone: what queue positions need,
//! without loading 20,000 configs to sort them.

use super::rows::from_db_time;
use super::schema::trainings;
use super::{DatabaseError, Persistence};
use crate::model::JobState;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// What orders a waiting training (see [`crate::jobs::queue::QueuePolicy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingKey {
    pub id: String,
    pub priority: i32,
    pub create_time: DateTime<Utc>,
    /// RESTARTING (placed before every QUEUED one), else QUEUED.
    pub restarting: bool,
}

impl Persistence {
    /// Every QUEUED or RESTARTING training's ordering key, unordered.
    pub async fn waiting_keys(&self) -> Result<Vec<WaitingKey>, DatabaseError> {
        self.read("waiting_keys", |c| {
            let rows: Vec<(String, String, i32, chrono::NaiveDateTime)> = trainings::table
                .filter(
                    trainings::state
                        .eq_any([JobState::Queued.as_str(), JobState::Restarting.as_str()]),
                )
                .select((
                    trainings::id,
                    trainings::state,
                    trainings::priority,
                    trainings::create_time,
                ))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|(id, state, priority, created)| WaitingKey {
                    id,
                    priority,
                    create_time: from_db_time(created),
                    restarting: state == JobState::Restarting.as_str(),
                })
                .collect())
        })
        .await
    }
}

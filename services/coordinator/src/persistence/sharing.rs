//! What sharing the fleet keeps beyond the queue: the placed trainings as
//! the scheduling policy sees them (class, borrow flag, when the attempt
//! was placed, the newest checkpoint), the borrowing marks, and every
//! team's decayed usage for fair share.

use super::rows::{from_db_time, now, to_db_time};
use super::schema::{checkpoints, team_usage, trainings};
use super::{DatabaseError, Persistence};
use crate::model::{GpuRequest, JobState};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

/// Ids per `IN (...)` list.
const CHUNK: usize = 500;

/// A placed (SCHEDULED or RUNNING) training as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedTraining {
    pub id: String,
    pub team: String,
    pub priority: i32,
    pub priority_class: String,
    pub borrow: bool,
    pub borrowing: bool,
    pub create_time: DateTime<Utc>,
    pub gpu_request: GpuRequest,
    pub attempt: i32,
    pub world_size: i32,
    /// When the current attempt was placed.
    pub attempt_time: Option<DateTime<Utc>>,
    /// When it first ran.
    pub start_time: Option<DateTime<Utc>>,
    pub notice_saves: bool,
    /// Its newest recorded checkpoint's time.
    pub checkpoint_time: Option<DateTime<Utc>>,
}

type PlacedRow = (
    String,
    String,
    i32,
    String,
    bool,
    bool,
    chrono::NaiveDateTime,
    String,
    i32,
    i32,
    Option<chrono::NaiveDateTime>,
    Option<chrono::NaiveDateTime>,
    bool,
);

fn placed_states() -> [&'static str; 2] {
    [JobState::Scheduled.as_str(), JobState::Running.as_str()]
}

impl Persistence {
    /// Every SCHEDULED or RUNNING training with its newest checkpoint's time.
    pub async fn placed_trainings(&self) -> Result<Vec<PlacedTraining>, DatabaseError> {
        self.read("placed_trainings", |c| {
            let rows: Vec<PlacedRow> = trainings::table
                .filter(trainings::state.eq_any(placed_states()))
                .select((
                    trainings::id,
                    trainings::team,
                    trainings::priority,
                    trainings::priority_class,
                    trainings::borrow,
                    trainings::borrowing,
                    trainings::create_time,
                    trainings::gpu_request_json,
                    trainings::attempt,
                    trainings::world_size,
                    trainings::attempt_time,
                    trainings::start_time,
                    trainings::notice_saves,
                ))
                .load(c)?;
            let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
            let mut newest: HashMap<String, chrono::NaiveDateTime> = HashMap::new();
            for chunk in ids.chunks(CHUNK) {
                let found: Vec<(String, Option<chrono::NaiveDateTime>)> = checkpoints::table
                    .filter(checkpoints::training_id.eq_any(chunk))
                    .group_by(checkpoints::training_id)
                    .select((
                        checkpoints::training_id,
                        diesel::dsl::max(checkpoints::create_time),
                    ))
                    .load(c)?;
                newest.extend(found.into_iter().filter_map(|(id, t)| Some((id, t?))));
            }
            rows.into_iter()
                .map(|row| {
                    let (id, team, priority, priority_class, borrow, borrowing, created, request) =
                        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7);
                    let gpu_request = serde_json::from_str(&request).map_err(|e| {
                        DatabaseError::Corrupt(format!("training {id} gpu request: {e}"))
                    })?;
                    Ok(PlacedTraining {
                        checkpoint_time: newest.get(&id).copied().map(from_db_time),
                        id,
                        team,
                        priority,
                        priority_class,
                        borrow,
                        borrowing,
                        create_time: from_db_time(created),
                        gpu_request,
                        attempt: row.8,
                        world_size: row.9,
                        attempt_time: row.10.map(from_db_time),
                        start_time: row.11.map(from_db_time),
                        notice_saves: row.12,
                    })
                })
                .collect()
        })
        .await
    }

    /// The agent of each training's newest (highest step) checkpoint.
    pub async fn checkpoint_agents(
        &self,
        ids: Vec<String>,
    ) -> Result<HashMap<String, String>, DatabaseError> {
        self.read("checkpoint_agents", move |c| {
            let mut best: HashMap<String, (i64, String)> = HashMap::new();
            for chunk in ids.chunks(CHUNK) {
                let rows: Vec<(String, i64, String)> = checkpoints::table
                    .filter(checkpoints::training_id.eq_any(chunk))
                    .select((
                        checkpoints::training_id,
                        checkpoints::step,
                        checkpoints::agent_id,
                    ))
                    .load(c)?;
                for (id, step, agent) in rows {
                    let e = best.entry(id).or_insert((i64::MIN, String::new()));
                    if step > e.0 {
                        *e = (step, agent);
                    }
                }
            }
            Ok(best.into_iter().map(|(id, (_, a))| (id, a)).collect())
        })
        .await
    }

    /// Marks placed trainings borrowing (`on`) or not (`off`).
    pub async fn set_borrowing(
        &self,
        on: Vec<String>,
        off: Vec<String>,
    ) -> Result<(), DatabaseError> {
        self.transaction("set_borrowing", move |c| {
            for (ids, value) in [(&on, true), (&off, false)] {
                for chunk in ids.chunks(CHUNK) {
                    diesel::update(trainings::table.filter(trainings::id.eq_any(chunk)))
                        .set(trainings::borrowing.eq(value))
                        .execute(c)?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Every team's decayed GPU-seconds, as of now.
    pub async fn team_gpu_seconds(
        &self,
        half_life: Duration,
    ) -> Result<HashMap<String, f64>, DatabaseError> {
        self.read("team_gpu_seconds", move |c| {
            let at = now();
            let rows: Vec<(String, f64, chrono::NaiveDateTime)> = team_usage::table
                .select((
                    team_usage::team,
                    team_usage::gpu_seconds,
                    team_usage::update_time,
                ))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|(team, value, then)| {
                    let elapsed = (at - from_db_time(then)).to_std().unwrap_or_default();
                    (
                        team,
                        crate::policy::shares::decay(value, 0, elapsed, half_life),
                    )
                })
                .collect())
        })
        .await
    }

    /// Ages every team's usage to now and adds the GPUs each holds
    /// (`held`) over the time since its last update, at most `max_step`
    /// of it (a coordinator that was down does not bill its downtime).
    pub async fn accrue_usage(
        &self,
        held: HashMap<String, i64>,
        half_life: Duration,
        max_step: Duration,
    ) -> Result<(), DatabaseError> {
        self.transaction("accrue_usage", move |c| {
            let at = now();
            let rows: Vec<(String, f64, chrono::NaiveDateTime)> = team_usage::table
                .select((
                    team_usage::team,
                    team_usage::gpu_seconds,
                    team_usage::update_time,
                ))
                .load(c)?;
            let mut next: HashMap<String, f64> = HashMap::new();
            for (team, value, then) in rows {
                let elapsed = (at - from_db_time(then)).to_std().unwrap_or_default();
                let gpus = held.get(&team).copied().unwrap_or(0);
                let billed = elapsed.min(max_step);
                let decayed = crate::policy::shares::decay(value, 0, elapsed, half_life);
                next.insert(team, decayed + gpus.max(0) as f64 * billed.as_secs_f64());
            }
            for team in held.keys() {
                next.entry(team.clone()).or_insert(0.0);
            }
            for (team, value) in next {
                diesel::delete(team_usage::table.find(&team)).execute(c)?;
                diesel::insert_into(team_usage::table)
                    .values((
                        team_usage::team.eq(&team),
                        team_usage::gpu_seconds.eq(value),
                        team_usage::update_time.eq(to_db_time(at)),
                    ))
                    .execute(c)?;
            }
            Ok(())
        })
        .await
    }
}

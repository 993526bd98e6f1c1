//! Rank maps and what happens to each rank: a placement is written with the
//! training's move to SCHEDULED in one transaction; rank starts and exits and
//! checkpoints are recorded as the agents report them.

use super::events::append_event_in;
use super::rows::TrainingRow;
use super::rows::{now, to_db_time};
use super::schema::{checkpoints, ranks, trainings};
use super::trainings::{load_training, transition_in};
use super::{DatabaseError, DbConnection, Persistence};
use crate::model::{EventPayload, JobState, Placement, RankRecord, RankSlot, RankState, Training};
use cohort_spec::progress::ProgressLine;
use diesel::prelude::*;
use std::collections::HashMap;

/// A stored checkpoint of a training.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRecord {
    pub training_id: String,
    pub attempt: i32,
    pub step: i64,
    pub path: String,
    pub agent_id: String,
    pub create_time: chrono::DateTime<chrono::Utc>,
}

#[derive(Queryable)]
struct RankRow {
    #[allow(dead_code)]
    id: i64,
    training_id: String,
    attempt: i32,
    rank: i32,
    agent_id: String,
    gpu_uuid: String,
    gpu_index: i32,
    local_rank: i32,
    local_world_size: i32,
    pid: Option<i64>,
    state: String,
    exit_code: Option<i32>,
    signal: Option<i32>,
    #[allow(dead_code)]
    update_time: chrono::NaiveDateTime,
}

impl TryFrom<RankRow> for RankRecord {
    type Error = DatabaseError;

    fn try_from(r: RankRow) -> Result<Self, DatabaseError> {
        let state = r
            .state
            .parse::<RankState>()
            .map_err(|e| DatabaseError::Corrupt(format!("ranks.state: {e}")))?;
        Ok(RankRecord {
            training_id: r.training_id,
            attempt: r.attempt,
            slot: RankSlot {
                rank: r.rank,
                agent_id: r.agent_id,
                gpu_uuid: r.gpu_uuid,
                gpu_index: r.gpu_index,
                local_rank: r.local_rank,
                local_world_size: r.local_world_size,
            },
            pid: r.pid,
            state,
            exit_code: r.exit_code,
            signal: r.signal,
        })
    }
}

fn ranks_in(
    conn: &mut DbConnection,
    training_id: &str,
    attempt: i32,
) -> Result<Vec<RankRecord>, DatabaseError> {
    ranks::table
        .filter(ranks::training_id.eq(training_id))
        .filter(ranks::attempt.eq(attempt))
        .order(ranks::rank.asc())
        .load::<RankRow>(conn)?
        .into_iter()
        .map(RankRecord::try_from)
        .collect()
}

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

/// Trainings in `state` by priority (higher first), then age.
fn trainings_in_state(
    conn: &mut DbConnection,
    state: JobState,
) -> Result<Vec<Training>, DatabaseError> {
    trainings::table
        .filter(trainings::state.eq(state.as_str()))
        .order((
            trainings::priority.desc(),
            trainings::create_time.asc(),
            trainings::id.asc(),
        ))
        .select(TrainingRow::as_select())
        .load(conn)?
        .into_iter()
        .map(Training::try_from)
        .collect()
}

/// Takes the training row's write lock until the transaction ends (a no-op
/// update: PostgreSQL locks the row, SQLite the database).
fn lock_training(conn: &mut DbConnection, training_id: &str) -> Result<(), DatabaseError> {
    diesel::update(trainings::table.find(training_id))
        .set(trainings::update_time.eq(trainings::update_time))
        .execute(conn)?;
    Ok(())
}

fn set_rank_in(
    conn: &mut DbConnection,
    training_id: &str,
    attempt: i32,
    rank: i32,
    state: RankState,
    pid: Option<i64>,
    exit: (Option<i32>, Option<i32>),
) -> Result<(), DatabaseError> {
    let this = ranks::table
        .filter(ranks::training_id.eq(training_id))
        .filter(ranks::attempt.eq(attempt))
        .filter(ranks::rank.eq(rank));
    let at = to_db_time(now());
    // A rank we stopped stays STOPPED when its exit arrives (the exit code is kept).
    let current: Option<String> = this.select(ranks::state).first(conn).optional()?;
    let state = match (current.as_deref(), pid) {
        (Some(s), None) if s == RankState::Stopped.as_str() => RankState::Stopped,
        _ => state,
    };
    let n = match pid {
        Some(pid) => diesel::update(this)
            .set((
                ranks::state.eq(state.as_str()),
                ranks::pid.eq(Some(pid)),
                ranks::update_time.eq(at),
            ))
            .execute(conn)?,
        None => diesel::update(this)
            .set((
                ranks::state.eq(state.as_str()),
                ranks::exit_code.eq(exit.0),
                ranks::signal.eq(exit.1),
                ranks::update_time.eq(at),
            ))
            .execute(conn)?,
    };
    if n == 0 {
        return Err(DatabaseError::Logical(format!(
            "no rank {rank} of attempt {attempt} of training {training_id}"
        )));
    }
    Ok(())
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

    /// The ranks of one attempt, in rank order.
    pub async fn ranks(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<Vec<RankRecord>, DatabaseError> {
        let id = training_id.to_string();
        self.read("ranks", move |c| ranks_in(c, &id, attempt)).await
    }

    /// The agent a rank of an attempt is placed on, if that rank exists.
    pub async fn rank_agent(
        &self,
        training_id: &str,
        attempt: i32,
        rank: i32,
    ) -> Result<Option<String>, DatabaseError> {
        let id = training_id.to_string();
        self.read("rank_agent", move |c| {
            Ok(ranks::table
                .filter(ranks::training_id.eq(&id))
                .filter(ranks::attempt.eq(attempt))
                .filter(ranks::rank.eq(rank))
                .select(ranks::agent_id)
                .first::<String>(c)
                .optional()?)
        })
        .await
    }

    /// A rank process started. When it is the last of its attempt to start and
    /// the training is SCHEDULED, the training moves to RUNNING (returned).
    pub async fn rank_started(
        &self,
        training_id: &str,
        attempt: i32,
        rank: i32,
        pid: i64,
    ) -> Result<Option<Training>, DatabaseError> {
        let id = training_id.to_string();
        self.transaction("rank_started", move |c| {
            // Lock the training row first: ranks of one attempt start at once on
            // several agents, and under READ COMMITTED two such transactions
            // would each miss the other's start and neither would see them all.
            lock_training(c, &id)?;
            set_rank_in(
                c,
                &id,
                attempt,
                rank,
                RankState::Running,
                Some(pid),
                (None, None),
            )?;
            let training = load_training(c, &id)?
                .ok_or_else(|| DatabaseError::TrainingNotFound(id.clone()))?;
            if training.attempt != attempt || training.state != JobState::Scheduled {
                return Ok(None);
            }
            let all = ranks_in(c, &id, attempt)?;
            if all.iter().all(|r| r.state != RankState::Pending) {
                let reason = format!("all {} ranks started", all.len());
                return transition_in(c, &id, JobState::Running, &reason).map(Some);
            }
            Ok(None)
        })
        .await
    }

    /// A rank process ended (or was found gone); returns the attempt's ranks.
    pub async fn rank_ended(
        &self,
        training_id: &str,
        attempt: i32,
        rank: i32,
        state: RankState,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<Vec<RankRecord>, DatabaseError> {
        let id = training_id.to_string();
        self.transaction("rank_ended", move |c| {
            lock_training(c, &id)?;
            set_rank_in(c, &id, attempt, rank, state, None, (exit_code, signal))?;
            ranks_in(c, &id, attempt)
        })
        .await
    }

    /// Marks every still-live rank of an attempt with `state` (e.g. STOPPED on cancel).
    pub async fn end_live_ranks(
        &self,
        training_id: &str,
        attempt: i32,
        state: RankState,
    ) -> Result<(), DatabaseError> {
        let id = training_id.to_string();
        self.transaction("end_live_ranks", move |c| {
            diesel::update(
                ranks::table
                    .filter(ranks::training_id.eq(&id))
                    .filter(ranks::attempt.eq(attempt))
                    .filter(
                        ranks::state
                            .eq_any([RankState::Pending.as_str(), RankState::Running.as_str()]),
                    ),
            )
            .set((
                ranks::state.eq(state.as_str()),
                ranks::update_time.eq(to_db_time(now())),
            ))
            .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Records a checkpoint a rank reported, and its event, together.
    pub async fn record_checkpoint(
        &self,
        training_id: &str,
        attempt: i32,
        agent_id: &str,
        line: ProgressLine,
    ) -> Result<(), DatabaseError> {
        let ProgressLine::Checkpoint { step, path } = line.clone() else {
            return Err(DatabaseError::Logical("not a checkpoint line".into()));
        };
        let (id, agent) = (training_id.to_string(), agent_id.to_string());
        self.transaction("record_checkpoint", move |c| {
            let at = now();
            diesel::delete(
                checkpoints::table
                    .filter(checkpoints::training_id.eq(&id))
                    .filter(checkpoints::step.eq(step)),
            )
            .execute(c)?;
            diesel::insert_into(checkpoints::table)
                .values((
                    checkpoints::training_id.eq(&id),
                    checkpoints::attempt.eq(attempt),
                    checkpoints::step.eq(step),
                    checkpoints::path.eq(&path),
                    checkpoints::agent_id.eq(&agent),
                    checkpoints::create_time.eq(to_db_time(at)),
                ))
                .execute(c)?;
            append_event_in(c, &id, attempt, &EventPayload::Rank(line.clone()), at)?;
            Ok(())
        })
        .await
    }

    /// A training's checkpoints, oldest first.
    pub async fn checkpoints(
        &self,
        training_id: &str,
    ) -> Result<Vec<CheckpointRecord>, DatabaseError> {
        let id = training_id.to_string();
        self.read("checkpoints", move |c| {
            let rows: Vec<(String, i32, i64, String, String, chrono::NaiveDateTime)> =
                checkpoints::table
                    .filter(checkpoints::training_id.eq(&id))
                    .order(checkpoints::step.asc())
                    .select((
                        checkpoints::training_id,
                        checkpoints::attempt,
                        checkpoints::step,
                        checkpoints::path,
                        checkpoints::agent_id,
                        checkpoints::create_time,
                    ))
                    .load(c)?;
            Ok(rows
                .into_iter()
                .map(
                    |(training_id, attempt, step, path, agent_id, t)| CheckpointRecord {
                        training_id,
                        attempt,
                        step,
                        path,
                        agent_id,
                        create_time: t.and_utc(),
                    },
                )
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

    /// QUEUED trainings by priority (higher first), then age.
    pub async fn queued_trainings(&self) -> Result<Vec<Training>, DatabaseError> {
        self.read("queued_trainings", |c| {
            trainings_in_state(c, JobState::Queued)
        })
        .await
    }

    /// Updates a QUEUED training's pending reason without a state change.
    pub async fn set_pending_reason(
        &self,
        training_id: &str,
        reason: &str,
    ) -> Result<(), DatabaseError> {
        let (id, reason) = (training_id.to_string(), reason.to_string());
        self.transaction("set_pending_reason", move |c| {
            diesel::update(
                trainings::table
                    .filter(trainings::id.eq(&id))
                    .filter(trainings::state.eq(JobState::Queued.as_str())),
            )
            .set(trainings::state_reason.eq(&reason))
            .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Moves a SCHEDULED or RUNNING training to RESTARTING and spends one
    /// restart of its budget, atomically.
    pub async fn begin_restart(
        &self,
        training_id: &str,
        cause: &str,
    ) -> Result<Training, DatabaseError> {
        let (id, cause) = (training_id.to_string(), cause.to_string());
        self.transaction("begin_restart", move |c| {
            let t = transition_in(c, &id, JobState::Restarting, &cause)?;
            diesel::update(trainings::table.find(&id))
                .set(trainings::restart_count.eq(trainings::restart_count + 1))
                .execute(c)?;
            Ok(Training {
                restart_count: t.restart_count + 1,
                ..t
            })
        })
        .await
    }

    /// RESTARTING trainings by priority (higher first), then age.
    pub async fn restarting_trainings(&self) -> Result<Vec<Training>, DatabaseError> {
        self.read("restarting_trainings", |c| {
            trainings_in_state(c, JobState::Restarting)
        })
        .await
    }

    /// Ranks of an attempt that were asked to stop but whose exit was never
    /// confirmed (their agent is gone): marked LOST.
    pub async fn mark_unconfirmed_lost(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<(), DatabaseError> {
        let id = training_id.to_string();
        self.transaction("mark_unconfirmed_lost", move |c| {
            diesel::update(
                ranks::table
                    .filter(ranks::training_id.eq(&id))
                    .filter(ranks::attempt.eq(attempt))
                    .filter(ranks::exit_code.is_null())
                    .filter(ranks::signal.is_null())
                    .filter(ranks::state.ne(RankState::Succeeded.as_str())),
            )
            .set((
                ranks::state.eq(RankState::Lost.as_str()),
                ranks::update_time.eq(to_db_time(now())),
            ))
            .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Marks the live ranks an agent ran as LOST (the agent is gone).
    pub async fn ranks_lost_on_agent(
        &self,
        training_id: &str,
        attempt: i32,
        agent_id: &str,
    ) -> Result<Vec<RankRecord>, DatabaseError> {
        let (id, agent) = (training_id.to_string(), agent_id.to_string());
        self.transaction("ranks_lost_on_agent", move |c| {
            diesel::update(
                ranks::table
                    .filter(ranks::training_id.eq(&id))
                    .filter(ranks::attempt.eq(attempt))
                    .filter(ranks::agent_id.eq(&agent))
                    .filter(ranks::state.eq_any([
                        RankState::Pending.as_str(),
                        RankState::Running.as_str(),
                        RankState::Stopped.as_str(),
                    ]))
                    .filter(ranks::exit_code.is_null())
                    .filter(ranks::signal.is_null()),
            )
            .set((
                ranks::state.eq(RankState::Lost.as_str()),
                ranks::update_time.eq(to_db_time(now())),
            ))
            .execute(c)?;
            ranks_in(c, &id, attempt)
        })
        .await
    }

    /// The agent holding the newest checkpoint of a training (rank 0's host of
    /// the attempt that wrote it), if any.
    pub async fn checkpoint_agent(
        &self,
        training_id: &str,
    ) -> Result<Option<String>, DatabaseError> {
        let id = training_id.to_string();
        self.read("checkpoint_agent", move |c| {
            Ok(checkpoints::table
                .filter(checkpoints::training_id.eq(&id))
                .order(checkpoints::step.desc())
                .select(checkpoints::agent_id)
                .first(c)
                .optional()?)
        })
        .await
    }

    /// Replaces a training's config (e.g. a smaller per-rank batch after an OOM).
    pub async fn update_config(
        &self,
        training_id: &str,
        config: &cohort_spec::TrainingConfig,
    ) -> Result<(), DatabaseError> {
        let (id, json) = (training_id.to_string(), config.to_json());
        self.transaction("update_config", move |c| {
            diesel::update(trainings::table.find(&id))
                .set(trainings::config_json.eq(&json))
                .execute(c)?;
            Ok(())
        })
        .await
    }
}

//! An attempt's ranks: their slots, their processes' lives (started,
//! ended, lost) and which agent each is placed on.

use super::rows::{now, to_db_time};
use super::schema::{ranks, trainings};
use super::trainings::{load_training, transition_in};
use super::{DatabaseError, DbConnection, LogicalError, Persistence};
use crate::model::{JobState, RankRecord, RankSlot, RankState, Training};
use diesel::prelude::*;

/// A rank's row without its log tail (read only by [`Persistence::rank_log_tails`]).
#[derive(Queryable, Selectable)]
#[diesel(table_name = ranks)]
pub(super) struct RankRow {
    #[allow(dead_code)]
    id: i64,
    pub(super) training_id: String,
    pub(super) attempt: i32,
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

pub(super) fn ranks_in(
    conn: &mut DbConnection,
    training_id: &str,
    attempt: i32,
) -> Result<Vec<RankRecord>, DatabaseError> {
    ranks::table
        .filter(ranks::training_id.eq(training_id))
        .filter(ranks::attempt.eq(attempt))
        .order(ranks::rank.asc())
        .select(RankRow::as_select())
        .load::<RankRow>(conn)?
        .into_iter()
        .map(RankRecord::try_from)
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
    exit: (Option<i32>, Option<i32>, Option<String>),
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
                ranks::log_tail.eq(exit.2),
                ranks::update_time.eq(at),
            ))
            .execute(conn)?,
    };
    if n == 0 {
        return Err(LogicalError::RankNotFound {
            training_id: training_id.to_string(),
            attempt,
            rank,
        }
        .into());
    }
    Ok(())
}

/// How a rank ended, for [`Persistence::rank_ended`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnd {
    pub state: RankState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Its last stderr lines (kept at most [`MAX_LOG_TAIL_BYTES`]).
    pub log_tail: Option<String>,
}

/// The most of a rank's last lines kept in the database.
pub const MAX_LOG_TAIL_BYTES: usize = 16 << 10;

/// `tail` cut to its last [`MAX_LOG_TAIL_BYTES`], at a line boundary when
/// there is one.
fn bounded_tail(tail: String) -> String {
    if tail.len() <= MAX_LOG_TAIL_BYTES {
        return tail;
    }
    let mut start = tail.len() - MAX_LOG_TAIL_BYTES;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    let cut = &tail[start..];
    cut.split_once('\n')
        .map_or(cut, |(_, rest)| rest)
        .to_string()
}

impl Persistence {
    /// The ranks of one attempt, in rank order.
    pub async fn ranks(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<Vec<RankRecord>, DatabaseError> {
        let id = training_id.to_string();
        self.read("ranks", move |c| ranks_in(c, &id, attempt)).await
    }

    /// The last lines each rank of an attempt printed before it exited
    /// (kept by [`Persistence::rank_ended`]), by rank; `None` for a rank
    /// still running or that kept none.
    pub async fn rank_log_tails(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<Vec<(i32, Option<String>)>, DatabaseError> {
        let id = training_id.to_string();
        self.read("rank_log_tails", move |c| {
            Ok(ranks::table
                .filter(ranks::training_id.eq(&id))
                .filter(ranks::attempt.eq(attempt))
                .order(ranks::rank.asc())
                .select((ranks::rank, ranks::log_tail))
                .load::<(i32, Option<String>)>(c)?)
        })
        .await
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
        self.transaction_noting("rank_started", move |c, out| {
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
                (None, None, None),
            )?;
            let training = load_training(c, &id)?.ok_or_else(|| {
                DatabaseError::Logical(LogicalError::TrainingNotFound(id.clone()))
            })?;
            if training.attempt != attempt || training.state != JobState::Scheduled {
                return Ok(None);
            }
            let all = ranks_in(c, &id, attempt)?;
            if all.iter().all(|r| r.state != RankState::Pending) {
                let reason = format!("all {} ranks started", all.len());
                return transition_in(c, out, &id, JobState::Running, &reason).map(Some);
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
        end: RankEnd,
    ) -> Result<Vec<RankRecord>, DatabaseError> {
        let id = training_id.to_string();
        let log_tail = end.log_tail.map(bounded_tail);
        self.transaction("rank_ended", move |c| {
            lock_training(c, &id)?;
            let exit = (end.exit_code, end.signal, log_tail.clone());
            set_rank_in(c, &id, attempt, rank, end.state, None, exit)?;
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
}

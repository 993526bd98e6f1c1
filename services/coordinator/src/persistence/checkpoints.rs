//! Checkpoints the ranks reported: where each step's state is and which
//! agent holds it; and the best one (the lowest validation loss), one per
//! training.

use super::events::append_event_in;
use super::rows::{now, to_db_time};
use super::schema::{best_checkpoints, checkpoints, trainings};
use super::{DatabaseError, Persistence};
use crate::model::{EventPayload, JobState};
use cohort_spec::progress::ProgressLine;
use diesel::prelude::*;

/// A stored checkpoint of a training.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRecord {
    pub training_id: String,
    pub attempt: i32,
    pub step: i64,
    pub path: String,
    pub agent_id: String,
    pub create_time: chrono::DateTime<chrono::Utc>,
    /// The best checkpoint (`best/`), not a step's.
    pub best: bool,
}

type Row = (String, i32, i64, String, String, chrono::NaiveDateTime);

fn record((training_id, attempt, step, path, agent_id, t): Row, best: bool) -> CheckpointRecord {
    CheckpointRecord {
        training_id,
        attempt,
        step,
        path,
        agent_id,
        create_time: t.and_utc(),
        best,
    }
}

/// The states in which an attempt may still publish a checkpoint: placed,
/// running, or stopping for a restart (a checkpoint written in the stop
/// grace is of a consistent state; the next attempt is not placed yet).
const PUBLISHING: [JobState; 3] = [JobState::Scheduled, JobState::Running, JobState::Restarting];

/// What became of a reported checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Stored,
    /// Its attempt is no longer the training's current one (a partitioned
    /// host that came back, a rank that missed its stop), or the training
    /// has ended: nothing was written, and no later attempt resumes from it.
    Superseded,
}

impl Persistence {
    /// Records a checkpoint a rank reported (a step's, or the best one, which
    /// replaces the last best), and its event, together, when `attempt` is
    /// still the training's current, publishing attempt.
    pub async fn record_checkpoint(
        &self,
        training_id: &str,
        attempt: i32,
        agent_id: &str,
        line: ProgressLine,
    ) -> Result<Recorded, DatabaseError> {
        let ProgressLine::Checkpoint { step, path, best } = line.clone() else {
            return Err(DatabaseError::Invariant("not a checkpoint line".into()));
        };
        let (id, agent) = (training_id.to_string(), agent_id.to_string());
        self.transaction_noting("record_checkpoint", move |c, out| {
            let current: Option<(i32, String)> = trainings::table
                .filter(trainings::id.eq(&id))
                .select((trainings::attempt, trainings::state))
                .first(c)
                .optional()?;
            let publishing = current.is_some_and(|(current, state)| {
                current == attempt && PUBLISHING.iter().any(|s| s.as_str() == state)
            });
            if !publishing {
                return Ok(Recorded::Superseded);
            }
            let at = now();
            if best {
                diesel::delete(
                    best_checkpoints::table.filter(best_checkpoints::training_id.eq(&id)),
                )
                .execute(c)?;
                diesel::insert_into(best_checkpoints::table)
                    .values((
                        best_checkpoints::training_id.eq(&id),
                        best_checkpoints::attempt.eq(attempt),
                        best_checkpoints::step.eq(step),
                        best_checkpoints::path.eq(&path),
                        best_checkpoints::agent_id.eq(&agent),
                        best_checkpoints::create_time.eq(to_db_time(at)),
                    ))
                    .execute(c)?;
                append_event_in(c, out, &id, attempt, &EventPayload::Rank(line.clone()), at)?;
                return Ok(Recorded::Stored);
            }
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
            append_event_in(c, out, &id, attempt, &EventPayload::Rank(line.clone()), at)?;
            Ok(Recorded::Stored)
        })
        .await
    }

    /// A training's step checkpoints, oldest first, then its best one.
    pub async fn checkpoints(
        &self,
        training_id: &str,
    ) -> Result<Vec<CheckpointRecord>, DatabaseError> {
        let id = training_id.to_string();
        self.read("checkpoints", move |c| {
            let rows: Vec<Row> = checkpoints::table
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
            let best: Option<Row> = best_checkpoints::table
                .filter(best_checkpoints::training_id.eq(&id))
                .select((
                    best_checkpoints::training_id,
                    best_checkpoints::attempt,
                    best_checkpoints::step,
                    best_checkpoints::path,
                    best_checkpoints::agent_id,
                    best_checkpoints::create_time,
                ))
                .first(c)
                .optional()?;
            Ok(rows
                .into_iter()
                .map(|r| record(r, false))
                .chain(best.map(|r| record(r, true)))
                .collect())
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
}

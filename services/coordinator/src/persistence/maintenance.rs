//! Maintenance marks: cordoned agents (no new placements), their drains,
//! and quarantined GPUs. Each admin change writes its audit row in the same
//! transaction; a quarantine is the coordinator's own (its alert tells).

use super::rows::{now, to_db_time};
use super::schema::{agents, gpus, ranks, trainings};
use super::{DatabaseError, LogicalError, Persistence};
use crate::model::{AuditEntry, JobState};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use std::collections::HashMap;

/// What the database remembers of an agent's maintenance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentMarks {
    pub cordon: Option<String>,
    pub drain_deadline: Option<DateTime<Utc>>,
    /// Its quarantined GPUs: uuid -> why.
    pub quarantined: HashMap<String, String>,
}

/// A cordon change.
#[derive(Debug, Clone)]
pub struct Cordon {
    /// `None`: uncordon (and end any drain).
    pub reason: Option<String>,
    /// `Some`: a drain that moves what is left at this time.
    pub drain_deadline: Option<DateTime<Utc>>,
}

/// Ranks of placed trainings' current attempts on agent `agent_id`, inside
/// the caller's transaction (ForgetAgent refuses an agent with any).
pub(super) fn placed_ranks_in(
    c: &mut super::DbConnection,
    agent_id: &str,
) -> Result<i64, DatabaseError> {
    let placed =
        [JobState::Scheduled, JobState::Running, JobState::Restarting].map(JobState::as_str);
    Ok(ranks::table
        .inner_join(trainings::table)
        .filter(ranks::agent_id.eq(agent_id))
        .filter(ranks::attempt.eq(trainings::attempt))
        .filter(trainings::state.eq_any(placed))
        .count()
        .get_result(c)?)
}

impl Persistence {
    /// The cordon, drain and quarantines of agent `agent_id`.
    pub async fn agent_marks(&self, agent_id: &str) -> Result<AgentMarks, DatabaseError> {
        let id = agent_id.to_string();
        self.read("agent_marks", move |c| {
            let row: Option<(Option<String>, Option<NaiveDateTime>)> = agents::table
                .find(&id)
                .select((agents::cordon_reason, agents::drain_deadline))
                .first(c)
                .optional()?;
            let (cordon, drain) = row.unwrap_or_default();
            let quarantined = gpus::table
                .filter(gpus::agent_id.eq(&id))
                .filter(gpus::quarantine_reason.is_not_null())
                .select((gpus::uuid, gpus::quarantine_reason.assume_not_null()))
                .load::<(String, String)>(c)?
                .into_iter()
                .collect();
            Ok(AgentMarks {
                cordon,
                drain_deadline: drain.map(|t| t.and_utc()),
                quarantined,
            })
        })
        .await
    }

    /// Cordons, drains or uncordons the agent named `name`, with its audit
    /// row; returns its id.
    pub async fn set_cordon(
        &self,
        name: &str,
        cordon: Cordon,
        audit: AuditEntry,
    ) -> Result<String, DatabaseError> {
        let name = name.to_string();
        self.transaction("set_cordon", move |c| {
            let id: Option<String> = agents::table
                .filter(agents::name.eq(&name))
                .select(agents::id)
                .first(c)
                .optional()?;
            let Some(id) = id else {
                return Err(DatabaseError::Logical(LogicalError::AgentNotFound(
                    name.clone(),
                )));
            };
            diesel::update(agents::table.find(&id))
                .set((
                    agents::cordon_reason.eq(cordon.reason.as_deref()),
                    agents::drain_deadline.eq(cordon.drain_deadline.map(to_db_time)),
                ))
                .execute(c)?;
            super::audit::insert_in(c, &audit, now())?;
            Ok(id)
        })
        .await
    }

    /// Ranks of placed trainings' current attempts on agent `agent_id`
    /// (a RESTARTING training's count until its next attempt is placed, so
    /// a drained agent is empty only once its ranks are torn down).
    pub async fn placed_ranks_on(&self, agent_id: &str) -> Result<i64, DatabaseError> {
        let id = agent_id.to_string();
        self.read("placed_ranks_on", move |c| placed_ranks_in(c, &id))
            .await
    }

    /// A drain is over (the agent is empty): it stays cordoned.
    pub async fn end_drain(&self, agent_id: &str) -> Result<(), DatabaseError> {
        let id = agent_id.to_string();
        self.transaction("end_drain", move |c| {
            diesel::update(agents::table.find(&id))
                .set(agents::drain_deadline.eq(None::<NaiveDateTime>))
                .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Quarantines a GPU (kept until an admin releases it).
    pub async fn quarantine_gpu(&self, uuid: &str, reason: &str) -> Result<(), DatabaseError> {
        let (uuid, reason) = (uuid.to_string(), reason.to_string());
        self.transaction("quarantine_gpu", move |c| {
            diesel::update(gpus::table.find(&uuid))
                .set(gpus::quarantine_reason.eq(Some(&reason)))
                .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Lifts a GPU's quarantine, with its audit row; the agent it belongs to.
    pub async fn release_gpu(
        &self,
        uuid: &str,
        audit: AuditEntry,
    ) -> Result<String, DatabaseError> {
        let uuid = uuid.to_string();
        self.transaction("release_gpu", move |c| {
            let row: Option<(String, Option<String>)> = gpus::table
                .find(&uuid)
                .select((gpus::agent_id, gpus::quarantine_reason))
                .first(c)
                .optional()?;
            match row {
                None => Err(DatabaseError::Logical(LogicalError::GpuNotFound(
                    uuid.clone(),
                ))),
                Some((_, None)) => Err(DatabaseError::Logical(LogicalError::NotQuarantined(
                    uuid.clone(),
                ))),
                Some((agent_id, Some(_))) => {
                    diesel::update(gpus::table.find(&uuid))
                        .set(gpus::quarantine_reason.eq(None::<String>))
                        .execute(c)?;
                    super::audit::insert_in(c, &audit, now())?;
                    Ok(agent_id)
                }
            }
        })
        .await
    }
}

impl Persistence {
    /// A training moves off a draining agent: RESTARTING with `cause`, its
    /// restart count unchanged (a drain spends no restart budget).
    pub async fn begin_move(
        &self,
        training_id: &str,
        cause: &str,
    ) -> Result<crate::model::Training, DatabaseError> {
        let (id, cause) = (training_id.to_string(), cause.to_string());
        self.transaction_noting("begin_move", move |c, out| {
            super::trainings::transition_in(c, out, &id, crate::model::JobState::Restarting, &cause)
        })
        .await
    }
}

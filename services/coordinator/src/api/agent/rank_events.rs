//! An agent's reports about ranks: accepted only for ranks the coordinator
//! placed on that agent (the rank map in the database), then handed to the
//! job runner. Anything else is refused, logged and counted, and writes
//! nothing.

use super::state::{Delivery, Session, OWNED_CAPACITY};
use crate::model::RankReport;
use crate::persistence::DatabaseError;
use cohort_proto::v1;

/// Whether the rank of `event` is placed on the session's agent.
async fn owns(session: &mut Session, event: &RankReport) -> Result<bool, DatabaseError> {
    let key = (event.training_id.clone(), event.attempt, event.rank);
    if session.owned.0.contains(&key) {
        return Ok(true);
    }
    let agent = session
        .ctx
        .db
        .rank_agent(&event.training_id, event.attempt, event.rank)
        .await?;
    let owned = agent.as_deref() == Some(session.agent_id.as_str());
    if owned {
        if session.owned.0.len() >= OWNED_CAPACITY {
            session.owned.0.clear();
        }
        session.owned.0.insert(key);
    }
    Ok(owned)
}

/// Whether a failure to store is this coordinator's (send the event again
/// elsewhere, later) rather than the event's.
fn retry_elsewhere(e: &DatabaseError) -> bool {
    e.is_unavailable() || matches!(e, DatabaseError::NotLeader | DatabaseError::Deposed { .. })
}

pub(super) async fn on_rank_event(session: &mut Session, event: v1::RankEvent) -> Delivery {
    let Ok(report) = RankReport::try_from(event) else {
        tracing::debug!(agent_id = %session.agent_id, "ignoring a rank event without a kind");
        return Delivery::Done;
    };
    let (training_id, attempt, rank) = (report.training_id.clone(), report.attempt, report.rank);
    match owns(session, &report).await {
        Ok(true) => {}
        Ok(false) => {
            session.ctx.refusals.count_rank_event();
            let detail = format!("rank {rank} of {training_id} attempt {attempt}");
            session.refused("rank event", &detail);
            return Delivery::Done;
        }
        Err(e) => {
            tracing::warn!(agent_id = %session.agent_id, training_id = %training_id, rank, error = %e, "cannot check a rank event's owner");
            return if retry_elsewhere(&e) {
                Delivery::Retry
            } else {
                Delivery::Done
            };
        }
    }
    match session
        .ctx
        .jobs
        .on_rank_event(&session.agent_id, report)
        .await
    {
        Ok(()) => Delivery::Done,
        Err(e) if retry_elsewhere(&e) => {
            tracing::warn!(agent_id = %session.agent_id, training_id = %training_id, rank, error = %e, "cannot record a rank event here: the agent sends it again");
            Delivery::Retry
        }
        Err(e) => {
            tracing::warn!(agent_id = %session.agent_id, training_id = %training_id, rank, error = %e, "cannot record a rank event");
            Delivery::Done
        }
    }
}

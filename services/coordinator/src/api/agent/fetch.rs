//! FetchCheckpoint: an agent of a restarted gang (a program's, or the
//! SAE's rank 0 re-placed on another host: an elastic training re-formed,
//! a preempted one placed again) fetches the checkpoint it resumes from
//! when that checkpoint is on another agent's
//! disk (no shared `checkpoint.storage`), relayed through the coordinator
//! from the agent that recorded it — the same relay DownloadCheckpoint
//! reads through. Only an agent holding ranks of the training's current
//! attempt may fetch, as itself (its certificate's name, when it has one),
//! and only a step the training still keeps. While the chunks go out the
//! fetching agent counts as seen: its session loop waits for the fetch.

use super::ApiError;
use crate::api::checkpoints::stream_program_checkpoint;
use crate::context::Context;
use crate::model::Principal;
use crate::persistence::{DatabaseError, LogicalError};
use cohort_proto::v1;
use tonic::Status;

use crate::api::StatusStream as BoxStream;

fn denied(message: String) -> ApiError {
    ApiError::PermissionDenied {
        message,
        permission: "agent".into(),
        team: String::new(),
    }
}

/// The connected agent `agent_id`, when the caller may act as it (its
/// certificate's name, when it has one).
pub(super) fn fetching_agent(
    ctx: &Context,
    who: &Principal,
    agent_id: &str,
) -> Result<crate::fleet::LiveAgent, Status> {
    let agent = ctx
        .fleet
        .agent(agent_id)
        .ok_or_else(|| denied(format!("agent {agent_id} is not connected")))?;
    if let Principal::Agent { name } = who {
        if *name != agent.name {
            return Err(ApiError::AgentIdentityMismatch {
                certificate: name.clone(),
                agent_name: agent.name.clone(),
            }
            .into());
        }
    }
    Ok(agent)
}

pub(super) async fn fetch(
    ctx: &Context,
    who: Principal,
    req: v1::FetchCheckpointRequest,
) -> Result<BoxStream<v1::CheckpointChunk>, Status> {
    let agent = fetching_agent(ctx, &who, &req.agent_id)?;
    let training = ctx
        .db
        .get_training(&req.training_id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| {
            ApiError::from(DatabaseError::Logical(LogicalError::TrainingNotFound(
                req.training_id.clone(),
            )))
        })?;
    if let Some(storage) = training.config.checkpoint_storage() {
        return Err(ApiError::field(
            "training_id",
            format!("its checkpoints are in {storage}, which every agent reads itself"),
        )
        .into());
    }
    let ranks = ctx
        .db
        .ranks(&training.id, training.attempt)
        .await
        .map_err(ApiError::from)?;
    if !ranks.iter().any(|r| r.slot.agent_id == agent.id) {
        return Err(denied(format!(
            "agent {} holds no rank of attempt {} of {}",
            agent.id, training.attempt, training.id
        ))
        .into());
    }
    let keep = training.config.checkpoint_keep().max(1) as usize;
    let checkpoints = ctx
        .db
        .checkpoints(&training.id)
        .await
        .map_err(ApiError::from)?;
    let checkpoint = checkpoints
        .into_iter()
        .filter(|c| !c.best)
        .rev()
        .take(keep)
        .find(|c| c.step == req.step)
        .ok_or_else(|| ApiError::CheckpointNotFound {
            training_id: training.id.clone(),
            what: format!("no kept checkpoint at step {}", req.step),
        })?;
    tracing::info!(training_id = %training.id, step = checkpoint.step, from = %checkpoint.agent_id, to = %agent.id, "an agent fetches a checkpoint to resume from");
    let (fleet, fetching) = (ctx.fleet.clone(), agent.id.clone());
    let caller = format!("agent:{}", agent.id);
    stream_program_checkpoint(ctx, &checkpoint, &caller, move || fleet.touch(&fetching)).await
}

//! The coordinator's commands about ranks: StartRanks, StopRanks and
//! NoticeRanks, converted once into the agent's domain types
//! (`convert/commands.rs`) and carried out here and in `crate::launch`.

use cohort_proto::v1;
use cohort_proto::v1::coordinator_message::Message as In;

use super::{convert, Agent};
use crate::launch::{self, Host, NoticeRanks, StopRanks};
use crate::supervisor::RankStopper;

/// Runs one command. Returns events to send at once (ranks that could not be
/// started); everything else is reported through the supervisor's events.
pub(super) async fn handle(
    agent: &mut Agent,
    command: v1::CoordinatorMessage,
) -> Vec<v1::RankEvent> {
    match command.message {
        Some(In::StartRanks(start)) => start_ranks(agent, start).await,
        Some(In::StopRanks(stop)) => {
            match convert::stop_ranks(stop) {
                Ok(stop) => stop_ranks(agent, stop),
                Err(e) => tracing::warn!(error = %e, "ignoring a StopRanks"),
            }
            Vec::new()
        }
        Some(In::NoticeRanks(notice)) => {
            match convert::notice_ranks(notice) {
                Ok(notice) => notice_ranks(agent, notice),
                Err(e) => tracing::warn!(error = %e, "ignoring a NoticeRanks"),
            }
            Vec::new()
        }
        // The session serves these itself, before commands reach here.
        Some(In::ReadFile(_))
        | Some(In::Ack(_))
        | Some(In::Members(_))
        | Some(In::RunDoctor(_)) => Vec::new(),
        Some(In::Registered(_)) => {
            tracing::warn!("ignoring a second Registered on the same session");
            Vec::new()
        }
        None => {
            tracing::warn!("ignoring an empty coordinator message");
            Vec::new()
        }
    }
}

/// Converts, starts, and answers with the ranks that did not start.
async fn start_ranks(agent: &mut Agent, cmd: v1::StartRanks) -> Vec<v1::RankEvent> {
    let training_id = cmd.training_id.clone();
    let failures = match convert::start_ranks(cmd, agent.gpus.len()) {
        Ok(start) => {
            let host = Host {
                config: &agent.config,
                gpus: &agent.gpus,
                supervisor: &mut agent.supervisor,
                peer: agent.peer.as_ref(),
            };
            launch::start(host, start).await
        }
        Err(rejected) => {
            tracing::warn!(training = %training_id, error = %rejected.refusal.message, "cannot start ranks");
            let refusal = rejected.refusal;
            rejected
                .keys
                .into_iter()
                .map(|k| (k, refusal.clone()))
                .collect()
        }
    };
    failures
        .iter()
        .map(|(key, refusal)| convert::start_failed(key, refusal))
        .collect()
}

/// Stops in a spawned task so the session keeps serving during the grace period.
fn stop_ranks(agent: &Agent, cmd: StopRanks) {
    let grace = cmd.grace.unwrap_or(agent.config.stop_grace);
    let stoppers = agent
        .supervisor
        .stoppers(&cmd.training_id, cmd.attempt, grace);
    tracing::info!(
        training = %cmd.training_id,
        attempt = ?cmd.attempt,
        ranks = stoppers.len(),
        grace_ms = grace.as_millis() as u64,
        reason = %cmd.reason,
        "stop ranks"
    );
    if stoppers.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for (key, outcome) in RankStopper::stop_all(stoppers).await {
            tracing::info!(rank = %key, outcome = ?outcome, "rank stopped");
        }
    });
}

/// Gives notice in a spawned task so the session keeps serving during the
/// grace period; a rank noticed already is left alone.
fn notice_ranks(agent: &Agent, cmd: NoticeRanks) {
    let grace = cmd.grace.unwrap_or(agent.config.stop_grace);
    let noticed = agent
        .supervisor
        .noticers(&cmd.training_id, cmd.attempt, grace);
    tracing::info!(
        training = %cmd.training_id,
        attempt = cmd.attempt,
        ranks = noticed.len(),
        grace_ms = grace.as_millis() as u64,
        reason = %cmd.reason,
        "preemption notice"
    );
    if noticed.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for (key, outcome) in RankStopper::notice_all(noticed).await {
            tracing::info!(rank = %key, outcome = ?outcome, "rank noticed");
        }
    });
}

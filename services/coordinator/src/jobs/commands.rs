//! The commands the job runner sends down agents' streams.

use crate::fleet::{AgentCommand, Fleet, LocalRank, StartRanks};
use crate::model::{Placement, RankRecord, Training};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Send each agent a StartRanks with its share of the placement. Returns the
/// first agent that could not be reached.
pub(super) fn start_ranks(
    fleet: &Fleet,
    training: &Training,
    placement: &Placement,
    config: &cohort_spec::Workload,
    trace_context: &HashMap<String, String>,
    published_checkpoints: &[(i32, i64)],
) -> Result<(), String> {
    let mut by_agent: BTreeMap<&str, Vec<LocalRank>> = BTreeMap::new();
    for s in &placement.slots {
        by_agent.entry(&s.agent_id).or_default().push(LocalRank {
            rank: s.rank,
            local_rank: s.local_rank,
            local_world_size: s.local_world_size,
            gpu_index: s.gpu_index,
            gpu_uuid: s.gpu_uuid.clone(),
        });
    }
    let host_memory_limit_bytes = super::needs::host_memory_limit(config);
    // Hosts in rank order: GROUP_RANK counts them as torchrun's node rank does.
    let mut agents: Vec<(&str, Vec<LocalRank>)> = by_agent.into_iter().collect();
    agents.sort_by_key(|(_, ranks)| ranks.iter().map(|r| r.rank).min());
    let group_world_size = agents.len() as i32;
    let world_size = placement.slots.len() as i32;
    let world_sizes = if config.is_elastic() {
        let (min, max) = training
            .gpu_request
            .selection
            .world_sizes(world_size as u32);
        (min as i32, max as i32)
    } else {
        (world_size, world_size)
    };
    for (group_rank, (agent_id, ranks)) in agents.into_iter().enumerate() {
        let message = AgentCommand::StartRanks(Box::new(StartRanks {
            training_id: training.id.clone(),
            attempt: training.attempt,
            config: config.clone(),
            world_size,
            master_addr: placement.master_addr.clone(),
            master_port: placement.master_port,
            ranks,
            trace_context: trace_context.clone(),
            published_checkpoints: published_checkpoints.to_vec(),
            team: training.team.clone(),
            group_rank: group_rank as i32,
            group_world_size,
            max_restarts: training.max_restarts,
            host_memory_limit_bytes,
            world_sizes,
        }));
        if !fleet.send(agent_id, message) {
            return Err(agent_id.to_string());
        }
    }
    Ok(())
}

/// Tell every agent holding a live rank of the attempt to stop it.
pub(super) fn stop_ranks(
    fleet: &Fleet,
    training: &Training,
    ranks: &[RankRecord],
    grace_period: Duration,
    reason: &str,
) {
    let mut agents: Vec<&str> = ranks
        .iter()
        .filter(|r| {
            matches!(
                r.state,
                crate::model::RankState::Pending | crate::model::RankState::Running
            )
        })
        .map(|r| r.slot.agent_id.as_str())
        .collect();
    agents.sort_unstable();
    agents.dedup();
    for agent_id in agents {
        let sent = fleet.send(
            agent_id,
            stop_message(&training.id, training.attempt, grace_period, reason),
        );
        if !sent {
            tracing::warn!(agent_id, training_id = %training.id, "cannot reach agent to stop ranks; it stops them when it reconnects");
        }
    }
}

/// Give every agent holding a live rank of the attempt its notice (see
/// [`AgentCommand::NoticeRanks`]); `only` limits it to one agent.
pub(super) fn notice_ranks(
    fleet: &Fleet,
    training_id: &str,
    attempt: i32,
    ranks: &[RankRecord],
    only: Option<&str>,
    grace: Duration,
    reason: &str,
) {
    let mut agents: Vec<&str> = ranks
        .iter()
        .filter(|r| {
            matches!(
                r.state,
                crate::model::RankState::Pending | crate::model::RankState::Running
            )
        })
        .map(|r| r.slot.agent_id.as_str())
        .filter(|a| only.is_none_or(|o| o == *a))
        .collect();
    agents.sort_unstable();
    agents.dedup();
    for agent_id in agents {
        let sent = fleet.send(
            agent_id,
            AgentCommand::NoticeRanks {
                training_id: training_id.to_string(),
                attempt,
                grace,
                reason: reason.to_string(),
            },
        );
        if !sent {
            tracing::warn!(
                agent_id,
                training_id,
                "cannot reach agent to give notice; it gets it when it reconnects"
            );
        }
    }
}

/// Stop a rank an agent reported that belongs to no live attempt.
pub(super) fn stop_stale(
    fleet: &Fleet,
    agent_id: &str,
    rank: &crate::model::RunningRank,
    grace_period: Duration,
) {
    fleet.send(
        agent_id,
        stop_message(
            &rank.training_id,
            rank.attempt,
            grace_period,
            "stale attempt",
        ),
    );
}

fn stop_message(
    training_id: &str,
    attempt: i32,
    grace_period: Duration,
    reason: &str,
) -> AgentCommand {
    AgentCommand::StopRanks {
        training_id: training_id.to_string(),
        attempt,
        grace: grace_period,
        reason: reason.to_string(),
    }
}

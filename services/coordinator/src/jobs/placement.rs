//! Gang placement: all of a training's ranks on free GPUs, or none.
//!
//! By count: pack onto as few agents as possible (the agent with the most free
//! GPUs first), so ranks share hosts and the group spans the fewest links.
//! By ids: exactly those GPUs, in rank order, each free. Rank order follows
//! agents, so ranks on one host are contiguous and `local_rank` counts up.

use crate::fleet::FreeGpu;
use crate::model::RankSlot;
use std::collections::BTreeMap;

/// Why a placement is not possible now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaceable {
    /// No agent is connected.
    NoAgents,
    /// `missing` more free GPUs are needed.
    InsufficientGpus { wanted: usize, free: usize },
    /// Requested GPUs that are known but held by a training.
    Busy(Vec<String>),
    /// Requested GPUs no connected agent has.
    Unknown(Vec<String>),
    /// Not enough suitable GPUs (free, healthy, enough memory): the recommender's reason.
    NotSuitable(String),
    /// Enough GPUs exist, but some are unhealthy (ECC errors, faults).
    WaitingForHealthy(String),
}

impl std::fmt::Display for Unplaceable {
    /// "REASON: details", the reason from [`Unplaceable::reason`] (the
    /// table in `api::error`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.reason())?;
        match self {
            Unplaceable::NoAgents => write!(f, "no agent is connected"),
            Unplaceable::InsufficientGpus { wanted, free } => write!(
                f,
                "needs {wanted} GPUs, {free} free ({} missing)",
                wanted.saturating_sub(*free)
            ),
            Unplaceable::Busy(ids) => write!(f, "held by another training: {}", ids.join(", ")),
            Unplaceable::Unknown(ids) => write!(f, "no connected agent has {}", ids.join(", ")),
            Unplaceable::NotSuitable(why) | Unplaceable::WaitingForHealthy(why) => {
                write!(f, "{why}")
            }
        }
    }
}

impl std::error::Error for Unplaceable {}

/// Assign ranks to the chosen GPUs (grouped by agent, in the given order).
fn slots(chosen: Vec<&FreeGpu>) -> Vec<RankSlot> {
    let mut per_agent: BTreeMap<&str, i32> = BTreeMap::new();
    for g in &chosen {
        *per_agent.entry(&g.agent_id).or_default() += 1;
    }
    let mut seen: BTreeMap<&str, i32> = BTreeMap::new();
    chosen
        .iter()
        .enumerate()
        .map(|(rank, g)| {
            let local = seen.entry(&g.agent_id).or_default();
            let slot = RankSlot {
                rank: rank as i32,
                agent_id: g.agent_id.clone(),
                gpu_uuid: g.uuid.clone(),
                gpu_index: g.index,
                local_rank: *local,
                local_world_size: per_agent[g.agent_id.as_str()],
            };
            *local += 1;
            slot
        })
        .collect()
}

/// `count` GPUs from `free`, on as few agents as possible; rank 0 (and its
/// host's other ranks) on `leader` when that agent is among those chosen.
pub fn by_count(
    free: &[FreeGpu],
    count: usize,
    any_agent: bool,
    leader: Option<&str>,
) -> Result<Vec<RankSlot>, Unplaceable> {
    if !any_agent {
        return Err(Unplaceable::NoAgents);
    }
    if count == 0 || free.len() < count {
        return Err(Unplaceable::InsufficientGpus {
            wanted: count,
            free: free.len(),
        });
    }
    let mut by_agent: BTreeMap<&str, Vec<&FreeGpu>> = BTreeMap::new();
    for g in free {
        by_agent.entry(&g.agent_id).or_default().push(g);
    }
    let mut agents: Vec<Vec<&FreeGpu>> = by_agent.into_values().collect();
    // Fewest hosts: an agent that fits alone (the leader if it does, else the
    // smallest such), else most-free first.
    agents.sort_by_key(|gpus| std::cmp::Reverse(gpus.len()));
    let is_leader = |g: &[&FreeGpu]| leader.is_some_and(|l| g[0].agent_id == l);
    let alone = agents
        .iter()
        .filter(|g| g.len() >= count)
        .min_by_key(|g| (!is_leader(g), g.len()));
    if let Some(fit) = alone {
        return Ok(slots(fit[..count].to_vec()));
    }
    // the leader's GPUs first when it is among the chosen agents
    let mut chosen_agents: Vec<Vec<&FreeGpu>> = Vec::new();
    let mut n = 0;
    for g in agents {
        if n >= count {
            break;
        }
        n += g.len();
        chosen_agents.push(g);
    }
    chosen_agents.sort_by_key(|g| !is_leader(g));
    let chosen: Vec<&FreeGpu> = chosen_agents.into_iter().flatten().take(count).collect();
    Ok(slots(chosen))
}

/// Exactly the GPUs named (uuids), in rank order.
pub fn by_ids(
    free: &[FreeGpu],
    known: &[String],
    ids: &[String],
) -> Result<Vec<RankSlot>, Unplaceable> {
    let unknown: Vec<String> = ids
        .iter()
        .filter(|id| !known.contains(id))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(Unplaceable::Unknown(unknown));
    }
    let busy: Vec<String> = ids
        .iter()
        .filter(|id| !free.iter().any(|g| &g.uuid == *id))
        .cloned()
        .collect();
    if !busy.is_empty() {
        return Err(Unplaceable::Busy(busy));
    }
    let mut chosen: Vec<&FreeGpu> = ids
        .iter()
        .map(|id| free.iter().find(|g| &g.uuid == id).expect("checked free"))
        .collect();
    // keep each agent's ranks contiguous, in the order the agents first appear
    let order: Vec<&str> =
        chosen
            .iter()
            .map(|g| g.agent_id.as_str())
            .fold(Vec::new(), |mut v, a| {
                if !v.contains(&a) {
                    v.push(a);
                }
                v
            });
    chosen.sort_by_key(|g| order.iter().position(|a| *a == g.agent_id).expect("listed"));
    Ok(slots(chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(spec: &[(&str, i32)]) -> Vec<FreeGpu> {
        spec.iter()
            .map(|(agent, index)| FreeGpu {
                agent_id: agent.to_string(),
                uuid: format!("{agent}-{index}"),
                index: *index,
                memory_total_bytes: 1 << 34,
            })
            .collect()
    }

    #[test]
    fn count_packs_onto_the_fewest_agents() {
        let free = gpus(&[("a", 0), ("b", 0), ("b", 1), ("c", 0), ("c", 1), ("c", 2)]);
        let s = by_count(&free, 2, true, None).unwrap();
        assert!(s.iter().all(|r| r.agent_id == "b"), "{s:?}");
        let s = by_count(&free, 4, true, None).unwrap();
        let agents: std::collections::BTreeSet<_> = s.iter().map(|r| r.agent_id.clone()).collect();
        assert_eq!(agents.len(), 2, "{s:?}");
        assert_eq!(s.iter().filter(|r| r.agent_id == "c").count(), 3);
        assert_eq!(
            s.iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        let c: Vec<_> = s
            .iter()
            .filter(|r| r.agent_id == "c")
            .map(|r| (r.local_rank, r.local_world_size))
            .collect();
        assert_eq!(c, vec![(0, 3), (1, 3), (2, 3)]);
    }

    #[test]
    fn the_leader_agent_gets_rank_0() {
        let free = gpus(&[
            ("a", 0),
            ("a", 1),
            ("b", 0),
            ("b", 1),
            ("c", 0),
            ("c", 1),
            ("c", 2),
        ]);
        let s = by_count(&free, 2, true, Some("b")).unwrap();
        assert!(s.iter().all(|r| r.agent_id == "b"), "{s:?}");
        let s = by_count(&free, 4, true, Some("a")).unwrap();
        assert_eq!(s[0].agent_id, "a", "{s:?}");
        assert_eq!(s.iter().filter(|r| r.agent_id == "a").count(), 2);
    }

    #[test]
    fn count_beyond_free_is_insufficient() {
        let free = gpus(&[("a", 0)]);
        assert_eq!(
            by_count(&free, 2, true, None),
            Err(Unplaceable::InsufficientGpus { wanted: 2, free: 1 })
        );
        assert_eq!(by_count(&[], 1, false, None), Err(Unplaceable::NoAgents));
    }

    #[test]
    fn ids_must_be_known_and_free() {
        let free = gpus(&[("a", 0), ("b", 0)]);
        let known = vec!["a-0".to_string(), "a-1".to_string(), "b-0".to_string()];
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            by_ids(&free, &known, &ids(&["zz"])),
            Err(Unplaceable::Unknown(ids(&["zz"])))
        );
        assert_eq!(
            by_ids(&free, &known, &ids(&["a-1"])),
            Err(Unplaceable::Busy(ids(&["a-1"])))
        );
        let s = by_ids(&free, &known, &ids(&["b-0", "a-0"])).unwrap();
        assert_eq!(
            (s[0].gpu_uuid.as_str(), s[1].gpu_uuid.as_str()),
            ("b-0", "a-0")
        );
    }
}

//! Gang placement: all of a training's ranks on free GPUs, or none.
//!
//! Planning is pure: [`plan_first`] and [`plan_restart`] decide from a
//! [`FleetView`] (one snapshot of the live fleet) and return the rank slots or
//! why not; the runner then holds the GPUs and writes the rank map.
//!
//! By count: pack onto as few agents as possible (the agent with the most free
//! GPUs first), so ranks share hosts and the group spans the fewest links.
//! By ids: exactly those GPUs, in rank order, each free. Rank order follows
//! agents, so ranks on one host are contiguous and `local_rank` counts up.

use crate::fleet::{Fleet, FreeGpu};
use crate::model::{GpuRequest, GpuSelection, RankSlot};
use crate::selection::{recommend, Candidate, Unsuitable};
use cohort_proto::error::reason;
use std::collections::{BTreeMap, HashSet};

/// What placement sees of the fleet, taken once.
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    /// Agents connected.
    pub agents: usize,
    /// GPUs free to take a rank (not held, no foreign process).
    pub free: Vec<FreeGpu>,
    /// Every connected GPU with its health, hold and free memory.
    pub candidates: Vec<Candidate>,
}

impl FleetView {
    pub fn of(fleet: &Fleet) -> Self {
        Self {
            agents: fleet.agent_count(),
            free: fleet.free_gpus(),
            candidates: crate::selection::candidates(fleet),
        }
    }

    fn known(&self) -> Vec<String> {
        self.candidates.iter().map(|c| c.uuid.clone()).collect()
    }
}

/// What planning decided for one training.
pub type Plan = Result<Vec<RankSlot>, Unplaceable>;

/// At most `max_gpus` (0: no bound), at least 1, of `available`.
fn auto_count(available: usize, max_gpus: u32) -> usize {
    let bound = if max_gpus == 0 {
        usize::MAX
    } else {
        max_gpus as usize
    };
    available.min(bound).max(1)
}

/// Where a new training goes: count and AUTO requests follow the recommender
/// (healthy, free GPUs with `need` bytes of memory, on the fewest hosts);
/// explicit ids are taken as given.
pub fn plan_first(view: &FleetView, request: &GpuRequest, need: u64) -> Plan {
    let count = match request.selection {
        GpuSelection::Ids { .. } => return plan_restart(view, request, &HashSet::new(), None),
        _ if view.agents == 0 => return Err(Unplaceable::NoAgents),
        GpuSelection::Count { count } => count as usize,
        GpuSelection::Auto { max_gpus } => {
            let suitable = view
                .candidates
                .iter()
                .filter(|c| c.unsuitable(need).is_none())
                .count();
            auto_count(suitable, max_gpus)
        }
    };
    let choice = recommend(&view.candidates, need, count, false);
    if let Some(why) = choice.shortfall {
        let unhealthy = choice
            .rejected
            .iter()
            .filter(|(_, u)| matches!(u, Unsuitable::Unhealthy(_)))
            .count();
        if choice.chosen.len() + unhealthy >= count {
            return Err(Unplaceable::WaitingForHealthy(why));
        }
        return Err(Unplaceable::NotSuitable(why));
    }
    let ids: Vec<String> = choice.chosen.iter().map(|c| c.uuid.clone()).collect();
    by_ids(&view.free, &view.known(), &ids)
}

/// A restart's placement: avoiding the `avoid` GPUs when possible and
/// putting rank 0 on `leader` (the agent holding the newest checkpoint) when
/// it is chosen.
pub fn plan_restart(
    view: &FleetView,
    request: &GpuRequest,
    avoid: &HashSet<String>,
    leader: Option<&str>,
) -> Plan {
    let preferred: Vec<FreeGpu> = view
        .free
        .iter()
        .filter(|g| !avoid.contains(&g.uuid))
        .cloned()
        .collect();
    let any_agent = view.agents > 0;
    let attempt = |free: &[FreeGpu]| -> Plan {
        match &request.selection {
            GpuSelection::Count { count } => by_count(free, *count as usize, any_agent, leader),
            GpuSelection::Auto { max_gpus } => {
                by_count(free, auto_count(free.len(), *max_gpus), any_agent, leader)
            }
            GpuSelection::Ids { ids } => by_ids(&view.free, &view.known(), ids),
        }
    };
    attempt(&preferred).or_else(|_| attempt(&view.free))
}

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

impl Unplaceable {
    /// The stable reason: the ErrorInfo reason of a refused CreateTraining
    /// and the prefix of a waiting training's pending reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unplaceable::NoAgents => reason::NO_AGENTS,
            Unplaceable::InsufficientGpus { .. } | Unplaceable::NotSuitable(_) => {
                reason::INSUFFICIENT_GPUS
            }
            Unplaceable::Busy(_) => reason::GPU_BUSY,
            Unplaceable::Unknown(_) => reason::GPU_NOT_FOUND,
            Unplaceable::WaitingForHealthy(_) => reason::GPU_UNHEALTHY,
        }
    }
}

impl std::fmt::Display for Unplaceable {
    /// "REASON: details", the reason from [`Unplaceable::reason`].
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

    fn candidate(agent: &str, index: i32, faults: &[&str]) -> Candidate {
        Candidate {
            uuid: format!("{agent}-{index}"),
            index,
            agent_id: agent.into(),
            agent_name: agent.into(),
            host_name: agent.into(),
            memory_total_bytes: 1 << 34,
            memory_free_bytes: 1 << 34,
            online: true,
            hold: None,
            foreign: Vec::new(),
            faults: faults.iter().map(|f| f.to_string()).collect(),
        }
    }

    fn count(n: u32) -> GpuRequest {
        GpuRequest {
            selection: GpuSelection::Count { count: n },
            queue: true,
        }
    }

    #[test]
    fn planning_decides_from_a_view_of_the_fleet() {
        let view = FleetView {
            agents: 1,
            free: gpus(&[("a", 0), ("a", 1)]),
            candidates: vec![
                candidate("a", 0, &[]),
                candidate("a", 1, &["ecc_uncorrected"]),
            ],
        };
        let need = 1 << 30;
        // Two GPUs exist, one is unhealthy: wait for it, with that reason.
        let why = plan_first(&view, &count(2), need).unwrap_err();
        assert!(matches!(why, Unplaceable::WaitingForHealthy(_)), "{why}");
        // One healthy GPU is enough for one rank.
        let slots = plan_first(&view, &count(1), need).unwrap();
        assert_eq!(slots[0].gpu_uuid, "a-0");
        // Three can never fit on two.
        let why = plan_first(&view, &count(3), need).unwrap_err();
        assert!(matches!(why, Unplaceable::NotSuitable(_)), "{why}");
        let none = FleetView::default();
        assert_eq!(
            plan_first(&none, &count(1), need),
            Err(Unplaceable::NoAgents)
        );
        // A restart avoids the GPU that failed when another is free, and
        // falls back to it when none is.
        let avoid: HashSet<String> = ["a-0".to_string()].into();
        let slots = plan_restart(&view, &count(1), &avoid, None).unwrap();
        assert_eq!(slots[0].gpu_uuid, "a-1");
        let slots = plan_restart(&view, &count(2), &avoid, None).unwrap();
        assert_eq!(slots.len(), 2);
    }
}

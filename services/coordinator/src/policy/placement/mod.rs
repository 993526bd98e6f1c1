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

use crate::fleet::{AgentProgramRoots, Fleet, FreeGpu, Hold};
use crate::model::{GpuRequest, GpuSelection, RankSlot};
use crate::selection::{choose_in, host_groups, recommend, Candidate, Unsuitable};
use cohort_proto::error::{metadata, Metadata, Reason, ServiceError};
use std::collections::{BTreeMap, HashMap, HashSet};
use tonic::Code;

/// What placement sees of the fleet: taken once per scheduling pass, then
/// kept up to date by [`FleetView::take`] as the pass places trainings (so a
/// burst of placements does not look at every GPU again for each one).
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    /// Agents connected.
    pub agents: usize,
    /// Every connected GPU with its health, hold and free memory.
    pub candidates: Vec<Candidate>,
    /// A candidate's position by GPU uuid.
    by_uuid: HashMap<String, usize>,
    /// Candidates' positions by agent (see [`host_groups`]).
    hosts: Vec<Vec<usize>>,
    /// Each connected agent's program roots.
    program_roots: HashMap<String, AgentProgramRoots>,
}

impl FleetView {
    pub fn of(fleet: &Fleet) -> Self {
        let agents = fleet.agents();
        let mut view = Self::new(agents.len(), crate::selection::candidates(fleet));
        view.program_roots = agents
            .into_iter()
            .filter(|a| !a.program_roots.is_empty())
            .map(|a| (a.id, a.program_roots))
            .collect();
        view
    }

    /// The part of the fleet that may run `team`'s program in
    /// `working_dir`: the agents with a program root open to the team
    /// holding it.
    pub fn for_program(&self, team: &str, working_dir: &str) -> Result<FleetView, Unplaceable> {
        let dir = std::path::Path::new(working_dir);
        let able: HashMap<String, AgentProgramRoots> = self
            .program_roots
            .iter()
            .filter(|(_, roots)| roots.admit(team, dir))
            .map(|(id, roots)| (id.clone(), roots.clone()))
            .collect();
        if able.is_empty() {
            return Err(Unplaceable::OutsideProgramRoots(working_dir.to_string()));
        }
        let candidates = self
            .candidates
            .iter()
            .filter(|c| able.contains_key(&c.agent_id))
            .cloned()
            .collect();
        let mut view = Self::new(able.len(), candidates);
        view.program_roots = able;
        Ok(view)
    }

    /// A fleet of `hosts` agents (`host-0`, ...) with `gpus` healthy, free
    /// GPUs of `memory` bytes each (uuids `host-3/gpu-5`): the simulator's
    /// and the tests' fleet.
    pub fn uniform(hosts: usize, gpus: usize, memory: u64) -> Self {
        let candidates = (0..hosts)
            .flat_map(|h| {
                (0..gpus).map(move |g| Candidate {
                    uuid: format!("host-{h}/gpu-{g}"),
                    index: g as i32,
                    agent_id: format!("host-{h}"),
                    agent_name: format!("host-{h}"),
                    host_name: format!("host-{h}"),
                    memory_total_bytes: memory,
                    memory_free_bytes: memory,
                    online: true,
                    hold: None,
                    foreign: Vec::new(),
                    faults: Vec::new(),
                    cordoned: None,
                })
            })
            .collect();
        Self::new(hosts, candidates)
    }

    pub fn new(agents: usize, candidates: Vec<Candidate>) -> Self {
        let by_uuid = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| (c.uuid.clone(), i))
            .collect();
        Self {
            agents,
            hosts: host_groups(&candidates),
            candidates,
            by_uuid,
            program_roots: HashMap::new(),
        }
    }

    /// GPUs free to take a rank: not held, no foreign process, not
    /// quarantined or otherwise faulty, not on a cordoned agent.
    pub fn free(&self) -> Vec<FreeGpu> {
        self.candidates
            .iter()
            .filter(|c| c.hold.is_none() && c.foreign.is_empty())
            .filter(|c| c.cordoned.is_none() && c.faults.is_empty())
            .map(|c| FreeGpu {
                agent_id: c.agent_id.clone(),
                uuid: c.uuid.clone(),
                index: c.index,
                memory_total_bytes: c.memory_total_bytes,
            })
            .collect()
    }

    /// Whether a connected agent has the GPU.
    fn knows(&self, uuid: &str) -> bool {
        self.by_uuid.contains_key(uuid)
    }

    /// Marks the GPUs of `slots` held (as the fleet now holds them).
    pub fn take(&mut self, slots: &[RankSlot], hold: impl Fn(&RankSlot) -> Hold) {
        for slot in slots {
            if let Some(&i) = self.by_uuid.get(&slot.gpu_uuid) {
                self.candidates[i].hold = Some(hold(slot));
            }
        }
    }

    /// Marks GPUs held by `hold` (a reservation in a pass, or what a
    /// hypothetical view gives back to a victim).
    pub fn hold(&mut self, uuids: &[String], hold: &Hold) {
        for uuid in uuids {
            if let Some(&i) = self.by_uuid.get(uuid) {
                self.candidates[i].hold = Some(hold.clone());
            }
        }
    }

    /// Frees GPUs whose holder is gone (or would be, in a hypothetical
    /// view): no hold, and its memory free again.
    pub fn release(&mut self, uuids: &[String]) {
        for uuid in uuids {
            if let Some(&i) = self.by_uuid.get(uuid) {
                let c = &mut self.candidates[i];
                c.hold = None;
                c.memory_free_bytes = c.memory_total_bytes;
            }
        }
    }

    /// Frees GPUs for a moment (a hypothetical plan on this very view):
    /// what they were, to [`Self::restore`] after.
    pub fn release_saving(&mut self, uuids: &[String]) -> Saved {
        let mut saved = Vec::with_capacity(uuids.len());
        for uuid in uuids {
            if let Some(&i) = self.by_uuid.get(uuid) {
                let c = &mut self.candidates[i];
                saved.push((i, c.hold.take(), c.memory_free_bytes));
                c.memory_free_bytes = c.memory_total_bytes;
            }
        }
        saved
    }

    /// Puts back what [`Self::release_saving`] (or
    /// [`Self::unhold_saving`]) took.
    pub fn restore(&mut self, saved: Saved) {
        for (i, hold, memory_free) in saved {
            let c = &mut self.candidates[i];
            c.hold = hold;
            c.memory_free_bytes = memory_free;
        }
    }

    /// Takes the holds off GPUs for a moment (nothing else), to
    /// [`Self::restore`] after.
    pub fn unhold_saving(&mut self, uuids: &[String]) -> Saved {
        let mut saved = Vec::with_capacity(uuids.len());
        for uuid in uuids {
            if let Some(&i) = self.by_uuid.get(uuid) {
                let c = &mut self.candidates[i];
                saved.push((i, c.hold.take(), c.memory_free_bytes));
            }
        }
        saved
    }

    /// Takes the holds off GPUs (a pass's reservations), nothing else.
    pub fn unhold(&mut self, uuids: &[String]) {
        for uuid in uuids {
            if let Some(&i) = self.by_uuid.get(uuid) {
                self.candidates[i].hold = None;
            }
        }
    }

    /// GPUs that could take a rank of any size now.
    pub fn free_count(&self) -> usize {
        self.candidates.iter().filter(|c| c.fits(0)).count()
    }

    /// Whether the GPU is free to take a rank of any size.
    pub fn is_free(&self, uuid: &str) -> bool {
        self.by_uuid
            .get(uuid)
            .is_some_and(|&i| self.candidates[i].fits(0))
    }
}

/// What [`FleetView::release_saving`] took: (position, hold, free memory).
pub type Saved = Vec<(usize, Option<Hold>, u64)>;

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

/// GPUs that could take a rank needing `need` bytes now.
fn suitable(view: &FleetView, need: u64) -> usize {
    view.candidates
        .iter()
        .filter(|c| c.unsuitable(need).is_none())
        .count()
}

/// A range's size on `available` GPUs: the largest that fits, else its
/// smallest (which then waits, as a count does).
fn range_count(sizes: &[u32], available: usize) -> usize {
    GpuSelection::largest_size(sizes, available)
        .unwrap_or_else(|| sizes.first().map_or(1, |&s| s as usize))
}

/// Where a new training goes: count, range and AUTO requests follow the recommender
/// (healthy, free GPUs with `need` bytes of memory, on the fewest hosts);
/// explicit ids are taken as given.
pub fn plan_first(view: &FleetView, request: &GpuRequest, need: u64) -> Plan {
    plan_first_as(view, request, need, true)
}

/// [`plan_first`]; without `explain` a shortfall is only counted (the
/// recommender's reason, which looks at every GPU again, is not built).
pub fn plan_first_as(view: &FleetView, request: &GpuRequest, need: u64, explain: bool) -> Plan {
    let count = match &request.selection {
        GpuSelection::Ids { .. } => return plan_restart(view, request, &HashSet::new(), None),
        _ if view.agents == 0 => return Err(Unplaceable::NoAgents),
        GpuSelection::Count { count } => *count as usize,
        GpuSelection::Auto { max_gpus } => auto_count(suitable(view, need), *max_gpus),
        GpuSelection::Range { sizes, .. } => range_count(sizes, suitable(view, need)),
    };
    // The usual case, a fit, allocates nothing per GPU; a shortfall asks the
    // recommender why.
    let chosen = choose_in(&view.candidates, &view.hosts, need, count, false);
    if chosen.len() == count {
        return Ok(slots(chosen.iter().map(|c| Gpu::of_candidate(c)).collect()));
    }
    if !explain {
        return Err(Unplaceable::InsufficientGpus {
            wanted: count,
            free: chosen.len(),
        });
    }
    let choice = recommend(&view.candidates, need, count, false);
    let why = choice.shortfall.unwrap_or_default();
    let unhealthy = choice
        .rejected
        .iter()
        .filter(|(_, u)| matches!(u, Unsuitable::Unhealthy(_) | Unsuitable::Cordoned(_)))
        .count();
    if choice.chosen.len() + unhealthy >= count {
        return Err(Unplaceable::WaitingForHealthy(why));
    }
    Err(Unplaceable::NotSuitable(why))
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
    let free = view.free();
    let any_agent = view.agents > 0;
    let attempt = |candidates: &[FreeGpu]| -> Plan {
        match &request.selection {
            GpuSelection::Count { count } => {
                by_count(candidates, *count as usize, any_agent, leader)
            }
            GpuSelection::Auto { max_gpus } => by_count(
                candidates,
                auto_count(candidates.len(), *max_gpus),
                any_agent,
                leader,
            ),
            GpuSelection::Range { sizes, .. } => by_count(
                candidates,
                range_count(sizes, candidates.len()),
                any_agent,
                leader,
            ),
            GpuSelection::Ids { ids } => by_ids(&free, |id| view.knows(id), ids),
        }
    };
    if !free.iter().any(|g| avoid.contains(&g.uuid)) {
        return attempt(&free);
    }
    let preferred: Vec<FreeGpu> = free
        .iter()
        .filter(|g| !avoid.contains(&g.uuid))
        .cloned()
        .collect();
    attempt(&preferred).or_else(|_| attempt(&free))
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
    /// A program whose working directory no connected agent's program
    /// roots hold.
    OutsideProgramRoots(String),
}

impl Unplaceable {
    /// The stable reason: the ErrorInfo reason of a refused CreateTraining
    /// and the prefix of a waiting training's pending reason.
    pub fn reason(&self) -> Reason {
        match self {
            Unplaceable::NoAgents => Reason::NoAgents,
            Unplaceable::InsufficientGpus { .. } | Unplaceable::NotSuitable(_) => {
                Reason::InsufficientGpus
            }
            Unplaceable::Busy(_) => Reason::GpuBusy,
            Unplaceable::Unknown(_) => Reason::GpuNotFound,
            Unplaceable::WaitingForHealthy(_) => Reason::GpuUnhealthy,
            Unplaceable::OutsideProgramRoots(_) => Reason::ProgramOutsideRoots,
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
            Unplaceable::OutsideProgramRoots(dir) => write!(
                f,
                "working_dir {dir} lies under no --program-root of a connected agent; it never runs there"
            ),
        }
    }
}

impl std::error::Error for Unplaceable {}

crate::error::from_service_errors!(Unplaceable);

/// A refused CreateTraining when queueing is off.
impl ServiceError for Unplaceable {
    fn code(&self) -> Code {
        match self {
            Unplaceable::Unknown(_) => Code::NotFound,
            _ => Code::FailedPrecondition,
        }
    }

    fn reason(&self) -> Reason {
        Unplaceable::reason(self)
    }

    /// What a client needs to act on it.
    fn metadata(&self) -> Metadata {
        let (key, value) = match self {
            Unplaceable::NoAgents => ("agents", "0".into()),
            Unplaceable::InsufficientGpus { wanted, free } => {
                ("missing", wanted.saturating_sub(*free).to_string())
            }
            Unplaceable::Busy(ids) | Unplaceable::Unknown(ids) => ("gpu_ids", ids.join(",")),
            Unplaceable::NotSuitable(why) | Unplaceable::WaitingForHealthy(why) => {
                ("why", why.clone())
            }
            Unplaceable::OutsideProgramRoots(dir) => ("working_dir", dir.clone()),
        };
        metadata([(key, value)])
    }

    fn client_message(&self) -> String {
        format!("cannot place the training now and queueing is off: {self}")
    }
}

/// A chosen GPU, borrowed from a candidate or a free GPU.
struct Gpu<'a> {
    agent_id: &'a str,
    uuid: &'a str,
    index: i32,
}

impl<'a> Gpu<'a> {
    fn of_candidate(c: &'a Candidate) -> Self {
        Self {
            agent_id: &c.agent_id,
            uuid: &c.uuid,
            index: c.index,
        }
    }

    fn of_free(g: &'a FreeGpu) -> Self {
        Self {
            agent_id: &g.agent_id,
            uuid: &g.uuid,
            index: g.index,
        }
    }
}

/// Assign ranks to the chosen GPUs (grouped by agent, in the given order).
fn slots(chosen: Vec<Gpu<'_>>) -> Vec<RankSlot> {
    // (agent, ranks on it, ranks given so far): a gang spans few agents.
    let mut agents: Vec<(&str, i32, i32)> = Vec::new();
    for g in &chosen {
        match agents.iter_mut().find(|(a, _, _)| *a == g.agent_id) {
            Some((_, n, _)) => *n += 1,
            None => agents.push((g.agent_id, 1, 0)),
        }
    }
    chosen
        .iter()
        .enumerate()
        .map(|(rank, g)| {
            let (_, of, given) = agents
                .iter_mut()
                .find(|(a, _, _)| *a == g.agent_id)
                .expect("counted above");
            let slot = RankSlot {
                rank: rank as i32,
                agent_id: g.agent_id.to_string(),
                gpu_uuid: g.uuid.to_string(),
                gpu_index: g.index,
                local_rank: *given,
                local_world_size: *of,
            };
            *given += 1;
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
        return Ok(slots(
            fit[..count].iter().map(|g| Gpu::of_free(g)).collect(),
        ));
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
    let chosen: Vec<Gpu<'_>> = chosen_agents
        .into_iter()
        .flatten()
        .take(count)
        .map(Gpu::of_free)
        .collect();
    Ok(slots(chosen))
}

/// Exactly the GPUs named (uuids), in rank order.
pub fn by_ids(
    free: &[FreeGpu],
    known: impl Fn(&str) -> bool,
    ids: &[String],
) -> Result<Vec<RankSlot>, Unplaceable> {
    let unknown: Vec<String> = ids.iter().filter(|id| !known(id)).cloned().collect();
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
    Ok(slots(chosen.into_iter().map(Gpu::of_free).collect()))
}

#[cfg(test)]
mod tests;

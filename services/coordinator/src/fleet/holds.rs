//! Which GPU each training holds: the free GPUs placement may take, and
//! the holds it took.

use super::{Fleet, LiveAgent};
use crate::model::{GpuRecord, GpuSample};

/// Who holds a GPU: a rank of an attempt of a training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub training_id: String,
    pub attempt: i32,
    pub rank: i32,
    /// The training's team: who may see which training holds the GPU.
    pub team: String,
}

impl Hold {
    /// The hold as a caller of another team sees it: busy, by nobody it
    /// may name (empty training id, rank -1).
    pub fn redacted(&self) -> Hold {
        Hold {
            training_id: String::new(),
            attempt: 0,
            rank: -1,
            team: self.team.clone(),
        }
    }
}

/// A GPU free to place a rank on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeGpu {
    pub agent_id: String,
    pub uuid: String,
    pub index: i32,
    pub memory_total_bytes: u64,
}

impl Fleet {
    /// Connected GPUs no training holds and no foreign process uses (one
    /// that is not a cohort rank, per the latest sample), agent by agent in
    /// index order.
    pub fn free_gpus(&self) -> Vec<FreeGpu> {
        let state = self.lock();
        let mut free: Vec<FreeGpu> = state
            .agents
            .values()
            .filter(|a| a.cordon.is_none())
            .flat_map(|a| {
                a.gpus
                    .iter()
                    .filter(|g| g.quarantine.is_none())
                    .map(move |g| FreeGpu {
                        agent_id: a.id.clone(),
                        uuid: g.uuid.clone(),
                        index: g.index,
                        memory_total_bytes: g.memory_total_bytes,
                    })
            })
            .filter(|g| !state.holds.contains_key(&g.uuid))
            .filter(|g| {
                !state
                    .latest
                    .get(&g.uuid)
                    .is_some_and(|s| s.processes.iter().any(|p| !p.cohort_rank))
            })
            .collect();
        free.sort_by(|a, b| (&a.agent_id, a.index).cmp(&(&b.agent_id, b.index)));
        free
    }

    /// `f` of every connected GPU (by agent name, then index) with its
    /// agent, holder and latest sample, under one look at the fleet and
    /// without copying agents (a scheduling pass reads 8,000 GPUs so).
    pub fn map_gpus<T>(
        &self,
        mut f: impl FnMut(&LiveAgent, &GpuRecord, Option<&Hold>, Option<&GpuSample>) -> T,
    ) -> Vec<T> {
        let state = self.lock();
        let mut agents: Vec<&LiveAgent> = state.agents.values().collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        let mut out = Vec::with_capacity(agents.iter().map(|a| a.gpus.len()).sum());
        for agent in agents {
            let mut gpus: Vec<&GpuRecord> = agent.gpus.iter().collect();
            gpus.sort_by_key(|g| g.index);
            for gpu in gpus {
                out.push(f(
                    agent,
                    gpu,
                    state.holds.get(&gpu.uuid),
                    state.latest.get(&gpu.uuid),
                ));
            }
        }
        out
    }

    /// Marks GPUs held by a training's attempt (all of them, atomically).
    /// Fails, holding nothing, if any of them is already held by another training.
    pub fn hold(&self, holds: Vec<(String, Hold)>) -> Result<(), String> {
        let mut state = self.lock();
        for (uuid, hold) in &holds {
            if let Some(other) = state.holds.get(uuid) {
                if other.training_id != hold.training_id {
                    return Err(uuid.clone());
                }
            }
        }
        state.holds.extend(holds);
        Ok(())
    }

    /// Frees every GPU a training holds.
    pub fn release(&self, training_id: &str) {
        self.lock()
            .holds
            .retain(|_, h| h.training_id != training_id);
    }

    pub fn holder(&self, uuid: &str) -> Option<Hold> {
        self.lock().holds.get(uuid).cloned()
    }
}

//! What each waiting training needs of the fleet — the memory of its first
//! placement per GPU, and for a program the agents that may run it —
//! remembered by training id: a config is read and estimated once, when its
//! training is first seen waiting, not at every scheduling pass. Only the
//! trainings waiting at the last pass are kept, so the memo never outgrows
//! the queue.

use crate::persistence::waiting::WaitingTraining;
use crate::persistence::{DatabaseError, Persistence};
use cohort_spec::Workload;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

/// Configs read per query.
const CHUNK: usize = 500;

/// What one training needs of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Need {
    /// Bytes per GPU of a first placement.
    pub memory: u64,
    /// A program's working directory: only agents with a program root
    /// holding it may run it.
    pub program_dir: Option<String>,
}

impl Need {
    pub fn of(config: &Workload) -> Self {
        use crate::selection::{estimate, EstimateInput};
        match config {
            Workload::Sae(sae) => Need {
                memory: estimate(&EstimateInput::from_config(sae)).total,
                program_dir: None,
            },
            Workload::Program(p) => Need {
                memory: p.memory_bytes_per_rank(),
                program_dir: Some(p.program.working_dir.clone()),
            },
        }
    }
}

/// Headroom over twice the estimate in a rank's default host-memory limit:
/// libtorch, a CUDA context, read-ahead batches.
pub const HOST_MEMORY_HEADROOM: u64 = 4 << 30;

/// The host memory each rank of `config` may use (its cgroup's limit on
/// the agent): `runtime.host_memory_gib_per_rank` when set, else twice the
/// memory estimate (a program's declared memory) plus 4 GiB — room for any
/// sound run, a bound on a runaway one.
pub fn host_memory_limit(config: &Workload) -> u64 {
    if let Workload::Sae(sae) = config {
        if let Some(gib) = sae.runtime.host_memory_gib_per_rank {
            return (gib * f64::from(1u32 << 30)) as u64;
        }
    }
    Need::of(config)
        .memory
        .saturating_mul(2)
        .saturating_add(HOST_MEMORY_HEADROOM)
}

#[derive(Debug, Clone, Default)]
pub struct MemoryNeeds {
    by_id: Arc<Mutex<HashMap<String, Need>>>,
}

impl MemoryNeeds {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Need>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the memo hold exactly the trainings of `waiting`: reads the
    /// configs of those it does not know, forgets the rest.
    pub async fn refresh(
        &self,
        db: &Persistence,
        waiting: &[WaitingTraining],
    ) -> Result<(), DatabaseError> {
        let unknown: Vec<String> = {
            let map = self.map();
            waiting
                .iter()
                .filter(|w| !map.contains_key(&w.id))
                .map(|w| w.id.clone())
                .collect()
        };
        let mut found = Vec::with_capacity(unknown.len());
        for ids in unknown.chunks(CHUNK) {
            for (id, config) in db.configs(ids.to_vec()).await? {
                found.push((id, Need::of(&config)));
            }
        }
        let live: HashSet<&str> = waiting.iter().map(|w| w.id.as_str()).collect();
        let mut map = self.map();
        map.retain(|id, _| live.contains(id.as_str()));
        map.extend(found);
        Ok(())
    }

    /// The need of a training the last refresh saw waiting.
    pub fn get(&self, training_id: &str) -> Option<Need> {
        self.map().get(training_id).cloned()
    }
}

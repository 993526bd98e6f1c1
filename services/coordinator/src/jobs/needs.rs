//! What each waiting or placed training tells the scheduler — the memory
//! of a rank per GPU, for a program the agents that may run it, its
//! preemption grace and expected duration — remembered by training id: a
//! config is read and estimated once, when its training is first seen by
//! a pass, not at every pass. Only the trainings of the last pass are
//! kept, so the memo never outgrows the queue and the fleet.

use crate::persistence::{DatabaseError, Persistence};
pub use crate::policy::Need;
use cohort_spec::Workload;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Configs read per query.
const CHUNK: usize = 500;

/// What one training tells the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub need: Need,
    /// Between a preemption notice and SIGKILL.
    pub grace: Duration,
    /// `runtime.expected_duration`, when given.
    pub expected: Option<Duration>,
    /// The built-in SAE: it checkpoints on a notice.
    pub sae: bool,
    /// It may be re-formed at another size of a range: the SAE, or a
    /// program with `elastic = true`.
    pub elastic: bool,
}

impl Profile {
    pub fn of(config: &Workload) -> Self {
        let hints = config.schedule();
        Self {
            need: Need::of(config),
            grace: hints.preemption_grace(),
            expected: hints.expected_duration(),
            sae: config.sae().is_some(),
            elastic: config.is_elastic(),
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
pub struct Profiles {
    by_id: Arc<Mutex<HashMap<String, Profile>>>,
}

impl Profiles {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Profile>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the memo hold exactly the trainings `ids`: reads the configs
    /// of those it does not know, forgets the rest.
    pub async fn refresh(&self, db: &Persistence, ids: &[&str]) -> Result<(), DatabaseError> {
        let unknown: Vec<String> = {
            let map = self.map();
            ids.iter()
                .filter(|id| !map.contains_key(**id))
                .map(|id| id.to_string())
                .collect()
        };
        let mut found = Vec::with_capacity(unknown.len());
        for chunk in unknown.chunks(CHUNK) {
            for (id, config) in db.configs(chunk.to_vec()).await? {
                found.push((id, Profile::of(&config)));
            }
        }
        let live: HashSet<&str> = ids.iter().copied().collect();
        let mut map = self.map();
        map.retain(|id, _| live.contains(id.as_str()));
        map.extend(found);
        Ok(())
    }

    /// The profile of a training the last refresh saw.
    pub fn get(&self, training_id: &str) -> Option<Profile> {
        self.map().get(training_id).cloned()
    }
}

//! The memory each waiting training's first placement needs per GPU,
//! remembered by training id: a config is read and estimated once, when its
//! training is first seen waiting, not at every scheduling pass. Only the
//! trainings waiting at the last pass are kept, so the memo never outgrows
//! the queue.

use super::memory_need;
use crate::persistence::waiting::WaitingTraining;
use crate::persistence::{DatabaseError, Persistence};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

/// Configs read per query.
const CHUNK: usize = 500;

#[derive(Debug, Clone, Default)]
pub struct MemoryNeeds {
    by_id: Arc<Mutex<HashMap<String, u64>>>,
}

impl MemoryNeeds {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the memo hold exactly the first placements among `waiting`:
    /// reads the configs of those it does not know, forgets the rest.
    pub async fn refresh(
        &self,
        db: &Persistence,
        waiting: &[WaitingTraining],
    ) -> Result<(), DatabaseError> {
        let first: Vec<&WaitingTraining> = waiting.iter().filter(|w| w.attempt == 0).collect();
        let unknown: Vec<String> = {
            let map = self.map();
            first
                .iter()
                .filter(|w| !map.contains_key(&w.id))
                .map(|w| w.id.clone())
                .collect()
        };
        let mut found = Vec::with_capacity(unknown.len());
        for ids in unknown.chunks(CHUNK) {
            for (id, config) in db.configs(ids.to_vec()).await? {
                found.push((id, memory_need(&config)));
            }
        }
        let live: HashSet<&str> = first.iter().map(|w| w.id.as_str()).collect();
        let mut map = self.map();
        map.retain(|id, _| live.contains(id.as_str()));
        map.extend(found);
        Ok(())
    }

    /// The need of a training the last refresh saw waiting for its first placement.
    pub fn get(&self, training_id: &str) -> Option<u64> {
        self.map().get(training_id).copied()
    }
}

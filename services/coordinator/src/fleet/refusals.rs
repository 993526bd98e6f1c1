//! Agent messages refused for naming what the agent does not own (ranks
//! the coordinator did not place on it), counted for the metrics endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Messages refused because they named what the agent does not own.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    rank_events: Arc<AtomicU64>,
}

impl Refusals {
    /// Rank events refused since start.
    pub fn rank_events(&self) -> u64 {
        self.rank_events.load(Ordering::Relaxed)
    }
}

impl Refusals {
    /// Counts one refused rank event.
    pub fn count_rank_event(&self) {
        self.rank_events.fetch_add(1, Ordering::Relaxed);
    }
}

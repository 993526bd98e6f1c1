//! Which GPUs a training asked for, as stored with the training (JSON).

use serde::{Deserialize, Serialize};

/// How the GPUs are chosen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuSelection {
    /// As many free GPUs as fit, at most `max_gpus` (0: no bound).
    Auto { max_gpus: u32 },
    /// This many GPUs, chosen by the coordinator.
    Count { count: u32 },
    /// Exactly these GPU uuids, in rank order.
    Ids { ids: Vec<String> },
}

/// A training's GPU request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRequest {
    pub selection: GpuSelection,
    /// Queue the training when the GPUs are not free now (else fail at once).
    pub queue: bool,
}

impl Default for GpuRequest {
    fn default() -> Self {
        Self {
            selection: GpuSelection::Auto { max_gpus: 0 },
            queue: true,
        }
    }
}

/// A malformed GPU request, naming its field in the CreateTraining request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidGpuRequest {
    pub field: &'static str,
    pub reason: String,
}

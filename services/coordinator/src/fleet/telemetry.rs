//! Telemetry as it fans out to watchers: each GPU sample joined to its agent
//! and to the training rank holding the GPU; and the aggregated view.

use super::Hold;
use crate::model::GpuSample;
use prost::bytes::Bytes;
use std::sync::OnceLock;
use std::time::Instant;

/// One GPU sample with who owns the GPU.
#[derive(Debug, Clone)]
pub struct GpuReading {
    pub agent_id: String,
    pub agent_name: String,
    pub hold: Option<Hold>,
    pub sample: GpuSample,
}

/// One agent's samples of one tick.
#[derive(Debug, Clone)]
pub struct TelemetryBatch {
    pub received: Instant,
    pub readings: Vec<GpuReading>,
    /// The readings as encoded `v1::GpuMetrics`, one per reading, in order:
    /// made once by the first WatchGpuMetrics stream that sends them
    /// (`api::telemetry::watch`) and shared by the others.
    pub encoded: OnceLock<Vec<Bytes>>,
}

impl TelemetryBatch {
    pub fn new(readings: Vec<GpuReading>) -> Self {
        Self {
            received: Instant::now(),
            readings,
            encoded: OnceLock::new(),
        }
    }
}

/// Which readings a watcher wants (empty fields match everything).
#[derive(Debug, Clone, Default)]
pub struct ReadingFilter {
    /// Agent ids or names.
    pub agents: Vec<String>,
    pub gpu_uuids: Vec<String>,
    pub training_id: String,
    /// The only team whose trainings the watcher may see named; `None`:
    /// every team's (a cluster-admin). Other teams' holds go out redacted.
    pub team: Option<String>,
}

impl ReadingFilter {
    /// The hold of `r` as this watcher may see it (`None`: as it is).
    pub fn redacted_hold(&self, r: &GpuReading) -> Option<Hold> {
        match (&self.team, &r.hold) {
            (Some(team), Some(h)) if h.team != *team => Some(h.redacted()),
            _ => None,
        }
    }

    pub fn matches(&self, r: &GpuReading) -> bool {
        (self.agents.is_empty()
            || self
                .agents
                .iter()
                .any(|a| *a == r.agent_id || *a == r.agent_name))
            && (self.gpu_uuids.is_empty() || self.gpu_uuids.contains(&r.sample.gpu_uuid))
            && (self.training_id.is_empty()
                || r.hold
                    .as_ref()
                    .is_some_and(|h| h.training_id == self.training_id))
    }
}

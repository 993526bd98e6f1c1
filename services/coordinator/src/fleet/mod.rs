//! The live fleet: which agents are connected right now, their GPUs and latest
//! samples, which GPU each training holds, and the fan-out of telemetry to
//! watchers. In memory only; the database keeps the durable part.

mod command;
mod doctor;
pub mod faults;
mod holds;
mod maintenance;
mod refusals;
mod registry;
mod relay;
mod samples;
mod telemetry;
mod watchers;

pub use command::{AgentCommand, FileChunk, FileRef, LocalRank, StartRanks};
pub use doctor::{DoctorAnswer, DoctorBusy, Doctors, MAX_DOCTORS};
pub use holds::{FreeGpu, Hold};
pub use maintenance::Draining;
pub use refusals::Refusals;
pub use registry::AgentProgramRoots;
pub use registry::{LiveAgent, Presence};
pub use relay::{Relay, RelayError};
pub use samples::Ingested;

pub use telemetry::{GpuReading, ReadingFilter, TelemetryBatch};
pub use watchers::{WatcherCounts, WatcherGuard, WatcherStats};

use crate::model::GpuSample;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Telemetry batches (one per agent report) buffered per watcher before it is
/// told it lagged: ~4 s at 1,000 agents reporting at 1 Hz. A PER_GPU watcher
/// normally trails by one coalescing window (50 ms); the rest is slack for a
/// busy machine. Only batches some receiver has not read yet are held.
pub const TELEMETRY_BUFFER: usize = 4096;
/// Presence changes buffered per subscriber before it is told it lagged.
pub const PRESENCE_BUFFER: usize = 1024;

#[derive(Default)]
struct State {
    agents: HashMap<String, LiveAgent>,
    /// Latest sample per GPU uuid.
    latest: HashMap<String, GpuSample>,
    holds: HashMap<String, Hold>,
}

/// Shared by every service; cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    state: Arc<Mutex<State>>,
    sessions: Arc<AtomicU64>,
    telemetry: broadcast::Sender<Arc<TelemetryBatch>>,
    presence: broadcast::Sender<Presence>,
    /// Telemetry batches and samples taken by [`Fleet::ingest`] since start.
    batches_ingested: Arc<AtomicU64>,
    samples_ingested: Arc<AtomicU64>,
    samples_refused: Arc<AtomicU64>,
    /// File reads on agents' hosts in flight.
    pub relay: Relay,
    /// Host doctors in flight.
    pub doctors: Doctors,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").finish_non_exhaustive()
    }
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

impl Fleet {
    pub fn new() -> Self {
        Self::with_telemetry_buffer(TELEMETRY_BUFFER)
    }

    /// A fleet whose telemetry fan-out buffers `batches` batches per
    /// receiver (see [`TELEMETRY_BUFFER`]).
    pub fn with_telemetry_buffer(batches: usize) -> Self {
        Self {
            state: Arc::default(),
            sessions: Arc::new(AtomicU64::new(1)),
            telemetry: broadcast::channel(batches.max(1)).0,
            presence: broadcast::channel(PRESENCE_BUFFER).0,
            batches_ingested: Arc::default(),
            samples_ingested: Arc::default(),
            samples_refused: Arc::default(),
            relay: Relay::default(),
            doctors: Doctors::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

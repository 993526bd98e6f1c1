//! The live fleet: which agents are connected right now, their GPUs and latest
//! samples, which GPU each training holds, and the fan-out of telemetry to
//! watchers. In memory only; the database keeps the durable part.

mod command;
mod refusals;
mod relay;
mod telemetry;
mod watchers;

pub use command::{AgentCommand, FileChunk, LocalRank, StartRanks};
pub use refusals::Refusals;
pub use relay::{Relay, RelayError};

pub use telemetry::{GpuReading, ReadingFilter, TelemetryBatch};
pub use watchers::{WatcherCounts, WatcherGuard, WatcherStats};

use crate::model::{GpuRecord, GpuSample};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

/// Telemetry batches (one per agent report) buffered per watcher before it is
/// told it lagged: ~4 s at 1,000 agents reporting at 1 Hz. A PER_GPU watcher
/// normally trails by one coalescing window (50 ms); the rest is slack for a
/// busy machine. Only batches some receiver has not read yet are held.
pub const TELEMETRY_BUFFER: usize = 4096;
/// Presence changes buffered per subscriber before it is told it lagged.
pub const PRESENCE_BUFFER: usize = 1024;

/// An agent's session began or ended (see [`Fleet::subscribe_presence`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Connected { agent_id: String, name: String },
    Disconnected { agent_id: String, name: String },
}

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

/// A connected agent's session.
#[derive(Debug, Clone)]
pub struct LiveAgent {
    pub id: String,
    pub name: String,
    pub host_name: String,
    /// Where other hosts' ranks reach this host (MASTER_ADDR when it hosts rank 0).
    pub address: String,
    pub gpus: Vec<GpuRecord>,
    pub session: u64,
    pub commands: mpsc::Sender<AgentCommand>,
    pub last_seen: Instant,
}

/// What [`Fleet::ingest`] did with an agent's samples.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ingested {
    pub accepted: usize,
    /// Samples of GPUs the agent did not register (or from an agent that
    /// is not connected).
    pub refused: usize,
    /// The GPU of the first refused sample.
    pub first_refused: Option<String>,
}

/// A GPU free to place a rank on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeGpu {
    pub agent_id: String,
    pub uuid: String,
    pub index: i32,
    pub memory_total_bytes: u64,
}

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
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) an agent's session; returns the session number that
    /// [`Fleet::disconnect`] must present, so a stale session can't remove a new one.
    pub fn connect(&self, mut agent: LiveAgent) -> u64 {
        let session = self.sessions.fetch_add(1, Ordering::Relaxed);
        agent.session = session;
        let event = Presence::Connected {
            agent_id: agent.id.clone(),
            name: agent.name.clone(),
        };
        self.lock().agents.insert(agent.id.clone(), agent);
        let _ = self.presence.send(event);
        session
    }

    /// Removes the agent if `session` is still its current one.
    pub fn disconnect(&self, agent_id: &str, session: u64) -> bool {
        let mut state = self.lock();
        if state
            .agents
            .get(agent_id)
            .is_some_and(|a| a.session == session)
        {
            let agent = state.agents.remove(agent_id).expect("present");
            for gpu in agent.gpus {
                state.latest.remove(&gpu.uuid);
            }
            let _ = self.presence.send(Presence::Disconnected {
                agent_id: agent.id,
                name: agent.name,
            });
            true
        } else {
            false
        }
    }

    pub fn touch(&self, agent_id: &str) {
        if let Some(a) = self.lock().agents.get_mut(agent_id) {
            a.last_seen = Instant::now();
        }
    }

    pub fn agent(&self, agent_id: &str) -> Option<LiveAgent> {
        self.lock().agents.get(agent_id).cloned()
    }

    pub fn agents(&self) -> Vec<LiveAgent> {
        let mut all: Vec<LiveAgent> = self.lock().agents.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// How many agents are connected (without copying them).
    pub fn agent_count(&self) -> usize {
        self.lock().agents.len()
    }

    pub fn is_connected(&self, agent_id: &str) -> bool {
        self.lock().agents.contains_key(agent_id)
    }

    /// Reads up to `length` bytes of `path` from `offset` on an agent's host
    /// (0: only its size) for `caller` (see [`relay::MAX_PENDING_PER_CALLER`]);
    /// returns the data and the file's size.
    pub async fn read_file(
        &self,
        agent_id: &str,
        caller: &str,
        path: &str,
        offset: u64,
        length: u32,
    ) -> Result<(Vec<u8>, u64), RelayError> {
        let (request_id, answer) = self.relay.start(agent_id, caller)?;
        let message = AgentCommand::ReadFile {
            request_id,
            path: path.to_string(),
            offset,
            length: length.min(relay::MAX_READ),
        };
        if !self.send(agent_id, message) {
            self.relay.forget(request_id);
            return Err(RelayError::NotConnected(agent_id.to_string()));
        }
        let got = tokio::time::timeout(relay::READ_TIMEOUT, answer).await;
        self.relay.forget(request_id);
        match got {
            Ok(Ok(d)) if d.error.is_empty() => Ok((d.data, d.file_size)),
            Ok(Ok(d)) => Err(RelayError::Refused {
                agent: agent_id.to_string(),
                reason: d.error,
            }),
            // The session ended (its waiter was dropped) or time ran out.
            Ok(Err(_)) => Err(RelayError::NotConnected(agent_id.to_string())),
            Err(_) => Err(RelayError::Timeout(
                agent_id.to_string(),
                relay::READ_TIMEOUT,
            )),
        }
    }

    /// Sends a command to an agent; false when it is not connected.
    pub fn send(&self, agent_id: &str, message: AgentCommand) -> bool {
        let Some(tx) = self.lock().agents.get(agent_id).map(|a| a.commands.clone()) else {
            return false;
        };
        tx.try_send(message).is_ok()
    }

    /// Connected GPUs no training holds and no foreign process uses (one
    /// that is not a cohort rank, per the latest sample), agent by agent in
    /// index order.
    pub fn free_gpus(&self) -> Vec<FreeGpu> {
        let state = self.lock();
        let mut free: Vec<FreeGpu> = state
            .agents
            .values()
            .flat_map(|a| {
                a.gpus.iter().map(move |g| FreeGpu {
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

    /// The latest sample of a GPU.
    pub fn latest(&self, uuid: &str) -> Option<GpuSample> {
        self.lock().latest.get(uuid).cloned()
    }

    /// The latest reading of every connected GPU, with its holder.
    pub fn snapshot(&self) -> Vec<GpuReading> {
        let state = self.lock();
        let mut readings: Vec<GpuReading> = state
            .agents
            .values()
            .flat_map(|a| {
                a.gpus.iter().filter_map(|g| {
                    state.latest.get(&g.uuid).map(|sample| GpuReading {
                        agent_id: a.id.clone(),
                        agent_name: a.name.clone(),
                        hold: state.holds.get(&g.uuid).cloned(),
                        sample: sample.clone(),
                    })
                })
            })
            .collect();
        readings
            .sort_by(|a, b| (&a.agent_name, a.sample.index).cmp(&(&b.agent_name, b.sample.index)));
        readings
    }

    /// Takes a connected agent's samples of the GPUs it registered: keeps
    /// the latest per GPU and fans the batch out to watchers, each reading
    /// joined to the training holding its GPU. Samples of any other GPU (or
    /// from an agent that is not connected) are refused and counted.
    pub fn ingest(&self, agent_id: &str, samples: Vec<GpuSample>) -> Ingested {
        let mut ingested = Ingested::default();
        let batch = {
            let mut state = self.lock();
            let state = &mut *state;
            let agent = state.agents.get(agent_id);
            let agent_name = agent.map(|a| a.name.clone()).unwrap_or_default();
            let mut readings = Vec::with_capacity(samples.len());
            for sample in samples {
                let registered =
                    agent.is_some_and(|a| a.gpus.iter().any(|g| g.uuid == sample.gpu_uuid));
                if !registered {
                    ingested.refused += 1;
                    ingested.first_refused.get_or_insert(sample.gpu_uuid);
                    continue;
                }
                state.latest.insert(sample.gpu_uuid.clone(), sample.clone());
                readings.push(GpuReading {
                    agent_id: agent_id.to_string(),
                    agent_name: agent_name.clone(),
                    hold: state.holds.get(&sample.gpu_uuid).cloned(),
                    sample,
                });
            }
            TelemetryBatch::new(readings)
        };
        ingested.accepted = batch.readings.len();
        self.samples_refused
            .fetch_add(ingested.refused as u64, Ordering::Relaxed);
        if ingested.accepted == 0 {
            return ingested;
        }
        self.batches_ingested.fetch_add(1, Ordering::Relaxed);
        self.samples_ingested
            .fetch_add(ingested.accepted as u64, Ordering::Relaxed);
        // No watcher is not an error.
        let _ = self.telemetry.send(Arc::new(batch));
        ingested
    }

    /// GPU samples refused since start (see [`Fleet::ingest`]).
    pub fn samples_refused(&self) -> u64 {
        self.samples_refused.load(Ordering::Relaxed)
    }

    /// Telemetry batches and samples ingested since start.
    pub fn ingested(&self) -> (u64, u64) {
        (
            self.batches_ingested.load(Ordering::Relaxed),
            self.samples_ingested.load(Ordering::Relaxed),
        )
    }

    /// Agent sessions beginning and ending, from now on.
    pub fn subscribe_presence(&self) -> broadcast::Receiver<Presence> {
        self.presence.subscribe()
    }

    pub fn subscribe_telemetry(&self) -> broadcast::Receiver<Arc<TelemetryBatch>> {
        self.telemetry.subscribe()
    }
}

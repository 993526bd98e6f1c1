//! The latest sample of every GPU and the telemetry fan-out they feed.

use super::{Fleet, GpuReading, TelemetryBatch};
use crate::model::GpuSample;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::broadcast;

/// What [`Fleet::ingest`] did with an agent's samples.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ingested {
    pub accepted: usize,
    /// Samples of GPUs the agent did not register (or from an agent that
    /// is not connected).
    pub refused: usize,
    /// The GPU of the first refused sample.
    pub first_refused: Option<String>,
    /// GPUs quarantined by these samples (a hardware fault), with why:
    /// marked in the fleet already; the caller stores them.
    pub quarantined: Vec<(String, String)>,
}

impl Fleet {
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
                let previous = state.latest.insert(sample.gpu_uuid.clone(), sample.clone());
                let already = agent.is_some_and(|a| {
                    a.gpus
                        .iter()
                        .any(|g| g.uuid == sample.gpu_uuid && g.quarantine.is_some())
                });
                if !already {
                    if let Some(why) = super::faults::quarantine_reason(previous.as_ref(), &sample)
                    {
                        ingested.quarantined.push((sample.gpu_uuid.clone(), why));
                    }
                }
                readings.push(GpuReading {
                    agent_id: agent_id.to_string(),
                    agent_name: agent_name.clone(),
                    hold: state.holds.get(&sample.gpu_uuid).cloned(),
                    sample,
                });
            }
            if let Some(agent) = state.agents.get_mut(agent_id) {
                for (uuid, why) in &ingested.quarantined {
                    if let Some(gpu) = agent.gpus.iter_mut().find(|g| &g.uuid == uuid) {
                        gpu.quarantine = Some(why.clone());
                    }
                }
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

    pub fn subscribe_telemetry(&self) -> broadcast::Receiver<Arc<TelemetryBatch>> {
        self.telemetry.subscribe()
    }
}

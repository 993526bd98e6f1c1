//! The agent itself: its configuration, probe, supervisor, the outbox of
//! rank events and the coordinators it dials. The session loop that drives
//! it is `connect/mod.rs` and `session.rs`; what it does with a command is
//! `commands.rs` and `crate::launch`.

use std::collections::HashMap;

use tokio::sync::mpsc;

use super::{convert, Outbox, Targets, EVENT_CHANNEL};
use crate::config::AgentConfig;
use crate::probe::GpuInfo;
use crate::supervisor::{RankEvent, RankEventKind, RankKey, Supervisor};
use crate::telemetry::{self, SharedProbe};

/// The agent: probe, supervisor and the reconnecting session loop.
pub struct Agent {
    pub(super) config: AgentConfig,
    pub(super) probe: SharedProbe,
    pub(super) gpus: Vec<GpuInfo>,
    pub(super) supervisor: Supervisor,
    pub(super) events: mpsc::Receiver<RankEvent>,
    pub(super) outbox: Outbox,
    /// Which GPU and pid each running rank has (drives the simulated load).
    pub(super) placements: HashMap<RankKey, (u32, u32)>,
    /// Notified on SIGHUP: the session ends and the next one reads the TLS
    /// files afresh.
    pub(super) reload: std::sync::Arc<tokio::sync::Notify>,
    /// Which coordinator to dial next, and the highest leader epoch seen.
    pub(super) targets: Targets,
    /// A host doctor runs now (one at a time).
    pub(super) doctor_running: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The current session's coordinator and our id there (a restart
    /// fetches checkpoints through it).
    pub(super) peer: Option<crate::program::peer::PeerLink>,
}

impl Agent {
    pub fn new(config: AgentConfig, probe: SharedProbe, gpus: Vec<GpuInfo>) -> Self {
        let (tx, events) = mpsc::channel(EVENT_CHANNEL);
        let supervisor = Supervisor::new(tx, config.stop_grace);
        let targets = Targets::new(&config.coordinator);
        Self {
            targets,
            config,
            probe,
            gpus,
            supervisor,
            events,
            outbox: Outbox::default(),
            placements: HashMap::new(),
            reload: Default::default(),
            doctor_running: Default::default(),
            peer: None,
        }
    }

    /// What to notify to reconnect with freshly read TLS files.
    pub fn reloader(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.reload.clone()
    }

    /// Notes what an event means for the GPUs, and converts it.
    pub(super) fn observe(&mut self, event: RankEvent) -> cohort_proto::v1::RankEvent {
        match &event.kind {
            RankEventKind::Started { pid } => {
                self.placements
                    .insert(event.key.clone(), (event.gpu_index, *pid));
                self.reassign(event.gpu_index);
            }
            RankEventKind::Exited(_) => {
                self.placements.remove(&event.key);
                self.reassign(event.gpu_index);
            }
            RankEventKind::Progress(_) => {}
        }
        let event = convert::rank_event(&event);
        self.outbox.number(event)
    }

    /// The GPU indices running ranks now.
    pub(crate) fn busy_gpus(&self) -> Vec<u32> {
        let mut gpus: Vec<u32> = self.placements.values().map(|(gpu, _)| *gpu).collect();
        gpus.sort_unstable();
        gpus.dedup();
        gpus
    }

    /// Tells the probe which pids now run on `gpu`.
    fn reassign(&self, gpu: u32) {
        let pids: Vec<u32> = self
            .placements
            .values()
            .filter(|(g, _)| *g == gpu)
            .map(|(_, pid)| *pid)
            .collect();
        telemetry::assign(&self.probe, gpu, &pids);
    }
}

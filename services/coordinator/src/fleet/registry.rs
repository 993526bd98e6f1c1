//! Which agents are connected now (their sessions, reached through their
//! command channels) and the presence feed of their comings and goings.

use super::{relay, AgentCommand, FileRef, Fleet, RelayError};
use crate::model::GpuRecord;
use std::sync::atomic::Ordering;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

/// An agent's session began or ended (see [`Fleet::subscribe_presence`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Connected { agent_id: String, name: String },
    Disconnected { agent_id: String, name: String },
}

/// The directories an agent runs programs from: every team's
/// (`--program-root`) and one team's (`--team-program-root`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentProgramRoots {
    pub shared: Vec<String>,
    /// (team, root).
    pub teams: Vec<(String, String)>,
}

impl AgentProgramRoots {
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty() && self.teams.is_empty()
    }

    /// Whether a program of `team` in `dir` may run on this agent.
    pub fn admit(&self, team: &str, dir: &std::path::Path) -> bool {
        let theirs = self.teams.iter().filter(|(t, _)| t == team).map(|(_, r)| r);
        self.shared
            .iter()
            .chain(theirs)
            .any(|root| dir.starts_with(root))
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
    /// Where it runs programs from (none: it runs no programs).
    pub program_roots: AgentProgramRoots,
    pub session: u64,
    pub commands: mpsc::Sender<AgentCommand>,
    pub last_seen: Instant,
    /// Why it is cordoned (no new placements); `None` when it is not.
    pub cordon: Option<String>,
    /// While it is drained: when what is left moves at once.
    pub drain_deadline: Option<chrono::DateTime<chrono::Utc>>,
}

impl Fleet {
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

    /// Reads up to `length` bytes of `file` from `offset` on an agent's host
    /// (0: only its size) for `caller` (see [`relay::MAX_PENDING_PER_CALLER`]);
    /// returns the data and the file's size.
    pub async fn read_file(
        &self,
        agent_id: &str,
        caller: &str,
        file: FileRef,
        offset: u64,
        length: u32,
    ) -> Result<(Vec<u8>, u64), RelayError> {
        let (request_id, answer) = self.relay.start(agent_id, caller)?;
        let message = AgentCommand::ReadFile {
            request_id,
            file,
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

    /// Agent sessions beginning and ending, from now on.
    pub fn subscribe_presence(&self) -> broadcast::Receiver<Presence> {
        self.presence.subscribe()
    }
}

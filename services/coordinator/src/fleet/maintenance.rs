//! Maintenance in the live fleet: which connected agents are cordoned or
//! draining, which GPUs are quarantined, and what still runs on an agent.
//! The database keeps the same marks across restarts; these are read by
//! placement at every pass.

use super::Fleet;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// A draining agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Draining {
    pub agent_id: String,
    pub name: String,
    pub deadline: DateTime<Utc>,
}

impl Fleet {
    /// Sets a connected agent's cordon (`None`: uncordoned) and drain
    /// deadline (`None`: no drain); false when it is not connected.
    pub fn set_cordon(
        &self,
        agent_id: &str,
        cordon: Option<String>,
        drain: Option<DateTime<Utc>>,
    ) -> bool {
        let mut state = self.lock();
        let Some(agent) = state.agents.get_mut(agent_id) else {
            return false;
        };
        agent.cordon = cordon;
        agent.drain_deadline = drain;
        true
    }

    /// A drain ended: the agent stays cordoned.
    pub fn set_cordon_drain_over(&self, agent_id: &str) {
        if let Some(agent) = self.lock().agents.get_mut(agent_id) {
            agent.drain_deadline = None;
        }
    }

    /// Sets a connected GPU's quarantine (`None`: released); false when no
    /// connected agent has it.
    pub fn set_quarantine(&self, uuid: &str, reason: Option<String>) -> bool {
        let mut state = self.lock();
        for agent in state.agents.values_mut() {
            if let Some(gpu) = agent.gpus.iter_mut().find(|g| g.uuid == uuid) {
                gpu.quarantine = reason;
                return true;
            }
        }
        false
    }

    /// The connected agents being drained.
    pub fn draining(&self) -> Vec<Draining> {
        self.lock()
            .agents
            .values()
            .filter_map(|a| {
                a.drain_deadline.map(|deadline| Draining {
                    agent_id: a.id.clone(),
                    name: a.name.clone(),
                    deadline,
                })
            })
            .collect()
    }

    /// The trainings holding GPUs of agent `agent_id` now, and how many
    /// ranks they have there.
    pub fn placed_on(&self, agent_id: &str) -> (BTreeSet<String>, usize) {
        let state = self.lock();
        let Some(agent) = state.agents.get(agent_id) else {
            return (BTreeSet::new(), 0);
        };
        let holds: Vec<&super::Hold> = agent
            .gpus
            .iter()
            .filter_map(|g| state.holds.get(&g.uuid))
            .collect();
        (
            holds.iter().map(|h| h.training_id.clone()).collect(),
            holds.len(),
        )
    }

    /// Whether any GPU `training_id` holds is on a draining agent.
    pub fn on_draining_agent(&self, training_id: &str) -> Option<String> {
        let state = self.lock();
        state
            .agents
            .values()
            .filter(|a| a.drain_deadline.is_some())
            .find(|a| {
                a.gpus.iter().any(|g| {
                    state
                        .holds
                        .get(&g.uuid)
                        .is_some_and(|h| h.training_id == training_id)
                })
            })
            .map(|a| a.name.clone())
    }
}

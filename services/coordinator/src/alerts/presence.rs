//! The rules over time and presence: agents gone past their grace period,
//! GPUs that stopped reporting, ECC quiet windows, and stalled trainings.

use super::evaluator::{elapsed, human, Draft, Evaluator, Level};
use crate::model::{AlertKey, AlertKind, Transition};
use chrono::{DateTime, Utc};
use std::time::Duration;

pub use crate::model::RunningTraining;

impl Evaluator {
    /// An agent's session began (a new one or a reconnect).
    pub fn agent_connected(
        &mut self,
        agent_id: &str,
        name: &str,
        now: DateTime<Utc>,
    ) -> Vec<Transition> {
        let agent = self.agents.entry(agent_id.to_string()).or_insert_with(|| {
            super::evaluator::AgentState {
                name: name.to_string(),
                disconnected_at: None,
            }
        });
        agent.name = name.to_string();
        agent.disconnected_at = None;
        self.check(
            AlertKind::AgentLost,
            agent_id,
            Level::Clear,
            Duration::ZERO,
            now,
            Draft::default,
        )
        .into_iter()
        .collect()
    }

    /// An agent's session ended; AGENT_LOST follows unless it is back within
    /// `agent_grace`.
    pub fn agent_disconnected(&mut self, agent_id: &str, name: &str, now: DateTime<Utc>) {
        let agent = self.agents.entry(agent_id.to_string()).or_insert_with(|| {
            super::evaluator::AgentState {
                name: name.to_string(),
                disconnected_at: None,
            }
        });
        if agent.disconnected_at.is_none() {
            agent.disconnected_at = Some(now);
        }
    }

    /// The agents the evaluator believes connected.
    pub fn connected_agents(&self) -> Vec<String> {
        self.agents
            .iter()
            .filter(|(_, a)| a.disconnected_at.is_none())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The time-based rules, at `now`: agents past their grace, GPUs silent
    /// for `gpu_stale_after` (their alerts resolve), ECC quiet windows.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Vec<Transition> {
        let mut out = Vec::new();
        let grace = self.settings.agent_grace;
        let gone: Vec<(String, String, DateTime<Utc>)> = self
            .agents
            .iter()
            .filter_map(|(id, a)| Some((id.clone(), a.name.clone(), a.disconnected_at?)))
            .filter(|(_, _, at)| elapsed(*at, now) >= grace)
            .collect();
        for (id, name, at) in gone {
            out.extend(self.check(
                AlertKind::AgentLost,
                &id,
                Level::Firing,
                Duration::ZERO,
                now,
                || Draft {
                    message: format!(
                        "agent {name} disconnected at {} and is not back after {}",
                        at.format("%Y-%m-%d %H:%M:%S UTC"),
                        human(grace)
                    ),
                    agent_id: Some(id.clone()),
                    value: Some(elapsed(at, now).as_secs_f64()),
                    threshold: Some(grace.as_secs_f64()),
                    ..Draft::default()
                },
            ));
        }

        let stale_after = self.settings.gpu_stale_after;
        let stale: Vec<String> = self
            .gpus
            .iter()
            .filter(|(_, g)| elapsed(g.last_seen, now) >= stale_after)
            .map(|(uuid, _)| uuid.clone())
            .collect();
        for uuid in stale {
            self.gpus.remove(&uuid);
            for kind in AlertKind::ALL.into_iter().filter(|k| k.is_gpu()) {
                let key = AlertKey {
                    kind,
                    subject: uuid.clone(),
                };
                self.pending.remove(&key);
                out.extend(self.resolve(&key, now));
            }
        }

        let uuids: Vec<String> = self.gpus.keys().cloned().collect();
        for uuid in uuids {
            out.extend(self.counters_quiet(&uuid, now));
        }
        out
    }

    /// Every RUNNING training now: stalled ones raise TRAINING_STALLED; the
    /// alerts of trainings that progressed or are no longer RUNNING resolve.
    pub fn observe_trainings(
        &mut self,
        running: &[RunningTraining],
        now: DateTime<Utc>,
    ) -> Vec<Transition> {
        let stall_after = self.settings.stall_after;
        let mut out = Vec::new();
        for t in running {
            let idle = elapsed(t.last_activity, now);
            let level = if idle >= stall_after {
                Level::Firing
            } else {
                Level::Clear
            };
            out.extend(self.check(
                AlertKind::TrainingStalled,
                &t.id,
                level,
                Duration::ZERO,
                now,
                || Draft {
                    message: format!(
                        "training {} has reported no progress for {} (threshold {})",
                        t.id,
                        human(idle),
                        human(stall_after)
                    ),
                    training_id: Some(t.id.clone()),
                    value: Some(idle.as_secs_f64()),
                    threshold: Some(stall_after.as_secs_f64()),
                    ..Draft::default()
                },
            ));
        }
        out.extend(self.resolve_not_running(AlertKind::TrainingStalled, running, now));
        out
    }

    /// Resolves the `kind` alerts of trainings that are no longer running.
    pub(super) fn resolve_not_running(
        &mut self,
        kind: AlertKind,
        running: &[RunningTraining],
        now: DateTime<Utc>,
    ) -> Vec<Transition> {
        let ended: Vec<AlertKey> = self
            .active
            .keys()
            .filter(|k| k.kind == kind)
            .filter(|k| !running.iter().any(|t| t.id == k.subject))
            .cloned()
            .collect();
        ended
            .into_iter()
            .filter_map(|key| self.resolve(&key, now))
            .collect()
    }
}

//! The pure alert evaluator: state per GPU, agent and training, fed readings,
//! presence changes and training progress with the time they happen (`now`
//! is always passed in, so tests drive it with a scripted clock). It answers
//! with the alerts to raise and resolve; it does no I/O.
//!
//! Every rule reduces its input to a [`Level`] per [`AlertKey`]: an alert is
//! raised once its condition has been `Firing` for the rule's window, and
//! resolved when the level is `Clear`. `Between` (inside the hysteresis band)
//! keeps an active alert active but restarts a pending window.

use super::settings::AlertSettings;
use crate::model::{Alert, AlertKey, AlertKind, Transition};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

/// Where a rule's input stands against its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Beyond the threshold.
    Firing,
    /// Inside the hysteresis band: neither raises nor clears.
    Between,
    /// Back to normal.
    Clear,
}

/// What an alert says when raised.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub message: String,
    pub agent_id: Option<String>,
    pub gpu_uuid: Option<String>,
    pub training_id: Option<String>,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
}

/// What the evaluator remembers of one GPU.
#[derive(Debug, Clone)]
pub(super) struct GpuState {
    pub agent_id: String,
    pub last_seen: DateTime<Utc>,
    /// The error counters (uncorrected ECC, XID) by the alert they raise.
    pub counters: HashMap<AlertKind, CounterState>,
}

/// One error counter of one GPU: its last value and when it last grew.
#[derive(Debug, Clone, Default)]
pub(super) struct CounterState {
    pub total: Option<u64>,
    pub last_increase: Option<DateTime<Utc>>,
}

/// What the evaluator remembers of one agent.
#[derive(Debug, Clone)]
pub(super) struct AgentState {
    pub name: String,
    /// `None` while connected.
    pub disconnected_at: Option<DateTime<Utc>>,
}

/// The evaluator. One per coordinator, owned by the alert task.
#[derive(Debug)]
pub struct Evaluator {
    pub(super) settings: AlertSettings,
    pub(super) active: HashMap<AlertKey, Alert>,
    /// Since when each not-yet-raised condition has been firing.
    pub(super) pending: HashMap<AlertKey, DateTime<Utc>>,
    pub(super) gpus: HashMap<String, GpuState>,
    pub(super) agents: HashMap<String, AgentState>,
}

pub(super) fn elapsed(since: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (now - since).to_std().unwrap_or(Duration::ZERO)
}

/// `90s`, `5m`, `1h30m` for messages.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h{}m", s / 3600, s % 3600 / 60),
    }
}

impl Evaluator {
    pub fn new(settings: AlertSettings) -> Self {
        Self {
            settings,
            active: HashMap::new(),
            pending: HashMap::new(),
            gpus: HashMap::new(),
            agents: HashMap::new(),
        }
    }

    pub fn settings(&self) -> &AlertSettings {
        &self.settings
    }

    /// The alerts active now, oldest first.
    pub fn active(&self) -> Vec<Alert> {
        let mut all: Vec<Alert> = self.active.values().cloned().collect();
        all.sort_by(|a, b| (a.raise_time, &a.id).cmp(&(b.raise_time, &b.id)));
        all
    }

    /// Takes over alerts that were active before a restart (from the
    /// database): they resolve like any other once their condition is
    /// observed not to hold (a GPU alert also when its GPU sends nothing for
    /// `gpu_stale_after`; AGENT_LOST when the agent connects).
    pub fn adopt(&mut self, alerts: Vec<Alert>, now: DateTime<Utc>) {
        for alert in alerts.into_iter().filter(Alert::is_active) {
            let key = alert.key();
            if alert.kind.is_gpu() {
                if let (Some(uuid), Some(agent_id)) = (&alert.gpu_uuid, &alert.agent_id) {
                    self.gpus.entry(uuid.clone()).or_insert(GpuState {
                        agent_id: agent_id.clone(),
                        last_seen: now,
                        counters: HashMap::new(),
                    });
                    if let Some(state) = self.gpus.get_mut(uuid) {
                        state.counters.entry(alert.kind).or_default().last_increase = Some(now);
                    }
                }
            }
            if alert.kind == AlertKind::AgentLost {
                if let Some(agent_id) = &alert.agent_id {
                    self.agents.entry(agent_id.clone()).or_insert(AgentState {
                        name: agent_id.clone(),
                        disconnected_at: Some(alert.raise_time),
                    });
                }
            }
            self.active.insert(key, alert);
        }
    }

    /// Applies one rule's level for `key`: raise after `window` of firing,
    /// resolve on clear.
    pub(super) fn check(
        &mut self,
        kind: AlertKind,
        subject: &str,
        level: Level,
        window: Duration,
        now: DateTime<Utc>,
        draft: impl FnOnce() -> Draft,
    ) -> Option<Transition> {
        let key = AlertKey {
            kind,
            subject: subject.to_string(),
        };
        match level {
            Level::Firing => {
                if self.active.contains_key(&key) {
                    return None;
                }
                let since = *self.pending.entry(key.clone()).or_insert(now);
                if elapsed(since, now) < window {
                    return None;
                }
                self.pending.remove(&key);
                let d = draft();
                let alert = Alert {
                    id: format!("alr-{}", uuid::Uuid::new_v4().simple()),
                    kind,
                    severity: kind.severity(),
                    message: d.message,
                    agent_id: d.agent_id,
                    gpu_uuid: d.gpu_uuid,
                    training_id: d.training_id,
                    value: d.value,
                    threshold: d.threshold,
                    raise_time: now,
                    resolve_time: None,
                };
                self.active.insert(key, alert.clone());
                Some(Transition::Raised(alert))
            }
            Level::Between => {
                self.pending.remove(&key);
                None
            }
            Level::Clear => {
                self.pending.remove(&key);
                self.resolve(&key, now)
            }
        }
    }

    pub(super) fn resolve(&mut self, key: &AlertKey, now: DateTime<Utc>) -> Option<Transition> {
        let mut alert = self.active.remove(key)?;
        alert.resolve_time = Some(now.max(alert.raise_time));
        Some(Transition::Resolved(alert))
    }
}

//! Webhooks: HTTP endpoints told when trainings end, fail or are preempted
//! and when alerts are raised (docs/api.md, "Webhooks").
//!
//! A team's hooks are stored (AddWebhook, `cohort admin webhook add`) and
//! hear their team's trainings and alerts for the events they chose; the
//! operator's (`--webhook URL`, signed with `--webhook-secret-file`) hear
//! every team's, every event. The leader announces: it follows the state
//! transitions (`state_transitions`' increasing id, from where it was when
//! it became leader) and the alert feed, and hands each announcement to
//! [`deliver`], off every request's path.

pub mod announce;
pub mod deliver;
pub mod follow;

use crate::persistence::webhooks::WebhookRecord;
use announce::Announcement;
use deliver::{Deliveries, Target};

/// The operator's hooks and where the console is.
#[derive(Debug, Clone, Default)]
pub struct WebhookSettings {
    /// `--webhook URL`, each signed with `secret`.
    pub urls: Vec<String>,
    /// `--webhook-secret-file`'s content (trimmed).
    pub secret: String,
    /// The console's base URL, for the links in bodies.
    pub console_url: Option<String>,
}

impl WebhookSettings {
    /// The operator's hooks as delivery targets (`flag-1`, `flag-2`, ...).
    pub fn targets(&self) -> Vec<Target> {
        self.urls
            .iter()
            .enumerate()
            .map(|(i, url)| Target {
                hook_id: format!("flag-{}", i + 1),
                url: url.clone(),
                format: "json".into(),
                secret: self.secret.clone(),
            })
            .collect()
    }
}

/// The settings and every hook's deliveries.
#[derive(Clone, Default)]
pub struct Webhooks {
    pub settings: WebhookSettings,
    pub deliveries: Deliveries,
}

impl std::fmt::Debug for Webhooks {
    /// Without the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("urls", &self.settings.urls)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    pub fn new(settings: WebhookSettings, deliveries: Deliveries) -> Self {
        Self {
            settings,
            deliveries,
        }
    }

    /// Hands `a` to every hook that hears it.
    pub(crate) fn announce(&self, a: &Announcement, stored: &[WebhookRecord]) {
        let team_hooks = stored
            .iter()
            .filter(|h| a.team.as_deref() == Some(h.team.as_str()))
            .filter(|h| h.events.iter().any(|e| e == a.event))
            .map(|h| Target {
                hook_id: h.id.clone(),
                url: h.url.clone(),
                format: h.format.clone(),
                secret: h.secret.clone(),
            });
        for target in self.settings.targets().into_iter().chain(team_hooks) {
            self.deliveries.send(a, target);
        }
    }
}

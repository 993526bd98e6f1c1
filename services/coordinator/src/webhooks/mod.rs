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

use crate::context::Context;
use crate::persistence::webhooks::WebhookRecord;
use announce::Announcement;
use deliver::{Deliveries, Target};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How often the transitions are looked at.
const POLL: Duration = Duration::from_secs(1);
/// Transitions read per query.
const BATCH: i64 = 200;

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
    fn announce(&self, a: &Announcement, stored: &[WebhookRecord]) {
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

/// The leader's announcing loop, until `shutdown`.
pub async fn run(ctx: Context, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    let (_, mut alerts) = ctx.alerts.subscribe();
    let Some(mut cursor) =
        crate::feed::start_cursor(&ctx.db, "webhooks", POLL, shutdown.as_mut()).await
    else {
        return;
    };
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => cursor = transitions(&ctx, cursor).await,
            alert = alerts.recv() => match alert {
                Ok(alert) if alert.resolve_time.is_none() => raised(&ctx, &alert).await,
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "webhooks: alerts raised faster than announced; some were not");
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// Announces the transitions after `cursor`; returns the new cursor. With
/// no hook at all only the cursor moves: no transition is read.
async fn transitions(ctx: &Context, mut cursor: i64) -> i64 {
    let stored = hooks(ctx).await;
    if stored.is_empty() && ctx.webhooks.settings.urls.is_empty() {
        return ctx.db.last_transition_id().await.unwrap_or(cursor);
    }
    loop {
        let batch = match ctx.db.transitions_after(cursor, BATCH).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(error = %e, "webhooks: cannot read state transitions");
                return cursor;
            }
        };
        for t in &batch {
            cursor = t.id;
            let console = ctx.webhooks.settings.console_url.as_deref();
            for a in &announce::of_transition(t, console) {
                ctx.webhooks.announce(a, &stored);
            }
        }
        if (batch.len() as i64) < BATCH {
            return cursor;
        }
    }
}

async fn raised(ctx: &Context, alert: &crate::model::Alert) {
    let team = match &alert.training_id {
        Some(id) => ctx.db.get_training(id).await.ok().flatten().map(|t| t.team),
        None => None,
    };
    let a = announce::of_alert(alert, team);
    let stored = hooks(ctx).await;
    ctx.webhooks.announce(&a, &stored);
}

/// Every stored hook (none when they cannot be read: the operator's still hear).
async fn hooks(ctx: &Context) -> Vec<WebhookRecord> {
    match ctx.db.webhooks(None).await {
        Ok(hooks) => {
            let mut ids: Vec<String> = hooks.iter().map(|h| h.id.clone()).collect();
            ids.extend(
                ctx.webhooks
                    .settings
                    .targets()
                    .into_iter()
                    .map(|t| t.hook_id),
            );
            ctx.webhooks.deliveries.retain(&ids);
            hooks
        }
        Err(e) => {
            tracing::warn!(error = %e, "webhooks: cannot read the stored hooks");
            Vec::new()
        }
    }
}

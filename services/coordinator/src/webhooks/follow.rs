//! The leader's announcing loop: the state transitions after its cursor
//! and the alert feed become announcements, handed to the hooks that hear
//! them ([`super::Webhooks::announce`]).

use super::announce;
use crate::context::Context;
use crate::persistence::webhooks::WebhookRecord;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How often the transitions are looked at.
const POLL: Duration = Duration::from_secs(1);
/// Transitions read per query.
const BATCH: i64 = 200;

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

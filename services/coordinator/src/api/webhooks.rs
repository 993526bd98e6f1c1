//! AddWebhook, ListWebhooks, RemoveWebhook: a team's webhooks, scoped like
//! its tokens (an admin its own team's, a cluster-admin any team's), each
//! change audited in its transaction. What they announce and how is
//! [`crate::webhooks`]'s.

use super::convert::timestamp;
use super::error::ApiError;
use crate::auth::secret::new_secret;
use crate::context::Context;
use crate::model::{AuditEntry, Principal};
use crate::persistence::webhooks::{Added, NewWebhook, WebhookRecord, MAX_PER_TEAM};
use crate::webhooks::announce::{EVENTS, FORMATS};
use crate::webhooks::deliver::HookStatus;
use cohort_proto::v1;
use tonic::Status;

const SERVICE: &str = "cohort.v1.AdminService";

fn message(ctx: &Context, hook: Option<WebhookRecord>, id: &str, url: &str) -> v1::Webhook {
    let HookStatus {
        delivered,
        failed,
        dropped,
        recent,
    } = ctx.webhooks.deliveries.status(id);
    let recent = recent
        .into_iter()
        .map(|r| v1::WebhookDelivery {
            id: r.id,
            event: r.event,
            training_id: r.training_id.unwrap_or_default(),
            first_try: Some(timestamp(r.first_try)),
            attempts: r.attempts,
            outcome: r.outcome.to_string(),
            last_answer: r.last_answer,
        })
        .collect();
    let mut message = v1::Webhook {
        id: id.to_string(),
        url: url.to_string(),
        events: EVENTS.iter().map(|e| e.to_string()).collect(),
        format: "json".into(),
        delivered,
        failed,
        dropped,
        recent,
        ..Default::default()
    };
    if let Some(h) = hook {
        message.team = h.team;
        message.events = h.events;
        message.format = h.format;
        message.creator = h.creator;
        message.create_time = Some(timestamp(h.create_time));
    }
    message
}

fn stored(ctx: &Context, h: WebhookRecord) -> v1::Webhook {
    let (id, url) = (h.id.clone(), h.url.clone());
    message(ctx, Some(h), &id, &url)
}

/// An http(s) URL with a host.
fn checked_url(url: &str) -> Result<(), Status> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| ApiError::field("url", "must start with http:// or https://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) || url.len() > 2048 {
        return Err(ApiError::field("url", "needs a host (and at most 2048 characters)").into());
    }
    Ok(())
}

fn checked_events(events: &[String]) -> Result<Vec<String>, Status> {
    if events.is_empty() {
        return Err(ApiError::field(
            "events",
            format!("give at least one of {}", EVENTS.join(", ")),
        )
        .into());
    }
    let mut chosen: Vec<String> = Vec::new();
    for e in events {
        if !EVENTS.contains(&e.as_str()) {
            return Err(ApiError::field(
                "events",
                format!("{e:?} is not one of {}", EVENTS.join(", ")),
            )
            .into());
        }
        if !chosen.contains(e) {
            chosen.push(e.clone());
        }
    }
    Ok(chosen)
}

pub async fn add(
    ctx: &Context,
    who: &Principal,
    team: String,
    req: v1::AddWebhookRequest,
) -> Result<v1::AddWebhookResponse, Status> {
    checked_url(&req.url)?;
    let events = checked_events(&req.events)?;
    let format = if req.format.is_empty() {
        "json".to_string()
    } else {
        req.format.clone()
    };
    if !FORMATS.contains(&format.as_str()) {
        return Err(ApiError::field(
            "format",
            format!("{format:?} is not one of {}", FORMATS.join(", ")),
        )
        .into());
    }
    let secret = new_secret()
        .map_err(|e| ApiError::Internal(format!("no randomness for the secret: {e}")))?;
    let method = format!("{SERVICE}/AddWebhook");
    let added = ctx
        .db
        .add_webhook(NewWebhook {
            team: team.clone(),
            url: req.url.clone(),
            events,
            format,
            secret: secret.clone(),
            creator: who.actor().1,
            audit: AuditEntry::ok(who, &method, "", &team),
        })
        .await
        .map_err(ApiError::from)?;
    match added {
        Added::Done(hook) => {
            tracing::info!(team = %hook.team, id = %hook.id, url = %hook.url, "webhook added");
            Ok(v1::AddWebhookResponse {
                webhook: Some(stored(ctx, hook)),
                secret,
            })
        }
        Added::Full => Err(ApiError::WebhooksFull {
            team,
            max: MAX_PER_TEAM,
        }
        .into()),
    }
}

/// `team` `None`: every team's and the operator's (a cluster-admin's ask).
pub async fn list(ctx: &Context, team: Option<&str>) -> Result<v1::ListWebhooksResponse, Status> {
    let hooks = ctx.db.webhooks(team).await.map_err(ApiError::from)?;
    let mut webhooks: Vec<v1::Webhook> = Vec::new();
    if team.is_none() {
        for target in ctx.webhooks.settings.targets() {
            webhooks.push(message(ctx, None, &target.hook_id, &target.url));
        }
    }
    webhooks.extend(hooks.into_iter().map(|h| stored(ctx, h)));
    Ok(v1::ListWebhooksResponse { webhooks })
}

/// `team` `None`: any team's (a cluster-admin's ask).
pub async fn remove(
    ctx: &Context,
    who: &Principal,
    team: Option<&str>,
    id: &str,
) -> Result<v1::Webhook, Status> {
    let method = format!("{SERVICE}/RemoveWebhook");
    let audit = AuditEntry::ok(who, &method, id, team.unwrap_or_default());
    let removed = ctx
        .db
        .remove_webhook(id, team, audit)
        .await
        .map_err(ApiError::from)?;
    match removed {
        Some(hook) => {
            tracing::info!(team = %hook.team, id = %hook.id, "webhook removed");
            Ok(stored(ctx, hook))
        }
        None => Err(ApiError::WebhookNotFound {
            team: team.unwrap_or_default().to_string(),
            id: id.to_string(),
        }
        .into()),
    }
}

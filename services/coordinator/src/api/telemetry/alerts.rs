//! One WatchAlerts stream: optionally the recently resolved alerts and the
//! active ones first, then a `caught_up` marker, then every raise and
//! resolution as it happens. A watcher that falls behind is sent `lagged`
//! (it can reopen with `include_active` to see where things stand).

use crate::alerts::{Alert, Severity};
use crate::api::convert::timestamp;
use crate::api::error::ApiError;
use crate::context::Context;
use crate::persistence::Persistence;
use cohort_proto::v1;
use cohort_proto::v1::watch_alerts_response::Event;
use std::collections::HashSet;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// At most this many resolved alerts are replayed by `resolved_within`.
pub const RESOLVED_REPLAY_LIMIT: i64 = 1000;

/// The API message of an alert.
pub fn to_proto(a: &Alert) -> v1::Alert {
    v1::Alert {
        id: a.id.clone(),
        severity: match a.severity {
            Severity::Info => v1::AlertSeverity::Info,
            Severity::Warning => v1::AlertSeverity::Warning,
            Severity::Critical => v1::AlertSeverity::Critical,
        } as i32,
        kind: a.kind.as_str().to_string(),
        message: a.message.clone(),
        agent_id: a.agent_id.clone().unwrap_or_default(),
        gpu_uuid: a.gpu_uuid.clone().unwrap_or_default(),
        training_id: a.training_id.clone().unwrap_or_default(),
        value: a.value,
        threshold: a.threshold,
        raise_time: Some(timestamp(a.raise_time)),
        resolve_time: a.resolve_time.map(timestamp),
    }
}

/// Which alerts a watcher wants.
#[derive(Debug, Clone)]
struct AlertFilter {
    min_severity: Severity,
    /// Agent ids (names in the request are resolved to ids when it opens).
    agent_ids: HashSet<String>,
    any_agent: bool,
    gpu_uuids: HashSet<String>,
    training_id: String,
}

impl AlertFilter {
    fn matches(&self, a: &Alert) -> bool {
        a.severity >= self.min_severity
            && (self.any_agent
                || a.agent_id
                    .as_ref()
                    .is_some_and(|id| self.agent_ids.contains(id)))
            && (self.gpu_uuids.is_empty()
                || a.gpu_uuid
                    .as_ref()
                    .is_some_and(|g| self.gpu_uuids.contains(g)))
            && (self.training_id.is_empty()
                || a.training_id.as_deref() == Some(self.training_id.as_str()))
    }
}

async fn filter_of(db: &Persistence, req: &v1::WatchAlertsRequest) -> Result<AlertFilter, Status> {
    let min_severity = match v1::AlertSeverity::try_from(req.min_severity) {
        Ok(v1::AlertSeverity::Unspecified) | Ok(v1::AlertSeverity::Info) => Severity::Info,
        Ok(v1::AlertSeverity::Warning) => Severity::Warning,
        Ok(v1::AlertSeverity::Critical) => Severity::Critical,
        Err(_) => {
            return Err(ApiError::field(
                "min_severity",
                format!("{} is not an alert severity", req.min_severity),
            )
            .into())
        }
    };
    let filter = req.filter.clone().unwrap_or_default();
    let mut agent_ids: HashSet<String> = filter.agents.iter().cloned().collect();
    if !filter.agents.is_empty() {
        let known = db.list_agents().await.map_err(ApiError::from)?;
        for agent in known {
            if filter.agents.contains(&agent.name) {
                agent_ids.insert(agent.id);
            }
        }
    }
    Ok(AlertFilter {
        min_severity,
        any_agent: filter.agents.is_empty(),
        agent_ids,
        gpu_uuids: filter.gpu_uuids.into_iter().collect(),
        training_id: filter.training_id,
    })
}

fn message(event: Event) -> Result<v1::WatchAlertsResponse, Status> {
    Ok(v1::WatchAlertsResponse { event: Some(event) })
}

/// WatchAlerts.
pub async fn watch_alerts(
    ctx: &Context,
    request: Request<v1::WatchAlertsRequest>,
) -> Result<Response<crate::api::BoxStream<Result<v1::WatchAlertsResponse, Status>>>, Status> {
    let who = crate::api::caller::caller(ctx, &request)?;
    let req = request.into_inner();
    let filter = filter_of(&ctx.db, &req).await?;
    let mut scope = crate::api::caller::TeamScope::new(ctx, &who);
    scope.check_filter(&filter.training_id).await?;
    let resolved_within = match &req.resolved_within {
        None => None,
        Some(d) => Some(
            Duration::try_from(*d)
                .ok()
                .and_then(|d| chrono::Duration::from_std(d).ok())
                .ok_or_else(|| {
                    ApiError::field("resolved_within", "must be a non-negative duration")
                })?,
        ),
    };
    let (active, feed) = ctx.alerts.subscribe();
    let mut first = Vec::new();
    if req.include_active {
        if let Some(within) = resolved_within {
            let since = chrono::Utc::now() - within;
            let resolved = ctx
                .db
                .alerts_resolved_since(since, RESOLVED_REPLAY_LIMIT)
                .await
                .map_err(ApiError::from)?;
            // Alerts active in the snapshot resolve on the live feed instead.
            let active_ids: HashSet<&str> = active.iter().map(|a| a.id.as_str()).collect();
            for a in resolved
                .iter()
                .filter(|a| !active_ids.contains(a.id.as_str()) && filter.matches(a))
            {
                if visible(&mut scope, a).await {
                    first.push(message(Event::Alert(to_proto(a))));
                }
            }
        }
        let mut shown = Vec::new();
        for a in active.iter().filter(|a| filter.matches(a)) {
            if visible(&mut scope, a).await {
                shown.push(a);
            }
        }
        let active = shown;
        first.extend(active.iter().map(|a| message(Event::Alert(to_proto(a)))));
        first.push(message(Event::CaughtUp(v1::AlertsCaughtUp {
            active_count: active.len() as u32,
        })));
    }
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(forward(feed, filter, scope, first, tx));
    Ok(Response::new(ctx.until_stopping(ReceiverStream::new(rx))))
}

/// Alerts about a training only reach its team (and cluster-admins); fleet
/// alerts (GPUs, agents) reach everyone.
async fn visible(scope: &mut crate::api::caller::TeamScope, a: &Alert) -> bool {
    match &a.training_id {
        Some(id) => scope.sees(id).await,
        None => true,
    }
}

async fn forward(
    mut feed: tokio::sync::broadcast::Receiver<std::sync::Arc<Alert>>,
    filter: AlertFilter,
    mut scope: crate::api::caller::TeamScope,
    first: Vec<Result<v1::WatchAlertsResponse, Status>>,
    tx: mpsc::Sender<Result<v1::WatchAlertsResponse, Status>>,
) {
    for item in first {
        if tx.send(item).await.is_err() {
            return;
        }
    }
    loop {
        let item = tokio::select! {
            _ = tx.closed() => return,
            item = feed.recv() => item,
        };
        let event = match item {
            Ok(alert) if filter.matches(&alert) && visible(&mut scope, &alert).await => {
                Event::Alert(to_proto(&alert))
            }
            Ok(_) => continue,
            Err(RecvError::Lagged(missed)) => Event::Lagged(v1::Lagged {
                missed_events: missed,
                first_missed_sequence: 0,
            }),
            Err(RecvError::Closed) => return,
        };
        if tx.send(message(event)).await.is_err() {
            return;
        }
    }
}

//! The alert task: feeds the [`Evaluator`] from the live telemetry stream,
//! agent presence, a tick for time-based rules and a periodic look at RUNNING
//! trainings; stores every raise and resolution as an `alerts` row, then
//! publishes it on the [`AlertHub`].

use super::evaluator::Evaluator;
use super::follow::TrainingTracker;
use super::hub::AlertHub;
use super::presence::RunningTraining;
use crate::fleet::{Fleet, Presence};
use crate::model::Transition;
use crate::persistence::Persistence;
use chrono::{SubsecRound, Utc};
use std::collections::HashSet;
use tokio::sync::broadcast::error::RecvError;

fn now() -> chrono::DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Runs until `shutdown` turns true.
pub async fn run(
    db: Persistence,
    fleet: Fleet,
    hub: AlertHub,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let settings = hub.settings().clone();
    let mut evaluator = Evaluator::new(settings.clone());
    // Subscribe before looking, so no change falls between.
    let mut telemetry = fleet.subscribe_telemetry();
    let mut presence = fleet.subscribe_presence();
    match db.active_alerts().await {
        Ok(active) => {
            tracing::info!(alerts = active.len(), "adopted active alerts");
            for alert in &active {
                hub.adopt(alert.clone());
            }
            evaluator.adopt(active, now());
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the active alerts"),
    }
    let mut changes = Vec::new();
    for agent in fleet.agents() {
        changes.extend(evaluator.agent_connected(&agent.id, &agent.name, now()));
    }
    apply(&db, &hub, changes).await;

    let mut tick = tokio::time::interval(
        settings
            .tick_interval
            .max(std::time::Duration::from_millis(10)),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stall = tokio::time::interval(
        settings
            .stall_check_interval
            .max(std::time::Duration::from_millis(10)),
    );
    stall.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut followed = TrainingTracker::new(settings.memory_growth_window);
    loop {
        let changes = tokio::select! {
            _ = &mut shutdown => return,
            batch = telemetry.recv() => match batch {
                Ok(batch) => {
                    let at = now();
                    batch.readings.iter().flat_map(|r| evaluator.observe(r, at)).collect()
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "alert rules missed telemetry batches");
                    Vec::new()
                }
                Err(RecvError::Closed) => return,
            },
            event = presence.recv() => match event {
                Ok(Presence::Connected { agent_id, name }) => {
                    evaluator.agent_connected(&agent_id, &name, now())
                }
                Ok(Presence::Disconnected { agent_id, name }) => {
                    evaluator.agent_disconnected(&agent_id, &name, now());
                    Vec::new()
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "alert rules missed presence changes; resyncing");
                    resync(&mut evaluator, &fleet)
                }
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => evaluator.tick(now()),
            _ = stall.tick() => match db.running_activity().await {
                Ok(running) => {
                    follow(&db, &mut followed, &running).await;
                    let mut changes = evaluator.observe_trainings(&running, now());
                    changes.extend(evaluator.observe_plateaus(&running, &followed, now()));
                    changes.extend(evaluator.observe_training_health(&running, &mut followed, now()));
                    changes
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read training progress for the stall rule");
                    Vec::new()
                }
            },
        };
        apply(&db, &hub, changes).await;
    }
}

/// Events read per query when following a training.
const EVENTS_PAGE: i64 = 1000;

/// Reads the events the tracker has not seen of each running training.
async fn follow(db: &Persistence, followed: &mut TrainingTracker, running: &[RunningTraining]) {
    followed.retain(running);
    for t in running {
        loop {
            match db
                .events_after(&t.id, followed.after_seq(&t.id), EVENTS_PAGE)
                .await
            {
                Ok(events) => {
                    followed.feed(&t.id, &events);
                    if (events.len() as i64) < EVENTS_PAGE {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(training_id = %t.id, error = %e, "cannot read progress for the training rules");
                    break;
                }
            }
        }
    }
}

/// After missed presence changes: believe the fleet.
fn resync(evaluator: &mut Evaluator, fleet: &Fleet) -> Vec<Transition> {
    let at = now();
    let live = fleet.agents();
    let live_ids: HashSet<&str> = live.iter().map(|a| a.id.as_str()).collect();
    for id in evaluator.connected_agents() {
        if !live_ids.contains(id.as_str()) {
            evaluator.agent_disconnected(&id, &id, at);
        }
    }
    live.iter()
        .flat_map(|a| evaluator.agent_connected(&a.id, &a.name, at))
        .collect()
}

/// Stores each change, then tells the watchers.
async fn apply(db: &Persistence, hub: &AlertHub, changes: Vec<Transition>) {
    for change in changes {
        let alert = change.alert();
        match &change {
            Transition::Raised(a) => tracing::warn!(alert_id = %a.id, kind = %a.kind,
                severity = a.severity.as_str(), message = %a.message, "alert raised"),
            Transition::Resolved(a) => tracing::info!(alert_id = %a.id, kind = %a.kind,
                message = %a.message, "alert resolved"),
        }
        if let Err(e) = db.record_alert(alert).await {
            tracing::warn!(alert_id = %alert.id, error = %e, "cannot store the alert");
        }
        hub.publish(change.into_alert());
    }
}

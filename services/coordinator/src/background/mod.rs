//! The coordinator's work beside the RPCs, started and stopped in one place.
//!
//! [`Tasks`](crate::tasks::Tasks) is one cancellation token and one task tracker, shared through
//! the [`Context`](crate::context::Context): the scheduler, the alert engine,
//! report writers, peer-lost decisions and the metrics endpoint are spawned
//! on it, so none is detached. [`Background::start`] is the start-up work
//! (re-adopting placed trainings, resetting agent states, starting the
//! tasks); [`Background::stop`] cancels the token and waits for every task,
//! up to a drain deadline.

mod leading;

pub use leading::{Leading, LEADER_SERVICES};

use crate::context::Context;
use std::time::Duration;

/// How long [`Background::stop`] waits for the tasks to finish.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// What [`Background::start`] started.
pub struct Background {
    ctx: Context,
    history: crate::history::Running,
    instruments: crate::instruments::Instruments,
}

impl Background {
    /// The start-up work: holds the GPUs of trainings placed before a
    /// restart (their agents reconnect), marks every agent disconnected
    /// until it does, and starts the scheduler, the start-time estimates, the sweeps' searcher, the alert engine, the
    /// telemetry history and the OpenTelemetry instruments.
    pub async fn start(ctx: &Context) -> Self {
        if let Err(e) = ctx.jobs.adopt().await {
            tracing::warn!(error = %e, "cannot adopt placed trainings");
        }
        if let Err(e) = ctx.db.disconnect_all_agents().await {
            tracing::warn!(error = %e, "cannot reset agent connection states");
        }
        ctx.tasks.spawn(ctx.jobs.clone().run(ctx.tasks.cancelled()));
        ctx.tasks
            .spawn(ctx.jobs.clone().estimate_loop(ctx.tasks.cancelled()));
        ctx.tasks
            .spawn(crate::sweeps::run(ctx.clone(), ctx.tasks.cancelled()));
        ctx.tasks.spawn(crate::webhooks::follow::run(
            ctx.clone(),
            ctx.tasks.cancelled(),
        ));
        ctx.tasks.spawn(crate::tracking::follow::run(
            ctx.clone(),
            ctx.tasks.cancelled(),
        ));
        ctx.tasks.spawn(crate::alerts::engine::run(
            ctx.db.clone(),
            ctx.fleet.clone(),
            ctx.alerts.clone(),
            ctx.tasks.cancelled(),
        ));
        ctx.tasks.spawn(crate::auth::flush_denials(
            ctx.auth.clone(),
            ctx.tasks.cancelled(),
        ));
        ctx.tasks.spawn(crate::auth::prune_audit(
            ctx.db.clone(),
            ctx.auth.audit_retention,
            ctx.tasks.cancelled(),
        ));
        let history = ctx.history.start(ctx.db.clone(), ctx.fleet.clone());
        let instruments = crate::instruments::register(ctx);
        Self {
            ctx: ctx.clone(),
            history,
            instruments,
        }
    }

    /// Stops the tasks and waits for them (report writers included) up to
    /// [`DRAIN_DEADLINE`]; the history writer flushes what it holds.
    pub async fn stop(self) {
        let left = self.ctx.tasks.drain(DRAIN_DEADLINE).await;
        if left > 0 {
            tracing::warn!(
                tasks = left,
                deadline_s = DRAIN_DEADLINE.as_secs(),
                "background tasks still running at the drain deadline"
            );
        }
        drop(self.instruments);
        self.history.stop().await;
    }
}

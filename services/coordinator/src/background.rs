//! The coordinator's work beside the RPCs, started and stopped in one place.
//!
//! [`Tasks`] is one cancellation token and one task tracker, shared through
//! the [`Context`](crate::api::Context): the scheduler, the alert engine,
//! report writers, peer-lost decisions and the metrics endpoint are spawned
//! on it, so none is detached. [`Background::start`] is the start-up work
//! (re-adopting placed trainings, resetting agent states, starting the
//! tasks); [`Background::stop`] cancels the token and waits for every task,
//! up to a drain deadline.

use crate::api::Context;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long [`Background::stop`] waits for the tasks to finish.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// One token to stop the background tasks, one tracker to wait for them.
/// Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// Runs `task` until it ends; it should watch [`Tasks::cancelled`].
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task);
    }

    /// Resolves once the background is stopping.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.token.clone().cancelled_owned()
    }

    /// Whether the background is stopping.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Cancels, then waits up to `deadline` for every task; returns how many
    /// were still running when it gave up.
    pub async fn drain(&self, deadline: Duration) -> usize {
        self.token.cancel();
        self.tracker.close();
        match tokio::time::timeout(deadline, self.tracker.wait()).await {
            Ok(()) => 0,
            Err(_) => self.tracker.len(),
        }
    }
}

/// What [`Background::start`] started.
pub struct Background {
    ctx: Context,
    history: crate::history::Running,
    instruments: crate::instruments::Instruments,
}

impl Background {
    /// The start-up work: holds the GPUs of trainings placed before a
    /// restart (their agents reconnect), marks every agent disconnected
    /// until it does, and starts the scheduler, the alert engine, the
    /// telemetry history and the OpenTelemetry instruments.
    pub async fn start(ctx: &Context) -> Self {
        if let Err(e) = ctx.jobs.adopt().await {
            tracing::warn!(error = %e, "cannot adopt placed trainings");
        }
        if let Err(e) = ctx.db.disconnect_all_agents().await {
            tracing::warn!(error = %e, "cannot reset agent connection states");
        }
        ctx.tasks.spawn(ctx.jobs.clone().run(ctx.tasks.cancelled()));
        ctx.tasks.spawn(crate::alerts::engine::run(
            ctx.db.clone(),
            ctx.fleet.clone(),
            ctx.alerts.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn drain_cancels_then_waits_for_every_task_up_to_the_deadline() {
        let tasks = Tasks::default();
        let finished = Arc::new(AtomicBool::new(false));
        let (cancelled, done) = (tasks.cancelled(), finished.clone());
        tasks.spawn(async move {
            cancelled.await;
            // Work that finishes after the stop (e.g. a report being written).
            tokio::time::sleep(Duration::from_secs(1)).await;
            done.store(true, Ordering::SeqCst);
        });
        assert_eq!(tasks.drain(Duration::from_secs(5)).await, 0);
        assert!(finished.load(Ordering::SeqCst), "awaited, not abandoned");
        assert!(tasks.is_cancelled());

        let stubborn = Tasks::default();
        stubborn.spawn(std::future::pending());
        assert_eq!(stubborn.drain(Duration::from_secs(5)).await, 1);
    }
}

//! [`Tasks`]: one cancellation token to stop the coordinator's background
//! tasks and one tracker to wait for them (see [`crate::background`]).

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

    /// Tells every task to stop, without waiting for them.
    pub fn cancel(&self) {
        self.token.cancel();
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

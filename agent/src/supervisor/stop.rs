//! Stopping one rank: SIGTERM to its group, SIGKILL after a grace period;
//! or a preemption notice: `COHORT_PREEMPTED=1` in its notice file, its
//! notice signal, SIGKILL after the grace.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::process::RankHandle;
use super::signal::kill_group;
use super::RankKey;

/// How long to wait for the kernel to deliver SIGKILL and the rank to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The process had already exited.
    AlreadyExited,
    /// It exited within the grace period after SIGTERM.
    Terminated,
    /// It ignored SIGTERM (or its notice) and was killed with SIGKILL.
    Killed,
    /// It had its notice already: this one changed nothing.
    Noticed,
    /// Even SIGKILL did not end it within the reap timeout (e.g. stuck in the
    /// kernel); it is logged and left to the monitor task.
    Stuck,
}

/// Stops one rank; owns what it needs, so it can run in a spawned task.
#[derive(Debug, Clone)]
pub struct RankStopper {
    key: RankKey,
    handle: RankHandle,
    grace: Duration,
}

impl RankStopper {
    pub(crate) fn new(key: RankKey, handle: RankHandle, grace: Duration) -> Self {
        Self { key, handle, grace }
    }

    pub fn key(&self) -> &RankKey {
        &self.key
    }

    /// Stops all of `stoppers` at once; returns their outcomes in key order.
    pub async fn stop_all(stoppers: Vec<RankStopper>) -> Vec<(RankKey, StopOutcome)> {
        let mut set = tokio::task::JoinSet::new();
        for stopper in stoppers {
            set.spawn(async move { (stopper.key.clone(), stopper.stop().await) });
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => tracing::error!(error = %e, "rank stop task failed"),
            }
        }
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        outcomes
    }

    /// Gives all of `stoppers` their notice at once (see [`Self::notice`]).
    pub async fn notice_all(stoppers: Vec<RankStopper>) -> Vec<(RankKey, StopOutcome)> {
        let mut set = tokio::task::JoinSet::new();
        for stopper in stoppers {
            set.spawn(async move { (stopper.key.clone(), stopper.notice().await) });
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => tracing::error!(error = %e, "rank notice task failed"),
            }
        }
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        outcomes
    }

    /// A preemption notice: `COHORT_PREEMPTED=1` in the rank's notice file,
    /// then its notice signal (SIGUSR1 for `cohort-rank`, SIGTERM for a
    /// program); SIGKILL if it is still there after the grace. A rank
    /// without a notice file is stopped as [`Self::stop`] does. Returns
    /// once it is reaped (or stuck); a second notice returns at once.
    pub async fn notice(self) -> StopOutcome {
        let Some(notice) = self.handle.notice_spec().cloned() else {
            return self.stop().await;
        };
        if self.handle.has_exited() {
            kill_group(self.handle.pid(), Signal::SIGKILL);
            return StopOutcome::AlreadyExited;
        }
        if !self.handle.mark_noticed() {
            return StopOutcome::Noticed;
        }
        self.handle.mark_stop_requested();
        if let Err(e) = write_notice(&notice.file).await {
            tracing::warn!(rank = %self.key, file = %notice.file.display(), error = %e, "cannot write the notice file; the signal still goes");
        }
        let pgid = self.handle.pid();
        tracing::info!(rank = %self.key, pgid, signal = ?notice.signal, grace_s = self.grace.as_secs_f64(), "preemption notice");
        kill_group(pgid, notice.signal);
        if self.handle.wait_exited(self.grace).await {
            return StopOutcome::Terminated;
        }
        tracing::warn!(rank = %self.key, pgid, "rank still there after its notice's grace: SIGKILL to its group");
        self.kill().await
    }

    /// Returns once the rank process is reaped and its group was sent SIGKILL
    /// (so nothing it forked survives), or when it is [`StopOutcome::Stuck`].
    pub async fn stop(self) -> StopOutcome {
        let pgid = self.handle.pid();
        if self.handle.has_exited() {
            kill_group(pgid, Signal::SIGKILL);
            return StopOutcome::AlreadyExited;
        }
        self.handle.mark_stop_requested();
        tracing::info!(rank = %self.key, pgid, grace_s = self.grace.as_secs_f64(), "stopping rank: SIGTERM");
        kill_group(pgid, Signal::SIGTERM);
        if self.handle.wait_exited(self.grace).await {
            return StopOutcome::Terminated;
        }
        tracing::warn!(rank = %self.key, pgid, "rank ignored SIGTERM: SIGKILL to its group");
        self.kill().await
    }

    async fn kill(&self) -> StopOutcome {
        let pgid = self.handle.pid();
        kill_group(pgid, Signal::SIGKILL);
        if self.handle.wait_exited(REAP_TIMEOUT).await {
            StopOutcome::Killed
        } else {
            tracing::error!(rank = %self.key, pgid, "rank survived SIGKILL");
            StopOutcome::Stuck
        }
    }
}

/// Writes `COHORT_PREEMPTED=1` into `file` at once (a temporary file
/// renamed over it, so a reader never sees half of it).
async fn write_notice(file: &std::path::Path) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    let tmp = file.with_extension("tmp");
    tokio::fs::write(&tmp, format!("{}\n", cohort_spec::launch::PREEMPTED_LINE)).await?;
    tokio::fs::rename(&tmp, file).await
}

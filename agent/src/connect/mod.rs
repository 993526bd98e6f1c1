//! The agent's link to the coordinator: one `AgentService.Connect` stream at a
//! time, re-dialled with backoff whenever it breaks. Ranks keep running while
//! the coordinator is away; their events wait in an [`Outbox`] and the next
//! Register reports the ranks still alive.

mod agent;
mod backoff;
mod commands;
pub mod convert;
mod doctor;
mod files;
#[cfg(test)]
mod fuzz;
mod outbox;
mod session;
mod targets;

pub use agent::Agent;
pub use backoff::Backoff;
pub use outbox::{Outbox, OUTBOX_CAPACITY};
pub use session::SessionError;
pub use targets::Targets;

use std::time::Duration;

use tokio::sync::watch;

/// The pause before dialling the next coordinator of the list (or the
/// leader a standby named).
const FOLLOW_DELAY: Duration = Duration::from_millis(100);

/// The pause (jittered: 250-750 ms) before asking again when a coordinator
/// answered UNAVAILABLE (a standby, an election, its database away): it is
/// up, and takes the session as soon as it can.
const ELECTION_RETRY: Duration = Duration::from_millis(500);

/// Capacity of the supervisor's event channel.
const EVENT_CHANNEL: usize = 1024;

/// How the agent's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// The shutdown signal was given.
    Requested,
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

impl Agent {
    /// Takes a member set a coordinator published, and keeps it in the work
    /// dir when it changed (written aside, then renamed into place).
    pub(crate) async fn learn_members(&mut self, members: &[String]) {
        let Some(learned) = self.targets.learn(members) else {
            return;
        };
        tracing::info!(coordinators = %self.targets.describe(), "learned the coordinators' member set");
        let path = self.config.work_dir.join(targets::MEMBERS_FILE);
        let aside = path.with_extension("tmp");
        let mut text = learned.join("\n");
        text.push('\n');
        let written = match tokio::fs::write(&aside, text).await {
            Ok(()) => tokio::fs::rename(&aside, &path).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep the member set");
        }
    }

    /// The member set kept by an earlier run, if any.
    async fn recall_members(&mut self) {
        let path = self.config.work_dir.join(targets::MEMBERS_FILE);
        if let Ok(text) = tokio::fs::read_to_string(&path).await {
            let members: Vec<String> = text.lines().map(str::to_string).collect();
            if self.targets.learn(&members).is_some() {
                tracing::info!(coordinators = %self.targets.describe(), "dialling the member set kept from the last run too");
            }
        }
    }

    /// Connects, serves sessions and reconnects until `shutdown` turns true;
    /// then stops every rank (SIGTERM, SIGKILL after the grace).
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Shutdown {
        self.recall_members().await;
        let mut backoff = Backoff::new(self.config.backoff_initial, self.config.backoff_max);
        let mut failures = 0u64;
        loop {
            match session::run(&mut self, &mut shutdown).await {
                Ok(()) => break,
                Err((registered, error)) => {
                    // Sent but not acknowledged: sent again next session.
                    self.outbox.session_ended();
                    if registered {
                        backoff.reset();
                        failures = 0;
                        self.targets.registered();
                    }
                    failures += 1;
                    // The next address (or the leader a standby named) is
                    // dialled at once; a round that failed everywhere backs off.
                    let delay = if self.targets.missed() {
                        if error.coordinator_busy() {
                            // A coordinator answered (a standby, an election,
                            // its database away): ask again soon.
                            backoff.reset();
                            backoff.jitter(ELECTION_RETRY)
                        } else {
                            backoff.next_delay()
                        }
                    } else {
                        FOLLOW_DELAY
                    };
                    if failures <= 3 || failures.is_power_of_two() {
                        tracing::warn!(
                            coordinators = %self.targets.describe(),
                            error = %error,
                            retry_in_ms = delay.as_millis() as u64,
                            failures,
                            "no coordinator session; reconnecting"
                        );
                    }
                    if self.idle(delay, &mut shutdown).await.is_err() {
                        break;
                    }
                }
            }
        }
        self.stop_everything().await;
        Shutdown::Requested
    }

    /// Waits `delay` while keeping rank events flowing into the outbox; a
    /// SIGHUP (new TLS files) cuts the wait short. `Err` when shutdown was
    /// requested meanwhile.
    async fn idle(
        &mut self,
        delay: Duration,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), ()> {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return Ok(()),
                _ = self.reload.notified() => return Ok(()),
                _ = stopped(shutdown) => return Err(()),
                Some(event) = self.events.recv() => {
                    let event = self.observe(event);
                    self.outbox.push(event);
                }
            }
        }
    }

    async fn stop_everything(&mut self) {
        let outcomes = self.supervisor.shutdown().await;
        if !outcomes.is_empty() {
            tracing::info!(ranks = outcomes.len(), "stopped every rank on shutdown");
        }
    }
}

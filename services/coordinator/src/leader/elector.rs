//! The election loop: every renew period a standby tries to take the lease
//! (and otherwise notes who holds it), and the leader renews it. A leader
//! whose renewal finds the lease taken is deposed at once; its writes were
//! already refused by the fence since the takeover.
//!
//! A leader that cannot reach the database keeps its role: it can write
//! nothing meanwhile (the fence needs the database too), and when the
//! database returns its renewal says whether it still leads. So one
//! coordinator on PostgreSQL rides out an outage without a restart, and of
//! several, only a lease holder the database agrees with ever writes.

use super::{Leadership, Role};
use crate::persistence::lease::{Fence, FenceState};
use crate::persistence::Persistence;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Lease timing and this coordinator's names.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// How long a lease lasts unrenewed: the longest a dead leader keeps
    /// its standbys waiting.
    pub ttl: Duration,
    /// How often the leader renews and a standby tries to take over.
    pub renew: Duration,
    /// This process, unique per start (a restarted coordinator is a new holder).
    pub holder: String,
    /// The URL clients and agents are sent to when this one leads.
    pub advertise: String,
}

impl LeaseSettings {
    pub const DEFAULT_TTL: Duration = Duration::from_secs(5);
    pub const DEFAULT_RENEW: Duration = Duration::from_secs(1);

    /// The renewal must come well inside the lease: at least twice per ttl.
    pub fn validate(&self) -> Result<(), String> {
        if self.renew.is_zero() || self.renew * 2 > self.ttl {
            return Err(format!(
                "--lease-renew ({:?}) must be positive and at most half of --lease-ttl ({:?})",
                self.renew, self.ttl
            ));
        }
        if self.advertise.is_empty() {
            return Err("--advertise is needed on PostgreSQL: the URL other coordinators send clients and agents to".into());
        }
        Ok(())
    }
}

/// The running election; [`Elector::stop`] ends it and gives the lease up.
pub struct Elector {
    task: JoinHandle<()>,
    stop: CancellationToken,
    db: Persistence,
    fence: Arc<Fence>,
    holder: String,
    advertise: String,
}

impl Elector {
    /// Starts campaigning. `db` is the unfenced handle; `fence` is the one
    /// every fenced handle of the server passes.
    pub fn start(
        db: Persistence,
        fence: Arc<Fence>,
        settings: LeaseSettings,
        leadership: Leadership,
    ) -> Self {
        let stop = CancellationToken::new();
        let holder = settings.holder.clone();
        let advertise = settings.advertise.clone();
        let task = tokio::spawn(campaign(
            db.clone(),
            fence.clone(),
            settings,
            leadership,
            stop.clone(),
        ));
        Self {
            task,
            stop,
            db,
            fence,
            holder,
            advertise,
        }
    }

    /// Stops the loop; a leader gives its lease up, so a standby takes over
    /// at its next try rather than after the lease runs out.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        if let Err(e) = self.db.forget_member(&self.advertise).await {
            tracing::debug!(error = %e, "cannot leave the member set; it lapses instead");
        }
        if let FenceState::Leading { holder, epoch } = self.fence.state() {
            self.fence.set(FenceState::Standby);
            match self.db.release_lease(&holder, epoch).await {
                Ok(()) => tracing::info!(holder = %self.holder, epoch, "gave the leader lease up"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot give the lease up; it runs out instead")
                }
            }
        }
    }
}

async fn campaign(
    db: Persistence,
    fence: Arc<Fence>,
    settings: LeaseSettings,
    leadership: Leadership,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(settings.renew);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failures = 0u32;
    let mut last_renewal = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let outcome = match leadership.role() {
            Role::Deposed { .. } => return,
            Role::Standby { .. } => try_to_lead(&db, &fence, &settings, &leadership).await,
            Role::Leader { epoch } => {
                match db.renew_lease(&settings.holder, epoch, settings.ttl).await {
                    Ok(true) => {
                        last_renewal = Instant::now();
                        Ok(())
                    }
                    Ok(false) => {
                        fence.set(FenceState::Standby);
                        let leader = db
                            .lease()
                            .await
                            .ok()
                            .filter(|l| l.live)
                            .map(|l| l.advertise);
                        tracing::error!(epoch, new_leader = ?leader,
                            "deposed: another coordinator holds the leader lease; stopping");
                        leadership.set(Role::Deposed { leader });
                        return;
                    }
                    Err(e) => {
                        if last_renewal.elapsed() > settings.ttl {
                            tracing::warn!(epoch, unrenewed_ms = last_renewal.elapsed().as_millis() as u64,
                                "the lease ran out on this side; changes wait for the database, and its next renewal says who leads");
                        }
                        Err(e)
                    }
                }
            }
        };
        // Every coordinator, leader or standby, marks itself seen; the live
        // ones are the member set agents and CLIs learn.
        let outcome = match outcome {
            Ok(()) => db
                .announce_member(&settings.advertise, members_window(&settings))
                .await
                .map(|members| leadership.set_members(members)),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                if failures <= 3 || failures.is_power_of_two() {
                    tracing::warn!(error = %e, failures, "leader election: the database did not answer");
                }
            }
        }
    }
}

/// How lately a coordinator must have marked itself seen to be a member:
/// a few renewals, so one slow tick does not drop it.
fn members_window(settings: &LeaseSettings) -> Duration {
    (settings.renew * 3).max(settings.ttl)
}

/// One standby turn: take the lease if it is free, else note who holds it.
async fn try_to_lead(
    db: &Persistence,
    fence: &Fence,
    settings: &LeaseSettings,
    leadership: &Leadership,
) -> Result<(), crate::persistence::DatabaseError> {
    if let Some(epoch) = db
        .campaign(&settings.holder, &settings.advertise, settings.ttl)
        .await?
    {
        // The fence first: the leader's work starts once the role moves.
        fence.set(FenceState::Leading {
            holder: settings.holder.clone(),
            epoch,
        });
        tracing::info!(epoch, advertise = %settings.advertise, "took the leader lease: leading");
        leadership.set(Role::Leader { epoch });
        return Ok(());
    }
    let lease = db.lease().await?;
    let leader = lease.live.then_some(lease.advertise);
    if let Role::Standby { leader: known } = leadership.role() {
        if known != leader {
            tracing::info!(leader = ?leader, epoch = lease.epoch, "standing by");
        }
    }
    leadership.set(Role::Standby { leader });
    Ok(())
}

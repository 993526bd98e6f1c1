//! The leader's work, started when this coordinator becomes leader: the
//! background ([`Background`]: adopting placed
//! trainings, the scheduler and runner, alerts, history) and SERVING for
//! the services only a leader offers in full.

use super::Background;
use crate::context::Context;
use crate::leader::Role;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Services reported NOT_SERVING on a standby: changes (and agents'
/// sessions) go to the leader. Health of "" stays SERVING on every
/// coordinator, which does answer reads.
pub const LEADER_SERVICES: &[&str] = &[
    "cohort.v1.TrainingService",
    "cohort.v1.AgentService",
    "cohort.v1.SweepService",
];

/// Waits for leadership, then runs the leader's work until [`Leading::stop`].
pub struct Leading {
    ctx: Context,
    background: Arc<Mutex<Option<Background>>>,
    waiter: JoinHandle<()>,
}

impl Leading {
    /// Starts the leader's work now if this coordinator leads, or as soon
    /// as it does.
    pub async fn start(ctx: &Context, health: HealthReporter) -> Self {
        let background = Arc::new(Mutex::new(None));
        if !ctx.leadership.is_leader() {
            set(&health, ServingStatus::NotServing).await;
        }
        let waiter = {
            let (ctx, background) = (ctx.clone(), background.clone());
            let mut role = ctx.leadership.subscribe();
            tokio::spawn(async move {
                if role
                    .wait_for(|r| matches!(r, Role::Leader { .. }))
                    .await
                    .is_err()
                {
                    return;
                }
                let mut slot = background.lock().await;
                *slot = Some(Background::start(&ctx).await);
                ctx.leadership.set_working(true);
                set(&health, ServingStatus::Serving).await;
                tracing::info!(epoch = ctx.leadership.epoch(), "leader's work started");
            })
        };
        Self {
            ctx: ctx.clone(),
            background,
            waiter,
        }
    }

    /// Stops the leader's work (waiting for it, up to the drain deadline),
    /// or the wait for leadership.
    pub async fn stop(self) {
        self.ctx.leadership.set_working(false);
        self.waiter.abort();
        let _ = self.waiter.await;
        let started = self.background.lock().await.take();
        match started {
            Some(background) => background.stop().await,
            None => {
                self.ctx
                    .tasks
                    .drain(crate::background::DRAIN_DEADLINE)
                    .await;
            }
        }
    }

    /// Deposed: stops at once. Nothing is drained: the fence refuses every
    /// write already, and the process ends next.
    pub fn abandon(self) {
        self.ctx.leadership.set_working(false);
        self.waiter.abort();
        self.ctx.tasks.cancel();
    }
}

async fn set(health: &HealthReporter, status: ServingStatus) {
    for service in LEADER_SERVICES {
        health.set_service_status(*service, status).await;
    }
}

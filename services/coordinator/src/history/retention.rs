//! The retention task: every `retention_interval` it moves raw samples older
//! than the raw window into 1-minute rollups and deletes rollups older than
//! the rollup window (see `Persistence::gpu_metrics_retention`). "Now" comes
//! from a [`Clock`], so tests drive it with a fake one.

use super::{Clock, HistorySettings};
use crate::persistence::gpu_metrics::RetentionPass;
use crate::persistence::{DatabaseError, Persistence};
use std::sync::Arc;
use tokio::sync::watch;

/// Enforces the retention windows of the GPU metrics history.
#[derive(Debug, Clone)]
pub struct Retention {
    db: Persistence,
    clock: Arc<dyn Clock>,
    settings: HistorySettings,
}

impl Retention {
    pub fn new(db: Persistence, clock: Arc<dyn Clock>, settings: HistorySettings) -> Self {
        Self {
            db,
            clock,
            settings,
        }
    }

    /// The raw and rollup cutoffs (epoch ms) at the clock's now: raw samples
    /// before the first are rolled up (it is rounded down to a whole minute,
    /// so only complete minutes are), rollups of minutes starting before the
    /// second are deleted.
    pub fn cutoffs(&self) -> (i64, i64) {
        let now = self.clock.now().timestamp_millis();
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        (
            now.saturating_sub(ms(self.settings.raw_retention)),
            now.saturating_sub(ms(self.settings.rollup_retention)),
        )
    }

    /// One pass at the clock's now.
    pub async fn run_once(&self) -> Result<RetentionPass, DatabaseError> {
        let (raw, rollup) = self.cutoffs();
        let pass = self.db.gpu_metrics_retention(raw, rollup).await?;
        if pass != RetentionPass::default() {
            tracing::info!(
                raw_rolled_up = pass.raw_rolled_up,
                rollups_written = pass.rollups_written,
                rollups_expired = pass.rollups_expired,
                "gpu metrics retention pass"
            );
        }
        Ok(pass)
    }

    /// Passes every `retention_interval` (the first at once) until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.settings.retention_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = super::stopped(&mut stop) => return,
                _ = tick.tick() => {
                    if let Err(e) = self.run_once().await {
                        tracing::warn!(error = %e, "gpu metrics retention pass failed");
                    }
                }
            }
        }
    }
}

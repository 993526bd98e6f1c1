//! The teams' decayed usage (fair share's measure): every
//! [`USAGE_EVERY`] the leader ages each team's GPU-seconds by the
//! half-life and adds the GPUs it holds over the time since.

use super::Jobs;
use crate::persistence::DatabaseError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How often usage is accrued.
pub const USAGE_EVERY: Duration = Duration::from_secs(15);
/// The most time one accrual bills (a coordinator that was down, or a
/// takeover, does not bill the gap).
const MAX_BILLED: Duration = Duration::from_secs(60);

/// When usage was last accrued by this coordinator.
#[derive(Debug, Clone, Default)]
pub struct UsageClock {
    last: Arc<Mutex<Option<Instant>>>,
}

impl Jobs {
    /// Accrues the teams' usage when [`USAGE_EVERY`] has passed.
    pub(super) async fn accrue_usage(&self) -> Result<(), DatabaseError> {
        {
            let mut last = self
                .usage
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|t| t.elapsed() < USAGE_EVERY) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        let held: HashMap<String, i64> = self
            .db
            .team_usage()
            .await?
            .into_iter()
            .map(|(team, usage)| (team, usage.gpus))
            .filter(|(_, gpus)| *gpus > 0)
            .collect();
        self.db
            .accrue_usage(held, self.settings.fair_share_half_life, MAX_BILLED)
            .await
    }
}

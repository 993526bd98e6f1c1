//! Placing an attempt (GPU holds, the rank map, a MASTER_PORT, StartRanks to
//! the agents) and stopping one.

use super::{commands, hold_of, Jobs};
use crate::model::{JobState, Placement, RankSlot, RankState, Training};
use crate::persistence::DatabaseError;
use std::collections::HashSet;

/// The most published checkpoints a StartRanks names (`checkpoint.keep` is
/// rarely more than a handful).
const MAX_PUBLISHED: i64 = 64;

impl Jobs {
    /// A MASTER_PORT on `host` that no placed training uses, from a random
    /// point of the configured range.
    async fn master_port(&self, host: &str) -> Result<u16, DatabaseError> {
        let used: HashSet<u16> = self
            .db
            .master_ports_in_use(host)
            .await?
            .into_iter()
            .filter_map(|p| u16::try_from(p).ok())
            .collect();
        let range = self.settings.master_ports.clone();
        let span = u64::from(*range.end() - *range.start()) + 1;
        let offset = (uuid::Uuid::new_v4().as_u128() % u128::from(span)) as u64;
        Ok((0..span)
            .map(|i| *range.start() + ((offset + i) % span) as u16)
            .find(|p| !used.contains(p))
            .unwrap_or(*range.start()))
    }

    /// Place a training: hold its GPUs, persist the rank map (SCHEDULED), and
    /// send each agent its ranks.
    pub(super) async fn start(
        &self,
        training: &Training,
        slots: Vec<RankSlot>,
    ) -> Result<(), DatabaseError> {
        let attempt = training.attempt + 1;
        let holds = slots
            .iter()
            .map(|s| (s.gpu_uuid.clone(), hold_of(training, attempt, s.rank)))
            .collect();
        if self.fleet.hold(holds).is_err() {
            return Ok(()); // raced with another placement: next pass
        }
        let Some(leader) = self.fleet.agent(&slots[0].agent_id) else {
            self.fleet.release(&training.id);
            return Ok(());
        };
        let master_addr = if leader.address.is_empty() {
            leader.host_name.clone()
        } else {
            leader.address.clone()
        };
        let master_port = match self.master_port(&master_addr).await {
            Ok(p) => p,
            Err(e) => {
                self.fleet.release(&training.id);
                return Err(e);
            }
        };
        let placement = Placement {
            master_port,
            master_addr,
            slots,
        };
        let hosts: HashSet<&str> = placement
            .slots
            .iter()
            .map(|s| s.agent_id.as_str())
            .collect();
        let agents = hosts.len();
        let reason = format!(
            "placed {} ranks on {agents} agent(s)",
            placement.slots.len(),
        );
        let placed = match self
            .db
            .place_training(&training.id, placement.clone(), &reason)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                self.fleet.release(&training.id);
                return Err(e);
            }
        };
        self.track(&placed);
        self.rt().teardown_since.remove(&placed.id);
        tracing::info!(training_id = %placed.id, attempt, world_size = placed.world_size,
            master = %format!("{}:{}", placement.master_addr, placement.master_port), "training placed");
        let config = self.launch_config(&placed);
        // The wait began at creation, or when the previous attempt ended.
        let waited_since = if placed.attempt <= 1 {
            training.create_time
        } else {
            training.update_time
        };
        let trace = self
            .rt()
            .lifecycle
            .placed(&placed, waited_since.into(), agents);
        let published = self.published_checkpoints(&placed).await?;
        if let Err(agent) = commands::start_ranks(
            &self.fleet,
            &placed,
            &placement,
            &config,
            &trace,
            &published,
        ) {
            let why = format!("agent {agent} went away before its ranks started");
            self.stop_attempt(&placed, &why).await;
            self.finish(&placed.id, JobState::Queued, &why).await?;
        }
        Ok(())
    }

    /// The step checkpoints earlier attempts published (recorded while their
    /// attempt was current), newest first, as many as the training keeps:
    /// the only ones the new attempt's ranks may resume from.
    async fn published_checkpoints(
        &self,
        training: &Training,
    ) -> Result<Vec<(i32, i64)>, DatabaseError> {
        if training.attempt <= 1 {
            return Ok(Vec::new());
        }
        let keep = training.config.checkpoint.keep.clamp(1, MAX_PUBLISHED) as usize;
        Ok(self
            .db
            .checkpoints(&training.id)
            .await?
            .into_iter()
            .filter(|c| !c.best && c.attempt < training.attempt)
            .rev()
            .take(keep)
            .map(|c| (c.attempt, c.step))
            .collect())
    }

    /// The config the ranks get: the training's, with the collective timeout
    /// kept below the hang deadline so ranks fail on their own first.
    fn launch_config(&self, training: &Training) -> cohort_spec::TrainingConfig {
        let mut config = training.config.clone();
        let cap = self.settings.hang_floor.as_secs_f64() / 2.0;
        if config.runtime.collective_timeout_s > cap {
            config.runtime.collective_timeout_s = cap;
        }
        config
    }

    /// Stop an attempt's ranks everywhere and mark the live ones STOPPED.
    pub(super) async fn stop_attempt(&self, training: &Training, reason: &str) {
        let ranks = match self.db.ranks(&training.id, training.attempt).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(training_id = %training.id, error = %e, "cannot read ranks to stop");
                return;
            }
        };
        commands::stop_ranks(
            &self.fleet,
            training,
            &ranks,
            self.settings.stop_grace,
            reason,
        );
        if let Err(e) = self
            .db
            .end_live_ranks(&training.id, training.attempt, RankState::Stopped)
            .await
        {
            tracing::warn!(training_id = %training.id, error = %e, "cannot mark ranks stopped");
        }
    }
}

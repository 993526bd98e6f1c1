//! Placing an attempt (GPU holds, the rank map, a MASTER_PORT, StartRanks to
//! the agents) and stopping one.

use super::lifecycle::AttemptSpans;
use super::{commands, Jobs};
use crate::model::{JobState, Placement, RankSlot, RankState, Training};
use crate::persistence::placements::{NewPlacement, Placed};
use crate::persistence::DatabaseError;
use std::collections::{HashMap, HashSet};

/// The most published checkpoints a StartRanks names (`checkpoint.keep` is
/// rarely more than a handful).
const MAX_PUBLISHED: i64 = 64;

/// At most this many placements are written in one transaction (so a
/// burst does not hold the database's writer for long).
pub(super) const PLACE_BATCH: usize = 32;

/// A training a pass chose GPUs for; the fleet already holds them.
#[derive(Debug)]
pub(super) struct Chosen {
    pub id: String,
    pub slots: Vec<RankSlot>,
    /// It runs beyond its team's guarantee.
    pub borrowing: bool,
}

/// A MASTER_PORT of `range` not in `used`, from a random point of the range.
fn free_port(range: &std::ops::RangeInclusive<u16>, used: &HashSet<u16>) -> u16 {
    let span = u64::from(*range.end() - *range.start()) + 1;
    let offset = (uuid::Uuid::new_v4().as_u128() % u128::from(span)) as u64;
    (0..span)
        .map(|i| *range.start() + ((offset + i) % span) as u16)
        .find(|p| !used.contains(p))
        .unwrap_or(*range.start())
}

impl Jobs {
    /// Place what a pass chose: the rank maps of all of them written in one
    /// transaction (SCHEDULED), then each agent sent its ranks. A training
    /// that moved on meanwhile (cancelled) is skipped and its GPUs freed; a
    /// database failure frees every chosen GPU and places none.
    pub(super) async fn start_all(&self, chosen: Vec<Chosen>) -> Result<(), DatabaseError> {
        let mut first_error = None;
        let mut chosen = chosen.into_iter().peekable();
        while chosen.peek().is_some() {
            let batch: Vec<Chosen> = chosen.by_ref().take(PLACE_BATCH).collect();
            let ids: Vec<String> = batch.iter().map(|c| c.id.clone()).collect();
            let placed = match self.place_all(batch).await {
                Ok(placed) => placed,
                Err(e) => {
                    let rest: Vec<String> = chosen.map(|c| c.id).collect();
                    for id in ids.iter().chain(&rest) {
                        self.fleet.release(id);
                    }
                    return Err(e);
                }
            };
            for (id, placement, outcome) in placed {
                match outcome {
                    Ok(placed) => {
                        // One agent's trouble does not keep the others' ranks waiting.
                        if let Err(e) = self.launch(&placed, &placement).await {
                            tracing::warn!(training_id = %id, error = %e, "launch failed");
                            first_error.get_or_insert(e);
                        }
                    }
                    Err(e) => {
                        self.fleet.release(&id);
                        tracing::info!(training_id = %id, error = %e,
                            "not placed: it moved on since the pass began");
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The database half of [`Jobs::start_all`]: a MASTER_PORT each (one
    /// read of the ports in use on the hosts of rank 0), then the rank maps
    /// written together; whether each training may still be placed is
    /// decided inside that transaction. Answers (id, placement, outcome).
    #[allow(clippy::type_complexity)]
    async fn place_all(
        &self,
        chosen: Vec<Chosen>,
    ) -> Result<Vec<(String, Placement, Result<Placed, DatabaseError>)>, DatabaseError> {
        let mut ready = Vec::with_capacity(chosen.len());
        for c in chosen {
            let Some(leader) = self.fleet.agent(&c.slots[0].agent_id) else {
                self.fleet.release(&c.id); // its agent left
                continue;
            };
            let master_addr = if leader.address.is_empty() {
                leader.host_name.clone()
            } else {
                leader.address.clone()
            };
            ready.push((c.id, master_addr, c.slots, c.borrowing));
        }
        let hosts: HashSet<String> = ready.iter().map(|(_, host, ..)| host.clone()).collect();
        let mut used: HashMap<String, HashSet<u16>> = HashMap::new();
        for (host, port) in self.db.master_ports_on(hosts.into_iter().collect()).await? {
            if let Ok(port) = u16::try_from(port) {
                used.entry(host).or_default().insert(port);
            }
        }
        let mut planned = Vec::with_capacity(ready.len());
        for (id, master_addr, slots, borrowing) in ready {
            let taken = used.entry(master_addr.clone()).or_default();
            let master_port = free_port(&self.settings.master_ports, taken);
            taken.insert(master_port);
            let agents: HashSet<&str> = slots.iter().map(|s| s.agent_id.as_str()).collect();
            let reason = format!(
                "placed {} ranks on {} agent(s){}",
                slots.len(),
                agents.len(),
                if borrowing {
                    ", borrowing idle quota"
                } else {
                    ""
                }
            );
            let placement = Placement {
                master_port,
                master_addr,
                slots,
            };
            planned.push(NewPlacement {
                training_id: id,
                placement,
                reason,
                borrowing,
            });
        }
        let outcomes = self.db.place_trainings(planned.clone()).await?;
        Ok(planned
            .into_iter()
            .zip(outcomes)
            .map(|(new, outcome)| (new.training_id, new.placement, outcome))
            .collect())
    }

    /// After the rank map is stored: follow the attempt, and send each agent
    /// its ranks (back to QUEUED when one is gone).
    async fn launch(&self, placed: &Placed, placement: &Placement) -> Result<(), DatabaseError> {
        let Placed {
            training: placed,
            waited_since,
        } = placed;
        self.track(placed);
        let agents = placement
            .slots
            .iter()
            .map(|s| s.agent_id.as_str())
            .collect::<HashSet<_>>()
            .len();
        tracing::info!(training_id = %placed.id, attempt = placed.attempt, world_size = placed.world_size,
            master = %format!("{}:{}", placement.master_addr, placement.master_port), "training placed");
        let config = self.launch_config(placed);
        // The wait began at creation, or when the previous attempt ended.
        let waited_since = if placed.attempt <= 1 {
            placed.create_time
        } else {
            *waited_since
        };
        let (spans, trace) = AttemptSpans::placed(placed, waited_since.into(), agents);
        self.rt().placed(&placed.id, spans);
        let published = self.published_checkpoints(placed).await?;
        self.resized(placed).await?;
        if let Err(agent) =
            commands::start_ranks(&self.fleet, placed, placement, &config, &trace, &published)
        {
            let why = format!("agent {agent} went away before its ranks started");
            self.stop_attempt(placed, &why).await;
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
        let keep = training.config.checkpoint_keep().clamp(1, MAX_PUBLISHED) as usize;
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

    /// The config the ranks get: the training's at its world size (the
    /// micro-batch and accumulation that hold its global batch, elastic
    /// trainings and `optim.global_batch`), with the collective timeout
    /// kept below the hang deadline so ranks fail on their own first.
    /// A program's is its own.
    fn launch_config(&self, training: &Training) -> cohort_spec::Workload {
        let mut config = training.config.clone();
        if let cohort_spec::Workload::Sae(sae) = &mut config {
            match training.sae_at_world_size() {
                Some(sized) => *sae = sized,
                // Placement only picks sizes that split it.
                None => tracing::warn!(training_id = %training.id, world = training.world_size,
                    "the world size does not split the global batch; the config goes as written"),
            }
            let cap = self.settings.hang_floor.as_secs_f64() / 2.0;
            if sae.runtime.collective_timeout_s > cap {
                sae.runtime.collective_timeout_s = cap;
            }
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

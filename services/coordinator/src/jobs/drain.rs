//! Draining an agent: each training with ranks on it gets a notice (the
//! same as a preemption's: the built-in rank checkpoints at once, a program
//! gets SIGTERM and its grace) and moves elsewhere from that checkpoint,
//! spending no restart budget; one that checkpoints before its notice
//! moves at that checkpoint. At the drain's deadline the ones still there
//! move at once, from their last checkpoint. When nothing of a placed
//! training is left on the agent the drain ends; the agent stays cordoned.

use super::Jobs;
use crate::persistence::DatabaseError;

impl Jobs {
    /// Stops the current attempt of `training_id` and queues its restart
    /// without spending the restart budget.
    pub(super) async fn move_off(
        &self,
        training_id: &str,
        attempt: i32,
        cause: &str,
    ) -> Result<(), DatabaseError> {
        let Some(training) = self.placed_attempt(training_id, attempt).await? else {
            return Ok(()); // decided already
        };
        self.stop_attempt(&training, cause).await;
        self.db.begin_move(training_id, cause).await?;
        tracing::info!(
            training_id,
            attempt,
            cause,
            "moving the gang off a draining agent"
        );
        self.restart_began(training_id, cause);
        Ok(())
    }

    /// After a checkpoint of the current attempt was recorded: a training
    /// with ranks on a draining agent moves now, resuming from it.
    pub(super) async fn drain_on_checkpoint(
        &self,
        training_id: &str,
        attempt: i32,
        step: i64,
    ) -> Result<(), DatabaseError> {
        let Some(agent) = self.fleet.on_draining_agent(training_id) else {
            return Ok(());
        };
        if self.db.notice_of(training_id).await?.is_some() {
            return Ok(()); // its notice moves it
        }
        let cause = format!("drain: moved off agent {agent} at its checkpoint of step {step}");
        self.move_off(training_id, attempt, &cause).await
    }

    /// Once per scheduling loop: a drain past its deadline moves what is
    /// left at once; the drain of an empty agent ends.
    pub(super) async fn drain_pass(&self) -> Result<(), DatabaseError> {
        let now = chrono::Utc::now();
        for drain in self.fleet.draining() {
            let (trainings, _) = self.fleet.placed_on(&drain.agent_id);
            if trainings.is_empty() && self.db.placed_ranks_on(&drain.agent_id).await? == 0 {
                self.db.end_drain(&drain.agent_id).await?;
                self.fleet.set_cordon_drain_over(&drain.agent_id);
                tracing::info!(agent = %drain.name, "drain over: the agent is empty (it stays cordoned)");
                continue;
            }
            for training_id in trainings {
                let Some(training) = self.db.get_training(&training_id).await? else {
                    continue;
                };
                if now < drain.deadline {
                    let noticed = self
                        .db
                        .notice_of(&training_id)
                        .await?
                        .is_some_and(|n| n.attempt == training.attempt);
                    if !noticed {
                        self.notice_for_drain(&training, &drain.name).await?;
                    }
                    continue;
                }
                let cause = format!(
                    "drain: deadline passed on agent {}: moved from its last checkpoint",
                    drain.name
                );
                self.move_off(&training_id, training.attempt, &cause)
                    .await?;
            }
        }
        Ok(())
    }
}

//! A sweep's trial paused at a rung and promoted later (ASHA,
//! docs/sweeps.md): the pause is a notice like a preemption's (the built-in
//! rank finishes its step, checkpoints and exits; a program gets SIGTERM
//! and its grace), closed back to QUEUED with the sweep holding it, so no
//! scheduling pass places it; the promotion lifts the hold and it resumes
//! from that checkpoint. Neither spends the restart budget nor counts as a
//! preemption.

use super::notice::scheduler_audit;
use super::Jobs;
use crate::model::JobState;
use crate::persistence::DatabaseError;
use crate::policy::NoticeKind;

impl Jobs {
    /// Gives the running training `training_id` notice to pause for sweep
    /// `sweep_id`, `why`; false when it is not running (it ended, or was
    /// noticed already).
    pub async fn pause(
        &self,
        training_id: &str,
        sweep_id: &str,
        why: &str,
    ) -> Result<bool, DatabaseError> {
        let Some(training) = self.db.get_training(training_id).await? else {
            return Ok(false);
        };
        if !matches!(training.state, JobState::Scheduled | JobState::Running)
            || self.db.notice_of(training_id).await?.is_some()
        {
            return Ok(false);
        }
        let grace = training.config.schedule().preemption_grace();
        let audit = scheduler_audit(
            "Pause",
            training_id,
            &training.team,
            format!("sweep {sweep_id}: {why}"),
        );
        self.notify(
            training_id,
            training.attempt,
            NoticeKind::Pause,
            sweep_id,
            format!("PAUSED: {why}; held by sweep {sweep_id} until it promotes it"),
            format!(
                "PAUSING: {why}; checkpoint and stop within {}s",
                grace.as_secs()
            ),
            grace,
            audit,
        )
        .await?;
        Ok(true)
    }

    /// Lifts sweep `sweep_id`'s hold on the paused training `training_id`:
    /// it waits for GPUs again, `why`, and resumes from its checkpoint.
    /// False when it is not paused by that sweep (any more).
    pub async fn promote(
        &self,
        training_id: &str,
        sweep_id: &str,
        why: &str,
    ) -> Result<bool, DatabaseError> {
        let reason = format!("PROMOTED: {why}; resumes from its checkpoint");
        if !self.db.release_hold(training_id, sweep_id, &reason).await? {
            return Ok(false);
        }
        tracing::info!(training_id, sweep_id, why, "paused trial promoted");
        self.kick();
        Ok(true)
    }
}

//! What the agents report about ranks: starts, progress lines, exits.

use super::failure::Failure;
use super::Jobs;
use crate::model::{EventPayload, JobState, RankRecord, RankReport, RankReportKind, RankState};
use crate::persistence::ranks::RankEnd;
use crate::persistence::DatabaseError;
use cohort_spec::progress::{Progress, ProgressLine};
use tokio::time::Instant;

impl Jobs {
    /// React to one report about a rank placed on `agent_id`.
    pub async fn on_rank_event(
        &self,
        agent_id: &str,
        report: RankReport,
    ) -> Result<(), DatabaseError> {
        let (id, attempt, rank) = (report.training_id.as_str(), report.attempt, report.rank);
        self.heard(id, attempt);
        match report.kind {
            RankReportKind::Started { pid } => {
                if let Some(t) = self
                    .db
                    .rank_started(id, attempt, rank, i64::from(pid))
                    .await?
                {
                    tracing::info!(training_id = %t.id, attempt, "training running");
                    if let Some(spans) = self.rt().get_mut(id).and_then(|t| t.spans.as_mut()) {
                        spans.running(attempt);
                    }
                }
            }
            RankReportKind::Progress { json_line } => match ProgressLine::parse(&json_line) {
                Some(line @ ProgressLine::Checkpoint { .. }) => {
                    let step = match &line {
                        ProgressLine::Checkpoint { step, .. } => *step,
                        _ => 0,
                    };
                    let recorded = self
                        .db
                        .record_checkpoint(id, attempt, agent_id, line)
                        .await?;
                    if recorded == crate::persistence::Recorded::Stored {
                        self.drain_on_checkpoint(id, attempt, step).await?;
                    }
                    if recorded == crate::persistence::Recorded::Superseded {
                        tracing::warn!(
                            training_id = id,
                            attempt,
                            rank,
                            agent_id,
                            "ignoring a checkpoint of a superseded attempt: no later attempt resumes from it"
                        );
                    }
                }
                Some(line) => self.on_progress(id, attempt, line).await?,
                None => {
                    tracing::debug!(training_id = id, rank, "ignoring an unknown progress line")
                }
            },
            RankReportKind::Exited {
                code,
                signal,
                stderr_tail,
            } => {
                let state = if code == Some(0) {
                    RankState::Succeeded
                } else {
                    RankState::Failed
                };
                // Kept: WatchLogs answers with it once the agent is gone.
                let kept = (!stderr_tail.is_empty()).then(|| stderr_tail.clone());
                let end = RankEnd {
                    state,
                    exit_code: code,
                    signal,
                    log_tail: kept,
                };
                let ranks = self.db.rank_ended(id, attempt, rank, end).await?;
                let failure = (state == RankState::Failed)
                    .then(|| Failure::exited(rank, code, signal, &stderr_tail));
                self.after_rank_end(id, attempt, &ranks, failure).await?;
            }
            RankReportKind::StartFailed { reason, message } => {
                let ranks = self
                    .db
                    .rank_ended(
                        id,
                        attempt,
                        rank,
                        RankEnd {
                            state: RankState::Failed,
                            exit_code: None,
                            signal: None,
                            log_tail: None,
                        },
                    )
                    .await?;
                let failure = Failure::start_failed(rank, &reason, &message);
                self.after_rank_end(id, attempt, &ranks, Some(failure))
                    .await?;
            }
        }
        Ok(())
    }

    fn heard(&self, training_id: &str, attempt: i32) {
        let mut rt = self.rt();
        let progress = rt.get_mut(training_id).and_then(|t| t.progress.as_mut());
        if let Some(p) = progress.filter(|p| p.attempt == attempt) {
            p.heard(Instant::now());
        }
    }

    /// Store a progress line; feed rank stats to the straggler detector.
    async fn on_progress(
        &self,
        training_id: &str,
        attempt: i32,
        line: ProgressLine,
    ) -> Result<(), DatabaseError> {
        if let ProgressLine::Progress(Progress { step, .. }) = &line {
            if let Some(spans) = self
                .rt()
                .get_mut(training_id)
                .and_then(|t| t.spans.as_mut())
            {
                spans.progressed(attempt, *step);
            }
        }
        let stands = match &line {
            ProgressLine::Progress(p) => Some((p.step, Some(p.total_steps))),
            ProgressLine::Metrics(m) => Some((m.step, m.total_steps)),
            _ => None,
        };
        if let Some((step, total)) = stands {
            let mut rt = self.rt();
            // Only a live attempt's lines (the entry goes with the training).
            if let Some(t) = rt
                .get_mut(training_id)
                .filter(|t| t.progress.as_ref().is_some_and(|p| p.attempt == attempt))
            {
                t.pace
                    .get_or_insert_with(Default::default)
                    .observe(Instant::now(), step, total);
            }
        }
        let changes = match &line {
            ProgressLine::RankStats {
                rank,
                step,
                step_time_ms,
                compute_ms,
                ..
            } => {
                let mut rt = self.rt();
                match rt.get_mut(training_id).and_then(|t| t.progress.as_mut()) {
                    Some(p) if p.attempt == attempt => {
                        p.rank_stats(*rank as i32, *step, *step_time_ms, *compute_ms)
                    }
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        self.db
            .append_event(training_id, attempt, EventPayload::Rank(line))
            .await?;
        for change in changes {
            tracing::info!(
                training_id,
                attempt,
                rank = change.rank,
                straggling = change.straggling,
                compute_ms = change.compute_ms,
                median_ms = change.median_compute_ms,
                "straggler report"
            );
            self.db
                .append_event(training_id, attempt, EventPayload::Straggler(change))
                .await?;
        }
        Ok(())
    }

    /// After a rank ended: success of the whole gang, or a failure to handle.
    async fn after_rank_end(
        &self,
        training_id: &str,
        attempt: i32,
        ranks: &[RankRecord],
        failure: Option<Failure>,
    ) -> Result<(), DatabaseError> {
        let Some(training) = self.db.get_training(training_id).await? else {
            return Ok(());
        };
        let live = matches!(training.state, JobState::Scheduled | JobState::Running);
        if training.attempt != attempt || !live {
            return Ok(()); // an old attempt, a restart under way, or a final state
        }
        // A noticed gang's exits are its preemption, not failures.
        if self.noticed_end(&training, ranks).await? {
            return Ok(());
        }
        if let Some(failure) = failure {
            return self.on_failure(&training, failure).await;
        }
        if ranks.iter().all(|r| r.state == RankState::Succeeded) {
            // A run never succeeds on a loss it did not have (the ranks guard
            // against it; this is the control plane's own check).
            if let Some(loss) = self.db.finished_loss(training_id, attempt).await? {
                if !loss.is_finite() {
                    let failure =
                        Failure::diverged(0, &format!("rank 0 finished with loss {loss}"));
                    return self.on_failure(&training, failure).await;
                }
            }
            if training.state == JobState::Scheduled {
                // exits overtook a start report from another agent
                self.settle(training_id, JobState::Running, "all ranks started")
                    .await?;
            }
            let reason = format!("all {} ranks exited 0", ranks.len());
            tracing::info!(training_id, attempt, "training succeeded");
            return self.finish(training_id, JobState::Succeeded, &reason).await;
        }
        Ok(())
    }
}

//! Failures and gang restarts, torchrun-style but classified: a user error
//! (the rank's config/data exit codes) fails the training at once without
//! spending the restart budget; anything else — a crash, a signal, OOM, a lost
//! agent, a hang — tears the whole gang down, moves to RESTARTING with the
//! cause and re-places it (avoiding the faulty GPU, rank 0 on the host that
//! holds the newest checkpoint) while the budget lasts. A diverged run (the
//! ranks' DIVERGED exit) restarts the same way with the learning rate divided
//! by 10, its cause TRAINING_DIVERGED. When the budget is spent the training
//! FAILS with every cause listed.

use super::Jobs;
use crate::model::{JobState, RankState, Training};
use crate::persistence::DatabaseError;
use cohort_proto::error::Reason;
use cohort_spec::exit::{classify, ExitClass};
use cohort_spec::{TrainingConfig, Workload};

/// The exit code with which a rank reports that a peer died or stalled.
const PEER_LOST: i32 = 11;
/// The cause (and, with the budget spent, the failure reason) of a
/// diverged run starts with this.
pub const DIVERGED: &str = "TRAINING_DIVERGED";
/// What a divergence restart divides the learning rate by (the data contract's).
pub const DIVERGED_LR_DIVISOR: f64 = 10.0;

/// One rank's failure, as the runner decides on it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub rank: i32,
    pub class: ExitClass,
    pub peer_lost: bool,
    pub cause: String,
}

impl Failure {
    pub fn exited(rank: i32, code: Option<i32>, signal: Option<i32>, stderr_tail: &str) -> Self {
        Self {
            rank,
            class: classify(code),
            peer_lost: code == Some(PEER_LOST),
            cause: describe_exit(rank, code, signal, stderr_tail),
        }
    }

    /// A run whose numbers diverged (found by the control plane, not the exit).
    pub fn diverged(rank: i32, what: &str) -> Self {
        Self {
            rank,
            class: ExitClass::Diverged,
            peer_lost: false,
            cause: what.to_string(),
        }
    }

    /// A rank the agent could not start. A config the agent refuses (a
    /// path outside its data roots) is the user's error and will not start
    /// on a restart either; anything else is the infrastructure's.
    pub fn start_failed(rank: i32, reason: &str, message: &str) -> Self {
        // The training's own fault on every host: no restart helps.
        let refused = [
            Reason::DataOutsideRoots,
            Reason::ProgramOutsideRoots,
            Reason::InvalidConfig,
        ];
        if reason.parse().is_ok_and(|r: Reason| refused.contains(&r)) {
            return Self {
                rank,
                class: ExitClass::UserError,
                peer_lost: false,
                cause: format!("{reason}: rank {rank} refused by its agent: {message}"),
            };
        }
        Self {
            rank,
            class: ExitClass::Infrastructure,
            peer_lost: false,
            cause: format!("rank {rank} could not start: {message}"),
        }
    }
}

/// The config for the attempt after a divergence: the learning rate divided
/// by [`DIVERGED_LR_DIVISOR`]; with what changed, for the restart's cause.
pub fn lowered_learning_rate(config: &TrainingConfig) -> (TrainingConfig, String) {
    let before = config.optim.learning_rate;
    let mut next = config.clone();
    next.optim.learning_rate = before / DIVERGED_LR_DIVISOR;
    let note = format!(
        "learning rate {} -> {} for the next attempt",
        short(before),
        short(next.optim.learning_rate)
    );
    (next, note)
}

/// A rate in words: six significant digits at most, `1e-3` rather than
/// `1.0000000000000001e-3`.
fn short(x: f64) -> String {
    let text = format!("{x:.5e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) if mantissa.contains('.') => {
            let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{mantissa}e{exponent}")
        }
        _ => text,
    }
}

/// A rank's end in words: code, class and the last line of its stderr.
pub fn describe_exit(
    rank: i32,
    code: Option<i32>,
    signal: Option<i32>,
    stderr_tail: &str,
) -> String {
    let class = match classify(code) {
        ExitClass::Success => "success",
        ExitClass::UserError => "user error",
        ExitClass::Infrastructure => "infrastructure error",
        ExitClass::OutOfMemory => "out of memory",
        ExitClass::Diverged => "diverged",
        ExitClass::Stopped => "stopped",
        ExitClass::Preempted => "preempted",
    };
    let how = match (code, signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".to_string(),
    };
    let last = stderr_tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if last.is_empty() {
        format!("rank {rank} {how} ({class})")
    } else {
        format!("rank {rank} {how} ({class}): {last}")
    }
}

impl Jobs {
    /// Decide on a failed rank of a live attempt.
    pub(super) async fn on_failure(
        &self,
        training: &Training,
        failure: Failure,
    ) -> Result<(), DatabaseError> {
        tracing::warn!(training_id = %training.id, attempt = training.attempt, cause = %failure.cause, "rank failed");
        if failure.class == ExitClass::UserError {
            self.stop_attempt(training, &failure.cause).await;
            let reason = format!("user error, not retried: {}", failure.cause);
            return self.finish(&training.id, JobState::Failed, &reason).await;
        }
        if failure.peer_lost {
            // The rank only saw a peer vanish or stall. Give the others a moment
            // to exit too: ranks that neither exit nor report are the hung ones.
            let attempt = training.attempt;
            if !self.rt().of(&training.id).deciding.insert(attempt) {
                return Ok(());
            }
            let jobs = self.clone();
            let training = training.clone();
            self.tasks.spawn(async move {
                tokio::time::sleep(jobs.settings.peer_lost_grace).await;
                let cause = jobs.peer_lost_cause(&training, &failure).await;
                if let Err(e) = jobs
                    .restart_or_fail(&training.id, training.attempt, &cause, None)
                    .await
                {
                    tracing::warn!(training_id = %training.id, error = %e, "cannot restart");
                }
                let mut rt = jobs.rt();
                if let Some(tracked) = rt.get_mut(&training.id) {
                    tracked.deciding.remove(&attempt);
                }
                rt.tidy(&training.id);
            });
            return Ok(());
        }
        if failure.class == ExitClass::Diverged {
            // Not the GPU's fault: the same GPUs may take the next attempt.
            // A program's numbers are its own: it restarts as it was.
            let Some(sae) = training.config.sae() else {
                let cause = format!("{DIVERGED}: {}", failure.cause);
                return self
                    .restart_or_fail(&training.id, training.attempt, &cause, None)
                    .await;
            };
            let (config, note) = lowered_learning_rate(sae);
            let cause = format!("{DIVERGED}: {}; {note}", failure.cause);
            return self
                .restart_or_fail(&training.id, training.attempt, &cause, Some(config.into()))
                .await;
        }
        self.avoid_gpu_of(training, failure.rank).await;
        let next = match training.config.sae() {
            Some(sae) if failure.class == ExitClass::OutOfMemory => super::oom::after_oom(sae),
            _ => super::oom::OomNext::Unchanged,
        };
        let (cause, config) = match next {
            super::oom::OomNext::Restart(config, note) => {
                (format!("{}; {note}", failure.cause), Some((*config).into()))
            }
            super::oom::OomNext::Unchanged => (failure.cause.clone(), None),
            super::oom::OomNext::Fail(why) => {
                self.stop_attempt(training, &failure.cause).await;
                let reason = format!("out of memory, not retried ({why}): {}", failure.cause);
                return self.finish(&training.id, JobState::Failed, &reason).await;
            }
        };
        self.restart_or_fail(&training.id, training.attempt, &cause, config)
            .await
    }

    /// The cause to record when ranks lost a peer: the ranks that are still
    /// running without reporting are hung; else the peer that died first.
    async fn peer_lost_cause(&self, training: &Training, failure: &Failure) -> String {
        let Ok(ranks) = self.db.ranks(&training.id, training.attempt).await else {
            return failure.cause.clone();
        };
        // Silent ranks on an agent that is gone: the agent is the cause.
        let gone: Vec<&str> = ranks
            .iter()
            .filter(|r| r.state == RankState::Running && !self.fleet.is_connected(&r.slot.agent_id))
            .map(|r| r.slot.agent_id.as_str())
            .collect();
        if let Some(agent_id) = gone.first() {
            for r in ranks.iter().filter(|r| r.slot.agent_id == *agent_id) {
                self.avoid_gpu(&training.id, &r.slot.gpu_uuid);
            }
            let name = match self.db.list_agents().await {
                Ok(agents) => agents
                    .into_iter()
                    .find(|a| a.id == *agent_id)
                    .map(|a| a.name),
                Err(_) => None,
            };
            return format!(
                "agent {} lost: its stream broke and its ranks went silent",
                name.as_deref().unwrap_or(agent_id)
            );
        }
        let silent: Vec<String> = ranks
            .iter()
            .filter(|r| r.state == RankState::Running)
            .map(|r| r.slot.rank.to_string())
            .collect();
        if !silent.is_empty() {
            for r in ranks.iter().filter(|r| r.state == RankState::Running) {
                self.avoid_gpu(&training.id, &r.slot.gpu_uuid);
            }
            return format!(
                "HANG: rank {} stopped making progress and did not exit; its peers gave up after their collective timeout",
                silent.join(", ")
            );
        }
        let died = ranks
            .iter()
            .filter(|r| r.exit_code != Some(PEER_LOST) && r.state == RankState::Failed)
            .map(|r| describe_exit(r.slot.rank, r.exit_code, r.signal, ""))
            .next();
        died.unwrap_or_else(|| failure.cause.clone())
    }

    async fn avoid_gpu_of(&self, training: &Training, rank: i32) {
        if let Ok(ranks) = self.db.ranks(&training.id, training.attempt).await {
            if let Some(r) = ranks.iter().find(|r| r.slot.rank == rank) {
                self.avoid_gpu(&training.id, &r.slot.gpu_uuid);
            }
        }
    }

    pub(super) fn avoid_gpu(&self, training_id: &str, uuid: &str) {
        self.rt().of(training_id).avoid.insert(uuid.to_string());
    }

    /// The training while `attempt` is still its placed (SCHEDULED or
    /// RUNNING) attempt; `None` once it was decided otherwise.
    pub(super) async fn placed_attempt(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<Option<Training>, DatabaseError> {
        Ok(self.db.get_training(training_id).await?.filter(|t| {
            t.attempt == attempt && matches!(t.state, JobState::Scheduled | JobState::Running)
        }))
    }

    /// Restart the gang of `attempt` within the budget (the next attempt
    /// with `next_config` when given, stored with the restart), or fail with
    /// every cause.
    pub(super) async fn restart_or_fail(
        &self,
        training_id: &str,
        attempt: i32,
        cause: &str,
        next_config: Option<Workload>,
    ) -> Result<(), DatabaseError> {
        let Some(training) = self.placed_attempt(training_id, attempt).await? else {
            return Ok(()); // decided already
        };
        self.stop_attempt(&training, cause).await;
        if training.restart_count >= training.max_restarts {
            let mut causes: Vec<String> = self
                .db
                .transitions(training_id)
                .await?
                .into_iter()
                .filter(|t| t.to == JobState::Restarting)
                .map(|t| format!("attempt {}: {}", t.attempt, t.reason))
                .collect();
            causes.push(format!("attempt {attempt}: {cause}"));
            // A run that ended diverged fails as such.
            let code = if cause.starts_with(DIVERGED) {
                format!("{DIVERGED}: ")
            } else {
                String::new()
            };
            let reason = format!(
                "{code}restart budget of {} spent; causes: {}",
                training.max_restarts,
                causes.join("; ")
            );
            tracing::warn!(training_id, reason = %reason, "training failed");
            return self.finish(training_id, JobState::Failed, &reason).await;
        }
        let restarted = self
            .db
            .begin_restart(training_id, cause, next_config.as_ref())
            .await?;
        tracing::info!(
            training_id,
            attempt,
            restarts = restarted.restart_count,
            max = restarted.max_restarts,
            cause,
            "restarting the gang"
        );
        self.restart_began(training_id, cause);
        Ok(())
    }

    /// A restart (or a move) of `training_id` began: its GPUs are free for
    /// placement, its runtime state waits for the old ranks' teardown, and
    /// the scheduler looks at once.
    pub(super) fn restart_began(&self, training_id: &str, cause: &str) {
        self.fleet.release(training_id);
        {
            let mut rt = self.rt();
            rt.forget(training_id, super::Outcome::Retry { reason: cause });
            rt.of(training_id).teardown_since = Some(tokio::time::Instant::now());
        }
        self.kick();
    }

    /// Whether every rank of a RESTARTING training's last attempt is verified
    /// gone: its exit was reported, or its agent is lost. Ranks unconfirmed
    /// past the teardown deadline are marked LOST.
    pub(super) async fn torn_down(
        &self,
        training_id: &str,
        attempt: i32,
    ) -> Result<bool, DatabaseError> {
        let ranks = self.db.ranks(training_id, attempt).await?;
        let gone = |r: &crate::model::RankRecord| {
            r.exit_code.is_some()
                || r.signal.is_some()
                || matches!(
                    r.state,
                    RankState::Lost | RankState::Succeeded | RankState::Failed
                )
                || !self.fleet.is_connected(&r.slot.agent_id)
        };
        if ranks.iter().all(gone) {
            return Ok(true);
        }
        let since = *self
            .rt()
            .of(training_id)
            .teardown_since
            .get_or_insert_with(tokio::time::Instant::now);
        let deadline = self.settings.stop_grace + self.settings.agent_timeout;
        if since.elapsed() > deadline {
            tracing::warn!(
                training_id,
                attempt,
                "ranks not confirmed gone in time: marked lost"
            );
            self.db.mark_unconfirmed_lost(training_id, attempt).await?;
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described_with_their_class_and_last_stderr_line() {
        assert_eq!(
            describe_exit(1, Some(4), None, "loading\ncohort-rank: error: invalid data: x.npy: file is empty\n"),
            "rank 1 exited with code 4 (user error): cohort-rank: error: invalid data: x.npy: file is empty"
        );
        assert_eq!(
            describe_exit(0, None, Some(9), ""),
            "rank 0 was killed by signal 9 (infrastructure error)"
        );
    }

    #[test]
    fn divergence_divides_the_rate() {
        let config = TrainingConfig::from_toml(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 64\nsteps = 1\n[data.synthetic]\nnum_samples = 4\n",
        )
        .unwrap();
        let (next, note) = lowered_learning_rate(&config);
        assert_eq!(next.optim.learning_rate, 1e-4);
        assert_eq!(note, "learning rate 1e-3 -> 1e-4 for the next attempt");
        assert_eq!(
            (short(1e30 / 10.0), short(2.5e-4), short(0.0)),
            ("1e29".into(), "2.5e-4".into(), "0e0".into())
        );
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(
            Failure::exited(0, Some(3), None, "").class,
            ExitClass::UserError
        );
        assert!(Failure::exited(0, Some(11), None, "").peer_lost);
        assert_eq!(
            Failure::exited(0, None, Some(9), "").class,
            ExitClass::Infrastructure
        );
        assert_eq!(
            Failure::exited(0, Some(20), None, "").class,
            ExitClass::OutOfMemory
        );
    }
}

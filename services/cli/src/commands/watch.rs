//! `cohort train watch` (and `train submit --wait`): TrainingService.WatchTraining
//! as a live progress bar, ending with the final state.
//!
//! A lag notice is printed and the stream is reopened after the last event
//! seen, so the missed events are replayed from the stored history.

use super::interruptible;
use crate::client::Conn;
use crate::client::Coordinator;
use crate::errors::{exit, CliError};
use crate::render::progress::ProgressLine;
use crate::render::{emit_json, float, json, OutputFormat};
use cohort_proto::v1::{
    self, training::State, training_event::Event, training_service_client::TrainingServiceClient,
    GetTrainingRequest, WatchTrainingRequest,
};
use std::io::Write;
use std::time::{Duration, Instant};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// How often a watch reopens its stream after lag notices before giving up on replay.
const MAX_RESUMES: u32 = 20;
/// The first and the longest pause between reconnection attempts.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(250);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a watch keeps reconnecting by default.
pub const RECONNECT_FOR_DEFAULT: Duration = Duration::from_secs(120);

fn is_final(state: i32) -> bool {
    [State::Succeeded, State::Failed, State::Cancelled]
        .iter()
        .any(|s| *s as i32 == state)
}

/// The result of a training that reached `state`: Ok for SUCCEEDED.
pub fn outcome(id: &str, state: i32, reason: &str) -> Result<(), CliError> {
    let code = match State::try_from(state) {
        Ok(State::Succeeded) => return Ok(()),
        Ok(State::Failed) => exit::TRAINING_FAILED,
        Ok(State::Cancelled) => exit::TRAINING_CANCELLED,
        _ => exit::GENERIC,
    };
    Err(CliError::TrainingEnded {
        id: id.to_string(),
        state: crate::render::table::state_name(state),
        reason: reason.to_string(),
        code,
    })
}

/// One event in words, for the lines printed above the progress bar; `None`
/// for progress (shown by the bar itself).
pub fn describe(event: &v1::TrainingEvent) -> Option<String> {
    let text = match event.event.as_ref()? {
        Event::StateChange(s) => {
            let mut text = format!("state {}", crate::render::table::state_name(s.to));
            if !s.reason.is_empty() {
                text.push_str(&format!(": {}", s.reason));
            }
            text
        }
        Event::Started(s) => format!(
            "started: {} ranks on {}, steps {}..{}, global batch {}, {} parameters",
            s.world_size, s.device, s.start_step, s.total_steps, s.global_batch, s.parameters
        ),
        Event::Progress(_) => return None,
        Event::RankStats(r) => rank_stats(r),
        Event::Checkpoint(c) if c.best => {
            format!("best checkpoint (step {}): {}", c.step, c.path)
        }
        Event::Checkpoint(c) => format!("checkpoint at step {}: {}", c.step, c.path),
        Event::Validation(v) => format!(
            "validation at step {}: loss {}  mse {}  L0 {:.1}  EV {:.3}  dead {:.1}%  ({} samples){}",
            v.step,
            float(v.loss),
            float(v.mse),
            v.l0,
            v.explained_variance,
            v.dead_fraction * 100.0,
            v.samples,
            if v.best { "  best so far" } else { "" }
        ),
        Event::Diverged(d) => format!(
            "diverged at step {}: {} non-finite steps in a row (loss {}, grad norm {}, lr {})",
            d.step,
            d.nonfinite_steps,
            float(d.loss),
            float(d.grad_norm),
            float(d.learning_rate)
        ),
        Event::CheckpointRejected(c) => format!(
            "checkpoint at step {} rejected on restore: {}",
            c.step, c.reason
        ),
        Event::CollectiveError(c) => format!(
            "rank {} lost its collective at step {}: {}",
            c.rank, c.step, c.message
        ),
        Event::Finished(f) => format!(
            "finished at step {}: loss {}, {:.1} s, {:.0} samples/s, checksum {}",
            f.step,
            float(f.loss),
            f.wall_time_s,
            f.mean_samples_per_sec,
            f.param_checksum
        ),
        Event::Lagged(l) if l.first_missed_sequence > 0 => format!(
            "lagged: missed {} events (from sequence {}); replaying them",
            l.missed_events, l.first_missed_sequence
        ),
        Event::Lagged(l) => format!("lagged: missed {} events", l.missed_events),
        Event::Preempted(p) => preempted(p),
        Event::Estimate(e) => estimate(e),
        Event::Resized(r) => resized(r),
        // An event kind newer than this CLI.
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    Some(format!("[{}] {text}", event.sequence))
}

fn rank_stats(r: &v1::RankStats) -> String {
    format!(
        "rank {} step {}: {:.1} ms (compute {:.1}, comm {:.1}, data wait {:.1}), {:.1} MiB {}",
        r.rank,
        r.step,
        r.step_time_ms,
        r.compute_ms,
        r.comm_ms,
        r.data_wait_ms,
        r.memory_bytes as f64 / (1u64 << 20) as f64,
        if r.memory_kind == "cuda_allocated" {
            "on the GPU"
        } else {
            "resident"
        }
    )
}

fn preempted(p: &v1::PreemptedEvent) -> String {
    let resume = p
        .resume_step
        .map_or("the start".to_string(), |s| format!("step {s}"));
    let what = match p.kind.as_str() {
        "reclaim" => format!("reclaimed for {}", p.by),
        "drain" => format!("moved off drained agent {}", p.by),
        _ if p.priority_class.is_empty() => format!("preempted by {}", p.by),
        _ => format!("preempted by {} (class {})", p.by, p.priority_class),
    };
    format!(
        "{what}: resumes from {resume}, {:.0} GPU-seconds lost{}",
        p.gpu_seconds_lost,
        if p.checkpointed {
            ", checkpointed on notice"
        } else {
            ""
        }
    )
}

/// `resized: 2 -> 4 ranks at step 1200, 3.1 s (grow)`.
fn resized(r: &v1::ResizedEvent) -> String {
    let at = r
        .step
        .map_or("from the start".to_string(), |s| format!("at step {s}"));
    format!(
        "resized: {} -> {} ranks {at}, {:.1} s ({})",
        r.from_world_size, r.to_world_size, r.seconds, r.reason
    )
}

fn estimate(e: &v1::EstimateEvent) -> String {
    let now = std::time::SystemTime::now();
    match (&e.estimated_start_time, &e.estimated_end_time) {
        (Some(s), _) => format!(
            "estimate: starts {} ({})",
            crate::render::time(Some(s)),
            crate::render::until(Some(s), now)
        ),
        (None, Some(end)) => format!(
            "estimate: ends {} ({})",
            crate::render::time(Some(end)),
            crate::render::until(Some(end), now)
        ),
        (None, None) => format!("estimate: none ({})", e.reason),
    }
}

/// How a watch follows its training.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Only events after this sequence number.
    pub from_sequence: u64,
    /// Also ask for every rank's stats.
    pub rank_stats: bool,
    /// How long to keep reconnecting when the coordinator goes away.
    pub reconnect_for: Duration,
}

/// A status that says the connection broke rather than the coordinator refused:
/// the coordinator's own errors always carry an ErrorInfo.
pub fn is_transient(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled
    ) && status.get_details_error_info().is_none()
}

/// Follows a training until it ends, then returns as [`outcome`] does.
pub async fn watch(
    coordinator: &Coordinator,
    id: &str,
    options: &WatchOptions,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut watcher = Watcher {
        id: id.to_string(),
        out,
        bar: ProgressLine::new(),
        after: options.from_sequence,
        last_state: None,
    };
    let followed = watcher.follow(&mut client, options).await;
    watcher.bar.finish()?;
    followed?;
    // `follow` returns once the training reached a final state.
    let Some((state, reason)) = watcher.last_state.take().filter(|(s, _)| is_final(*s)) else {
        return Err(CliError::WatchInterrupted {
            id: id.to_string(),
            state: "not finished".to_string(),
        });
    };
    if out == OutputFormat::Table && State::try_from(state) == Ok(State::Succeeded) {
        crate::render::emit(&format!("training {id} SUCCEEDED"))?;
    }
    outcome(id, state, &reason)
}

struct Watcher {
    id: String,
    out: OutputFormat,
    bar: ProgressLine,
    /// The last sequence number shown.
    after: u64,
    last_state: Option<(i32, String)>,
}

impl Watcher {
    /// A notice for people: above the bar, or on stderr beside JSON output.
    fn notice(&mut self, text: &str) -> Result<(), CliError> {
        match self.out {
            OutputFormat::Table => self.bar.message(text),
            OutputFormat::Json => {
                let _ = writeln!(std::io::stderr(), "{text}");
                Ok(())
            }
        }
    }

    fn interrupted(&self) -> CliError {
        CliError::Interrupted {
            hint: format!(
                "resume with `cohort train watch {} --from-sequence {}`",
                self.id, self.after
            ),
        }
    }

    /// Reads the stream until it ends, reopening it after lag notices (to
    /// replay what was missed) and after lost connections (for a while).
    async fn follow(
        &mut self,
        client: &mut TrainingServiceClient<Conn>,
        options: &WatchOptions,
    ) -> Result<(), CliError> {
        let mut resumes = 0;
        let mut outage: Option<Outage> = None;
        'stream: loop {
            let request = WatchTrainingRequest {
                id: self.id.clone(),
                after_sequence: self.after,
                include_rank_stats: options.rank_stats,
                ..Default::default()
            };
            let opened = interruptible(client.watch_training(request))
                .await
                .ok_or_else(|| self.interrupted())?;
            let mut stream = match opened {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    self.wait_to_reconnect(status, &mut outage, options).await?;
                    continue 'stream;
                }
            };
            if outage.take().is_some() {
                let text = format!("reconnected; resuming after sequence {}", self.after);
                self.notice(&text)?;
            }
            loop {
                let next = interruptible(stream.message())
                    .await
                    .ok_or_else(|| self.interrupted())?;
                let event = match next {
                    Ok(Some(event)) => event,
                    Ok(None) => match self.ended(client).await {
                        Ok(true) => return Ok(()),
                        // A stream that ends before its training (a coordinator
                        // shutting down) is a broken stream: reconnect.
                        Ok(false) => {
                            let status = Status::unavailable(format!(
                                "the stream ended while the training was {}",
                                self.last_state
                                    .as_ref()
                                    .map_or("running".to_string(), |(s, _)| {
                                        crate::render::table::state_name(*s)
                                    })
                            ));
                            self.wait_to_reconnect(status, &mut outage, options).await?;
                            continue 'stream;
                        }
                        Err(status) => {
                            self.wait_to_reconnect(status, &mut outage, options).await?;
                            continue 'stream;
                        }
                    },
                    Err(status) => {
                        self.wait_to_reconnect(status, &mut outage, options).await?;
                        continue 'stream;
                    }
                };
                if self.out == OutputFormat::Json {
                    emit_json(&json::message(&event))?;
                }
                if let Some(Event::Lagged(l)) = &event.event {
                    if self.out == OutputFormat::Table {
                        if let Some(text) = describe(&event) {
                            self.bar.message(&text)?;
                        }
                    }
                    if l.first_missed_sequence > 0 && resumes < MAX_RESUMES {
                        resumes += 1;
                        self.after = l.first_missed_sequence - 1;
                        continue 'stream;
                    }
                    continue;
                }
                self.show(&event)?;
            }
        }
    }

    /// Whether the training has ended, asking the coordinator when the stream
    /// did not say (e.g. a watch that started after the final event).
    async fn ended(&mut self, client: &mut TrainingServiceClient<Conn>) -> Result<bool, Status> {
        if self.last_state.as_ref().is_some_and(|(s, _)| is_final(*s)) {
            return Ok(true);
        }
        let t = client
            .get_training(GetTrainingRequest {
                id: self.id.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        if is_final(t.state) {
            self.last_state = Some((t.state, t.state_reason));
            return Ok(true);
        }
        Ok(false)
    }

    fn show(&mut self, event: &v1::TrainingEvent) -> Result<(), CliError> {
        if let Some(Event::StateChange(s)) = &event.event {
            self.last_state = Some((s.to, s.reason.clone()));
        }
        self.after = self.after.max(event.sequence);
        if self.out == OutputFormat::Table {
            match &event.event {
                Some(Event::Progress(p)) => self.bar.update(p, seconds(&event.time))?,
                Some(Event::ProgramProgress(p)) => {
                    self.bar.update_program(p, seconds(&event.time))?
                }
                _ => {
                    if let Some(text) = describe(event) {
                        self.bar.message(&text)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// After a broken stream: fails at once for real errors, else waits a
    /// little (longer each time) unless the outage has lasted too long.
    async fn wait_to_reconnect(
        &mut self,
        status: Status,
        outage: &mut Option<Outage>,
        options: &WatchOptions,
    ) -> Result<(), CliError> {
        if !is_transient(&status) {
            return Err(status.into());
        }
        let current = match outage {
            Some(current) => current,
            None => {
                let text = format!(
                    "lost the coordinator ({}); reconnecting for up to {} s",
                    status.message(),
                    options.reconnect_for.as_secs()
                );
                self.notice(&text)?;
                outage.insert(Outage {
                    since: Instant::now(),
                    backoff: RECONNECT_BACKOFF_MIN,
                })
            }
        };
        if current.since.elapsed() >= options.reconnect_for {
            return Err(CliError::LostCoordinator {
                seconds: current.since.elapsed().as_secs(),
                reason: status.message().to_string(),
                hint: format!(
                    "watch again with `cohort train watch {} --from-sequence {}`",
                    self.id, self.after
                ),
            });
        }
        let pause = current.backoff;
        current.backoff = (current.backoff * 2).min(RECONNECT_BACKOFF_MAX);
        interruptible(tokio::time::sleep(pause))
            .await
            .ok_or_else(|| self.interrupted())
    }
}

/// A lost connection being retried.
struct Outage {
    since: Instant,
    backoff: Duration,
}

/// An event's time in seconds (0 when it has none).
pub(crate) fn seconds(t: &Option<prost_types::Timestamp>) -> f64 {
    t.as_ref()
        .map_or(0.0, |t| t.seconds as f64 + f64::from(t.nanos) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_exit_codes() {
        assert!(outcome("t", State::Succeeded as i32, "").is_ok());
        let err = outcome("t-1", State::Failed as i32, "rank 2 exited with code 11").unwrap_err();
        assert_eq!(
            err.to_string(),
            "training t-1 ended FAILED: rank 2 exited with code 11"
        );
        assert_eq!(err.exit_code(), exit::TRAINING_FAILED);
        let err = outcome("t-1", State::Cancelled as i32, "").unwrap_err();
        assert_eq!(err.to_string(), "training t-1 ended CANCELLED");
        assert_eq!(err.exit_code(), exit::TRAINING_CANCELLED);
    }

    #[test]
    fn events_in_words() {
        let e = v1::TrainingEvent {
            sequence: 3,
            event: Some(Event::StateChange(v1::StateChange {
                from: State::Scheduled as i32,
                to: State::Running as i32,
                reason: "ranks formed their group".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(
            describe(&e).unwrap(),
            "[3] state RUNNING: ranks formed their group"
        );
        let lag = v1::TrainingEvent {
            event: Some(Event::Lagged(v1::Lagged {
                missed_events: 5,
                first_missed_sequence: 9,
                ..Default::default()
            })),
            ..Default::default()
        };
        assert!(describe(&lag).unwrap().contains("missed 5 events"));
    }
}

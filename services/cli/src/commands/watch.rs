//! `cohort train watch` (and `train submit --wait`): TrainingService.WatchTraining
//! as a live progress bar, ending with the final state.
//!
//! A lag notice is printed and the stream is reopened after the last event
//! seen, so the missed events are replayed from the stored history.

use crate::client::Coordinator;
use crate::errors::{exit, CliError};
use crate::render::progress::ProgressLine;
use crate::render::{emit_json, float, json, table, OutputFormat};
use cohort_proto::v1::{
    self, training::State, training_event::Event, training_service_client::TrainingServiceClient,
    GetTrainingRequest, WatchTrainingRequest,
};

/// How often a watch reopens its stream after lag notices before giving up on replay.
const MAX_RESUMES: u32 = 20;

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
        state: table::state_name(state),
        reason: reason.to_string(),
        code,
    })
}

/// One event in words, for the lines printed above the progress bar; `None`
/// for progress (shown by the bar itself).
pub fn describe(event: &v1::TrainingEvent) -> Option<String> {
    let text = match event.event.as_ref()? {
        Event::StateChange(s) => {
            let mut text = format!("state {}", table::state_name(s.to));
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
        Event::RankStats(r) => format!(
            "rank {} step {}: {:.1} ms (compute {:.1}, comm {:.1}), {:.1} MiB",
            r.rank,
            r.step,
            r.step_time_ms,
            r.compute_ms,
            r.comm_ms,
            r.memory_bytes as f64 / (1u64 << 20) as f64
        ),
        Event::Checkpoint(c) => format!("checkpoint at step {}: {}", c.step, c.path),
        Event::Finished(f) => format!(
            "finished at step {}: loss {}, {:.1} s, {:.0} samples/s, checksum {}",
            f.step,
            float(f.loss),
            f.wall_time_s,
            f.mean_samples_per_sec,
            f.param_checksum
        ),
        Event::Lagged(l) => format!(
            "lagged: missed {} events (from sequence {}); replaying them",
            l.missed_events, l.first_missed_sequence
        ),
        // An event kind newer than this CLI.
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    Some(format!("[{}] {text}", event.sequence))
}

pub async fn watch(
    coordinator: &Coordinator,
    id: &str,
    from_sequence: u64,
    rank_stats: bool,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut bar = ProgressLine::new();
    let mut after = from_sequence;
    let mut last_state: Option<(i32, String)> = None;
    let mut resumes = 0;
    'stream: loop {
        let mut stream = client
            .watch_training(WatchTrainingRequest {
                id: id.to_string(),
                after_sequence: after,
                include_rank_stats: rank_stats,
            })
            .await?
            .into_inner();
        while let Some(event) = stream.message().await? {
            if out == OutputFormat::Json {
                emit_json(&json::training_event(&event))?;
            }
            match &event.event {
                Some(Event::Lagged(l)) => {
                    if out == OutputFormat::Table {
                        if let Some(text) = describe(&event) {
                            bar.message(&text)?;
                        }
                    }
                    if l.first_missed_sequence > 0 && resumes < MAX_RESUMES {
                        resumes += 1;
                        after = l.first_missed_sequence - 1;
                        continue 'stream;
                    }
                    continue;
                }
                Some(Event::StateChange(s)) => last_state = Some((s.to, s.reason.clone())),
                _ => {}
            }
            after = after.max(event.sequence);
            if out == OutputFormat::Table {
                match &event.event {
                    Some(Event::Progress(p)) => bar.update(p)?,
                    _ => {
                        if let Some(text) = describe(&event) {
                            bar.message(&text)?;
                        }
                    }
                }
            }
        }
        break;
    }
    bar.finish()?;
    // The stream ends after the final state change; if it ended otherwise
    // (e.g. the history started after it), ask for the state.
    let (state, reason) = match last_state {
        Some((state, reason)) if is_final(state) => (state, reason),
        _ => {
            let t = client
                .get_training(GetTrainingRequest { id: id.to_string() })
                .await?
                .into_inner();
            (t.state, t.state_reason)
        }
    };
    if out == OutputFormat::Table && State::try_from(state) == Ok(State::Succeeded) {
        crate::render::emit(&format!("training {id} SUCCEEDED"))?;
    }
    if !is_final(state) {
        return Err(CliError::WatchInterrupted {
            id: id.to_string(),
            state: table::state_name(state),
        });
    }
    outcome(id, state, &reason)
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
            })),
            ..Default::default()
        };
        assert!(describe(&lag).unwrap().contains("missed 5 events"));
    }
}

//! `cohort train tensorboard ID --out DIR [--follow]`: a training's history
//! (WatchTraining) as a TensorBoard event file of scalars — the SAE's
//! progress and validation, or a program's loss and metrics — so
//! `tensorboard --logdir DIR` shows its curves beside a team's others.

mod events_file;

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit_json, OutputFormat};
use clap::Args;
use cohort_proto::v1::{
    training_event::Event, training_service_client::TrainingServiceClient, GetTrainingRequest,
    WatchTrainingRequest,
};
use events_file::EventsFile;
use std::path::PathBuf;
use std::time::Duration;

/// Without `--follow`, a running training's export ends once its stored
/// history is written: at its newest event when GetTraining was asked, or
/// after this long with nothing more (the newest may be one WatchTraining
/// does not send).
const HISTORY_IDLE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Args)]
pub struct TensorboardArgs {
    /// The training id.
    pub id: String,
    /// The run directory to write the event file into (made if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Keep writing new points until the training ends.
    #[arg(long)]
    pub follow: bool,
}

/// The scalars one event carries, by TensorBoard tag, and their step.
fn scalars(event: &Event) -> Option<(i64, Vec<(String, f64)>)> {
    let tagged = |prefix: &str, pairs: &[(&str, f64)]| -> Vec<(String, f64)> {
        pairs
            .iter()
            .map(|(name, v)| (format!("{prefix}/{name}"), *v))
            .collect()
    };
    match event {
        Event::Progress(p) => Some((
            p.step,
            tagged(
                "train",
                &[
                    ("loss", p.loss),
                    ("mse", p.mse),
                    ("l1", p.l1),
                    ("l0", p.l0),
                    ("explained_variance", p.explained_variance),
                    ("dead_fraction", p.dead_fraction),
                    ("learning_rate", p.learning_rate),
                    ("grad_norm", p.grad_norm),
                    ("aux", p.aux),
                    ("samples_per_sec", p.samples_per_sec),
                    ("step_time_ms", p.step_time_ms),
                ],
            ),
        )),
        Event::Validation(v) => Some((
            v.step,
            tagged(
                "val",
                &[
                    ("loss", v.loss),
                    ("mse", v.mse),
                    ("l0", v.l0),
                    ("explained_variance", v.explained_variance),
                    ("dead_fraction", v.dead_fraction),
                ],
            ),
        )),
        Event::ProgramProgress(p) => {
            let mut values: Vec<(String, f64)> = p
                .loss
                .map(|l| ("train/loss".into(), l))
                .into_iter()
                .collect();
            let mut metrics: Vec<_> = p.metrics.iter().map(|(k, v)| (k.clone(), *v)).collect();
            metrics.sort_by(|a, b| a.0.cmp(&b.0));
            values.extend(metrics);
            Some((p.step, values))
        }
        _ => None,
    }
}

pub async fn export(
    coordinator: &Coordinator,
    args: &TensorboardArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let training = client
        .get_training(GetTrainingRequest {
            id: args.id.clone(),
        })
        .await?
        .into_inner();
    let history_end = training.last_event_sequence;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let write_err = |e: std::io::Error| CliError::WriteFile {
        path: args.out.display().to_string(),
        reason: e.to_string(),
    };
    let mut file = EventsFile::create(&args.out, now).map_err(write_err)?;
    let (mut last, mut points, mut events) = (0u64, 0usize, 0usize);
    'streams: loop {
        let mut stream = client
            .watch_training(WatchTrainingRequest {
                id: args.id.clone(),
                after_sequence: last,
                ..Default::default()
            })
            .await?
            .into_inner();
        loop {
            let next = if args.follow {
                stream.message().await?
            } else {
                match tokio::time::timeout(HISTORY_IDLE, stream.message()).await {
                    Ok(message) => message?,
                    Err(_) => break 'streams,
                }
            };
            let Some(event) = next else { break 'streams };
            let Some(kind) = event.event.as_ref() else {
                continue;
            };
            // A lag notice: reopen after the last event written.
            if matches!(kind, Event::Lagged(_)) {
                continue 'streams;
            }
            last = event.sequence;
            if let Some((step, values)) = scalars(kind) {
                file.scalars(super::watch::seconds(&event.time), step, &values)
                    .map_err(write_err)?;
                points += values.len();
                events += 1;
                if args.follow {
                    file.flush().map_err(write_err)?;
                }
            }
            // (0: a coordinator that does not say; the idle wait ends it.)
            if !args.follow && history_end > 0 && last >= history_end {
                break 'streams;
            }
        }
    }
    file.flush().map_err(write_err)?;
    let path = file.path().display().to_string();
    if out == OutputFormat::Json {
        return emit_json(&serde_json::json!({
            "training_id": args.id, "file": path, "events": events, "points": points,
        }));
    }
    println!(
        "{}: {points} scalars from {events} events → {path}",
        args.id
    );
    Ok(())
}

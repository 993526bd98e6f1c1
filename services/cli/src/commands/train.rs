//! `cohort train submit|list|get|cancel` and `cohort checkpoints`
//! (TrainingService). `train watch` is in [`super::watch`].

use super::watch;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, table, OutputFormat};
use crate::{ListArgs, StateArg, SubmitArgs};
use cohort_proto::v1::{
    self, gpu_request::Selection, training::State, training_service_client::TrainingServiceClient,
    CancelTrainingRequest, CreateTrainingRequest, GetTrainingRequest, GpuRequest,
    ListCheckpointsRequest, ListTrainingsRequest, WatchTrainingRequest,
};
use serde_json::Value;
use std::time::Duration;
use tonic::transport::Channel;

/// How long `train get` waits for more history before it stops reading.
const HISTORY_IDLE: Duration = Duration::from_millis(300);
/// The longest `train get` spends reading history.
const HISTORY_BUDGET: Duration = Duration::from_secs(5);

/// The GPU request the flags describe: explicit ids, a count, or auto.
pub fn gpu_request(args: &SubmitArgs) -> GpuRequest {
    let selection = if !args.gpu_ids.is_empty() {
        Some(Selection::GpuIds(v1::gpu_request::GpuIds {
            ids: args.gpu_ids.clone(),
            ..Default::default()
        }))
    } else {
        args.gpus.map(Selection::Count)
    };
    GpuRequest {
        selection,
        queue: args.no_queue.then_some(false),
        ..Default::default()
    }
}

pub async fn submit(
    coordinator: &Coordinator,
    args: &SubmitArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let config = crate::config::build(args.config.as_deref(), &args.fields)?;
    let request = CreateTrainingRequest {
        request_id: args.request_id.clone().unwrap_or_default(),
        config: Some(v1::TrainingConfig::from(&config)),
        gpus: Some(gpu_request(args)),
        display_name: args.name.clone().unwrap_or_default(),
        max_restarts: args.max_restarts,
        priority: args.priority,
        ..Default::default()
    };
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let training = client.create_training(request).await?.into_inner();
    match out {
        OutputFormat::Json => emit_json(&json::message(&training))?,
        OutputFormat::Table if args.quiet => emit(&training.id)?,
        OutputFormat::Table => {
            let mut line = format!(
                "submitted training {}: {}",
                training.id,
                table::state_name(training.state)
            );
            if !training.state_reason.is_empty() {
                line.push_str(&format!(" ({})", training.state_reason));
            }
            emit(&line)?;
        }
    }
    if args.wait {
        let options = watch::WatchOptions {
            from_sequence: 0,
            rank_stats: false,
            reconnect_for: watch::RECONNECT_FOR_DEFAULT,
        };
        watch::watch(coordinator, &training.id, &options, out).await
    } else {
        Ok(())
    }
}

fn state_filter(states: &[StateArg]) -> Vec<i32> {
    states
        .iter()
        .map(|s| match s {
            StateArg::Queued => State::Queued,
            StateArg::Scheduled => State::Scheduled,
            StateArg::Running => State::Running,
            StateArg::Restarting => State::Restarting,
            StateArg::Succeeded => State::Succeeded,
            StateArg::Failed => State::Failed,
            StateArg::Cancelled => State::Cancelled,
        } as i32)
        .collect()
}

pub async fn list(
    coordinator: &Coordinator,
    args: &ListArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut trainings = Vec::new();
    let mut page_token = args.page_token.clone().unwrap_or_default();
    loop {
        let page = client
            .list_trainings(ListTrainingsRequest {
                page_size: args.page_size.unwrap_or(0),
                page_token,
                states: state_filter(&args.state),
                ..Default::default()
            })
            .await?
            .into_inner();
        trainings.extend(page.trainings);
        page_token = page.next_page_token;
        if page_token.is_empty() || !args.all {
            break;
        }
    }
    match out {
        OutputFormat::Json => emit_json(&serde_json::json!({
            "trainings": trainings.iter().map(json::message).collect::<Vec<Value>>(),
            "next_page_token": page_token,
        })),
        OutputFormat::Table => {
            emit(&table::trainings(&trainings))?;
            if !page_token.is_empty() {
                emit(&format!(
                    "more: --page-token {page_token} for the next page, --all for every page"
                ))?;
            }
            Ok(())
        }
    }
}

pub async fn get(
    coordinator: &Coordinator,
    id: &str,
    with_history: bool,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let training = client
        .get_training(GetTrainingRequest {
            id: id.to_string(),
            ..Default::default()
        })
        .await?
        .into_inner();
    if out == OutputFormat::Json {
        return emit_json(&json::message(&training));
    }
    if !with_history {
        return emit(&table::training_detail(&training, None));
    }
    match history(&mut client, id).await {
        Ok(events) => emit(&table::training_detail(&training, Some(&events))),
        Err(err) => {
            emit(&table::training_detail(&training, None))?;
            emit(&format!("\n(state transitions unavailable: {err})"))
        }
    }
}

/// The stored events of a training: WatchTraining from the start, until the
/// stream ends (a finished training) or goes quiet (only live events would follow).
async fn history(
    client: &mut TrainingServiceClient<Channel>,
    id: &str,
) -> Result<Vec<v1::TrainingEvent>, CliError> {
    let mut stream = client
        .watch_training(WatchTrainingRequest {
            id: id.to_string(),
            after_sequence: 0,
            include_rank_stats: false,
            ..Default::default()
        })
        .await?
        .into_inner();
    let deadline = tokio::time::Instant::now() + HISTORY_BUDGET;
    let mut events = Vec::new();
    loop {
        // Every training has at least its creation event: wait for the first
        // one as long as the budget allows, then only while events keep coming.
        let until = if events.is_empty() {
            deadline
        } else {
            deadline.min(tokio::time::Instant::now() + HISTORY_IDLE)
        };
        match tokio::time::timeout_at(until, stream.message()).await {
            Ok(Ok(Some(event))) => events.push(event),
            Ok(Ok(None)) | Err(_) => break,
            Ok(Err(status)) => return Err(status.into()),
        }
    }
    Ok(events)
}

pub async fn cancel(
    coordinator: &Coordinator,
    id: &str,
    reason: &str,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let training = client
        .cancel_training(CancelTrainingRequest {
            id: id.to_string(),
            reason: reason.to_string(),
            ..Default::default()
        })
        .await?
        .into_inner();
    match out {
        OutputFormat::Json => emit_json(&json::message(&training)),
        OutputFormat::Table => emit(&format!(
            "training {}: {}",
            training.id,
            table::state_name(training.state)
        )),
    }
}

pub async fn checkpoints(
    coordinator: &Coordinator,
    id: &str,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut checkpoints = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_checkpoints(ListCheckpointsRequest {
                training_id: id.to_string(),
                page_size: 0,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        checkpoints.extend(page.checkpoints);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Table => emit(&table::checkpoints(&checkpoints)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "checkpoints": checkpoints.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn submit_args(extra: &[&str], config: &std::path::Path) -> SubmitArgs {
        let mut argv = vec!["cohort", "train", "submit", "--config"];
        let path = config.to_str().unwrap();
        argv.push(path);
        argv.extend_from_slice(extra);
        match crate::Cli::try_parse_from(argv).unwrap().command {
            crate::Command::Train(crate::TrainCommand::Submit(args)) => *args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gpu_requests_from_flags() {
        let path = std::path::Path::new("c.toml");
        let r = gpu_request(&submit_args(&["--gpus", "3", "--no-queue"], path));
        assert_eq!(r.selection, Some(Selection::Count(3)));
        assert_eq!(r.queue, Some(false));
        let r = gpu_request(&submit_args(&["--gpu-ids", "a,b"], path));
        assert!(matches!(r.selection, Some(Selection::GpuIds(ref g)) if g.ids == ["a", "b"]));
        assert_eq!(r.queue, None);
        let r = gpu_request(&submit_args(&[], path));
        assert_eq!(r.selection, None);
    }
}

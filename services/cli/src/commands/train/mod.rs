//! `cohort train submit|list|get|cancel` (TrainingService): their
//! arguments, the calls, and their tables ([`table`]). `train watch` is in
//! [`super::watch`], `train report` in [`super::report`].

mod sweep;
mod table;

use super::watch;
use crate::client::Conn;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::parse_seconds;
use crate::render::table::state_name;
use crate::render::{emit, emit_json, json, OutputFormat};
use clap::{Args, Subcommand};
use cohort_proto::v1::{
    self, gpu_request::Selection, training::State, training_service_client::TrainingServiceClient,
    CancelTrainingRequest, CreateTrainingRequest, GetTrainingRequest, GpuRequest,
    ListTrainingsRequest, WatchTrainingRequest,
};
use cohort_spec::elastic::Gpus;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Subcommand)]
pub enum TrainCommand {
    /// Submit a training (a TOML or JSON config file, and/or config flags); prints its id.
    Submit(Box<SubmitArgs>),
    /// List trainings, newest first.
    List(ListArgs),
    /// Submit a grid of trainings from one config (`--set model.k=16,32,64
    /// --set optim.learning_rate=1e-3,3e-4`), labelled with the sweep.
    Sweep(sweep::SweepArgs),
    /// Show one training: state, pending reason, rank map and state transitions.
    Get {
        /// The training id.
        id: String,
        /// Do not read the state transitions from the training's history.
        #[arg(long)]
        no_history: bool,
    },
    /// Cancel a training: its ranks are stopped and its GPUs freed.
    Cancel {
        /// The training id.
        id: String,
        /// Why; recorded in the training's history.
        #[arg(long, default_value = "requested with `cohort train cancel`")]
        reason: String,
    },
    /// Follow a training live until it ends; exit code 0 only if it SUCCEEDED.
    Watch(WatchArgs),
    /// Write a training's curves as a TensorBoard event file (`--out DIR`,
    /// then `tensorboard --logdir DIR`); `--follow` until it ends.
    Tensorboard(super::tensorboard::TensorboardArgs),
    /// The coordinator's priority classes (what --priority-class takes),
    /// highest first; preempting classes may preempt lower ones.
    Classes,
    /// A training's report: throughput, step-time percentiles, compute vs
    /// communication and GPU use per rank, and the scaling table against
    /// trainings of the same config at other world sizes.
    Report {
        /// The training id.
        id: String,
        /// Print the training's metrics.jsonl (every line its ranks emitted) instead.
        #[arg(long)]
        metrics: bool,
    },
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    /// The training config (`.json` is read as JSON, anything else as TOML);
    /// without it, the config flags below describe the whole config.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run on this many GPUs, chosen by the coordinator, or elastic on any
    /// size of a range `MIN..MAX` that splits the global batch (default:
    /// the config's `gpus`, else as many as fit).
    #[arg(long, value_name = "N|MIN..MAX", conflicts_with = "gpu_ids")]
    pub gpus: Option<Gpus>,
    /// Run on exactly these GPUs (uuids from `cohort gpus`), in rank order.
    #[arg(long, value_name = "UUID,...", value_delimiter = ',', num_args = 1..)]
    pub gpu_ids: Vec<String>,
    /// Scheduling priority: among queued trainings, higher runs first
    /// (prefer --priority-class).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// The priority class (`cohort train classes` lists them: low, normal,
    /// high, urgent by default; high and urgent may preempt lower ones).
    #[arg(long, value_name = "CLASS")]
    pub priority_class: Option<String>,
    /// Run only within the team's guaranteed GPUs: never on borrowed idle
    /// quota, so never reclaimed.
    #[arg(long)]
    pub no_borrow: bool,
    /// Restarts allowed after rank crashes, lost agents or hangs (server default 3).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub max_restarts: Option<i32>,
    /// Idempotency key: retrying with the same id returns the first training.
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
    /// A human-readable name for the training.
    #[arg(long)]
    pub name: Option<String>,
    /// Fail instead of queueing when the GPUs are not free now.
    #[arg(long)]
    pub no_queue: bool,
    /// After submitting, watch the training until it ends (like `train watch`).
    #[arg(long)]
    pub wait: bool,
    /// Print only the training id (for scripts: `ID=$(cohort train submit -q ...)`).
    #[arg(short, long)]
    pub quiet: bool,
    /// A label (KEY=VALUE, repeatable): `train list --label` finds it by it.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// The program's code: pack this directory (honouring .gitignore and
    /// .cohortignore) and upload it with the training (replaces the
    /// config's `[program] code`).
    #[arg(long, value_name = "DIR")]
    pub code: Option<PathBuf>,
    /// The most a code directory may hold, in MiB of file contents.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub code_max_mib: u64,
    /// The config's fields as flags: the whole config without --config, or
    /// overrides of the file's values.
    #[command(flatten)]
    pub fields: crate::config::ConfigFlags,
}

/// A training state, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    Queued,
    Scheduled,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only trainings in this state (repeat or comma-separate for several).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub state: Vec<StateArg>,
    /// Trainings per page (1..=1000; the server's default when unset).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub page_size: Option<i32>,
    /// Start at this page (the token a previous page printed).
    #[arg(long, value_name = "TOKEN", conflicts_with = "all")]
    pub page_token: Option<String>,
    /// Fetch every page, not just the first.
    #[arg(long)]
    pub all: bool,
    /// Only trainings carrying this label (KEY=VALUE; repeat: all of them).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Only this team's trainings.
    #[arg(long)]
    pub team: Option<String>,
}

/// `KEY=VALUE` (the server checks the characters).
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err("expected KEY=VALUE".to_string()),
    }
}

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// The training id.
    pub id: String,
    /// Only events after this sequence number (0: the whole history first).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub from_sequence: u64,
    /// Also show every rank's step timing and memory.
    #[arg(long)]
    pub rank_stats: bool,
    /// How long to keep reconnecting when the coordinator goes away, in seconds.
    #[arg(long, value_name = "SECS", default_value = "120", value_parser = parse_seconds)]
    pub reconnect_timeout: Duration,
}

/// How long `train get` waits for more history before it stops reading.
const HISTORY_IDLE: Duration = Duration::from_millis(300);
/// The longest `train get` spends reading history.
const HISTORY_BUDGET: Duration = Duration::from_secs(5);

/// The GPU request the flags describe (`--gpus` before the job file's
/// `gpus`): explicit ids, a count, a range, or auto.
pub fn gpu_request(args: &SubmitArgs, file: Option<Gpus>) -> GpuRequest {
    let mut request = GpuRequest {
        queue: args.no_queue.then_some(false),
        ..Default::default()
    };
    if !args.gpu_ids.is_empty() {
        request.selection = Some(Selection::GpuIds(v1::gpu_request::GpuIds {
            ids: args.gpu_ids.clone(),
            ..Default::default()
        }));
        return request;
    }
    match args.gpus.or(file) {
        Some(Gpus::Count(n)) => request.selection = Some(Selection::Count(n as i32)),
        Some(Gpus::Range(r)) => {
            request.min_count = Some(r.min as i32);
            request.max_count = Some(r.max as i32);
        }
        None => {}
    }
    request
}

pub async fn submit(
    coordinator: &Coordinator,
    args: &SubmitArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let (mut config, file_gpus) = crate::config::build_job(args.config.as_deref(), &args.fields)?;
    crate::commands::code::attach(
        coordinator,
        &mut config,
        args.config.as_deref(),
        args.code.as_deref(),
        args.code_max_mib,
        args.quiet || out == OutputFormat::Json,
    )
    .await?;
    let request = CreateTrainingRequest {
        request_id: args.request_id.clone().unwrap_or_default(),
        config: Some(v1::TrainingConfig::from(&config)),
        gpus: Some(gpu_request(args, file_gpus)),
        display_name: args.name.clone().unwrap_or_default(),
        max_restarts: args.max_restarts,
        priority: args.priority,
        labels: args.labels.iter().cloned().collect(),
        priority_class: args.priority_class.clone().unwrap_or_default(),
        borrow: args.no_borrow.then_some(false),
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
                state_name(training.state)
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
                labels: args.labels.iter().cloned().collect(),
                team: args.team.clone().unwrap_or_default(),
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
    client: &mut TrainingServiceClient<Conn>,
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
            state_name(training.state)
        )),
    }
}

/// Runs one `cohort train` command.
pub async fn run(
    coordinator: &Coordinator,
    command: TrainCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    match command {
        TrainCommand::Submit(args) => submit(coordinator, &args, out).await,
        TrainCommand::List(args) => list(coordinator, &args, out).await,
        TrainCommand::Sweep(args) => sweep::sweep(coordinator, &args, out).await,
        TrainCommand::Get { id, no_history } => get(coordinator, &id, !no_history, out).await,
        TrainCommand::Cancel { id, reason } => cancel(coordinator, &id, &reason, out).await,
        TrainCommand::Report { id, metrics } => {
            super::report::report(coordinator, &id, metrics, out).await
        }
        TrainCommand::Watch(args) => {
            let options = watch::WatchOptions {
                from_sequence: args.from_sequence,
                rank_stats: args.rank_stats,
                reconnect_for: args.reconnect_timeout,
            };
            watch::watch(coordinator, &args.id, &options, out).await
        }
        TrainCommand::Tensorboard(args) => {
            super::tensorboard::export(coordinator, &args, out).await
        }
        TrainCommand::Classes => classes(coordinator, out).await,
    }
}

async fn classes(coordinator: &Coordinator, out: OutputFormat) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let answer = client
        .list_priority_classes(v1::ListPriorityClassesRequest {})
        .await?
        .into_inner();
    match out {
        OutputFormat::Json => emit_json(&json::message(&answer)),
        OutputFormat::Table => {
            let mut t =
                crate::render::table::Table::new(&["CLASS", "PRIORITY", "PREEMPTS", "DEFAULT"]);
            for c in &answer.classes {
                t.row(vec![
                    c.name.clone(),
                    c.value.to_string(),
                    if c.preempting { "yes" } else { "no" }.to_string(),
                    if c.name == answer.default_class {
                        "yes"
                    } else {
                        ""
                    }
                    .to_string(),
                ]);
            }
            emit(&t.render())
        }
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
            crate::Command::Train(crate::commands::train::TrainCommand::Submit(args)) => *args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gpu_requests_from_flags() {
        let path = std::path::Path::new("c.toml");
        let r = gpu_request(&submit_args(&["--gpus", "3", "--no-queue"], path), None);
        assert_eq!(r.selection, Some(Selection::Count(3)));
        assert_eq!(r.queue, Some(false));
        let r = gpu_request(&submit_args(&["--gpu-ids", "a,b"], path), None);
        assert!(matches!(r.selection, Some(Selection::GpuIds(ref g)) if g.ids == ["a", "b"]));
        assert_eq!(r.queue, None);
        let r = gpu_request(&submit_args(&[], path), None);
        assert_eq!(r.selection, None);
        let r = gpu_request(&submit_args(&["--gpus", "2..8"], path), None);
        assert_eq!(
            (r.selection, r.min_count, r.max_count),
            (None, Some(2), Some(8))
        );
        // The flag wins over the job file's `gpus`.
        let file = Some(Gpus::Range(cohort_spec::elastic::SizeRange {
            min: 1,
            max: 4,
        }));
        let r = gpu_request(&submit_args(&["--gpus", "3"], path), file);
        assert_eq!(
            (r.selection, r.min_count),
            (Some(Selection::Count(3)), None)
        );
        let r = gpu_request(&submit_args(&[], path), file);
        assert_eq!((r.min_count, r.max_count), (Some(1), Some(4)));
    }
}

//! `cohort`: the command-line client of the cohort coordinator.
//!
//! A thin typed client over the `cohort.v1` gRPC API: every command is one or a
//! few RPCs, shown as a table (default) or as the API's messages in JSON
//! (`-o json`). Failures are printed in human words and end with an exit code
//! from [`errors::exit`].

// Messages of the contract are built with `..Default::default()` even where
// every field is set today, so fields added to cohort.v1 don't break the build.
#![allow(clippy::needless_update)]

mod client;
mod commands;
mod config;
mod errors;
mod render;

use clap::{Args, Parser, Subcommand};
use cohort_spec::duration::parse_duration;
use errors::CliError;
use render::OutputFormat;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Where the coordinator listens unless `--coordinator` or `COHORT_COORDINATOR` says otherwise.
pub const COORDINATOR_DEFAULT: &str = "http://127.0.0.1:50051";

/// Control data-parallel GPU training on a cohort coordinator.
#[derive(Debug, Parser)]
#[command(name = "cohort", version, about, propagate_version = true)]
pub struct Cli {
    /// The coordinator's gRPC address (`http://host:port`; `host:port` means http).
    #[arg(
        long,
        global = true,
        env = "COHORT_COORDINATOR",
        default_value = COORDINATOR_DEFAULT,
        value_name = "URL"
    )]
    pub coordinator: String,

    /// How long to wait for the connection to the coordinator, in seconds.
    #[arg(long, global = true, default_value = "5", value_name = "SECS", value_parser = parse_seconds)]
    pub connect_timeout: Duration,

    /// Output format: aligned tables for people, or the API's messages as JSON.
    #[arg(short, long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every GPU of every agent: memory, utilization, temperature, holder,
    /// health. Subcommands recommend GPUs, check a selection, estimate memory.
    #[command(args_conflicts_with_subcommands = true)]
    Gpus(GpusArgs),
    /// List the agents known to the coordinator.
    Agents,
    /// Submit, list, inspect, cancel and watch trainings.
    #[command(subcommand)]
    Train(TrainCommand),
    /// Live GPU telemetry.
    #[command(subcommand)]
    Telemetry(TelemetryCommand),
    /// Alerts the coordinator raises and resolves: the active ones (`--all`:
    /// also those resolved within `--since`); `--watch` keeps following.
    #[command(args_conflicts_with_subcommands = true)]
    Alerts(AlertsArgs),
    /// List the complete checkpoints of a training, newest first; `download`
    /// fetches one.
    #[command(args_conflicts_with_subcommands = true)]
    Checkpoints(CheckpointsArgs),
}

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// The training id (to list its checkpoints).
    #[arg(required = true)]
    pub id: Option<String>,
    #[command(subcommand)]
    pub command: Option<CheckpointsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// Download a checkpoint's files into a directory: natively
    /// (manifest.json, state.safetensors) or for SAELens (cfg.json,
    /// sae_weights.safetensors; `sae_lens.SAE.load_from_disk(DIR)`).
    Download(DownloadArgs),
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The training id.
    pub id: String,
    /// The directory to write into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// The checkpoint's step (default: the newest).
    #[arg(long)]
    pub step: Option<i64>,
    /// native or saelens.
    #[arg(long, default_value = "native", value_parser = ["native", "saelens"])]
    pub format: String,
}

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Only the GPUs of this agent (its id).
    #[arg(long, value_name = "AGENT_ID")]
    pub agent: Option<String>,
    /// Only GPUs that can take a rank now.
    #[arg(long)]
    pub available: bool,
    #[command(subcommand)]
    pub command: Option<GpusCommand>,
}

#[derive(Debug, Subcommand)]
pub enum GpusCommand {
    /// Recommend free GPUs for a training config or a memory need, best first.
    Recommend {
        /// The training config whose memory estimate is the need.
        #[arg(long, value_name = "FILE", required_unless_present = "memory_gib")]
        config: Option<PathBuf>,
        /// The device memory each GPU must have free, in GiB.
        #[arg(long = "memory", value_name = "GIB", conflicts_with = "config")]
        memory_gib: Option<f64>,
        /// How many GPUs (default: as many as are suitable).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
        count: Option<i32>,
        /// Only GPUs of one host.
        #[arg(long)]
        single_host: bool,
    },
    /// Check that these GPUs could run a training now; exit code 6 if not.
    Validate {
        /// GPU uuids, in rank order.
        #[arg(value_name = "UUID", value_delimiter = ',', num_args = 1.., required = true)]
        ids: Vec<String>,
        /// Also check each GPU has memory for this training config.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Estimate the device memory one rank of a training config needs.
    Estimate {
        /// The training config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum TrainCommand {
    /// Submit a training (a TOML or JSON config file, and/or config flags); prints its id.
    Submit(Box<SubmitArgs>),
    /// List trainings, newest first.
    List(ListArgs),
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

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The training config (`.json` is read as JSON, anything else as TOML);
    /// without it, the config flags below describe the whole config.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run on this many GPUs, chosen by the coordinator (default: as many as fit).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "gpu_ids")]
    pub gpus: Option<i32>,
    /// Run on exactly these GPUs (uuids from `cohort gpus`), in rank order.
    #[arg(long, value_name = "UUID,...", value_delimiter = ',', num_args = 1..)]
    pub gpu_ids: Vec<String>,
    /// Scheduling priority: among queued trainings, higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
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
    /// The config's fields as flags: the whole config without --config, or
    /// overrides of the file's values.
    #[command(flatten)]
    pub fields: config::ConfigFlags,
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

#[derive(Debug, Args)]
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
}

#[derive(Debug, Args)]
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

#[derive(Debug, Subcommand)]
pub enum TelemetryCommand {
    /// A live table of GPU metrics (in `-o json`, one JSON object per update).
    Watch(TelemetryWatchArgs),
    /// Stored GPU metrics over a past time range, downsampled into buckets.
    Query(TelemetryQueryArgs),
    /// Utilization and memory per GPU over the last `--since`, as sparklines
    /// (in `-o json`, one series of points per GPU).
    History(TelemetryHistoryArgs),
}

/// How telemetry of several GPUs is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewArg {
    /// One summary over all selected GPUs.
    Aggregated,
    /// One row per GPU.
    PerGpu,
}

/// Which GPUs a telemetry or alerts command concerns (conditions combine with AND).
#[derive(Debug, Clone, Args)]
pub struct MetricsFilterArgs {
    /// Only GPUs of this agent (id or name; repeatable).
    #[arg(long, value_name = "AGENT")]
    pub agent: Vec<String>,
    /// Only this GPU (uuid; repeatable).
    #[arg(long, value_name = "UUID")]
    pub gpu: Vec<String>,
    /// Only GPUs held by this training.
    #[arg(long, value_name = "ID")]
    pub job: Option<String>,
}

#[derive(Debug, Args)]
pub struct TelemetryWatchArgs {
    /// Per GPU or one summary.
    #[arg(long, value_enum, default_value_t = ViewArg::PerGpu)]
    pub view: ViewArg,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// Stop after this many updates (default: until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct TelemetryQueryArgs {
    /// Per GPU or one summary per bucket.
    #[arg(long, value_enum, default_value_t = ViewArg::PerGpu)]
    pub view: ViewArg,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// How far back to look, e.g. `90s`, `10m`, `2h`, `1d`.
    #[arg(long, value_name = "SPAN", default_value = "10m", value_parser = parse_duration)]
    pub since: Duration,
    /// Bucket width, e.g. `30s` (default: the range / 100, at least 1 s).
    #[arg(long, value_name = "SPAN", value_parser = parse_duration)]
    pub step: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct TelemetryHistoryArgs {
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// How far back to look, e.g. `90s`, `15m`, `2h`, `1d`.
    #[arg(long, value_name = "SPAN", default_value = "15m", value_parser = parse_duration)]
    pub since: Duration,
    /// Bucket width, e.g. `10s` (default: the range / 60, at least 1 s).
    #[arg(long, value_name = "SPAN", value_parser = parse_duration)]
    pub step: Option<Duration>,
}

/// Alert severities, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SeverityArg {
    Info,
    Warning,
    Critical,
}

impl From<SeverityArg> for cohort_proto::v1::AlertSeverity {
    fn from(s: SeverityArg) -> Self {
        match s {
            SeverityArg::Info => Self::Info,
            SeverityArg::Warning => Self::Warning,
            SeverityArg::Critical => Self::Critical,
        }
    }
}

#[derive(Debug, Args)]
pub struct AlertsArgs {
    #[command(subcommand)]
    pub command: Option<AlertsCommand>,
    #[command(flatten)]
    pub list: AlertsListArgs,
}

/// `cohort alerts` without a subcommand.
#[derive(Debug, Args)]
pub struct AlertsListArgs {
    /// Also the alerts resolved within `--since`.
    #[arg(long)]
    pub all: bool,
    /// With `--all`: how far back resolved alerts go, e.g. `90m`, `24h`, `7d`.
    #[arg(long, value_name = "SPAN", default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
    /// After the table, keep following raises and resolutions.
    #[arg(long)]
    pub watch: bool,
    /// Only alerts at least this severe.
    #[arg(long, value_enum)]
    pub min_severity: Option<SeverityArg>,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
}

#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// Follow alerts as they are raised and resolved (overheating, ECC errors,
    /// lost agents, hung trainings).
    Watch(AlertsWatchArgs),
}

#[derive(Debug, Args)]
pub struct AlertsWatchArgs {
    /// Only alerts at least this severe.
    #[arg(long, value_enum)]
    pub min_severity: Option<SeverityArg>,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// First show the alerts active now.
    #[arg(long)]
    pub active: bool,
    /// Stop after this many alerts (default: until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// A duration in seconds, e.g. `5` or `0.5`.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} must be a positive number of seconds"))
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let coordinator = &client::Coordinator {
        url: cli.coordinator,
        connect_timeout: cli.connect_timeout,
    };
    let out = cli.output;
    match cli.command {
        Command::Gpus(args) => match &args.command {
            None => commands::gpus::list(coordinator, &args, out).await,
            Some(cmd) => commands::gpus::advise(coordinator, cmd, out).await,
        },
        Command::Agents => commands::agents::list(coordinator, out).await,
        Command::Checkpoints(args) => match (args.command, args.id) {
            (Some(CheckpointsCommand::Download(d)), _) => {
                commands::checkpoints::download(coordinator, &d, out).await
            }
            (None, Some(id)) => commands::train::checkpoints(coordinator, &id, out).await,
            (None, None) => Err(CliError::Usage("give a training id".into())),
        },
        Command::Train(cmd) => match cmd {
            TrainCommand::Submit(args) => commands::train::submit(coordinator, &args, out).await,
            TrainCommand::List(args) => commands::train::list(coordinator, &args, out).await,
            TrainCommand::Get { id, no_history } => {
                commands::train::get(coordinator, &id, !no_history, out).await
            }
            TrainCommand::Cancel { id, reason } => {
                commands::train::cancel(coordinator, &id, &reason, out).await
            }
            TrainCommand::Report { id, metrics } => {
                commands::report::report(coordinator, &id, metrics, out).await
            }
            TrainCommand::Watch(args) => {
                let options = commands::watch::WatchOptions {
                    from_sequence: args.from_sequence,
                    rank_stats: args.rank_stats,
                    reconnect_for: args.reconnect_timeout,
                };
                commands::watch::watch(coordinator, &args.id, &options, out).await
            }
        },
        Command::Telemetry(TelemetryCommand::Watch(args)) => {
            commands::telemetry::watch(coordinator, &args, out).await
        }
        Command::Telemetry(TelemetryCommand::Query(args)) => {
            commands::telemetry::query(coordinator, &args, out).await
        }
        Command::Telemetry(TelemetryCommand::History(args)) => {
            commands::history::history(coordinator, &args, out).await
        }
        Command::Alerts(AlertsArgs {
            command: Some(AlertsCommand::Watch(args)),
            ..
        }) => commands::alerts::watch(coordinator, &args, out).await,
        Command::Alerts(AlertsArgs {
            command: None,
            list,
        }) => commands::alerts_list::list(coordinator, &list, out).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot start: {e}");
            return ExitCode::from(errors::exit::GENERIC);
        }
    };
    let output = cli.output;
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr();
            let _ = match (&err, output) {
                (CliError::BrokenPipe | CliError::Silent(_), _) => Ok(()),
                (_, OutputFormat::Json) => writeln!(stderr, "{}", err.to_json()),
                (_, OutputFormat::Table) => writeln!(stderr, "error: {err}"),
            };
            ExitCode::from(err.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cohort").chain(args.iter().copied()))
    }

    #[test]
    fn defaults() {
        let cli = parse(&["gpus"]).unwrap();
        // The env var may be set where the tests run; the flag always wins.
        if std::env::var_os("COHORT_COORDINATOR").is_none() {
            assert_eq!(cli.coordinator, COORDINATOR_DEFAULT);
        }
        assert_eq!(cli.output, OutputFormat::Table);
        assert_eq!(cli.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn global_flags_anywhere() {
        let cli = parse(&["train", "list", "-o", "json", "--coordinator", "h:1"]).unwrap();
        assert_eq!(cli.output, OutputFormat::Json);
        assert_eq!(cli.coordinator, "h:1");
    }

    #[test]
    fn submit_flags() {
        let cli = parse(&[
            "train",
            "submit",
            "--config",
            "job.toml",
            "--gpu-ids",
            "SIM-a,SIM-b",
            "--priority",
            "-2",
            "--no-queue",
            "--wait",
            "--steps",
            "50",
        ])
        .unwrap();
        let Command::Train(TrainCommand::Submit(args)) = cli.command else {
            panic!("not submit");
        };
        assert_eq!(args.gpu_ids, vec!["SIM-a", "SIM-b"]);
        assert_eq!(args.priority, -2);
        assert!(args.no_queue && args.wait);
        assert_eq!(args.fields.steps, Some(50));
        assert_eq!(args.gpus, None);
    }

    #[test]
    fn bad_usage_is_rejected() {
        // --gpus and --gpu-ids exclude each other.
        let err = parse(&[
            "train",
            "submit",
            "--config",
            "c",
            "--gpus",
            "2",
            "--gpu-ids",
            "x",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
        // --gpus must be at least 1.
        assert!(parse(&["train", "submit", "--config", "c", "--gpus", "0"]).is_err());
        // Without --config, the config flags must describe a whole config.
        assert!(parse(&["train", "submit"]).is_err());
        assert!(parse(&["--connect-timeout", "-1", "gpus"]).is_err());
        assert!(parse(&["-o", "yaml", "gpus"]).is_err());
    }

    #[test]
    fn spans() {
        let cli = parse(&["telemetry", "query", "--since", "1h", "--step", "1m"]).unwrap();
        let Command::Telemetry(TelemetryCommand::Query(args)) = cli.command else {
            panic!("not query");
        };
        assert_eq!(args.since, Duration::from_secs(3600));
        assert_eq!(args.step, Some(Duration::from_secs(60)));
    }

    #[test]
    fn gpus_lists_or_advises() {
        let cli = parse(&["gpus", "--available"]).unwrap();
        let Command::Gpus(args) = cli.command else {
            panic!("not gpus");
        };
        assert!(args.available && args.command.is_none());
        let cli = parse(&["gpus", "recommend", "--memory", "8", "--count", "2"]).unwrap();
        let Command::Gpus(GpusArgs {
            command:
                Some(GpusCommand::Recommend {
                    memory_gib, count, ..
                }),
            ..
        }) = cli.command
        else {
            panic!("not recommend");
        };
        assert_eq!((memory_gib, count), (Some(8.0), Some(2)));
        // recommend needs a config or a memory size, not both.
        assert!(parse(&["gpus", "recommend"]).is_err());
        assert!(parse(&["gpus", "recommend", "--memory", "1", "--config", "c"]).is_err());
        let cli = parse(&["gpus", "validate", "a,b", "c"]).unwrap();
        let Command::Gpus(GpusArgs {
            command: Some(GpusCommand::Validate { ids, .. }),
            ..
        }) = cli.command
        else {
            panic!("not validate");
        };
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(parse(&["gpus", "validate"]).is_err());
    }

    #[test]
    fn list_and_watch_flags() {
        let cli = parse(&["train", "list", "--state", "queued,running", "--all"]).unwrap();
        let Command::Train(TrainCommand::List(args)) = cli.command else {
            panic!("not list");
        };
        assert_eq!(args.state, vec![StateArg::Queued, StateArg::Running]);
        assert!(args.all);

        let cli = parse(&["train", "watch", "t-1", "--from-sequence", "17"]).unwrap();
        let Command::Train(TrainCommand::Watch(args)) = cli.command else {
            panic!("not watch");
        };
        assert_eq!((args.id.as_str(), args.from_sequence), ("t-1", 17));

        let cli = parse(&[
            "telemetry",
            "watch",
            "--view",
            "aggregated",
            "--agent",
            "a",
            "--agent",
            "b",
            "--job",
            "t-1",
        ])
        .unwrap();
        let Command::Telemetry(TelemetryCommand::Watch(args)) = cli.command else {
            panic!("not telemetry");
        };
        assert_eq!(args.view, ViewArg::Aggregated);
        assert_eq!(args.filter.agent, vec!["a", "b"]);
        assert_eq!(args.filter.job.as_deref(), Some("t-1"));
    }
}

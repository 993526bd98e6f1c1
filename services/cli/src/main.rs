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
mod members;
mod render;

use clap::{Parser, Subcommand};
use commands::admin::AdminCommand;
use commands::alerts::AlertsArgs;
use commands::audit::AuditCommand;
use commands::checkpoints::CheckpointsArgs;
use commands::gpus::GpusArgs;
use commands::logs::LogsArgs;
use commands::telemetry::TelemetryCommand;
use commands::train::TrainCommand;
use errors::CliError;
use render::OutputFormat;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Where the coordinator listens unless `--coordinator` or `COHORT_COORDINATOR` says otherwise.
pub const COORDINATOR_DEFAULT: &str = "http://127.0.0.1:50051";

/// Control data-parallel GPU training on a cohort coordinator.
#[derive(Debug, Clone, Parser)]
#[command(name = "cohort", version, about, propagate_version = true)]
pub struct Cli {
    /// The coordinator's gRPC address (`http://host:port`; `host:port` means
    /// http), or several, comma-separated: the first that answers is used,
    /// and a standby's answer sends the command on to the leader.
    #[arg(
        long,
        global = true,
        env = "COHORT_COORDINATOR",
        default_value = COORDINATOR_DEFAULT,
        value_name = "URL"
    )]
    pub coordinator: String,

    /// The API token, sent as `authorization: Bearer <token>` (see
    /// `cohort admin token create`).
    #[arg(
        long,
        global = true,
        env = "COHORT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,

    /// The PEM CA that signed the coordinator's certificate (`https://` URLs).
    #[arg(long, global = true, env = "COHORT_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,

    /// Send the token over plaintext `http://` to a coordinator that is not
    /// on this machine. Anyone on the path can read it: use `https://`.
    #[arg(long, global = true)]
    pub allow_plaintext_token: bool,

    /// How long to wait for the connection to the coordinator, in seconds.
    #[arg(long, global = true, default_value = "5", value_name = "SECS", value_parser = parse_seconds)]
    pub connect_timeout: Duration,

    /// Output format: aligned tables for people, or the API's messages as JSON.
    #[arg(short, long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// List every GPU of every agent: memory, utilization, temperature, holder,
    /// health. Subcommands recommend GPUs, check a selection, estimate memory.
    #[command(args_conflicts_with_subcommands = true)]
    Gpus(GpusArgs),
    /// List the agents known to the coordinator (with each one's last host
    /// doctor verdict); `doctor NAME` checks an agent's host.
    Agents(commands::agents::AgentsArgs),
    /// Submit, list, inspect, cancel and watch trainings.
    #[command(subcommand)]
    Train(TrainCommand),
    /// Sweeps: a searcher starts trainings of one config over a search
    /// space and keeps the best (create, get, list, cancel).
    #[command(subcommand)]
    Sweep(commands::sweep::SweepCommand),
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
    /// The log lines of a training's ranks (`--follow`: live).
    Logs(LogsArgs),
    /// Tokens and team quotas (admins).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// The audit trail: who did what, allowed or denied.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Who the coordinator takes you for: your token's name, team and role.
    Whoami,
}

/// A duration in seconds, e.g. `5` or `0.5`.
pub(crate) fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} must be a positive number of seconds"))
}

/// How many NOT_LEADER answers a command follows to the leader they name.
const MAX_FOLLOWS: usize = 2;

/// Runs the command, then keeps the coordinators' member set it learned
/// for the next run ([`members`]).
async fn run(cli: Cli) -> Result<(), CliError> {
    let given = cli.coordinator.clone();
    let outcome = run_following(cli).await;
    members::save(&given);
    outcome
}

/// Runs the command; a standby's NOT_LEADER answer (which changed nothing)
/// sends it again to the leader the answer names.
async fn run_following(cli: Cli) -> Result<(), CliError> {
    let mut coordinator = client::Coordinator {
        url: cli.coordinator.clone(),
        members_key: cli.coordinator.clone(),
        connect_timeout: cli.connect_timeout,
        token: cli.token.clone(),
        ca_cert: cli.ca_cert.clone(),
        allow_plaintext_token: cli.allow_plaintext_token,
    };
    let mut follows = 0;
    loop {
        match run_on(&coordinator, cli.clone()).await {
            Err(CliError::Rpc(status)) if follows < MAX_FOLLOWS => {
                match cohort_proto::error::leader_of(&status) {
                    // Never from https:// down to http:// (or the reverse):
                    // a standby's answer does not choose how we talk.
                    Some(leader) if !coordinator.same_scheme(&leader) => {
                        tracing::warn!(%leader, "a standby named a leader of another scheme: not following it");
                        return Err(CliError::Rpc(status));
                    }
                    Some(leader) => {
                        tracing::info!(%leader, "a standby answered: sending the command to the leader");
                        coordinator = coordinator.led_by(&leader);
                        follows += 1;
                    }
                    None => return Err(CliError::Rpc(status)),
                }
            }
            other => return other,
        }
    }
}

async fn run_on(coordinator: &client::Coordinator, cli: Cli) -> Result<(), CliError> {
    let out = cli.output;
    match cli.command {
        Command::Gpus(args) => commands::gpus::run(coordinator, args, out).await,
        Command::Agents(args) => commands::agents::run(coordinator, args, out).await,
        Command::Checkpoints(args) => commands::checkpoints::run(coordinator, args, out).await,
        Command::Logs(args) => commands::logs::run(coordinator, args, out).await,
        Command::Train(cmd) => commands::train::run(coordinator, cmd, out).await,
        Command::Sweep(cmd) => commands::sweep::run(coordinator, cmd, out).await,
        Command::Telemetry(cmd) => commands::telemetry::run(coordinator, cmd, out).await,
        Command::Alerts(args) => commands::alerts::run(coordinator, args, out).await,
        Command::Admin(cmd) => commands::admin::run(coordinator, cmd, out).await,
        Command::Audit(cmd) => commands::audit::run(coordinator, cmd, out).await,
        Command::Whoami => commands::admin::whoami(coordinator, out).await,
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
    use commands::gpus::GpusCommand;
    use commands::telemetry::args::ViewArg;
    use commands::train::StateArg;

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
    fn admin_commands() {
        let cli = parse(&[
            "admin", "token", "create", "--team", "vision", "--name", "ci", "--role", "editor",
            "--ttl", "30d", "--token", "s3cret",
        ])
        .unwrap();
        assert_eq!(cli.token.as_deref(), Some("s3cret"));
        let Command::Admin(AdminCommand::Token(commands::admin::TokenCommand::Create(args))) =
            cli.command
        else {
            panic!("not token create");
        };
        assert_eq!(args.role, commands::admin::RoleArg::Editor);
        assert_eq!(args.ttl, Some(Duration::from_secs(30 * 86400)));
        assert!(parse(&[
            "admin", "token", "create", "--team", "t", "--name", "n", "--role", "root"
        ])
        .is_err());
        let cli = parse(&["admin", "quota", "set", "vision", "--gpus", "4"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Admin(AdminCommand::Quota(commands::admin::QuotaCommand::Set {
                gpus: Some(4),
                max_queued: None,
                ..
            }))
        ));
        assert!(parse(&["admin", "quota", "set", "vision", "--gpus", "-1"]).is_err());
        assert!(parse(&["audit", "list", "--since", "7d", "--team", "vision"]).is_ok());
        assert!(matches!(
            parse(&["whoami"]).unwrap().command,
            Command::Whoami
        ));
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

//! `cohort telemetry`: live GPU metrics ([`live`]: `watch` and `query`) and
//! their history as sparklines ([`history`]).

pub mod args;
mod history;
mod live;

pub use args::{filter, MetricsFilterArgs, TelemetryCommand};

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::OutputFormat;

/// Runs one `cohort telemetry` command.
pub async fn run(
    coordinator: &Coordinator,
    command: TelemetryCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    match command {
        TelemetryCommand::Watch(args) => live::watch(coordinator, &args, out).await,
        TelemetryCommand::Query(args) => live::query(coordinator, &args, out).await,
        TelemetryCommand::History(args) => history::history(coordinator, &args, out).await,
    }
}

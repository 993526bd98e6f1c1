//! `cohort alerts`: the alerts active now as a table ([`list`]), or every
//! raise and resolution as it happens ([`watch`]).

pub mod args;
mod list;
mod watch;

pub use args::{AlertsArgs, AlertsCommand};

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::OutputFormat;

/// Runs `cohort alerts` (a list, or `watch`).
pub async fn run(
    coordinator: &Coordinator,
    args: AlertsArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    match args.command {
        Some(AlertsCommand::Watch(w)) => watch::watch(coordinator, &w, out).await,
        None => list::list(coordinator, &args.list, out).await,
    }
}

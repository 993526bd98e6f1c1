//! `cohort logs ID [--rank N]... [--attempt N] [--tail N] [--follow]`:
//! TrainingService.WatchLogs, each line prefixed `[rank N]` (one JSON
//! object per line with `-o json`).

use super::interruptible;
use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::{emit, emit_json, json, OutputFormat};
use clap::Args;
use cohort_proto::v1::{training_service_client::TrainingServiceClient, LogLine, WatchLogsRequest};

#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The training.
    pub training_id: String,
    /// Only this rank (repeat for several); default every rank.
    #[arg(long = "rank", value_name = "N")]
    pub ranks: Vec<i32>,
    /// The attempt (1 is the first); default the current one.
    #[arg(long, value_name = "N")]
    pub attempt: Option<i32>,
    /// How many of each rank's last lines to show first (at most 10000).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub tail: i32,
    /// Then keep showing new lines until the attempt ends (or Ctrl-C).
    #[arg(long, short)]
    pub follow: bool,
}

impl LogsArgs {
    pub fn request(&self) -> WatchLogsRequest {
        WatchLogsRequest {
            training_id: self.training_id.clone(),
            ranks: self.ranks.clone(),
            attempt: self.attempt,
            tail: self.tail,
            follow: self.follow,
        }
    }
}

/// One line as shown: `[rank N] line`.
pub fn line(l: &LogLine) -> String {
    format!("[rank {}] {}", l.rank, l.line)
}

pub async fn run(
    coordinator: &Coordinator,
    args: LogsArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let mut stream = client.watch_logs(args.request()).await?.into_inner();
    loop {
        let next = match interruptible(stream.message()).await {
            // Ctrl-C is the usual way to stop following: end quietly.
            None => return Ok(()),
            Some(next) => next?,
        };
        let Some(l) = next else { return Ok(()) };
        match out {
            OutputFormat::Table => emit(&line(&l))?,
            OutputFormat::Json => emit_json(&json::message(&l))?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_become_the_request() {
        let cli = crate::Cli::try_parse_from([
            "cohort", "logs", "trn-1", "--rank", "0", "--rank", "2", "--tail", "5", "-f",
        ])
        .unwrap();
        let crate::Command::Logs(args) = cli.command else {
            panic!("not logs");
        };
        let r = args.request();
        assert_eq!(
            (r.training_id.as_str(), r.ranks, r.tail, r.follow),
            ("trn-1", vec![0, 2], 5, true)
        );
        assert_eq!(r.attempt, None);
        let l = LogLine {
            rank: 2,
            attempt: 1,
            line: "step 10".into(),
            note: false,
        };
        assert_eq!(line(&l), "[rank 2] step 10");
    }
}

//! The command lines of what [`crate::Cluster`] starts: a coordinator
//! serving a socket handed over bound, an agent with simulated GPUs, each
//! marked as this test's and deaf to the test runner's own `COHORT_*`
//! settings.

use crate::bins::Binaries;
use crate::procs::{ChildProc, MARK_VAR};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// The children's log filter: cohort's own lines, not the transport's.
const LOG_FILTER: &str = "info,h2=warn,tower=warn,hyper=warn,tonic=warn";

/// What a coordinator would otherwise read from the test runner's environment.
const COORDINATOR_ENV: [&str; 8] = [
    "COHORT_DATABASE_URL",
    "COHORT_LISTEN",
    "COHORT_DATA_DIR",
    "COHORT_AUTH",
    "COHORT_TLS_CERT",
    "COHORT_TLS_KEY",
    "COHORT_AGENT_CA",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// What an agent would otherwise read from it.
const AGENT_ENV: [&str; 6] = [
    "COHORT_COORDINATOR",
    "COHORT_AGENT_NAME",
    "COHORT_AGENT_TLS_CA",
    "COHORT_AGENT_TLS_CERT",
    "COHORT_AGENT_TLS_KEY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// A coordinator on 127.0.0.1:`port`, serving the socket passed as fd 3
/// (`--listen-fd 3`), its data in `data_dir`.
pub fn coordinator(bins: &Binaries, port: u16, data_dir: &Path, mark: &str) -> Command {
    let mut command = Command::new(&bins.coordinator);
    command
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--listen-fd", "3"])
        .arg("--data-dir")
        .arg(data_dir)
        .env(MARK_VAR, mark)
        .env("RUST_LOG", LOG_FILTER)
        .env("NO_COLOR", "1");
    for var in COORDINATOR_ENV {
        command.env_remove(var);
    }
    command
}

/// An agent to start.
pub struct AgentLaunch<'a> {
    /// The coordinators' URLs, comma-separated.
    pub coordinators: &'a str,
    pub name: &'a str,
    pub gpus: usize,
    pub work_dir: &'a Path,
    /// Heartbeat and telemetry interval, e.g. `500ms`.
    pub interval: &'a str,
    pub mark: &'a str,
    /// Variables its ranks get besides the mark (`--rank-env-file`).
    pub rank_env: &'a [(String, String)],
}

/// An agent with simulated GPUs on 127.0.0.1, running `bins.rank`; its
/// ranks carry the mark.
pub fn agent(bins: &Binaries, a: &AgentLaunch) -> Command {
    let mut command = Command::new(&bins.agent);
    command
        .arg("--coordinator")
        .arg(a.coordinators)
        .args(["--name", a.name])
        .args(["--simulate-gpus", &a.gpus.to_string()])
        .args(["--address", "127.0.0.1"])
        .arg("--work-dir")
        .arg(a.work_dir)
        .arg("--rank-binary")
        .arg(&bins.rank)
        .args(["--interval", a.interval, "--stop-grace", "3s"])
        .args(crate::procs::rank_env_file(a.work_dir, a.mark, a.rank_env))
        .env(MARK_VAR, a.mark)
        .env("RUST_LOG", LOG_FILTER)
        .env("NO_COLOR", "1");
    for var in AGENT_ENV {
        command.env_remove(var);
    }
    command
}

/// Polls `ready` every 100 ms until it answers `Ok`, while `process` runs;
/// `Err` when it exits first or `timeout` passes (with the last answer).
pub async fn until_ready<F, Fut>(
    process: &mut ChildProc,
    timeout: Duration,
    mut ready: F,
) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("no answer yet");
    while tokio::time::Instant::now() < deadline {
        if let Some(status) = process.try_exit() {
            return Err(exited(status));
        }
        match ready().await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "{} was not ready within {timeout:?} (last: {last})",
        process.name
    ))
}

fn exited(status: ExitStatus) -> String {
    format!("it exited ({status}) before it was ready")
}

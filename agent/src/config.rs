//! How the agent runs: its configuration, built from the command line
//! (`cli.rs`) and read by the session (`connect/`), the launch of ranks
//! (`launch/`) and the host doctor.

use std::path::PathBuf;
use std::time::Duration;

/// How the agent runs; built from the command line.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The coordinators' URLs, comma-separated (a bootstrap list), e.g.
    /// `http://127.0.0.1:50051`; see [`crate::connect::Targets`].
    pub coordinator: String,
    pub agent_name: String,
    pub host_name: String,
    /// The address other hosts' ranks reach this host by; empty: the host name.
    pub address: String,
    /// Heartbeat and telemetry interval unless the coordinator sets its own.
    pub interval: Duration,
    /// Where job configs and run directories go.
    pub work_dir: PathBuf,
    /// The `cohort-rank` executable.
    pub rank_program: PathBuf,
    /// `--program-root`: where teams' programs may run from (none: this
    /// agent runs no program trainings).
    pub program_roots: crate::program::ProgramRoots,
    /// `--program-sandbox`: whether program ranks run under Landlock.
    pub program_sandbox: crate::program::sandbox::SandboxMode,
    /// SIGTERM-to-SIGKILL grace when a StopRanks names none.
    pub stop_grace: Duration,
    /// How much and how long a restarted program's checkpoint is fetched
    /// from the agent that holds it ([`crate::program::peer`]).
    pub resume_fetch: crate::program::peer::FetchLimits,
    /// First reconnect delay; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// What each team's ranks may reach and the environment they get.
    pub teams: crate::teams::TeamPolicy,
    /// TLS to the coordinator (`https://` URLs).
    pub tls: ClientTls,
    /// What the host doctor checks with when the coordinator asks for it.
    pub doctor: crate::doctor::DoctorSetup,
}

/// The agent's TLS files, read at every connection (so a rotated
/// certificate is picked up on the next one; SIGHUP reconnects at once).
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// PEM CA that signed the coordinator's certificate.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key (the agent's identity).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The name to verify the coordinator's certificate against, when not
    /// the URL's host.
    pub server_name: Option<String>,
}

//! The `cohort-agent` command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
pub use cohort_spec::duration::parse_duration;

use crate::probe::SimSpec;

/// Where the coordinator listens unless told otherwise.
pub const COORDINATOR_DEFAULT: &str = "http://127.0.0.1:50051";
/// Heartbeat and telemetry interval unless told otherwise.
pub const INTERVAL_DEFAULT: &str = "1s";
/// SIGTERM-to-SIGKILL grace for stopping ranks unless told otherwise.
pub const STOP_GRACE_DEFAULT: &str = "10s";

/// The cohort agent: reports this host's GPUs to the coordinator and runs the
/// training ranks it is told to run.
#[derive(Debug, Clone, Parser)]
#[command(name = "cohort-agent", version, about)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The coordinator's gRPC endpoint, or several, comma-separated
    /// (coordinators sharing PostgreSQL): any of them points to the leader.
    #[arg(long, env = "COHORT_COORDINATOR", default_value = COORDINATOR_DEFAULT)]
    pub coordinator: String,

    /// This agent's name, unique per coordinator (default: the host name).
    #[arg(long, env = "COHORT_AGENT_NAME", global = true)]
    pub name: Option<String>,

    /// Simulate N GPUs with MEM memory each (default 16GiB) instead of reading
    /// NVML, e.g. `2`, `2:16GiB`, `4:24000MiB`. Every report marks them simulated.
    #[arg(long, value_name = "N[:MEM]", global = true)]
    pub simulate_gpus: Option<SimSpec>,

    /// The address other hosts' ranks reach this host by (MASTER_ADDR when
    /// rank 0 runs here; default: the host name, as the coordinator sees fit).
    #[arg(long)]
    pub address: Option<String>,

    /// With --simulate-gpus: a file of `INDEX FIELD VALUE` lines (e.g.
    /// `0 temperature_c 91`) pinning simulated values; re-read when it changes.
    #[arg(long, value_name = "FILE", requires = "simulate_gpus")]
    pub simulate_overrides: Option<PathBuf>,

    /// How often to send heartbeats and GPU telemetry (when the coordinator
    /// asks for other intervals on registration, its intervals win), e.g. `1s`, `500ms`.
    #[arg(long, default_value = INTERVAL_DEFAULT, value_parser = parse_duration)]
    pub interval: Duration,

    /// Directory for job configs and rank run directories
    /// (default: `.cohort/agent-<name>`).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,

    /// The rank program to start (default: `cohort-rank` next to this executable).
    #[arg(long, global = true)]
    pub rank_binary: Option<PathBuf>,

    /// A directory teams' programs may run from (`[program]` trainings whose
    /// working_dir lies under it); repeatable. None: this agent runs no
    /// program trainings.
    #[arg(long = "program-root", value_name = "DIR", global = true)]
    pub program_roots: Vec<PathBuf>,

    /// A directory one team's programs may run from (no other team's);
    /// repeatable.
    #[arg(long = "team-program-root", value_name = "TEAM=DIR", value_parser = crate::teams::team_pair, global = true)]
    pub team_program_roots: Vec<(String, String)>,

    /// How program ranks are confined: `landlock` (the default; an agent
    /// with --program-root refuses to start on a kernel without Landlock)
    /// or `none` (unconfined).
    #[arg(long, value_enum, default_value_t = crate::program::sandbox::SandboxMode::Landlock)]
    pub program_sandbox: crate::program::sandbox::SandboxMode,

    /// How long a rank gets to exit after SIGTERM before its group is SIGKILLed.
    #[arg(long, default_value = STOP_GRACE_DEFAULT, value_parser = parse_duration)]
    pub stop_grace: Duration,

    /// The largest checkpoint (GiB) fetched from another agent on a
    /// restart of a program whose checkpoints are on one host's disk; a
    /// bigger one fails the start, naming the size: use shared or s3://
    /// checkpoint storage for checkpoints that large.
    #[arg(long, default_value_t = 16.0)]
    pub resume_fetch_max_gib: f64,

    /// How long fetching that checkpoint may take.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub resume_fetch_timeout: Duration,

    /// A directory trainings may read data from and write checkpoints to
    /// (repeatable). With any, a training whose local paths lie outside
    /// every root is refused before a rank starts; without, any path goes.
    /// `COHORT_AGENT_DATA_ROOTS` gives several, separated by `:`.
    #[arg(
        long = "data-root",
        value_name = "DIR",
        env = "COHORT_AGENT_DATA_ROOTS",
        value_delimiter = ':',
        global = true
    )]
    pub data_roots: Vec<PathBuf>,

    /// A directory one team's trainings may use (`TEAM=DIR`, repeatable),
    /// beside the --data-root directories every team may. Once the agent
    /// has any root, a team with none may use only its run dir.
    #[arg(long = "team-data-root", value_name = "TEAM=DIR", value_parser = crate::teams::team_pair, global = true)]
    pub team_data_roots: Vec<(String, String)>,

    /// An object-storage prefix every team's ranks may read and write
    /// (`s3://bucket/prefix`, repeatable). With any --s3-prefix or
    /// --team-s3-prefix, ranks touch no object outside theirs.
    #[arg(long = "s3-prefix", value_name = "URI")]
    pub s3_prefixes: Vec<String>,

    /// An object-storage prefix of one team (`TEAM=s3://bucket/prefix`, repeatable).
    #[arg(long = "team-s3-prefix", value_name = "TEAM=URI", value_parser = crate::teams::team_pair)]
    pub team_s3_prefixes: Vec<(String, String)>,

    /// Variables every rank on this agent gets (`NAME=VALUE` lines). Ranks
    /// do not inherit the agent's environment: credentials reach them
    /// only through this file or --team-env-file.
    #[arg(long, env = "COHORT_AGENT_RANK_ENV_FILE", value_name = "FILE")]
    pub rank_env_file: Option<PathBuf>,

    /// Variables one team's ranks get (`TEAM=FILE`, repeatable), after --rank-env-file's.
    #[arg(long = "team-env-file", value_name = "TEAM=FILE", value_parser = crate::teams::team_pair)]
    pub team_env_files: Vec<(String, String)>,

    /// PEM CA of the coordinator's certificate (for an `https://` coordinator).
    #[arg(long, env = "COHORT_AGENT_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// The name the coordinators' certificates carry, when it is not the
    /// host of the URL dialled (a leader advertising its pod IP while its
    /// certificate names the Service).
    #[arg(long, env = "COHORT_AGENT_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,

    /// PEM client certificate: the agent's identity (its DNS SAN, else its
    /// CN, must be the agent's --name). Re-read at every connection; SIGHUP
    /// reconnects with the files as they are now.
    #[arg(
        long,
        env = "COHORT_AGENT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "COHORT_AGENT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Print the GPU inventory and one telemetry sample as a table, then exit
    /// (checks the probe without a coordinator).
    #[arg(long)]
    pub probe_once: bool,

    #[command(flatten)]
    pub observability: cohort_observe::ObservabilityArgs,
}

/// What `cohort-agent` does instead of running as an agent.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Check this host end to end (driver, CUDA, NCCL, compute capability,
    /// topology, memory, a matmul per GPU, an all-reduce, the roots) with
    /// the flags the agent would run with; exit 0 when no check fails.
    Doctor(DoctorArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Print `{"checks": [{"name", "status", "value", "detail"}...], "ok"}`
    /// instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bytes per all-reduce (default: 256 MiB over NCCL, 16 MiB over gloo).
    #[arg(long, value_name = "BYTES")]
    pub all_reduce_bytes: Option<u64>,
    /// How long one libtorch check (a `cohort-rank doctor` process) may run.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl Args {
    /// The roots the doctor looks at, each with the flag that named it.
    pub fn doctor_roots(&self) -> Vec<crate::doctor::Root> {
        let root = |flag: String, path: &std::path::Path| crate::doctor::Root {
            flag,
            path: path.to_path_buf(),
        };
        let mut roots: Vec<_> = self
            .data_roots
            .iter()
            .map(|p| root("--data-root".into(), p))
            .collect();
        roots.extend(
            self.team_data_roots
                .iter()
                .map(|(team, p)| root(format!("--team-data-root {team}"), p.as_ref())),
        );
        roots.extend(
            self.program_roots
                .iter()
                .map(|p| root("--program-root".into(), p)),
        );
        roots.extend(
            self.team_program_roots
                .iter()
                .map(|(team, p)| root(format!("--team-program-root {team}"), p.as_ref())),
        );
        roots
    }

    /// The doctor's setup: this agent's flags and its rank program.
    pub fn doctor_setup(
        &self,
        rank_program: PathBuf,
        doctor: Option<&DoctorArgs>,
    ) -> crate::doctor::DoctorSetup {
        crate::doctor::DoctorSetup {
            simulate: self.simulate_gpus,
            agent_name: self.agent_name(),
            rank_program,
            roots: self.doctor_roots(),
            all_reduce_bytes: doctor.and_then(|d| d.all_reduce_bytes),
            timeout: doctor.map_or(crate::doctor::PROCESS_TIMEOUT, |d| d.timeout),
        }
    }

    /// The team flags, for [`crate::teams::TeamPolicy::load`].
    pub fn team_flags(&self) -> crate::teams::TeamFlags {
        let pairs = |v: &[(String, String)]| -> Vec<(String, PathBuf)> {
            v.iter()
                .map(|(t, p)| (t.clone(), PathBuf::from(p)))
                .collect()
        };
        crate::teams::TeamFlags {
            data_roots: self.data_roots.clone(),
            team_data_roots: pairs(&self.team_data_roots),
            s3_prefixes: self.s3_prefixes.clone(),
            team_s3_prefixes: self.team_s3_prefixes.clone(),
            rank_env_file: self.rank_env_file.clone(),
            team_env_files: pairs(&self.team_env_files),
        }
    }

    /// The name given, or the host name.
    pub fn agent_name(&self) -> String {
        self.name.clone().unwrap_or_else(host_name)
    }

    /// The `cohort-rank` to launch: `--rank-binary` made absolute (ranks
    /// start in their run directory, where a relative path means nothing),
    /// else the one next to this executable.
    pub fn rank_program(&self) -> Result<PathBuf, String> {
        match &self.rank_binary {
            Some(path) => std::path::absolute(path)
                .map_err(|e| format!("--rank-binary {}: {e}", path.display())),
            None => crate::supervisor::default_rank_program()
                .map_err(|e| format!("locating cohort-rank next to cohort-agent: {e}")),
        }
    }

    /// The work directory given, or `.cohort/agent-<name>`.
    pub fn work_dir(&self) -> PathBuf {
        self.work_dir.clone().unwrap_or_else(|| {
            PathBuf::from(".cohort").join(format!("agent-{}", self.agent_name()))
        })
    }
}

/// This machine's host name, or `localhost` when it cannot be read. Read
/// once at start-up, before any session runs.
#[allow(clippy::disallowed_methods)]
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        let args = Args::try_parse_from([
            "cohort-agent",
            "--coordinator",
            "http://10.0.0.1:50051",
            "--name",
            "a1",
            "--simulate-gpus",
            "2:16GiB",
            "--interval",
            "500ms",
        ])
        .unwrap();
        assert_eq!(args.simulate_gpus.unwrap().count, 2);
        assert_eq!(args.interval, Duration::from_millis(500));
        assert_eq!(args.work_dir(), PathBuf::from(".cohort/agent-a1"));

        let relative = Args::try_parse_from(["cohort-agent", "--rank-binary", "bin/cohort-rank"])
            .unwrap()
            .rank_program()
            .unwrap();
        assert!(relative.is_absolute(), "{}", relative.display());
        assert!(relative.ends_with("bin/cohort-rank"));

        let err = Args::try_parse_from(["cohort-agent", "--simulate-gpus", "2:16"]).unwrap_err();
        assert!(err.to_string().contains("no unit"), "{err}");
    }
}

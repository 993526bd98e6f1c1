//! What to start: the rank's identity and its launch description.

use cohort_spec::launch::Launch;
use std::fmt;
use std::path::{Path, PathBuf};

/// The rank program's file name, looked up next to the agent's executable.
pub const RANK_PROGRAM_NAME: &str = "cohort-rank";

/// Identifies one rank process: a job, the attempt (restart) number and the rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RankKey {
    pub job_id: String,
    pub attempt: u32,
    pub rank: u32,
}

impl RankKey {
    pub fn new(job_id: impl Into<String>, attempt: u32, rank: u32) -> Self {
        Self {
            job_id: job_id.into(),
            attempt,
            rank,
        }
    }
}

impl fmt::Display for RankKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.job_id, self.attempt, self.rank)
    }
}

/// Everything needed to start one rank, whatever it runs: `PROGRAM ARGS...`
/// in its working directory with the launch contract's environment. The
/// built-in SAE is `cohort-rank --config FILE --run-dir DIR`
/// ([`RankSpec::cohort_rank_args`]); a team's program is its own argv.
#[derive(Debug, Clone, PartialEq)]
pub struct RankSpec {
    pub key: RankKey,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<std::ffi::OsString>,
    /// Where it runs (it must exist).
    pub working_dir: PathBuf,
    /// Where its output is kept ([`super::log`]).
    pub log_path: PathBuf,
    /// The run directory (checkpoints, reports: `COHORT_RUN_DIR`); it must
    /// exist (the caller creates it, off the async runtime).
    pub run_dir: PathBuf,
    /// A program's rank 0: the checkpoint directory its agent watches.
    pub checkpoints: Option<crate::program::checkpoints::CheckpointWatch>,
    /// A program's confinement (Landlock), when the agent confines them.
    pub sandbox: Option<crate::program::sandbox::SandboxRules>,
    pub world_size: u32,
    /// The sizes the training may be re-formed at, smallest and largest.
    pub world_sizes: (u32, u32),
    pub local_rank: u32,
    pub local_world_size: u32,
    /// This host's place among the attempt's hosts, and their number.
    pub group_rank: u32,
    pub group_world_size: u32,
    /// The training's restart budget.
    pub max_restarts: u32,
    pub master_addr: String,
    pub master_port: u16,
    /// The GPU this rank is placed on (reported back in events).
    pub gpu_index: u32,
    /// The value of CUDA_VISIBLE_DEVICES: the GPU index for a real GPU, empty
    /// for a simulated one (the rank then runs on the CPU).
    pub cuda_visible_devices: String,
    /// Additional environment variables, after the launch contract's.
    pub extra_env: Vec<(String, String)>,
    /// What the rank's environment starts from (it inherits nothing from
    /// the agent): the passed-through variables and the env files.
    pub base_env: Vec<(String, String)>,
    /// The rank's host-memory limit (its own cgroup), where the host has a
    /// memory controller; `None`: unbounded.
    pub memory_limit: Option<u64>,
    /// How a preemption notice reaches it (`COHORT_NOTICE_FILE`); `None`:
    /// a notice stops it as a stop does.
    pub notice: Option<NoticeSpec>,
}

/// How a rank learns of a preemption notice: `COHORT_PREEMPTED=1` in its
/// notice file, then a signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeSpec {
    /// The file the agent writes (`COHORT_NOTICE_FILE`): under the run
    /// directory, so a confined program can read it.
    pub file: PathBuf,
    /// SIGUSR1 for `cohort-rank` (it checkpoints and exits PREEMPTED; its
    /// SIGTERM stays a plain stop), SIGTERM for a program.
    pub signal: nix::sys::signal::Signal,
}

impl NoticeSpec {
    /// The notice file of one rank of one attempt below `run_dir` (attempts
    /// share the run directory; each has its own files).
    pub fn file_in(run_dir: &Path, attempt: u32, rank: u32) -> PathBuf {
        run_dir
            .join(".cohort")
            .join(format!("notice-attempt-{attempt}-rank-{rank}"))
    }
}

impl RankSpec {
    /// The launch contract's variables ([`cohort_spec::launch`]), on top
    /// of [`RankSpec::base_env`], then [`RankSpec::extra_env`].
    pub fn env(&self) -> Vec<(String, String)> {
        let launch = Launch {
            training_id: self.key.job_id.clone(),
            attempt: self.key.attempt,
            rank: self.key.rank,
            world_size: self.world_size,
            world_sizes: self.world_sizes,
            local_rank: self.local_rank,
            local_world_size: self.local_world_size,
            group_rank: self.group_rank,
            group_world_size: self.group_world_size,
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
            max_restarts: self.max_restarts,
            run_dir: self.run_dir.display().to_string(),
            cuda_visible_devices: self.cuda_visible_devices.clone(),
        };
        let mut env: Vec<(String, String)> = launch
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        // The rank exits when the agent dies, so a killed agent leaves no orphans.
        env.push(("COHORT_EXIT_WITH_PARENT".to_string(), "1".to_string()));
        if let Some(notice) = &self.notice {
            env.push((
                cohort_spec::launch::NOTICE_FILE.to_string(),
                notice.file.display().to_string(),
            ));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// `cohort-rank`'s arguments: its config file and run directory.
    pub fn cohort_rank_args(config_path: &Path, run_dir: &Path) -> Vec<std::ffi::OsString> {
        vec![
            "--config".into(),
            config_path.as_os_str().to_owned(),
            "--run-dir".into(),
            run_dir.as_os_str().to_owned(),
        ]
    }
}

/// `cohort-rank` in the directory of the running executable.
pub fn default_rank_program() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join(RANK_PROGRAM_NAME))
}

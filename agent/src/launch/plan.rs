//! How a StartRanks' ranks are launched, whatever they run: the built-in
//! SAE (`cohort-rank --config FILE --run-dir DIR` in the run directory, with
//! the team's environment) or a team's program (its argv in its working
//! directory under a `--program-root`, with a clean environment, its
//! checkpoint directory and, on a restart, the checkpoint to resume from).
//! Both become the same [`RankSpec`]s and go through the same supervisor.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cohort_proto::error::Reason;
use cohort_spec::checkpoint::{step_of, CHECKPOINTS_DIR};
use cohort_spec::launch;
use cohort_spec::location::Location;
use cohort_spec::resume::Published;
use cohort_spec::roots::DataRoots;
use cohort_spec::{ProgramTraining, Workload};

use super::{Refusal, StartRanks};
use crate::config::AgentConfig;
use crate::program::checkpoints::{resume_dir, CheckpointWatch};
use crate::program::peer::{self, PeerLink};
use crate::program::remote::{Remote, RemoteSpec};
use crate::program::sandbox::{SandboxMode, SandboxRules};
use crate::program::{base_env, ProgramRoots};
use crate::program::{code, frameworks};
use crate::supervisor::{NoticeSpec, RankSpec};
use cohort_spec::prefixes::S3Prefixes;

/// What every rank of this agent's share starts with.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub working_dir: PathBuf,
    pub base_env: Vec<(String, String)>,
    /// After the launch contract's variables.
    pub extra_env: Vec<(String, String)>,
    /// A program's checkpoint directory, watched on rank 0's agent.
    pub checkpoints: Option<CheckpointWatch>,
    /// A program's confinement.
    pub sandbox: Option<SandboxRules>,
    /// The signal a preemption notice sends (SIGUSR1 to `cohort-rank`,
    /// SIGTERM to a program).
    pub notice_signal: nix::sys::signal::Signal,
}

impl Plan {
    /// Fills in a rank's launch from the plan (rank 0 of a program gets
    /// its checkpoint directory watched).
    pub fn apply(&self, spec: &mut RankSpec) {
        spec.program = self.program.clone();
        spec.args = self.args.clone();
        spec.working_dir = self.working_dir.clone();
        spec.base_env = self.base_env.clone();
        spec.extra_env.extend(self.extra_env.iter().cloned());
        spec.sandbox = self.sandbox.clone();
        spec.notice = Some(NoticeSpec {
            file: NoticeSpec::file_in(&spec.run_dir, spec.key.attempt, spec.key.rank),
            signal: self.notice_signal,
        });
        if spec.key.rank == 0 {
            spec.checkpoints = self.checkpoints.clone();
        }
    }
}

/// Where an attempt's files are on this host.
#[derive(Debug, Clone)]
pub(super) struct Paths {
    /// The rank's `--config` file, in the attempt's directory.
    pub config: PathBuf,
    /// The run directory: the ranks' working directory (the SAE's).
    pub run_dir: PathBuf,
}

/// What the training's team may reach on this host: its data roots (with
/// the run directory) and its object-storage prefixes.
#[derive(Debug, Clone)]
pub(super) struct Reach {
    pub roots: DataRoots,
    pub prefixes: S3Prefixes,
}

/// The launch of the built-in SAE.
pub(super) fn sae(config: &AgentConfig, team: &str, paths: &Paths) -> Plan {
    Plan {
        program: config.rank_program.clone(),
        args: RankSpec::cohort_rank_args(&paths.config, &paths.run_dir),
        working_dir: paths.run_dir.clone(),
        // A clean environment: never the agent's own (its credentials).
        base_env: config.teams.rank_env(team, std::env::vars()),
        extra_env: Vec::new(),
        checkpoints: None,
        sandbox: None,
        notice_signal: nix::sys::signal::Signal::SIGUSR1,
    }
}

/// Where a program training's rank-0 writes checkpoints on this host: the
/// run directory's `checkpoints/`, or `<storage>/<training id>/` on a
/// shared file system (under the team's data roots).
/// With `s3://` storage, the run directory's `checkpoints/` and the bucket
/// they are uploaded to, worked in with the team's variables and prefixes.
fn checkpoint_dir(
    p: &ProgramTraining,
    training_id: &str,
    run_dir: &Path,
    roots: &DataRoots,
    team: (&[(String, String)], &S3Prefixes),
) -> Result<(PathBuf, Option<RemoteSpec>), Refusal> {
    let Some(storage) = p.checkpoint.storage.as_deref() else {
        return Ok((run_dir.join(CHECKPOINTS_DIR), None));
    };
    let location = Location::parse(storage)
        .map_err(|e| Refusal::failed(format!("checkpoint.storage: {e}")))?
        .join(training_id);
    let dir = match &location {
        Location::Local(dir) => dir,
        Location::S3 { bucket, key } => {
            let (env, prefixes) = team;
            prefixes.check(bucket, key).map_err(|e| {
                Refusal::refused(
                    Reason::DataOutsideRoots,
                    format!("DATA_OUTSIDE_ROOTS: checkpoint.storage: {e}"),
                )
            })?;
            let remote = RemoteSpec {
                bucket: bucket.clone(),
                key: key.trim_end_matches('/').to_string(),
                env: env.to_vec(),
                prefixes: prefixes.clone(),
            };
            return Ok((run_dir.join(CHECKPOINTS_DIR), Some(remote)));
        }
    };
    roots
        .check(&dir.display().to_string(), run_dir)
        .map_err(|e| {
            Refusal::refused(
                Reason::DataOutsideRoots,
                format!("DATA_OUTSIDE_ROOTS: checkpoint.storage: {e}"),
            )
        })?;
    Ok((dir.to_path_buf(), None))
}

/// The checkpoint a restart resumes from, downloaded from the bucket into
/// `into`: the newest recorded one the bucket holds.
fn fetch_resume(
    spec: &RemoteSpec,
    published: &Published,
    attempt: u32,
    into: &Path,
) -> Result<Option<PathBuf>, Refusal> {
    if attempt <= 1 {
        return Ok(None);
    }
    let remote = Remote::open(spec).map_err(Refusal::failed)?;
    let mut steps: Vec<i64> = published.pairs().iter().map(|(_, s)| *s).collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    steps.dedup();
    for step in steps {
        if let Some(dir) = remote
            .fetch(step, into)
            .map_err(|e| Refusal::failed(format!("cannot download checkpoint {step}: {e}")))?
        {
            return Ok(Some(dir));
        }
    }
    Ok(None)
}

/// The launch of a team's program. Blocking (it resolves paths and makes
/// directories): run it off the runtime.
#[allow(clippy::too_many_arguments, clippy::disallowed_methods)]
pub(super) fn program(
    p: &ProgramTraining,
    program_roots: &ProgramRoots,
    sandbox: SandboxMode,
    team: &str,
    team_env: Vec<(String, String)>,
    prefixes: &S3Prefixes,
    training_id: &str,
    attempt: u32,
    run_dir: &Path,
    roots: &DataRoots,
    published: &Published,
    fetched: Option<PathBuf>,
    code_root: Option<PathBuf>,
) -> Result<Plan, Refusal> {
    let working_dir = match &code_root {
        Some(root) => {
            code::working_dir_in(root, &p.program.working_dir).map_err(Refusal::failed)?
        }
        None => program_roots
            .check(team, &p.program.working_dir)
            .map_err(|e| Refusal::refused(Reason::ProgramOutsideRoots, e))?,
    };
    let (dir, remote) = checkpoint_dir(p, training_id, run_dir, roots, (&team_env, prefixes))?;
    let home = run_dir.join("home");
    let tmp = run_dir.join("tmp");
    for d in [&dir, &home, &tmp] {
        std::fs::create_dir_all(d)
            .map_err(|e| Refusal::failed(format!("cannot create {}: {e}", d.display())))?;
    }
    let mut env = base_env(&home, &tmp);
    // The team's env file, then the program's own (validated: none is the
    // contract's).
    for (k, v) in team_env
        .into_iter()
        .chain(p.program.env.iter().map(|(k, v)| (k.clone(), v.clone())))
    {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
    let mut extra_env = vec![(
        launch::CHECKPOINT_DIR.to_string(),
        dir.display().to_string(),
    )];
    if let Some(global) = p.program.global_batch {
        extra_env.push((launch::GLOBAL_BATCH.to_string(), global.to_string()));
    }
    let resume = match (&remote, fetched) {
        (_, Some(fetched)) => Some(fetched),
        (None, None) => resume_dir(&dir, published, attempt),
        (Some(spec), None) => fetch_resume(spec, published, attempt, &run_dir.join(RESUME))?,
    };
    if attempt > 1 {
        let step = resume
            .as_deref()
            .and_then(|r| r.file_name()?.to_str().and_then(step_of));
        frameworks::discard_after(&dir, step);
    }
    if let Some(resume) = resume {
        let (resume_dir, resume_path) = frameworks::resume_paths(&resume);
        tracing::info!(training = training_id, attempt, resume = %resume_path.display(), "program resumes");
        extra_env.push((
            launch::RESUME_DIR.to_string(),
            resume_dir.display().to_string(),
        ));
        extra_env.push((
            launch::RESUME_PATH.to_string(),
            resume_path.display().to_string(),
        ));
    }
    let (first, rest) = p
        .program
        .command
        .split_first()
        .ok_or_else(|| Refusal::failed("program.command is empty"))?;
    let program = PathBuf::from(first);
    let args = match &code_root {
        Some(root) => code::resolve_args(root, rest),
        None => rest.iter().map(OsString::from).collect(),
    };
    // The snapshot is readable (never writable) beside the roots.
    let mut readable = program_roots.for_team(team);
    readable.extend(code_root);
    let sandbox = (sandbox == SandboxMode::Landlock)
        .then(|| SandboxRules::for_program(&program, &readable, roots.paths(), run_dir, &dir));
    Ok(Plan {
        sandbox,
        program,
        args,
        working_dir,
        base_env: env,
        extra_env,
        checkpoints: Some(CheckpointWatch {
            dir,
            keep: usize::try_from(p.checkpoint.keep).unwrap_or(1).max(1),
            remote,
        }),
        notice_signal: nix::sys::signal::Signal::SIGTERM,
    })
}

/// Where a restart's checkpoint is downloaded to (from a bucket or
/// another agent), under the run directory.
const RESUME: &str = "resume";

/// On a restart of a training whose checkpoints are on one host's disk:
/// the newest recorded checkpoint, fetched into `into` from the agent that
/// holds it when this host does not (`None`: a first attempt, shared
/// storage, or this host holds it).
async fn fetch_from_peer(
    config: &AgentConfig,
    cmd: &StartRanks,
    storage: Option<&str>,
    (run_dir, into): (&Path, PathBuf),
    peer: Option<&PeerLink>,
) -> Result<Option<PathBuf>, Refusal> {
    let newest = cmd.published.pairs().iter().map(|(_, s)| *s).max();
    let (Some(link), Some(newest)) = (peer, newest) else {
        return Ok(None);
    };
    if storage.is_some() || cmd.attempt <= 1 {
        return Ok(None);
    }
    let dir = run_dir.join(CHECKPOINTS_DIR);
    let (published, attempt) = (cmd.published.clone(), cmd.attempt);
    let local = tokio::task::spawn_blocking(move || resume_dir(&dir, &published, attempt))
        .await
        .map_err(|e| Refusal::failed(format!("launch planning failed: {e}")))?;
    if local
        .as_deref()
        .and_then(|d| d.file_name()?.to_str().and_then(step_of))
        == Some(newest)
    {
        return Ok(None);
    }
    peer::fetch(link, &cmd.training_id, newest, &into, config.resume_fetch)
        .await
        .map(Some)
        .map_err(|e| {
            Refusal::failed(format!(
                "cannot copy checkpoint {newest} from the agent that holds it: {e}"
            ))
        })
}

/// The plan for a StartRanks: a program's when its config is one, the
/// SAE's otherwise.
pub(super) async fn plan(
    config: &AgentConfig,
    cmd: &StartRanks,
    paths: &Paths,
    reach: &Reach,
    peer: Option<&PeerLink>,
) -> Result<Plan, Refusal> {
    let p = match &cmd.workload {
        Workload::Sae(sae_config) => {
            // Rank 0 restores the checkpoint and broadcasts it: its host
            // needs it among its own (an elastic training re-formed, a
            // preempted one placed again, elsewhere).
            if cmd.ranks.iter().any(|r| r.rank == 0) {
                let into = paths.run_dir.join(CHECKPOINTS_DIR);
                let storage = sae_config.checkpoint.storage.as_deref();
                fetch_from_peer(config, cmd, storage, (&paths.run_dir, into), peer).await?;
            }
            let mut plan = sae(config, &cmd.team, paths);
            // The training's NCCL variables (an allowlist the config checked), over the agent's.
            plan.extra_env.extend(sae_config.runtime.nccl_env.clone());
            return Ok(plan);
        }
        Workload::Program(p) => p.clone(),
    };
    let into = paths.run_dir.join(RESUME);
    let storage = p.checkpoint.storage.as_deref();
    let fetched = fetch_from_peer(config, cmd, storage, (&paths.run_dir, into), peer).await?;
    let code_root = match p.snapshot() {
        Some(snapshot) => Some(
            code::ensure(peer, &code::cache_dir(&config.work_dir), snapshot)
                .await
                .map_err(|e| {
                    Refusal::failed(format!(
                        "cannot fetch the program's code {}: {e}",
                        snapshot.short()
                    ))
                })?,
        ),
        None => None,
    };
    let team_env = config.teams.rank_env(&cmd.team, std::iter::empty());
    let program_roots = config.program_roots.clone();
    let sandbox = config.program_sandbox;
    let team = cmd.team.clone();
    let (id, attempt, published) = (cmd.training_id.clone(), cmd.attempt, cmd.published.clone());
    let (run_dir, reach) = (paths.run_dir.clone(), reach.clone());
    tokio::task::spawn_blocking(move || {
        program(
            &p,
            &program_roots,
            sandbox,
            &team,
            team_env,
            &reach.prefixes,
            &id,
            attempt,
            &run_dir,
            &reach.roots,
            &published,
            fetched,
            code_root,
        )
    })
    .await
    .map_err(|e| Refusal::failed(format!("launch planning failed: {e}")))?
}

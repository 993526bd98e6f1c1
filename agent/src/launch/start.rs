//! Starting an agent's share of an attempt: its directories, what its team
//! may reach, the launch contract's environment, the plan, then each rank
//! through the supervisor. Nothing starts when any step before the ranks
//! fails; every rank is then reported with the same refusal.

use std::path::{Path, PathBuf};

use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use cohort_observe::propagation;
use cohort_proto::error::Reason;
use cohort_spec::prefixes::S3Prefixes;
use cohort_spec::roots::{self, DataRoots};
use cohort_spec::TrainingConfig;

use super::plan::{self, Paths, Plan, Reach};
use super::{RankAssignment, Refusal, StartFailure, StartRanks};
use crate::config::AgentConfig;
use crate::probe::GpuInfo;
use crate::supervisor::log::log_path;
use crate::supervisor::{RankKey, RankSpec, Supervisor};

/// What starting ranks uses of the agent.
pub struct Host<'a> {
    pub config: &'a AgentConfig,
    pub gpus: &'a [GpuInfo],
    pub supervisor: &'a mut Supervisor,
    /// The coordinator of the current session, to fetch a checkpoint
    /// another agent holds.
    pub peer: Option<&'a crate::program::peer::PeerLink>,
}

/// Starts the command's ranks. Returns the ranks that did not start;
/// the others report through the supervisor's events.
pub async fn start(host: Host<'_>, cmd: StartRanks) -> Vec<StartFailure> {
    let (span, trace_env) = trace(&cmd);
    tracing::info!(
        training = %cmd.training_id,
        attempt = cmd.attempt,
        ranks = cmd.ranks.len(),
        world_size = cmd.world_size,
        master = %format!("{}:{}", cmd.master_addr, cmd.master_port),
        "start ranks"
    );
    // The span is never entered across an await (the task may resume on
    // another thread, leaving it entered there): the awaits are
    // instrumented instead.
    let prepared = prepare(host.config, &cmd, host.peer)
        .instrument(span.clone())
        .await;
    let ready = match prepared {
        Ok(ready) => ready,
        Err(refusal) => {
            tracing::warn!(training = %cmd.training_id, error = %refusal.message, "cannot start ranks");
            return cmd
                .keys()
                .into_iter()
                .map(|k| (k, refusal.clone()))
                .collect();
        }
    };
    let ready = Prepared {
        env: [trace_env, ready.env].concat(),
        ..ready
    };
    start_each(host, &cmd, &ready).instrument(span).await
}

/// What every rank of the command starts with.
struct Prepared {
    paths: Paths,
    plan: Plan,
    /// The launch contract's variables (and TRACEPARENT).
    env: Vec<(String, String)>,
}

/// The span of this command (a child of the coordinator's `training.start`
/// span, when it sent one) and the TRACEPARENT each rank continues from.
fn trace(cmd: &StartRanks) -> (tracing::Span, Vec<(String, String)>) {
    let parent = propagation::extract(&cmd.trace_context);
    let span = tracing::info_span!(
        "agent.start_ranks",
        training.id = %cmd.training_id,
        training.attempt = cmd.attempt,
        ranks = cmd.ranks.len(),
        trace_id = propagation::trace_id(&parent).unwrap_or_default(),
    );
    let _ = span.set_parent(parent);
    let env = propagation::traceparent(&span.context())
        .or_else(|| cmd.trace_context.get(propagation::TRACEPARENT).cloned())
        .map(|tp| vec![(propagation::TRACEPARENT_ENV.to_string(), tp)])
        .unwrap_or_default();
    (span, env)
}

/// Everything before the ranks: directories, the team's reach (refusing
/// data outside it), the launch plan and the contract's environment.
async fn prepare(
    config: &AgentConfig,
    cmd: &StartRanks,
    peer: Option<&crate::program::peer::PeerLink>,
) -> Result<Prepared, Refusal> {
    let paths = prepare_dirs(config, cmd).await.map_err(Refusal::failed)?;
    let reach = reach(config, cmd, &paths.run_dir)?;
    let plan = plan::plan(config, cmd, &paths, &reach, peer).await?;
    if log_path(&config.work_dir, &cmd.training_id, cmd.attempt, 0, false).is_none() {
        return Err(Refusal::failed(format!(
            "training id {:?} cannot name a directory",
            cmd.training_id
        )));
    }
    let env = contract_env(cmd, &reach);
    Ok(Prepared { paths, plan, env })
}

/// What the training's team may reach here; refused (for good) when the
/// SAE's data lies outside it.
fn reach(config: &AgentConfig, cmd: &StartRanks, run_dir: &Path) -> Result<Reach, Refusal> {
    let roots = config
        .teams
        .roots(&cmd.team, run_dir)
        .map_err(Refusal::failed)?;
    let prefixes = config.teams.s3_prefixes(&cmd.team);
    let sae = cmd.workload.sae();
    check_roots(&roots, sae, run_dir)
        .and_then(|()| check_prefixes(&prefixes, sae))
        .map_err(|message| {
            tracing::warn!(training = %cmd.training_id, error = %message, "training refused: data outside the roots");
            Refusal::refused(Reason::DataOutsideRoots, message)
        })?;
    Ok(Reach { roots, prefixes })
}

/// Whether the config's local paths (relative ones against the run
/// directory, the ranks' working directory) lie under the data roots.
/// (A program's checkpoint storage is checked by its launch plan.)
fn check_roots(
    roots: &DataRoots,
    sae: Option<&TrainingConfig>,
    run_dir: &Path,
) -> Result<(), String> {
    match sae {
        Some(config) if !roots.is_empty() => roots.check_config(config, run_dir),
        _ => Ok(()),
    }
}

/// Whether the config's `s3://` locations lie under the team's prefixes.
fn check_prefixes(prefixes: &S3Prefixes, sae: Option<&TrainingConfig>) -> Result<(), String> {
    match sae {
        Some(config) if !prefixes.is_open() => prefixes.check_config(config),
        _ => Ok(()),
    }
}

/// The launch contract's variables every rank of the command gets: the
/// checkpoints it may resume from, its team's roots and prefixes.
fn contract_env(cmd: &StartRanks, reach: &Reach) -> Vec<(String, String)> {
    let mut env = vec![(
        cohort_spec::resume::PUBLISHED_ENV.to_string(),
        cmd.published.to_env(),
    )];
    if !reach.roots.is_empty() {
        env.push((roots::ENV.to_string(), reach.roots.to_env()));
    }
    if let Some(value) = reach.prefixes.to_env() {
        env.push((cohort_spec::prefixes::ENV.to_string(), value));
    }
    env
}

/// Starts each rank not already running (a command re-sent after a
/// reconnect is done once).
async fn start_each(host: Host<'_>, cmd: &StartRanks, ready: &Prepared) -> Vec<StartFailure> {
    let mut failures = Vec::new();
    for (assignment, key) in cmd.ranks.iter().zip(cmd.keys()) {
        if let Some(pid) = host.supervisor.pid(&key) {
            tracing::info!(rank = %key, pid, "rank already running; start ignored");
            continue;
        }
        let simulated = host.gpus[assignment.gpu_index as usize].simulated;
        let mut spec = rank_spec(
            &host.config.work_dir,
            cmd,
            ready,
            assignment,
            key.clone(),
            simulated,
        );
        ready.plan.apply(&mut spec);
        if let Err(e) = host.supervisor.start(spec).await {
            tracing::warn!(rank = %key, error = %e, "rank did not start");
            failures.push((key, Refusal::failed(e.to_string())));
        }
    }
    failures
}

/// One rank's spec, with the command's run directory and environment,
/// before the plan fills in what it runs.
fn rank_spec(
    work_dir: &Path,
    cmd: &StartRanks,
    ready: &Prepared,
    rank: &RankAssignment,
    key: RankKey,
    simulated: bool,
) -> RankSpec {
    // Checked below the attempt's directory before any rank starts.
    let log_path =
        log_path(work_dir, &cmd.training_id, cmd.attempt, key.rank, false).unwrap_or_default();
    RankSpec {
        key,
        program: PathBuf::new(),
        args: Vec::new(),
        working_dir: PathBuf::new(),
        checkpoints: None,
        sandbox: None,
        log_path,
        run_dir: ready.paths.run_dir.clone(),
        world_size: cmd.world_size,
        world_sizes: cmd.world_sizes,
        local_rank: rank.local_rank,
        local_world_size: rank.local_world_size,
        group_rank: cmd.group_rank,
        group_world_size: cmd.group_world_size,
        max_restarts: cmd.max_restarts,
        master_addr: cmd.master_addr.clone(),
        master_port: cmd.master_port,
        gpu_index: rank.gpu_index,
        // A simulated GPU has no device: the rank runs on the CPU.
        cuda_visible_devices: if simulated {
            String::new()
        } else {
            rank.gpu_index.to_string()
        },
        extra_env: ready.env.clone(),
        base_env: Vec::new(),
        memory_limit: cmd.host_memory_limit,
        notice: None,
    }
}

/// `<work>/trainings/<id>/run`, or the command's own (relative to the work dir).
fn run_dir(work_dir: &Path, cmd: &StartRanks) -> PathBuf {
    match &cmd.run_dir {
        Some(dir) => work_dir.join(dir),
        None => training_dir(work_dir, &cmd.training_id).join("run"),
    }
}

fn training_dir(work_dir: &Path, training_id: &str) -> PathBuf {
    work_dir.join("trainings").join(training_id)
}

/// Writes the config to `<work>/trainings/<id>/attempt-<n>/config.json` and
/// creates the run directory, without blocking the session. Both paths are
/// absolute: the rank runs with the run dir as its working directory.
async fn prepare_dirs(config: &AgentConfig, cmd: &StartRanks) -> Result<Paths, String> {
    let attempt_dir =
        training_dir(&config.work_dir, &cmd.training_id).join(format!("attempt-{}", cmd.attempt));
    tokio::fs::create_dir_all(&attempt_dir)
        .await
        .map_err(|e| format!("cannot create {}: {e}", attempt_dir.display()))?;
    let config_path = attempt_dir.join("config.json");
    tokio::fs::write(&config_path, cmd.workload.to_json())
        .await
        .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
    let run_dir = run_dir(&config.work_dir, cmd);
    tokio::fs::create_dir_all(&run_dir)
        .await
        .map_err(|e| format!("cannot create {}: {e}", run_dir.display()))?;
    Ok(Paths {
        config: absolute(config_path),
        run_dir: absolute(run_dir),
    })
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

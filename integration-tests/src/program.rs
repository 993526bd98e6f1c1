//! What the tests of program trainings share: a cluster whose agent runs
//! programs from examples/programs (and more roots), the torch_ddp example
//! as a CreateTraining, and reads of what a training did.

use crate::procs::marked_processes;
use crate::{Backend, Cluster, ClusterOptions};
use cohort_proto::v1;
use std::path::PathBuf;
use std::time::Duration;

pub fn programs_root() -> PathBuf {
    cohort_testkit::workspace_root().join("examples/programs")
}

/// A cluster of one agent with two simulated GPUs that runs programs from
/// examples/programs (and `more` program roots).
pub async fn cluster_with_roots(more: &[&std::path::Path]) -> Cluster {
    cluster_with(more, Vec::new()).await
}

/// The same with `env` for the coordinator, the agent and (its env file)
/// the ranks.
pub async fn cluster_with(more: &[&std::path::Path], env: Vec<(String, String)>) -> Cluster {
    let mut options = program_options(Backend::Sqlite, 1, more);
    options.env = env;
    Cluster::start(options).await
}

/// A cluster's options whose `agents` run programs from examples/programs
/// (and `more` roots), confined where the kernel allows.
pub fn program_options(
    backend: Backend,
    agents: usize,
    more: &[&std::path::Path],
) -> ClusterOptions {
    let mut options = ClusterOptions::new(backend, agents);
    for root in std::iter::once(programs_root().as_path()).chain(more.iter().copied()) {
        options.agent_args.push("--program-root".into());
        options.agent_args.push(root.display().to_string());
    }
    if !landlock() {
        eprintln!(
            "NOTE: this kernel has no Landlock: programs run unconfined (--program-sandbox none)"
        );
        options.agent_args.push("--program-sandbox".into());
        options.agent_args.push("none".into());
    }
    options
}

/// examples/programs/steps on `gpus` GPUs: `steps` steps of `step_s`
/// seconds, a checkpoint every `every`, with `flags` (e.g.
/// `--ignore-notice`), in priority class `class`, with `runtime` keys
/// (`preemption_grace`, `expected_duration`).
pub fn steps_program(
    steps: i64,
    step_s: f64,
    every: i64,
    flags: &[&str],
    gpus: i32,
    class: &str,
    grace: Option<&str>,
) -> v1::CreateTrainingRequest {
    let dir = programs_root().join("steps");
    let mut command = vec![
        cohort_testkit::python().display().to_string(),
        dir.join("train.py").display().to_string(),
        "--steps".into(),
        steps.to_string(),
        "--step-seconds".into(),
        step_s.to_string(),
        "--checkpoint-every".into(),
        every.to_string(),
    ];
    command.extend(flags.iter().map(|f| f.to_string()));
    v1::CreateTrainingRequest {
        config: Some(v1::TrainingConfig {
            program: Some(v1::ProgramConfig {
                command,
                working_dir: dir.display().to_string(),
                memory_gib_per_rank: 1.0,
                heartbeat_timeout: None,
                env: Default::default(),
                code: None,
                ..Default::default()
            }),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(3),
                ..Default::default()
            }),
            runtime: grace.map(|g| v1::RuntimeConfig {
                preemption_grace: Some(g.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(gpus)),
            queue: Some(true),
            ..Default::default()
        }),
        priority_class: class.to_string(),
        max_restarts: Some(0),
        ..Default::default()
    }
}

/// Whether this kernel offers Landlock (the agent confines programs with it).
pub fn landlock() -> bool {
    cohort_agent::program::sandbox::kernel_abi() >= 1
}

pub async fn cluster() -> Cluster {
    cluster_with_roots(&[]).await
}

/// The torch_ddp example with `args`, on 2 GPUs.
pub fn torch_ddp(args: &[&str], keep: i64) -> v1::CreateTrainingRequest {
    let dir = programs_root().join("torch_ddp");
    let mut command = vec![
        cohort_testkit::python().display().to_string(),
        dir.join("train.py").display().to_string(),
    ];
    command.extend(args.iter().map(|a| a.to_string()));
    v1::CreateTrainingRequest {
        config: Some(v1::TrainingConfig {
            program: Some(v1::ProgramConfig {
                command,
                working_dir: dir.display().to_string(),
                memory_gib_per_rank: 1.0,
                heartbeat_timeout: Some("2m".into()),
                env: [("OMP_NUM_THREADS".to_string(), "1".to_string())].into(),
                code: None,
                ..Default::default()
            }),
            checkpoint: Some(v1::CheckpointConfig {
                keep: Some(keep),
                ..Default::default()
            }),
            ..Default::default()
        }),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(2)),
            queue: Some(true),
            ..Default::default()
        }),
        max_restarts: Some(2),
        ..Default::default()
    }
}

/// The pid of a program rank (a python process with this cluster's mark).
pub fn program_rank_pid(cluster: &Cluster, id: &str, attempt: i32, rank: i32) -> Option<i32> {
    marked_processes(&cluster.mark, "python")
        .into_iter()
        .find(|&pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let has = |var: String| environ.split(|&b| b == 0).any(|v| v == var.as_bytes());
            has(format!("COHORT_TRAINING_ID={id}"))
                && has(format!("COHORT_ATTEMPT={attempt}"))
                && has(format!("RANK={rank}"))
        })
}

/// The training's kept checkpoints, newest first.
pub async fn checkpoints(cluster: &Cluster, id: &str) -> Vec<v1::Checkpoint> {
    cluster
        .training()
        .await
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.to_string(),
            ..Default::default()
        })
        .await
        .expect("ListCheckpoints")
        .into_inner()
        .checkpoints
}

/// The step attempt 2 said it resumed from (the example's `resumed_from`).
pub fn resumed_from(events: &[v1::TrainingEvent]) -> f64 {
    events
        .iter()
        .filter(|e| e.attempt == 2)
        .find_map(|e| match &e.event {
            Some(v1::training_event::Event::ProgramProgress(p)) => {
                p.metrics.get("resumed_from").copied()
            }
            _ => None,
        })
        .expect("attempt 2 said where it resumed")
}

/// Every event of a training that has ended.
pub async fn events(cluster: &Cluster, id: &str) -> Vec<v1::TrainingEvent> {
    crate::watch::watch_to_end(&mut cluster.training().await, id, Duration::from_secs(30))
        .await
        .events
}

//! Programs written for the popular frameworks, run unchanged: the real
//! `lightning` and `transformers` (CPU, gloo) on two agents, one rank each,
//! checkpointing as the frameworks do (`*.ckpt` files, `checkpoint-<N>/`
//! directories). cohort records those checkpoints with their steps, a rank
//! is SIGKILLed, the gang resumes from the framework's own checkpoint (not
//! from scratch) and succeeds, with the framework's logged curves in the
//! report — with shared storage, and with checkpoints on rank 0's host
//! only (the other agent fetches its copy through the coordinator).

use cohort_integration_tests::faults::signal;
use cohort_integration_tests::job::{create_request, SaeJob};
use cohort_integration_tests::program::*;
use cohort_integration_tests::{Backend, Cluster};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Duration;

/// The example `examples/programs/<name>/train.py` with `args`, on 2 GPUs,
/// keeping 2 checkpoints in `storage` (none: on rank 0's host).
fn framework_program(
    name: &str,
    args: &[&str],
    storage: Option<&Path>,
) -> v1::CreateTrainingRequest {
    let mut request = torch_ddp(args, 2);
    let config = request.config.as_mut().unwrap();
    let program = config.program.as_mut().unwrap();
    let dir = programs_root().join(name);
    program.command[1] = dir.join("train.py").display().to_string();
    program.working_dir = dir.display().to_string();
    program.memory_gib_per_rank = 2.0;
    config.checkpoint.as_mut().unwrap().storage = storage.map(|s| s.display().to_string());
    request
}

async fn two_agents() -> Cluster {
    let mut options = program_options(Backend::Sqlite, 2, &[]);
    options.gpus_per_agent = 1;
    Cluster::start(options).await
}

/// Runs `name` for 60 steps, kills rank 1 once a checkpoint is recorded,
/// and checks that attempt 2 succeeded from a checkpoint (not from step 0)
/// with the framework's curves in the report. Returns the training's id
/// and the step attempt 1 had recorded when rank 1 was killed.
async fn run_and_kill(cluster: &Cluster, name: &str, storage: Option<&Path>) -> (String, i64) {
    let args = [
        "--steps",
        "60",
        "--checkpoint-every",
        "10",
        "--log-every",
        "5",
        "--step-sleep",
        "0.2",
    ];
    let id = cluster
        .create(framework_program(name, &args, storage))
        .await;
    let recorded = eventually(
        "a recorded checkpoint",
        Duration::from_secs(180),
        || async {
            let list = checkpoints(cluster, &id).await;
            match list.first() {
                Some(c) if c.step >= 10 => Ok(c.clone()),
                _ => Err(format!("{list:?}")),
            }
        },
    )
    .await;
    assert_eq!(recorded.attempt, 1);
    assert_eq!(
        recorded.step % 10,
        0,
        "the framework's own step: {recorded:?}"
    );
    let pid = program_rank_pid(cluster, &id, 1, 1).expect("rank 1's process");
    signal(pid, Signal::SIGKILL);

    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(300))
        .await;
    assert_eq!(done.restart_count, 1, "{}", done.state_reason);
    let last = done
        .latest_program_progress
        .expect("the framework's progress");
    assert!(
        last.finished && last.loss.is_some_and(f64::is_finite),
        "{last:?}"
    );

    // Attempt 2 went on from a checkpoint: its first progress line is past
    // the recorded step.
    let first_resumed = events(cluster, &id)
        .await
        .iter()
        .filter(|e| e.attempt == 2)
        .find_map(|e| match &e.event {
            Some(v1::training_event::Event::ProgramProgress(p)) => Some(p.step),
            _ => None,
        })
        .expect("attempt 2's progress");
    assert!(
        first_resumed > recorded.step,
        "attempt 2 started at {first_resumed}"
    );

    // The framework's curves are the report's.
    let report = cluster
        .training()
        .await
        .get_training_report(v1::GetTrainingReportRequest {
            id: id.clone(),
            omit_metrics: true,
        })
        .await
        .expect("report")
        .into_inner();
    let summary = report.summary.expect("a summary");
    assert!(!summary.steps_unknown && summary.steps >= 55, "{summary:?}");
    let loss = summary
        .program_metrics
        .iter()
        .find(|m| m.name == "loss")
        .expect("the loss curve");
    assert!(loss.points >= 10 && loss.last < loss.first, "{loss:?}");
    let kept = checkpoints(cluster, &id).await;
    assert_eq!(kept.len(), 2, "keep = 2: {kept:?}");
    assert!(kept[0].step >= 50, "{kept:?}");
    (id, recorded.step)
}

/// What each rank of attempt 2 said it resumed from.
async fn resumed_paths(cluster: &Cluster, id: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for rank in ["0", "1"] {
        let log = cluster
            .cli_ok(&["logs", id, "--attempt", "2", "--rank", rank])
            .await;
        let said = format!("rank {rank}: resuming from ");
        let path = log
            .lines()
            .find_map(|l| l.split_once(&said).map(|(_, p)| p.to_string()))
            .unwrap_or_else(|| panic!("rank {rank} of attempt 2 did not resume: {log}"));
        paths.push(path);
    }
    paths
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `name` with shared storage, killed and resumed: every rank resumed from
/// the shared checkpoint. Returns the shared directory's entries and the
/// newest checkpoint's files as `cohort checkpoints download` saved them.
async fn shared_killed_and_resumed(name: &str) -> (Vec<String>, Vec<String>) {
    let storage = tempfile::tempdir().unwrap();
    let cluster = two_agents().await;
    let (id, _) = run_and_kill(&cluster, name, Some(storage.path())).await;
    for path in resumed_paths(&cluster, &id).await {
        assert!(
            path.starts_with(&storage.path().display().to_string()),
            "{path}"
        );
    }
    let out = cluster.root().join("download");
    cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            &out.display().to_string(),
        ])
        .await;
    (listing(&storage.path().join(&id)), listing(&out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lightning_program_resumes_from_its_own_ckpt_after_a_rank_is_killed() {
    let (entries, downloaded) = shared_killed_and_resumed("lightning").await;
    // Two adopted step directories, each holding Lightning's own file.
    let adopted: Vec<&String> = entries.iter().filter(|e| e.starts_with("step-")).collect();
    assert_eq!(adopted.len(), 2, "{entries:?}");
    assert!(entries.iter().any(|e| e.ends_with(".ckpt")), "{entries:?}");
    // Downloaded: Lightning's own file, as it wrote it.
    assert_eq!(downloaded, ["epoch=0-step=60.ckpt"], "{downloaded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hugging_face_program_resumes_from_its_checkpoint_dir_after_a_rank_is_killed() {
    let (entries, downloaded) = shared_killed_and_resumed("hf").await;
    let adopted: Vec<&String> = entries.iter().filter(|e| e.starts_with("step-")).collect();
    assert_eq!(adopted, ["step-00000050", "step-00000060"], "{entries:?}");
    // keep = 2 took the Trainer's own older directories with it.
    assert!(!entries.iter().any(|e| e == "checkpoint-10"), "{entries:?}");
    assert_eq!(downloaded, ["checkpoint-60"], "{downloaded:?}");
}

/// With checkpoints on rank 0's host only, the other host's agent fetches
/// the checkpoint through the coordinator before its rank starts: every
/// rank resumes from a complete copy of the same checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checkpoints_on_one_host_every_rank_resumes_from_a_fetched_copy() {
    let cluster = two_agents().await;
    let (id, _) = run_and_kill(&cluster, "lightning", None).await;
    let paths = resumed_paths(&cluster, &id).await;
    let fetched: Vec<&String> = paths
        .iter()
        .filter(|p| p.contains("/run/resume/step-"))
        .collect();
    let own: Vec<&String> = paths
        .iter()
        .filter(|p| p.contains("/run/checkpoints/step-"))
        .collect();
    assert_eq!((fetched.len(), own.len()), (1, 1), "{paths:?}");
    // The same checkpoint (rank 0's has since gone with keep = 2): its
    // `step-<N>/<file>` on both, the fetched copy whole.
    let tail = |p: &String| {
        p.rsplitn(3, '/')
            .take(2)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(tail(fetched[0]), tail(own[0]), "{paths:?}");
    let copy = std::fs::metadata(fetched[0]).expect("the fetched copy");
    assert!(copy.len() > 1000, "{copy:?}");
}

/// A checkpoint over the agent's `--resume-fetch-max-gib` is not copied:
/// the start fails saying why and what to do, and the training, whose
/// ranks cannot all resume, ends FAILED with that reason rather than
/// running with one rank from scratch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_too_big_to_fetch_fails_the_start_naming_the_cap() {
    let mut options = program_options(Backend::Sqlite, 2, &[]);
    options.gpus_per_agent = 1;
    options
        .agent_args
        .extend(["--resume-fetch-max-gib".into(), "0.000001".into()]);
    let cluster = Cluster::start(options).await;
    let args = [
        "--steps",
        "200",
        "--checkpoint-every",
        "5",
        "--step-sleep",
        "0.1",
    ];
    let id = cluster.create(torch_ddp(&args, 2)).await;
    eventually(
        "a recorded checkpoint",
        Duration::from_secs(120),
        || async {
            let list = checkpoints(&cluster, &id).await;
            if list.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let pid = program_rank_pid(&cluster, &id, 1, 1).expect("rank 1's process");
    signal(pid, Signal::SIGKILL);
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(180))
        .await;
    assert!(
        failed.state_reason.contains("--resume-fetch-max-gib")
            && failed
                .state_reason
                .contains("shared or s3:// checkpoint.storage"),
        "{}",
        failed.state_reason
    );
}

/// FetchCheckpoint serves only an agent of the gang, only a kept step of a
/// training with its checkpoints on one host: anything else is refused with
/// its code, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_checkpoint_refuses_what_is_not_a_gang_member_s_kept_checkpoint() {
    let cluster = two_agents().await;
    let args = ["--steps", "10", "--checkpoint-every", "5"];
    let id = cluster.create(torch_ddp(&args, 2)).await;
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let member = cluster.agent_named("agent-1").await.id;
    let code = |r: Result<(), tonic::Status>| r.map_err(|s| (s.code(), s.message().to_string()));
    let not_connected = code(fetch(&cluster, "agent-x", &id, 10).await).unwrap_err();
    assert_eq!(
        not_connected.0,
        tonic::Code::PermissionDenied,
        "{not_connected:?}"
    );
    let unknown = code(fetch(&cluster, &member, "trn-nope", 10).await).unwrap_err();
    assert_eq!(unknown.0, tonic::Code::NotFound, "{unknown:?}");
    let pruned = code(fetch(&cluster, &member, &id, 1).await).unwrap_err();
    assert_eq!(pruned.0, tonic::Code::NotFound, "{pruned:?}");
    assert!(
        pruned.1.contains("no kept checkpoint at step 1"),
        "{pruned:?}"
    );
    // A kept step, to a member of the gang: served.
    assert_eq!(done.attempt, 1);
    code(fetch(&cluster, &member, &id, 10).await).expect("a member fetches a kept step");
    // A training whose checkpoints are in shared storage: every agent
    // reads them itself (an SAE's rank 0 fetches only from another host's
    // disk).
    let mut shared = create_request(&SaeJob::small(), 1, true);
    let storage = cluster.root().join("shared-checkpoints");
    shared
        .config
        .as_mut()
        .and_then(|c| c.checkpoint.as_mut())
        .expect("a checkpoint table")
        .storage = Some(storage.display().to_string());
    let sae = cluster.create(shared).await;
    let refused = code(fetch(&cluster, &member, &sae, 10).await).unwrap_err();
    assert_eq!(refused.0, tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.1.contains("which every agent reads itself"),
        "{refused:?}"
    );
}

async fn fetch(
    cluster: &Cluster,
    agent_id: &str,
    training_id: &str,
    step: i64,
) -> Result<(), tonic::Status> {
    let request = v1::FetchCheckpointRequest {
        agent_id: agent_id.to_string(),
        training_id: training_id.to_string(),
        step,
    };
    cluster
        .agents()
        .await
        .fetch_checkpoint(request)
        .await
        .map(|_| ())
}

//! A team's own DDP program as a training (`[program]`): the PyTorch
//! example of examples/programs/torch_ddp run by real agents with gloo on
//! two simulated GPUs — its logs live, its checkpoints recorded, a rank
//! SIGKILLed and the gang resuming from its checkpoint, a user error failing
//! at once, and a working directory outside every program root never run.

use cohort_integration_tests::faults::signal;
use cohort_integration_tests::poll::eventually;
use cohort_integration_tests::procs::marked_processes;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

fn programs_root() -> PathBuf {
    cohort_testkit::workspace_root().join("examples/programs")
}

/// A cluster of one agent with two simulated GPUs that runs programs from
/// examples/programs (and `more` program roots).
async fn cluster_with_roots(more: &[&std::path::Path]) -> Cluster {
    cluster_with(more, Vec::new()).await
}

/// The same with `env` for the coordinator, the agent and (its env file)
/// the ranks.
async fn cluster_with(more: &[&std::path::Path], env: Vec<(String, String)>) -> Cluster {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.env = env;
    for root in std::iter::once(programs_root().as_path()).chain(more.iter().copied()) {
        options.agent_args.push("--program-root".into());
        options.agent_args.push(root.display().to_string());
    }
    Cluster::start(options).await
}

async fn cluster() -> Cluster {
    cluster_with_roots(&[]).await
}

/// The torch_ddp example with `args`, on 2 GPUs.
fn torch_ddp(args: &[&str], keep: i64) -> v1::CreateTrainingRequest {
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
        }),
        max_restarts: Some(2),
        ..Default::default()
    }
}

/// The pid of a program rank (a python process with this cluster's mark).
fn program_rank_pid(cluster: &Cluster, id: &str, attempt: i32, rank: i32) -> Option<i32> {
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

async fn events(cluster: &Cluster, id: &str) -> Vec<v1::TrainingEvent> {
    let mut client = cluster.training().await;
    let mut stream = client
        .watch_training(v1::WatchTrainingRequest {
            id: id.to_string(),
            ..Default::default()
        })
        .await
        .expect("WatchTraining")
        .into_inner();
    let mut events = Vec::new();
    // A finished training's stream ends after its history.
    while let Ok(Ok(Some(e))) =
        tokio::time::timeout(Duration::from_secs(10), stream.message()).await
    {
        events.push(e);
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_trains_logs_live_and_resumes_from_its_checkpoint_after_kill_9() {
    let cluster = cluster().await;
    let mut client = cluster.training().await;
    let args = [
        "--steps",
        "80",
        "--checkpoint-every",
        "10",
        "--log-every",
        "5",
        "--step-sleep",
        "0.15",
    ];
    let id = client
        .create_training(torch_ddp(&args, 2))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;

    // `cohort logs --follow`: both ranks' own lines, live.
    let mut follower = tokio::process::Command::new(&cluster.bins.cli)
        .args(["--coordinator", &cluster.url(), "logs", &id, "--follow"])
        .env_remove("COHORT_COORDINATOR")
        .env("COHORT_CACHE_DIR", cluster.root().join("cli-cache"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start cohort logs --follow");
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let mut seen: Vec<String> = Vec::new();
    let live = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let line = lines.next_line().await.expect("read").expect("a line");
            seen.push(line);
            let started = |r: i32| {
                let prefix = format!("[rank {r}] rank {r} of 2 on cpu (gloo)");
                seen.iter().any(|l| l.starts_with(&prefix))
            };
            if started(0) && started(1) && seen.iter().any(|l| l.contains("checkpoint written")) {
                return;
            }
        }
    })
    .await;
    assert!(live.is_ok(), "no start lines of both ranks: {seen:?}");
    drop(follower);

    // A checkpoint is recorded for attempt 1, then rank 1 is SIGKILLed.
    let recorded = eventually("a recorded checkpoint", Duration::from_secs(60), || async {
        let list = cluster
            .training()
            .await
            .list_checkpoints(v1::ListCheckpointsRequest {
                training_id: id.clone(),
                ..Default::default()
            })
            .await
            .expect("ListCheckpoints")
            .into_inner()
            .checkpoints;
        match list.first() {
            Some(c) if c.step >= 10 => Ok(c.clone()),
            _ => Err(format!("{list:?}")),
        }
    })
    .await;
    assert_eq!(recorded.attempt, 1);
    assert!(
        recorded
            .path
            .ends_with(&format!("step-{:08}", recorded.step)),
        "{recorded:?}"
    );
    let pid = program_rank_pid(&cluster, &id, 1, 1).expect("rank 1's process");
    signal(pid, Signal::SIGKILL);

    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(240))
        .await;
    assert_eq!(done.restart_count, 1, "{}", done.state_reason);
    assert_eq!(done.attempt, 2);
    let last = done
        .latest_program_progress
        .expect("the program's progress");
    assert_eq!(last.step, 80);
    assert!(last.finished);
    assert!(last.loss.is_some_and(f64::is_finite), "{last:?}");
    assert!(done.latest_progress.is_none(), "no SAE progress made up");

    // Attempt 2 resumed from a checkpoint of attempt 1, not from scratch.
    let events = events(&cluster, &id).await;
    let resumed = events
        .iter()
        .filter(|e| e.attempt == 2)
        .find_map(|e| match &e.event {
            Some(v1::training_event::Event::ProgramProgress(p)) => {
                p.metrics.get("resumed_from").copied()
            }
            _ => None,
        })
        .expect("attempt 2 said where it resumed");
    assert!(resumed >= recorded.step as f64, "resumed from {resumed}");
    // What a program does not report is absent, not zero.
    let first = events
        .iter()
        .find_map(|e| match &e.event {
            Some(v1::training_event::Event::ProgramProgress(p)) if p.step == 5 => Some(p.clone()),
            _ => None,
        })
        .expect("step 5's line");
    assert_eq!(first.total_steps, Some(80));
    assert!(first.metrics.contains_key("samples_per_sec") && first.metrics.contains_key("lr"));
    assert!(!first.metrics.contains_key("mse"), "{first:?}");

    // keep = 2: the newest two remain, the final one first.
    let kept = cluster
        .training()
        .await
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!((kept[0].step, kept[0].attempt), (80, 2));
    let on_disk: Vec<String> = std::fs::read_dir(PathBuf::from(&kept[0].path).parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    assert_eq!(on_disk.len(), 2, "{on_disk:?}");

    // Downloaded through the coordinator: the directory as the program wrote it.
    let out = cluster.root().join("download");
    let listed = cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            &out.display().to_string(),
        ])
        .await;
    assert!(listed.contains("state.pt"), "{listed}");
    let written = PathBuf::from(&kept[0].path).join("state.pt");
    assert_eq!(
        std::fs::read(out.join("state.pt")).unwrap(),
        std::fs::read(&written).unwrap()
    );
    let refused = cluster
        .cli(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            "/tmp/x",
            "--format",
            "saelens",
        ])
        .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("native format only"),
        "{refused:?}"
    );

    // The resumed attempt's own lines are readable afterwards.
    let out = cluster
        .cli_ok(&["logs", &id, "--attempt", "2", "--rank", "0"])
        .await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("[rank 0] rank 0: resuming from ")),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_3_fails_at_once_without_a_restart() {
    let cluster = cluster().await;
    let id = cluster
        .training()
        .await
        .create_training(torch_ddp(&["--steps", "50", "--exit-code-at", "3@4"], 3))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(120))
        .await;
    assert_eq!(failed.restart_count, 0, "{}", failed.state_reason);
    assert!(
        failed.state_reason.contains("exited with code 3"),
        "{}",
        failed.state_reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_dir_outside_every_program_root_never_runs() {
    let cluster = cluster().await;
    let outside = tempfile::tempdir().unwrap();
    let mut request = torch_ddp(&["--steps", "5"], 1);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.working_dir = outside.path().display().to_string();
    let id = cluster
        .training()
        .await
        .create_training(request.clone())
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    // It waits, saying why, and nothing starts.
    let waiting = eventually("a pending reason", Duration::from_secs(20), || async {
        let t = cluster.get_training(&id).await;
        if t.state_reason.starts_with("PROGRAM_OUTSIDE_ROOTS") {
            Ok(t)
        } else {
            Err(format!("{:?}: {}", t.state(), t.state_reason))
        }
    })
    .await;
    assert_eq!(waiting.state(), State::Queued);
    assert!(
        waiting
            .state_reason
            .contains(&outside.path().display().to_string()),
        "{}",
        waiting.state_reason
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cluster.get_training(&id).await.state(), State::Queued);
    assert!(marked_processes(&cluster.mark, "python").is_empty());

    // Without queueing it is refused at once, naming the directory.
    request.gpus.as_mut().unwrap().queue = Some(false);
    let refused = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect_err("no agent may run it");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        cohort_proto::error::reason_of(&refused).as_deref(),
        Some("PROGRAM_OUTSIDE_ROOTS")
    );

    // A contract variable in [program.env]: refused, naming the key.
    let mut bad = torch_ddp(&["--steps", "5"], 1);
    let program = bad.config.as_mut().unwrap().program.as_mut().unwrap();
    program.env.insert("WORLD_SIZE".into(), "9".into());
    let err = cluster
        .training()
        .await
        .create_training(bad)
        .await
        .expect_err("WORLD_SIZE is the contract's");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        cohort_proto::error::bad_fields(&err),
        ["config.program.env.WORLD_SIZE"]
    );
}

/// What a confined program can and cannot touch: it reads its own root and
/// writes its run dir, TMPDIR and checkpoint dir; the shared /tmp, a file
/// beside the agent's work dir and the agent's home answer EACCES.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_is_denied_what_lies_outside_its_roots() {
    let probe_root = tempfile::tempdir().unwrap();
    let script = probe_root.path().join("probe.py");
    std::fs::write(&script, PROBE).unwrap();
    let cluster = cluster_with_roots(&[probe_root.path()]).await;
    let secret = cluster.root().join("secret.txt");
    std::fs::write(&secret, "not for programs").unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut request = torch_ddp(&[], 1);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        script.display().to_string(),
        script.display().to_string(),
        secret.display().to_string(),
        format!("{home}/.profile"),
    ];
    program.working_dir = probe_root.path().display().to_string();
    request.gpus.as_mut().unwrap().selection = Some(v1::gpu_request::Selection::Count(1));
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let out = cluster.cli_ok(&["logs", &id]).await;
    let said = |line: String| {
        assert!(
            out.lines().any(|l| l == format!("[rank 0] {line}")),
            "{line:?} not in:\n{out}"
        );
    };
    said(format!("READ {}", script.display()));
    said(format!("DENIED {}", secret.display()));
    if std::path::Path::new(&format!("{home}/.profile")).exists() {
        said(format!("DENIED {home}/.profile"));
    }
    said("DENIED-WRITE /tmp".into());
    said("WROTE TMPDIR".into());
    said("WROTE HOME".into());
    said("WROTE COHORT_CHECKPOINT_DIR".into());
    // The agent's own environment (it inherits cargo's) is not the program's.
    said("NO CARGO_PKG_NAME".into());
}

/// Reads each path it is given, then tries to write in a few places.
const PROBE: &str = r#"
import os, sys
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            f.read()
        print(f"READ {path}")
    except PermissionError:
        print(f"DENIED {path}")
    except FileNotFoundError:
        print(f"MISSING {path}")
try:
    with open("/tmp/cohort-probe-" + os.environ["COHORT_TRAINING_ID"], "w") as f:
        f.write("x")
    print("WROTE /tmp")
except PermissionError:
    print("DENIED-WRITE /tmp")
for var in ["TMPDIR", "HOME", "COHORT_CHECKPOINT_DIR"]:
    with open(os.path.join(os.environ[var], "probe"), "w") as f:
        f.write("x")
    print(f"WROTE {var}")
print("NO CARGO_PKG_NAME" if "CARGO_PKG_NAME" not in os.environ else "HAS CARGO_PKG_NAME")
"#;

/// The LSTM PPO example under DDP (one environment per rank, its own seed,
/// rank-0 checkpoints through the cohort_train helper): it succeeds and its
/// report shows the episode return rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ppo_example_learns_and_its_report_shows_the_return_rising() {
    let cluster = cluster().await;
    let dir = programs_root().join("ppo");
    let mut request = torch_ddp(&[], 2);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        dir.join("train.py").display().to_string(),
        "--iterations".into(),
        "60".into(),
    ];
    program.working_dir = dir.display().to_string();
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(240))
        .await;
    assert_eq!(done.restart_count, 0, "{}", done.state_reason);
    let report = cluster
        .training()
        .await
        .get_training_report(v1::GetTrainingReportRequest {
            id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("GetTrainingReport")
        .into_inner();
    let summary = report.summary.expect("a summary");
    assert_eq!((summary.steps, summary.total_steps), (60, 60));
    let ret = summary
        .program_metrics
        .iter()
        .find(|m| m.name == "episode_return")
        .expect("the episode return in the report");
    assert_eq!(ret.points, 61, "60 progress lines and the finished one");
    // A guess earns 0.5; remembering the cue earns 1.
    assert!(ret.first < 0.7, "{ret:?}");
    assert!(ret.last >= 0.9 && ret.last > ret.first + 0.2, "{ret:?}");
    let checkpoints = cluster
        .training()
        .await
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert_eq!(checkpoints.first().map(|c| c.step), Some(60));
}

/// `checkpoint.storage = "s3://..."`: rank 0's agent uploads each complete
/// checkpoint to the bucket (with the team's credentials) before it is
/// recorded, keeps `keep` there, and a restart resumes from one downloaded
/// from the bucket; the coordinator downloads it from the bucket too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_checkpoints_to_s3_and_resumes_from_the_bucket() {
    let s3 = cohort_integration_tests::s3::S3Server::start();
    let empty = tempfile::tempdir().unwrap();
    s3.upload_dir(empty.path(), "ckpt", "runs");
    let cluster = cluster_with(&[], s3.env()).await;
    let mut request = torch_ddp(
        &[
            "--steps",
            "60",
            "--checkpoint-every",
            "10",
            "--step-sleep",
            "0.15",
        ],
        2,
    );
    request
        .config
        .as_mut()
        .unwrap()
        .checkpoint
        .as_mut()
        .unwrap()
        .storage = Some("s3://ckpt/runs".into());
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    let bucket_dir = format!("s3://ckpt/runs/{id}/step-");
    let recorded = eventually(
        "a checkpoint in the bucket",
        Duration::from_secs(120),
        || async {
            let list = cluster
                .training()
                .await
                .list_checkpoints(v1::ListCheckpointsRequest {
                    training_id: id.clone(),
                    ..Default::default()
                })
                .await
                .expect("ListCheckpoints")
                .into_inner()
                .checkpoints;
            match list.first() {
                Some(c) if c.path.starts_with(&bucket_dir) => Ok(c.clone()),
                _ => Err(format!("{list:?}")),
            }
        },
    )
    .await;
    let pid = program_rank_pid(&cluster, &id, 1, 1).expect("rank 1's process");
    signal(pid, Signal::SIGKILL);
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(240))
        .await;
    assert_eq!(done.restart_count, 1, "{}", done.state_reason);
    let resumed = events(&cluster, &id)
        .await
        .iter()
        .filter(|e| e.attempt == 2)
        .find_map(|e| match &e.event {
            Some(v1::training_event::Event::ProgramProgress(p)) => {
                p.metrics.get("resumed_from").copied()
            }
            _ => None,
        })
        .expect("attempt 2 said where it resumed");
    assert!(resumed >= recorded.step as f64, "resumed from {resumed}");
    // The checkpoint it resumed from came out of the bucket.
    let fetched = cluster.root().join(format!(
        "agent-0/trainings/{id}/run/resume/step-{:08}",
        resumed as i64
    ));
    assert!(fetched.join("state.pt").is_file(), "{}", fetched.display());
    let kept = cluster
        .training()
        .await
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(
        kept.iter().all(|c| c.path.starts_with(&bucket_dir)),
        "{kept:?}"
    );
    let out = cluster.root().join("from-bucket");
    let listed = cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            &out.display().to_string(),
        ])
        .await;
    assert!(out.join("state.pt").is_file(), "{listed}");
}

/// `heartbeat_timeout`: a program that stops printing progress lines is
/// hung after that long, and its gang restarted (here: no restart left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_program_is_hung_after_its_heartbeat_timeout() {
    let root = tempfile::tempdir().unwrap();
    let script = root.path().join("stall.py");
    std::fs::write(
        &script,
        "import json, time\nprint(json.dumps({'event': 'progress', 'step': 1}), flush=True)\ntime.sleep(300)\n",
    )
    .unwrap();
    let cluster = cluster_with_roots(&[root.path()]).await;
    let mut request = torch_ddp(&[], 1);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        script.display().to_string(),
    ];
    program.working_dir = root.path().display().to_string();
    program.heartbeat_timeout = Some("10s".into());
    request.max_restarts = Some(0);
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(90))
        .await;
    assert!(
        failed.state_reason.contains("HANG"),
        "{}",
        failed.state_reason
    );
    assert_eq!(
        failed.latest_program_progress.map(|p| p.step),
        Some(1),
        "it was heard once"
    );
}

/// `checkpoint.storage` on a shared file system: checkpoints under
/// `<storage>/<training id>/`, downloaded by the coordinator from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_checkpoints_to_shared_storage() {
    let shared = tempfile::tempdir().unwrap();
    let cluster = cluster().await;
    let mut request = torch_ddp(&["--steps", "20", "--checkpoint-every", "10"], 3);
    request
        .config
        .as_mut()
        .unwrap()
        .checkpoint
        .as_mut()
        .unwrap()
        .storage = Some(shared.path().display().to_string());
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let kept = cluster
        .training()
        .await
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    let steps: Vec<i64> = kept.iter().map(|c| c.step).collect();
    assert_eq!(steps, [20, 10]);
    let dir = shared.path().join(&id);
    assert!(
        kept.iter()
            .all(|c| c.path.starts_with(&dir.display().to_string())),
        "{kept:?}"
    );
    let out = cluster.root().join("from-shared");
    cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--step",
            "10",
            "--out",
            &out.display().to_string(),
        ])
        .await;
    assert_eq!(
        std::fs::read(out.join("state.pt")).unwrap(),
        std::fs::read(dir.join("step-00000010/state.pt")).unwrap()
    );
}

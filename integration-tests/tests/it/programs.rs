//! A team's own DDP program as a training (`[program]`): the PyTorch
//! example of examples/programs/torch_ddp run by real agents with gloo on
//! two simulated GPUs — its logs live, its checkpoints recorded and
//! downloaded, a rank SIGKILLed and the gang resuming from its checkpoint, a
//! user error failing at once, a silent program hung, and a working
//! directory outside every program root never run.

use cohort_integration_tests::faults::signal;
use cohort_integration_tests::procs::marked_processes;
use cohort_integration_tests::program::*;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::{eventually, holds};
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_trains_logs_live_and_resumes_from_its_checkpoint_after_kill_9() {
    let cluster = cluster().await;
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
    let id = cluster.create(torch_ddp(&args, 2)).await;

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
        let list = checkpoints(&cluster, &id).await;
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
    let resumed = resumed_from(&events);
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
    let kept = checkpoints(&cluster, &id).await;
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
        .create(torch_ddp(&["--steps", "50", "--exit-code-at", "3@4"], 3))
        .await;
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
    let id = cluster.create(request.clone()).await;
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
    holds(
        "a program outside every root waits and never runs",
        Duration::from_secs(3),
        || async {
            let state = cluster.get_training(&id).await.state();
            let running = marked_processes(&cluster.mark, "python");
            (state == State::Queued && running.is_empty())
                .then_some(())
                .ok_or(format!("{state:?}, processes {running:?}"))
        },
    )
    .await;

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
        cohort_proto::error::reason_of(&refused),
        Some(cohort_proto::error::Reason::ProgramOutsideRoots)
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
    let id = cluster.create(request).await;
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

//! Programs written for the popular frameworks, run unchanged: the real
//! `lightning` and `transformers` (CPU, gloo) on two agents, one rank each,
//! checkpointing to shared storage as the frameworks do (`*.ckpt` files,
//! `checkpoint-<N>/` directories). cohort records those checkpoints with
//! their steps, a rank is SIGKILLed, the gang resumes from the framework's
//! own checkpoint (not from scratch) and succeeds, with the framework's
//! logged curves in the report.

use cohort_integration_tests::faults::signal;
use cohort_integration_tests::program::*;
use cohort_integration_tests::{Backend, Cluster};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Duration;

/// The example `examples/programs/<name>/train.py` with `args`, on 2 GPUs,
/// keeping 2 checkpoints in `storage`.
fn framework_program(name: &str, args: &[&str], storage: &Path) -> v1::CreateTrainingRequest {
    let mut request = torch_ddp(args, 2);
    let config = request.config.as_mut().unwrap();
    let program = config.program.as_mut().unwrap();
    let dir = programs_root().join(name);
    program.command[1] = dir.join("train.py").display().to_string();
    program.working_dir = dir.display().to_string();
    program.memory_gib_per_rank = 2.0;
    config.checkpoint.as_mut().unwrap().storage = Some(storage.display().to_string());
    request
}

async fn two_agents() -> Cluster {
    let mut options = program_options(Backend::Sqlite, 2, &[]);
    options.gpus_per_agent = 1;
    Cluster::start(options).await
}

/// Runs `name` for 60 steps, kills rank 1 once a checkpoint is recorded,
/// and checks the resumed run: returns the succeeded training, the step
/// the kill came after, the shared checkpoint directory's entries and the
/// files of the newest checkpoint as `cohort checkpoints download` saved it.
async fn killed_and_resumed(name: &str) -> (v1::Training, i64, Vec<String>, Vec<String>) {
    let storage = tempfile::tempdir().unwrap();
    let cluster = two_agents().await;
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
        .create(framework_program(name, &args, storage.path()))
        .await;

    let recorded = eventually(
        "a recorded checkpoint",
        Duration::from_secs(180),
        || async {
            let list = checkpoints(&cluster, &id).await;
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
    let pid = program_rank_pid(&cluster, &id, 1, 1).expect("rank 1's process");
    signal(pid, Signal::SIGKILL);

    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(300))
        .await;
    assert_eq!(done.restart_count, 1, "{}", done.state_reason);

    // Attempt 2 went on from a checkpoint, not from step 0: its first
    // progress line is past the recorded step.
    let events = events(&cluster, &id).await;
    let first_resumed = events
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
    for rank in ["0", "1"] {
        let log = cluster
            .cli_ok(&["logs", &id, "--attempt", "2", "--rank", rank])
            .await;
        assert!(
            log.lines().any(|l| l.contains(&format!(
                "rank {rank}: resuming from {}",
                storage.path().display()
            ))),
            "rank {rank} of attempt 2 resumed from the shared checkpoint: {log}"
        );
    }

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

    let kept = checkpoints(&cluster, &id).await;
    assert_eq!(kept.len(), 2, "keep = 2: {kept:?}");
    assert!(kept[0].step >= 50, "{kept:?}");
    let listing = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
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
    (
        done,
        recorded.step,
        listing(&storage.path().join(&id)),
        listing(&out),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lightning_program_resumes_from_its_own_ckpt_after_a_rank_is_killed() {
    let (done, _, entries, downloaded) = killed_and_resumed("lightning").await;
    let last = done.latest_program_progress.expect("the logger's progress");
    assert!(
        last.finished && last.loss.is_some_and(f64::is_finite),
        "{last:?}"
    );
    // Two adopted step directories, each holding Lightning's own file.
    let adopted: Vec<&String> = entries.iter().filter(|e| e.starts_with("step-")).collect();
    assert_eq!(adopted.len(), 2, "{entries:?}");
    assert!(entries.iter().any(|e| e.ends_with(".ckpt")), "{entries:?}");
    // Downloaded: Lightning's own file, as it wrote it.
    assert_eq!(downloaded, ["epoch=0-step=60.ckpt"], "{downloaded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hugging_face_program_resumes_from_its_checkpoint_dir_after_a_rank_is_killed() {
    let (done, _, entries, downloaded) = killed_and_resumed("hf").await;
    let last = done
        .latest_program_progress
        .expect("the callback's progress");
    assert_eq!(last.step, 60);
    assert!(
        last.finished && last.loss.is_some_and(f64::is_finite),
        "{last:?}"
    );
    let adopted: Vec<&String> = entries.iter().filter(|e| e.starts_with("step-")).collect();
    assert_eq!(adopted, ["step-00000050", "step-00000060"], "{entries:?}");
    // keep = 2 took the Trainer's own older directories with it.
    assert!(!entries.iter().any(|e| e == "checkpoint-10"), "{entries:?}");
    assert_eq!(downloaded, ["checkpoint-60"], "{downloaded:?}");
}

//! A program's checkpoints kept elsewhere than its run dir: in a bucket
//! (uploaded by rank 0's agent, downloaded for a restart) and on a shared
//! file system.

use cohort_integration_tests::faults::signal;
use cohort_integration_tests::program::*;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::time::Duration;

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
    let id = cluster.create(request).await;
    let bucket_dir = format!("s3://ckpt/runs/{id}/step-");
    let recorded = eventually(
        "a checkpoint in the bucket",
        Duration::from_secs(120),
        || async {
            let list = checkpoints(&cluster, &id).await;
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
    let resumed = resumed_from(&events(&cluster, &id).await);
    assert!(resumed >= recorded.step as f64, "resumed from {resumed}");
    // The checkpoint it resumed from came out of the bucket.
    let fetched = cluster.root().join(format!(
        "agent-0/trainings/{id}/run/resume/step-{:08}",
        resumed as i64
    ));
    assert!(fetched.join("state.pt").is_file(), "{}", fetched.display());
    let kept = checkpoints(&cluster, &id).await;
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
    let id = cluster.create(request).await;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let kept = checkpoints(&cluster, &id).await;
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

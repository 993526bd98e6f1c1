//! DownloadCheckpoint of a checkpoint kept on its agent's disk (the default
//! storage): the coordinator reads it through the agent's Connect stream, a
//! megabyte at a time; once the agent and its disk are gone the checkpoint
//! is unreachable, and the error says what to do about it.

use cohort_integration_tests::faults::kill_agent_and_ranks;
use cohort_integration_tests::s3::check_export;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_on_an_agents_disk_comes_out_through_the_agent() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    // 256 x 2048: the state file (parameters and Adam's moments) is ~12 MiB,
    // a dozen relayed reads. TopK over x - b_dec: the export must say so.
    let job = SaeJob {
        d_in: 256,
        d_sae: 2048,
        steps: 20,
        checkpoint_every: 10,
        model_extra:
            "architecture = \"topk\"\nk = 16\napply_b_dec_to_input = true\nb_dec_init = \"mean\""
                .into(),
        ..SaeJob::small()
    };
    let config = job.write(cluster.root(), "big.toml");
    let id = cluster.submit(&config, &["--gpus", "2"]).await;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;

    let dir = tempfile::tempdir().unwrap();
    let (native, sae) = (dir.path().join("native"), dir.path().join("saelens"));
    let out = cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            native.to_str().unwrap(),
        ])
        .await;
    assert!(out.contains("checkpoint step 20"), "{out}");
    let size = std::fs::metadata(native.join("state.safetensors"))
        .unwrap()
        .len();
    assert!(size > 10 << 20, "state of {size} bytes");
    cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--step",
            "10",
            "--format",
            "saelens",
            "--out",
            sae.to_str().unwrap(),
        ])
        .await;
    let step10 = dir.path().join("native10");
    cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--step",
            "10",
            "--out",
            step10.to_str().unwrap(),
        ])
        .await;
    check_export(&step10, &sae);

    // The agent and its disk gone: FAILED_PRECONDITION, CHECKPOINT_UNREACHABLE.
    kill_agent_and_ranks(&cluster, &cluster.agent_name(0));
    std::fs::remove_dir_all(cluster.agent_work_dir(0)).unwrap();
    let client = cluster.training().await;
    // Until the coordinator notices the agent's end, the download works.
    let err = eventually(
        "the download to be refused",
        Duration::from_secs(30),
        || {
            let mut client = client.clone();
            let id = id.clone();
            async move {
                let attempt = client
                    .download_checkpoint(v1::DownloadCheckpointRequest {
                        training_id: id,
                        ..Default::default()
                    })
                    .await;
                match attempt {
                    Err(status) => Ok(status),
                    Ok(_) => Err("it still streams".to_string()),
                }
            }
        },
    )
    .await;
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(
        cohort_proto::error::reason_of(&err),
        Some(cohort_proto::error::Reason::CheckpointUnreachable)
    );
    assert!(
        err.message().contains("checkpoint.storage"),
        "{}",
        err.message()
    );
}

//! Data and checkpoints in S3 (moto's server on 127.0.0.1) through the whole
//! system: a 2-rank training reads its shards from a bucket and checkpoints
//! to another; the agent holding rank 0 is SIGKILLed with its ranks; the
//! gang restarts on the other agents, which never saw the first attempt's
//! files, and resumes from the newest checkpoint in the bucket. The agents
//! open only the two prefixes the training uses (`--s3-prefix`), and give
//! ranks the credentials through their env file, not their environment; a
//! training reading from another prefix never runs.

use cohort_integration_tests::faults::kill_agent_and_ranks;
use cohort_integration_tests::s3::{check_export, write_mixed_shards, S3Server};
use cohort_integration_tests::watch::watch_until;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use std::time::Duration;

fn config(steps: i64) -> v1::TrainingConfig {
    config_reading(steps, "s3://acts/gpt2-l8/")
}

fn config_reading(steps: i64, data: &str) -> v1::TrainingConfig {
    let text = format!(
        r#"
[model]
d_in = 16
d_sae = 64
[optim]
learning_rate = 0.003
batch_size = 16
steps = {steps}
[checkpoint]
every_steps = 20
keep = 2
storage = "s3://checkpoints/runs"
[data]
shuffle_chunk = 50
shuffle_buffer = 150
[data.files]
paths = ["{data}"]
[runtime]
device = "cpu"
log_every_steps = 10
"#
    );
    let spec = cohort_spec::TrainingConfig::from_toml(&text).expect("a valid config");
    v1::TrainingConfig::from(&spec)
}

/// Creates a training of `config` on `gpus` GPUs (queued until they are free).
async fn create(
    client: &mut cohort_proto::v1::training_service_client::TrainingServiceClient<
        tonic::transport::Channel,
    >,
    config: v1::TrainingConfig,
    gpus: i32,
) -> String {
    client
        .create_training(v1::CreateTrainingRequest {
            config: Some(config),
            gpus: Some(v1::GpuRequest {
                selection: Some(v1::gpu_request::Selection::Count(gpus)),
                queue: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("CreateTraining")
        .into_inner()
        .id
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gang_on_other_hosts_resumes_from_checkpoints_in_s3() {
    let s3 = S3Server::start();
    let scratch = tempfile::tempdir().unwrap();
    let shards = write_mixed_shards(scratch.path(), 16);
    s3.upload_dir(&shards, "acts", "gpt2-l8");
    let empty = scratch.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    s3.upload_dir(&empty, "checkpoints", "runs");

    let mut options = ClusterOptions::new(Backend::Sqlite, 3);
    options.gpus_per_agent = 1;
    options.env = s3.env();
    options.env.extend([
        ("COHORT_AGENT_TIMEOUT".to_string(), "4s".to_string()),
        ("COHORT_STOP_GRACE".to_string(), "2s".to_string()),
    ]);
    options.agent_args = ["s3://acts/gpt2-l8", "s3://checkpoints/runs"]
        .iter()
        .flat_map(|p| ["--s3-prefix".to_string(), p.to_string()])
        .collect();
    let cluster = Cluster::start(options).await;
    let mut client = cluster.training().await;
    let id = create(&mut client, config(600), 2).await;

    let first = watch_until(
        &mut client,
        &id,
        0,
        Duration::from_secs(120),
        |e| matches!(&e.event, Some(Event::Checkpoint(c)) if c.step >= 40),
    )
    .await
    .expect("WatchTraining");
    assert!(
        !first.ended,
        "ended before a checkpoint: {:?}",
        first.events
    );
    let written: Vec<String> = first
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Checkpoint(c)) => Some(c.path.clone()),
            _ => None,
        })
        .collect();
    assert!(
        written
            .iter()
            .all(|p| p.starts_with(&format!("s3://checkpoints/runs/{id}/step-"))),
        "{written:?}"
    );

    let running = cluster.get_training(&id).await;
    let rank0_agent = running
        .ranks
        .iter()
        .find(|r| r.rank == 0)
        .expect("rank 0")
        .agent_id
        .clone();
    let victim = cluster.agent_name_of(&rank0_agent).await;
    kill_agent_and_ranks(&cluster, &victim);

    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert_eq!(done.attempt, 2, "{done:?}");
    assert!(
        done.ranks.iter().all(|r| r.agent_id != rank0_agent),
        "attempt 2 runs on the other hosts: {:?}",
        done.ranks
    );
    let all = watch_until(&mut client, &id, 0, Duration::from_secs(30), |_| false)
        .await
        .expect("WatchTraining to the end");
    let starts = all.start_steps();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[0], 0);
    assert!(
        starts[1] >= 40,
        "attempt 2 resumed from the bucket at step {}, not from scratch",
        starts[1]
    );
    // The weights come out of the bucket through the coordinator, natively
    // and for SAELens, and another tool reads both the same way.
    let native = scratch.path().join("native");
    let sae = scratch.path().join("saelens");
    cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            native.to_str().unwrap(),
        ])
        .await;
    let out = cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--out",
            sae.to_str().unwrap(),
            "--format",
            "saelens",
        ])
        .await;
    assert!(out.contains("sae_weights.safetensors"), "{out}");
    check_export(&native, &sae);
    let missing = cluster
        .cli(&[
            "checkpoints",
            "download",
            &id,
            "--step",
            "7",
            "--out",
            native.to_str().unwrap(),
        ])
        .await;
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");

    // Data under a prefix the agents do not open: refused before a rank
    // starts, not retried.
    let outside = config_reading(20, "s3://acts/elsewhere/");
    let refused = create(&mut client, outside, 1).await;
    let failed = cluster
        .wait_state(&refused, State::Failed, Duration::from_secs(60))
        .await;
    assert!(
        failed.state_reason.contains("DATA_OUTSIDE_ROOTS")
            && failed.state_reason.contains("s3://acts/elsewhere"),
        "{}",
        failed.state_reason
    );
    assert_eq!(failed.restart_count, 0);

    // Nothing of attempt 2 came from a local disk: the new hosts' work dirs
    // hold no checkpoints.
    for i in 0..3 {
        let name = cluster.agent_name(i);
        if name == victim {
            continue;
        }
        let local = walk(&cluster.agent_work_dir(i));
        assert!(
            local.iter().all(|p| !p.contains("step-")),
            "{name}: {local:?}"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.display().to_string());
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

//! Elastic trainings with real ranks: a range of sizes asked for in the job
//! file (`gpus = { min, max }`) or on the command line (`--gpus 2..4`)
//! starts at the largest size that fits now, with the micro-batch and
//! accumulation that hold its global batch; a range no size of which
//! splits the global batch is refused naming the field and the sizes that
//! would, and nothing is written.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::error::{bad_fields, Reason};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;
use tonic::Code;

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_training_starts_at_the_largest_size_that_fits_and_holds_its_batch() {
    // Two agents of two GPUs; one held by a long fixed training.
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 2)).await;
    let mut client = cluster.training().await;
    let blocker = cluster
        .create(create_request(&SaeJob::with_steps(200_000), 1, true))
        .await;
    eventually("the blocker running", JOB_TIMEOUT, || async {
        match cluster.get_training(&blocker).await.state() {
            State::Running => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Written for 4 ranks at a micro-batch of 16: a global batch of 64.
    let job = SaeJob {
        batch_size: 16,
        ..SaeJob::with_steps(120)
    };
    let file = cluster.root().join("elastic.toml");
    std::fs::write(
        &file,
        format!("gpus = {{ min = 2, max = 4 }}\n{}", job.toml()),
    )
    .unwrap();
    let id = cluster
        .cli_ok(&[
            "train",
            "submit",
            "--config",
            file.to_str().unwrap(),
            "--quiet",
        ])
        .await
        .trim()
        .to_string();
    let run = watch_to_end(&mut client, &id, JOB_TIMEOUT).await;
    if run.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("elastic: {:#?}", run.events));
    }
    // 3 free: its largest size within them, 2 (3 does not split 64).
    let started: Vec<&v1::TrainingStarted> = run
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Started(s)) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "{:#?}", run.events);
    assert_eq!(
        (started[0].world_size, started[0].global_batch),
        (2, 64),
        "2 ranks of 2 micro-batches of 16"
    );
    let t = cluster.get_training(&id).await;
    assert_eq!((t.world_size, t.global_batch_size), (2, 64));
    let request = t.gpu_request.expect("its request");
    assert_eq!((request.min_count, request.max_count), (Some(2), Some(4)));
    assert_eq!(request.selection, None);
    let shown = cluster.cli_ok(&["train", "get", &id]).await;
    assert!(shown.contains("2..4 GPUs, elastic"), "{shown}");

    // The same job on the command line, the blocker gone: all 4.
    cluster.cli_ok(&["train", "cancel", &blocker]).await;
    let job_file = job.write(cluster.root(), "fixed-batch.toml");
    let id = cluster
        .cli_ok(&[
            "train",
            "submit",
            "--config",
            job_file.to_str().unwrap(),
            "--gpus",
            "2..4",
            "--quiet",
        ])
        .await
        .trim()
        .to_string();
    let run = watch_to_end(&mut client, &id, JOB_TIMEOUT).await;
    assert_eq!(run.final_state(), Some(State::Succeeded));
    let t = cluster.get_training(&id).await;
    assert_eq!((t.world_size, t.global_batch_size), (4, 64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_that_cannot_split_the_global_batch_is_refused_with_the_sizes_that_would() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let mut config = SaeJob::small().proto();
    config.optim.as_mut().expect("optim").global_batch = Some(96);
    let request = v1::CreateTrainingRequest {
        config: Some(config.clone()),
        gpus: Some(v1::GpuRequest {
            min_count: Some(5),
            max_count: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut client = cluster.training().await;
    let refused = |what: &str, result| {
        let status = expect_error(what, result, Code::InvalidArgument, Reason::InvalidArgument);
        let fields = bad_fields(&status);
        (
            fields.first().cloned().unwrap_or_default(),
            status.message().to_string(),
        )
    };
    let (field, message) = refused(
        "5 ranks cannot split 96",
        client.create_training(request).await,
    );
    assert_eq!(field, "gpus.min_count");
    assert!(
        message.ends_with("sizes that would: 1, 2, 3, 4, 6, 8, 12, 16"),
        "{message}"
    );
    // A count beside a range, and a global batch with no size: refused too.
    let both = v1::CreateTrainingRequest {
        config: Some(config.clone()),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(2)),
            min_count: Some(2),
            max_count: Some(4),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (field, _) = refused("a count and a range", client.create_training(both).await);
    assert_eq!(field, "gpus.min_count");
    let auto = v1::CreateTrainingRequest {
        config: Some(config),
        ..Default::default()
    };
    let (field, _) = refused(
        "a global batch over no size",
        client.create_training(auto).await,
    );
    assert_eq!(field, "optim.global_batch");
    // Nothing was written.
    assert_eq!(cluster.db().training_count(), 0);
    // The CLI says the same to a person.
    let file = cluster.root().join("bad.toml");
    std::fs::write(
        &file,
        SaeJob::small()
            .toml()
            .replace("steps = 60", "steps = 60\nglobal_batch = 96"),
    )
    .unwrap();
    let out = cluster
        .cli(&[
            "train",
            "submit",
            "--config",
            file.to_str().unwrap(),
            "--gpus",
            "5..5",
        ])
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("gpus.min_count") && stderr.contains("sizes that would"),
        "{stderr}"
    );
}

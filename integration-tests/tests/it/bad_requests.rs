//! Bad CreateTraining requests fail with a precise code and ErrorInfo reason
//! and write nothing; a retried request_id creates one training.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::error::{bad_fields, Reason};
use cohort_proto::v1;
use cohort_testkit::eventually;
use std::time::Duration;
use tonic::Code;

async fn training_count(cluster: &Cluster) -> usize {
    let mut client = cluster.training().await;
    let mut count = 0;
    let mut page_token = String::new();
    loop {
        let page = client
            .list_trainings(v1::ListTrainingsRequest {
                page_size: 1000,
                page_token,
                states: Vec::new(),
                ..Default::default()
            })
            .await
            .expect("ListTrainings")
            .into_inner();
        count += page.trainings.len();
        if page.next_page_token.is_empty() {
            return count;
        }
        page_token = page.next_page_token;
    }
}

/// Checks that nothing was written: ListTrainings and the trainings table agree on `want`.
async fn assert_count(cluster: &Cluster, want: usize, after: &str) {
    assert_eq!(
        training_count(cluster).await,
        want,
        "ListTrainings after {after}"
    );
    assert_eq!(
        cluster.db().training_count(),
        want as i64,
        "rows in trainings after {after}"
    );
}

async fn config_errors_write_nothing(backend: Backend) {
    let cluster = Cluster::start(ClusterOptions::new(backend, 0)).await;
    let mut client = cluster.training().await;
    let job = SaeJob::small();

    let mut missing = create_request(&job, 1, true);
    missing.config = None;
    let status = expect_error(
        "missing config",
        client.create_training(missing).await,
        Code::InvalidArgument,
        Reason::InvalidConfig,
    );
    assert_eq!(bad_fields(&status), vec!["config".to_string()]);
    assert_count(&cluster, 0, "a missing config").await;

    let mut negative = create_request(&job, 1, true);
    negative
        .config
        .as_mut()
        .unwrap()
        .optim
        .as_mut()
        .unwrap()
        .batch_size = -32;
    let status = expect_error(
        "negative batch",
        client.create_training(negative).await,
        Code::InvalidArgument,
        Reason::InvalidConfig,
    );
    assert_eq!(
        bad_fields(&status),
        vec!["config.optim.batch_size".to_string()]
    );
    assert_count(&cluster, 0, "a negative batch").await;

    let mut no_model = create_request(&job, 1, true);
    no_model.config.as_mut().unwrap().model = None;
    let status = expect_error(
        "missing model",
        client.create_training(no_model).await,
        Code::InvalidArgument,
        Reason::InvalidConfig,
    );
    assert!(
        bad_fields(&status)
            .iter()
            .any(|f| f.starts_with("config.model")),
        "{:?}",
        bad_fields(&status)
    );

    let mut zero_gpus = create_request(&job, 1, true);
    zero_gpus.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::Count(0)),
        queue: None,
        ..Default::default()
    });
    expect_error(
        "a count of 0 GPUs",
        client.create_training(zero_gpus).await,
        Code::InvalidArgument,
        Reason::InvalidArgument,
    );

    let mut long_id = create_request(&job, 1, true);
    long_id.request_id = "x".repeat(129);
    expect_error(
        "a 129-character request_id",
        client.create_training(long_id).await,
        Code::InvalidArgument,
        Reason::InvalidArgument,
    );
    assert_count(&cluster, 0, "every bad request").await;

    expect_error(
        "GetTraining of an unknown id",
        client
            .get_training(v1::GetTrainingRequest {
                id: "no-such-training".into(),
            })
            .await,
        Code::NotFound,
        Reason::TrainingNotFound,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_write_nothing_sqlite() {
    config_errors_write_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_write_nothing_postgres() {
    config_errors_write_nothing(Backend::Postgres).await;
}

async fn request_id_creates_one_training(backend: Backend) {
    let cluster = Cluster::start(ClusterOptions::new(backend, 0)).await;
    let mut client = cluster.training().await;
    let mut request = create_request(&SaeJob::small(), 1, true);
    request.request_id = uuid::Uuid::new_v4().to_string();

    let first = client
        .create_training(request.clone())
        .await
        .expect("first CreateTraining")
        .into_inner();
    let second = client
        .create_training(request.clone())
        .await
        .expect("retried CreateTraining")
        .into_inner();
    assert!(!first.id.is_empty());
    assert_eq!(first.id, second.id, "the retry returned another training");
    assert_eq!(second.request_id, request.request_id);
    assert_count(&cluster, 1, "a retried request_id").await;

    // Concurrent retries: still one training.
    let mut concurrent = request.clone();
    concurrent.request_id = uuid::Uuid::new_v4().to_string();
    let mut calls = Vec::new();
    for _ in 0..4 {
        let mut client = cluster.training().await;
        let request = concurrent.clone();
        calls.push(tokio::spawn(async move {
            client
                .create_training(request)
                .await
                .map(|r| r.into_inner().id)
        }));
    }
    let mut ids = Vec::new();
    for call in calls {
        ids.push(
            call.await
                .expect("join")
                .expect("concurrent CreateTraining"),
        );
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "concurrent retries created {ids:?}");
    assert_count(&cluster, 2, "concurrent retries").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_creates_one_training_sqlite() {
    request_id_creates_one_training(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_creates_one_training_postgres() {
    request_id_creates_one_training(Backend::Postgres).await;
}

/// common.proto's error model: REQUEST_ID_CONFLICT "a request_id was reused
/// with a different request (ALREADY_EXISTS)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_request_id_with_another_request_conflicts() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 0)).await;
    let mut client = cluster.training().await;
    let mut request = create_request(&SaeJob::small(), 1, true);
    request.request_id = uuid::Uuid::new_v4().to_string();
    client
        .create_training(request.clone())
        .await
        .expect("first CreateTraining");
    // The same request_id with a different request is a conflict, not a new job.
    let mut conflicting = request.clone();
    conflicting.priority = 7;
    expect_error(
        "a reused request_id with another request",
        client.create_training(conflicting).await,
        Code::AlreadyExists,
        Reason::RequestIdConflict,
    );
    assert_count(&cluster, 1, "a conflicting request_id").await;
}

/// GPU errors need GPUs: one agent with 2 simulated GPUs, one of them held by
/// a long training.
async fn gpu_errors_write_nothing(backend: Backend) {
    let cluster = Cluster::start(ClusterOptions::new(backend, 1)).await;
    let mut client = cluster.training().await;
    let job = SaeJob::small();

    let mut unknown = create_request(&job, 1, true);
    unknown.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::GpuIds(
            v1::gpu_request::GpuIds {
                ids: vec!["GPU-does-not-exist".into()],
            },
        )),
        queue: None,
        ..Default::default()
    });
    let status = expect_error(
        "an unknown GPU id",
        client.create_training(unknown).await,
        Code::NotFound,
        Reason::GpuNotFound,
    );
    assert!(
        status.message().contains("GPU-does-not-exist"),
        "the message names the GPU: {status:?}"
    );
    assert_count(&cluster, 0, "an unknown GPU id").await;

    let too_many = create_request(&job, 3, false);
    expect_error(
        "3 GPUs of 2 with queueing off",
        client.create_training(too_many).await,
        Code::FailedPrecondition,
        Reason::InsufficientGpus,
    );
    assert_count(&cluster, 0, "too many GPUs").await;

    // Hold GPU 0 with a long training.
    let gpus = cluster.list_gpus().await;
    let gpu0 = gpus
        .iter()
        .find(|g| g.info.as_ref().is_some_and(|i| i.index == 0))
        .and_then(|g| g.info.clone())
        .expect("GPU 0")
        .uuid;
    let mut holder = create_request(&SaeJob::with_steps(1_000_000), 1, false);
    holder.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::GpuIds(
            v1::gpu_request::GpuIds {
                ids: vec![gpu0.clone()],
            },
        )),
        queue: Some(false),
        ..Default::default()
    });
    let holder = client
        .create_training(holder)
        .await
        .expect("a training on a free GPU")
        .into_inner();
    assert_count(&cluster, 1, "the holder").await;
    // GPU 0 is busy once the scheduler has placed the holder on it (a pass
    // after the create, not the create itself).
    eventually("the holder placed", Duration::from_secs(30), || async {
        let t = cluster.get_training(&holder.id).await;
        match t.state() {
            v1::training::State::Queued => Err(t.state_reason),
            _ => Ok(()),
        }
    })
    .await;

    let mut busy = create_request(&job, 1, false);
    busy.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::GpuIds(
            v1::gpu_request::GpuIds {
                ids: vec![gpu0.clone()],
            },
        )),
        queue: Some(false),
        ..Default::default()
    });
    expect_error(
        "a busy GPU with queueing off",
        client.create_training(busy).await,
        Code::FailedPrecondition,
        Reason::GpuBusy,
    );
    let too_many = create_request(&job, 2, false);
    expect_error(
        "2 GPUs of 1 free with queueing off",
        client.create_training(too_many).await,
        Code::FailedPrecondition,
        Reason::InsufficientGpus,
    );
    assert_count(&cluster, 1, "GPU errors").await;

    // Cancel the holder so that the teardown is quick (and check it frees the GPU).
    client
        .cancel_training(v1::CancelTrainingRequest {
            id: holder.id.clone(),
            reason: "test over".into(),
        })
        .await
        .expect("CancelTraining");
    cluster
        .wait_state(
            &holder.id,
            v1::training::State::Cancelled,
            Duration::from_secs(30),
        )
        .await;
    cluster
        .assert_no_rank_processes(Duration::from_secs(30))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_errors_write_nothing_sqlite() {
    gpu_errors_write_nothing(Backend::Sqlite).await;
}

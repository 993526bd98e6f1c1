//! Out of memory, injected: ranks whose micro-batch is above a limit exit as
//! out of memory (`COHORT_FAULT_OOM_ABOVE_MICRO_BATCH`, passed through by
//! the agents). With the default `oom_policy = "adapt"` each restart cuts the
//! micro-batch to the largest divisor of the per-rank batch at most 75 % of
//! it and raises gradient accumulation to match, until it fits: the global
//! batch never changes and the training succeeds. With `"fail"` the first
//! out-of-memory exit fails the training.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(180);

async fn cluster() -> Cluster {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.env = vec![("COHORT_FAULT_OOM_ABOVE_MICRO_BATCH".into(), "100".into())];
    Cluster::start(options).await
}

fn job() -> SaeJob {
    SaeJob {
        batch_size: 256,
        steps: 40,
        ..SaeJob::small()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_cuts_the_micro_batch_and_keeps_the_global_batch() {
    let cluster = cluster().await;
    let mut client = cluster.training().await;
    let id = client
        .create_training(create_request(&job(), 2, true))
        .await
        .expect("create")
        .into_inner()
        .id;
    cluster.wait_state(&id, State::Succeeded, JOB_TIMEOUT).await;
    let t = client
        .get_training(v1::GetTrainingRequest { id: id.clone() })
        .await
        .expect("get")
        .into_inner();
    // 256 -> 128 (still over 100) -> 64, with 4 micro-batches a step.
    assert_eq!(t.restart_count, 2, "{t:?}");
    let optim = t.config.as_ref().and_then(|c| c.optim).expect("optim");
    assert_eq!(
        (optim.batch_size, optim.accumulation_steps),
        (64, Some(4)),
        "{optim:?}"
    );
    assert_eq!(
        t.global_batch_size,
        256 * 2,
        "the global batch is unchanged"
    );
    let detail = cluster.cli_ok(&["train", "get", &id]).await;
    for note in [
        "micro-batch 256 -> 128, accumulation 1 -> 2 (per-rank batch 256 unchanged: oom_policy adapt)",
        "micro-batch 128 -> 64, accumulation 2 -> 4 (per-rank batch 256 unchanged: oom_policy adapt)",
    ] {
        assert!(detail.contains(note), "{note} in:\n{detail}");
    }
    assert!(detail.contains("out of memory"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_oom_policy_fail_the_first_oom_fails_the_training() {
    let cluster = cluster().await;
    let job = SaeJob {
        tables: "oom_policy = \"fail\"\n".into(),
        ..job()
    };
    let mut client = cluster.training().await;
    let id = client
        .create_training(create_request(&job, 1, true))
        .await
        .expect("create")
        .into_inner()
        .id;
    cluster.wait_state(&id, State::Failed, JOB_TIMEOUT).await;
    let t = client
        .get_training(v1::GetTrainingRequest { id })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(t.restart_count, 0, "{t:?}");
    assert!(
        t.state_reason
            .contains("out of memory, not retried (runtime.oom_policy = \"fail\")"),
        "{}",
        t.state_reason
    );
}

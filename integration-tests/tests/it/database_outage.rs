//! PostgreSQL goes away for 30 s under a running training (a proxy between
//! the coordinator and the server is cut): changes are answered UNAVAILABLE
//! meanwhile, the ranks train on, and when the database is back everything
//! recovers without intervention: the training ends SUCCEEDED in its first
//! attempt with every progress step of the outage delivered.

use cohort_integration_tests::db::postgres_server;
use cohort_integration_tests::job::create_request;
use cohort_integration_tests::proxy::Proxy;
use cohort_integration_tests::watch::{watch_request, watch_until};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::{Duration, Instant};

const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_refuses_changes_and_recovers_on_its_own() {
    let proxy = Proxy::start(&postgres_server()).await;
    let mut options = ClusterOptions::new(Backend::Postgres, 1);
    options.database_via = Some(proxy.addr.clone());
    let cluster = Cluster::start(options).await;
    let mut client = cluster.training().await;
    let steps = 15_000;
    let job = SaeJob::with_steps(steps);
    let id = client
        .create_training(create_request(&job, 2, true))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    watch_until(
        &mut client,
        &id,
        0,
        Duration::from_secs(90),
        |e| matches!(&e.event, Some(Event::Progress(p)) if p.step > 1),
    )
    .await
    .expect("WatchTraining");
    let ranks = cluster.rank_processes();
    assert_eq!(ranks.len(), 2);

    let cut = Instant::now();
    proxy.cut();
    // A change while the database is gone: UNAVAILABLE, nothing half-done.
    let refused = client
        .create_training(create_request(&SaeJob::small(), 1, true))
        .await
        .expect_err("no database, no training");
    eprintln!(
        "CreateTraining during the outage: {:?} after {} ms",
        refused.code(),
        cut.elapsed().as_millis()
    );
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(cluster.rank_processes(), ranks, "the ranks train on");
    tokio::time::sleep(OUTAGE.saturating_sub(cut.elapsed())).await;
    proxy.restore();
    let restored = Instant::now();

    // Changes are taken again, by the same coordinator, untouched.
    eventually(
        "CreateTraining to work again",
        Duration::from_secs(30),
        || async {
            let mut c = cluster.training().await;
            let mut request = create_request(&SaeJob::small(), 1, true);
            request.request_id = "after-the-outage".into();
            c.create_training(request)
                .await
                .map(|_| ())
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        },
    )
    .await;
    eprintln!(
        "changes taken again {} ms after the database returned",
        restored.elapsed().as_millis()
    );

    let request = v1::WatchTrainingRequest {
        id: id.clone(),
        after_sequence: 0,
        include_rank_stats: false,
        max_points: 0,
    };
    let history = watch_request(&mut client, request, Duration::from_secs(180), |_| false)
        .await
        .expect("WatchTraining to the end");
    if history.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("after the outage: {:#?}", history.state_changes()));
    }
    assert_eq!(history.start_steps(), vec![0], "one attempt");
    let training = cluster.get_training(&id).await;
    assert_eq!(
        (training.attempt, training.restart_count),
        (1, 0),
        "{training:?}"
    );
    let mut logged: Vec<i64> = history.progress().iter().map(|p| p.step).collect();
    logged.dedup();
    let missing: Vec<i64> = (1..=steps)
        .filter(|s| s % job.log_every == 0 && !logged.contains(s))
        .collect();
    assert!(missing.is_empty(), "progress lost for steps {missing:?}");
}

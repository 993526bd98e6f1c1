//! Cancelling a running training: every rank process goes, the GPUs are free
//! again, and the training is CANCELLED.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::watch_until;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;

/// Starts a training on every GPU of `cluster` that would run for hours,
/// waits for its first progress event, and cancels it; returns its id once
/// the stream has ended with CANCELLED.
async fn cancel_mid_run(cluster: &Cluster, gpus: usize) -> String {
    let mut client = cluster.training().await;
    let job = SaeJob::with_steps(1_000_000);
    let training = client
        .create_training(create_request(&job, gpus as i32, true))
        .await
        .expect("CreateTraining")
        .into_inner();
    let id = training.id;

    // Wait until it trains (the first progress event).
    let before = watch_until(&mut client, &id, 0, Duration::from_secs(90), |e| {
        matches!(e.event, Some(Event::Progress(_)))
    })
    .await
    .expect("WatchTraining");
    assert!(
        !before.ended,
        "the training ended before any progress: {:?}",
        before.events
    );
    assert_eq!(cluster.get_training(&id).await.state(), State::Running);
    assert_eq!(
        cluster.rank_processes().len(),
        gpus,
        "one rank process per GPU runs before the cancel"
    );
    let busy = cluster.list_gpus().await;
    assert!(
        busy.iter()
            .all(|g| g.availability() == v1::GpuAvailability::Busy && g.training_id == id),
        "every GPU is held by the training: {busy:?}"
    );

    let cancelled = client
        .cancel_training(v1::CancelTrainingRequest {
            id: id.clone(),
            reason: "integration test".into(),
        })
        .await
        .expect("CancelTraining")
        .into_inner();
    assert_eq!(cancelled.state(), State::Cancelled, "{cancelled:?}");

    // The stream goes on from where it was and ends with the cancel.
    let after = watch_until(
        &mut client,
        &id,
        before.last_sequence(),
        Duration::from_secs(30),
        |_| false,
    )
    .await
    .expect("WatchTraining after the cancel");
    assert!(after.ended);
    assert_eq!(after.final_state(), Some(State::Cancelled));
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_run_stops_ranks_and_frees_gpus() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 2)).await;
    let id = cancel_mid_run(&cluster, 4).await;

    cluster
        .assert_no_rank_processes(Duration::from_secs(30))
        .await;
    eventually("every GPU to be free", Duration::from_secs(30), || async {
        let gpus = cluster.list_gpus().await;
        if gpus.len() == 4
            && gpus.iter().all(|g| {
                g.availability() == v1::GpuAvailability::Available && g.training_id.is_empty()
            })
        {
            Ok(())
        } else {
            Err(format!("{gpus:?}"))
        }
    })
    .await;

    // training.proto: RANK_STATE_STOPPED "The process was stopped on request
    // (cancel or restart)" — not FAILED.
    let ranks = eventually(
        "the ranks to have exited",
        Duration::from_secs(30),
        || async {
            let t = cluster.get_training(&id).await;
            if t.ranks.len() == 4
                && t.ranks
                    .iter()
                    .all(|r| r.exit_code.is_some() || r.signal.is_some())
            {
                Ok(t.ranks)
            } else {
                Err(format!("{:?}", t.ranks))
            }
        },
    )
    .await;
    for r in &ranks {
        assert_eq!(r.state(), v1::RankState::Stopped, "{ranks:?}");
    }
    let rows = cluster.db().ranks(&id);
    assert!(rows.iter().all(|r| r.state == "STOPPED"), "{rows:?}");

    let training = cluster.get_training(&id).await;
    assert_eq!(training.state(), State::Cancelled);
    assert!(training.end_time.is_some());
    let transitions = cluster.db().transitions(&id);
    let last = transitions.last().expect("transitions");
    assert_eq!(last.to_state, "CANCELLED", "{transitions:?}");
    assert!(last.reason.contains("integration test"), "{transitions:?}");

    // Cancelling again changes nothing.
    let mut client = cluster.training().await;
    let again = client
        .cancel_training(v1::CancelTrainingRequest {
            id: id.clone(),
            reason: "again".into(),
        })
        .await
        .expect("a second CancelTraining")
        .into_inner();
    assert_eq!(again.state(), State::Cancelled);
    assert_eq!(cluster.db().transitions(&id).len(), transitions.len());

    // The freed GPUs take the next training, even with queueing off.
    let next = client
        .create_training(create_request(&SaeJob::small(), 4, false))
        .await
        .expect("a training on the freed GPUs")
        .into_inner();
    cluster
        .wait_state(&next.id, State::Succeeded, Duration::from_secs(90))
        .await;
}

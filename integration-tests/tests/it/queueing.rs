//! Two trainings that each want all 4 GPUs: the second waits QUEUED (with a
//! reason) while the first runs, then runs to SUCCEEDED after it. A third,
//! cancelled while it waits, ends CANCELLED without ever being placed.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

fn seconds(t: &Option<prost_types::Timestamp>) -> f64 {
    let t = t.as_ref().expect("a timestamp");
    t.seconds as f64 + f64::from(t.nanos) * 1e-9
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_job_waits_queued_then_runs() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 2)).await;
    let mut client = cluster.training().await;

    // ~600 steps of 4 ranks on a small machine: several seconds of RUNNING.
    let first = client
        .create_training(create_request(&SaeJob::with_steps(600), 4, true))
        .await
        .expect("first CreateTraining")
        .into_inner();
    cluster
        .wait_state(&first.id, State::Running, Duration::from_secs(90))
        .await;

    let second = client
        .create_training(create_request(&SaeJob::small(), 4, true))
        .await
        .expect("second CreateTraining")
        .into_inner();
    assert_eq!(second.state(), State::Queued, "{second:?}");
    assert!(
        !second.state_reason.is_empty(),
        "a queued training says why: {second:?}"
    );
    assert!(second.ranks.is_empty(), "{second:?}");
    // it names what is missing and where it stands, in GetTraining and ListTrainings
    eventually(
        "the pending reason and position",
        Duration::from_secs(10),
        || async {
            let waiting = cluster.get_training(&second.id).await;
            let listed = cluster
                .training()
                .await
                .list_trainings(v1::ListTrainingsRequest::default())
                .await
                .expect("ListTrainings")
                .into_inner()
                .trainings;
            let in_list = listed
                .iter()
                .find(|t| t.id == second.id)
                .map(|t| t.queue_position);
            if waiting.state_reason.starts_with("INSUFFICIENT_GPUS")
                && waiting.queue_position == 1
                && in_list == Some(1)
            {
                Ok(())
            } else {
                Err(format!(
                    "{:?} at {} (listed {in_list:?})",
                    waiting.state_reason, waiting.queue_position
                ))
            }
        },
    )
    .await;
    // A third waits behind the second; cancelled while QUEUED, it ends at
    // once and is never placed.
    let third = client
        .create_training(create_request(&SaeJob::small(), 4, true))
        .await
        .expect("third CreateTraining")
        .into_inner();
    assert_eq!(third.state(), State::Queued, "{third:?}");
    let cancelled = client
        .cancel_training(v1::CancelTrainingRequest {
            id: third.id.clone(),
            reason: "not needed".into(),
        })
        .await
        .expect("CancelTraining of a queued training")
        .into_inner();
    assert_eq!(cancelled.state(), State::Cancelled, "{cancelled:?}");
    assert!(
        cancelled.ranks.is_empty() && cancelled.attempt == 0,
        "{cancelled:?}"
    );
    let third_watched = watch_to_end(&mut client, &third.id, JOB_TIMEOUT).await;
    assert_eq!(
        third_watched.state_changes(),
        vec![
            (State::Unspecified, State::Queued),
            (State::Queued, State::Cancelled),
        ]
    );
    assert_eq!(cluster.get_training(&second.id).await.queue_position, 1);
    let first_now = cluster.get_training(&first.id).await;
    assert_eq!(
        first_now.state(),
        State::Running,
        "the second was checked while the first ran"
    );
    let listed = cluster
        .cli_ok(&["train", "list", "--state", "queued"])
        .await;
    assert!(listed.contains(&second.id), "{listed}");

    let first_watched = watch_to_end(&mut client, &first.id, JOB_TIMEOUT).await;
    assert_eq!(first_watched.final_state(), Some(State::Succeeded));
    let second_watched = watch_to_end(&mut client, &second.id, JOB_TIMEOUT).await;
    if second_watched.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("second training: {:#?}", second_watched.events));
    }
    assert_eq!(
        second_watched.state_changes(),
        vec![
            (State::Unspecified, State::Queued),
            (State::Queued, State::Scheduled),
            (State::Scheduled, State::Running),
            (State::Running, State::Succeeded),
        ]
    );

    // The second was placed only once the first had ended.
    let first_end = seconds(&cluster.get_training(&first.id).await.end_time);
    let scheduled_at = second_watched
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::StateChange(c)) if c.to() == State::Scheduled => Some(seconds(&e.time)),
            _ => None,
        })
        .expect("the second's SCHEDULED event");
    assert!(
        scheduled_at >= first_end,
        "the second was scheduled at {scheduled_at} before the first ended at {first_end}"
    );
    cluster
        .assert_no_rank_processes(Duration::from_secs(10))
        .await;
}

//! Sharing the fleet with real ranks: an urgent training preempts a running
//! SAE training, which checkpoints on its notice, goes back to the queue,
//! resumes from the step it stopped at and reaches the parameters of a run
//! never preempted, with no restart spent; start and end estimates appear
//! and move as the queue changes.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// The final checksum of a finished SAE run.
fn checksum(events: &[v1::TrainingEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Finished(f)) => Some(f.param_checksum.clone()),
            _ => None,
        })
        .expect("a finished event")
}

fn with_class(mut request: v1::CreateTrainingRequest, class: &str) -> v1::CreateTrainingRequest {
    request.priority_class = class.into();
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_urgent_training_preempts_an_sae_training_that_resumes_to_the_same_parameters() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.coordinator_args = vec!["--preemption-min-runtime".into(), "1s".into()];
    let cluster = Cluster::start(options).await;
    let mut client = cluster.training().await;
    // A checkpoint only at the end: whatever it resumes from was written
    // on its notice.
    let job = SaeJob {
        checkpoint_every: 100_000,
        log_every: 20,
        ..SaeJob::with_steps(1500)
    };
    let straight = cluster
        .create(with_class(create_request(&job, 2, true), "low"))
        .await;
    let straight = watch_to_end(&mut client, &straight, JOB_TIMEOUT).await;
    assert_eq!(straight.final_state(), Some(State::Succeeded));
    let expected = checksum(&straight.events);

    let victim = cluster
        .create(with_class(create_request(&job, 2, true), "low"))
        .await;
    eventually("the victim under way", JOB_TIMEOUT, || async {
        let t = cluster.get_training(&victim).await;
        match &t.latest_progress {
            Some(p) if t.state() == State::Running && p.step >= 200 => Ok(()),
            _ => Err(format!(
                "{:?} {:?}",
                t.state(),
                t.latest_progress.map(|p| p.step)
            )),
        }
    })
    .await;
    let urgent = cluster
        .create(with_class(
            create_request(&SaeJob::small(), 2, true),
            "urgent",
        ))
        .await;
    let urgent_run = watch_to_end(&mut client, &urgent, JOB_TIMEOUT).await;
    assert_eq!(urgent_run.final_state(), Some(State::Succeeded));

    let victim_run = watch_to_end(&mut client, &victim, JOB_TIMEOUT).await;
    if victim_run.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("victim: {:#?}", victim_run.events));
    }
    let preempted: Vec<&v1::PreemptedEvent> = victim_run
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Preempted(p)) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(preempted.len(), 1, "{:#?}", victim_run.events);
    let p = preempted[0];
    assert_eq!(
        (p.by.as_str(), p.kind.as_str()),
        (urgent.as_str(), "preempt")
    );
    assert_eq!(p.priority_class, "urgent");
    assert!(p.checkpointed, "it checkpointed on its notice: {p:?}");
    let at = p.resume_step.expect("a step to resume from");
    assert!((200..1500).contains(&at), "{at}");
    assert_eq!(
        victim_run.state_changes(),
        vec![
            (State::Unspecified, State::Queued),
            (State::Queued, State::Scheduled),
            (State::Scheduled, State::Running),
            (State::Running, State::Queued),
            (State::Queued, State::Scheduled),
            (State::Scheduled, State::Running),
            (State::Running, State::Succeeded),
        ]
    );
    let back = victim_run
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::StateChange(c))
                if c.to() == State::Queued && c.from() == State::Running =>
            {
                Some(c.reason.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(back, format!("PREEMPTED: by {urgent} (class urgent)"));
    assert_eq!(
        victim_run.start_steps(),
        vec![0, at],
        "it resumed where it stopped"
    );
    assert_eq!(
        checksum(&victim_run.events),
        expected,
        "the parameters of a run never preempted"
    );
    let t = cluster.get_training(&victim).await;
    assert_eq!((t.restart_count, t.preemption_count, t.attempt), (0, 1, 2));
    assert_eq!(t.priority_class, "low");
    // The urgent one started only once the victim had stopped.
    let detail = cluster.cli_ok(&["train", "get", &victim]).await;
    assert!(detail.contains("preempted 1 time(s)"), "{detail}");
    assert!(detail.contains("low (-100)"), "{detail}");
    let report = cluster.cli_ok(&["train", "report", &victim]).await;
    assert!(report.contains("preempted 1 time(s)"), "{report}");
    assert!(report.contains(&format!("step {at}")), "{report}");
    assert!(report.contains("preempt (urgent)"), "{report}");
    let audit = cluster.cli_ok(&["audit", "list"]).await;
    let row = audit
        .lines()
        .find(|l| l.contains("Preempt") && l.contains(&victim))
        .unwrap_or_else(|| panic!("an audit row of the preemption: {audit}"));
    assert!(row.contains("scheduler:coordinator"), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estimates_appear_and_move_when_the_queue_changes() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.coordinator_args = vec!["--estimate-interval".into(), "1s".into()];
    let cluster = Cluster::start(options).await;
    let long = SaeJob {
        log_every: 20,
        ..SaeJob::with_steps(1_000_000)
    };
    let running = cluster.create(create_request(&long, 2, true)).await;
    cluster
        .wait_state(&running, State::Running, JOB_TIMEOUT)
        .await;
    let waiting = cluster
        .create(create_request(&SaeJob::small(), 2, true))
        .await;
    // Its start is the running one's end, from the running one's pace.
    let (start, end) = eventually("both estimates", Duration::from_secs(60), || async {
        let w = cluster.get_training(&waiting).await;
        let r = cluster.get_training(&running).await;
        match (&w.estimated_start_time, &r.estimated_end_time) {
            (Some(s), Some(e)) => Ok((s.seconds, e.seconds)),
            _ => Err(format!("{w:?} {r:?}")),
        }
    })
    .await;
    assert!((start - end).abs() <= 5, "start {start}, end {end}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        start > now,
        "a million steps take a while: {start} vs {now}"
    );
    let list = cluster.cli_ok(&["train", "list"]).await;
    assert!(
        list.contains("starts in") && list.contains("ends in"),
        "{list}"
    );

    // A training of higher priority that says how long it runs goes ahead:
    // the waiting one's start moves an hour later, and it is told so.
    let mut ahead = create_request(&SaeJob::small(), 2, true);
    ahead.priority = 50;
    let mut config = ahead.config.take().unwrap();
    config
        .runtime
        .get_or_insert_with(Default::default)
        .expected_duration = Some("1h".into());
    ahead.config = Some(config);
    let ahead = cluster.create(ahead).await;
    // The one ahead starts when the running one ends; the waiting one an
    // hour after that. A stored estimate is rewritten only when it moves by
    // more than 10 % of the time left to it, so each may lag the others'
    // by that much while the running one's pace settles (it moves when the
    // machine is busy).
    eventually("the estimate moved", Duration::from_secs(60), || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let w = cluster.get_training(&waiting).await;
        let a = cluster.get_training(&ahead).await;
        let r = cluster.get_training(&running).await;
        match (
            &w.estimated_start_time,
            &a.estimated_start_time,
            &r.estimated_end_time,
        ) {
            // Each stored estimate lags its forecast by up to 10 % of the
            // time left to it (the running one's pace moves under load).
            (Some(w), Some(a), Some(r))
                if (a.seconds - r.seconds).abs() <= ((r.seconds - now) / 10).max(30)
                    && (w.seconds - a.seconds - 3600).abs()
                        <= ((w.seconds - now) / 10 + (a.seconds - now) / 10).max(30) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    cluster.cancel(&running, "test over").await;
    cluster.cancel(&ahead, "test over").await;
    cluster.cancel(&waiting, "test over").await;
    let watched = watch_to_end(&mut cluster.training().await, &waiting, JOB_TIMEOUT).await;
    let estimates: Vec<i64> = watched
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Estimate(e)) => e.estimated_start_time.as_ref().map(|s| s.seconds),
            _ => None,
        })
        .collect();
    // A first estimate is only stored (GetTraining showed it above); the
    // hour's move is an event.
    assert!(
        estimates.iter().any(|&s| s >= start + 3000),
        "an event for the move from {start}: {estimates:?}"
    );
}

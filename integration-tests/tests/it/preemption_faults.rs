//! Preemption when things go wrong, with real program ranks
//! (examples/programs/steps): a program that ignores its notice is killed
//! at the end of its grace and resumes from its last checkpoint; a notice
//! that arrives while a checkpoint is being written waits for it; the
//! leader killed (kill -9) in the middle of a preemption on PostgreSQL,
//! and a victim whose agent dies during its grace: each victim ends back
//! in the queue exactly once, with no restart spent.

use cohort_integration_tests::program::{program_options, steps_program};
use cohort_integration_tests::watch::{watch_to_end, watch_until};
use cohort_integration_tests::{Backend, Cluster};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// The preempted events of a training's history.
fn preemptions(events: &[v1::TrainingEvent]) -> Vec<v1::PreemptedEvent> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Preempted(p)) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// The value of program metric `name` in the first progress line of `attempt`.
fn metric(events: &[v1::TrainingEvent], attempt: i32, name: &str) -> Option<f64> {
    events
        .iter()
        .filter(|e| e.attempt == attempt)
        .find_map(|e| match &e.event {
            Some(Event::ProgramProgress(p)) => p.metrics.get(name).copied(),
            _ => None,
        })
}

async fn cluster(backend: Backend, agents: usize, extra: &[&str]) -> Cluster {
    let mut options = program_options(backend, agents, &[]);
    options.gpus_per_agent = 1.max(2 / agents);
    options.coordinator_args = ["--preemption-min-runtime", "1s"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    if backend == Backend::Postgres {
        options.defer_agents = true;
    }
    Cluster::start(options).await
}

/// Waits until `id` reported a checkpoint of at least `step`.
async fn checkpointed(cluster: &Cluster, id: &str, step: i64) {
    let mut client = cluster.training().await;
    watch_until(
        &mut client,
        id,
        0,
        WAIT,
        |e| matches!(&e.event, Some(Event::Checkpoint(c)) if c.step >= step),
    )
    .await
    .expect("WatchTraining");
}

/// Waits until attempt `attempt` of `id` reported progress.
async fn attempt_progressed(cluster: &Cluster, id: &str, attempt: i32) {
    let mut client = cluster.training().await;
    watch_until(&mut client, id, 0, WAIT, |e| {
        e.attempt == attempt && matches!(&e.event, Some(Event::ProgramProgress(_)))
    })
    .await
    .expect("WatchTraining");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_ignores_its_notice_is_killed_at_the_grace_and_resumes_from_its_checkpoint()
{
    let cluster = cluster(Backend::Sqlite, 1, &[]).await;
    let victim = cluster
        .create(steps_program(
            100_000,
            0.05,
            20,
            &["--ignore-notice"],
            2,
            "low",
            Some("3s"),
        ))
        .await;
    checkpointed(&cluster, &victim, 40).await;
    let urgent = cluster
        .create(steps_program(10, 0.05, 5, &[], 2, "urgent", None))
        .await;
    cluster.wait_state(&urgent, State::Succeeded, WAIT).await;
    let back = eventually("the victim placed again", WAIT, || async {
        let t = cluster.get_training(&victim).await;
        (t.attempt == 2 && t.state() == State::Running)
            .then_some(t.clone())
            .ok_or(format!(
                "{:?} attempt {}: {}",
                t.state(),
                t.attempt,
                t.state_reason
            ))
    })
    .await;
    assert_eq!((back.restart_count, back.preemption_count), (0, 1));
    attempt_progressed(&cluster, &victim, 2).await;
    cluster.cancel(&victim, "test over").await;
    let events = watch_to_end(&mut cluster.training().await, &victim, WAIT)
        .await
        .events;
    let p = preemptions(&events);
    assert_eq!(p.len(), 1, "{p:?}");
    // Whatever it wrote last (its periodic checkpoints go on in the grace).
    let at = p[0].resume_step.expect("its last periodic checkpoint");
    assert!(at >= 40 && at % 20 == 0, "{at}");
    assert_eq!(metric(&events, 2, "resumed_from"), Some(at as f64));
    // Killed at the end of its 3 s grace, not stopped by its notice.
    let requeued = events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::StateChange(c))
                if c.to() == State::Queued && c.from() == State::Running =>
            {
                e.time.as_ref().map(|t| t.seconds)
            }
            _ => None,
        })
        .expect("back in the queue");
    let audit = cluster.cli_ok(&["-o", "json", "audit", "list"]).await;
    let audit: serde_json::Value = serde_json::from_str(&audit).expect("audit JSON");
    let noticed = audit["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["method"] == "scheduler/Preempt" && e["target"] == victim.as_str())
        .and_then(|e| e["time"].as_str())
        .and_then(chrono_seconds)
        .expect("the notice, audited");
    assert!(
        requeued - noticed >= 2,
        "requeued {requeued}, noticed {noticed}"
    );
    let log = cluster.logs(400);
    assert!(
        log.contains("rank still there after its notice's grace: SIGKILL"),
        "the agent killed it"
    );
}

/// Seconds since the epoch of an RFC 3339 time (`2026-11-27T22:53:31Z`,
/// with or without fractions).
fn chrono_seconds(text: &str) -> Option<i64> {
    let (date, time) = text.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.split('.').next()?.parse::<i64>().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_during_a_checkpoint_write_waits_for_the_complete_checkpoint() {
    let cluster = cluster(Backend::Sqlite, 1, &[]).await;
    // Every 10 steps a checkpoint that takes 5 s to write.
    let victim = cluster
        .create(steps_program(
            100_000,
            0.05,
            10,
            &["--checkpoint-seconds", "5"],
            2,
            "low",
            Some("30s"),
        ))
        .await;
    let mut client = cluster.training().await;
    watch_until(&mut client, &victim, 0, WAIT, |e| {
        matches!(&e.event, Some(Event::ProgramProgress(p)) if p.metrics.contains_key("writing"))
    })
    .await
    .expect("WatchTraining");
    // The notice comes while that checkpoint is written.
    let urgent = cluster
        .create(steps_program(10, 0.05, 5, &[], 2, "urgent", None))
        .await;
    cluster.wait_state(&urgent, State::Succeeded, WAIT).await;
    eventually("the victim placed again", WAIT, || async {
        let t = cluster.get_training(&victim).await;
        (t.attempt == 2 && t.state() == State::Running)
            .then_some(())
            .ok_or(format!("{:?} attempt {}", t.state(), t.attempt))
    })
    .await;
    attempt_progressed(&cluster, &victim, 2).await;
    cluster.cancel(&victim, "test over").await;
    let events = watch_to_end(&mut client, &victim, WAIT).await.events;
    assert_eq!(
        metric(&events, 1, "noticed_mid_write"),
        Some(1.0),
        "the notice arrived while the checkpoint was written"
    );
    let p = preemptions(&events);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].checkpointed, "{p:?}");
    let at = p[0].resume_step.unwrap();
    assert_eq!(at % 10, 0, "the checkpoint being written, complete: {at}");
    assert_eq!(metric(&events, 2, "resumed_from"), Some(at as f64));
    let t = cluster.get_training(&victim).await;
    assert_eq!((t.restart_count, t.preemption_count), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_in_the_middle_of_a_preemption_requeues_its_victim_once() {
    let mut cluster = cluster(Backend::Postgres, 1, &[]).await;
    cluster.start_peer().await;
    cluster.start_agents().await;
    // It takes 6 s to stop once it checkpointed on its notice.
    let victim = cluster
        .create(steps_program(
            100_000,
            0.05,
            20,
            &["--stop-seconds", "6"],
            2,
            "low",
            Some("60s"),
        ))
        .await;
    checkpointed(&cluster, &victim, 20).await;
    let urgent = cluster
        .create(steps_program(10, 0.05, 5, &[], 2, "urgent", None))
        .await;
    eventually("the notice given", WAIT, || async {
        let t = cluster.get_training(&victim).await;
        t.state_reason
            .starts_with("PREEMPTING")
            .then_some(())
            .ok_or(t.state_reason)
    })
    .await;
    cluster.kill_coordinator_at(0);
    let leader = cluster.wait_leader(Some(0), Duration::from_secs(30)).await;
    let url = cluster.coordinator_url(leader);
    eventually("the urgent training done", WAIT, || async {
        let t = cluster.get_training_at(&url, &urgent).await;
        (t.state() == State::Succeeded).then_some(()).ok_or(format!(
            "{:?}: {}",
            t.state(),
            t.state_reason
        ))
    })
    .await;
    let t = eventually("the victim back", WAIT, || async {
        let t = cluster.get_training_at(&url, &victim).await;
        (t.attempt == 2)
            .then_some(t.clone())
            .ok_or(format!("{:?}", t.state()))
    })
    .await;
    assert_eq!((t.preemption_count, t.restart_count), (1, 0), "{t:?}");
    let mut client = v1::training_service_client::TrainingServiceClient::new(
        cohort_proto::channel(&url).await.unwrap(),
    );
    client
        .cancel_training(v1::CancelTrainingRequest {
            id: victim.clone(),
            reason: "test over".into(),
        })
        .await
        .unwrap();
    let watched = watch_to_end(&mut client, &victim, WAIT).await;
    let requeued = watched
        .state_changes()
        .into_iter()
        .filter(|c| *c == (State::Running, State::Queued))
        .count();
    assert_eq!(requeued, 1, "{:?}", watched.state_changes());
    assert_eq!(preemptions(&watched.events).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_victim_whose_agent_dies_in_its_grace_goes_back_to_the_queue_once() {
    let cluster = cluster(Backend::Sqlite, 2, &["--agent-timeout", "3s"]).await;
    // The victim takes a minute to stop; an urgent training holds the
    // other agent's GPU (it cannot be preempted by its peer).
    let victim = cluster
        .create(steps_program(
            100_000,
            0.05,
            20,
            &["--stop-seconds", "60"],
            1,
            "low",
            Some("120s"),
        ))
        .await;
    checkpointed(&cluster, &victim, 20).await;
    let holder = cluster
        .create(steps_program(100_000, 0.05, 20, &[], 1, "urgent", None))
        .await;
    cluster.wait_state(&holder, State::Running, WAIT).await;
    let urgent = cluster
        .create(steps_program(10, 0.05, 5, &[], 1, "urgent", None))
        .await;
    let stopping = eventually("the notice given", WAIT, || async {
        let t = cluster.get_training(&victim).await;
        t.state_reason
            .starts_with("PREEMPTING")
            .then_some(t.clone())
            .ok_or(t.state_reason)
    })
    .await;
    let agent = cluster.agent_name_of(&stopping.ranks[0].agent_id).await;
    cohort_integration_tests::faults::kill_agent(&cluster, &agent);
    let back = cluster.wait_state(&victim, State::Queued, WAIT).await;
    assert_eq!(
        (back.preemption_count, back.restart_count),
        (1, 0),
        "{back:?}"
    );
    assert!(
        back.state_reason.starts_with("PREEMPTED: by"),
        "{}",
        back.state_reason
    );
    let urgent_now = cluster.get_training(&urgent).await;
    assert_ne!(urgent_now.state(), State::Failed);
    for id in [&victim, &holder, &urgent] {
        cluster.cancel(id, "test over").await;
    }
    let watched = watch_to_end(&mut cluster.training().await, &victim, WAIT).await;
    let p = preemptions(&watched.events);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].by, urgent);
}

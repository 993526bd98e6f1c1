//! Coordinators sharing one PostgreSQL database: one leads through the
//! lease, the others stand by (reads served, changes refused with the
//! leader's address), and when the leader is killed (SIGKILL) or frozen
//! (SIGSTOP) a standby takes over under a running training, which goes on
//! in the same attempt with the same rank processes. A frozen leader that
//! thaws is deposed: it exits, and nothing it tries is written.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::{watch_request, watch_until};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::error::{leader_of, reason_of, Reason};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// The bound on a takeover with the default lease (5 s, renewed every 1 s).
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);
const JOB_TIMEOUT: Duration = Duration::from_secs(180);
/// The exit status of a deposed coordinator (services/coordinator/src/main.rs).
const EXIT_DEPOSED: i32 = 75;

async fn client(url: &str) -> TrainingServiceClient<Channel> {
    TrainingServiceClient::new(
        cohort_proto::channel(url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}")),
    )
}

/// A cluster of `coordinators` on one fresh PostgreSQL schema, coordinator
/// 0 leading, and one agent of 2 GPUs told every coordinator's address.
async fn ha_cluster(coordinators: usize) -> Cluster {
    let mut options = ClusterOptions::new(Backend::Postgres, 1);
    options.defer_agents = true;
    let mut cluster = Cluster::start(options).await;
    for _ in 1..coordinators {
        cluster.start_peer().await;
    }
    cluster.start_agents().await;
    assert_eq!(
        cluster.leaders().await,
        vec![0],
        "the first coordinator leads"
    );
    cluster
}

/// Starts a 2-rank training of `steps` on the leader at `url` and waits
/// until it reports progress; returns its id and the last event sequence.
async fn running_training(cluster: &Cluster, url: &str, steps: i64) -> (String, u64, i64) {
    let mut leader = client(url).await;
    let id = leader
        .create_training(create_request(&SaeJob::with_steps(steps), 2, true))
        .await
        .expect("CreateTraining on the leader")
        .into_inner()
        .id;
    let seen = watch_until(
        &mut leader,
        &id,
        0,
        Duration::from_secs(90),
        |e| matches!(&e.event, Some(Event::Progress(p)) if p.step > 1),
    )
    .await
    .expect("WatchTraining");
    let step = seen.progress().last().map(|p| p.step).unwrap_or(0);
    let training = cluster.get_training(&id).await;
    assert_eq!(training.state(), State::Running, "{training:?}");
    (id, seen.last_sequence(), step)
}

/// Watches on `url` from `after` until progress passes `step`; returns the
/// step reached.
async fn progress_passes(url: &str, id: &str, after: u64, step: i64) -> i64 {
    let mut c = client(url).await;
    let seen = watch_until(
        &mut c,
        id,
        after,
        Duration::from_secs(60),
        |e| matches!(&e.event, Some(Event::Progress(p)) if p.step > step),
    )
    .await
    .expect("WatchTraining on the new leader");
    seen.progress().last().map(|p| p.step).unwrap_or(0)
}

/// Watches the whole history on `url` to its end; the training must have
/// SUCCEEDED in its first attempt, every logged step reported once.
async fn succeeded_in_one_attempt(cluster: &Cluster, url: &str, id: &str, steps: i64) {
    let mut c = client(url).await;
    let request = v1::WatchTrainingRequest {
        id: id.to_string(),
        after_sequence: 0,
        include_rank_stats: false,
        max_points: 0,
    };
    let history = watch_request(&mut c, request, JOB_TIMEOUT, |_| false)
        .await
        .expect("WatchTraining to the end");
    if history.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!(
            "the training did not succeed: {:#?}",
            history.state_changes()
        ));
    }
    assert_eq!(history.start_steps(), vec![0], "one attempt, started once");
    let training = cluster.get_training_at(url, id).await;
    assert_eq!(training.attempt, 1, "{training:?}");
    assert_eq!(training.restart_count, 0, "{training:?}");
    // Progress reported while no coordinator led was buffered, not lost:
    // every logged step is in the history exactly once.
    let job = SaeJob::with_steps(steps);
    let mut logged: Vec<i64> = history.progress().iter().map(|p| p.step).collect();
    logged.dedup();
    let expected: Vec<i64> = (1..=steps).filter(|s| s % job.log_every == 0).collect();
    let missing: Vec<&i64> = expected.iter().filter(|s| !logged.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "progress lost for steps {missing:?} (got {logged:?})"
    );
    // No transition was written twice (a deposed leader writes nothing).
    let transitions = cluster.db().transitions(id);
    let mut pairs: Vec<(Option<String>, String)> = transitions
        .iter()
        .map(|t| (t.from_state.clone(), t.to_state.clone()))
        .collect();
    let all = pairs.len();
    pairs.sort();
    pairs.dedup();
    assert_eq!(
        pairs.len(),
        all,
        "a transition written twice: {transitions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standbys_serve_reads_and_forward_or_point_changes_to_the_leader() {
    let mut cluster = ha_cluster(2).await;
    // A third coordinator that points changes at the leader instead.
    let strict = cluster.start_peer_with(&["--no-forward"]).await;
    let (leader, standby) = (cluster.coordinator_url(0), cluster.coordinator_url(1));
    let pointer = cluster.coordinator_url(strict);
    for i in [1, strict] {
        assert_eq!(
            cluster.health_at(i, "cohort.v1.TrainingService").await,
            Ok(ServingStatus::NotServing)
        );
        assert_eq!(cluster.health_at(i, "").await, Ok(ServingStatus::Serving));
    }

    // A change sent to a standby is forwarded to the leader: one training,
    // whichever coordinator is asked with the same request_id.
    let mut request = create_request(&SaeJob::small(), 1, true);
    request.request_id = "via-the-standby".into();
    let forwarded = client(&standby)
        .await
        .create_training(request.clone())
        .await
        .expect("CreateTraining forwarded by the standby")
        .into_inner();
    let direct = client(&leader)
        .await
        .create_training(request)
        .await
        .expect("CreateTraining on the leader")
        .into_inner();
    assert_eq!(forwarded.id, direct.id);
    assert_eq!(cluster.db().training_count(), 1);
    let id = forwarded.id;

    // One that does not forward refuses, names the leader, writes nothing.
    let refused = client(&pointer)
        .await
        .create_training(create_request(&SaeJob::small(), 1, true))
        .await
        .expect_err("a standby creates nothing");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason_of(&refused), Some(Reason::NotLeader));
    assert_eq!(leader_of(&refused).as_deref(), Some(leader.as_str()));
    assert_eq!(cluster.db().training_count(), 1);

    // Reads are served by standbys from the database.
    for url in [&standby, &pointer] {
        assert_eq!(cluster.get_training_at(url, &id).await.id, id);
        let listed = client(url)
            .await
            .list_trainings(v1::ListTrainingsRequest::default())
            .await
            .expect("ListTrainings on a standby")
            .into_inner();
        assert_eq!(listed.trainings.len(), 1);
    }

    // The CLI told only the pointing standby follows it to the leader.
    let cancelled = cluster
        .cli_at(&pointer, &["-o", "json", "train", "cancel", &id])
        .await;
    assert!(
        cancelled.status.success(),
        "cohort train cancel via the standby: {}",
        String::from_utf8_lossy(&cancelled.stderr)
    );
    assert_eq!(cluster.get_training(&id).await.state(), State::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_the_training_goes_on() {
    let mut cluster = ha_cluster(2).await;
    let steps = 10_000;
    let (id, seen, step) = running_training(&cluster, &cluster.coordinator_url(0), steps).await;
    let ranks = cluster.rank_processes();
    assert_eq!(ranks.len(), 2, "{ranks:?}");

    let killed = Instant::now();
    cluster.kill_coordinator_at(0);
    let leader = cluster.wait_leader(Some(0), TAKEOVER_BOUND * 2).await;
    let took = killed.elapsed();
    eprintln!(
        "takeover after SIGKILL of the leader: {} ms",
        took.as_millis()
    );
    assert_eq!(leader, 1);
    assert!(took < TAKEOVER_BOUND, "takeover took {took:?}");

    let url = cluster.coordinator_url(1);
    let reached = progress_passes(&url, &id, seen, step).await;
    eprintln!("progress went on under the new leader: step {step} -> {reached}");
    assert_eq!(cluster.rank_processes(), ranks, "the same rank processes");
    succeeded_in_one_attempt(&cluster, &url, &id, steps).await;
    cluster
        .assert_no_rank_processes(Duration::from_secs(10))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_replaced_then_deposed_when_it_thaws() {
    let mut cluster = ha_cluster(2).await;
    let steps = 10_000;
    let (id, seen, step) = running_training(&cluster, &cluster.coordinator_url(0), steps).await;
    let ranks = cluster.rank_processes();

    let frozen = Instant::now();
    cluster.signal_coordinator(0, Signal::SIGSTOP);
    let leader = cluster.wait_leader(Some(0), TAKEOVER_BOUND * 2).await;
    let took = frozen.elapsed();
    eprintln!(
        "takeover after SIGSTOP of the leader: {} ms",
        took.as_millis()
    );
    assert_eq!(leader, 1);
    assert!(took < TAKEOVER_BOUND, "takeover took {took:?}");
    let url = cluster.coordinator_url(1);
    let reached = progress_passes(&url, &id, seen, step).await;

    // Thawed, the old leader finds its lease taken and stops at once.
    let thawed = Instant::now();
    cluster.signal_coordinator(0, Signal::SIGCONT);
    let status = cluster
        .wait_coordinator_exit(0, Duration::from_secs(5))
        .unwrap_or_else(|| cluster.fail("the deposed leader still runs 5 s after thawing"));
    eprintln!(
        "the thawed leader exited ({status}) after {} ms",
        thawed.elapsed().as_millis()
    );
    assert_eq!(status.code(), Some(EXIT_DEPOSED), "{status}");
    let log = std::fs::read_to_string(cluster.root().join("coordinator.log")).unwrap_or_default();
    assert!(log.contains("deposed"), "{log}");

    // One request_id never yields two trainings, whichever coordinator is asked.
    let mut request = create_request(&SaeJob::small(), 1, true);
    request.request_id = "failover-once".into();
    let first = client(&url).await.create_training(request.clone()).await;
    let again = client(&url).await.create_training(request).await;
    let (first, again) = (
        first.expect("create").into_inner(),
        again.expect("again").into_inner(),
    );
    assert_eq!(first.id, again.id);

    let after = progress_passes(&url, &id, 0, reached).await;
    assert!(after > reached);
    assert_eq!(cluster.rank_processes(), ranks, "the same rank processes");
    succeeded_in_one_attempt(&cluster, &url, &id, steps).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_coordinators_one_dies_the_rest_find_the_new_leader() {
    let mut cluster = ha_cluster(3).await;
    let standby = cluster.coordinator_url(2);
    // A coordinator list whose first entry is dead, then a standby: the CLI
    // skips the dead one and follows the standby to the leader.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let config = SaeJob::with_steps(600).write(cluster.root(), "job.toml");
    let list = format!("{dead},{standby}");
    let submitted = cluster
        .cli_at(
            &list,
            &[
                "-o",
                "json",
                "train",
                "submit",
                "--config",
                config.to_str().unwrap(),
                "--gpus",
                "2",
            ],
        )
        .await;
    assert!(
        submitted.status.success(),
        "submit via {list}: {}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let id: String = serde_json::from_slice::<serde_json::Value>(
        submitted
            .stdout
            .split(|b| *b == b'\n')
            .next()
            .unwrap_or_default(),
    )
    .ok()
    .and_then(|j| j["id"].as_str().map(String::from))
    .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&submitted.stdout)));
    cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    // A CLI told coordinator 0 alone learns the member set from its answers.
    let only_first = cluster.coordinator_url(0);
    // (The set grows to all three within a few lease renewals of start-up.)
    eventually(
        "the CLI to keep all three coordinators",
        Duration::from_secs(20),
        || async {
            let learned = cluster.cli_at(&only_first, &["train", "list"]).await;
            if !learned.status.success() {
                return Err(format!("{learned:?}"));
            }
            let kept: Vec<String> = std::fs::read_dir(cluster.root().join("cli-cache"))
                .map(|d| {
                    d.flatten()
                        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
                        .collect()
                })
                .unwrap_or_default();
            kept.iter()
                .any(|k| k.lines().count() == 3)
                .then_some(())
                .ok_or(format!("kept: {kept:?}"))
        },
    )
    .await;

    cluster.kill_coordinator_at(0);
    let leader = cluster.wait_leader(Some(0), TAKEOVER_BOUND * 2).await;
    assert!([1, 2].contains(&leader), "{leader}");
    let url = cluster.coordinator_url(leader);
    // The agent, told every coordinator, registers with the new leader.
    eventually(
        "the agent to join the new leader",
        Duration::from_secs(30),
        || async {
            let live = cluster.live_gpus_at(leader).await?;
            (live == 2).then_some(()).ok_or(format!("{live} GPUs live"))
        },
    )
    .await;
    // The CLI, still told the standby, reads from it and changes through the leader.
    let listed = cluster
        .cli_at(&list, &["-o", "json", "train", "list"])
        .await;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&id));
    // Told only the dead coordinator 0, the CLI reaches the others it learned.
    let through_members = cluster
        .cli_at(&only_first, &["-o", "json", "train", "get", &id])
        .await;
    assert!(
        through_members.status.success(),
        "a CLI told only {only_first} (dead): {}",
        String::from_utf8_lossy(&through_members.stderr)
    );
    assert!(String::from_utf8_lossy(&through_members.stdout).contains(&id));
    succeeded_in_one_attempt(&cluster, &url, &id, 600).await;
}

/// The agent was told coordinators 0 and 1; coordinator 2 starts after it.
/// Coordinator 1 dies and the leader (0) freezes: only 2 can lead, and the
/// agent finds it through the member set the coordinators publish. The
/// training goes on in its first attempt, with no restart, and the new
/// leader stores progress within 8 s of the freeze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_started_after_the_agents_is_found_when_the_others_are_gone() {
    let mut cluster = ha_cluster(2).await;
    let late = cluster.start_peer().await;
    assert_eq!(late, 2);
    let steps = 10_000;
    let (id, seen, _) = running_training(&cluster, &cluster.coordinator_url(0), steps).await;
    let ranks = cluster.rank_processes();
    // The agent learns the member set with its next Members message.
    let kept = cluster.agent_work_dir(0).join("coordinators");
    let late_url = cluster.coordinator_url(2);
    eventually(
        "the agent to keep the member set",
        Duration::from_secs(20),
        || async {
            let text = tokio::fs::read_to_string(&kept).await.unwrap_or_default();
            text.lines()
                .any(|l| l == late_url)
                .then_some(())
                .ok_or(format!("kept: {text:?}"))
        },
    )
    .await;

    cluster.kill_coordinator_at(1);
    let frozen = Instant::now();
    cluster.signal_coordinator(0, Signal::SIGSTOP);
    // What the frozen leader had stored, read from the database by 2.
    let step = cluster
        .get_training_at(&late_url, &id)
        .await
        .latest_progress
        .map_or(0, |p| p.step);
    let leader = cluster.wait_leader(Some(0), TAKEOVER_BOUND * 2).await;
    eprintln!(
        "coordinator 2 leads {} ms after the freeze",
        frozen.elapsed().as_millis()
    );
    assert_eq!(leader, 2);
    let reached = progress_passes(&late_url, &id, seen, step).await;
    let stored = frozen.elapsed();
    eprintln!(
        "progress stored by the new leader {} ms after the freeze (step {step} -> {reached})",
        stored.as_millis()
    );
    assert!(
        stored < Duration::from_secs(8),
        "first progress under the new leader after {stored:?}"
    );
    assert_eq!(cluster.rank_processes(), ranks, "the same rank processes");
    cluster.signal_coordinator(0, Signal::SIGCONT);
    succeeded_in_one_attempt(&cluster, &late_url, &id, steps).await;
}

//! The coordinator is killed with SIGKILL mid-training and started again on
//! the same database and port: the training is still there, the agents
//! reconnect, and watching resumes from the last event seen to SUCCEEDED.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::{watch_everything, watch_request, watch_until};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use std::time::Duration;
use tokio_stream::StreamExt;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

async fn coordinator_killed_mid_job(backend: Backend) {
    let mut cluster = Cluster::start(ClusterOptions::new(backend, 2)).await;
    let mut client = cluster.training().await;
    // ~800 steps of 4 ranks: long enough to outlive the coordinator's restart.
    let training = client
        .create_training(create_request(&SaeJob::with_steps(800), 4, true))
        .await
        .expect("CreateTraining")
        .into_inner();
    let id = training.id;

    let before = watch_until(
        &mut client,
        &id,
        0,
        Duration::from_secs(90),
        |e| matches!(&e.event, Some(Event::Progress(p)) if p.step > 1),
    )
    .await
    .expect("WatchTraining");
    assert!(!before.ended, "{:?}", before.events);
    let seen = before.last_sequence();
    // Progress means the group formed: the training is RUNNING, in the database too.
    let running = cluster.get_training(&id).await;
    if running.state() != State::Running {
        cluster.fail(&format!(
            "progress streams but the training is {:?} ({}); transitions: {:?}",
            running.state(),
            running.state_reason,
            cluster.db().transitions(&id)
        ));
    }

    // A watcher that is connected when the coordinator dies sees the stream break.
    let mut open = client
        .watch_training(v1::WatchTrainingRequest {
            id: id.clone(),
            after_sequence: seen,
            include_rank_stats: false,
            max_points: 0,
        })
        .await
        .expect("WatchTraining")
        .into_inner();

    cluster.kill_coordinator();
    assert!(
        !cluster.rank_processes().is_empty(),
        "the ranks outlive the coordinator"
    );
    let broken = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match open.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return Some(status),
                None => return None,
            }
        }
    })
    .await
    .expect("the open stream notices the dead coordinator");
    assert!(
        broken.is_some(),
        "the stream ended cleanly, not with an error"
    );

    cluster.restart_coordinator().await;

    // The training survived in the database, still running.
    let after_restart = cluster.get_training(&id).await;
    if ![State::Running, State::Succeeded].contains(&after_restart.state()) {
        cluster.fail(&format!(
            "after the restart the training is {:?} ({}); transitions: {:?}",
            after_restart.state(),
            after_restart.state_reason,
            cluster.db().transitions(&id)
        ));
    }

    // Both agents come back.
    eventually(
        "both agents to reconnect",
        Duration::from_secs(30),
        || async {
            let agents = cluster
                .agents()
                .await
                .list_agents(v1::ListAgentsRequest::default())
                .await
                .map_err(|s| format!("{s:?}"))?
                .into_inner()
                .agents;
            let connected = agents
                .iter()
                .filter(|a| a.state() == v1::AgentState::Connected)
                .count();
            if connected == 2 {
                Ok(())
            } else {
                Err(format!("{agents:?}"))
            }
        },
    )
    .await;

    // Watching resumes right after the last event seen, and reaches SUCCEEDED.
    let mut client = cluster.training().await;
    // (Per-rank events included: the next stored event is exactly `seen + 1`.)
    let request = v1::WatchTrainingRequest {
        id: id.clone(),
        after_sequence: seen,
        include_rank_stats: true,
        max_points: 0,
    };
    let resumed = watch_request(&mut client, request, JOB_TIMEOUT, |_| false)
        .await
        .expect("WatchTraining after the restart");
    if resumed.final_state() != Some(State::Succeeded) {
        cluster.fail(&format!("after the restart: {:#?}", resumed.events));
    }
    assert_eq!(
        resumed.events.first().map(|e| e.sequence),
        Some(seen + 1),
        "the stream resumes after sequence {seen}"
    );

    // The whole history is one gapless sequence.
    let history = watch_everything(&mut client, &id, Duration::from_secs(30)).await;
    let sequences: Vec<u64> = history.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    let training = cluster.get_training(&id).await;
    assert_eq!(training.state(), State::Succeeded);
    assert_eq!(
        training.restart_count, 0,
        "a coordinator restart costs the training no restart: {training:?}"
    );
    let progress = history.progress();
    assert_eq!(progress.last().map(|p| p.step), Some(800));
    cluster
        .assert_no_rank_processes(Duration::from_secs(10))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_mid_job_sqlite() {
    coordinator_killed_mid_job(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_mid_job_postgres() {
    coordinator_killed_mid_job(Backend::Postgres).await;
}

/// A second coordinator on the same SQLite file refuses to start, naming
/// the first one's pid; once the first is gone, one starts on it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_coordinator_per_sqlite_database() {
    let mut cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 0)).await;
    let data_dir = cluster.root().join("coordinator");
    let second = tokio::process::Command::new(&cluster.bins.coordinator)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env_remove("COHORT_DATABASE_URL")
        .env_remove("COHORT_AUTH")
        .output()
        .await
        .expect("running a second coordinator");
    assert!(
        !second.status.success(),
        "a second coordinator started on the same SQLite file"
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("another coordinator (pid ") && stderr.contains("--database-url"),
        "{stderr}"
    );
    // The lock goes with the process, even a SIGKILLed one.
    cluster.restart_coordinator().await;
    cluster
        .health("")
        .await
        .expect("the restarted coordinator serves");
}

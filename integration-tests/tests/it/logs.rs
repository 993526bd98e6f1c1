//! WatchLogs and `cohort logs`: every rank's lines while it trains, the
//! last lines afterwards, and a clear answer once the agent that ran them
//! is gone.

use cohort_integration_tests::faults::{kill_agent_and_ranks, rank_pid, signal};
use cohort_integration_tests::job::create_request;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_every_rank_live_then_keep_their_tail() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let mut client = cluster.training().await;
    // Long enough (a few seconds here) that the follow stream, set up while
    // the training starts, has its live lines well before the end even on
    // a loaded machine (at 600 steps it once ended 50 ms before them).
    const STEPS: i64 = 3000;
    let job = SaeJob::with_steps(STEPS);
    let id = client
        .create_training(create_request(&job, 2, true))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;

    // Following from the start: both ranks' lines arrive while it trains.
    let (_follower, mut lines) = follow(&cluster, &id, &[]);
    let mut seen: Vec<String> = Vec::new();
    let live = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let line = lines.next_line().await.expect("read").expect("a line");
            seen.push(line);
            let stepped = |r: i32| {
                let prefix = format!("[rank {r}] cohort-rank: rank {r}: step ");
                seen.iter().any(|l| l.starts_with(&prefix))
            };
            if stepped(0) && stepped(1) {
                return;
            }
        }
    })
    .await;
    assert!(live.is_ok(), "no step lines of both ranks: {seen:?}");
    // When both ranks' step lines had come (compared with the training's
    // end below, not with its state now: on a loaded machine it may have
    // finished since).
    let live_at = std::time::SystemTime::now();
    // The follower ends by itself once the attempt is over.
    let rest = tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            seen.push(line);
        }
    })
    .await;
    assert!(rest.is_ok(), "the follower did not end with the attempt");
    let done = cluster.get_training(&id).await;
    assert_eq!(done.state(), State::Succeeded);
    let end = done.end_time.expect("an end time");
    let end = std::time::UNIX_EPOCH + Duration::new(end.seconds as u64, end.nanos.max(0) as u32);
    assert!(
        live_at <= end,
        "the lines came while it trained: both ranks' step lines at {live_at:?}, the end at {end:?}"
    );
    for r in 0..2 {
        let finished = format!("[rank {r}] cohort-rank: rank {r} finished step {STEPS} in ");
        assert!(
            seen.iter().any(|l| l.starts_with(&finished)),
            "{finished:?} not in {seen:?}"
        );
    }
    // No line twice, none out of order within a rank.
    for r in 0..2 {
        let steps: Vec<i64> = seen
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("[rank {r}] cohort-rank: rank {r}: step ")))
            .map(|rest| rest.split('/').next().unwrap().parse().unwrap())
            .collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "rank {r}: {steps:?}");
    }

    // Afterwards: the last lines of one rank.
    let out = cluster
        .cli_ok(&["logs", &id, "--rank", "1", "--tail", "2"])
        .await;
    let tail: Vec<&str> = out.lines().collect();
    assert_eq!(tail.len(), 2, "{out}");
    assert!(tail.iter().all(|l| l.starts_with("[rank 1] ")), "{out}");
    assert!(
        tail[1].starts_with(&format!(
            "[rank 1] cohort-rank: rank 1 finished step {STEPS} in "
        )),
        "{out}"
    );

    // Bad requests change nothing and name their field.
    let bad = client
        .watch_logs(v1::WatchLogsRequest {
            training_id: id.clone(),
            attempt: Some(2),
            ..Default::default()
        })
        .await
        .expect_err("there is no attempt 2");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(cohort_proto::error::bad_fields(&bad), ["attempt"]);
    let bad = client
        .watch_logs(v1::WatchLogsRequest {
            training_id: id.clone(),
            ranks: vec![5],
            ..Default::default()
        })
        .await
        .expect_err("there is no rank 5");
    assert_eq!(cohort_proto::error::bad_fields(&bad), ["ranks"]);

    // The agent that ran them is gone: its name, and no lines made up.
    let agent = cluster.agent_name(0);
    kill_agent_and_ranks(&cluster, &agent);
    eventually("the agent to be gone", Duration::from_secs(30), || async {
        let gone = cluster
            .list_gpus()
            .await
            .iter()
            .all(|g| g.availability() == v1::GpuAvailability::Offline);
        if gone {
            Ok(())
        } else {
            Err("still connected".to_string())
        }
    })
    .await;
    let out = cluster.cli(&["logs", &id]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&agent) && err.contains("not connected"),
        "{err}"
    );
}

/// Spawns `cohort logs ID --follow <extra>` and returns its stdout, line by line.
fn follow(
    cluster: &Cluster,
    id: &str,
    extra: &[&str],
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = tokio::process::Command::new(&cluster.bins.cli)
        .args(["--coordinator", &cluster.url(), "logs", id, "--follow"])
        .args(extra)
        .env_remove("COHORT_COORDINATOR")
        .env("COHORT_CACHE_DIR", cluster.root().join("cli-cache"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start cohort logs --follow");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// A rank SIGKILLed mid-run: the follower says the next attempt began and
/// goes on with its ranks' lines, to the end of the training.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_goes_on_with_the_attempt_after_a_restart() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let mut client = cluster.training().await;
    let job = SaeJob::with_steps(2000);
    let id = client
        .create_training(create_request(&job, 2, true))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    let (_child, mut lines) = follow(&cluster, &id, &["--tail", "1"]);
    let mut seen: Vec<String> = Vec::new();
    let first = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            let step = line.contains("cohort-rank: rank 1: step ");
            seen.push(line);
            if step {
                return;
            }
        }
    })
    .await;
    assert!(first.is_ok(), "no step line of rank 1: {seen:?}");
    let victim = rank_pid(&cluster, &id, 1, 1).expect("rank 1 of attempt 1 runs");
    signal(victim, Signal::SIGKILL);
    let rest = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(line) = lines.next_line().await.expect("read") {
            seen.push(line);
        }
    })
    .await;
    assert!(rest.is_ok(), "the follower did not end with the training");
    let done = cluster.get_training(&id).await;
    assert_eq!(
        (done.state(), done.attempt),
        (State::Succeeded, 2),
        "{done:?}"
    );
    let began = seen
        .iter()
        .position(|l| l.ends_with("[cohort] attempt 2 began"))
        .unwrap_or_else(|| panic!("no note of attempt 2: {seen:?}"));
    for r in 0..2 {
        let finished = format!("[rank {r}] cohort-rank: rank {r} finished step 2000 in ");
        let at = seen
            .iter()
            .position(|l| l.starts_with(&finished))
            .unwrap_or_else(|| panic!("{finished:?} not in {seen:?}"));
        assert!(at > began, "rank {r} finished after the restart");
    }
}

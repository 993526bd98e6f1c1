//! Benchmark (not a test): coordinator failover under a running training.
//!
//! Three real coordinators on one fresh PostgreSQL schema, one agent with
//! two simulated GPUs running a 2-rank gloo training that reports progress
//! every few steps. Each round takes the current leader down — SIGKILL or
//! SIGSTOP, alternating — and measures, from that instant, when another
//! coordinator reports leading and when the first progress line *stored
//! after the failure* can be read (GetTraining on a surviving coordinator
//! shows a step past the one stored before it). The fallen coordinator is
//! then brought back (a frozen one is thawed, exits as deposed, and starts
//! again as a standby), so every round has three. At the end the training
//! must still be in its first attempt with no restart.
//!
//! ```text
//! source scripts/env.sh
//! cargo build --workspace --bins
//! target/debug/cohort-bench-failover --rounds 20
//! ```

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use tonic_health::pb::health_check_response::ServingStatus;

const COORDINATORS: usize = 3;
/// How long one round may take before it counts as a failure.
const ROUND_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Kill,
    Freeze,
}

struct Round {
    fault: Fault,
    led: Duration,
    stored: Duration,
}

/// The step stored for `id`, read from coordinator `url` (a standby reads
/// the database); `None` when it does not answer within a second.
async fn stored_step(url: &str, id: &str) -> Option<i64> {
    let read = async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .connect()
            .await
            .ok()?;
        let t = TrainingServiceClient::new(channel)
            .get_training(v1::GetTrainingRequest { id: id.to_string() })
            .await
            .ok()?
            .into_inner();
        Some(t.latest_progress.map_or(0, |p| p.step))
    };
    tokio::time::timeout(Duration::from_secs(1), read)
        .await
        .ok()
        .flatten()
}

async fn round(cluster: &mut Cluster, id: &str, fault: Fault) -> Round {
    let leader = cluster.wait_leader(None, Duration::from_secs(30)).await;
    let survivor = (0..COORDINATORS)
        .find(|&i| i != leader)
        .expect("a survivor");
    let watch_url = cluster.coordinator_url(survivor);
    let t0 = Instant::now();
    match fault {
        Fault::Kill => cluster.kill_coordinator_at(leader),
        Fault::Freeze => cluster.signal_coordinator(leader, Signal::SIGSTOP),
    }
    // What the fallen leader had stored, read once it can store no more:
    // any later step was stored by its successor.
    let before = stored_step(&watch_url, id)
        .await
        .expect("read after the fault");
    let (mut led, mut stored) = (None, None);
    while led.is_none() || stored.is_none() {
        assert!(
            t0.elapsed() < ROUND_LIMIT,
            "round ({fault:?} of {leader}) not over after {ROUND_LIMIT:?}: led {led:?}, stored {stored:?}\n{}",
            cluster.logs(40)
        );
        if stored.is_none()
            && stored_step(&watch_url, id)
                .await
                .is_some_and(|s| s > before)
        {
            stored = Some(t0.elapsed());
        }
        if led.is_none() {
            for i in (0..COORDINATORS).filter(|&i| i != leader) {
                if cluster.health_at(i, "cohort.v1.TrainingService").await
                    == Ok(ServingStatus::Serving)
                {
                    led = Some(t0.elapsed());
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
    // Bring the fallen one back as a standby.
    if fault == Fault::Freeze {
        cluster.signal_coordinator(leader, Signal::SIGCONT);
        let exited = cluster.wait_coordinator_exit(leader, Duration::from_secs(10));
        assert!(exited.is_some(), "the thawed leader did not exit");
    }
    cluster.respawn_at(leader);
    let back = tokio::time::Instant::now() + Duration::from_secs(30);
    while cluster.health_at(leader, "").await != Ok(ServingStatus::Serving) {
        assert!(
            tokio::time::Instant::now() < back,
            "coordinator {leader} did not come back"
        );
        tokio::time::sleep(POLL).await;
    }
    Round {
        fault,
        led: led.expect("led"),
        stored: stored.expect("stored"),
    }
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .map(|n| n.parse().expect("--rounds N"))
        .unwrap_or(20);
    let mut options = ClusterOptions::new(Backend::Postgres, 1);
    options.defer_agents = true;
    let mut cluster = Cluster::start(options).await;
    for _ in 1..COORDINATORS {
        cluster.start_peer().await;
    }
    cluster.start_agents().await;
    let job = SaeJob {
        log_every: 20,
        ..SaeJob::with_steps(50_000_000)
    };
    let id = TrainingServiceClient::new(cluster.channel().await)
        .create_training(create_request(&job, 2, true))
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    cluster
        .wait_state(&id, v1::training::State::Running, Duration::from_secs(90))
        .await;
    eprintln!("bench: training {id} running on 2 ranks; {rounds} rounds");
    let mut done = Vec::new();
    for r in 0..rounds {
        let fault = if r % 2 == 0 {
            Fault::Kill
        } else {
            Fault::Freeze
        };
        let result = round(&mut cluster, &id, fault).await;
        println!(
            "round {:>2}  {:<6}  new leader after {:>5.2} s   first progress stored after {:>5.2} s",
            r + 1,
            format!("{fault:?}"),
            result.led.as_secs_f64(),
            result.stored.as_secs_f64()
        );
        done.push(result);
        // Let the restarted coordinator settle as a standby.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let training = cluster
        .get_training_at(
            &cluster.coordinator_url(cluster.wait_leader(None, Duration::from_secs(30)).await),
            &id,
        )
        .await;
    println!();
    for fault in [Fault::Kill, Fault::Freeze] {
        let of: Vec<&Round> = done.iter().filter(|r| r.fault == fault).collect();
        if of.is_empty() {
            continue;
        }
        let led: Vec<f64> = of.iter().map(|r| r.led.as_secs_f64()).collect();
        let stored: Vec<f64> = of.iter().map(|r| r.stored.as_secs_f64()).collect();
        println!(
            "{fault:?} x{}: new leader p50 {:.2} s p99 {:.2} s; first progress stored p50 {:.2} s p99 {:.2} s (max {:.2} s)",
            of.len(),
            percentile(led.clone(), 50.0),
            percentile(led, 99.0),
            percentile(stored.clone(), 50.0),
            percentile(stored.clone(), 99.0),
            stored.iter().cloned().fold(0.0, f64::max),
        );
    }
    println!(
        "training: attempt {}, restarts {}, state {:?}",
        training.attempt,
        training.restart_count,
        training.state()
    );
    assert_eq!(
        (training.attempt, training.restart_count),
        (1, 0),
        "the training restarted"
    );
}

//! Failure handling with real processes (issue 4): placement packs ranks on
//! the fewest hosts; a rank SIGKILLed, a whole agent SIGKILLed, a rank frozen
//! with SIGSTOP each restart the gang from its checkpoint; a spent budget and a
//! user error fail the training; a training cancelled while RESTARTING is not
//! placed again, and one whose coordinator is SIGKILLed while RESTARTING
//! finishes its restart under the next coordinator; nothing is left running
//! afterwards.

use cohort_integration_tests::faults::{is_gone, kill_agent, rank_pid, signal};
use cohort_integration_tests::job::create_request;
use cohort_integration_tests::watch::watch_until;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use cohort_testkit::eventually;
use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const AGENT_TIMEOUT_S: u64 = 4;
const HANG_FLOOR_S: u64 = 30;

/// A cluster whose coordinator detects failures fast (the flags' env
/// fallbacks, set on the coordinator's process only).
async fn cluster(agents: usize) -> Cluster {
    let mut options = ClusterOptions::new(Backend::Sqlite, agents);
    options.env = vec![
        ("COHORT_AGENT_TIMEOUT".into(), format!("{AGENT_TIMEOUT_S}s")),
        ("COHORT_HANG_FLOOR".into(), format!("{HANG_FLOOR_S}s")),
        ("COHORT_STOP_GRACE".into(), "2s".into()),
    ];
    Cluster::start(options).await
}

/// A job long enough to be interrupted: checkpoints every 20 steps.
fn long_job() -> SaeJob {
    SaeJob {
        steps: 480,
        checkpoint_every: 20,
        log_every: 10,
        ..SaeJob::small()
    }
}

/// Waits until the training has written a checkpoint at or after `step`.
async fn wait_checkpoint(cluster: &Cluster, id: &str, step: i64) {
    let mut client = cluster.training().await;
    let watched = watch_until(
        &mut client,
        id,
        0,
        Duration::from_secs(120),
        |e| matches!(&e.event, Some(Event::Checkpoint(c)) if c.step >= step),
    )
    .await
    .expect("WatchTraining");
    assert!(
        !watched.ended,
        "ended before a checkpoint at step {step}: {:?}",
        watched.events
    );
}

/// The causes recorded with each move to RESTARTING.
fn restart_causes(cluster: &Cluster, id: &str) -> Vec<String> {
    cluster
        .db()
        .transitions(id)
        .into_iter()
        .filter(|t| t.to_state == "RESTARTING")
        .map(|t| t.reason)
        .collect()
}

/// The loss of the last progress event of the training.
async fn final_loss(cluster: &Cluster, id: &str) -> f64 {
    let t = cluster.get_training(id).await;
    t.latest_progress.expect("a progress event").loss
}

async fn assert_clean(cluster: &Cluster) {
    cluster
        .assert_no_rank_processes(Duration::from_secs(20))
        .await;
    eventually("every GPU to be free", Duration::from_secs(20), || async {
        let busy: Vec<String> = cluster
            .list_gpus()
            .await
            .into_iter()
            // a killed agent's GPUs are listed OFFLINE; every live one must be free
            .filter(|g| {
                !matches!(
                    g.availability(),
                    v1::GpuAvailability::Available | v1::GpuAvailability::Offline
                )
            })
            .map(|g| {
                format!(
                    "{} held by {}",
                    g.info.unwrap_or_default().uuid,
                    g.training_id
                )
            })
            .collect();
        if busy.is_empty() {
            Ok(())
        } else {
            Err(format!("{busy:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_rank_restarts_from_its_checkpoint_and_matches_an_uninterrupted_run() {
    let cluster = cluster(2).await;
    let job = long_job();
    // The uninterrupted reference.
    let reference = cluster.create(create_request(&job, 4, true)).await;
    cluster
        .wait_state(&reference, State::Succeeded, Duration::from_secs(180))
        .await;
    let reference_loss = final_loss(&cluster, &reference).await;

    let id = cluster.create(create_request(&job, 4, true)).await;
    wait_checkpoint(&cluster, &id, 40).await;
    let victim = rank_pid(&cluster, &id, 1, 1).expect("rank 1 of attempt 1 runs");
    signal(victim, Signal::SIGKILL);

    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert_eq!(done.attempt, 2, "{done:?}");
    assert_eq!(done.restart_count, 1);
    let causes = restart_causes(&cluster, &id);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(
        causes[0].contains("rank 1 was killed by signal 9"),
        "{causes:?}"
    );
    // attempt 2 resumed from a checkpoint instead of starting over
    let mut client = cluster.training().await;
    let history = watch_until(&mut client, &id, 0, Duration::from_secs(30), |_| false)
        .await
        .expect("replay");
    let starts = history.start_steps();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(starts[1] >= 40, "attempt 2 started at step {}", starts[1]);
    // both attempts' ranks are kept, with the killed rank's end
    let ranks = cluster.db().ranks(&id);
    assert_eq!(ranks.iter().filter(|r| r.attempt == 1).count(), 4);
    assert_eq!(
        ranks
            .iter()
            .filter(|r| r.attempt == 2 && r.state == "SUCCEEDED")
            .count(),
        4
    );
    let loss = final_loss(&cluster, &id).await;
    assert!(
        (loss - reference_loss).abs() <= 0.05 * reference_loss,
        "final loss {loss} vs uninterrupted {reference_loss}"
    );
    assert_clean(&cluster).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_packs_onto_two_hosts_and_a_killed_agent_moves_the_gang() {
    let cluster = cluster(3).await;
    let mut request = create_request(&long_job(), 4, true);
    request.gpus = Some(v1::GpuRequest {
        selection: Some(v1::gpu_request::Selection::Auto(v1::gpu_request::Auto {
            max_gpus: 4,
        })),
        queue: Some(true),
        ..Default::default()
    });
    let id = cluster.create(request).await;
    let running = cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    let hosts: BTreeSet<&str> = running.ranks.iter().map(|r| r.agent_id.as_str()).collect();
    assert_eq!(running.ranks.len(), 4);
    assert_eq!(
        hosts.len(),
        2,
        "4 ranks on 3 agents x 2 GPUs go to 2 hosts: {:?}",
        running.ranks
    );

    wait_checkpoint(&cluster, &id, 20).await;
    // the agent holding ranks 2 and 3 (not rank 0's, so the checkpoint survives)
    let victim_id = running
        .ranks
        .iter()
        .find(|r| r.rank == 3)
        .expect("rank 3")
        .agent_id
        .clone();
    let victim = cluster.agent_name_of(&victim_id).await;
    let killed = Instant::now();
    // The agent alone, as a crash or the OOM killer would: its ranks must
    // not outlive it (else two attempts of one training would run at once).
    let orphans = kill_agent(&cluster, &victim);
    assert_eq!(orphans.len(), 2, "the victim ran ranks 2 and 3");
    let within = Duration::from_secs(2).saturating_sub(killed.elapsed());
    eventually(
        "the ranks to die with their SIGKILLed agent",
        within,
        || async {
            let alive: Vec<_> = orphans.iter().filter(|&&pid| !is_gone(pid)).collect();
            alive
                .is_empty()
                .then_some(())
                .ok_or(format!("ranks {alive:?} outlive it"))
        },
    )
    .await;

    eventually(
        "the lost agent to be detected",
        Duration::from_secs(AGENT_TIMEOUT_S + 15),
        || async {
            let causes = restart_causes(&cluster, &id);
            if causes
                .iter()
                .any(|c| c.contains(&format!("agent {victim} lost")))
            {
                Ok(())
            } else {
                Err(format!("{causes:?}"))
            }
        },
    )
    .await;
    let detected = killed.elapsed();
    assert!(
        detected < Duration::from_secs(AGENT_TIMEOUT_S + 10),
        "detected after {detected:?}"
    );
    let lost: Vec<v1::GpuAvailability> = cluster
        .list_gpus()
        .await
        .into_iter()
        .filter(|g| g.agent_id == victim_id)
        .map(|g| g.availability())
        .collect();
    assert_eq!(
        lost,
        vec![v1::GpuAvailability::Offline; 2],
        "the lost agent's GPUs"
    );
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert!(
        done.ranks.iter().all(|r| r.agent_id != victim_id),
        "attempt 2 avoids the lost agent: {:?}",
        done.ranks
    );
    assert_eq!(done.attempt, 2);
    assert_clean(&cluster).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_training_cancelled_while_restarting_is_not_placed_again() {
    let cluster = cluster(1).await;
    let id = cluster.create(create_request(&long_job(), 2, true)).await;
    wait_checkpoint(&cluster, &id, 20).await;
    restart_held_by_a_frozen_rank(&cluster, &id).await;
    let cancelled = cluster
        .training()
        .await
        .cancel_training(v1::CancelTrainingRequest {
            id: id.clone(),
            reason: "cancelled during the restart".into(),
        })
        .await
        .expect("CancelTraining while RESTARTING")
        .into_inner();
    assert_eq!(cancelled.state(), State::Cancelled, "{cancelled:?}");
    // The frozen rank is killed, every GPU freed, and no second attempt
    // starts (the scheduler ran many passes meanwhile).
    assert_clean(&cluster).await;
    let after = cluster.get_training(&id).await;
    assert_eq!(
        (after.state(), after.attempt),
        (State::Cancelled, 1),
        "{after:?}"
    );
    let states: Vec<String> = cluster
        .db()
        .transitions(&id)
        .into_iter()
        .map(|t| t.to_state)
        .collect();
    assert_eq!(
        states,
        ["QUEUED", "SCHEDULED", "RUNNING", "RESTARTING", "CANCELLED"],
        "{states:?}"
    );
}

/// Kills rank 0 of attempt 1 with rank 1 frozen: the training is RESTARTING
/// for the stop grace at least (rank 1's SIGTERM is held until its SIGKILL).
async fn restart_held_by_a_frozen_rank(cluster: &Cluster, id: &str) {
    let frozen = rank_pid(cluster, id, 1, 1).expect("rank 1 runs");
    signal(frozen, Signal::SIGSTOP);
    let killed = rank_pid(cluster, id, 1, 0).expect("rank 0 runs");
    signal(killed, Signal::SIGKILL);
    cluster
        .wait_state(id, State::Restarting, Duration::from_secs(30))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_survives_a_coordinator_killed_while_restarting() {
    let mut cluster = cluster(1).await;
    let id = cluster.create(create_request(&long_job(), 2, true)).await;
    wait_checkpoint(&cluster, &id, 20).await;
    restart_held_by_a_frozen_rank(&cluster, &id).await;
    cluster.kill_coordinator();
    cluster.restart_coordinator().await;
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert_eq!(done.attempt, 2, "{done:?}");
    let restarts = restart_causes(&cluster, &id);
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert!(restarts[0].contains("rank 0"), "{restarts:?}");
    assert_clean(&cluster).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_rank_is_a_hang_and_the_gang_restarts() {
    let cluster = cluster(2).await;
    let id = cluster.create(create_request(&long_job(), 4, true)).await;
    wait_checkpoint(&cluster, &id, 20).await;
    let frozen = rank_pid(&cluster, &id, 1, 2).expect("rank 2 runs");
    let stopped = Instant::now();
    signal(frozen, Signal::SIGSTOP);
    eventually(
        "the hang to be detected",
        Duration::from_secs(90),
        || async {
            let causes = restart_causes(&cluster, &id);
            if causes
                .iter()
                .any(|c| c.contains("HANG") && c.contains("rank 2"))
            {
                Ok(())
            } else {
                Err(format!("{causes:?}"))
            }
        },
    )
    .await;
    // c10d's own default timeouts are 30 minutes (gloo) and 10 (NCCL)
    assert!(
        stopped.elapsed() < Duration::from_secs(90),
        "detected after {:?}",
        stopped.elapsed()
    );
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(180))
        .await;
    assert_eq!(done.attempt, 2);
    assert_clean(&cluster).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_budget_fails_with_every_cause_and_a_user_error_is_not_retried() {
    let cluster = cluster(1).await;
    // a job that runs until killed, so every attempt is there to be killed
    let endless = SaeJob {
        steps: 1_000_000,
        ..long_job()
    };
    let mut request = create_request(&endless, 2, true);
    request.max_restarts = Some(1);
    let id = cluster.create(request).await;
    for attempt in 1..=2 {
        let pid = eventually("the attempt to run", Duration::from_secs(60), || async {
            let t = cluster.get_training(&id).await;
            let running = t.state() == State::Running && t.attempt == attempt;
            match rank_pid(&cluster, &id, attempt, 0) {
                Some(pid) if running => Ok(pid),
                _ => Err(format!(
                    "attempt {attempt}: {:?} (attempt {})",
                    t.state(),
                    t.attempt
                )),
            }
        })
        .await;
        signal(pid, Signal::SIGKILL);
    }
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(90))
        .await;
    assert!(
        failed.state_reason.contains("restart budget of 1 spent"),
        "{}",
        failed.state_reason
    );
    assert!(
        failed
            .state_reason
            .contains("attempt 1: rank 0 was killed by signal 9"),
        "{}",
        failed.state_reason
    );
    assert!(
        failed
            .state_reason
            .contains("attempt 2: rank 0 was killed by signal 9"),
        "{}",
        failed.state_reason
    );

    // a config the ranks reject (a data file that isn't there): one attempt, no restart
    let mut bad = create_request(&SaeJob::small(), 2, true);
    let config = bad.config.as_mut().expect("config");
    config.data = Some(v1::DataConfig {
        source: Some(v1::data_config::Source::Files(v1::FileData {
            paths: vec!["/nonexistent/acts.npy".into()],
            ..Default::default()
        })),
        ..Default::default()
    });
    let id = cluster.create(bad).await;
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(60))
        .await;
    assert_eq!((failed.attempt, failed.restart_count), (1, 0), "{failed:?}");
    assert!(
        failed.state_reason.contains("user error"),
        "{}",
        failed.state_reason
    );
    assert!(
        failed.state_reason.contains("acts.npy"),
        "{}",
        failed.state_reason
    );
    assert_clean(&cluster).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slowed_rank_is_reported_as_a_straggler_and_the_job_continues() {
    let cluster = cluster(2).await;
    let job = SaeJob {
        steps: 1_000_000,
        log_every: 10,
        ..SaeJob::small()
    };
    let id = cluster.create(create_request(&job, 4, true)).await;
    cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    wait_first_progress(&cluster, &id).await;
    let slow = rank_pid(&cluster, &id, 1, 3).expect("rank 3 runs");
    // Rank 3 runs a quarter of the time: its compute per step grows, its
    // peers wait for it in the all-reduce.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let throttle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                signal(slow, Signal::SIGSTOP);
                std::thread::sleep(Duration::from_millis(30));
                signal(slow, Signal::SIGCONT);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let mut client = cluster.training().await;
    let seen = watch_until(
        &mut client,
        &id,
        0,
        Duration::from_secs(90),
        |e| matches!(&e.event, Some(Event::Straggler(s)) if s.rank == 3 && s.straggling),
    )
    .await
    .expect("WatchTraining");
    let flagged = cluster.get_training(&id).await.straggler_ranks;
    let notes: Vec<String> = cluster
        .list_gpus()
        .await
        .into_iter()
        .flat_map(|g| g.health_notes)
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    throttle.join().unwrap();
    signal(slow, Signal::SIGCONT);
    assert!(
        seen.events
            .iter()
            .any(|e| matches!(&e.event, Some(Event::Straggler(s)) if s.rank == 3)),
        "no straggler report: {:?}",
        seen.events.iter().rev().take(5).collect::<Vec<_>>()
    );
    assert_eq!(flagged, vec![3]);
    assert!(
        notes.iter().any(|n| n.contains("straggler: rank 3")),
        "{notes:?}"
    );
    // the job goes on
    assert_eq!(cluster.get_training(&id).await.state(), State::Running);
    cluster
        .training()
        .await
        .cancel_training(v1::CancelTrainingRequest {
            id: id.clone(),
            reason: "done".into(),
        })
        .await
        .expect("cancel");
    assert_clean(&cluster).await;
}

async fn wait_first_progress(cluster: &Cluster, id: &str) {
    let mut client = cluster.training().await;
    watch_until(&mut client, id, 0, Duration::from_secs(60), |e| {
        matches!(e.event, Some(Event::Progress(_)))
    })
    .await
    .expect("WatchTraining");
}

//! Maintenance with real processes: a cordoned agent takes no new ranks
//! (kept across a coordinator restart) until it is uncordoned; a drain moves
//! a running training off its agent at its checkpoint on notice without spending
//! restart budget (max_restarts 0) and reports the agent empty; a simulated
//! hardware XID quarantines a GPU (kept across a restart) so that a restart
//! after the fault goes elsewhere, until an admin releases it.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use std::time::Duration;
use tonic::Code;

async fn gpu_of(cluster: &Cluster, agent: &str, index: i32) -> v1::Gpu {
    cluster
        .list_gpus()
        .await
        .into_iter()
        .find(|g| g.agent_name == agent && g.info.as_ref().is_some_and(|i| i.index == index))
        .unwrap_or_else(|| panic!("no GPU {index} of {agent}"))
}

/// The agent names of a training's current ranks.
async fn agents_of(cluster: &Cluster, id: &str) -> Vec<String> {
    let t = cluster.get_training(id).await;
    let mut names = Vec::new();
    for r in &t.ranks {
        names.push(cluster.agent_name_of(&r.agent_id).await);
    }
    names
}

/// A 1-GPU training that runs for minutes, checkpointing every 50 steps.
fn long_job() -> SaeJob {
    SaeJob {
        checkpoint_every: 50,
        log_every: 10,
        ..SaeJob::with_steps(200_000)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_agent_takes_no_new_ranks_until_uncordoned() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 2);
    options.gpus_per_agent = 1;
    let mut cluster = Cluster::start(options).await;
    let out = cluster
        .cli_ok(&["agents", "cordon", "agent-0", "--reason", "bios update"])
        .await;
    assert!(out.contains("cordoned: bios update"), "{out}");
    let gpu = gpu_of(&cluster, "agent-0", 0).await;
    assert_eq!(gpu.availability(), v1::GpuAvailability::Cordoned);
    assert!(
        gpu.health_notes
            .iter()
            .any(|n| n == "agent cordoned: bios update"),
        "{gpu:?}"
    );

    // Kept across a coordinator restart (the agent reconnects).
    cluster.restart_coordinator().await;
    cluster.wait_for_gpus().await;
    assert_eq!(
        cluster.agent_named("agent-0").await.cordon_reason,
        "bios update"
    );
    assert_eq!(
        gpu_of(&cluster, "agent-0", 0).await.availability(),
        v1::GpuAvailability::Cordoned
    );

    // A 1-GPU training goes to the other agent; a 2-GPU one waits.
    let one = cluster.create(create_request(&long_job(), 1, true)).await;
    cluster
        .wait_state(&one, State::Running, Duration::from_secs(60))
        .await;
    assert_eq!(agents_of(&cluster, &one).await, ["agent-1"]);
    let two = cluster
        .create(create_request(&SaeJob::small(), 2, true))
        .await;
    let waiting = eventually(
        "the 2-GPU training to say why it waits",
        Duration::from_secs(20),
        || async {
            let t = cluster.get_training(&two).await;
            if t.state() == State::Queued && t.state_reason.contains("cordoned") {
                Ok(t)
            } else {
                Err(format!("{:?}: {}", t.state(), t.state_reason))
            }
        },
    )
    .await;
    assert_eq!(waiting.state(), State::Queued);
    cluster.cancel(&one, "free the GPU").await;

    // Uncordoned: the waiting training is placed across both agents.
    let out = cluster.cli_ok(&["agents", "uncordon", "agent-0"]).await;
    assert!(!out.contains("cordoned"), "{out}");
    cluster
        .wait_state(&two, State::Succeeded, Duration::from_secs(120))
        .await;

    // Refusals change nothing.
    let mut client = cluster.agents().await;
    expect_error(
        "an unknown agent",
        client
            .cordon_agent(v1::CordonAgentRequest {
                agent: "nope".into(),
                reason: String::new(),
            })
            .await,
        Code::NotFound,
        Reason::AgentNotFound,
    );
    expect_error(
        "a reason too long",
        client
            .cordon_agent(v1::CordonAgentRequest {
                agent: "agent-0".into(),
                reason: "x".repeat(300),
            })
            .await,
        Code::InvalidArgument,
        Reason::InvalidArgument,
    );
    assert_eq!(cluster.agent_named("agent-0").await.cordon_reason, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_moves_a_training_at_its_checkpoint_without_spending_its_budget() {
    let mut options = ClusterOptions::new(Backend::Sqlite, 2);
    options.gpus_per_agent = 1;
    let cluster = Cluster::start(options).await;
    let mut request = create_request(&long_job(), 1, true);
    request.max_restarts = Some(0);
    let id = cluster.create(request).await;
    cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    let from = agents_of(&cluster, &id).await.remove(0);
    let to = if from == "agent-0" {
        "agent-1"
    } else {
        "agent-0"
    };

    let out = cluster
        .cli_ok(&[
            "agents",
            "drain",
            &from,
            "--deadline",
            "2m",
            "--reason",
            "kernel update",
        ])
        .await;
    assert!(out.contains(&format!("agent {from} is empty")), "{out}");
    let t = eventually(
        "the training running again elsewhere",
        Duration::from_secs(60),
        || async {
            let t = cluster.get_training(&id).await;
            if t.state() == State::Running && t.attempt == 2 {
                Ok(t)
            } else {
                Err(format!(
                    "{:?} attempt {}: {}",
                    t.state(),
                    t.attempt,
                    t.state_reason
                ))
            }
        },
    )
    .await;
    assert_eq!(t.restart_count, 0, "a drain spends no restart budget");
    assert_eq!(agents_of(&cluster, &id).await, [to]);
    let moved = cluster.agent_named(&from).await;
    assert_eq!(moved.placed_ranks, 0);
    assert!(!moved.draining);
    assert_eq!(
        moved.cordon_reason, "kernel update",
        "a drained agent stays cordoned"
    );
    let report = cluster.cli_ok(&["train", "get", &id]).await;
    assert!(
        report.contains(&format!(
            "drain: moved off agent {from} at its checkpoint of step"
        )),
        "{report}"
    );
    cluster.cancel(&id, "test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hardware_xid_quarantines_its_gpu_until_an_admin_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("overrides");
    std::fs::write(&overrides, "").unwrap();
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.agent_args = vec![
        "--simulate-overrides".into(),
        overrides.display().to_string(),
    ];
    let mut cluster = Cluster::start(options).await;
    let mut request = create_request(&long_job(), 1, true);
    request.max_restarts = Some(3);
    let id = cluster.create(request).await;
    let running = cluster
        .wait_state(&id, State::Running, Duration::from_secs(60))
        .await;
    let held = running.ranks[0].gpu_uuid.clone();
    let index = cluster
        .list_gpus()
        .await
        .into_iter()
        .find(|g| g.info.as_ref().is_some_and(|i| i.uuid == held))
        .and_then(|g| g.info)
        .map(|i| i.index)
        .expect("the held GPU");

    // XID 79 on the GPU the training holds: quarantined at the next sample.
    std::fs::write(
        &overrides,
        format!("{index} xid_errors 1\n{index} last_xid 79\n"),
    )
    .unwrap();
    let gpu = eventually("the GPU quarantined", Duration::from_secs(20), || async {
        let g = gpu_of(&cluster, "agent-0", index).await;
        if g.availability() == v1::GpuAvailability::Quarantined {
            Ok(g)
        } else {
            Err(format!("{:?} {:?}", g.availability(), g.health_notes))
        }
    })
    .await;
    assert_eq!(gpu.quarantine_reason, "XID 79 (GPU has fallen off the bus)");
    // Its alert is raised too.
    let alerts = eventually("the XID alert", Duration::from_secs(20), || async {
        let out = cluster.cli_ok(&["-o", "json", "alerts"]).await;
        if out.contains("GPU_XID_ERROR") && out.contains("XID 79") {
            Ok(out)
        } else {
            Err(out)
        }
    })
    .await;
    assert!(alerts.contains(&held), "{alerts}");

    // The fault kills the rank: the restart goes to the other GPU.
    let pid = cluster.get_training(&id).await.ranks[0].pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let restarted = eventually(
        "the restart on the healthy GPU",
        Duration::from_secs(60),
        || async {
            let t = cluster.get_training(&id).await;
            if t.state() == State::Running && t.attempt >= 2 {
                Ok(t)
            } else {
                Err(format!("{:?} attempt {}", t.state(), t.attempt))
            }
        },
    )
    .await;
    assert_ne!(
        restarted.ranks[0].gpu_uuid, held,
        "never back on the quarantined GPU"
    );

    // Kept across a coordinator restart.
    cluster.restart_coordinator().await;
    cluster.wait_for_gpus().await;
    let again = gpu_of(&cluster, "agent-0", index).await;
    assert_eq!(again.availability(), v1::GpuAvailability::Quarantined);

    // An admin releases it; a second release, or an unknown GPU, is refused.
    let out = cluster.cli_ok(&["gpus", "release", &held]).await;
    assert!(out.contains("released from quarantine"), "{out}");
    let released = gpu_of(&cluster, "agent-0", index).await;
    assert_eq!(released.quarantine_reason, "");
    assert_eq!(released.availability(), v1::GpuAvailability::Available);
    let mut gpus = cluster.gpus().await;
    expect_error(
        "a second release",
        gpus.release_gpu(v1::ReleaseGpuRequest {
            gpu_uuid: held.clone(),
        })
        .await,
        Code::FailedPrecondition,
        Reason::IllegalTransition,
    );
    expect_error(
        "an unknown GPU",
        gpus.release_gpu(v1::ReleaseGpuRequest {
            gpu_uuid: "GPU-nope".into(),
        })
        .await,
        Code::NotFound,
        Reason::GpuNotFound,
    );
    cluster.cancel(&id, "test over").await;
}

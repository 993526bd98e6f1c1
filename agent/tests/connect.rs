//! The agent's coordinator session against an in-process fake coordinator
//! (a real tonic server on 127.0.0.1) and real rank processes (shell scripts).

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message as Out;
use cohort_proto::v1::coordinator_message::Message as In;
use cohort_proto::v1::rank_event::Kind;
use common::*;
use tokio::net::TcpListener;

fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_streams_runs_commands_and_reconnects() {
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), RANK_SCRIPT);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut sessions = serve(listener).await;
    let (agent, stop) = start_agent(url, work.path(), program);

    // Register: the simulated inventory, nothing running yet.
    let mut session = next_session(&mut sessions).await;
    let register = session.register().await;
    assert_eq!(register.agent_name, "test");
    assert_eq!(register.host_name, "test-host");
    assert_eq!(register.address, "127.0.0.1");
    assert_eq!(register.gpus.len(), 2);
    assert_eq!(register.gpus[1].uuid, "GPU-SIM-test-1");
    assert!(register.gpus.iter().all(|g| g.simulated));
    assert_eq!(register.gpus[0].compute_capability, "8.0");
    assert!(register.running_ranks.is_empty());

    // Heartbeats and telemetry flow.
    session
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    let samples = session
        .next_matching(|m| match m {
            Out::Telemetry(t) => Some(t.samples),
            _ => None,
        })
        .await;
    assert_eq!(samples.len(), 2);
    assert!(samples.iter().all(|s| s.simulated && s.time.is_some()));

    // StartRanks: two ranks, one per GPU.
    session
        .send(start_ranks("job-1", &[(0, 0), (1, 1)], 2))
        .await;
    let mut pids = std::collections::HashMap::new();
    let mut progress = 0;
    while pids.len() < 2 || progress < 2 {
        let event = session.next_rank_event().await;
        assert_eq!(event.training_id, "job-1");
        assert_eq!(event.attempt, 1);
        match event.kind.unwrap() {
            Kind::Started(s) => {
                pids.insert(event.rank, s.pid);
            }
            Kind::Progress(p) => {
                let line: serde_json::Value = serde_json::from_str(&p.json_line).unwrap();
                assert_eq!(line["event"], "checkpoint");
                progress += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let run_dir = work.path().join("trainings/job-1/run");
    let config = work.path().join("trainings/job-1/attempt-1/config.json");
    let written = std::fs::read_to_string(&config).unwrap();
    assert_eq!(
        cohort_spec::Workload::from_json(&written).unwrap(),
        test_workload(),
        "the config as sent, typed: {written}"
    );
    let env = std::fs::read_to_string(run_dir.join("rank-1.env")).unwrap();
    assert_eq!(
        env.trim(),
        format!(
            "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER=127.0.0.1:29555 CUDA=[] CONFIG={}",
            std::path::absolute(&config).unwrap().display()
        )
    );

    // The simulated GPUs feel the load.
    let busy = async {
        loop {
            let samples = session
                .next_matching(|m| match m {
                    Out::Telemetry(t) => Some(t.samples),
                    _ => None,
                })
                .await;
            if samples
                .iter()
                .all(|s| s.utilization_gpu_percent.unwrap_or(0.0) > 30.0)
            {
                break;
            }
        }
    };
    tokio::time::timeout(WAIT, busy)
        .await
        .expect("gpus got busy");

    // A repeated StartRanks is a no-op; a bad one is answered with a start
    // failure (and is the next rank event: the repeat produced none).
    session
        .send(start_ranks("job-1", &[(0, 0), (1, 1)], 2))
        .await;
    session.send(start_ranks("job-2", &[(0, 7)], 1)).await;
    let failed = session.next_rank_event().await;
    assert_eq!(failed.training_id, "job-2");
    match failed.kind.unwrap() {
        Kind::StartFailed(f) => assert!(f.message.contains("gpu 7"), "{}", f.message),
        other => panic!("expected StartFailed, got {other:?}"),
    }

    // The coordinator goes away: the agent reconnects and reports its ranks.
    drop(session);
    let mut session = next_session(&mut sessions).await;
    let register = session.register().await;
    let mut running: Vec<(i32, u32)> = register
        .running_ranks
        .iter()
        .map(|r| {
            assert_eq!(r.training_id, "job-1");
            (r.rank, r.pid)
        })
        .collect();
    running.sort();
    assert_eq!(running, vec![(0, pids[&0]), (1, pids[&1])]);

    // StopRanks: both ranks end, reported as exits; no process is left.
    session
        .send(In::StopRanks(v1::StopRanks {
            training_id: "job-1".into(),
            attempt: 0,
            grace_period: Some(millis(2000)),
            reason: "cancelled".into(),
        }))
        .await;
    let mut exited = 0;
    while exited < 2 {
        let event = session.next_rank_event().await;
        if let Some(Kind::Exited(e)) = event.kind {
            assert_eq!(
                e.status,
                Some(v1::rank_exited::Status::Signal(libc::SIGTERM))
            );
            exited += 1;
        }
    }
    for pid in pids.values() {
        assert!(is_dead(*pid), "rank {pid} is gone");
    }

    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, agent).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_late_coordinator_and_stops_ranks_on_shutdown() {
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), RANK_SCRIPT);
    // Start the agent before the coordinator is up: its first attempt is
    // accepted and hung up on, so it has failed once before anything serves.
    let early = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = early.local_addr().unwrap();
    let (agent, stop) = start_agent(format!("http://{addr}"), work.path(), program);
    let (attempt, _) = tokio::time::timeout(WAIT, early.accept())
        .await
        .expect("the agent tries to connect")
        .unwrap();
    drop((attempt, early));

    let mut sessions = serve(TcpListener::bind(addr).await.unwrap()).await;
    let mut session = next_session(&mut sessions).await;
    session.register().await;
    session.send(start_ranks("job-3", &[(0, 1)], 1)).await;
    let pid = session
        .next_matching(|m| match m {
            Out::RankEvent(v1::RankEvent {
                kind: Some(Kind::Started(s)),
                ..
            }) => Some(s.pid),
            _ => None,
        })
        .await;
    assert!(!is_dead(pid));

    // Shutting the agent down stops its ranks.
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, agent).await.unwrap().unwrap();
    cohort_testkit::eventually(
        "the rank to stop with the agent",
        Duration::from_secs(5),
        || async {
            is_dead(pid)
                .then_some(())
                .ok_or(format!("rank {pid} still runs"))
        },
    )
    .await;
}

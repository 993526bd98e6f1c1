//! The whole path on one machine: a coordinator, two agents with 2 simulated
//! GPUs each, real cohort-rank processes training over gloo. A 4-rank job is
//! submitted through the CLI, watched through WatchTraining to SUCCEEDED, and
//! what the coordinator stored is checked through the API and in the database.

use cohort_integration_tests::watch::{watch_everything, watch_to_end};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use std::collections::BTreeSet;
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

async fn four_ranks_across_two_agents(backend: Backend) {
    let cluster = Cluster::start(ClusterOptions::new(backend, 2)).await;
    let job = SaeJob::small();
    let config = job.write(cluster.root(), "sae.toml");
    let id = cluster.submit(&config, &["--gpus", "4"]).await;

    let mut client = cluster.training().await;
    let watched = watch_to_end(&mut client, &id, JOB_TIMEOUT).await;
    if watched.final_state() != Some(State::Succeeded) {
        let t = cluster.get_training(&id).await;
        cluster.fail(&format!(
            "training ended {:?} ({}); events: {:#?}",
            t.state(),
            t.state_reason,
            watched.events
        ));
    }
    assert!(
        watched.ended,
        "the stream ends after the final state change"
    );

    // training.proto: RUNNING means "the ranks formed their group and are
    // training", so the SCHEDULED -> RUNNING change comes before any progress.
    let running_at = watched
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::StateChange(c)) if c.to() == State::Running => Some(e.sequence),
            _ => None,
        })
        .expect("a RUNNING state change");
    let first_progress = watched
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Progress(_)) => Some(e.sequence),
            _ => None,
        })
        .expect("a progress event");
    if running_at > first_progress {
        cluster.fail(&format!(
            "RUNNING (event {running_at}) was recorded after progress (event {first_progress}); \
             transitions: {:?}",
            cluster.db().transitions(&id)
        ));
    }

    // Sequence numbers increase; with the per-rank events they have no gap.
    let sequences: Vec<u64> = watched.events.iter().map(|e| e.sequence).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "event sequence numbers: {sequences:?}"
    );
    assert!(watched.events.iter().all(|e| e.training_id == id));
    let everything = watch_everything(&mut client, &id, Duration::from_secs(30)).await;
    let sequences: Vec<u64> = everything.events.iter().map(|e| e.sequence).collect();
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "every event's sequence number");
    let rank_checksums: BTreeSet<(i32, String)> = everything
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::RankFinished(f)) => Some((f.rank, f.param_checksum.clone())),
            _ => None,
        })
        .collect();

    // The lifecycle, as streamed.
    assert_eq!(
        watched.state_changes(),
        vec![
            (State::Unspecified, State::Queued),
            (State::Queued, State::Scheduled),
            (State::Scheduled, State::Running),
            (State::Running, State::Succeeded),
        ],
        "streamed state changes"
    );

    // The ranks formed one group of 4.
    let started = watched
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Started(s)) => Some(s.clone()),
            _ => None,
        })
        .expect("a TrainingStarted event");
    assert_eq!(started.world_size, 4);
    assert_eq!(started.total_steps, job.steps);
    assert_eq!(started.global_batch, job.batch_size * 4);

    // The loss falls.
    let progress = watched.progress();
    assert!(progress.len() >= 3, "progress events: {progress:?}");
    let steps: Vec<i64> = progress.iter().map(|p| p.step).collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "steps increase: {steps:?}"
    );
    assert_eq!(
        *steps.last().unwrap(),
        job.steps,
        "the last step is reported"
    );
    let first = progress.first().unwrap().loss;
    let last = progress.last().unwrap().loss;
    assert!(
        last.is_finite() && last < first * 0.5,
        "the loss did not fall: {first} -> {last} ({progress:?})"
    );
    assert!(progress.iter().all(|p| p.samples_per_sec > 0.0));

    let finished = watched
        .events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Finished(f)) => Some(f.clone()),
            _ => None,
        })
        .expect("a TrainingFinished event");
    assert_eq!(finished.step, job.steps);
    assert!(!finished.param_checksum.is_empty());
    // Every rank ended with the same parameters as rank 0.
    assert_eq!(
        rank_checksums,
        (0..4)
            .map(|r| (r, finished.param_checksum.clone()))
            .collect::<BTreeSet<_>>(),
        "per-rank final checksums"
    );

    // The training as the API shows it: the rank map spans both agents.
    let training = cluster.get_training(&id).await;
    assert_eq!(training.state(), State::Succeeded);
    assert_eq!(training.world_size, 4);
    assert_eq!(training.attempt, 1);
    assert_eq!(training.restart_count, 0);
    assert!(training.start_time.is_some() && training.end_time.is_some());
    let mut ranks = training.ranks.clone();
    ranks.sort_by_key(|r| r.rank);
    assert_eq!(
        ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "{ranks:?}"
    );
    let agents: BTreeSet<&str> = ranks.iter().map(|r| r.agent_id.as_str()).collect();
    assert_eq!(agents.len(), 2, "the ranks span both agents: {ranks:?}");
    let gpus: BTreeSet<&str> = ranks.iter().map(|r| r.gpu_uuid.as_str()).collect();
    assert_eq!(gpus.len(), 4, "one GPU per rank: {ranks:?}");
    for agent in &agents {
        let local: Vec<&v1::RankAssignment> =
            ranks.iter().filter(|r| r.agent_id == *agent).collect();
        let mut local_ranks: Vec<i32> = local.iter().map(|r| r.local_rank).collect();
        local_ranks.sort_unstable();
        assert_eq!(local_ranks, vec![0, 1], "local ranks on {agent}: {ranks:?}");
        assert!(local.iter().all(|r| r.local_world_size == 2), "{ranks:?}");
    }
    for r in &ranks {
        assert_eq!(r.state(), v1::RankState::Succeeded, "{r:?}");
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        assert!(r.pid > 0, "{r:?}");
    }

    // The database holds the rank map, the transitions and the checkpoints.
    let db = cluster.db();
    let rows = db.ranks(&id);
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.attempt == 1 && r.state == "SUCCEEDED"),
        "{rows:?}"
    );
    let row_agents: BTreeSet<&str> = rows.iter().map(|r| r.agent_id.as_str()).collect();
    assert_eq!(row_agents, agents, "{rows:?}");
    let transitions = db.transitions(&id);
    let to: Vec<&str> = transitions.iter().map(|t| t.to_state.as_str()).collect();
    assert_eq!(
        to,
        vec!["QUEUED", "SCHEDULED", "RUNNING", "SUCCEEDED"],
        "{transitions:?}"
    );
    assert_eq!(transitions[0].from_state, None, "{transitions:?}");
    for pair in transitions.windows(2) {
        assert_eq!(
            pair[1].from_state.as_deref(),
            Some(pair[0].to_state.as_str()),
            "{transitions:?}"
        );
    }
    assert!(
        transitions.iter().all(|t| !t.reason.is_empty()),
        "every transition has a reason: {transitions:?}"
    );
    let steps = db.checkpoint_steps(&id);
    assert_eq!(steps.last(), Some(&job.steps), "checkpoints: {steps:?}");

    // ... and the API lists the final one; it is on disk, on rank 0's host.
    let checkpoints = client
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("ListCheckpoints")
        .into_inner()
        .checkpoints;
    let last = checkpoints
        .iter()
        .max_by_key(|c| c.step)
        .expect("a checkpoint");
    assert_eq!(last.step, job.steps, "{checkpoints:?}");
    assert_eq!(last.attempt, 1);
    assert_eq!(last.agent_id, ranks[0].agent_id, "rank 0's host holds it");
    assert!(
        std::path::Path::new(&last.path).is_dir(),
        "checkpoint dir {} missing",
        last.path
    );

    // The CLI agrees, and its watch replays the history to SUCCEEDED (exit 0).
    let got = cluster.cli_ok(&["-o", "json", "train", "get", &id]).await;
    assert!(got.contains("SUCCEEDED"), "{got}");
    cluster.cli_ok(&["train", "watch", &id]).await;

    // Nothing left running; every GPU free again.
    cluster
        .assert_no_rank_processes(Duration::from_secs(10))
        .await;
    let gpus = cluster.list_gpus().await;
    assert_eq!(gpus.len(), 4);
    for gpu in &gpus {
        assert_eq!(
            gpu.availability(),
            v1::GpuAvailability::Available,
            "{gpu:?}"
        );
        assert!(gpu.training_id.is_empty(), "{gpu:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_ranks_across_two_agents_sqlite() {
    four_ranks_across_two_agents(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_ranks_across_two_agents_postgres() {
    four_ranks_across_two_agents(Backend::Postgres).await;
}

/// ListCheckpoints (training.proto): "Lists the complete checkpoints of a
/// training, newest first", pages included; with `checkpoint.keep` (default 3)
/// the ranks delete older ones, which are then not complete checkpoints anymore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_listed_newest_first() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let job = SaeJob {
        checkpoint_every: 15,
        ..SaeJob::small()
    };
    let config = job.write(cluster.root(), "sae.toml");
    let id = cluster.submit(&config, &["--gpus", "1"]).await;
    let mut client = cluster.training().await;
    let watched = watch_to_end(&mut client, &id, JOB_TIMEOUT).await;
    assert_eq!(watched.final_state(), Some(State::Succeeded));

    let mut steps = Vec::new();
    let mut paths = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_checkpoints(v1::ListCheckpointsRequest {
                training_id: id.clone(),
                page_size: 1,
                page_token,
            })
            .await
            .expect("ListCheckpoints")
            .into_inner();
        assert!(page.checkpoints.len() <= 1);
        steps.extend(page.checkpoints.iter().map(|c| c.step));
        paths.extend(page.checkpoints.iter().map(|c| c.path.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    // Checkpoints at 15, 30, 45 and 60; `keep` = 3 pruned step 15.
    assert_eq!(steps, [60, 45, 30], "newest first, pruned ones left out");
    for path in &paths {
        assert!(
            std::path::Path::new(path).is_dir(),
            "listed checkpoint {path} is on disk"
        );
    }
}

//! Persistence against real databases: every test runs on SQLite and on PostgreSQL.

mod common;

use chrono::Utc;
use cohort_coordinator::model::{EventPayload, GpuSelection, JobState, RankState};
use cohort_coordinator::persistence::events::append_event_in;
use cohort_coordinator::persistence::{
    DatabaseError, ListTrainings, LogicalError, Persistence, TrainingCursor,
};
use cohort_spec::progress::{Progress, ProgressLine};

use common::new_training;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_once_and_reopen() {
    for t in common::databases().await {
        assert!(
            t.db.get_training("trn-none").await.unwrap().is_none(),
            "{}",
            t.name
        );
        // Reopening the same database finds nothing left to apply and keeps the data.
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        let again = Persistence::open(t.target.clone()).await.unwrap();
        assert!(
            again.get_training(&id).await.unwrap().is_some(),
            "{}",
            t.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_get() {
    for t in common::databases().await {
        let new = new_training(Some("req-1"));
        let created = t.db.create_training(new.clone()).await.unwrap();
        assert!(created.created, "{}", t.name);
        let got =
            t.db.get_training(&created.training.id)
                .await
                .unwrap()
                .unwrap();
        assert_eq!(got, created.training, "{}", t.name);
        assert_eq!(got.state, JobState::Queued);
        assert_eq!(got.config, new.config);
        assert_eq!(got.gpu_request, new.gpu_request);
        assert_eq!(got.request_id.as_deref(), Some("req-1"));
        assert_eq!(got.max_restarts, 3);
        assert_eq!(got.last_event_seq, 1);
        assert!(got.start_time.is_none() && got.end_time.is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_is_idempotent_by_request_id() {
    for t in common::databases().await {
        let first =
            t.db.create_training(new_training(Some("req-a")))
                .await
                .unwrap();
        let second =
            t.db.create_training(new_training(Some("req-a")))
                .await
                .unwrap();
        assert!(first.created && !second.created, "{}", t.name);
        assert_eq!(first.training.id, second.training.id);
        assert_eq!(t.db.transitions(&first.training.id).await.unwrap().len(), 1);

        // The same key with a different request is refused, and writes nothing.
        let mut other = new_training(Some("req-a"));
        other.gpu_request.selection = GpuSelection::Count { count: 4 };
        match t.db.create_training(other).await {
            Err(DatabaseError::Logical(LogicalError::RequestIdConflict { existing, .. })) => {
                assert_eq!(existing, first.training.id)
            }
            other => panic!("{}: expected a conflict, got {other:?}", t.name),
        }
        let all = t.db.list_trainings(page(&[], 10, None)).await.unwrap();
        assert_eq!(all.len(), 1, "{}", t.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_with_one_request_id_make_one_training() {
    for t in common::databases().await {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let db = t.db.clone();
                tokio::spawn(async move { db.create_training(new_training(Some("race"))).await })
            })
            .collect();
        let mut ids = Vec::new();
        let mut created = 0;
        for task in tasks {
            let c = task.await.unwrap().unwrap();
            created += usize::from(c.created);
            ids.push(c.training.id);
        }
        ids.dedup();
        assert_eq!((ids.len(), created), (1, 1), "{}", t.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transitions_are_recorded_with_events() {
    for t in common::databases().await {
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        let steps = [
            (JobState::Scheduled, "placed on 2 GPUs"),
            (JobState::Running, "group formed"),
            (JobState::Succeeded, "finished"),
        ];
        for (to, reason) in steps {
            let after = t.db.transition(&id, to, reason).await.unwrap();
            assert_eq!((after.state, after.state_reason.as_str()), (to, reason));
        }
        let done = t.db.get_training(&id).await.unwrap().unwrap();
        assert!(
            done.start_time.is_some() && done.end_time.is_some(),
            "{}",
            t.name
        );

        let history = t.db.transitions(&id).await.unwrap();
        let pairs: Vec<_> = history.iter().map(|h| (h.from, h.to)).collect();
        use JobState::*;
        assert_eq!(
            pairs,
            [
                (None, Queued),
                (Some(Queued), Scheduled),
                (Some(Scheduled), Running),
                (Some(Running), Succeeded)
            ],
            "{}",
            t.name
        );
        assert_eq!(history[2].reason, "group formed");

        let events = t.db.events_after(&id, 0, 100).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4], "{}", t.name);
        assert!(matches!(
            &events[3].payload,
            EventPayload::StateChange(c) if c.to == Succeeded && c.from == Some(Running)
        ));
        assert_eq!(t.db.events_after(&id, 2, 100).await.unwrap().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_transitions_are_refused_and_write_nothing() {
    for t in common::databases().await {
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        let before = t.db.get_training(&id).await.unwrap().unwrap();
        match t
            .db
            .transition(&id, JobState::Succeeded, "skip ahead")
            .await
        {
            Err(DatabaseError::Logical(LogicalError::IllegalTransition { from, to, .. })) => {
                assert_eq!((from, to), (JobState::Queued, JobState::Succeeded))
            }
            other => panic!("{}: expected an illegal transition, got {other:?}", t.name),
        }
        assert_eq!(t.db.get_training(&id).await.unwrap().unwrap(), before);
        assert_eq!(t.db.transitions(&id).await.unwrap().len(), 1, "{}", t.name);
        assert_eq!(t.db.events_after(&id, 0, 100).await.unwrap().len(), 1);

        // A final state admits nothing, not even itself.
        t.db.transition(&id, JobState::Cancelled, "user")
            .await
            .unwrap();
        for to in JobState::ALL {
            let err = t.db.transition(&id, to, "again").await.unwrap_err();
            assert!(
                matches!(
                    err,
                    DatabaseError::Logical(LogicalError::IllegalTransition { .. })
                ),
                "{err}"
            );
        }
        assert_eq!(t.db.transitions(&id).await.unwrap().len(), 2, "{}", t.name);

        let missing = t.db.transition("trn-missing", JobState::Running, "x").await;
        assert!(matches!(
            missing,
            Err(DatabaseError::Logical(LogicalError::TrainingNotFound(_)))
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rank_events_get_dense_sequence_numbers() {
    for t in common::databases().await {
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        let line = ProgressLine::Progress(Progress {
            step: 10,
            total_steps: 20,
            loss: 0.5,
            mse: 0.4,
            l1: 100.0,
            samples_per_sec: 1000.0,
            step_time_ms: 3.0,
            learning_rate: 0.001,
            grad_norm: 1.0,
            l0: 8.0,
            explained_variance: 0.9,
            ..Progress::default()
        });
        let mut rung = t.db.events_bell().subscribe(&id);
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (db, id, line) = (t.db.clone(), id.clone(), line.clone());
                tokio::spawn(async move { db.append_event(&id, 1, EventPayload::Rank(line)).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let events = t.db.events_after(&id, 1, 100).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3, 4, 5, 6, 7], "{}", t.name);
        // Watchers were rung with the newest committed sequence number ...
        assert!(rung.has_changed().unwrap(), "{}", t.name);
        assert_eq!(*rung.borrow_and_update(), 7, "{}", t.name);
        // ... but not for an event whose transaction rolled back.
        let rolled_back = {
            let (id, line) = (id.clone(), line.clone());
            t.db.transaction_noting("append_then_fail", move |c, out| {
                let line = EventPayload::Rank(line.clone());
                append_event_in(c, out, &id, 1, &line, Utc::now())?;
                Err::<(), _>(DatabaseError::Corrupt("rolled back on purpose".into()))
            })
            .await
        };
        assert!(rolled_back.is_err());
        assert!(!rung.has_changed().unwrap(), "{}", t.name);
        assert!(t.db.events_after(&id, 7, 10).await.unwrap().is_empty());
        assert_eq!(events[0].payload, EventPayload::Rank(line.clone()));
        assert_eq!(events[0].attempt, 1);

        let missing =
            t.db.append_event("trn-missing", 1, EventPayload::Rank(line))
                .await;
        assert!(matches!(
            missing,
            Err(DatabaseError::Logical(LogicalError::TrainingNotFound(_)))
        ));
    }
}

fn page(states: &[JobState], limit: i64, after: Option<TrainingCursor>) -> ListTrainings {
    ListTrainings {
        states: states.to_vec(),
        limit,
        after,
        team: None,
        labels: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_newest_first_and_filters_by_state() {
    for t in common::databases().await {
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(
                t.db.create_training(new_training(None))
                    .await
                    .unwrap()
                    .training
                    .id,
            );
        }
        t.db.transition(&ids[1], JobState::Cancelled, "x")
            .await
            .unwrap();
        t.db.transition(&ids[3], JobState::Cancelled, "x")
            .await
            .unwrap();

        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let batch =
                t.db.list_trainings(page(&[], 2, after.clone()))
                    .await
                    .unwrap();
            if batch.is_empty() {
                break;
            }
            after = batch.last().map(TrainingCursor::from);
            seen.extend(batch.into_iter().map(|tr| tr.id));
        }
        let mut expected = ids.clone();
        expected.reverse();
        assert_eq!(seen, expected, "{}", t.name);

        let cancelled =
            t.db.list_trainings(page(&[JobState::Cancelled], 10, None))
                .await
                .unwrap();
        let got: Vec<_> = cancelled.iter().map(|tr| tr.id.as_str()).collect();
        assert_eq!(got, [ids[3].as_str(), ids[1].as_str()], "{}", t.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_databases_open_concurrently_and_serialise_writers() {
    use cohort_coordinator::persistence::DatabaseTarget;
    let dir = tempfile::tempdir().unwrap();
    let (pg, _schema) = common::postgres_schema();
    for target in [DatabaseTarget::Sqlite(dir.path().join("fresh.db")), pg] {
        let name = target.backend_name();
        // Several coordinators opening one fresh database at once (SQLite's WAL
        // switch, migrations) and then writing at once: each migration runs
        // once and no write fails with "database is locked".
        let opens: Vec<_> = (0..3)
            .map(|_| tokio::spawn(Persistence::open(target.clone())))
            .collect();
        let mut dbs = Vec::new();
        for open in opens {
            dbs.push(
                open.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{name}: {e}")),
            );
        }
        let writes: Vec<_> = dbs
            .iter()
            .flat_map(|db| (0..4).map(move |_| db.clone()))
            .map(|db| tokio::spawn(async move { db.create_training(new_training(None)).await }))
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        let all = dbs[0].list_trainings(page(&[], 100, None)).await.unwrap();
        assert_eq!(all.len(), 12, "{name}");
    }
}

fn registration(i: usize) -> cohort_coordinator::persistence::AgentRegistration {
    cohort_coordinator::persistence::AgentRegistration {
        name: format!("agent-{i}"),
        host_name: format!("host-{i}"),
        address: "127.0.0.1".into(),
        version: "test".into(),
        gpus: (0..8)
            .map(|g| cohort_coordinator::model::GpuRecord {
                uuid: format!("GPU-{i}-{g}"),
                index: g,
                name: "sim".into(),
                memory_total_bytes: 80 << 30,
                compute_capability: "9.0".into(),
                simulated: true,
                quarantine: None,
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_registration_on_sqlite_never_reports_database_is_locked() {
    use cohort_coordinator::persistence::{DatabaseTarget, PersistenceOptions};
    let dir = tempfile::tempdir().unwrap();
    // One attempt per transaction: a write that had to be retried fails the test.
    let db = Persistence::open_with(
        DatabaseTarget::Sqlite(dir.path().join("mass.db")),
        PersistenceOptions {
            max_connections: Some(8),
            max_attempts: 1,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let n = 200;
    // Each agent registers twice (a reconnect updates its row): read-then-write.
    let tasks: Vec<_> = (0..2 * n)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { db.register_agent(registration(i % n)).await })
        })
        .collect();
    let mut failed = Vec::new();
    for task in tasks {
        if let Err(e) = task.await.unwrap() {
            failed.push(e.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} registrations failed, e.g. {:?}",
        failed.len(),
        2 * n,
        failed.first()
    );
    let agents = db.list_agents().await.unwrap();
    assert_eq!(agents.len(), n);
    assert!(agents.iter().all(|a| a.gpus.len() == 8 && a.connected));
}

/// A rank event naming a rank that does not exist (a bogus or stale agent
/// message) is a logical error: it fails at once and is never retried (it
/// used to be a retryable conflict, rerun with sleeps while the agent's
/// message loop waited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_for_no_such_rank_is_not_retried() {
    for t in common::databases().await {
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        let err =
            t.db.rank_ended(
                &id,
                1,
                7,
                cohort_coordinator::persistence::ranks::RankEnd {
                    state: RankState::Failed,
                    exit_code: Some(1),
                    signal: None,
                    log_tail: None,
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, DatabaseError::Logical(_)),
            "{}: {err:?}",
            t.name
        );
        assert!(!err.is_retryable(), "{}", t.name);
        assert!(err.to_string().contains("no rank 7 of attempt 1"), "{err}");
        let err = t.db.rank_started(&id, 1, 7, 4242).await.unwrap_err();
        assert!(
            matches!(err, DatabaseError::Logical(_)),
            "{}: {err:?}",
            t.name
        );
        // Nothing was written: the training is as it was.
        let got = t.db.get_training(&id).await.unwrap().unwrap();
        assert_eq!(
            (got.state, got.attempt),
            (JobState::Queued, 0),
            "{}",
            t.name
        );
    }
}

/// A pass's placements are written together: each training placed whole
/// (its rank map, SCHEDULED at attempt 1, its transition and event), and
/// one that moved on meanwhile (cancelled) refused alone with nothing of
/// it written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_placements_places_each_whole_or_not_at_all() {
    use cohort_coordinator::model::{Placement, RankSlot};
    use cohort_coordinator::persistence::placements::NewPlacement;
    for t in common::databases().await {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(
                t.db.create_training(new_training(None))
                    .await
                    .unwrap()
                    .training
                    .id,
            );
        }
        t.db.transition(&ids[1], JobState::Cancelled, "cancelled meanwhile")
            .await
            .unwrap();
        let batch: Vec<NewPlacement> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| NewPlacement {
                training_id: id.clone(),
                placement: Placement {
                    master_addr: "host-a".into(),
                    master_port: 29500 + i as u16,
                    slots: (0..2)
                        .map(|rank| RankSlot {
                            rank,
                            agent_id: "agent-a".into(),
                            gpu_uuid: format!("GPU-{i}-{rank}"),
                            gpu_index: rank,
                            local_rank: rank,
                            local_world_size: 2,
                        })
                        .collect(),
                },
                reason: "placed 2 ranks on 1 agent(s)".into(),
                borrowing: i == 2,
            })
            .collect();
        let out = t.db.place_trainings(batch).await.unwrap();
        assert_eq!(out.len(), 3, "{}", t.name);
        assert!(
            matches!(
                &out[1],
                Err(DatabaseError::Logical(LogicalError::IllegalTransition {
                    from: JobState::Cancelled,
                    ..
                }))
            ),
            "{}: {:?}",
            t.name,
            out[1]
        );
        assert!(
            t.db.ranks(&ids[1], 1).await.unwrap().is_empty(),
            "{}",
            t.name
        );
        for i in [0, 2] {
            let answered = &out[i].as_ref().unwrap().training;
            let stored = t.db.get_training(&ids[i]).await.unwrap().unwrap();
            assert_eq!(
                (stored.state, stored.attempt, stored.world_size),
                (JobState::Scheduled, 1, 2),
                "{}",
                t.name
            );
            assert_eq!(stored.master_port, Some(29500 + i as i32), "{}", t.name);
            assert_eq!(answered.last_event_seq, stored.last_event_seq, "{}", t.name);
            assert_eq!(answered.state_reason, stored.state_reason, "{}", t.name);
            let ranks = t.db.ranks(&ids[i], 1).await.unwrap();
            assert_eq!(ranks.len(), 2, "{}", t.name);
            let events = t.db.events_after(&ids[i], 0, 10).await.unwrap();
            let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, [1, 2], "{}", t.name);
            assert!(matches!(
                &events[1].payload,
                EventPayload::StateChange(c) if c.to == JobState::Scheduled && c.from == Some(JobState::Queued)
            ));
            let history = t.db.transitions(&ids[i]).await.unwrap();
            assert_eq!(history.last().map(|h| h.attempt), Some(1), "{}", t.name);
        }
        // The cancelled one kept its own history: created, cancelled.
        assert_eq!(
            t.db.transitions(&ids[1]).await.unwrap().len(),
            2,
            "{}",
            t.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estimates_are_written_in_chunks_with_an_event_only_for_a_change() {
    use cohort_coordinator::persistence::estimates::{EstimateWrite, StoredEstimate};
    let at = |s: i64| chrono::DateTime::from_timestamp(2_000_000_000 + s, 0);
    for t in common::databases().await {
        // More than two write transactions' worth.
        let mut ids = Vec::new();
        for _ in 0..260 {
            ids.push(
                t.db.create_training(new_training(None))
                    .await
                    .unwrap()
                    .training
                    .id,
            );
        }
        let writes = |start: i64, event: bool| -> Vec<EstimateWrite> {
            ids.iter()
                .map(|id| EstimateWrite {
                    training_id: id.clone(),
                    attempt: 1,
                    estimate: StoredEstimate {
                        start_time: at(start),
                        end_time: None,
                        reason: String::new(),
                    },
                    event,
                })
                .collect()
        };
        // First estimates: stored, no event.
        t.db.write_estimates(writes(60, false), Vec::new())
            .await
            .unwrap();
        let stored = t.db.estimates(ids.clone()).await.unwrap();
        assert_eq!(stored.len(), ids.len(), "{}", t.name);
        assert!(
            stored.values().all(|e| e.start_time == at(60)),
            "{}",
            t.name
        );
        for id in [&ids[0], &ids[259]] {
            let got = t.db.get_training(id).await.unwrap().unwrap();
            assert_eq!(
                got.last_event_seq, 1,
                "{}: no event for a first estimate",
                t.name
            );
        }
        // Moved: rewritten, each with its one event, sequence numbers dense.
        t.db.write_estimates(writes(3600, true), Vec::new())
            .await
            .unwrap();
        let stored = t.db.estimates(ids.clone()).await.unwrap();
        assert!(
            stored.values().all(|e| e.start_time == at(3600)),
            "{}",
            t.name
        );
        for id in &ids {
            let events = t.db.events_after(id, 1, 10).await.unwrap();
            assert_eq!(events.len(), 1, "{}: {id}", t.name);
            assert_eq!(events[0].seq, 2);
            match &events[0].payload {
                EventPayload::Estimate(e) => assert_eq!(e.start_time, at(3600)),
                other => panic!("{}: {other:?}", t.name),
            }
        }
        // Gone: dropped.
        t.db.write_estimates(Vec::new(), ids.clone()).await.unwrap();
        assert!(
            t.db.estimates(ids.clone()).await.unwrap().is_empty(),
            "{}",
            t.name
        );
    }
}

/// SQLite's writers take turns in the coordinator before they take a
/// connection: with a pool of two, one writer inside its transaction and
/// another waiting for its turn, a read still gets the second connection
/// (it would wait for the first writer if the second held a connection in
/// SQLite's busy handler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_writer_waiting_its_turn_holds_no_connection() {
    use cohort_coordinator::persistence::{DatabaseTarget, PersistenceOptions};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let options = PersistenceOptions {
        max_connections: Some(2),
        checkout_timeout: Duration::from_secs(3),
        ..Default::default()
    };
    let db = Persistence::open_with(DatabaseTarget::Sqlite(dir.path().join("c.db")), options)
        .await
        .unwrap();
    let (inside_tx, inside) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let (inside_tx, released) = (Mutex::new(inside_tx), Arc::new(Mutex::new(released)));
    let holder = tokio::spawn({
        let db = db.clone();
        async move {
            db.transaction("hold", move |_| {
                inside_tx.lock().unwrap().send(()).unwrap();
                released
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20))
                    .unwrap();
                Ok(())
            })
            .await
        }
    });
    tokio::task::spawn_blocking(move || inside.recv_timeout(Duration::from_secs(10)).unwrap())
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let db = db.clone();
        async move { db.create_training(new_training(None)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let read = db.get_training("trn-none").await;
    release.send(()).unwrap();
    assert!(
        matches!(read, Ok(None)),
        "the read waited for a connection: {read:?}"
    );
    holder.await.unwrap().unwrap();
    waiter.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_kept_per_team_up_to_a_cap_and_transitions_read_after_a_cursor() {
    use cohort_coordinator::model::{AuditEntry, Principal};
    use cohort_coordinator::persistence::webhooks::{Added, NewWebhook, MAX_PER_TEAM};
    for t in common::databases().await {
        let audit = AuditEntry::ok(
            &Principal::Anonymous,
            "cohort.v1.AdminService/AddWebhook",
            "",
            "vision",
        );
        let hook = |n: i64| NewWebhook {
            team: "vision".into(),
            url: format!("http://127.0.0.1:9/{n}"),
            events: vec!["ended".into(), "failed".into()],
            format: "json".into(),
            secret: format!("secret-{n}"),
            creator: "lead".into(),
            audit: audit.clone(),
        };
        let mut ids = Vec::new();
        for n in 0..MAX_PER_TEAM {
            match t.db.add_webhook(hook(n)).await.unwrap() {
                Added::Done(h) => ids.push(h.id),
                Added::Full => panic!("{}: full at {n}", t.name),
            }
        }
        assert!(
            matches!(t.db.add_webhook(hook(99)).await.unwrap(), Added::Full),
            "{}",
            t.name
        );
        let listed = t.db.webhooks(Some("vision")).await.unwrap();
        assert_eq!(listed.len() as i64, MAX_PER_TEAM, "{}", t.name);
        assert_eq!(listed[0].events, ["ended", "failed"]);
        assert_eq!(listed[0].secret, "secret-0");
        assert!(t.db.webhooks(Some("nlp")).await.unwrap().is_empty());
        // Removing: only within its team; then it is gone, once.
        assert!(t
            .db
            .remove_webhook(&ids[0], Some("nlp"), audit.clone())
            .await
            .unwrap()
            .is_none());
        let removed =
            t.db.remove_webhook(&ids[0], Some("vision"), audit.clone())
                .await
                .unwrap();
        assert_eq!(removed.map(|h| h.id), Some(ids[0].clone()), "{}", t.name);
        assert!(t
            .db
            .remove_webhook(&ids[0], None, audit.clone())
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            t.db.webhooks(None).await.unwrap().len() as i64,
            MAX_PER_TEAM - 1
        );

        // The transitions after a cursor, with their training's team.
        let cursor = t.db.last_transition_id().await.unwrap();
        let id =
            t.db.create_training(new_training(None))
                .await
                .unwrap()
                .training
                .id;
        t.db.transition(&id, JobState::Cancelled, "by lead")
            .await
            .unwrap();
        let after = t.db.transitions_after(cursor, 100).await.unwrap();
        let states: Vec<(&str, &str)> = after
            .iter()
            .map(|a| (a.training_id.as_str(), a.to_state.as_str()))
            .collect();
        assert_eq!(
            states,
            [(id.as_str(), "QUEUED"), (id.as_str(), "CANCELLED")],
            "{}",
            t.name
        );
        assert_eq!(after[1].reason, "by lead");
        assert!(after[0].id < after[1].id);
        assert!(t
            .db
            .transitions_after(after[1].id, 100)
            .await
            .unwrap()
            .is_empty());
    }
}

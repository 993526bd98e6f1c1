//! CreateTraining's group commit against real databases (SQLite and
//! PostgreSQL): a burst of concurrent creates is written in few
//! transactions, and every caller still gets the outcome its own create
//! would have had alone.

mod common;

use cohort_coordinator::model::{AuditEntry, EventPayload, GpuSelection, JobState};
use cohort_coordinator::persistence::audit::AuditQuery;
use cohort_coordinator::persistence::quotas::TeamQuota;
use cohort_coordinator::persistence::{Created, DatabaseError, LogicalError, NewTraining};
use common::new_training;
use std::collections::HashSet;

fn audited(team: &str, request_id: Option<String>) -> NewTraining {
    NewTraining {
        team: team.into(),
        creator: format!("{team}/dev"),
        labels: Default::default(),
        audit: Some(AuditEntry {
            actor_kind: "token".into(),
            actor: format!("{team}/dev"),
            actor_team: team.into(),
            method: "cohort.v1.TrainingService/CreateTraining".into(),
            target: String::new(),
            target_team: team.into(),
            code: "OK".into(),
            detail: String::new(),
        }),
        max_queued: Some(1000),
        ..new_training(request_id.as_deref())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_creates_is_committed_together_with_one_outcome_each() {
    for t in common::databases().await {
        // vision may have 5 QUEUED (its own cap over the default of 1000).
        t.db.set_quota(
            TeamQuota {
                team: "vision".into(),
                gpus: None,
                max_queued: Some(5),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
        let stored =
            t.db.create_training(audited("nlp", Some("pre".into())))
                .await
                .unwrap();
        let mut conflicting = audited("nlp", Some("pre".into()));
        conflicting.gpu_request.selection = GpuSelection::Count { count: 8 };

        let mut burst: Vec<(&str, NewTraining)> = Vec::new();
        burst.extend((0..40).map(|i| {
            let mut new = audited("nlp", Some(format!("nlp-{i}")));
            new.labels = [("burst", "nlp".to_string()), ("i", i.to_string())]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            ("nlp", new)
        }));
        burst.extend((0..20).map(|_| ("vision", audited("vision", None))));
        burst.extend((0..10).map(|_| ("dup", audited("nlp", Some("dup".into())))));
        burst.extend((0..5).map(|_| ("conflict", conflicting.clone())));
        burst.extend((0..5).map(|_| ("replay", audited("nlp", Some("pre".into())))));
        let calls = burst.len() as u64;
        let before = t.db.op_metrics().total();
        let tasks: Vec<_> = burst
            .into_iter()
            .map(|(kind, new)| {
                let db = t.db.clone();
                tokio::spawn(async move { (kind, db.create_training(new).await) })
            })
            .collect();
        let mut outcomes: Vec<(&str, Result<Created, DatabaseError>)> = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let of = |kind: &'static str| {
            outcomes
                .iter()
                .filter(move |(k, _)| *k == kind)
                .map(|(_, o)| o)
        };

        // Every distinct create made its own training.
        let nlp: Vec<&Created> = of("nlp").map(|o| o.as_ref().unwrap()).collect();
        assert!(nlp.iter().all(|c| c.created), "{}", t.name);
        let ids: HashSet<&str> = nlp.iter().map(|c| c.training.id.as_str()).collect();
        assert_eq!(ids.len(), 40, "{}", t.name);
        // The team's cap held across the batch: 5 queued, 15 refused.
        let vision: Vec<_> = of("vision").collect();
        let queued = vision.iter().filter(|o| o.is_ok()).count();
        let full = vision
            .iter()
            .filter(|o| matches!(o, Err(DatabaseError::Logical(LogicalError::QueueFull { team, queued: 5 })) if team == "vision"))
            .count();
        assert_eq!((queued, full), (5, 15), "{}: {vision:?}", t.name);
        // One request_id, one training, created once.
        let dups: Vec<&Created> = of("dup").map(|o| o.as_ref().unwrap()).collect();
        let dup_ids: HashSet<&str> = dups.iter().map(|c| c.training.id.as_str()).collect();
        assert_eq!(dup_ids.len(), 1, "{}", t.name);
        assert_eq!(dups.iter().filter(|c| c.created).count(), 1, "{}", t.name);
        // A stored key: replayed as it is, or refused when the request differs.
        for o in of("replay") {
            let c = o.as_ref().unwrap();
            assert!(
                !c.created && c.training.id == stored.training.id,
                "{}",
                t.name
            );
        }
        for o in of("conflict") {
            assert!(
                matches!(o, Err(DatabaseError::Logical(LogicalError::RequestIdConflict { existing, .. })) if *existing == stored.training.id),
                "{}: {o:?}",
                t.name
            );
        }
        // Fewer transactions than calls: creates were committed together.
        let transactions = t.db.op_metrics().total() - before;
        assert!(
            transactions < calls,
            "{}: {transactions} transactions for {calls} creates",
            t.name
        );

        // Each new training is whole: its row, the first transition, event 1, its audit row.
        let audit =
            t.db.audit_events(AuditQuery {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let audited_ids: HashSet<&str> = audit.iter().map(|r| r.entry.target.as_str()).collect();
        let created: Vec<&Created> = outcomes
            .iter()
            .filter_map(|(_, o)| o.as_ref().ok())
            .filter(|c| c.created)
            .collect();
        assert_eq!(created.len(), 40 + 5 + 1, "{}", t.name);
        assert_eq!(
            audit.len(),
            created.len() + 1,
            "{}: one row per create",
            t.name
        );
        for c in created {
            let id = &c.training.id;
            let got = t.db.get_training(id).await.unwrap().unwrap();
            assert_eq!(got, c.training, "{}", t.name);
            assert_eq!((got.state, got.last_event_seq), (JobState::Queued, 1));
            let transitions = t.db.transitions(id).await.unwrap();
            assert_eq!(transitions.len(), 1, "{}", t.name);
            assert_eq!(transitions[0].to, JobState::Queued);
            let events = t.db.events_after(id, 0, 10).await.unwrap();
            assert_eq!(events.len(), 1, "{}", t.name);
            assert!(
                matches!(&events[0].payload, EventPayload::StateChange(s) if s.to == JobState::Queued),
                "{}",
                t.name
            );
            assert!(
                audited_ids.contains(id.as_str()),
                "{}: no audit row for {id}",
                t.name
            );
        }
        // Every audit row of a create is the caller's entry about its training.
        for record in audit
            .iter()
            .filter(|r| r.entry.target != stored.training.id)
        {
            let team = record.entry.actor_team.clone();
            let expected = audited(&team, None).audit.unwrap();
            assert_eq!(
                record.entry,
                AuditEntry {
                    target: record.entry.target.clone(),
                    ..expected
                },
                "{}",
                t.name
            );
        }
        // The batch's labels were written for the label filter, row by row.
        let labelled = |pairs: &[(&str, &str)]| {
            t.db.list_trainings(cohort_coordinator::persistence::ListTrainings {
                limit: 100,
                labels: pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            })
        };
        assert_eq!(labelled(&[("burst", "nlp")]).await.unwrap().len(), 40);
        let seventh = labelled(&[("burst", "nlp"), ("i", "7")]).await.unwrap();
        assert_eq!(seventh.len(), 1, "{}", t.name);
        assert_eq!(seventh[0].request_id.as_deref(), Some("nlp-7"));
        assert_eq!(
            common::training_count(&t).await,
            40 + 5 + 1 + 1,
            "{}",
            t.name
        );
    }
}

/// Bursts of `n` concurrent creates for `team`; how many were created.
async fn burst(db: &cohort_coordinator::persistence::Persistence, team: &str, n: usize) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let db = db.clone();
            let new = audited(team, None);
            tokio::spawn(async move { db.create_training(new).await })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(c) if c.created => created += 1,
            Ok(_) => {}
            Err(DatabaseError::Logical(LogicalError::QueueFull { .. })) => {}
            Err(e) => panic!("{e}"),
        }
    }
    created
}

/// The create worker remembers each team's QUEUED count between batches
/// instead of counting the queue in every one: the cap still holds across
/// bursts, and a training that leaves the queue (or joins it) by another
/// way is seen by the next burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_across_batches_and_sees_other_state_changes() {
    for t in common::databases().await {
        t.db.set_quota(
            TeamQuota {
                team: "vision".into(),
                gpus: None,
                max_queued: Some(6),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
        assert_eq!(burst(&t.db, "vision", 4).await, 4, "{}", t.name);
        assert_eq!(burst(&t.db, "vision", 8).await, 2, "{}", t.name);
        assert_eq!(burst(&t.db, "vision", 8).await, 0, "{}", t.name);
        // Two leave the queue by a cancel: two places free up.
        let queued: Vec<String> =
            t.db.list_trainings(cohort_coordinator::persistence::ListTrainings {
                states: vec![JobState::Queued],
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        for id in &queued[..2] {
            t.db.transition(id, JobState::Cancelled, "test")
                .await
                .unwrap();
        }
        assert_eq!(burst(&t.db, "vision", 8).await, 2, "{}", t.name);
        assert_eq!(burst(&t.db, "vision", 8).await, 0, "{}", t.name);
    }
}

//! The numerics and the SAE's quality through the whole system (issue 11):
//! a diverging training restarts with a tenth of the learning rate and then
//! FAILS as diverged, never SUCCEEDED; a training with a validation set
//! reports its metrics, keeps a best checkpoint that ListCheckpoints marks
//! and DownloadCheckpoint serves, and its report shows the quality.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::s3::write_mixed_shards;
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_diverging_training_restarts_at_a_tenth_of_the_rate_then_fails_as_diverged() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let job = SaeJob {
        learning_rate: 1e30,
        steps: 400,
        checkpoint_every: 5,
        ..SaeJob::small()
    };
    let mut request = create_request(&job, 2, true);
    request.max_restarts = Some(1);
    let id = cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("CreateTraining")
        .into_inner()
        .id;
    let failed = cluster
        .wait_state(&id, State::Failed, Duration::from_secs(120))
        .await;
    assert!(
        failed
            .state_reason
            .starts_with("TRAINING_DIVERGED: restart budget of 1 spent"),
        "{}",
        failed.state_reason
    );
    assert_eq!(failed.attempt, 2);
    let rate = failed
        .config
        .as_ref()
        .and_then(|c| c.optim.as_ref())
        .and_then(|o| o.learning_rate);
    let rate = rate.expect("a learning rate");
    assert!(
        (rate / 1e29 - 1.0).abs() < 1e-12,
        "the second attempt ran at a tenth: {rate}"
    );

    let mut client = cluster.training().await;
    let watched = watch_to_end(&mut client, &id, Duration::from_secs(30)).await;
    let restarting: Vec<String> = watched
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::StateChange(c)) if c.to() == State::Restarting => Some(c.reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(restarting.len(), 1, "{restarting:?}");
    assert!(
        restarting[0].starts_with("TRAINING_DIVERGED: rank ")
            && restarting[0].ends_with("learning rate 1e30 -> 1e29 for the next attempt"),
        "{}",
        restarting[0]
    );
    let diverged: Vec<(i32, i64)> = watched
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Diverged(d)) => Some((e.attempt, d.nonfinite_steps)),
            _ => None,
        })
        .collect();
    assert_eq!(
        diverged,
        vec![(1, 11), (2, 11)],
        "each attempt said why it stopped"
    );
    assert!(
        !watched
            .state_changes()
            .iter()
            .any(|(_, to)| *to == State::Succeeded),
        "never SUCCEEDED"
    );
    assert!(!watched
        .events
        .iter()
        .any(|e| matches!(e.event, Some(Event::Finished(_)))));
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_metrics_and_the_best_checkpoint_reach_the_api_and_the_cli() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let val = write_mixed_shards(cluster.root(), 32);
    let job = SaeJob {
        steps: 40,
        checkpoint_every: 10,
        model_extra: "architecture = \"topk\"\nk = 4".into(),
        tables: format!("\n[validation]\npaths = [\"{}\"]\n", val.display()),
        ..SaeJob::small()
    };
    let config = job.write(cluster.root(), "val.toml");
    let id = cluster.submit(&config, &["--gpus", "2"]).await;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;

    let mut client = cluster.training().await;
    let watched = watch_to_end(&mut client, &id, Duration::from_secs(30)).await;
    let validations: Vec<v1::ValidationEvent> = watched
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Validation(v)) => Some(*v),
            _ => None,
        })
        .collect();
    assert_eq!(
        validations.iter().map(|v| v.step).collect::<Vec<_>>(),
        vec![10, 20, 30, 40]
    );
    assert!(validations.iter().all(|v| v.samples == 900 && v.l0 <= 4.0));
    let best = validations
        .iter()
        .min_by(|a, b| a.loss.total_cmp(&b.loss))
        .unwrap();
    let last = watched.progress().pop().expect("progress");
    assert!(last.l0 > 0.0 && last.l0 <= 4.0, "{last:?}");
    assert!(last.explained_variance > 0.0 && last.learning_rate > 0.0);

    let listed = client
        .list_checkpoints(v1::ListCheckpointsRequest {
            training_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert!(listed[0].best, "the best comes first: {listed:?}");
    assert_eq!(listed[0].step, best.step);
    assert_eq!(listed.iter().filter(|c| c.best).count(), 1);
    assert!(listed[1..].iter().all(|c| !c.best));

    let out = tempfile::tempdir().unwrap();
    let printed = cluster
        .cli_ok(&[
            "checkpoints",
            "download",
            &id,
            "--best",
            "--out",
            out.path().to_str().unwrap(),
        ])
        .await;
    assert!(
        printed.contains(&format!("checkpoint step {}", best.step)),
        "{printed}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["validation"]["loss"].as_f64(), Some(best.loss));

    let report = cluster.cli_ok(&["train", "report", &id]).await;
    assert!(report.contains("quality L0 "), "{report}");
    assert!(
        report.contains(&format!("validation (best, step {})", best.step)),
        "{report}"
    );
    let listing = cluster.cli_ok(&["checkpoints", &id]).await;
    assert!(
        listing.contains(&format!("{} (best)", best.step)),
        "{listing}"
    );
}

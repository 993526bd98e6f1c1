//! The examples a new team starts from, run through cohort: the LSTM PPO
//! agent under DDP learns, and its report shows it.

use cohort_integration_tests::program::*;
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use std::time::Duration;

/// The LSTM PPO example under DDP (one environment per rank, its own seed,
/// rank-0 checkpoints through the cohort_train helper): it succeeds and its
/// report shows the episode return rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ppo_example_learns_and_its_report_shows_the_return_rising() {
    let cluster = cluster().await;
    let dir = programs_root().join("ppo");
    let mut request = torch_ddp(&[], 2);
    let program = request.config.as_mut().unwrap().program.as_mut().unwrap();
    program.command = vec![
        cohort_testkit::python().display().to_string(),
        dir.join("train.py").display().to_string(),
        "--iterations".into(),
        "60".into(),
    ];
    program.working_dir = dir.display().to_string();
    let id = cluster.create(request).await;
    let done = cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(240))
        .await;
    assert_eq!(done.restart_count, 0, "{}", done.state_reason);
    let report = cluster
        .training()
        .await
        .get_training_report(v1::GetTrainingReportRequest {
            id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("GetTrainingReport")
        .into_inner();
    let summary = report.summary.expect("a summary");
    assert_eq!((summary.steps, summary.total_steps), (60, 60));
    let ret = summary
        .program_metrics
        .iter()
        .find(|m| m.name == "episode_return")
        .expect("the episode return in the report");
    assert_eq!(ret.points, 61, "60 progress lines and the finished one");
    // A guess earns 0.5; remembering the cue earns 1.
    assert!(ret.first < 0.7, "{ret:?}");
    assert!(ret.last >= 0.9 && ret.last > ret.first + 0.2, "{ret:?}");
    let checkpoints = checkpoints(&cluster, &id).await;
    assert_eq!(checkpoints.first().map(|c| c.step), Some(60));
}

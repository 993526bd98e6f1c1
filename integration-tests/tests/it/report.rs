//! Job reports end to end, on SQLite and PostgreSQL: a 1-rank and a 2-rank
//! training of the same config run to SUCCEEDED on real cohort-rank
//! processes; GetTrainingReport and `cohort train report` give the summary
//! and the scaling row of the 2-rank run against the 1-rank one; the cost
//! analysis prices the simulated GPUs (`--gpu-price`); the report files are
//! in the data dir.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use std::time::Duration;
use tonic::Code;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

async fn run_to_success(cluster: &Cluster, job: &SaeJob, ranks: i32) -> String {
    let mut client = cluster.training().await;
    let id = client
        .create_training(create_request(job, ranks, true))
        .await
        .expect("create")
        .into_inner()
        .id;
    cluster.wait_state(&id, State::Succeeded, JOB_TIMEOUT).await;
    id
}

async fn report(cluster: &Cluster, id: &str) -> v1::TrainingReport {
    cluster
        .training()
        .await
        .get_training_report(v1::GetTrainingReportRequest {
            id: id.to_string(),
            omit_metrics: false,
        })
        .await
        .expect("GetTrainingReport")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_of_one_and_two_rank_runs_sqlite() {
    one_and_two_rank_runs(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_of_one_and_two_rank_runs_postgres() {
    one_and_two_rank_runs(Backend::Postgres).await;
}

async fn one_and_two_rank_runs(backend: Backend) {
    let mut options = ClusterOptions::new(backend, 1);
    // Matches the simulated GPUs' model ("cohort simulated gpu ..."), ignoring case.
    options.coordinator_args = vec!["--gpu-price".into(), "H100=2.5,SIMULATED GPU=1.5".into()];
    let cluster = Cluster::start(options).await;
    // long enough (a few seconds) for several telemetry samples of each rank's
    // GPU to land while the job holds it, even on an idle machine
    let job = SaeJob {
        steps: 900,
        ..SaeJob::small()
    };
    let one = run_to_success(&cluster, &job, 1).await;
    let two = run_to_success(&cluster, &job, 2).await;

    let r = report(&cluster, &two).await;
    assert_eq!(r.training_id, two);
    assert_eq!(r.state(), State::Succeeded);
    assert!(r.r#final);
    let s = r.summary.clone().expect("a summary");
    assert_eq!(s.world_size, 2);
    assert_eq!(s.attempts, 1);
    assert_eq!(s.steps, job.steps);
    assert_eq!(s.total_steps, job.steps);
    assert!(s.final_loss.is_some_and(f64::is_finite), "{s:?}");
    // A window every log_every steps (and the first step's).
    assert!(
        s.progress_windows >= (job.steps / job.log_every) as u64,
        "{s:?}"
    );
    let (mean, best) = (
        s.mean_samples_per_sec.unwrap(),
        s.best_samples_per_sec.unwrap(),
    );
    assert!(mean > 0.0 && best >= mean, "{s:?}");
    let (p50, p90, p99) = (
        s.step_time_p50_ms.unwrap(),
        s.step_time_p90_ms.unwrap(),
        s.step_time_p99_ms.unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{s:?}");
    assert!(s.training_time_s.is_some_and(|t| t > 0.0) && s.wall_time_s > 0.0);
    let ranks: Vec<i32> = s.ranks.iter().map(|k| k.rank).collect();
    assert_eq!(ranks, [0, 1], "{s:?}");
    for rank in &s.ranks {
        assert!(rank.stats_windows > 0, "{rank:?}");
        let (compute, comm) = (rank.compute_share.unwrap(), rank.comm_share.unwrap());
        assert!((compute + comm - 1.0).abs() < 1e-9, "{rank:?}");
        assert!(rank.peak_memory_bytes > 0, "{rank:?}");
    }

    // Each rank's GPU, from the telemetry history (samples land in batches).
    let gpus = eventually(
        "telemetry of both ranks",
        Duration::from_secs(20),
        || async {
            let s = report(&cluster, &two).await.summary.unwrap();
            match s.ranks.iter().all(|k| k.gpu_samples > 0) {
                true => Ok(s.ranks),
                false => Err(format!("{:?}", s.ranks)),
            }
        },
    )
    .await;
    for rank in &gpus {
        assert_eq!(rank.gpu_uuids.len(), 1, "{rank:?}");
        assert!(rank.gpu_memory_total_bytes > 0, "{rank:?}");
        assert!(rank.gpu_memory_used_max_bytes >= rank.gpu_memory_used_mean_bytes);
        let (mean, max) = (
            rank.gpu_utilization_mean_percent.unwrap(),
            rank.gpu_utilization_max_percent.unwrap(),
        );
        assert!((0.0..=100.0).contains(&mean) && mean <= max, "{rank:?}");
    }
    assert_ne!(gpus[0].gpu_uuids, gpus[1].gpu_uuids);

    // The scaling row of 2 ranks against the 1-rank run.
    let scaling = r.scaling.clone().expect("a scaling report");
    assert_eq!(scaling.baseline_training_id, one, "{scaling:?}");
    assert!(scaling.note.is_empty(), "{scaling:?}");
    let rows: Vec<(i32, &str, bool)> = scaling
        .rows
        .iter()
        .map(|row| (row.world_size, row.training_id.as_str(), row.current))
        .collect();
    assert_eq!(rows, [(1, one.as_str(), false), (2, two.as_str(), true)]);
    let base = report(&cluster, &one).await;
    assert!(base.scaling.as_ref().unwrap().estimates.is_empty());
    let base_throughput = base.summary.unwrap().mean_samples_per_sec.unwrap();
    let row = &scaling.rows[1];
    assert_eq!(row.samples_per_sec, Some(mean));
    let speedup = row.speedup.expect("a speed-up");
    assert!((speedup - mean / base_throughput).abs() < 1e-9, "{row:?}");
    assert!(
        (row.efficiency.unwrap() - speedup / 2.0).abs() < 1e-9,
        "{row:?}"
    );
    assert_eq!(scaling.rows[0].speedup, Some(1.0));
    // The estimate at 2, 4 and 8 GPUs from the 2-rank run's own times; the
    // 1-rank run measured no communication and has none.
    let sizes: Vec<i32> = scaling.estimates.iter().map(|e| e.world_size).collect();
    assert_eq!(sizes, [2, 4, 8], "{scaling:?}");
    for e in &scaling.estimates {
        assert!(e.efficiency > 0.0 && e.efficiency <= 1.0, "{e:?}");
        assert!(
            (e.speedup - e.efficiency * f64::from(e.world_size)).abs() < 1e-9,
            "{e:?}"
        );
    }
    assert!(scaling.estimates[2].efficiency <= scaling.estimates[0].efficiency);

    // The cost: 2 GPUs from placement to the end, priced by the second pattern.
    let cost = r.cost.clone().expect("a cost analysis");
    assert_eq!(cost.attempts.len(), 1, "{cost:?}");
    assert_eq!(cost.attempts[0].gpus, 2);
    let held_h = s.wall_time_s / 3600.0;
    assert!(
        cost.gpu_hours >= 2.0 * held_h * 0.9 && cost.gpu_hours > 0.0,
        "{cost:?} vs {held_h} h"
    );
    assert!(
        cost.idle_gpu_hours > 0.0 && cost.idle_gpu_hours < cost.gpu_hours,
        "{cost:?}"
    );
    assert!(cost.gpu_model.contains("simulated"), "{cost:?}");
    let price = cost.price.clone().expect("a price");
    assert_eq!(
        (price.pattern.as_str(), price.usd_per_gpu_hour),
        ("SIMULATED GPU", 1.5)
    );
    assert!(
        (cost.cost_usd.unwrap() - 1.5 * cost.gpu_hours).abs() < 1e-12,
        "{cost:?}"
    );
    assert_eq!(
        cost.samples,
        job.steps as u64 * 2 * job.batch_size as u64,
        "{cost:?}"
    );
    let per_million = cost.cost_per_million_samples_usd.unwrap();
    assert!((per_million - cost.cost_usd.unwrap() / (cost.samples as f64 / 1e6)).abs() < 1e-9);

    // metrics.jsonl: every rank line, progress among them.
    let text = String::from_utf8(r.metrics_jsonl.clone()).expect("UTF-8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let count = |event: &str| lines.iter().filter(|l| l["event"] == event).count();
    assert_eq!(count("progress") as u64, s.progress_windows);
    assert_eq!(count("started"), 1);
    assert_eq!(count("finished"), 1);
    assert_eq!(count("rank_finished"), 2);
    assert!(lines
        .iter()
        .all(|l| l["seq"].as_i64().unwrap() > 0 && l["time"].is_string()));

    // The report files, written when each job ended.
    let line_count = lines.len();
    let dir = cluster
        .root()
        .join("coordinator")
        .join("reports")
        .join(&two);
    let summary: serde_json::Value =
        eventually("the report files", Duration::from_secs(20), || {
            let dir = dir.clone();
            async move {
                let metrics = std::fs::read_to_string(dir.join("metrics.jsonl"))
                    .map_err(|e| format!("metrics.jsonl: {e}"))?;
                let summary = std::fs::read_to_string(dir.join("summary.json"))
                    .map_err(|e| format!("summary.json: {e}"))?;
                assert_eq!(metrics.lines().count(), line_count, "metrics.jsonl lines");
                serde_json::from_str(&summary).map_err(|e| format!("summary.json: {e}"))
            }
        })
        .await;
    assert_eq!(summary["training_id"], two.as_str());
    assert_eq!(summary["final"], true);
    assert_eq!(summary["state"], "SUCCEEDED");
    assert_eq!(summary["summary"]["steps"], job.steps);
    assert_eq!(summary["scaling"]["baseline_training_id"], one.as_str());
    assert!(cluster
        .root()
        .join("coordinator/reports")
        .join(&one)
        .join("summary.json")
        .is_file());
    let written: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("cost_analysis.json")).expect("cost_analysis.json"),
    )
    .expect("JSON");
    assert_eq!(written["price"]["usd_per_gpu_hour"], 1.5);
    assert_eq!(written["attempts"][0]["gpus"], 2);
    assert!(written["cost_usd"].as_f64().unwrap() > 0.0, "{written}");

    // The CLI: the summary and the scaling table; JSON for scripts.
    let table = cluster.cli_ok(&["train", "report", &two]).await;
    println!("{table}");
    assert!(
        table.starts_with(&format!("training {two}  SUCCEEDED\n")),
        "{table}"
    );
    assert!(
        table.contains(&format!("steps {0}/{0}", job.steps)),
        "{table}"
    );
    assert!(table.contains(&format!("vs 1-rank {one}")), "{table}");
    assert!(table.contains(&format!("{two} *")), "{table}");
    let json: serde_json::Value = serde_json::from_str(
        &cluster
            .cli_ok(&["-o", "json", "train", "report", &two])
            .await,
    )
    .expect("JSON");
    assert_eq!(json["summary"]["steps"], job.steps);
    assert_eq!(json["cost"]["price"]["pattern"], "SIMULATED GPU");
    assert!(
        json["cost"]["cost_per_million_samples_usd"]
            .as_f64()
            .is_some(),
        "{json}"
    );
    assert!(
        table.contains("cost: ") && table.contains("$1.50/GPU-hour"),
        "{table}"
    );
    // (serde_json's default float parsing may be off by an ulp.)
    let printed = json["scaling"]["rows"][1]["speedup"].as_f64().unwrap();
    assert!((printed - speedup).abs() < 1e-9, "{json}");
    let metrics = cluster
        .cli_ok(&["train", "report", &two, "--metrics"])
        .await;
    assert_eq!(metrics.lines().count(), lines.len());

    // A training that has not ended: allowed, not final.
    let mut client = cluster.training().await;
    let running = client
        .create_training(create_request(&job, 2, true))
        .await
        .expect("create")
        .into_inner()
        .id;
    let r = report(&cluster, &running).await;
    assert!(!r.r#final, "{r:?}");
    assert!(
        [State::Queued, State::Scheduled, State::Running].contains(&r.state()),
        "{r:?}"
    );
    let scaling = r.scaling.unwrap();
    assert_eq!(scaling.baseline_training_id, one);
    assert!(scaling
        .rows
        .iter()
        .any(|row| row.current && row.training_id == running));
    client
        .cancel_training(v1::CancelTrainingRequest {
            id: running.clone(),
            reason: "test over".into(),
        })
        .await
        .expect("cancel");

    // An unknown training.
    let err = client
        .get_training_report(v1::GetTrainingReportRequest {
            id: "trn-nope".into(),
            omit_metrics: true,
        })
        .await;
    expect_error(
        "an unknown training",
        err,
        Code::NotFound,
        cohort_proto::error::Reason::TrainingNotFound,
    );
}

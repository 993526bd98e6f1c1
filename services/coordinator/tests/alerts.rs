//! Alerts end to end: the real server on 127.0.0.1:0, a real `cohort-agent`
//! with simulated GPUs whose temperature and XID errors a file scripts, and WatchAlerts
//! over real gRPC. Also the alert rows on SQLite and PostgreSQL.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

mod agent_proc;
mod common;

use chrono::{Duration as ChronoDuration, SubsecRound, Utc};
use cohort_coordinator::alerts::{Alert, AlertKind, AlertSettings, RunningTraining, Severity};
use cohort_coordinator::context::Context;
use cohort_proto::v1;
use cohort_proto::v1::telemetry_service_client::TelemetryServiceClient;
use cohort_proto::v1::watch_alerts_response::Event;
use std::time::Duration;
use tonic::Streaming;

/// How long any one expected event may take (generous for a loaded CI box).
const WAIT: Duration = Duration::from_secs(30);

async fn next_event(stream: &mut Streaming<v1::WatchAlertsResponse>) -> Event {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("an alert event within the wait")
        .expect("the stream is healthy")
        .expect("the stream is open")
        .event
        .expect("an event")
}

async fn next_alert(stream: &mut Streaming<v1::WatchAlertsResponse>) -> v1::Alert {
    match next_event(stream).await {
        Event::Alert(a) => a,
        other => panic!("expected an alert, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_simulated_gpu_raises_and_clears_an_alert_seen_by_watch_alerts() {
    let db = common::sqlite().await;
    let settings = AlertSettings {
        agent_grace: Duration::from_secs(1),
        ecc_quiet: Duration::from_secs(1),
        tick_interval: Duration::from_millis(100),
        ..AlertSettings::default()
    };
    let ctx = Context::new(db.db.clone()).with_alert_settings(settings);
    let server = common::server::TestServer::start(ctx).await;
    let url = server.url.clone();

    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("overrides");
    std::fs::write(&overrides, "").unwrap();
    let mut client = TelemetryServiceClient::new(cohort_proto::channel(&url).await.unwrap());
    let mut alerts = client
        .watch_alerts(v1::WatchAlertsRequest {
            include_active: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    match next_event(&mut alerts).await {
        Event::CaughtUp(c) => assert_eq!(c.active_count, 0),
        other => panic!("expected caught_up first, got {other:?}"),
    }

    let mut agent =
        agent_proc::Agent::start(&url, "hot-agent", &overrides, &dir.path().join("work"));
    std::fs::write(&overrides, "0 temperature_c 90\n").unwrap();
    let raised = next_alert(&mut alerts).await;
    assert_eq!(raised.kind, "GPU_TEMPERATURE_HIGH");
    assert_eq!(raised.severity, v1::AlertSeverity::Warning as i32);
    assert_eq!(raised.value, Some(90.0));
    assert_eq!(raised.threshold, Some(85.0));
    assert!(
        raised.gpu_uuid.starts_with("GPU-SIM-"),
        "{}",
        raised.gpu_uuid
    );
    assert!(raised.agent_id.starts_with("agt-"), "{}", raised.agent_id);
    assert!(raised.raise_time.is_some() && raised.resolve_time.is_none());
    // Stored as a row before watchers hear of it.
    let stored = db.db.active_alerts().await.unwrap();
    assert_eq!(
        stored.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec![raised.id.as_str()]
    );

    std::fs::write(&overrides, "0 temperature_c 60\n").unwrap();
    let cleared = next_alert(&mut alerts).await;
    assert_eq!(cleared.id, raised.id);
    assert_eq!(cleared.kind, "GPU_TEMPERATURE_HIGH");
    assert!(cleared.resolve_time.is_some());
    assert!(db.db.active_alerts().await.unwrap().is_empty());

    // Two critical XID errors (the GPU's counter was 0 so far): raised
    // at once, resolved after the (1 s) quiet window without more.
    std::fs::write(
        &overrides,
        "0 temperature_c 60\n0 xid_errors 2\n0 last_xid 79\n",
    )
    .unwrap();
    let xid = next_alert(&mut alerts).await;
    assert_eq!(xid.kind, "GPU_XID_ERROR");
    assert_eq!(xid.severity, v1::AlertSeverity::Critical as i32);
    assert_eq!((xid.value, xid.threshold), (Some(2.0), Some(0.0)));
    assert!(
        xid.message
            .contains("2 new critical XID error(s) (last: XID 79)"),
        "{}",
        xid.message
    );
    assert_eq!(xid.gpu_uuid, raised.gpu_uuid);
    let quiet = next_alert(&mut alerts).await;
    assert_eq!(
        (quiet.id.as_str(), quiet.resolve_time.is_some()),
        (xid.id.as_str(), true)
    );

    // The agent vanishes: AGENT_LOST once the (1 s) grace has passed.
    agent.kill();
    let lost = next_alert(&mut alerts).await;
    assert_eq!(lost.kind, "AGENT_LOST");
    assert_eq!(lost.severity, v1::AlertSeverity::Critical as i32);
    assert_eq!(lost.agent_id, raised.agent_id);

    // A new watcher asking for the last hour: the resolved alert, the
    // active one, then caught_up; filtered by severity, only the critical one.
    let mut replay = client
        .watch_alerts(v1::WatchAlertsRequest {
            include_active: true,
            resolved_within: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = next_alert(&mut replay).await;
    assert_eq!(
        (first.id.as_str(), first.resolve_time.is_some()),
        (raised.id.as_str(), true)
    );
    let second = next_alert(&mut replay).await;
    assert_eq!(
        (second.id.as_str(), second.resolve_time.is_some()),
        (xid.id.as_str(), true)
    );
    let third = next_alert(&mut replay).await;
    assert_eq!(
        (third.id.as_str(), third.resolve_time.is_none()),
        (lost.id.as_str(), true)
    );
    match next_event(&mut replay).await {
        Event::CaughtUp(c) => assert_eq!(c.active_count, 1),
        other => panic!("expected caught_up, got {other:?}"),
    }
    let mut critical = client
        .watch_alerts(v1::WatchAlertsRequest {
            include_active: true,
            min_severity: v1::AlertSeverity::Critical as i32,
            resolved_within: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next_alert(&mut critical).await.id, xid.id);
    assert_eq!(next_alert(&mut critical).await.id, lost.id);
    assert!(matches!(
        next_event(&mut critical).await,
        Event::CaughtUp(_)
    ));

    server.stop().await;
}

fn alert(kind: AlertKind, subject: &str) -> Alert {
    Alert {
        id: format!("alr-{}", uuid::Uuid::new_v4().simple()),
        kind,
        severity: kind.severity(),
        message: format!("{kind} on {subject}"),
        agent_id: Some("agt-x".into()),
        gpu_uuid: kind.is_gpu().then(|| subject.to_string()),
        training_id: None,
        value: Some(91.5),
        threshold: Some(85.0),
        raise_time: Utc::now().trunc_subsecs(6) - ChronoDuration::seconds(10),
        resolve_time: None,
    }
}

#[tokio::test]
async fn alert_rows_round_trip_on_both_backends() {
    for t in common::databases().await {
        let db = &t.db;
        let hot = alert(AlertKind::GpuTemperatureHigh, "GPU-1");
        let lost = alert(AlertKind::AgentLost, "agt-x");
        db.record_alert(&hot).await.unwrap();
        db.record_alert(&lost).await.unwrap();
        let active = db.active_alerts().await.unwrap();
        assert_eq!(active.len(), 2, "{}", t.name);
        assert!(
            active.contains(&hot) && active.contains(&lost),
            "{}",
            t.name
        );

        let mut resolved = hot.clone();
        resolved.resolve_time = Some(Utc::now().trunc_subsecs(6));
        db.record_alert(&resolved).await.unwrap();
        assert_eq!(
            db.active_alerts().await.unwrap(),
            vec![lost.clone()],
            "{}",
            t.name
        );
        let since = Utc::now() - ChronoDuration::minutes(1);
        assert_eq!(
            db.alerts_resolved_since(since, 10).await.unwrap(),
            vec![resolved.clone()],
            "{}",
            t.name
        );
        let later = Utc::now() + ChronoDuration::minutes(1);
        assert!(db
            .alerts_resolved_since(later, 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(resolved.severity, Severity::Warning);
        // No trainings: nothing RUNNING to check for stalls.
        assert_eq!(
            db.running_activity().await.unwrap(),
            Vec::<RunningTraining>::new()
        );
        assert!(db.count_trainings_by_state().await.unwrap().is_empty());
    }
}

const CONFIG: &str = r#"
[model]
d_in = 16
[optim]
batch_size = 8
steps = 20
[data.synthetic]
num_samples = 256
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_activity_is_the_newest_progress_or_the_entry_into_running() {
    use cohort_coordinator::model::{EventPayload, GpuRequest, GpuSelection, JobState};
    use cohort_coordinator::persistence::NewTraining;
    use cohort_spec::progress::{Progress, ProgressLine};
    for t in common::databases().await {
        let db = &t.db;
        let new = || NewTraining {
            request_id: None,
            display_name: "stall".into(),
            config: cohort_spec::TrainingConfig::from_toml(CONFIG)
                .unwrap()
                .into(),
            gpu_request: GpuRequest {
                selection: GpuSelection::Count { count: 1 },
                queue: true,
            },
            priority: 0,
            priority_class: String::new(),
            borrow: true,
            max_restarts: 0,
            trace_context: None,
            team: String::new(),
            creator: "anonymous".into(),
            labels: Default::default(),
            audit: None,
            max_queued: None,
        };
        let quiet = db.create_training(new()).await.unwrap().training.id;
        let busy = db.create_training(new()).await.unwrap().training.id;
        let queued = db.create_training(new()).await.unwrap().training.id;
        for id in [&quiet, &busy] {
            db.transition(id, JobState::Scheduled, "placed")
                .await
                .unwrap();
            db.transition(id, JobState::Running, "group formed")
                .await
                .unwrap();
        }
        let entered = db.transitions(&quiet).await.unwrap().last().unwrap().at;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let progress = ProgressLine::Progress(Progress {
            step: 5,
            total_steps: 20,
            loss: 1.0,
            mse: 1.0,
            samples_per_sec: 100.0,
            step_time_ms: 10.0,
            learning_rate: 0.001,
            grad_norm: 1.0,
            l0: 8.0,
            explained_variance: 0.9,
            ..Progress::default()
        });
        let event = db
            .append_event(&busy, 1, EventPayload::Rank(progress))
            .await
            .unwrap();
        let mut running = db.running_activity().await.unwrap();
        running.sort_by(|a, b| a.id.cmp(&b.id));
        let mut expected = vec![
            RunningTraining {
                id: quiet.clone(),
                last_activity: entered,
                batches_per_step: 1,
            },
            RunningTraining {
                id: busy.clone(),
                last_activity: event.time,
                batches_per_step: 1,
            },
        ];
        expected.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(running, expected, "{}", t.name);
        assert!(!running.iter().any(|r| r.id == queued));
        let counts = db.count_trainings_by_state().await.unwrap();
        assert!(counts.contains(&("RUNNING".to_string(), 2)), "{counts:?}");
        assert!(counts.contains(&("QUEUED".to_string(), 1)), "{counts:?}");
    }
}

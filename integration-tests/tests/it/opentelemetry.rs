//! OpenTelemetry end to end, with the real binaries exporting over OTLP to a
//! receiver in the test: a training is one trace, from the caller's request
//! (its `traceparent` metadata) through the coordinator's lifecycle spans to
//! the agent that starts the ranks; the coordinator's metrics arrive too.
//! And a collector that is absent changes nothing.

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::otlp::{attribute, OtlpReceiver, ReceivedMetric, ReceivedSpan};
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1::training::State;
use cohort_testkit::eventually;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, NumberDataPoint};
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const EXPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// The caller's trace and span, as its `traceparent` metadata names them.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
const SERVER_KIND: i32 = 2;

fn otel_env(endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into()),
        // export spans every 200 ms and metrics every 500 ms, not 5 s / 60 s
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL".into(), "500".into()),
    ]
}

async fn create_traced(cluster: &Cluster, job: &SaeJob, ranks: i32) -> String {
    let mut request = tonic::Request::new(create_request(job, ranks, true));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{TRACE}-{CALLER_SPAN}-01").parse().unwrap(),
    );
    cluster
        .training()
        .await
        .create_training(request)
        .await
        .expect("create")
        .into_inner()
        .id
}

fn one<'a>(
    spans: &'a [ReceivedSpan],
    name: &str,
    training: &str,
) -> Result<&'a ReceivedSpan, String> {
    let found: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.span.name == name)
        .filter(|s| s.attribute("training.id").is_none_or(|t| t == training))
        .collect();
    match found.as_slice() {
        [span] => Ok(span),
        [] => Err(format!(
            "no {name} span yet; have {:?}",
            spans
                .iter()
                .map(|s| s.span.name.as_str())
                .collect::<Vec<_>>()
        )),
        many => Err(format!("{} {name} spans", many.len())),
    }
}

fn points<'a>(metrics: &'a [ReceivedMetric], name: &str) -> Vec<&'a NumberDataPoint> {
    metrics
        .iter()
        .filter(|m| m.metric.name == name)
        .flat_map(|m| match &m.metric.data {
            Some(metric::Data::Gauge(g)) => g.data_points.iter().collect::<Vec<_>>(),
            Some(metric::Data::Sum(s)) => s.data_points.iter().collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn value(point: &NumberDataPoint) -> f64 {
    match point.value {
        Some(number_data_point::Value::AsDouble(d)) => d,
        Some(number_data_point::Value::AsInt(i)) => i as f64,
        None => f64::NAN,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_is_one_trace_from_the_callers_request_to_the_agent() {
    let receiver = OtlpReceiver::start().await;
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.env = otel_env(&receiver.endpoint);
    let cluster = Cluster::start(options).await;
    let id = create_traced(&cluster, &SaeJob::small(), 2).await;
    cluster.wait_state(&id, State::Succeeded, JOB_TIMEOUT).await;

    let spans = eventually("the lifecycle and agent spans", EXPORT_TIMEOUT, || {
        let spans = receiver.spans();
        let id = id.clone();
        async move {
            for name in [
                "training.queued",
                "training.attempt",
                "training.start",
                "training.first_step",
                "agent.start_ranks",
            ] {
                one(&spans, name, &id)?;
            }
            Ok(spans)
        }
    })
    .await;

    // The coordinator's server span continues the caller's trace.
    let create = spans
        .iter()
        .find(|s| s.span.name == "cohort.v1.TrainingService/CreateTraining")
        .expect("a CreateTraining server span");
    assert_eq!(create.service, "cohort-coordinator");
    assert_eq!(create.span.kind, SERVER_KIND);
    assert_eq!(create.trace_id(), TRACE);
    assert_eq!(create.parent_span_id(), CALLER_SPAN);
    assert_eq!(
        create.attribute("rpc.method").as_deref(),
        Some("CreateTraining")
    );
    assert_eq!(
        create.attribute("rpc.grpc.status_code").as_deref(),
        Some("0")
    );

    // The lifecycle: the wait and the attempt under the create call, the
    // attempt's phases under the attempt.
    let queued = one(&spans, "training.queued", &id).unwrap();
    let attempt = one(&spans, "training.attempt", &id).unwrap();
    let start = one(&spans, "training.start", &id).unwrap();
    let first_step = one(&spans, "training.first_step", &id).unwrap();
    for span in [queued, attempt, start, first_step] {
        assert_eq!(span.trace_id(), TRACE, "{}", span.span.name);
        assert_eq!(span.service, "cohort-coordinator");
        assert_eq!(span.attribute("training.attempt").as_deref(), Some("1"));
    }
    assert_eq!(queued.parent_span_id(), create.span_id());
    assert_eq!(attempt.parent_span_id(), create.span_id());
    assert_eq!(start.parent_span_id(), attempt.span_id());
    assert_eq!(first_step.parent_span_id(), attempt.span_id());
    assert!(start.span.end_time_unix_nano <= first_step.span.start_time_unix_nano);
    assert!(first_step.attribute("training.step").is_some());
    assert_eq!(
        attempt.attribute("training.world_size").as_deref(),
        Some("2")
    );

    // The trace context crossed to the agent process.
    let agent = one(&spans, "agent.start_ranks", &id).unwrap();
    assert_eq!(agent.service, "cohort-agent");
    assert_eq!(agent.trace_id(), TRACE);
    assert_eq!(agent.parent_span_id(), start.span_id());

    // Metrics: RPC latency, trainings by state, GPU gauges with the agent.
    eventually("the coordinator's metrics", EXPORT_TIMEOUT, || {
        let metrics = receiver.metrics();
        async move {
            let rpc = metrics
                .iter()
                .filter(|m| m.metric.name == "rpc.server.call.duration")
                .filter_map(|m| match &m.metric.data {
                    Some(metric::Data::Histogram(h)) => Some(h),
                    _ => None,
                })
                .flat_map(|h| h.data_points.iter())
                .any(|p| {
                    attribute(&p.attributes, "rpc.method").as_deref() == Some("CreateTraining")
                        && p.count >= 1
                });
            if !rpc {
                return Err("no rpc.server.call.duration point for CreateTraining".into());
            }
            let db_op = metrics
                .iter()
                .filter(|m| m.metric.name == "cohort.db.operation.duration")
                .filter_map(|m| match &m.metric.data {
                    Some(metric::Data::Histogram(h)) => Some(h),
                    _ => None,
                })
                .flat_map(|h| h.data_points.iter())
                .any(|p| {
                    attribute(&p.attributes, "db.operation").as_deref() == Some("create_training")
                        && p.count >= 1
                });
            if !db_op {
                return Err("no cohort.db.operation.duration point for create_training".into());
            }
            let succeeded = points(&metrics, "cohort.trainings").into_iter().any(|p| {
                attribute(&p.attributes, "state").as_deref() == Some("SUCCEEDED") && value(p) >= 1.0
            });
            if !succeeded {
                return Err("cohort.trainings has no SUCCEEDED training yet".into());
            }
            let gpus = points(&metrics, "gpu.memory.total")
                .into_iter()
                .filter(|p| attribute(&p.attributes, "agent").as_deref() == Some("agent-0"))
                .count();
            if gpus == 0 {
                return Err("no gpu.memory.total point of agent-0".into());
            }
            for name in [
                "cohort.telemetry.samples",
                "cohort.telemetry.watchers",
                "cohort.agents.connected",
            ] {
                if points(&metrics, name).is_empty() {
                    return Err(format!("no {name}"));
                }
            }
            Ok(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_collector_changes_nothing() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.env = otel_env(&format!("http://127.0.0.1:{port}"));
    let cluster = Cluster::start(options).await;
    let id = create_traced(&cluster, &SaeJob::small(), 2).await;
    cluster.wait_state(&id, State::Succeeded, JOB_TIMEOUT).await;
    let got = cluster.get_training(&id).await;
    assert_eq!(got.state(), State::Succeeded);
}

//! The coordinator's trace context reaches the agent and its ranks: the
//! agent's `agent.start_ranks` span is a child of the span named in
//! StartRanks (read back from an in-memory OpenTelemetry exporter), and each
//! rank process gets it as TRACEPARENT. A malformed context starts a new
//! trace instead of failing the command.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use cohort_proto::v1::coordinator_message::Message as In;
use cohort_proto::v1::rank_event::Kind;
use common::*;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// A rank that records the trace context it was given, then waits.
const TRACED_RANK: &str = r#"
echo "$TRACEPARENT" > "traceparent-$RANK"
sleep 1000 &
wait
"#;

fn install_exporter() -> InMemorySpanExporter {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).expect("first subscriber");
    exporter
}

fn with_context(command: In, traceparent: &str) -> In {
    match command {
        In::StartRanks(mut start) => {
            start.trace_context = HashMap::from([("traceparent".into(), traceparent.into())]);
            In::StartRanks(start)
        }
        other => other,
    }
}

async fn agent_span(exporter: &InMemorySpanExporter, training: &str) -> SpanData {
    let what = format!("an agent span for {training}");
    cohort_testkit::eventually(&what, WAIT, || async {
        let spans = exporter.get_finished_spans().unwrap();
        let count = spans.len();
        spans
            .into_iter()
            .find(|s| {
                s.name == "agent.start_ranks"
                    && s.attributes
                        .iter()
                        .any(|kv| kv.key.as_str() == "training.id" && kv.value.as_str() == training)
            })
            .ok_or(format!("none among {count} spans"))
    })
    .await
}

async fn started(session: &mut Session, training: &str, ranks: usize) {
    let mut seen = 0;
    while seen < ranks {
        let event = session.next_rank_event().await;
        if event.training_id == training && matches!(event.kind, Some(Kind::Started(_))) {
            seen += 1;
        }
    }
}

fn rank_traceparent(run_dir: &Path, rank: i32) -> String {
    let path = run_dir.join(format!("traceparent-{rank}"));
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if !text.trim().is_empty() {
                return text.trim().to_string();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("rank {rank} wrote no traceparent at {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_trace_context_reaches_the_agent_and_its_ranks() {
    let exporter = install_exporter();
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), TRACED_RANK);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut sessions = serve(listener).await;
    let (agent, stop) = start_agent(url, work.path(), program);
    let mut session = next_session(&mut sessions).await;
    session.register().await;

    // A traced command: the agent's span continues the coordinator's trace.
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    session
        .send(with_context(
            start_ranks("job-traced", &[(0, 0), (1, 1)], 2),
            &traceparent,
        ))
        .await;
    started(&mut session, "job-traced", 2).await;
    let span = agent_span(&exporter, "job-traced").await;
    assert_eq!(
        span.span_context.trace_id(),
        TraceId::from_hex(TRACE_ID).unwrap()
    );
    assert_eq!(span.parent_span_id, SpanId::from_hex(PARENT_SPAN).unwrap());
    assert!(span.parent_span_is_remote);
    // Each rank continues from the agent's span.
    let run_dir = work.path().join("trainings/job-traced/run");
    let expected = format!("00-{TRACE_ID}-{}-01", span.span_context.span_id());
    for rank in 0..2 {
        assert_eq!(rank_traceparent(&run_dir, rank), expected);
    }

    // A malformed context: the ranks still start, in a trace of their own.
    session
        .send(with_context(
            start_ranks("job-garbled", &[(0, 0)], 1),
            "00-not-a-trace-context",
        ))
        .await;
    started(&mut session, "job-garbled", 1).await;
    let span = agent_span(&exporter, "job-garbled").await;
    assert_ne!(
        span.span_context.trace_id(),
        TraceId::from_hex(TRACE_ID).unwrap()
    );
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    let run_dir = work.path().join("trainings/job-garbled/run");
    assert_eq!(
        rank_traceparent(&run_dir, 0),
        format!(
            "00-{}-{}-01",
            span.span_context.trace_id(),
            span.span_context.span_id()
        )
    );

    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, agent).await.unwrap().unwrap();
}

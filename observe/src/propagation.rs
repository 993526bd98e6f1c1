//! W3C trace context (`traceparent`, `tracestate`) carried across process
//! boundaries: into a protobuf `map<string, string>`, one string in a
//! database column, or the `TRACEPARENT` environment variable of a child.
//!
//! The propagator is always W3C's, independent of the global one, so the
//! context travels (and can be logged) even where a process exports nothing.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header (and map key) holding the trace and parent span ids.
pub const TRACEPARENT: &str = "traceparent";
/// The environment variable a child process finds its parent context in.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The W3C headers of `cx`; empty when it holds no valid span.
pub fn inject(cx: &Context) -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
    }
    carrier
}

/// The W3C headers of a span context (e.g. of a span built with the
/// OpenTelemetry API rather than `tracing`).
pub fn inject_span_context(span: &SpanContext) -> HashMap<String, String> {
    inject(&Context::new().with_remote_span_context(span.clone()))
}

/// The W3C headers of a `tracing` span (its OpenTelemetry context).
pub fn inject_span(span: &tracing::Span) -> HashMap<String, String> {
    inject(&span.context())
}

/// The context the headers describe; an empty context when they hold none
/// (or an invalid one).
pub fn extract(carrier: &HashMap<String, String>) -> Context {
    TraceContextPropagator::new().extract(carrier)
}

/// The `traceparent` of `cx` alone, for a database column or an environment
/// variable.
pub fn traceparent(cx: &Context) -> Option<String> {
    inject(cx).remove(TRACEPARENT)
}

/// The context of a stored `traceparent`.
pub fn from_traceparent(traceparent: &str) -> Context {
    extract(&HashMap::from([(
        TRACEPARENT.to_string(),
        traceparent.to_string(),
    )]))
}

/// The trace id of `cx` in hex, for logs; `None` when it holds no valid span.
pub fn trace_id(cx: &Context) -> Option<String> {
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn context() -> Context {
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(sc)
    }

    #[test]
    fn a_context_round_trips_through_headers_and_a_traceparent() {
        let headers = inject(&context());
        assert_eq!(
            headers.get(TRACEPARENT).map(String::as_str),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        let back = extract(&headers);
        assert_eq!(
            back.span().span_context().span_id(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        let tp = traceparent(&context()).unwrap();
        assert_eq!(
            trace_id(&from_traceparent(&tp)).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn no_span_means_no_headers_and_garbage_means_no_context() {
        assert!(inject(&Context::new()).is_empty());
        assert_eq!(traceparent(&Context::new()), None);
        assert_eq!(trace_id(&from_traceparent("not a traceparent")), None);
        assert_eq!(trace_id(&extract(&HashMap::new())), None);
    }
}

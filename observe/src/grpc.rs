//! A tower layer for tonic servers: one `tracing` span per call, which the
//! OpenTelemetry layer (when exporting) turns into a server span, continuing
//! the caller's trace when its metadata carries `traceparent`; and the
//! `rpc.server.call.duration` histogram (seconds, by service, method and
//! status code).
//!
//! A call lasts until its response body ends, so a streaming call's span and
//! duration cover the whole stream. Its status is the `grpc-status` of the
//! response headers (a trailers-only error) or of the trailers; a stream the
//! client drops before the end counts as CANCELLED.

use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use opentelemetry::metrics::Histogram;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::KeyValue;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// gRPC status codes.
const OK: i32 = 0;
const CANCELLED: i32 = 1;
const UNKNOWN: i32 = 2;

/// Codes that make a server span an error (OpenTelemetry's RPC conventions:
/// UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE,
/// DATA_LOSS). Client mistakes (INVALID_ARGUMENT, NOT_FOUND, ...) are not.
pub fn is_server_error(code: i32) -> bool {
    matches!(code, 2 | 4 | 12 | 13 | 14 | 15)
}

/// `/pkg.Service/Method` -> (`pkg.Service`, `Method`).
pub fn split_path(path: &str) -> (&str, &str) {
    let trimmed = path.trim_start_matches('/');
    trimmed.split_once('/').unwrap_or((trimmed, ""))
}

fn grpc_status(headers: &HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Traces every call of the services it wraps.
#[derive(Clone)]
pub struct GrpcTraceLayer {
    duration: Histogram<f64>,
}

impl GrpcTraceLayer {
    /// Records into the global meter provider: install it first
    /// ([`crate::Observability::init`]); without one, only spans are made.
    pub fn new() -> Self {
        let duration = opentelemetry::global::meter("cohort")
            .f64_histogram("rpc.server.call.duration")
            .with_unit("s")
            .with_description("Duration of gRPC calls handled, to the end of the response stream.")
            .with_boundaries(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 60.0, 600.0,
            ])
            .build();
        Self { duration }
    }
}

impl Default for GrpcTraceLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for GrpcTraceLayer {
    type Service = GrpcTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcTrace {
            inner,
            duration: self.duration.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GrpcTrace<S> {
    inner: S,
    duration: Histogram<f64>,
}

/// One call in flight: ends when its response body does.
struct Call {
    span: tracing::Span,
    start: Instant,
    attributes: Vec<KeyValue>,
    code: Option<i32>,
    duration: Histogram<f64>,
}

impl Call {
    fn finish(mut self, code: i32) {
        self.span.record("rpc.grpc.status_code", code);
        if is_server_error(code) {
            self.span.record("otel.status_code", "error");
        }
        self.attributes
            .push(KeyValue::new("rpc.grpc.status_code", i64::from(code)));
        self.duration
            .record(self.start.elapsed().as_secs_f64(), &self.attributes);
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<Request<B>> for GrpcTrace<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Body + Unpin + Send + 'static,
{
    type Response = Response<Traced<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (service, method) = split_path(request.uri().path());
        // Only the name and kind are span fields (they show in every log
        // line of the call); the rest are OpenTelemetry attributes alone.
        let span = tracing::info_span!(
            "grpc",
            otel.name = %format!("{service}/{method}"),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            rpc.grpc.status_code = tracing::field::Empty,
        );
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(request.headers()));
        let _ = span.set_parent(parent);
        let attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service.to_string()),
            KeyValue::new("rpc.method", method.to_string()),
        ];
        for attribute in &attributes {
            span.set_attribute(attribute.key.clone(), attribute.value.clone());
        }
        let call = Call {
            span: span.clone(),
            start: Instant::now(),
            attributes,
            code: None,
            duration: self.duration.clone(),
        };
        // The clone that was polled ready serves this call (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(
            async move {
                match inner.call(request).await {
                    Ok(response) => {
                        let mut call = call;
                        call.code = grpc_status(response.headers());
                        Ok(response.map(|body| Traced {
                            inner: body,
                            call: Some(call),
                        }))
                    }
                    Err(e) => {
                        call.finish(UNKNOWN);
                        Err(e)
                    }
                }
            }
            .instrument(span),
        )
    }
}

/// A response body that ends its call's span and records its duration when
/// the stream ends (or is dropped).
pub struct Traced<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> Traced<B> {
    fn end(&mut self, default: i32) {
        if let Some(call) = self.call.take() {
            let code = call.code.unwrap_or(default);
            call.finish(code);
        }
    }
}

impl<B: Body + Unpin> Body for Traced<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    if let Some(call) = this.call.as_mut() {
                        call.code = Some(code);
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => this.end(UNKNOWN),
            Poll::Ready(None) => this.end(OK),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Traced<B> {
    fn drop(&mut self) {
        self.end(CANCELLED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(
            split_path("/cohort.v1.TrainingService/SubmitTraining"),
            ("cohort.v1.TrainingService", "SubmitTraining")
        );
        assert_eq!(split_path("/odd"), ("odd", ""));
    }

    #[test]
    fn only_server_faults_are_span_errors() {
        assert!(is_server_error(13) && is_server_error(14) && is_server_error(2));
        assert!(!is_server_error(0) && !is_server_error(3) && !is_server_error(5));
    }
}

/// The layer with a real tracing subscriber and an in-memory exporter: the
/// span of each call, its status code (from the headers, the trailers, or a
/// dropped stream) and the caller's trace.
#[cfg(test)]
mod layer_tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::combinators::UnsyncBoxBody;
    use http_body_util::{BodyExt, Full};
    use opentelemetry::trace::{SpanId, Status, TraceId, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use std::convert::Infallible;
    use tracing_subscriber::layer::SubscriberExt;

    type TestBody = UnsyncBoxBody<Bytes, Infallible>;

    /// A service answering every call with what `reply` builds.
    #[derive(Clone)]
    struct Reply(fn() -> Response<TestBody>);

    impl Service<Request<()>> for Reply {
        type Response = Response<TestBody>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok((self.0)()))
        }
    }

    fn trailers(code: &str) -> HeaderMap {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", code.parse().unwrap());
        t
    }

    fn ok_with_trailers() -> Response<TestBody> {
        let body = Full::new(Bytes::from_static(b"\0\0\0\0\0"))
            .with_trailers(std::future::ready(Some(Ok(trailers("0")))));
        Response::new(UnsyncBoxBody::new(body))
    }

    fn trailers_only(code: &'static str) -> Response<TestBody> {
        let mut response = Response::new(UnsyncBoxBody::new(Full::new(Bytes::new())));
        response
            .headers_mut()
            .insert("grpc-status", code.parse().unwrap());
        response
    }

    /// Calls `reply` through the layer (reading the body to its end unless
    /// `drop_early`) and returns the one span it made.
    async fn one_call(
        reply: fn() -> Response<TestBody>,
        traceparent: Option<&str>,
        drop_early: bool,
    ) -> SpanData {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);
        let mut service = GrpcTraceLayer::new().layer(Reply(reply));
        let mut request = Request::builder().uri("/pkg.v1.Things/GetThing");
        if let Some(tp) = traceparent {
            request = request.header("traceparent", tp);
        }
        let response = service.call(request.body(()).unwrap()).await.unwrap();
        if drop_early {
            drop(response);
        } else {
            response.into_body().collect().await.unwrap();
        }
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1, "{spans:?}");
        spans.into_iter().next().unwrap()
    }

    fn code(span: &SpanData) -> Option<i64> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "rpc.grpc.status_code")
            .and_then(|kv| match &kv.value {
                opentelemetry::Value::I64(v) => Some(*v),
                _ => None,
            })
    }

    #[tokio::test]
    async fn a_successful_call_continues_the_callers_trace_with_status_ok() {
        let span = one_call(
            ok_with_trailers,
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            false,
        )
        .await;
        assert_eq!(span.name, "pkg.v1.Things/GetThing");
        assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Server);
        assert_eq!(
            span.span_context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            span.parent_span_id,
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert_eq!(code(&span), Some(0));
        assert_eq!(span.status, Status::Unset);
        let method = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "rpc.method")
            .map(|kv| kv.value.as_str().into_owned());
        assert_eq!(method.as_deref(), Some("GetThing"));
    }

    #[tokio::test]
    async fn a_server_fault_marks_the_span_and_a_client_mistake_does_not() {
        let internal = one_call(|| trailers_only("13"), None, false).await;
        assert_eq!(code(&internal), Some(13));
        assert!(
            matches!(internal.status, Status::Error { .. }),
            "{:?}",
            internal.status
        );
        // no traceparent: a new trace
        assert_eq!(internal.parent_span_id, SpanId::INVALID);
        let not_found = one_call(|| trailers_only("5"), None, false).await;
        assert_eq!(code(&not_found), Some(5));
        assert_eq!(not_found.status, Status::Unset);
    }

    #[tokio::test]
    async fn a_stream_dropped_before_its_end_is_cancelled() {
        let span = one_call(ok_with_trailers, None, true).await;
        assert_eq!(code(&span), Some(1));
    }
}

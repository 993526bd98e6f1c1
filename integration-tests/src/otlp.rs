//! An OTLP/gRPC receiver for tests: a real tonic server on 127.0.0.1 that
//! implements the collector's TraceService and MetricsService and keeps
//! everything it is sent in memory, so tests can check what the real
//! binaries exported (`--otlp-endpoint` / `OTEL_EXPORTER_OTLP_ENDPOINT`).

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// One exported span with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

impl ReceivedSpan {
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_span_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    pub fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

/// One exported metric with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
pub struct ReceivedMetric {
    pub service: String,
    pub metric: Metric,
}

#[derive(Debug, Default)]
struct Store {
    spans: Vec<ReceivedSpan>,
    metrics: Vec<ReceivedMetric>,
}

/// The receiver; stops serving when dropped.
pub struct OtlpReceiver {
    pub endpoint: String,
    store: Arc<Mutex<Store>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<AnyValue>) -> Option<String> {
    match value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

/// An attribute's value as text.
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| text(&kv.value))
}

fn service_name(resource: &Option<opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    resource
        .as_ref()
        .and_then(|r| attribute(&r.attributes, "service.name"))
        .unwrap_or_default()
}

#[derive(Clone)]
struct Collector(Arc<Mutex<Store>>);

impl Collector {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut store = self.store();
        for resource_spans in request.into_inner().resource_spans {
            let service = service_name(&resource_spans.resource);
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    store.spans.push(ReceivedSpan {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let mut store = self.store();
        for resource_metrics in request.into_inner().resource_metrics {
            let service = service_name(&resource_metrics.resource);
            for scope in resource_metrics.scope_metrics {
                for metric in scope.metrics {
                    store.metrics.push(ReceivedMetric {
                        service: service.clone(),
                        metric,
                    });
                }
            }
        }
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the OTLP receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("local addr"));
        let store = Arc::new(Mutex::new(Store::default()));
        let collector = Collector(store.clone());
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(collector.clone()))
                .add_service(MetricsServiceServer::new(collector))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        OtlpReceiver {
            endpoint,
            store,
            server,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spans
            .clone()
    }

    /// Every metric export received so far (one entry per metric per export).
    pub fn metrics(&self) -> Vec<ReceivedMetric> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .metrics
            .clone()
    }
}

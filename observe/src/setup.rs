//! The process's subscriber: logs to stderr, plus OpenTelemetry traces and
//! metrics over OTLP/gRPC when `--otlp-endpoint` (or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`) names a collector.
//!
//! Exports run on the SDK's own threads: spans in batches (every
//! `OTEL_BSP_SCHEDULE_DELAY` ms, 5 s by default), metrics periodically
//! (`OTEL_METRIC_EXPORT_INTERVAL` ms, 60 s by default). A collector that is
//! down makes those exports fail after [`EXPORT_TIMEOUT`]; nothing else waits.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use std::time::Duration;
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The log filter when `RUST_LOG` is unset: our own info, and only warnings
/// from the transport crates (so the OTLP exporter never traces itself).
pub const DEFAULT_FILTER: &str =
    "info,h2=warn,tower=warn,hyper=warn,hyper_util=warn,tonic=warn,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn";
/// The longest one export to the collector may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest the final flush at shutdown may take.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Logging and OpenTelemetry flags, shared by the binaries.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ObservabilityArgs {
    /// Export OpenTelemetry traces and metrics over OTLP/gRPC to this
    /// collector (e.g. http://127.0.0.1:4317); nothing is exported when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot build the OTLP {signal} exporter for {endpoint}: {reason}")]
    Exporter {
        signal: &'static str,
        endpoint: String,
        reason: String,
    },
    #[error("a global tracing subscriber is already installed: {0}")]
    Subscriber(String),
}

/// What [`Observability::init`] installed; flush it with [`Observability::shutdown`].
#[derive(Debug, Default)]
pub struct Observability {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

type Base = Layered<EnvFilter, Registry>;
type BoxedLayer = Box<dyn Layer<Base> + Send + Sync>;

fn resource(service: &'static str) -> Resource {
    Resource::builder()
        .with_service_name(service)
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

fn exporter_error(signal: &'static str, endpoint: &str, e: impl ToString) -> SetupError {
    SetupError::Exporter {
        signal,
        endpoint: endpoint.to_string(),
        reason: e.to_string(),
    }
}

impl Observability {
    /// Installs the global subscriber (and, with an endpoint, the global
    /// tracer and meter providers). Call it inside a tokio runtime: the OTLP
    /// exporters need one.
    pub fn init(service: &'static str, args: &ObservabilityArgs) -> Result<Self, SetupError> {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let filter =
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
        let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let mut layers: Vec<BoxedLayer> = vec![if args.log_json {
            fmt.json().boxed()
        } else {
            fmt.boxed()
        }];
        let mut installed = Self::default();
        if let Some(endpoint) = args.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
            let (tracer, meter) = Self::otlp(service, endpoint)?;
            layers.push(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer.tracer(service))
                    .boxed(),
            );
            opentelemetry::global::set_tracer_provider(tracer.clone());
            opentelemetry::global::set_meter_provider(meter.clone());
            installed = Self {
                tracer: Some(tracer),
                meter: Some(meter),
            };
        }
        tracing_subscriber::registry()
            .with(filter)
            .with(layers)
            .try_init()
            .map_err(|e| SetupError::Subscriber(e.to_string()))?;
        if let Some(endpoint) = args
            .otlp_endpoint
            .as_deref()
            .filter(|_| installed.exporting())
        {
            tracing::info!(endpoint = %endpoint, service, "exporting OpenTelemetry traces and metrics over OTLP");
        }
        Ok(installed)
    }

    fn otlp(
        service: &'static str,
        endpoint: &str,
    ) -> Result<(SdkTracerProvider, SdkMeterProvider), SetupError> {
        let spans = SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| exporter_error("trace", endpoint, e))?;
        let metrics = MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| exporter_error("metrics", endpoint, e))?;
        let tracer = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_resource(resource(service))
            .build();
        let meter = SdkMeterProvider::builder()
            .with_periodic_exporter(metrics)
            .with_resource(resource(service))
            .build();
        Ok((tracer, meter))
    }

    /// Whether traces and metrics are exported.
    pub fn exporting(&self) -> bool {
        self.tracer.is_some()
    }

    /// Flushes what is buffered and stops the exporters, waiting at most
    /// [`SHUTDOWN_TIMEOUT`] (the SDK's shutdown blocks, so it runs on a
    /// blocking thread).
    pub async fn shutdown(self) {
        if self.tracer.is_none() && self.meter.is_none() {
            return;
        }
        let flush = tokio::task::spawn_blocking(move || {
            if let Some(tracer) = self.tracer {
                if let Err(e) = tracer.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                    eprintln!("OpenTelemetry: flushing spans failed: {e}");
                }
            }
            if let Some(meter) = self.meter {
                if let Err(e) = meter.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                    eprintln!("OpenTelemetry: flushing metrics failed: {e}");
                }
            }
        });
        if tokio::time::timeout(SHUTDOWN_TIMEOUT * 2, flush)
            .await
            .is_err()
        {
            eprintln!("OpenTelemetry: the final flush did not finish in time");
        }
    }
}

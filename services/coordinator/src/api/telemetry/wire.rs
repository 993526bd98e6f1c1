//! WatchGpuMetrics on the wire, encoded once for all watchers.
//!
//! Each GPU entry of a telemetry batch is encoded (as a `v1::GpuMetrics`)
//! once, by the first watcher that needs it, and the bytes are shared by
//! every watcher: an update is sent as an [`EncodedUpdate`], whose encoding
//! is byte for byte that of a `v1::GpuMetricsUpdate`. tonic's generated
//! server can only send the generated type, so [`TelemetryServer`] routes
//! this one method itself and hands every other call to the generated server.

use super::TelemetryApi;
use crate::api::error::ApiError;
use cohort_proto::v1;
use cohort_proto::v1::telemetry_service_server::TelemetryServiceServer;
use prost::bytes::Bytes;
use prost::Message;
use std::convert::Infallible;
use std::task::{Context as TaskContext, Poll};
use tonic::codegen::{http, Body, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

/// The path of the method served here.
pub const WATCH_GPU_METRICS_PATH: &str = "/cohort.v1.TelemetryService/WatchGpuMetrics";

/// A `v1::GpuMetricsUpdate` whose `gpus` (field 3, `repeated GpuMetrics`)
/// are already encoded: an embedded message and a `bytes` field holding its
/// encoding are the same on the wire (tag 3, length-delimited), so a client
/// decodes this as the generated type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodedUpdate {
    #[prost(message, optional, tag = "1")]
    pub time: Option<prost_types::Timestamp>,
    /// A `v1::MetricsView` (an enum is an int32 varint on the wire).
    #[prost(int32, tag = "2")]
    pub view: i32,
    /// Each one an encoded `v1::GpuMetrics`.
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub gpus: Vec<Bytes>,
    #[prost(message, optional, tag = "4")]
    pub aggregate: Option<v1::AggregatedGpuMetrics>,
    #[prost(message, optional, tag = "5")]
    pub lagged: Option<v1::Lagged>,
}

impl EncodedUpdate {
    /// The same update with its GPU entries encoded.
    pub fn encode_from(update: v1::GpuMetricsUpdate) -> Self {
        Self {
            time: update.time,
            view: update.view,
            gpus: update
                .gpus
                .iter()
                .map(|g| Bytes::from(g.encode_to_vec()))
                .collect(),
            aggregate: update.aggregate,
            lagged: update.lagged,
        }
    }

    /// Back to the generated type (re-decoded: for the generated server's
    /// path and for tests, not for the fan-out).
    pub fn decode_into(&self) -> Result<v1::GpuMetricsUpdate, Status> {
        v1::GpuMetricsUpdate::decode(self.encode_to_vec().as_slice())
            .map_err(|e| ApiError::Internal(format!("re-decoding a metrics update: {e}")).into())
    }
}

/// TelemetryService with WatchGpuMetrics sent as [`EncodedUpdate`]s.
#[derive(Debug, Clone)]
pub struct TelemetryServer {
    api: TelemetryApi,
    generated: TelemetryServiceServer<TelemetryApi>,
}

impl TelemetryServer {
    pub fn new(api: TelemetryApi) -> Self {
        Self {
            generated: TelemetryServiceServer::new(api.clone()),
            api,
        }
    }
}

impl NamedService for TelemetryServer {
    const NAME: &'static str = <TelemetryServiceServer<TelemetryApi> as NamedService>::NAME;
}

/// The server-streaming handler of WatchGpuMetrics.
struct WatchSvc(TelemetryApi);

impl tonic::server::ServerStreamingService<v1::WatchGpuMetricsRequest> for WatchSvc {
    type Response = EncodedUpdate;
    type ResponseStream = super::BoxStream<EncodedUpdate>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: tonic::Request<v1::WatchGpuMetricsRequest>) -> Self::Future {
        let api = self.0.clone();
        Box::pin(async move { api.watch_encoded(request).await })
    }
}

impl<B> Service<http::Request<B>> for TelemetryServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<http::Request<B>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != WATCH_GPU_METRICS_PATH {
            return self.generated.call(req);
        }
        let svc = WatchSvc(self.api.clone());
        Box::pin(async move {
            let codec =
                tonic_prost::ProstCodec::<EncodedUpdate, v1::WatchGpuMetricsRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.server_streaming(svc, req).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_update_is_a_gpu_metrics_update_on_the_wire() {
        let update = v1::GpuMetricsUpdate {
            time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
            view: v1::MetricsView::PerGpu as i32,
            gpus: (0..3)
                .map(|i| v1::GpuMetrics {
                    sample: Some(v1::GpuSample {
                        gpu_uuid: format!("GPU-{i}"),
                        index: i,
                        utilization_gpu_percent: Some(12.5 * i as f64),
                        memory_used_bytes: 1 << (20 + i),
                        ..Default::default()
                    }),
                    agent_id: "agt-1".into(),
                    agent_name: "host-1".into(),
                    training_id: if i == 1 {
                        "trn-1".into()
                    } else {
                        String::new()
                    },
                    rank: if i == 1 { 0 } else { -1 },
                })
                .collect(),
            aggregate: None,
            lagged: None,
        };
        let encoded = EncodedUpdate::encode_from(update.clone());
        assert_eq!(encoded.encode_to_vec(), update.encode_to_vec());
        assert_eq!(encoded.decode_into().unwrap(), update);

        let notice = v1::GpuMetricsUpdate {
            view: v1::MetricsView::Aggregated as i32,
            aggregate: Some(v1::AggregatedGpuMetrics {
                gpu_count: 2,
                ..Default::default()
            }),
            lagged: Some(v1::Lagged {
                missed_events: 7,
                first_missed_sequence: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            EncodedUpdate::encode_from(notice.clone()).encode_to_vec(),
            notice.encode_to_vec()
        );
    }
}

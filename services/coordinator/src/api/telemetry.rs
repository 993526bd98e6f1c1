//! TelemetryService. WatchGpuMetrics streams from the live fan-out: the
//! PER_GPU view forwards agents' samples as they arrive, coalesced into at
//! most one update per watcher per 50 ms (see `watch`); the AGGREGATED view
//! sends the aggregate of the latest samples once per interval. A watcher
//! that falls behind is told how many batches it missed (`lagged`) and
//! carries on; it never slows ingest or other watchers. Served through
//! [`TelemetryServer`], which sends WatchGpuMetrics entries encoded once for
//! all watchers (see `wire`). QueryGpuMetrics reads the stored history (see
//! `query`).

use crate::api::caller::{caller, team_filter, TeamScope};
use crate::api::error::ApiError;
use crate::context::Context;
use crate::fleet::ReadingFilter;
use tokio_stream::wrappers::ReceiverStream;

mod aggregate;
pub mod alerts;
mod query;
mod watch;
mod wire;

use cohort_proto::v1;
use cohort_proto::v1::telemetry_service_server::TelemetryService;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
pub use wire::{EncodedUpdate, TelemetryServer};

use crate::api::StatusStream as BoxStream;

/// A request's `view`: PER_GPU when unspecified; INVALID_ARGUMENT when it
/// names no view.
pub(crate) fn metrics_view(raw: i32) -> Result<v1::MetricsView, Status> {
    match v1::MetricsView::try_from(raw) {
        Ok(v1::MetricsView::Unspecified | v1::MetricsView::PerGpu) => Ok(v1::MetricsView::PerGpu),
        Ok(v1::MetricsView::Aggregated) => Ok(v1::MetricsView::Aggregated),
        Err(_) => Err(ApiError::field("view", format!("{raw} is not a metrics view")).into()),
    }
}

#[derive(Debug, Clone)]
pub struct TelemetryApi {
    ctx: Context,
}

impl TelemetryApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }

    /// WatchGpuMetrics: checks the request and starts the watcher. Every
    /// GPU is shown; only the caller's team's trainings are named.
    async fn watch_encoded(
        &self,
        request: Request<v1::WatchGpuMetricsRequest>,
    ) -> Result<Response<BoxStream<EncodedUpdate>>, Status> {
        let who = caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let view = metrics_view(req.view)?;
        let filter = req.filter.unwrap_or_default();
        TeamScope::new(&self.ctx, &who)
            .check_filter(&filter.training_id)
            .await?;
        let filter = ReadingFilter {
            agents: filter.agents,
            gpu_uuids: filter.gpu_uuids,
            training_id: filter.training_id,
            team: team_filter(&who),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(watch::QUEUE);
        // The watcher ends the stream itself when the server stops.
        let stopping = self.ctx.stopping();
        tokio::spawn(watch::run(
            self.ctx.fleet.clone(),
            view,
            filter,
            tx,
            stopping,
            self.ctx.watchers.open(),
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[tonic::async_trait]
impl TelemetryService for TelemetryApi {
    type WatchGpuMetricsStream = BoxStream<v1::GpuMetricsUpdate>;
    type WatchAlertsStream = BoxStream<v1::WatchAlertsResponse>;

    /// Only used where the generated server is mounted without
    /// [`TelemetryServer`]: the same stream, re-decoded to the generated type.
    async fn watch_gpu_metrics(
        &self,
        request: Request<v1::WatchGpuMetricsRequest>,
    ) -> Result<Response<Self::WatchGpuMetricsStream>, Status> {
        let encoded = self.watch_encoded(request).await?.into_inner();
        let decoded = encoded.map(|item| item.and_then(|u| u.decode_into()));
        Ok(Response::new(Box::pin(decoded)))
    }

    async fn query_gpu_metrics(
        &self,
        request: Request<v1::QueryGpuMetricsRequest>,
    ) -> Result<Response<v1::QueryGpuMetricsResponse>, Status> {
        let who = caller(&self.ctx, &request)?;
        query::query(&self.ctx, &who, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn watch_alerts(
        &self,
        request: Request<v1::WatchAlertsRequest>,
    ) -> Result<Response<Self::WatchAlertsStream>, Status> {
        alerts::watch_alerts(&self.ctx, request).await
    }
}

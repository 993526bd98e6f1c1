//! The gRPC server: every `cohort.v1` service plus grpc.health.v1 (Check and
//! Watch, per service) and server reflection v1 and v1alpha.
//!
//! [`run`] takes a bound listener and a shutdown future, so tests can bind
//! `127.0.0.1:0` and drive the real server. The work beside the RPCs is
//! [`crate::background`]'s.

use crate::api::admin::AdminApi;
use crate::api::agent::AgentApi;
use crate::api::gpu::GpuApi;
use crate::api::sweep::SweepApi;
use crate::api::telemetry::{TelemetryApi, TelemetryServer};
use crate::api::training::TrainingApi;
use crate::context::Context;
use crate::tls::TlsListener;
use cohort_proto::v1::admin_service_server::AdminServiceServer;
use cohort_proto::v1::agent_service_server::AgentServiceServer;
use cohort_proto::v1::gpu_service_server::GpuServiceServer;
use cohort_proto::v1::sweep_service_server::SweepServiceServer;
use cohort_proto::v1::telemetry_service_server::TelemetryServiceServer;
use cohort_proto::v1::training_service_server::TrainingServiceServer;
use std::future::Future;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Another coordinator took the leader lease: this one stopped serving
    /// (its supervisor starts it again, as a standby).
    #[error("deposed: another coordinator leads now{}", leader.as_deref().map(|l| format!(" ({l})")).unwrap_or_default())]
    Deposed { leader: Option<String> },
}

/// Where the server listens: plaintext (loopback, or `--insecure`) or TLS.
pub enum Listener {
    Plain(TcpListener),
    Tls(TlsListener),
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener::Plain(l)
    }
}

impl From<TlsListener> for Listener {
    fn from(l: TlsListener) -> Self {
        Listener::Tls(l)
    }
}

/// Serves until `shutdown` completes, then drains in-flight calls and returns.
pub async fn run(
    listener: impl Into<Listener>,
    ctx: Context,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    run_with_health(listener, None, ctx, shutdown).await
}

/// [`run`], plus, on `health_listener`, a plaintext server of
/// grpc.health.v1 alone (`--health-listen`): what Kubernetes' native gRPC
/// probes need, since they cannot speak TLS. It holds no tenant data.
pub async fn run_with_health(
    listener: impl Into<Listener>,
    health_listener: Option<TcpListener>,
    ctx: Context,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listener = listener.into();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<TrainingServiceServer<TrainingApi>>()
        .await;
    health.set_serving::<GpuServiceServer<GpuApi>>().await;
    health
        .set_serving::<TelemetryServiceServer<TelemetryApi>>()
        .await;
    health.set_serving::<AgentServiceServer<AgentApi>>().await;
    health.set_serving::<AdminServiceServer<AdminApi>>().await;
    health.set_serving::<SweepServiceServer<SweepApi>>().await;

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(cohort_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(cohort_proto::ERROR_DETAILS_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    // The leader's work starts now, or once this coordinator is elected.
    let leading = crate::background::Leading::start(&ctx, health.clone()).await;

    let streams = ctx.clone();
    let leadership = ctx.leadership.clone();
    let shutdown = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = leadership.deposed() => {}
        }
        streams.stop_streams();
    };
    if let Some(probes) = health_listener {
        tracing::info!(addr = ?probes.local_addr().ok(), "serving grpc.health.v1 in plaintext");
        let health_only = tonic::transport::Server::builder()
            .add_service(health_service.clone())
            .serve_with_incoming_shutdown(
                plain_incoming(probes),
                crate::context::stopped(ctx.stopping()),
            );
        ctx.tasks.spawn(async move {
            if let Err(e) = health_only.await {
                tracing::error!(error = %e, "the health listener failed");
            }
        });
    }
    let auth = crate::auth::AuthLayer::new(ctx.auth.clone());
    let gate = crate::leader::gate::GateLayer::new(ctx.leadership.clone(), ctx.forwarder.clone());
    let stopping = crate::context::stopped(ctx.stopping());
    let leadership = ctx.leadership.clone();
    // gRPC-Web (a browser's calls, over HTTP/1.1 or HTTP/2) beside native
    // gRPC on the same listener: translated to gRPC first, so every layer
    // below (traces, the leader gate, auth) sees one kind of call.
    // The console's pages and files (GET) are answered before any of it.
    let router = tonic::transport::Server::builder()
        .accept_http1(true)
        .layer(crate::console::ConsoleLayer)
        .layer(tonic_web::GrpcWebLayer::new())
        .layer(cohort_observe::grpc::GrpcTraceLayer::new())
        .layer(gate)
        .layer(auth)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(TrainingServiceServer::new(TrainingApi::new(ctx.clone())))
        .add_service(GpuServiceServer::new(GpuApi::new(ctx.clone())))
        .add_service(TelemetryServer::new(TelemetryApi::new(ctx.clone())))
        .add_service(AdminServiceServer::new(AdminApi::new(ctx.clone())))
        .add_service(SweepServiceServer::new(SweepApi::new(ctx.clone())))
        .add_service(AgentServiceServer::new(AgentApi::new(ctx)));
    match listener {
        Listener::Plain(listener) => {
            tracing::info!(addr = ?listener.local_addr().ok(), tls = false, console = crate::console::built(), "serving gRPC");
            router
                .serve_with_incoming_shutdown(plain_incoming(listener), shutdown)
                .await?
        }
        Listener::Tls(listener) => {
            tracing::info!(addr = ?listener.local_addr().ok(), tls = true, console = crate::console::built(), "serving gRPC");
            router
                .serve_with_incoming_shutdown(listener.incoming(stopping), shutdown)
                .await?
        }
    }
    if let crate::leader::Role::Deposed { leader } = leadership.role() {
        leading.abandon();
        return Err(ServerError::Deposed { leader });
    }
    leading.stop().await;
    tracing::info!("gRPC server stopped");
    Ok(())
}

/// Plaintext connections as they are accepted, with Nagle's algorithm off
/// (as the TLS listener does): otherwise a response written in several
/// pieces waits for the client's delayed ACK, 40 ms a call under load.
fn plain_incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

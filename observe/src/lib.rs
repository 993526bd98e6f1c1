//! Observability shared by cohort's services.
//!
//! - [`setup`]: the process's logging (human or JSON lines) and, when an OTLP
//!   endpoint is configured, OpenTelemetry traces and metrics exported over
//!   OTLP/gRPC. Nothing is exported, and nothing waits for a collector, when
//!   none is configured; an absent collector only costs failed background
//!   exports.
//! - [`propagation`]: W3C trace context in and out of string maps (protobuf
//!   fields, environment variables, database columns).
//! - [`grpc`]: a tower layer for tonic servers: one server span per call
//!   (continuing the caller's trace when its metadata carries `traceparent`)
//!   and the `rpc.server.call.duration` histogram.

pub mod grpc;
pub mod propagation;
pub mod setup;

pub use setup::{Observability, ObservabilityArgs, SetupError};

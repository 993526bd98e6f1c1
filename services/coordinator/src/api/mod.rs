//! The gRPC services of `cohort.v1`, one module each, sharing a
//! [`Context`](crate::context::Context).
//!
//! - [`training`]: TrainingService (create, get, list, cancel, watch; with
//!   [`checkpoints`] and [`report`] for its checkpoint and report RPCs).
//! - [`sweep`]: SweepService (create, get, list, cancel; [`sweep_requests`]
//!   checks a create), the searcher being [`crate::sweeps`]'s.
//! - [`gpu`]: GpuService (list, validate, recommend).
//! - [`telemetry`]: TelemetryService (live and stored GPU metrics, alerts).
//! - [`agent`]: AgentService (the agents' Connect stream, ListAgents).
//! - [`error`]: the one error table (`ApiError` -> `tonic::Status`);
//!   [`convert`]: domain -> proto messages; [`page_token`]: opaque page tokens.

pub mod admin;
pub mod agent;
pub mod caller;
pub mod checkpoints;
pub mod code;
pub mod convert;
pub mod error;
pub mod gpu;
pub mod logs;
pub mod page_token;
pub mod report;
pub mod report_cost;
pub mod sweep;
pub mod sweep_requests;
pub mod telemetry;
pub mod thinning;
pub mod training;
pub mod training_requests;
pub mod webhooks;

pub use crate::context::BoxStream;

/// A server-streaming RPC's response stream.
pub type StatusStream<T> = BoxStream<Result<T, tonic::Status>>;

//! `cohort-coordinator`: the control plane's server.
//!
//! - [`model`]: domain types (job and rank states, GPU requests, trainings).
//! - [`persistence`]: the database (SQLite or PostgreSQL through diesel).
//! - [`api`]: the `cohort.v1` gRPC services.
//! - [`auth`]: tokens, agent identities, the permission of every RPC, the layer enforcing them.
//! - [`context`]: what the services and background tasks share.
//! - [`fleet`]: the live agents, GPU holds and telemetry fan-out (in memory).
//! - [`code`]: programs' code snapshots, uploaded by clients and fetched by agents.
//! - [`jobs`]: the job runner: scheduling passes applied, rank reports, restarts, preemption notices.
//! - [`tracking`]: every training of a tracked team as an MLflow run.
//! - [`webhooks`]: HTTP endpoints told when trainings end, fail or are preempted, and of alerts.
//! - [`policy`]: the scheduling policy, pure (passes, preemption, lending, estimates; the simulator's too).
//! - [`history`]: GPU telemetry history (batched writer, retention, rollups).
//! - [`alerts`]: alert rules on telemetry, presence and progress; WatchAlerts' feed.
//! - [`metrics`]: the opt-in Prometheus scrape endpoint.
//! - [`report`]: job reports (metrics.jsonl, performance summary, scaling).
//! - [`selection`]: GPU selection: memory estimate, recommendation, validation.
//! - [`tls`]: the TLS listener (client certificates, reload on SIGHUP).
//! - [`server`]: [`server::run`], the server with health and reflection.
//! - [`background`]: start-up work and the background tasks, stopped with a drain deadline.

pub mod alerts;
pub mod api;
pub mod auth;
pub mod background;
pub mod code;
pub mod console;
pub mod context;
pub mod error;
pub mod export;
pub mod feed;
pub mod fleet;
pub mod history;
pub mod http;
pub mod instruments;
pub mod jobs;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod persistence;
pub mod policy;
pub mod report;
pub mod selection;
pub mod server;
pub mod sweeps;
pub mod tasks;
pub mod tls;
pub mod tracking;
pub mod webhooks;

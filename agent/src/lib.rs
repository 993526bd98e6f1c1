//! `cohort-agent`: the per-host part of cohort.
//!
//! - [`probe`]: GPU inventory and telemetry behind one trait ([`probe::GpuProbe`]),
//!   read from NVML or simulated (`--simulate-gpus N[:MEM]`).
//! - [`supervisor`]: starts, watches and stops `cohort-rank` processes, one process
//!   group each, and reports their progress lines and exits as events.
//! - [`connect`]: the `AgentService.Connect` session with the coordinator,
//!   reconnecting with backoff, and the commands it carries (converted from
//!   protobuf once, in `connect/convert.rs`).
//! - [`launch`]: what a StartRanks becomes: the launch plan (the SAE's or a
//!   team's program), each rank's spec, and their start.
//! - [`config`]: how the agent runs ([`AgentConfig`]).
//! - [`cli`]: the command line of the `cohort-agent` binary.
//! - [`telemetry`]: the sampling loop.

pub mod cli;
pub mod config;
pub mod connect;
pub mod doctor;
pub mod launch;
pub mod probe;
pub mod program;
pub mod supervisor;
pub mod teams;
pub mod telemetry;

pub use config::{AgentConfig, ClientTls};
pub use connect::Agent;

//! `cohort-agent`: the per-host part of cohort.
//!
//! - [`probe`]: GPU inventory and telemetry behind one trait ([`probe::GpuProbe`]),
//!   read from NVML or simulated (`--simulate-gpus N[:MEM]`).
//! - [`supervisor`]: starts, watches and stops `cohort-rank` processes, one process
//!   group each, and reports their progress lines and exits as events.
//! - [`connect`]: the `AgentService.Connect` session with the coordinator,
//!   reconnecting with backoff, and the commands it carries.
//! - [`cli`]: the command line of the `cohort-agent` binary.
//! - [`telemetry`]: the sampling loop.

pub mod cli;
pub mod connect;
pub mod doctor;
pub mod probe;
pub mod program;
pub mod supervisor;
pub mod teams;
pub mod telemetry;

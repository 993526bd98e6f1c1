//! The integration tests: one test binary (one link instead of one per
//! area), a module per area. Every test starts the real binaries on
//! 127.0.0.1 through the harness in `src/` (`cohort_integration_tests`).
//! Run one area with a filter: `cargo test -p cohort-integration-tests
//! sharing::`.

mod bad_requests;
mod cancel;
mod console_served;
mod database_outage;
mod doctor;
mod download;
mod elastic;
mod elastic_programs;
mod end_to_end;
mod failover;
mod failures;
mod grpc_web;
mod grpcurl;
mod host_memory;
mod lending;
mod logs;
mod maintenance;
mod nccl_env;
mod numerics;
mod object_storage;
mod oom;
mod opentelemetry;
mod preemption_faults;
mod program_code;
mod program_confinement;
mod program_examples;
mod program_frameworks;
mod program_storage;
mod programs;
mod queueing;
mod report;
mod restart;
mod security;
mod sharing;
mod sweeps;
mod tracking;
mod webhooks;

//! Compiles `cohort/v1/*.proto` with protox (no system `protoc`), generates the
//! tonic/prost code and writes the encoded file descriptor set for reflection.

use prost::Message;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "cohort/v1/common.proto",
    "cohort/v1/config.proto",
    "cohort/v1/training.proto",
    "cohort/v1/checkpoint.proto",
    "cohort/v1/training_events.proto",
    "cohort/v1/training_report.proto",
    "cohort/v1/training_logs.proto",
    "cohort/v1/training_service.proto",
    "cohort/v1/sweep.proto",
    "cohort/v1/sweep_service.proto",
    "cohort/v1/gpu.proto",
    "cohort/v1/telemetry.proto",
    "cohort/v1/agent_maintenance.proto",
    "cohort/v1/agent.proto",
    "cohort/v1/admin.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=cohort");
    println!("cargo:rerun-if-changed=google");
    let fds = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("cohort_descriptor.bin"), fds.encode_to_vec())?;
    // Served by reflection only (no Rust generated: tonic-types has the types).
    let details = protox::compile(["google/rpc/error_details.proto"], ["."])?;
    std::fs::write(
        out_dir.join("error_details_descriptor.bin"),
        details.encode_to_vec(),
    )?;
    // No generated `Client::connect(url)` constructor: it would clash with the
    // `AgentService.Connect` RPC's method. Clients use `cohort_proto::channel`.
    // Type names (`prost::Name`): the CLI finds each message's descriptor
    // by its full name to write it as JSON.
    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds_with_config(fds, config)?;
    Ok(())
}

//! `cohort-rank doctor`: what only the binary that links libtorch can tell
//! about a host — the torch and CUDA versions it was built for, the CUDA
//! devices it sees, whether ProcessGroupNCCL is compiled in, a matmul's
//! achieved TFLOP/s per device, and an all-reduce's bus bandwidth between
//! processes the agent starts. Each mode prints one JSON object on stdout;
//! `cohort-agent doctor` reads it and judges (docs/operations.md, "First GPU host").

mod all_reduce;
mod local;

pub use all_reduce::{run_all_reduce, AllReduceArgs};
pub use local::{run_local, LocalArgs};

/// The torch version libtorch came from (its wheel's `version.py`).
pub const TORCH_VERSION: &str = env!("COHORT_TORCH_VERSION");
/// The CUDA version libtorch was built for; empty when built without CUDA.
pub const TORCH_CUDA: &str = env!("COHORT_TORCH_CUDA");
/// Whether ProcessGroupNCCL is compiled into this binary.
pub const NCCL_COMPILED: bool = cfg!(cohort_nccl);

/// The doctor's modes.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DoctorMode {
    /// Versions, devices, NCCL, and a matmul on each visible device (or the
    /// CPU when none is visible).
    Local(LocalArgs),
    /// One process of an all-reduce benchmark (RANK, WORLD_SIZE,
    /// MASTER_ADDR, MASTER_PORT from the environment); rank 0 prints the figures.
    AllReduce(AllReduceArgs),
}

/// Runs one mode and prints its JSON.
pub fn run(mode: &DoctorMode) -> Result<(), crate::RankError> {
    let json = match mode {
        DoctorMode::Local(args) => serde_json::to_string(&run_local(args)?),
        DoctorMode::AllReduce(args) => match run_all_reduce(args)? {
            Some(result) => serde_json::to_string(&result),
            None => return Ok(()),
        },
    }
    .map_err(|e| crate::RankError::Internal(format!("doctor json: {e}")))?;
    println!("{json}");
    Ok(())
}

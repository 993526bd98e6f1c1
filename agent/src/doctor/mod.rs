//! `cohort-agent doctor`: checks the host an agent runs on, end to end —
//! driver and NVML, the CUDA libtorch was built for and whether the driver
//! runs it, NCCL in `cohort-rank`, compute capability, GPU topology, free
//! memory, a matmul per GPU against its peak, an all-reduce across the
//! host's GPUs (gloo between two processes on a host without them), and
//! the agent's roots. Each check is `pass`, `fail` or `skip` (does not
//! apply here) with a measured value and a one-line reason. The libtorch
//! checks run in `cohort-rank doctor` processes: the one binary that links
//! libtorch. The coordinator runs it on a connected agent
//! (`cohort agents doctor NAME`) through the agent's stream.

mod gpus;
mod host;
mod judge;
mod render;
mod roots;
mod torch;

pub use judge::matmul_peak_tflops;
pub use render::render;
pub use roots::Root;

use crate::probe::SimSpec;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The check names, in the order they are reported.
pub const CHECKS: [&str; 9] = [
    "driver",
    "cuda",
    "nccl",
    "compute_capability",
    "topology",
    "memory",
    "matmul",
    "all_reduce",
    "roots",
];

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    /// The check does not apply on this host (and says why).
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    /// What was measured or found.
    pub value: String,
    /// Why it passed, failed or was skipped, in one line.
    pub detail: String,
}

impl Check {
    pub fn new(
        name: &str,
        status: Status,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            name: name.to_string(),
            status,
            value: value.into(),
            detail: detail.into(),
        }
    }
}

/// Every check, in [`CHECKS`] order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub checks: Vec<Check>,
    /// No check failed.
    pub ok: bool,
}

impl Report {
    pub fn new(checks: Vec<Check>) -> Self {
        let ok = checks.iter().all(|c| c.status != Status::Fail);
        Self { checks, ok }
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// What the doctor checks with: the agent's own settings.
#[derive(Debug, Clone)]
pub struct DoctorSetup {
    /// Simulated GPUs instead of NVML (the agent's --simulate-gpus).
    pub simulate: Option<SimSpec>,
    pub agent_name: String,
    /// The `cohort-rank` to run the libtorch checks with.
    pub rank_program: PathBuf,
    /// The data and program roots to look at.
    pub roots: Vec<Root>,
    /// Bytes per all-reduce (default: 256 MiB over NCCL, 16 MiB over gloo).
    pub all_reduce_bytes: Option<u64>,
    /// How long one `cohort-rank doctor` process may run.
    pub timeout: Duration,
}

/// How long one `cohort-rank doctor` process may run unless told otherwise.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs every check. `busy` are the GPU indices running ranks now: the
/// matmul and the all-reduce leave them alone.
pub async fn run(setup: &DoctorSetup, busy: &[u32]) -> Report {
    let started = std::time::Instant::now();
    let host = host::facts(setup).await;
    let idle: Vec<u32> = host
        .gpu_indices()
        .into_iter()
        .filter(|i| !busy.contains(i))
        .collect();
    let local = torch::local(setup, &idle, host.is_real()).await;
    let all_reduce = torch::all_reduce(setup, &idle, host.is_real()).await;
    let roots = roots::check(&setup.roots).await;
    let mut checks = judge::judge(&host, &local, &all_reduce, busy);
    checks.push(roots);
    tracing::info!(
        agent = %setup.agent_name,
        seconds = started.elapsed().as_secs_f64(),
        failed = checks.iter().filter(|c| c.status == Status::Fail).count(),
        "doctor finished"
    );
    Report::new(checks)
}

#[cfg(test)]
mod judge_tests;

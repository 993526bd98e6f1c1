//! What `cohort-rank doctor` prints (one JSON object per mode) and
//! `cohort-agent doctor` reads: the libtorch side of the host doctor.

use serde::{Deserialize, Serialize};

/// What `cohort-rank doctor local` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalFacts {
    pub torch_version: String,
    /// Empty: libtorch has no CUDA.
    pub torch_cuda: String,
    pub cuda_available: bool,
    pub cuda_devices: i64,
    pub nccl_compiled: bool,
    /// One per visible CUDA device, or one for the CPU when none is.
    pub matmul: Vec<DeviceMatmul>,
}

/// One device's matmul figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceMatmul {
    /// The CUDA index as this process sees it; -1 for the CPU.
    pub device: i64,
    pub dtype: String,
    pub size: i64,
    pub tflops: f64,
    /// Why it could not run (then `tflops` is 0).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// What rank 0 of `cohort-rank doctor all-reduce` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceResult {
    pub backend: String,
    pub world_size: i64,
    pub bytes: u64,
    pub iterations: u32,
    pub seconds_per_iteration: f64,
    /// bytes / time, GB/s.
    pub algbw_gbps: f64,
    /// algbw x 2(n-1)/n, GB/s.
    pub busbw_gbps: f64,
    /// Every element equalled the sum of the ranks' values.
    pub correct: bool,
}

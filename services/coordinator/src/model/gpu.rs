//! GPUs as agents describe and sample them: the fleet, selection, alerts,
//! history and metrics read these; the API converts them to and from
//! `GpuInfo` and `GpuSample` messages at the edge.

use chrono::{DateTime, Utc};

/// A GPU an agent registered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuRecord {
    pub uuid: String,
    pub index: i32,
    pub name: String,
    pub memory_total_bytes: u64,
    pub compute_capability: String,
    pub simulated: bool,
    /// Why it is quarantined after a hardware fault; `None` when it is not.
    pub quarantine: Option<String>,
}

/// One telemetry sample of one GPU. What the driver can't report on a
/// device stays `None`, never a made-up zero.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSample {
    pub gpu_uuid: String,
    pub index: i32,
    /// When the agent took it (the time it arrived when the agent gave none).
    pub time: DateTime<Utc>,
    pub utilization_gpu_percent: Option<f64>,
    pub utilization_memory_percent: Option<f64>,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub temperature_celsius: Option<f64>,
    pub power_draw_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub ecc_errors_corrected: Option<u64>,
    pub ecc_errors_uncorrected: Option<u64>,
    /// Active clock throttle reasons in NVML's words.
    pub throttle_reasons: Vec<String>,
    pub simulated: bool,
    pub processes: Vec<GpuProcess>,
    /// Critical XID errors since the agent began watching the GPU.
    pub xid_errors: Option<u64>,
    pub last_xid: Option<u32>,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory_bytes: Option<u64>,
    pub name: String,
    /// A cohort rank its agent started (any other process makes the GPU busy).
    pub cohort_rank: bool,
}

//! What the probe reports: static facts per GPU and periodic samples.

/// CUDA compute capability, e.g. 8.0 for an A100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeCapability {
    pub major: i32,
    pub minor: i32,
}

/// Static facts about one GPU, sent once when the agent registers.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    /// The device index as NVML and CUDA_VISIBLE_DEVICES number it.
    pub index: u32,
    /// Globally unique id, `GPU-...`.
    pub uuid: String,
    /// Product name, e.g. "NVIDIA A100-SXM4-80GB".
    pub name: String,
    pub memory_total_bytes: u64,
    pub compute_capability: Option<ComputeCapability>,
    /// The enforced power limit.
    pub power_limit_w: Option<f64>,
    /// True when the GPU is simulated: nothing about it is real.
    pub simulated: bool,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory the process holds, where the driver reports it.
    pub used_memory_bytes: Option<u64>,
    /// True when the process is a rank this agent started (told to the probe
    /// through [`super::GpuProbe::assign`]); false for anything else.
    pub cohort_rank: bool,
}

/// One telemetry reading of one GPU. Fields a device does not support are `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    /// Milliseconds since the Unix epoch when the sample was taken.
    pub timestamp_ms: u64,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    /// Percent of time a kernel ran, 0..=100.
    pub utilization_gpu_pct: Option<u32>,
    /// Percent of time device memory was read or written, 0..=100.
    pub utilization_memory_pct: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// Volatile (since driver load) corrected ECC errors.
    pub ecc_corrected: Option<u64>,
    /// Volatile (since driver load) uncorrected ECC errors.
    pub ecc_uncorrected: Option<u64>,
    /// Active clock throttle reasons in lowercase snake case (e.g. `sw_power_cap`);
    /// `None` when the device cannot report them, empty when nothing throttles.
    pub throttle_reasons: Option<Vec<String>>,
    /// Critical XID errors seen since the agent began watching; `None` when
    /// NVML cannot deliver XID events for the GPU.
    pub xid_errors: Option<u64>,
    /// The newest of those errors' XID code.
    pub last_xid: Option<u32>,
    /// Compute processes on this GPU.
    pub processes: Vec<GpuProcess>,
    /// True when the values are made up by the simulated probe.
    pub simulated: bool,
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

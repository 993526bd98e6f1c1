use thiserror::Error;

/// Why the GPU probe could not answer.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// The NVIDIA management library could not be loaded or initialised:
    /// no driver on this machine, or a broken install.
    #[error(
        "NVML is unavailable ({reason}); this machine has no usable NVIDIA driver. \
         On a machine without GPUs run with --simulate-gpus N[:MEM], e.g. --simulate-gpus 2:16GiB"
    )]
    NvmlUnavailable { reason: String },
    /// An NVML call failed for a device.
    #[error("nvml {call} failed for gpu {index}: {reason}")]
    Device {
        call: &'static str,
        index: u32,
        reason: String,
    },
    /// An NVML call that is not about one device failed.
    #[error("nvml {call} failed: {reason}")]
    Nvml { call: &'static str, reason: String },
    /// The GPU index does not exist on this host.
    #[error("gpu {index} does not exist (this host has {count})")]
    NoSuchGpu { index: u32, count: u32 },
}

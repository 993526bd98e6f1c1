//! The real probe: NVML through nvml-wrapper, which loads libnvidia-ml at run time.

use std::collections::HashMap;

use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::types::now_ms;
use super::xid::{XidCount, XidWatch};
use super::{ComputeCapability, GpuInfo, GpuProbe, GpuProcess, GpuSample, ProbeError};

/// Reads real GPUs through the NVIDIA driver.
pub struct NvmlProbe {
    /// Lives as long as the process: the XID event sets borrow it.
    nvml: &'static Nvml,
    xid: XidWatch,
    count: u32,
    /// The rank pids the agent runs, per GPU index (see [`GpuProbe::assign`]).
    ranks: HashMap<u32, Vec<u32>>,
}

impl NvmlProbe {
    /// Loads and initialises NVML. On a machine without the driver this is
    /// [`ProbeError::NvmlUnavailable`].
    pub fn init() -> Result<Self, ProbeError> {
        let nvml = Nvml::init().map_err(|e| ProbeError::NvmlUnavailable {
            reason: unavailable_reason(&e),
        })?;
        let count = nvml.device_count().map_err(|e| ProbeError::Nvml {
            call: "device_count",
            reason: e.to_string(),
        })?;
        // The probe lives until the agent exits; leaking the handle lets the
        // event sets borrow it for 'static.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        Ok(Self {
            nvml,
            xid: XidWatch::new(nvml, count),
            count,
            ranks: HashMap::new(),
        })
    }

    fn device(&self, index: u32) -> Result<Device<'_>, ProbeError> {
        if index >= self.count {
            return Err(ProbeError::NoSuchGpu {
                index,
                count: self.count,
            });
        }
        self.nvml
            .device_by_index(index)
            .map_err(|e| device_err("device_by_index", index, e))
    }

    fn ranks_on(&self, index: u32) -> &[u32] {
        self.ranks.get(&index).map_or(&[], Vec::as_slice)
    }

    fn info(&self, index: u32) -> Result<GpuInfo, ProbeError> {
        let dev = self.device(index)?;
        let memory = dev
            .memory_info()
            .map_err(|e| device_err("memory_info", index, e))?;
        Ok(GpuInfo {
            index,
            uuid: dev.uuid().map_err(|e| device_err("uuid", index, e))?,
            name: dev.name().map_err(|e| device_err("name", index, e))?,
            memory_total_bytes: memory.total,
            compute_capability: optional(dev.cuda_compute_capability()).map(|c| {
                ComputeCapability {
                    major: c.major,
                    minor: c.minor,
                }
            }),
            power_limit_w: optional(dev.enforced_power_limit()).map(milliwatts),
            simulated: false,
        })
    }

    fn sample_one(&self, index: u32, xid: Option<XidCount>) -> Result<GpuSample, ProbeError> {
        let dev = self.device(index)?;
        let memory = dev
            .memory_info()
            .map_err(|e| device_err("memory_info", index, e))?;
        let utilization = optional(dev.utilization_rates());
        Ok(GpuSample {
            index,
            uuid: dev.uuid().map_err(|e| device_err("uuid", index, e))?,
            timestamp_ms: now_ms(),
            memory_used_bytes: memory.used,
            memory_total_bytes: memory.total,
            utilization_gpu_pct: utilization.as_ref().map(|u| u.gpu),
            utilization_memory_pct: utilization.as_ref().map(|u| u.memory),
            temperature_c: optional(dev.temperature(TemperatureSensor::Gpu)),
            power_draw_w: optional(dev.power_usage()).map(milliwatts),
            power_limit_w: optional(dev.enforced_power_limit()).map(milliwatts),
            sm_clock_mhz: optional(dev.clock_info(Clock::SM)),
            memory_clock_mhz: optional(dev.clock_info(Clock::Memory)),
            ecc_corrected: optional(
                dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
            ),
            ecc_uncorrected: optional(
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            ),
            throttle_reasons: optional(dev.current_throttle_reasons()).map(|reasons| {
                reasons
                    .iter_names()
                    .map(|(name, _)| name.to_ascii_lowercase())
                    .collect()
            }),
            xid_errors: xid.map(|x| x.errors),
            last_xid: xid.and_then(|x| x.last),
            processes: processes_of(&dev, self.ranks_on(index)),
            simulated: false,
        })
    }
}

impl GpuProbe for NvmlProbe {
    fn inventory(&self) -> Result<Vec<GpuInfo>, ProbeError> {
        (0..self.count).map(|i| self.info(i)).collect()
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, ProbeError> {
        (0..self.count)
            .map(|i| {
                let xid = self.xid.poll(i);
                self.sample_one(i, xid)
            })
            .collect()
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, ProbeError> {
        Ok(processes_of(&self.device(index)?, self.ranks_on(index)))
    }

    fn assign(&mut self, index: u32, pids: &[u32]) {
        self.ranks.insert(index, pids.to_vec());
    }

    fn is_simulated(&self) -> bool {
        false
    }
}

/// Running compute processes, each marked as one of `ranks` or not; a device
/// that cannot list them reports none.
fn processes_of(dev: &Device<'_>, ranks: &[u32]) -> Vec<GpuProcess> {
    optional(dev.running_compute_processes())
        .unwrap_or_default()
        .into_iter()
        .map(|p| GpuProcess {
            pid: p.pid,
            used_memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
            cohort_rank: ranks.contains(&p.pid),
        })
        .collect()
}

/// An optional field: any failure (not supported, no permission, a transient
/// error) reads as "not available" rather than failing the whole sample.
fn optional<T>(result: Result<T, NvmlError>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(e) => {
            tracing::debug!(error = %e, "nvml optional field unavailable");
            None
        }
    }
}

fn milliwatts(mw: u32) -> f64 {
    f64::from(mw) / 1000.0
}

fn device_err(call: &'static str, index: u32, e: NvmlError) -> ProbeError {
    ProbeError::Device {
        call,
        index,
        reason: e.to_string(),
    }
}

fn unavailable_reason(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => {
            format!("could not load libnvidia-ml.so.1: {inner}")
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_string(),
        other => other.to_string(),
    }
}

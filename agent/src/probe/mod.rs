//! GPU inventory and telemetry, behind one trait with two implementations:
//! [`NvmlProbe`] (the real driver, loaded at run time) and [`SimulatedProbe`]
//! (for machines without a GPU; every value it reports is flagged `simulated`).

mod error;
mod nvml;
pub mod report;
mod sim_script;
mod sim_spec;
mod simulated;
mod types;
mod xid;

pub use error::ProbeError;
pub use nvml::NvmlProbe;
pub use sim_script::{parse_overrides, OverrideFile, SimScriptError};
pub use sim_spec::{SimSpec, SimSpecError, DEFAULT_SIM_MEMORY_BYTES, MAX_SIM_GPUS};
pub use simulated::{sim_uuid, SimControls, SimField, SimulatedProbe};
pub use types::{ComputeCapability, GpuInfo, GpuProcess, GpuSample};

/// A source of GPU facts for one host.
///
/// Calls are synchronous and quick (NVML answers in microseconds to a few
/// milliseconds); async callers run them off the reactor.
pub trait GpuProbe: Send {
    /// The GPUs of this host, in index order. Static facts only.
    fn inventory(&self) -> Result<Vec<GpuInfo>, ProbeError>;

    /// One telemetry sample per GPU, in index order, including the compute
    /// processes each GPU runs. A field the device does not support is `None`.
    fn sample(&mut self) -> Result<Vec<GpuSample>, ProbeError>;

    /// The compute processes currently using GPU `index`.
    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, ProbeError>;

    /// Tells the probe which rank processes the agent runs on GPU `index`.
    /// A simulated probe derives its load from this; NVML sees the real
    /// processes and ignores it.
    fn assign(&mut self, _index: u32, _pids: &[u32]) {}

    /// True for a probe whose values are made up.
    fn is_simulated(&self) -> bool;
}

/// Opens the probe the command line asks for: the simulated one when `simulate`
/// is given (pinned by `overrides` when a file is named), otherwise NVML
/// (failing with [`ProbeError::NvmlUnavailable`] on a machine without the
/// NVIDIA driver).
pub fn open(
    simulate: Option<&SimSpec>,
    agent_name: &str,
    overrides: Option<&std::path::Path>,
) -> Result<Box<dyn GpuProbe>, ProbeError> {
    match simulate {
        Some(spec) => {
            let mut probe = SimulatedProbe::new(agent_name, spec);
            if let Some(path) = overrides {
                probe = probe.with_override_file(path);
            }
            Ok(Box::new(probe))
        }
        None => Ok(Box::new(NvmlProbe::init()?)),
    }
}

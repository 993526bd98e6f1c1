//! What NVML (or the simulated probe) says about the host: the driver, the
//! CUDA version it supports, each GPU's model, compute capability and
//! memory, and how each pair of GPUs is connected.

use super::DoctorSetup;
use crate::probe::{GpuInfo, GpuProbe, GpuSample, SimulatedProbe};
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::{Device, Nvml};

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub compute_capability: Option<(i32, i32)>,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// How two GPUs reach each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub a: u32,
    pub b: u32,
    /// Active NVLink links between them (0: none).
    pub nvlinks: u32,
    /// The closest common ancestor on the PCIe tree.
    pub path: &'static str,
}

/// The driver's view of the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Driver {
    pub version: String,
    /// The newest CUDA (major, minor) the driver supports.
    pub cuda: Option<(i32, i32)>,
    pub gpus: Vec<Gpu>,
    pub links: Vec<Link>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HostFacts {
    /// NVML could not be loaded or initialised.
    NoDriver {
        reason: String,
    },
    Real(Driver),
    /// The agent simulates its GPUs: nothing about them is real.
    Simulated {
        gpus: Vec<GpuInfo>,
        samples: Vec<GpuSample>,
    },
}

impl HostFacts {
    /// The GPU indices ranks could be placed on.
    pub fn gpu_indices(&self) -> Vec<u32> {
        match self {
            HostFacts::NoDriver { .. } => Vec::new(),
            HostFacts::Real(d) => d.gpus.iter().map(|g| g.index).collect(),
            HostFacts::Simulated { gpus, .. } => gpus.iter().map(|g| g.index).collect(),
        }
    }

    /// Real GPUs the libtorch checks may use.
    pub fn is_real(&self) -> bool {
        matches!(self, HostFacts::Real(d) if !d.gpus.is_empty())
    }
}

/// Reads the facts off the blocking pool (NVML calls block).
pub async fn facts(setup: &DoctorSetup) -> HostFacts {
    let (simulate, name) = (setup.simulate, setup.agent_name.clone());
    let read = tokio::task::spawn_blocking(move || match simulate {
        Some(spec) => {
            let mut probe = SimulatedProbe::new(&name, &spec);
            HostFacts::Simulated {
                gpus: probe.inventory().unwrap_or_default(),
                samples: probe.sample().unwrap_or_default(),
            }
        }
        None => match Nvml::init() {
            Ok(nvml) => HostFacts::Real(driver(&nvml)),
            Err(e) => HostFacts::NoDriver {
                reason: e.to_string(),
            },
        },
    });
    read.await.unwrap_or_else(|e| HostFacts::NoDriver {
        reason: format!("reading NVML failed: {e}"),
    })
}

fn driver(nvml: &Nvml) -> Driver {
    let cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
        (
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v),
        )
    });
    let count = nvml.device_count().unwrap_or(0);
    let devices: Vec<(u32, Device<'_>)> = (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d)))
        .collect();
    let gpus = devices
        .iter()
        .map(|(index, d)| {
            let memory = d.memory_info().ok();
            Gpu {
                index: *index,
                name: d.name().unwrap_or_else(|_| "unknown GPU".into()),
                compute_capability: d.cuda_compute_capability().ok().map(|c| (c.major, c.minor)),
                free_bytes: memory.as_ref().map_or(0, |m| m.free),
                total_bytes: memory.as_ref().map_or(0, |m| m.total),
            }
        })
        .collect();
    let mut links = Vec::new();
    for (i, (a, da)) in devices.iter().enumerate() {
        for (b, db) in devices.iter().skip(i + 1) {
            links.push(Link {
                a: *a,
                b: *b,
                nvlinks: nvlinks_between(da, db),
                path: nvml
                    .topology_common_ancestor(da, db)
                    .map_or("unknown", level_name),
            });
        }
    }
    Driver {
        version: nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".into()),
        cuda,
        gpus,
        links,
    }
}

/// PCI device ids of NVIDIA's NVSwitch chips (A100's and H100's systems).
const NVSWITCH_DEVICE_IDS: [u32; 2] = [0x1af1, 0x22a3];

/// Links of `a` that are active and end at `b` (NVLink or an NVSwitch
/// that reaches every GPU: both count).
fn nvlinks_between(a: &Device<'_>, b: &Device<'_>) -> u32 {
    let Ok(b_bus) = b.pci_info().map(|p| p.bus_id) else {
        return 0;
    };
    // NVML_NVLINK_MAX_LINKS is 18 on Hopper.
    (0..18)
        .map(|link| a.link_wrapper_for(link))
        .filter(|l| l.is_active().unwrap_or(false))
        .filter(|l| {
            l.remote_pci_info().is_ok_and(|p| {
                p.bus_id == b_bus || NVSWITCH_DEVICE_IDS.contains(&(p.pci_device_id >> 16))
            })
        })
        .count() as u32
}

fn level_name(level: TopologyLevel) -> &'static str {
    match level {
        TopologyLevel::Internal => "same board",
        TopologyLevel::Single => "one PCIe switch",
        TopologyLevel::Multiple => "several PCIe switches",
        TopologyLevel::HostBridge => "one host bridge",
        TopologyLevel::Node => "one NUMA node",
        TopologyLevel::System => "across NUMA nodes",
    }
}

//! The checks of the GPUs themselves: compute capability, how they are
//! connected, their free memory, and their matmul throughput against the
//! model's peak.

use super::host::HostFacts;
use super::{Check, Status};
use cohort_spec::doctor::LocalFacts;

/// Lowest compute capability cohort supports (bf16 needs 8.0).
const MIN_COMPUTE_CAPABILITY: (i32, i32) = (7, 0);
/// A GPU's matmul below this fraction of its peak fails.
const MATMUL_MIN_FRACTION: f64 = 0.4;
/// An idle GPU with less than this fraction free holds someone else's work.
const MEMORY_MIN_FREE: f64 = 0.8;

/// Dense bf16 peak TFLOP/s by a fragment of the NVML model name, most
/// specific first (the vendors' data sheets, without sparsity).
const PEAKS: [(&str, f64); 13] = [
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("RTX 4090", 165.0),
];

/// The dense bf16 peak of a GPU model, when known.
pub fn matmul_peak_tflops(model: &str) -> Option<f64> {
    let model = model.to_lowercase();
    PEAKS
        .iter()
        .find(|(fragment, _)| model.contains(&fragment.to_lowercase()))
        .map(|(_, peak)| *peak)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

pub fn compute_capability(host: &HostFacts) -> Check {
    let d = match host {
        HostFacts::Real(d) if !d.gpus.is_empty() => d,
        HostFacts::Simulated { .. } => {
            return Check::new(
                "compute_capability",
                Status::Skip,
                "simulated",
                "simulated GPUs have no compute capability",
            )
        }
        _ => {
            return Check::new(
                "compute_capability",
                Status::Skip,
                "no GPU",
                "no GPU to check",
            )
        }
    };
    let shown: Vec<String> = d
        .gpus
        .iter()
        .map(|g| match g.compute_capability {
            Some((major, minor)) => format!("GPU{} {major}.{minor}", g.index),
            None => format!("GPU{} unknown", g.index),
        })
        .collect();
    let below: Vec<String> = d
        .gpus
        .iter()
        .filter(|g| {
            g.compute_capability
                .is_none_or(|cc| cc < MIN_COMPUTE_CAPABILITY)
        })
        .map(|g| format!("GPU{}", g.index))
        .collect();
    let value = shown.join(", ");
    if !below.is_empty() {
        return Check::new(
            "compute_capability",
            Status::Fail,
            value,
            format!("{} below 7.0 (or unknown): not supported", below.join(", ")),
        );
    }
    let no_bf16 = d
        .gpus
        .iter()
        .any(|g| g.compute_capability.is_some_and(|cc| cc < (8, 0)));
    let detail = if no_bf16 {
        "at least 7.0; below 8.0 bf16 is slow: train in f16 or f32"
    } else {
        "at least 8.0: bf16 runs natively"
    };
    Check::new("compute_capability", Status::Pass, value, detail)
}

pub fn topology(host: &HostFacts) -> Check {
    let d = match host {
        HostFacts::Real(d) if d.gpus.len() >= 2 => d,
        HostFacts::Real(d) if d.gpus.len() == 1 => {
            return Check::new(
                "topology",
                Status::Skip,
                "one GPU",
                "one GPU: nothing to connect",
            )
        }
        HostFacts::Simulated { .. } => {
            return Check::new(
                "topology",
                Status::Skip,
                "simulated",
                "simulated GPUs have no links",
            )
        }
        _ => return Check::new("topology", Status::Skip, "no GPU", "no GPU to connect"),
    };
    let pairs: Vec<String> = d
        .links
        .iter()
        .map(|l| match l.nvlinks {
            0 => format!("{}-{} PCIe, {}", l.a, l.b, l.path),
            n => format!("{}-{} NVLink x{n}", l.a, l.b,),
        })
        .collect();
    let slow: Vec<String> = d
        .links
        .iter()
        .filter(|l| l.nvlinks == 0 && l.path == "across NUMA nodes")
        .map(|l| format!("{}-{}", l.a, l.b))
        .collect();
    let nvlink = d.links.iter().all(|l| l.nvlinks > 0);
    let detail = if nvlink {
        "every pair of GPUs is joined by NVLink".to_string()
    } else if slow.is_empty() {
        "some GPUs meet only over PCIe: all-reduce bandwidth is PCIe's".to_string()
    } else {
        format!(
            "GPUs {} meet only across NUMA nodes: all-reduce between them is slow",
            slow.join(", ")
        )
    };
    Check::new("topology", Status::Pass, pairs.join("; "), detail)
}

pub fn memory(host: &HostFacts, busy: &[u32]) -> Check {
    match host {
        HostFacts::Real(d) if !d.gpus.is_empty() => {
            let value = d
                .gpus
                .iter()
                .map(|g| {
                    format!(
                        "GPU{} {:.1}/{:.1} GiB free",
                        g.index,
                        gib(g.free_bytes),
                        gib(g.total_bytes)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let taken: Vec<String> = d
                .gpus
                .iter()
                .filter(|g| !busy.contains(&g.index))
                .filter(|g| (g.free_bytes as f64) < MEMORY_MIN_FREE * g.total_bytes as f64)
                .map(|g| {
                    format!(
                        "GPU{} has {:.1} GiB in use",
                        g.index,
                        gib(g.total_bytes - g.free_bytes)
                    )
                })
                .collect();
            if taken.is_empty() {
                Check::new(
                    "memory",
                    Status::Pass,
                    value,
                    "idle GPUs are free (at least 80 % of their memory)",
                )
            } else {
                Check::new(
                    "memory",
                    Status::Fail,
                    value,
                    format!("{} by processes cohort did not start", taken.join(", ")),
                )
            }
        }
        HostFacts::Simulated { samples, .. } => {
            let value = samples
                .iter()
                .map(|s| {
                    format!(
                        "GPU{} {:.1}/{:.1} GiB free",
                        s.index,
                        gib(s.memory_total_bytes - s.memory_used_bytes.min(s.memory_total_bytes)),
                        gib(s.memory_total_bytes)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            Check::new(
                "memory",
                Status::Skip,
                value,
                "simulated memory: nothing real to check",
            )
        }
        _ => Check::new("memory", Status::Skip, "no GPU", "no GPU memory to check"),
    }
}

pub fn matmul(host: &HostFacts, local: &Result<LocalFacts, String>, idle: &[u32]) -> Check {
    let facts = match local {
        Err(e) => {
            return Check::new(
                "matmul",
                Status::Fail,
                "not run",
                format!("cohort-rank doctor failed: {e}"),
            )
        }
        Ok(f) => f,
    };
    let d = match host {
        HostFacts::Real(d) if !d.gpus.is_empty() => d,
        _ => {
            let value = facts
                .matmul
                .first()
                .map(|m| {
                    format!(
                        "CPU {:.3} TFLOP/s {} ({}x{})",
                        m.tflops, m.dtype, m.size, m.size
                    )
                })
                .unwrap_or_default();
            return Check::new(
                "matmul",
                Status::Skip,
                value,
                "no GPU to measure: the CPU's figure is for reference",
            );
        }
    };
    if idle.is_empty() {
        return Check::new(
            "matmul",
            Status::Skip,
            "not run",
            "every GPU runs a rank: none was measured",
        );
    }
    let mut shown = Vec::new();
    let mut slow = Vec::new();
    for (m, index) in facts.matmul.iter().zip(idle) {
        let model = d
            .gpus
            .iter()
            .find(|g| g.index == *index)
            .map_or("", |g| g.name.as_str());
        if !m.error.is_empty() {
            slow.push(format!("GPU{index}: {}", m.error));
            continue;
        }
        match matmul_peak_tflops(model) {
            Some(peak) => {
                let fraction = m.tflops / peak;
                shown.push(format!(
                    "GPU{index} {:.0} TFLOP/s {} ({:.0} % of {peak:.0})",
                    m.tflops,
                    m.dtype,
                    fraction * 100.0
                ));
                if fraction < MATMUL_MIN_FRACTION {
                    slow.push(format!(
                        "GPU{index} reached {:.0} % of its peak",
                        fraction * 100.0
                    ));
                }
            }
            None => shown.push(format!(
                "GPU{index} {:.0} TFLOP/s {} (peak unknown for {model})",
                m.tflops, m.dtype
            )),
        }
    }
    let value = shown.join(", ");
    if slow.is_empty() {
        Check::new(
            "matmul",
            Status::Pass,
            value,
            "every idle GPU reached at least 40 % of its bf16 peak (or its peak is unknown)",
        )
    } else {
        Check::new(
            "matmul",
            Status::Fail,
            value,
            format!(
                "{} (clocks, power cap, a process sharing it?)",
                slow.join("; ")
            ),
        )
    }
}

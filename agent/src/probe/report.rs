//! A plain-text table of the inventory and one sample (`cohort-agent --probe-once`).

use std::fmt::Write;

use super::{GpuInfo, GpuSample};

/// One line per GPU: identity, then the sampled values; `-` where the device
/// reports nothing. Simulated GPUs say so.
pub fn render(gpus: &[GpuInfo], samples: &[GpuSample]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<3} {:<28} {:<44} {:>11} {:>5} {:>5} {:>6} {:>13} {:>9} {:>5} {:>8}  throttle",
        "IDX",
        "UUID",
        "NAME",
        "MEM MiB",
        "UTIL",
        "MUTIL",
        "TEMP",
        "POWER W",
        "SM MHz",
        "CC",
        "PROCS"
    );
    for gpu in gpus {
        let sample = samples.iter().find(|s| s.index == gpu.index);
        let name = if gpu.simulated {
            format!("{} [simulated]", gpu.name)
        } else {
            gpu.name.clone()
        };
        let memory = sample
            .map(|s| {
                format!(
                    "{}/{}",
                    s.memory_used_bytes >> 20,
                    s.memory_total_bytes >> 20
                )
            })
            .unwrap_or_else(|| format!("-/{}", gpu.memory_total_bytes >> 20));
        let util = opt(sample.and_then(|s| s.utilization_gpu_pct), "%");
        let mem_util = opt(sample.and_then(|s| s.utilization_memory_pct), "%");
        let temp = opt(sample.and_then(|s| s.temperature_c), "C");
        let power = match sample.map(|s| (s.power_draw_w, s.power_limit_w)) {
            Some((Some(draw), Some(limit))) => format!("{draw:.0}/{limit:.0}"),
            Some((Some(draw), None)) => format!("{draw:.0}"),
            _ => "-".into(),
        };
        let sm = opt(sample.and_then(|s| s.sm_clock_mhz), "");
        let cc = gpu
            .compute_capability
            .map(|c| format!("{}.{}", c.major, c.minor))
            .unwrap_or_else(|| "-".into());
        let procs = sample
            .map(|s| s.processes.len().to_string())
            .unwrap_or_else(|| "-".into());
        let throttle = match sample.and_then(|s| s.throttle_reasons.as_ref()) {
            Some(r) if r.is_empty() => "none".to_string(),
            Some(r) => r.join(","),
            None => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<3} {:<28} {:<44} {:>11} {:>5} {:>5} {:>6} {:>13} {:>9} {:>5} {:>8}  {}",
            gpu.index, gpu.uuid, name, memory, util, mem_util, temp, power, sm, cc, procs, throttle
        );
    }
    out
}

fn opt<T: std::fmt::Display>(value: Option<T>, unit: &str) -> String {
    value
        .map(|v| format!("{v}{unit}"))
        .unwrap_or_else(|| "-".into())
}

//! Judging the facts: each check's status, value and one-line reason.

use super::host::{Driver, HostFacts};
use super::torch::AllReduceRun;
use super::{Check, Status};
use cohort_spec::doctor::LocalFacts;

pub use super::gpus::matmul_peak_tflops;
use super::gpus::{compute_capability, matmul, memory, topology};

/// The eight checks before `roots`, in order.
pub fn judge(
    host: &HostFacts,
    local: &Result<LocalFacts, String>,
    all_reduce: &Result<AllReduceRun, String>,
    busy: &[u32],
) -> Vec<Check> {
    let idle: Vec<u32> = host
        .gpu_indices()
        .into_iter()
        .filter(|i| !busy.contains(i))
        .collect();
    vec![
        driver(host),
        cuda(host, local, &idle),
        nccl(host, local),
        compute_capability(host),
        topology(host),
        memory(host, busy),
        matmul(host, local, &idle),
        all_reduce_check(all_reduce),
    ]
}

fn driver(host: &HostFacts) -> Check {
    match host {
        HostFacts::NoDriver { reason } => Check::new(
            "driver",
            Status::Fail,
            "no driver",
            format!("NVML could not be loaded: {reason} (no NVIDIA driver on this host, or it is not visible to the agent)"),
        ),
        HostFacts::Simulated { gpus, .. } => Check::new(
            "driver",
            Status::Skip,
            format!("{} simulated GPU(s)", gpus.len()),
            "the agent simulates its GPUs: no driver is used",
        ),
        HostFacts::Real(d) if d.gpus.is_empty() => Check::new(
            "driver",
            Status::Fail,
            format!("driver {}, 0 GPUs", d.version),
            "the driver is loaded but sees no GPU",
        ),
        HostFacts::Real(d) => Check::new(
            "driver",
            Status::Pass,
            format!("driver {}{}, {} GPU(s)", d.version, cuda_of(d), d.gpus.len()),
            "NVML answers",
        ),
    }
}

fn cuda_of(d: &Driver) -> String {
    d.cuda
        .map(|(major, minor)| format!(" (CUDA {major}.{minor})"))
        .unwrap_or_default()
}

fn version(text: &str) -> Option<(i32, i32)> {
    let mut parts = text.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next().unwrap_or("0").trim().parse().unwrap_or(0);
    Some((major, minor))
}

fn cuda(host: &HostFacts, local: &Result<LocalFacts, String>, idle: &[u32]) -> Check {
    let facts = match local {
        Err(e) => {
            return Check::new(
                "cuda",
                Status::Fail,
                "unknown",
                format!("cohort-rank doctor failed: {e}"),
            )
        }
        Ok(f) => f,
    };
    let Some(build) = version(&facts.torch_cuda) else {
        return Check::new(
            "cuda",
            Status::Fail,
            format!("torch {} without CUDA", facts.torch_version),
            "this libtorch was built without CUDA: ranks can only train on the CPU",
        );
    };
    let value = format!(
        "torch {} for CUDA {}, {} device(s) visible",
        facts.torch_version, facts.torch_cuda, facts.cuda_devices
    );
    match host {
        HostFacts::Simulated { .. } => Check::new(
            "cuda",
            Status::Skip,
            value,
            "simulated GPUs train on the CPU: no CUDA device to open",
        ),
        HostFacts::NoDriver { .. } => Check::new(
            "cuda",
            Status::Fail,
            value,
            "libtorch sees no CUDA device: there is no NVIDIA driver",
        ),
        HostFacts::Real(d) => {
            let Some(supported) = d.cuda else {
                return Check::new(
                    "cuda",
                    Status::Fail,
                    value,
                    "the driver does not say which CUDA it supports",
                );
            };
            if supported.0 < build.0 {
                return Check::new(
                    "cuda",
                    Status::Fail,
                    value,
                    format!(
                        "the driver ({}) supports CUDA {}.{}, libtorch needs CUDA {}.{}: upgrade the driver",
                        d.version, supported.0, supported.1, build.0, build.1
                    ),
                );
            }
            if idle.is_empty() {
                return Check::new(
                    "cuda",
                    Status::Pass,
                    value,
                    "every GPU runs a rank: none was opened",
                );
            }
            if facts.cuda_devices != idle.len() as i64 {
                return Check::new(
                    "cuda",
                    Status::Fail,
                    value,
                    format!(
                        "libtorch sees {} of the {} idle GPUs (a container without the devices, or CUDA_VISIBLE_DEVICES)",
                        facts.cuda_devices,
                        idle.len()
                    ),
                );
            }
            let note = if supported < build {
                " through CUDA minor-version compatibility"
            } else {
                ""
            };
            Check::new(
                "cuda",
                Status::Pass,
                value,
                format!(
                    "the driver supports CUDA {}.{}{note}",
                    supported.0, supported.1
                ),
            )
        }
    }
}

fn nccl(host: &HostFacts, local: &Result<LocalFacts, String>) -> Check {
    let facts = match local {
        Err(e) => {
            return Check::new(
                "nccl",
                Status::Fail,
                "unknown",
                format!("cohort-rank doctor failed: {e}"),
            )
        }
        Ok(f) => f,
    };
    if facts.nccl_compiled {
        return Check::new(
            "nccl",
            Status::Pass,
            "ProcessGroupNCCL compiled in",
            "CUDA ranks all-reduce over NCCL",
        );
    }
    let value = "built without ProcessGroupNCCL";
    if host.is_real() {
        Check::new(
            "nccl",
            Status::Fail,
            value,
            "CUDA trainings across ranks are refused (runtime.backend = \"gloo\" accepts host copies): rebuild cohort-rank with the CUDA and NCCL headers",
        )
    } else {
        Check::new(
            "nccl",
            Status::Skip,
            value,
            "no GPU here: gloo carries every collective",
        )
    }
}

fn all_reduce_check(run: &Result<AllReduceRun, String>) -> Check {
    let run = match run {
        Err(e) => return Check::new("all_reduce", Status::Fail, "not run", e.clone()),
        Ok(r) => r,
    };
    let r = &run.result;
    let value = format!(
        "{:.2} GB/s bus bandwidth ({}, {} processes, {} MiB)",
        r.busbw_gbps,
        r.backend,
        r.world_size,
        r.bytes >> 20
    );
    if !r.correct {
        return Check::new("all_reduce", Status::Fail, value, "the sums came out wrong");
    }
    let detail = if run.gpus.is_empty() {
        "gloo between two CPU processes on this host (no GPUs to all-reduce across)".to_string()
    } else {
        let gpus: Vec<String> = run.gpus.iter().map(u32::to_string).collect();
        format!("NCCL across GPUs {}", gpus.join(","))
    };
    Check::new("all_reduce", Status::Pass, value, detail)
}

//! The single-process checks: versions, devices, NCCL, matmul throughput.

use super::{NCCL_COMPILED, TORCH_CUDA, TORCH_VERSION};
use crate::RankError;
use cohort_spec::doctor::{DeviceMatmul, LocalFacts};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// The side of the square matmul (bf16 on a GPU, f32 on the CPU).
    #[arg(long, default_value_t = 8192)]
    pub matmul_size: i64,
    /// The side on the CPU, where 8192 would take minutes.
    #[arg(long, default_value_t = 1024)]
    pub cpu_matmul_size: i64,
    /// Timed repetitions (after one warm-up).
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
}

/// Collects the facts and runs the matmuls.
pub fn run_local(args: &LocalArgs) -> Result<LocalFacts, RankError> {
    if args.matmul_size < 1 || args.cpu_matmul_size < 1 || args.iterations < 1 {
        return Err(RankError::Launch(
            "--matmul-size, --cpu-matmul-size and --iterations must be at least 1".into(),
        ));
    }
    let cuda_available = tch::Cuda::is_available();
    let cuda_devices = if cuda_available {
        tch::Cuda::device_count()
    } else {
        0
    };
    let matmul = if cuda_devices > 0 {
        (0..cuda_devices)
            .map(|i| {
                matmul(
                    Device::Cuda(i as usize),
                    Kind::BFloat16,
                    args.matmul_size,
                    args.iterations,
                )
            })
            .collect()
    } else {
        vec![matmul(
            Device::Cpu,
            Kind::Float,
            args.cpu_matmul_size,
            args.iterations,
        )]
    };
    Ok(LocalFacts {
        torch_version: TORCH_VERSION.to_string(),
        torch_cuda: TORCH_CUDA.to_string(),
        cuda_available,
        cuda_devices,
        nccl_compiled: NCCL_COMPILED,
        matmul,
    })
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::BFloat16 => "bf16",
        Kind::Half => "f16",
        _ => "f32",
    }
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Achieved TFLOP/s of an n x n matmul (2 n^3 flops), timed with the
/// device synchronised before and after, so queued kernels are counted.
fn matmul(device: Device, kind: Kind, n: i64, iterations: u32) -> DeviceMatmul {
    let index = match device {
        Device::Cuda(i) => i as i64,
        _ => -1,
    };
    let measured = std::panic::catch_unwind(|| -> Result<f64, tch::TchError> {
        let a = Tensor::f_randn([n, n], (kind, device))?;
        let b = Tensor::f_randn([n, n], (kind, device))?;
        let _ = a.f_matmul(&b)?;
        sync(device);
        let started = Instant::now();
        for _ in 0..iterations {
            let _ = a.f_matmul(&b)?;
        }
        sync(device);
        let seconds = started.elapsed().as_secs_f64();
        Ok(2.0 * (n as f64).powi(3) * f64::from(iterations) / seconds / 1e12)
    });
    let (tflops, error) = match measured {
        Ok(Ok(t)) => (t, String::new()),
        Ok(Err(e)) => (0.0, e.to_string()),
        Err(_) => (0.0, "libtorch panicked".to_string()),
    };
    DeviceMatmul {
        device: index,
        dtype: kind_name(kind).to_string(),
        size: n,
        tflops,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_matmul_is_measured_when_no_gpu_is_visible() {
        let facts = run_local(&LocalArgs {
            matmul_size: 64,
            cpu_matmul_size: 128,
            iterations: 2,
        })
        .unwrap();
        assert_eq!(facts.torch_version, TORCH_VERSION);
        assert!(facts.torch_version.starts_with("2."), "{facts:?}");
        if !facts.cuda_available {
            assert_eq!(facts.matmul.len(), 1);
            assert_eq!(facts.matmul[0].device, -1);
            assert_eq!(facts.matmul[0].size, 128);
            assert!(facts.matmul[0].tflops > 0.0, "{facts:?}");
        }
        let bad = run_local(&LocalArgs {
            matmul_size: 0,
            cpu_matmul_size: 1,
            iterations: 1,
        });
        assert!(bad.is_err());
    }
}

//! One process of the doctor's all-reduce benchmark, through the same c10d
//! process group a training uses (gloo on the CPU, NCCL on GPUs). Bus
//! bandwidth as nccl-tests defines it: bytes x 2(n-1)/n per second.

use crate::dist::{Backend, GroupOptions, ProcessGroup};
use crate::launch::Launch;
use crate::RankError;
use cohort_spec::doctor::AllReduceResult;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    Gloo,
    Nccl,
}

#[derive(Debug, Clone, clap::Args)]
pub struct AllReduceArgs {
    /// The collective's backend: nccl puts the buffer on CUDA device 0 of
    /// the process (its CUDA_VISIBLE_DEVICES), gloo on the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Gloo)]
    pub backend: BackendArg,
    /// Bytes per all-reduce (f32 elements x 4).
    #[arg(long, default_value_t = 16 << 20)]
    pub bytes: u64,
    /// Timed all-reduces (after two warm-ups).
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// How long the peers may take to arrive, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Joins the group, all-reduces, and returns the figures on rank 0 (`None`
/// on the others).
pub fn run_all_reduce(args: &AllReduceArgs) -> Result<Option<AllReduceResult>, RankError> {
    if args.bytes < 4 || args.iterations < 1 {
        return Err(RankError::Launch(
            "--bytes must be at least 4 and --iterations at least 1".into(),
        ));
    }
    let launch = Launch::from_env()?;
    let (backend, device, name) = match args.backend {
        BackendArg::Gloo => (Backend::Gloo, Device::Cpu, "gloo"),
        BackendArg::Nccl if !super::NCCL_COMPILED => {
            return Err(RankError::Launch(
                "this cohort-rank is built without ProcessGroupNCCL".into(),
            ))
        }
        BackendArg::Nccl if !tch::Cuda::is_available() => {
            return Err(RankError::Launch(
                "nccl needs a CUDA device, and none is visible".into(),
            ))
        }
        BackendArg::Nccl => (Backend::Nccl, Device::Cuda(0), "nccl"),
    };
    let timeout = Duration::from_secs(args.timeout_s);
    let group = ProcessGroup::join(&GroupOptions {
        backend,
        master_addr: &launch.master_addr,
        master_port: launch.master_port,
        rank: launch.rank,
        world_size: launch.world_size,
        rendezvous_timeout: timeout,
        collective_timeout: timeout,
    })?;
    let elements = (args.bytes / 4) as i64;
    let mut buffer = Tensor::f_ones([elements], (Kind::Float, device))?;
    for _ in 0..2 {
        group.allreduce_sum(&mut [&mut buffer], false)?;
    }
    sync(device);
    group.barrier()?;
    let started = Instant::now();
    for _ in 0..args.iterations {
        group.allreduce_sum(&mut [&mut buffer], false)?;
    }
    sync(device);
    let seconds = started.elapsed().as_secs_f64() / f64::from(args.iterations);
    // ones, summed 2 + iterations times over n ranks: n^(2 + iterations).
    let n = launch.world_size as f64;
    let expected = n.powi(2 + args.iterations as i32);
    let (low, high) = (
        buffer.f_min()?.double_value(&[]),
        buffer.f_max()?.double_value(&[]),
    );
    let correct =
        ((low - expected) / expected).abs() < 1e-3 && ((high - expected) / expected).abs() < 1e-3;
    group.barrier()?;
    if launch.rank != 0 {
        return Ok(None);
    }
    let algbw = args.bytes as f64 / seconds / 1e9;
    Ok(Some(AllReduceResult {
        backend: name.to_string(),
        world_size: launch.world_size,
        bytes: args.bytes,
        iterations: args.iterations,
        seconds_per_iteration: seconds,
        algbw_gbps: algbw,
        busbw_gbps: algbw * 2.0 * (n - 1.0) / n,
        correct,
    }))
}

//! The CUDA path, on a GPU only: these tests are ignored on a machine
//! without one (CI never has one) and `scripts/check-gpu.sh` runs them with
//! `--ignored` where a GPU is lent. A run that finds no GPU fails rather
//! than passing silently.

mod common;

use cohort_rank::timing::Span;
use cohort_spec::progress::ProgressLine;
use common::*;
use std::time::Duration;
use tch::{Device, Kind, Tensor};

fn gpus() -> i64 {
    assert!(
        tch::Cuda::is_available(),
        "no CUDA device: run these on a GPU (scripts/check-gpu.sh)"
    );
    tch::Cuda::device_count()
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/check-gpu.sh runs it"]
fn a_span_measures_queued_kernels_that_the_host_clock_misses() {
    gpus();
    let a = Tensor::randn([8192, 8192], (Kind::BFloat16, Device::Cuda(0)));
    let _ = a.matmul(&a);
    tch::Cuda::synchronize(0);
    let host = std::time::Instant::now();
    let span = Span::begin(Device::Cuda(0));
    for _ in 0..20 {
        let _ = a.matmul(&a);
    }
    let queued = host.elapsed();
    let device = span.end();
    // 20 bf16 8192^3 matmuls are 22 TFLOP: tens of ms on any GPU, while
    // queueing them takes far less.
    assert!(device > Duration::from_millis(5), "device time {device:?}");
    assert!(device > queued, "device {device:?} vs queueing {queued:?}");
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/check-gpu.sh runs it"]
fn cuda_timings_add_up_to_the_step() {
    gpus();
    let dir = tempfile::tempdir().unwrap();
    let text = config(4096, 200, 0)
        .replace("d_in = 32", "d_in = 768")
        .replace("d_sae = 128", "d_sae = 24576")
        .replace("[runtime]", "[runtime]\ndevice = \"cuda\"")
        .replace("num_features = 64", "num_features = 256")
        .replace("[model]", "[model]\ndtype = \"bf16\"");
    let config = write(dir.path(), "sae.toml", &text);
    let done = run_group(&config, dir.path(), 1);
    assert_eq!(done[0].code, Some(0), "{}", done[0].stderr);
    let stats: Vec<_> = done[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::RankStats {
                step_time_ms,
                compute_ms,
                comm_ms,
                data_wait_ms,
                ..
            } => Some((*step_time_ms, *compute_ms, *comm_ms, *data_wait_ms)),
            _ => None,
        })
        .collect();
    assert!(!stats.is_empty(), "no rank_stats lines");
    for (step, compute, comm, wait) in stats {
        let sum = compute + comm + wait;
        assert!(
            (sum - step).abs() <= 0.05 * step + 0.5,
            "compute {compute} + comm {comm} + wait {wait} != step {step}"
        );
    }
}

#[test]
#[ignore = "needs two CUDA GPUs: scripts/check-gpu.sh runs it where there are"]
fn two_gpus_train_over_nccl_and_count_their_all_reduce() {
    if gpus() < 2 {
        eprintln!("SKIPPED: one GPU on this host; NCCL across GPUs needs two");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = config(4096, 100, 0)
        .replace("d_in = 32", "d_in = 768")
        .replace("d_sae = 128", "d_sae = 24576")
        .replace("[runtime]", "[runtime]\ndevice = \"cuda\"")
        .replace("num_features = 64", "num_features = 256");
    let config = write(dir.path(), "sae.toml", &text);
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let visible = r.to_string();
            spawn(
                &config,
                dir.path(),
                r,
                2,
                port,
                &[("CUDA_VISIBLE_DEVICES", visible.as_str())],
            )
        })
        .collect();
    let done: Vec<_> = ranks
        .into_iter()
        .map(|r| finish(r, Duration::from_secs(300)))
        .collect();
    for d in &done {
        assert_eq!(d.code, Some(0), "{}", d.stderr);
    }
    let comm: f64 = done[0]
        .lines
        .iter()
        .filter_map(|l| match l {
            ProgressLine::RankStats { comm_ms, .. } => Some(*comm_ms),
            _ => None,
        })
        .sum();
    assert!(comm > 0.0, "NCCL's all-reduce time is counted, not ~0");
}

//! The verdicts on made-up hosts: what a real fleet's usual failures look like.

use super::host::{Driver, Gpu, HostFacts, Link};
use super::judge::{judge, matmul_peak_tflops};
use super::torch::AllReduceRun;
use super::{Check, Status};
use cohort_spec::doctor::{AllReduceResult, DeviceMatmul, LocalFacts};

const GIB: u64 = 1 << 30;

fn gpu(index: u32, name: &str, cc: (i32, i32), free_gib: u64) -> Gpu {
    Gpu {
        index,
        name: name.into(),
        compute_capability: Some(cc),
        free_bytes: free_gib * GIB,
        total_bytes: 80 * GIB,
    }
}

fn h100_host(driver_cuda: (i32, i32)) -> HostFacts {
    HostFacts::Real(Driver {
        version: "580.65.06".into(),
        cuda: Some(driver_cuda),
        gpus: vec![
            gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), 79),
            gpu(1, "NVIDIA H100 80GB HBM3", (9, 0), 79),
        ],
        links: vec![Link {
            a: 0,
            b: 1,
            nvlinks: 18,
            path: "one host bridge",
        }],
    })
}

fn facts(devices: i64, tflops: &[f64], nccl: bool) -> Result<LocalFacts, String> {
    Ok(LocalFacts {
        torch_version: "2.11.0+cu130".into(),
        torch_cuda: "13.0".into(),
        cuda_available: devices > 0,
        cuda_devices: devices,
        nccl_compiled: nccl,
        matmul: tflops
            .iter()
            .enumerate()
            .map(|(i, t)| DeviceMatmul {
                device: i as i64,
                dtype: "bf16".into(),
                size: 8192,
                tflops: *t,
                error: String::new(),
            })
            .collect(),
    })
}

fn nccl_run(busbw: f64) -> Result<AllReduceRun, String> {
    Ok(AllReduceRun {
        result: AllReduceResult {
            backend: "nccl".into(),
            world_size: 2,
            bytes: 256 << 20,
            iterations: 10,
            seconds_per_iteration: 0.001,
            algbw_gbps: busbw,
            busbw_gbps: busbw,
            correct: true,
        },
        gpus: vec![0, 1],
    })
}

fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn a_healthy_two_gpu_host_passes_every_check() {
    let checks = judge(
        &h100_host((13, 0)),
        &facts(2, &[700.0, 690.0], true),
        &nccl_run(360.0),
        &[],
    );
    for c in &checks {
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        super::CHECKS[..8],
        "the checks before `roots`, in their order"
    );
    assert_eq!(find(&checks, "topology").value, "0-1 NVLink x18");
    assert!(
        find(&checks, "matmul")
            .value
            .contains("GPU0 700 TFLOP/s bf16 (71 % of 989)"),
        "{:?}",
        checks
    );
    assert!(find(&checks, "all_reduce")
        .detail
        .contains("NCCL across GPUs 0,1"));
}

#[test]
fn a_driver_too_old_for_the_cuda_build_fails_and_says_so() {
    let checks = judge(
        &h100_host((12, 8)),
        &facts(2, &[700.0, 700.0], true),
        &nccl_run(300.0),
        &[],
    );
    let cuda = find(&checks, "cuda");
    assert_eq!(cuda.status, Status::Fail);
    assert!(
        cuda.detail
            .contains("supports CUDA 12.8, libtorch needs CUDA 13.0: upgrade the driver"),
        "{cuda:?}"
    );
    // A newer minor of the same major runs through minor-version compatibility.
    let checks = judge(
        &h100_host((13, 0)),
        &facts(2, &[700.0, 700.0], true),
        &nccl_run(300.0),
        &[],
    );
    assert_eq!(find(&checks, "cuda").status, Status::Pass);
}

#[test]
fn no_nccl_a_slow_gpu_a_hidden_gpu_and_foreign_memory_fail() {
    let mut host = h100_host((13, 0));
    if let HostFacts::Real(d) = &mut host {
        d.gpus[1].free_bytes = 30 * GIB;
    }
    let checks = judge(&host, &facts(1, &[200.0], false), &nccl_run(10.0), &[]);
    assert_eq!(find(&checks, "nccl").status, Status::Fail);
    assert!(find(&checks, "nccl").detail.contains("runtime.backend"));
    let cuda = find(&checks, "cuda");
    assert_eq!(cuda.status, Status::Fail);
    assert!(
        cuda.detail.contains("libtorch sees 1 of the 2 idle GPUs"),
        "{cuda:?}"
    );
    let matmul = find(&checks, "matmul");
    assert_eq!(matmul.status, Status::Fail, "200 of 989 is under 40 %");
    assert!(
        matmul.detail.contains("GPU0 reached 20 % of its peak"),
        "{matmul:?}"
    );
    let memory = find(&checks, "memory");
    assert_eq!(memory.status, Status::Fail);
    assert!(
        memory.detail.contains("GPU1 has 50.0 GiB in use"),
        "{memory:?}"
    );
}

#[test]
fn busy_gpus_are_left_alone() {
    let mut host = h100_host((13, 0));
    if let HostFacts::Real(d) = &mut host {
        d.gpus[0].free_bytes = 10 * GIB;
    }
    // GPU 0 runs a rank: its memory is cohort's, and only GPU 1 was measured.
    let checks = judge(
        &host,
        &facts(1, &[650.0], true),
        &Err("one idle GPU".into()),
        &[0],
    );
    assert_eq!(find(&checks, "memory").status, Status::Pass);
    assert_eq!(find(&checks, "cuda").status, Status::Pass);
    assert!(
        find(&checks, "matmul").value.starts_with("GPU1 650"),
        "{:?}",
        find(&checks, "matmul")
    );
}

#[test]
fn old_gpus_fail_compute_capability_and_pcie_across_numa_is_named() {
    let host = HostFacts::Real(Driver {
        version: "535.0".into(),
        cuda: Some((13, 0)),
        gpus: vec![
            gpu(0, "Tesla P100", (6, 0), 15),
            gpu(1, "Tesla V100", (7, 0), 15),
        ],
        links: vec![Link {
            a: 0,
            b: 1,
            nvlinks: 0,
            path: "across NUMA nodes",
        }],
    });
    let checks = judge(&host, &facts(2, &[10.0, 100.0], true), &nccl_run(5.0), &[]);
    let cc = find(&checks, "compute_capability");
    assert_eq!(cc.status, Status::Fail);
    assert_eq!(cc.value, "GPU0 6.0, GPU1 7.0");
    assert!(cc.detail.starts_with("GPU0 below 7.0"), "{cc:?}");
    let topology = find(&checks, "topology");
    assert_eq!(topology.value, "0-1 PCIe, across NUMA nodes");
    assert!(topology
        .detail
        .contains("GPUs 0-1 meet only across NUMA nodes"));
    assert!(find(&checks, "matmul").value.contains("peak unknown"));
}

#[test]
fn peaks_match_the_most_specific_model() {
    assert_eq!(matmul_peak_tflops("NVIDIA H100 PCIe"), Some(756.0));
    assert_eq!(matmul_peak_tflops("NVIDIA H100 80GB HBM3"), Some(989.0));
    assert_eq!(matmul_peak_tflops("NVIDIA A100-SXM4-80GB"), Some(312.0));
    assert_eq!(matmul_peak_tflops("NVIDIA L40S"), Some(362.0));
    assert_eq!(matmul_peak_tflops("NVIDIA L4"), Some(121.0));
    assert_eq!(matmul_peak_tflops("NVIDIA A10G"), Some(70.0));
    assert_eq!(matmul_peak_tflops("Tesla T4"), None);
}

#[test]
fn a_failed_rank_doctor_fails_its_checks_with_the_reason() {
    let checks = judge(
        &HostFacts::NoDriver {
            reason: "libnvidia-ml.so.1 missing".into(),
        },
        &Err("cannot start cohort-rank".into()),
        &Err("rank 1: timed out".into()),
        &[],
    );
    for name in ["driver", "cuda", "nccl", "all_reduce"] {
        assert_eq!(find(&checks, name).status, Status::Fail, "{name}");
    }
    assert!(find(&checks, "cuda")
        .detail
        .contains("cannot start cohort-rank"));
    assert_eq!(find(&checks, "all_reduce").detail, "rank 1: timed out");
    assert_eq!(checks.len(), 8);
}

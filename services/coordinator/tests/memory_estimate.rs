//! EstimateMemory against reality: real 2-rank `cohort-rank` runs on CPU (gloo)
//! for four configs (three shapes, and one of them again with the `flat`
//! all-reduce), each rank's peak resident memory compared with the
//! estimate for the same config.
//!
//! What is compared: the kernel's high-water mark of rank 1's resident set
//! (VmHWM; rank 1 writes no checkpoint, whose host-side serialisation is not
//! device memory) minus the resident set of a tiny run of the same binary
//! (libtorch, gloo and the runtime: ~360 MiB), as cohort-rank itself reports it
//! in `rank_stats.memory_bytes`. The ranks run with glibc's mmap threshold
//! fixed at 128 KiB, so every tensor is its own mapping and freed tensors leave
//! the resident set at once: with the default dynamic threshold, glibc keeps
//! freed tensors' pages and the resident set measures the allocator's
//! retention instead of the live tensors.
//!
//! Needs the real binary: `source scripts/env.sh && cargo build -p cohort-rank`
//! (default target dir), or `COHORT_RANK_BIN=/path/to/cohort-rank`.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

use cohort_coordinator::selection::{estimate, EstimateInput, MemoryEstimate};
use cohort_spec::TrainingConfig;
use cohort_testkit::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const MIB: f64 = 1024.0 * 1024.0;
/// The largest accepted relative error of the estimate.
const TOLERANCE: f64 = 0.20;

fn rank_binary() -> PathBuf {
    let path = std::env::var_os("COHORT_RANK_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/cohort-rank"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "cohort-rank not found at {}: build it with \
         `source scripts/env.sh && cargo build -p cohort-rank` (default target dir) \
         or point COHORT_RANK_BIN at it",
        path.display()
    );
    path
}

fn config(d_in: i64, d_sae: i64, batch: i64, samples: i64) -> String {
    config_with(d_in, d_sae, batch, samples, "overlap")
}

fn config_with(d_in: i64, d_sae: i64, batch: i64, samples: i64, allreduce: &str) -> String {
    format!(
        r#"
[model]
d_in = {d_in}
d_sae = {d_sae}
[optim]
batch_size = {batch}
steps = 2
[checkpoint]
every_steps = 0
[data.synthetic]
num_samples = {samples}
[runtime]
device = "cpu"
log_every_steps = 1
allreduce = "{allreduce}"
"#
    )
}

fn spawn_rank(bin: &PathBuf, cfg: &str, rank: u32, port: u16, run_dir: &std::path::Path) -> Child {
    Command::new(bin)
        .args(["--config-json", cfg, "--run-dir"])
        .arg(run_dir.join(format!("rank-{rank}")))
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("MALLOC_MMAP_THRESHOLD_", "131072")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cohort-rank")
}

/// VmHWM of a live process, in bytes.
fn high_water_mark(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What one 2-rank run measured on rank 1.
struct Measured {
    /// Peak resident set (VmHWM), bytes.
    peak: u64,
    /// Largest `rank_stats.memory_bytes` cohort-rank reported, bytes.
    reported: u64,
}

fn run(bin: &PathBuf, toml: &str) -> Measured {
    let cfg = TrainingConfig::from_toml(toml)
        .expect("valid config")
        .to_json();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut leader = spawn_rank(bin, &cfg, 0, port, dir.path());
    let mut follower = spawn_rank(bin, &cfg, 1, port, dir.path());
    let pid = follower.id();
    let mut peak = 0;
    // Poll until the process is gone: the last reading is the final high-water mark.
    while follower.try_wait().unwrap().is_none() {
        if let Some(hwm) = high_water_mark(pid) {
            peak = peak.max(hwm);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = follower.wait_with_output().unwrap();
    let leader_out = leader.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && leader_out.success(),
        "ranks failed ({:?}, {leader_out:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let reported = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "rank_stats")
        .filter_map(|v| v["memory_bytes"].as_u64())
        .max()
        .expect("rank_stats lines");
    Measured { peak, reported }
}

fn estimate_of(toml: &str) -> MemoryEstimate {
    let cfg = TrainingConfig::from_toml(toml).unwrap();
    estimate(&EstimateInput::from_config(&cfg))
}

#[test]
fn estimate_is_within_20_percent_of_real_ranks_on_cpu() {
    let bin = rank_binary();
    let baseline = run(&bin, &config(8, 8, 8, 64)).reported;
    let cases = [
        // Parameters and the all-reduce dominate.
        ("params", config(1024, 16384, 64, 8192)),
        // Activations of a big batch dominate.
        ("activations", config(256, 8192, 4096, 16384)),
        // Everything in proportion.
        ("balanced", config(512, 8192, 1024, 50000)),
        // The same with one flat buffer after the backward pass.
        ("balanced-flat", config_with(512, 8192, 1024, 50000, "flat")),
    ];
    let mut failures = Vec::new();
    for (name, toml) in &cases {
        let e = estimate_of(toml);
        assert_eq!(e.overhead, 0, "a CPU rank has no CUDA context");
        let measured = run(&bin, toml);
        let increment = measured.peak.saturating_sub(baseline);
        let error = (e.total as f64 - increment as f64) / increment as f64;
        println!(
            "{name}: estimate {:.1} MiB (params {:.1}, grads {:.1}, adam {:.1}, acts {:.1}, \
             data {:.1}); measured peak {:.1} MiB - baseline {:.1} MiB = {:.1} MiB \
             (largest reported RSS {:.1} MiB); error {:+.1}%",
            e.total as f64 / MIB,
            e.parameters as f64 / MIB,
            e.gradients as f64 / MIB,
            e.optimizer as f64 / MIB,
            e.activations as f64 / MIB,
            e.data as f64 / MIB,
            measured.peak as f64 / MIB,
            baseline as f64 / MIB,
            increment as f64 / MIB,
            measured.reported as f64 / MIB,
            error * 100.0
        );
        if error.abs() > TOLERANCE {
            failures.push(format!("{name}: {:+.1}%", error * 100.0));
        }
    }
    assert!(
        failures.is_empty(),
        "estimate off by more than 20%: {failures:?}"
    );
}

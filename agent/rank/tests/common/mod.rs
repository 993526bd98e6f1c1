//! Launch real `cohort-rank` processes on 127.0.0.1, torchrun-style.

#![allow(dead_code)]

use cohort_spec::progress::ProgressLine;
#[allow(unused_imports)] // each test binary uses its own part
pub use cohort_testkit::{free_port, python, S3Server};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_cohort-rank");

/// The cohort-rank to run: `COHORT_RANK_BIN` (a test executable carried to
/// another machine, scripts/check-gpu.sh), else the one cargo built.
pub fn bin() -> String {
    std::env::var("COHORT_RANK_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// A small SAE run that finishes in a second or two.
pub fn config(batch: i64, steps: i64, every: i64) -> String {
    format!(
        r#"
[model]
d_in = 32
d_sae = 128
l1_coefficient = 0.001
[optim]
learning_rate = 0.001
batch_size = {batch}
steps = {steps}
seed = 3
[checkpoint]
every_steps = {every}
keep = 100
[data.synthetic]
num_samples = 4096
num_features = 64
[runtime]
log_every_steps = 5
rendezvous_timeout_s = 20
collective_timeout_s = 5
"#
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

pub struct Rank {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub stderr: mpsc::Receiver<String>,
}

/// Start rank `rank` of `world` with its own env; stdout lines arrive on `lines`.
pub fn spawn(
    config: &Path,
    run_dir: &Path,
    rank: i64,
    world: i64,
    port: u16,
    extra: &[(&str, &str)],
) -> Rank {
    let mut cmd = Command::new(bin());
    cmd.arg("--config")
        .arg(config)
        .arg("--run-dir")
        .arg(run_dir)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn cohort-rank");
    let (tx, lines) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (tx, stderr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Rank {
        child,
        lines,
        stderr,
    }
}

pub struct Finished {
    pub code: Option<i32>,
    pub lines: Vec<ProgressLine>,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Wait for a rank to exit (killing it after `limit`) and collect its output.
pub fn finish(mut rank: Rank, limit: Duration) -> Finished {
    let started = Instant::now();
    let code = loop {
        if let Some(status) = rank.child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = rank.child.kill();
            let _ = rank.child.wait();
            panic!("cohort-rank did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(50));
    Finished {
        code,
        lines: rank
            .lines
            .try_iter()
            .filter_map(|l| ProgressLine::parse(&l))
            .collect(),
        stderr: rank.stderr.try_iter().collect::<Vec<_>>().join("\n"),
        elapsed: started.elapsed(),
    }
}

/// Run a whole group to completion; returns each rank's result, rank order.
pub fn run_group(config: &Path, run_dir: &Path, world: i64) -> Vec<Finished> {
    run_group_with(config, run_dir, world, &[])
}

/// [`run_group`] with extra environment variables for every rank.
pub fn run_group_with(
    config: &Path,
    run_dir: &Path,
    world: i64,
    extra: &[(&str, &str)],
) -> Vec<Finished> {
    let port = free_port();
    let ranks: Vec<Rank> = (0..world)
        .map(|r| spawn(config, run_dir, r, world, port, extra))
        .collect();
    ranks
        .into_iter()
        .map(|r| finish(r, Duration::from_secs(120)))
        .collect()
}

pub fn checksum(f: &Finished) -> String {
    f.lines
        .iter()
        .find_map(|l| match l {
            ProgressLine::RankFinished { param_checksum, .. } => Some(param_checksum.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no rank_finished line; stderr: {}", f.stderr))
}

/// The parameters in the newest checkpoint under `run_dir`, by name.
pub fn final_params(run_dir: &Path) -> Vec<(String, tch::Tensor)> {
    let latest = cohort_rank::checkpoint::latest(run_dir).expect("a checkpoint");
    let mut tensors =
        tch::Tensor::read_safetensors(Path::new(&latest.location).join("state.safetensors"))
            .unwrap();
    tensors.retain(|(n, _)| n.starts_with("param."));
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

/// Start a group, kill every rank with SIGKILL once rank 0 reports a
/// checkpoint at `step` or later, and return the step of the newest
/// complete checkpoint left behind.
pub fn kill_after_checkpoint(config: &Path, run_dir: &Path, world: i64, step: i64) -> i64 {
    let port = free_port();
    let mut ranks: Vec<Rank> = (0..world)
        .map(|r| spawn(config, run_dir, r, world, port, &[]))
        .collect();
    loop {
        let line = ranks[0]
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("rank 0 reports a checkpoint");
        if let Some(ProgressLine::Checkpoint { step: s, .. }) = ProgressLine::parse(&line) {
            if s >= step {
                break;
            }
        }
    }
    for r in &mut ranks {
        let _ = r.child.kill();
        let _ = r.child.wait();
    }
    cohort_rank::checkpoint::latest(run_dir)
        .expect("a complete checkpoint")
        .manifest
        .step
}

/// The step a run's started line says it began at.
pub fn start_step(f: &Finished) -> Option<i64> {
    f.lines.iter().find_map(|l| match l {
        ProgressLine::Started { start_step, .. } => Some(*start_step),
        _ => None,
    })
}

/// Run tests/make_shards.py with `args`.
pub fn make_shards(args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/make_shards.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("run make_shards.py");
    assert!(
        out.status.success(),
        "make_shards.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

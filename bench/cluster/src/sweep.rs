//! Benchmark (not a test): ASHA judged on the frontier against the grid,
//! over the same search space of one fixed SAE task, on a real coordinator
//! and agent. The task: a ReLU SAE (d_in 32, d_sae 128) on synthetic data
//! made of 64 known features; the space: the L1 coefficient (the sparsity
//! trade-off) times the learning rate (some too small to learn). The grid
//! runs every combination to the end; ASHA (eta 3, the same number of
//! trials, drawn from the same choices) pauses and promotes at rungs by the
//! L0 / explained-variance frontier. One trial at a time each, so trials
//! never share the cores. It prints, side by side: the best explained
//! variance any finished trial reached, the frontier's hypervolume (from
//! L0 = d_sae, explained variance 0: the same box for both), how many
//! finished trials are on it, and the GPU-hours and wall time spent.
//!
//! ```text
//! source scripts/env.sh
//! cargo build --workspace --bins
//! target/debug/cohort-bench-sweep --steps 45000 --out /tmp/sweep-bench
//! # another space: --l1 1e-4,0.1 --lr 3e-3,1e-3,3e-4
//! ```

use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The space's values unless `--l1` and `--lr` say otherwise.
const L1: [f64; 4] = [1e-4, 1e-2, 0.1, 0.3];
const LR: [f64; 4] = [3e-3, 3e-4, 3e-5, 3e-6];
/// How long one sweep may take.
const SWEEP_LIMIT: Duration = Duration::from_secs(3600);

struct Args {
    l1: Vec<f64>,
    lr: Vec<f64>,
    steps: i64,
    seed: u64,
    eta: f64,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        l1: L1.to_vec(),
        lr: LR.to_vec(),
        steps: 45_000,
        seed: 7,
        eta: 3.0,
        out: std::env::temp_dir().join("cohort-sweep-bench"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--l1" => a.l1 = list(&value, "--l1 A,B,..."),
            "--lr" => a.lr = list(&value, "--lr A,B,..."),
            "--steps" => a.steps = value.parse().expect("--steps N"),
            "--seed" => a.seed = value.parse().expect("--seed S"),
            "--eta" => a.eta = value.parse().expect("--eta ETA"),
            "--out" => a.out = PathBuf::from(value),
            other => panic!("unknown flag {other}: --l1 --lr --steps --seed --eta --out"),
        }
    }
    a
}

fn list(text: &str, usage: &str) -> Vec<f64> {
    text.split(',')
        .map(|v| v.trim().parse().expect(usage))
        .collect()
}

fn base(steps: i64) -> String {
    format!(
        "[model]\nd_in = 32\nd_sae = 128\n\n\
         [optim]\nlearning_rate = 0.003\nbatch_size = 32\nsteps = {steps}\nseed = 0\n\n\
         [checkpoint]\nevery_steps = {}\n\n\
         [data.synthetic]\nnum_samples = 4096\nnum_features = 64\n\n\
         [runtime]\ndevice = \"cpu\"\nlog_every_steps = {}\n",
        (steps / 4).max(1),
        (steps / 200).max(1),
    )
}

fn space(args: &Args) -> String {
    let values = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:e}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "\"model.l1_coefficient\" = {{ choice = [{}] }}\n\"optim.learning_rate\" = {{ choice = [{}] }}\n",
        values(&args.l1),
        values(&args.lr)
    )
}

/// What one sweep reached and spent.
struct Outcome {
    name: &'static str,
    sweep: Value,
    wall_s: f64,
}

impl Outcome {
    fn finished(&self) -> Vec<&Value> {
        self.sweep["trials"]
            .as_array()
            .map(|t| t.iter().filter(|t| t["state"] == "SUCCEEDED").collect())
            .unwrap_or_default()
    }

    fn best_ev(&self) -> f64 {
        self.finished()
            .iter()
            .filter_map(|t| t["explained_variance"].as_f64())
            .fold(f64::NAN, f64::max)
    }

    fn hypervolume(&self) -> f64 {
        self.sweep["frontier_hypervolume"].as_f64().unwrap_or(0.0)
    }

    fn gpu_hours(&self) -> f64 {
        self.sweep["gpu_hours"].as_f64().unwrap_or(0.0)
    }

    fn count(&self, state: &str) -> usize {
        self.sweep["trials"]
            .as_array()
            .map_or(0, |t| t.iter().filter(|t| t["state"] == state).count())
    }

    fn row(&self) -> Value {
        json!({
            "sweep": self.name,
            "id": self.sweep["id"],
            "trials": self.sweep["trials"].as_array().map_or(0, Vec::len),
            "succeeded": self.count("SUCCEEDED"),
            "stopped": self.count("CANCELLED"),
            "best_explained_variance": self.best_ev(),
            "frontier_hypervolume": self.hypervolume(),
            "on_frontier": self.sweep["best"].as_array().map_or(0, Vec::len),
            "gpu_hours": self.gpu_hours(),
            "wall_s": self.wall_s,
        })
    }
}

async fn sweep_json(cluster: &Cluster, id: &str) -> Value {
    let out = cluster.cli_ok(&["-o", "json", "sweep", "get", id]).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("sweep get -o json: {e}: {out}"))
}

async fn run(cluster: &Cluster, args: &Args, name: &'static str, flags: &[&str]) -> Outcome {
    let base_file = cluster.root().join("base.toml");
    let space_file = cluster.root().join("space.toml");
    std::fs::write(&base_file, base(args.steps)).expect("writing the base config");
    std::fs::write(&space_file, space(args)).expect("writing the space");
    let mut create = vec![
        "sweep",
        "create",
        "--config",
        base_file.to_str().unwrap(),
        "--space",
        space_file.to_str().unwrap(),
        "--objective",
        "frontier",
        "--max-concurrent",
        "1",
        "--gpus",
        "1",
        "--name",
        name,
    ];
    create.extend_from_slice(flags);
    let started = Instant::now();
    let id = cluster.cli_ok(&create).await.trim().to_string();
    eprintln!("sweep-bench: {name}: {id}");
    loop {
        let sweep = sweep_json(cluster, &id).await;
        if sweep["state"] != "RUNNING" {
            let wall_s = started.elapsed().as_secs_f64();
            let table = cluster.cli_ok(&["sweep", "get", &id]).await;
            std::fs::write(args.out.join(format!("{name}.txt")), table).ok();
            return Outcome {
                name,
                sweep,
                wall_s,
            };
        }
        if started.elapsed() > SWEEP_LIMIT {
            cluster.fail(&format!("sweep {name} still running: {sweep}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    std::fs::create_dir_all(&args.out).expect("the output directory");
    let mut options = ClusterOptions::new(Backend::Sqlite, 1);
    options.gpus_per_agent = 1;
    let cluster = Cluster::start(options).await;
    let trials = (args.l1.len() * args.lr.len()).to_string();
    let (seed, eta) = (args.seed.to_string(), args.eta.to_string());
    let grid = run(&cluster, &args, "grid", &["--searcher", "grid"]).await;
    let asha = run(
        &cluster,
        &args,
        "asha-frontier",
        &[
            "--searcher",
            "asha",
            "--eta",
            &eta,
            "--max-trials",
            &trials,
            "--seed",
            &seed,
        ],
    )
    .await;

    println!(
        "{:<14} {:>6} {:>9} {:>7} {:>9} {:>12} {:>11} {:>10} {:>8}",
        "sweep",
        "trials",
        "finished",
        "stopped",
        "best EV",
        "hypervolume",
        "on frontier",
        "GPU-hours",
        "wall s"
    );
    for o in [&grid, &asha] {
        println!(
            "{:<14} {:>6} {:>9} {:>7} {:>9.4} {:>12.2} {:>11} {:>10.4} {:>8.0}",
            o.name,
            o.sweep["trials"].as_array().map_or(0, Vec::len),
            o.count("SUCCEEDED"),
            o.count("CANCELLED"),
            o.best_ev(),
            o.hypervolume(),
            o.sweep["best"].as_array().map_or(0, Vec::len),
            o.gpu_hours(),
            o.wall_s
        );
    }
    let ratio = |a: f64, g: f64| if g != 0.0 { a / g } else { f64::NAN };
    println!(
        "asha / grid: best EV {:.2} % of the grid's ({:+.2} %), hypervolume {:.1} %, GPU-hours {:.1} %",
        100.0 * ratio(asha.best_ev(), grid.best_ev()),
        100.0 * (ratio(asha.best_ev(), grid.best_ev()) - 1.0),
        100.0 * ratio(asha.hypervolume(), grid.hypervolume()),
        100.0 * ratio(asha.gpu_hours(), grid.gpu_hours())
    );
    let report = json!({
        "steps": args.steps,
        "seed": args.seed,
        "eta": args.eta,
        "space": { "model.l1_coefficient": args.l1, "optim.learning_rate": args.lr },
        "sweeps": [grid.row(), asha.row()],
    });
    let path = args.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).expect("the report");
    eprintln!("sweep-bench: report in {}", path.display());
}

//! Benchmark (not a test): what growing an elastic training costs, from
//! the decision to its first step at the new size, on a real coordinator
//! and two agents of two (simulated) GPUs each, with real ranks. An
//! elastic training (2..4 GPUs) starts at 2 beside a 2-GPU blocker; once it
//! is under way the blocker is cancelled and the next pass grows it to 4:
//! a notice, a checkpoint at the step, the gang stopped, placed again,
//! started from the checkpoint, its first step at 4 ranks. Each interval
//! comes from the training's own event history (the `resized` event says
//! when the decision was made). Two recipes: the demo's (examples/sae.toml,
//! d_in 64 -> 512, topk) and the SAE of docs/benchmarks.md (d_in 768 ->
//! 24576, ReLU, batch 256 a rank), whose checkpoint size is printed.
//!
//! ```text
//! source scripts/env.sh
//! cargo build --workspace --bins
//! target/debug/cohort-bench-resize --recipe demo --repeat 3
//! target/debug/cohort-bench-resize --recipe sae-768 --repeat 2
//! ```

use cohort_integration_tests::job::create_request;
use cohort_integration_tests::{Backend, Cluster, ClusterOptions, SaeJob};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use std::path::Path;
use std::time::Duration;

/// How long one grow may take to show.
const LIMIT: Duration = Duration::from_secs(900);

fn recipe(name: &str) -> String {
    let demo = std::fs::read_to_string("examples/sae.toml")
        .expect("run from the repository root (examples/sae.toml)");
    let body = match name {
        "demo" => demo,
        "sae-768" => "[model]\nd_in = 768\nd_sae = 24576\nl1_coefficient = 0.001\n\n\
                      [optim]\nlearning_rate = 0.0003\nbatch_size = 256\nsteps = 500\nseed = 0\n\n\
                      [checkpoint]\nevery_steps = 100\n\n\
                      [data.synthetic]\nnum_samples = 100000\nnum_features = 2048\n\n\
                      [runtime]\nlog_every_steps = 10\n"
            .to_string(),
        other => panic!("unknown recipe {other}: demo or sae-768"),
    };
    // Long enough to be grown, every step logged, no checkpoint but the
    // notice's.
    body.replace("steps = 500", "steps = 100000")
        .replace("every_steps = 100", "every_steps = 1000000")
        .replace("log_every_steps = 10", "log_every_steps = 1")
}

fn seconds(t: &Option<prost_types::Timestamp>) -> f64 {
    t.as_ref()
        .map_or(f64::NAN, |t| t.seconds as f64 + f64::from(t.nanos) / 1e9)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// One grow: (stopped, placed, started, first step) seconds after the
/// decision, the step it resumed from and the checkpoint's bytes.
struct Grow {
    stopped: f64,
    placed: f64,
    started: f64,
    first_step: f64,
    step: i64,
    checkpoint_bytes: u64,
}

/// The training's history up to `last` (GetTraining's `last_event_sequence`).
async fn events(cluster: &Cluster, id: &str, last: u64) -> Vec<v1::TrainingEvent> {
    let mut client = cluster.training().await;
    let mut stream = client
        .watch_training(v1::WatchTrainingRequest {
            id: id.to_string(),
            ..Default::default()
        })
        .await
        .expect("WatchTraining")
        .into_inner();
    let mut out = Vec::new();
    while let Ok(Ok(Some(e))) = tokio::time::timeout(Duration::from_secs(5), stream.message()).await
    {
        let done = e.sequence >= last;
        out.push(e);
        if done {
            break;
        }
    }
    out
}

async fn grow_once(recipe_name: &str) -> Grow {
    let mut options = ClusterOptions::new(Backend::Sqlite, 2);
    options.coordinator_args = vec!["--elastic-cooldown".into(), "1s".into()];
    let cluster = Cluster::start(options).await;
    let blocker = cluster
        .create(create_request(&SaeJob::with_steps(1_000_000), 2, true))
        .await;
    cluster
        .wait_state(&blocker, State::Running, Duration::from_secs(120))
        .await;
    let file = cluster.root().join("elastic.toml");
    std::fs::write(&file, recipe(recipe_name)).expect("writing the recipe");
    let id = cluster
        .cli_ok(&[
            "train",
            "submit",
            "--config",
            file.to_str().unwrap(),
            "--gpus",
            "2..4",
            "--quiet",
        ])
        .await
        .trim()
        .to_string();
    let started = std::time::Instant::now();
    loop {
        let t = cluster.get_training(&id).await;
        if t.latest_progress.as_ref().is_some_and(|p| p.step >= 3) {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the elastic training never got going"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.cli_ok(&["train", "cancel", &blocker]).await;
    loop {
        let t = cluster.get_training(&id).await;
        if t.world_size == 4 && t.latest_progress.as_ref().is_some_and(|p| p.step > 0) {
            let history = events(&cluster, &id, t.last_event_sequence).await;
            let first_at_4 = history
                .iter()
                .any(|e| e.attempt == t.attempt && matches!(e.event, Some(Event::Progress(_))));
            if first_at_4 {
                let grow = measure(&history, t.attempt);
                cluster.cli_ok(&["train", "cancel", &id]).await;
                return grow;
            }
        }
        assert!(started.elapsed() < LIMIT, "no grow: {}", t.state_reason);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn measure(history: &[v1::TrainingEvent], attempt: i32) -> Grow {
    let resized = history
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Resized(r)) => Some((seconds(&e.time), r.clone())),
            _ => None,
        })
        .expect("a resized event");
    let (placed_at, r) = resized;
    let decided = placed_at - r.seconds;
    let stopped_at = history
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::StateChange(c))
                if c.to() == State::Queued && c.from() == State::Running =>
            {
                Some(seconds(&e.time))
            }
            _ => None,
        })
        .expect("the gang stopped");
    let at_new = |want: fn(&Event) -> bool| {
        history
            .iter()
            .find(|e| e.attempt == attempt && e.event.as_ref().is_some_and(want))
            .map_or(f64::NAN, |e| seconds(&e.time))
    };
    let checkpoint_bytes = history
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Some(Event::Checkpoint(c)) => Some(dir_bytes(Path::new(&c.path))),
            _ => None,
        })
        .unwrap_or(0);
    Grow {
        stopped: stopped_at - decided,
        placed: placed_at - decided,
        started: at_new(|e| matches!(e, Event::Started(_))) - decided,
        first_step: at_new(|e| matches!(e, Event::Progress(_))) - decided,
        step: r.step.unwrap_or(0),
        checkpoint_bytes,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut recipe_name, mut repeat) = ("demo".to_string(), 3usize);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--recipe" => recipe_name = value,
            "--repeat" => repeat = value.parse().expect("--repeat N"),
            other => panic!("unknown flag {other}: --recipe demo|sae-768 --repeat N"),
        }
    }
    println!(
        "recipe {recipe_name}: grow 2 -> 4 ranks, seconds after the decision \
         (gang stopped / placed / started / first step at 4), step, checkpoint MiB"
    );
    let mut first = Vec::new();
    for i in 0..repeat {
        let g = grow_once(&recipe_name).await;
        println!(
            "run {}: {:.2} / {:.2} / {:.2} / {:.2} s  step {}  checkpoint {:.1} MiB",
            i + 1,
            g.stopped,
            g.placed,
            g.started,
            g.first_step,
            g.step,
            g.checkpoint_bytes as f64 / (1u64 << 20) as f64
        );
        first.push(g.first_step);
    }
    println!(
        "median decision -> first step at 4 ranks: {:.2} s over {repeat} runs",
        median(first)
    );
}

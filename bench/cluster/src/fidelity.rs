//! Benchmark (not a test): how closely `cohort-sim` predicts a real
//! coordinator. One short job trace (time compressed: jobs of seconds, not
//! hours) runs twice — through a real coordinator with simulated-GPU
//! agents, each job a real program (examples/programs/steps: it reports
//! progress, checkpoints, and checkpoints and stops on a notice, or ignores
//! it and is killed at its grace), submitted on the trace's schedule; and
//! through `cohort-sim run` over the same fleet and settings. It prints,
//! per job, how far the simulated first start is from the real one, and
//! how the sets of preempted jobs compare.
//!
//! One team and no quotas (lending is covered by the integration tests;
//! here the policy's order, placement and preemption are compared). The
//! simulator's one free parameter, what an attempt costs beyond its steps
//! (process start, rendezvous, the agent's and coordinator's turns), is
//! measured on the real run (the median over jobs never preempted) and
//! given to the simulator; everything else is the trace.
//!
//! ```text
//! source scripts/env.sh
//! cargo build --workspace --bins
//! target/debug/cohort-bench-fidelity --jobs 200 --out /tmp/fidelity
//! ```

use cohort_integration_tests::program::{program_options, steps_program};
use cohort_integration_tests::watch::watch_to_end;
use cohort_integration_tests::{Backend, Cluster};
use cohort_proto::v1;
use cohort_proto::v1::training::State;
use cohort_proto::v1::training_event::Event;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The program's step: the trace's durations are whole steps of this.
const STEP_S: f64 = 0.5;
/// A checkpoint every this many steps.
const CHECKPOINT_EVERY: i64 = 10;
/// The notice's grace (`[runtime] preemption_grace`).
const GRACE_S: f64 = 10.0;
/// The coordinator's and the simulator's protection window.
const MIN_RUNTIME_S: f64 = 5.0;
/// After how long the coordinator knows a job's pace (a few progress
/// windows); the simulator is told the same.
const PACE_AFTER_S: f64 = 5.0;
/// How long the whole real run may take.
const RUN_LIMIT: Duration = Duration::from_secs(1800);

struct Args {
    jobs: usize,
    seed: u64,
    agents: usize,
    gpus_per_agent: usize,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        jobs: 200,
        seed: 1,
        agents: 4,
        gpus_per_agent: 8,
        out: std::env::temp_dir().join("cohort-fidelity"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => a.jobs = value.parse().expect("--jobs N"),
            "--seed" => a.seed = value.parse().expect("--seed S"),
            "--agents" => a.agents = value.parse().expect("--agents N"),
            "--gpus-per-agent" => a.gpus_per_agent = value.parse().expect("--gpus-per-agent N"),
            "--out" => a.out = PathBuf::from(value),
            other => panic!("unknown flag {other}: --jobs --seed --agents --gpus-per-agent --out"),
        }
    }
    a
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<T: Copy>(&mut self, weighted: &[(T, f64)]) -> T {
        let mut x = self.next();
        for (value, weight) in weighted {
            if x < *weight {
                return *value;
            }
            x -= weight;
        }
        weighted[weighted.len() - 1].0
    }
}

/// One job of the trace.
#[derive(Debug, Clone)]
struct TraceJob {
    id: String,
    submit_s: f64,
    gpus: u32,
    steps: i64,
    class: &'static str,
    saves_on_notice: bool,
}

impl TraceJob {
    fn duration_s(&self) -> f64 {
        self.steps as f64 * STEP_S
    }

    fn line(&self) -> Value {
        json!({
            "id": self.id,
            "submit_s": self.submit_s,
            "team": "default",
            "gpus": self.gpus,
            "duration_s": self.duration_s(),
            "class": self.class,
            "checkpoint_every_s": CHECKPOINT_EVERY as f64 * STEP_S,
            "expected_duration_s": self.duration_s(),
            "saves_on_notice": self.saves_on_notice,
        })
    }
}

/// Sizes 1/2/4/8 GPUs; 8 to 40 s (log-uniform); 15 % urgent, 15 % high,
/// 20 % low; 70 % save on notice; Poisson arrivals offering 1.3 times what
/// the fleet runs.
fn trace(n: usize, seed: u64, fleet_gpus: usize) -> Vec<TraceJob> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut jobs = Vec::with_capacity(n);
    let mut t = 0.0;
    for i in 0..n {
        let gpus = rng.pick(&[(1u32, 0.5), (2, 0.2), (4, 0.2), (8, 0.1)]);
        let seconds = 8.0 * (5f64).powf(rng.next());
        let steps = (seconds / STEP_S).round().max(2.0) as i64;
        let class = rng.pick(&[
            ("urgent", 0.15),
            ("high", 0.15),
            ("low", 0.2),
            ("normal", 0.5),
        ]);
        // Mean work per job ~50 GPU-s: arrivals at 1.3x the fleet's rate.
        let mean_gap = 50.0 / (1.3 * fleet_gpus as f64);
        t += -mean_gap * (1.0 - rng.next()).ln();
        jobs.push(TraceJob {
            id: format!("job-{i:04}"),
            submit_s: (t * 10.0).round() / 10.0,
            gpus,
            steps,
            class,
            saves_on_notice: rng.next() < 0.7,
        });
    }
    jobs
}

fn request(job: &TraceJob) -> v1::CreateTrainingRequest {
    let flags: &[&str] = if job.saves_on_notice {
        &[]
    } else {
        &["--ignore-notice"]
    };
    let grace = format!("{GRACE_S}s");
    let mut request = steps_program(
        job.steps,
        STEP_S,
        CHECKPOINT_EVERY,
        flags,
        job.gpus as i32,
        job.class,
        Some(&grace),
    );
    request.display_name = job.id.clone();
    if let Some(runtime) = request.config.as_mut().and_then(|c| c.runtime.as_mut()) {
        runtime.expected_duration = Some(format!("{}s", job.duration_s()));
    }
    request
}

/// What happened to one job for real, seconds from the trace's zero.
#[derive(Debug, Clone, Default)]
struct Lived {
    first_start_s: Option<f64>,
    end_s: Option<f64>,
    preemptions: u32,
    final_state: Option<State>,
    /// The reason of its last state change.
    reason: String,
}

fn seconds(ts: &Option<prost_types::Timestamp>, zero: std::time::SystemTime) -> Option<f64> {
    let ts = ts.as_ref()?;
    let at = std::time::UNIX_EPOCH + Duration::new(ts.seconds as u64, ts.nanos as u32);
    Some(match at.duration_since(zero) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    })
}

async fn run_real(args: &Args, jobs: &[TraceJob]) -> (HashMap<String, Lived>, f64) {
    let mut options = program_options(Backend::Sqlite, args.agents, &[]);
    options.gpus_per_agent = args.gpus_per_agent;
    options.coordinator_args = vec![
        "--preemption-min-runtime".into(),
        format!("{MIN_RUNTIME_S}s"),
    ];
    let cluster = Cluster::start(options).await;
    let zero = std::time::SystemTime::now();
    let began = Instant::now();
    let mut ids: Vec<(String, String)> = Vec::new();
    for job in jobs {
        let due = Duration::from_secs_f64(job.submit_s);
        if let Some(wait) = due.checked_sub(began.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        ids.push((job.id.clone(), cluster.create(request(job)).await));
    }
    eprintln!(
        "fidelity: {} jobs submitted in {:.0} s",
        ids.len(),
        began.elapsed().as_secs_f64()
    );
    let mut client = cohort_proto::v1::training_service_client::TrainingServiceClient::new(
        cluster.channel().await,
    );
    let mut lived = HashMap::new();
    for (job, id) in &ids {
        let left = RUN_LIMIT
            .saturating_sub(began.elapsed())
            .max(Duration::from_secs(1));
        let watched = watch_to_end(&mut client, id, left).await;
        let mut l = Lived::default();
        for e in &watched.events {
            let Some(Event::StateChange(c)) = &e.event else {
                continue;
            };
            let at = seconds(&e.time, zero);
            l.reason = c.reason.clone();
            match (c.from(), c.to()) {
                (State::Queued, State::Scheduled) if l.first_start_s.is_none() => {
                    l.first_start_s = at
                }
                (State::Running | State::Scheduled, State::Queued) => l.preemptions += 1,
                (_, to) if matches!(to, State::Succeeded | State::Failed | State::Cancelled) => {
                    l.end_s = at;
                    l.final_state = Some(to);
                }
                _ => {}
            }
        }
        lived.insert(job.clone(), l);
    }
    let wall = began.elapsed().as_secs_f64();
    eprintln!("fidelity: the real run took {wall:.0} s");
    (lived, wall)
}

/// The median overhead of an attempt: end - start - duration, over the
/// jobs that were never preempted.
fn overhead(jobs: &[TraceJob], real: &HashMap<String, Lived>) -> f64 {
    let mut o: Vec<f64> = jobs
        .iter()
        .filter_map(|j| {
            let l = &real[&j.id];
            match (l.first_start_s, l.end_s, l.preemptions) {
                (Some(s), Some(e), 0) => Some(e - s - j.duration_s()),
                _ => None,
            }
        })
        .collect();
    o.sort_by(f64::total_cmp);
    o.get(o.len() / 2).copied().unwrap_or(1.0).max(0.0)
}

fn run_sim(args: &Args, trace_file: &Path, overhead_s: f64) -> HashMap<String, (Option<f64>, u32)> {
    let exe = std::env::current_exe().expect("this executable's path");
    let sim = exe.with_file_name("cohort-sim");
    let dir = args.out.join("sim");
    let status = std::process::Command::new(&sim)
        .arg("run")
        .arg(trace_file)
        .args([
            "--fleet",
            &format!("{}x{}", args.agents, args.gpus_per_agent),
        ])
        .args(["--policy", "sharing:no-quotas"])
        .args(["--grace-s", &GRACE_S.to_string()])
        // A job that saves on notice stops after its step and a checkpoint,
        // then the agent and coordinator take their turns.
        .args(["--notice-checkpoint-s", &(STEP_S + overhead_s).to_string()])
        .args(["--restart-overhead-s", &overhead_s.to_string()])
        .args(["--preemption-min-runtime-s", &MIN_RUNTIME_S.to_string()])
        .args(["--pace-after-s", &PACE_AFTER_S.to_string()])
        .args(["--estimate-every-s", "0"])
        .arg("--jobs-out")
        .arg(&dir)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", sim.display()));
    assert!(status.success(), "cohort-sim failed: {status}");
    let text =
        std::fs::read_to_string(dir.join("sharing+no-quotas.jsonl")).expect("the simulated jobs");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a job line");
            (
                v["id"].as_str().expect("id").to_string(),
                (
                    v["first_start_s"].as_f64(),
                    v["preemptions"].as_u64().unwrap_or(0) as u32,
                ),
            )
        })
        .collect()
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    std::fs::create_dir_all(&args.out).expect("the output directory");
    let fleet = args.agents * args.gpus_per_agent;
    let jobs = trace(args.jobs, args.seed, fleet);
    let trace_file = args.out.join("trace.jsonl");
    let text: String = jobs.iter().map(|j| format!("{}\n", j.line())).collect();
    std::fs::write(&trace_file, text).expect("writing the trace");
    eprintln!(
        "fidelity: {} jobs over {:.0} s on {} agents x {} GPUs (trace: {})",
        jobs.len(),
        jobs.last().map_or(0.0, |j| j.submit_s),
        args.agents,
        args.gpus_per_agent,
        trace_file.display()
    );

    let (real, wall) = run_real(&args, &jobs).await;
    let overhead_s = overhead(&jobs, &real);
    let sim = run_sim(&args, &trace_file, overhead_s);

    let mut diffs = Vec::new();
    let mut real_waits = Vec::new();
    let mut rows = Vec::new();
    let (mut real_set, mut sim_set) = (BTreeSet::new(), BTreeSet::new());
    let (mut real_preemptions, mut sim_preemptions) = (0u32, 0u32);
    let mut failed = 0;
    for j in &jobs {
        let l = &real[&j.id];
        let (s_start, s_pre) = sim.get(&j.id).copied().unwrap_or((None, 0));
        if l.final_state != Some(State::Succeeded) {
            failed += 1;
            eprintln!(
                "fidelity: {} ({}, {} GPUs, preempted {}) ended {:?}: {}",
                j.id, j.class, j.gpus, l.preemptions, l.final_state, l.reason
            );
        }
        real_preemptions += l.preemptions;
        sim_preemptions += s_pre;
        if l.preemptions > 0 {
            real_set.insert(j.id.clone());
        }
        if s_pre > 0 {
            sim_set.insert(j.id.clone());
        }
        if let (Some(r), Some(s)) = (l.first_start_s, s_start) {
            diffs.push((r - s).abs());
            real_waits.push(r - j.submit_s);
        }
        rows.push(json!({
            "id": j.id, "class": j.class, "gpus": j.gpus, "submit_s": j.submit_s,
            "real_start_s": l.first_start_s, "sim_start_s": s_start,
            "real_preemptions": l.preemptions, "sim_preemptions": s_pre,
            "real_final": l.final_state.map(|s| s.as_str_name()), "real_reason": l.reason,
        }));
    }
    let rows_file = args.out.join("jobs.jsonl");
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&rows_file, text).expect("writing the comparison");
    diffs.sort_by(f64::total_cmp);
    real_waits.sort_by(f64::total_cmp);
    let within =
        |s: f64| diffs.iter().filter(|d| **d <= s).count() as f64 / diffs.len().max(1) as f64;
    let both = real_set.intersection(&sim_set).count();
    let union = real_set.union(&sim_set).count();
    println!(
        "fidelity: {} jobs, {} agents x {} GPUs, real run {wall:.0} s",
        jobs.len(),
        args.agents,
        args.gpus_per_agent
    );
    println!("jobs that did not succeed for real: {failed}");
    println!("attempt overhead measured on the real run (median): {overhead_s:.2} s (given to the simulator)");
    println!(
        "real queue wait p50/p90/max: {:.1} / {:.1} / {:.1} s",
        quantile(&real_waits, 0.5),
        quantile(&real_waits, 0.9),
        quantile(&real_waits, 1.0)
    );
    println!(
        "first start, |real - simulated| over {} jobs: p50 {:.1} s, p90 {:.1} s, max {:.1} s; within 2 s: {:.0}%, within 5 s: {:.0}%, within 10 s: {:.0}%",
        diffs.len(),
        quantile(&diffs, 0.5),
        quantile(&diffs, 0.9),
        quantile(&diffs, 1.0),
        within(2.0) * 100.0,
        within(5.0) * 100.0,
        within(10.0) * 100.0
    );
    println!(
        "preempted jobs: real {}, simulated {}, both {}, Jaccard {:.2}; preemptions real {real_preemptions}, simulated {sim_preemptions}",
        real_set.len(),
        sim_set.len(),
        both,
        if union == 0 { 1.0 } else { both as f64 / union as f64 }
    );
    println!("per job: {}", rows_file.display());
}

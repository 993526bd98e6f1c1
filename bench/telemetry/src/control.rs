//! Benchmark (not a test): the control plane's create and read paths, loaded
//! from outside by client processes. Starts a real coordinator (release,
//! SQLite in a temp dir or a fresh PostgreSQL schema) with no agents, so
//! every training stays QUEUED, then:
//!
//! 1. `--clients` processes each send `--creates` CreateTraining calls
//!    (fresh request ids, `--in-flight` at a time on one connection):
//!    creates per second and the latency's p50/p99;
//! 2. the queue is filled to `--queued` trainings;
//! 3. the processes each send `--reads` GetTraining calls (random queued
//!    ids) and then ListTrainings first pages (50): p50/p99 of each.
//!
//! `cohort-bench-control --clients 4 --creates 2000 --queued 20000 [--database-url postgres://...]`

use anyhow::{bail, Context as _};
use clap::Parser;
use cohort_bench_telemetry::agents;
use cohort_bench_telemetry::burst::{connect_agents, report_passes, time_placements};
use cohort_bench_telemetry::histogram::Histogram;
use cohort_proto::v1::{self, training_service_client::TrainingServiceClient};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Debug, Parser)]
struct Args {
    /// Client processes.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// CreateTraining calls per client in phase 1.
    #[arg(long, default_value_t = 2000)]
    creates: usize,
    /// Calls each client keeps in flight.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// Queued trainings before the reads.
    #[arg(long, default_value_t = 20_000)]
    queued: usize,
    /// GetTraining calls per client (then as many ListTrainings / 10).
    #[arg(long, default_value_t = 1000)]
    reads: usize,
    /// Simulated agents (8 GPUs each) connected before the creates: the
    /// scheduler then plans against their GPUs (the first trainings take
    /// them and stay SCHEDULED; no rank ever runs).
    #[arg(long, default_value_t = 0)]
    agents: usize,
    /// GPUs each created training asks for.
    #[arg(long, default_value_t = 1)]
    gpus_per_training: u32,
    /// Creates come from Python clients instead (grpcio, messages from the
    /// coordinator's reflection service: what another team's service does);
    /// reads stay Rust. Needs grpcio and grpcio-reflection in `--python`.
    #[arg(long)]
    python_clients: bool,
    /// The Python of `--python-clients`; default `$COHORT_VENV/bin/python`,
    /// else `python3`.
    #[arg(long)]
    python: Option<PathBuf>,
    /// PostgreSQL server (a fresh schema is made and dropped); default SQLite.
    #[arg(long)]
    database_url: Option<String>,
    /// The coordinator; default: cohort-coordinator next to this executable.
    #[arg(long)]
    coordinator_bin: Option<PathBuf>,
    /// Internal: run as a client process (`create` or `read`) against URL.
    #[arg(long, hide = true, requires = "url")]
    worker: Option<String>,
    #[arg(long, hide = true)]
    url: Option<String>,
    /// Internal: the worker's index (request ids and the random seed).
    #[arg(long, hide = true, default_value_t = 0)]
    index: usize,
    /// Internal: how many calls the worker makes.
    #[arg(long, hide = true, default_value_t = 0)]
    count: usize,
}

/// A small queued job of `gpus` GPUs: the config of the integration tests' SAE.
fn create_request(worker: usize, i: usize, gpus: u32) -> anyhow::Result<v1::CreateTrainingRequest> {
    let config = cohort_spec::TrainingConfig::from_toml(
        "[model]\nd_in = 32\nd_sae = 128\n[optim]\nlearning_rate = 0.003\nbatch_size = 32\nsteps = 60\n\
         [data.synthetic]\nnum_samples = 4096\nnum_features = 64\n[runtime]\ndevice = \"cpu\"\n",
    )?;
    Ok(v1::CreateTrainingRequest {
        config: Some(v1::TrainingConfig::from(&config)),
        gpus: Some(v1::GpuRequest {
            selection: Some(v1::gpu_request::Selection::Count(i32::try_from(gpus)?)),
            queue: Some(true),
            ..Default::default()
        }),
        request_id: format!("bench-{}-{worker}-{i}", std::process::id()),
        ..Default::default()
    })
}

/// Runs `count` calls of `call`, `in_flight` at a time; prints one line per
/// call on stdout: what the call was (the tag it returns) and its latency in µs.
async fn drive<F, Fut>(count: usize, in_flight: usize, call: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<&'static str>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(in_flight.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let permit = permits.clone().acquire_owned().await?;
        let fut = call(i);
        tasks.spawn(async move {
            let started = Instant::now();
            let result = fut.await;
            drop(permit);
            result.map(|tag| (tag, started.elapsed().as_micros() as u64))
        });
    }
    let mut out = String::new();
    while let Some(done) = tasks.join_next().await {
        let (tag, us) = done??;
        out.push_str(&format!("{tag} {us}\n"));
    }
    print!("{out}");
    Ok(())
}

async fn worker(args: &Args, kind: &str) -> anyhow::Result<()> {
    let url = args.url.clone().context("--url")?;
    let channel = cohort_proto::channel(&url).await?;
    let client = TrainingServiceClient::new(channel);
    match kind {
        "create" => {
            let (index, gpus) = (args.index, args.gpus_per_training);
            drive(args.count, args.in_flight, |i| {
                let mut client = client.clone();
                let request = create_request(index, i, gpus);
                async move {
                    client.create_training(request?).await?;
                    Ok("create")
                }
            })
            .await
        }
        "read" => {
            // The ids come on stdin, one per line.
            let mut ids = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut ids)?;
            let ids: Arc<Vec<String>> = Arc::new(ids.lines().map(str::to_string).collect());
            let mut seed = args.index as u64 * 0x9E37_79B9_7F4A_7C15 + 1;
            let mut picks = Vec::with_capacity(args.count);
            for _ in 0..args.count {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                picks.push((seed % ids.len() as u64) as usize);
            }
            let gets = args.count;
            drive(gets + gets / 10, args.in_flight, |i| {
                let mut client = client.clone();
                let get = (i < gets).then(|| ids[picks[i]].clone());
                async move {
                    match get {
                        Some(id) => {
                            client.get_training(v1::GetTrainingRequest { id }).await?;
                            Ok("get")
                        }
                        None => {
                            client
                                .list_trainings(v1::ListTrainingsRequest {
                                    page_size: 50,
                                    ..Default::default()
                                })
                                .await?;
                            Ok("list")
                        }
                    }
                }
            })
            .await
        }
        other => bail!("unknown worker {other}"),
    }
}

/// The Python create client (`--python-clients`).
const PYTHON_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/create_client.py");

fn python_exe(args: &Args) -> PathBuf {
    args.python.clone().unwrap_or_else(|| {
        std::env::var_os("COHORT_VENV")
            .map(|v| PathBuf::from(v).join("bin/python"))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("python3"))
    })
}

/// Runs `clients` worker processes of `kind` with `count` calls each;
/// returns every call's tag and latency, and the wall time.
async fn fan_out(
    args: &Args,
    url: &str,
    kind: &str,
    count: usize,
    stdin: Option<&str>,
) -> anyhow::Result<(Vec<(String, u64)>, Duration)> {
    let exe = std::env::current_exe()?;
    let python = args.python_clients && kind == "create";
    let started = Instant::now();
    let mut children = Vec::new();
    for index in 0..args.clients {
        let mut command = if python {
            let mut c = tokio::process::Command::new(python_exe(args));
            c.arg(PYTHON_CLIENT).args(["--url", url]);
            c
        } else {
            let mut c = tokio::process::Command::new(&exe);
            c.args(["--worker", kind, "--url", url]);
            c
        };
        let mut child = command
            .args(["--index", &index.to_string(), "--count", &count.to_string()])
            .args(["--in-flight", &args.in_flight.to_string()])
            .args(["--gpus-per-training", &args.gpus_per_training.to_string()])
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .spawn()?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let text = text.to_string();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = pipe.write_all(text.as_bytes()).await;
            });
        }
        children.push(child);
    }
    let mut all = Vec::new();
    for child in children {
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!("a {kind} worker failed ({})", out.status);
        }
        let text = String::from_utf8(out.stdout)?;
        for line in text.lines() {
            let (tag, us) = line.split_once(' ').context("a tagged latency")?;
            all.push((tag.to_string(), us.parse()?));
        }
    }
    Ok((all, started.elapsed()))
}

fn summary(latencies: impl IntoIterator<Item = u64>) -> (Histogram, String) {
    let mut h = Histogram::default();
    for l in latencies {
        h.record(l);
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let text = format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} calls)",
        ms(h.quantile(0.5)),
        ms(h.quantile(0.99)),
        ms(h.max()),
        h.count()
    );
    (h, text)
}

async fn queued_ids(url: &str) -> anyhow::Result<Vec<String>> {
    let mut client = TrainingServiceClient::new(cohort_proto::channel(url).await?);
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_trainings(v1::ListTrainingsRequest {
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        ids.extend(
            page.trainings
                .into_iter()
                .filter(|t| t.state() == v1::training::State::Queued)
                .map(|t| t.id),
        );
        if page.next_page_token.is_empty() {
            return Ok(ids);
        }
        page_token = page.next_page_token;
    }
}

async fn lead(args: &Args) -> anyhow::Result<()> {
    let bin = match &args.coordinator_bin {
        Some(b) => b.clone(),
        None => cohort_bench_telemetry::coordinator::default_binary()?,
    };
    let extra = ["--max-queued-per-team".to_string(), "10000000".to_string()];
    let coord = cohort_bench_telemetry::coordinator::Coordinator::spawn_with(
        &bin,
        args.database_url.as_deref(),
        &extra,
    )
    .await?;
    let url = coord.url.clone();
    let db = if args.database_url.is_some() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let _agents = connect_agents(&url, args.agents).await?;
    println!(
        "coordinator on {db}, {} simulated agents ({} GPUs), {} GPU(s) per training; {} {} client processes, {} calls in flight each",
        args.agents,
        args.agents * agents::GPUS_PER_AGENT,
        args.gpus_per_training,
        args.clients,
        if args.python_clients { "Python (creates)" } else { "Rust" },
        args.in_flight
    );
    // With agents, the first trainings take every GPU: time the burst, from
    // the first create to the last of them stored SCHEDULED.
    let placeable = (args.agents * agents::GPUS_PER_AGENT) / args.gpus_per_training.max(1) as usize;
    let expected = placeable.min(args.queued.max(args.creates * args.clients));
    let burst = (expected > 0).then(|| tokio::spawn(time_placements(url.clone(), expected)));
    let (creates, wall) = fan_out(args, &url, "create", args.creates, None).await?;
    let n = creates.len();
    let (_, text) = summary(creates.into_iter().map(|(_, us)| us));
    println!(
        "CreateTraining: {:.0} creates/s over {:.1} s; {text}",
        n as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    if let Some(metrics) = coord.metrics {
        report_create_batches(metrics, n).await?;
    }
    let have = n;
    if args.queued > have {
        let per = (args.queued - have).div_ceil(args.clients);
        let (_, wall) = fan_out(args, &url, "create", per, None).await?;
        println!(
            "filled the queue with {} more in {:.1} s",
            per * args.clients,
            wall.as_secs_f64()
        );
    }
    if let Some(burst) = burst {
        let (placed, took) = burst.await??;
        println!(
            "{placed} trainings placed (every GPU held) {:.2} s after the first create",
            took.as_secs_f64()
        );
    }
    let ids = queued_ids(&url).await?;
    println!("{} trainings queued", ids.len());
    if let Some(metrics) = coord.metrics {
        report_passes(metrics, ids.len()).await?;
    }
    let (reads, _) = fan_out(args, &url, "read", args.reads, Some(&ids.join("\n"))).await?;
    let of = |tag: &str| -> Vec<u64> {
        reads
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, us)| *us)
            .collect()
    };
    let (_, text) = summary(of("get"));
    println!("GetTraining (a random queued training): {text}");
    let (_, text) = summary(of("list"));
    println!("ListTrainings (the first page of 50): {text}");
    if let Some(pid) = coord.pid {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss = status
            .lines()
            .find(|l| l.starts_with("VmHWM"))
            .unwrap_or("VmHWM: ?");
        println!(
            "coordinator peak RSS {}",
            rss.trim_start_matches("VmHWM:").trim()
        );
    }
    Ok(())
}

/// How the coordinator's group commit wrote the `creates`: its
/// transactions of several creates and of one, with their mean time (from
/// the database operation histogram on /metrics); and its estimate writes.
async fn report_create_batches(
    metrics: std::net::SocketAddr,
    creates: usize,
) -> anyhow::Result<()> {
    use cohort_bench_telemetry::coordinator::metric;
    const OP: &str = "cohort_db_operation_duration_seconds";
    let of = |op: &'static str| async move {
        let count = metric(metrics, &format!("{OP}_count{{op=\"{op}\"}}"))
            .await
            .unwrap_or(0.0);
        let sum = metric(metrics, &format!("{OP}_sum{{op=\"{op}\"}}"))
            .await
            .unwrap_or(0.0);
        (count, if count > 0.0 { sum / count * 1e3 } else { 0.0 })
    };
    let (batches, batch_ms) = of("create_trainings").await;
    let (singles, single_ms) = of("create_training").await;
    let in_batches = creates as f64 - singles;
    println!(
        "create transactions: {batches:.0} batches (mean {:.1} creates, {batch_ms:.1} ms each), {singles:.0} single creates ({single_ms:.1} ms each)",
        if batches > 0.0 { in_batches / batches } else { 0.0 }
    );
    // The start estimates are written beside the creates (every
    // `--estimate-interval`): what they held SQLite's one writer for.
    let (writes, write_ms) = of("write_estimates").await;
    let last = metric(metrics, "cohort_estimate_run_seconds").await? * 1e3;
    let forecast = metric(metrics, "cohort_estimate_forecast_seconds").await? * 1e3;
    let written = metric(metrics, "cohort_estimate_written").await?;
    println!(
        "estimate transactions: {writes:.0} ({write_ms:.1} ms each); the last run took {last:.0} ms ({forecast:.0} ms forecast) and wrote {written:.0}"
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.worker.clone() {
        Some(kind) => worker(&args, &kind).await,
        None => lead(&args).await,
    }
}

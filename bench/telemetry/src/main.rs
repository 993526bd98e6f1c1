//! Benchmark (not a test): N simulated agents x 8 GPUs at 1 Hz against one
//! real coordinator, with W `WatchGpuMetrics` watchers. Prints the sustained
//! ingest rate, what reached the history and each watcher, sample-to-watcher
//! latency, and the coordinator's CPU and peak RSS. See docs/benchmarks.md.
//!
//! `cohort-bench-telemetry --agents 1000 --watchers 100 --duration 30s [--database-url postgres://...]`

mod procstat;
mod report;
mod watchers;

use anyhow::Context as _;
use clap::Parser;
use cohort_bench_telemetry::{agents, coordinator, histogram, store, window};
use cohort_spec::duration::parse_duration;
use coordinator::Coordinator;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Load a coordinator with simulated agents and telemetry watchers.
#[derive(Debug, Parser)]
struct Args {
    /// Simulated agents, 8 GPUs each, each sending 8 samples a second.
    #[arg(long, default_value_t = 10)]
    agents: usize,
    /// WatchGpuMetrics streams (PER_GPU view, every GPU).
    #[arg(long, default_value_t = 10)]
    watchers: usize,
    /// The measured window.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Load before the window starts.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    warmup: Duration,
    /// Load and reading after the window ends, so the window's last samples
    /// can still arrive; a window sample not received by then counts as lost.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    drain: Duration,
    /// PostgreSQL server for the coordinator (a fresh schema is made and
    /// dropped); default: SQLite in a temp dir.
    #[arg(long)]
    database_url: Option<String>,
    /// Load this running coordinator instead of starting one.
    #[arg(long, conflicts_with_all = ["database_url", "coordinator_bin"])]
    coordinator: Option<String>,
    /// With --coordinator: its pid (for CPU and RSS).
    #[arg(long, requires = "coordinator")]
    coordinator_pid: Option<u32>,
    /// With --coordinator: its --metrics-listen address (for the ingest rate).
    #[arg(long, requires = "coordinator")]
    metrics_addr: Option<SocketAddr>,
    /// The coordinator to start; default: cohort-coordinator next to this executable.
    #[arg(long)]
    coordinator_bin: Option<PathBuf>,
    /// Agents and watchers connecting at once during set-up.
    #[arg(long, default_value_t = 32)]
    connect_concurrency: usize,
}

/// Connect attempts per agent during set-up.
const CONNECT_ATTEMPTS: u64 = 5;

/// Runs `make(i)` for i in 0..n, at most `limit` at a time; all must succeed.
async fn all_of<T, F, Fut>(n: usize, limit: usize, make: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limit.max(1)));
    let mut set = JoinSet::new();
    for i in 0..n {
        let permit = permits.clone().acquire_owned().await?;
        let fut = make(i);
        set.spawn(async move {
            let out = fut.await;
            drop(permit);
            out.map(|v| (i, v))
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(joined) = set.join_next().await {
        out.push(joined??);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

struct Reading {
    at: Instant,
    coordinator_cpu: Option<Duration>,
    coordinator_wait: Option<Duration>,
    bench_cpu: Option<Duration>,
    bench_wait: Option<Duration>,
    ingested: Option<u64>,
}

async fn read(coordinator: &Coordinator) -> Reading {
    let ingested = match coordinator.metrics {
        Some(addr) => match coordinator::samples_ingested(addr).await {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("warning: reading /metrics: {e:#}");
                None
            }
        },
        None => None,
    };
    Reading {
        at: Instant::now(),
        coordinator_cpu: coordinator
            .pid
            .and_then(|pid| procstat::cpu_time(Some(pid)).ok()),
        coordinator_wait: coordinator
            .pid
            .and_then(|pid| procstat::run_queue_wait(Some(pid)).ok()),
        bench_cpu: procstat::cpu_time(None).ok(),
        bench_wait: procstat::run_queue_wait(None).ok(),
        ingested,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut coordinator = match &args.coordinator {
        Some(url) => Coordinator::external(url.clone(), args.coordinator_pid, args.metrics_addr),
        None => {
            let bin = match &args.coordinator_bin {
                Some(b) => b.clone(),
                None => coordinator::default_binary()?,
            };
            Coordinator::spawn(&bin, args.database_url.as_deref()).await?
        }
    };
    let result = run(&args, &coordinator).await;
    if let Some(log) = &coordinator.log {
        print_warnings(log);
    }
    if result.is_err() {
        if let Some(log) = &coordinator.log {
            eprintln!("coordinator log: {}", log.display());
            if let Ok(text) = std::fs::read_to_string(log) {
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                for line in tail.into_iter().rev() {
                    eprintln!("  {line}");
                }
            }
        }
    }
    coordinator.shutdown();
    result
}

/// The share of one core between two readings of a CPU-time counter.
fn share(before: Option<Duration>, after: Option<Duration>, wall: Duration) -> Option<f64> {
    Some(procstat::percent_of_core(before?, after?, wall))
}

/// Connects every simulated agent; like a real agent, one whose Connect is
/// refused tries again after a pause. Returns them and the retries.
async fn register_agents(args: &Args, url: &str) -> anyhow::Result<(Vec<agents::Registered>, u64)> {
    let prefix = format!("bench-{}", std::process::id());
    let retries = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let registered = all_of(args.agents, args.connect_concurrency, |i| {
        let (url, prefix, retries) = (url.to_string(), prefix.clone(), retries.clone());
        async move {
            let mut attempt = 1;
            loop {
                match agents::connect(&url, &prefix, i).await {
                    Ok(agent) => return Ok(agent),
                    Err(e) if attempt < CONNECT_ATTEMPTS => {
                        eprintln!("bench: agent {i}: {e:#}; retrying");
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                        attempt += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    })
    .await?;
    Ok((
        registered,
        retries.load(std::sync::atomic::Ordering::Relaxed),
    ))
}

/// When the agents start sending, the measured window (t0..t1, also as
/// Unix milliseconds for the samples' own timestamps) and the drain's end.
struct Schedule {
    start: Instant,
    t0: Instant,
    t1: Instant,
    stop: Instant,
    window: window::Window,
}

impl Schedule {
    /// Half a second from now, then the warm-up, the window and the drain.
    fn new(args: &Args) -> Schedule {
        let lead = Duration::from_millis(500);
        let start = Instant::now() + lead;
        let from_ms = window::unix_ms(SystemTime::now() + lead + args.warmup);
        let t0 = start + args.warmup;
        let t1 = t0 + args.duration;
        Schedule {
            start,
            t0,
            t1,
            stop: t1 + args.drain,
            window: window::Window {
                from_ms,
                to_ms: from_ms + args.duration.as_millis() as i64,
            },
        }
    }
}

async fn run(args: &Args, coordinator: &Coordinator) -> anyhow::Result<()> {
    let url = coordinator.url.clone();
    let backend = match (&args.coordinator, &args.database_url) {
        (Some(_), _) => "external",
        (None, Some(_)) => "postgres",
        (None, None) => "sqlite",
    };
    eprintln!(
        "bench: {backend} coordinator at {url}; opening {} watchers, connecting {} agents",
        args.watchers, args.agents
    );
    let open = all_of(args.watchers, args.connect_concurrency, |_| {
        let url = url.clone();
        async move { watchers::open(&url).await }
    })
    .await?;
    let connect_started = Instant::now();
    let (registered, retries) = register_agents(args, &url).await?;
    let connect_took = connect_started.elapsed();

    let Schedule {
        start,
        t0,
        t1,
        stop,
        window,
    } = Schedule::new(args);
    eprintln!(
        "bench: {} agents registered in {:.1}s ({} refused Connects retried); warm-up {:?}, window {:?}, drain {:?}",
        args.agents,
        connect_took.as_secs_f64(),
        retries,
        args.warmup,
        args.duration,
        args.drain
    );

    let sent = Arc::new(agents::Sent::default());
    let mut agent_tasks = JoinSet::new();
    for agent in registered {
        agent_tasks.spawn(agent.run(args.agents, start, stop, window, sent.clone()));
    }
    let mut watcher_tasks = JoinSet::new();
    for w in open {
        watcher_tasks.spawn(w.run(window, stop));
    }

    tokio::time::sleep_until(t0).await;
    let before = read(coordinator).await;
    tokio::time::sleep_until(t1).await;
    let after = read(coordinator).await;
    let wall = after.at - before.at;

    let mut seen = Vec::with_capacity(args.watchers);
    while let Some(s) = watcher_tasks.join_next().await {
        seen.push(s.context("watcher task")?);
    }
    while let Some(a) = agent_tasks.join_next().await {
        a.context("agent task")?;
    }

    let stored = match coordinator.store.clone() {
        Some(store) => Some(
            tokio::task::spawn_blocking(move || settled_count(&store, window))
                .await
                .context("counting stored samples")??,
        ),
        None => None,
    };
    let peak_rss = coordinator
        .pid
        .and_then(|pid| procstat::peak_rss(Some(pid)).ok());

    let figures = report::Figures {
        backend,
        agents: args.agents,
        watchers: args.watchers,
        duration: args.duration,
        sent_in_window: sent.in_window.load(std::sync::atomic::Ordering::Relaxed),
        sent_total: sent.total.load(std::sync::atomic::Ordering::Relaxed),
        blocked_sends: sent
            .blocked_sends
            .load(std::sync::atomic::Ordering::Relaxed),
        ingested_per_s: match (before.ingested, after.ingested) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / wall.as_secs_f64()),
            _ => None,
        },
        stored,
        seen,
        coordinator_cpu_percent: share(before.coordinator_cpu, after.coordinator_cpu, wall),
        bench_cpu_percent: share(before.bench_cpu, after.bench_cpu, wall),
        coordinator_wait_percent: share(before.coordinator_wait, after.coordinator_wait, wall),
        bench_wait_percent: share(before.bench_wait, after.bench_wait, wall),
        load_average: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string)),
        coordinator_peak_rss: peak_rss,
    };
    print!("{}", figures.render());
    Ok(())
}

/// The coordinator's WARN and ERROR log lines (e.g. the history writer
/// dropping rows): how many, and the first few.
fn print_warnings(log: &std::path::Path) {
    let Ok(text) = std::fs::read_to_string(log) else {
        return;
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    if lines.is_empty() {
        return;
    }
    println!("coordinator warnings         {} lines; first:", lines.len());
    for line in lines.iter().take(3) {
        println!("  {line}");
    }
}

/// Stored rows of the window once the history writer has caught up: the
/// count, re-read every second until it stops changing (at most 30 s).
fn settled_count(store: &store::Store, window: window::Window) -> anyhow::Result<u64> {
    let mut last = store.stored_between(window.from_ms, window.to_ms)?;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_secs(1));
        let now = store.stored_between(window.from_ms, window.to_ms)?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

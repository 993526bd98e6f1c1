//! The placement burst of `cohort-bench-control --agents N`: simulated
//! agents to place on, the time until the queue is placed, and the
//! scheduler's pass figures once the queue is full.

use crate::agents;
use cohort_proto::v1::{self, training_service_client::TrainingServiceClient};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Connects `n` simulated agents, 32 at a time, and keeps them
/// heartbeating (with telemetry) until the returned tasks are dropped.
pub async fn connect_agents(url: &str, n: usize) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let mut tasks = tokio::task::JoinSet::new();
    if n == 0 {
        return Ok(tasks);
    }
    let started = Instant::now();
    let prefix = format!("bench-{}", std::process::id());
    let gate = Arc::new(Semaphore::new(32));
    let mut connecting = tokio::task::JoinSet::new();
    for i in 0..n {
        let (url, prefix, gate) = (url.to_string(), prefix.clone(), gate.clone());
        connecting.spawn(async move {
            let _turn = gate.acquire_owned().await?;
            agents::connect(&url, &prefix, i).await
        });
    }
    let far = tokio::time::Instant::now() + Duration::from_secs(24 * 3600);
    let window = crate::window::Window {
        from_ms: 0,
        to_ms: 0,
    };
    let sent = Arc::new(agents::Sent::default());
    while let Some(agent) = connecting.join_next().await {
        let agent = agent??;
        tasks.spawn(agent.run(n, tokio::time::Instant::now(), far, window, sent.clone()));
    }
    println!(
        "{n} simulated agents registered in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(tasks)
}

/// How long until `expected` trainings are SCHEDULED (ListTrainings of that
/// state every 50 ms: cheaper than rendering `/metrics` for 8,000 GPUs;
/// at most 3 min): the count and the time.
pub async fn time_placements(url: String, expected: usize) -> anyhow::Result<(usize, Duration)> {
    let started = Instant::now();
    let mut client = TrainingServiceClient::new(cohort_proto::channel(&url).await?);
    let want = expected.min(1000);
    loop {
        let page = client
            .list_trainings(v1::ListTrainingsRequest {
                page_size: i32::try_from(want)?,
                states: vec![v1::training::State::Scheduled as i32],
                ..Default::default()
            })
            .await?
            .into_inner();
        let placed = page.trainings.len();
        if placed >= want || started.elapsed() > Duration::from_secs(180) {
            return Ok((placed, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The scheduler's figures once the queue is full: waits (up to 3 min)
/// for passes over most of the `waiting` trainings (placements still under
/// way shorten the queue a little), then prints five of them, 1 s apart,
/// and the slowest pass since start.
pub async fn report_passes(metrics: std::net::SocketAddr, waiting: usize) -> anyhow::Result<()> {
    use crate::coordinator::metric;
    let settle = Instant::now();
    let mut passes = Vec::new();
    let mut seen = f64::NAN;
    while passes.len() < 5 && settle.elapsed() < Duration::from_secs(180) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let looked_at = metric(metrics, "cohort_scheduler_pass_trainings").await?;
        let last = metric(metrics, "cohort_scheduler_pass_seconds").await? * 1e3;
        // A new pass (another duration) over the whole queue.
        if looked_at >= 0.9 * waiting as f64 && last != seen {
            passes.push((looked_at, last));
            seen = last;
        }
    }
    let max = metric(metrics, "cohort_scheduler_pass_max_seconds").await? * 1e3;
    let shown: Vec<String> = passes
        .iter()
        .map(|(n, ms)| format!("{ms:.1} ms over {n:.0}"))
        .collect();
    println!(
        "scheduler passes over the full queue (sampled 1 s apart, {:.0} s after it was full): {}; slowest since start {max:.1} ms",
        settle.elapsed().as_secs_f64(),
        if shown.is_empty() { "none seen".to_string() } else { shown.join(", ") }
    );
    Ok(())
}

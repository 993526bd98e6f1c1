//! Coalescing of PER_GPU updates, filters and lag notices.

use super::*;
use crate::fleet::WatcherStats;
use crate::model::GpuSample;
use std::time::Instant as StdInstant;

/// `n` samples of `agent`, each marked with `seq` (memory_used_bytes) so
/// the order they arrive in can be checked.
fn samples(agent: &str, seq: u64, n: usize) -> Vec<GpuSample> {
    (0..n)
        .map(|i| GpuSample {
            gpu_uuid: format!("{agent}-gpu{i}"),
            index: i as i32,
            memory_used_bytes: seq,
            simulated: true,
            ..Default::default()
        })
        .collect()
}

/// Connects `agent` with `n` GPUs, as [`samples`] names them: the fleet
/// takes samples only of GPUs their agent registered.
fn connect(fleet: &Fleet, agent: &str, n: usize) {
    let gpus = (0..n)
        .map(|i| crate::model::GpuRecord {
            index: i as i32,
            uuid: format!("{agent}-gpu{i}"),
            simulated: true,
            quarantine: None,
            ..Default::default()
        })
        .collect();
    fleet.connect(crate::fleet::LiveAgent {
        id: agent.into(),
        name: format!("{agent}-name"),
        host_name: agent.into(),
        address: String::new(),
        gpus,
        program_roots: Default::default(),
        session: 0,
        commands: mpsc::channel(1).0,
        last_seen: tokio::time::Instant::now(),
        cordon: None,
        drain_deadline: None,
    });
}

fn batch(agent: &str, seq: u64, n: usize) -> TelemetryBatch {
    TelemetryBatch::new(
        samples(agent, seq, n)
            .into_iter()
            .map(|sample| GpuReading {
                agent_id: agent.to_string(),
                agent_name: format!("{agent}-name"),
                hold: None,
                sample,
            })
            .collect(),
    )
}

fn decoded(update: EncodedUpdate) -> v1::GpuMetricsUpdate {
    update
        .decode_into()
        .expect("a GpuMetricsUpdate on the wire")
}

/// (agent, seq) of each entry, in order.
fn entries(update: &v1::GpuMetricsUpdate) -> Vec<(String, u64)> {
    update
        .gpus
        .iter()
        .map(|g| {
            let s = g.sample.as_ref().expect("sample");
            (g.agent_id.clone(), s.memory_used_bytes)
        })
        .collect()
}

#[test]
fn coalescer_merges_batches_in_arrival_order_through_the_filter() {
    let mut c = Coalescer::new(ReadingFilter {
        agents: vec!["a".into(), "c-name".into()],
        ..Default::default()
    });
    assert!(c.take().is_none());
    c.push(&batch("a", 1, 2));
    c.push(&batch("b", 2, 2));
    c.push(&batch("c", 3, 2));
    c.push(&batch("a", 4, 1));
    assert!(!c.is_empty() && !c.is_full());
    let update = decoded(c.take().expect("one update"));
    assert_eq!(update.view, v1::MetricsView::PerGpu as i32);
    assert!(update.lagged.is_none() && update.aggregate.is_none());
    let want: Vec<(String, u64)> = [("a", 1), ("a", 1), ("c", 3), ("c", 3), ("a", 4)]
        .iter()
        .map(|(a, s)| (a.to_string(), *s))
        .collect();
    assert_eq!(entries(&update), want);
    assert_eq!(update.gpus[0].agent_name, "a-name");
    assert_eq!(update.gpus[0].rank, -1);
    assert!(c.is_empty() && c.take().is_none());
}

#[test]
fn coalescer_splits_at_the_message_cap_oldest_first() {
    let mut c = Coalescer::new(ReadingFilter::default());
    let per_batch = 8;
    let batches = MAX_GPUS_PER_UPDATE / per_batch + 2;
    for seq in 0..batches {
        c.push(&batch("a", seq as u64, per_batch));
    }
    assert!(c.is_full());
    let first = decoded(c.take().expect("full update"));
    assert_eq!(first.gpus.len(), MAX_GPUS_PER_UPDATE);
    assert_eq!(entries(&first)[0].1, 0);
    let second = decoded(c.take().expect("the rest"));
    assert_eq!(second.gpus.len(), batches * per_batch - MAX_GPUS_PER_UPDATE);
    assert_eq!(
        entries(&second).last().map(|e| e.1),
        Some(batches as u64 - 1)
    );
    assert!(c.take().is_none());
}

#[test]
fn watchers_share_one_encoding_of_a_batch() {
    let batch = Arc::new(batch("a", 1, 3));
    let mut one = Coalescer::new(ReadingFilter::default());
    let mut other = Coalescer::new(ReadingFilter {
        gpu_uuids: vec!["a-gpu2".into()],
        ..Default::default()
    });
    one.push(&batch);
    other.push(&batch);
    let one: Vec<Bytes> = one.take().expect("update").gpus;
    let other: Vec<Bytes> = other.take().expect("update").gpus;
    assert_eq!(other.len(), 1);
    // The same bytes, not an equal copy.
    assert_eq!(one[2].as_ptr(), other[0].as_ptr());
    assert_eq!(
        batch.encoded.get().map(|e| e.len()),
        Some(3),
        "encoded once, on the batch"
    );
}

fn start(
    fleet: &Fleet,
    view: v1::MetricsView,
    filter: ReadingFilter,
) -> mpsc::Receiver<Result<EncodedUpdate, Status>> {
    start_counted(fleet, view, filter, &WatcherStats::default())
}

/// [`start`], counted in `stats`.
fn start_counted(
    fleet: &Fleet,
    view: v1::MetricsView,
    filter: ReadingFilter,
    stats: &WatcherStats,
) -> mpsc::Receiver<Result<EncodedUpdate, Status>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    // A dropped sender never says stop.
    tokio::spawn(run(
        fleet.clone(),
        view,
        filter,
        tx,
        watch::channel(false).1,
        stats.open(),
    ));
    rx
}

async fn next(rx: &mut mpsc::Receiver<Result<EncodedUpdate, Status>>) -> v1::GpuMetricsUpdate {
    decoded(
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an update within 5 s")
            .expect("stream open")
            .expect("not an error"),
    )
}

/// Updates until `want` GPU entries have arrived.
async fn collect(
    rx: &mut mpsc::Receiver<Result<EncodedUpdate, Status>>,
    want: usize,
) -> Vec<v1::GpuMetricsUpdate> {
    let mut got = Vec::new();
    let mut n = 0;
    while n < want {
        let u = next(rx).await;
        n += u.gpus.len();
        got.push(u);
    }
    assert_eq!(n, want, "more entries than ingested");
    got
}

#[tokio::test]
async fn a_burst_of_batches_reaches_a_watcher_as_one_update() {
    let fleet = Fleet::new();
    let mut all = start(&fleet, v1::MetricsView::PerGpu, ReadingFilter::default());
    let mut some = start(
        &fleet,
        v1::MetricsView::PerGpu,
        ReadingFilter {
            agents: vec!["agent-3".into()],
            ..Default::default()
        },
    );
    assert!(next(&mut all).await.gpus.is_empty(), "the (empty) snapshot");
    assert!(next(&mut some).await.gpus.is_empty());
    for a in 0..10 {
        connect(&fleet, &format!("agent-{a}"), 8);
    }
    // 200 agents report before the watchers get to run.
    for seq in 0..200u64 {
        let agent = format!("agent-{}", seq % 10);
        fleet.ingest(&agent, samples(&agent, seq, 8));
    }
    let updates = collect(&mut all, 1600).await;
    assert_eq!(updates.len(), 1, "one update for 200 batches");
    let seqs: Vec<u64> = entries(&updates[0]).iter().map(|e| e.1).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "arrival order");
    let filtered = collect(&mut some, 20 * 8).await;
    assert_eq!(filtered.len(), 1);
    assert!(entries(&filtered[0]).iter().all(|(a, _)| a == "agent-3"));
}

#[tokio::test]
async fn a_steady_stream_is_sent_at_most_once_per_window() {
    let fleet = Fleet::new();
    connect(&fleet, "agent", 8);
    let mut rx = start(&fleet, v1::MetricsView::PerGpu, ReadingFilter::default());
    next(&mut rx).await;
    let started = StdInstant::now();
    let batches = 100u64;
    for seq in 0..batches {
        fleet.ingest("agent", samples("agent", seq, 8));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let updates = collect(&mut rx, batches as usize * 8).await;
    let elapsed = started.elapsed();
    // The first goes out at once, then at most one per window.
    let most = 2 + (elapsed.as_millis() / COALESCE_WINDOW.as_millis()) as usize;
    assert!(
        updates.len() <= most,
        "{} updates in {elapsed:?} (at most {most})",
        updates.len()
    );
    assert!(updates.len() >= 2, "a 0.5 s stream is not held back whole");
    let seqs: Vec<u64> = updates
        .iter()
        .flat_map(|u| entries(u).into_iter().map(|e| e.1))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "arrival order");
}

#[tokio::test]
async fn a_lagging_watcher_gets_what_came_before_the_gap_then_a_notice() {
    let fleet = Fleet::with_telemetry_buffer(4);
    connect(&fleet, "agent", 2);
    let stats = WatcherStats::default();
    let mut rx = start_counted(
        &fleet,
        v1::MetricsView::PerGpu,
        ReadingFilter::default(),
        &stats,
    );
    next(&mut rx).await;
    fleet.ingest("agent", samples("agent", 0, 2));
    assert_eq!(entries(&next(&mut rx).await), vec![("agent".into(), 0); 2]);
    // Within the window after that update: held back, pending.
    fleet.ingest("agent", samples("agent", 1, 2));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // 10 more without letting the watcher run: the buffer keeps the last 4.
    for seq in 2..12 {
        fleet.ingest("agent", samples("agent", seq, 2));
    }
    let before = next(&mut rx).await;
    assert_eq!(entries(&before), vec![("agent".into(), 1); 2]);
    let notice = next(&mut rx).await;
    assert_eq!(notice.lagged.map(|l| l.missed_events), Some(6));
    assert!(notice.gpus.is_empty());
    // Counted for the metrics: one open watcher, lagged once by 6 batches.
    let counts = stats.counts();
    assert_eq!(
        (counts.open, counts.lag_notices, counts.missed_batches),
        (1, 1, 6)
    );
    let after = collect(&mut rx, 8).await;
    let seqs: Vec<u64> = after
        .iter()
        .flat_map(|u| entries(u).into_iter().map(|e| e.1))
        .collect();
    assert_eq!(seqs, vec![8, 8, 9, 9, 10, 10, 11, 11]);
}

#[tokio::test]
async fn the_aggregated_view_starts_with_the_current_aggregate() {
    let fleet = Fleet::new();
    // Refused: the agent is not connected.
    assert_eq!(fleet.ingest("agent", samples("agent", 0, 2)).refused, 2);
    let mut rx = start(
        &fleet,
        v1::MetricsView::Aggregated,
        ReadingFilter::default(),
    );
    let first = next(&mut rx).await;
    assert_eq!(first.view, v1::MetricsView::Aggregated as i32);
    assert!(first.gpus.is_empty());
    // Nothing was taken: an empty aggregate.
    assert_eq!(first.aggregate.map(|a| a.gpu_count), Some(0));
}

#[tokio::test]
async fn a_stopping_server_ends_both_views() {
    let fleet = Fleet::new();
    let (stop, stopping) = watch::channel(false);
    let mut streams = Vec::new();
    for view in [v1::MetricsView::PerGpu, v1::MetricsView::Aggregated] {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(
            fleet.clone(),
            view,
            ReadingFilter::default(),
            tx,
            stopping.clone(),
            WatcherStats::default().open(),
        ));
        next(&mut rx).await;
        streams.push(rx);
    }
    stop.send_replace(true);
    for mut rx in streams {
        let end = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(matches!(end, Ok(None)), "the stream ended");
    }
}

/// Issue 12, defect 4: the fleet took samples for any GPU id from anyone.
#[test]
fn an_agent_reports_only_the_gpus_it_registered() {
    let fleet = Fleet::new();
    connect(&fleet, "a", 2);
    connect(&fleet, "b", 2);
    let mut rx = fleet.subscribe_telemetry();
    // a speaks for b's GPUs: refused, b's GPUs keep no sample.
    let got = fleet.ingest("a", samples("b", 0, 2));
    assert_eq!((got.accepted, got.refused), (0, 2));
    assert_eq!(got.first_refused.as_deref(), Some("b-gpu0"));
    assert!(fleet.latest("b-gpu0").is_none() && fleet.latest("b-gpu1").is_none());
    assert!(rx.try_recv().is_err(), "nothing fanned out");
    // An agent that never connected: refused, nothing kept.
    let got = fleet.ingest("ghost", samples("ghost", 0, 3));
    assert_eq!((got.accepted, got.refused), (0, 3));
    assert!(fleet.latest("ghost-gpu0").is_none());
    // A mixed batch keeps only a's own GPU.
    let mut mixed = samples("a", 1, 1);
    mixed.extend(samples("b", 1, 2).into_iter().skip(1));
    let got = fleet.ingest("a", mixed);
    assert_eq!((got.accepted, got.refused), (1, 1));
    assert!(fleet.latest("a-gpu0").is_some() && fleet.latest("b-gpu1").is_none());
    let batch = rx.try_recv().expect("a's sample went out");
    assert_eq!(batch.readings.len(), 1);
    assert_eq!(fleet.samples_refused(), 6);
    assert_eq!(fleet.ingested(), (1, 1));
}

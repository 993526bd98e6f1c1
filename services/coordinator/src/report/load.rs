//! Gathers what a report is built from: the training, its events, its GPU
//! telemetry, and the succeeded trainings of the same config.

use super::gpu::usage_by_rank;
use super::scaling::{scaling, ScalingRun};
use super::summary::{summarize, TrainingFacts};
use super::{metrics::metrics_jsonl, Report};
use crate::model::{JobState, StoredEvent, Training};
use crate::persistence::gpu_metrics::{BucketWindow, MetricsSelection};
use crate::persistence::{DatabaseError, ListTrainings, Persistence, TrainingCursor};
use chrono::Utc;
use std::collections::BTreeMap;

/// Events read per query.
const EVENT_BATCH: i64 = 5000;
/// Telemetry buckets per GPU at most: the read's step grows with the job.
const MAX_BUCKETS: i64 = 3600;
/// Telemetry samples tagged with the training may land a little after its end.
const LATE_SAMPLES_MS: i64 = 60_000;
/// Succeeded trainings looked at for the scaling report, newest first.
const MAX_SCANNED: usize = 5000;
/// Same-config trainings compared at most (besides the current one).
const MAX_PEERS: usize = 32;
const PAGE: i64 = 500;

/// The report of `training_id`; `None` if there is no such training.
pub async fn build_report(
    db: &Persistence,
    training_id: &str,
    prices: &super::cost::Prices,
) -> Result<Option<Report>, DatabaseError> {
    let Some(training) = db.get_training(training_id).await? else {
        return Ok(None);
    };
    let events = all_events(db, training_id).await?;
    let facts = facts_of(&training);
    let gpu = usage_by_rank(&gpu_buckets(db, &training).await?);
    let summary = summarize(&facts, &events, gpu);

    let mut runs = vec![ScalingRun {
        training_id: training.id.clone(),
        world_size: training.world_size,
        samples_per_sec: summary.mean_samples_per_sec,
        create_time: training.create_time,
    }];
    for peer in same_config_peers(db, &training).await? {
        // A peer's throughput comes from its started and progress lines
        // alone: not every rank's stats of its whole run.
        let peer_events = db
            .events_of_kinds(&peer.id, &["started", "progress"])
            .await?;
        let peer_summary = summarize(&facts_of(&peer), &peer_events, BTreeMap::new());
        runs.push(ScalingRun {
            training_id: peer.id.clone(),
            world_size: peer.world_size,
            samples_per_sec: peer_summary.mean_samples_per_sec,
            create_time: peer.create_time,
        });
    }
    let transitions = db.transitions(training_id).await?;
    let gpu_model = gpu_model(db, &training).await?;
    let cost = super::cost::analyse(
        &transitions,
        &events,
        training.config.program().is_some(),
        training.world_size,
        &gpu_model,
        prices,
        Utc::now(),
    );
    let mut scaling = scaling(&training.id, &runs);
    if let Some((compute_ms, comm_ms)) = super::estimate::measured(&summary.ranks) {
        scaling.estimates = super::estimate::estimate(training.world_size, compute_ms, comm_ms);
    }
    Ok(Some(Report {
        cost,
        preemptions: super::preemptions::preemptions(&events),
        resizes: super::resizes::resizes(&events),
        code: training
            .config
            .program()
            .and_then(|p| p.snapshot())
            .cloned(),
        training_id: training.id.clone(),
        state: training.state,
        is_final: training.state.is_final(),
        summary,
        scaling,
        metrics_jsonl: metrics_jsonl(&events),
    }))
}

/// The model name of the GPUs the training's newest attempt ran on ("" when
/// never placed; the first rank's when they differ).
async fn gpu_model(db: &Persistence, training: &Training) -> Result<String, DatabaseError> {
    if training.attempt == 0 {
        return Ok(String::new());
    }
    let ranks = db.ranks(&training.id, training.attempt).await?;
    let Some(first) = ranks.iter().min_by_key(|r| r.slot.rank) else {
        return Ok(String::new());
    };
    Ok(db.gpu_name(&first.slot.gpu_uuid).await?.unwrap_or_default())
}

fn facts_of(training: &Training) -> TrainingFacts {
    let end = training.end_time.unwrap_or_else(Utc::now);
    let wall_time_s = training
        .start_time
        .map(|start| ((end - start).num_milliseconds().max(0) as f64) / 1000.0)
        .unwrap_or(0.0);
    TrainingFacts {
        world_size: training.world_size,
        attempts: training.attempt,
        wall_time_s,
        program: training.config.program().is_some(),
    }
}

/// Every stored event of a training, in sequence order.
pub async fn all_events(
    db: &Persistence,
    training_id: &str,
) -> Result<Vec<StoredEvent>, DatabaseError> {
    let mut all: Vec<StoredEvent> = Vec::new();
    loop {
        let after = all.last().map_or(0, |e| e.seq);
        let batch = db.events_after(training_id, after, EVENT_BATCH).await?;
        let done = (batch.len() as i64) < EVENT_BATCH;
        all.extend(batch);
        if done {
            return Ok(all);
        }
    }
}

/// The telemetry of the training's GPUs from its creation to its end.
async fn gpu_buckets(
    db: &Persistence,
    training: &Training,
) -> Result<Vec<crate::persistence::gpu_metrics::GpuBucket>, DatabaseError> {
    let start_ms = training.create_time.timestamp_millis();
    let until_ms = training
        .end_time
        .unwrap_or_else(Utc::now)
        .timestamp_millis()
        + LATE_SAMPLES_MS;
    let span = (until_ms - start_ms).max(1);
    let step_ms = (ceil_div(ceil_div(span, MAX_BUCKETS), 1000) * 1000).max(1000);
    let window = BucketWindow {
        start_ms,
        step_ms,
        first: 0,
        end: ceil_div(span, step_ms),
        until_ms,
    };
    let selection = MetricsSelection {
        training_id: training.id.clone(),
        ..Default::default()
    };
    db.gpu_metric_buckets(selection, window).await
}

/// `a / b` rounded up, for positive `a` and `b`.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// Succeeded trainings with the same config as `training`, newest first, at
/// most [`MAX_PEERS`].
async fn same_config_peers(
    db: &Persistence,
    training: &Training,
) -> Result<Vec<Training>, DatabaseError> {
    let mut peers = Vec::new();
    let mut after: Option<TrainingCursor> = None;
    let mut scanned = 0;
    while scanned < MAX_SCANNED && peers.len() < MAX_PEERS {
        let page = db
            .list_trainings(ListTrainings {
                states: vec![JobState::Succeeded],
                limit: PAGE,
                after: after.clone(),
                // a report names only its own team's trainings
                team: Some(training.team.clone()),
                labels: Vec::new(),
            })
            .await?;
        scanned += page.len();
        after = page.last().map(TrainingCursor::from);
        let last_page = (page.len() as i64) < PAGE;
        peers.extend(
            page.into_iter()
                .filter(|t| t.id != training.id && t.config == training.config),
        );
        if last_page {
            break;
        }
    }
    peers.truncate(MAX_PEERS);
    Ok(peers)
}

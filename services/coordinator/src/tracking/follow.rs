//! The leader's tracking loop: every [`POLL`] it reads the state
//! transitions after its cursor (a training of a tracked team is followed
//! from the first one it sees, from its first event on), reads each
//! followed training's new events into its backlog of metric points, and
//! sends what it can to each tracker that is not backing off: the run (made
//! once, with its params and tags), the points in batches, and at the end
//! the report and the status. Sends are in this task, never on a request's
//! or a training's path.

use super::mlflow::{Mlflow, Point, MAX_METRICS_PER_BATCH, MAX_PARAMS_PER_BATCH};
use super::points;
use crate::context::Context;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How often the loop looks.
const POLL: Duration = Duration::from_secs(2);
/// Transitions read per query.
const TRANSITIONS: i64 = 200;
/// Events read per query, and at most per training and look.
const EVENTS: i64 = 500;
const EVENTS_PER_LOOK: usize = 8;
/// Points kept per training while its tracker does not take them; the
/// oldest beyond are dropped and counted.
pub const MAX_BACKLOG: usize = 20_000;
/// Trainings followed at once; one more is not tracked (and logged).
pub const MAX_FOLLOWED: usize = 10_000;
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A followed training.
struct Followed {
    team: String,
    name: String,
    uri: String,
    attempt: i32,
    /// The last event read.
    seq: i64,
    /// The last read found no more events.
    caught_up: bool,
    backlog: VecDeque<Point>,
    run: Option<Run>,
    params_sent: bool,
    tagged_attempt: i32,
    /// Its terminal state and when (milliseconds since the epoch).
    end: Option<(String, i64)>,
}

struct Run {
    id: String,
    artifacts: String,
}

/// A tracker and its backoff.
struct Tracker {
    client: Mlflow,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Tracker {
    fn new(uri: &str) -> Self {
        Self {
            client: Mlflow::new(uri),
            retry_at: None,
            backoff: FIRST_BACKOFF,
        }
    }

    fn waiting(&self) -> bool {
        self.retry_at.is_some_and(|at| Instant::now() < at)
    }

    fn answered(&mut self) {
        self.retry_at = None;
        self.backoff = FIRST_BACKOFF;
    }

    fn failed(&mut self) {
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}

/// Follows until `shutdown`; returns at once when no team is tracked.
pub async fn run(ctx: Context, shutdown: impl std::future::Future<Output = ()>) {
    if ctx.tracking.settings.is_empty() {
        return;
    }
    tokio::pin!(shutdown);
    let Some(mut cursor) =
        crate::feed::start_cursor(&ctx.db, "tracking", POLL, shutdown.as_mut()).await
    else {
        return;
    };
    let mut followed: HashMap<String, Followed> = HashMap::new();
    let mut trackers: HashMap<String, Tracker> = HashMap::new();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => {
                cursor = see_transitions(&ctx, cursor, &mut followed).await;
                for (id, f) in followed.iter_mut() {
                    read_events(&ctx, id, f).await;
                }
                send_all(&ctx, &mut followed, &mut trackers).await;
            }
        }
    }
}

async fn see_transitions(
    ctx: &Context,
    mut cursor: i64,
    followed: &mut HashMap<String, Followed>,
) -> i64 {
    loop {
        let batch = match ctx.db.transitions_after(cursor, TRANSITIONS).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(error = %e, "tracking: cannot read state transitions");
                return cursor;
            }
        };
        for t in &batch {
            cursor = t.id;
            let Some(uri) = ctx.tracking.settings.uri_for(&t.team) else {
                continue;
            };
            if !followed.contains_key(&t.training_id) {
                if followed.len() >= MAX_FOLLOWED {
                    tracing::warn!(training_id = %t.training_id, "tracking: {MAX_FOLLOWED} trainings followed already; not this one");
                    continue;
                }
                ctx.tracking
                    .update(&t.training_id, |s| s.uri = uri.to_string());
                followed.insert(
                    t.training_id.clone(),
                    Followed {
                        team: t.team.clone(),
                        name: if t.display_name.is_empty() {
                            t.training_id.clone()
                        } else {
                            t.display_name.clone()
                        },
                        uri: uri.to_string(),
                        attempt: t.attempt,
                        seq: 0,
                        caught_up: false,
                        backlog: VecDeque::new(),
                        run: None,
                        params_sent: false,
                        tagged_attempt: 0,
                        end: None,
                    },
                );
            }
            let f = followed.get_mut(&t.training_id).expect("inserted above");
            f.attempt = f.attempt.max(t.attempt);
            if ["SUCCEEDED", "FAILED", "CANCELLED"].contains(&t.to_state.as_str()) {
                f.end = Some((t.to_state.clone(), t.at.timestamp_millis()));
            }
        }
        if (batch.len() as i64) < TRANSITIONS {
            return cursor;
        }
    }
}

/// Moves a training's new events into its backlog, dropping the oldest
/// points past [`MAX_BACKLOG`].
async fn read_events(ctx: &Context, id: &str, f: &mut Followed) {
    for _ in 0..EVENTS_PER_LOOK {
        let events = match ctx.db.events_after(id, f.seq, EVENTS).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(training_id = %id, error = %e, "tracking: cannot read events");
                return;
            }
        };
        for e in &events {
            f.seq = e.seq;
            f.backlog.extend(points::of_event(e));
        }
        let over = f.backlog.len().saturating_sub(MAX_BACKLOG);
        if over > 0 {
            f.backlog.drain(..over);
            ctx.tracking.count_dropped(over as u64);
            ctx.tracking.update(id, |s| s.dropped += over as u64);
            tracing::warn!(training_id = %id, dropped = over, "tracking: backlog full; oldest points dropped");
        }
        let pending = f.backlog.len() as u64;
        ctx.tracking.update(id, |s| s.pending = pending);
        f.caught_up = (events.len() as i64) < EVENTS;
        if f.caught_up {
            return;
        }
    }
}

async fn send_all(
    ctx: &Context,
    followed: &mut HashMap<String, Followed>,
    trackers: &mut HashMap<String, Tracker>,
) {
    let ids: Vec<String> = followed.keys().cloned().collect();
    for id in ids {
        let Some(f) = followed.get_mut(&id) else {
            continue;
        };
        let tracker = trackers
            .entry(f.uri.clone())
            .or_insert_with(|| Tracker::new(&f.uri));
        if tracker.waiting() {
            continue;
        }
        match send(ctx, &tracker.client, &id, f).await {
            Ok(done) => {
                tracker.answered();
                ctx.tracking.update(&id, |s| s.last_error.clear());
                if done {
                    followed.remove(&id);
                }
            }
            Err(e) => {
                tracker.failed();
                ctx.tracking.count_error();
                tracing::warn!(training_id = %id, tracker = %tracker.client.uri(), error = %e, retry_in_s = tracker.backoff.as_secs(), "tracking: the tracker did not take it");
                ctx.tracking.update(&id, |s| s.last_error = e);
            }
        }
    }
}

/// Sends what a training has for its tracker; `true` once its run ended.
async fn send(ctx: &Context, mlflow: &Mlflow, id: &str, f: &mut Followed) -> Result<bool, String> {
    let Some(training) = ctx.db.get_training(id).await.map_err(|e| e.to_string())? else {
        return Ok(true);
    };
    if f.run.is_none() {
        let named = training.config.tracking().experiment.as_deref();
        let team = if f.team.is_empty() { "cohort" } else { &f.team };
        let experiment = mlflow.experiment(named.unwrap_or(team)).await?;
        let mut tags = vec![
            ("cohort.team".to_string(), f.team.clone()),
            ("cohort.training_id".to_string(), id.to_string()),
            ("mlflow.source.name".to_string(), "cohort".to_string()),
        ];
        tags.extend(
            training
                .labels
                .iter()
                .map(|(k, v)| (format!("label.{k}"), v.clone())),
        );
        let (run_id, artifacts) = mlflow
            .create_run(
                &experiment,
                &f.name,
                training.create_time.timestamp_millis(),
                &tags,
            )
            .await?;
        tracing::info!(training_id = %id, run_id = %run_id, tracker = %mlflow.uri(), "tracking: run made");
        ctx.tracking.update(id, |s| {
            s.run_id = run_id.clone();
            s.experiment_id = experiment.clone();
        });
        f.run = Some(Run {
            id: run_id,
            artifacts,
        });
    }
    let run = f.run.as_ref().expect("made above");
    if !f.params_sent {
        let config = serde_json::to_value(&training.config).unwrap_or_default();
        for chunk in points::params(&config).chunks(MAX_PARAMS_PER_BATCH) {
            mlflow.log_batch(&run.id, chunk, &[], &[]).await?;
        }
        f.params_sent = true;
    }
    if f.tagged_attempt != f.attempt {
        let tag = [("cohort.attempt".to_string(), f.attempt.to_string())];
        mlflow.log_batch(&run.id, &[], &[], &tag).await?;
        f.tagged_attempt = f.attempt;
    }
    while !f.backlog.is_empty() {
        let n = f.backlog.len().min(MAX_METRICS_PER_BATCH);
        let chunk: Vec<Point> = f.backlog.iter().take(n).cloned().collect();
        mlflow.log_batch(&run.id, &[], &chunk, &[]).await?;
        f.backlog.drain(..n);
        ctx.tracking.count_logged(n as u64);
        let pending = f.backlog.len() as u64;
        ctx.tracking.update(id, |s| {
            s.logged += n as u64;
            s.pending = pending;
        });
    }
    let Some((state, end_ms)) = f.end.clone().filter(|_| f.caught_up) else {
        return Ok(false);
    };
    if let Err(e) = report_artifacts(ctx, mlflow, id, &run.artifacts).await {
        tracing::warn!(training_id = %id, error = %e, "tracking: the report did not reach the tracker");
        ctx.tracking.update(id, |s| s.last_error = e);
    }
    let status = match state.as_str() {
        "SUCCEEDED" => "FINISHED",
        "FAILED" => "FAILED",
        _ => "KILLED",
    };
    mlflow.end_run(&run.id, status, end_ms).await?;
    ctx.tracking.update(id, |s| s.ended = true);
    tracing::info!(training_id = %id, status, "tracking: run ended");
    Ok(true)
}

/// The final report as the run's artifacts: `summary.json` and `metrics.jsonl`.
async fn report_artifacts(
    ctx: &Context,
    mlflow: &Mlflow,
    id: &str,
    artifacts: &str,
) -> Result<(), String> {
    let prices = ctx.jobs.settings().prices.clone();
    let Some(mut report) = crate::report::build_report(&ctx.db, id, &prices)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let metrics = std::mem::take(&mut report.metrics_jsonl).into_bytes();
    let summary = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
    mlflow
        .put_artifact(artifacts, "summary.json", summary)
        .await?;
    mlflow
        .put_artifact(artifacts, "metrics.jsonl", metrics)
        .await
}

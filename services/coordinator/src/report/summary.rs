//! The performance summary of one training, from its stored events (rank
//! 0's progress windows and finished line, every rank's rank_stats) and the
//! per-rank GPU usage from telemetry.

use super::gpu::RankGpuUsage;
use super::stats::{max, mean, percentile};
use crate::model::{EventPayload, StoredEvent};
use cohort_spec::progress::{Progress, ProgressLine};
use serde::Serialize;
use std::collections::BTreeMap;

/// What the summary needs to know of the training itself.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingFacts {
    /// Ranks of the (last) placement; 0 if never placed.
    pub world_size: i32,
    /// Attempts made (1 + restarts once placed).
    pub attempts: i32,
    /// Seconds from the first start to the end (or to now while running);
    /// 0 if it never started.
    pub wall_time_s: f64,
    /// A team's program (its steps are known only from its progress lines).
    pub program: bool,
}

/// Global and per-rank performance of one training.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub world_size: i32,
    pub attempts: i32,
    /// The last step reported (finished, else the newest progress window).
    pub steps: i64,
    /// Steps the config asks for (from the started line; 0 if none yet).
    pub total_steps: i64,
    /// A program that reported no progress line: `steps` and `total_steps`
    /// are 0 because they are not known.
    pub steps_unknown: bool,
    /// The finished line's loss, else the newest progress window's.
    pub final_loss: Option<f64>,
    /// See [`TrainingFacts::wall_time_s`].
    pub wall_time_s: f64,
    /// Rank 0's own measure of its training loop (finished line), if it finished.
    pub training_time_s: Option<f64>,
    /// Global samples/s over rank 0's progress windows: the time-weighted
    /// mean (samples over time, each window lasting its steps x its step
    /// time; a window's steps count from the previous one, or from the
    /// started line's start step), leaving out each attempt's one-step
    /// warm-up window when other windows exist; and the best window.
    pub mean_samples_per_sec: Option<f64>,
    pub best_samples_per_sec: Option<f64>,
    /// Mean step time of rank 0's progress windows: nearest-rank percentiles.
    pub step_time_p50_ms: Option<f64>,
    pub step_time_p90_ms: Option<f64>,
    pub step_time_p99_ms: Option<f64>,
    /// Progress windows the figures above come from.
    pub progress_windows: u64,
    pub ranks: Vec<RankSummary>,
    /// What an SAE user judges the run by.
    pub quality: super::quality::Quality,
    /// A program's loss and metrics over the run (empty for the SAE).
    pub program: Vec<super::program::MetricSummary>,
}

/// One rank: its own timing from rank_stats, and its GPU from telemetry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSummary {
    pub rank: i32,
    /// rank_stats windows seen.
    pub stats_windows: u64,
    pub mean_step_time_ms: Option<f64>,
    /// compute / (compute + communication) over every window; `None` when
    /// both are 0. The two shares add up to 1.
    pub compute_share: Option<f64>,
    pub comm_share: Option<f64>,
    pub peak_memory_bytes: u64,
    /// What `peak_memory_bytes` counts ("cuda_allocated" or "host_rss").
    pub memory_kind: String,
    /// The highest host RSS the rank reported.
    pub peak_host_memory_bytes: u64,
    /// Mean time a step waited for its batch from the data reader.
    pub mean_data_wait_ms: Option<f64>,
    pub gpu: RankGpuUsage,
}

#[derive(Default)]
struct RankAcc {
    windows: u64,
    step_times: Vec<f64>,
    compute_ms: f64,
    comm_ms: f64,
    data_waits: Vec<f64>,
    peak_memory: u64,
    memory_kind: String,
    peak_host_memory: u64,
}

/// Builds the summary; `gpu` is the per-rank usage from telemetry.
pub fn summarize(
    facts: &TrainingFacts,
    events: &[StoredEvent],
    gpu: BTreeMap<i32, RankGpuUsage>,
) -> Summary {
    let mut run = Run::default();
    for event in events {
        if let EventPayload::Rank(line) = &event.payload {
            run.read(line);
        }
    }
    let finished = run.finished;
    Summary {
        world_size: facts.world_size,
        attempts: facts.attempts,
        steps: finished.map_or(run.last_step, |f| f.0),
        total_steps: run.total_steps,
        steps_unknown: facts.program && !run.reported,
        final_loss: finished.map(|f| f.1).or(run.last_loss),
        wall_time_s: facts.wall_time_s,
        training_time_s: finished.map(|f| f.2),
        mean_samples_per_sec: run.mean_samples_per_sec(),
        best_samples_per_sec: max(&run.throughput),
        step_time_p50_ms: percentile(&run.step_times, 50.0),
        step_time_p90_ms: percentile(&run.step_times, 90.0),
        step_time_p99_ms: percentile(&run.step_times, 99.0),
        progress_windows: run.step_times.len() as u64,
        ranks: rank_summaries(run.ranks, gpu),
        quality: super::quality::quality(events),
        program: super::program::program_metrics(events),
    }
}

/// What the progress lines add up to, read in event order.
#[derive(Default)]
struct Run {
    /// Each window's samples/s (and a program's reported rate).
    throughput: Vec<f64>,
    /// Sums of samples x ms and of ms over the windows (all, and without
    /// the warm-up windows), for the weighted mean.
    all: (f64, f64),
    steady: (f64, f64),
    prev_step: i64,
    /// The next window is the first of an attempt.
    warmup: bool,
    step_times: Vec<f64>,
    last_step: i64,
    total_steps: i64,
    last_loss: Option<f64>,
    /// (step, loss, wall time) of the Finished line.
    finished: Option<(i64, f64, f64)>,
    ranks: BTreeMap<i32, RankAcc>,
    /// A progress, metrics or finished line was read.
    reported: bool,
}

impl Run {
    fn read(&mut self, line: &ProgressLine) {
        if matches!(
            line,
            ProgressLine::Progress(_) | ProgressLine::Metrics(_) | ProgressLine::Finished { .. }
        ) {
            self.reported = true;
        }
        match line {
            ProgressLine::Started {
                total_steps,
                start_step,
                ..
            } => {
                self.total_steps = *total_steps;
                self.prev_step = *start_step;
                self.warmup = true;
            }
            ProgressLine::Progress(p) => self.progress(p),
            ProgressLine::RankStats { rank, .. } => {
                self.ranks.entry(*rank as i32).or_default().add(line)
            }
            ProgressLine::Finished {
                step,
                loss,
                wall_time_s,
                ..
            } => self.finished = Some((*step, *loss, *wall_time_s)),
            ProgressLine::Metrics(m) => self.metrics(m),
            _ => {}
        }
    }

    fn progress(&mut self, p: &Progress) {
        self.throughput.push(p.samples_per_sec);
        let steps = (p.step - self.prev_step).max(1);
        let ms = p.step_time_ms * steps as f64;
        self.all = (self.all.0 + p.samples_per_sec * ms, self.all.1 + ms);
        if !(self.warmup && steps == 1) {
            self.steady = (self.steady.0 + p.samples_per_sec * ms, self.steady.1 + ms);
        }
        self.warmup = false;
        self.prev_step = p.step;
        self.step_times.push(p.step_time_ms);
        self.last_step = p.step;
        self.total_steps = p.total_steps;
        self.last_loss = Some(p.loss);
    }

    /// A program's line: what it reported, nothing made up (its
    /// `samples_per_sec`, when it reports one, is the throughput of the
    /// report and of the scaling table).
    fn metrics(&mut self, m: &cohort_spec::metrics::Metrics) {
        if let Some(rate) = m.metrics.get("samples_per_sec").filter(|r| r.is_finite()) {
            self.throughput.push(*rate);
        }
        self.last_step = m.step;
        if let Some(t) = m.total_steps {
            self.total_steps = t;
        }
        if m.loss.is_some() {
            self.last_loss = m.loss;
        }
    }

    /// Weighted by each window's time: without the warm-up windows when
    /// there are others, else all of them, else the plain mean.
    fn mean_samples_per_sec(&self) -> Option<f64> {
        [self.steady, self.all]
            .into_iter()
            .find(|(_, ms)| *ms > 0.0)
            .map(|(sum, ms)| sum / ms)
            .or_else(|| mean(&self.throughput))
    }
}

impl RankAcc {
    /// Adds one RankStats window.
    fn add(&mut self, line: &ProgressLine) {
        let ProgressLine::RankStats {
            step_time_ms,
            compute_ms,
            comm_ms,
            memory_bytes,
            data_wait_ms,
            memory_kind,
            host_memory_bytes,
            ..
        } = line
        else {
            return;
        };
        self.memory_kind.clone_from(memory_kind);
        self.peak_host_memory = self.peak_host_memory.max(*host_memory_bytes);
        self.data_waits.push(*data_wait_ms);
        self.windows += 1;
        self.step_times.push(*step_time_ms);
        self.compute_ms += compute_ms;
        self.comm_ms += comm_ms;
        self.peak_memory = self.peak_memory.max(*memory_bytes);
    }
}

/// One summary per rank that reported stats or used a GPU.
fn rank_summaries(
    mut ranks: BTreeMap<i32, RankAcc>,
    mut gpu: BTreeMap<i32, RankGpuUsage>,
) -> Vec<RankSummary> {
    for rank in gpu.keys() {
        ranks.entry(*rank).or_default();
    }
    ranks
        .into_iter()
        .map(|(rank, acc)| {
            let busy = acc.compute_ms + acc.comm_ms;
            RankSummary {
                rank,
                stats_windows: acc.windows,
                mean_step_time_ms: mean(&acc.step_times),
                compute_share: (busy > 0.0).then(|| acc.compute_ms / busy),
                comm_share: (busy > 0.0).then(|| acc.comm_ms / busy),
                peak_memory_bytes: acc.peak_memory,
                memory_kind: acc.memory_kind,
                peak_host_memory_bytes: acc.peak_host_memory,
                mean_data_wait_ms: mean(&acc.data_waits),
                gpu: gpu.remove(&rank).unwrap_or_default(),
            }
        })
        .collect()
}

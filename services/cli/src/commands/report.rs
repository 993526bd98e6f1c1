//! `cohort train report ID`: a training's performance summary and scaling
//! table (TrainingService.GetTrainingReport); `--metrics` prints its
//! metrics.jsonl instead.

use crate::client::Coordinator;
use crate::errors::CliError;
use crate::render::table::{state_name, Table};
use crate::render::{bytes, emit, emit_json, float, json as message_json, opt_num, OutputFormat};
use cohort_proto::v1::{self, training_service_client::TrainingServiceClient};
use serde_json::{json, Value};

pub async fn report(
    coordinator: &Coordinator,
    id: &str,
    metrics: bool,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TrainingServiceClient::new(coordinator.channel().await?);
    let report = client
        .get_training_report(v1::GetTrainingReportRequest {
            id: id.to_string(),
            omit_metrics: !metrics,
            ..Default::default()
        })
        .await?
        .into_inner();
    if metrics {
        let text = String::from_utf8_lossy(&report.metrics_jsonl);
        return emit(text.trim_end_matches('\n'));
    }
    match out {
        OutputFormat::Json => emit_json(&to_json(&report)),
        OutputFormat::Table => emit(&render(&report)),
    }
}

fn pct(share: Option<f64>) -> String {
    opt_num(share.map(|s| s * 100.0), 1, "%")
}

/// The report for people: the summary, a table per rank, the scaling table.
pub fn render(r: &v1::TrainingReport) -> String {
    let s = r.summary.clone().unwrap_or_default();
    let mut out = summary(r, &s);
    out += "\n";
    out += &ranks(&s.ranks);
    out += &scaling(&r.scaling.clone().unwrap_or_default());
    if let Some(p) = &r.preemptions {
        out += &crate::render::preemptions::text(p);
    }
    if let Some(resizes) = &r.resizes {
        out += &crate::render::resizes::text(resizes);
    }
    if let Some(c) = &r.cost {
        out += &crate::render::cost::text(c);
    }
    out
}

/// The head: state, steps, times, throughput, and the quality or the
/// program's metrics.
fn summary(r: &v1::TrainingReport, s: &v1::PerformanceSummary) -> String {
    let mut out = format!(
        "training {}  {}{}\n",
        r.training_id,
        state_name(r.state),
        if r.r#final { "" } else { " (not final)" }
    );
    if let Some(code) = &r.code {
        out += &format!("code {}\n", crate::render::program::code_text(code));
    }
    let steps = if s.steps_unknown {
        "unknown (no progress line)".to_string()
    } else {
        format!("{}/{}", s.steps, s.total_steps)
    };
    out += &format!(
        "world size {}  attempts {}  steps {steps}  final loss {}\n",
        s.world_size,
        s.attempts,
        opt_num(s.final_loss, 5, "")
    );
    out += &format!(
        "wall time {:.1} s  training loop {}\n",
        s.wall_time_s,
        opt_num(s.training_time_s, 1, " s")
    );
    out += &format!(
        "throughput mean {}  best {}\n",
        opt_num(s.mean_samples_per_sec, 1, " samples/s"),
        opt_num(s.best_samples_per_sec, 1, " samples/s")
    );
    out += &format!(
        "step time p50 {}  p90 {}  p99 {}  ({} windows)\n",
        opt_num(s.step_time_p50_ms, 2, " ms"),
        opt_num(s.step_time_p90_ms, 2, " ms"),
        opt_num(s.step_time_p99_ms, 2, " ms"),
        s.progress_windows
    );
    if s.program_metrics.is_empty() {
        out += &quality(&s.quality.unwrap_or_default());
    } else {
        out += &crate::render::program::metrics_table(&s.program_metrics);
        out += "\n";
    }
    out
}

/// A row per rank: its step, its shares, its memory and its GPUs.
fn ranks(ranks: &[v1::RankPerformance]) -> String {
    let mut table = Table::new(&[
        "RANK",
        "STEP MS",
        "COMPUTE",
        "COMM",
        "DATA WAIT MS",
        "PEAK MEM",
        "GPU",
        "UTIL MEAN",
        "UTIL MAX",
        "GPU MEM MEAN",
        "GPU MEM MAX",
    ]);
    for rank in ranks {
        table.row(vec![
            rank.rank.to_string(),
            opt_num(rank.mean_step_time_ms, 2, ""),
            pct(rank.compute_share),
            pct(rank.comm_share),
            opt_num(rank.mean_data_wait_ms, 2, ""),
            bytes(rank.peak_memory_bytes),
            if rank.gpu_uuids.is_empty() {
                "-".to_string()
            } else {
                rank.gpu_uuids.join(",")
            },
            opt_num(rank.gpu_utilization_mean_percent, 1, "%"),
            opt_num(rank.gpu_utilization_max_percent, 1, "%"),
            gpu_bytes(rank.gpu_samples, rank.gpu_memory_used_mean_bytes),
            gpu_bytes(rank.gpu_samples, rank.gpu_memory_used_max_bytes),
        ]);
    }
    table.render()
}

/// The same config's runs at each size, and the model's estimates.
fn scaling(scaling: &v1::ScalingReport) -> String {
    let mut out = "\n\nscaling (same config".to_string();
    if scaling.baseline_training_id.is_empty() {
        out += ")\n";
    } else {
        out += &format!(", vs 1-rank {})\n", scaling.baseline_training_id);
    }
    let mut rows = Table::new(&["RANKS", "TRAINING", "SAMPLES/S", "SPEED-UP", "EFFICIENCY"]);
    for row in &scaling.rows {
        let mark = if row.current { " *" } else { "" };
        rows.row(vec![
            row.world_size.to_string(),
            format!("{}{mark}", row.training_id),
            opt_num(row.samples_per_sec, 1, ""),
            opt_num(row.speedup, 2, "x"),
            pct(row.efficiency),
        ]);
    }
    out += &rows.render();
    if !scaling.note.is_empty() {
        out += &format!("\n{}", scaling.note);
    }
    if !scaling.estimates.is_empty() {
        out += "\n\nestimated from this run's compute and communication (ring all-reduce model)\n";
        let mut rows = Table::new(&["GPUS", "STEP MS", "SPEED-UP", "EFFICIENCY"]);
        for e in &scaling.estimates {
            rows.row(vec![
                e.world_size.to_string(),
                format!("{:.1}", e.step_time_ms),
                format!("{:.2}x", e.speedup),
                pct(Some(e.efficiency)),
            ]);
        }
        out += &rows.render();
    }
    out
}

/// The SAE's quality lines: the newest window, the validations, incidents.
fn quality(q: &v1::SaeQuality) -> String {
    let mut out = format!(
        "quality L0 {}  EV {}  dead {}  grad norm {}  lr {}  non-finite steps {}\n",
        opt_num(q.l0, 1, ""),
        opt_num(q.explained_variance, 3, ""),
        pct(q.dead_fraction),
        opt_num(q.grad_norm, 4, ""),
        opt_num(q.learning_rate, 6, ""),
        q.nonfinite_steps
    );
    for (what, v) in [("last", &q.last_validation), ("best", &q.best_validation)] {
        if let Some(v) = v {
            out += &format!(
                "validation ({what}, step {})  loss {}  mse {}  L0 {:.1}  EV {:.3}  dead {:.1}%\n",
                v.step,
                float(v.loss),
                float(v.mse),
                v.l0,
                v.explained_variance,
                v.dead_fraction * 100.0
            );
        }
    }
    if q.checkpoints_rejected > 0 || q.divergences > 0 {
        out += &format!(
            "incidents: {} diverged attempts, {} checkpoints rejected on restore\n",
            q.divergences, q.checkpoints_rejected
        );
    }
    out
}

fn gpu_bytes(samples: u64, value: u64) -> String {
    if samples == 0 {
        "-".to_string()
    } else {
        bytes(value)
    }
}

/// The report as JSON (without the metrics lines).
pub fn to_json(r: &v1::TrainingReport) -> Value {
    let s = r.summary.clone().unwrap_or_default();
    let scaling = r.scaling.clone().unwrap_or_default();
    json!({
        "training_id": r.training_id,
        "state": state_name(r.state),
        "final": r.r#final,
        "summary": {
            "world_size": s.world_size,
            "attempts": s.attempts,
            "steps": s.steps,
            "total_steps": s.total_steps,
            "steps_unknown": s.steps_unknown,
            "final_loss": s.final_loss,
            "wall_time_s": s.wall_time_s,
            "training_time_s": s.training_time_s,
            "mean_samples_per_sec": s.mean_samples_per_sec,
            "best_samples_per_sec": s.best_samples_per_sec,
            "step_time_p50_ms": s.step_time_p50_ms,
            "step_time_p90_ms": s.step_time_p90_ms,
            "step_time_p99_ms": s.step_time_p99_ms,
            "progress_windows": s.progress_windows,
            "quality": s.quality.as_ref().map(message_json::message),
            "program_metrics": s.program_metrics.iter().map(message_json::message).collect::<Vec<_>>(),
            "ranks": s.ranks.iter().map(|k| json!({
                "rank": k.rank,
                "stats_windows": k.stats_windows,
                "mean_step_time_ms": k.mean_step_time_ms,
                "compute_share": k.compute_share,
                "comm_share": k.comm_share,
                "mean_data_wait_ms": k.mean_data_wait_ms,
                "peak_memory_bytes": k.peak_memory_bytes,
                "memory_kind": k.memory_kind,
                "peak_host_memory_bytes": k.peak_host_memory_bytes,
                "gpu_uuids": k.gpu_uuids,
                "gpu_samples": k.gpu_samples,
                "gpu_utilization_mean_percent": k.gpu_utilization_mean_percent,
                "gpu_utilization_max_percent": k.gpu_utilization_max_percent,
                "gpu_memory_used_mean_bytes": k.gpu_memory_used_mean_bytes,
                "gpu_memory_used_max_bytes": k.gpu_memory_used_max_bytes,
                "gpu_memory_total_bytes": k.gpu_memory_total_bytes,
            })).collect::<Vec<_>>(),
        },
        "scaling": {
            "baseline_training_id": scaling.baseline_training_id,
            "note": scaling.note,
            "rows": scaling.rows.iter().map(|row| json!({
                "training_id": row.training_id,
                "world_size": row.world_size,
                "samples_per_sec": row.samples_per_sec,
                "speedup": row.speedup,
                "efficiency": row.efficiency,
                "current": row.current,
            })).collect::<Vec<_>>(),
            "estimates": scaling.estimates.iter().map(|e| json!({
                "world_size": e.world_size,
                "step_time_ms": e.step_time_ms,
                "speedup": e.speedup,
                "efficiency": e.efficiency,
            })).collect::<Vec<_>>(),
        },
        "preemptions": r.preemptions.as_ref().map(crate::render::preemptions::json),
        "resizes": r.resizes.as_ref().map(crate::render::resizes::json),
        "cost": r.cost.as_ref().map(crate::render::cost::json),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> v1::TrainingReport {
        v1::TrainingReport {
            training_id: "trn-2".into(),
            state: v1::training::State::Succeeded as i32,
            r#final: true,
            summary: Some(v1::PerformanceSummary {
                world_size: 2,
                attempts: 1,
                steps: 60,
                total_steps: 60,
                final_loss: Some(0.5),
                mean_samples_per_sec: Some(2000.0),
                step_time_p50_ms: Some(3.25),
                progress_windows: 12,
                quality: Some(v1::SaeQuality {
                    l0: Some(7.5),
                    explained_variance: Some(0.875),
                    best_validation: Some(v1::ValidationEvent {
                        step: 40,
                        loss: 0.25,
                        l0: 8.0,
                        explained_variance: 0.9,
                        best: true,
                        ..Default::default()
                    }),
                    divergences: 1,
                    ..Default::default()
                }),
                ranks: vec![v1::RankPerformance {
                    rank: 0,
                    compute_share: Some(0.75),
                    comm_share: Some(0.25),
                    mean_data_wait_ms: Some(0.5),
                    peak_memory_bytes: 3 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            metrics_jsonl: Vec::new(),
            cost: None,
            scaling: Some(v1::ScalingReport {
                baseline_training_id: "trn-1".into(),
                note: String::new(),
                estimates: vec![v1::ScalingEstimate {
                    world_size: 4,
                    step_time_ms: 45.0,
                    speedup: 2.67,
                    efficiency: 0.667,
                }],
                rows: vec![
                    v1::ScalingRow {
                        training_id: "trn-1".into(),
                        world_size: 1,
                        samples_per_sec: Some(1000.0),
                        speedup: Some(1.0),
                        efficiency: Some(1.0),
                        current: false,
                    },
                    v1::ScalingRow {
                        training_id: "trn-2".into(),
                        world_size: 2,
                        samples_per_sec: Some(2000.0),
                        speedup: Some(2.0),
                        efficiency: Some(1.0),
                        current: true,
                    },
                ],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn table_shows_summary_ranks_and_scaling() {
        let text = render(&sample());
        assert!(text.starts_with("training trn-2  SUCCEEDED\n"), "{text}");
        assert!(text.contains("steps 60/60  final loss 0.50000"), "{text}");
        assert!(text.contains("p50 3.25 ms"), "{text}");
        assert!(text.contains("quality L0 7.5  EV 0.875  dead -"), "{text}");
        assert!(
            text.contains("validation (best, step 40)  loss 0.2500  mse 0.0000  L0 8.0  EV 0.900"),
            "{text}"
        );
        assert!(text.contains("incidents: 1 diverged attempts"), "{text}");
        assert!(
            text.contains("0     -        75.0%    25.0%  0.50          3.0 MiB"),
            "{text}"
        );
        assert!(
            text.contains("estimated from this run's compute and communication"),
            "{text}"
        );
        assert!(
            text.contains("scaling (same config, vs 1-rank trn-1)"),
            "{text}"
        );
        assert!(
            text.contains("2      trn-2 *   2000.0     2.00x     100.0%"),
            "{text}"
        );
    }

    #[test]
    fn preemptions_are_listed_only_when_there_were_some() {
        let mut r = sample();
        r.preemptions = Some(v1::PreemptionSummary::default());
        assert!(!render(&r).contains("preempted"));
        r.preemptions = Some(v1::PreemptionSummary {
            count: 1,
            gpu_seconds_lost: 0.25,
            records: vec![v1::PreemptionRecord {
                time: Some(prost_types::Timestamp {
                    seconds: 1_800_000_000,
                    nanos: 0,
                }),
                attempt: 1,
                by: "trn-u".into(),
                kind: "preempt".into(),
                priority_class: "urgent".into(),
                resume_step: Some(40),
                gpu_seconds_lost: 0.25,
                checkpointed: true,
            }],
        });
        let text = render(&r);
        assert!(
            text.contains("preempted 1 time(s), 0.2 GPU-seconds lost"),
            "{text}"
        );
        assert!(text.contains("preempt (urgent)"), "{text}");
        assert!(text.contains("step 40"), "{text}");
        let v = to_json(&r);
        assert_eq!(v["preemptions"]["records"][0]["resume_step"], 40);
        assert_eq!(v["preemptions"]["records"][0]["by"], "trn-u");
    }

    #[test]
    fn resizes_are_listed_only_when_there_were_some() {
        let mut r = sample();
        r.resizes = Some(v1::ResizeSummary::default());
        assert!(!render(&r).contains("resized"));
        r.resizes = Some(v1::ResizeSummary {
            count: 1,
            seconds: 1.7,
            records: vec![v1::ResizeRecord {
                time: Some(prost_types::Timestamp {
                    seconds: 1_800_000_000,
                    nanos: 0,
                }),
                attempt: 2,
                from_world_size: 2,
                to_world_size: 4,
                step: Some(405),
                seconds: 1.7,
                reason: "grow".into(),
            }],
        });
        let text = render(&r);
        assert!(text.contains("resized 1 time(s);"), "{text}");
        assert!(text.contains("1.7 s in all"), "{text}");
        assert!(text.contains("2 -> 4"), "{text}");
        assert!(text.contains("step 405"), "{text}");
        let v = to_json(&r);
        assert_eq!(v["resizes"]["records"][0]["to_world_size"], 4);
        assert_eq!(v["resizes"]["records"][0]["reason"], "grow");
    }

    #[test]
    fn cost_is_shown_with_its_price_or_without_one() {
        let mut r = sample();
        r.cost = Some(v1::CostAnalysis {
            gpu_hours: 4.0,
            idle_gpu_hours: 0.5,
            attempts: vec![v1::AttemptCost {
                attempt: 1,
                gpus: 2,
                gpu_hours: 4.0,
                ..Default::default()
            }],
            gpu_model: "NVIDIA H100 80GB HBM3".into(),
            price: Some(v1::GpuPrice {
                pattern: "H100".into(),
                usd_per_gpu_hour: 2.5,
            }),
            cost_usd: Some(10.0),
            samples: 2_000_000,
            cost_per_million_samples_usd: Some(5.0),
            idle_unknown: false,
        });
        let text = render(&r);
        assert!(text.contains("cost: 4.000 GPU-hours (0.500 idle) over 1 attempt(s); NVIDIA H100 80GB HBM3 at $2.50/GPU-hour (H100): $10.00, $5.0000 per million samples"), "{text}");
        let v = to_json(&r);
        assert_eq!(v["cost"]["cost_usd"], 10.0);
        assert_eq!(v["cost"]["price"]["usd_per_gpu_hour"], 2.5);
        assert_eq!(v["cost"]["attempts"][0]["gpus"], 2);
        r.cost.as_mut().unwrap().price = None;
        r.cost.as_mut().unwrap().cost_usd = None;
        assert!(render(&r).contains("no --gpu-price matches \"NVIDIA H100 80GB HBM3\""));
    }

    #[test]
    fn a_program_that_reported_nothing_shows_unknown_not_zero() {
        let mut r = sample();
        let s = r.summary.as_mut().unwrap();
        (s.steps, s.total_steps, s.steps_unknown) = (0, 0, true);
        r.cost = Some(v1::CostAnalysis {
            gpu_hours: 2.0,
            idle_unknown: true,
            attempts: vec![v1::AttemptCost {
                attempt: 1,
                gpus: 2,
                gpu_hours: 2.0,
                idle_unknown: true,
                ..Default::default()
            }],
            ..Default::default()
        });
        let text = render(&r);
        assert!(text.contains("steps unknown (no progress line)"), "{text}");
        assert!(!text.contains("steps 0/0"), "{text}");
        assert!(
            text.contains("cost: 2.000 GPU-hours (idle unknown: no progress line)"),
            "{text}"
        );
        let v = to_json(&r);
        assert_eq!(v["summary"]["steps_unknown"], true);
        assert_eq!(v["cost"]["idle_unknown"], true);
    }

    #[test]
    fn json_keeps_unset_figures_null() {
        let v = to_json(&sample());
        assert_eq!(v["final"], true);
        assert_eq!(v["summary"]["steps"], 60);
        assert_eq!(v["summary"]["best_samples_per_sec"], Value::Null);
        assert_eq!(v["scaling"]["rows"][1]["efficiency"], 1.0);
        assert_eq!(v["summary"]["ranks"][0]["compute_share"], 0.75);
        assert_eq!(v["summary"]["quality"]["best_validation"]["step"], 40);
        assert_eq!(v["summary"]["quality"]["dead_fraction"], Value::Null);
    }
}

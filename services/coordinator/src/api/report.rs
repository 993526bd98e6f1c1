//! TrainingService.GetTrainingReport: a training's report (see
//! [`crate::report`]) as the API's message.

use super::error::ApiError;
use crate::context::Context;
use crate::report::quality::{Quality, ValidationSummary};
use crate::report::{build_report, RankSummary, Report, Scaling, Summary};
use cohort_proto::v1;
use tonic::Status;

/// Builds the report of `req.id`: NOT_FOUND for an unknown training.
pub async fn get_training_report(
    ctx: &Context,
    who: &crate::model::Principal,
    req: v1::GetTrainingReportRequest,
) -> Result<v1::TrainingReport, Status> {
    super::caller::visible_training(ctx, who, "id", &req.id).await?;
    let report = build_report(&ctx.db, &req.id, &ctx.jobs.settings().prices)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| {
            ApiError::from(crate::persistence::LogicalError::TrainingNotFound(
                req.id.clone(),
            ))
        })?;
    Ok(to_proto(report, !req.omit_metrics))
}

/// The report as the API's message; the metrics lines only `with_metrics`.
pub fn to_proto(report: Report, with_metrics: bool) -> v1::TrainingReport {
    v1::TrainingReport {
        training_id: report.training_id,
        state: v1::training::State::from(report.state) as i32,
        r#final: report.is_final,
        summary: Some(summary(report.summary)),
        metrics_jsonl: if with_metrics {
            report.metrics_jsonl.into_bytes()
        } else {
            Vec::new()
        },
        scaling: Some(scaling(report.scaling)),
        cost: Some(super::report_cost::to_proto(report.cost)),
        preemptions: Some(preemptions(report.preemptions)),
        resizes: Some(resizes(report.resizes)),
        code: report.code.as_ref().map(Into::into),
    }
}

fn preemptions(p: crate::report::preemptions::Preemptions) -> v1::PreemptionSummary {
    v1::PreemptionSummary {
        count: p.count as u32,
        gpu_seconds_lost: p.gpu_seconds_lost,
        records: p
            .rows
            .into_iter()
            .map(|r| v1::PreemptionRecord {
                time: Some(super::convert::timestamp(r.time)),
                attempt: r.attempt,
                by: r.by,
                kind: r.kind,
                priority_class: r.priority_class,
                resume_step: r.resume_step,
                gpu_seconds_lost: r.gpu_seconds_lost,
                checkpointed: r.checkpointed,
            })
            .collect(),
    }
}

fn resizes(r: crate::report::resizes::Resizes) -> v1::ResizeSummary {
    v1::ResizeSummary {
        count: r.count as u32,
        seconds: r.seconds,
        records: r
            .rows
            .into_iter()
            .map(|row| v1::ResizeRecord {
                time: Some(super::convert::timestamp(row.time)),
                attempt: row.attempt,
                from_world_size: row.from_world_size,
                to_world_size: row.to_world_size,
                step: row.step,
                seconds: row.seconds,
                reason: row.reason,
            })
            .collect(),
    }
}

fn summary(s: Summary) -> v1::PerformanceSummary {
    v1::PerformanceSummary {
        world_size: s.world_size,
        attempts: s.attempts,
        steps: s.steps,
        total_steps: s.total_steps,
        steps_unknown: s.steps_unknown,
        final_loss: s.final_loss,
        wall_time_s: s.wall_time_s,
        training_time_s: s.training_time_s,
        mean_samples_per_sec: s.mean_samples_per_sec,
        best_samples_per_sec: s.best_samples_per_sec,
        step_time_p50_ms: s.step_time_p50_ms,
        step_time_p90_ms: s.step_time_p90_ms,
        step_time_p99_ms: s.step_time_p99_ms,
        progress_windows: s.progress_windows,
        ranks: s.ranks.into_iter().map(rank).collect(),
        quality: Some(quality(s.quality)),
        program_metrics: s
            .program
            .into_iter()
            .map(|m| v1::ProgramMetric {
                name: m.name,
                first_step: m.first_step,
                first: m.first,
                last_step: m.last_step,
                last: m.last,
                min: m.min,
                max: m.max,
                points: m.points,
            })
            .collect(),
    }
}

fn validation(v: ValidationSummary) -> v1::ValidationEvent {
    v1::ValidationEvent {
        step: v.step,
        loss: v.loss,
        mse: v.mse,
        l0: v.l0,
        explained_variance: v.explained_variance,
        dead_fraction: v.dead_fraction,
        ..Default::default()
    }
}

fn quality(q: Quality) -> v1::SaeQuality {
    v1::SaeQuality {
        l0: q.l0,
        explained_variance: q.explained_variance,
        dead_fraction: q.dead_fraction,
        grad_norm: q.grad_norm,
        learning_rate: q.learning_rate,
        nonfinite_steps: q.nonfinite_steps,
        last_validation: q.last_validation.map(validation),
        best_validation: q.best_validation.map(|v| v1::ValidationEvent {
            best: true,
            ..validation(v)
        }),
        checkpoints_rejected: q.checkpoints_rejected,
        divergences: q.divergences,
    }
}

fn rank(r: RankSummary) -> v1::RankPerformance {
    v1::RankPerformance {
        rank: r.rank,
        stats_windows: r.stats_windows,
        mean_step_time_ms: r.mean_step_time_ms,
        compute_share: r.compute_share,
        comm_share: r.comm_share,
        peak_memory_bytes: r.peak_memory_bytes,
        mean_data_wait_ms: r.mean_data_wait_ms,
        memory_kind: r.memory_kind,
        peak_host_memory_bytes: r.peak_host_memory_bytes,
        gpu_uuids: r.gpu.gpu_uuids,
        gpu_samples: r.gpu.samples,
        gpu_utilization_mean_percent: r.gpu.utilization_mean_percent,
        gpu_utilization_max_percent: r.gpu.utilization_max_percent,
        gpu_memory_used_mean_bytes: r.gpu.memory_used_mean_bytes,
        gpu_memory_used_max_bytes: r.gpu.memory_used_max_bytes,
        gpu_memory_total_bytes: r.gpu.memory_total_bytes,
    }
}

fn scaling(s: Scaling) -> v1::ScalingReport {
    v1::ScalingReport {
        baseline_training_id: s.baseline_training_id.unwrap_or_default(),
        note: s.note,
        rows: s
            .rows
            .into_iter()
            .map(|r| v1::ScalingRow {
                training_id: r.training_id,
                world_size: r.world_size,
                samples_per_sec: r.samples_per_sec,
                speedup: r.speedup,
                efficiency: r.efficiency,
                current: r.current,
            })
            .collect(),
        estimates: s
            .estimates
            .into_iter()
            .map(|e| v1::ScalingEstimate {
                world_size: e.world_size,
                step_time_ms: e.step_time_ms,
                speedup: e.speedup,
                efficiency: e.efficiency,
            })
            .collect(),
    }
}

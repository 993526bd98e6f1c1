//! The scrape body in the Prometheus text exposition format (0.0.4).
//!
//! GPU gauges carry dcgm-exporter's names, units and labels where they mean
//! the same thing (`DCGM_FI_DEV_*`; memory in MiB; labels `gpu`, `UUID`,
//! `device`, `modelName`, `Hostname`), plus cohort's own labels `agent`,
//! `training_id` and `rank` (empty when no training holds the GPU), so
//! dashboards built for dcgm-exporter work and can also group by training.

use crate::alerts::{AlertKind, Severity};
use crate::context::Context;
use crate::model::{GpuSample, JobState};
use std::collections::HashMap;
use std::fmt::Write as _;

const MIB: f64 = 1024.0 * 1024.0;

/// Escapes a label value (backslash, double quote, line feed).
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One metric family: HELP, TYPE and its series.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    series: Vec<(String, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            series: Vec::new(),
        }
    }

    /// A family of one unlabelled series.
    fn single(name: &'static str, kind: &'static str, help: &'static str, value: f64) -> Self {
        let mut family = Self::new(name, kind, help);
        family.series.push((String::new(), value));
        family
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (labels, value) in &self.series {
            let _ = writeln!(out, "{}{} {}", self.name, labels, value);
        }
    }
}

/// The whole scrape: GPU gauges from the latest sample of every connected
/// GPU, and cohort's own gauges and counters.
pub async fn render(ctx: &Context, training_labels: bool) -> String {
    let mut families = gpu_families(ctx, training_labels);
    families.push(training_family(ctx).await);
    families.extend(fleet_families(ctx));
    families.extend(alert_families(ctx));
    families.extend(ingest_families(ctx));
    families.extend(scheduler_families(ctx));
    families.extend(estimate_families(ctx));
    families.extend(webhook_families(ctx));
    families.extend(tracking_families(ctx));
    let mut out = String::new();
    for family in &families {
        family.write(&mut out);
    }
    write_db_operations(&mut out, &ctx.db.op_metrics().snapshot());
    out
}

/// How one GPU family reads its value from a sample (`None`: not reported).
type Read = fn(&GpuSample) -> Option<f64>;

/// The GPU families, dcgm-exporter's where one means the same, in order.
const GPU_FAMILIES: [(&str, &str, &str, Read); 11] = [
    (
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        "GPU utilization (in %).",
        |s| s.utilization_gpu_percent,
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        |s| Some((s.memory_used_bytes as f64 / MIB).floor()),
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        |s| Some((s.memory_total_bytes.saturating_sub(s.memory_used_bytes) as f64 / MIB).floor()),
    ),
    (
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        "GPU temperature (in C).",
        |s| s.temperature_celsius,
    ),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        |s| s.power_draw_watts,
    ),
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency (in MHz).",
        |s| s.sm_clock_mhz.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        |s| s.memory_clock_mhz.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        |s| s.ecc_errors_corrected.map(|v| v as f64),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        |s| s.ecc_errors_uncorrected.map(|v| v as f64),
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        |s| s.last_xid.map(f64::from),
    ),
    (
        "cohort_gpu_xid_errors_total",
        "counter",
        "Critical XID errors since the GPU's agent began watching it.",
        |s| s.xid_errors.map(|v| v as f64),
    ),
];

/// One series per connected GPU in each GPU family, labelled as
/// dcgm-exporter labels it plus `agent`, `training_id` and `rank`.
fn gpu_families(ctx: &Context, training_labels: bool) -> Vec<Family> {
    let agents = ctx.fleet.agents();
    let hosts: HashMap<&str, &str> = agents
        .iter()
        .map(|a| (a.id.as_str(), a.host_name.as_str()))
        .collect();
    let models: HashMap<&str, &str> = agents
        .iter()
        .flat_map(|a| a.gpus.iter().map(|g| (g.uuid.as_str(), g.name.as_str())))
        .collect();
    let mut families: Vec<Family> = GPU_FAMILIES
        .iter()
        .map(|(name, kind, help, _)| Family::new(name, kind, help))
        .collect();
    for r in ctx.fleet.snapshot() {
        let s = &r.sample;
        let index = s.index.to_string();
        let device = format!("nvidia{}", s.index);
        let (training_id, rank) = match &r.hold {
            Some(h) if training_labels => (h.training_id.clone(), h.rank.to_string()),
            _ => (String::new(), String::new()),
        };
        let l = labels(&[
            ("gpu", &index),
            ("UUID", &s.gpu_uuid),
            ("device", &device),
            (
                "modelName",
                models.get(s.gpu_uuid.as_str()).copied().unwrap_or(""),
            ),
            (
                "Hostname",
                hosts.get(r.agent_id.as_str()).copied().unwrap_or(""),
            ),
            ("agent", &r.agent_name),
            ("training_id", &training_id),
            ("rank", &rank),
        ]);
        for (family, (_, _, _, read)) in families.iter_mut().zip(GPU_FAMILIES.iter()) {
            if let Some(v) = read(s) {
                family.series.push((l.clone(), v));
            }
        }
    }
    families
}

/// Trainings by state, every state present (0 when none).
async fn training_family(ctx: &Context) -> Family {
    let mut trainings = Family::new("cohort_trainings", "gauge", "Trainings by state.");
    match ctx.db.count_trainings_by_state().await {
        Ok(counts) => {
            let counts: HashMap<String, i64> = counts.into_iter().collect();
            for state in JobState::ALL {
                let n = counts.get(state.as_str()).copied().unwrap_or(0);
                trainings
                    .series
                    .push((labels(&[("state", state.as_str())]), n as f64));
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot count trainings"),
    }
    trainings
}

/// Agents and GPUs connected now.
fn fleet_families(ctx: &Context) -> [Family; 2] {
    let agents = ctx.fleet.agents();
    let gpus = agents.iter().map(|a| a.gpus.len()).sum::<usize>();
    [
        Family::single(
            "cohort_agents_connected",
            "gauge",
            "Agents connected now.",
            agents.len() as f64,
        ),
        Family::single(
            "cohort_gpus_connected",
            "gauge",
            "GPUs of the connected agents.",
            gpus as f64,
        ),
    ]
}

/// Alerts active now by kind and severity, and raised since the start.
fn alert_families(ctx: &Context) -> [Family; 2] {
    let active = ctx.alerts.active();
    let mut alerts = Family::new(
        "cohort_alerts_active",
        "gauge",
        "Alerts active now, by kind and severity.",
    );
    for kind in AlertKind::ALL {
        let n = active.iter().filter(|a| a.kind == kind).count();
        let severity: Severity = kind.severity();
        alerts.series.push((
            labels(&[("kind", kind.as_str()), ("severity", severity.as_str())]),
            n as f64,
        ));
    }
    let raised = Family::single(
        "cohort_alerts_raised_total",
        "counter",
        "Alerts raised since the coordinator started.",
        ctx.alerts.raised_total() as f64,
    );
    [alerts, raised]
}

/// What the agents sent (and what was refused of it), and the telemetry
/// watchers it fans out to.
fn ingest_families(ctx: &Context) -> [Family; 6] {
    let (batches, samples) = ctx.fleet.ingested();
    let watch = ctx.watchers.counts();
    [
        Family::single(
            "cohort_telemetry_batches_ingested_total",
            "counter",
            "Telemetry batches (one agent's samples of one tick) ingested since start.",
            batches as f64,
        ),
        Family::single(
            "cohort_telemetry_samples_ingested_total",
            "counter",
            "GPU samples ingested since start.",
            samples as f64,
        ),
        Family::single(
            "cohort_agent_refused_samples_total",
            "counter",
            "GPU samples refused because the sending agent did not register that GPU.",
            ctx.fleet.samples_refused() as f64,
        ),
        Family::single(
            "cohort_agent_refused_rank_events_total",
            "counter",
            "Rank events refused because the rank is not placed on the sending agent.",
            ctx.refusals.rank_events() as f64,
        ),
        Family::single(
            "cohort_telemetry_watchers",
            "gauge",
            "Open WatchGpuMetrics streams.",
            watch.open as f64,
        ),
        Family::single(
            "cohort_telemetry_watcher_lag_notices_total",
            "counter",
            "Times a watcher fell behind the live fan-out and was sent a lag notice.",
            watch.lag_notices as f64,
        ),
    ]
}

/// What the scheduling passes cost: the last one, the slowest one, how many
/// waiting trainings the last one looked at and how many pending reasons it
/// rewrote.
fn scheduler_families(ctx: &Context) -> [Family; 4] {
    let pass = ctx.jobs.pass_figures();
    [
        Family::single(
            "cohort_scheduler_pass_seconds",
            "gauge",
            "How long the last scheduling pass took.",
            pass.last.as_secs_f64(),
        ),
        Family::single(
            "cohort_scheduler_pass_max_seconds",
            "gauge",
            "The slowest scheduling pass since the coordinator started.",
            pass.max.as_secs_f64(),
        ),
        Family::single(
            "cohort_scheduler_pass_trainings",
            "gauge",
            "Waiting trainings the last scheduling pass looked at.",
            pass.looked_at as f64,
        ),
        Family::single(
            "cohort_scheduler_pass_reasons_rewritten",
            "gauge",
            "Pending reasons the last scheduling pass rewrote.",
            pass.rewritten as f64,
        ),
    ]
}

/// What the last start/end estimate run cost: all of it, its forward run
/// of the policy, and how many estimates it wrote.
fn estimate_families(ctx: &Context) -> [Family; 3] {
    let run = ctx.jobs.estimate_figures();
    [
        Family::single(
            "cohort_estimate_run_seconds",
            "gauge",
            "How long the last estimate run took, its writes included.",
            run.took.as_secs_f64(),
        ),
        Family::single(
            "cohort_estimate_forecast_seconds",
            "gauge",
            "How long the last estimate run's forward run of the policy took.",
            run.forecast.as_secs_f64(),
        ),
        Family::single(
            "cohort_estimate_written",
            "gauge",
            "Estimates the last estimate run wrote (appeared, went or moved).",
            run.written as f64,
        ),
    ]
}

/// What webhook deliveries came to, across hooks (since this coordinator
/// started leading; per hook in `cohort admin webhook list`).
fn webhook_families(ctx: &Context) -> [Family; 4] {
    let deliveries = &ctx.webhooks.deliveries;
    let (delivered, failed, dropped) = deliveries.totals();
    let retries = deliveries
        .retries
        .load(std::sync::atomic::Ordering::Relaxed);
    [
        Family::single(
            "cohort_webhook_delivered_total",
            "counter",
            "Webhook deliveries answered 2xx.",
            delivered as f64,
        ),
        Family::single(
            "cohort_webhook_failed_total",
            "counter",
            "Webhook deliveries given up after --webhook-retry-for of retries.",
            failed as f64,
        ),
        Family::single(
            "cohort_webhook_dropped_total",
            "counter",
            "Webhook deliveries never sent: too many were pending.",
            dropped as f64,
        ),
        Family::single(
            "cohort_webhook_retries_total",
            "counter",
            "Webhook POSTs tried again after a failure.",
            retries as f64,
        ),
    ]
}

/// What the MLflow trackers took and what they did not.
fn tracking_families(ctx: &Context) -> [Family; 3] {
    use std::sync::atomic::Ordering::Relaxed;
    let t = &ctx.tracking;
    [
        Family::single(
            "cohort_tracking_points_logged_total",
            "counter",
            "Metric points MLflow trackers took.",
            t.logged.load(Relaxed) as f64,
        ),
        Family::single(
            "cohort_tracking_points_dropped_total",
            "counter",
            "Metric points dropped from a full backlog while a tracker did not take them.",
            t.dropped.load(Relaxed) as f64,
        ),
        Family::single(
            "cohort_tracking_errors_total",
            "counter",
            "Calls to a tracker that failed (each retried with backoff).",
            t.errors.load(Relaxed) as f64,
        ),
    ]
}

/// The database's per-operation latency histogram and error counter.
fn write_db_operations(out: &mut String, ops: &[(&'static str, crate::persistence::OpStats)]) {
    use crate::persistence::measure::BUCKETS;
    const DURATION: &str = "cohort_db_operation_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {DURATION} Latency of each named database operation (one transaction with its retries)."
    );
    let _ = writeln!(out, "# TYPE {DURATION} histogram");
    for (op, stats) in ops {
        for (bound, n) in BUCKETS.iter().zip(stats.buckets.iter()) {
            let le = bound.to_string();
            let _ = writeln!(
                out,
                "{DURATION}_bucket{} {n}",
                labels(&[("op", op), ("le", &le)])
            );
        }
        let op_label = labels(&[("op", op)]);
        let inf = labels(&[("op", op), ("le", "+Inf")]);
        let _ = writeln!(out, "{DURATION}_bucket{inf} {}", stats.count);
        let _ = writeln!(out, "{DURATION}_sum{op_label} {}", stats.sum_seconds);
        let _ = writeln!(out, "{DURATION}_count{op_label} {}", stats.count);
    }
    let mut errors = Family::new(
        "cohort_db_operation_errors_total",
        "counter",
        "Runs of each named database operation that ended in an error.",
    );
    for (op, stats) in ops {
        errors
            .series
            .push((labels(&[("op", op)]), stats.errors as f64));
    }
    errors.write(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
        assert_eq!(labels(&[("a", "1"), ("b", "q\"")]), r#"{a="1",b="q\""}"#);
    }
}

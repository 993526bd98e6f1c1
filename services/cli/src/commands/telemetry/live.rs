//! `cohort telemetry watch`: TelemetryService.WatchGpuMetrics as a refreshing
//! table (redrawn in place on a terminal), or one JSON object per update; and
//! `cohort telemetry query`: QueryGpuMetrics, every page.

use super::args::{filter, request, view, TelemetryQueryArgs, TelemetryWatchArgs};
use crate::client::Coordinator;
use crate::commands::interruptible;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{emit, emit_json, json, OutputFormat};
use crate::render::{gib, opt_num, time};
use cohort_proto::v1;
use cohort_proto::v1::{
    telemetry_service_client::TelemetryServiceClient, GpuMetricsUpdate, QueryGpuMetricsRequest,
};
use serde_json::Value;
use std::io::IsTerminal;
use std::time::SystemTime;

/// Clears the terminal and moves the cursor home.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// Every page of a QueryGpuMetrics (the request's `page_token` is set here).
pub async fn query_all(
    coordinator: &Coordinator,
    request: QueryGpuMetricsRequest,
) -> Result<Vec<GpuMetricsUpdate>, CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let mut updates = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .query_gpu_metrics(QueryGpuMetricsRequest {
                page_token,
                ..request.clone()
            })
            .await?
            .into_inner();
        updates.extend(page.updates);
        if page.next_page_token.is_empty() {
            return Ok(updates);
        }
        page_token = page.next_page_token;
    }
}

pub async fn query(
    coordinator: &Coordinator,
    args: &TelemetryQueryArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let start = SystemTime::now()
        .checked_sub(args.since)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let step = args
        .step
        .and_then(|d| prost_types::Duration::try_from(d).ok());
    let updates = query_all(
        coordinator,
        QueryGpuMetricsRequest {
            filter: Some(filter(&args.filter)),
            view: view(args.view),
            start_time: Some(prost_types::Timestamp::from(start)),
            step,
            ..Default::default()
        },
    )
    .await?;
    match out {
        OutputFormat::Json => emit_json(&serde_json::json!({
            "updates": updates.iter().map(json::message).collect::<Vec<Value>>(),
        })),
        OutputFormat::Table => emit(&metrics_history(&updates)),
    }
}

pub async fn watch(
    coordinator: &Coordinator,
    args: &TelemetryWatchArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = TelemetryServiceClient::new(coordinator.channel().await?);
    let mut stream = client.watch_gpu_metrics(request(args)).await?.into_inner();
    let redraw = std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let update = match interruptible(stream.message()).await {
            // Ctrl-C is the usual way to stop watching: end quietly.
            None => return Ok(()),
            Some(next) => match next? {
                Some(update) => update,
                None => break,
            },
        };
        match out {
            OutputFormat::Json => emit_json(&json::message(&update))?,
            OutputFormat::Table => {
                if let Some(lagged) = &update.lagged {
                    emit(&format!(
                        "(lagged: missed {} updates; showing live ones again)",
                        lagged.missed_events
                    ))?;
                    continue;
                }
                let text = metrics(&update);
                if redraw {
                    emit(&format!("{CLEAR_SCREEN}{text}"))?;
                } else if shown == 0 {
                    emit(&text)?;
                } else {
                    emit(&format!("\n{text}"))?;
                }
            }
        }
        shown += 1;
        if args.count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
    if out == OutputFormat::Table {
        emit("the coordinator closed the telemetry stream")?;
    }
    Ok(())
}

// The table.

fn aggregate_row(a: &v1::AggregatedGpuMetrics) -> Vec<String> {
    vec![
        a.gpu_count.to_string(),
        a.busy_count.to_string(),
        a.simulated_count.to_string(),
        format!("{:.0}%", a.mean_utilization_gpu_percent),
        format!("{:.0}%", a.mean_utilization_memory_percent),
        format!("{}/{}", gib(a.memory_used_bytes), gib(a.memory_total_bytes)),
        format!("{:.0}C", a.max_temperature_celsius),
        format!("{:.0}W", a.power_draw_watts),
    ]
}

const AGGREGATE_HEADERS: [&str; 8] = [
    "GPUS",
    "BUSY",
    "SIMULATED",
    "UTIL",
    "MEM UTIL",
    "MEMORY GiB",
    "MAX TEMP",
    "POWER",
];

const GPU_METRICS_HEADERS: [&str; 11] = [
    "AGENT",
    "IDX",
    "UUID",
    "UTIL",
    "MEM UTIL",
    "MEMORY GiB",
    "TEMP",
    "POWER",
    "SM MHz",
    "JOB",
    "THROTTLE",
];

fn gpu_metrics_row(m: &v1::GpuMetrics) -> Vec<String> {
    let s = m.sample.clone().unwrap_or_default();
    let job = if m.training_id.is_empty() {
        "-".to_string()
    } else {
        format!("{} (rank {})", m.training_id, m.rank)
    };
    vec![
        dash(&m.agent_name),
        s.index.to_string(),
        if s.simulated {
            format!("{} *", s.gpu_uuid)
        } else {
            dash(&s.gpu_uuid)
        },
        opt_num(s.utilization_gpu_percent, 0, "%"),
        opt_num(s.utilization_memory_percent, 0, "%"),
        format!("{}/{}", gib(s.memory_used_bytes), gib(s.memory_total_bytes)),
        opt_num(s.temperature_celsius, 0, "C"),
        opt_num(s.power_draw_watts, 0, "W"),
        opt_num(s.sm_clock_mhz.map(f64::from), 0, ""),
        job,
        if s.throttle_reasons.is_empty() {
            "-".to_string()
        } else {
            s.throttle_reasons.join(",")
        },
    ]
}

fn any_simulated(updates: &[v1::GpuMetricsUpdate]) -> bool {
    updates.iter().any(|u| {
        u.gpus
            .iter()
            .any(|m| m.sample.as_ref().is_some_and(|s| s.simulated))
    })
}

/// One telemetry update: a row per GPU, or the aggregate.
pub fn metrics(u: &v1::GpuMetricsUpdate) -> String {
    let mut out = format!("GPU metrics at {}\n", time(u.time.as_ref()));
    if let Some(a) = &u.aggregate {
        let mut t = Table::new(&AGGREGATE_HEADERS);
        t.row(aggregate_row(a));
        out.push_str(&t.render());
        return out;
    }
    if u.gpus.is_empty() {
        out.push_str("no GPUs match");
        return out;
    }
    let mut t = Table::new(&GPU_METRICS_HEADERS);
    for m in &u.gpus {
        t.row(gpu_metrics_row(m));
    }
    out.push_str(&t.render());
    if any_simulated(std::slice::from_ref(u)) {
        out.push_str("\n* simulated GPU: synthetic samples");
    }
    out
}

/// Stored metrics: one row per bucket (aggregated) or per bucket and GPU.
pub fn metrics_history(updates: &[v1::GpuMetricsUpdate]) -> String {
    if updates.is_empty() {
        return "no metrics in this range".to_string();
    }
    let aggregated = updates.iter().any(|u| u.aggregate.is_some());
    let headers: Vec<&'static str> = if aggregated {
        std::iter::once("TIME").chain(AGGREGATE_HEADERS).collect()
    } else {
        std::iter::once("TIME").chain(GPU_METRICS_HEADERS).collect()
    };
    let mut t = Table::new(&headers);
    for u in updates {
        let at = time(u.time.as_ref());
        if let Some(a) = &u.aggregate {
            t.row(
                std::iter::once(at.clone())
                    .chain(aggregate_row(a))
                    .collect(),
            );
        }
        for m in &u.gpus {
            t.row(
                std::iter::once(at.clone())
                    .chain(gpu_metrics_row(m))
                    .collect(),
            );
        }
    }
    let mut out = t.render();
    if any_simulated(updates) {
        out.push_str("\n* simulated GPU: synthetic samples");
    }
    out
}

//! A report's cost analysis: the lines of `cohort train report` and its JSON.

use cohort_proto::v1;
use serde_json::{json, Value};

/// The cost lines: GPU-hours (idle part), the price and what it came to.
pub fn text(c: &v1::CostAnalysis) -> String {
    // A program that reported no progress line says nothing of when it
    // worked: its idle part is not guessed.
    let idle = match (c.idle_unknown, c.attempts.iter().all(|a| a.idle_unknown)) {
        (false, _) => format!("{:.3} idle", c.idle_gpu_hours),
        (true, true) => "idle unknown: no progress line".to_string(),
        (true, false) => format!("{:.3} idle, more unknown", c.idle_gpu_hours),
    };
    let mut out = format!(
        "\n\ncost: {:.3} GPU-hours ({idle}) over {} attempt(s)",
        c.gpu_hours,
        c.attempts.len()
    );
    match (&c.price, c.cost_usd) {
        (Some(p), Some(usd)) => {
            out += &format!(
                "; {} at ${:.2}/GPU-hour ({}): ${usd:.2}",
                c.gpu_model, p.usd_per_gpu_hour, p.pattern
            );
            if let Some(m) = c.cost_per_million_samples_usd {
                out += &format!(", ${m:.4} per million samples");
            }
        }
        _ if c.gpu_model.is_empty() => {}
        _ => out += &format!("; no --gpu-price matches {:?}", c.gpu_model),
    }
    out
}

/// The cost as JSON, under the names of `cost_analysis.json`.
pub fn json(c: &v1::CostAnalysis) -> Value {
    let time = |t: &Option<prost_types::Timestamp>| t.as_ref().map(|t| t.to_string());
    json!({
        "gpu_hours": c.gpu_hours,
        "idle_gpu_hours": c.idle_gpu_hours,
        "idle_unknown": c.idle_unknown,
        "attempts": c.attempts.iter().map(|a| json!({
            "attempt": a.attempt,
            "gpus": a.gpus,
            "start_time": time(&a.start_time),
            "end_time": time(&a.end_time),
            "gpu_hours": a.gpu_hours,
            "idle_gpu_hours": a.idle_gpu_hours,
            "idle_unknown": a.idle_unknown,
            "cost_usd": a.cost_usd,
        })).collect::<Vec<_>>(),
        "gpu_model": c.gpu_model,
        "price": c.price.as_ref().map(|p| json!({"pattern": p.pattern, "usd_per_gpu_hour": p.usd_per_gpu_hour})),
        "cost_usd": c.cost_usd,
        "samples": c.samples,
        "cost_per_million_samples_usd": c.cost_per_million_samples_usd,
    })
}

//! The `cohort.v1` messages as JSON, for `-o json`.
//!
//! The mapping follows the proto3 JSON conventions with the .proto field names
//! kept (snake_case, as `grpcurl --format-json`-style tools offer with
//! "preserve field names"): enums as their value names, timestamps as RFC 3339
//! strings, every field present (unset messages and optionals as `null`),
//! 64-bit integers as JSON numbers. A training config is written with the keys
//! of the TOML/JSON config file (defaults filled in), so it can be fed back to
//! `cohort train submit --config`.

use cohort_proto::v1;
use serde_json::{json, Value};

/// An enum field: its value name, or the raw number when this CLI does not know it.
fn enum_value<E: TryFrom<i32>>(raw: i32, name: impl Fn(E) -> &'static str) -> Value {
    match E::try_from(raw) {
        Ok(e) => Value::from(name(e)),
        Err(_) => Value::from(raw),
    }
}

fn time(ts: Option<&prost_types::Timestamp>) -> Value {
    ts.map_or(Value::Null, |t| Value::from(t.to_string()))
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or(Value::Null, Into::into)
}

pub fn gpu_info(g: &v1::GpuInfo) -> Value {
    json!({
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "memory_total_bytes": g.memory_total_bytes,
        "compute_capability": g.compute_capability,
        "simulated": g.simulated,
    })
}

pub fn gpu_sample(s: &v1::GpuSample) -> Value {
    json!({
        "gpu_uuid": s.gpu_uuid,
        "index": s.index,
        "time": time(s.time.as_ref()),
        "utilization_gpu_percent": opt(s.utilization_gpu_percent),
        "utilization_memory_percent": opt(s.utilization_memory_percent),
        "memory_used_bytes": s.memory_used_bytes,
        "memory_total_bytes": s.memory_total_bytes,
        "temperature_celsius": opt(s.temperature_celsius),
        "power_draw_watts": opt(s.power_draw_watts),
        "power_limit_watts": opt(s.power_limit_watts),
        "sm_clock_mhz": opt(s.sm_clock_mhz),
        "memory_clock_mhz": opt(s.memory_clock_mhz),
        "ecc_errors_corrected": opt(s.ecc_errors_corrected),
        "ecc_errors_uncorrected": opt(s.ecc_errors_uncorrected),
        "throttle_reasons": s.throttle_reasons,
        "simulated": s.simulated,
    })
}

pub fn gpu(g: &v1::Gpu) -> Value {
    json!({
        "info": g.info.as_ref().map_or(Value::Null, gpu_info),
        "agent_id": g.agent_id,
        "agent_name": g.agent_name,
        "host_name": g.host_name,
        "availability": enum_value(g.availability, |e: v1::GpuAvailability| e.as_str_name()),
        "training_id": g.training_id,
        "rank": g.rank,
        "health_notes": g.health_notes,
        "latest_sample": g.latest_sample.as_ref().map_or(Value::Null, gpu_sample),
        "last_seen_time": time(g.last_seen_time.as_ref()),
    })
}

pub fn agent(a: &v1::Agent) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "host_name": a.host_name,
        "address": a.address,
        "version": a.version,
        "state": enum_value(a.state, |e: v1::AgentState| e.as_str_name()),
        "gpus": a.gpus.iter().map(gpu_info).collect::<Vec<_>>(),
        "connect_time": time(a.connect_time.as_ref()),
        "last_seen_time": time(a.last_seen_time.as_ref()),
    })
}

/// A config with the keys of the config file; `null` if the server sent
/// one this CLI cannot read (it would have been rejected on creation).
pub fn config(c: &v1::TrainingConfig) -> Value {
    cohort_spec::TrainingConfig::try_from(c.clone())
        .ok()
        .and_then(|c| serde_json::to_value(&c).ok())
        .unwrap_or(Value::Null)
}

pub fn gpu_request(r: &v1::GpuRequest) -> Value {
    use v1::gpu_request::Selection;
    let mut value = json!({ "queue": opt(r.queue) });
    match &r.selection {
        Some(Selection::GpuIds(ids)) => value["gpu_ids"] = json!({ "ids": ids.ids }),
        Some(Selection::Count(n)) => value["count"] = json!(n),
        Some(Selection::Auto(a)) => value["auto"] = json!({ "max_gpus": a.max_gpus }),
        None => {}
    }
    value
}

pub fn rank_assignment(r: &v1::RankAssignment) -> Value {
    json!({
        "rank": r.rank,
        "local_rank": r.local_rank,
        "local_world_size": r.local_world_size,
        "agent_id": r.agent_id,
        "host_name": r.host_name,
        "gpu_index": r.gpu_index,
        "gpu_uuid": r.gpu_uuid,
        "state": enum_value(r.state, |e: v1::RankState| e.as_str_name()),
        "pid": r.pid,
        "exit_code": opt(r.exit_code),
        "signal": opt(r.signal),
    })
}

pub fn progress(p: &v1::ProgressEvent) -> Value {
    json!({
        "step": p.step,
        "total_steps": p.total_steps,
        "epoch": p.epoch,
        "loss": p.loss,
        "mse": p.mse,
        "l1": p.l1,
        "samples_per_sec": p.samples_per_sec,
        "step_time_ms": p.step_time_ms,
    })
}

pub fn training(t: &v1::Training) -> Value {
    json!({
        "id": t.id,
        "display_name": t.display_name,
        "config": t.config.as_ref().map_or(Value::Null, config),
        "gpu_request": t.gpu_request.as_ref().map_or(Value::Null, gpu_request),
        "state": state(t.state),
        "state_reason": t.state_reason,
        "world_size": t.world_size,
        "attempt": t.attempt,
        "restart_count": t.restart_count,
        "max_restarts": t.max_restarts,
        "priority": t.priority,
        "ranks": t.ranks.iter().map(rank_assignment).collect::<Vec<_>>(),
        "latest_progress": t.latest_progress.as_ref().map_or(Value::Null, progress),
        "request_id": t.request_id,
        "create_time": time(t.create_time.as_ref()),
        "update_time": time(t.update_time.as_ref()),
        "start_time": time(t.start_time.as_ref()),
        "end_time": time(t.end_time.as_ref()),
    })
}

fn state(raw: i32) -> Value {
    enum_value(raw, |e: v1::training::State| e.as_str_name())
}

pub fn checkpoint(c: &v1::Checkpoint) -> Value {
    json!({
        "training_id": c.training_id,
        "attempt": c.attempt,
        "step": c.step,
        "path": c.path,
        "agent_id": c.agent_id,
        "create_time": time(c.create_time.as_ref()),
    })
}

pub fn lagged(l: &v1::Lagged) -> Value {
    json!({
        "missed_events": l.missed_events,
        "first_missed_sequence": l.first_missed_sequence,
    })
}

pub fn training_event(e: &v1::TrainingEvent) -> Value {
    use v1::training_event::Event;
    let mut value = json!({
        "sequence": e.sequence,
        "training_id": e.training_id,
        "attempt": e.attempt,
        "time": time(e.time.as_ref()),
    });
    let (key, body) = match &e.event {
        Some(Event::StateChange(s)) => (
            "state_change",
            json!({ "from": state(s.from), "to": state(s.to), "reason": s.reason }),
        ),
        Some(Event::Started(s)) => (
            "started",
            json!({
                "world_size": s.world_size,
                "device": s.device,
                "total_steps": s.total_steps,
                "start_step": s.start_step,
                "global_batch": s.global_batch,
                "parameters": s.parameters,
            }),
        ),
        Some(Event::Progress(p)) => ("progress", progress(p)),
        Some(Event::RankStats(r)) => (
            "rank_stats",
            json!({
                "rank": r.rank,
                "step": r.step,
                "step_time_ms": r.step_time_ms,
                "compute_ms": r.compute_ms,
                "comm_ms": r.comm_ms,
                "data_wait_ms": r.data_wait_ms,
                "memory_bytes": r.memory_bytes,
            }),
        ),
        Some(Event::Checkpoint(c)) => ("checkpoint", checkpoint(c)),
        Some(Event::Finished(f)) => (
            "finished",
            json!({
                "step": f.step,
                "loss": f.loss,
                "param_checksum": f.param_checksum,
                "wall_time_s": f.wall_time_s,
                "mean_samples_per_sec": f.mean_samples_per_sec,
            }),
        ),
        Some(Event::Lagged(l)) => ("lagged", lagged(l)),
        // An event kind newer than this CLI: the common fields only.
        #[allow(unreachable_patterns)]
        _ => return value,
    };
    value[key] = body;
    value
}

pub fn gpu_metrics(m: &v1::GpuMetrics) -> Value {
    json!({
        "sample": m.sample.as_ref().map_or(Value::Null, gpu_sample),
        "agent_id": m.agent_id,
        "agent_name": m.agent_name,
        "training_id": m.training_id,
        "rank": m.rank,
    })
}

pub fn metrics_update(u: &v1::GpuMetricsUpdate) -> Value {
    let aggregate = u.aggregate.as_ref().map_or(Value::Null, |a| {
        json!({
            "gpu_count": a.gpu_count,
            "busy_count": a.busy_count,
            "simulated_count": a.simulated_count,
            "mean_utilization_gpu_percent": a.mean_utilization_gpu_percent,
            "mean_utilization_memory_percent": a.mean_utilization_memory_percent,
            "memory_used_bytes": a.memory_used_bytes,
            "memory_total_bytes": a.memory_total_bytes,
            "max_temperature_celsius": a.max_temperature_celsius,
            "power_draw_watts": a.power_draw_watts,
        })
    });
    json!({
        "time": time(u.time.as_ref()),
        "view": enum_value(u.view, |e: v1::MetricsView| e.as_str_name()),
        "gpus": u.gpus.iter().map(gpu_metrics).collect::<Vec<_>>(),
        "aggregate": aggregate,
        "lagged": u.lagged.as_ref().map_or(Value::Null, lagged),
    })
}

pub fn alert(a: &v1::Alert) -> Value {
    json!({
        "id": a.id,
        "severity": enum_value(a.severity, |e: v1::AlertSeverity| e.as_str_name()),
        "kind": a.kind,
        "message": a.message,
        "agent_id": a.agent_id,
        "gpu_uuid": a.gpu_uuid,
        "training_id": a.training_id,
        "value": opt(a.value),
        "threshold": opt(a.threshold),
        "raise_time": time(a.raise_time.as_ref()),
        "resolve_time": time(a.resolve_time.as_ref()),
    })
}

pub fn alerts_response(r: &v1::WatchAlertsResponse) -> Value {
    use v1::watch_alerts_response::Event;
    match &r.event {
        Some(Event::Alert(a)) => json!({ "alert": alert(a) }),
        Some(Event::Lagged(l)) => json!({ "lagged": lagged(l) }),
        // A message kind newer than this CLI.
        #[allow(unreachable_patterns)]
        _ => json!({}),
    }
}

pub fn memory_estimate(e: &v1::MemoryEstimate) -> Value {
    json!({
        "parameter_count": e.parameter_count,
        "parameters_bytes": e.parameters_bytes,
        "gradients_bytes": e.gradients_bytes,
        "optimizer_bytes": e.optimizer_bytes,
        "activations_bytes": e.activations_bytes,
        "data_bytes": e.data_bytes,
        "overhead_bytes": e.overhead_bytes,
        "total_bytes": e.total_bytes,
    })
}

pub fn recommendation(r: &v1::RecommendGpusResponse) -> Value {
    json!({
        "gpus": r.gpus.iter().map(gpu).collect::<Vec<_>>(),
        "estimate": r.estimate.as_ref().map_or(Value::Null, memory_estimate),
        "shortfall_reason": r.shortfall_reason,
    })
}

pub fn validation(r: &v1::ValidateGpuSelectionResponse) -> Value {
    let problems: Vec<Value> = r
        .problems
        .iter()
        .map(|p| json!({ "gpu_id": p.gpu_id, "reason": p.reason, "message": p.message }))
        .collect();
    json!({
        "valid": r.valid,
        "problems": problems,
        "estimate": r.estimate.as_ref().map_or(Value::Null, memory_estimate),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_as_json() {
        let t = v1::Training {
            id: "t-1".into(),
            state: v1::training::State::Running as i32,
            world_size: 2,
            ranks: vec![v1::RankAssignment {
                rank: 1,
                gpu_uuid: "SIM-b".into(),
                state: v1::RankState::Running as i32,
                exit_code: None,
                ..Default::default()
            }],
            create_time: Some(prost_types::Timestamp {
                seconds: 1_795_000_000,
                nanos: 0,
            }),
            gpu_request: Some(v1::GpuRequest {
                selection: Some(v1::gpu_request::Selection::Count(2)),
                queue: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = training(&t);
        assert_eq!(v["id"], "t-1");
        assert_eq!(v["state"], "RUNNING");
        assert_eq!(v["ranks"][0]["state"], "RANK_STATE_RUNNING");
        assert_eq!(v["ranks"][0]["exit_code"], Value::Null);
        assert_eq!(v["gpu_request"]["count"], 2);
        assert_eq!(v["gpu_request"]["queue"], false);
        assert_eq!(v["create_time"], "2026-11-18T11:06:40Z");
        assert_eq!(v["config"], Value::Null);
        assert_eq!(v["end_time"], Value::Null);
    }

    #[test]
    fn unknown_enum_values_stay_numbers() {
        let g = v1::Gpu {
            availability: 99,
            ..Default::default()
        };
        assert_eq!(gpu(&g)["availability"], 99);
    }

    #[test]
    fn events_name_their_kind() {
        let e = v1::TrainingEvent {
            sequence: 7,
            event: Some(v1::training_event::Event::Progress(v1::ProgressEvent {
                step: 10,
                total_steps: 100,
                loss: 0.5,
                ..Default::default()
            })),
            ..Default::default()
        };
        let v = training_event(&e);
        assert_eq!(v["sequence"], 7);
        assert_eq!(v["progress"]["step"], 10);
        assert_eq!(v["progress"]["loss"], 0.5);
    }

    #[test]
    fn config_uses_file_keys() {
        let spec = cohort_spec::TrainingConfig::from_toml(
            "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = 4\nsteps = 10\n\
             [data.synthetic]\nnum_samples = 64\n",
        )
        .unwrap();
        let v = config(&v1::TrainingConfig::from(&spec));
        assert_eq!(v["optim"]["batch_size"], 4);
        assert_eq!(v["model"]["d_in"], 8);
    }
}

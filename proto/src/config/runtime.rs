//! The `[runtime]` table both ways: how the ranks run, as opposed to what
//! they train.

use super::Table;
use crate::v1;
use cohort_spec::config::{
    AllreduceDtype, AllreduceMode, CollectiveBackend, Device, OomPolicy, RuntimeConfig,
};
use cohort_spec::schedule::ScheduleHints;
use cohort_spec::ConfigError;
use serde_json::Value;

pub(super) fn runtime_table(r: v1::RuntimeConfig) -> Result<Value, ConfigError> {
    let mut t = Table::new("runtime");
    t.enumeration("device", r.device, |d: v1::Device| match d {
        v1::Device::Unspecified => None,
        v1::Device::Auto => Some("auto"),
        v1::Device::Cpu => Some("cpu"),
        v1::Device::Cuda => Some("cuda"),
    })?;
    t.opt("log_every_steps", r.log_every_steps);
    t.float("rendezvous_timeout_s", r.rendezvous_timeout_s)?;
    t.float("collective_timeout_s", r.collective_timeout_s)?;
    t.enumeration("allreduce", r.allreduce, |m: v1::AllreduceMode| match m {
        v1::AllreduceMode::Unspecified => None,
        v1::AllreduceMode::Flat => Some("flat"),
        v1::AllreduceMode::PerParam => Some("per_param"),
        v1::AllreduceMode::Overlap => Some("overlap"),
    })?;
    t.enumeration("oom_policy", r.oom_policy, |p: v1::OomPolicy| match p {
        v1::OomPolicy::Unspecified => None,
        v1::OomPolicy::Adapt => Some("adapt"),
        v1::OomPolicy::Fail => Some("fail"),
    })?;
    t.opt("min_micro_batch", r.min_micro_batch);
    t.float("bucket_mb", r.bucket_mb)?;
    t.float("host_memory_gib_per_rank", r.host_memory_gib_per_rank)?;
    t.enumeration(
        "allreduce_dtype",
        r.allreduce_dtype,
        |d: v1::AllreduceDtype| match d {
            v1::AllreduceDtype::Unspecified => None,
            v1::AllreduceDtype::F32 => Some("f32"),
            v1::AllreduceDtype::Bf16 => Some("bf16"),
        },
    )?;
    t.enumeration("backend", r.backend, |b: v1::CollectiveBackend| match b {
        v1::CollectiveBackend::Unspecified => None,
        v1::CollectiveBackend::Auto => Some("auto"),
        v1::CollectiveBackend::Nccl => Some("nccl"),
        v1::CollectiveBackend::Gloo => Some("gloo"),
    })?;
    if !r.nccl_env.is_empty() {
        t.set("nccl_env", serde_json::json!(r.nccl_env));
    }
    t.opt("preemption_grace", r.preemption_grace);
    t.opt("expected_duration", r.expected_duration);
    Ok(t.into_value())
}

/// A program's `[runtime]`: only the scheduling keys; any other field set
/// is refused by name.
pub(super) fn program_runtime_table(r: v1::RuntimeConfig) -> Result<Value, ConfigError> {
    let scheduling = v1::RuntimeConfig {
        preemption_grace: r.preemption_grace.clone(),
        expected_duration: r.expected_duration.clone(),
        ..Default::default()
    };
    if r != scheduling {
        let other = runtime_table(r)?;
        let field = other
            .as_object()
            .and_then(|o| {
                o.keys()
                    .find(|k| !matches!(k.as_str(), "preemption_grace" | "expected_duration"))
                    .cloned()
            })
            .unwrap_or_else(|| "device".to_string());
        return Err(super::invalid(
            &format!("runtime.{field}"),
            "not with program: a program's runtime has only preemption_grace and expected_duration",
        ));
    }
    let mut t = Table::new("runtime");
    t.opt("preemption_grace", scheduling.preemption_grace);
    t.opt("expected_duration", scheduling.expected_duration);
    Ok(t.into_value())
}

impl From<&ScheduleHints> for v1::RuntimeConfig {
    fn from(h: &ScheduleHints) -> Self {
        Self {
            preemption_grace: h.preemption_grace.clone(),
            expected_duration: h.expected_duration.clone(),
            ..Default::default()
        }
    }
}

impl From<&RuntimeConfig> for v1::RuntimeConfig {
    fn from(r: &RuntimeConfig) -> Self {
        Self {
            device: match r.device {
                Device::Auto => v1::Device::Auto,
                Device::Cpu => v1::Device::Cpu,
                Device::Cuda => v1::Device::Cuda,
            } as i32,
            log_every_steps: Some(r.log_every_steps),
            rendezvous_timeout_s: Some(r.rendezvous_timeout_s),
            collective_timeout_s: Some(r.collective_timeout_s),
            allreduce: match r.allreduce {
                AllreduceMode::Flat => v1::AllreduceMode::Flat,
                AllreduceMode::PerParam => v1::AllreduceMode::PerParam,
                AllreduceMode::Overlap => v1::AllreduceMode::Overlap,
            } as i32,
            oom_policy: match r.oom_policy {
                OomPolicy::Adapt => v1::OomPolicy::Adapt,
                OomPolicy::Fail => v1::OomPolicy::Fail,
            } as i32,
            min_micro_batch: Some(r.min_micro_batch),
            nccl_env: r.nccl_env.clone().into_iter().collect(),
            bucket_mb: Some(r.bucket_mb),
            host_memory_gib_per_rank: r.host_memory_gib_per_rank,
            allreduce_dtype: match r.allreduce_dtype {
                AllreduceDtype::F32 => v1::AllreduceDtype::F32,
                AllreduceDtype::Bf16 => v1::AllreduceDtype::Bf16,
            } as i32,
            backend: match r.backend {
                CollectiveBackend::Auto => v1::CollectiveBackend::Auto,
                CollectiveBackend::Nccl => v1::CollectiveBackend::Nccl,
                CollectiveBackend::Gloo => v1::CollectiveBackend::Gloo,
            } as i32,
            preemption_grace: r.preemption_grace.clone(),
            expected_duration: r.expected_duration.clone(),
        }
    }
}

//! Telemetry as it fans out to watchers: each GPU sample joined to its agent
//! and to the training rank holding the GPU; and the aggregated view.

use super::Hold;
use cohort_proto::v1;
use prost::bytes::Bytes;
use std::sync::OnceLock;
use std::time::Instant;

/// One GPU sample with who owns the GPU.
#[derive(Debug, Clone)]
pub struct GpuReading {
    pub agent_id: String,
    pub agent_name: String,
    pub hold: Option<Hold>,
    pub sample: v1::GpuSample,
}

/// One agent's samples of one tick.
#[derive(Debug, Clone)]
pub struct TelemetryBatch {
    pub received: Instant,
    pub readings: Vec<GpuReading>,
    /// The readings as encoded `v1::GpuMetrics`, one per reading, in order:
    /// made once by the first WatchGpuMetrics stream that sends them
    /// (`api::telemetry::watch`) and shared by the others.
    pub encoded: OnceLock<Vec<Bytes>>,
}

impl TelemetryBatch {
    pub fn new(readings: Vec<GpuReading>) -> Self {
        Self {
            received: Instant::now(),
            readings,
            encoded: OnceLock::new(),
        }
    }
}

/// Which readings a watcher wants (empty fields match everything).
#[derive(Debug, Clone, Default)]
pub struct ReadingFilter {
    /// Agent ids or names.
    pub agents: Vec<String>,
    pub gpu_uuids: Vec<String>,
    pub training_id: String,
}

impl ReadingFilter {
    pub fn matches(&self, r: &GpuReading) -> bool {
        (self.agents.is_empty()
            || self
                .agents
                .iter()
                .any(|a| *a == r.agent_id || *a == r.agent_name))
            && (self.gpu_uuids.is_empty() || self.gpu_uuids.contains(&r.sample.gpu_uuid))
            && (self.training_id.is_empty()
                || r.hold
                    .as_ref()
                    .is_some_and(|h| h.training_id == self.training_id))
    }
}

/// The aggregated view over a set of readings (reference design §5.1):
/// total memory used/total, mean utilization, max temperature, total power.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    pub gpu_count: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub mean_utilization_gpu_percent: Option<f64>,
    pub max_temperature_celsius: Option<f64>,
    pub total_power_draw_watts: Option<f64>,
}

pub fn aggregate<'a>(readings: impl IntoIterator<Item = &'a v1::GpuSample>) -> Aggregate {
    let mut agg = Aggregate::default();
    let (mut util_sum, mut util_n) = (0.0, 0u32);
    for s in readings {
        agg.gpu_count += 1;
        agg.memory_used_bytes += s.memory_used_bytes;
        agg.memory_total_bytes += s.memory_total_bytes;
        if let Some(u) = s.utilization_gpu_percent {
            util_sum += u;
            util_n += 1;
        }
        if let Some(t) = s.temperature_celsius {
            agg.max_temperature_celsius = Some(agg.max_temperature_celsius.map_or(t, |m| m.max(t)));
        }
        if let Some(p) = s.power_draw_watts {
            agg.total_power_draw_watts = Some(agg.total_power_draw_watts.unwrap_or(0.0) + p);
        }
    }
    if util_n > 0 {
        agg.mean_utilization_gpu_percent = Some(util_sum / util_n as f64);
    }
    agg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(util: Option<f64>, temp: f64, power: f64, used: u64) -> v1::GpuSample {
        v1::GpuSample {
            utilization_gpu_percent: util,
            temperature_celsius: Some(temp),
            power_draw_watts: Some(power),
            memory_used_bytes: used,
            memory_total_bytes: 100,
            ..Default::default()
        }
    }

    #[test]
    fn aggregates_sum_memory_and_power_average_utilization_and_max_temperature() {
        let s = [
            sample(Some(50.0), 60.0, 100.0, 10),
            sample(Some(100.0), 80.0, 200.0, 30),
            sample(None, 70.0, 50.0, 5),
        ];
        let a = aggregate(&s);
        assert_eq!(a.gpu_count, 3);
        assert_eq!((a.memory_used_bytes, a.memory_total_bytes), (45, 300));
        assert_eq!(a.mean_utilization_gpu_percent, Some(75.0));
        assert_eq!(a.max_temperature_celsius, Some(80.0));
        assert_eq!(a.total_power_draw_watts, Some(350.0));
        assert_eq!(aggregate([].iter()), Aggregate::default());
    }
}

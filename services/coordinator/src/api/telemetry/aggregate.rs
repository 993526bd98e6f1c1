//! The aggregated view (reference design §5.1), the one place both
//! WatchGpuMetrics (over live samples) and QueryGpuMetrics (over history
//! buckets) compute it.

use crate::model::GpuSample;
use cohort_proto::v1;

/// One GPU's values as the aggregated view takes them in (from a live
/// sample, or from a history bucket's means).
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuValues {
    pub utilization_gpu_percent: Option<f64>,
    pub utilization_memory_percent: Option<f64>,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub temperature_celsius: Option<f64>,
    pub power_draw_watts: Option<f64>,
    pub busy: bool,
    pub simulated: bool,
}

impl GpuValues {
    /// A live sample's values; `busy` when a training holds the GPU.
    pub fn of_sample(s: &GpuSample, busy: bool) -> Self {
        GpuValues {
            utilization_gpu_percent: s.utilization_gpu_percent,
            utilization_memory_percent: s.utilization_memory_percent,
            memory_used_bytes: s.memory_used_bytes,
            memory_total_bytes: s.memory_total_bytes,
            temperature_celsius: s.temperature_celsius,
            power_draw_watts: s.power_draw_watts,
            busy,
            simulated: s.simulated,
        }
    }
}

/// The aggregated view (reference design §5.1) over GPUs' values: GPU,
/// busy and simulated counts, total memory used/total, mean utilization
/// (over the GPUs that report it), max temperature, total power. The one
/// place both WatchGpuMetrics and QueryGpuMetrics compute it.
#[derive(Debug, Clone, Default)]
pub struct Aggregator {
    out: v1::AggregatedGpuMetrics,
    util: (f64, u32),
    mem_util: (f64, u32),
    max_temperature: Option<f64>,
}

impl Aggregator {
    pub fn add(&mut self, g: GpuValues) {
        let out = &mut self.out;
        out.gpu_count += 1;
        out.busy_count += i32::from(g.busy);
        out.simulated_count += i32::from(g.simulated);
        out.memory_used_bytes += g.memory_used_bytes;
        out.memory_total_bytes += g.memory_total_bytes;
        if let Some(u) = g.utilization_gpu_percent {
            self.util = (self.util.0 + u, self.util.1 + 1);
        }
        if let Some(u) = g.utilization_memory_percent {
            self.mem_util = (self.mem_util.0 + u, self.mem_util.1 + 1);
        }
        if let Some(t) = g.temperature_celsius {
            self.max_temperature = Some(self.max_temperature.map_or(t, |m| m.max(t)));
        }
        if let Some(p) = g.power_draw_watts {
            out.power_draw_watts += p;
        }
    }

    pub fn finish(self) -> v1::AggregatedGpuMetrics {
        let mean = |(sum, n): (f64, u32)| if n == 0 { 0.0 } else { sum / f64::from(n) };
        v1::AggregatedGpuMetrics {
            mean_utilization_gpu_percent: mean(self.util),
            mean_utilization_memory_percent: mean(self.mem_util),
            max_temperature_celsius: self.max_temperature.unwrap_or(0.0),
            ..self.out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(util: Option<f64>, temp: f64, power: f64, used: u64) -> GpuSample {
        GpuSample {
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
        let mut agg = Aggregator::default();
        for (i, s) in s.iter().enumerate() {
            agg.add(GpuValues::of_sample(s, i == 0));
        }
        let a = agg.finish();
        assert_eq!(a.gpu_count, 3);
        assert_eq!(a.busy_count, 1);
        assert_eq!((a.memory_used_bytes, a.memory_total_bytes), (45, 300));
        assert_eq!(a.mean_utilization_gpu_percent, 75.0);
        assert_eq!(a.max_temperature_celsius, 80.0);
        assert_eq!(a.power_draw_watts, 350.0);
        assert_eq!(
            Aggregator::default().finish(),
            v1::AggregatedGpuMetrics::default()
        );
    }
}

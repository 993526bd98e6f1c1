//! The report's cost analysis as the API's message.

use super::convert::timestamp;
use crate::report::cost::CostAnalysis;
use cohort_proto::v1;

pub fn to_proto(c: CostAnalysis) -> v1::CostAnalysis {
    v1::CostAnalysis {
        gpu_hours: c.gpu_hours,
        idle_gpu_hours: c.idle_gpu_hours,
        attempts: c
            .attempts
            .into_iter()
            .map(|a| v1::AttemptCost {
                attempt: a.attempt,
                gpus: a.gpus,
                start_time: Some(timestamp(a.start_time)),
                end_time: a.end_time.map(timestamp),
                gpu_hours: a.gpu_hours,
                idle_gpu_hours: a.idle_gpu_hours,
                idle_unknown: a.idle_unknown,
                cost_usd: a.cost_usd,
            })
            .collect(),
        gpu_model: c.gpu_model,
        price: c.price.map(|p| v1::GpuPrice {
            pattern: p.pattern,
            usd_per_gpu_hour: p.usd_per_gpu_hour,
        }),
        cost_usd: c.cost_usd,
        samples: c.samples,
        cost_per_million_samples_usd: c.cost_per_million_samples_usd,
        idle_unknown: c.idle_unknown,
    }
}

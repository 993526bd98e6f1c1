//! The buckets of a history read and the per-GPU sums in each, which merge
//! exactly whether they came from raw samples or from rollups.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text};

/// The buckets of a read: `[start_ms + i*step_ms, ...)` for i in
/// `first..end` (bucket indexes relative to `start_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketWindow {
    pub start_ms: i64,
    pub step_ms: i64,
    pub first: i64,
    pub end: i64,
    /// The query's end: samples at or after it are left out even inside the last bucket.
    pub until_ms: i64,
}

impl BucketWindow {
    pub(super) fn first_ms(&self) -> i64 {
        self.start_ms + self.first * self.step_ms
    }
    pub(super) fn end_ms(&self) -> i64 {
        (self.start_ms + self.end * self.step_ms).min(self.until_ms)
    }
}

/// Sums and counts of one GPU in one bucket, from raw samples or rollups;
/// partial sums from both sources merge exactly (see `GpuBucket::merge`).
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct GpuBucket {
    #[diesel(sql_type = Text)]
    pub gpu_uuid: String,
    #[diesel(sql_type = BigInt)]
    pub bucket: i64,
    #[diesel(sql_type = Integer)]
    pub gpu_index: i32,
    #[diesel(sql_type = Text)]
    pub agent_id: String,
    #[diesel(sql_type = Text)]
    pub agent_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub training_id: Option<String>,
    #[diesel(sql_type = Nullable<Integer>)]
    pub rank: Option<i32>,
    #[diesel(sql_type = BigInt)]
    pub samples: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub util_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub util_n: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub util_mem_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub util_mem_n: i64,
    #[diesel(sql_type = Double)]
    pub mem_used_sum: f64,
    #[diesel(sql_type = BigInt)]
    pub mem_total_max: i64,
    #[diesel(sql_type = Nullable<Double>)]
    pub temp_max: Option<f64>,
    #[diesel(sql_type = Nullable<Double>)]
    pub power_sum: Option<f64>,
    #[diesel(sql_type = BigInt)]
    pub power_n: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub ecc_corrected_max: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub ecc_uncorrected_max: Option<i64>,
    #[diesel(sql_type = Integer)]
    pub simulated: i32,
}

impl GpuBucket {
    /// Adds another partial sum of the same GPU and bucket.
    pub fn merge(&mut self, other: &GpuBucket) {
        fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x + y),
                (x, None) => x,
                (None, y) => y,
            }
        }
        fn max<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(if y > x { y } else { x }),
                (x, None) => x,
                (None, y) => y,
            }
        }
        if other.samples > self.samples {
            // The larger part names the holder and agent.
            self.gpu_index = other.gpu_index;
            self.agent_id.clone_from(&other.agent_id);
            self.agent_name.clone_from(&other.agent_name);
            self.training_id.clone_from(&other.training_id);
            self.rank = other.rank;
        }
        self.samples += other.samples;
        self.util_sum = add(self.util_sum, other.util_sum);
        self.util_n += other.util_n;
        self.util_mem_sum = add(self.util_mem_sum, other.util_mem_sum);
        self.util_mem_n += other.util_mem_n;
        self.mem_used_sum += other.mem_used_sum;
        self.mem_total_max = self.mem_total_max.max(other.mem_total_max);
        self.temp_max = max(self.temp_max, other.temp_max);
        self.power_sum = add(self.power_sum, other.power_sum);
        self.power_n += other.power_n;
        self.ecc_corrected_max = max(self.ecc_corrected_max, other.ecc_corrected_max);
        self.ecc_uncorrected_max = max(self.ecc_uncorrected_max, other.ecc_uncorrected_max);
        self.simulated = self.simulated.max(other.simulated);
    }

    fn mean(sum: Option<f64>, n: i64) -> Option<f64> {
        sum.filter(|_| n > 0).map(|s| s / n as f64)
    }
    pub fn utilization_gpu_mean(&self) -> Option<f64> {
        Self::mean(self.util_sum, self.util_n)
    }
    pub fn utilization_memory_mean(&self) -> Option<f64> {
        Self::mean(self.util_mem_sum, self.util_mem_n)
    }
    pub fn memory_used_mean(&self) -> f64 {
        if self.samples > 0 {
            self.mem_used_sum / self.samples as f64
        } else {
            0.0
        }
    }
    pub fn power_mean(&self) -> Option<f64> {
        Self::mean(self.power_sum, self.power_n)
    }
}

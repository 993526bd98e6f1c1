//! The defaults of every optional key (docs/rank.md lists them).

pub fn l1_coefficient() -> f64 {
    1e-3
}
pub fn dead_window_samples() -> i64 {
    1_000_000
}
pub fn learning_rate() -> f64 {
    1e-3
}
pub fn beta1() -> f64 {
    0.9
}
pub fn beta2() -> f64 {
    0.999
}
pub fn eps() -> f64 {
    1e-8
}
pub fn accumulation_steps() -> i64 {
    1
}
pub fn max_nonfinite_steps() -> i64 {
    10
}
pub fn every_steps() -> i64 {
    100
}
pub fn keep() -> i64 {
    3
}
pub fn num_features() -> i64 {
    256
}
pub fn feature_probability() -> f64 {
    0.02
}
pub fn noise_std() -> f64 {
    0.01
}
pub fn shuffle_chunk() -> i64 {
    1024
}
pub fn shuffle_buffer() -> i64 {
    16384
}
pub fn prefetch_batches() -> i64 {
    4
}
pub fn log_every_steps() -> i64 {
    10
}
pub fn rendezvous_timeout_s() -> f64 {
    60.0
}
pub fn collective_timeout_s() -> f64 {
    30.0
}

/// PyTorch DDP's default bucket cap.
pub fn bucket_mb() -> f64 {
    25.0
}

pub fn min_micro_batch() -> i64 {
    1
}

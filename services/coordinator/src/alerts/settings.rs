//! Alert thresholds and windows. Defaults follow the data contract
//! (reference 003, "Monitoring and Alerting"): GPU memory > 95 % for 5 min,
//! temperature > 85 °C, utilization < 50 % while a training runs on the GPU;
//! gradient norm > 10 (sustained), step time > 200 ms, data wait > 50 ms per
//! batch, rank host memory growing > 2 GB an hour, any collective error,
//! repeated non-finite steps.

use std::time::Duration;

/// Thresholds, windows and hysteresis of every alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertSettings {
    /// GPU_MEMORY_HIGH: used / total above this percentage ...
    pub memory_percent: f64,
    /// ... for this long. Cleared at or below `memory_percent - memory_hysteresis_percent`.
    pub memory_for: Duration,
    pub memory_hysteresis_percent: f64,
    /// GPU_TEMPERATURE_HIGH: above this many °C ...
    pub temperature_celsius: f64,
    /// ... for this long (0: the first hot sample). Cleared at or below
    /// `temperature_celsius - temperature_hysteresis_celsius`.
    pub temperature_for: Duration,
    pub temperature_hysteresis_celsius: f64,
    /// GPU_UTILIZATION_LOW: a GPU held by a training below this percentage ...
    pub utilization_percent: f64,
    /// ... for this long. Cleared at or above
    /// `utilization_percent + utilization_hysteresis_percent`, or when no training holds it.
    pub utilization_for: Duration,
    pub utilization_hysteresis_percent: f64,
    /// GPU_ECC_UNCORRECTED and GPU_XID_ERROR: cleared after this long without
    /// a further increase of their counter.
    pub ecc_quiet: Duration,
    /// AGENT_LOST: raised when a disconnected agent is not back within this long.
    pub agent_grace: Duration,
    /// GPU alerts of a GPU that sent no sample for this long are resolved
    /// (its agent is gone; AGENT_LOST speaks for it).
    pub gpu_stale_after: Duration,
    /// TRAINING_STALLED: a RUNNING training with no progress event for this long.
    pub stall_after: Duration,
    /// TRAINING_LOSS_PLATEAU: a RUNNING training whose loss made no new best
    /// for this many steps (0: off).
    pub plateau_steps: i64,
    /// TRAINING_GRAD_NORM_HIGH: the mean gradient norm of the progress lines
    /// of a check above this ...
    pub grad_norm: f64,
    /// ... at every check for this long (cleared at or below 90 % of it).
    pub grad_norm_for: Duration,
    /// TRAINING_STEP_SLOW: the mean step time above this many ms ...
    pub step_time_ms: f64,
    /// ... for this long (cleared at or below 90 % of it).
    pub step_time_for: Duration,
    /// TRAINING_DATA_WAIT_HIGH: some rank waiting more than this many ms per
    /// batch for its data ...
    pub data_wait_ms: f64,
    /// ... for this long (cleared at or below 90 % of it).
    pub data_wait_for: Duration,
    /// RANK_MEMORY_GROWTH: some rank's host memory growing faster than this
    /// many bytes an hour (0: off) ...
    pub memory_growth_per_hour: f64,
    /// ... measured over this window (at least half of it seen; cleared
    /// below half the rate).
    pub memory_growth_window: Duration,
    /// TRAINING_NONFINITE_STEPS: at least this many non-finite steps skipped
    /// between two checks (or a divergence; 0: off).
    pub nonfinite_steps: i64,
    /// How often RUNNING trainings are checked for progress (and plateaus).
    pub stall_check_interval: Duration,
    /// How often time-based rules (agent grace, ECC quiet, stale GPUs) are evaluated.
    pub tick_interval: Duration,
}

impl Default for AlertSettings {
    fn default() -> Self {
        Self {
            memory_percent: 95.0,
            memory_for: Duration::from_secs(5 * 60),
            memory_hysteresis_percent: 2.0,
            temperature_celsius: 85.0,
            temperature_for: Duration::ZERO,
            temperature_hysteresis_celsius: 3.0,
            utilization_percent: 50.0,
            utilization_for: Duration::from_secs(5 * 60),
            utilization_hysteresis_percent: 5.0,
            ecc_quiet: Duration::from_secs(15 * 60),
            agent_grace: Duration::from_secs(60),
            gpu_stale_after: Duration::from_secs(60),
            stall_after: Duration::from_secs(10 * 60),
            plateau_steps: 1000,
            grad_norm: 10.0,
            grad_norm_for: Duration::from_secs(2 * 60),
            step_time_ms: 200.0,
            step_time_for: Duration::from_secs(5 * 60),
            data_wait_ms: 50.0,
            data_wait_for: Duration::from_secs(5 * 60),
            memory_growth_per_hour: 2e9,
            memory_growth_window: Duration::from_secs(15 * 60),
            nonfinite_steps: 3,
            stall_check_interval: Duration::from_secs(30),
            tick_interval: Duration::from_secs(1),
        }
    }
}

/// Parses a span for flags: a number with `s`, `m` or `h` (seconds without a
/// unit), e.g. `90s`, `5m`, `0`.
pub fn parse_span(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        _ => (t, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a time span like 90s, 5m or 1h"))?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?} must be a non-negative time span"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(parse_span("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_span("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_span("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_span("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_span("0"), Ok(Duration::ZERO));
        assert!(parse_span("-1m").is_err());
        assert!(parse_span("5y").is_err());
    }
}

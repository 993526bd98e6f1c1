//! The coordinator's alert flags (flattened into its command line).

use super::settings::{parse_span, AlertSettings};
use std::time::Duration;

/// The main alert thresholds; the rest of [`AlertSettings`] keeps its defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct AlertFlags {
    /// GPU_MEMORY_HIGH: percent of device memory used ...
    #[arg(long, default_value_t = 95.0, value_name = "PERCENT")]
    pub alert_memory_percent: f64,
    /// ... for this long (e.g. 90s, 5m, 1h).
    #[arg(long, default_value = "5m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_memory_for: Duration,
    /// GPU_TEMPERATURE_HIGH: degrees Celsius ...
    #[arg(long, default_value_t = 85.0, value_name = "CELSIUS")]
    pub alert_temperature_c: f64,
    /// ... for this long (0: the first hot sample).
    #[arg(long, default_value = "0", value_parser = parse_span, value_name = "SPAN")]
    pub alert_temperature_for: Duration,
    /// GPU_UTILIZATION_LOW: a GPU held by a training below this percent ...
    #[arg(long, default_value_t = 50.0, value_name = "PERCENT")]
    pub alert_utilization_percent: f64,
    /// ... for this long.
    #[arg(long, default_value = "5m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_utilization_for: Duration,
    /// AGENT_LOST: a disconnected agent not back within this long.
    #[arg(long, default_value = "60s", value_parser = parse_span, value_name = "SPAN")]
    pub alert_agent_grace: Duration,
    /// TRAINING_STALLED: a RUNNING training without progress for this long.
    #[arg(long, default_value = "10m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_stall_after: Duration,
    /// TRAINING_LOSS_PLATEAU: a RUNNING training without a new best loss for
    /// this many steps (0: off).
    #[arg(long, default_value_t = 1000, value_name = "STEPS", value_parser = clap::value_parser!(i64).range(0..))]
    pub alert_plateau_steps: i64,
    /// TRAINING_GRAD_NORM_HIGH: a training's gradient norm above this ...
    #[arg(long, default_value_t = 10.0, value_name = "NORM")]
    pub alert_grad_norm: f64,
    /// ... for this long.
    #[arg(long, default_value = "2m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_grad_norm_for: Duration,
    /// TRAINING_STEP_SLOW: a training's step time above this many ms ...
    #[arg(long, default_value_t = 200.0, value_name = "MS")]
    pub alert_step_time_ms: f64,
    /// ... for this long.
    #[arg(long, default_value = "5m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_step_time_for: Duration,
    /// TRAINING_DATA_WAIT_HIGH: a rank waiting more than this many ms per batch ...
    #[arg(long, default_value_t = 50.0, value_name = "MS")]
    pub alert_data_wait_ms: f64,
    /// ... for this long.
    #[arg(long, default_value = "5m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_data_wait_for: Duration,
    /// RANK_MEMORY_GROWTH: a rank's host memory growing by more than this
    /// many GB an hour (0: off) ...
    #[arg(long, default_value_t = 2.0, value_name = "GB")]
    pub alert_memory_growth_gb_per_hour: f64,
    /// ... measured over this window.
    #[arg(long, default_value = "15m", value_parser = parse_span, value_name = "SPAN")]
    pub alert_memory_growth_window: Duration,
    /// TRAINING_NONFINITE_STEPS: this many non-finite steps skipped between
    /// two checks, or a divergence (0: off).
    #[arg(long, default_value_t = 3, value_name = "STEPS", value_parser = clap::value_parser!(i64).range(0..))]
    pub alert_nonfinite_steps: i64,
}

impl AlertFlags {
    pub fn settings(&self) -> AlertSettings {
        AlertSettings {
            memory_percent: self.alert_memory_percent,
            memory_for: self.alert_memory_for,
            temperature_celsius: self.alert_temperature_c,
            temperature_for: self.alert_temperature_for,
            utilization_percent: self.alert_utilization_percent,
            utilization_for: self.alert_utilization_for,
            agent_grace: self.alert_agent_grace,
            stall_after: self.alert_stall_after,
            plateau_steps: self.alert_plateau_steps,
            grad_norm: self.alert_grad_norm,
            grad_norm_for: self.alert_grad_norm_for,
            step_time_ms: self.alert_step_time_ms,
            step_time_for: self.alert_step_time_for,
            data_wait_ms: self.alert_data_wait_ms,
            data_wait_for: self.alert_data_wait_for,
            memory_growth_per_hour: self.alert_memory_growth_gb_per_hour * 1e9,
            memory_growth_window: self.alert_memory_growth_window,
            nonfinite_steps: self.alert_nonfinite_steps,
            ..AlertSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        alerts: AlertFlags,
    }

    #[test]
    fn defaults_are_the_settings_defaults() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.alerts.settings(), AlertSettings::default());
        let cli = Cli::try_parse_from([
            "x",
            "--alert-temperature-c",
            "80",
            "--alert-memory-for",
            "90s",
        ])
        .unwrap();
        let s = cli.alerts.settings();
        assert_eq!(s.temperature_celsius, 80.0);
        assert_eq!(s.memory_for, Duration::from_secs(90));
    }
}

//! The flags of `cohort alerts` and `cohort alerts watch`, and the
//! WatchAlerts request they describe.

use crate::commands::telemetry::{filter, MetricsFilterArgs};
use clap::{Args, Subcommand};
use cohort_proto::v1::{AlertSeverity, WatchAlertsRequest};
use cohort_spec::duration::parse_duration;
use std::time::Duration;

/// Alert severities, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SeverityArg {
    Info,
    Warning,
    Critical,
}

impl From<SeverityArg> for cohort_proto::v1::AlertSeverity {
    fn from(s: SeverityArg) -> Self {
        match s {
            SeverityArg::Info => Self::Info,
            SeverityArg::Warning => Self::Warning,
            SeverityArg::Critical => Self::Critical,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct AlertsArgs {
    #[command(subcommand)]
    pub command: Option<AlertsCommand>,
    #[command(flatten)]
    pub list: AlertsListArgs,
}

/// `cohort alerts` without a subcommand.
#[derive(Debug, Clone, Args)]
pub struct AlertsListArgs {
    /// Also the alerts resolved within `--since`.
    #[arg(long)]
    pub all: bool,
    /// With `--all`: how far back resolved alerts go, e.g. `90m`, `24h`, `7d`.
    #[arg(long, value_name = "SPAN", default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
    /// After the table, keep following raises and resolutions.
    #[arg(long)]
    pub watch: bool,
    /// Only alerts at least this severe.
    #[arg(long, value_enum)]
    pub min_severity: Option<SeverityArg>,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum AlertsCommand {
    /// Follow alerts as they are raised and resolved (overheating, ECC errors,
    /// lost agents, hung trainings).
    Watch(AlertsWatchArgs),
}

#[derive(Debug, Clone, Args)]
pub struct AlertsWatchArgs {
    /// Only alerts at least this severe.
    #[arg(long, value_enum)]
    pub min_severity: Option<SeverityArg>,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// First show the alerts active now.
    #[arg(long)]
    pub active: bool,
    /// Stop after this many alerts (default: until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// A WatchAlerts request (shared by `alerts watch` and `alerts`).
pub fn watch_request(
    min_severity: Option<SeverityArg>,
    filter_args: &MetricsFilterArgs,
    include_active: bool,
    resolved_within: Option<prost_types::Duration>,
) -> WatchAlertsRequest {
    let min_severity = min_severity.map_or(AlertSeverity::Unspecified, AlertSeverity::from);
    WatchAlertsRequest {
        min_severity: min_severity as i32,
        filter: Some(filter(filter_args)),
        include_active,
        resolved_within,
    }
}

//! The flags of `cohort telemetry` and the requests they describe (the GPU
//! filter is shared with `cohort alerts`).

use clap::{Args, Subcommand};
use cohort_proto::v1::{GpuMetricsFilter, MetricsView, WatchGpuMetricsRequest};
use cohort_spec::duration::parse_duration;
use std::time::Duration;

#[derive(Debug, Clone, Subcommand)]
pub enum TelemetryCommand {
    /// A live table of GPU metrics (in `-o json`, one JSON object per update).
    Watch(TelemetryWatchArgs),
    /// Stored GPU metrics over a past time range, downsampled into buckets.
    Query(TelemetryQueryArgs),
    /// Utilization and memory per GPU over the last `--since`, as sparklines
    /// (in `-o json`, one series of points per GPU).
    History(TelemetryHistoryArgs),
}

/// How telemetry of several GPUs is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewArg {
    /// One summary over all selected GPUs.
    Aggregated,
    /// One row per GPU.
    PerGpu,
}

/// Which GPUs a telemetry or alerts command concerns (conditions combine with AND).
#[derive(Debug, Clone, Args)]
pub struct MetricsFilterArgs {
    /// Only GPUs of this agent (id or name; repeatable).
    #[arg(long, value_name = "AGENT")]
    pub agent: Vec<String>,
    /// Only this GPU (uuid; repeatable).
    #[arg(long, value_name = "UUID")]
    pub gpu: Vec<String>,
    /// Only GPUs held by this training.
    #[arg(long, value_name = "ID")]
    pub job: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct TelemetryWatchArgs {
    /// Per GPU or one summary.
    #[arg(long, value_enum, default_value_t = ViewArg::PerGpu)]
    pub view: ViewArg,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// Stop after this many updates (default: until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct TelemetryQueryArgs {
    /// Per GPU or one summary per bucket.
    #[arg(long, value_enum, default_value_t = ViewArg::PerGpu)]
    pub view: ViewArg,
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// How far back to look, e.g. `90s`, `10m`, `2h`, `1d`.
    #[arg(long, value_name = "SPAN", default_value = "10m", value_parser = parse_duration)]
    pub since: Duration,
    /// Bucket width, e.g. `30s` (default: the range / 100, at least 1 s).
    #[arg(long, value_name = "SPAN", value_parser = parse_duration)]
    pub step: Option<Duration>,
}

#[derive(Debug, Clone, Args)]
pub struct TelemetryHistoryArgs {
    #[command(flatten)]
    pub filter: MetricsFilterArgs,
    /// How far back to look, e.g. `90s`, `15m`, `2h`, `1d`.
    #[arg(long, value_name = "SPAN", default_value = "15m", value_parser = parse_duration)]
    pub since: Duration,
    /// Bucket width, e.g. `10s` (default: the range / 60, at least 1 s).
    #[arg(long, value_name = "SPAN", value_parser = parse_duration)]
    pub step: Option<Duration>,
}

/// The filter the flags describe.
pub fn filter(args: &MetricsFilterArgs) -> GpuMetricsFilter {
    GpuMetricsFilter {
        agents: args.agent.clone(),
        gpu_uuids: args.gpu.clone(),
        training_id: args.job.clone().unwrap_or_default(),
        ..Default::default()
    }
}

pub fn view(view: ViewArg) -> i32 {
    let view = match view {
        ViewArg::Aggregated => MetricsView::Aggregated,
        ViewArg::PerGpu => MetricsView::PerGpu,
    };
    view as i32
}

/// The request the flags describe.
pub fn request(args: &TelemetryWatchArgs) -> WatchGpuMetricsRequest {
    WatchGpuMetricsRequest {
        view: view(args.view),
        filter: Some(filter(&args.filter)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use cohort_proto::v1::MetricsView;

    #[test]
    fn flags_become_the_filter() {
        let cli = crate::Cli::try_parse_from([
            "cohort",
            "telemetry",
            "watch",
            "--view",
            "aggregated",
            "--gpu",
            "SIM-1",
            "--job",
            "t-3",
        ])
        .unwrap();
        let crate::Command::Telemetry(TelemetryCommand::Watch(args)) = cli.command else {
            panic!("not telemetry watch");
        };
        let r = request(&args);
        assert_eq!(r.view, MetricsView::Aggregated as i32);
        let f = r.filter.unwrap();
        assert_eq!(f.gpu_uuids, vec!["SIM-1"]);
        assert_eq!(f.training_id, "t-3");
        assert!(f.agents.is_empty());
    }
}

//! `cohort gpus`: GpuService.ListGpus (every page), and `gpus recommend`,
//! `gpus validate`, `gpus estimate`: RecommendGpus, ValidateGpuSelection,
//! EstimateMemory.

use crate::client::Coordinator;
use crate::errors::exit;
use crate::errors::CliError;
use crate::render::table::{dash, Table};
use crate::render::{bytes, gib, opt_num, short_name};
use crate::render::{emit, emit_json, json, OutputFormat};
use clap::{Args, Subcommand};
use cohort_proto::v1::{
    self, gpu_service_client::GpuServiceClient, recommend_gpus_request::Need,
    EstimateMemoryRequest, ListGpusRequest, RecommendGpusRequest, ValidateGpuSelectionRequest,
};
use cohort_spec::TrainingConfig;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct GpusArgs {
    /// Only the GPUs of this agent (its id).
    #[arg(long, value_name = "AGENT_ID")]
    pub agent: Option<String>,
    /// Only GPUs that can take a rank now.
    #[arg(long)]
    pub available: bool,
    #[command(subcommand)]
    pub command: Option<GpusCommand>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum GpusCommand {
    /// Recommend free GPUs for a training config or a memory need, best first.
    Recommend {
        /// The training config whose memory estimate is the need.
        #[arg(long, value_name = "FILE", required_unless_present = "memory_gib")]
        config: Option<PathBuf>,
        /// The device memory each GPU must have free, in GiB.
        #[arg(long = "memory", value_name = "GIB", conflicts_with = "config")]
        memory_gib: Option<f64>,
        /// How many GPUs (default: as many as are suitable).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
        count: Option<i32>,
        /// Only GPUs of one host.
        #[arg(long)]
        single_host: bool,
    },
    /// Check that these GPUs could run a training now; exit code 6 if not.
    Validate {
        /// GPU uuids, in rank order.
        #[arg(value_name = "UUID", value_delimiter = ',', num_args = 1.., required = true)]
        ids: Vec<String>,
        /// Also check each GPU has memory for this training config.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Estimate the device memory one rank of a training config needs.
    Estimate {
        /// The training config.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Lift a GPU's quarantine (cluster-admin): a GPU that reported a
    /// hardware XID error or a rising uncorrectable ECC count takes no new
    /// ranks until then.
    Release {
        /// The GPU's uuid.
        uuid: String,
    },
}

pub async fn list(
    coordinator: &Coordinator,
    args: &GpusArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    let mut client = GpuServiceClient::new(coordinator.channel().await?);
    let mut gpus = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_gpus(ListGpusRequest {
                agent_id: args.agent.clone().unwrap_or_default(),
                available_only: args.available,
                page_size: 0,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        gpus.extend(page.gpus);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match out {
        OutputFormat::Table => emit(&gpus_table(&gpus)),
        OutputFormat::Json => emit_json(&serde_json::json!({
            "gpus": gpus.iter().map(json::message).collect::<Vec<Value>>(),
        })),
    }
}

fn read_config(path: &Path) -> Result<v1::TrainingConfig, CliError> {
    let config = TrainingConfig::from_file(path).map_err(CliError::Config)?;
    Ok(v1::TrainingConfig::from(&config))
}

/// `gpus recommend|validate|estimate`.
pub async fn advise(
    coordinator: &Coordinator,
    command: &GpusCommand,
    out: OutputFormat,
) -> Result<(), CliError> {
    match command {
        GpusCommand::Recommend {
            config,
            memory_gib,
            count,
            single_host,
        } => {
            let need = match (config, memory_gib) {
                (Some(path), _) => Need::Config(read_config(path)?),
                (None, Some(gib)) => Need::MemoryBytes((gib.max(0.0) * (1u64 << 30) as f64) as u64),
                (None, None) => {
                    return Err(CliError::Usage("give --config FILE or --memory GIB".into()))
                }
            };
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let r = client
                .recommend_gpus(RecommendGpusRequest {
                    need: Some(need),
                    count: count.unwrap_or(0),
                    single_host: *single_host,
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&r)),
                OutputFormat::Table => emit(&recommendation(&r)),
            }
        }
        GpusCommand::Validate { ids, config } => {
            let config = config.as_deref().map(read_config).transpose()?;
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let r = client
                .validate_gpu_selection(ValidateGpuSelectionRequest {
                    gpu_ids: ids.clone(),
                    config,
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&r))?,
                OutputFormat::Table => emit(&validation(&r))?,
            }
            if r.valid {
                Ok(())
            } else {
                Err(CliError::Silent(exit::REFUSED))
            }
        }
        GpusCommand::Release { uuid } => {
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let gpu = client
                .release_gpu(v1::ReleaseGpuRequest {
                    gpu_uuid: uuid.clone(),
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&gpu)),
                OutputFormat::Table => emit(&format!(
                    "GPU {uuid} released from quarantine\n{}",
                    gpus_table(&[gpu])
                )),
            }
        }
        GpusCommand::Estimate { config } => {
            let config = read_config(config)?;
            let mut client = GpuServiceClient::new(coordinator.channel().await?);
            let e = client
                .estimate_memory(EstimateMemoryRequest {
                    config: Some(config),
                    ..Default::default()
                })
                .await?
                .into_inner();
            match out {
                OutputFormat::Json => emit_json(&json::message(&e)),
                OutputFormat::Table => emit(&memory_estimate(&e)),
            }
        }
    }
}
/// Runs `cohort gpus` and its subcommands.
pub async fn run(
    coordinator: &Coordinator,
    args: GpusArgs,
    out: OutputFormat,
) -> Result<(), CliError> {
    match &args.command {
        None => list(coordinator, &args, out).await,
        Some(cmd) => advise(coordinator, cmd, out).await,
    }
}

// The table.

pub fn gpus_table(gpus: &[v1::Gpu]) -> String {
    if gpus.is_empty() {
        return "no GPUs (is an agent connected? see `cohort agents`)".to_string();
    }
    let mut t = Table::new(&[
        "AGENT",
        "IDX",
        "UUID",
        "NAME",
        "MEMORY GiB",
        "UTIL",
        "TEMP",
        "STATE",
        "JOB",
        "HEALTH",
    ]);
    let mut any_simulated = false;
    for g in gpus {
        let info = g.info.clone().unwrap_or_default();
        let sample = g.latest_sample.as_ref();
        let total = sample
            .map(|s| s.memory_total_bytes)
            .filter(|&b| b > 0)
            .unwrap_or(info.memory_total_bytes);
        let memory = match sample {
            Some(s) => format!("{}/{}", gib(s.memory_used_bytes), gib(total)),
            None => format!("-/{}", gib(total)),
        };
        let job = if g.training_id.is_empty() {
            "-".to_string()
        } else {
            format!("{} (rank {})", g.training_id, g.rank)
        };
        let health = if g.health_notes.is_empty() {
            "ok".to_string()
        } else {
            g.health_notes.join(", ")
        };
        let name = if info.simulated {
            any_simulated = true;
            format!("{} *", info.name)
        } else {
            info.name.clone()
        };
        t.row(vec![
            dash(&g.agent_name),
            info.index.to_string(),
            dash(&info.uuid),
            name,
            memory,
            opt_num(sample.and_then(|s| s.utilization_gpu_percent), 0, "%"),
            opt_num(sample.and_then(|s| s.temperature_celsius), 0, "C"),
            availability(g.availability),
            job,
            health,
        ]);
    }
    let mut out = t.render();
    if any_simulated {
        out.push_str("\n* simulated GPU: no real device, synthetic samples");
    }
    out
}

fn availability(raw: i32) -> String {
    v1::GpuAvailability::try_from(raw)
        .map(|a| short_name(a.as_str_name(), "GPU_AVAILABILITY_"))
        .unwrap_or_else(|_| raw.to_string())
}

/// A memory estimate, by component.
pub fn memory_estimate(e: &v1::MemoryEstimate) -> String {
    let mut t = Table::new(&["COMPONENT", "MEMORY"]);
    for (name, n) in [
        ("parameters", e.parameters_bytes),
        ("gradients", e.gradients_bytes),
        ("optimizer state", e.optimizer_bytes),
        ("activations", e.activations_bytes),
        ("data", e.data_bytes),
        ("overhead", e.overhead_bytes),
        ("total per GPU", e.total_bytes),
    ] {
        t.row(vec![name.to_string(), bytes(n)]);
    }
    format!("{} trainable parameters\n{}", e.parameter_count, t.render())
}

pub fn recommendation(r: &v1::RecommendGpusResponse) -> String {
    let mut out = String::new();
    if let Some(e) = &r.estimate {
        let _ = writeln!(out, "each GPU needs {} free", bytes(e.total_bytes));
    }
    if r.gpus.is_empty() {
        out.push_str("no suitable GPUs");
    } else {
        out.push_str(&gpus_table(&r.gpus));
    }
    if !r.shortfall_reason.is_empty() {
        let _ = write!(out, "\nfewer than asked: {}", r.shortfall_reason);
    }
    out
}

pub fn validation(r: &v1::ValidateGpuSelectionResponse) -> String {
    let mut out = String::new();
    if let Some(e) = &r.estimate {
        let _ = writeln!(out, "each GPU needs {} free", bytes(e.total_bytes));
    }
    if r.valid {
        out.push_str("valid: the training could run on these GPUs now");
        return out;
    }
    let mut t = Table::new(&["GPU", "PROBLEM", "DETAILS"]);
    for p in &r.problems {
        t.row(vec![p.gpu_id.clone(), p.reason.clone(), p.message.clone()]);
    }
    out.push_str("not valid:\n");
    out.push_str(&t.render());
    out
}

#[cfg(test)]
mod table_tests {
    use super::*;

    fn gpu(index: i32, busy: bool) -> v1::Gpu {
        v1::Gpu {
            info: Some(v1::GpuInfo {
                index,
                uuid: format!("SIM-{index}"),
                name: "Simulated GPU".into(),
                memory_total_bytes: 16 << 30,
                compute_capability: "8.0".into(),
                simulated: true,
                ..Default::default()
            }),
            agent_id: "a-1".into(),
            agent_name: "node1".into(),
            host_name: "node1".into(),
            availability: if busy {
                v1::GpuAvailability::Busy as i32
            } else {
                v1::GpuAvailability::Available as i32
            },
            training_id: if busy { "t-9".into() } else { String::new() },
            rank: 0,
            health_notes: vec![],
            latest_sample: Some(v1::GpuSample {
                memory_used_bytes: 4 << 30,
                memory_total_bytes: 16 << 30,
                utilization_gpu_percent: Some(42.4),
                temperature_celsius: Some(61.0),
                simulated: true,
                ..Default::default()
            }),
            last_seen_time: None,
            ..Default::default()
        }
    }

    #[test]
    fn gpu_table_is_aligned_and_marks_simulated() {
        let text = gpus_table(&[gpu(0, false), gpu(1, true)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "AGENT  IDX  UUID   NAME             MEMORY GiB  UTIL  TEMP  STATE      JOB           HEALTH"
        );
        assert_eq!(
            lines[1],
            "node1  0    SIM-0  Simulated GPU *  4.0/16.0    42%   61C   available  -             ok"
        );
        assert_eq!(
            lines[2],
            "node1  1    SIM-1  Simulated GPU *  4.0/16.0    42%   61C   busy       t-9 (rank 0)  ok"
        );
        assert!(lines[3].starts_with("* simulated GPU"));
    }

    #[test]
    fn no_gpus_says_so() {
        assert!(gpus_table(&[]).starts_with("no GPUs"));
    }
}
